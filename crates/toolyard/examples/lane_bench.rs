//! Lane overhead benchmark: `run_command "true"` in each lane against a plain `sh -c true`
//! spawn, `unshare -n` and `bwrap` per call (the cost of a fresh sandbox per call), the cost of
//! a file tool through a runner against inline, and the runner's peak memory while a command
//! prints 1 GiB. Prints a Markdown section for bench/RESULTS.md.
//!
//! `cargo run --release -p toolyard --example lane_bench -- [ROUNDS]`

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use toolyard_core::Lane;
use toolyard_runner::{CallRequest, Dispatcher, DispatcherConfig, Mode};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn time_spawn(rounds: usize, program: &str, args: &[&str]) -> Option<Duration> {
    let ok = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        return None;
    }
    let mut v = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let _ = Command::new(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        v.push(t.elapsed());
    }
    Some(median(v))
}

async fn time_call(d: &Dispatcher, rounds: usize, tool: &str, args: serde_json::Value) -> Duration {
    let warm = d.call(CallRequest::new("bench", tool, args.clone())).await;
    assert!(warm.success, "{tool}: {}", warm.output);
    let mut v = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let r = d.call(CallRequest::new("bench", tool, args.clone())).await;
        v.push(t.elapsed());
        assert!(r.success, "{tool}: {}", r.output);
    }
    median(v)
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
}

fn toolyard_exe() -> PathBuf {
    let me = std::env::current_exe().expect("current exe");
    // target/<profile>/examples/lane_bench -> target/<profile>/toolyard
    me.parent()
        .and_then(Path::parent)
        .map(|p| p.join("toolyard"))
        .expect("target dir")
}

fn dispatcher(ws: &Path, mode: Mode) -> Dispatcher {
    let mut c = DispatcherConfig::new(ws);
    c.mode = mode;
    Dispatcher::new(c).expect("dispatcher")
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).expect("ws");
    std::fs::write(ws.join("small.txt"), "x\n".repeat(2048)).expect("file");
    // SAFETY: no other thread reads the environment at this point of start-up.
    unsafe { std::env::set_var("TOOLYARD_STATE_DIR", tmp.path().join("state")) };

    let plain = time_spawn(rounds, "sh", &["-c", "true"]).expect("sh works");
    let unshare = time_spawn(rounds, "unshare", &["-n", "sh", "-c", "true"]);
    let ws_s = ws.display().to_string();
    let bwrap = time_spawn(
        rounds,
        "bwrap",
        &[
            "--unshare-net",
            "--unshare-pid",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--bind",
            &ws_s,
            &ws_s,
            "sh",
            "-c",
            "true",
        ],
    );

    let lanes = dispatcher(
        &ws,
        Mode::Lanes {
            exe: toolyard_exe(),
        },
    );
    let inline = dispatcher(&ws, Mode::Inline);
    let true_args = json!({"command": "true"});
    let no_net = time_call(&lanes, rounds, "run_command_isolated", true_args.clone()).await;
    let net = time_call(&lanes, rounds, "run_command", true_args.clone()).await;
    let heavy = time_call(&lanes, rounds, "build", true_args.clone()).await;
    let inline_cmd = time_call(&inline, rounds, "run_command", true_args).await;
    let read_args = json!({"path": "small.txt", "limit": 10});
    let read_lane = time_call(&lanes, rounds * 5, "read_file", read_args.clone()).await;
    let read_inline = time_call(&inline, rounds * 5, "read_file", read_args).await;

    // Peak memory of the net runner and of this process while a command prints 1 GiB.
    let big = lanes
        .call(CallRequest::new(
            "bench",
            "run_command",
            json!({"command": "head -c 1073741824 /dev/zero | tr '\\0' 'a'", "timeout_ms": 600000}),
        ))
        .await;
    let runner_pid = lanes
        .router()
        .and_then(|r| futures_lite(r.runner_pid(Lane::Net)));
    let runner_rss = runner_pid.and_then(peak_rss_kib);
    let self_rss = peak_rss_kib(std::process::id());
    let big_ok =
        big.output.contains("bytes (") && big.output.ends_with("a\n") || big.output.contains("cut");

    let row = |name: &str, d: Duration| {
        format!(
            "| {name} | {:.2} | {:+.2} | {:.2}x |\n",
            ms(d),
            ms(d) - ms(plain),
            ms(d) / ms(plain)
        )
    };
    let mut out = String::new();
    out.push_str(&format!(
        "Median of {rounds} calls each, same run. \"vs plain\" is the difference to a bare `sh -c true` spawn from this process.\n\n"
    ));
    out.push_str("| what | median ms | vs plain (ms) | ratio to plain |\n|---|---|---|---|\n");
    out.push_str(&row("plain `sh -c true` spawn", plain));
    if let Some(u) = unshare {
        out.push_str(&row("`unshare -n sh -c true` per call", u));
    }
    match bwrap {
        Some(b) => out.push_str(&row("`bwrap` (net+pid namespaces) per call", b)),
        None => out.push_str("| `bwrap` per call | not available | | |\n"),
    }
    out.push_str(&row(
        "toolyard `run_command_isolated \"true\"` (no-net lane)",
        no_net,
    ));
    out.push_str(&row("toolyard `run_command \"true\"` (net lane)", net));
    out.push_str(&row("toolyard `build \"true\"` (heavy lane)", heavy));
    out.push_str(&row(
        "toolyard `run_command \"true\"` inline (no sandbox)",
        inline_cmd,
    ));
    out.push_str(&format!(
        "\nFile tool per call (`read_file` of a 4 KB file, {} calls): through the no-net runner {:.3} ms, inline {:.3} ms, ratio {:.2}x.\n",
        rounds * 5,
        ms(read_lane),
        ms(read_inline),
        ms(read_lane) / ms(read_inline)
    ));
    out.push_str(&format!(
        "\nTarget: a sandboxed no-net call within 2 ms of a plain spawn: {:+.2} ms, {}.\n",
        ms(no_net) - ms(plain),
        if ms(no_net) - ms(plain) <= 2.0 {
            "met"
        } else {
            "missed"
        }
    ));
    out.push_str(&format!(
        "\nA command printing 1 GiB through the net runner: result {} ({} bytes shown); peak RSS of the runner {} MiB, of the calling process {} MiB. Target: under 64 MiB: {}.\n",
        if big_ok { "kept head and tail" } else { "UNEXPECTED" },
        big.output.len(),
        runner_rss.map(|k| format!("{:.1}", k as f64 / 1024.0)).unwrap_or("?".into()),
        self_rss.map(|k| format!("{:.1}", k as f64 / 1024.0)).unwrap_or("?".into()),
        match runner_rss {
            Some(k) if k < 64 * 1024 => "met",
            Some(_) => "missed",
            None => "not measured",
        }
    ));
    print!("{out}");
}

/// Wait for a future from sync code inside the runtime (the pid lookup is quick).
fn futures_lite<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

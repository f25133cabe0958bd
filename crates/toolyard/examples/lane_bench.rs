//! Lane overhead benchmark (driven by `bench/run --only lanes`): `run_command "true"` in each
//! lane against a plain `sh -c true` spawn, `unshare -n` and `bwrap` doing the same isolation
//! per call (a fresh sandbox for every call), and a file tool through a runner against inline.
//!
//! Every round runs each variant once, in an order that rotates from round to round, so a burst
//! of load from elsewhere on the machine hits every variant alike. Prints one JSON object: for
//! each variant its median, 10th and 90th percentile in milliseconds.
//!
//! `cargo run --release -p toolyard --example lane_bench -- [ROUNDS]`

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolyard_dispatch::{CallRequest, Dispatcher, DispatcherConfig, Mode};

fn toolyard_exe() -> PathBuf {
    if let Some(p) = std::env::var_os("TOOLYARD_BIN") {
        return PathBuf::from(p);
    }
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

/// One thing to time.
enum Variant {
    Spawn(Vec<String>),
    Call {
        lanes: bool,
        tool: &'static str,
        args: Value,
    },
}

struct Case {
    key: &'static str,
    label: &'static str,
    variant: Variant,
    /// Calls per round (cheap calls get more samples).
    per_round: usize,
    samples: Vec<Duration>,
}

fn spawn_ok(argv: &[String]) -> bool {
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn spawn_once(argv: &[String]) -> Duration {
    let t = Instant::now();
    let _ = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    t.elapsed()
}

async fn call_once(d: &Dispatcher, tool: &str, args: &Value) -> Duration {
    let t = Instant::now();
    let r = d.call(CallRequest::new("bench", tool, args.clone())).await;
    let e = t.elapsed();
    assert!(r.success, "{tool}: {}", r.output);
    e
}

fn stats(mut v: Vec<Duration>) -> Value {
    v.sort();
    let at = |q: f64| {
        let i = ((v.len() - 1) as f64 * q).round() as usize;
        v[i].as_secs_f64() * 1000.0
    };
    json!({"median_ms": at(0.5), "p10_ms": at(0.1), "p90_ms": at(0.9), "n": v.len()})
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
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
    let ws_s = ws.display().to_string();

    let true_args = json!({"command": "true"});
    let read_args = json!({"path": "small.txt", "limit": 10});
    let mut cases = vec![
        Case {
            key: "plain",
            label: "plain `sh -c true` spawn",
            variant: Variant::Spawn(s(&["sh", "-c", "true"])),
            per_round: 1,
            samples: vec![],
        },
        Case {
            key: "unshare",
            label: "`unshare -n sh -c true` per call",
            variant: Variant::Spawn(s(&["unshare", "-n", "sh", "-c", "true"])),
            per_round: 1,
            samples: vec![],
        },
        Case {
            key: "bwrap",
            label: "`bwrap` per call (net + pid namespaces, / read-only, workspace writable)",
            variant: Variant::Spawn(s(&[
                "bwrap",
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
            ])),
            per_round: 1,
            samples: vec![],
        },
        Case {
            key: "no_net",
            label: "toolyard `run_command_isolated \"true\"` (no-net lane)",
            variant: Variant::Call {
                lanes: true,
                tool: "run_command_isolated",
                args: true_args.clone(),
            },
            per_round: 1,
            samples: vec![],
        },
        Case {
            key: "net",
            label: "toolyard `run_command \"true\"` (net lane)",
            variant: Variant::Call {
                lanes: true,
                tool: "run_command",
                args: true_args.clone(),
            },
            per_round: 1,
            samples: vec![],
        },
        Case {
            key: "heavy",
            label: "toolyard `build \"true\"` (heavy lane)",
            variant: Variant::Call {
                lanes: true,
                tool: "build",
                args: true_args.clone(),
            },
            per_round: 1,
            samples: vec![],
        },
        Case {
            key: "inline_cmd",
            label: "toolyard `run_command \"true\"` inline (no runner, no sandbox)",
            variant: Variant::Call {
                lanes: false,
                tool: "run_command",
                args: true_args,
            },
            per_round: 1,
            samples: vec![],
        },
        Case {
            key: "read_lane",
            label: "toolyard `read_file` 4 KB through the no-net runner",
            variant: Variant::Call {
                lanes: true,
                tool: "read_file",
                args: read_args.clone(),
            },
            per_round: 5,
            samples: vec![],
        },
        Case {
            key: "read_inline",
            label: "toolyard `read_file` 4 KB inline",
            variant: Variant::Call {
                lanes: false,
                tool: "read_file",
                args: read_args,
            },
            per_round: 5,
            samples: vec![],
        },
    ];
    // Drop the spawn variants this machine cannot run (no bwrap, no user namespaces, ...).
    let mut missing = vec![];
    cases.retain(|c| match &c.variant {
        Variant::Spawn(argv) if !spawn_ok(argv) => {
            missing.push(c.key);
            false
        }
        _ => true,
    });

    let lanes = dispatcher(
        &ws,
        Mode::Lanes {
            exe: toolyard_exe(),
        },
    );
    let inline = dispatcher(&ws, Mode::Inline);
    // Warm-up: start every runner, fill caches.
    for c in &cases {
        if let Variant::Call {
            lanes: l,
            tool,
            args,
        } = &c.variant
        {
            let d = if *l { &lanes } else { &inline };
            for _ in 0..3 {
                call_once(d, tool, args).await;
            }
        }
    }
    let n = cases.len();
    for round in 0..rounds {
        for k in 0..n {
            let c = &mut cases[(round + k) % n];
            for _ in 0..c.per_round {
                let d = match &c.variant {
                    Variant::Spawn(argv) => spawn_once(argv),
                    Variant::Call {
                        lanes: l,
                        tool,
                        args,
                    } => call_once(if *l { &lanes } else { &inline }, tool, args).await,
                };
                c.samples.push(d);
            }
        }
        if (round + 1) % 50 == 0 {
            eprintln!("lane_bench: {}/{rounds} rounds", round + 1);
        }
    }
    let mut out = serde_json::Map::new();
    for c in cases {
        let mut v = stats(c.samples);
        v["label"] = json!(c.label);
        out.insert(c.key.to_string(), v);
    }
    let result = json!({"rounds": rounds, "results": out, "unavailable": missing});
    println!("{}", serde_json::to_string_pretty(&result).expect("json"));
}

//! Lane sandboxes. `sandbox::apply` changes the calling process for good, so every case runs
//! it in a child: this binary re-executes itself with `TOOLYARD_SANDBOX_TEST_CHILD=<action>`,
//! the child applies the lane's policy (single-threaded, as a runner does in `main`), performs
//! the action and exits 0 when the action succeeded, 1 when it was refused, 2 when the sandbox
//! could not be applied. `harness = false`: libtest's threads would make apply() refuse.

use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use toolyard_core::Lane;
use toolyard_exec::sandbox::{self, LanePolicy, SandboxError};
use toolyard_exec::{ExecRequest, run, tree_kill_mechanism};

const CHILD_ENV: &str = "TOOLYARD_SANDBOX_TEST_CHILD";
/// Action prefix: perform it without applying a sandbox (in a grandchild, to test inheritance).
const PLAIN: &str = "plain/";

fn main() {
    if let Ok(action) = std::env::var(CHILD_ENV) {
        std::process::exit(child(&action));
    }
    // One line per failure is enough; the child's output is in the message.
    std::panic::set_hook(Box::new(|info| eprintln!("{info}")));
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let tests: &[(&str, fn())] = &[
        (
            "no_net_cannot_reach_a_listener_on_host_loopback",
            no_net_cannot_reach_a_listener_on_host_loopback,
        ),
        ("no_net_cannot_resolve_names", no_net_cannot_resolve_names),
        (
            "no_net_commands_inherit_the_isolation",
            no_net_commands_inherit_the_isolation,
        ),
        (
            "no_net_falls_back_to_a_socket_filter",
            no_net_falls_back_to_a_socket_filter,
        ),
        ("home_and_root_stay_listable", home_and_root_stay_listable),
        (
            "writes_outside_workspace_and_temp_are_denied_in_every_lane",
            writes_outside_workspace_and_temp_are_denied_in_every_lane,
        ),
        (
            "secret_reads_are_denied_in_every_lane",
            secret_reads_are_denied_in_every_lane,
        ),
        ("heavy_lane_sets_rlimits", heavy_lane_sets_rlimits),
        (
            "apply_refuses_a_threaded_process",
            apply_refuses_a_threaded_process,
        ),
        (
            "commands_in_a_sandboxed_runner_still_die_as_a_tree",
            commands_in_a_sandboxed_runner_still_die_as_a_tree,
        ),
        (
            "unprivileged_no_net_uses_a_user_namespace",
            unprivileged_no_net_uses_a_user_namespace,
        ),
        (
            "cgroup_fallback_kills_a_setsid_grandchild",
            cgroup_fallback_kills_a_setsid_grandchild,
        ),
        (
            "process_group_fallback_kills_the_group",
            process_group_fallback_kills_the_group,
        ),
        (
            "probe_reports_kernel_features",
            probe_reports_kernel_features,
        ),
    ];
    let mut failed = Vec::new();
    let mut ran = 0;
    for (name, test) in tests {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        ran += 1;
        match std::panic::catch_unwind(test) {
            Ok(()) => println!("test {name} ... ok"),
            Err(_) => {
                println!("test {name} ... FAILED");
                failed.push(*name);
            }
        }
    }
    println!("\n{ran} sandbox tests, {} failed {failed:?}", failed.len());
    if !failed.is_empty() {
        std::process::exit(101);
    }
}

// ---------------------------------------------------------------- the child side

fn child(action: &str) -> i32 {
    if let Some(plain) = action.strip_prefix(PLAIN) {
        return perform(plain, None);
    }
    let lane: Lane = match std::env::var("TY_LANE").unwrap_or_default().parse() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let workspace = PathBuf::from(std::env::var_os("TY_WORKSPACE").unwrap_or_default());
    let temp = PathBuf::from(std::env::var_os("TY_TEMP").unwrap_or_default());
    let policy = LanePolicy::new(lane, workspace.clone(), temp);
    if action == "threaded" {
        let _t = std::thread::spawn(|| std::thread::sleep(Duration::from_secs(5)));
        return match sandbox::apply(&policy) {
            Err(SandboxError::Threaded { .. }) => 1,
            Err(e) => {
                eprintln!("unexpected error: {e}");
                2
            }
            Ok(_) => 0,
        };
    }
    match sandbox::apply(&policy) {
        Ok(report) => eprintln!("{report}"),
        Err(e) => {
            eprintln!("apply: {e}");
            return 2;
        }
    }
    perform(action, Some(&workspace))
}

fn perform(action: &str, workspace: Option<&Path>) -> i32 {
    let (verb, arg) = action.split_once(':').unwrap_or((action, ""));
    let ok = match verb {
        "connect" => match arg.parse() {
            Ok(addr) => report(TcpStream::connect_timeout(&addr, Duration::from_secs(5))),
            Err(e) => report::<()>(Err(std::io::Error::other(e))),
        },
        "resolve" => match (arg, 80).to_socket_addrs() {
            Ok(mut addrs) => addrs.next().is_some(),
            Err(e) => report::<()>(Err(e)),
        },
        "write" => report(std::fs::write(arg, "x")),
        "read" => report(std::fs::read(arg)),
        "sh" => Command::new("/bin/sh")
            .arg("-c")
            .arg(arg)
            .status()
            .is_ok_and(|s| s.success()),
        "exec" => {
            let cwd = workspace
                .map(Path::to_path_buf)
                .unwrap_or_else(std::env::temp_dir);
            match runtime().block_on(run(ExecRequest::new(arg, cwd))) {
                Ok(out) => {
                    eprintln!("{}", out.model_text());
                    out.success()
                }
                Err(e) => report::<()>(Err(std::io::Error::other(e))),
            }
        }
        "tree" => {
            // Print the mechanism, then let a setsid'd grandchild outlive a timed-out command.
            println!("mechanism={}", tree_kill_mechanism());
            let cwd = workspace
                .map(Path::to_path_buf)
                .unwrap_or_else(std::env::temp_dir);
            let mut req = ExecRequest::new(format!("{arg}\necho started; sleep 1000"), cwd);
            req.timeout = Duration::from_millis(500);
            match runtime().block_on(run(req)) {
                Ok(out) => out.timed_out && out.stdout == "started\n",
                Err(e) => report::<()>(Err(std::io::Error::other(e))),
            }
        }
        "probe" => {
            println!("{}", sandbox::probe());
            true
        }
        other => {
            eprintln!("unknown action {other}");
            return 2;
        }
    };
    i32::from(!ok)
}

fn report<T>(r: std::io::Result<T>) -> bool {
    match r {
        Ok(_) => true,
        Err(e) => {
            eprintln!("refused: {e}");
            false
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

// ---------------------------------------------------------------- the parent side

/// A workspace, a temp dir, a home with a planted secret, and a directory outside them all.
struct Fixture {
    _root: tempfile::TempDir,
    workspace: PathBuf,
    temp: PathBuf,
    home: PathBuf,
    outside: PathBuf,
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().expect("tempdir");
    let base = root.path().canonicalize().expect("canonical");
    let [workspace, temp, home, outside] = ["ws", "tmp", "home", "outside"].map(|d| base.join(d));
    for d in [&workspace, &temp, &home, &outside, &home.join(".ssh")] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    std::fs::write(home.join(".ssh/id_rsa"), "PRIVATE KEY").expect("plant");
    std::fs::write(home.join("notes.txt"), "public").expect("plant");
    std::fs::write(outside.join("readable.txt"), "public").expect("plant");
    // Let the unprivileged test user in too (the secret stays readable to it without a sandbox).
    for d in [
        &base,
        &workspace,
        &temp,
        &home,
        &outside,
        &home.join(".ssh"),
    ] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    std::fs::set_permissions(
        home.join(".ssh/id_rsa"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    Fixture {
        _root: root,
        workspace,
        temp,
        home,
        outside,
    }
}

struct ChildRun {
    code: i32,
    output: String,
}

fn in_lane(fx: &Fixture, lane: Lane, action: &str) -> ChildRun {
    spawn_child(fx, lane, action, None, &[])
}

fn spawn_child(
    fx: &Fixture,
    lane: Lane,
    action: &str,
    uid: Option<u32>,
    extra_env: &[(&str, &str)],
) -> ChildRun {
    let exe = std::env::current_exe().expect("current_exe");
    let mut cmd = Command::new(exe);
    cmd.env(CHILD_ENV, action)
        .env("TY_LANE", lane.as_str())
        .env("TY_WORKSPACE", &fx.workspace)
        .env("TY_TEMP", &fx.temp)
        .env("HOME", &fx.home)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let mut child = cmd.spawn().expect("spawn child");
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("child `{action}` in lane {lane} hung");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("output");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let code = out.status.code().unwrap_or(-1);
    println!("  [{lane}] {action} -> {code}");
    if code == 2 {
        println!("{output}");
    }
    ChildRun { code, output }
}

fn assert_allowed(run: &ChildRun, what: &str) {
    assert_eq!(run.code, 0, "{what} should be allowed:\n{}", run.output);
}

fn assert_refused(run: &ChildRun, what: &str) {
    assert_eq!(run.code, 1, "{what} should be refused:\n{}", run.output);
}

fn no_net_cannot_reach_a_listener_on_host_loopback() {
    let fx = fixture();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    assert_allowed(
        &in_lane(&fx, Lane::Net, &format!("connect:{addr}")),
        "net connect",
    );
    assert_refused(
        &in_lane(&fx, Lane::NoNet, &format!("connect:{addr}")),
        "no-net connect",
    );
}

fn no_net_cannot_resolve_names() {
    let fx = fixture();
    let name = "example.com";
    assert_refused(
        &in_lane(&fx, Lane::NoNet, &format!("resolve:{name}")),
        "no-net resolve",
    );
    // Only when this machine itself resolves names can the net lane be expected to.
    if (name, 80).to_socket_addrs().is_ok() {
        assert_allowed(
            &in_lane(&fx, Lane::Net, &format!("resolve:{name}")),
            "net resolve",
        );
    }
}

fn no_net_commands_inherit_the_isolation() {
    let fx = fixture();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let exe = std::env::current_exe().expect("exe");
    let cmd = format!("{CHILD_ENV}={PLAIN}connect:{addr} {}", exe.display());
    assert_allowed(
        &in_lane(&fx, Lane::Net, &format!("exec:{cmd}")),
        "connect from a net command",
    );
    assert_refused(
        &in_lane(&fx, Lane::NoNet, &format!("exec:{cmd}")),
        "connect from a no-net command",
    );
}

fn no_net_falls_back_to_a_socket_filter() {
    let fx = fixture();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let skip = [(sandbox::SKIP_NETNS_ENV, "1")];
    let run = spawn_child(&fx, Lane::NoNet, &format!("connect:{addr}"), None, &skip);
    assert_refused(&run, "connect under the socket filter");
    assert!(
        run.output.contains("socket() allows only AF_UNIX"),
        "{}",
        run.output
    );
    let exe = std::env::current_exe().expect("exe");
    let cmd = format!("exec:{CHILD_ENV}={PLAIN}connect:{addr} {}", exe.display());
    assert_refused(
        &spawn_child(&fx, Lane::NoNet, &cmd, None, &skip),
        "connect from a filtered command",
    );
    let unix = format!("sh:echo ok | {}", "cat");
    assert_allowed(
        &spawn_child(&fx, Lane::NoNet, &unix, None, &skip),
        "pipes and AF_UNIX still work",
    );
}

fn home_and_root_stay_listable() {
    let fx = fixture();
    let run = in_lane(
        &fx,
        Lane::Net,
        "sh:ls / >/dev/null && ls \"$HOME\" >/dev/null",
    );
    assert_allowed(&run, "listing / and ~");
}

fn writes_outside_workspace_and_temp_are_denied_in_every_lane() {
    for lane in Lane::ALL {
        let fx = fixture();
        let outside = fx.outside.join("new.txt");
        let ws = fx.workspace.join("new.txt");
        let tmp = fx.temp.join("new.txt");
        assert_refused(
            &in_lane(&fx, lane, &format!("write:{}", outside.display())),
            "write outside",
        );
        assert!(!outside.exists());
        assert_allowed(
            &in_lane(&fx, lane, &format!("write:{}", ws.display())),
            "write in workspace",
        );
        assert_allowed(
            &in_lane(&fx, lane, &format!("write:{}", tmp.display())),
            "write in temp dir",
        );
        let sh = format!("sh:echo x > {}", outside.display());
        assert_refused(&in_lane(&fx, lane, &sh), "a command writing outside");
        let exec = "exec:touch made-by-exec && echo y > \"$TMPDIR/t\"".to_string();
        assert_allowed(
            &in_lane(&fx, lane, &exec),
            "a command writing the workspace and TMPDIR",
        );
        assert!(fx.workspace.join("made-by-exec").exists());
        assert!(fx.temp.join("t").exists());
    }
}

fn secret_reads_are_denied_in_every_lane() {
    for lane in Lane::ALL {
        let fx = fixture();
        let secret = fx.home.join(".ssh/id_rsa");
        assert_refused(
            &in_lane(&fx, lane, &format!("read:{}", secret.display())),
            "secret read",
        );
        assert_refused(
            &in_lane(&fx, lane, &format!("sh:cat {}", secret.display())),
            "secret read by a command",
        );
        std::os::unix::fs::symlink(&secret, fx.workspace.join("key-link")).expect("symlink");
        let via_link = fx.workspace.join("key-link");
        assert_refused(
            &in_lane(&fx, lane, &format!("read:{}", via_link.display())),
            "secret read via a symlink",
        );
        for fine in [fx.home.join("notes.txt"), fx.outside.join("readable.txt")] {
            assert_allowed(
                &in_lane(&fx, lane, &format!("read:{}", fine.display())),
                "ordinary read",
            );
        }
        assert_allowed(&in_lane(&fx, lane, "read:/etc/passwd"), "system read");
    }
}

fn heavy_lane_sets_rlimits() {
    let fx = fixture();
    let run = in_lane(&fx, Lane::Heavy, "sh:test \"$(ulimit -t)\" = 3600");
    assert_allowed(&run, "cpu rlimit of 3600 s");
    assert!(run.output.contains("rlimits"), "{}", run.output);
    assert_allowed(
        &in_lane(&fx, Lane::Net, "sh:test \"$(ulimit -t)\" = unlimited"),
        "net lane unlimited",
    );
}

fn apply_refuses_a_threaded_process() {
    let fx = fixture();
    assert_refused(
        &in_lane(&fx, Lane::Net, "threaded"),
        "apply with two threads",
    );
}

/// Pids of live processes whose command line is `sleep <token>`.
fn sleepers(token: &str) -> Vec<u32> {
    let needle = format!("sleep\0{token}\0");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).ends_with(&needle) {
            pids.push(pid);
        }
    }
    pids
}

fn assert_no_sleeper(token: &str) {
    let until = Instant::now() + Duration::from_secs(10);
    while !sleepers(token).is_empty() {
        assert!(
            Instant::now() < until,
            "sleep {token} survived: {:?}",
            sleepers(token)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn unique_token() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}{:03}",
        200_000 + std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn commands_in_a_sandboxed_runner_still_die_as_a_tree() {
    for lane in Lane::ALL {
        let fx = fixture();
        let token = unique_token();
        let run = in_lane(&fx, lane, &format!("tree:setsid sleep {token} &"));
        assert_allowed(&run, "a timed-out command");
        assert!(
            run.output.contains("mechanism=pid-namespace") || !is_root(),
            "{}",
            run.output
        );
        assert_no_sleeper(&token);
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

const NOBODY: u32 = 65534;

fn unprivileged_no_net_uses_a_user_namespace() {
    if !is_root() {
        println!("  (skipped: needs root to switch to uid {NOBODY})");
        return;
    }
    let fx = fixture();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let as_nobody = |lane, action: &str| spawn_child(&fx, lane, action, Some(NOBODY), &[]);
    let run = as_nobody(Lane::NoNet, &format!("connect:{addr}"));
    assert_refused(&run, "unprivileged no-net connect");
    assert!(run.output.contains("user namespace"), "{}", run.output);
    assert_allowed(
        &as_nobody(Lane::Net, &format!("connect:{addr}")),
        "unprivileged net connect",
    );
    let secret = fx.home.join(".ssh/id_rsa");
    assert_refused(
        &as_nobody(Lane::Net, &format!("read:{}", secret.display())),
        "unprivileged secret read",
    );
    let ws_file = fx.workspace.join("nobody.txt");
    assert_allowed(
        &as_nobody(Lane::NoNet, &format!("write:{}", ws_file.display())),
        "unprivileged workspace write",
    );
    for lane in [Lane::NoNet, Lane::Net] {
        let token = unique_token();
        let run = as_nobody(lane, &format!("tree:setsid sleep {token} &"));
        assert_allowed(&run, "unprivileged timed-out command");
        assert!(
            run.output.contains("mechanism=pid-namespace"),
            "{}",
            run.output
        );
        assert_no_sleeper(&token);
    }
}

fn cgroup_fallback_kills_a_setsid_grandchild() {
    let fx = fixture();
    let token = unique_token();
    let run = spawn_child(
        &fx,
        Lane::Net,
        &format!("{PLAIN}tree:setsid sleep {token} &"),
        None,
        &[(toolyard_exec::FORCE_MECHANISM_ENV, "cgroup-v2")],
    );
    assert_allowed(&run, "a timed-out command");
    if !run.output.contains("mechanism=cgroup-v2") {
        println!(
            "  (no delegated cgroup v2 here: {})",
            run.output.lines().next().unwrap_or("")
        );
    }
    assert_no_sleeper(&token);
}

fn process_group_fallback_kills_the_group() {
    let fx = fixture();
    let token = unique_token();
    let run = spawn_child(
        &fx,
        Lane::Net,
        &format!("{PLAIN}tree:sleep {token} &"),
        None,
        &[(toolyard_exec::FORCE_MECHANISM_ENV, "process-group")],
    );
    assert_allowed(&run, "a timed-out command");
    assert!(
        run.output.contains("mechanism=process-group"),
        "{}",
        run.output
    );
    assert_no_sleeper(&token);
}

fn probe_reports_kernel_features() {
    let fx = fixture();
    let run = spawn_child(&fx, Lane::Net, &format!("{PLAIN}probe"), None, &[]);
    assert_allowed(&run, "probe");
    for feature in [
        "landlock-fs",
        "net-namespace",
        "seccomp-net",
        "tree-kill",
        "cgroup-limits",
    ] {
        assert!(
            run.output.contains(feature),
            "{feature} missing:\n{}",
            run.output
        );
    }
    println!("{}", run.output);
}

// Scratch micro-benchmark (temporary, not to be committed).
use std::time::{Duration, Instant};
use toolyard_exec::exec::{ExecRequest, run};

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let cmd = std::env::args().nth(2).unwrap_or("true".into());
    let mode = std::env::args().nth(3).unwrap_or("both".into());
    let mut plain = vec![Duration::ZERO];
    let mut ours = vec![Duration::ZERO];
    let _ = run(ExecRequest::new(cmd.clone(), "/tmp")).await.unwrap();
    for _ in 0..n {
        if mode != "ours" {
        let t = Instant::now();
        let _ = std::process::Command::new("/bin/sh").args(["-c", &cmd]).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).status();
        plain.push(t.elapsed());
        }
        if mode != "plain" {
        let t = Instant::now();
        let o = run(ExecRequest::new(cmd.clone(), "/tmp")).await.unwrap();
        ours.push(t.elapsed());
        assert!(o.exit_code.is_some());
        }
    }
    println!("mechanism {} plain {:.3} ms  ours {:.3} ms  diff {:+.3}", toolyard_exec::tree_kill_mechanism(), median(plain.clone()), median(ours.clone()), median(ours) - median(plain));
}

//! Temporary: print decisions for commands in $PROBE (one per line, \n escaped as \\n).
#[test]
fn probe() {
    let p = toolyard_exec::policy::CommandPolicy::new(&Default::default()).unwrap();
    let Ok(file) = std::env::var("PROBE") else {
        return;
    };
    for line in std::fs::read_to_string(file).unwrap().lines() {
        let cmd = line.replace("\\n", "\n");
        let t = std::time::Instant::now();
        let d = p.check(&cmd);
        println!(
            "{:>8?} {:<18} {:?}",
            t.elapsed(),
            d.rule().unwrap_or("ALLOW"),
            cmd
        );
    }
}

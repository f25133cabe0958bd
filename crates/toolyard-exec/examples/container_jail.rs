//! Run a program the way a default Docker container would: root without CAP_SYS_ADMIN, and a
//! seccomp profile that refuses `unshare`, `setns`, `mount` and namespace flags to `clone`
//! (EPERM) and `clone3` (ENOSYS, so libc falls back to `clone`). The tests run Toolyard's lanes
//! under it: `container_jail PROGRAM ARGS...`.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

const CAP_SYS_ADMIN: libc::c_ulong = 21;

const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

fn arch() -> TargetArch {
    if cfg!(target_arch = "aarch64") {
        TargetArch::aarch64
    } else {
        TargetArch::x86_64
    }
}

fn filter(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32) -> BpfProgram {
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch(),
    )
    .and_then(BpfProgram::try_from)
    .expect("seccomp filter")
}

fn main() {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: container_jail PROGRAM [ARGS...]");
        std::process::exit(2);
    };
    let clone_rules = NAMESPACE_FLAGS
        .iter()
        .map(|&flag| {
            let cond = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(flag as u64),
                flag as u64,
            )
            .expect("condition");
            SeccompRule::new(vec![cond]).expect("rule")
        })
        .collect();
    let eperm = filter(
        BTreeMap::from([
            (libc::SYS_unshare, vec![]),
            (libc::SYS_setns, vec![]),
            (libc::SYS_mount, vec![]),
            (libc::SYS_clone, clone_rules),
        ]),
        libc::EPERM,
    );
    let enosys = filter(BTreeMap::from([(libc::SYS_clone3, vec![])]), libc::ENOSYS);
    seccompiler::apply_filter(&eperm).expect("install the EPERM filter");
    seccompiler::apply_filter(&enosys).expect("install the ENOSYS filter");
    // SAFETY: prctl with constant arguments; exec then recomputes root's capabilities from the
    // bounding set, without CAP_SYS_ADMIN.
    if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) } != 0 {
        eprintln!(
            "container_jail: cannot drop CAP_SYS_ADMIN: {}",
            std::io::Error::last_os_error()
        );
    }
    let err = std::process::Command::new(&program).args(args).exec();
    eprintln!(
        "container_jail: cannot run {}: {err}",
        program.to_string_lossy()
    );
    std::process::exit(127);
}

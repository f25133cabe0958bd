//! Secret environment values kept out of `/proc/PID/environ` whole.

use std::ffi::OsString;
use std::io::Read as _;
use std::os::fd::{AsRawFd as _, FromRawFd as _};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::os::unix::process::CommandExt as _;

/// Set in the re-executed process: the descriptor holding the secret variables.
const HIDDEN_ENV_FD: &str = "TOOLYARD_HIDDEN_ENV_FD";

/// The name the descriptor's memory file carries (checked before reading it).
const MEMFD_NAME: &str = "toolyard-env";

/// Keep the values of secret-looking variables (names the command environment scrubs)
/// out of this process's `/proc/PID/environ`, which same-user processes may read even of a
/// non-dumpable process: when there are any, the process executes itself again without
/// them, handing them over in a memory file that the new image reads into its heap
/// environment and closes. The block `/proc` shows then has no trace of them, not even
/// their length (masking them in place left a `*` per character). Where that fails, they
/// are masked in place.
///
/// # Safety
/// Call first in `main`, while the process has one thread (it sets environment variables).
pub(crate) unsafe fn hide() {
    if let Some(fd) = std::env::var_os(HIDDEN_ENV_FD) {
        // SAFETY: single-threaded, per this function's contract.
        unsafe {
            std::env::remove_var(HIDDEN_ENV_FD);
            restore(&fd);
        }
        return;
    }
    let policy = toolyard_exec::EnvPolicy::default();
    let secret: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k.to_str().is_some_and(|k| policy.is_scrubbed(k)))
        .collect();
    if secret.is_empty() {
        return;
    }
    // Returns only when the exec failed: then mask them where they are.
    let _ = reexec_without(&secret);
    // SAFETY: single-threaded, per this function's contract.
    unsafe { toolyard_exec::hide_secrets_from_proc() };
}

fn reexec_without(secret: &[(OsString, OsString)]) -> std::io::Result<()> {
    let name = std::ffi::CString::new(MEMFD_NAME).map_err(std::io::Error::other)?;
    // SAFETY: memfd_create with a valid name; no close-on-exec, so the new image has it.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor, owned from here.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut blob = Vec::new();
    for (k, v) in secret {
        blob.extend_from_slice(k.as_bytes());
        blob.push(b'=');
        blob.extend_from_slice(v.as_bytes());
        blob.push(0);
    }
    std::io::Write::write_all(&mut file, &blob)?;
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_else(|| "toolyard".into());
    let err = std::process::Command::new("/proc/self/exe")
        .arg0(argv0)
        .args(args)
        .env_clear()
        .envs(std::env::vars_os().filter(|(k, _)| !secret.iter().any(|(s, _)| s == k)))
        .env(HIDDEN_ENV_FD, file.as_raw_fd().to_string())
        .exec();
    Err(err)
}

/// Read the secret variables back from descriptor `fd` (only the memory file made above)
/// and close it.
unsafe fn restore(fd: &std::ffi::OsStr) {
    let Some(fd) = fd.to_str().and_then(|s| s.parse::<i32>().ok()) else {
        return;
    };
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap_or_default();
    if fd < 3
        || !link
            .as_os_str()
            .as_bytes()
            .starts_with(format!("/memfd:{MEMFD_NAME}").as_bytes())
    {
        return;
    }
    // SAFETY: the descriptor is the memory file our previous image left open for us.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut blob = Vec::new();
    if std::io::Seek::rewind(&mut file).is_err() || file.read_to_end(&mut blob).is_err() {
        return;
    }
    for entry in blob.split(|&b| b == 0).filter(|e| !e.is_empty()) {
        let Some(eq) = entry.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (k, v) = (&entry[..eq], &entry[eq + 1..]);
        // SAFETY: single-threaded, per the caller's contract; the values go to the heap
        // environment, not the block /proc shows.
        unsafe {
            std::env::set_var(
                OsString::from_vec(k.to_vec()),
                OsString::from_vec(v.to_vec()),
            )
        };
    }
}

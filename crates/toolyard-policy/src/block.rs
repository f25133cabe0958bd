//! Block decisions: a stable rule id and a sentence for the model (what was found, what to do).

use super::paths::Area;
use super::word::shorten;

/// A reason to refuse a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Block {
    pub rule: String,
    pub reason: String,
}

fn b(rule: &str, reason: String) -> Block {
    Block {
        rule: rule.to_string(),
        reason,
    }
}

fn q(s: &str) -> String {
    shorten(s, 160)
}

/// Recursive `rm` of `/`, a system directory or a home directory.
pub(crate) fn rm(area: Area, cmd: &str, target: &str) -> Block {
    let (rule, what) = match area {
        Area::Root => ("rm-root", "the whole file system"),
        Area::Home => ("rm-home", "a home directory (or everything in it)"),
        Area::System => ("rm-system-dir", "a system directory"),
    };
    b(
        rule,
        format!(
            "Blocked `{}`: it recursively deletes `{}`, {what}. Delete only specific paths inside the workspace, e.g. `rm -rf ./target`.",
            q(cmd),
            q(target)
        ),
    )
}

/// Recursive chmod/chown of a protected place.
pub(crate) fn perm(rule: &str, cmd: &str, target: &str) -> Block {
    let what = if rule == "chmod-root" {
        "permissions"
    } else {
        "ownership"
    };
    b(
        rule,
        format!(
            "Blocked `{}`: it recursively changes the {what} of `{}`, which is `/`, a system directory or a home directory. Change only paths inside the workspace, e.g. `chmod -R 755 ./bin`.",
            q(cmd),
            q(target)
        ),
    )
}

/// `find` that deletes under a protected place.
pub(crate) fn find_delete(cmd: &str, start: &str) -> Block {
    b(
        "find-delete-root",
        format!(
            "Blocked `{}`: it deletes files under `{}`, which is `/`, a system directory or a home directory. Run find on a path inside the workspace, e.g. `find . -name '*.o' -delete`.",
            q(cmd),
            q(start)
        ),
    )
}

/// A destructive command whose target is only known at run time.
pub(crate) fn dynamic_target(cmd: &str, target: &str) -> Block {
    b(
        "dynamic-target",
        format!(
            "Blocked `{}`: the target `{}` of this destructive command comes from a variable or command substitution that Toolyard cannot check before it runs (empty or unexpected, it could hit `/` or the home directory). Write the path out literally, e.g. `rm -rf ./build`.",
            q(cmd),
            q(target)
        ),
    )
}

/// A command name that is only known at run time.
pub(crate) fn dynamic_command(name: &str) -> Block {
    b(
        "dynamic-command",
        format!(
            "Blocked: the command name `{}` comes from a variable or command substitution, so Toolyard cannot tell what would run. Write the command name out literally.",
            q(name)
        ),
    )
}

/// Shell code that is generated at run time.
pub(crate) fn dynamic_script(who: &str, what: &str) -> Block {
    b(
        "dynamic-command",
        format!(
            "Blocked: `{who}` would run shell code taken from {}, which Toolyard cannot check before it runs. Run the commands directly (or write them to a script file and run that).",
            q(what)
        ),
    )
}

/// Downloaded content executed without inspection.
pub(crate) fn download_exec(who: &str) -> Block {
    b(
        "download-exec",
        format!(
            "Blocked: `{who}` would execute content downloaded from the network without anyone reading it (the `curl … | sh` pattern). Download it to a file first (`curl -fsSLo install.sh URL`), inspect it, then run it with `sh install.sh` if it is safe."
        ),
    )
}

/// mkfs and friends.
pub(crate) fn mkfs(cmd: &str) -> Block {
    b(
        "mkfs",
        format!(
            "Blocked `{}`: making a file system destroys what is on the target. Do not format disks or partitions; if a test really needs a file-system image, ask the user to add an allow rule in [policy].",
            q(cmd)
        ),
    )
}

/// dd onto a device.
pub(crate) fn dd_device(cmd: &str, target: &str) -> Block {
    b(
        "dd-device",
        format!(
            "Blocked `{}`: dd would write onto the device `{}` and overwrite a disk. Write to a file in the workspace instead, e.g. `of=./disk.img`.",
            q(cmd),
            q(target)
        ),
    )
}

/// A write to a device other than the harmless ones.
pub(crate) fn dev_write(how: &str, target: &str) -> Block {
    b(
        "dev-write",
        format!(
            "Blocked: {} writes to the device `{}`. Only /dev/null, /dev/zero, /dev/stdout, /dev/stderr, /dev/tty and /dev/fd/* may be written; write to a file in the workspace instead.",
            q(how),
            q(target)
        ),
    )
}

/// The fork bomb pattern.
pub(crate) fn fork_bomb(name: &str) -> Block {
    b(
        "fork-bomb",
        format!(
            "Blocked: the function `{}` calls itself in a pipe or in the background, the fork-bomb pattern that exhausts the machine's processes. Do not run it.",
            q(name)
        ),
    )
}

/// Nesting beyond what the checker follows.
pub(crate) fn too_deep(limit: usize) -> Block {
    b(
        "too-deep",
        format!(
            "Blocked: the command nests substitutions, subshells, `sh -c` or `eval` more than {limit} levels deep, too deep for Toolyard to check. Split it into simpler commands or write a script file and run that."
        ),
    )
}

/// Input beyond the size the checker reads.
pub(crate) fn too_large(len: usize, max: usize) -> Block {
    b(
        "too-large",
        format!(
            "Blocked: the command is {len} bytes long, more than the {max} bytes Toolyard checks. Write long content to a file with the write_file tool and run a short command."
        ),
    )
}

/// The parser gave up.
pub(crate) fn unparsable() -> Block {
    b(
        "unparsable",
        "Blocked: Toolyard could not parse this command to check it. Simplify it or split it into several commands.".to_string(),
    )
}

/// A user deny rule.
pub(crate) fn user_deny(index: usize, pattern: &str, custom: Option<&str>, cmd: &str) -> Block {
    let reason = match custom {
        Some(why) => format!(
            "Blocked `{}` by deny rule {index} (`{}`) in the [policy] section of catalog.toml: {why}",
            q(cmd),
            q(pattern)
        ),
        None => format!(
            "Blocked `{}`: it matches deny rule {index} (`{}`) in the [policy] section of catalog.toml. Do not run it; find another way or ask the user.",
            q(cmd),
            q(pattern)
        ),
    };
    b(&format!("user-deny:{index}"), reason)
}

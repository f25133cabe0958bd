//! Which targets are protected: `/`, top-level system directories, home directories, and
//! devices. Paths are compared after lexical normalisation (`//`, `.`, `..`), with globs and
//! dynamic parts treated as "could be anything, also empty".

use super::glob::{self, G};
use super::word::{Tok, Word};

/// Directories whose recursive deletion, chmod or chown is blocked (`*` = any one name).
/// Every ancestor of an entry is an entry too, so `/usr/*` and `/home/*` are covered.
const PROTECTED: &[&str] = &[
    "/",
    "/bin",
    "/boot",
    "/boot/efi",
    "/dev",
    "/etc",
    "/home",
    "/home/*",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/media",
    "/mnt",
    "/nix",
    "/nix/store",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/snap",
    "/srv",
    "/sys",
    "/usr",
    "/usr/bin",
    "/usr/include",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/local",
    "/usr/local/bin",
    "/usr/local/lib",
    "/usr/sbin",
    "/usr/share",
    "/usr/src",
    "/var",
    "/var/lib",
    "/var/log",
    "/var/mail",
    "/var/spool",
    "/Applications",
    "/Library",
    "/System",
    "/Users",
    "/Users/*",
    "/private",
    "/private/etc",
    "/private/var",
];

/// Devices that may be written: the brief's list plus the harmless random/full devices.
const SAFE_DEVICES: &[&str] = &[
    "null", "zero", "full", "random", "urandom", "stdin", "stdout", "stderr", "tty",
];

/// Device directories whose entries may be written (`/dev/fd/N`, `/dev/shm/...`).
const SAFE_DEVICE_DIRS: &[&str] = &["fd", "shm"];

/// Bash's network redirections, `/dev/tcp/HOST/PORT` and `/dev/udp/HOST/PORT`: no device
/// is opened. The policy does not know the lane; the sandbox's network rule decides.
const NETWORK_DIRS: &[&str] = &["tcp", "udp"];

/// Which kind of protected place a path reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Area {
    /// `/` itself or everything directly under it.
    Root,
    /// A home directory (`~`, `$HOME`, `/home/x`, `/root`).
    Home,
    /// A system directory (`/usr`, `/etc`, ...).
    System,
}

/// What a destructive command's operand reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// A place Toolyard does not protect (relative paths stay in the workspace).
    Fine,
    /// A protected place.
    Protected(Area),
    /// A path that starts with a variable or substitution and could reach a protected place.
    Dynamic,
}

type Seg<'a> = &'a [Tok];

fn split(toks: &[Tok]) -> Vec<Seg<'_>> {
    toks.split(|t| matches!(t, Tok::Ch('/', _))).collect()
}

fn seg_literal(seg: Seg) -> Option<String> {
    seg.iter()
        .map(|t| match t {
            Tok::Ch(c, true) => Some(*c),
            Tok::Ch(c, false) if !matches!(c, '*' | '?' | '[') => Some(*c),
            _ => None,
        })
        .collect()
}

/// A segment that may expand to nothing (`*`, `$X`).
fn empty_capable(seg: Seg) -> bool {
    !seg.is_empty()
        && seg
            .iter()
            .all(|t| matches!(t, Tok::Dyn(_) | Tok::Ch('*', false)))
}

fn pure_dyn(seg: Seg) -> bool {
    !seg.is_empty() && seg.iter().all(|t| matches!(t, Tok::Dyn(_)))
}

/// A segment that matches (nearly) every name: no literal characters except dots.
fn wide(seg: Seg) -> bool {
    seg.iter().all(|t| match t {
        Tok::Ch(c, quoted) => *c == '.' || (!quoted && matches!(c, '*' | '?')),
        Tok::Dyn(_) => true,
        Tok::Home => false,
    }) && seg.iter().any(|t| !matches!(t, Tok::Ch('.', _)))
}

fn seg_glob(seg: Seg) -> Vec<G> {
    let chars: Vec<(char, bool)> = seg
        .iter()
        .map(|t| match t {
            Tok::Ch(c, q) => (*c, !q),
            Tok::Dyn(_) => ('*', true),
            Tok::Home => ('~', false),
        })
        .collect();
    glob::compile(&chars, false).unwrap_or_default()
}

/// Drop empty and `.` segments and resolve `..`; `true` when `..` climbs above the start.
fn normalize(segs: Vec<Seg<'_>>) -> (Vec<Seg<'_>>, bool) {
    let mut out: Vec<Seg> = Vec::new();
    let mut escaped = false;
    for s in segs {
        match seg_literal(s).as_deref() {
            Some("") | Some(".") => {}
            Some("..") => {
                if out.pop().is_none() {
                    escaped = true;
                }
            }
            _ => out.push(s),
        }
    }
    (out, escaped)
}

fn seg_matches(p: Seg, name: &str) -> bool {
    name == "*" || glob::matches(&seg_glob(p), name)
}

/// Whether the pattern segments can denote exactly the entry path.
fn reach(p: &[Seg], e: &[&str], budget: &mut u32) -> bool {
    if *budget == 0 {
        return true;
    }
    *budget -= 1;
    let Some((first, rest)) = p.split_first() else {
        return e.is_empty();
    };
    if empty_capable(first) && reach(rest, e, budget) {
        return true;
    }
    if let Some((name, erest)) = e.split_first() {
        if seg_matches(first, name) && reach(rest, erest, budget) {
            return true;
        }
        // A variable may hold several path components (`/$X` could be `/usr/lib`).
        if pure_dyn(first) && reach(p, erest, budget) {
            return true;
        }
    }
    false
}

/// The protected area the absolute path (given as normalised segments) can reach.
fn protected(segs: &[Seg]) -> Option<Area> {
    if segs.len() > 64 {
        return None;
    }
    let mut budget = 10_000;
    let hit = PROTECTED.iter().any(|entry| {
        let e: Vec<&str> = entry.split('/').filter(|s| !s.is_empty()).collect();
        reach(segs, &e, &mut budget)
    });
    if !hit {
        return None;
    }
    if reach(segs, &[], &mut budget) {
        return Some(Area::Root);
    }
    Some(match segs.first().and_then(|s| seg_literal(s)).as_deref() {
        None => Area::Root,
        Some("home" | "root" | "Users") => Area::Home,
        Some(_) => Area::System,
    })
}

/// `w` resolved against `cwd` when `w` is a relative path and the directory is known.
pub(crate) fn resolve(w: &Word, cwd: Option<&[Tok]>) -> Word {
    match (cwd, w.toks.first()) {
        (Some(dir), Some(Tok::Ch(c, _))) if *c != '/' => {
            let mut toks = dir.to_vec();
            toks.push(Tok::Ch('/', true));
            toks.extend(w.toks.iter().cloned());
            Word { toks }
        }
        _ => w.clone(),
    }
}

/// The directory `cd ARG` leads to, when it is known (`cd` alone is home).
pub(crate) fn cd_target(arg: Option<&Word>, cwd: Option<&[Tok]>) -> Option<Vec<Tok>> {
    let Some(w) = arg else {
        return Some(vec![Tok::Home]);
    };
    if w.toks.iter().any(|t| matches!(t, Tok::Dyn(_))) || w.literal().as_deref() == Some("-") {
        return None;
    }
    match w.toks.first() {
        Some(Tok::Home) | Some(Tok::Ch('/', _)) => Some(w.toks.clone()),
        _ => cwd.map(|_| resolve(w, cwd).toks),
    }
}

/// Classify the operand of a recursive delete, chmod or chown.
pub(crate) fn classify(w: &Word) -> Target {
    match w.toks.first() {
        Some(Tok::Home) => {
            let (segs, escaped) = normalize(split(&w.toks[1..]));
            if escaped
                || segs.iter().all(|s| empty_capable(s))
                || segs.first().is_some_and(|s| wide(s))
            {
                Target::Protected(Area::Home)
            } else {
                Target::Fine
            }
        }
        Some(Tok::Dyn(_)) => {
            let k = w
                .toks
                .iter()
                .take_while(|t| matches!(t, Tok::Dyn(_)))
                .count();
            let (segs, escaped) = normalize(split(&w.toks[k..]));
            // `"$DIR"`, `$X/*`, `$(pwd)/..`: nothing literal is left to pin the target down; and
            // `$PREFIX/usr` is `/usr` when the variable is empty.
            if escaped || segs.iter().all(|s| wide(s)) || protected(&segs).is_some() {
                Target::Dynamic
            } else {
                Target::Fine
            }
        }
        Some(Tok::Ch('/', _)) => {
            let (segs, escaped) = normalize(split(&w.toks));
            if escaped {
                return Target::Protected(Area::Root);
            }
            protected(&segs).map_or(Target::Fine, Target::Protected)
        }
        _ => Target::Fine,
    }
}

/// Whether writing to `w` writes to a device other than the harmless ones.
pub(crate) fn unsafe_device(w: &Word) -> bool {
    if !matches!(w.toks.first(), Some(Tok::Ch('/', _))) {
        return false;
    }
    let (segs, _) = normalize(split(&w.toks));
    let Some((top, rest)) = segs.split_first() else {
        return false;
    };
    if seg_literal(top).as_deref() == Some("proc") {
        return rest.len() == 1 && seg_literal(rest[0]).as_deref() == Some("sysrq-trigger");
    }
    // `/d?v/sda` is still /dev; a bare `/$X/...` is not assumed to be.
    if pure_dyn(top) || !glob::matches(&seg_glob(top), "dev") {
        return false;
    }
    let Some((dev, more)) = rest.split_first() else {
        return false;
    };
    match seg_literal(dev) {
        Some(name) if more.is_empty() && SAFE_DEVICES.contains(&name.as_str()) => false,
        Some(name) if !more.is_empty() && SAFE_DEVICE_DIRS.contains(&name.as_str()) => false,
        Some(name) if more.len() == 2 && NETWORK_DIRS.contains(&name.as_str()) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::super::word::{Dyn, DynKind};
    use super::*;

    fn w(s: &str) -> Word {
        let mut toks = Vec::new();
        for c in s.chars() {
            if c == '$' {
                toks.push(Tok::Dyn(Dyn {
                    kind: DynKind::Var("X".into()),
                    src: "$X".into(),
                }));
            } else if c == '~' && toks.is_empty() {
                toks.push(Tok::Home);
            } else {
                toks.push(Tok::Ch(c, false));
            }
        }
        Word { toks }
    }

    #[test]
    fn protected_paths() {
        use Area::*;
        use Target::*;
        for (p, t) in [
            ("/", Protected(Root)),
            ("/*", Protected(Root)),
            ("//", Protected(Root)),
            ("/usr/..", Protected(Root)),
            ("/../..", Protected(Root)),
            ("/usr", Protected(System)),
            ("/usr/", Protected(System)),
            ("/usr/*", Protected(System)),
            ("/etc", Protected(System)),
            ("/home/bob", Protected(Home)),
            ("/home/*", Protected(Home)),
            ("/root", Protected(Home)),
            ("~", Protected(Home)),
            ("~/", Protected(Home)),
            ("~/*", Protected(Home)),
            ("~/..", Protected(Home)),
            ("~/projects/x", Fine),
            ("/tmp/x", Fine),
            ("/tmp/*", Fine),
            ("/tmp*", Fine),
            ("/home/bob/project/target", Fine),
            ("target", Fine),
            ("./node_modules", Fine),
            ("$", Dynamic),
            ("$/", Dynamic),
            ("$/*", Dynamic),
            ("$/..", Dynamic),
            ("$/usr", Dynamic),
            ("$/foo", Fine),
            ("/$", Protected(Root)),
            ("/usr/$", Protected(System)),
            ("/tmp/$", Fine),
            ("build/$", Fine),
        ] {
            assert_eq!(classify(&w(p)), t, "{p}");
        }
    }

    #[test]
    fn devices() {
        for p in [
            "/dev/sda",
            "/dev/nvme0n1p1",
            "//dev/../dev/sda",
            "/dev/$",
            "/d?v/sda",
            "/dev/disk/by-id/x",
        ] {
            assert!(unsafe_device(&w(p)), "{p}");
        }
        for p in [
            "/dev/null",
            "/dev/stderr",
            "/dev/fd/3",
            "/dev/shm/x",
            "./dev/sda",
            "$/dev",
            "/tmp/x",
        ] {
            assert!(!unsafe_device(&w(p)), "{p}");
        }
    }
}

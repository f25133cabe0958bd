//! What Toolyard knows about particular commands: wrappers that run another command, shells
//! and interpreters, downloaders, and the destructive commands of the built-in blocklist.

use super::block::{self, Block};
use super::paths::{self, Target};
use super::word::{Tok, Word, decode_c_escapes, show};

/// What a wrapper runs.
pub(crate) enum Inner {
    /// Another command (one or more, `xargs -I` runs one per input word).
    Cmds(Vec<Vec<Word>>, InnerStdin),
    /// Shell code made of these words joined by spaces (`sudo -s a b`, `ssh host a b`).
    Script(Vec<Word>),
    /// An interactive shell that reads commands from stdin (`su`, `sudo -s`).
    ShellStdin,
    /// Nothing (`sudo -v`, `command -v rm`).
    Nothing,
}

/// The stdin of a wrapped command.
pub(crate) enum InnerStdin {
    /// The wrapper's own stdin.
    Same,
    /// The wrapper consumed it (`xargs`).
    Consumed,
}

/// Option table of a wrapper.
struct Spec {
    /// Short options that take an argument.
    arg: &'static str,
    /// Long options that take a separate argument (without `=`).
    long_arg: &'static [&'static str],
    /// Short options after which no command runs (`command -v`).
    stop: &'static str,
    /// Short options whose argument is shell code (`su -c`, `flock -c`).
    script_arg: &'static str,
    /// Short options that make the rest a shell command line (`sudo -s`).
    shell: &'static str,
    /// Positional words to skip before the command (`timeout 5`).
    positionals: usize,
    /// Skip `NAME=VALUE` words before the command (`env`, `sudo`).
    assignments: bool,
}

const fn spec(arg: &'static str) -> Spec {
    Spec {
        arg,
        long_arg: &[],
        stop: "",
        script_arg: "",
        shell: "",
        positionals: 0,
        assignments: false,
    }
}

fn wrapper_spec(name: &str) -> Option<Spec> {
    Some(match name {
        "sudo" => Spec {
            stop: "elvVK",
            shell: "si",
            assignments: true,
            long_arg: &[
                "--user",
                "--group",
                "--prompt",
                "--close-from",
                "--chdir",
                "--role",
                "--type",
                "--command-timeout",
                "--other-user",
                "--chroot",
                "--host",
            ],
            ..spec("ugCDprtTUR")
        },
        "doas" => Spec {
            shell: "s",
            ..spec("uC")
        },
        "pkexec" => Spec {
            long_arg: &["--user"],
            ..spec("")
        },
        "env" => Spec {
            assignments: true,
            script_arg: "S",
            long_arg: &[
                "--unset",
                "--chdir",
                "--split-string",
                "--default-signal",
                "--ignore-signal",
                "--block-signal",
            ],
            ..spec("uC")
        },
        "nice" => Spec {
            long_arg: &["--adjustment"],
            ..spec("n")
        },
        "nohup" | "builtin" | "catchsegv" | "torsocks" | "tsocks" | "proxychains"
        | "proxychains4" | "fakeroot" | "firejail" | "dbus-run-session" | "!" | "noglob"
        | "nocorrect" | "unbuffer" | "busybox" | "toybox" => spec(""),
        "timeout" => Spec {
            long_arg: &["--signal", "--kill-after"],
            positionals: 1,
            ..spec("sk")
        },
        "stdbuf" => Spec {
            long_arg: &["--input", "--output", "--error"],
            ..spec("ioe")
        },
        "ionice" => Spec {
            stop: "pPu",
            long_arg: &["--class", "--classdata"],
            ..spec("cn")
        },
        "time" => Spec {
            long_arg: &["--format", "--output"],
            ..spec("fo")
        },
        "setsid" => spec(""),
        "command" => Spec {
            stop: "vV",
            ..spec("")
        },
        "exec" => spec("a"),
        "chroot" => Spec {
            positionals: 1,
            ..spec("")
        },
        "taskset" => Spec {
            stop: "p",
            positionals: 1,
            ..spec("")
        },
        "chrt" => Spec {
            stop: "p",
            positionals: 1,
            ..spec("TPD")
        },
        "strace" | "ltrace" => spec("oepsuEaIbOSPXn"),
        "valgrind" => spec(""),
        "unshare" => spec("SGRw"),
        "nsenter" => spec("tSG"),
        "systemd-run" => Spec {
            long_arg: &[
                "--unit",
                "--property",
                "--setenv",
                "--machine",
                "--host",
                "--uid",
                "--gid",
                "--working-directory",
            ],
            ..spec("pEMHu")
        },
        "caffeinate" => spec("tw"),
        "xvfb-run" => spec("nsfewp"),
        "runuser" => Spec {
            script_arg: "c",
            long_arg: &["--user", "--group", "--supp-group", "--shell", "--command"],
            ..spec("ugGs")
        },
        "su" => Spec {
            script_arg: "c",
            long_arg: &["--group", "--supp-group", "--shell", "--command"],
            ..spec("gGsw")
        },
        "flock" => Spec {
            script_arg: "c",
            positionals: 1,
            long_arg: &["--timeout", "--conflict-exit-code", "--command"],
            ..spec("wE")
        },
        "sg" => Spec {
            script_arg: "c",
            positionals: 1,
            ..spec("")
        },
        "ssh" => Spec {
            positionals: 1,
            ..spec("BbcDEeFIiJLlmOoPpQRSWw")
        },
        "watch" => Spec {
            long_arg: &["--interval", "--equexit"],
            ..spec("nq")
        },
        "xargs" => Spec {
            long_arg: &[
                "--arg-file",
                "--delimiter",
                "--eof",
                "--replace",
                "--max-lines",
                "--max-args",
                "--max-procs",
                "--max-chars",
                "--process-slot-var",
            ],
            ..spec("aEdILnPs")
        },
        _ => return None,
    })
}

/// Unwrap a wrapper (`sudo`, `env`, `timeout`, `xargs`, ...); `None` when `name` is not one.
/// `stdin_words` are the words an `echo ... |` before `xargs` feeds it.
pub(crate) fn unwrap(name: &str, args: &[Word], stdin_words: Option<Vec<Word>>) -> Option<Inner> {
    let spec = wrapper_spec(name)?;
    if let Some(inner) = su_command(name, args) {
        return Some(inner);
    }
    let opts = match options(name, &spec, args) {
        Ok(opts) => opts,
        Err(inner) => return Some(inner),
    };
    let rest = operands(name, &spec, args, opts.next);
    Some(inner_of(name, &spec, rest, opts, stdin_words))
}

/// `su [user] -c CMD`, `runuser -l bob -c CMD`: options may follow the user name.
fn su_command(name: &str, args: &[Word]) -> Option<Inner> {
    if !matches!(name, "su" | "runuser" | "sg") {
        return None;
    }
    for (j, w) in args.iter().enumerate() {
        let Some(t) = w.literal() else { continue };
        if t == "--" {
            break;
        }
        if let Some(v) = t.strip_prefix("--command=") {
            return Some(Inner::Script(vec![Word::lit(v)]));
        }
        if t == "--command"
            || (t.len() > 1 && t.starts_with('-') && !t.starts_with("--") && t.ends_with('c'))
        {
            return Some(Inner::Script(
                args.get(j + 1).cloned().into_iter().collect(),
            ));
        }
    }
    None
}

/// What the options before the wrapped command said.
struct Options {
    /// The index of the first word after them.
    next: usize,
    /// An option makes the wrapper run a shell (`sudo -s`, `su -l`).
    shell: bool,
    /// `--exec` (`watch -x`): the rest is a command, not a script.
    exec_mode: bool,
    /// `xargs -I R`: the word replaced by each input word.
    replace: Option<String>,
}

/// Walk the wrapper's options; `Err` with the answer when an option settles it (a script
/// argument, a flag that stops the wrapper running anything).
fn options(name: &str, spec: &Spec, args: &[Word]) -> Result<Options, Inner> {
    let mut i = 0;
    let mut shell = false;
    let mut exec_mode = false;
    let mut replace: Option<String> = None;
    while let Some(w) = args.get(i) {
        // A dynamic word where options go could be anything: treat it as the command.
        let Some(t) = w.option() else { break };
        if t == "--" {
            i += 1;
            break;
        }
        if let Some(long) = t.strip_prefix("--") {
            let (key, value) = match long.split_once('=') {
                Some((k, v)) => (format!("--{k}"), Some(v.to_string())),
                None => (t.clone(), None),
            };
            if matches!(key.as_str(), "--command" | "--split-string") {
                let script = value
                    .map(|v| vec![Word::lit(&v)])
                    .or_else(|| args.get(i + 1).map(|w| vec![w.clone()]));
                return Err(Inner::Script(script.unwrap_or_default()));
            }
            if key == "--replace" {
                replace = Some(value.clone().unwrap_or_else(|| "{}".into()));
            }
            if key == "--exec" {
                exec_mode = true;
            }
            if matches!(key.as_str(), "--login" | "--shell") && spec.shell.contains('s') {
                shell = true;
            }
            i += if value.is_none() && spec.long_arg.contains(&key.as_str()) {
                2
            } else {
                1
            };
            continue;
        }
        let flags: Vec<char> = t.chars().skip(1).collect();
        let mut skip = 1;
        for (j, c) in flags.iter().enumerate() {
            if spec.stop.contains(*c) {
                return Err(Inner::Nothing);
            }
            if spec.shell.contains(*c) {
                shell = true;
            }
            if name == "watch" && *c == 'x' {
                exec_mode = true;
            }
            let attached: String = flags[j + 1..].iter().collect();
            if spec.script_arg.contains(*c) {
                let mut script = if attached.is_empty() {
                    args.get(i + 1).cloned().into_iter().collect::<Vec<_>>()
                } else {
                    vec![Word::lit(&attached)]
                };
                if name == "env" {
                    // `env -S 'a b' c`: the split string and the rest form one command line.
                    let from = if attached.is_empty() { i + 2 } else { i + 1 };
                    script.extend(args.iter().skip(from).cloned());
                }
                return Err(Inner::Script(script));
            }
            if name == "xargs" && (*c == 'I' || *c == 'i') {
                replace = Some(if !attached.is_empty() {
                    attached.clone()
                } else if *c == 'I' {
                    args.get(i + 1)
                        .and_then(Word::literal)
                        .unwrap_or_else(|| "{}".into())
                } else {
                    "{}".into()
                });
            }
            if spec.arg.contains(*c) {
                if attached.is_empty() {
                    skip = 2;
                }
                break;
            }
        }
        i += skip;
    }
    Ok(Options {
        next: i,
        shell,
        exec_mode,
        replace,
    })
}

/// The wrapped command's words: after `NAME=VALUE` words (`env A=1`), `env -` and the
/// wrapper's positionals (`timeout 5`), from index `i`.
fn operands(name: &str, spec: &Spec, args: &[Word], mut i: usize) -> Vec<Word> {
    if name == "env" || spec.assignments {
        while args
            .get(i)
            .and_then(Word::literal)
            .is_some_and(|t| is_assignment(&t))
        {
            i += 1;
        }
    }
    // `env - cmd` is `env -i cmd`.
    if name == "env" && args.get(i).and_then(Word::literal).as_deref() == Some("-") {
        i += 1;
    }
    i += spec.positionals;
    args.get(i..).map(<[Word]>::to_vec).unwrap_or_default()
}

/// What the wrapped command is, from its words `rest` and the wrapper's options.
fn inner_of(
    name: &str,
    spec: &Spec,
    rest: Vec<Word>,
    opts: Options,
    stdin_words: Option<Vec<Word>>,
) -> Inner {
    // `flock FILE -c CMD`, `sg GROUP -c CMD`.
    if !spec.script_arg.is_empty()
        && rest
            .first()
            .and_then(Word::literal)
            .is_some_and(|t| t == "-c" || t == "--command")
    {
        return Inner::Script(rest.get(1).cloned().into_iter().collect());
    }
    match name {
        "su" | "runuser" if rest.is_empty() || name == "su" => return Inner::ShellStdin,
        "sg" | "ssh" => {
            return if rest.is_empty() {
                Inner::Nothing
            } else {
                Inner::Script(rest)
            };
        }
        "watch" if !opts.exec_mode => return Inner::Script(rest),
        "xargs" => {
            let cmd = if rest.is_empty() {
                vec![Word::lit("echo")]
            } else {
                rest
            };
            let input = stdin_words.unwrap_or_default();
            let cmds = match opts.replace {
                Some(r) if !input.is_empty() => input
                    .iter()
                    .take(32)
                    .map(|iw| {
                        cmd.iter()
                            .map(|w| {
                                if w.literal().as_deref() == Some(r.as_str()) {
                                    iw.clone()
                                } else {
                                    w.clone()
                                }
                            })
                            .collect()
                    })
                    .collect(),
                _ => vec![cmd.into_iter().chain(input).collect()],
            };
            return Inner::Cmds(cmds, InnerStdin::Consumed);
        }
        _ => {}
    }
    if opts.shell {
        return if rest.is_empty() {
            Inner::ShellStdin
        } else {
            Inner::Script(rest)
        };
    }
    if rest.is_empty() {
        return Inner::Nothing;
    }
    Inner::Cmds(vec![rest], InnerStdin::Same)
}

fn is_assignment(t: &str) -> bool {
    match t.split_once('=') {
        Some((k, _)) => {
            !k.is_empty()
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !k.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// Shells whose `-c` argument, script operand or stdin is shell code.
pub(crate) fn is_shell(name: &str) -> bool {
    matches!(
        name,
        "sh" | "bash"
            | "zsh"
            | "dash"
            | "ksh"
            | "mksh"
            | "pdksh"
            | "ash"
            | "yash"
            | "fish"
            | "csh"
            | "tcsh"
            | "rbash"
            | "posh"
            | "oksh"
            | "loksh"
    )
}

/// How a shell is asked to get its code.
pub(crate) enum ShellMode {
    /// `-c SCRIPT`: the script is `args[i]`.
    Command(usize),
    /// A script file operand `args[i]`.
    File(usize),
    /// Code from stdin.
    Stdin,
}

/// Read a shell's options: `-c` (also in clusters like `-xc`), `-o opt`, `--rcfile f`, ...
pub(crate) fn shell_mode(args: &[Word]) -> ShellMode {
    let mut i = 0;
    let mut command = false;
    let mut stdin = false;
    while let Some(w) = args.get(i) {
        let Some(t) = w.literal() else { break };
        if t == "-" || t == "--" {
            i += 1;
            break;
        }
        if t.starts_with("--") {
            i += if matches!(t.as_str(), "--rcfile" | "--init-file") {
                2
            } else {
                1
            };
            continue;
        }
        if t.len() > 1 && (t.starts_with('-') || t.starts_with('+')) {
            let mut skip = 1;
            for c in t.chars().skip(1) {
                match c {
                    'c' => command = true,
                    // `bash -s -- args`: code from stdin, operands are $1...
                    's' => stdin = true,
                    'o' | 'O' => skip += 1,
                    _ => {}
                }
            }
            i += skip;
            continue;
        }
        break;
    }
    if command {
        // With -c, the first operand is the script (later ones are $0, $1, ...).
        return ShellMode::Command(i);
    }
    if stdin {
        return ShellMode::Stdin;
    }
    match args.get(i) {
        Some(w) if w.literal().as_deref() == Some("/dev/stdin") => ShellMode::Stdin,
        Some(_) => ShellMode::File(i),
        None => ShellMode::Stdin,
    }
}

/// Interpreters of other languages: they run downloaded code but their code is not analysed.
pub(crate) fn interpreter_opts(
    name: &str,
) -> Option<(
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static str,
)> {
    // (code options, module options, long code options, options that take an argument)
    let n = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    Some(match n {
        "python" | "pypy" => ("c", "m", &[], "WXQ"),
        "perl" => ("eE", "", &[], ""),
        "ruby" => ("e", "", &[], "rIC"),
        "node" | "nodejs" | "bun" => ("ep", "", &["--eval", "--print"], "r"),
        "php" => ("rBRFE", "", &[], "cdz"),
        "lua" | "luajit" => ("e", "l", &[], ""),
        "Rscript" => ("e", "", &[], ""),
        "tclsh" | "wish" | "osascript" | "pwsh" | "powershell" => {
            ("ec", "", &["-Command", "-command"], "")
        }
        _ => return None,
    })
}

/// How an interpreter gets its code.
pub(crate) enum InterpMode {
    /// Inline code in `args[i]`.
    Code(usize),
    /// A module or file (not stdin).
    Other(usize),
    /// Code from stdin.
    Stdin,
}

/// Read an interpreter's options (`python3 -c CODE`, `perl -e CODE`, `node script.js`, ...).
pub(crate) fn interp_mode(name: &str, args: &[Word]) -> Option<InterpMode> {
    let (code, module, long_code, takes) = interpreter_opts(name)?;
    let mut i = 0;
    while let Some(w) = args.get(i) {
        let Some(t) = w.literal() else {
            return Some(InterpMode::Other(i));
        };
        if t == "-" {
            return Some(InterpMode::Stdin);
        }
        if t == "--" {
            i += 1;
            break;
        }
        if long_code.contains(&t.as_str()) {
            return Some(InterpMode::Code(i + 1));
        }
        if t.starts_with("--") {
            i += 1;
            continue;
        }
        if let Some(flags) = t.strip_prefix('-') {
            for (j, c) in flags.chars().enumerate() {
                let attached = j + 1 < flags.len();
                if code.contains(c) {
                    return Some(InterpMode::Code(if attached { i } else { i + 1 }));
                }
                if module.contains(c) {
                    return Some(InterpMode::Other(i));
                }
                if takes.contains(c) {
                    if !attached {
                        i += 1;
                    }
                    break;
                }
            }
            i += 1;
            continue;
        }
        return Some(InterpMode::Other(i));
    }
    Some(match args.get(i) {
        Some(_) => InterpMode::Other(i),
        None => InterpMode::Stdin,
    })
}

/// Commands that fetch content from the network to stdout (or a file).
pub(crate) fn is_downloader(name: &str) -> bool {
    matches!(
        name,
        "curl"
            | "wget"
            | "wget2"
            | "fetch"
            | "aria2c"
            | "http"
            | "https"
            | "xh"
            | "httpie"
            | "lwp-request"
            | "lwp-download"
            | "GET"
            | "nc"
            | "ncat"
            | "netcat"
    )
}

/// Commands whose output is plain data, safe to splice into shell code (`$(date)`, `$(pwd)`).
pub(crate) fn is_safe_producer(name: &str, first_arg: Option<&str>) -> bool {
    match name {
        "date" | "pwd" | "whoami" | "id" | "hostname" | "uname" | "nproc" | "arch" | "getconf"
        | "mktemp" | "basename" | "dirname" | "realpath" | "readlink" | "seq" | "tty" => true,
        "git" => first_arg == Some("rev-parse"),
        _ => false,
    }
}

/// The shell code `echo`/`printf` would print, for `echo '...' | sh`.
pub(crate) fn printed(name: &str, args: &[Word]) -> Option<Vec<Word>> {
    match name {
        "echo" => {
            let mut escapes = false;
            let mut i = 0;
            while let Some(t) = args.get(i).and_then(Word::option) {
                if !t[1..].chars().all(|c| matches!(c, 'n' | 'e' | 'E')) {
                    break;
                }
                escapes |= t.contains('e');
                i += 1;
            }
            let rest = args.get(i..).unwrap_or_default();
            Some(if escapes {
                rest.iter().map(decode_word).collect()
            } else {
                rest.to_vec()
            })
        }
        "printf" => {
            let (format, rest) = args.split_first()?;
            let Some(fmt) = format.literal() else {
                return Some(args.to_vec());
            };
            // Substitute the arguments into %s-style slots once; leftovers follow on new lines.
            let mut out = String::new();
            let mut rest_iter = rest.iter();
            let mut chars = fmt.chars().peekable();
            let mut dynamic = Vec::new();
            while let Some(c) = chars.next() {
                if c == '%' {
                    match chars.next() {
                        Some('%') => out.push('%'),
                        Some(_) => {
                            if let Some(w) = rest_iter.next() {
                                match w.literal() {
                                    Some(t) => out.push_str(&t),
                                    None => dynamic.push(w.clone()),
                                }
                            }
                        }
                        None => out.push('%'),
                    }
                } else {
                    out.push(c);
                }
            }
            let mut words = vec![Word::lit(&decode_c_escapes(&out))];
            words.extend(dynamic);
            words.extend(rest_iter.cloned());
            Some(words)
        }
        _ => None,
    }
}

fn decode_word(w: &Word) -> Word {
    match w.literal() {
        Some(t) => Word::lit(&decode_c_escapes(&t)),
        None => w.clone(),
    }
}

/// Parse `rm`-like flags: (recursive given, an operand might be a hidden flag, operands).
fn rm_args(args: &[Word]) -> (bool, bool, Vec<&Word>) {
    let mut recursive = false;
    let mut maybe = false;
    let mut ops = Vec::new();
    let mut end = false;
    for w in args {
        if !end {
            if let Some(t) = w.option() {
                if t == "--" {
                    end = true;
                } else if let Some(long) = t.strip_prefix("--") {
                    // GNU accepts unambiguous prefixes: `--rec` is `--recursive`.
                    recursive |= "recursive".starts_with(long);
                } else {
                    recursive |= t.contains(['r', 'R']);
                }
                continue;
            }
            maybe |= w.starts_dynamic();
        }
        ops.push(w);
    }
    (recursive, maybe, ops)
}

/// The built-in checks on one simple command (after wrappers are removed); relative operands
/// are resolved against `cwd` when an earlier `cd` made it known.
pub(crate) fn check_builtin(name: &str, words: &[Word], cwd: Option<&[Tok]>) -> Option<Block> {
    let args = &words[1..];
    let cmd = show(words);
    match name {
        "rm" => {
            let (recursive, maybe, ops) = rm_args(args);
            for op in ops {
                let op = &paths::resolve(op, cwd);
                match paths::classify(op) {
                    Target::Protected(area) if recursive || maybe => {
                        return Some(block::rm(area, &cmd, &op.lossy()));
                    }
                    Target::Dynamic if recursive => {
                        return Some(block::dynamic_target(&cmd, &op.lossy()));
                    }
                    _ => {}
                }
            }
            None
        }
        "chmod" | "chown" | "chgrp" => {
            let rule = if name == "chmod" {
                "chmod-root"
            } else {
                "chown-root"
            };
            let mut recursive = false;
            let mut reference = false;
            let mut ops = Vec::new();
            let mut end = false;
            for w in args {
                if !end && let Some(t) = w.option() {
                    if t == "--" {
                        end = true;
                        continue;
                    }
                    if let Some(long) = t.strip_prefix("--") {
                        recursive |= "recursive".starts_with(long);
                        reference |= long.starts_with("reference");
                        continue;
                    }
                    // `chmod -x f`, `chmod -rwx f`: a mode, not flags.
                    if name != "chmod" || t[1..].chars().all(|c| "RcfvhHLP".contains(c)) {
                        recursive |= t.contains('R');
                        continue;
                    }
                }
                ops.push(w);
            }
            let targets = if reference {
                &ops[..]
            } else {
                ops.get(1..).unwrap_or_default()
            };
            if !recursive {
                return None;
            }
            for op in targets {
                let op = &paths::resolve(op, cwd);
                match paths::classify(op) {
                    Target::Protected(_) => return Some(block::perm(rule, &cmd, &op.lossy())),
                    Target::Dynamic => return Some(block::dynamic_target(&cmd, &op.lossy())),
                    Target::Fine => {}
                }
            }
            None
        }
        "dd" => args
            .iter()
            .filter_map(|w| w.value_after("of="))
            .find(paths::unsafe_device)
            .map(|t| block::dd_device(&cmd, &t.lossy())),
        n if n == "mkfs"
            || n.starts_with("mkfs.")
            || matches!(
                n,
                "mke2fs" | "mkswap" | "mkdosfs" | "mkntfs" | "mkexfatfs" | "wipefs"
            ) =>
        {
            Some(block::mkfs(&cmd))
        }
        "find" => {
            let (starts, rest) = find_starts(args);
            if !rest
                .iter()
                .any(|w| w.literal().as_deref() == Some("-delete"))
            {
                return None;
            }
            for s in starts {
                let s = paths::resolve(&s, cwd);
                match paths::classify(&s) {
                    Target::Protected(_) => return Some(block::find_delete(&cmd, &s.lossy())),
                    Target::Dynamic => return Some(block::dynamic_target(&cmd, &s.lossy())),
                    Target::Fine => {}
                }
            }
            None
        }
        "tee" | "shred" | "truncate" => args
            .iter()
            .filter(|w| w.option().is_none())
            .find(|w| paths::unsafe_device(w))
            .map(|w| block::dev_write(&format!("`{cmd}`"), &w.lossy())),
        "cp" | "mv" | "install" | "rsync" | "ln" => {
            let ops: Vec<&Word> = args.iter().filter(|w| w.option().is_none()).collect();
            let target = args
                .iter()
                .find_map(|w| w.value_after("--target-directory="))
                .or_else(|| ops.last().map(|w| (*w).clone()));
            target
                .filter(paths::unsafe_device)
                .map(|w| block::dev_write(&format!("`{cmd}`"), &w.lossy()))
        }
        _ => None,
    }
}

/// `find`'s start paths (default `.`) and the rest of its arguments.
fn find_starts(args: &[Word]) -> (Vec<Word>, &[Word]) {
    let mut i = 0;
    while let Some(t) = args.get(i).and_then(Word::literal) {
        match t.as_str() {
            "-H" | "-L" | "-P" => i += 1,
            "-D" => i += 2,
            t if t.starts_with("-O") => i += 1,
            _ => break,
        }
    }
    let mut starts = Vec::new();
    while let Some(w) = args.get(i) {
        let t = w.literal();
        if t.as_deref()
            .is_some_and(|t| t.starts_with('-') || t == "(" || t == "!")
        {
            break;
        }
        starts.push(w.clone());
        i += 1;
    }
    if starts.is_empty() {
        starts.push(Word::lit("."));
    }
    (starts, args.get(i..).unwrap_or_default())
}

/// The commands `find -exec/-execdir/-ok` runs, with `{}` standing for the files under each
/// start path (`/` gives `/*`).
pub(crate) fn find_execs(args: &[Word]) -> Vec<Vec<Word>> {
    let (starts, rest) = find_starts(args);
    let mut out = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let t = rest[i].literal().unwrap_or_default();
        i += 1;
        if !matches!(t.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
            continue;
        }
        let from = i;
        while i < rest.len() && !matches!(rest[i].literal().as_deref(), Some(";" | "+")) {
            i += 1;
        }
        let cmd = &rest[from..i];
        for s in starts.iter().take(8) {
            let mut under = s.toks.clone();
            under.push(Tok::Ch('/', true));
            under.push(Tok::Ch('*', false));
            let under = Word { toks: under };
            out.push(
                cmd.iter()
                    .map(|w| {
                        if w.literal().as_deref() == Some("{}") {
                            under.clone()
                        } else {
                            w.clone()
                        }
                    })
                    .collect(),
            );
        }
    }
    out
}

//! The manager: which server or check covers a file, their lives, and what a change did.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::LspError;
use crate::check::Checker;
use crate::config::{self, DEFAULT_IDLE_S, DEFAULT_WAIT_MS, Language, LspConfig};
use crate::diag::{Diag, diff, line_of};
use crate::server::{Published, Server};

mod summary;

pub use summary::apply_text_edits;
use summary::{Wait, before_of, cap_list, cap_vec, list, report, still_checking};

/// Problems listed per file in a change's result; the rest are counted.
const MAX_LISTED: usize = 20;
/// Other files named in a change's result.
const MAX_OTHERS: usize = 5;
/// Files of one change that get diagnostics.
const MAX_FILES: usize = 20;
/// The least a navigation request waits for its answer.
const MIN_REQUEST_WAIT: Duration = Duration::from_secs(10);

/// How servers and checks are started.
#[derive(Debug, Clone)]
pub enum Launcher {
    /// As children of this process, unsandboxed (an inline server).
    Direct,
    /// Through `EXE lane-exec`: the `no-net` lane's sandbox with the `heavy` lane's limits.
    Sandboxed {
        /// The `toolyard` binary.
        exe: PathBuf,
        /// The workspace root.
        workspace: PathBuf,
        /// The catalog file, if any.
        catalog: Option<PathBuf>,
        /// The state directory, when not the default one.
        state_dir: Option<PathBuf>,
    },
}

impl Launcher {
    /// The command that runs `argv`, in `root`.
    pub fn command(&self, argv: &[String], root: &Path) -> Command {
        match self {
            Launcher::Direct => {
                let mut c = Command::new(&argv[0]);
                c.args(&argv[1..]).current_dir(root);
                c
            }
            Launcher::Sandboxed {
                exe,
                workspace,
                catalog,
                state_dir,
            } => {
                let mut c = Command::new(exe);
                c.arg("lane-exec").arg("--workspace").arg(workspace);
                if let Some(cat) = catalog {
                    c.arg("--catalog").arg(cat);
                }
                if let Some(s) = state_dir {
                    c.arg("--state-dir").arg(s);
                }
                c.arg("--").args(argv).current_dir(root);
                c
            }
        }
    }
}

/// A location a server answered, as the model reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Workspace-relative path (absolute when outside the workspace).
    pub path: String,
    /// 0-based line.
    pub line: u32,
    /// 0-based column.
    pub col: u32,
}

struct Slot {
    server: Arc<Server>,
    /// It replaced one that died.
    restarted: bool,
    /// It was stopped for being idle (the next use starts another, silently).
    idled: bool,
}

/// Language servers and checks of one workspace, shared by its sessions.
pub struct Manager {
    root: PathBuf,
    root_uri: String,
    wait: Duration,
    idle: Duration,
    enabled: bool,
    config: LspConfig,
    path_var: Option<OsString>,
    languages: OnceLock<Vec<Language>>,
    launcher: Launcher,
    servers: Mutex<HashMap<String, Slot>>,
    checkers: Mutex<HashMap<PathBuf, Arc<Checker>>>,
    told: Mutex<HashSet<(String, String)>>,
    reaper: OnceLock<()>,
    me: Weak<Manager>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// `toolyard_core::sync::lock`, kept here because this crate depends on no other Toolyard
/// crate (it compiles beside the core, not after it).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Manager {
    /// A manager for the workspace at `root` (absolute); nothing starts until a file needs it.
    pub fn new(root: &Path, config: LspConfig, launcher: Launcher) -> Arc<Self> {
        let root_uri = url::Url::from_directory_path(root)
            .map(|u| u.to_string())
            .unwrap_or_else(|_| format!("file://{}/", root.display()));
        Arc::new_cyclic(|me| Self {
            root: root.to_path_buf(),
            root_uri,
            wait: Duration::from_millis(config.wait_ms.unwrap_or(DEFAULT_WAIT_MS)),
            idle: Duration::from_secs(config.idle_s.unwrap_or(DEFAULT_IDLE_S).max(1)),
            enabled: config.enabled != Some(false),
            config,
            path_var: std::env::var_os("PATH"),
            languages: OnceLock::new(),
            launcher,
            servers: Mutex::new(HashMap::new()),
            checkers: Mutex::new(HashMap::new()),
            told: Mutex::new(HashSet::new()),
            reaper: OnceLock::new(),
            me: me.clone(),
        })
    }

    /// The languages, resolved on first need (looking at `PATH` costs a little).
    pub fn languages(&self) -> &[Language] {
        self.languages
            .get_or_init(|| config::resolve(&self.config, self.path_var.as_deref()))
    }

    /// The most a change waits.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The language of a workspace-relative path, by its extension.
    pub fn language_of(&self, rel: &str) -> Option<&Language> {
        if !self.enabled {
            return None;
        }
        let ext = Path::new(rel).extension()?.to_str()?;
        self.languages()
            .iter()
            .find(|l| l.extensions.iter().any(|e| e == ext))
    }

    /// Whether a change of `rel` waits for diagnostics (a server or a check covers it).
    pub fn covers(&self, rel: &str) -> bool {
        self.language_of(rel).is_some_and(|l| {
            l.server.is_some() || (l.check.is_some() && self.project_of(rel).is_some())
        })
    }

    /// `doctor`'s lines: what serves each language.
    pub fn doctor_lines(&self) -> Vec<String> {
        if !self.enabled {
            return vec!["language servers: off ([lsp] enabled = false)".into()];
        }
        self.languages()
            .iter()
            .map(|l| {
                let what = match (&l.server, &l.check) {
                    (Some(s), _) => format!("server `{}` ({})", s.join(" "), l.how),
                    (None, Some(c)) => format!("check `{}` ({}; no server)", c.join(" "), l.how),
                    (None, None) => format!("nothing ({})", l.how),
                };
                format!("{} (.{}): {what}", l.name, l.extensions.join(" ."))
            })
            .collect()
    }

    fn file_text(&self, rel: &str) -> Option<String> {
        let bytes = std::fs::read(self.root.join(rel)).ok()?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The server of `lang`, started (or restarted) as needed; with a note when it replaced
    /// one that died.
    fn server(&self, lang: &Language) -> Result<(Arc<Server>, Option<String>), LspError> {
        let Some(argv) = &lang.server else {
            return Err(LspError::NoServer(self.no_server_text(lang)));
        };
        let mut map = lock(&self.servers);
        let mut note = None;
        let mut restarted = false;
        if let Some(slot) = map.get(&lang.name) {
            match slot.server.dead() {
                None => return Ok((slot.server.clone(), None)),
                Some(_) if slot.idled => {}
                Some(why) => {
                    if slot.restarted && !slot.server.answered() {
                        return Err(LspError::Died {
                            lang: lang.name.clone(),
                            program: slot.server.program.clone(),
                            why: format!(
                                "{why}; it was restarted once and died again before answering, so it is not started again (see `toolyard doctor`, or fix [lsp.{}] in the catalog)",
                                lang.name
                            ),
                        });
                    }
                    note = Some(format!(
                        "note: the {} language server ({}) had stopped ({why}); it was restarted, so this is its first look at these files",
                        lang.name, slot.server.program
                    ));
                    restarted = true;
                }
            }
        }
        let program = lang.served_by();
        let name = self
            .root
            .file_name()
            .map_or("workspace".into(), |n| n.to_string_lossy().into_owned());
        let server = Server::start(
            &lang.name,
            &program,
            self.launcher.command(argv, &self.root),
            self.root_uri.clone(),
            name,
        )?;
        map.insert(
            lang.name.clone(),
            Slot {
                server: server.clone(),
                restarted,
                idled: false,
            },
        );
        drop(map);
        self.start_reaper();
        Ok((server, note))
    }

    /// The servers running now.
    fn live_servers(&self) -> Vec<Arc<Server>> {
        lock(&self.servers)
            .values()
            .filter(|s| s.server.dead().is_none())
            .map(|s| s.server.clone())
            .collect()
    }

    /// The pid of the `lang` server, if one runs (tests kill it).
    pub fn server_pid(&self, lang: &str) -> Option<i32> {
        lock(&self.servers)
            .get(lang)
            .filter(|s| s.server.dead().is_none())
            .map(|s| s.server.pid())
    }

    fn start_reaper(&self) {
        self.reaper.get_or_init(|| {
            let me = self.me.clone();
            let period = (self.idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(30));
            let _ = std::thread::Builder::new()
                .name("lsp-idle".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(period);
                        let Some(m) = me.upgrade() else { return };
                        let idle: Vec<Arc<Server>> = {
                            let mut map = lock(&m.servers);
                            map.values_mut()
                                .filter(|s| {
                                    s.server.dead().is_none() && s.server.idle_for() > m.idle
                                })
                                .map(|s| {
                                    s.idled = true;
                                    s.server.clone()
                                })
                                .collect()
                        };
                        for s in idle {
                            tracing::info!(lang = %s.lang, "stopping an idle language server");
                            s.stop();
                        }
                    }
                });
        });
    }

    /// Stop every server (the dispatcher is going away).
    pub fn shutdown(&self) {
        let servers: Vec<Arc<Server>> =
            lock(&self.servers).drain().map(|(_, s)| s.server).collect();
        for s in servers {
            s.stop();
        }
    }

    /// The project directory (holding `Cargo.toml`) of a file a check covers.
    fn project_of(&self, rel: &str) -> Option<PathBuf> {
        let abs = self.root.join(rel);
        abs.ancestors()
            .skip(1)
            .take_while(|a| a.starts_with(&self.root))
            .find(|a| a.join("Cargo.toml").is_file())
            .map(Path::to_path_buf)
    }

    fn checker(&self, rel: &str, lang: &Language) -> Option<Arc<Checker>> {
        let argv = lang.check.clone()?;
        let dir = self.project_of(rel)?;
        let mut map = lock(&self.checkers);
        let c = map.entry(dir.clone()).or_insert_with(|| {
            let launcher = self.launcher.clone();
            let root = self.root.clone();
            let program = if argv.first().is_some_and(|p| p.ends_with("cargo")) {
                format!("{} {}", argv[0], argv.get(1).map_or("", String::as_str))
            } else {
                argv[0].clone()
            };
            let make = Arc::new(move |dir: &Path| {
                let mut argv = argv.clone();
                if argv.first().is_some_and(|p| p.ends_with("cargo")) {
                    argv.push("--manifest-path".into());
                    argv.push(dir.join("Cargo.toml").to_string_lossy().into_owned());
                }
                launcher.command(&argv, &root)
            });
            Checker::new(&lang.name, &program, dir, self.root.clone(), make)
        });
        Some(c.clone())
    }

    fn no_server_text(&self, lang: &Language) -> String {
        format!(
            "no language server covers {} files (.{}) here ({}): changes to them get no diagnostics; install one or set [lsp.{}] command in the catalog",
            lang.name,
            lang.extensions.join(", ."),
            lang.how,
            lang.name
        )
    }

    /// A file was read: open it with its server (or run a first check) in the background, so
    /// that the next change knows which problems were there before. Never waits.
    pub fn on_read(&self, rel: &str) {
        let Some(lang) = self.language_of(rel).cloned() else {
            return;
        };
        if lang.server.is_none() {
            if let Some(c) = self.checker(rel, &lang)
                && c.done() == 0
            {
                c.request();
            }
            return;
        }
        let open = lock(&self.servers)
            .get(&lang.name)
            .is_some_and(|s| s.server.dead().is_none() && s.server.doc(rel).is_some());
        if open {
            // Already open: a later change or `diagnostics` sends what changed.
            return;
        }
        let Some(me) = self.me.upgrade() else { return };
        let rel = rel.to_string();
        let _ = std::thread::Builder::new()
            .name("lsp-open".into())
            .spawn(move || {
                if let Ok((server, _)) = me.server(&lang) {
                    let ext = Path::new(&rel)
                        .extension()
                        .and_then(|e| e.to_str())
                        .unwrap_or_default();
                    server.open_if_absent(
                        &rel,
                        config::language_id(ext),
                        Instant::now() + Duration::from_secs(120),
                        || me.file_text(&rel),
                    );
                }
            });
    }

    /// The open documents whose file on disk no longer matches what their server has (a
    /// command changed them).
    pub fn changed_on_disk(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in self.live_servers() {
            for rel in s.open_docs() {
                let disk = self.file_text(&rel);
                let doc = s.doc(&rel);
                if let (Some(disk), Some(doc)) = (disk, doc)
                    && *doc.text != disk
                {
                    out.push(rel);
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// After a call changed `files`: tell the servers, wait (up to the bound) for diagnostics
    /// of the new versions, and say what the change did. `None` when nothing covers them.
    pub fn after_change(&self, session: &str, files: &[String]) -> Option<String> {
        if !self.enabled || files.is_empty() {
            return None;
        }
        let deadline = Instant::now() + self.wait;
        let mut parts: Vec<String> = Vec::new();
        let mut waits: Vec<Wait> = Vec::new();
        let mut seen = HashSet::new();
        // Files past MAX_FILES, and removed ones, by language: told, not waited for.
        let mut on_disk: HashMap<String, Vec<(String, bool)>> = HashMap::new();
        let mut unchecked = 0;
        for rel in files {
            if !seen.insert(rel.clone()) {
                continue;
            }
            let Some(lang) = self.language_of(rel) else {
                continue;
            };
            let exists = self.root.join(rel).is_file();
            if lang.server.is_some() && (!exists || waits.len() >= MAX_FILES) {
                unchecked += usize::from(exists);
                on_disk
                    .entry(lang.name.clone())
                    .or_default()
                    .push((rel.clone(), exists));
                continue;
            }
            if waits.len() >= MAX_FILES {
                continue;
            }
            if lang.server.is_some() {
                match self.server(lang) {
                    Ok((server, note)) => {
                        parts.extend(note);
                        let Some(text) = self.file_text(rel) else {
                            continue;
                        };
                        let mut before = before_of(&server, rel);
                        if before.is_none()
                            && let Some(doc) = server.doc(rel)
                        {
                            // Opened (on a read) but not yet checked: what it had before is
                            // worth the wait, or every old problem would look new.
                            server.wait_published(rel, doc.version, 0, deadline);
                            before = before_of(&server, rel);
                        }
                        let others = server.all_published();
                        let ext = Path::new(rel)
                            .extension()
                            .and_then(|e| e.to_str())
                            .unwrap_or_default();
                        let Some((version, seq, _)) =
                            server.sync(rel, config::language_id(ext), &text, deadline)
                        else {
                            parts.push(still_checking(rel, &server.program, self.wait.as_millis()));
                            continue;
                        };
                        waits.push(Wait::Server {
                            rel: rel.clone(),
                            server,
                            version,
                            seq,
                            before,
                            text,
                            others,
                        });
                    }
                    Err(e) => parts.push(format!("{rel}: no diagnostics: {e}")),
                }
            } else if let Some(checker) = self.checker(rel, lang) {
                let before = checker.last(rel).zip(self.last_checked_text(rel));
                let others = checker.all();
                let generation = checker.request();
                waits.push(Wait::Check {
                    rel: rel.clone(),
                    checker,
                    generation,
                    before,
                    others,
                });
            } else if lang.check.is_none()
                && lock(&self.told).insert((session.to_string(), lang.name.clone()))
            {
                parts.push(format!("note: {}", self.no_server_text(lang)));
            }
        }
        for (lang, changes) in on_disk {
            // A server that is not running reads the disk when it starts: nothing to tell.
            let server = lock(&self.servers)
                .get(&lang)
                .filter(|s| s.server.dead().is_none())
                .map(|s| s.server.clone());
            if let Some(server) = server {
                server.files_on_disk(&changes);
            }
        }
        for w in waits {
            parts.push(self.settle(w, deadline));
        }
        if unchecked > 0 {
            parts.push(format!(
                "{unchecked} more changed file(s) were passed to the language servers without waiting for their diagnostics; diagnostics {{\"path\": FILE}} checks one"
            ));
        }
        (!parts.is_empty()).then(|| parts.join("\n"))
    }

    fn last_checked_text(&self, rel: &str) -> Option<Arc<str>> {
        // The check reads files from disk; what it saw last is what the file held then, which
        // the caller no longer has: the current text stands in (lines match unless the change
        // moved them; the key then falls back to the message).
        self.file_text(rel).map(Arc::from)
    }

    fn settle(&self, w: Wait, deadline: Instant) -> String {
        let ms = self.wait.as_millis();
        match w {
            Wait::Server {
                rel,
                server,
                version,
                seq,
                before,
                text,
                others,
            } => {
                let who = server.program.clone();
                match server.wait_published(&rel, version, seq, deadline) {
                    Some(p) => {
                        let mut out = report(&rel, &who, before, &p.items, &text);
                        let changed = self.others_changed(&rel, &others, &server.all_published());
                        if !changed.is_empty() {
                            out.push_str(&format!(
                                "\n  problems changed in other files: {}",
                                changed.join(", ")
                            ));
                        }
                        out
                    }
                    None => match server.dead() {
                        Some(why) => format!(
                            "{rel}: no diagnostics: the {} language server ({who}) stopped ({why}); the next change or `diagnostics` restarts it",
                            server.lang
                        ),
                        None => still_checking(&rel, &who, ms),
                    },
                }
            }
            Wait::Check {
                rel,
                checker,
                generation,
                before,
                others,
            } => {
                let who = checker.program.clone();
                match checker.wait(generation, &rel, deadline) {
                    Some(Ok(after)) => {
                        let text = self.file_text(&rel).unwrap_or_default();
                        let mut out = report(&rel, &who, before, &after, &text);
                        let now = checker.all();
                        let mut changed: Vec<String> = now
                            .iter()
                            .filter(|(p, d)| *p != &rel && others.get(*p) != Some(*d))
                            .map(|(p, d)| format!("{p} ({} now)", d.len()))
                            .chain(
                                others
                                    .keys()
                                    .filter(|p| *p != &rel && !now.contains_key(*p))
                                    .map(|p| format!("{p} (0 now)")),
                            )
                            .collect();
                        changed.sort();
                        if !changed.is_empty() {
                            out.push_str(&format!(
                                "\n  problems changed in other files: {}",
                                cap_list(changed)
                            ));
                        }
                        out
                    }
                    Some(Err(why)) => format!("{rel}: no diagnostics: {why}"),
                    None => still_checking(&rel, &who, ms),
                }
            }
        }
    }

    fn others_changed(
        &self,
        rel: &str,
        before: &HashMap<String, Published>,
        after: &HashMap<String, Published>,
    ) -> Vec<String> {
        let mut changed: Vec<String> = after
            .iter()
            .filter(|(uri, p)| {
                before
                    .get(*uri)
                    .is_none_or(|b| b.items != p.items && b.seq != p.seq)
            })
            .filter_map(|(uri, p)| {
                let path = self.uri_path(uri);
                (path != rel && (before.contains_key(uri) || !p.items.is_empty()))
                    .then(|| format!("{path} ({} now)", p.items.len()))
            })
            .collect();
        changed.sort();
        cap_vec(changed)
    }

    /// A `file://` URI as a workspace-relative path (absolute outside the workspace).
    pub fn uri_path(&self, uri: &str) -> String {
        let Some(path) = url::Url::parse(uri)
            .ok()
            .and_then(|u| u.to_file_path().ok())
        else {
            return uri.to_string();
        };
        match path.strip_prefix(&self.root) {
            Ok(r) => r.to_string_lossy().into_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }

    /// The current problems of one file, fresh: the server hears the file as it is on disk and
    /// the call waits (up to the bound) for diagnostics of that version.
    pub fn diagnostics_of(&self, session: &str, rel: &str) -> String {
        let _ = session;
        let Some(lang) = self.language_of(rel) else {
            return format!(
                "{rel}: no language is known for this file's extension; [lsp.<language>] in the catalog can add one"
            );
        };
        let deadline = Instant::now() + self.wait;
        let ms = self.wait.as_millis();
        if lang.server.is_some() {
            let (server, note) = match self.server(lang) {
                Ok(s) => s,
                Err(e) => return format!("{rel}: no diagnostics: {e}"),
            };
            let Some(text) = self.file_text(rel) else {
                return format!("{rel}: cannot read it (does it exist?)");
            };
            let ext = Path::new(rel)
                .extension()
                .and_then(|e| e.to_str())
                .unwrap_or_default();
            let synced = server.sync(rel, config::language_id(ext), &text, deadline);
            let published = synced
                .and_then(|(version, seq, _)| server.wait_published(rel, version, seq, deadline));
            let body = match published {
                Some(p) => list(rel, &server.program, &p.items, &text),
                None => still_checking(rel, &server.program, ms),
            };
            return match note {
                Some(n) => format!("{n}\n{body}"),
                None => body,
            };
        }
        let Some(checker) = self.checker(rel, lang) else {
            return format!("{rel}: no diagnostics: {}", self.no_server_text(lang));
        };
        let generation = checker.request();
        match checker.wait(generation, rel, deadline) {
            Some(Ok(items)) => list(
                rel,
                &checker.program,
                &items,
                &self.file_text(rel).unwrap_or_default(),
            ),
            Some(Err(why)) => format!("{rel}: no diagnostics: {why}"),
            None => still_checking(rel, &checker.program, ms),
        }
    }

    /// The problems known under `prefix` (a directory, `""` for the workspace): open documents
    /// changed on disk are re-sent first, and waited for.
    pub fn diagnostics_under(&self, session: &str, prefix: &str) -> String {
        let under =
            |p: &str| prefix.is_empty() || p == prefix || p.starts_with(&format!("{prefix}/"));
        let changed: Vec<String> = self
            .changed_on_disk()
            .into_iter()
            .filter(|p| under(p))
            .collect();
        let mut out: Vec<String> = Vec::new();
        if !changed.is_empty()
            && let Some(r) = self.after_change(session, &changed)
        {
            out.push(format!("re-checked what changed on disk:\n{r}"));
        }
        let mut files: Vec<(String, String, Vec<Diag>)> = Vec::new();
        for s in self.live_servers() {
            for (uri, p) in s.all_published() {
                let path = self.uri_path(&uri);
                if under(&path) && !p.items.is_empty() {
                    files.push((path, s.program.clone(), p.items));
                }
            }
        }
        let checkers: Vec<Arc<Checker>> = lock(&self.checkers).values().cloned().collect();
        for c in checkers {
            for (path, items) in c.all() {
                if under(&path) && !items.is_empty() {
                    files.push((path, c.program.clone(), items));
                }
            }
        }
        files.sort_by(|a, b| a.0.cmp(&b.0));
        let servers = self.live_servers().len() + lock(&self.checkers).len();
        if files.is_empty() {
            out.push(if servers == 0 {
                format!(
                    "no language server has looked at {} yet (they start when a file is read or changed); diagnostics {{\"path\": FILE}} checks one file now",
                    if prefix.is_empty() { "this workspace" } else { prefix }
                )
            } else {
                format!(
                    "no problems known under {} in the files the servers have looked at (those read or changed in this workspace); diagnostics {{\"path\": FILE}} checks one file now",
                    if prefix.is_empty() { "the workspace" } else { prefix }
                )
            });
        }
        let mut shown = 0;
        for (path, who, items) in &files {
            if shown >= 100 {
                out.push(format!("... and more in {} files", files.len()));
                break;
            }
            let text = self.file_text(path);
            out.push(format!("{path}: {} problem(s) ({who}):", items.len()));
            for d in items.iter().take(MAX_LISTED) {
                out.push(format!("  {}", d.render(path, text.as_deref())));
                shown += 1;
            }
            if items.len() > MAX_LISTED {
                out.push(format!("  ... and {} more", items.len() - MAX_LISTED));
            }
        }
        out.join("\n")
    }

    /// Send `method` about `rel` (opened with its current text first) to its server, waiting
    /// at least [`MIN_REQUEST_WAIT`]. `params` gets `textDocument` set.
    pub fn request(
        &self,
        rel: &str,
        method: &str,
        mut params: Value,
    ) -> Result<(Value, String), LspError> {
        let (server, _) = self.open(rel)?;
        if let Some(o) = params.as_object_mut() {
            o.insert("textDocument".into(), json!({"uri": server.uri(rel)}));
        }
        let deadline = Instant::now() + self.wait.max(MIN_REQUEST_WAIT);
        let v = server.request(method, params, deadline)?;
        Ok((v, server.program.clone()))
    }

    /// A request to the server of `rel`'s language that is not about one document
    /// (`workspace/symbol`, `callHierarchy/incomingCalls`).
    pub fn request_raw(&self, rel: &str, method: &str, params: Value) -> Result<Value, LspError> {
        let (server, _) = self.open(rel)?;
        let deadline = Instant::now() + self.wait.max(MIN_REQUEST_WAIT);
        server.request(method, params, deadline)
    }

    fn open(&self, rel: &str) -> Result<(Arc<Server>, Option<String>), LspError> {
        let (server, note, version, seq) = self.open_version(rel)?;
        // A server that has not published diagnostics for this version is still loading the
        // project: its answers would be empty. Wait for them (up to the bound), then ask.
        server.wait_published(rel, version, seq, Instant::now() + self.wait);
        Ok((server, note))
    }

    fn open_version(&self, rel: &str) -> Result<(Arc<Server>, Option<String>, i64, u64), LspError> {
        let lang = self.language_of(rel).ok_or_else(|| {
            LspError::NoServer(format!(
                "no language is known for {rel}'s extension; [lsp.<language>] in the catalog can add one"
            ))
        })?;
        let (server, note) = self.server(lang)?;
        let text = self
            .file_text(rel)
            .ok_or_else(|| LspError::Io(format!("{rel}: cannot read it")))?;
        let ext = Path::new(rel)
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        let deadline = Instant::now() + self.wait.max(MIN_REQUEST_WAIT);
        let (version, seq, sent) = server
            .sync(rel, config::language_id(ext), &text, deadline)
            .ok_or_else(|| LspError::Timeout {
                lang: lang.name.clone(),
                program: server.program.clone(),
                what: "starting up".into(),
            })?;
        // Unchanged since it was sent: anything published for it counts.
        let seq = if sent { seq } else { 0 };
        Ok((server, note, version, seq))
    }

    /// A location (`Location` or `LocationLink`) of an answer.
    pub fn location(&self, v: &Value) -> Option<Location> {
        let uri = v
            .get("uri")
            .or_else(|| v.get("targetUri"))
            .and_then(Value::as_str)?;
        let range = v
            .get("range")
            .or_else(|| v.get("targetSelectionRange"))
            .or_else(|| v.get("targetRange"))?;
        let start = range.get("start")?;
        Some(Location {
            path: self.uri_path(uri),
            line: u32::try_from(start.get("line")?.as_u64()?).ok()?,
            col: u32::try_from(start.get("character")?.as_u64()?).ok()?,
        })
    }

    /// Line `line` (0-based) of `path` (workspace-relative or absolute), if readable.
    pub fn line_text(&self, path: &str, line: u32) -> Option<String> {
        let p = Path::new(path);
        let abs = if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.root.join(p)
        };
        let text = std::fs::read_to_string(abs).ok()?;
        line_of(&text, line).map(|l| l.trim_end().to_string())
    }

    /// The workspace root.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_edits_apply_from_the_end_with_utf16_columns() {
        let text = "é foo = 1\nprint(foo)\n";
        let edits = vec![
            json!({"range": {"start": {"line": 0, "character": 2}, "end": {"line": 0, "character": 5}}, "newText": "bar"}),
            json!({"range": {"start": {"line": 1, "character": 6}, "end": {"line": 1, "character": 9}}, "newText": "bar"}),
        ];
        assert_eq!(
            apply_text_edits(text, &edits).unwrap(),
            "é bar = 1\nprint(bar)\n"
        );
    }

    #[test]
    fn a_change_reports_only_what_it_did() {
        let d = |line, m: &str| Diag {
            line,
            col: 0,
            severity: 1,
            code: None,
            message: m.into(),
        };
        let before = vec![d(0, "old")];
        let after = vec![d(0, "old"), d(1, "fresh")];
        let r = report(
            "a.py",
            "srv",
            Some((before, Arc::from("x\n"))),
            &after,
            "x\ny\n",
        );
        assert!(
            r.contains("1 new problem(s)") && r.contains("a.py:2:1: error: fresh"),
            "{r}"
        );
        assert!(
            r.contains("1 problem(s) the file already had are not repeated"),
            "{r}"
        );
        assert!(!r.contains("old"), "{r}");
    }
}

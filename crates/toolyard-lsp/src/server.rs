//! One language server process: its framing threads, requests with deadlines, the documents it
//! has open and the diagnostics it published.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::LspError;
use crate::diag::Diag;
use crate::rpc;

/// How long a server may take to answer `initialize` before it counts as broken.
const INIT_TIMEOUT: Duration = Duration::from_secs(120);
/// Bytes of a server's stderr kept to explain its death.
const STDERR_TAIL: usize = 4096;

/// A document as the server last heard of it.
#[derive(Debug, Clone)]
pub(crate) struct Doc {
    pub version: i64,
    pub text: Arc<str>,
}

/// What a server published for one document.
#[derive(Debug, Clone)]
pub(crate) struct Published {
    /// The document version it is for, when the server says.
    pub version: Option<i64>,
    pub items: Vec<Diag>,
    /// When it arrived (this server's counter).
    pub seq: u64,
}

#[derive(Default)]
struct State {
    /// `None` while `initialize` runs; then the server's capabilities or why it failed.
    ready: Option<Result<Value, String>>,
    /// Why the server is gone (`None`: alive).
    dead: Option<String>,
    /// Whether it answered anything (a server that dies before is broken, not restarted).
    answered: bool,
    docs: HashMap<String, Doc>,
    published: HashMap<String, Published>,
    seq: u64,
    stderr_tail: String,
}

type Reply = Result<Value, String>;

/// A running language server.
pub struct Server {
    /// The language it serves.
    pub lang: String,
    /// Its program's name.
    pub program: String,
    root_uri: String,
    pid: i32,
    out: mpsc::Sender<Value>,
    next_id: AtomicI64,
    pending: Mutex<HashMap<i64, mpsc::Sender<Reply>>>,
    state: Mutex<State>,
    changed: Condvar,
    last_used: Mutex<Instant>,
    child: Mutex<Option<Child>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("lang", &self.lang)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Start `cmd` (stdio piped, its own process group) and initialize it in the background.
    pub fn start(
        lang: &str,
        program: &str,
        mut cmd: Command,
        root_uri: String,
        root_name: String,
    ) -> Result<Arc<Self>, LspError> {
        use std::os::unix::process::CommandExt;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| LspError::Start {
            lang: lang.into(),
            program: program.into(),
            why: e.to_string(),
        })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(LspError::Start {
                lang: lang.into(),
                program: program.into(),
                why: "its pipes are missing".into(),
            });
        };
        let pid = i32::try_from(child.id()).unwrap_or(0);
        let (out, rx) = mpsc::channel::<Value>();
        let server = Arc::new(Self {
            lang: lang.into(),
            program: program.into(),
            root_uri: root_uri.clone(),
            pid,
            out,
            next_id: AtomicI64::new(1),
            pending: Mutex::new(HashMap::new()),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            last_used: Mutex::new(Instant::now()),
            child: Mutex::new(Some(child)),
        });
        // Writes go through a thread of their own: a server that stops reading never blocks
        // a caller.
        std::thread::Builder::new()
            .name(format!("lsp-{lang}-w"))
            .spawn(move || {
                let mut stdin = stdin;
                for msg in rx {
                    if rpc::write_message(&mut stdin, &msg).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| LspError::Io(e.to_string()))?;
        let reader = Arc::downgrade(&server);
        std::thread::Builder::new()
            .name(format!("lsp-{lang}-r"))
            .spawn(move || read_loop(reader, BufReader::new(stdout)))
            .map_err(|e| LspError::Io(e.to_string()))?;
        let tail = Arc::downgrade(&server);
        std::thread::Builder::new()
            .name(format!("lsp-{lang}-e"))
            .spawn(move || stderr_loop(tail, stderr))
            .map_err(|e| LspError::Io(e.to_string()))?;
        let init = server.clone();
        std::thread::Builder::new()
            .name(format!("lsp-{lang}-init"))
            .spawn(move || init.initialize(&root_uri, &root_name))
            .map_err(|e| LspError::Io(e.to_string()))?;
        Ok(server)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn initialize(&self, root_uri: &str, root_name: &str) {
        let params = json!({
            // Not our pid: inside the sandbox `kill(pid, 0)` on it fails, and servers that watch
            // their client (typescript-language-server) take that for its death and exit. They
            // end when their stdin closes instead.
            "processId": Value::Null,
            "rootUri": root_uri,
            "rootPath": url::Url::parse(root_uri).ok().and_then(|u| u.to_file_path().ok()),
            "workspaceFolders": [{"uri": root_uri, "name": root_name}],
            "clientInfo": {"name": "toolyard"},
            "capabilities": {
                "textDocument": {
                    "synchronization": {"didSave": false, "dynamicRegistration": false},
                    "publishDiagnostics": {"versionSupport": true, "relatedInformation": false},
                    "hover": {"contentFormat": ["plaintext", "markdown"]},
                    "definition": {"linkSupport": false},
                    "implementation": {"linkSupport": false},
                    "references": {},
                    "documentSymbol": {"hierarchicalDocumentSymbolSupport": true},
                    "callHierarchy": {},
                    "rename": {"prepareSupport": true},
                },
                "workspace": {
                    "workspaceFolders": true,
                    "configuration": true,
                    "symbol": {},
                    "workspaceEdit": {"documentChanges": true},
                },
                "window": {"workDoneProgress": false},
            },
        });
        let deadline = Instant::now() + INIT_TIMEOUT;
        let result = self.raw_request("initialize", params, deadline);
        let ready = match result {
            Ok(v) => {
                self.notify("initialized", json!({}));
                Ok(v.get("capabilities").cloned().unwrap_or(Value::Null))
            }
            Err(e) => {
                self.kill();
                Err(e.to_string())
            }
        };
        self.lock().ready = Some(ready);
        self.changed.notify_all();
    }

    /// Whether the process is gone, and why.
    pub fn dead(&self) -> Option<String> {
        self.lock().dead.clone()
    }

    /// Whether it ever answered.
    pub fn answered(&self) -> bool {
        self.lock().answered
    }

    /// When it was last asked something.
    pub fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// The server's capabilities, waiting until `deadline` for `initialize`.
    pub fn capabilities(&self, deadline: Instant) -> Result<Value, LspError> {
        let mut st = self.lock();
        loop {
            if let Some(why) = &st.dead {
                return Err(self.died(why, &st.stderr_tail));
            }
            match &st.ready {
                Some(Ok(caps)) => return Ok(caps.clone()),
                Some(Err(e)) => return Err(self.died(e, &st.stderr_tail)),
                None => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(LspError::Timeout {
                    lang: self.lang.clone(),
                    program: self.program.clone(),
                    what: "starting up".into(),
                });
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn died(&self, why: &str, tail: &str) -> LspError {
        let tail = tail.trim();
        LspError::Died {
            lang: self.lang.clone(),
            program: self.program.clone(),
            why: if tail.is_empty() {
                why.to_string()
            } else {
                format!("{why}; its last words: {}", last_chars(tail, 600))
            },
        }
    }

    /// Send a notification (never blocks).
    pub fn notify(&self, method: &str, params: Value) {
        let _ = self
            .out
            .send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// A request, once the server is initialized, answered by `deadline`.
    pub fn request(
        &self,
        method: &str,
        params: Value,
        deadline: Instant,
    ) -> Result<Value, LspError> {
        self.capabilities(deadline)?;
        self.raw_request(method, params, deadline)
    }

    fn raw_request(
        &self,
        method: &str,
        params: Value,
        deadline: Instant,
    ) -> Result<Value, LspError> {
        self.touch();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        let _ = self
            .out
            .send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let wait = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(LspError::Server {
                lang: self.lang.clone(),
                program: self.program.clone(),
                method: method.into(),
                message: e,
            }),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                self.notify("$/cancelRequest", json!({"id": id}));
                Err(LspError::Timeout {
                    lang: self.lang.clone(),
                    program: self.program.clone(),
                    what: format!("answering {method}"),
                })
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let st = self.lock();
                Err(self.died(st.dead.as_deref().unwrap_or("it exited"), &st.stderr_tail))
            }
        }
    }

    /// The URI of a workspace-relative path.
    pub fn uri(&self, rel: &str) -> String {
        let mut u = self.root_uri.clone();
        if !u.ends_with('/') {
            u.push('/');
        }
        let encoded: Vec<String> = rel
            .split('/')
            .map(|seg| {
                url::form_urlencoded::byte_serialize(seg.as_bytes())
                    .collect::<String>()
                    .replace('+', "%20")
            })
            .collect();
        u.push_str(&encoded.join("/"));
        u
    }

    /// Tell the server, once it is initialized, that `rel` now holds `text` (didOpen the first time, else didChange with a
    /// new version when the text differs). Returns the version it has and the diagnostics
    /// counter before the change (what arrives after it may be for it).
    /// `None` when the server is not initialized by `deadline` (nothing may be sent before).
    pub fn sync(
        &self,
        rel: &str,
        language_id: &str,
        text: &str,
        deadline: Instant,
    ) -> Option<(i64, u64, bool)> {
        self.capabilities(deadline).ok()?;
        Some(self.sync_ready(rel, language_id, text, false))
    }

    /// Open `rel` with the text `read` gives, once the server is initialized, unless it is
    /// open already (a change got there first: its text is newer than what a read saw).
    pub fn open_if_absent(
        &self,
        rel: &str,
        language_id: &str,
        deadline: Instant,
        read: impl FnOnce() -> Option<String>,
    ) {
        if self.capabilities(deadline).is_err() || self.lock().docs.contains_key(rel) {
            return;
        }
        let Some(text) = read() else { return };
        let st = self.lock();
        if st.docs.contains_key(rel) {
            return;
        }
        drop(st);
        self.sync_ready(rel, language_id, &text, true);
    }

    fn sync_ready(
        &self,
        rel: &str,
        language_id: &str,
        text: &str,
        open_only: bool,
    ) -> (i64, u64, bool) {
        self.touch();
        let uri = self.uri(rel);
        let mut st = self.lock();
        let seq = st.seq;
        if let Some(doc) = st.docs.get_mut(rel) {
            if &*doc.text == text || open_only {
                return (doc.version, seq, false);
            }
            doc.version += 1;
            doc.text = Arc::from(text);
            let version = doc.version;
            self.notify(
                "textDocument/didChange",
                json!({"textDocument": {"uri": uri, "version": version}, "contentChanges": [{"text": text}]}),
            );
            return (version, seq, true);
        }
        st.docs.insert(
            rel.to_string(),
            Doc {
                version: 1,
                text: Arc::from(text),
            },
        );
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri, "languageId": language_id, "version": 1, "text": text}}),
        );
        (1, seq, true)
    }

    /// Tell the server of files that changed on disk without their text being sent
    /// (`workspace/didChangeWatchedFiles`; `true`: the file is there, `false`: removed). A
    /// removed file that was open is closed first and its diagnostics dropped. Nothing is sent
    /// before `initialize` is answered: the server reads the disk then.
    pub(crate) fn files_on_disk(&self, changes: &[(String, bool)]) {
        let ready = matches!(self.lock().ready, Some(Ok(_)));
        if !ready || changes.is_empty() {
            return;
        }
        let mut events = Vec::new();
        for (rel, exists) in changes {
            let uri = self.uri(rel);
            if !exists {
                let was_open = {
                    let mut st = self.lock();
                    st.published.remove(&uri);
                    st.docs.remove(rel).is_some()
                };
                if was_open {
                    self.notify(
                        "textDocument/didClose",
                        json!({"textDocument": {"uri": uri}}),
                    );
                }
            }
            // FileChangeType: 2 changed, 3 deleted.
            events.push(json!({"uri": uri, "type": if *exists { 2 } else { 3 }}));
        }
        self.notify(
            "workspace/didChangeWatchedFiles",
            json!({"changes": events}),
        );
    }

    /// The document as the server has it.
    pub(crate) fn doc(&self, rel: &str) -> Option<Doc> {
        self.lock().docs.get(rel).cloned()
    }

    /// The paths of the open documents.
    pub fn open_docs(&self) -> Vec<String> {
        self.lock().docs.keys().cloned().collect()
    }

    /// What was last published for `rel`.
    pub(crate) fn published(&self, rel: &str) -> Option<Published> {
        self.lock().published.get(&self.uri(rel)).cloned()
    }

    /// Every document's last publication, by URI.
    pub(crate) fn all_published(&self) -> HashMap<String, Published> {
        self.lock().published.clone()
    }

    /// Wait until `deadline` for diagnostics of `rel` at `version` (or, from a server that
    /// publishes no versions, any that arrived after `after_seq`).
    pub(crate) fn wait_published(
        &self,
        rel: &str,
        version: i64,
        after_seq: u64,
        deadline: Instant,
    ) -> Option<Published> {
        let uri = self.uri(rel);
        let mut st = self.lock();
        loop {
            if let Some(p) = st.published.get(&uri) {
                let fresh = match p.version {
                    Some(v) => v >= version,
                    None => p.seq > after_seq,
                };
                if fresh {
                    return Some(p.clone());
                }
            }
            if st.dead.is_some() {
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Stop it: `shutdown` and `exit` when it answers quickly, then kill its process group.
    pub fn stop(&self) {
        let deadline = Instant::now() + Duration::from_millis(500);
        if self.dead().is_none() && self.raw_request("shutdown", Value::Null, deadline).is_ok() {
            self.notify("exit", Value::Null);
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
    }

    /// Kill its process group now.
    pub fn kill(&self) {
        if self.pid > 0 {
            // SAFETY: signalling our own child's process group.
            unsafe { libc::kill(-self.pid, libc::SIGKILL) };
        }
        if let Some(mut child) = self.child.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = child.kill();
            std::thread::spawn(move || child.wait());
        }
    }

    /// Its process id (tests kill it to see it come back).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    fn on_message(&self, msg: Value) {
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_string);
        let id = msg.get("id").cloned();
        match (method, id) {
            (None, Some(id)) => {
                let Some(id) = id.as_i64() else { return };
                let reply = match msg.get("error") {
                    Some(e) => Err(e
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("error")
                        .to_string()),
                    None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
                };
                self.lock().answered = true;
                if let Some(tx) = self
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id)
                {
                    let _ = tx.send(reply);
                }
            }
            (Some(method), Some(id)) => {
                let params = msg.get("params").cloned().unwrap_or(Value::Null);
                let result = match method.as_str() {
                    "workspace/configuration" => {
                        let n = params
                            .get("items")
                            .and_then(Value::as_array)
                            .map_or(0, Vec::len);
                        json!(vec![Value::Null; n])
                    }
                    "workspace/applyEdit" => {
                        json!({"applied": false, "failureReason": "edits are applied by toolyard's tools"})
                    }
                    "workspace/workspaceFolders" => {
                        json!([{"uri": self.root_uri, "name": "workspace"}])
                    }
                    _ => Value::Null,
                };
                let _ = self
                    .out
                    .send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
            }
            (Some(method), None) if method == "textDocument/publishDiagnostics" => {
                let Some(params) = msg.get("params") else {
                    return;
                };
                let Some(uri) = params.get("uri").and_then(Value::as_str) else {
                    return;
                };
                let items = params
                    .get("diagnostics")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Diag::from_lsp).collect())
                    .unwrap_or_default();
                let mut st = self.lock();
                st.seq += 1;
                st.answered = true;
                let p = Published {
                    version: params.get("version").and_then(Value::as_i64),
                    items,
                    seq: st.seq,
                };
                st.published.insert(uri.to_string(), p);
                drop(st);
                self.changed.notify_all();
            }
            (Some(method), None) if method == "window/logMessage" => {
                let text = msg["params"]["message"].as_str().unwrap_or_default();
                tracing::debug!(lang = %self.lang, "{}", text);
            }
            _ => {}
        }
    }

    fn on_exit(&self, why: String) {
        let mut st = self.lock();
        if st.dead.is_none() {
            st.dead = Some(why);
        }
        drop(st);
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.changed.notify_all();
    }
}

fn read_loop(server: std::sync::Weak<Server>, mut r: BufReader<std::process::ChildStdout>) {
    let why = loop {
        match rpc::read_message(&mut r) {
            Ok(Some(msg)) => match server.upgrade() {
                Some(s) => s.on_message(msg),
                None => return,
            },
            Ok(None) => break "it exited".to_string(),
            Err(e) => break format!("it sent a malformed message ({e})"),
        }
    };
    if let Some(s) = server.upgrade() {
        if why != "it exited" {
            s.kill();
        }
        let status = s
            .child
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten());
        let why = match status {
            Some(st) => format!("{why} ({st})"),
            None => why,
        };
        s.on_exit(why);
    }
}

fn stderr_loop(server: std::sync::Weak<Server>, stderr: std::process::ChildStderr) {
    let mut r = BufReader::new(stderr);
    let mut line = String::new();
    loop {
        line.clear();
        match r.by_ref().take(64 * 1024).read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let Some(s) = server.upgrade() else { return };
        tracing::debug!(lang = %s.lang, "{}", line.trim_end());
        let mut st = s.lock();
        st.stderr_tail.push_str(&line);
        if st.stderr_tail.len() > STDERR_TAIL {
            st.stderr_tail = last_chars(&st.stderr_tail, STDERR_TAIL / 2).to_string();
        }
    }
}

fn last_chars(s: &str, n: usize) -> &str {
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

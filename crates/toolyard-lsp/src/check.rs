//! A check command (`cargo check --message-format=json`) run in place of a language server:
//! each change asks for a new run (a generation); one run at a time, the latest wins.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use crate::diag::{Diag, from_cargo};

#[derive(Default)]
struct State {
    requested: u64,
    done: u64,
    running: bool,
    /// Problems by workspace-relative path, from the last finished run.
    results: HashMap<String, Vec<Diag>>,
    /// Why the last run failed to produce results, if it did.
    failure: Option<String>,
}

/// The check of one project (a directory with a `Cargo.toml`).
pub struct Checker {
    /// The language.
    pub lang: String,
    /// The check's program name.
    pub program: String,
    /// The project directory, absolute.
    dir: PathBuf,
    /// The workspace root, absolute.
    root: PathBuf,
    make: Arc<dyn Fn(&Path) -> Command + Send + Sync>,
    state: Mutex<State>,
    changed: Condvar,
}

impl Checker {
    /// A checker for the project at `dir`; `make` builds the command to run there.
    pub fn new(
        lang: &str,
        program: &str,
        dir: PathBuf,
        root: PathBuf,
        make: Arc<dyn Fn(&Path) -> Command + Send + Sync>,
    ) -> Arc<Self> {
        Arc::new(Self {
            lang: lang.into(),
            program: program.into(),
            dir,
            root,
            make,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ask for a run that sees the files as they are now; returns its generation.
    pub fn request(self: &Arc<Self>) -> u64 {
        let mut st = self.lock();
        st.requested += 1;
        let generation = st.requested;
        if !st.running {
            st.running = true;
            let me = self.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("check-{}", self.lang))
                .spawn(move || me.run_loop());
            if let Err(e) = spawned {
                st.running = false;
                st.failure = Some(format!("cannot start a thread: {e}"));
            }
        }
        generation
    }

    /// The generation of the last finished run (0: none yet).
    pub fn done(&self) -> u64 {
        self.lock().done
    }

    fn run_loop(self: Arc<Self>) {
        loop {
            let generation = self.lock().requested;
            let outcome = self.run_once();
            let mut st = self.lock();
            match outcome {
                Ok(results) => {
                    st.results = results;
                    st.failure = None;
                }
                Err(why) => st.failure = Some(why),
            }
            st.done = generation;
            let again = st.requested > generation;
            if !again {
                st.running = false;
            }
            drop(st);
            self.changed.notify_all();
            if !again {
                return;
            }
        }
    }

    fn run_once(&self) -> Result<HashMap<String, Vec<Diag>>, String> {
        let out = (self.make)(&self.dir)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.program))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let found = from_cargo(&stdout);
        if found.is_empty() && !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = err.lines().rev().take(8).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(format!(
                "{} failed ({}) without a diagnostic: {}",
                self.program,
                out.status,
                tail.join("\n")
            ));
        }
        let mut results: HashMap<String, Vec<Diag>> = HashMap::new();
        for (file, d) in found {
            if let Some(rel) = self.relative(&file) {
                results.entry(rel).or_default().push(d);
            }
        }
        Ok(results)
    }

    /// A file name as the compiler gives it (relative to the cargo workspace, which may be an
    /// ancestor of the project), as a workspace-relative path.
    fn relative(&self, file: &str) -> Option<String> {
        let p = Path::new(file);
        let abs = if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.dir
                .ancestors()
                .take_while(|a| a.starts_with(&self.root))
                .map(|a| a.join(p))
                .find(|c| c.exists())?
        };
        abs.strip_prefix(&self.root)
            .ok()
            .map(|r| r.to_string_lossy().into_owned())
    }

    /// Wait until `deadline` for run `generation` to finish; then the problems of `rel`.
    pub fn wait(
        &self,
        generation: u64,
        rel: &str,
        deadline: Instant,
    ) -> Option<Result<Vec<Diag>, String>> {
        let mut st = self.lock();
        loop {
            if st.done >= generation {
                if let Some(f) = &st.failure {
                    return Some(Err(f.clone()));
                }
                return Some(Ok(st.results.get(rel).cloned().unwrap_or_default()));
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

    /// The problems of `rel` from the last finished run, if there was one.
    pub fn last(&self, rel: &str) -> Option<Vec<Diag>> {
        let st = self.lock();
        (st.done > 0 && st.failure.is_none())
            .then(|| st.results.get(rel).cloned().unwrap_or_default())
    }

    /// Every file's problems from the last finished run.
    pub fn all(&self) -> HashMap<String, Vec<Diag>> {
        self.lock().results.clone()
    }
}

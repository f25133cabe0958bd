//! `glob`: find files by path pattern (ignore + globset), newest first.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use cap_std::fs::Dir;
use ignore::DirEntry;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolyard_core::shape::head_tail;
use toolyard_core::{Annotations, ToolContext, ToolError, ToolInfo, ToolResult, TypedTool};
use toolyard_workspace::{RelPath, Workspace};

use super::Vocab;
use super::parallel::{self, Visit};
use super::pattern::PathGlob;
use super::walk::{self, HiddenProbe, HiddenSkipped};
use crate::ToolEnv;

/// Most paths `glob` shows.
pub const DEFAULT_GLOB_LIMIT: usize = 100;

const DESCRIPTION: &str = "Find files whose path matches a glob pattern, newest (last modified) \
first. A pattern without `/` matches file names at any depth (`*.rs` = `**/*.rs`, like fd and \
.gitignore); a pattern with `/` is anchored at `path` (`src/*.rs` only directly in src, \
`src/**/mod.rs` at any depth below it). `*` stays within one directory, `**` crosses them, \
`{a,b}` and `[a-z]` work; case-sensitive. Returns files only (not directories or symlinks). \
Honours .gitignore; skips hidden files (and names those that would match) unless `hidden` is true or the \
pattern names a hidden component (`.github/**`); always skips .git, node_modules, __pycache__ \
and cargo target dirs. Shows at most 100 paths and says how many more matched.";

/// Arguments of `glob`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobArgs {
    /// Glob pattern, e.g. `**/*.rs`, `*.toml` (any depth) or `src/**/mod.rs` (anchored at `path`).
    pub pattern: String,
    /// Directory to search in, relative to the working directory (default: `.`).
    #[serde(default)]
    pub path: Option<String>,
    /// Include hidden files and directories (names starting with `.`, like .github or .env;
    /// default false). .git and node_modules stay skipped.
    #[serde(default)]
    pub hidden: bool,
}

/// One glob search, independent of any dialect.
#[derive(Debug, Clone)]
pub struct GlobQuery {
    /// The glob pattern.
    pub pattern: String,
    /// The directory searched (already resolved beneath the root).
    pub root: RelPath,
    /// Most paths returned (the newest), or `None` for all of them.
    pub limit: Option<usize>,
    /// Include hidden entries (a pattern naming a hidden component includes them anyway).
    pub hidden: bool,
    /// Match the pattern whatever the case of the paths.
    pub case_insensitive: bool,
    /// Do not leave out what .gitignore (and git's exclude files) ignore.
    pub no_git_ignore: bool,
}

/// One file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobHit {
    /// Workspace-relative path.
    pub path: String,
    /// Last modification time (the epoch when unknown).
    pub modified: SystemTime,
    /// Size in bytes.
    pub size: u64,
}

/// What a glob search found.
#[derive(Debug, Clone, Default)]
pub struct GlobOutcome {
    /// The files returned, newest first (ties by path).
    pub hits: Vec<GlobHit>,
    /// Files that matched, returned or not.
    pub total: u64,
    /// The hidden files skipped that would have matched.
    pub hidden: HiddenSkipped,
}

/// Find the files beneath `query.root` matching `query.pattern`, newest first.
pub fn find(
    ws: &Workspace,
    query: &GlobQuery,
    cancel: &CancellationToken,
) -> Result<GlobOutcome, ToolError> {
    let started = Instant::now();
    let glob = PathGlob::with_case(&query.pattern, ws, &query.root, query.case_insensitive)?;
    let meta = ws
        .metadata(&query.root)?
        .ok_or_else(|| ToolError::FileNotFound(query.root.as_path().to_path_buf()))?;
    if !meta.is_dir() {
        return Err(ToolError::InvalidArguments(format!(
            "{} is a file, not a directory; give the directory to search in `path`",
            query.root
        )));
    }
    // Start the walk at the pattern's literal directories (`src/**/x` walks only `src/`) when
    // they are a plain directory; a symlink there is not followed, so walk from the root then.
    let mut walk_root = query.root.clone();
    if let Some(prefix) = &glob.literal_prefix {
        let mut candidate = query.root.clone();
        for part in prefix.split('/') {
            candidate = candidate.join(part);
        }
        match ws.dir().symlink_metadata(candidate.as_path()) {
            Ok(m) if m.is_dir() => walk_root = candidate,
            Ok(_) => {}
            Err(_) => return Ok(GlobOutcome::default()),
        }
    }
    let search_prefix = if query.root.is_root() {
        ""
    } else {
        query.root.as_str()
    };
    // Hidden files are walked only to say which would have matched, unless asked for.
    let probe = (!(query.hidden || glob.wants_hidden)).then(|| Arc::new(HiddenProbe::default()));
    let shared = Shared {
        ws,
        ws_root: ws.root().as_os_str().as_encoded_bytes(),
        search_prefix: search_prefix.as_bytes(),
        glob: &glob,
        limit: query.limit,
        probe: probe.as_deref(),
    };
    let mut walker = match &probe {
        None => walk::builder(ws, &ws.absolute(&walk_root), true),
        Some(p) => walk::builder_probing_hidden(ws, &ws.absolute(&walk_root), p.clone()),
    };
    if query.no_git_ignore {
        walker
            .git_ignore(false)
            .git_exclude(false)
            .git_global(false);
    }
    let mut collected = parallel::walk(walker.build_parallel(), cancel, || Visitor {
        shared: &shared,
        local: Collected::default(),
        parent: None,
    });
    if cancel.is_cancelled() {
        return Err(ToolError::Cancelled);
    }
    collected.hits.sort_unstable_by(newest_first);
    if let Some(limit) = query.limit {
        collected.hits.truncate(limit);
    }
    tracing::debug!(
        pattern = %query.pattern,
        root = %query.root,
        total = collected.total,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "glob"
    );
    Ok(GlobOutcome {
        hits: collected.hits,
        total: collected.total,
        hidden: probe.map(|p| p.finish()).unwrap_or_default(),
    })
}

fn newest_first(a: &GlobHit, b: &GlobHit) -> std::cmp::Ordering {
    b.modified
        .cmp(&a.modified)
        .then_with(|| a.path.cmp(&b.path))
}

struct Shared<'a> {
    ws: &'a Workspace,
    ws_root: &'a [u8],
    search_prefix: &'a [u8],
    glob: &'a PathGlob,
    limit: Option<usize>,
    /// Set when hidden files are left out: what would have matched among them.
    probe: Option<&'a HiddenProbe>,
}

#[derive(Default)]
struct Collected {
    hits: Vec<GlobHit>,
    total: u64,
}

impl Collected {
    /// Keep only the newest `limit` hits once there are many: the rest can never be shown.
    fn trim(&mut self, limit: Option<usize>) {
        if let Some(limit) = limit
            && self.hits.len() > 2 * limit + 64
        {
            self.hits.sort_unstable_by(newest_first);
            self.hits.truncate(limit);
        }
    }
}

struct Visitor<'s, 'a> {
    shared: &'s Shared<'a>,
    local: Collected,
    /// The last parent directory, opened beneath the root (a thread mostly visits the files
    /// of one directory in a row, so this costs one open per directory).
    parent: Option<(Vec<u8>, Option<Dir>)>,
}

impl Visitor<'_, '_> {
    /// `parent` (workspace-relative) opened beneath the root, cached per thread.
    fn parent_dir(&mut self, parent: &[u8]) -> Option<&Dir> {
        if self
            .parent
            .as_ref()
            .is_none_or(|(p, _)| p.as_slice() != parent)
        {
            let dir = if parent.is_empty() {
                self.shared.ws.dir().try_clone().ok()
            } else {
                self.shared.ws.dir().open_dir(walk::as_path(parent)).ok()
            };
            self.parent = Some((parent.to_vec(), dir));
        }
        self.parent.as_ref().and_then(|(_, d)| d.as_ref())
    }

    fn consider(&mut self, entry: &DirEntry) {
        let Some(walk::Found { rel, below, hidden }) = walk::found(
            entry,
            self.shared.ws_root,
            self.shared.search_prefix,
            self.shared.probe,
        ) else {
            return;
        };
        if !self.shared.glob.is_match(below) {
            return;
        }
        // The walker lists directories by their absolute paths, so a directory swapped for a
        // symlink mid-walk could show it names from outside. Every hit is therefore lstat-ed
        // through its parent directory opened beneath the root (openat2 RESOLVE_BENEATH): a
        // name from outside does not resolve there and is dropped. The same call gives the
        // mtime, so the check costs one open per directory.
        let (parent, name) = match rel.iter().rposition(|&b| b == b'/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (&rel[..0], rel),
        };
        let Some(meta) = self
            .parent_dir(parent)
            .and_then(|d| d.symlink_metadata(walk::as_path(name)).ok())
            .filter(|m| m.is_file())
        else {
            return;
        };
        if let Some(probe) = hidden {
            // Not a hit: only named in the note (and checked beneath the root like a hit).
            probe.matched(rel);
            return;
        }
        let modified = meta.modified().map_or(UNIX_EPOCH, |t| t.into_std());
        let size = meta.len();
        self.local.total += 1;
        self.local.hits.push(GlobHit {
            path: walk::display(rel),
            modified,
            size,
        });
        self.local.trim(self.shared.limit);
    }
}

impl Visit for Visitor<'_, '_> {
    type Total = Collected;

    fn visit(&mut self, entry: &DirEntry) {
        self.consider(entry);
    }

    fn merge_into(&mut self, merged: &mut Collected) {
        merged.total += self.local.total;
        merged.hits.append(&mut self.local.hits);
        merged.trim(self.shared.limit);
    }
}

/// Run a search engine on the blocking pool with a token that stops it at the call's time limit
/// (reported as `Timeout`), when the call is cancelled, and when the call itself is dropped (a
/// caller's own bound), so no search keeps a thread busy after its call is over.
pub(super) async fn bounded<T, F>(ctx: &ToolContext, search: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce(&CancellationToken) -> Result<T, ToolError> + Send + 'static,
{
    let limit = ctx.timeout;
    let stop = ctx.cancel.child_token();
    let _stop_when_dropped = stop.clone().drop_guard();
    let timer = if limit.is_zero() {
        stop.cancel();
        None
    } else {
        let stop = stop.clone();
        Some(tokio::spawn(async move {
            tokio::time::sleep(limit).await;
            stop.cancel();
        }))
    };
    let inner = stop.clone();
    let result = super::blocking(move || search(&inner)).await;
    if let Some(timer) = timer {
        timer.abort();
    }
    match result {
        Err(ToolError::Cancelled) if !ctx.cancel.is_cancelled() => Err(ToolError::Timeout {
            ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
        }),
        other => other,
    }
}

/// The `glob` tool (loopr dialect), and the engine of dialects' globs.
pub struct GlobTool {
    env: Arc<ToolEnv>,
    vocab: Vocab,
}

impl GlobTool {
    /// A `glob` over `env`'s workspace.
    pub fn new(env: Arc<ToolEnv>) -> Self {
        Self {
            env,
            vocab: Vocab::LOOPR_GLOB,
        }
    }

    /// The same, its hints in a dialect's words (`vocab`).
    pub fn speaking(env: Arc<ToolEnv>, vocab: Vocab) -> Self {
        Self { env, vocab }
    }
}

#[async_trait]
impl TypedTool for GlobTool {
    type Args = GlobArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new("glob", DESCRIPTION, Annotations::READ_ONLY)
    }

    async fn run(&self, args: GlobArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        glob_result(&self.env, ctx, args, false, false, &self.vocab).await
    }
}

/// What the `glob` tool answers for `args`, matching case-insensitively or not leaving out
/// what .gitignore ignores when asked (dialects whose glob has those switches), its hints in
/// `vocab`'s words.
pub async fn glob_result(
    env: &Arc<ToolEnv>,
    ctx: &ToolContext,
    args: GlobArgs,
    case_insensitive: bool,
    no_git_ignore: bool,
    vocab: &Vocab,
) -> Result<ToolResult, ToolError> {
    let path = args.path.as_deref().unwrap_or(".");
    let root = env.workspace.locate(path, &ctx.cwd)?;
    if env.workspace.metadata(&root)?.is_none() {
        return Err(ToolError::FileNotFound(path.into()));
    }
    let query = GlobQuery {
        pattern: args.pattern.clone(),
        root: root.clone(),
        limit: Some(DEFAULT_GLOB_LIMIT),
        hidden: args.hidden,
        case_insensitive,
        no_git_ignore,
    };
    let walker_env = env.clone();
    let outcome = bounded(ctx, move |stop| find(&walker_env.workspace, &query, stop)).await?;
    let hidden_note = walk::hidden_note(&outcome.hidden, vocab.hidden);
    let output = if outcome.hits.is_empty() {
        let mut text = format!(
            "No files match `{}` in {}.\n",
            args.pattern,
            walk::place(&root)
        );
        text.push_str(hidden_note.as_deref().unwrap_or_default());
        text
    } else {
        let mut text = String::new();
        for h in &outcome.hits {
            text.push_str(&h.path);
            text.push('\n');
        }
        let more = outcome.total.saturating_sub(outcome.hits.len() as u64);
        if more > 0 {
            text.push_str(&format!(
                "[{more} more files match ({} in all); {}]\n",
                outcome.total, vocab.narrow_files
            ));
        }
        text.push_str(hidden_note.as_deref().unwrap_or_default());
        let budget = super::output_budget(env, "glob", ctx.max_output_bytes);
        head_tail(&text, budget, Some(vocab.narrow_files)).text
    };
    // The paths are the output already; data adds only what a program needs beside them.
    let data = json!({
        "paths": outcome.hits.iter().map(|h| h.path.as_str()).collect::<Vec<_>>(),
        "total": outcome.total,
        "truncated": outcome.total > outcome.hits.len() as u64,
        "hidden_skipped": outcome.hidden.count,
        "hidden_matching": outcome.hidden.names,
    });
    Ok(ToolResult::ok(output).with_data(data))
}

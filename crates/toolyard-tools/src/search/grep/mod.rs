//! `grep`: ripgrep's engine in process (grep-regex, grep-searcher, the `ignore` parallel walker).

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{
    BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch,
};
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

mod render;
mod visit;

use render::{footer, select, select_files};
pub use render::{per_file_table, render};
use visit::{Collected, LineSink, Shared, Stoppable, Visitor, file_types};

/// Characters of one line shown before it is cut.
pub const MAX_LINE_CHARS: usize = 500;
/// Most context lines before and after a match.
const MAX_CONTEXT: usize = 20;
/// The longest regex accepted, in bytes (64 KiB).
pub const MAX_REGEX_BYTES: usize = 64 * 1024;
/// Most memory a compiled regex may take (a short pattern such as `\w{5000}` compiles large).
const REGEX_SIZE_LIMIT: usize = 16 << 20;
/// Most memory each search thread's lazy DFA may take (grep-regex's default is 1000 MiB).
const DFA_SIZE_LIMIT: usize = 32 << 20;

const DESCRIPTION: &str = "Search file contents with a regular expression (ripgrep's engine, \
in process). Output is `path:line:text` for matches and `path-line-text` for context lines, \
with `--` between groups, sorted by path then line. Smart case: an all-lowercase pattern \
matches case-insensitively, any uppercase letter makes it case-sensitive (prefix `(?-i)` to \
force case-sensitivity, `(?i)` to force insensitivity). Rust regex syntax (escape `(`, `.`, \
`{` to match them literally). Honours .gitignore; skips hidden files (and names those that \
would have matched) unless `hidden` is true or `path` or `file_pattern` names one; skips \
binary files, .git, node_modules, __pycache__ and cargo target dirs; never follows symlinks. \
`path` may be a directory or a single file. Shows about 50 files / 200 matching lines, then \
says how many more there are and which files hold the most; lines over 500 characters are cut. \
`output_mode`: `files_with_matches` lists only paths, `count` gives `path:N`; `head_limit` \
caps the entries shown. `-i` ignores case; `type` limits to ripgrep file types (`rust`, `py`); \
`multiline` lets a match span lines.";

/// What `grep` shows: the matching lines (default), only the files, or counts per file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    /// `path:line:text` for each matching line (and context lines).
    #[default]
    Content,
    /// One path per file that has a match.
    FilesWithMatches,
    /// `path:N`, the matching lines in each file.
    Count,
}

/// Files listed by `files_with_matches` and `count` when no `head_limit` is given.
pub const DEFAULT_FILES_LISTED: usize = 200;

/// Arguments of `grep`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepArgs {
    /// Regular expression to search for (Rust regex syntax; smart case).
    pub pattern: String,
    /// File or directory to search, relative to the working directory (default: `.`).
    #[serde(default)]
    pub path: Option<String>,
    /// Only search files whose path matches this glob, e.g. `*.rs` (any depth) or `src/**/*.ts`.
    #[serde(default)]
    pub file_pattern: Option<String>,
    /// Lines of context to show before and after each match (0-20, default 0).
    #[serde(default)]
    pub context: Option<usize>,
    /// Include hidden files and directories (names starting with `.`, like .github or .env;
    /// default false). .git and node_modules stay skipped.
    #[serde(default)]
    pub hidden: bool,
    /// `content` (matching lines, the default), `files_with_matches` (paths only) or `count`
    /// (matching lines per file).
    #[serde(default)]
    pub output_mode: Option<OutputMode>,
    /// Show only the first N entries: matching lines for `content` (default 200), files for
    /// `files_with_matches` and `count` (default 200).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub head_limit: Option<usize>,
    /// Case-insensitive search (overrides smart case).
    #[serde(default, rename = "-i")]
    pub dash_i: bool,
    /// Same as `-i`: case-insensitive search.
    #[serde(default)]
    pub case_insensitive: bool,
    /// Only search files of this ripgrep file type, e.g. `rust`, `py`, `js`, `ts`, `go`, `md`
    /// (several: `rust,toml`). Faster than file_pattern for standard types.
    #[serde(default, rename = "type")]
    pub file_type: Option<String>,
    /// Let the pattern span lines: `.` also matches a newline and `\n` may appear in it.
    #[serde(default)]
    pub multiline: bool,
}

/// How of the result to keep; `None` in [`GrepQuery::limits`] keeps everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrepLimits {
    /// Most files shown.
    pub max_files: usize,
    /// Most matching lines shown.
    pub max_lines: usize,
}

impl Default for GrepLimits {
    fn default() -> Self {
        Self {
            max_files: 50,
            max_lines: 200,
        }
    }
}

/// One grep search, independent of any dialect.
#[derive(Debug, Clone)]
pub struct GrepQuery {
    /// The regular expression (smart case).
    pub pattern: String,
    /// The file or directory to search (already resolved beneath the root).
    pub root: RelPath,
    /// A glob the searched files' paths (relative to `root`) must match.
    pub file_pattern: Option<String>,
    /// Context lines before and after each match.
    pub context: usize,
    /// The cap on what is kept, or `None` for everything.
    pub limits: Option<GrepLimits>,
    /// Include hidden entries (a file pattern naming a hidden component includes them anyway).
    pub hidden: bool,
    /// Match case-insensitively (otherwise smart case).
    pub case_insensitive: bool,
    /// Only files of these ripgrep types (comma-separated names), if given.
    pub file_type: Option<String>,
    /// Matches may span lines (`.` matches a newline too).
    pub multiline: bool,
    /// Whether the lines themselves are wanted (`false`: only files and counts are kept).
    pub keep_lines: bool,
}

/// One line of grep output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrepLine {
    /// 1-based line number.
    pub number: u64,
    /// The line without its terminator, cut at [`MAX_LINE_CHARS`].
    pub text: String,
    /// A match (`true`) or a context line.
    pub is_match: bool,
    /// A `--` gap precedes this line (non-contiguous context groups).
    pub gap_before: bool,
}

/// The lines shown for one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMatches {
    /// Workspace-relative path.
    pub path: String,
    /// Matching (and context) lines, in order.
    pub lines: Vec<GrepLine>,
    /// Matching lines in the whole file (shown or not).
    pub match_count: u64,
}

/// What a search found.
#[derive(Debug, Clone, Default)]
pub struct GrepOutcome {
    /// The files shown, sorted by path, each with its lines (cut to the limits).
    pub files: Vec<FileMatches>,
    /// Files with at least one match.
    pub total_files: u64,
    /// Matching lines in all files.
    pub total_matches: u64,
    /// Files searched.
    pub searched_files: u64,
    /// The hidden files skipped that would have matched.
    pub hidden: HiddenSkipped,
    /// The files with the most matching lines, most first (ties by path), at most
    /// [`TOP_FILES`]: where the matches are when not all are shown.
    pub top_files: Vec<(String, u64)>,
}

/// Files named in the table of an overflowing search (the rest are summed).
pub const TOP_FILES: usize = 10;

impl GrepOutcome {
    /// Matching lines shown.
    pub fn shown_matches(&self) -> u64 {
        self.files
            .iter()
            .flat_map(|f| &f.lines)
            .filter(|l| l.is_match)
            .count() as u64
    }

    /// Whether some matches are not shown.
    pub fn truncated(&self) -> bool {
        self.shown_matches() < self.total_matches
    }
}

/// Compile `pattern` as grep does (smart case, one line at a time); a syntax error says where.
/// Patterns over [`MAX_REGEX_BYTES`], and regexes that compile too large, are refused.
pub fn matcher(pattern: &str) -> Result<RegexMatcher, ToolError> {
    matcher_with(pattern, false, false)
}

/// Compile `pattern` case-insensitively if asked (else smart case), and for matches spanning
/// lines if `multiline` (then `.` matches a newline too, as `rg -U --multiline-dotall`).
pub fn matcher_with(
    pattern: &str,
    case_insensitive: bool,
    multiline: bool,
) -> Result<RegexMatcher, ToolError> {
    if pattern.len() > MAX_REGEX_BYTES {
        return Err(ToolError::InvalidArguments(format!(
            "grep: `pattern` is {} bytes; regexes are limited to {MAX_REGEX_BYTES} bytes (64 KiB). \
             Search for a shorter, distinctive part, or run several searches",
            pattern.len()
        )));
    }
    let mut b = RegexMatcherBuilder::new();
    b.case_smart(!case_insensitive)
        .case_insensitive(case_insensitive);
    if multiline {
        b.multi_line(true).dot_matches_new_line(true);
    } else {
        // Lets the matcher search whole buffers for candidate lines (ripgrep's fast path).
        b.line_terminator(Some(b'\n'));
    }
    b.size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(DFA_SIZE_LIMIT)
        .build(pattern)
        .map_err(|e| {
            let msg = e.to_string();
            if msg.starts_with("compiled regex exceeds size limit") {
                ToolError::InvalidArguments(format!(
                    "grep: `pattern` {} compiles to a regex too large (over the {} MiB limit); \
                     simplify it: fewer or smaller repetitions (`{{n}}`), ASCII classes such as \
                     `[0-9A-Za-z_]` instead of Unicode ones like `\\w`, or several simpler searches",
                    quote(pattern),
                    REGEX_SIZE_LIMIT >> 20
                ))
            } else if !multiline && msg.contains("not allowed") && pattern.contains("\\n") {
                ToolError::InvalidArguments(format!(
                    "grep: `pattern` {} contains `\\n`, which only matches with \
                     `multiline: true` (a match may then span lines)",
                    quote(pattern)
                ))
            } else {
                ToolError::InvalidArguments(format!("grep: invalid regex `{pattern}`: {e}"))
            }
        })
}

/// `pattern` in backticks, cut when long (an error message need not repeat kilobytes).
fn quote(pattern: &str) -> String {
    const SHOWN: usize = 80;
    match pattern.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("`{}`... ({} bytes)", &pattern[..end], pattern.len()),
        None => format!("`{pattern}`"),
    }
}

/// Search beneath the workspace as `query` says; stops early (with what it has) on `cancel`.
pub fn search(
    ws: &Workspace,
    query: &GrepQuery,
    cancel: &CancellationToken,
) -> Result<GrepOutcome, ToolError> {
    let started = Instant::now();
    let matcher = matcher_with(&query.pattern, query.case_insensitive, query.multiline)?;
    let types = file_types(query.file_type.as_deref())?;
    let file_glob = match &query.file_pattern {
        Some(p) if !p.trim().is_empty() => {
            Some(PathGlob::for_argument("file_pattern", p, ws, &query.root)?)
        }
        _ => None,
    };
    let root_meta = ws
        .metadata(&query.root)?
        .ok_or_else(|| ToolError::FileNotFound(query.root.as_path().to_path_buf()))?;
    let root_abs = ws.absolute(&query.root);
    let ws_root = ws.root().as_os_str().as_encoded_bytes();
    let search_prefix = if query.root.is_root() {
        ""
    } else {
        query.root.as_str()
    };
    // Hidden files are searched only to say which would have matched, unless asked for.
    let probe = (!(query.hidden || file_glob.as_ref().is_some_and(|g| g.wants_hidden)))
        .then(|| Arc::new(HiddenProbe::default()));
    let mut walker = match &probe {
        None => walk::builder(ws, &root_abs, true),
        Some(p) => walk::builder_probing_hidden(ws, &root_abs, p.clone()),
    };
    if let Some(types) = types {
        walker.types(types);
    }
    let walker = walker.build_parallel();
    let shared = Shared {
        ws,
        ws_root,
        search_prefix: search_prefix.as_bytes(),
        // A single file named explicitly is searched whatever the file pattern says.
        file_glob: file_glob.as_ref().filter(|_| root_meta.is_dir()),
        matcher: &matcher,
        context: query.context.min(MAX_CONTEXT),
        limits: query.limits,
        multiline: query.multiline,
        keep_lines: query.keep_lines,
        cancel,
        probe: probe.as_deref(),
    };
    let collected = parallel::walk(walker, cancel, || Visitor::new(&shared));
    if cancel.is_cancelled() {
        return Err(ToolError::Cancelled);
    }
    let mut outcome = if query.keep_lines {
        select(collected, query.limits, query.context.min(MAX_CONTEXT))
    } else {
        select_files(collected, query.limits)
    };
    outcome.hidden = probe.map(|p| p.finish()).unwrap_or_default();
    tracing::debug!(
        pattern = %query.pattern,
        root = %query.root,
        files = outcome.total_files,
        matches = outcome.total_matches,
        searched = outcome.searched_files,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "grep"
    );
    Ok(outcome)
}

/// Search one saved command output (see [`super::saved`]) as `query` says (its root, file
/// pattern and type do not apply): its lines are shown under the name the call gave it.
pub fn search_saved(
    saved: super::saved::SavedOutput,
    query: &GrepQuery,
    cancel: &CancellationToken,
) -> Result<GrepOutcome, ToolError> {
    let matcher = matcher_with(&query.pattern, query.case_insensitive, query.multiline)?;
    let context = query.context.min(MAX_CONTEXT);
    let mut b = SearcherBuilder::new();
    b.line_number(true)
        // A command's output may hold a NUL: searched on, as ripgrep does a file it is named.
        .binary_detection(BinaryDetection::convert(b'\x00'))
        .multi_line(query.multiline)
        .before_context(context)
        .after_context(context);
    let keep = if query.keep_lines {
        query.limits.map_or(u64::MAX, |l| l.max_lines as u64)
    } else {
        0
    };
    let mut sink = LineSink::new(keep);
    let reader = Stoppable {
        inner: saved.file,
        cancel,
    };
    b.build()
        .search_reader(&matcher, reader, &mut sink)
        .map_err(|e| ToolError::Io(format!("searching {}: {e}", saved.shown)))?;
    if cancel.is_cancelled() {
        return Err(ToolError::Cancelled);
    }
    let mut c = Collected {
        searched: 1,
        ..Collected::default()
    };
    if sink.matches > 0 {
        c.total_files = 1;
        c.total_matches = sink.matches;
        c.rank(sink.matches, &saved.shown);
        c.files.push(FileMatches {
            path: saved.shown.clone(),
            lines: sink.lines,
            match_count: sink.matches,
        });
    }
    Ok(if query.keep_lines {
        select(c, query.limits, context)
    } else {
        select_files(c, query.limits)
    })
}

/// The `grep` tool (loopr dialect), and the engine of every dialect's grep.
pub struct GrepTool {
    env: Arc<ToolEnv>,
    vocab: Vocab,
}

impl GrepTool {
    /// A `grep` over `env`'s workspace.
    pub fn new(env: Arc<ToolEnv>) -> Self {
        Self {
            env,
            vocab: Vocab::LOOPR_GREP,
        }
    }

    /// The same, its hints in a dialect's words (`vocab`).
    pub fn speaking(env: Arc<ToolEnv>, vocab: Vocab) -> Self {
        Self { env, vocab }
    }
}

#[async_trait]
impl TypedTool for GrepTool {
    type Args = GrepArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new("grep", DESCRIPTION, Annotations::READ_ONLY)
    }

    async fn run(&self, args: GrepArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        if args.pattern.is_empty() {
            return Err(ToolError::InvalidArguments(
                "grep: `pattern` is empty; give a regular expression".into(),
            ));
        }
        let path = args.path.as_deref().unwrap_or(".");
        // A saved command output (the path a cut output named, or `output:<id>`) is searched
        // where it is; anything else is a workspace path.
        let saved = super::saved::open(&self.env, path)?;
        let root = match &saved {
            Some(_) => RelPath::root(),
            None => self.env.workspace.locate(path, &ctx.cwd)?,
        };
        if saved.is_none() && self.env.workspace.metadata(&root)?.is_none() {
            return Err(ToolError::FileNotFound(path.into()));
        }
        let place = match &saved {
            Some(s) => s.shown.clone(),
            None => walk::place(&root),
        };
        let context = args.context.unwrap_or(0).min(MAX_CONTEXT);
        let mode = args.output_mode.unwrap_or_default();
        if args.head_limit == Some(0) {
            return Err(ToolError::InvalidArguments(
                "grep: `head_limit` is 0; give 1 or more (or leave it out for the default)".into(),
            ));
        }
        let limits = match (mode, args.head_limit) {
            (OutputMode::Content, None) => GrepLimits::default(),
            (OutputMode::Content, Some(n)) => GrepLimits {
                max_files: n,
                max_lines: n,
            },
            (_, n) => GrepLimits {
                max_files: n.unwrap_or(DEFAULT_FILES_LISTED),
                max_lines: 0,
            },
        };
        let query = GrepQuery {
            pattern: args.pattern.clone(),
            root: root.clone(),
            file_pattern: args.file_pattern.clone(),
            context,
            limits: Some(limits),
            hidden: args.hidden,
            case_insensitive: args.dash_i || args.case_insensitive,
            file_type: args.file_type.clone(),
            multiline: args.multiline,
            keep_lines: mode == OutputMode::Content,
        };
        let env = self.env.clone();
        let outcome = super::glob::bounded(ctx, move |stop| match saved {
            Some(saved) => search_saved(saved, &query, stop),
            None => search(&env.workspace, &query, stop),
        })
        .await?;
        let budget = super::output_budget(&self.env, "grep", ctx.max_output_bytes);
        let hidden_note = walk::hidden_note(&outcome.hidden, self.vocab.hidden);
        let output = if outcome.total_matches == 0 {
            let mut filter = String::new();
            if let Some(p) = args.file_pattern.as_deref() {
                filter.push_str(&format!(" (files matching `{p}`)"));
            }
            if let Some(t) = args.file_type.as_deref() {
                filter.push_str(&format!(" (files of type `{t}`)"));
            }
            let mut text = format!(
                "No matches for `{}` in {place}{filter} ({} files searched).\n",
                args.pattern, outcome.searched_files
            );
            text.push_str(hidden_note.as_deref().unwrap_or_default());
            text
        } else {
            let (mut text, foot) = match mode {
                OutputMode::Content => (render(&outcome, context), footer(&outcome, &self.vocab)),
                OutputMode::FilesWithMatches => (
                    outcome
                        .files
                        .iter()
                        .map(|f| format!("{}\n", f.path))
                        .collect(),
                    files_footer(&outcome, &self.vocab),
                ),
                OutputMode::Count => (
                    outcome
                        .files
                        .iter()
                        .map(|f| format!("{}:{}\n", f.path, f.match_count))
                        .collect(),
                    files_footer(&outcome, &self.vocab),
                ),
            };
            if let Some(f) = foot {
                text.push_str(&f);
                text.push('\n');
            }
            text.push_str(hidden_note.as_deref().unwrap_or_default());
            head_tail(&text, budget, Some(self.vocab.narrow_files)).text
        };
        // The lines are the output already; data keeps the counts and which files matched.
        let files: Vec<_> = outcome
            .files
            .iter()
            .map(|f| json!({"path": f.path, "matches": f.match_count}))
            .collect();
        let truncated = match mode {
            OutputMode::Content => outcome.truncated(),
            _ => (outcome.files.len() as u64) < outcome.total_files,
        };
        let data = json!({
            "files": files,
            "total_matches": outcome.total_matches,
            "total_files": outcome.total_files,
            "searched_files": outcome.searched_files,
            "truncated": truncated,
            "hidden_skipped": outcome.hidden.count,
            "hidden_matching": outcome.hidden.names,
            "top_files": outcome
                .top_files
                .iter()
                .map(|(p, n)| json!({"path": p, "matches": n}))
                .collect::<Vec<_>>(),
        });
        Ok(ToolResult::ok(output).with_data(data))
    }
}

/// The footer of `files_with_matches` and `count` when some files are not listed, with where
/// the matches are.
fn files_footer(outcome: &GrepOutcome, vocab: &Vocab) -> Option<String> {
    let shown = outcome.files.len() as u64;
    (shown < outcome.total_files).then(|| {
        let mut text = format!(
            "[{} more files not shown ({} matches in {} files in all); {}]",
            outcome.total_files - shown,
            outcome.total_matches,
            outcome.total_files,
            vocab.narrow_files
        );
        if let Some(table) = per_file_table(outcome) {
            text.push('\n');
            text.push_str(&table);
        }
        text
    })
}

#[cfg(test)]
mod tests {
    use super::render::cut_after_matches;
    use super::visit::line_text;
    use super::*;

    #[test]
    fn long_lines_are_cut_on_a_char_boundary() {
        let line = "é".repeat(600);
        let t = line_text(line.as_bytes());
        assert!(t.starts_with(&"é".repeat(500)));
        assert!(t.ends_with("[... 100 more characters cut]"));
        assert_eq!(line_text(b"abc\r\n"), "abc");
    }

    #[test]
    fn bad_regex_says_where() {
        let e = matcher("foo(bar").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("unclosed group"), "{msg}");
        assert!(msg.contains('^'), "{msg}");
    }

    #[test]
    fn a_file_search_stops_within_a_buffer_once_cancelled() {
        struct CancelAtFirstMatch<'a>(&'a CancellationToken, u64);
        impl Sink for CancelAtFirstMatch<'_> {
            type Error = std::io::Error;
            fn matched(&mut self, _: &Searcher, _: &SinkMatch<'_>) -> Result<bool, Self::Error> {
                self.1 += 1;
                self.0.cancel();
                Ok(true)
            }
        }
        let lines = 1u64 << 20;
        let data = "needle\n".repeat(lines as usize);
        let cancel = CancellationToken::new();
        let mut sink = CancelAtFirstMatch(&cancel, 0);
        let reader = Stoppable {
            inner: data.as_bytes(),
            cancel: &cancel,
        };
        SearcherBuilder::new()
            .build()
            .search_reader(matcher("needle").unwrap(), reader, &mut sink)
            .unwrap();
        // What the searcher had buffered is searched; nothing more is read.
        assert!(sink.1 < lines / 4, "{} of {lines} lines searched", sink.1);
    }

    #[test]
    fn cut_keeps_trailing_context_of_the_last_match() {
        let l = |n, m, g| GrepLine {
            number: n,
            text: String::new(),
            is_match: m,
            gap_before: g,
        };
        let mut lines = vec![
            l(1, true, false),
            l(2, false, false),
            l(9, false, true),
            l(10, true, false),
        ];
        cut_after_matches(&mut lines, 1, 1);
        assert_eq!(lines.len(), 2);
    }
}

//! The parallel search: what each walker thread shares, collects and matches with.

use super::*;

/// What the per-thread visitors share.
pub(super) struct Shared<'a> {
    pub(super) ws: &'a Workspace,
    pub(super) ws_root: &'a [u8],
    pub(super) search_prefix: &'a [u8],
    pub(super) file_glob: Option<&'a PathGlob>,
    pub(super) matcher: &'a RegexMatcher,
    pub(super) context: usize,
    pub(super) limits: Option<GrepLimits>,
    pub(super) multiline: bool,
    pub(super) keep_lines: bool,
    pub(super) cancel: &'a CancellationToken,
    /// Set when hidden files are left out: what would have matched among them.
    pub(super) probe: Option<&'a HiddenProbe>,
}

/// The ripgrep file types named in `names` (comma-separated), or `None` when not given; an
/// unknown name is refused with the nearest known ones.
pub(super) fn file_types(names: Option<&str>) -> Result<Option<ignore::types::Types>, ToolError> {
    let Some(names) = names.map(str::trim).filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let mut b = ignore::types::TypesBuilder::new();
    b.add_defaults();
    let known: Vec<String> = b
        .definitions()
        .into_iter()
        .map(|d| d.name().to_string())
        .collect();
    for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if !known.iter().any(|k| k == name) {
            let mut near: Vec<&String> = known
                .iter()
                .filter(|k| strsim::jaro_winkler(k, name) > 0.8 || k.starts_with(name))
                .collect();
            near.truncate(8);
            let near: Vec<&str> = near.iter().map(|s| s.as_str()).collect();
            return Err(ToolError::InvalidArguments(format!(
                "grep: `type` {name:?} is not a ripgrep file type{}; common ones: rust, py, js, \
                 ts, go, java, c, cpp, md, json, yaml, toml, sh, html, css (or use file_pattern \
                 with a glob such as `*.ext`)",
                if near.is_empty() {
                    String::new()
                } else {
                    format!(" (did you mean {}?)", near.join(", "))
                }
            )));
        }
        b.select(name);
    }
    b.build().map(Some).map_err(|e| {
        ToolError::InvalidArguments(format!("grep: `type` {names:?} was refused: {e}"))
    })
}

#[derive(Default)]
pub(super) struct Collected {
    pub(super) files: Vec<FileMatches>,
    pub(super) total_files: u64,
    pub(super) total_matches: u64,
    pub(super) searched: u64,
    /// The files with the most matches (count, path), trimmed to [`TOP_FILES`] now and then.
    pub(super) top: Vec<(u64, String)>,
}

/// Most matches first, then by path.
pub(super) fn by_matches(a: &(u64, String), b: &(u64, String)) -> std::cmp::Ordering {
    b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1))
}

impl Collected {
    /// Note a file's match count among the top files (each thread keeps its own top ones,
    /// so the top of their union is the top of all).
    pub(super) fn rank(&mut self, count: u64, path: &str) {
        self.top.push((count, path.to_string()));
        if self.top.len() > 4 * TOP_FILES {
            self.top.sort_unstable_by(by_matches);
            self.top.truncate(TOP_FILES);
        }
    }

    pub(super) fn top_files(&mut self) -> Vec<(String, u64)> {
        self.top.sort_unstable_by(by_matches);
        self.top.truncate(TOP_FILES);
        self.top.iter().map(|(n, p)| (p.clone(), *n)).collect()
    }

    /// Keep only the first `max_files` files by path: the final selection cannot need others.
    pub(super) fn trim(&mut self, limits: Option<GrepLimits>) {
        if let Some(l) = limits
            && self.files.len() > 2 * l.max_files + 16
        {
            self.files.sort_unstable_by(|a, b| a.path.cmp(&b.path));
            self.files.truncate(l.max_files);
        }
    }
}

impl<'s, 'a> Visitor<'s, 'a> {
    /// A walker thread's visitor, with searchers of its own.
    pub(super) fn new(shared: &'s Shared<'a>) -> Self {
        let mut b = SearcherBuilder::new();
        b.line_number(true)
            // ripgrep's default for walked files: stop at the first NUL byte, say nothing.
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .multi_line(shared.multiline)
            .before_context(shared.context)
            .after_context(shared.context);
        let keep = if shared.keep_lines {
            shared.limits.map_or(u64::MAX, |l| l.max_lines as u64)
        } else {
            0
        };
        let mut probe = SearcherBuilder::new();
        probe
            .line_number(false)
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .multi_line(shared.multiline);
        Visitor {
            shared,
            searcher: b.build(),
            probe_searcher: probe.build(),
            sink: LineSink::new(keep),
            local: Collected::default(),
        }
    }
}

/// One walker thread: its own searcher and sink, results merged when the thread ends.
pub(super) struct Visitor<'s, 'a> {
    pub(super) shared: &'s Shared<'a>,
    pub(super) searcher: Searcher,
    /// Searches a hidden file only for whether it has a match.
    pub(super) probe_searcher: Searcher,
    pub(super) sink: LineSink,
    pub(super) local: Collected,
}

impl Visitor<'_, '_> {
    pub(super) fn search_entry(&mut self, entry: &DirEntry) {
        let Some(walk::Found { rel, below, hidden }) = walk::found(
            entry,
            self.shared.ws_root,
            self.shared.search_prefix,
            self.shared.probe,
        ) else {
            return;
        };
        if let Some(g) = self.shared.file_glob
            && !g.is_match(below)
        {
            return;
        }
        if let Some(probe) = hidden {
            self.probe_hidden(rel, probe);
            return;
        }
        // Opened beneath the root handle (openat2 RESOLVE_BENEATH), not by the walker's
        // absolute path: if a directory on the way was swapped for a symlink to outside since
        // the walker listed it, the open fails instead of reading outside.
        let file = match self.shared.ws.dir().open(walk::as_path(rel)) {
            Ok(f) => f.into_std(),
            Err(e) => {
                tracing::trace!(path = %String::from_utf8_lossy(rel), error = %e, "grep: skipped");
                return;
            }
        };
        self.local.searched += 1;
        self.sink.reset();
        // Read through the token, so one huge file cannot hold the search past its time limit.
        let reader = Stoppable {
            inner: file,
            cancel: self.shared.cancel,
        };
        let result = self
            .searcher
            .search_reader(self.shared.matcher, reader, &mut self.sink);
        if let Err(e) = result {
            tracing::trace!(path = %String::from_utf8_lossy(rel), error = %e, "grep: read failed");
        }
        if self.sink.matches == 0 {
            return;
        }
        self.local.total_files += 1;
        self.local.total_matches += self.sink.matches;
        self.local.rank(self.sink.matches, &walk::display(rel));
        self.local.files.push(FileMatches {
            path: walk::display(rel),
            lines: std::mem::take(&mut self.sink.lines),
            match_count: self.sink.matches,
        });
        self.local.trim(self.shared.limits);
    }
}

impl Visitor<'_, '_> {
    /// Whether the hidden file `rel` has a match (read to its first one, within the probe's
    /// budget), noted in `probe`; it is not shown.
    pub(super) fn probe_hidden(&mut self, rel: &[u8], probe: &HiddenProbe) {
        let Ok(file) = self.shared.ws.dir().open(walk::as_path(rel)) else {
            return;
        };
        let reader = Budgeted {
            inner: file.into_std(),
            cancel: self.shared.cancel,
            probe,
        };
        let mut first = FirstMatch(false);
        let _ = self
            .probe_searcher
            .search_reader(self.shared.matcher, reader, &mut first);
        if first.0 {
            probe.matched(rel);
        }
    }
}

/// Stops a search at its first match.
pub(super) struct FirstMatch(bool);

impl Sink for FirstMatch {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, _: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        self.0 = true;
        Ok(false)
    }
}

/// A hidden file read for the probe: ends (as at end of file) on `cancel` or once the probe's
/// byte budget is spent (then the probe says some files went unchecked).
pub(super) struct Budgeted<'a, R> {
    pub(super) inner: R,
    pub(super) cancel: &'a CancellationToken,
    pub(super) probe: &'a HiddenProbe,
}

impl<R: std::io::Read> std::io::Read for Budgeted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.cancel.is_cancelled() {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        if !self.probe.take_bytes(n as u64) {
            self.probe.gave_up();
            return Ok(0);
        }
        Ok(n)
    }
}

impl Visit for Visitor<'_, '_> {
    type Total = Collected;

    fn visit(&mut self, entry: &DirEntry) {
        self.search_entry(entry);
    }

    fn merge_into(&mut self, merged: &mut Collected) {
        merged.total_files += self.local.total_files;
        merged.total_matches += self.local.total_matches;
        merged.searched += self.local.searched;
        merged.files.append(&mut self.local.files);
        merged.top.append(&mut self.local.top);
        merged.trim(self.shared.limits);
    }
}

/// A reader that ends (as at end of file) once `cancel` is cancelled: the searcher reads a
/// buffer at a time, so a search stops within one buffer of the token.
pub(super) struct Stoppable<'a, R> {
    pub(super) inner: R,
    pub(super) cancel: &'a CancellationToken,
}

impl<R: std::io::Read> std::io::Read for Stoppable<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.cancel.is_cancelled() {
            return Ok(0);
        }
        self.inner.read(buf)
    }
}

/// Collects one file's lines; counts every match but stores only the first `keep`.
pub(super) struct LineSink {
    pub(super) lines: Vec<GrepLine>,
    pub(super) matches: u64,
    pub(super) keep: u64,
    pub(super) gap: bool,
}

impl LineSink {
    pub(super) fn new(keep: u64) -> Self {
        Self {
            lines: Vec::new(),
            matches: 0,
            keep,
            gap: false,
        }
    }

    pub(super) fn reset(&mut self) {
        self.lines.clear();
        self.matches = 0;
        self.gap = false;
    }

    pub(super) fn push(&mut self, number: Option<u64>, bytes: &[u8], is_match: bool) {
        self.lines.push(GrepLine {
            number: number.unwrap_or(0),
            text: line_text(bytes),
            is_match,
            gap_before: std::mem::take(&mut self.gap),
        });
    }
}

impl Sink for LineSink {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        // Without multi-line mode a match is exactly one line; with it, each line it spans
        // is shown (and counted) as a matching line.
        let first = mat.line_number();
        for (i, line) in mat.bytes().split_inclusive(|&b| b == b'\n').enumerate() {
            self.matches += 1;
            if self.matches <= self.keep {
                self.push(first.map(|n| n + i as u64), line, true);
            }
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, Self::Error> {
        let wanted = match ctx.kind() {
            SinkContextKind::Before => self.matches < self.keep,
            SinkContextKind::After => self.matches <= self.keep,
            SinkContextKind::Other => false,
        };
        if wanted {
            self.push(ctx.line_number(), ctx.bytes(), false);
        }
        Ok(true)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, Self::Error> {
        self.gap = !self.lines.is_empty();
        Ok(true)
    }
}

/// A line's text: terminator dropped, invalid UTF-8 replaced, cut at [`MAX_LINE_CHARS`].
pub(super) fn line_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    if bytes.len() <= MAX_LINE_CHARS {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let text = String::from_utf8_lossy(bytes);
    let total = text.chars().count();
    if total <= MAX_LINE_CHARS {
        return text.into_owned();
    }
    let end = text
        .char_indices()
        .nth(MAX_LINE_CHARS)
        .map_or(text.len(), |(i, _)| i);
    format!(
        "{} [... {} more characters cut]",
        &text[..end],
        total - MAX_LINE_CHARS
    )
}

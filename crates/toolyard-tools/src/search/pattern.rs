//! Glob patterns as `glob` and `grep`'s `file_pattern` read them.
//!
//! Semantics (gitignore/fd-like, documented in the tool descriptions):
//! - a pattern without `/` matches a file *name* at any depth: `*.rs` ≡ `**/*.rs`;
//! - a pattern with `/` is anchored at the search path: `src/*.rs` only directly in `src/`,
//!   `src/**/mod.rs` anywhere below it; `*` never crosses `/`, `**` does;
//! - a trailing `/` means everything below: `src/` ≡ `src/**`;
//! - matching is case-sensitive; `{a,b}` alternation and `[a-z]` classes work;
//! - an absolute pattern must lie inside the workspace (and the search path); `..` is refused.

use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};
use toolyard_core::ToolError;
use toolyard_workspace::{RelPath, Workspace};

/// The longest glob pattern accepted, in bytes: compiling one takes time growing with the
/// square of its components (a megabyte takes minutes).
pub const MAX_GLOB_PATTERN_BYTES: usize = 4096;

/// A compiled path pattern, with what it tells the walker.
#[derive(Debug, Clone)]
pub struct PathGlob {
    set: GlobSet,
    /// The pattern after normalization (what is matched against search-relative paths).
    pub normalized: String,
    /// Leading literal directories (relative to the search path) the walk can start from.
    pub literal_prefix: Option<String>,
    /// The pattern names a hidden component (`.github/**`, `**/.env`), so hidden files count.
    pub wants_hidden: bool,
}

impl PathGlob {
    /// Compile `pattern` (the `pattern` argument) for a search rooted at `root`.
    pub fn new(pattern: &str, ws: &Workspace, root: &RelPath) -> Result<Self, ToolError> {
        Self::with_case(pattern, ws, root, false)
    }

    /// Like [`PathGlob::new`], matching whatever the case when `case_insensitive` (the walk
    /// then starts at `root`: a literal directory in the pattern may be spelt otherwise).
    pub fn with_case(
        pattern: &str,
        ws: &Workspace,
        root: &RelPath,
        case_insensitive: bool,
    ) -> Result<Self, ToolError> {
        let mut glob = Self::new_arg_case(pattern, ws, root, "pattern", case_insensitive)?;
        if case_insensitive {
            glob.literal_prefix = None;
        }
        Ok(glob)
    }

    /// Like [`PathGlob::new`], naming the argument `arg` when the pattern is too long.
    pub fn for_argument(
        arg: &str,
        pattern: &str,
        ws: &Workspace,
        root: &RelPath,
    ) -> Result<Self, ToolError> {
        Self::new_arg_case(pattern, ws, root, arg, false)
    }

    fn new_arg_case(
        pattern: &str,
        ws: &Workspace,
        root: &RelPath,
        arg: &str,
        case_insensitive: bool,
    ) -> Result<Self, ToolError> {
        if pattern.len() > MAX_GLOB_PATTERN_BYTES {
            return Err(ToolError::InvalidArguments(format!(
                "`{arg}` is {} bytes; glob patterns are limited to {MAX_GLOB_PATTERN_BYTES} bytes. \
                 Use a shorter pattern (`**/name.ext`, `{{a,b}}` alternation) or narrow `path`",
                pattern.len()
            )));
        }
        let mut pat = pattern.trim().to_string();
        if pat.is_empty() {
            return Err(ToolError::InvalidArguments(
                "the glob pattern is empty; try `**/*.rs` or `src/**/mod.rs`".into(),
            ));
        }
        if pat.starts_with('/') {
            pat = strip_absolute(&pat, ws, root)?;
        }
        while let Some(rest) = pat.strip_prefix("./") {
            pat = rest.to_string();
        }
        if pat.split('/').any(|c| c == "..") {
            return Err(ToolError::InvalidArguments(format!(
                "the pattern `{pattern}` contains `..`; patterns match below the search path, \
                 so set `path` to search elsewhere in the workspace"
            )));
        }
        if let Some(dir) = pat.strip_suffix('/') {
            pat = format!("{dir}/**");
        }
        if pat.is_empty() || pat == "." {
            pat = "**".into();
        }
        if !pat.contains('/') {
            // fd/.gitignore semantics: a bare name pattern matches at any depth.
            pat = format!("**/{pat}");
        }
        let glob = GlobBuilder::new(&pat)
            .case_insensitive(case_insensitive)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| {
                ToolError::InvalidArguments(format!("invalid glob pattern `{pattern}`: {e}"))
            })?;
        let set = GlobSetBuilder::new().add(glob).build().map_err(|e| {
            ToolError::InvalidArguments(format!("invalid glob pattern `{pattern}`: {e}"))
        })?;
        let parts: Vec<&str> = pat.split('/').collect();
        let literal: Vec<&str> = parts[..parts.len().saturating_sub(1)]
            .iter()
            .take_while(|c| !c.is_empty() && !c.contains(['*', '?', '[', '{', '\\']))
            .copied()
            .collect();
        let wants_hidden = parts
            .iter()
            .any(|c| c.starts_with('.') && *c != "." && *c != "..");
        Ok(Self {
            set,
            literal_prefix: (!literal.is_empty()).then(|| literal.join("/")),
            normalized: pat,
            wants_hidden,
        })
    }

    /// Whether `rel` (relative to the search path) matches.
    pub fn is_match(&self, rel: &[u8]) -> bool {
        self.set.is_match_candidate(&Candidate::from_bytes(rel))
    }
}

/// Make an absolute pattern relative to the search root, refusing anything outside it.
fn strip_absolute(pat: &str, ws: &Workspace, root: &RelPath) -> Result<String, ToolError> {
    let base = ws.absolute(root);
    let base = base.to_string_lossy();
    let base = base.trim_end_matches('/');
    match pat.strip_prefix(base) {
        Some("") => Ok(String::new()),
        Some(rest) if rest.starts_with('/') => Ok(rest.trim_start_matches('/').to_string()),
        _ => {
            let root_abs = ws.root().to_string_lossy();
            if pat.starts_with(&*root_abs) {
                Err(ToolError::InvalidArguments(format!(
                    "the pattern `{pat}` lies outside the search path {base}; set `path` to a \
                     directory that contains it or use a relative pattern"
                )))
            } else {
                Err(ToolError::outside(
                    pat,
                    "glob patterns must be relative or lie inside the workspace",
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let t = tempfile::tempdir().unwrap();
        let w = Workspace::open(t.path()).unwrap();
        (t, w)
    }

    #[test]
    fn bare_patterns_match_at_any_depth_and_slashes_anchor() {
        let (_t, w) = ws();
        let root = RelPath::root();
        let g = PathGlob::new("*.rs", &w, &root).unwrap();
        assert!(g.is_match(b"a.rs") && g.is_match(b"x/y/a.rs") && !g.is_match(b"a.rsx"));
        let g = PathGlob::new("src/*.rs", &w, &root).unwrap();
        assert!(
            g.is_match(b"src/a.rs") && !g.is_match(b"src/x/a.rs") && !g.is_match(b"b/src/a.rs")
        );
        let g = PathGlob::new("src/**/mod.rs", &w, &root).unwrap();
        assert!(g.is_match(b"src/mod.rs") && g.is_match(b"src/a/b/mod.rs"));
        assert_eq!(g.literal_prefix.as_deref(), Some("src"));
        let g = PathGlob::new("./src/", &w, &root).unwrap();
        assert!(g.is_match(b"src/a/b.txt"));
        let g = PathGlob::new("*.{rs,toml}", &w, &root).unwrap();
        assert!(g.is_match(b"Cargo.toml") && g.is_match(b"a/b.rs"));
    }

    #[test]
    fn hidden_components_opt_in_and_dotdot_is_refused() {
        let (_t, w) = ws();
        let root = RelPath::root();
        assert!(
            PathGlob::new(".github/**/*.yml", &w, &root)
                .unwrap()
                .wants_hidden
        );
        assert!(!PathGlob::new("**/*.rs", &w, &root).unwrap().wants_hidden);
        let e = PathGlob::new("../*", &w, &root).unwrap_err();
        assert_eq!(e.kind(), "invalid_arguments");
        let e = PathGlob::new("/etc/*", &w, &root).unwrap_err();
        assert_eq!(e.kind(), "path_outside_workspace");
        let e = PathGlob::new("a/[", &w, &root).unwrap_err();
        assert!(e.to_string().contains("invalid glob"), "{e}");
    }

    #[test]
    fn absolute_patterns_inside_are_made_relative() {
        let (t, w) = ws();
        let abs = format!("{}/src/*.rs", w.root().display());
        let g = PathGlob::new(&abs, &w, &RelPath::root()).unwrap();
        assert!(g.is_match(b"src/a.rs"));
        drop(t);
    }
}

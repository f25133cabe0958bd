//! The catalog's `[lsp]` section and the languages known without it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The most a change waits for fresh diagnostics, unless the catalog says otherwise.
pub const DEFAULT_WAIT_MS: u64 = 5000;
/// How long a server may sit unused before it is stopped.
pub const DEFAULT_IDLE_S: u64 = 600;

/// The `[lsp]` catalog section: `wait_ms`, `idle_s`, and one `[lsp.<language>]` table each.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LspConfig {
    /// The most a change waits for diagnostics of its version (default 5000).
    #[serde(default)]
    pub wait_ms: Option<u64>,
    /// Seconds a server may sit unused before it is stopped (default 600).
    #[serde(default)]
    pub idle_s: Option<u64>,
    /// `false` turns language servers and checks off.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// `[lsp.<language>]` tables.
    #[serde(flatten)]
    pub languages: BTreeMap<String, LangConfig>,
}

/// `[lsp.<language>]`: what serves one language.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LangConfig {
    /// The server's argv (speaks LSP on stdio); `[]` turns the server off.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// File extensions, without the dot.
    #[serde(default)]
    pub extensions: Option<Vec<String>>,
    /// A check command used when no server is there (`cargo check --message-format=json`).
    #[serde(default)]
    pub check: Option<Vec<String>>,
}

/// A language Toolyard knows without configuration: one row per language, the only place
/// these facts live.
pub struct Builtin {
    /// The language's name (`[lsp.<name>]`).
    pub name: &'static str,
    /// File extensions.
    pub extensions: &'static [&'static str],
    /// Servers tried on `PATH`, in order.
    pub servers: &'static [&'static [&'static str]],
    /// The check command when no server is found.
    pub check: Option<&'static [&'static str]>,
}

/// The built-in languages.
pub const BUILTIN: &[Builtin] = &[
    Builtin {
        name: "python",
        extensions: &["py", "pyi"],
        servers: &[
            &["pyright-langserver", "--stdio"],
            &["basedpyright-langserver", "--stdio"],
        ],
        check: None,
    },
    Builtin {
        name: "typescript",
        extensions: &["ts", "tsx", "js", "jsx", "mjs", "cjs", "mts", "cts"],
        servers: &[&["typescript-language-server", "--stdio"]],
        check: None,
    },
    Builtin {
        name: "c",
        extensions: &["c", "h", "cc", "cpp", "cxx", "hpp", "hh", "hxx"],
        servers: &[&["clangd"]],
        check: None,
    },
    Builtin {
        name: "go",
        extensions: &["go"],
        servers: &[&["gopls"]],
        check: None,
    },
    Builtin {
        name: "rust",
        extensions: &["rs"],
        servers: &[&["rust-analyzer"]],
        check: Some(&["cargo", "check", "--message-format=json"]),
    },
];

/// The LSP `languageId` of a file extension.
pub fn language_id(ext: &str) -> &'static str {
    match ext {
        "py" | "pyi" => "python",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "typescriptreact",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "javascriptreact",
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => "cpp",
        "go" => "go",
        "rs" => "rust",
        _ => "plaintext",
    }
}

/// A language as resolved here: what serves it, or that nothing does.
#[derive(Debug, Clone)]
pub struct Language {
    /// Its name.
    pub name: String,
    /// Its file extensions.
    pub extensions: Vec<String>,
    /// The server's argv, when one is configured or found.
    pub server: Option<Vec<String>>,
    /// The check command, used when there is no server.
    pub check: Option<Vec<String>>,
    /// How it was found, for `doctor` and for the "nothing covers" note.
    pub how: String,
}

impl Language {
    /// Whether a server or a check covers it.
    pub fn covered(&self) -> bool {
        self.server.is_some() || self.check.is_some()
    }

    /// The name of what serves it: the server's program, else the check's.
    pub fn served_by(&self) -> String {
        let argv = self.server.as_ref().or(self.check.as_ref());
        argv.and_then(|a| a.first())
            .map(|p| {
                Path::new(p)
                    .file_name()
                    .map_or(p.clone(), |n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "nothing".into())
    }
}

/// Resolve the languages: the built-in ones with what `PATH` has, overlaid by the catalog.
pub fn resolve(config: &LspConfig, path_var: Option<&std::ffi::OsStr>) -> Vec<Language> {
    let mut out: Vec<Language> = Vec::new();
    for b in BUILTIN {
        let found = b
            .servers
            .iter()
            .find_map(|argv| find_program(argv[0], path_var).map(|p| (argv, p)));
        let (server, how) = match found {
            Some((argv, path)) => {
                let mut v: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
                v[0] = path.to_string_lossy().into_owned();
                (Some(v), format!("{} found on PATH", path.display()))
            }
            None => {
                let names: Vec<&str> = b.servers.iter().map(|a| a[0]).collect();
                (None, format!("no {} on PATH", names.join(" or ")))
            }
        };
        out.push(Language {
            name: b.name.into(),
            extensions: b.extensions.iter().map(|s| s.to_string()).collect(),
            server,
            check: b.check.map(|c| c.iter().map(|s| s.to_string()).collect()),
            how,
        });
    }
    for (name, c) in &config.languages {
        let i = match out.iter().position(|l| &l.name == name) {
            Some(i) => i,
            None => {
                out.push(Language {
                    name: name.clone(),
                    extensions: Vec::new(),
                    server: None,
                    check: None,
                    how: "configured in the catalog".into(),
                });
                out.len() - 1
            }
        };
        let l = &mut out[i];
        if let Some(cmd) = &c.command {
            l.server = (!cmd.is_empty()).then(|| cmd.clone());
            l.how = if cmd.is_empty() {
                "server turned off in the catalog".into()
            } else {
                "command set in the catalog".into()
            };
        }
        if let Some(ext) = &c.extensions {
            l.extensions = ext
                .iter()
                .map(|e| e.trim_start_matches('.').into())
                .collect();
        }
        if let Some(check) = &c.check {
            l.check = (!check.is_empty()).then(|| check.clone());
        }
    }
    out
}

/// `program` as found on `path_var` (or itself, when it names a path), if it is an executable
/// file. rust-analyzer is also asked for its version: rustup installs a proxy that only fails.
fn find_program(program: &str, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let found = if program.contains('/') {
        Some(PathBuf::from(program)).filter(|p| executable(p))
    } else {
        std::env::split_paths(path_var?)
            .map(|d| d.join(program))
            .find(|p| executable(p))
    }?;
    if program == "rust-analyzer" {
        let works = std::process::Command::new(&found)
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !works {
            return None;
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_overrides_and_adds_languages() {
        let config: LspConfig = serde_json::from_value(serde_json::json!({
            "wait_ms": 100,
            "python": {"command": ["my-pyls"], "extensions": [".py"]},
            "zig": {"command": ["zls"], "extensions": ["zig"]},
            "rust": {"check": []},
        }))
        .unwrap();
        let langs = resolve(&config, Some(std::ffi::OsStr::new("/nonexistent")));
        let py = langs.iter().find(|l| l.name == "python").unwrap();
        assert_eq!(py.server.as_deref(), Some(&["my-pyls".to_string()][..]));
        assert_eq!(py.extensions, vec!["py"]);
        let zig = langs.iter().find(|l| l.name == "zig").unwrap();
        assert!(zig.covered());
        let rust = langs.iter().find(|l| l.name == "rust").unwrap();
        assert!(!rust.covered(), "an empty check turns it off: {rust:?}");
        let go = langs.iter().find(|l| l.name == "go").unwrap();
        assert!(!go.covered() && go.how.contains("gopls"));
    }
}

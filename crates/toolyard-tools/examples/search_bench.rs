//! Benchmark driver for `bench/run --only grep` (bench/lib/grep_glob.py): runs the grep or glob
//! engine once over a tree, uncapped, and prints every result the way `rg --no-heading -n` / `fd`
//! would, so both sides produce the same output volume.
//!
//! Usage: `search_bench grep PATTERN DIR` or `search_bench glob PATTERN DIR`.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use tokio_util::sync::CancellationToken;
use toolyard_tools::search::{GlobQuery, GrepQuery, glob, grep};
use toolyard_workspace::{RelPath, Workspace};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, pattern, dir] = args.as_slice() else {
        eprintln!("usage: search_bench grep|glob PATTERN DIR");
        return ExitCode::from(2);
    };
    match run(mode, pattern, Path::new(dir)) {
        Ok(n) => {
            eprintln!("{n} results");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("search_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(mode: &str, pattern: &str, dir: &Path) -> Result<u64, Box<dyn std::error::Error>> {
    let ws = Workspace::open(dir)?;
    let cancel = CancellationToken::new();
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let n = match mode {
        "grep" => {
            let query = GrepQuery {
                pattern: pattern.to_string(),
                root: RelPath::root(),
                file_pattern: None,
                context: 0,
                limits: None,
                hidden: false,
                case_insensitive: false,
                file_type: None,
                multiline: false,
                keep_lines: true,
            };
            let outcome = grep::search(&ws, &query, &cancel)?;
            out.write_all(grep::render(&outcome, 0).as_bytes())?;
            outcome.total_matches
        }
        "glob" => {
            let query = GlobQuery {
                pattern: pattern.to_string(),
                root: RelPath::root(),
                limit: None,
                hidden: false,
                case_insensitive: false,
                no_git_ignore: false,
            };
            let outcome = glob::find(&ws, &query, &cancel)?;
            for hit in &outcome.hits {
                out.write_all(hit.path.as_bytes())?;
                out.write_all(b"\n")?;
            }
            outcome.total
        }
        other => return Err(format!("unknown mode {other}; use grep or glob").into()),
    };
    out.flush()?;
    Ok(n)
}

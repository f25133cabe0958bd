//! The patch format Codex's `apply_patch` takes (`*** Begin Patch` ... `*** End Patch`),
//! parsed as leniently as Codex parses it.

use toolyard_core::ToolError;

const BEGIN: &str = "*** Begin Patch";
const END: &str = "*** End Patch";
pub(super) const ADD: &str = "*** Add File: ";
pub(super) const DELETE: &str = "*** Delete File: ";
pub(super) const UPDATE: &str = "*** Update File: ";
pub(super) const MOVE: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";
const ENVIRONMENT: &str = "*** Environment ID: ";

/// The tool name journal entries carry.
pub(super) const TOOL: &str = "apply_patch";

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hunk {
    /// Create `path` (overwriting it if it exists) with `contents`.
    Add {
        /// The path as the patch spells it.
        path: String,
        /// The new content (every `+` line, each ending in `\n`).
        contents: String,
    },
    /// Remove the file `path`.
    Delete {
        /// The path as the patch spells it.
        path: String,
    },
    /// Change `path` chunk by chunk, then move it to `move_to` when given.
    Update {
        /// The path as the patch spells it.
        path: String,
        /// `*** Move to:`: where the changed file goes.
        move_to: Option<String>,
        /// The `@@` sections, in file order.
        chunks: Vec<Chunk>,
    },
}

/// One `@@` section of an update.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chunk {
    /// The `@@ <line>` anchor: a line the chunk comes after.
    pub context: Option<String>,
    /// The chunk's lines in patch order: context, removed and added.
    pub lines: Vec<PatchLine>,
    /// `*** End of File`: the old lines end the file.
    pub end_of_file: bool,
}

/// One line of a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchLine {
    /// ` ` (or an empty line): in the file, and stays.
    Context(String),
    /// `-`: in the file, and goes.
    Removed(String),
    /// `+`: not in the file, and comes.
    Added(String),
}

impl PatchLine {
    /// The line as it is in the file before the patch, if it is there.
    pub(super) fn before(&self) -> Option<&str> {
        match self {
            PatchLine::Context(t) | PatchLine::Removed(t) => Some(t),
            PatchLine::Added(_) => None,
        }
    }

    /// The line as it is after the patch, if it is there.
    pub(super) fn after(&self) -> Option<&str> {
        match self {
            PatchLine::Context(t) | PatchLine::Added(t) => Some(t),
            PatchLine::Removed(_) => None,
        }
    }
}

impl Chunk {
    /// Context and removed lines, as they are in the file.
    pub fn old_lines(&self) -> Vec<&str> {
        self.lines.iter().filter_map(PatchLine::before).collect()
    }

    /// Context and added lines, as they will be.
    pub fn new_lines(&self) -> Vec<&str> {
        self.lines.iter().filter_map(PatchLine::after).collect()
    }
}

pub(super) fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::InvalidArguments(format!("Invalid patch: {}", message.into()))
}

fn invalid_hunk(line: usize, message: impl Into<String>) -> ToolError {
    ToolError::InvalidArguments(format!(
        "Invalid patch hunk on line {line}: {}",
        message.into()
    ))
}

/// Parse a patch as Codex does (lenient mode): the text is trimmed, `\r` line ends dropped,
/// marker lines compared trimmed, and a `<<'EOF'` heredoc wrapper removed.
pub fn parse_patch(text: &str) -> Result<Vec<Hunk>, ToolError> {
    let all: Vec<&str> = text.trim().lines().collect();
    let lines = match check_boundaries(&all) {
        Ok(()) => &all[..],
        Err(e) => {
            // `apply_patch <<'EOF' ... EOF` pasted whole, as models also send it.
            let heredoc = all.len() >= 4
                && matches!(all[0].trim(), "<<EOF" | "<<'EOF'" | "<<\"EOF\"")
                && all.last().is_some_and(|l| l.trim_end().ends_with("EOF"));
            if !heredoc {
                return Err(e);
            }
            let inner = &all[1..all.len() - 1];
            check_boundaries(inner)?;
            inner
        }
    };
    let mut body = &lines[1..lines.len() - 1];
    let mut line_number = 2;
    // One environment only: an environment id names nothing here.
    if body
        .first()
        .is_some_and(|l| l.trim().starts_with(ENVIRONMENT))
    {
        body = &body[1..];
        line_number += 1;
    }
    let mut hunks = Vec::new();
    while !body.is_empty() {
        let (hunk, used) = parse_hunk(body, line_number)?;
        hunks.push(hunk);
        line_number += used;
        body = &body[used..];
    }
    Ok(hunks)
}

fn check_boundaries(lines: &[&str]) -> Result<(), ToolError> {
    if lines.first().map(|l| l.trim()) != Some(BEGIN) {
        return Err(invalid(
            "The first line of the patch must be '*** Begin Patch'",
        ));
    }
    if lines.len() < 2 || lines.last().map(|l| l.trim()) != Some(END) {
        return Err(invalid(
            "The last line of the patch must be '*** End Patch'",
        ));
    }
    Ok(())
}

fn parse_hunk(lines: &[&str], line_number: usize) -> Result<(Hunk, usize), ToolError> {
    let first = lines[0].trim();
    if let Some(path) = first.strip_prefix(ADD) {
        let mut contents = String::new();
        let mut used = 1;
        for line in &lines[1..] {
            let Some(text) = line.strip_prefix('+') else {
                break;
            };
            contents.push_str(text);
            contents.push('\n');
            used += 1;
        }
        return Ok((
            Hunk::Add {
                path: path.to_string(),
                contents,
            },
            used,
        ));
    }
    if let Some(path) = first.strip_prefix(DELETE) {
        return Ok((
            Hunk::Delete {
                path: path.to_string(),
            },
            1,
        ));
    }
    if let Some(path) = first.strip_prefix(UPDATE) {
        let mut rest = &lines[1..];
        let mut used = 1;
        let move_to = rest
            .first()
            .and_then(|l| l.trim().strip_prefix(MOVE))
            .map(str::to_string);
        if move_to.is_some() {
            rest = &rest[1..];
            used += 1;
        }
        let mut chunks = Vec::new();
        while !rest.is_empty() {
            // Blank lines may separate chunks.
            if rest[0].trim().is_empty() {
                rest = &rest[1..];
                used += 1;
                continue;
            }
            if rest[0].trim_start().starts_with("***") {
                break;
            }
            let (chunk, n) = parse_chunk(rest, line_number + used, chunks.is_empty())?;
            chunks.push(chunk);
            used += n;
            rest = &rest[n..];
        }
        if chunks.is_empty() {
            return Err(invalid_hunk(
                line_number,
                format!("Update file hunk for path '{path}' is empty"),
            ));
        }
        return Ok((
            Hunk::Update {
                path: path.to_string(),
                move_to,
                chunks,
            },
            used,
        ));
    }
    Err(invalid_hunk(
        line_number,
        format!(
            "'{first}' is not a valid hunk header. Valid hunk headers: '*** Add File: {{path}}', \
             '*** Delete File: {{path}}', '*** Update File: {{path}}'"
        ),
    ))
}

fn parse_chunk(
    lines: &[&str],
    line_number: usize,
    first_chunk: bool,
) -> Result<(Chunk, usize), ToolError> {
    let head = lines[0].trim_end();
    let (context, start) = if head == "@@" {
        (None, 1)
    } else if let Some(ctx) = head.strip_prefix("@@ ") {
        (Some(ctx.to_string()), 1)
    } else {
        if !first_chunk {
            return Err(invalid_hunk(
                line_number,
                format!(
                    "Expected update hunk to start with a @@ context marker, got: '{}'",
                    lines[0]
                ),
            ));
        }
        (None, 0)
    };
    if start >= lines.len() {
        return Err(invalid_hunk(
            line_number + 1,
            "Update hunk does not contain any lines",
        ));
    }
    let mut chunk = Chunk {
        context,
        ..Chunk::default()
    };
    let mut used = 0;
    for line in &lines[start..] {
        if line.trim() == END_OF_FILE {
            if used == 0 {
                return Err(invalid_hunk(
                    line_number + 1,
                    "Update hunk does not contain any lines",
                ));
            }
            chunk.end_of_file = true;
            used += 1;
            break;
        }
        // The marker is one ASCII byte; the text follows it.
        let rest = || line.get(1..).unwrap_or("").to_string();
        match line.chars().next() {
            // An empty line inside a hunk is an empty context line.
            None => chunk.lines.push(PatchLine::Context(String::new())),
            Some(' ') => chunk.lines.push(PatchLine::Context(rest())),
            Some('+') => chunk.lines.push(PatchLine::Added(rest())),
            Some('-') => chunk.lines.push(PatchLine::Removed(rest())),
            Some(_) => {
                if used == 0 {
                    return Err(invalid_hunk(
                        line_number + 1,
                        format!(
                            "Unexpected line found in update hunk: '{line}'. Every line should \
                             start with ' ' (context line), '+' (added line), or '-' (removed line)"
                        ),
                    ));
                }
                // The start of the next chunk or hunk.
                break;
            }
        }
        used += 1;
    }
    Ok((chunk, used + start))
}

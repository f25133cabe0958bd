//! Problems (diagnostics) as Toolyard reports them, whichever server or check found them.

use serde_json::Value;

/// One problem in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diag {
    /// 0-based line.
    pub line: u32,
    /// 0-based column (UTF-16 units for a language server, bytes for a check).
    pub col: u32,
    /// 1 error, 2 warning, 3 information, 4 hint.
    pub severity: u8,
    /// The rule or error code, if any.
    pub code: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl Diag {
    /// A `Diagnostic` of the LSP, or `None` if it has no range.
    pub fn from_lsp(v: &Value) -> Option<Self> {
        let start = v.get("range")?.get("start")?;
        let code = match v.get("code") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        Some(Self {
            line: u32::try_from(start.get("line")?.as_u64()?).ok()?,
            col: u32::try_from(start.get("character")?.as_u64()?).ok()?,
            severity: v
                .get("severity")
                .and_then(Value::as_u64)
                .and_then(|s| u8::try_from(s).ok())
                .unwrap_or(1),
            code,
            message: v
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        })
    }

    /// The severity's name.
    pub fn severity_name(&self) -> &'static str {
        match self.severity {
            1 => "error",
            2 => "warning",
            3 => "info",
            _ => "hint",
        }
    }

    /// `path:line:col: severity [code] message`, 1-based, then the line's text beneath.
    pub fn render(&self, path: &str, text: Option<&str>) -> String {
        let code = self
            .code
            .as_ref()
            .map(|c| format!(" [{c}]"))
            .unwrap_or_default();
        let message = first_lines(&self.message, 4);
        let mut s = format!(
            "{path}:{}:{}: {}{code}: {message}",
            self.line + 1,
            self.col + 1,
            self.severity_name()
        );
        if let Some(line) = text.and_then(|t| line_of(t, self.line)) {
            s.push_str(&format!(
                "\n    {} | {}",
                self.line + 1,
                clip(line.trim_end(), 200)
            ));
        }
        s
    }

    /// What identifies a problem across a change: lines move, so the line's text, not its
    /// number.
    pub fn key(&self, text: Option<&str>) -> (u8, Option<String>, String, String) {
        let line = text
            .and_then(|t| line_of(t, self.line))
            .unwrap_or_default()
            .trim()
            .to_string();
        (self.severity, self.code.clone(), self.message.clone(), line)
    }
}

/// Line `n` (0-based) of `text`.
pub fn line_of(text: &str, n: u32) -> Option<&str> {
    text.lines().nth(n as usize)
}

fn first_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    if lines.len() <= n {
        return lines.join("\n      ");
    }
    format!("{} (...)", lines[..n].join("\n      "))
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let cut: String = s.chars().take(max).collect();
    format!("{cut}...")
}

/// What a change did to a file's problems: those it added and those it resolved (multisets, by
/// [`Diag::key`]).
pub fn diff<'a>(
    before: &'a [Diag],
    before_text: Option<&str>,
    after: &'a [Diag],
    after_text: Option<&str>,
) -> (Vec<&'a Diag>, Vec<&'a Diag>) {
    let mut old: Vec<_> = before.iter().map(|d| (d.key(before_text), d)).collect();
    let mut new = Vec::new();
    for d in after {
        let k = d.key(after_text);
        match old.iter().position(|(ok, _)| *ok == k) {
            Some(i) => {
                old.swap_remove(i);
            }
            None => new.push(d),
        }
    }
    let mut resolved: Vec<&Diag> = old.into_iter().map(|(_, d)| d).collect();
    resolved.sort_by_key(|d| (d.line, d.col));
    (new, resolved)
}

/// The problems of `cargo check --message-format=json` output, as (file name as cargo gives
/// it, problem) pairs: each compiler message at its primary span.
pub fn from_cargo(stdout: &str) -> Vec<(String, Diag)> {
    let mut out = Vec::new();
    for line in stdout.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v.get("reason").and_then(Value::as_str) != Some("compiler-message") {
            continue;
        }
        let Some(m) = v.get("message") else { continue };
        let severity = match m.get("level").and_then(Value::as_str) {
            Some("error" | "error: internal compiler error") => 1,
            Some("warning") => 2,
            Some("note") => 3,
            _ => 4,
        };
        let Some(span) = m
            .get("spans")
            .and_then(Value::as_array)
            .and_then(|s| s.iter().find(|s| s["is_primary"] == Value::Bool(true)))
        else {
            continue;
        };
        let (Some(file), Some(line), Some(col)) = (
            span.get("file_name").and_then(Value::as_str),
            span.get("line_start").and_then(Value::as_u64),
            span.get("column_start").and_then(Value::as_u64),
        ) else {
            continue;
        };
        out.push((
            file.to_string(),
            Diag {
                line: u32::try_from(line.saturating_sub(1)).unwrap_or(0),
                col: u32::try_from(col.saturating_sub(1)).unwrap_or(0),
                severity,
                code: m
                    .get("code")
                    .and_then(|c| c.get("code"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                message: m
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            },
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(line: u32, message: &str) -> Diag {
        Diag {
            line,
            col: 0,
            severity: 1,
            code: None,
            message: message.into(),
        }
    }

    #[test]
    fn a_problem_that_moved_down_a_line_is_neither_new_nor_resolved() {
        let before = [d(0, "bad"), d(2, "gone")];
        let after = [d(1, "bad"), d(2, "fresh")];
        let (new, resolved) = diff(
            &before,
            Some("x = 1\n\ny = 2\n"),
            &after,
            Some("\nx = 1\nz\n"),
        );
        assert_eq!(
            new.iter().map(|d| d.message.as_str()).collect::<Vec<_>>(),
            ["fresh"]
        );
        assert_eq!(
            resolved
                .iter()
                .map(|d| d.message.as_str())
                .collect::<Vec<_>>(),
            ["gone"]
        );
    }

    #[test]
    fn cargo_messages_become_problems_at_their_primary_span() {
        let out = r#"{"reason":"compiler-artifact"}
{"reason":"compiler-message","message":{"level":"error","message":"mismatched types","code":{"code":"E0308"},"spans":[{"file_name":"src/lib.rs","line_start":3,"column_start":18,"is_primary":true}]}}
{"reason":"compiler-message","message":{"level":"error","message":"aborting","code":null,"spans":[]}}"#;
        let got = from_cargo(out);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "src/lib.rs");
        assert_eq!((got[0].1.line, got[0].1.col), (2, 17));
        assert_eq!(got[0].1.code.as_deref(), Some("E0308"));
    }
}

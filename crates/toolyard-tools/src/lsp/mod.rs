//! The language-server tools (`diagnostics`, `lsp`, `rename_symbol`, `outline`, and Claude
//! Code's `LSP`), and [`after_call`], which gives every change its diagnostics.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolyard_core::{
    Annotations, Engine, Tool, ToolContext, ToolError, ToolInfo, ToolResult, Typed, TypedTool,
};
use toolyard_lsp::Manager;
use toolyard_workspace::{Expect, RelPath, hash_bytes};

use crate::ToolEnv;

/// The engine tools of this module, for the dialects that share them: those the [`Engine`]
/// table says ask the language servers.
pub const ENGINES: &[&str] = &LANGUAGE_ENGINES;

const fn language_engine_count() -> usize {
    let (mut i, mut n) = (0, 0);
    while i < Engine::BUILTIN.len() {
        if Engine::BUILTIN[i].asks_language_servers() {
            n += 1;
        }
        i += 1;
    }
    n
}

const LANGUAGE_ENGINES: [&str; language_engine_count()] = {
    let mut out = [""; language_engine_count()];
    let (mut i, mut n) = (0, 0);
    while i < Engine::BUILTIN.len() {
        let e = Engine::BUILTIN[i];
        if e.asks_language_servers() {
            out[n] = e.name();
            n += 1;
        }
        i += 1;
    }
    out
};

/// The engine a call ran under, by its name (`custom` for a catalog command tool).
fn engine_named(name: &str) -> Option<Engine> {
    match name {
        "custom" => Some(Engine::Custom),
        _ => Engine::builtin(name),
    }
}

/// Whether calls of `engine` run commands (their changed files, and open documents changed on
/// disk, are sent to the servers after them).
fn runs_commands(engine: &str) -> bool {
    engine_named(engine).is_some_and(Engine::runs_commands)
}

/// Locations listed per answer; the rest are counted.
const MAX_LOCATIONS: usize = 50;
/// Characters of an outline of a directory.
const OUTLINE_BUDGET: usize = 12_000;

/// The tools of this module.
pub fn tools(env: Arc<ToolEnv>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(Typed(Diagnostics { env: env.clone() })),
        Arc::new(Typed(Lsp {
            env: env.clone(),
            claude: false,
        })),
        Arc::new(Typed(RenameSymbol { env: env.clone() })),
        Arc::new(Typed(Outline { env })),
    ]
}

/// Claude Code's `LSP` tool over the same engine.
pub fn claude_code_tool(env: Arc<ToolEnv>) -> Arc<dyn Tool> {
    Arc::new(Typed(ClaudeLsp(Lsp { env, claude: true })))
}

/// After a call of `engine` (in the server process): a read opens its file with its server in
/// the background; a change waits (up to `[lsp] wait_ms`) for the diagnostics of the files it
/// changed and appends what the change did to `result`; a command's changed files (its result
/// names them) and the open documents changed on disk are sent the same way. Other calls do
/// nothing. Blocks: call it on a thread that may block.
pub fn after_call(
    env: &ToolEnv,
    engine: &str,
    session: &str,
    args: &Value,
    result: &mut ToolResult,
) {
    let Some(m) = &env.lsp else { return };
    if !result.success && result.files_changed.is_empty() {
        return;
    }
    // A read's success means its file was read: its server hears of it, with no wait.
    if engine == Engine::ReadFile.name() {
        if let Some(rel) = path_arg(env, args) {
            m.on_read(&rel);
        }
        return;
    }
    // A command's result names the files it changed (see `capture::scope_call`); open
    // documents changed on disk meanwhile (by a command run inline, or outside the capture's
    // scope) are sent too.
    let mut files = result.files_changed.clone();
    if runs_commands(engine) {
        for f in m.changed_on_disk() {
            if !files.contains(&f) {
                files.push(f);
            }
        }
    }
    if files.is_empty() {
        return;
    }
    if let Some(note) = m.after_change(session, &files) {
        result.output.push_str("\n\ndiagnostics:\n");
        result.output.push_str(&note);
    }
}

/// Whether [`after_call`] may wait after this result (a change, or a command); a read's step
/// never does.
pub fn may_block(engine: &str, result: &ToolResult) -> bool {
    !result.files_changed.is_empty() || (result.success && runs_commands(engine))
}

/// Whether a call of `engine` with `args` may wait for a language server (so it should not
/// run on a transport's own thread).
pub fn may_wait(
    env: &ToolEnv,
    engine: &str,
    args: Option<&serde_json::Map<String, Value>>,
) -> bool {
    let Some(m) = &env.lsp else { return false };
    engine_named(engine).is_some_and(|e| e.asks_language_servers() || e.runs_commands())
        || args
            .and_then(|a| path_of(env, |k| a.get(k)))
            .is_some_and(|rel| m.covers(&rel))
}

/// The path arguments of a call (all [`after_call`] needs of them), without copying the rest
/// (a write's content).
pub fn path_args(args: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for k in PATH_KEYS {
        if let Some(v) = args.get(*k) {
            out.insert((*k).to_string(), v.clone());
        }
    }
    Value::Object(out)
}

/// The argument names that carry a call's file path, across dialects.
const PATH_KEYS: &[&str] = &["path", "file_path", "filePath", "absolute_path"];

/// The workspace-relative path of a call's `path` / `file_path` / `filePath` argument.
fn path_arg(env: &ToolEnv, args: &Value) -> Option<String> {
    path_of(env, |k| args.get(k))
}

fn path_of<'a>(env: &ToolEnv, get: impl Fn(&str) -> Option<&'a Value>) -> Option<String> {
    let p = PATH_KEYS
        .iter()
        .find_map(|k| get(k).and_then(Value::as_str))?;
    env.workspace
        .locate(p, env.workspace.root())
        .ok()
        .map(|r| r.to_string())
}

fn manager(env: &ToolEnv) -> Result<&Arc<Manager>, ToolError> {
    env.lsp.as_ref().ok_or_else(|| {
        ToolError::Unavailable(
            "language servers are not available in this server (its files live with a remote runner, or it was embedded without them)".into(),
        )
    })
}

fn locate(env: &ToolEnv, path: &str) -> Result<RelPath, ToolError> {
    env.workspace.locate(path, env.workspace.root())
}

fn lsp_err(e: toolyard_lsp::LspError) -> ToolError {
    match e {
        toolyard_lsp::LspError::NoServer(s) => ToolError::Unavailable(s),
        toolyard_lsp::LspError::Timeout { .. } => ToolError::Unavailable(e.to_string()),
        other => ToolError::Upstream(other.to_string()),
    }
}

/// Arguments of `diagnostics`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiagnosticsArgs {
    /// A file, or a directory (default: the whole workspace).
    pub path: Option<String>,
}

/// `diagnostics`: the current problems of a file, a directory or the workspace.
pub struct Diagnostics {
    env: Arc<ToolEnv>,
}

#[async_trait]
impl TypedTool for Diagnostics {
    type Args = DiagnosticsArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "diagnostics",
            "Current problems (errors, warnings) from the language server or check command: for a \
         file, the server is told its content as it is on disk now (after a command changed it, \
         too) and the call waits for diagnostics of that version; for a directory or the \
         workspace (no path), the problems known in the files the servers have looked at. Each \
         problem as path:line:col, severity, code, message and the line's text. Changes made \
         with the file tools already report their new problems; use this after commands, or \
         when a change said it was still checking.",
            Annotations::READ_ONLY,
        )
    }

    async fn run(&self, args: DiagnosticsArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let m = manager(&self.env)?;
        let text = match args.path.as_deref().filter(|p| !p.is_empty() && *p != ".") {
            None => m.diagnostics_under(&ctx.session_id, ""),
            Some(p) => {
                let rel = locate(&self.env, p)?;
                match self.env.workspace.metadata(&rel)? {
                    None => {
                        return Err(ToolError::NotFound(format!(
                            "{rel} does not exist; give a file or directory of the workspace, or no path for all of it"
                        )));
                    }
                    Some(md) if md.is_dir() => m.diagnostics_under(&ctx.session_id, rel.as_str()),
                    Some(_) => m.diagnostics_of(&ctx.session_id, rel.as_str()),
                }
            }
        };
        Ok(ToolResult::ok(text))
    }
}

/// The nine operations, as Claude Code names them.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum Operation {
    /// Where the symbol at the position is defined.
    GoToDefinition,
    /// Every reference to the symbol at the position.
    FindReferences,
    /// The type and documentation of the symbol at the position.
    Hover,
    /// The symbols of the file.
    DocumentSymbol,
    /// Symbols of the whole workspace matching `query`.
    WorkspaceSymbol,
    /// The implementations of the interface or method at the position.
    GoToImplementation,
    /// The call-hierarchy item at the position.
    PrepareCallHierarchy,
    /// Who calls the function at the position.
    IncomingCalls,
    /// What the function at the position calls.
    OutgoingCalls,
}

/// Arguments of `lsp`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LspArgs {
    /// The operation.
    pub operation: Operation,
    /// The file (its language picks the server).
    pub path: String,
    /// 1-based line, as read_file shows it (default 1).
    pub line: Option<u32>,
    /// 1-based column (default 1).
    pub character: Option<u32>,
    /// The name to look for (workspaceSymbol; default: the word at the position).
    pub query: Option<String>,
}

/// Arguments of Claude Code's `LSP`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClaudeLspArgs {
    /// The operation.
    pub operation: Operation,
    /// The file (absolute or relative to the workspace).
    #[serde(rename = "filePath")]
    pub file_path: String,
    /// 1-based line.
    pub line: Option<u32>,
    /// 1-based character.
    pub character: Option<u32>,
    /// The name to look for (workspaceSymbol).
    pub query: Option<String>,
}

/// `lsp`: code navigation through the language server.
pub struct Lsp {
    env: Arc<ToolEnv>,
    claude: bool,
}

const LSP_DESCRIPTION: &str = "Code navigation through the file's language server: \
     goToDefinition, findReferences, hover, documentSymbol, workspaceSymbol (with query), \
     goToImplementation, prepareCallHierarchy, incomingCalls, outgoingCalls. line and \
     character are 1-based, as read_file shows them, and point into the symbol. Each location \
     comes back as path:line:col with its line of text.";

#[async_trait]
impl TypedTool for Lsp {
    type Args = LspArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new("lsp", LSP_DESCRIPTION, Annotations::READ_ONLY)
    }

    async fn run(&self, args: LspArgs, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let _ = self.claude;
        navigate(&self.env, &args).map(ToolResult::ok)
    }
}

/// Claude Code's `LSP`.
pub struct ClaudeLsp(Lsp);

#[async_trait]
impl TypedTool for ClaudeLsp {
    type Args = ClaudeLspArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new("LSP", LSP_DESCRIPTION, Annotations::READ_ONLY)
    }

    async fn run(&self, a: ClaudeLspArgs, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let args = LspArgs {
            operation: a.operation,
            path: a.file_path,
            line: a.line,
            character: a.character,
            query: a.query,
        };
        navigate(&self.0.env, &args).map(ToolResult::ok)
    }
}

fn position(args: &LspArgs) -> Value {
    json!({
        "line": args.line.unwrap_or(1).saturating_sub(1),
        "character": args.character.unwrap_or(1).saturating_sub(1),
    })
}

fn navigate(env: &ToolEnv, args: &LspArgs) -> Result<String, ToolError> {
    let m = manager(env)?;
    let rel = locate(env, &args.path)?;
    let rel = rel.as_str();
    if args.line == Some(0) || args.character == Some(0) {
        return Err(ToolError::InvalidArguments(
            "line and character are 1-based (the first line is 1, as read_file numbers it)".into(),
        ));
    }
    let pos = || json!({"position": position(args)});
    let locations = |method: &str, params: Value| -> Result<String, ToolError> {
        let (v, _) = m.request(rel, method, params).map_err(lsp_err)?;
        let items: Vec<Value> = match v {
            Value::Array(a) => a,
            Value::Null => Vec::new(),
            one => vec![one],
        };
        let locs: Vec<_> = items.iter().filter_map(|l| m.location(l)).collect();
        Ok(render_locations(m, &locs))
    };
    match args.operation {
        Operation::GoToDefinition => locations("textDocument/definition", pos()),
        Operation::GoToImplementation => locations("textDocument/implementation", pos()),
        Operation::FindReferences => {
            let mut p = pos();
            p["context"] = json!({"includeDeclaration": true});
            locations("textDocument/references", p)
        }
        Operation::Hover => {
            let (v, _) = m
                .request(rel, "textDocument/hover", pos())
                .map_err(lsp_err)?;
            let text = hover_text(v.get("contents").unwrap_or(&Value::Null));
            Ok(if text.trim().is_empty() {
                "no hover information at that position".into()
            } else {
                text
            })
        }
        Operation::DocumentSymbol => {
            let (v, _) = m
                .request(rel, "textDocument/documentSymbol", json!({}))
                .map_err(lsp_err)?;
            Ok(render_symbols(m, rel, &v, usize::MAX))
        }
        Operation::WorkspaceSymbol => {
            let query = match &args.query {
                Some(q) => q.clone(),
                None => word_at(m, rel, args).unwrap_or_default(),
            };
            let v = m
                .request_raw(rel, "workspace/symbol", json!({"query": query}))
                .map_err(lsp_err)?;
            let items = v.as_array().cloned().unwrap_or_default();
            if items.is_empty() {
                return Ok(format!("no symbols match `{query}`"));
            }
            let mut out = Vec::new();
            for s in items.iter().take(MAX_LOCATIONS) {
                let name = s.get("name").and_then(Value::as_str).unwrap_or("?");
                let kind = kind_name(s.get("kind").and_then(Value::as_u64).unwrap_or(0));
                let loc = s.get("location").and_then(|l| m.location(l));
                out.push(match loc {
                    Some(l) => format!("{kind} {name}  {}", render_location(m, &l)),
                    None => format!("{kind} {name}"),
                });
            }
            if items.len() > MAX_LOCATIONS {
                out.push(format!("... and {} more", items.len() - MAX_LOCATIONS));
            }
            Ok(out.join("\n"))
        }
        Operation::PrepareCallHierarchy | Operation::IncomingCalls | Operation::OutgoingCalls => {
            let (v, _) = m
                .request(rel, "textDocument/prepareCallHierarchy", pos())
                .map_err(lsp_err)?;
            let items = v.as_array().cloned().unwrap_or_default();
            let Some(item) = items.first() else {
                return Ok("no function or method at that position".into());
            };
            if args.operation == Operation::PrepareCallHierarchy {
                let out: Vec<String> = items.iter().map(|i| render_item(m, i)).collect();
                return Ok(out.join("\n"));
            }
            let (method, key) = if args.operation == Operation::IncomingCalls {
                ("callHierarchy/incomingCalls", "from")
            } else {
                ("callHierarchy/outgoingCalls", "to")
            };
            let v = m
                .request_raw(rel, method, json!({"item": item}))
                .map_err(lsp_err)?;
            let calls = v.as_array().cloned().unwrap_or_default();
            if calls.is_empty() {
                return Ok(format!(
                    "no {} calls for {}",
                    if key == "from" {
                        "incoming"
                    } else {
                        "outgoing"
                    },
                    item.get("name").and_then(Value::as_str).unwrap_or("it")
                ));
            }
            let mut out = Vec::new();
            for c in calls.iter().take(MAX_LOCATIONS) {
                let Some(i) = c.get(key) else { continue };
                out.push(render_item(m, i));
                // Where the calls are: in the caller (incoming) or in this function (outgoing).
                let at_uri = if key == "from" {
                    i.get("uri").and_then(Value::as_str)
                } else {
                    item.get("uri").and_then(Value::as_str)
                };
                if let (Some(uri), Some(ranges)) =
                    (at_uri, c.get("fromRanges").and_then(Value::as_array))
                {
                    for r in ranges.iter().take(5) {
                        if let Some(l) = m.location(&json!({"uri": uri, "range": r})) {
                            out.push(format!("    call at {}", render_location(m, &l)));
                        }
                    }
                }
            }
            if calls.len() > MAX_LOCATIONS {
                out.push(format!("... and {} more", calls.len() - MAX_LOCATIONS));
            }
            Ok(out.join("\n"))
        }
    }
}

fn word_at(m: &Manager, rel: &str, args: &LspArgs) -> Option<String> {
    let line = m.line_text(rel, args.line.unwrap_or(1).saturating_sub(1))?;
    let col = args.character.unwrap_or(1).saturating_sub(1) as usize;
    let chars: Vec<char> = line.chars().collect();
    let is_word = |c: &char| c.is_alphanumeric() || *c == '_';
    let mut a = col.min(chars.len());
    while a > 0 && is_word(&chars[a - 1]) {
        a -= 1;
    }
    let mut b = col.min(chars.len());
    while b < chars.len() && is_word(&chars[b]) {
        b += 1;
    }
    (b > a).then(|| chars[a..b].iter().collect())
}

fn render_location(m: &Manager, l: &toolyard_lsp::Location) -> String {
    let text = m.line_text(&l.path, l.line).unwrap_or_default();
    format!("{}:{}:{}  | {}", l.path, l.line + 1, l.col + 1, text.trim())
}

fn render_locations(m: &Manager, locs: &[toolyard_lsp::Location]) -> String {
    if locs.is_empty() {
        return "no locations found at that position (is line:character inside the symbol's name?)"
            .into();
    }
    let mut out: Vec<String> = locs
        .iter()
        .take(MAX_LOCATIONS)
        .map(|l| render_location(m, l))
        .collect();
    if locs.len() > MAX_LOCATIONS {
        out.push(format!("... and {} more", locs.len() - MAX_LOCATIONS));
    }
    out.join("\n")
}

fn render_item(m: &Manager, i: &Value) -> String {
    let name = i.get("name").and_then(Value::as_str).unwrap_or("?");
    let kind = kind_name(i.get("kind").and_then(Value::as_u64).unwrap_or(0));
    let uri = i.get("uri").and_then(Value::as_str).unwrap_or_default();
    let range = i.get("selectionRange").or_else(|| i.get("range"));
    let loc = range.and_then(|r| m.location(&json!({"uri": uri, "range": r})));
    match loc {
        Some(l) => format!("{kind} {name}  {}", render_location(m, &l)),
        None => format!("{kind} {name}"),
    }
}

fn hover_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(hover_text).collect::<Vec<_>>().join("\n"),
        Value::Object(o) => o
            .get("value")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

/// The LSP `SymbolKind`'s name.
fn kind_name(k: u64) -> &'static str {
    const KINDS: [&str; 26] = [
        "file",
        "module",
        "namespace",
        "package",
        "class",
        "method",
        "property",
        "field",
        "constructor",
        "enum",
        "interface",
        "function",
        "variable",
        "constant",
        "string",
        "number",
        "boolean",
        "array",
        "object",
        "key",
        "null",
        "enum-member",
        "struct",
        "event",
        "operator",
        "type-parameter",
    ];
    usize::try_from(k)
        .ok()
        .and_then(|k| k.checked_sub(1))
        .and_then(|i| KINDS.get(i))
        .copied()
        .unwrap_or("symbol")
}

/// A `documentSymbol` answer as an indented outline: kind, name, lines, detail. `depth`
/// limits nesting (1: top level only).
fn render_symbols(m: &Manager, rel: &str, v: &Value, depth: usize) -> String {
    let items = v.as_array().cloned().unwrap_or_default();
    if items.is_empty() {
        return format!("{rel}: no symbols");
    }
    let mut out = Vec::new();
    fn walk(
        m: &Manager,
        rel: &str,
        items: &[Value],
        level: usize,
        depth: usize,
        out: &mut Vec<String>,
    ) {
        for s in items {
            let name = s.get("name").and_then(Value::as_str).unwrap_or("?");
            let kind = kind_name(s.get("kind").and_then(Value::as_u64).unwrap_or(0));
            let range = s
                .get("range")
                .or_else(|| s.get("location").and_then(|l| l.get("range")));
            let lines = range
                .and_then(|r| {
                    let a = r.get("start")?.get("line")?.as_u64()? + 1;
                    let b = r.get("end")?.get("line")?.as_u64()? + 1;
                    Some(if a == b {
                        format!("{a}")
                    } else {
                        format!("{a}-{b}")
                    })
                })
                .unwrap_or_default();
            let detail = s
                .get("detail")
                .and_then(Value::as_str)
                .filter(|d| !d.is_empty())
                .map(|d| format!("  {}", d.lines().next().unwrap_or_default()))
                .unwrap_or_else(|| {
                    // No detail: the line that declares it stands for its signature.
                    let line = s
                        .get("selectionRange")
                        .or(range)
                        .and_then(|r| r.get("start")?.get("line")?.as_u64())
                        .and_then(|l| u32::try_from(l).ok())
                        .and_then(|l| m.line_text(rel, l));
                    line.map(|l| format!("  | {}", l.trim()))
                        .unwrap_or_default()
                });
            out.push(format!(
                "{}{kind} {name} (line {lines}){detail}",
                "  ".repeat(level)
            ));
            if level + 1 < depth
                && let Some(children) = s.get("children").and_then(Value::as_array)
            {
                walk(m, rel, children, level + 1, depth, out);
            }
        }
    }
    walk(m, rel, &items, 0, depth, &mut out);
    out.join("\n")
}

/// Arguments of `rename_symbol`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameArgs {
    /// The file holding the symbol.
    pub path: String,
    /// 1-based line of the symbol.
    pub line: u32,
    /// 1-based column inside the symbol's name.
    pub character: u32,
    /// Its new name.
    pub new_name: String,
}

/// `rename_symbol`: the server's rename, applied as one journal group.
pub struct RenameSymbol {
    env: Arc<ToolEnv>,
}

#[async_trait]
impl TypedTool for RenameSymbol {
    type Args = RenameArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "rename_symbol",
            "Rename a symbol everywhere the language server finds it (definition and every \
         reference, across files), as one change: one undo reverts every file. line and \
         character are 1-based and point into the symbol's name. Refused, with the server's \
         reason, when it offers no rename there.",
            Annotations::MUTATING,
        )
    }

    async fn run(&self, args: RenameArgs, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let m = manager(&self.env)?;
        if args.line == 0 || args.character == 0 {
            return Err(ToolError::InvalidArguments(
                "line and character are 1-based (the first line is 1, as read_file numbers it)"
                    .into(),
            ));
        }
        if args.new_name.trim().is_empty() {
            return Err(ToolError::InvalidArguments("new_name is empty".into()));
        }
        let rel = locate(&self.env, &args.path)?;
        let params = json!({
            "position": {"line": args.line - 1, "character": args.character - 1},
            "newName": args.new_name,
        });
        let (edit, who) = m
            .request(rel.as_str(), "textDocument/rename", params)
            .map_err(lsp_err)?;
        if edit.is_null() {
            return Err(ToolError::InvalidArguments(format!(
                "{who} offers no rename at {rel}:{}:{}: point line and character into a symbol's name (lsp documentSymbol lists them)",
                args.line, args.character
            )));
        }
        let per_file = workspace_edits(m, &edit)?;
        if per_file.is_empty() {
            return Err(ToolError::InvalidArguments(format!(
                "{who} found nothing to rename at {rel}:{}:{}",
                args.line, args.character
            )));
        }
        // Every file's new content first: nothing is written unless all of them apply.
        let mut plan: Vec<(RelPath, Vec<u8>, Expect, usize)> = Vec::new();
        for (path, edits) in &per_file {
            let r = locate(&self.env, path).map_err(|e| ToolError::Blocked {
                rule: "workspace".into(),
                reason: format!(
                    "the rename would change {path}, outside what the file tools may write: {e}"
                ),
            })?;
            let bytes = self.env.workspace.read(&r)?;
            let text = String::from_utf8(bytes.clone()).map_err(|_| {
                ToolError::InvalidArguments(format!(
                    "{r} is not UTF-8 text; the rename was not applied"
                ))
            })?;
            let new = toolyard_lsp::apply_text_edits(&text, edits).map_err(|e| {
                ToolError::Upstream(format!(
                    "{who}'s edit of {r} does not apply: {e}; nothing was changed"
                ))
            })?;
            plan.push((
                r,
                new.into_bytes(),
                Expect::Hash(hash_bytes(&bytes)),
                edits.len(),
            ));
        }
        let mut group: Option<i64> = None;
        let mut changed = Vec::new();
        for (r, bytes, expect, _) in &plan {
            match crate::files::commit_write_in(
                &self.env,
                ctx,
                "rename_symbol",
                r,
                bytes,
                expect,
                group,
            )
            .await
            {
                Ok((_, id)) => {
                    group.get_or_insert(id);
                    changed.push(r.to_string());
                }
                Err(e) => {
                    let restored = match group {
                        Some(first) => match self
                            .env
                            .records
                            .roll_back_call(&ctx.session_id, &ctx.call_id, first)
                            .await
                        {
                            Ok(_) => "the files already changed were restored".to_string(),
                            Err(re) => format!("restoring the files already changed failed: {re}"),
                        },
                        None => "nothing was changed".to_string(),
                    };
                    return Err(ToolError::Conflict(format!(
                        "the rename stopped at {r}: {e}; {restored}. Try again."
                    )));
                }
            }
        }
        let total: usize = plan.iter().map(|p| p.3).sum();
        let mut out = format!(
            "renamed to `{}`: {total} edit(s) in {} file(s), one change (one undo reverts all of them):",
            args.new_name,
            plan.len()
        );
        for (r, _, _, n) in &plan {
            out.push_str(&format!("\n  {r} ({n} edit(s))"));
        }
        Ok(ToolResult::ok(out)
            .with_files_changed(changed)
            .with_data(json!({"change_id": group})))
    }
}

/// A `WorkspaceEdit` as (path, text edits) per file; file creations, renames and deletions are
/// refused.
fn workspace_edits(m: &Manager, edit: &Value) -> Result<Vec<(String, Vec<Value>)>, ToolError> {
    let mut out: Vec<(String, Vec<Value>)> = Vec::new();
    if let Some(dc) = edit.get("documentChanges").and_then(Value::as_array) {
        for c in dc {
            if c.get("kind").is_some() {
                return Err(ToolError::InvalidArguments(
                    "the server's rename also creates, renames or deletes files, which rename_symbol does not do; rename the file with the file tools".into(),
                ));
            }
            let uri = c
                .get("textDocument")
                .and_then(|t| t.get("uri"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let edits = c
                .get("edits")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            out.push((m.uri_path(uri), edits));
        }
    } else if let Some(changes) = edit.get("changes").and_then(Value::as_object) {
        for (uri, edits) in changes {
            out.push((
                m.uri_path(uri),
                edits.as_array().cloned().unwrap_or_default(),
            ));
        }
    }
    out.retain(|(_, e)| !e.is_empty());
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Arguments of `outline`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutlineArgs {
    /// A file, or a directory (its files' top-level symbols).
    pub path: String,
}

/// `outline`: a file's symbols with line ranges, from its language server, else from its
/// tree-sitter grammar; a directory's most-referenced top-level symbols.
pub struct Outline {
    env: Arc<ToolEnv>,
}

/// The largest file outlined from its grammar.
const MAX_OUTLINE_BYTES: usize = 4 * 1024 * 1024;

#[async_trait]
impl TypedTool for Outline {
    type Args = OutlineArgs;

    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            "outline",
            "A file's symbols (classes, functions, methods, ...) with their line ranges (1-based, \
         as read_file numbers them) and signatures, nested; from the file's language server, \
         else from its tree-sitter grammar (Rust, Python, JavaScript/TypeScript, Go, C, Java), \
         so no server is needed. For a directory: the top-level symbols of its source files, \
         most referenced first (how often each name occurs as an identifier in those files), \
         within a size budget that says what it left out.",
            Annotations::READ_ONLY,
        )
    }

    async fn run(&self, args: OutlineArgs, _ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        let env = self.env.clone();
        toolyard_core::blocking::blocking(move || outline(&env, &args.path))
            .await
            .map_err(|e| ToolError::Io(format!("outline: {e}")))?
            .map(ToolResult::ok)
    }
}

/// The outline of `path`: the server's documentSymbol when a server covers the file, else (or
/// when it fails) the grammar's; a directory from the grammars.
fn outline(env: &ToolEnv, path: &str) -> Result<String, ToolError> {
    let rel = locate(env, path)?;
    let md = env.workspace.metadata(&rel)?.ok_or_else(|| {
        ToolError::NotFound(format!(
            "{rel} does not exist; give a file or a directory of the workspace"
        ))
    })?;
    if md.is_dir() {
        let dir = if rel.as_str() == "." {
            ""
        } else {
            rel.as_str()
        };
        return Ok(toolyard_outline::outline_dir(env.workspace.root(), dir, OUTLINE_BUDGET).text);
    }
    let grammar = toolyard_outline::Lang::of_path(rel.as_str());
    let mut note = None;
    if let Some(m) = &env.lsp
        && m.language_of(rel.as_str())
            .is_some_and(|l| l.server.is_some())
    {
        match m.request(rel.as_str(), "textDocument/documentSymbol", json!({})) {
            Ok((v, _)) if v.as_array().is_some_and(|a| !a.is_empty()) || grammar.is_none() => {
                return Ok(render_symbols(m, rel.as_str(), &v, usize::MAX));
            }
            Ok(_) => {}
            Err(e) if grammar.is_some() => {
                note = Some(format!("({e}; outlined from the file's syntax instead)"));
            }
            Err(e) => return Err(lsp_err(e)),
        }
    }
    let Some(lang) = grammar else {
        return Err(ToolError::Unavailable(format!(
            "no language server covers {rel} and there is no grammar for it here (outlines from grammars cover {}); read_file or grep it instead",
            toolyard_outline::Lang::all_extensions()
        )));
    };
    if md.len() > MAX_OUTLINE_BYTES as u64 {
        return Err(ToolError::InvalidArguments(format!(
            "{rel} is {} bytes, over the {} MiB outline limit; grep it for definitions instead",
            md.len(),
            MAX_OUTLINE_BYTES / 1024 / 1024
        )));
    }
    let bytes = env.workspace.read(&rel)?;
    let text = String::from_utf8_lossy(&bytes);
    let symbols = toolyard_outline::outline(lang, &text)
        .map_err(|e| ToolError::Upstream(format!("{rel}: {e}")))?;
    let body = if symbols.is_empty() {
        format!("{rel}: no symbols")
    } else {
        toolyard_outline::render(&symbols, usize::MAX)
    };
    Ok(match note {
        Some(n) => format!("{n}\n{body}"),
        None => body,
    })
}

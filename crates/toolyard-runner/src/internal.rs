//! The runner's side of the internal jobs (see [`crate::protocol`]): what the server asks of
//! this runner's workspace so that it never needs the files on its own disk. None is a model's
//! tool: only the server builds an [`InternalOp`], and no model call carries one.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolyard_core::{ToolError, ToolResult};
use toolyard_tools::ToolEnv;
use toolyard_workspace::{Expect, RelPath, Workspace};

use crate::protocol::{Chunk, InternalOp, PART_BYTES, Restore};

/// The most bytes one `spill_read` answers.
pub const MAX_SPILL_READ: u64 = 8 << 20;

/// The ref a git hydrate leaves at the revision it checked out: `export`'s default base.
pub const BASE_REF: &str = "refs/toolyard/base";

/// Internal job state that lives across jobs: archives being uploaded, by upload id.
#[derive(Default)]
pub(crate) struct Internal {
    uploads: Mutex<HashMap<String, (PathBuf, u64)>>,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// The result of an internal job: its data, or the error itself (the server acts on its kind).
fn answer(r: Result<Value, ToolError>) -> ToolResult {
    match r {
        Ok(data) => ToolResult::ok(String::new()).with_data(data),
        Err(e) => {
            let data = json!({ "internal_error": e });
            ToolResult::from(e).with_data(data)
        }
    }
}

impl Internal {
    /// Run the internal job `op` in `env`'s workspace.
    pub(crate) async fn run(
        &self,
        env: &ToolEnv,
        op: InternalOp,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> ToolResult {
        let ws = env.workspace.as_ref();
        let r = match op {
            InternalOp::ReadState { path, max } => read_state(ws, &path, max),
            InternalOp::ReadPart { path, offset } => read_part(ws, &path, offset),
            InternalOp::Upload(c) => self.append(c).map(|_| json!({})),
            InternalOp::Restore(a) => self.restore(ws, a),
            InternalOp::Hashes { paths, clean } => hashes(ws, &paths, clean),
            InternalOp::SpillRead { name, offset, len } => {
                spill_read(&env.state.outputs_dir(), &name, offset, len)
            }
            InternalOp::HydrateGit { url, rev } => {
                hydrate_git(ws.root(), GitSource { url, rev }, timeout, cancel).await
            }
            InternalOp::HydrateChunk(c) => self.hydrate_chunk(ws.root(), c),
            InternalOp::Export { base } => export(ws.root(), base, timeout, cancel).await,
        };
        answer(r)
    }
}

fn rel(ws: &Workspace, path: &str) -> Result<RelPath, ToolError> {
    ws.relative(path, ws.root())
}

/// `read_state {path, max}`: the bytes and mode, or absent (as a journal pre-image); a file
/// over `max` bytes answers its size instead of its bytes, to read with `read_part`.
fn read_state(ws: &Workspace, path: &str, max: usize) -> Result<Value, ToolError> {
    let pre = crate::pre_image::pre_image_state(ws, &rel(ws, path)?, max.min(PART_BYTES))?;
    serde_json::to_value(pre).map_err(ToolError::from)
}

/// `read_part {path, offset}`: up to a line's worth of the file's bytes from `offset`.
fn read_part(ws: &Workspace, path: &str, offset: u64) -> Result<Value, ToolError> {
    let path = rel(ws, path)?;
    let io = |e: std::io::Error| ws.map_err(e, &path);
    let mut file = ws.open_file(&path)?;
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut bytes = Vec::with_capacity(PART_BYTES);
    file.take(PART_BYTES as u64)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    Ok(json!({ "data": b64().encode(&bytes) }))
}

impl Internal {
    /// `restore`: a compare-and-swap write (or, with no content, removal) of one file.
    fn restore(&self, ws: &Workspace, a: Restore) -> Result<Value, ToolError> {
        let content = match (&a.upload, &a.content) {
            (Some(upload), _) => {
                let file = self.take_upload(upload)?;
                let read = std::fs::read(&file);
                let _ = std::fs::remove_file(&file);
                Some(read.map_err(|e| ToolError::Io(format!("reading upload {upload}: {e}")))?)
            }
            (None, Some(text)) => Some(b64().decode(text).map_err(|e| {
                ToolError::InvalidArguments(format!(
                    "restore {}: content is not base64: {e}",
                    a.path
                ))
            })?),
            (None, None) => None,
        };
        restore(ws, &a, content)
    }
}

/// Write `content` to `a.path` (remove it when `None`) if its hash is still `a.expect_hash`.
fn restore(ws: &Workspace, a: &Restore, content: Option<Vec<u8>>) -> Result<Value, ToolError> {
    let path = rel(ws, &a.path)?;
    if a.target.is_some() || a.target_absent {
        let target = a.target.as_deref().filter(|_| !a.target_absent);
        let bytes = content.unwrap_or_default();
        return match toolyard_records::restore_state(
            ws,
            &path,
            a.expect_hash.as_deref(),
            target,
            &bytes,
            a.mode,
        ) {
            Ok(()) => Ok(json!({ "hash": target })),
            Err(ToolError::StaleRead { .. }) => Err(ToolError::Conflict(format!(
                "{} changed on the runner since the undo was planned; nothing was written. Look at it and undo again",
                a.path
            ))),
            Err(e) => Err(e),
        };
    }
    let changed = |now: Option<&str>| {
        ToolError::Conflict(format!(
            "{} changed on the runner since the undo was planned ({}); nothing was written. Read the file and edit it instead, or undo again",
            a.path,
            if now.is_none() {
                "it is absent now"
            } else {
                "its content differs"
            }
        ))
    };
    match content {
        Some(bytes) => {
            let expect = match &a.expect_hash {
                Some(h) => Expect::Hash(h.clone()),
                None => Expect::Missing,
            };
            match ws.write_atomic_from(&path, &mut &bytes[..], &expect, a.mode) {
                Ok(_) => Ok(json!({ "hash": toolyard_workspace::hash_bytes(&bytes) })),
                Err(ToolError::StaleRead { .. }) => {
                    Err(changed(ws.hash_of(&path).ok().flatten().as_deref()))
                }
                Err(e) => Err(e),
            }
        }
        None => {
            let now = ws.hash_of(&path)?;
            if now != a.expect_hash {
                return Err(changed(now.as_deref()));
            }
            if now.is_some() {
                ws.remove_file(&path)?;
            }
            Ok(json!({ "hash": null }))
        }
    }
}

/// `hashes`: each path's current hash (`{"hash": h|null}`) or why it cannot be read
/// (`{"error": ..}`), in order.
fn hashes(ws: &Workspace, paths: &[String], clean: bool) -> Result<Value, ToolError> {
    let rows: Vec<Value> = paths
        .iter()
        .map(|p| {
            let row = match rel(ws, p).and_then(|r| ws.hash_of(&r)) {
                Ok(h) => json!({ "hash": h }),
                Err(e) => json!({ "error": e.to_string() }),
            };
            if clean {
                toolyard_records::remove_stale_temps(ws, p);
            }
            row
        })
        .collect();
    Ok(json!({ "hashes": rows }))
}

/// `spill_read`: bytes `offset..offset+len` of `outputs/NAME`.
fn spill_read(dir: &Path, name: &str, offset: u64, len: u64) -> Result<Value, ToolError> {
    let plain = !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && !name.contains('\0');
    if !plain {
        return Err(ToolError::InvalidArguments(format!(
            "spill_read: `{}` is not the name of a saved output (a file name, no directories)",
            name
        )));
    }
    let path = dir.join(name);
    let mut file = std::fs::File::open(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ToolError::NotFound(format!(
            "no saved output `{}` on the runner (outputs are pruned after a day)",
            name
        )),
        _ => ToolError::Io(format!("{}: {e}", path.display())),
    })?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| ToolError::Io(format!("{}: {e}", path.display())))?;
    let mut bytes = Vec::new();
    file.take(len.min(MAX_SPILL_READ))
        .read_to_end(&mut bytes)
        .map_err(|e| ToolError::Io(format!("{}: {e}", path.display())))?;
    let end = offset.saturating_add(bytes.len() as u64);
    Ok(json!({ "content": b64().encode(&bytes), "size": size, "eof": end >= size }))
}

/// A git revision to check out.
struct GitSource {
    url: String,
    rev: String,
}

/// Run git in `root`, bounded by `timeout` and `cancel`; its stdout, or an error with its stderr.
async fn git(
    root: &Path,
    args: &[&str],
    env: &[(&str, &Path)],
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<Vec<u8>, ToolError> {
    let mut cmd = tokio::process::Command::new("git");
    cmd.args(args)
        .current_dir(root)
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let shown = format!("git {}", args.join(" "));
    let run = cmd.output();
    let out = tokio::select! {
        o = tokio::time::timeout(timeout, run) => match o {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => return Err(ToolError::Unavailable(format!(
                "cannot run `{shown}` on the runner: {e}; install git where the runner runs"
            ))),
            Err(_) => return Err(ToolError::Timeout { ms: timeout.as_millis() as u64 }),
        },
        _ = cancel.cancelled() => return Err(ToolError::Cancelled),
    };
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(ToolError::Conflict(format!(
            "`{shown}` failed on the runner ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// `hydrate_git {url, rev}`: clone `url` into an empty workspace (or fetch it into a git
/// checkout) and check out `rev` detached; [`BASE_REF`] then names it for `export`.
async fn hydrate_git(
    root: &Path,
    src: GitSource,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<Value, ToolError> {
    if src.rev.starts_with('-') || src.url.starts_with('-') {
        return Err(ToolError::InvalidArguments(
            "hydrate: the URL and revision must not start with `-`".into(),
        ));
    }
    let empty = std::fs::read_dir(root)
        .map_err(|e| ToolError::Io(format!("{}: {e}", root.display())))?
        .next()
        .is_none();
    if empty {
        // Copies, not hardlinks: a local source lies outside what the sandbox lets this runner link from.
        git(
            root,
            &[
                "clone",
                "--quiet",
                "--no-hardlinks",
                "--no-checkout",
                "--",
                &src.url,
                ".",
            ],
            &[],
            timeout,
            cancel,
        )
        .await?;
    } else if root.join(".git").exists() {
        git(
            root,
            &[
                "fetch",
                "--quiet",
                "--tags",
                "--",
                &src.url,
                "+refs/heads/*:refs/remotes/origin/*",
            ],
            &[],
            timeout,
            cancel,
        )
        .await?;
    } else {
        return Err(ToolError::Conflict(format!(
            "the runner's workspace {} is neither empty nor a git checkout; import into an empty workspace",
            root.display()
        )));
    }
    let candidates = [src.rev.clone(), format!("origin/{}", src.rev)];
    let mut last = None;
    for rev in &candidates {
        let spec = format!("{rev}^{{commit}}");
        match git(
            root,
            &["rev-parse", "--verify", "--quiet", &spec],
            &[],
            timeout,
            cancel,
        )
        .await
        {
            Ok(sha) => {
                let sha = String::from_utf8_lossy(&sha).trim().to_string();
                git(
                    root,
                    &[
                        "-c",
                        "advice.detachedHead=false",
                        "checkout",
                        "--quiet",
                        "--force",
                        "--detach",
                        &sha,
                    ],
                    &[],
                    timeout,
                    cancel,
                )
                .await?;
                git(root, &["update-ref", BASE_REF, &sha], &[], timeout, cancel).await?;
                return Ok(json!({ "head": sha }));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(ToolError::NotFound(format!(
        "revision `{}` is not in {} ({}); name a commit, tag or branch of it",
        src.rev,
        src.url,
        last.map(|e| e.to_string()).unwrap_or_default()
    )))
}

impl Internal {
    /// `upload {upload, seq, data}` (and each `hydrate_chunk`): append part `seq` of an upload
    /// to its file in the runner's temp dir; parts come in order from 0. The file's path.
    fn append(&self, c: Chunk) -> Result<PathBuf, ToolError> {
        let safe = !c.upload.is_empty()
            && c.upload.len() <= 64
            && c.upload
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_');
        if !safe {
            return Err(ToolError::InvalidArguments(
                "the upload id must be 1 to 64 letters, digits, - or _".into(),
            ));
        }
        let bytes = b64().decode(&c.data).map_err(|e| {
            ToolError::InvalidArguments(format!("an upload part is not base64: {e}"))
        })?;
        let mut uploads = self.uploads.lock().unwrap_or_else(|p| p.into_inner());
        let path = std::env::temp_dir().join(format!("upload-{}", c.upload));
        let expected = uploads.get(&c.upload).map_or(0, |u| u.1);
        if c.seq != expected {
            uploads.remove(&c.upload);
            let _ = std::fs::remove_file(&path);
            return Err(ToolError::Conflict(format!(
                "part {} of upload {} arrived, {expected} was expected; start the upload again",
                c.seq, c.upload
            )));
        }
        let io = |e: std::io::Error| ToolError::Io(format!("{}: {e}", path.display()));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(c.seq > 0)
            .write(true)
            .truncate(c.seq == 0)
            .open(&path)
            .map_err(io)?;
        file.write_all(&bytes).map_err(io)?;
        uploads.insert(c.upload.clone(), (path.clone(), c.seq + 1));
        Ok(path)
    }

    /// The file of a finished upload, which leaves the table (the caller removes the file).
    fn take_upload(&self, upload: &str) -> Result<PathBuf, ToolError> {
        let mut uploads = self.uploads.lock().unwrap_or_else(|p| p.into_inner());
        uploads.remove(upload).map(|u| u.0).ok_or_else(|| {
            ToolError::InvalidArguments(format!(
                "upload {upload} was never sent; start the upload again"
            ))
        })
    }

    /// `hydrate_chunk {upload, seq, data, last}`: append a chunk of a tar archive; the last one
    /// unpacks it over the workspace.
    fn hydrate_chunk(&self, root: &Path, c: Chunk) -> Result<Value, ToolError> {
        let (seq, last, upload) = (c.seq, c.last, c.upload.clone());
        let path = self.append(c)?;
        if !last {
            return Ok(json!({ "received": seq }));
        }
        self.take_upload(&upload)?;
        let unpacked = unpack(&path, root);
        let _ = std::fs::remove_file(&path);
        unpacked.map(|n| json!({ "files": n }))
    }
}

/// Unpack the tar archive at `archive` over `root`: entries that would land outside it (an
/// absolute path, `..`, through a link) are refused by the tar crate.
fn unpack(archive: &Path, root: &Path) -> Result<u64, ToolError> {
    let io = |e: std::io::Error| ToolError::Io(format!("unpacking the archive: {e}"));
    let file = std::fs::File::open(archive).map_err(io)?;
    let mut tar = tar::Archive::new(file);
    tar.set_preserve_permissions(true);
    tar.set_overwrite(true);
    tar.set_unpack_xattrs(false);
    let mut n = 0u64;
    for entry in tar.entries().map_err(io)? {
        let mut entry = entry.map_err(io)?;
        if !entry.unpack_in(root).map_err(io)? {
            let name = entry
                .path()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            return Err(ToolError::outside(
                name,
                "an archive entry outside the workspace",
            ));
        }
        n += 1;
    }
    Ok(n)
}

/// `export {base}`: `git diff --binary` of the working tree (untracked files included, the
/// real index untouched) against `base`, else the hydrated base, else `HEAD`.
async fn export(
    root: &Path,
    base: Option<String>,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<Value, ToolError> {
    if !root.join(".git").exists() {
        // The server diffs the journaled files instead.
        return Ok(json!({ "git": false }));
    }
    let base = match base {
        Some(b) if b.starts_with('-') => {
            return Err(ToolError::InvalidArguments(format!(
                "export: the base `{b}` must not start with `-`"
            )));
        }
        Some(b) => b,
        None => match git(
            root,
            &["rev-parse", "--verify", "--quiet", BASE_REF],
            &[],
            timeout,
            cancel,
        )
        .await
        {
            Ok(_) => BASE_REF.to_string(),
            Err(_) => "HEAD".to_string(),
        },
    };
    // A private index: `git add -A` there sees untracked files without touching the real one.
    let index = std::env::temp_dir().join(format!("export-index-{}", fastrand_suffix()));
    let real = root.join(".git/index");
    if real.exists() {
        std::fs::copy(&real, &index)
            .map_err(|e| ToolError::Io(format!("{}: {e}", real.display())))?;
    }
    let env = [("GIT_INDEX_FILE", index.as_path())];
    let diff = async {
        git(root, &["add", "-A", "--", "."], &env, timeout, cancel).await?;
        git(
            root,
            &["diff", "--cached", "--binary", "--no-color", &base, "--"],
            &env,
            timeout,
            cancel,
        )
        .await
    }
    .await;
    let _ = std::fs::remove_file(&index);
    let patch = diff?;
    Ok(json!({ "patch": b64().encode(&patch), "base": base, "bytes": patch.len() }))
}

/// A suffix that keeps concurrent exports' temp files apart.
fn fastrand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

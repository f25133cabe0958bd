//! What an entry of the runner's workspace holds now, on the wire: the previous content a
//! journal entry keeps (for the records requests of a remote runner, and for the internal jobs).

use toolyard_core::ToolError;
use toolyard_workspace::{RelPath, Workspace};

use crate::protocol::{MAX_PRE_IMAGE_BYTES, PreImageWire};

/// What `path` holds now, for the router's journal: its bytes and mode, or absent.
pub(crate) fn file_state(
    ws: &Workspace,
    path: &RelPath,
) -> Result<(Option<Vec<u8>>, Option<u32>), ToolError> {
    use cap_std::fs::PermissionsExt;
    use std::io::Read;
    let Some(meta) = ws.metadata(path)? else {
        return Ok((None, None));
    };
    if !meta.is_file() {
        return Err(ToolError::InvalidArguments(format!(
            "{path} is not a regular file; only regular files can be changed"
        )));
    }
    let too_big = |len: u64| {
        ToolError::InvalidArguments(format!(
            "{path} is {len} bytes; on a remote runner a change ships the file's previous content to the journal, at most {MAX_PRE_IMAGE_BYTES} bytes; change a smaller file, or split this one with run_command"
        ))
    };
    if meta.len() > MAX_PRE_IMAGE_BYTES {
        return Err(too_big(meta.len()));
    }
    let file = ws.open_file(path)?;
    let mode = file
        .metadata()
        .map_err(|e| ws.map_err(e, path))?
        .permissions()
        .mode()
        & 0o7777;
    let mut bytes = Vec::new();
    // Bounded even if the file grows after the check.
    file.take(MAX_PRE_IMAGE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ws.map_err(e, path))?;
    if bytes.len() as u64 > MAX_PRE_IMAGE_BYTES {
        return Err(too_big(bytes.len() as u64));
    }
    Ok((Some(bytes), Some(mode)))
}

/// [`file_state`] on the wire, the content left out (its size said instead) past `max` bytes.
pub(crate) fn pre_image(
    ws: &Workspace,
    path: &RelPath,
    max: usize,
) -> Result<PreImageWire, ToolError> {
    let (bytes, mode) = file_state(ws, path)?;
    Ok(match bytes {
        Some(b) if b.len() > max => {
            let mut wire = PreImageWire::new(None, mode);
            wire.hash = Some(toolyard_workspace::hash_bytes(&b));
            wire.size = Some(b.len() as u64);
            wire
        }
        b => PreImageWire::new(b.as_deref(), mode),
    })
}

/// [`pre_image`] of any kind of entry, not following a final symlink: a symlink answers its
/// target as content and its state hash, a directory its mode and state hash (an undo of a
/// command's change may restore or replace either).
pub(crate) fn pre_image_state(
    ws: &Workspace,
    path: &RelPath,
    max: usize,
) -> Result<PreImageWire, ToolError> {
    let (state, mode) = toolyard_records::state_at(ws, path)?;
    match toolyard_records::EntryKind::of_hash(state.as_deref()) {
        toolyard_records::EntryKind::Symlink => {
            let target = toolyard_records::read_link(ws, path)?;
            let mut wire = PreImageWire::new(Some(&target), None);
            wire.state = state;
            Ok(wire)
        }
        toolyard_records::EntryKind::Dir => {
            let mut wire = PreImageWire::new(None, mode);
            wire.state = state;
            Ok(wire)
        }
        _ => pre_image(ws, path, max),
    }
}

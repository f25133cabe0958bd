//! A runner's records requests: checked as claims (its own sessions, its own journal
//! entries), their parts sent ahead put back, then carried out with the server's records.

use std::collections::{HashMap, HashSet};

use toolyard_core::ToolError;
use toolyard_records::Records;
use toolyard_runner::protocol::{MAX_PRE_IMAGE_BYTES, RecordOp, Reply};

use super::PendingMap;

/// The previous contents a runner is sending in parts ([`RecordOp::PreImagePart`]), by upload
/// id, until the journal request that names one takes it.
#[derive(Default)]
pub(crate) struct Uploads {
    parts: HashMap<String, (u64, Vec<u8>)>,
    /// Bytes held, all uploads together.
    held: u64,
}

/// The most bytes one link's uploads hold at once (two whole pre-images).
const MAX_UPLOADING: u64 = 2 * MAX_PRE_IMAGE_BYTES;

/// The most uploads one link has open at once, and the longest upload id.
const MAX_UPLOADS: usize = 16;
const MAX_UPLOAD_ID_BYTES: usize = 128;

impl Uploads {
    /// Append part `seq` (base64 `data`) to `upload`; an upload whose parts come out of order
    /// or grow past the limits is dropped.
    fn add(&mut self, upload: &str, seq: u64, data: &str) -> Result<(), ToolError> {
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| {
                ToolError::InvalidArguments(format!("a pre-image part is not base64: {e}"))
            })?;
        let (next, have) = self
            .parts
            .get(upload)
            .map_or((0, 0), |(n, b)| (*n, b.len() as u64));
        let len = bytes.len() as u64;
        let refused = if upload.len() > MAX_UPLOAD_ID_BYTES {
            Some(format!(
                "an upload id is longer than {MAX_UPLOAD_ID_BYTES} bytes"
            ))
        } else if !self.parts.contains_key(upload) && self.parts.len() >= MAX_UPLOADS {
            Some(format!(
                "this runner has {MAX_UPLOADS} uploads open already"
            ))
        } else if seq != next {
            Some(format!(
                "part {seq} of upload {upload} came, {next} was expected"
            ))
        } else if have + len > MAX_PRE_IMAGE_BYTES {
            Some(format!(
                "upload {upload} is over {MAX_PRE_IMAGE_BYTES} bytes"
            ))
        } else if self.held + len > MAX_UPLOADING {
            Some(format!(
                "this runner's uploads in flight are over {MAX_UPLOADING} bytes"
            ))
        } else {
            None
        };
        if let Some(why) = refused {
            self.take(upload);
            return Err(ToolError::InvalidArguments(format!(
                "{why}; nothing was written, retry the call"
            )));
        }
        let entry = self.parts.entry(upload.to_string()).or_default();
        entry.0 += 1;
        entry.1.extend_from_slice(&bytes);
        self.held += len;
        Ok(())
    }

    /// The whole content of `upload`, which leaves the store.
    fn take(&mut self, upload: &str) -> Option<Vec<u8>> {
        let (_, bytes) = self.parts.remove(upload)?;
        self.held -= bytes.len() as u64;
        Some(bytes)
    }

    /// `op` with the content its upload names put back (`None`: a part, kept here until its
    /// request comes). `remote`: a journal request must bring its pre-image.
    fn put_back(&mut self, mut op: RecordOp, remote: bool) -> Result<Option<RecordOp>, ToolError> {
        match &mut op {
            RecordOp::PreImagePart {
                upload, seq, data, ..
            } => {
                self.add(upload, *seq, data)?;
                return Ok(None);
            }
            RecordOp::JournalBegin { pre: Some(pre), .. } => {
                if let Some(upload) = &pre.upload {
                    pre.received = self.take(upload);
                }
            }
            // Never read this disk for a remote runner's file.
            RecordOp::JournalBegin {
                pre: None, path, ..
            } if remote => {
                return Err(ToolError::Unavailable(format!(
                    "the runner sent no previous content of {path} to journal, so nothing was written; the runner is older than this server: install the same toolyard release on both sides"
                )));
            }
            RecordOp::JournalCommand {
                entries, upload, ..
            } => {
                let content = match upload.take() {
                    Some(upload) => self.take(&upload).ok_or_else(|| {
                        ToolError::InvalidArguments(format!(
                            "the runner named upload {upload} for a command's changes, which it never sent whole; nothing was journaled"
                        ))
                    })?,
                    None => Vec::new(),
                };
                let total: u64 = entries.iter().map(|e| e.len).sum();
                if total != content.len() as u64 {
                    return Err(ToolError::InvalidArguments(format!(
                        "a command's previous contents are {} bytes, its entries name {total}; nothing was journaled",
                        content.len()
                    )));
                }
                let mut at = 0usize;
                for e in entries.iter_mut() {
                    // The lengths sum to the content's (checked above), so this stays in bounds.
                    let end = at + usize::try_from(e.len).unwrap_or(0);
                    e.entry.old_content = content.get(at..end).unwrap_or_default().to_vec();
                    at = end;
                }
            }
            _ => {}
        }
        Ok(Some(op))
    }
}

/// Whether a runner may make `op`: its session is one of this runner's jobs in flight, and a
/// journal entry it ends is one it began.
pub(super) fn claim_is_owned(
    op: &RecordOp,
    pending: &PendingMap,
    begun: &std::sync::Mutex<HashSet<i64>>,
) -> Result<(), ToolError> {
    let Some(session) = op.session() else {
        let RecordOp::JournalEnd { change, .. } = op else {
            return Err(ToolError::Io(
                "internal: a records request of no session".into(),
            ));
        };
        let owned = begun.lock().map(|mut b| b.remove(change)).unwrap_or(false);
        return if owned {
            Ok(())
        } else {
            Err(ToolError::Blocked {
                rule: "runner records".into(),
                reason: format!("change {change} was not begun by this runner"),
            })
        };
    };
    let ok = pending
        .lock()
        .map(|p| p.values().any(|job| job.session == session))
        .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(ToolError::Blocked {
            rule: "runner records".into(),
            reason: format!("this runner has no call of session {session} in flight"),
        })
    }
}

/// Carry out a runner's records request with the server's own records, once the parts it sent
/// ahead are put back into the request that names them. `remote`: the runner's workspace is
/// not on this disk, so a journal request must bring its pre-image.
pub(super) async fn apply(
    records: &dyn Records,
    op: RecordOp,
    remote: bool,
    uploads: &std::sync::Mutex<Uploads>,
) -> Reply {
    let taken = uploads
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .put_back(op, remote);
    match taken {
        Ok(Some(op)) => records.apply(op).await,
        Ok(None) => Reply::Ok(None),
        Err(e) => Reply::Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::oneshot;

    use super::super::Pending;
    use super::*;

    fn pending_of(session: &str) -> PendingMap {
        let (done, _rx) = oneshot::channel();
        let map = HashMap::from([(
            "job-1".to_string(),
            Pending {
                done,
                progress: Arc::new(|_| {}),
                session: session.into(),
                mutating: true,
            },
        )]);
        Arc::new(std::sync::Mutex::new(map))
    }

    fn write(session: &str) -> RecordOp {
        RecordOp::RecordWrite {
            session: session.into(),
            path: "a.txt".into(),
            hash: "h".into(),
        }
    }

    #[test]
    fn a_runner_may_claim_only_its_own_sessions_and_journal_entries() {
        let pending = pending_of("alice");
        let begun = std::sync::Mutex::new(HashSet::from([7]));
        assert!(claim_is_owned(&write("alice"), &pending, &begun).is_ok());
        let e = claim_is_owned(&write("bob"), &pending, &begun).unwrap_err();
        assert!(e.to_string().contains("session bob"), "{e}");
        let end = |change| RecordOp::JournalEnd { change, done: true };
        assert!(claim_is_owned(&end(8), &pending, &begun).is_err());
        assert!(claim_is_owned(&end(7), &pending, &begun).is_ok());
        assert!(
            claim_is_owned(&end(7), &pending, &begun).is_err(),
            "an entry is ended once"
        );
        let idle: PendingMap = Arc::default();
        assert!(claim_is_owned(&write("alice"), &idle, &begun).is_err());
    }

    #[test]
    fn a_runner_s_uploads_come_in_order_within_bounds_and_leave_when_taken() {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let mut u = Uploads::default();
        u.add("a", 0, &b64(b"one ")).unwrap();
        u.add("a", 1, &b64(b"two")).unwrap();
        assert_eq!(u.held, 7);
        // Out of order: refused, and the upload is dropped whole.
        let e = u.add("b", 1, &b64(b"x")).unwrap_err().to_string();
        assert!(e.contains("part 1 of upload b came, 0 was expected"), "{e}");
        u.add("c", 0, &b64(b"c")).unwrap();
        assert!(u.add("c", 5, &b64(b"c")).is_err());
        assert!(u.take("c").is_none(), "a refused upload is gone");
        assert!(u.add("d", 0, "not base64!").is_err());
        assert_eq!(u.take("a").as_deref(), Some(&b"one two"[..]));
        assert_eq!(u.held, 0, "taken uploads free what they held");
        assert!(u.take("a").is_none());
        // Past the per-link bound: refused without holding it.
        u.held = MAX_UPLOADING;
        let e = u.add("e", 0, &b64(b"x")).unwrap_err().to_string();
        assert!(e.contains("uploads in flight are over"), "{e}");
    }
}

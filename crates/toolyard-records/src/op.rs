//! The record operations as one enum, the API of the records both in this process and over a
//! runner's link (where each is one line of the job protocol): [`RecordOp`], answered by a
//! [`Reply`]. Adding an operation means a variant here and an arm in
//! [`LocalRecords::apply`](crate::LocalRecords).

use serde::{Deserialize, Serialize};
use toolyard_core::ToolError;
use toolyard_workspace::RelPath;

/// One record operation: what [`Records::apply`](crate::Records::apply) carries out, in this
/// process or (as a line of the job protocol) for a runner over its link.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordOp {
    /// The session read a file.
    RecordRead {
        /// Session.
        session: String,
        /// Workspace-relative path.
        path: String,
        /// Content hash.
        hash: String,
    },
    /// May the session overwrite the file?
    CheckWrite {
        /// Session.
        session: String,
        /// Workspace-relative path.
        path: String,
        /// Current content hash.
        current: String,
    },
    /// The session wrote a file.
    RecordWrite {
        /// Session.
        session: String,
        /// Workspace-relative path.
        path: String,
        /// New content hash.
        hash: String,
    },
    /// Journal the file before it changes.
    JournalBegin {
        /// Session.
        session: String,
        /// Call id.
        call_id: String,
        /// Tool.
        tool: String,
        /// Workspace-relative path.
        path: String,
        /// The content hash it will have.
        new_hash: String,
        /// The file's content before the change, when the router asked for pre-images.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pre: Option<PreImageWire>,
        /// The first change of the same call, for a call that changes several files: the
        /// change joins its journal group (undone together).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<i64>,
        /// The change removes the file (`new_hash` is then ignored).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        removal: bool,
    },
    /// The journaled change landed or not.
    JournalEnd {
        /// Change id.
        change: i64,
        /// Whether it landed.
        done: bool,
    },
    /// A part of a previous content too large for one line, before the `JournalBegin` whose
    /// pre-image names the upload; parts come in order from 0.
    PreImagePart {
        /// Session.
        session: String,
        /// The upload the parts belong to.
        upload: String,
        /// The part's number.
        seq: u64,
        /// The bytes in standard base64.
        data: String,
    },
    /// Undo the changes a call made so far, the journal group of its first change (a call
    /// that changes several files and fails part way): the server plans it from the journal
    /// and restores each file with a `restore` job.
    RollBack {
        /// Session.
        session: String,
        /// The call whose changes are undone (the undos' own journal entries too).
        call_id: String,
        /// The call's first change.
        first: i64,
    },
    /// Journal what a command changed (already done) as one group: each entry's previous
    /// content (a file's bytes, a symlink's target) concatenated in entry order, sent before
    /// in [`RecordOp::PreImagePart`]s of `upload` (none when there is no content).
    JournalCommand {
        /// Session.
        session: String,
        /// Call id.
        call_id: String,
        /// Tool.
        tool: String,
        /// The command line.
        command: String,
        /// The entries, in the order they apply.
        entries: Vec<CommandEntryWire>,
        /// What it changed out of scope.
        #[serde(default)]
        skipped: Vec<crate::Skipped>,
        /// The upload holding the previous contents.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        upload: Option<String>,
        /// When the capture began (Unix seconds).
        #[serde(default)]
        since: f64,
    },
    /// Undo the session's last change of the path (anthropic's `undo_edit`): the server plans
    /// it from the journal and restores the file with a `restore` job.
    UndoLast {
        /// Session.
        session: String,
        /// Call id (the undo's own journal entry).
        call_id: String,
        /// Workspace-relative path.
        path: String,
    },
}

/// One entry of a [`RecordOp::JournalCommand`]: a [`CommandEntry`](crate::CommandEntry) with
/// the length of its previous content in the upload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CommandEntryWire {
    /// The entry, its content apart.
    #[serde(flatten)]
    pub entry: crate::CommandEntry,
    /// How many bytes of the upload are its previous content.
    #[serde(default)]
    pub len: u64,
}

/// A file's previous state on the wire (see [`PreImage`](crate::PreImage)).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PreImageWire {
    /// The bytes in standard base64, `None` when the file did not exist.
    pub content: Option<String>,
    /// Their blake3 hash (hex), checked by the router.
    pub hash: Option<String>,
    /// The permission bits.
    pub mode: Option<u32>,
    /// The content did not fit one line: it was sent before in [`RecordOp::PreImagePart`]s
    /// of this upload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<String>,
    /// The content was left out of a `read_state` answer, being larger than asked: its size,
    /// to read with `read_part`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The path is not a regular file: its state hash (`symlink:...` with `content` the
    /// link's target, or `dir`), as `read_state` answers for an undo of a command's change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The content of `upload`, once the receiving side took it from the parts (never on the
    /// wire).
    #[serde(skip)]
    pub received: Option<Vec<u8>>,
}

impl PreImageWire {
    /// The pre-image of `content` (`None`: the file does not exist) with `mode`.
    pub fn new(content: Option<&[u8]>, mode: Option<u32>) -> Self {
        use base64::Engine;
        Self {
            content: content.map(|c| base64::engine::general_purpose::STANDARD.encode(c)),
            hash: content.map(toolyard_workspace::hash_bytes),
            mode,
            upload: None,
            size: None,
            state: None,
            received: None,
        }
    }

    /// The pre-image of `content` already at hand in this process (`None`: the file does not
    /// exist) with `mode`: nothing to encode.
    pub fn received(content: Option<Vec<u8>>, mode: Option<u32>) -> Self {
        Self {
            content: None,
            hash: content.as_deref().map(toolyard_workspace::hash_bytes),
            mode,
            upload: None,
            size: None,
            state: None,
            received: content,
        }
    }

    /// Whether the file existed (its content may have been sent apart).
    pub fn exists(&self) -> bool {
        self.content.is_some()
            || self.upload.is_some()
            || self.size.is_some()
            || self.received.is_some()
    }

    /// Check `bytes`, received apart, against the hash.
    pub fn check(&self, path: &str, bytes: &[u8]) -> Result<(), ToolError> {
        if self.hash.as_deref() == Some(toolyard_workspace::hash_bytes(bytes).as_str()) {
            return Ok(());
        }
        Err(ToolError::Io(format!(
            "the runner's previous content of {path} is unusable (its hash does not match its bytes); nothing was written, retry the call"
        )))
    }

    /// The previous content (`None`: the file did not exist), received in parts or inline,
    /// checked against the hash; `path` names the file in errors.
    pub fn content(&mut self, path: &str) -> Result<Option<Vec<u8>>, ToolError> {
        match (&self.upload, self.received.take()) {
            (_, Some(bytes)) => {
                self.check(path, &bytes)?;
                Ok(Some(bytes))
            }
            (Some(upload), None) => Err(ToolError::InvalidArguments(format!(
                "the runner named upload {upload} for {path}, which it never sent whole; nothing was written, retry the call"
            ))),
            (None, None) => self.decode(path),
        }
    }

    /// The bytes (`None`: the file did not exist), checked against the hash; `path` names the
    /// file in errors.
    pub fn decode(&self, path: &str) -> Result<Option<Vec<u8>>, ToolError> {
        use base64::Engine;
        let Some(text) = &self.content else {
            return Ok(None);
        };
        let bad = |why: String| {
            ToolError::Io(format!(
                "the runner's previous content of {path} is unusable ({why}); nothing was written, retry the call"
            ))
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| bad(format!("not base64: {e}")))?;
        let hash = toolyard_workspace::hash_bytes(&bytes);
        if self.hash.as_deref() != Some(hash.as_str()) {
            return Err(bad("its hash does not match its bytes".into()));
        }
        Ok(Some(bytes))
    }
}

/// The answer to a [`RecordOp`].
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Done; for `JournalBegin`, the change id.
    Ok(Option<i64>),
    /// Refused or failed, with the error the runner's tool passes on to the model.
    Err(ToolError),
    /// An `undo_last` was done: the path's own undo first, then the other files of its group.
    Undone(Vec<crate::UndoOutcome>),
    /// A command's changes were journaled.
    Command(crate::CommandJournaled),
}

impl Reply {
    /// The reply for a records outcome.
    pub fn from_result(r: Result<Option<i64>, ToolError>) -> Self {
        match r {
            Ok(v) => Reply::Ok(v),
            Err(e) => Reply::Err(e),
        }
    }

    /// The change id a `journal_begin` answers.
    pub fn into_change(self) -> Result<i64, ToolError> {
        self.into_result()?
            .ok_or_else(|| ToolError::Io("the router returned no change id".into()))
    }

    /// The outcome of an undo (`undo_last`, `roll_back`).
    pub fn into_undone(self) -> Result<Vec<crate::UndoOutcome>, ToolError> {
        match self {
            Reply::Undone(out) => Ok(out),
            Reply::Err(e) => Err(e),
            Reply::Ok(_) | Reply::Command(_) => Err(ToolError::Io(
                "the router answered an undo without its outcome".into(),
            )),
        }
    }

    /// What a `journal_command` journaled.
    pub fn into_command(self) -> Result<crate::CommandJournaled, ToolError> {
        match self {
            Reply::Command(done) => Ok(done),
            Reply::Err(e) => Err(e),
            _ => Err(ToolError::Io(
                "the router answered a command's changes without saying what it journaled".into(),
            )),
        }
    }

    /// Back to a result on the runner's side.
    pub fn into_result(self) -> Result<Option<i64>, ToolError> {
        match self {
            Reply::Ok(v) => Ok(v),
            Reply::Err(e) => Err(e),
            Reply::Undone(outs) => Ok(outs.first().map(|o| o.undo.0)),
            Reply::Command(done) => Ok(done.ids.first().map(|i| i.0)),
        }
    }
}

impl RecordOp {
    /// The session the operation acts for (`None` for `journal_end`, which names a change).
    pub fn session(&self) -> Option<&str> {
        match self {
            RecordOp::RecordRead { session, .. }
            | RecordOp::CheckWrite { session, .. }
            | RecordOp::RecordWrite { session, .. }
            | RecordOp::JournalBegin { session, .. }
            | RecordOp::JournalCommand { session, .. }
            | RecordOp::PreImagePart { session, .. }
            | RecordOp::RollBack { session, .. }
            | RecordOp::UndoLast { session, .. } => Some(session),
            RecordOp::JournalEnd { .. } => None,
        }
    }
}

/// `p` as a workspace-relative path, refused unless it is one.
pub fn relative(p: &str) -> Result<RelPath, ToolError> {
    // Runners send paths they resolved beneath the root; refuse anything that is not one.
    let bad = p.starts_with('/')
        || (p != "." && p.split('/').any(|c| c.is_empty() || c == "." || c == ".."));
    if bad {
        return Err(ToolError::outside(p, "not a workspace-relative path"));
    }
    Ok(RelPath::from_normalized(p))
}

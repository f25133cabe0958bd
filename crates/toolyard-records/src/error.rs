//! The records' own errors: each keeps its source and names what it was about (the path, the
//! change); converted to the model-facing [`ToolError`] once, by `From`.

use std::io;
use std::path::PathBuf;

use toolyard_core::ToolError;

/// What went wrong below the records' API.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// A statement on the state database failed.
    #[error("state database: {0}")]
    Db(#[source] rusqlite::Error),
    /// The state database could not be opened.
    #[error("cannot open {}: {source}", path.display())]
    OpenDb {
        /// The database file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rusqlite::Error,
    },
    /// The state database holds a schema newer than this Toolyard's.
    #[error(
        "state.db holds {component} schema version {found}, newer than this Toolyard understands ({known}); upgrade Toolyard or set TOOLYARD_STATE_DIR elsewhere"
    )]
    NewerSchema {
        /// Whose tables (`journal`, `ledger`).
        component: String,
        /// The version found.
        found: i64,
        /// The version this build knows.
        known: i64,
    },
    /// A file of the state directory (the journal's owner lock) could not be opened.
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The journal's owner lock could not be taken.
    #[error("cannot lock {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A path's previous content could not be read into the journal.
    #[error("{path}: {source}")]
    Read {
        /// The workspace-relative path.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A change's previous content could not be read back from the journal.
    #[error("reading change {change} from the journal: {source}")]
    ReadBack {
        /// The change id.
        change: i64,
        /// Why.
        #[source]
        source: io::Error,
    },
}

impl RecordsError {
    /// The I/O error underneath, if there is one.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            Self::Open { source, .. }
            | Self::Lock { source, .. }
            | Self::Read { source, .. }
            | Self::ReadBack { source, .. } => Some(source),
            Self::Db(_) | Self::OpenDb { .. } | Self::NewerSchema { .. } => None,
        }
    }
}

impl From<rusqlite::Error> for RecordsError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Db(e)
    }
}

impl From<RecordsError> for ToolError {
    fn from(e: RecordsError) -> Self {
        match e {
            RecordsError::NewerSchema { .. } => ToolError::Unavailable(e.to_string()),
            _ => ToolError::Io(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_keeps_its_source_and_names_its_path_for_the_model() {
        let e = RecordsError::Lock {
            path: PathBuf::from("/state/owner.lock"),
            source: io::Error::from(io::ErrorKind::PermissionDenied),
        };
        assert_eq!(
            e.io_error().map(io::Error::kind),
            Some(io::ErrorKind::PermissionDenied)
        );
        assert!(std::error::Error::source(&e).is_some());
        let tool = ToolError::from(e);
        assert!(
            matches!(&tool, ToolError::Io(m) if m.starts_with("cannot lock /state/owner.lock: ")),
            "{tool:?}"
        );
    }

    #[test]
    fn a_newer_schema_is_unavailable_not_an_io_error() {
        let e = RecordsError::NewerSchema {
            component: "journal".into(),
            found: 9,
            known: 3,
        };
        let tool = ToolError::from(e);
        assert!(
            matches!(&tool, ToolError::Unavailable(m) if m.contains("journal schema version 9") && m.contains("(3)")),
            "{tool:?}"
        );
    }
}

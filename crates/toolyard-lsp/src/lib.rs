//! # toolyard-lsp
//!
//! Language servers run by Toolyard: one per workspace and language, started on first need,
//! shared by the sessions of the workspace, stopped when idle, restarted once when one dies.
//! After every change the [`Manager`] tells the server the file's new version and waits, up to
//! the catalog's bound, for diagnostics **of that version**; a check command
//! (`cargo check --message-format=json`) stands in where no server is there.

mod check;
pub mod config;
pub mod diag;
mod manager;
pub mod rpc;
mod server;

pub use config::{Language, LspConfig};
pub use diag::Diag;
pub use manager::{Launcher, Location, Manager, apply_text_edits};
pub use server::Server;

/// What went wrong talking to a language server.
#[derive(Debug, thiserror::Error)]
pub enum LspError {
    /// Nothing serves the file's language.
    #[error("{0}")]
    NoServer(String),
    /// The server could not be started.
    #[error("the {lang} language server ({program}) could not be started: {why}")]
    Start {
        /// The language.
        lang: String,
        /// The program.
        program: String,
        /// Why.
        why: String,
    },
    /// The server is gone.
    #[error("the {lang} language server ({program}) stopped: {why}")]
    Died {
        /// The language.
        lang: String,
        /// The program.
        program: String,
        /// Why.
        why: String,
    },
    /// The server did not answer in time.
    #[error("the {lang} language server ({program}) is still {what}; try again in a moment")]
    Timeout {
        /// The language.
        lang: String,
        /// The program.
        program: String,
        /// What it was doing.
        what: String,
    },
    /// The server answered with an error.
    #[error("the {lang} language server ({program}) refused {method}: {message}")]
    Server {
        /// The language.
        lang: String,
        /// The program.
        program: String,
        /// The request.
        method: String,
        /// Its message.
        message: String,
    },
    /// Reading a file or starting a thread failed.
    #[error("{0}")]
    Io(String),
}

//! ledger (in progress)

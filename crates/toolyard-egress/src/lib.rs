//! Toolyard's egress gate. Commands of the `net` and `heavy` lanes run in a network namespace
//! whose only way out is a forwarder to this gate, which the server runs outside every sandbox:
//! a proxy that resolves names itself, lets hosts through by the catalog's `[network]` section
//! ([`policy`]) and the hosts the user approved for the calls running now ([`grants`]), and
//! records each decision for the `network:` line of a command's result ([`gate::summarize`]).

pub mod gate;
pub mod grants;
pub mod policy;

pub use gate::{Event, Gate, Outcome, summarize};
pub use grants::{Grant, Grants, Held, Scope};
pub use policy::{Host, Mode, NetworkConfig, Pattern, Policy, Refusal, Standing};

/// The environment variable through which the server tells a runner the gate's socket.
pub const SOCKET_ENV: &str = "TOOLYARD_EGRESS_SOCKET";

//! The `network` argument of the command tools: a request for hosts the catalog's `[network]`
//! refuses. The tool itself only accepts it: the server's admission step asks the user and,
//! when approved, lets the hosts through the lane's egress gate while the call runs.

use schemars::JsonSchema;
use serde::Deserialize;

/// The most hosts one request may name.
pub const MAX_HOSTS: usize = 16;

/// `network: {hosts, reason}` on a command tool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NetworkAsk {
    /// Hosts the command needs that the catalog's [network] refuses, as `[network] allow` takes
    /// them: `github.com`, `*.example.org` (names below it), `mirror.internal:8443`.
    #[schemars(length(min = 1, max = MAX_HOSTS))]
    pub hosts: Vec<String>,
    /// Why the command needs them, in a sentence; the user reads it before approving.
    #[schemars(length(min = 1))]
    pub reason: String,
}

/// What the `network` argument says of itself in a command tool's schema.
pub const DESCRIPTION: &str = "Ask the user to let this command reach hosts the catalog's \
    [network] refuses: {hosts: [...], reason}. Asked through your client when it can ask \
    (MCP elicitation); the user allows them for this call, this session or always for this \
    workspace, or denies. Refused (the command does not run) when denied or when the client \
    cannot ask; the refusal names the catalog line that would allow them.";

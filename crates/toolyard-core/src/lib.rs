//! # toolyard-core
//!
//! The vocabulary every other Toolyard crate speaks: the [`Tool`] trait (and its typed form
//! [`TypedTool`], whose JSON Schema is derived from the argument struct), [`ToolContext`],
//! [`ToolResult`] and [`ToolError`], the one function that decides a call's [`time_limit`],
//! schema export to OpenAI / Anthropic / MCP ([`ToolDefinition`]), the [`Catalog`] with its lanes and profiles, and output shaping
//! ([`shape::head_tail`]). Nothing here knows a file system, a process or a transport exists.
//!
//! ```
//! use toolyard_core::{
//!     Annotations, Tool, ToolContext, ToolError, ToolInfo, ToolResult, Typed, TypedTool,
//! };
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct EchoArgs { text: String }
//!
//! struct Echo;
//! #[async_trait::async_trait]
//! impl TypedTool for Echo {
//!     type Args = EchoArgs;
//!     fn info(&self) -> ToolInfo<'_> {
//!         ToolInfo::new("echo", "Say it back", Annotations::READ_ONLY)
//!     }
//!     async fn run(&self, a: EchoArgs, _: &ToolContext) -> Result<ToolResult, ToolError> {
//!         Ok(ToolResult::ok(a.text))
//!     }
//! }
//!
//! let ctx = ToolContext::new("/tmp", "s1");
//! let rt = tokio::runtime::Runtime::new().unwrap();
//! let out = rt.block_on(Typed(Echo).invoke(serde_json::json!({"text": "hi"}), &ctx)).unwrap();
//! assert_eq!(out.output, "hi");
//! ```

pub mod blocking;
mod catalog;
pub mod engine;
mod error;
mod result;
pub mod schema;
pub mod shape;
pub mod sync;
mod tool;
mod validate;

pub use catalog::{
    ALL_PROFILE, ArgvPart, Catalog, CatalogError, CustomTool, DEFAULT_CATALOG,
    DEFAULT_MAX_OUTPUT_BYTES, Lane, ToolSpec, shell_quote,
};
pub use engine::{Bound, CallShape, Engine, Facts, Outlives, Site};
pub use error::{ToolError, unknown_tool};
pub use result::{Image, ToolResult};
pub use schema::{
    Freeform, SchemaFormat, ToolDefinition, export, output_problems, output_schema_of,
    result_envelope_schema, schema_of,
};
pub use tool::{
    Annotations, Progress, ProgressSink, Tool, ToolContext, ToolInfo, Typed, TypedTool, parse_args,
    time_limit,
};
pub use validate::{ArgValidator, TIMEOUT_ARG};

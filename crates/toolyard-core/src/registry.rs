//! The registry: tools by name, in a stable order.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::{ArgValidator, Tool, ToolContext, ToolDefinition, ToolError, ToolResult};

/// Registering a tool failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistryError {
    /// Two tools with one name.
    #[error("a tool named `{0}` is already registered")]
    Duplicate(String),
    /// The tool's input schema does not compile into a validator.
    #[error("the input schema of tool `{tool}` is not valid JSON Schema: {message}")]
    InvalidSchema {
        /// The tool.
        tool: String,
        /// What the compiler said.
        message: String,
    },
}

/// The error for a call to a tool that is not served, naming the ones that are.
pub fn unknown_tool(name: &str, available: &[&str]) -> ToolError {
    ToolError::NotFound(format!(
        "unknown tool `{name}`; available tools: {}",
        available.join(", ")
    ))
}

/// A registered tool, with the validator the registry applies when the tool does not.
#[derive(Clone)]
struct Entry {
    tool: Arc<dyn Tool>,
    validator: Option<Arc<ArgValidator>>,
}

/// Tools by name. Iteration order is by name, so listings are deterministic.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Entry>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a tool, compiling its argument validator now; a name already taken, or a schema
    /// that does not compile, is an error.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let name = tool.name().to_string();
        if self.tools.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        let validator = tool
            .arg_validator()
            .map_err(|message| RegistryError::InvalidSchema {
                tool: name.clone(),
                message,
            })?;
        let validator = (!tool.checks_args()).then_some(validator);
        self.tools.insert(name, Entry { tool, validator });
        Ok(())
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).map(|e| e.tool.clone())
    }

    /// The names of all tools, sorted.
    pub fn list(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The definitions of all tools, sorted by name.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools
            .values()
            .map(|e| ToolDefinition::of(e.tool.as_ref(), None))
            .collect()
    }

    /// Run `name` with `args`; every failure, an unknown name included, is a result.
    pub async fn invoke(&self, name: &str, args: Value, ctx: &ToolContext) -> ToolResult {
        let Some(entry) = self.tools.get(name) else {
            return unknown_tool(name, &self.list()).into();
        };
        if let Some(v) = &entry.validator
            && let Err(e) = v.check(name, &args, ctx)
        {
            return e.into();
        }
        entry.tool.invoke(args, ctx).await.into()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

//! The registry: tools by name, in a stable order.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::{Tool, ToolContext, ToolDefinition, ToolError, ToolResult};

/// Registering a tool failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistryError {
    /// Two tools with one name.
    #[error("a tool named `{0}` is already registered")]
    Duplicate(String),
}

/// The error for a call to a tool that is not served, naming the ones that are.
pub fn unknown_tool(name: &str, available: &[&str]) -> ToolError {
    ToolError::NotFound(format!(
        "unknown tool `{name}`; available tools: {}",
        available.join(", ")
    ))
}

/// Tools by name. Iteration order is by name, so listings are deterministic.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a tool; a name already taken is an error.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let name = tool.name().to_string();
        if self.tools.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        self.tools.insert(name, tool);
        Ok(())
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
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
            .map(|t| ToolDefinition::of(t.as_ref(), None))
            .collect()
    }

    /// Run `name` with `args`; every failure, an unknown name included, is a result.
    pub async fn invoke(&self, name: &str, args: Value, ctx: &ToolContext) -> ToolResult {
        let Some(tool) = self.get(name) else {
            return unknown_tool(name, &self.list()).into();
        };
        tool.invoke(args, ctx).await.into()
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

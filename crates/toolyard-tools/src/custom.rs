//! A catalog's own command tool (`[tools.NAME]` with `command`): its argv runs in its lane's
//! runner like any command (the command policy, the protected paths, the sandbox), without a
//! shell reading its arguments. Each `{name}` placeholder's value goes to the command in an
//! environment variable that the command line names in double quotes (`"$TOOLYARD_ARG_2"`),
//! so the shell expands it to exactly one argument and never parses it.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use toolyard_core::{
    Annotations, ArgValidator, ArgvPart, CustomTool, Tool, ToolContext, ToolError, ToolInfo,
    ToolResult,
};

use crate::command::{CommandEnv, check_policy_line};

/// The prefix of the variables that carry a call's arguments to its command.
const ARG_VAR: &str = "TOOLYARD_ARG_";

/// A catalog command tool.
pub struct CustomCommand {
    spec: CustomTool,
    commands: Arc<CommandEnv>,
    validator: Result<Arc<ArgValidator>, String>,
}

impl CustomCommand {
    /// The tool `spec` declares, running through `commands`.
    pub fn new(spec: CustomTool, commands: Arc<CommandEnv>) -> Self {
        let validator = ArgValidator::new(&spec.parameters).map(Arc::new);
        Self {
            spec,
            commands,
            validator,
        }
    }

    /// The shell text that runs the argv: literals quoted, each placeholder a quoted variable
    /// reference; and the variables with the call's values.
    fn script(&self, args: &Value) -> Result<(String, Vec<(String, String)>), ToolError> {
        // Checks the values (types, NUL bytes) the same way the policy line was built.
        self.spec.argv(args).map_err(ToolError::InvalidArguments)?;
        let mut words = Vec::with_capacity(self.spec.command.len());
        let mut vars = Vec::new();
        for (i, part) in self.spec.command.iter().enumerate() {
            match part {
                ArgvPart::Literal(s) => words.push(toolyard_core::shell_quote(s)),
                ArgvPart::Param(name) => {
                    let value = match args.get(name) {
                        None | Some(Value::Null) => continue,
                        Some(Value::String(s)) => s.clone(),
                        Some(v) => v.to_string(),
                    };
                    let var = format!("{ARG_VAR}{i}");
                    words.push(format!("\"${var}\""));
                    vars.push((var, value));
                }
            }
        }
        Ok((words.join(" "), vars))
    }
}

#[async_trait]
impl Tool for CustomCommand {
    fn info(&self) -> ToolInfo<'_> {
        ToolInfo::new(
            &self.spec.name,
            &self.spec.description,
            Annotations::COMMAND,
        )
    }

    fn input_schema(&self) -> Value {
        self.spec.parameters.clone()
    }

    fn arg_validator(&self) -> Result<Arc<ArgValidator>, String> {
        self.validator.clone()
    }

    async fn invoke(&self, args: Value, ctx: &ToolContext) -> Result<ToolResult, ToolError> {
        self.check_args(&args)?;
        self.invoke_checked(args, ctx).await
    }

    async fn invoke_checked(
        &self,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolResult, ToolError> {
        // The policy judges the argv as a shell would see it quoted; the runner's own check
        // of the script (where it runs) sees the same program and literals.
        let line = self
            .spec
            .command_line(&args)
            .map_err(ToolError::InvalidArguments)?;
        check_policy_line(&self.commands, &line)?;
        let (script, vars) = self.script(&args)?;
        self.commands.run_with_vars(ctx, &script, &vars).await
    }
}

//! Script tools as an MCP server of their own.
//!
//! `[tools.NAME] script = "FILE.star"` defines a tool in Starlark. The gateway serves every such
//! tool as one downstream server, `scripts` (so `mcp__scripts__NAME`), which it starts like any
//! other: its tools are searched, validated, authorised, hooked, audited, cached and timed out by
//! the same path as every MCP tool, and a crash is a server crash, restarted in the background.
//!
//! This module is that server; defining and running the scripts, each in a runner process under
//! the `[scripts]` limits, is `toolshelf_runtime::scripts`.

use std::path::PathBuf;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;
use toolshelf_core::config::Config;
use toolshelf_runtime::scripts::{Runner, ScriptTools, Source};

use crate::error::{GatewayError, Result};

pub use toolshelf_runtime::scripts::sources_digest;

/// The subcommand of the toolshelf binary that serves the script tools.
pub const SERVER_SUBCOMMAND: &str = "__scripts-server";

/// The script tools of a configuration, served over MCP.
#[derive(Debug, Clone)]
pub struct ScriptServer {
    tools: ScriptTools,
}

impl ScriptServer {
    /// Defines every script tool of `config` from `sources` ([`sources`]), each in a
    /// runner; `runner` is the toolshelf binary.
    pub async fn new(config: &Config, sources: Vec<Source>, runner: PathBuf) -> Result<Self> {
        let tools = ScriptTools::define(sources, Runner::new(runner, config)).await;
        Ok(Self { tools })
    }

    /// The tools, as `tools/list` gives them.
    pub fn list(&self) -> Vec<Tool> {
        self.tools
            .tools
            .iter()
            .map(|t| {
                Tool::new(
                    t.name.clone(),
                    t.description.clone(),
                    std::sync::Arc::new(t.schema.clone()),
                )
            })
            .collect()
    }

    /// Serves the tools over stdin and stdout until the client (the gateway) closes them.
    pub async fn serve_stdio(self) -> Result<()> {
        let running =
            self.serve(rmcp::transport::stdio())
                .await
                .map_err(|e| GatewayError::Serve {
                    transport: "stdio",
                    message: e.to_string(),
                })?;
        let _ = running.waiting().await;
        Ok(())
    }

    /// Runs `name` with `params` in a runner process; its value, or the error.
    pub async fn call(&self, name: &str, params: Value) -> std::result::Result<Value, String> {
        self.tools.call(name, params).await
    }
}

/// Reads the scripts (`toolshelf_runtime::scripts::read_sources`), the error as the gateway's.
pub fn sources(config: &Config, config_dir: &std::path::Path) -> Result<Vec<Source>> {
    toolshelf_runtime::scripts::read_sources(config, config_dir).map_err(GatewayError::Script)
}

impl ServerHandler for ScriptServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "toolshelf-scripts",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions("Tools defined by Starlark scripts of the toolshelf configuration.")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.list()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let params = Value::Object(request.arguments.unwrap_or_default());
        let result = match self.call(request.name.as_ref(), params).await {
            Ok(v) => CallToolResult::success(vec![ContentBlock::text(
                toolshelf_runtime::scripts::result_text(&v),
            )]),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e)]),
        };
        Ok(result.into())
    }
}

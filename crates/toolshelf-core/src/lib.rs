//! toolshelf-core: the pure part of toolshelf.
//!
//! From a tool catalog and a policy, compute exactly what the model sees (a few resident tools,
//! `tool_search` with the index of deferred names, `defer_execute`), deterministically, and
//! account for what it costs. No I/O, no async runtime: the gateway, proxy and command line wrap
//! this crate, so every surface they expose is the same bytes.
//!
//! The flow the command line and the gateway follow: load a catalog and a configuration, decide
//! each tool's exposure, render the session's tool list, answer a `tool_search` (its schemas
//! now count as loaded), and pass a `defer_execute` call through the stages of [`invoke`].
//!
//! ```
//! use serde_json::json;
//! use toolshelf_core::invoke::{self, Authorization, ParamsValidator};
//! use toolshelf_core::search::{SearchIndex, SearchRequest, render};
//! use toolshelf_core::session::SessionState;
//! use toolshelf_core::template::SessionValues;
//! use toolshelf_core::{Catalog, Compiled, Config, Format};
//!
//! let catalog = Catalog::from_json_str(
//!     r#"{"servers": [{"name": "fs", "description": "Files", "tools": [
//!         {"name": "read_file", "description": "Read a file",
//!          "inputSchema": {"type": "object", "required": ["path"],
//!                          "properties": {"path": {"type": "string"}}}}]}]}"#,
//!     "catalog.json",
//! )?;
//! let config = Config::from_toml_str("[defer]\ndefault = true\n", "toolshelf.toml")?;
//! let compiled = Compiled::new(config, "toolshelf.toml", None)?;
//! let exposure = compiled.expose(&catalog);
//! let surface = compiled
//!     .session_surface(&catalog, &exposure, &SessionValues::default())
//!     .expect("no description template fails");
//! // What the model is sent: tool_search (with the index of deferred names) and defer_execute.
//! let tools = surface.tools(&catalog, Format::Anthropic);
//! assert!(tools.iter().any(|t| t["name"] == "tool_search"));
//!
//! // The model searches; the hits' schemas are now loaded in its session.
//! let visible: Vec<usize> = surface.resident.iter().chain(&surface.deferred).copied().collect();
//! let index = SearchIndex::build(&catalog, &visible);
//! let request = SearchRequest::Queries { queries: vec!["read file".into()], limit: None };
//! let config = compiled.config();
//! let response = render::search(&index, &catalog, &request, &config.search);
//! let mut state = SessionState::default();
//! state.next_turn();
//! state.activate(response.loaded.iter().map(|&i| catalog.tools()[i].name.as_str()));
//!
//! // The model calls defer_execute {"tool_name": "mcp__fs__read_file", "params": {...}}.
//! let params = json!({"path": "/tmp/notes.txt"}).as_object().cloned().unwrap_or_default();
//! let tool = invoke::resolve(&catalog, &exposure, "mcp__fs__read_file").expect("known");
//! let name = &catalog.tools()[tool].name;
//! let activity = state.activity(name, config.session.activation_ttl_turns);
//! invoke::require_loaded(&exposure, tool, config.execute.require_search, activity, state.turn())
//!     .expect("loaded by the search");
//! let validator = ParamsValidator::new(&catalog.tools()[tool].input_schema);
//! invoke::validate(tool, &validator, &params).expect("fits the schema");
//! let verdict = invoke::authorize(&catalog, compiled.permissions(), tool, &params);
//! assert_eq!(verdict.expect("no rule denies it"), Authorization::Allowed);
//! // Now the host runs the tool on its server.
//! # Ok::<(), toolshelf_core::Error>(())
//! ```

pub mod audit;
pub mod authoring;
pub mod catalog;
pub mod compile;
pub mod config;
pub mod echo;
pub mod error;
pub mod hook;
pub mod http;
pub mod index;
pub mod invoke;
pub mod json;
pub mod ledger;
pub mod meta;
pub mod name;
pub mod pattern;
pub mod permission;
pub mod policy;
pub mod reminder;
pub mod replay;
pub mod request;
pub mod search;
pub mod session;
pub mod surface;
pub mod template;
#[cfg(test)]
mod testing;
pub mod tokens;
pub mod wire;

pub use catalog::{Catalog, CatalogBuilder, Origin, Resolution, Server, Tool, ToolSpec};
pub use compile::Compiled;
pub use config::{Config, DeferDefault};
pub use error::{Error, Result};
pub use index::DeferredIndex;
pub use ledger::Ledger;
pub use pattern::Pattern;
pub use policy::{Decision, Exposure, Policy, Rule, State};
pub use surface::Surface;
pub use wire::Format;

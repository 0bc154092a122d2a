//! toolshelf-core: the pure part of toolshelf.
//!
//! From a tool catalog and a policy, compute exactly what the model sees (a few resident tools,
//! `tool_search` with the index of deferred names, `defer_execute`), deterministically, and
//! account for what it costs. No I/O, no async runtime: the gateway, proxy and command line wrap
//! this crate, so every surface they expose is the same bytes.

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

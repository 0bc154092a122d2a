//! The model-visible tool surface: exactly the tool definitions sent to the model.
//!
//! Resident tools with their full schemas come first, in catalog order (built-ins, then servers,
//! each sorted), then the two resident meta-tools `tool_search` and `defer_execute`, added as soon
//! as any tool is deferred. Deferred tools contribute only their names, inside `tool_search`'s
//! description. Every byte here is a pure function of (catalog, policy, config, and the session's
//! rendered description templates), so the prompt prefix is identical from turn to turn and
//! provider caches keep hitting.
//!
//! A session's surface carries its [`Descriptions`]: what description templates rendered to when
//! the session started. They stand in for the catalog's descriptions in the definitions and the
//! index headers written here; the catalog itself is never rewritten.

use serde_json::Value;

use crate::catalog::Catalog;
use crate::config::{Config, SearchConfig};
use crate::index::{DeferredIndex, IndexGroup, IndexInput};
use crate::meta;
use crate::policy::{Exposure, State};
use crate::template::Descriptions;
use crate::wire::{Format, definition_described};

/// What the model sees, computed once from catalog, exposure and config.
#[derive(Debug, Clone)]
pub struct Surface {
    /// Catalog indices of resident tools, in catalog order.
    pub resident: Vec<usize>,
    /// Catalog indices of deferred tools, in catalog order.
    pub deferred: Vec<usize>,
    /// Catalog indices of hidden tools.
    pub hidden: Vec<usize>,
    /// The deferred index; `None` when there is nothing to defer (and so no meta-tools).
    pub index: Option<DeferredIndex>,
    search: SearchConfig,
    descriptions: Descriptions,
}

impl Surface {
    /// Computes the surface.
    ///
    /// The meta-tools are present as soon as any tool is deferred, or any server's tools are not
    /// known yet (a server still starting, or failing, lists none): a session that freezes its
    /// list at that moment must still be able to reach the tools that arrive later.
    pub fn new(catalog: &Catalog, exposure: &Exposure, config: &Config) -> Self {
        Self::with_descriptions(catalog, exposure, config, Descriptions::default())
    }

    /// [`Self::new`] with `descriptions` (rendered templates) in place of the catalog's own for
    /// the tools and groups they name.
    pub fn with_descriptions(
        catalog: &Catalog,
        exposure: &Exposure,
        config: &Config,
        descriptions: Descriptions,
    ) -> Self {
        let resident: Vec<usize> = exposure.indices(State::Resident).collect();
        let deferred: Vec<usize> = exposure.indices(State::Deferred).collect();
        let hidden: Vec<usize> = exposure.indices(State::Hidden).collect();
        let tools = catalog.tools();
        // Per server: whether it has any tool, and its deferred tools' bare names.
        let mut per_server: std::collections::BTreeMap<&str, (bool, Vec<String>)> = catalog
            .servers()
            .iter()
            .map(|s| (s.name.as_str(), (false, Vec::new())))
            .collect();
        for t in tools {
            if let Some(e) = t.server.as_deref().and_then(|s| per_server.get_mut(s)) {
                e.0 = true;
            }
        }
        let mut builtin = Vec::new();
        for &i in &deferred {
            match tools[i]
                .server
                .as_deref()
                .and_then(|s| per_server.get_mut(s))
            {
                Some(e) => e.1.push(tools[i].bare.clone()),
                None => builtin.push(tools[i].name.clone()),
            }
        }
        // A server with no tools that the rules would hide gets no group either.
        per_server.retain(|name, _| !exposure.hidden_servers.contains(*name));
        let pending = per_server.values().any(|(has_any, _)| !has_any);
        let index = (!deferred.is_empty() || pending).then(|| {
            // A server gets a group when it has deferred tools, or has no tools at all (its tools
            // may still be loading); servers whose tools are all resident or hidden get none.
            let groups = catalog
                .servers()
                .iter()
                .filter_map(|s| {
                    let (has_any, names) = per_server.remove(s.name.as_str())?;
                    (!names.is_empty() || !has_any).then(|| IndexGroup {
                        prefix: s.prefix(),
                        description: descriptions
                            .servers
                            .get(&s.name)
                            .unwrap_or(&s.description)
                            .clone(),
                        tools: names,
                    })
                })
                .collect();
            DeferredIndex::render(
                &IndexInput { builtin, groups },
                config.defer.index_budget_chars,
                config.defer.server_description_chars,
            )
        });
        Self {
            resident,
            deferred,
            hidden,
            index,
            search: config.search.clone(),
            descriptions,
        }
    }

    /// The descriptions rendered from templates for this surface's session.
    pub fn descriptions(&self) -> &Descriptions {
        &self.descriptions
    }

    /// Catalog tool `i`'s description as this surface shows it: its rendered template, else its
    /// own.
    pub fn description<'a>(&'a self, catalog: &'a Catalog, i: usize) -> &'a str {
        self.descriptions
            .tools
            .get(&i)
            .map(String::as_str)
            .unwrap_or(&catalog.tools()[i].description)
    }

    /// Catalog tool `i`'s full definition in `format`, with the description this surface shows.
    pub fn definition(&self, catalog: &Catalog, i: usize, format: Format) -> Value {
        definition_described(&catalog.tools()[i], self.description(catalog, i), format)
    }

    /// `tool_search`'s full description, index included; `None` when there are no meta-tools.
    pub fn tool_search_description(&self) -> Option<String> {
        self.index
            .as_ref()
            .map(|idx| meta::tool_search_description(&idx.text, &self.search))
    }

    /// The meta-tools' definitions in `format` (empty when there is nothing to defer).
    pub fn meta_tools(&self, format: Format) -> Vec<Value> {
        match &self.index {
            Some(idx) => meta::definitions(&idx.text, &self.search, format).into(),
            None => Vec::new(),
        }
    }

    /// The tool list sent to the model, in `format`.
    pub fn tools(&self, catalog: &Catalog, format: Format) -> Vec<Value> {
        let mut out: Vec<Value> = self
            .resident
            .iter()
            .map(|&i| self.definition(catalog, i, format))
            .collect();
        out.extend(self.meta_tools(format));
        out
    }
}

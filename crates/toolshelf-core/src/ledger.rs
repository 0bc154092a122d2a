//! The ledger: what the tool surface costs per turn, and what deferral saves.
//!
//! Costs are measured on the serialized definitions exactly as sent (compact JSON in the chosen
//! wire format), in characters and in o200k_base tokens. "All resident" is the counterfactual
//! where every visible tool is sent with its schema; "after" is the real surface, meta-tools and
//! index included.

use serde::Serialize;
use serde_json::Value;

use crate::catalog::Catalog;
use crate::surface::Surface;
use crate::tokens;
use crate::wire::{Format, definition};

/// Characters, tokens and share of the context window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cost {
    /// Characters (Unicode scalar values) of the serialized definitions.
    pub chars: usize,
    /// o200k_base tokens.
    pub tokens: usize,
    /// `tokens / window`.
    pub window_share: f64,
}

/// Characters and tokens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Size {
    /// Characters.
    pub chars: i64,
    /// Tokens.
    pub tokens: i64,
}

/// The largest deferred definition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Largest {
    /// Its canonical name.
    pub name: String,
    /// Characters of its definition.
    pub chars: usize,
    /// Its share of all deferred definitions' characters.
    pub share_of_deferred: f64,
}

/// The largest resident definition: what one tool costs every turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LargestResident {
    /// Its canonical name.
    pub name: String,
    /// Characters of its definition.
    pub chars: usize,
    /// Tokens of its definition.
    pub tokens: usize,
    /// Its share of the context window.
    pub window_share: f64,
}

/// A single resident tool past this share of the window is worth a warning: no one tool's
/// definition should cost that much on every turn.
pub const RESIDENT_WARNING_SHARE: f64 = 0.05;

/// A warning for each resident tool whose definition alone takes more than
/// [`RESIDENT_WARNING_SHARE`] of a `window`-token context on every turn, in catalog order.
pub fn oversized_residents(
    catalog: &Catalog,
    surface: &Surface,
    format: Format,
    window: u64,
) -> Vec<String> {
    let limit = window as f64 * RESIDENT_WARNING_SHARE;
    let mut resident = surface.resident.clone();
    resident.sort_unstable();
    resident
        .into_iter()
        .filter_map(|i| {
            let tool = &catalog.tools()[i];
            let text = definition(tool, format).to_string();
            // A token is at least one character: most definitions need no count.
            if (text.chars().count() as f64) <= limit {
                return None;
            }
            let tokens = tokens::count(&text);
            (tokens as f64 > limit).then(|| {
                format!(
                    "resident tool {:?} alone takes {:.2}% of the {window}-token window on every turn ({tokens} tokens); defer it or shorten its definition",
                    tool.name,
                    tokens as f64 / window as f64 * 100.0
                )
            })
        })
        .collect()
}

/// Schema characters per name character, as "181:1"; `None` where there is nothing to divide.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ratios {
    /// Over every visible tool.
    pub all: Option<String>,
    /// Over deferred tools.
    pub deferred: Option<String>,
    /// For the largest deferred tool.
    pub largest: Option<String>,
}

/// The per-turn account.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ledger {
    /// Wire format measured.
    pub format: String,
    /// Context window in tokens.
    pub window: u64,
    /// Tools in the catalog.
    pub tools_total: usize,
    /// Deferred tools.
    pub deferred: usize,
    /// Resident catalog tools (meta-tools not counted).
    pub resident: usize,
    /// Tools hidden by the mode.
    pub hidden: usize,
    /// Every visible tool sent with its schema.
    pub all_resident: Cost,
    /// The real surface.
    pub after: Cost,
    /// The `<available_deferred_tools>` block.
    pub index: Size,
    /// `all_resident - after`.
    pub saved_per_turn: Size,
    /// The largest deferred definition.
    pub largest: Option<Largest>,
    /// The largest resident catalog definition (meta-tools not counted).
    pub largest_resident: Option<LargestResident>,
    /// Schema-to-name ratios.
    pub ratios: Ratios,
    /// Server groups dropped from the index for its budget.
    pub index_dropped_servers: Vec<String>,
    /// Set when built-in names alone exceed the index budget.
    pub index_over_budget: bool,
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

fn ratio(schema_chars: usize, name_chars: usize) -> Option<String> {
    (name_chars > 0).then(|| {
        format!(
            "{}:1",
            (schema_chars as f64 / name_chars as f64).round() as u64
        )
    })
}

/// The (tool, chars) with the most chars; ties go to the earlier (sorted) name.
fn largest_of(sizes: impl Iterator<Item = (usize, usize)>) -> Option<(usize, usize)> {
    sizes.max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
}

fn cost(defs: &[Value], window: u64) -> Cost {
    let text = Value::Array(defs.to_vec()).to_string();
    let tokens = tokens::count(&text);
    Cost {
        chars: text.chars().count(),
        tokens,
        window_share: round6(tokens as f64 / window as f64),
    }
}

impl Ledger {
    /// Accounts for `surface` in `format` against a `window` of tokens.
    pub fn compute(catalog: &Catalog, surface: &Surface, format: Format, window: u64) -> Self {
        let tools = catalog.tools();
        let visible: Vec<usize> = (0..tools.len())
            .filter(|i| !surface.hidden.contains(i))
            .collect();
        let all_defs: Vec<Value> = visible
            .iter()
            .map(|&i| definition(&tools[i], format))
            .collect();
        let def_chars = |i: usize| definition(&tools[i], format).to_string().chars().count();
        let name_chars = |i: usize| tools[i].name.chars().count();

        let all_resident = cost(&all_defs, window);
        let after = cost(&surface.tools(catalog, format), window);
        let index_text = surface
            .index
            .as_ref()
            .map(|i| i.text.as_str())
            .unwrap_or("");
        let deferred_sizes: Vec<(usize, usize)> = surface
            .deferred
            .iter()
            .map(|&i| (i, def_chars(i)))
            .collect();
        let deferred_total: usize = deferred_sizes.iter().map(|(_, c)| c).sum();
        let largest = largest_of(deferred_sizes.iter().copied());
        let largest_resident =
            largest_of(surface.resident.iter().map(|&i| (i, def_chars(i)))).map(|(i, chars)| {
                let tokens = tokens::count(&definition(&tools[i], format).to_string());
                LargestResident {
                    name: tools[i].name.clone(),
                    chars,
                    tokens,
                    window_share: round6(tokens as f64 / window as f64),
                }
            });
        let all_name_chars: usize = visible.iter().map(|&i| name_chars(i)).sum();
        let all_def_chars: usize = visible.iter().map(|&i| def_chars(i)).sum();
        let deferred_name_chars: usize = surface.deferred.iter().map(|&i| name_chars(i)).sum();
        let index_tokens = tokens::count(index_text);
        let format_name = Format::ALL
            .iter()
            .find(|(_, f)| *f == format)
            .map(|(n, _)| (*n).to_owned())
            .unwrap_or_default();
        Self {
            format: format_name,
            window,
            tools_total: tools.len(),
            deferred: surface.deferred.len(),
            resident: surface.resident.len(),
            hidden: surface.hidden.len(),
            saved_per_turn: Size {
                chars: all_resident.chars as i64 - after.chars as i64,
                tokens: all_resident.tokens as i64 - after.tokens as i64,
            },
            all_resident,
            after,
            index: Size {
                chars: index_text.chars().count() as i64,
                tokens: index_tokens as i64,
            },
            largest: largest.map(|(i, chars)| Largest {
                name: tools[i].name.clone(),
                chars,
                share_of_deferred: round6(chars as f64 / deferred_total.max(1) as f64),
            }),
            largest_resident,
            ratios: Ratios {
                all: ratio(all_def_chars, all_name_chars),
                deferred: ratio(deferred_total, deferred_name_chars),
                largest: largest.and_then(|(i, chars)| ratio(chars, name_chars(i))),
            },
            index_dropped_servers: surface
                .index
                .as_ref()
                .map(|i| i.dropped.clone())
                .unwrap_or_default(),
            index_over_budget: surface.index.as_ref().is_some_and(|i| i.over_budget),
        }
    }
}

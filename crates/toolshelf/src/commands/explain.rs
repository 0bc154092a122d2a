//! `toolshelf explain`: why one tool is resident, deferred or hidden.

use anyhow::Result;
use serde_json::json;
use toolshelf_core::search::render::{plain_quote, search};
use toolshelf_core::search::{SearchIndex, SearchRequest};
use toolshelf_core::{Error, Resolution, name};

use super::search::Ranker;
use super::{cell, outln, print_json};
use crate::inputs::Source;

/// Arguments of `explain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    source: Source,
    /// Tool name: canonical (mcp__server__tool), or bare when unambiguous; tool_search and
    /// defer_execute are the meta-tools toolshelf adds.
    name: String,
    /// Print the decision as JSON; a name no tool has (exit status 1) prints {"name", "error":
    /// "unknown", "suggestions"}, one several tools have {"name", "error": "ambiguous",
    /// "candidates"}, one of an item the catalog left out at load {"name", "error": "left_out",
    /// "location", "why"}, and a description template that reads a per-turn value, uses a stub
    /// or names a pkg or session value that is not there {"name", "error": "template", "owner",
    /// "line", "message"}. The meta-tools
    /// (tool_search, defer_execute) print {"tool", "origin": "meta", "role", "pinned", "final",
    /// "reason", "namesakes"}.
    #[arg(long)]
    json: bool,
}

/// Explains `meta`, one of the resident meta-tools: toolshelf adds it, pinned, to the list of a
/// session with anything to defer; no rule, mode or default decides it.
fn explain_meta(l: &crate::inputs::Loaded, meta: &str, json: bool) -> Result<()> {
    let role = if meta == name::TOOL_SEARCH {
        "finds deferred tools and loads their schemas; its description holds the index of deferred tools"
    } else {
        "runs a deferred tool by name, once its schema was loaded"
    };
    let deferred = l.surface.deferred.len();
    let (present, reason) = match (&l.surface.index, deferred) {
        (None, _) => (
            false,
            format!(
                "nothing is deferred in this configuration, so the list has neither {} nor {}: every tool it shows is there with its schema",
                name::TOOL_SEARCH,
                name::DEFER_EXECUTE
            ),
        ),
        (Some(_), 0) => (
            true,
            "a server's tools are not known yet (it lists none), so the list keeps a way to reach them once they come".to_owned(),
        ),
        (Some(_), n) => (
            true,
            format!(
                "{} deferred, and {} and {} are added as soon as any tool is",
                super::count(n, "tool is", "tools are"),
                name::TOOL_SEARCH,
                name::DEFER_EXECUTE
            ),
        ),
    };
    // Catalog tools written with this name, which are named otherwise.
    let namesakes: Vec<&str> = l
        .catalog
        .tools()
        .iter()
        .filter(|t| t.original_name == meta)
        .map(|t| t.name.as_str())
        .collect();
    if json {
        return print_json(&json!({
            "tool": meta,
            "origin": "meta",
            "role": role,
            "pinned": present,
            "final": if present { "resident" } else { "absent" },
            "reason": reason,
            "namesakes": namesakes,
        }));
    }
    outln!("{meta}");
    outln!(
        "  origin:    toolshelf's own meta-tool, not in the catalog: no rule, mode or default decides it"
    );
    outln!("  role:      {role}");
    if present {
        outln!("  final:     resident, pinned, never deferred ({reason})");
    } else {
        outln!("  final:     absent ({reason})");
    }
    if !namesakes.is_empty() {
        outln!(
            "  namesakes: the catalog's own tools of this name are named {} (explain them by that name)",
            cell(&namesakes.join(", "))
        );
    }
    Ok(())
}

/// What `tool_names` (and `search -n`) suggests for `wanted`, a name no tool has: likely typos
/// first, then what a search for the name finds, with the ranker `search` uses by default. The
/// search is over every tool of the catalog, as `explain` explains hidden tools too.
fn suggestions(l: &crate::inputs::Loaded, wanted: &str) -> Vec<String> {
    let all: Vec<usize> = (0..l.catalog.tools().len()).collect();
    let mut index = SearchIndex::build(&l.catalog, &all);
    // Without the embedding model the suggestions are BM25F's alone, as a search's would be.
    let _ = super::search::attach_ranker(&mut index, &l.catalog, Ranker::default());
    let request = SearchRequest::Names(vec![wanted.trim().to_owned()]);
    // A slip of a meta-tool's name (`tool_serach`) is that tool's before any catalog tool's.
    let mut names = name::closest(wanted.trim(), name::META_TOOLS, 1);
    names.extend(
        search(&index, &l.catalog, &request, &l.config().search)
            .hits
            .iter()
            .map(|h| h.name.to_string()),
    );
    names
}

pub fn run(args: Args) -> Result<()> {
    // A blank name is a bad argument (status 2), not a tool the catalog lacks (a finding, 1).
    if args.name.trim().is_empty() {
        anyhow::bail!("the tool name is blank: give a name to explain (canonical, or bare)");
    }
    let l = args.source.load_json(
        args.json,
        crate::inputs::JsonFields::from_iter([("name".into(), json!(args.name))]),
    )?;
    let tools = l.catalog.tools();
    // The session's own tools are no catalog tool's: `tool_search` is always the meta-tool (a
    // catalog tool of that name is named otherwise), and a spelling of it that names no catalog
    // tool is taken for it, as names resolve.
    let resolved = l.catalog.resolve(&args.name);
    let meta = match resolved {
        _ if name::META_TOOLS.contains(&args.name.as_str()) => Some(args.name.as_str()),
        Resolution::NotFound if l.catalog.left_out(&args.name).is_none() => {
            name::meta_tool(&args.name)
        }
        _ => None,
    };
    if let Some(meta) = meta {
        return explain_meta(&l, meta, args.json);
    }
    let i = match resolved {
        Resolution::Exact(i) | Resolution::Bare(i) => i,
        Resolution::Ambiguous(c) => {
            let names: Vec<&str> = c.iter().map(|&i| tools[i].name.as_str()).collect();
            if args.json {
                print_json(&json!({"name": args.name, "error": "ambiguous", "candidates": names}))?;
            }
            return Err(super::Finding(format!(
                "{} names several tools; give one of: {}",
                plain_quote(&args.name),
                names.join(", ")
            ))
            .into());
        }
        Resolution::NotFound => {
            // Not a misspelling: the name is there, but loading left its item out.
            if let Some(left) = l.catalog.left_out(&args.name) {
                if args.json {
                    print_json(&json!({"name": args.name, "error": "left_out",
                        "location": left.location, "why": left.why}))?;
                }
                let left_out = Error::LeftOutTool {
                    name: left.name.clone(),
                    location: left.location.clone(),
                    why: left.why.clone(),
                };
                return Err(super::Finding(left_out.to_string()).into());
            }
            let suggestions = suggestions(&l, &args.name);
            if args.json {
                print_json(
                    &json!({"name": args.name, "error": "unknown", "suggestions": suggestions}),
                )?;
            }
            let unknown = Error::UnknownTool {
                name: args.name.clone(),
                suggestions,
            };
            return Err(super::Finding(unknown.to_string()).into());
        }
    };
    let (t, d) = (&tools[i], &l.exposure.decisions[i]);
    let declared = t
        .defer_loading
        .map_or("absent".to_owned(), |b| b.to_string());
    let policy = l.compiled.policy();
    let mode = policy.mode();
    if args.json {
        return print_json(&json!({
            "tool": t.name,
            "original_name": t.original_name,
            "server": t.server,
            "server_original_name": t.original_server,
            "aliases": t.aliases,
            "origin": t.origin,
            "declared": t.defer_loading,
            "mode": mode.map(|m| json!({"name": m.name, "admits": d.in_mode, "reason": d.mode_reason})),
            "denied_by": d.denied_by,
            "rules": policy.rules().iter().map(|r| json!({"rule": r.to_string(), "matched": d.matched_rules.contains(&r.to_string())})).collect::<Vec<_>>(),
            "default": policy.default().to_string(),
            "decided_by_default": d.by_default,
            "auto": l.exposure.auto,
            "final": d.state,
            "reason": d.reason,
        }));
    }
    // What the catalog and the configuration give is shown with its control characters
    // escaped, as load errors show them: quoted as Rust writes a string, else as a cell.
    outln!("{}", cell(&t.name));
    match &t.original_server {
        Some(orig) => {
            outln!(
                "  original:  tool {:?} of server {:?}",
                t.original_name,
                orig
            );
        }
        None => outln!(
            "  original:  {:?} ({})",
            t.original_name,
            serde_json::to_value(t.origin)?.as_str().unwrap_or("")
        ),
    }
    if !t.aliases.is_empty() {
        outln!(
            "  aliases:   {} (deny and ask rules and hooks match these too)",
            cell(&t.aliases.join(", "))
        );
    }
    // The bundled example is not what `serve` runs by default: say so where the rules are read.
    let source = l.compiled.source_name();
    if source.ends_with("(bundled)") {
        outln!(
            "  config:    {source}; `serve` with no --config runs examples/gateway.toml, whose rules differ: add --config examples/gateway.toml to explain under them"
        );
    } else {
        outln!("  config:    {source}");
    }
    outln!("  declared:  defer_loading = {declared}");
    match mode {
        Some(m) => outln!(
            "  mode:      {} -> {}: {}",
            cell(&m.name),
            if d.in_mode == Some(true) {
                "admits"
            } else {
                "hides"
            },
            cell(d.mode_reason.as_deref().unwrap_or(""))
        ),
        None => outln!("  mode:      none"),
    }
    match &d.denied_by {
        Some(rule) => outln!(
            "  deny:      [permissions] {} denies every call: hidden",
            cell(rule)
        ),
        None => outln!("  deny:      no rule denies every call"),
    }
    if policy.rules().is_empty() {
        outln!("  rules:     none");
    } else {
        outln!("  rules:");
        for r in policy.rules() {
            let s = r.to_string();
            let hit = if d.matched_rules.contains(&s) {
                "matches"
            } else {
                "-"
            };
            outln!("    {:<40} {hit}", cell(&s));
        }
    }
    outln!(
        "  default:   {}{}",
        policy.default(),
        if d.by_default {
            " (decides)"
        } else {
            " (not consulted)"
        }
    );
    outln!("  final:     {} ({})", d.state, cell(&d.reason));
    Ok(())
}

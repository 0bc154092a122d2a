//! One client request: rewrite it, run the upstream rounds, answer the client once.
//!
//! ```text
//! client body ─► shelf (catalog of its tools) ─► session (frozen surface, records)
//!             ─► upstream body: frozen tools, conversation with recorded rounds put back,
//!                deferred calls as the defer_execute calls the model made, injected blocks
//!             ─► round: tool_search answered here, bad defer_execute answered here ─┐
//!                 ▲                                                                 │
//!                 └──────── continue while only the proxy had something to answer ◄─┘
//!             ─► client: one message; good defer_execute calls as calls of the real tool
//! ```
//!
//! A round that holds a call the client must run ends the loop even when it also holds calls
//! the proxy answered: those answers are recorded and open the next request's entries, where
//! the format wants the results of the previous assistant turn.
//!
//! A call counts as made (the tool's activation is refreshed, `unless_used` sees it, its
//! `after_tools` reminders fire) only when its tool ran. A call the proxy refuses never counts.
//! One the proxy runs itself counts when it ran (a script that failed still ran), and the
//! reminders it fires go on its result, which the model reads in the next round. One handed to
//! the client counts in the next request, when its result comes back there and is not flagged as
//! an error (Anthropic's `is_error`, set by clients on a call their user declined or their hook
//! blocked, and on a tool that failed; the OpenAI formats have no such flag): its reminders are
//! injected after the client's last entry, with the other reminders of that turn.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use toolshelf_core::audit::{AuditHit, AuditKind, AuditRecord};
use toolshelf_core::authoring;
use toolshelf_core::catalog::Resolution;
use toolshelf_core::hook::{HookEvent, HookEventKind};
use toolshelf_core::invoke::{self, Refusal, RefusalKind, Via};
use toolshelf_core::meta::DeferExecuteArgs;
use toolshelf_core::name::{DEFER_EXECUTE, TOOL_SEARCH};
use toolshelf_core::policy::State;
use toolshelf_core::reminder::{Call as ReminderCall, TurnInput};
use toolshelf_core::request::Api;
use toolshelf_core::search::SearchRequest;
use toolshelf_core::search::render::{SessionView, search_for};
use toolshelf_core::session::{Activity, FrozenSurface};

use crate::api::{Call, ClientTurn, Dialect, Part, ProxyResult, Round, add_usage};
use crate::session::{
    Injected, PrefixPrint, ProxySession, Recorded, chains, digest, fingerprint, link_before,
    root_key, text_key, turn_key, turn_print,
};
use crate::shelf::{Own, Passed, Shelf};
use crate::{Loaded, Proxy, SESSION_HEADER};

/// A request ready to go upstream.
#[derive(Debug)]
pub struct Prepared {
    /// The format.
    pub dialect: Dialect,
    /// The session key.
    pub key: String,
    /// The session, as of this request.
    pub session: ProxySession,
    /// Its stored version.
    pub version: Option<u64>,
    /// Whether the store failed to answer for the session: a new one stands in.
    pub store_failed: bool,
    /// The session's figures as loaded: what this request adds is the difference.
    pub base_figures: crate::session::Figures,
    /// The request's catalog.
    pub shelf: Arc<Shelf>,
    /// The client's tools (its catalog's source, for a tool the model defines mid-request).
    pub client_tools: Vec<Value>,
    /// The upstream body (its conversation grows with each round).
    pub body: Map<String, Value>,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// Whether the client asked for the usage chunk (Chat Completions).
    pub include_usage: bool,
    /// Tools whose activation expired as this request's turn began.
    pub expired: Vec<String>,
    /// Reminder rules that fired for this request.
    pub fired: Vec<String>,
    /// The deferred tools the client's `tool_choice` forces or allows: when set, `defer_execute`
    /// runs these alone (catalog indices).
    pub forced: Option<Vec<usize>>,
    /// The [`chains`] link of the client's conversation as sent: where the client's copy of
    /// this request's answer will sit, which keys the rounds recorded for a turn without calls.
    pub chain_end: String,
    /// The client tool names of the session's frozen upstream list: the tools the model sees
    /// with their schemas.
    pub frozen_names: HashSet<String>,
    /// The name and type of every other tool of the session's frozen upstream list: the tools
    /// passed along as sent when the session began (a custom tool, Anthropic's `bash`), which
    /// stay in the model's list when the client stops sending them.
    pub frozen_passed: Vec<(String, String)>,
}

/// Why a request goes upstream as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassReason {
    /// It has no client tools.
    NoTools,
    /// It uses the provider's own deferral, which this proxy leaves alone
    /// ([`Proxy::takes_over_deferral`]).
    ProviderDeferral,
}

/// What `prepare` decided.
#[derive(Debug)]
pub enum Plan {
    /// Rewrite and run the loop.
    Rewrite(Box<Prepared>),
    /// Send it upstream as the client sent it.
    Pass(PassReason),
}

/// Takes the conversation out of the body, leaving its key in place (so the body keeps the
/// client's key order when it is put back).
fn conversation_mut(dialect: Dialect, body: &mut Map<String, Value>) -> Vec<Value> {
    match body.get_mut(dialect.api().conversation_key()) {
        Some(Value::Array(a)) => std::mem::take(a),
        _ => Vec::new(),
    }
}

/// What a request's headers say of its conversation and client.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ids<'a> {
    /// The `x-toolshelf-session` header: the session's name.
    pub session: Option<&'a str>,
    /// Claude Code's session header ([`crate::HARNESS_SESSION_HEADER`]), part of the key of a
    /// session the first header does not name (see [`crate::session::harness_id`]).
    pub harness: Option<&'a str>,
    /// The `User-Agent`.
    pub client: Option<&'a str>,
}

/// Reads the request and its session and builds the first upstream body.
pub async fn prepare(
    proxy: &Proxy,
    dialect: Dialect,
    mut body: Map<String, Value>,
    ids: Ids<'_>,
) -> Result<Plan, String> {
    let Ids {
        session: session_header,
        harness,
        client,
    } = ids;
    if dialect.tools(&body).is_empty() {
        return Ok(Plan::Pass(PassReason::NoTools));
    }
    // The Responses API takes a lone user message as a plain string; as the list it stands for,
    // it is kept, rewritten and keys the session like any first message.
    if dialect.api() == Api::OpenAiResponses
        && let Some(Value::String(text)) = body.get("input")
    {
        let text = text.clone();
        body.insert(
            "input".into(),
            serde_json::json!([{"role": "user", "content": text}]),
        );
    }
    let all = dialect.tools(&body);
    let deferring = dialect.uses_provider_deferral(&body);
    // Taking over a request that uses the provider's own deferral: its tool-search tools go,
    // and `defer_loading` marks become the per-tool declarations the catalog reads.
    if deferring && !proxy.takes_over_deferral() {
        return Ok(Plan::Pass(PassReason::ProviderDeferral));
    }
    let kept: Option<Vec<Value>> = deferring.then(|| {
        all.iter()
            .filter(|t| {
                !t.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|ty| ty.starts_with("tool_search_tool") || ty == "tool_search")
            })
            .cloned()
            .collect()
    });
    let tools: &[Value] = kept.as_deref().unwrap_or(all);
    let names: Vec<String> = tools
        .iter()
        .filter_map(|t| dialect.client_tool_name(t).map(str::to_owned))
        .collect();
    let (key, loaded) = match session_header {
        Some(h) if !h.trim().is_empty() => {
            let key = format!("h:{}", h.trim());
            let loaded = proxy.load_session(&key).await;
            (key, loaded)
        }
        _ => {
            let harness = crate::session::harness_id(dialect, harness, &body);
            find_by_root(proxy, dialect, &body, &names, harness.as_deref()).await
        }
    };
    let Loaded {
        mut session,
        version,
        failed: store_failed,
    } = loaded;
    let base_figures = session.figures.clone();
    let shelf = proxy.shelf(dialect, tools, &session.authored).await?;
    let api_name = dialect.api().name();
    // The key of each client entry: the retry check here and the injected blocks below.
    let links = chains(crate::api::conversation(dialect, &body));
    // A request that ends at the entry the last one ended at is that request again (a retry,
    // a regenerated answer): the same turn, whose calls were counted already.
    let entry = last_entry_key(&body, &links);
    let again = entry.is_some() && session.last_entry == entry;
    session.last_entry = entry;
    // The calls the client ran since the previous request were made in that request's turn.
    let ran = if again {
        Vec::new()
    } else {
        ran_by_client(
            dialect,
            &session,
            &shelf,
            crate::api::conversation(dialect, &body),
        )
    };
    for (i, _) in &ran {
        session.state.record_call(&shelf.catalog.tools()[*i].name);
    }
    let ttl = proxy.compiled.config().session.activation_ttl_turns;
    let before = session.state.active_names(ttl);
    let state = &mut session.state;
    if !again {
        state.next_turn();
    }
    let still = state.active_names(ttl);
    let expired: Vec<String> = before.into_iter().filter(|n| !still.contains(n)).collect();
    // The list is rendered (description templates included) only when this session has none
    // frozen in this format yet, with the values of the session's first request.
    let values = session
        .values
        .get_or_insert_with(|| session_values(proxy, client))
        .clone();
    let fresh = match session.state.frozen() {
        Some(f) if f.format == api_name => None,
        _ => {
            // A template runs to its step budget, which is work enough to hold a runtime worker
            // (and every request waiting on it) for a while: it renders on a blocking thread.
            let (rendering, compiled) = (shelf.clone(), proxy.compiled.clone());
            let (tools, described) = tokio::task::spawn_blocking(move || {
                rendering.session_tools(dialect, &compiled, &values)
            })
            .await
            .map_err(|e| format!("rendering the tool list failed: {e}"))??;
            if session.state.frozen().is_none() {
                session.described = described;
                session.described_on = Some(shelf.names_digest.clone());
            }
            Some(tools)
        }
    };
    if session.described_on.as_deref() != Some(shelf.names_digest.as_str()) {
        describe_late_tools(proxy, &shelf, &mut session).await;
    }
    let state = &mut session.state;
    let frozen = state
        .freeze(shelf.visible.clone(), || FrozenSurface {
            format: api_name.into(),
            tools: Value::Array(fresh.clone().unwrap_or_default()).to_string(),
        })
        .clone();
    let upstream_tools: Vec<Value> = match fresh {
        None => {
            serde_json::from_str(&frozen.tools).unwrap_or_else(|_| shelf.upstream_tools.clone())
        }
        Some(tools) => tools,
    };
    let frozen_names: HashSet<String> = upstream_tools
        .iter()
        .filter_map(|t| dialect.client_tool_name(t).map(str::to_owned))
        .collect();
    let frozen_passed: Vec<(String, String)> = upstream_tools
        .iter()
        .filter(|t| dialect.client_tool_name(t).is_none())
        .filter_map(crate::shelf::passed_name_and_type)
        .collect();
    let forced = body
        .get_mut("tool_choice")
        .and_then(|choice| force_meta_choice(dialect, choice, &frozen_names, &shelf));
    let mut notices: Vec<String> = session
        .state
        .change_notice(&shelf.visible)
        .into_iter()
        .collect();
    if let Some(allowed) = &forced {
        // The model is made to call a tool it has not searched for: it gets the definitions
        // now, and its first call is not refused for a schema it was never shown.
        let tools = shelf.catalog.tools();
        session
            .state
            .activate(allowed.iter().map(|&i| tools[i].name.as_str()));
        notices.push(forced_notice(&shelf, allowed));
    }
    let conv = conversation_mut(dialect, &mut body);
    let chain_end = links.last().cloned().unwrap_or_default();
    // Model-written tools whose names the client's tools take now. With authoring off they are
    // not on the shelf, but an activation of the model's tool must still not pass to the
    // client's.
    let shadowed: std::collections::BTreeSet<String> = if proxy.authoring() {
        shelf.shadowed.iter().cloned().collect()
    } else {
        session
            .authored
            .iter()
            .map(|t| t.name().to_owned())
            .filter(|n| names.contains(n))
            .collect()
    };
    shadow_notices(&mut session, shadowed, &mut notices);
    if !session.lost.is_empty() {
        // The conversation as the upstream will see it holds the definitions its model made.
        let seen = rewrite(
            dialect,
            &session,
            &shelf,
            &frozen_names,
            conv.clone(),
            &links,
        );
        lost_notices(dialect, &mut session, &seen, &mut notices);
    }
    let fired = remember_injection(
        proxy,
        dialect,
        &mut session,
        &shelf,
        &conv,
        &links,
        &ran,
        notices,
        frozen_names.contains(TOOL_SEARCH),
    );
    let mut out = rewrite(dialect, &session, &shelf, &frozen_names, conv, &links);
    if dialect.api() == Api::OpenAiResponses
        && let Some(Value::String(prev)) = body.get("previous_response_id")
        && let Some(rec) = session.recorded.get(&format!("response:{prev}"))
    {
        // The client knows the first round's id, the upstream's conversation continues from the
        // last round's; the results the proxy still owes that round come before the new items.
        let last = rec.last.first().cloned();
        let owed: Vec<ProxyResult> = rec
            .pending
            .iter()
            .filter(|r| !out.iter().any(|e| dialect.result_ids(e).contains(&r.id)))
            .cloned()
            .collect();
        dialect.prepend_results(&mut out, &owed);
        if let Some(last @ Value::String(_)) = last {
            body.insert("previous_response_id".into(), last);
        }
    }
    let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
    let include_usage = body
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        == Some(true);
    if stream && dialect.api() == Api::OpenAiChat {
        // The proxy sums usage over rounds; it asks for the usage chunk whether or not the client
        // did, and writes one for the client only if it asked.
        let opts = body.entry("stream_options").or_insert_with(|| json!({}));
        if let Value::Object(o) = opts {
            o.insert("include_usage".into(), true.into());
        }
    }
    let sent = body.insert("tools".into(), Value::Array(upstream_tools));
    let client_tools = match (kept, sent) {
        (Some(kept), _) => kept,
        (None, Some(Value::Array(sent))) => sent,
        _ => Vec::new(),
    };
    body.insert(dialect.api().conversation_key().into(), Value::Array(out));
    Ok(Plan::Rewrite(Box::new(Prepared {
        dialect,
        key,
        session,
        version,
        store_failed,
        base_figures,
        shelf,
        client_tools,
        body,
        stream,
        include_usage,
        expired,
        fired,
        forced,
        chain_end,
        frozen_names,
        frozen_passed,
    })))
}

/// Tells the model when a client tool starts or stops hiding a tool it wrote (the name now
/// means another tool), and drops that name's activation: the tool behind it must be loaded
/// before `defer_execute` runs it.
fn shadow_notices(
    session: &mut ProxySession,
    now: std::collections::BTreeSet<String>,
    notices: &mut Vec<String>,
) {
    if now == session.shadowed {
        return;
    }
    for name in now.difference(&session.shadowed) {
        session.state.deactivate(name);
        notices.push(format!(
            "[toolshelf: the client now sends a tool named {name:?}, which replaces the tool {name:?} you wrote with tool_define. It is another tool: load it with tool_search before calling it.]"
        ));
    }
    for name in session.shadowed.difference(&now) {
        if !session.authored.iter().any(|t| t.name() == name) {
            continue;
        }
        session.state.deactivate(name);
        notices.push(format!(
            "[toolshelf: the client no longer sends its tool {name:?}: {name:?} is again the tool you wrote with tool_define. Load it with tool_search before calling it.]"
        ));
    }
    session.shadowed = now;
}

/// Tells the conversation whose model made a definition that a merge with another
/// conversation of the session did not keep (found by that definition in `conv`, the
/// conversation as the upstream sees it), once.
fn lost_notices(
    dialect: Dialect,
    session: &mut ProxySession,
    conv: &[Value],
    notices: &mut Vec<String>,
) {
    for e in conv {
        for c in dialect.calls(e) {
            let params = match c.name.as_str() {
                DEFER_EXECUTE
                    if c.input.get("tool_name").and_then(Value::as_str)
                        == Some(authoring::TOOL_DEFINE) =>
                {
                    c.input.get("params").and_then(Value::as_object)
                }
                authoring::TOOL_DEFINE => Some(&c.input),
                _ => None,
            };
            let Some(p) = params else { continue };
            let text = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default();
            let print = crate::session::definition_print(
                text("name").trim(),
                text("description"),
                p.get("schema").unwrap_or(&Value::Null),
                text("script"),
            );
            let Some(k) = session.lost.iter().position(|l| l.print == print) else {
                continue;
            };
            let lost = session.lost.remove(k);
            let now = session
                .authored
                .iter()
                .find(|t| t.name() == lost.name)
                .map(|t| {
                    format!(
                        " {:?} is now: {} Its params: {}.",
                        lost.name,
                        t.item["description"].as_str().unwrap_or_default(),
                        t.item["input_schema"]
                    )
                })
                .unwrap_or_default();
            notices.push(format!("[toolshelf: {}.{now}]", lost.why));
        }
    }
}

/// Renders the templates of tools that arrived after the session's list froze (a client that
/// added a tool mid-conversation), with the session's values, for its search results; the
/// renderings made when the list froze stay as they were. A template that fails is logged and
/// its tool shows the catalog's description.
async fn describe_late_tools(proxy: &Proxy, shelf: &Arc<Shelf>, session: &mut ProxySession) {
    session.described_on = Some(shelf.names_digest.clone());
    if !proxy.compiled.templates().any(&shelf.catalog) {
        return;
    }
    let (rendering, compiled) = (shelf.clone(), proxy.compiled.clone());
    let values = session.values.clone().unwrap_or_default();
    let outcome =
        tokio::task::spawn_blocking(move || rendering.session_descriptions(&compiled, &values))
            .await;
    match outcome {
        Ok(Ok(fresh)) => {
            for (name, text) in fresh {
                session.described.entry(name).or_insert(text);
            }
        }
        Ok(Err(e)) => tracing::warn!(
            "a tool that arrived after its session's list froze keeps the catalog's description: {e}"
        ),
        Err(e) => tracing::warn!("rendering failed: {e}"),
    }
}

/// What description templates read as `session.*` for a proxy session: the mode, the client
/// (the first request's `User-Agent`), the workspace.
fn session_values(proxy: &Proxy, client: Option<&str>) -> toolshelf_core::template::SessionValues {
    let compiled = &proxy.compiled;
    toolshelf_core::template::SessionValues {
        mode: compiled.mode().map(str::to_owned),
        client: client.map(str::to_owned),
        workspace: toolshelf_runtime::files::workspace(compiled.templates().workspace()),
    }
}

/// The session of a request without a session header: by the hash of its root, with the id its
/// harness gives the conversation (`harness`) when it sends one. The root names the client's
/// tools, so a client whose tools changed mid-conversation hashes anew: a second key without the
/// tools, written when a session starts, finds the session it continues. A Responses request
/// chained by id has no root of its own: the id leads to its session.
async fn find_by_root(
    proxy: &Proxy,
    dialect: Dialect,
    body: &Map<String, Value>,
    names: &[String],
    harness: Option<&str>,
) -> (String, Loaded) {
    // Whether any read on the way failed: then a missing session may only be unread.
    let mut failed = false;
    // A Responses conversation chained by id sends only its new items: the id it continues
    // names the session.
    if let Some(Value::String(prev)) = body.get("previous_response_id") {
        match proxy.store.get(&response_alias(prev)).await {
            Ok(Some(v)) => {
                if let Ok(earlier) = String::from_utf8(v.value) {
                    let loaded = proxy.load_session(&earlier).await;
                    if loaded.version.is_some() {
                        return (earlier, loaded);
                    }
                    failed |= loaded.failed;
                }
            }
            Ok(None) => {}
            Err(_) => {
                proxy.store_failed();
                failed = true;
            }
        }
        // An id this proxy cannot place (its session expired or was never here): the new items
        // say nothing of the conversation's root, so the id names a session of its own.
        let key = format!("c:{prev}");
        let mut loaded = proxy.load_session(&key).await;
        loaded.failed |= failed;
        return (key, loaded);
    }
    let key = format!("r:{}", root_key(dialect, body, names, harness));
    let alias = format!("a:{}", root_key(dialect, body, &[], harness));
    let mut loaded = proxy.load_session(&key).await;
    if loaded.version.is_some() {
        return (key, loaded);
    }
    failed |= loaded.failed;
    let continues = crate::api::conversation(dialect, body)
        .iter()
        .any(|e| dialect.is_assistant(e));
    if continues && !loaded.failed {
        match proxy.store.get(&alias).await {
            Ok(Some(v)) => {
                if let Ok(earlier) = String::from_utf8(v.value) {
                    let found = proxy.load_session(&earlier).await;
                    if found.version.is_some() {
                        return (earlier, found);
                    }
                    failed |= found.failed;
                }
            }
            Ok(None) => {}
            Err(_) => {
                proxy.store_failed();
                failed = true;
            }
        }
    }
    if !continues {
        let ttl = std::time::Duration::from_secs(proxy.compiled.config().proxy.session_ttl_secs);
        if proxy
            .store
            .put(&alias, key.clone().into_bytes(), ttl)
            .await
            .is_err()
        {
            proxy.store_failed();
        }
    }
    loaded.failed = failed;
    (key, loaded)
}

/// What the model reads when the client's `tool_choice` makes it call deferred tools it has
/// not searched for: how, and their definitions.
fn forced_notice(shelf: &Shelf, allowed: &[usize]) -> String {
    let (names, definitions) = allowed_text(shelf, allowed);
    format!(
        "This request's tool_choice asks for a call of {names} now: call defer_execute with that tool_name and params that fit {}:\n{definitions}",
        if allowed.len() == 1 {
            "its definition"
        } else {
            "the chosen tool's definition"
        }
    )
}

/// The tools a `tool_choice` allows: their names (quoted, joined by "or") and definitions.
fn allowed_text(shelf: &Shelf, allowed: &[usize]) -> (String, String) {
    let tools = shelf.catalog.tools();
    let names: Vec<String> = allowed
        .iter()
        .map(|&i| format!("{:?}", tools[i].name))
        .collect();
    let definitions: Vec<String> = allowed
        .iter()
        .map(|&i| invoke::schema_block(&tools[i]))
        .collect();
    (names.join(" or "), definitions.join("\n"))
}

/// A `tool_choice` that names tools the upstream list does not hold (deferred tools) would be
/// refused upstream. One that forces a deferred tool forces `defer_execute` instead; an
/// `allowed_tools` choice allows `defer_execute` (and `tool_search`) in place of its deferred
/// tools. The deferred tools named are returned, so that `defer_execute` runs only those this
/// turn. A name the request's tools do not have is left for the upstream to refuse, as it would
/// be without the proxy.
fn force_meta_choice(
    dialect: Dialect,
    choice: &mut Value,
    frozen_names: &HashSet<String>,
    shelf: &Shelf,
) -> Option<Vec<usize>> {
    let deferred = |name: &str| {
        (!frozen_names.contains(name))
            .then(|| shelf.by_client_name(name))
            .flatten()
    };
    if choice.get("type").and_then(Value::as_str) == Some("allowed_tools") {
        return allow_meta_tools(dialect, choice, &deferred);
    }
    let named = match dialect.api() {
        Api::Anthropic => (choice.get("type").and_then(Value::as_str) == Some("tool"))
            .then(|| choice.get("name").and_then(Value::as_str))
            .flatten(),
        Api::OpenAiChat => choice.pointer("/function/name").and_then(Value::as_str),
        Api::OpenAiResponses => (choice.get("type").and_then(Value::as_str) == Some("function"))
            .then(|| choice.get("name").and_then(Value::as_str))
            .flatten(),
    }?;
    let forced = deferred(named)?;
    match dialect.api() {
        Api::Anthropic => choice["name"] = DEFER_EXECUTE.into(),
        Api::OpenAiChat => choice["function"]["name"] = DEFER_EXECUTE.into(),
        Api::OpenAiResponses => choice["name"] = DEFER_EXECUTE.into(),
    }
    Some(vec![forced])
}

/// An OpenAI `allowed_tools` choice (Chat: under `allowed_tools`; Responses: at the top) with its
/// deferred tools replaced by the meta-tools that reach them.
fn allow_meta_tools(
    dialect: Dialect,
    choice: &mut Value,
    deferred: &dyn Fn(&str) -> Option<usize>,
) -> Option<Vec<usize>> {
    let list = match dialect.api() {
        Api::OpenAiChat => choice.pointer_mut("/allowed_tools/tools"),
        _ => choice.get_mut("tools"),
    }?
    .as_array_mut()?;
    let name_of = |t: &Value| {
        t.pointer("/function/name")
            .or_else(|| t.get("name"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mut allowed = Vec::new();
    list.retain(|t| match name_of(t).as_deref().and_then(deferred) {
        Some(i) => {
            allowed.push(i);
            false
        }
        None => true,
    });
    if allowed.is_empty() {
        return None;
    }
    for meta in [TOOL_SEARCH, DEFER_EXECUTE] {
        list.push(match dialect.api() {
            Api::OpenAiChat => json!({"type": "function", "function": {"name": meta}}),
            _ => json!({"type": "function", "name": meta}),
        });
    }
    Some(allowed)
}

/// The store key that leads from a Responses id the client was shown to its session.
pub fn response_alias(id: &str) -> String {
    format!("p:{id}")
}

/// Reminders and the tool-set notice for this request, recorded after its last client entry
/// (a resent request reuses what was recorded, so its bytes do not change). `ran` are the calls
/// the client ran since the previous request ([`ran_by_client`]); `searchable`, whether the
/// session's list has `tool_search` (a reminder points at it only then). Returns the ids of the
/// reminder rules that fired.
#[allow(clippy::too_many_arguments)]
fn remember_injection(
    proxy: &Proxy,
    dialect: Dialect,
    session: &mut ProxySession,
    shelf: &Shelf,
    conv: &[Value],
    links: &[String],
    ran: &[(usize, Map<String, Value>)],
    notices: Vec<String>,
    searchable: bool,
) -> Vec<String> {
    let mut fired = Vec::new();
    let Some(last) = conv.len().checked_sub(1) else {
        return fired;
    };
    if dialect.is_assistant(&conv[last]) {
        return fired;
    }
    let key = links[last].clone();
    if session.injected.contains_key(&key) {
        return fired;
    }
    let mut blocks = notices;
    let reminders = proxy.compiled.reminders();
    if !reminders.is_empty() {
        let user_text = dialect.latest_user_text(conv);
        let searches = last_turn_searches(dialect, session, conv, links);
        let tools = shelf.catalog.tools();
        let reminder_calls: Vec<ReminderCall<'_>> = ran
            .iter()
            .map(|(i, p)| ReminderCall {
                tool: &tools[*i],
                params: p,
            })
            .collect();
        let input = TurnInput {
            user_text: user_text.as_deref(),
            calls: &reminder_calls,
            searches: &searches,
        };
        let eval = reminders.evaluate(&mut session.state, &input);
        blocks.extend(
            eval.showing
                .iter()
                .map(|&i| reminders.block_in(i, searchable)),
        );
        fired.extend(
            eval.fired
                .iter()
                .map(|&i| reminders.rules()[i].config.id.clone()),
        );
    }
    if !blocks.is_empty() {
        session.injected.insert(key, Injected { blocks });
    }
    fired
}

/// Where the conversation's last assistant turn lies: its first and last entries.
fn last_turn(dialect: Dialect, conv: &[Value]) -> Option<(usize, usize)> {
    let end = conv.iter().rposition(|e| dialect.is_assistant(e))?;
    let mut start = end;
    while dialect.api() == Api::OpenAiResponses
        && start > 0
        && dialect.is_assistant(&conv[start - 1])
    {
        start -= 1;
    }
    Some((start, end))
}

/// The calls of the catalog's tools the client ran since the previous request (catalog index
/// and params): those of the conversation's last assistant turn whose results follow it. A
/// Responses request chained by `previous_response_id` does not resend that turn: its calls are
/// read from the turn's record, found by a result's call id. The proxy cannot see what the
/// client did with a call it handed over, only the result: one flagged as an error (Anthropic's
/// `is_error`, which clients set on a call their user declined or their hook blocked, and on a
/// tool that failed) does not count; the OpenAI formats have no such flag, and every result
/// counts.
fn ran_by_client(
    dialect: Dialect,
    session: &ProxySession,
    shelf: &Shelf,
    conv: &[Value],
) -> Vec<(usize, Map<String, Value>)> {
    let (calls, after): (Vec<Handed>, &[Value]) = match last_turn(dialect, conv) {
        Some((start, end)) => (
            conv[start..=end]
                .iter()
                .flat_map(|e| dialect.calls(e))
                .filter_map(|c| Some((c.id, shelf.by_client_name(&c.name)?, c.input)))
                .collect(),
            &conv[end + 1..],
        ),
        None => (chained_calls(dialect, session, shelf, conv), conv),
    };
    if calls.is_empty() {
        return Vec::new();
    }
    let answered: HashSet<String> = after.iter().flat_map(|e| dialect.result_ids(e)).collect();
    let failed: HashSet<String> = after
        .iter()
        .flat_map(|e| dialect.error_result_ids(e))
        .collect();
    calls
        .into_iter()
        .filter(|(id, _, _)| answered.contains(id) && !failed.contains(id))
        .map(|(_, i, params)| (i, params))
        .collect()
}

/// A call handed to the client: its id, its tool's catalog index and its params.
type Handed = (String, usize, Map<String, Value>);

/// The calls the client was handed in the turn a chained Responses request's results answer
/// (id, catalog index, params), from the turn's record, which its first call's id keys: the
/// calls of its last round the proxy did not answer itself.
fn chained_calls(
    dialect: Dialect,
    session: &ProxySession,
    shelf: &Shelf,
    conv: &[Value],
) -> Vec<Handed> {
    let Some(rec) = conv
        .iter()
        .flat_map(|e| dialect.result_ids(e))
        .find_map(|id| session.recorded.get(&format!("call:{id}")))
    else {
        return Vec::new();
    };
    let answered: HashSet<&str> = rec.pending.iter().map(|r| r.id.as_str()).collect();
    rec.last
        .iter()
        .flat_map(|e| dialect.calls(e))
        .filter(|c| !answered.contains(c.id.as_str()))
        .filter_map(|c| {
            if c.name == DEFER_EXECUTE {
                let args = DeferExecuteArgs::parse(&c.input).ok()?;
                let i = invoke::resolve(&shelf.catalog, &shelf.exposure, &args.tool_name).ok()?;
                Some((c.id, i, args.params))
            } else {
                Some((c.id, shelf.by_client_name(&c.name)?, c.input))
            }
        })
        .collect()
}

/// The queries of the searches the proxy answered in the conversation's last assistant turn.
fn last_turn_searches(
    dialect: Dialect,
    session: &ProxySession,
    conv: &[Value],
    links: &[String],
) -> Vec<String> {
    let Some((start, end)) = last_turn(dialect, conv) else {
        return Vec::new();
    };
    let group = &conv[start..=end];
    let mut searches = Vec::new();
    if let Some(rec) = recorded_turn(dialect, session, group, link_before(links, start)) {
        for e in rec.prelude.iter().chain(&rec.last) {
            for c in dialect.calls(e) {
                if c.name == TOOL_SEARCH {
                    if let Some(q) = c.input.get("query").and_then(Value::as_str) {
                        searches.push(q.to_owned());
                    }
                    if let Some(Value::Array(qs)) = c.input.get("queries") {
                        searches.extend(qs.iter().filter_map(Value::as_str).map(str::to_owned));
                    }
                }
            }
        }
    }
    searches
}

/// The record of the client's assistant turn `group` (its entries, after the [`chains`] link
/// `before`), if the client's copy is still the turn it was given: a turn the client edited goes
/// upstream as the client sent it.
fn recorded_turn<'a>(
    dialect: Dialect,
    session: &'a ProxySession,
    group: &[Value],
    before: &str,
) -> Option<&'a Recorded> {
    let rec = session.recorded.get(&turn_key(dialect, group, before))?;
    match &rec.shown {
        Some(print) => {
            let text: String = group.iter().map(|e| dialect.shown_text(e)).collect();
            let calls: Vec<Call> = group.iter().flat_map(|e| dialect.calls(e)).collect();
            (*print == turn_print(&text, &calls)).then_some(rec)
        }
        // Recorded before prints were kept.
        None => Some(rec),
    }
}

/// A cache mark the client put on the last block of a turn moves to the last block of the turn
/// put back in its place (Anthropic): the client's breakpoint stays at the end of that turn.
fn carry_cache_mark(dialect: Dialect, group: &[Value], last: &mut [Value]) {
    if dialect.api() != Api::Anthropic {
        return;
    }
    let last_block = |e: &Value| -> Option<Value> {
        e.get("content")?
            .as_array()?
            .last()?
            .get("cache_control")
            .cloned()
    };
    let Some(mark) = group.last().and_then(last_block) else {
        return;
    };
    if let Some(Value::Object(block)) = last
        .last_mut()
        .and_then(|e| e.get_mut("content"))
        .and_then(Value::as_array_mut)
        .and_then(|blocks| blocks.last_mut())
    {
        block.insert("cache_control".into(), mark);
    }
}

/// The upstream conversation for the client's `conv`.
fn rewrite(
    dialect: Dialect,
    session: &ProxySession,
    shelf: &Shelf,
    frozen_names: &HashSet<String>,
    conv: Vec<Value>,
    links: &[String],
) -> Vec<Value> {
    let mut out = Vec::with_capacity(conv.len() + 8);
    let mut pending: Vec<ProxyResult> = Vec::new();
    let mut i = 0;
    while i < conv.len() {
        let assistant = dialect.is_assistant(&conv[i]);
        let mut end = i + 1;
        while end < conv.len()
            && dialect.is_assistant(&conv[end]) == assistant
            && (dialect.api() == Api::OpenAiResponses || !assistant)
        {
            end += 1;
        }
        if assistant {
            if !pending.is_empty() {
                out.extend(dialect.result_entries(&std::mem::take(&mut pending), &[]));
            }
            let group = &conv[i..end];
            match recorded_turn(dialect, session, group, link_before(links, i)) {
                Some(rec) => {
                    let mut prelude = rec.prelude.clone();
                    let mut last = rec.last.clone();
                    if dialect.api() == Api::Anthropic {
                        // A turn recorded with a call the model never finished holds it with
                        // `{}` as its input; one recorded before that holds its text, which
                        // the API refuses.
                        prelude
                            .iter_mut()
                            .chain(&mut last)
                            .for_each(crate::api::anthropic::object_inputs);
                    }
                    out.extend(prelude);
                    carry_cache_mark(dialect, group, &mut last);
                    out.extend(last);
                    pending = rec.pending.clone();
                }
                None => {
                    for e in group {
                        let mut e = e.clone();
                        for c in dialect.calls(&e) {
                            if frozen_names.contains(&c.name) {
                                continue;
                            }
                            if let Some(t) = shelf.by_client_name(&c.name) {
                                let mut input = Map::new();
                                input.insert(
                                    "tool_name".into(),
                                    shelf.catalog.tools()[t].name.clone().into(),
                                );
                                input.insert("params".into(), Value::Object(c.input.clone()));
                                dialect.rewrite_call(&mut e, &c.id, DEFER_EXECUTE, &input);
                            }
                        }
                        out.push(e);
                    }
                }
            }
        } else {
            let mut run: Vec<Value> = Vec::with_capacity(end - i + 1);
            for (j, e) in conv[i..end].iter().enumerate() {
                let mut e = e.clone();
                let extra = match links.get(i + j).and_then(|l| session.injected.get(l)) {
                    Some(inj) => dialect.inject_after(&mut e, &inj.blocks),
                    None => Vec::new(),
                };
                run.push(e);
                run.extend(extra);
            }
            dialect.prepend_results(&mut run, &std::mem::take(&mut pending));
            out.extend(run);
        }
        i = end;
    }
    // A conversation that ends with a recorded turn (the client continuing it) still gets the
    // results the proxy owes that turn's calls: every API refuses a call left unanswered.
    out.extend(dialect.result_entries(&pending, &[]));
    out
}

/// The key of the client's last entry (the last of its [`chains`] `links`), with a Responses
/// chain's `previous_response_id` (a chained request holds only its new entries); `None` for an
/// empty conversation.
fn last_entry_key(body: &Map<String, Value>, links: &[String]) -> Option<String> {
    let last = links.last()?;
    Some(
        match body.get("previous_response_id").and_then(Value::as_str) {
            Some(previous) => digest(&[previous, last]),
            None => last.clone(),
        },
    )
}

/// Fingerprints of an upstream body.
pub fn prefix_print(dialect: Dialect, body: &Map<String, Value>) -> PrefixPrint {
    let key = dialect.api().conversation_key();
    // What `toolshelf prefix-check` compares before the conversation: the settings that choose
    // the cache, then the fixed parts.
    let head: Vec<String> = dialect
        .api()
        .cache_settings()
        .iter()
        .chain(&["system", "instructions", "tools"])
        .filter_map(|k| body.get(*k).map(|v| format!("{k}={v}")))
        .collect();
    let entries = match body.get(key) {
        Some(Value::Array(a)) => a.iter().map(fingerprint).collect(),
        _ => Vec::new(),
    };
    let head_refs: Vec<&str> = head.iter().map(String::as_str).collect();
    PrefixPrint {
        head: digest(&head_refs),
        entries,
    }
}

/// The loop's state for one request.
#[derive(Debug)]
pub struct Turn {
    /// The request.
    pub prepared: Prepared,
    /// Upstream entries added by the rounds the proxy answered.
    prelude: Vec<Value>,
    /// Rounds sent.
    pub rounds: u32,
    /// What the client receives.
    pub client: ClientTurn,
    /// Calls refused in this request.
    pub refused: u64,
    /// Searches answered in this request.
    pub searches: u64,
    /// Whether the upstream prefix continued the previous request's.
    pub prefix: Prefix,
    /// Text the proxy added to the client's message (not streamed by the upstream).
    pub note: Option<String>,
    /// How long each search of this request took, in microseconds.
    pub search_us: Vec<u64>,
    /// Tools activated in this request (their schema was shown), each once, in the order first
    /// activated.
    pub activated: Vec<String>,
    /// The queries searched for in this request.
    pub queries: Vec<String>,
    /// What became of the call being decided, for its audit record (set where it is decided).
    fate: Option<Fate>,
}

/// What became of a call, for its audit record: set where the call is decided, read by
/// [`Turn::audit`], which writes exactly one record per call of a round.
#[derive(Debug)]
enum Fate {
    /// A `tool_search` answered: its record, written as it is.
    Searched(Box<toolshelf_core::audit::AuditRecord>),
    /// Refused before it ran: the outcome (a [`RefusalKind`] label, or `incomplete` for a call
    /// the response cut off) and the tool it resolved to, if any.
    Refused {
        outcome: &'static str,
        tool: Option<String>,
    },
    /// Run by the proxy: `ok`, `tool_error` (the result reports an error) or `error` (it could
    /// not be run), and what a hook did to the result.
    Ran {
        tool: String,
        server: Option<String>,
        /// The params the tool got (a `pre_call` hook's, when one rewrote them).
        params: Map<String, Value>,
        outcome: &'static str,
        changed: Option<crate::results::Changed>,
    },
    /// Handed to the client, which runs it (or declines to): the tool's canonical name, or the
    /// client's for a tool passed along as sent.
    Handed { tool: String },
}

/// What becomes of a call of its own kind ([`Part::Own`]).
#[derive(Debug)]
enum OwnOutcome {
    /// The client gets it: the call and its item, as the client receives them.
    Handed(Call, Value),
    /// The model is answered.
    Answered(ProxyResult),
}

/// How a request's upstream prefix relates to its session's previous request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefix {
    /// The session's first request.
    First,
    /// The previous request's prefix is a byte prefix of this one's.
    Kept,
    /// It is not: the provider's prompt cache misses from where they differ.
    Broken,
    /// The session store failed to answer, so the previous request is not known.
    Unknown,
    /// No session was found, though the conversation has earlier turns (the model answered in
    /// it before): its session expired, was evicted, or the store lost it, so the previous
    /// request is not known, and the activations and frozen surface of the conversation went
    /// with it.
    Missing,
}

impl Prefix {
    /// The word for logs and the dashboard.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::First => "first",
            Self::Kept => "kept",
            Self::Broken => "broken",
            Self::Unknown => "unknown",
            Self::Missing => "missing",
        }
    }
}

/// Whether `body` continues a conversation the model already answered in: it holds an
/// assistant message or a call's result, or (Responses) is chained to an earlier response.
fn continues(body: &Map<String, Value>, dialect: Dialect) -> bool {
    body.contains_key("previous_response_id")
        || body
            .get(dialect.api().conversation_key())
            .and_then(Value::as_array)
            .is_some_and(|items| {
                items.iter().any(|m| {
                    matches!(
                        m.get("role").and_then(Value::as_str),
                        Some("assistant" | "tool")
                    ) || matches!(
                        m.get("type").and_then(Value::as_str),
                        Some("function_call" | "function_call_output")
                    )
                })
            })
}

/// The item that answers a refusal of a call of its own kind made by `item` (a Responses
/// `custom_tool_call_output`, ...); `None`: a function call's, or Chat's `tool` message.
fn own_answer_kind(dialect: Dialect, item: &Value) -> Option<String> {
    (dialect.api() == Api::OpenAiResponses)
        .then(|| crate::api::responses::answer_kind(item).map(str::to_owned))
        .flatten()
}

/// What the loop does after a round.
#[derive(Debug, PartialEq)]
pub enum Next {
    /// Send the next round.
    Continue,
    /// Answer the client; these calls are the client's to run.
    Done(Vec<Call>),
}

impl Turn {
    /// Starts the loop for `prepared`.
    pub fn new(prepared: Prepared) -> Self {
        Self {
            prepared,
            prelude: Vec::new(),
            rounds: 0,
            client: ClientTurn::default(),
            refused: 0,
            searches: 0,
            prefix: Prefix::First,
            note: None,
            search_us: Vec::new(),
            activated: Vec::new(),
            queries: Vec::new(),
            fate: None,
        }
    }

    /// Records `name` as activated in this request, once: a tool two searches of one request
    /// show (or a search shows and a refusal shows again) is one activation.
    fn note_activated(&mut self, name: &str) {
        if !self.activated.iter().any(|a| a == name) {
            self.activated.push(name.to_owned());
        }
    }

    /// Checks the first round's body against the previous request's and remembers it. A
    /// Responses request chained by `previous_response_id` sends only its new items, and the
    /// provider keeps the rest: its conversation is not compared, only its head.
    pub fn check_prefix(&mut self) {
        let print = prefix_print(self.prepared.dialect, &self.prepared.body);
        let chained = self.prepared.body.contains_key("previous_response_id");
        let s = &mut self.prepared.session;
        self.prefix = match &s.last_prefix {
            // The store did not answer: the previous request's prefix is not known.
            _ if self.prepared.store_failed => Prefix::Unknown,
            None if continues(&self.prepared.body, self.prepared.dialect) => Prefix::Missing,
            None => Prefix::First,
            Some(p) if chained && p.head == print.head => Prefix::Kept,
            Some(p) if !chained && p.continued_by(&print) => Prefix::Kept,
            Some(_) => Prefix::Broken,
        };
        if self.prefix == Prefix::Broken {
            s.figures.prefix_breaks += 1;
        }
        s.last_prefix = Some(print);
    }

    /// Takes one upstream round: answers what the proxy answers and says what comes next.
    ///
    /// A round that ended early (the output limit, see `ended_early`) is the request's last:
    /// the client gets it as the model left it, with its stop reason, as it would without the
    /// proxy, and what the proxy answered in it opens the next request.
    pub async fn round(&mut self, proxy: &Proxy, mut round: Round) -> Next {
        self.rounds += 1;
        if self.client.envelope.is_empty() {
            self.client.envelope = round.envelope.clone();
        }
        self.client.last.clone_from(&round.envelope);
        if let Some(u) = &round.usage {
            match &mut self.client.usage {
                Some(total) => add_usage(total, u),
                None => self.client.usage = Some(u.clone()),
            }
        }
        let dialect = self.prepared.dialect;
        let early = ended_early(dialect, round.stop.as_deref());
        // The output limit cuts off the call being written: the round's last part, when it is a
        // call.
        let cut = match round.parts.last() {
            Some(Part::Call(c)) if early => Some(c.id.clone()),
            _ => None,
        };
        let stop = round.stop.clone().unwrap_or_default();
        let mut answered: Vec<ProxyResult> = Vec::new();
        let mut client_calls: Vec<Call> = Vec::new();
        for part in &round.parts {
            let (Part::Call(c) | Part::Own(c, _)) = part else {
                if let Part::Raw(v) = part {
                    self.client.parts.push(Part::Raw(v.clone()));
                }
                continue;
            };
            self.fate = None;
            // A required audit log that cannot be written lets no call run or reach the client.
            if c.name != TOOL_SEARCH
                && let Err(error) = proxy.audit.ready()
            {
                let kind = match part {
                    Part::Own(_, item) => own_answer_kind(dialect, item),
                    _ => None,
                };
                let result = self.refuse_unrecorded(c, &error, kind);
                let _ = self.audit(proxy, c, Err(&result));
                answered.push(result);
                continue;
            }
            let decided = match part {
                Part::Own(c, item) => match self.own_call(proxy, c, item).await {
                    OwnOutcome::Handed(call, item) => {
                        if let Err(why) = self.audit(proxy, c, Ok(&call)) {
                            let kind = own_answer_kind(dialect, &item);
                            if let Some(refused) = self.unrecorded(proxy, c, &why, kind) {
                                answered.push(refused);
                                continue;
                            }
                        }
                        self.client.parts.push(Part::Own(call.clone(), item));
                        client_calls.push(call);
                        continue;
                    }
                    OwnOutcome::Answered(result) => Err(result),
                },
                _ if cut.as_ref() == Some(&c.id) => {
                    self.cut_call(proxy, c, &stop, &mut round.entries).await
                }
                _ => self.call(proxy, c).await,
            };
            let recorded = self.audit(proxy, c, decided.as_ref());
            // A call whose record was lost does not reach the client while the log is required.
            let decided = match recorded {
                Err(why) if decided.is_ok() => match self.unrecorded(proxy, c, &why, None) {
                    Some(refused) => Err(refused),
                    None => decided,
                },
                _ => decided,
            };
            match decided {
                Ok(call) => {
                    self.client.parts.push(Part::Call(call.clone()));
                    client_calls.push(call);
                }
                Err(result) => answered.push(result),
            }
        }
        let max = proxy.compiled.config().proxy.max_search_rounds;
        // At most `max` upstream rounds: the last one's answers wait for the next request.
        if !early && client_calls.is_empty() && !answered.is_empty() && self.rounds < max {
            let results = dialect.result_entries(&answered, &[]);
            let conv = self
                .prepared
                .body
                .entry(dialect.api().conversation_key())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(c) = conv {
                c.extend(round.entries.iter().cloned());
                c.extend(results.iter().cloned());
            }
            self.prelude.extend(round.entries);
            self.prelude.extend(results);
            return Next::Continue;
        }
        self.client.stop =
            stop_for_client(dialect, round.stop.as_deref(), !client_calls.is_empty());
        // The rounds ran out with calls only the proxy answers: the client is told, after
        // whatever the model wrote.
        if !early && !answered.is_empty() && client_calls.is_empty() {
            let note = limit_note(dialect, max);
            self.note = Some(raw_text(&note));
            self.client.parts.push(Part::Raw(note));
        }
        let key = self.client_key();
        let shown = self.shown_print();
        let envelope_id = self
            .client
            .envelope
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let last_id = round
            .envelope
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let s = &mut self.prepared.session;
        s.recorded.insert(
            key,
            Recorded {
                prelude: std::mem::take(&mut self.prelude),
                last: round.entries,
                pending: answered.clone(),
                shown: Some(shown),
            },
        );
        // A Responses client that chains by id sends the next request without this turn: what
        // the upstream continues from, and the results it is still owed, are found by the id the
        // client was shown.
        if dialect.api() == Api::OpenAiResponses
            && let (Some(first), Some(last)) = (envelope_id, last_id)
            && (first != last || !answered.is_empty())
        {
            s.recorded.insert(
                format!("response:{first}"),
                Recorded {
                    prelude: Vec::new(),
                    last: vec![Value::String(last)],
                    pending: answered,
                    shown: None,
                },
            );
        }
        Next::Done(client_calls)
    }

    /// The [`turn_print`] of the turn the client receives, its calls as the client's copy will
    /// read: in the OpenAI formats a call the model left unfinished carries the text it wrote,
    /// which reads back as no arguments.
    fn shown_print(&self) -> String {
        let dialect = self.prepared.dialect;
        let mut text = String::new();
        let mut calls = Vec::new();
        for p in &self.client.parts {
            match p {
                Part::Raw(v) => text.push_str(&dialect.part_text(v)),
                Part::Call(c) if c.raw_input.is_some() && dialect.api() != Api::Anthropic => {
                    calls.push(Call {
                        input: Map::new(),
                        ..c.clone()
                    });
                }
                Part::Call(c) | Part::Own(c, _) => calls.push(c.clone()),
            }
        }
        turn_print(&text, &calls)
    }

    /// The key the client's copy of this turn will be found by.
    fn client_key(&self) -> String {
        for p in &self.client.parts {
            if let Part::Call(c) | Part::Own(c, _) = p {
                return format!("call:{}", c.id);
            }
        }
        let mut text = String::new();
        for p in &self.client.parts {
            if let Part::Raw(v) = p {
                text.push_str(&raw_text(v));
            }
        }
        text_key(&self.prepared.chain_end, &text)
    }

    /// Decides the call a round that ended early (`stop`) cut off. One the client cannot run (a
    /// meta-tool, a tool the proxy runs itself) is not run: its result, in the next request,
    /// tells the model so, and the log says it was dropped. Any other is decided as a whole call
    /// would be, on its arguments as far as the model wrote them ([`arguments_so_far`]), which
    /// the client gets (in the OpenAI formats, the text as the model wrote it, unless a hook
    /// rewrote the params). In an Anthropic turn (`entries`) the call carries those arguments
    /// too: the API wants an object there.
    async fn cut_call(
        &mut self,
        proxy: &Proxy,
        c: &Call,
        stop: &str,
        entries: &mut [Value],
    ) -> Result<Call, ProxyResult> {
        let dialect = self.prepared.dialect;
        let input = match &c.raw_input {
            Some(raw) => arguments_so_far(raw),
            None => c.input.clone(),
        };
        if dialect.api() == Api::Anthropic && c.raw_input.is_some() {
            for e in entries.iter_mut() {
                dialect.rewrite_call(e, &c.id, &c.name, &input);
            }
        }
        let shelf = self.prepared.shelf.clone();
        let runs_here = c.name == TOOL_SEARCH
            || c.name == DEFER_EXECUTE
            || shelf
                .by_client_name(&c.name)
                .is_some_and(|i| shelf.own(i).is_some());
        if runs_here {
            let tool = toolshelf_core::echo::for_log(&c.name, toolshelf_core::echo::ECHO_CHARS);
            tracing::info!(
                session = %crate::shown_key(&self.prepared.key),
                tool = %tool,
                stop = %stop,
                "a call cut off before it was complete was dropped: not run, not handed to the client"
            );
            self.fate = Some(Fate::Refused {
                outcome: "incomplete",
                tool: None,
            });
            return Err(ProxyResult {
                id: c.id.clone(),
                text: format!(
                    "{tool} was not run: the response ended ({stop}) before this call was complete."
                ),
                is_error: true,
                kind: None,
            });
        }
        let so_far = Call {
            input: input.clone(),
            raw_input: None,
            ..c.clone()
        };
        let mut call = self.call(proxy, &so_far).await?;
        if call.input == input {
            call.raw_input.clone_from(&c.raw_input);
        }
        Ok(call)
    }

    /// Decides one call: `Ok` with the call the client runs, or `Err` with the proxy's answer.
    async fn call(&mut self, proxy: &Proxy, c: &Call) -> Result<Call, ProxyResult> {
        let answer = |text: String, is_error: bool| ProxyResult {
            id: c.id.clone(),
            text,
            is_error,
            kind: None,
        };
        if c.name == TOOL_SEARCH {
            self.searches += 1;
            self.prepared.session.figures.searches += 1;
            let started = std::time::Instant::now();
            let (mut text, mut is_error, mut loaded, outcome) = self.search(proxy, c);
            let mut record = self.record(AuditKind::Search);
            record.set_params(&c.input);
            // Arguments that are no JSON object are kept as written.
            if let Some(raw) = &c.raw_input {
                record.detail = Some(format!("arguments: {}", toolshelf_core::echo::echo(raw)));
            }
            record.outcome = Some(outcome.into());
            let hooks = proxy.compiled.hooks().of(HookEventKind::PostSearch);
            if !hooks.is_empty() {
                let mut event = HookEvent::new(HookEventKind::PostSearch, &self.prepared.key);
                event.search = Some(Value::Object(c.input.clone()));
                event.loaded = Some(loaded.clone());
                let mut failures = Vec::new();
                let ((t, e), changed) =
                    crate::results::after_search(hooks, event, (text, is_error), &mut failures)
                        .await;
                self.hooks_failed(proxy, &failures, None);
                (text, is_error) = (t, e);
                if let Some(changed) = changed {
                    changed.record(&mut record);
                    if matches!(changed, crate::results::Changed::Withheld(_)) {
                        loaded.clear();
                    }
                }
            }
            let shelf = &self.prepared.shelf;
            record.loaded = Some(
                loaded
                    .iter()
                    .filter_map(|n| match shelf.catalog.resolve_exact(n) {
                        Resolution::Exact(i) => Some(AuditHit::of(&shelf.catalog.tools()[i])),
                        _ => None,
                    })
                    .collect(),
            );
            self.fate = Some(Fate::Searched(Box::new(record)));
            for name in &loaded {
                self.note_activated(name);
            }
            self.prepared
                .session
                .state
                .activate(loaded.iter().map(String::as_str));
            self.search_us.push(started.elapsed().as_micros() as u64);
            if let Some(Value::Array(qs)) = c.input.get("queries") {
                self.queries
                    .extend(qs.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            if let Some(Value::Array(ns)) = c.input.get("tool_names") {
                self.queries
                    .extend(ns.iter().filter_map(Value::as_str).map(str::to_owned));
            }
            return Err(answer(text, is_error));
        }
        let shelf = self.prepared.shelf.clone();
        let (target, params, via_defer) = if c.name == DEFER_EXECUTE {
            if let Some(raw) = &c.raw_input {
                self.bad_arguments();
                return Err(answer(
                    format!(
                        "Invalid defer_execute call: the arguments are not a JSON object ({}).",
                        toolshelf_core::echo::echo(raw)
                    ),
                    true,
                ));
            }
            match DeferExecuteArgs::parse(&c.input) {
                Ok(a) => (a.tool_name, a.params, true),
                Err(text) => {
                    self.bad_arguments();
                    return Err(answer(text, true));
                }
            }
        } else {
            match shelf.by_client_name(&c.name) {
                // Arguments that are not a JSON object (a complete call's; a cut one's come
                // here parsed as far as written) cannot be judged by the rules and hooks, and
                // no client could run them as the model meant: the model writes them again.
                Some(_) if c.raw_input.is_some() => {
                    self.bad_arguments();
                    return Err(answer(
                        format!(
                            "{} was not run: its arguments are not a JSON object ({}). Call it again with its arguments as one JSON object.",
                            toolshelf_core::echo::echo(&c.name),
                            toolshelf_core::echo::echo(c.raw_input.as_deref().unwrap_or_default())
                        ),
                        true,
                    ));
                }
                Some(i) => (
                    shelf.catalog.tools()[i].name.clone(),
                    c.input.clone(),
                    false,
                ),
                None => {
                    // In the model's list, which cannot change, but no longer the client's: a
                    // resident client tool, or a tool passed along as sent (Anthropic's `bash`).
                    // One the client still sends under that name, as another kind of tool, is
                    // not gone: the call is judged as a call of the tool it is now.
                    let sent = shelf.passed.position(&c.name).is_some();
                    let frozen = self.prepared.frozen_names.contains(&c.name)
                        || self
                            .prepared
                            .frozen_passed
                            .iter()
                            .any(|(n, _)| *n == c.name);
                    if frozen && !sent {
                        let kind = RefusalKind::Gone;
                        self.count_refusal(&c.name, kind);
                        crate::metrics::refused(kind.as_str());
                        return Err(answer(invoke::client_gone_text(&c.name), true));
                    }
                    if let Some(text) = self.authored_off(proxy, &c.name) {
                        return Err(answer(text, true));
                    }
                    // A tool whose calls are of their own kind (a custom tool, `local_shell`)
                    // is not called as a function: its rules read the call of its kind, and
                    // the client runs only that. (One the exposure hides is not in `passed_kind`:
                    // `admit_passed` refuses it as hidden.)
                    if let Some(Passed::OwnCalls(ty)) = shelf.passed_kind(&c.name) {
                        let text = own_kind_text(&c.name, ty);
                        let kind = RefusalKind::NotRunnable;
                        self.count_refusal(&c.name, kind);
                        crate::metrics::refused(kind.as_str());
                        return Err(answer(text, true));
                    }
                    // Not a client tool of ours: a tool passed along as sent meets the rules
                    // and hooks; any other name is the client's to judge.
                    return self.pass_along(proxy, &shelf, c.clone(), false).await;
                }
            }
        };
        if let Some(allowed) = &self.prepared.forced
            && via_defer
        {
            let picked = match shelf.catalog.resolve(&target) {
                Resolution::Exact(i) | Resolution::Bare(i) => Some(i),
                _ => None,
            };
            if !picked.is_some_and(|p| allowed.contains(&p)) {
                let allowed = allowed.clone();
                self.bad_arguments();
                for &i in &allowed {
                    let tool = &shelf.catalog.tools()[i];
                    self.prepared.session.state.activate([tool.name.as_str()]);
                    self.note_activated(&tool.name);
                }
                let (names, definitions) = allowed_text(&shelf, &allowed);
                return Err(answer(
                    format!(
                        "This turn's tool_choice allows defer_execute only with tool_name {names}. {}: {definitions}",
                        if allowed.len() == 1 {
                            "Its definition"
                        } else {
                            "Their definitions"
                        }
                    ),
                    true,
                ));
            }
        }
        // A tool passed along as sent is in the model's list as it is: through `defer_execute`,
        // one the client runs from ordinary calls is handed over like a direct call; any other
        // is the model's to call directly.
        if via_defer
            && matches!(shelf.catalog.resolve_exact(&target), Resolution::NotFound)
            && let Some(kind) = shelf.passed_kind(&target)
        {
            let what = match kind {
                Passed::Client => {
                    let call = Call {
                        id: c.id.clone(),
                        name: target,
                        input: params,
                        raw_input: None,
                    };
                    return self.pass_along(proxy, &shelf, call, true).await;
                }
                Passed::OwnCalls(ty) => {
                    format!("a tool of type {ty:?}, whose calls are of their own kind")
                }
                Passed::Provider(ty) => format!("a tool the provider runs (type {ty:?})"),
            };
            let kind = RefusalKind::NotRunnable;
            self.count_refusal(&target, kind);
            crate::metrics::refused(kind.as_str());
            return Err(answer(
                format!(
                    "{target:?} is not a deferred tool: it is {what}, in your tool list as it is. \
                     Call it directly, not through defer_execute."
                ),
                true,
            ));
        }
        // A resident client tool called directly: the model has its schema, and the provider
        // and the client judge the call against it.
        let resident = !via_defer
            && self.prepared.frozen_names.contains(&c.name)
            && shelf
                .by_client_name(&c.name)
                .is_some_and(|i| shelf.own(i).is_none());
        match self
            .admit(proxy, &shelf, &target, params, via_defer, resident)
            .await
        {
            Ok((i, params)) => {
                if let Some(own) = shelf.own(i) {
                    let tool = &shelf.catalog.tools()[i];
                    let mut event = HookEvent::new(HookEventKind::PostCall, &self.prepared.key);
                    event.tool = Some(tool.name.clone());
                    event.server = tool.original_server.clone();
                    event.original_tool = Some(tool.original_name.clone());
                    event.via_defer_execute = Some(via_defer);
                    event.params = Some(params.clone());
                    let outcome = self.run_own(proxy, &shelf, i, own, params.clone()).await;
                    // A tool that could not be run at all was not called; one that ran and
                    // reported an error was.
                    let ran = outcome.is_ok();
                    if ran {
                        crate::metrics::ran();
                        self.prepared.session.state.record_call(&tool.name);
                    }
                    let mut failures = Vec::new();
                    let ((mut text, is_error), changed) = crate::results::after_call(
                        proxy.compiled.hooks(),
                        tool,
                        event,
                        outcome,
                        &mut failures,
                    )
                    .await;
                    self.hooks_failed(proxy, &failures, Some(&tool.name));
                    self.fate = Some(Fate::Ran {
                        tool: tool.name.clone(),
                        server: tool.original_server.clone(),
                        params: params.clone(),
                        outcome: match (ran, is_error) {
                            (false, _) => "error",
                            (true, true) => "tool_error",
                            (true, false) => "ok",
                        },
                        changed,
                    });
                    if ran {
                        for block in self.fired_by(proxy, &shelf, i, &params) {
                            text.push_str("\n\n");
                            text.push_str(&block);
                        }
                    }
                    return Err(answer(text, is_error));
                }
                // The client runs it, or declines to: it counts as called when its result comes
                // back (see `ran_by_client`).
                crate::metrics::forwarded();
                self.fate = Some(Fate::Handed {
                    tool: shelf.catalog.tools()[i].name.clone(),
                });
                Ok(Call {
                    id: c.id.clone(),
                    name: shelf.client_name(i).to_owned(),
                    input: params,
                    raw_input: None,
                })
            }
            Err(refusal) => {
                if refusal.kind() == RefusalKind::Unknown
                    && let Some(text) = self.authored_off(proxy, &target)
                {
                    return Err(answer(text, true));
                }
                // A deferred tool this session loaded or called that the client no longer
                // sends is gone, as a resident one is: the change notice said so, and "no tool
                // of that name" would contradict it.
                let state = &self.prepared.session.state;
                if via_defer
                    && refusal.kind() == RefusalKind::Unknown
                    && (state.activity(&target, u64::MAX) != Activity::Inactive
                        || state.last_called(&target).is_some())
                {
                    let kind = RefusalKind::Gone;
                    self.count_refusal(&target, kind);
                    crate::metrics::refused(kind.as_str());
                    return Err(answer(invoke::client_gone_text(&target), true));
                }
                self.count_refusal(&target, refusal.kind());
                if let Some(Fate::Refused { tool, .. }) = &mut self.fate {
                    *tool = refusal
                        .tool()
                        .map(|i| shelf.catalog.tools()[i].name.clone());
                }
                if let Some(i) = refusal.loads() {
                    let name = shelf.catalog.tools()[i].name.clone();
                    self.prepared.session.state.activate([name.as_str()]);
                    self.note_activated(&name);
                }
                if !via_defer && refusal.kind() == RefusalKind::Unknown {
                    crate::metrics::forwarded();
                    self.fate = Some(Fate::Handed {
                        tool: c.name.clone(),
                    });
                    return Ok(c.clone());
                }
                crate::metrics::refused(refusal.kind().as_str());
                let voice = invoke::Voice {
                    described: Some(&self.prepared.session.described),
                    ..invoke::Voice::default()
                };
                Err(answer(refusal.text_in(&shelf.catalog, &voice), true))
            }
        }
    }

    /// The blocks of the reminder rules that a call of catalog tool `i` with `params`, which the
    /// proxy ran, fires; they go on its result, which the model reads in the next round (or,
    /// when the rounds ran out, in the next request). Its rules count as fired in this request.
    fn fired_by(
        &mut self,
        proxy: &Proxy,
        shelf: &Shelf,
        i: usize,
        params: &Map<String, Value>,
    ) -> Vec<String> {
        let reminders = proxy.compiled.reminders();
        if reminders.is_empty() {
            return Vec::new();
        }
        let calls = [ReminderCall {
            tool: &shelf.catalog.tools()[i],
            params,
        }];
        let input = TurnInput {
            user_text: None,
            calls: &calls,
            searches: &[],
        };
        let eval = reminders.evaluate(&mut self.prepared.session.state, &input);
        self.prepared.fired.extend(
            eval.fired
                .iter()
                .map(|&r| reminders.rules()[r].config.id.clone()),
        );
        let searchable = self.prepared.frozen_names.contains(TOOL_SEARCH);
        eval.fired
            .iter()
            .map(|&r| reminders.block_in(r, searchable))
            .collect()
    }

    /// Counts a refused call of `tool` in the request and the session, and logs it.
    fn count_refusal(&mut self, tool: &str, kind: RefusalKind) {
        self.refused += 1;
        self.prepared.session.figures.refused += 1;
        self.fate = Some(Fate::Refused {
            outcome: kind.as_str(),
            tool: None,
        });
        tracing::info!(
            session = %crate::shown_key(&self.prepared.key),
            tool = %toolshelf_core::echo::for_log(tool, toolshelf_core::echo::ECHO_CHARS),
            outcome = kind.as_str(),
            "call refused"
        );
    }

    /// Counts a call refused for malformed arguments (of `defer_execute`, or not a JSON object).
    fn bad_arguments(&mut self) {
        let kind = RefusalKind::BadArguments;
        self.refused += 1;
        crate::metrics::refused(kind.as_str());
        self.fate = Some(Fate::Refused {
            outcome: kind.as_str(),
            tool: None,
        });
    }

    /// Records each hook that failed (its report), before the record of the search or call it
    /// ran for, as the gateway records them.
    fn hooks_failed(&self, proxy: &Proxy, failures: &[String], tool: Option<&str>) {
        for f in failures {
            let mut r = self.record(AuditKind::HookError);
            r.tool = tool.map(str::to_owned);
            r.detail = Some(f.clone());
            let _ = proxy.audit.append(&r);
        }
    }

    /// An audit record of this request's session.
    fn record(&self, kind: AuditKind) -> AuditRecord {
        let mut r = toolshelf_runtime::audit::Audit::record(kind);
        r.session = Some(crate::session_id(&self.prepared.key));
        r
    }

    /// Writes the audit record of call `c` of a round, decided as `decided` (`Ok`: the call
    /// handed to the client; `Err`: the proxy's answer), from the [`Fate`] its decision set.
    /// `Err` says why the record was lost.
    fn audit(
        &mut self,
        proxy: &Proxy,
        c: &Call,
        decided: Result<&Call, &ProxyResult>,
    ) -> Result<(), String> {
        let fate = self.fate.take();
        if let Some(Fate::Searched(record)) = fate {
            return proxy.audit.append(&record);
        }
        // The call as the model made it (arguments cut off or not an object: as far as they
        // read); through `defer_execute`, its target and params as far as it gave them.
        let input = match &c.raw_input {
            Some(raw) => arguments_so_far(raw),
            None => c.input.clone(),
        };
        let (requested, via, params) = if c.name == DEFER_EXECUTE {
            let target = input.get("tool_name").and_then(Value::as_str);
            let params = match input.get("params") {
                Some(Value::Object(p)) if target.is_some() => p.clone(),
                _ => input.clone(),
            };
            (
                target.unwrap_or(DEFER_EXECUTE).to_owned(),
                Via::DeferExecute,
                params,
            )
        } else {
            (c.name.clone(), Via::Direct, input)
        };
        let shelf = &self.prepared.shelf;
        let server_of = |name: &str| match shelf.catalog.resolve_exact(name) {
            Resolution::Exact(i) => shelf.catalog.tools()[i].original_server.clone(),
            _ => None,
        };
        let mut r;
        match (fate, decided) {
            (Some(Fate::Handed { tool }), Ok(call)) => {
                r = self.record(AuditKind::Call);
                r.server = server_of(&tool);
                r.tool = Some(tool);
                r.set_params(&call.input);
                if call.input != params {
                    r.set_rewritten_from(&params);
                }
                r.outcome = Some("handed".into());
            }
            (
                Some(Fate::Ran {
                    tool,
                    server,
                    params: got,
                    outcome,
                    changed,
                }),
                Err(answer),
            ) => {
                r = self.record(AuditKind::Call);
                r.tool = Some(tool);
                r.server = server;
                r.set_params(&got);
                if got != params {
                    r.set_rewritten_from(&params);
                }
                r.outcome = Some(outcome.into());
                if outcome == "error" {
                    r.detail = Some(toolshelf_core::echo::echo(&answer.text));
                }
                if let Some(changed) = changed {
                    changed.record(&mut r);
                }
            }
            (fate, decided) => {
                let (outcome, tool) = match fate {
                    Some(Fate::Refused { outcome, tool }) => (outcome, tool),
                    other => {
                        debug_assert!(false, "a call decided without its fate: {other:?}");
                        ("refused", None)
                    }
                };
                r = self.record(if outcome == RefusalKind::Hidden.as_str() {
                    AuditKind::Hidden
                } else {
                    AuditKind::Refused
                });
                // A refusal that did not resolve the name still names the tool the name is,
                // of the catalog or passed along as sent.
                let tool = tool.or_else(|| match shelf.catalog.resolve_exact(&requested) {
                    Resolution::Exact(i) => Some(shelf.catalog.tools()[i].name.clone()),
                    _ => shelf
                        .passed
                        .position(&requested)
                        .map(|i| shelf.passed.tools()[i].name.clone()),
                });
                r.server = tool.as_deref().and_then(server_of);
                r.tool = tool;
                r.set_params(&params);
                r.outcome = Some(outcome.into());
                if let Err(answer) = decided {
                    r.detail = Some(toolshelf_core::echo::echo(&answer.text));
                }
            }
        }
        r.requested = Some(toolshelf_core::echo::echo(&requested));
        r.via = Some(via);
        proxy.audit.append(&r).inspect_err(|e| {
            tracing::warn!(
                session = %crate::shown_key(&self.prepared.key),
                "a call's audit record was lost: {e}"
            );
        })
    }

    /// The refusal of call `c`, about to be handed to the client, whose audit record could not
    /// be written (`why`) while the log is required: it does not reach the client. `None` when
    /// the log is not required.
    fn unrecorded(
        &mut self,
        proxy: &Proxy,
        c: &Call,
        why: &str,
        kind: Option<String>,
    ) -> Option<ProxyResult> {
        proxy
            .audit
            .is_required()
            .then(|| self.refuse_unrecorded(c, why, kind))
    }

    /// The refusal of call `c` because the audit log cannot be written (`why`), counted; the
    /// answer is of `kind` (see [`own_answer_kind`]). Through `defer_execute`, it names the tool
    /// the call names.
    fn refuse_unrecorded(&mut self, c: &Call, why: &str, kind: Option<String>) -> ProxyResult {
        let name = match DeferExecuteArgs::parse(&c.input) {
            Ok(a) if c.name == DEFER_EXECUTE => a.tool_name,
            _ => c.name.clone(),
        };
        let refusal = RefusalKind::AuditUnavailable;
        self.count_refusal(&name, refusal);
        crate::metrics::refused(refusal.as_str());
        ProxyResult {
            id: c.id.clone(),
            text: invoke::audit_unavailable_text(&toolshelf_core::echo::echo(&name), why),
            is_error: true,
            kind,
        }
    }

    /// The refusal of a call of `name`, a tool the session's model wrote, when this proxy does
    /// not run model-written tools (it is in no catalog here); counted.
    fn authored_off(&mut self, proxy: &Proxy, name: &str) -> Option<String> {
        if proxy.authoring()
            || !self
                .prepared
                .session
                .authored
                .iter()
                .any(|t| t.name() == name)
        {
            return None;
        }
        let kind = RefusalKind::NotRunnable;
        self.count_refusal(name, kind);
        crate::metrics::refused(kind.as_str());
        Some(format!(
            "{name:?} is a tool the model wrote in this session, but model-written tools are turned off on this proxy ([authoring] enabled = false): it cannot be searched or run here."
        ))
    }

    /// Runs one of the proxy's own tools, which passed the same stages as a client tool: the
    /// text the model reads and whether it reports a failure, or why it could not be run.
    async fn run_own(
        &mut self,
        proxy: &Proxy,
        shelf: &Arc<Shelf>,
        i: usize,
        own: Own,
        params: Map<String, Value>,
    ) -> Result<(String, bool), String> {
        let Some(scripts) = proxy.scripts() else {
            return Err("this proxy runs no scripts".into());
        };
        let tool = &shelf.catalog.tools()[i];
        let ran = match own {
            Own::Script => {
                scripts
                    .call(&tool.original_name, Value::Object(params))
                    .await
            }
            Own::Authored => {
                let session = &self.prepared.session;
                match session
                    .authored
                    .iter()
                    .find(|t| t.name() == tool.original_name)
                {
                    Some(item) => {
                        scripts
                            .runner
                            .run_authored(item, Value::Object(params))
                            .await
                    }
                    None => return Err(format!("{:?} is not a tool of this session", tool.name)),
                }
            }
            Own::Define => return Ok(self.define(proxy, shelf, &scripts.runner, params).await),
        };
        // A script that failed or was stopped is a result reporting the error, as the
        // gateway's scripts server answers it.
        Ok(match ran {
            Ok(v) => (toolshelf_runtime::scripts::result_text(&v), false),
            Err(e) => (e, true),
        })
    }

    /// `tool_define`: checks the definition (its script's top level read in a runner, as a script
    /// tool's is), keeps it in the session and rebuilds this request's catalog with it, so the
    /// tool is searchable and callable in the next round. The frozen tool list is not touched;
    /// the next request's change notice announces the tool.
    async fn define(
        &mut self,
        proxy: &Proxy,
        shelf: &Arc<Shelf>,
        runner: &toolshelf_runtime::scripts::Runner,
        params: Map<String, Value>,
    ) -> (String, bool) {
        let session = &mut self.prepared.session;
        let limits = &proxy.compiled.config().authoring;
        // Checking compiles the schema the model wrote, which costs what the model chose: off
        // the async workers (and so does the catalog rebuilt with it, see `Proxy::shelf`).
        let (view, compiled, authored) = (
            shelf.clone(),
            proxy.compiled.clone(),
            session.authored.clone(),
        );
        let checked = toolshelf_runtime::off_workers(move || {
            authoring::check_redefinition(
                &params,
                &view.catalog,
                &view.exposure,
                &compiled,
                &authored,
            )
        });
        let (tool, replaces) = match checked.await {
            Ok(found) => found,
            Err(e) => return (e, true),
        };
        if let Err(e) = runner.check_authored(&tool).await {
            return (e, true);
        }
        let session = &mut self.prepared.session;
        let name = tool.name().to_owned();
        // A definition of a name the model gave a tool before replaces that tool in place.
        let before = session.authored.clone();
        match replaces {
            Some(k) => session.authored[k] = tool.clone(),
            None => session.authored.push(tool.clone()),
        }
        match proxy
            .shelf(
                self.prepared.dialect,
                &self.prepared.client_tools,
                &session.authored,
            )
            .await
        {
            Ok(next) => self.prepared.shelf = next,
            Err(e) => {
                session.authored = before;
                return (format!("tool_define: {e}"), true);
            }
        }
        toolshelf_runtime::scripts::keep_authored(
            limits,
            proxy.compiled.config().dir.as_deref(),
            &self.prepared.key,
            &tool,
        );
        // The model wrote the schema: the tool is loaded.
        session.state.activate([name.as_str()]);
        self.note_activated(&name);
        tracing::info!(session = %crate::shown_key(&self.prepared.key), tool = %name, redefined = replaces.is_some(), "model-authored tool defined");
        let mut text = authoring::defined_text(&name);
        if replaces.is_some() {
            text.insert_str(0, &format!("Replaced your earlier tool {name:?}. "));
        }
        (text, false)
    }

    /// The stages a call passes before the client sees it. The call of a `resident` client
    /// tool (one the model calls from its list, with the schema the provider has) is not
    /// checked against that schema: the provider and the client judge it. The permission rules
    /// and `pre_call` hooks apply to every call.
    async fn admit(
        &self,
        proxy: &Proxy,
        shelf: &Arc<Shelf>,
        requested: &str,
        params: Map<String, Value>,
        via_defer: bool,
        resident: bool,
    ) -> Result<(usize, Map<String, Value>), Refusal> {
        let i = invoke::resolve(&shelf.catalog, &shelf.exposure, requested)?;
        let tool = &shelf.catalog.tools()[i];
        let config = proxy.compiled.config();
        let state = &self.prepared.session.state;
        // The rules first: a denied call is refused before the model is sent to load the schema
        // or fix the params; an `ask` is judged once the params are valid.
        let verdict = invoke::authorize(&shelf.catalog, proxy.compiled.permissions(), i, &params)?;
        if !resident && (via_defer || shelf.state(i) == State::Deferred) {
            invoke::require_loaded(
                &shelf.exposure,
                i,
                config.execute.require_search,
                state.activity(&tool.name, config.session.activation_ttl_turns),
                state.turn(),
            )?;
        }
        // The schema may be the model's own (`tool_define`), as costly to compile and to check
        // against as it chose: both run off the async workers.
        let view = shelf.clone();
        let define = shelf.own(i) == Some(Own::Define);
        let (params, checked) = toolshelf_runtime::off_workers(move || {
            let validator = view.validator(i);
            let checked = if resident {
                Ok(validator)
            } else if define {
                authoring::validate(i, &validator, &params).map(|()| validator)
            } else {
                invoke::validate(i, &validator, &params).map(|()| validator)
            };
            (params, checked)
        })
        .await;
        let validator = checked?;
        // An `ask` rule is the client's to ask: its own permission prompt sees the real call. A
        // tool the proxy runs itself never reaches the client, so nobody could be asked: refused.
        if let (invoke::Authorization::Ask { because }, Some(_)) = (&verdict, shelf.own(i)) {
            invoke::approved(i, because, Err(invoke::AskRefusal::RunsInside))?;
        }
        let hooks = proxy.compiled.hooks().of(HookEventKind::PreCall);
        if hooks.iter().any(|h| h.applies_to(Some(tool))) {
            let mut event = HookEvent::new(HookEventKind::PreCall, &self.prepared.key);
            event.tool = Some(tool.name.clone());
            event.server = tool.original_server.clone();
            event.original_tool = Some(tool.original_name.clone());
            event.via_defer_execute = Some(via_defer);
            event.params = Some(params.clone());
            let pre = toolshelf_runtime::hooks::run(hooks, Some(tool), event).await;
            self.hooks_failed(proxy, &pre.failures, Some(&tool.name));
            let (denial, rewritten) = (pre.denial, pre.params);
            let rewritten = toolshelf_runtime::off_workers(move || {
                invoke::after_pre_call(i, &validator, denial, rewritten)
            })
            .await?;
            return Ok((i, rewritten.unwrap_or(params)));
        }
        Ok((i, params))
    }

    /// Decides a call of its own kind (`c`, as the rules read it, made by `item`): the permission
    /// rules and `pre_call` hooks of the client's tool it calls, as for every client tool. The
    /// tool is a custom tool by its name, a built-in (`local_shell`, `shell`, `apply_patch`,
    /// `computer`) by the client's tool of that type; a call with no such tool of the client's is
    /// refused (see [`Self::own_call_tool`]). One let through reaches the client as the model
    /// wrote it, or with the params a hook rewrote when they fit its shape (else it is refused).
    /// One refused is answered by an item of its kind (Responses `custom_tool_call_output`,
    /// `function_call_output` for `local_shell_call`, `shell_call_output`,
    /// `apply_patch_call_output` with status `failed`, `computer_call_output` with a blank
    /// screenshot and the refusal in a message after it; a Chat `tool` message).
    async fn own_call(&mut self, proxy: &Proxy, c: &Call, item: &Value) -> OwnOutcome {
        let dialect = self.prepared.dialect;
        let shelf = self.prepared.shelf.clone();
        let responses = dialect.api() == Api::OpenAiResponses;
        let custom =
            !responses || item.get("type").and_then(Value::as_str) == Some("custom_tool_call");
        let answer_kind = own_answer_kind(dialect, item);
        let refuse = |text: String| {
            OwnOutcome::Answered(ProxyResult {
                id: c.id.clone(),
                text,
                is_error: true,
                kind: answer_kind.clone(),
            })
        };
        let tool = match self.own_call_tool(&shelf, c, custom) {
            Ok(tool) => tool,
            Err((kind, text)) => {
                self.count_refusal(&c.name, kind);
                crate::metrics::refused(kind.as_str());
                return refuse(text);
            }
        };
        if let Some(raw) = &c.raw_input {
            let kind = RefusalKind::BadArguments;
            self.count_refusal(&tool, kind);
            crate::metrics::refused(kind.as_str());
            return refuse(format!(
                "{} was not run: its arguments are not of the shape its calls take ({}).",
                toolshelf_core::echo::echo(&tool),
                toolshelf_core::echo::echo(raw)
            ));
        }
        let named = Call {
            name: tool.clone(),
            ..c.clone()
        };
        let admitted = match self.admit_passed(proxy, &shelf, &named, false).await {
            Ok(call) => call,
            Err((kind, text)) => {
                self.count_refusal(&tool, kind);
                crate::metrics::refused(kind.as_str());
                return refuse(text);
            }
        };
        self.fate = Some(Fate::Handed { tool: tool.clone() });
        if admitted.input == c.input {
            crate::metrics::forwarded();
            return OwnOutcome::Handed(c.clone(), item.clone());
        }
        let rewritten = match dialect.api() {
            Api::OpenAiResponses => crate::api::responses::with_params(item, &admitted.input),
            _ => crate::api::chat::with_params(item, &admitted.input),
        };
        match rewritten {
            Ok(item) => {
                crate::metrics::forwarded();
                let call = Call {
                    input: admitted.input,
                    ..c.clone()
                };
                OwnOutcome::Handed(call, item)
            }
            Err(why) => {
                // As for a function call whose rewritten params its schema rejects.
                let kind = RefusalKind::InvalidAfterHook;
                self.count_refusal(&tool, kind);
                crate::metrics::refused(kind.as_str());
                refuse(format!(
                    "{} was not run: a pre_call hook rewrote its params into a shape its call cannot take: {why}.",
                    toolshelf_core::echo::echo(&tool)
                ))
            }
        }
    }

    /// The name of the client's tool a call of its own kind (`c`) is of, among the tools passed
    /// along as sent: for a custom tool's call (`custom`) the custom tool of its name, for a
    /// built-in's the tool of the type its kind names (`c.name`: `local_shell`, `computer`).
    /// Without one the call is refused, never handed to a client that offered no tool of its
    /// kind: one the exposure hides (a deny rule names it, the mode leaves it out) as if the
    /// client had sent none, so that the answer does not tell it is there; as gone when the
    /// session's frozen list holds one and the client sends no tool of that name now; else with
    /// what the name is and how to call it.
    fn own_call_tool(
        &self,
        shelf: &Shelf,
        c: &Call,
        custom: bool,
    ) -> Result<String, (RefusalKind, String)> {
        let name = format!("{:?}", toolshelf_core::echo::echo(&c.name));
        let frozen = &self.prepared.frozen_passed;
        // Whether the client sends a tool named `n` now, of whatever kind: one it sends is not
        // gone, whatever the session's frozen list holds.
        let sends = |n: &str| shelf.passed_type(n).is_some() || shelf.by_client_name(n).is_some();
        if !custom {
            let unknown = format!(
                "This call was not run: no tool of type {name} was given. Call only the tools in your tool list."
            );
            let of_kind = shelf.own_call_tools(&c.name);
            if let Some(tool) = of_kind.iter().find(|t| !shelf.passed_hidden(t)) {
                return Ok((*tool).to_owned());
            }
            // One the exposure hides was not sent upstream: refused as if none was given, so
            // that the answer does not tell it is there.
            if !of_kind.is_empty() {
                return Err((RefusalKind::Hidden, unknown));
            }
            if let Some((gone, _)) = frozen
                .iter()
                .find(|(n, ty)| crate::shelf::type_is(ty, &c.name) && !sends(n))
            {
                return Err((RefusalKind::Gone, invoke::client_gone_text(gone)));
            }
            return Err((RefusalKind::Unknown, unknown));
        }
        let unknown = format!("{name} was not run: no custom tool of that name is available.");
        let passed = shelf.passed_type(&c.name);
        let client = shelf.by_client_name(&c.name);
        // A tool the exposure hides (a deny rule names it, the mode leaves it out) was not sent
        // upstream: its call reads what an unknown name's reads, whatever kind it is.
        if shelf.passed_hidden(&c.name) || client.is_some_and(|i| shelf.state(i) == State::Hidden) {
            return Err((RefusalKind::Hidden, unknown));
        }
        if passed == Some("custom") {
            return Ok(c.name.clone());
        }
        if !sends(&c.name) && frozen.iter().any(|(n, ty)| *n == c.name && ty == "custom") {
            return Err((RefusalKind::Gone, invoke::client_gone_text(&c.name)));
        }
        let text = match (passed, client) {
            (Some(ty), _) => format!(
                "{name} was not run: it is not a custom tool but the client's tool of type {ty:?}, whose calls are of that type."
            ),
            (None, Some(_)) if self.prepared.frozen_names.contains(&c.name) => format!(
                "{name} was not run: it is not a custom tool. Call it as a function with JSON arguments."
            ),
            (None, Some(_)) => format!(
                "{name} was not run: it is not a custom tool but a deferred function tool. Load it with tool_search and call it through defer_execute with JSON params."
            ),
            (None, None) => unknown,
        };
        Err((RefusalKind::Unknown, text))
    }

    /// A call of a tool that is not the catalog's (`via_defer`: one `defer_execute` names) after
    /// [`Self::admit_passed`]: the call the client gets, or the model's refusal.
    async fn pass_along(
        &mut self,
        proxy: &Proxy,
        shelf: &Arc<Shelf>,
        c: Call,
        via_defer: bool,
    ) -> Result<Call, ProxyResult> {
        match self.admit_passed(proxy, shelf, &c, via_defer).await {
            Ok(call) => {
                crate::metrics::forwarded();
                self.fate = Some(Fate::Handed {
                    tool: call.name.clone(),
                });
                Ok(call)
            }
            Err((kind, text)) => {
                self.count_refusal(&c.name, kind);
                crate::metrics::refused(kind.as_str());
                Err(ProxyResult {
                    id: c.id,
                    text,
                    is_error: true,
                    kind: None,
                })
            }
        }
    }

    /// The permission rules and `pre_call` hooks on a call of a tool passed along as sent
    /// (Anthropic's `bash`, a provider's tool): the call as it may go to the client, or the
    /// refusal's kind and text. A name that is no such tool goes on as it came.
    async fn admit_passed(
        &self,
        proxy: &Proxy,
        shelf: &Arc<Shelf>,
        c: &Call,
        via_defer: bool,
    ) -> Result<Call, (RefusalKind, String)> {
        let Some(i) = shelf.passed.position(&c.name) else {
            return Ok(c.clone());
        };
        let refused = |r: Refusal| (r.kind(), r.text(&shelf.passed));
        let tool = &shelf.passed.tools()[i];
        let params = c.input.clone();
        // One the active mode hides or a deny rule names was not sent upstream: its call is
        // refused as any hidden tool's is, before the rules, whose text would name it.
        invoke::resolve(&shelf.passed, &shelf.passed_exposure, &c.name).map_err(refused)?;
        // An `ask` rule is the client's to ask, as for every client tool.
        invoke::authorize(&shelf.passed, proxy.compiled.permissions(), i, &params)
            .map_err(refused)?;
        let hooks = proxy.compiled.hooks().of(HookEventKind::PreCall);
        if !hooks.iter().any(|h| h.applies_to(Some(tool))) {
            return Ok(c.clone());
        }
        let mut event = HookEvent::new(HookEventKind::PreCall, &self.prepared.key);
        event.tool = Some(tool.name.clone());
        event.original_tool = Some(tool.original_name.clone());
        event.via_defer_execute = Some(via_defer);
        event.params = Some(params.clone());
        let pre = toolshelf_runtime::hooks::run(hooks, Some(tool), event).await;
        self.hooks_failed(proxy, &pre.failures, Some(&tool.name));
        let (view, denial, rewritten) = (shelf.clone(), pre.denial, pre.params);
        let input = toolshelf_runtime::off_workers(move || {
            invoke::after_pre_call(i, &view.passed_validator(i), denial, rewritten)
        })
        .await
        .map_err(refused)?
        .unwrap_or(params);
        Ok(Call { input, ..c.clone() })
    }

    /// Answers a `tool_search` call: its text, whether it is an error, and the names of the
    /// tools it loads (which the caller activates, once the hooks let the answer through).
    fn search(&mut self, proxy: &Proxy, c: &Call) -> (String, bool, Vec<String>, &'static str) {
        let started = std::time::Instant::now();
        if let Some(raw) = &c.raw_input {
            crate::metrics::searched("invalid", started.elapsed());
            return (
                format!(
                    "Invalid tool_search call: the arguments are not a JSON object ({}). Example: {}",
                    toolshelf_core::echo::echo(raw),
                    toolshelf_core::search::REQUEST_EXAMPLE
                ),
                true,
                Vec::new(),
                "invalid",
            );
        }
        let request = match SearchRequest::from_json(&Value::Object(c.input.clone())) {
            Ok(r) => r,
            Err(text) => {
                crate::metrics::searched("invalid", started.elapsed());
                return (text, true, Vec::new(), "invalid");
            }
        };
        let shelf = self.prepared.shelf.clone();
        let config = proxy.compiled.config();
        let ttl = config.session.activation_ttl_turns;
        let held = self.prepared.session.state.active_names(ttl);
        let tools = shelf.catalog.tools();
        let described = &self.prepared.session.described;
        let run = std::panic::AssertUnwindSafe(|| {
            // A resident tool is in the upstream list with its schema, under the client's name.
            let view = SessionView {
                active: &|i| {
                    held.binary_search_by(|h| h.as_str().cmp(&tools[i].name))
                        .is_ok()
                },
                pinned: &|i| {
                    shelf
                        .surface
                        .resident
                        .binary_search(&i)
                        .is_ok()
                        .then(|| shelf.client_name(i).to_owned())
                },
                described,
            };
            search_for(
                &shelf.search,
                &shelf.catalog,
                &request,
                &config.search,
                &view,
            )
        });
        match std::panic::catch_unwind(run) {
            Ok(r) => {
                let outcome = match r.outcome {
                    toolshelf_core::search::render::Outcome::Found => "ok",
                    toolshelf_core::search::render::Outcome::NoMatch => "no_match",
                };
                crate::metrics::searched(outcome, started.elapsed());
                let names = r.loaded.iter().map(|&i| tools[i].name.clone()).collect();
                (r.text, false, names, outcome)
            }
            Err(_) => {
                crate::metrics::searched("engine_failure", started.elapsed());
                (
                    toolshelf_core::search::render::SearchResponse::engine_failure(
                        "internal error in the search engine",
                    )
                    .text,
                    true,
                    Vec::new(),
                    "engine_failure",
                )
            }
        }
    }
}

/// The text of a raw part (an Anthropic block, a Responses item, a Chat text part).
pub fn raw_text(v: &Value) -> String {
    if let Some(t) = v.get("text").and_then(Value::as_str) {
        return t.to_owned();
    }
    match v.get("content") {
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// The stop reason the client sees: a round that stopped for calls the proxy answered itself
/// ends the client's turn normally.
fn stop_for_client(dialect: Dialect, upstream: Option<&str>, client_calls: bool) -> Option<String> {
    let tool_stop = matches!(upstream, Some("tool_use" | "tool_calls"));
    if client_calls || !tool_stop {
        return upstream.map(str::to_owned);
    }
    Some(
        match dialect.api() {
            Api::Anthropic => "end_turn",
            Api::OpenAiChat => "stop",
            Api::OpenAiResponses => "completed",
        }
        .to_owned(),
    )
}

/// Whether a round ended before the model finished its answer: the output limit (Anthropic
/// `max_tokens`, or the context window filled; Chat `length`; a Responses response
/// `incomplete`). Its last call may be cut off mid-way.
fn ended_early(dialect: Dialect, stop: Option<&str>) -> bool {
    let Some(stop) = stop else {
        return false;
    };
    match dialect.api() {
        Api::Anthropic => matches!(stop, "max_tokens" | "model_context_window_exceeded"),
        Api::OpenAiChat => stop == "length",
        Api::OpenAiResponses => stop == "incomplete",
    }
}

/// The arguments a model's call stood for as far as it wrote them: JSON text cut off mid-way is
/// closed where it stops (an unfinished string value ends there, open arrays and objects are
/// closed), and a key, number or literal left unfinished is dropped with what it started. `{}`
/// when no object can be made of it.
fn arguments_so_far(raw: &str) -> Map<String, Value> {
    let object = |text: &str| match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    };
    let closers = |stack: &[(u8, bool)]| -> String {
        stack.iter().rev().map(|&(c, _)| char::from(c)).collect()
    };
    let bytes = raw.as_bytes();
    // Open containers: their closer, and for an object whether a key comes next.
    let mut stack: Vec<(u8, bool)> = Vec::new();
    let (mut in_string, mut escaped, mut key) = (false, false, false);
    // The last place where the text read so far, closed, is whole JSON.
    let mut safe: Option<(usize, String)> = None;
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
                match stack.last_mut() {
                    Some((b'}', next_key)) if key => *next_key = false,
                    _ => safe = Some((i + 1, closers(&stack))),
                }
            }
            continue;
        }
        match b {
            b'"' => {
                in_string = true;
                key = matches!(stack.last(), Some((b'}', true)));
            }
            b'{' | b'[' => {
                stack.push((if b == b'{' { b'}' } else { b']' }, b == b'{'));
                safe = Some((i + 1, closers(&stack)));
            }
            b'}' | b']' => {
                stack.pop();
                safe = Some((i + 1, closers(&stack)));
            }
            b',' => {
                safe = Some((i, closers(&stack)));
                if let Some((b'}', next_key)) = stack.last_mut() {
                    *next_key = true;
                }
            }
            _ => {}
        }
    }
    let whole = closers(&stack);
    if in_string && !key {
        // An unfinished string value ends where it stops; an escape it was in the middle of
        // goes.
        let mut end = raw.len();
        for _ in 0..12 {
            if let Some(m) = object(&format!("{}\"{whole}", &raw[..end])) {
                return m;
            }
            end = match raw[..end].char_indices().next_back() {
                Some((k, _)) => k,
                None => break,
            };
        }
    } else if !in_string && let Some(m) = object(&format!("{raw}{whole}")) {
        return m;
    }
    safe.and_then(|(end, closing)| object(&format!("{}{closing}", &raw[..end])))
        .unwrap_or_default()
}

/// The text a client sees when the model spent every round the request allows (`max`) on calls
/// the proxy answers itself, without an answer.
fn limit_note(dialect: Dialect, max: u32) -> Value {
    let rounds = match max {
        1 => "this request's one round".to_owned(),
        n => format!("all {n} rounds of this request"),
    };
    let text = format!(
        "[toolshelf: the model spent {rounds} on calls toolshelf answers itself (searches, \
         refused calls, tools toolshelf runs) and gave no answer; send another message to let it \
         continue]"
    );
    match dialect.api() {
        Api::OpenAiResponses => json!({"type": "message", "id": "msg_toolshelf_limit",
            "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}),
        _ => json!({"type": "text", "text": text}),
    }
}

/// The refusal of a function call of `name`, the client's tool of type `ty` whose calls are of
/// their own kind: what it is and how to call it.
fn own_kind_text(name: &str, ty: &str) -> String {
    let name = format!("{:?}", toolshelf_core::echo::echo(name));
    if ty == "custom" {
        return format!(
            "{name} was not run: it is a custom tool; call it with a custom tool call (free text input), not as a function."
        );
    }
    let kind = ["local_shell", "shell", "apply_patch", "computer"]
        .into_iter()
        .find(|base| crate::shelf::type_is(ty, base))
        .unwrap_or(ty);
    format!(
        "{name} was not run: it is the client's tool of type {ty:?}; call it with a {kind} call, not as a function."
    )
}

/// The session key header, re-exported for the server.
pub const HEADER: &str = SESSION_HEADER;

#[cfg(test)]
mod tests {
    use toolshelf_core::Config;

    use super::*;

    fn shelf(dialect: Dialect) -> Shelf {
        let compiled =
            toolshelf_core::Compiled::new(Config::default(), "test", None).expect("compiles");
        let tools = vec![
            json!({"name": "Read", "description": "Read a file.",
                   "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}),
            json!({"name": "mcp__fs__read_file", "description": "Read the contents of a file.",
                   "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}),
        ];
        Shelf::build(dialect, &tools, Default::default(), &compiled, None).expect("builds")
    }

    fn frozen(shelf: &Shelf, dialect: Dialect) -> HashSet<String> {
        shelf
            .upstream_tools
            .iter()
            .filter_map(|t| dialect.client_tool_name(t).map(str::to_owned))
            .collect()
    }

    fn conversation() -> Vec<Value> {
        vec![
            json!({"role": "user", "content": "read x"}),
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "t1", "name": "mcp__fs__read_file", "input": {"path": "x"}}]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "data"}]}),
        ]
    }

    #[test]
    fn a_handed_call_counts_as_run_when_its_result_is_back_and_not_flagged() {
        let d = Dialect(Api::Anthropic);
        let shelf = shelf(d);
        let session = ProxySession::default();
        let names = |shelf: &Shelf, ran: Vec<(usize, Map<String, Value>)>| -> Vec<String> {
            ran.iter()
                .map(|(i, p)| {
                    format!(
                        "{} {}",
                        shelf.catalog.tools()[*i].name,
                        Value::Object(p.clone())
                    )
                })
                .collect()
        };
        let mut conv = conversation();
        assert_eq!(
            names(&shelf, ran_by_client(d, &session, &shelf, &conv)),
            ["mcp__fs__read_file {\"path\":\"x\"}"]
        );
        // Declined by the client's user (or blocked by its hook): flagged, so not made.
        conv[2]["content"][0]["is_error"] = json!(true);
        assert!(ran_by_client(d, &session, &shelf, &conv).is_empty());
        // Without its result (the request that handed it over, resent): not yet.
        assert!(ran_by_client(d, &session, &shelf, &conv[..2]).is_empty());
        // A chained Responses request: the calls come from the turn's record, less the ones the
        // proxy answered itself.
        let r = Dialect(Api::OpenAiResponses);
        let compiled =
            toolshelf_core::Compiled::new(Config::default(), "test", None).expect("compiles");
        let tools: Vec<Value> = [("Read", "file_path"), ("mcp__fs__read_file", "path")]
            .iter()
            .map(|(name, param)| {
                json!({"type": "function", "name": name, "description": "Read a file.",
                       "parameters": {"type": "object", "properties": {*param: {"type": "string"}}}})
            })
            .collect();
        let shelf = Shelf::build(r, &tools, Default::default(), &compiled, None).expect("builds");
        let mut session = ProxySession::default();
        session.recorded.insert(
            "call:c1".into(),
            Recorded {
                prelude: Vec::new(),
                last: vec![
                    json!({"type": "function_call", "call_id": "c1", "name": "defer_execute",
                           "arguments": "{\"tool_name\":\"mcp__fs__read_file\",\"params\":{\"path\":\"y\"}}"}),
                    json!({"type": "function_call", "call_id": "c2", "name": "Read",
                           "arguments": "{\"file_path\":\"z\"}"}),
                    json!({"type": "function_call", "call_id": "s1", "name": "tool_search",
                           "arguments": "{\"queries\":[\"x\"]}"}),
                ],
                pending: vec![ProxyResult {
                    id: "s1".into(),
                    text: "hits".into(),
                    is_error: false,
                    kind: None,
                }],
                shown: None,
            },
        );
        let chained = [
            json!({"type": "function_call_output", "call_id": "c1", "output": "y data"}),
            json!({"type": "function_call_output", "call_id": "c2", "output": "z data"}),
        ];
        assert_eq!(
            names(&shelf, ran_by_client(r, &session, &shelf, &chained)),
            [
                "mcp__fs__read_file {\"path\":\"y\"}",
                "Read {\"file_path\":\"z\"}"
            ]
        );
    }

    #[test]
    fn without_a_record_a_deferred_call_reads_as_the_defer_execute_call_it_was() {
        let d = Dialect(Api::Anthropic);
        let shelf = shelf(d);
        let conv = conversation();
        let links = chains(&conv);
        let out = rewrite(
            d,
            &ProxySession::default(),
            &shelf,
            &frozen(&shelf, d),
            conv,
            &links,
        );
        assert_eq!(out.len(), 3);
        assert_eq!(
            out[1]["content"][1],
            json!({"type": "tool_use", "id": "t1", "name": "defer_execute",
                   "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "x"}}})
        );
        assert_eq!(out[0], conversation()[0], "other entries pass unchanged");
        assert_eq!(out[2], conversation()[2]);
    }

    #[test]
    fn a_recorded_turn_is_put_back_with_its_searches_and_pending_results() {
        let d = Dialect(Api::Anthropic);
        let shelf = shelf(d);
        let mut session = ProxySession::default();
        let search_call = json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "s1", "name": "tool_search", "input": {"query": "read"}}]});
        let search_result = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "s1", "content": [{"type": "text", "text": "hits"}]}]});
        let last = json!({"role": "assistant", "content": [
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "t1", "name": "defer_execute",
             "input": {"tool_name": "mcp__fs__read_file", "params": {"path": "x"}}},
            {"type": "tool_use", "id": "s2", "name": "tool_search", "input": {"query": "more"}}]});
        session.recorded.insert(
            "call:t1".into(),
            Recorded {
                prelude: vec![search_call.clone(), search_result.clone()],
                last: vec![last.clone()],
                pending: vec![ProxyResult {
                    id: "s2".into(),
                    text: "more hits".into(),
                    is_error: false,
                    kind: None,
                }],
                shown: None,
            },
        );
        let conv = conversation();
        let links = chains(&conv);
        let out = rewrite(d, &session, &shelf, &frozen(&shelf, d), conv, &links);
        assert_eq!(out.len(), 5, "{out:#?}");
        assert_eq!(out[1], search_call);
        assert_eq!(out[2], search_result);
        assert_eq!(out[3], last, "the model's own turn, byte for byte");
        let results = &out[4]["content"];
        assert_eq!(
            results[0]["tool_use_id"], "s2",
            "the proxy's pending result first"
        );
        assert_eq!(results[1]["tool_use_id"], "t1", "then the client's");
    }

    #[test]
    fn a_recorded_call_without_an_object_input_goes_back_with_one() {
        let d = Dialect(Api::Anthropic);
        let shelf = shelf(d);
        let mut session = ProxySession::default();
        let last = |input: Value| {
            json!({"role": "assistant", "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "t1", "name": "mcp__fs__read_file", "input": input}]})
        };
        session.recorded.insert(
            "call:t1".into(),
            Recorded {
                prelude: Vec::new(),
                last: vec![last(json!("{\"path\": \"x"))],
                pending: Vec::new(),
                shown: None,
            },
        );
        let conv = conversation();
        let links = chains(&conv);
        let out = rewrite(d, &session, &shelf, &frozen(&shelf, d), conv, &links);
        assert_eq!(out[1], last(json!({})), "{out:#?}");
    }

    #[test]
    fn injected_blocks_follow_only_the_entry_they_were_recorded_after() {
        let d = Dialect(Api::OpenAiChat);
        let shelf = shelf(d);
        let conv = vec![
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": "hello"}),
        ];
        let mut session = ProxySession::default();
        session.injected.insert(
            chains(&conv)[1].clone(),
            Injected {
                blocks: vec!["<system-reminder>x</system-reminder>".into()],
            },
        );
        let out = rewrite(
            d,
            &session,
            &shelf,
            &frozen(&shelf, d),
            conv.clone(),
            &chains(&conv),
        );
        assert_eq!(out.len(), 3);
        assert_eq!(
            out[2],
            json!({"role": "user", "content": "<system-reminder>x</system-reminder>"})
        );
        // The same index holding another message (the client edited its history): nothing.
        let mut edited = conv;
        edited[1] = json!({"role": "user", "content": "something else"});
        let links = chains(&edited);
        let out = rewrite(d, &session, &shelf, &frozen(&shelf, d), edited, &links);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn the_upstream_list_does_not_depend_on_the_clients_order() {
        let compiled =
            toolshelf_core::Compiled::new(Config::default(), "test", None).expect("compiles");
        let d = Dialect(Api::Anthropic);
        let mut tools: Vec<Value> = (0..6)
            .map(|i| {
                json!({"name": format!("t{i}"), "description": format!("tool {i}"),
                            "input_schema": {"type": "object"}})
            })
            .collect();
        let a = Shelf::build(d, &tools, Default::default(), &compiled, None).expect("builds");
        tools.reverse();
        let b = Shelf::build(d, &tools, Default::default(), &compiled, None).expect("builds");
        assert_eq!(
            Value::Array(a.upstream_tools.clone()).to_string(),
            Value::Array(b.upstream_tools.clone()).to_string()
        );
    }

    #[test]
    fn a_choice_that_forces_a_deferred_tool_forces_defer_execute_for_it() {
        let d = Dialect(Api::Anthropic);
        let shelf = shelf(d);
        let read = shelf
            .by_client_name("mcp__fs__read_file")
            .expect("a deferred tool");
        let frozen: HashSet<String> = ["Read".to_owned(), "tool_search".to_owned()].into();
        let mut c = json!({"type": "tool", "name": "mcp__fs__read_file", "disable_parallel_tool_use": true});
        assert_eq!(
            force_meta_choice(d, &mut c, &frozen, &shelf),
            Some(vec![read])
        );
        assert_eq!(
            c,
            json!({"type": "tool", "name": "defer_execute", "disable_parallel_tool_use": true})
        );
        let mut c = json!({"type": "tool", "name": "Read"});
        assert_eq!(force_meta_choice(d, &mut c, &frozen, &shelf), None);
        assert_eq!(
            c,
            json!({"type": "tool", "name": "Read"}),
            "a resident tool stays forced"
        );
        let mut c = json!({"type": "tool", "name": "no_such_tool"});
        assert_eq!(force_meta_choice(d, &mut c, &frozen, &shelf), None);
        assert_eq!(
            c,
            json!({"type": "tool", "name": "no_such_tool"}),
            "an unknown name is the upstream's to refuse"
        );
        let mut c = json!({"type": "function", "function": {"name": "mcp__fs__read_file"}});
        assert_eq!(
            force_meta_choice(Dialect(Api::OpenAiChat), &mut c, &frozen, &shelf),
            Some(vec![read])
        );
        assert_eq!(
            c,
            json!({"type": "function", "function": {"name": "defer_execute"}})
        );
        let mut c = json!({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
            {"type": "function", "function": {"name": "Read"}},
            {"type": "function", "function": {"name": "mcp__fs__read_file"}}]}});
        assert_eq!(
            force_meta_choice(Dialect(Api::OpenAiChat), &mut c, &frozen, &shelf),
            Some(vec![read])
        );
        assert_eq!(
            c,
            json!({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
                {"type": "function", "function": {"name": "Read"}},
                {"type": "function", "function": {"name": "tool_search"}},
                {"type": "function", "function": {"name": "defer_execute"}}]}})
        );
        let mut c = json!("auto");
        assert_eq!(
            force_meta_choice(Dialect(Api::OpenAiResponses), &mut c, &frozen, &shelf),
            None
        );
        assert_eq!(c, json!("auto"));
    }

    #[test]
    fn arguments_cut_off_read_as_far_as_they_got() {
        let so_far = |raw: &str| Value::Object(arguments_so_far(raw));
        assert_eq!(so_far(r#"{"path": "/etc/ho"#), json!({"path": "/etc/ho"}));
        assert_eq!(
            so_far(r#"{"a": 1, "b": [1, 2"#),
            json!({"a": 1, "b": [1, 2]})
        );
        assert_eq!(so_far(r#"{"a": {"b": true"#), json!({"a": {"b": true}}));
        assert_eq!(so_far(r#"{"a": 12"#), json!({"a": 12}));
        // What was left unfinished goes with what it started.
        assert_eq!(so_far(r#"{"a": "x", "b"#), json!({"a": "x"}));
        assert_eq!(so_far(r#"{"a": "x", "b""#), json!({"a": "x"}));
        assert_eq!(so_far(r#"{"a": "x", "b": "#), json!({"a": "x"}));
        assert_eq!(so_far(r#"{"a": "x", "b": tr"#), json!({"a": "x"}));
        assert_eq!(so_far(r#"{"a": 1, "b": {"c"#), json!({"a": 1, "b": {}}));
        assert_eq!(so_far(r#"{"a": "x","#), json!({"a": "x"}));
        // An escape it stopped in the middle of.
        assert_eq!(so_far(r#"{"a": "x\"#), json!({"a": "x"}));
        assert_eq!(so_far(r#"{"a": "x\u00"#), json!({"a": "x"}));
        assert_eq!(so_far(r#"{"a": "x\"y"#), json!({"a": "x\"y"}));
        assert_eq!(so_far(r#"{"a": "héllo wö"#), json!({"a": "héllo wö"}));
        // Nothing an object can be made of.
        for raw in ["", "{", "[1, 2", "\"text", "not json"] {
            assert_eq!(so_far(raw), json!({}), "{raw}");
        }
        assert_eq!(so_far(r#"{"a": 1}"#), json!({"a": 1}), "a whole object");
    }

    #[test]
    fn a_round_ends_early_at_each_apis_output_limit() {
        let early = |api, stop| ended_early(Dialect(api), Some(stop));
        assert!(early(Api::Anthropic, "max_tokens"));
        assert!(early(Api::Anthropic, "model_context_window_exceeded"));
        assert!(!early(Api::Anthropic, "tool_use"));
        assert!(early(Api::OpenAiChat, "length"));
        assert!(!early(Api::OpenAiChat, "tool_calls"));
        assert!(early(Api::OpenAiResponses, "incomplete"));
        assert!(!early(Api::OpenAiResponses, "tool_calls"));
        assert!(!ended_early(Dialect(Api::Anthropic), None));
    }

    /// The note says what the rounds were (calls the proxy answers, not only searches), one
    /// round as one.
    #[test]
    fn the_limit_note_says_what_the_rounds_went_on() {
        let text = |max| limit_note(Dialect(Api::Anthropic), max)["text"].to_string();
        let one = text(1);
        assert!(
            one.contains(
                "the model spent this request's one round on calls toolshelf answers itself"
            ),
            "{one}"
        );
        let two = text(2);
        assert!(
            two.contains(
                "the model spent all 2 rounds of this request on calls toolshelf answers itself"
            ),
            "{two}"
        );
        for note in [one, two] {
            assert!(!note.contains("tool_search"), "{note}");
        }
    }

    #[test]
    fn client_stop_reasons_end_the_turn_when_the_proxy_answered_every_call() {
        let d = Dialect(Api::Anthropic);
        assert_eq!(
            stop_for_client(d, Some("tool_use"), false).as_deref(),
            Some("end_turn")
        );
        assert_eq!(
            stop_for_client(d, Some("tool_use"), true).as_deref(),
            Some("tool_use")
        );
        assert_eq!(
            stop_for_client(Dialect(Api::OpenAiChat), Some("tool_calls"), false).as_deref(),
            Some("stop")
        );
        assert_eq!(
            stop_for_client(d, Some("max_tokens"), false).as_deref(),
            Some("max_tokens")
        );
    }
}

//! Compiling the configuration: from plain data to the rules every surface uses.
//!
//! [`Config`] is what the file says; [`Compiled`] is what it means. Compiling validates everything
//! at once (every rule, mode, limit, server section and hook, each error naming the key) and
//! returns the exposure policy, the permission rules and the hooks, so no surface interprets the
//! configuration on its own. The gateway, the command-line tools and (later) the proxy all decide
//! exposure through [`Compiled::expose`]: a tool an unconditional deny rule hides is hidden in
//! `render`, `ledger`, `explain` and `search` exactly as in the gateway.

use std::collections::BTreeMap;

use crate::catalog::Catalog;
use crate::config::Config;
use crate::error::{Error, Result as CoreResult};
use crate::hook::Hooks;
use crate::pattern::Pattern;
use crate::permission::Permissions;
use crate::policy::{Exposure, Mode, Policy, Rule};
use crate::reminder::Reminders;
use crate::surface::Surface;
use crate::template::{SessionValues, TemplateError, Templates};

/// Result alias for compiling (the core's error type).
pub type Result<T> = CoreResult<T>;

/// A validated configuration with its rules compiled, for one active mode.
#[derive(Debug, Clone)]
pub struct Compiled {
    config: Config,
    source_name: String,
    policy: Policy,
    modes: BTreeMap<String, Mode>,
    permissions: Permissions,
    hooks: Hooks,
    reminders: Reminders,
    templates: Templates,
}

impl Compiled {
    /// Validates `config` (named `source_name` in errors) and compiles it with `mode` active.
    pub fn new(config: Config, source_name: &str, mode: Option<&str>) -> Result<Self> {
        // An error about a key names the line the file gave it on.
        let err = |message: String| Error::Config {
            source_name: source_name.to_owned(),
            message: config.located(message),
        };
        let rules = config
            .defer
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| Rule::parse(r).map_err(|m| err(format!("[defer] rules[{i}]: {m}"))))
            .collect::<Result<Vec<_>>>()?;
        for name in config.modes.keys() {
            if name.trim().is_empty() {
                return Err(err(format!("[modes.{name:?}]: a mode's name is empty")));
            }
            // `--mode NAME` is matched exactly: a padded name would not be found.
            if name.trim() != name {
                return Err(err(format!(
                    "[modes.{name:?}]: a mode's name has leading or trailing spaces"
                )));
            }
        }
        let modes = config
            .modes
            .keys()
            .map(|name| Ok((name.clone(), compile_mode(&config, name, source_name)?)))
            .collect::<Result<BTreeMap<_, _>>>()?;
        let active = match mode {
            None => None,
            Some(m) => Some(modes.get(m).cloned().ok_or_else(|| Error::UnknownMode {
                name: m.to_owned(),
                available: modes.keys().cloned().collect(),
            })?),
        };
        let s = &config.search;
        if s.default_limit == 0 || s.max_limit == 0 || s.default_limit > s.max_limit {
            return Err(err(format!(
                "[search] needs 1 <= default_limit <= max_limit (got default_limit = {}, max_limit = {})",
                s.default_limit, s.max_limit
            )));
        }
        if s.response_budget_chars < 200 {
            return Err(err(format!(
                "[search] response_budget_chars must be at least 200 (got {}): a smaller budget cannot hold one result",
                s.response_budget_chars
            )));
        }
        if config.defer.window == 0 {
            return Err(err(format!(
                "[defer] window must be {} (got 0)",
                crate::config::WINDOW_RANGE
            )));
        }
        for (name, server) in &config.servers {
            // A server's name heads its tools' names, and a catalog refuses an empty one.
            if name.trim().is_empty() {
                return Err(err(format!("[servers.{name:?}]: a server's name is empty")));
            }
            server
                .check()
                .map_err(|e| err(format!("[servers.{name}] {e}")))?;
        }
        at_least_one(
            "session",
            &[
                ("activation_ttl_turns", config.session.activation_ttl_turns),
                ("activation_ttl_calls", config.session.activation_ttl_calls),
            ],
        )
        .map_err(err)?;
        if config.execute.call_timeout_secs == 0 {
            return Err(err("[execute] call_timeout_secs must be at least 1".into()));
        }
        seconds_within_bounds(&config).map_err(err)?;
        crate::http::Listener::new(&config).map_err(err)?;
        let p = &config.proxy;
        for (key, url, paths) in [
            ("anthropic_upstream", &p.anthropic_upstream, ANTHROPIC_PATHS),
            ("openai_upstream", &p.openai_upstream, OPENAI_PATHS),
        ] {
            if let Some(problem) = upstream_url_problem(url, paths) {
                return Err(err(format!("[proxy] {key} {problem} (got {url:?})")));
            }
        }
        at_least_one(
            "proxy",
            &[
                ("session_ttl_secs", p.session_ttl_secs),
                ("max_sessions", p.max_sessions as u64),
                ("upstream_timeout_secs", p.upstream_timeout_secs),
            ],
        )
        .map_err(err)?;
        if p.max_search_rounds == 0 {
            return Err(err(
                "[proxy] max_search_rounds must be at least 1: it bounds the upstream rounds of a request, and every request takes one"
                    .into(),
            ));
        }
        if p.max_body_bytes < 1024 {
            return Err(err(format!(
                "[proxy] max_body_bytes must be at least 1024 (got {})",
                p.max_body_bytes
            )));
        }
        let st = &config.store;
        if let Some(url) = &st.url
            && !["redis://", "unix://", "redis+unix://"]
                .iter()
                .any(|s| url.starts_with(s))
        {
            // The URL may hold a password: only its scheme is shown.
            let scheme = url.split_once("://").map_or("(none)", |(s, _)| s);
            return Err(err(format!(
                "[store] url must be a redis:// or unix:// URL (got the scheme {scheme:?}; \
                 TLS, rediss://, is not built in)"
            )));
        }
        if st.key_prefix.is_empty() {
            return Err(err(
                "[store] key_prefix must not be empty (got \"\"): every session key starts with it"
                    .into(),
            ));
        }
        at_least_one("store", &[("timeout_ms", st.timeout_ms)]).map_err(err)?;
        // An empty token would read as none: the dashboard refused, the status and metrics open.
        if config
            .ui
            .token
            .as_deref()
            .is_some_and(|t| t.trim().is_empty())
        {
            return Err(err(
                "[ui] token must not be empty (got \"\"): set a token, or leave the key out for none"
                    .into(),
            ));
        }
        let permissions =
            Permissions::new(&config.permissions, source_name).map_err(|e| match e {
                Error::Config {
                    source_name,
                    message,
                } => Error::Config {
                    source_name,
                    message: config.located(message),
                },
                other => other,
            })?;
        let hooks = Hooks::new(&config.hooks).map_err(err)?;
        let reminders =
            Reminders::new(&config.reminders, config.session.reminder_max_chars).map_err(err)?;
        let templates = Templates::new(&config).map_err(err)?;
        let sc = &config.scripts;
        at_least_one(
            "scripts",
            &[
                ("max_steps", sc.max_steps),
                ("max_heap_mb", sc.max_heap_mb),
                ("max_memory_mb", sc.max_memory_mb),
                ("max_call_depth", sc.max_call_depth as u64),
                ("timeout_secs", sc.timeout_secs),
                ("max_result_bytes", sc.max_result_bytes as u64),
                ("max_concurrent", sc.max_concurrent as u64),
            ],
        )
        .map_err(err)?;
        if sc.max_memory_mb < crate::config::MIN_MEMORY_MB {
            return Err(err(format!(
                "[scripts] max_memory_mb must be at least {} (got {}): a script runner is the toolshelf binary itself, which needs about 100 MiB of address space before a script runs",
                crate::config::MIN_MEMORY_MB,
                sc.max_memory_mb
            )));
        }
        for (setting, hosts) in [
            ("[scripts] allow_hosts", &sc.allow_hosts),
            ("[authoring] allow_hosts", &config.authoring.allow_hosts),
        ] {
            for (i, host) in hosts.iter().enumerate() {
                if let Some(problem) = allow_host_problem(host) {
                    return Err(err(format!("{setting}[{i}]: {host:?} {problem}")));
                }
            }
        }
        for (key, path) in [
            ("[cache] path", &config.cache.path),
            ("[audit] path", &config.audit.path),
        ] {
            if path.as_deref().is_some_and(|p| p.trim().is_empty()) {
                return Err(err(format!(
                    "{key} is empty (got {path:?}): name a path, or leave the key out for the default",
                    path = path.as_deref().unwrap_or_default()
                )));
            }
        }
        let a = &config.authoring;
        at_least_one(
            "authoring",
            &[
                ("max_tools", a.max_tools as u64),
                ("max_description_chars", a.max_description_chars as u64),
                ("max_script_bytes", a.max_script_bytes as u64),
            ],
        )
        .map_err(err)?;
        for (name, t) in &config.tools {
            if name.trim().is_empty() {
                return Err(err("[tools.\"\"]: a tool's name is empty".into()));
            }
            if t.script.as_deref().is_some_and(|p| p.trim().is_empty()) {
                return Err(err(format!("[tools.{name:?}] script is empty")));
            }
            // A script tool is served as mcp__scripts__NAME: a `__` in NAME would read as
            // another server's tool, as `tool_define` refuses for the same reason.
            if t.script.is_some() && name.contains("__") {
                return Err(err(format!(
                    "[tools.{name:?}] script: a script tool's name cannot hold \"__\" (it is served as mcp__scripts__NAME)"
                )));
            }
        }
        let policy = Policy::new(rules, config.defer.default, config.defer.window, active);
        Ok(Self {
            config,
            source_name: source_name.to_owned(),
            policy,
            modes,
            permissions,
            hooks,
            reminders,
            templates,
        })
    }

    /// The description templates and the values they read.
    pub fn templates(&self) -> &Templates {
        &self.templates
    }

    /// The active mode's name.
    pub fn mode(&self) -> Option<&str> {
        self.policy.mode().map(|m| m.name.as_str())
    }

    /// The surface one session sees: [`Self::surface`] with every description template of a
    /// visible tool or group rendered for `session`. The first template that fails fails the
    /// render, naming the tool and the line.
    pub fn session_surface(
        &self,
        catalog: &Catalog,
        exposure: &Exposure,
        session: &SessionValues,
    ) -> std::result::Result<Surface, TemplateError> {
        let descriptions = self.templates.render(catalog, exposure, session)?;
        Ok(Surface::with_descriptions(
            catalog,
            exposure,
            &self.config,
            descriptions,
        ))
    }

    /// The reminder rules.
    pub fn reminders(&self) -> &Reminders {
        &self.reminders
    }

    /// The configuration as written.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The name errors and warnings give the configuration.
    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    /// The exposure policy (rules, default, active mode).
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The permission rules.
    pub fn permissions(&self) -> &Permissions {
        &self.permissions
    }

    /// The hooks, per event.
    pub fn hooks(&self) -> &Hooks {
        &self.hooks
    }

    /// Every tool's exposure: resident, deferred or hidden, and why.
    pub fn expose(&self, catalog: &Catalog) -> Exposure {
        self.policy.apply(catalog, &self.permissions)
    }

    /// The model-visible surface of `catalog` under `exposure`.
    pub fn surface(&self, catalog: &Catalog, exposure: &Exposure) -> Surface {
        Surface::new(catalog, exposure, &self.config)
    }

    /// Rules that name no tool of `catalog`: usually a typo, and a silent one for a deny rule.
    /// One line each, naming the rule.
    pub fn unmatched(&self, catalog: &Catalog) -> Vec<String> {
        self.unmatched_while_down(catalog, &[])
    }

    /// [`Self::unmatched`] for a catalog without the tools of the servers `down` (as configured:
    /// those whose tool list is not known, neither listed nor cached: failed, disabled, still
    /// starting): their tools are unknown rather than absent, so a pattern that may name one of
    /// them says so, naming the server.
    pub fn unmatched_while_down(&self, catalog: &Catalog, down: &[String]) -> Vec<String> {
        let down_note = |p: &Pattern| down_note(down, p);
        let tools = catalog.tools();
        let any_name = |p: &Pattern| {
            tools
                .iter()
                .any(|t| p.matches(&t.name) || t.aliases.iter().any(|a| p.matches(a)))
        };
        let canonical = |p: &Pattern| tools.iter().any(|t| p.matches(&t.name));
        // What a pattern that matches only another name of a tool (the server's own spelling of
        // it) is told: `what` match canonical names only.
        let hint = |p: &Pattern, what: &str| {
            if any_name(p) {
                format!(
                    " by its canonical name ({what} match canonical names only; see `toolshelf explain`)"
                )
            } else {
                down_note(p)
            }
        };
        let mut out = Vec::new();
        for r in self.policy.rules() {
            if !canonical(r.pattern()) {
                out.push(format!(
                    "[defer] rule {r} matches no tool{}",
                    hint(r.pattern(), "[defer] rules")
                ));
            }
        }
        for (name, mode) in &self.modes {
            for p in mode.tools.iter().flatten() {
                if !canonical(p) {
                    out.push(format!(
                        "[modes.{name}] tools pattern {:?} matches no tool{}",
                        p.as_str(),
                        hint(p, "mode tools patterns")
                    ));
                }
            }
        }
        for r in self.permissions.rules() {
            if !tools.iter().any(|t| r.names(t)) {
                // A deny or ask rule matches every name of a tool: only an allow rule gets here
                // with a name it matches.
                let hint = hint(&r.pattern, "allow rules");
                out.push(format!("[permissions] {} matches no tool{hint}", r.label));
            }
        }
        out.extend(
            self.policy
                .admits_nothing(catalog, &self.expose(catalog).decisions),
        );
        out.extend(self.templates.unmatched(catalog, &|name: &str| {
            // A section names a tool by its canonical name or by its bare one, which a tool of
            // any server may have.
            let whole = if name.starts_with(crate::name::MCP_PREFIX) {
                format!("^{name}$")
            } else {
                format!("^{}*__{name}$", crate::name::MCP_PREFIX)
            };
            Pattern::new(&whole)
                .map(|p| down_note(&p))
                .unwrap_or_default()
        }));
        out.extend(self.reminders.unmatched(catalog, &down_note));
        for hook in self.hooks.all() {
            if let Some(p) = &hook.tools
                && !any_name(p)
            {
                out.push(format!(
                    "[hooks] {} tools pattern {:?} matches no tool{}",
                    hook.label,
                    p.as_str(),
                    down_note(p)
                ));
            }
        }
        out
    }
}

/// What a warning about `p`, which matches no tool, adds when servers `down` are not running: a
/// server of theirs whose tools it may name. Empty when it can name none of theirs.
fn down_note(down: &[String], p: &Pattern) -> String {
    let named: Vec<String> = down
        .iter()
        .filter(|s| {
            p.matches_some_name_after(&crate::name::mcp_name(&crate::name::server_segment(s), ""))
        })
        .map(|s| format!("{s:?}"))
        .collect();
    match named.as_slice() {
        [] => String::new(),
        [one] => format!(" (it may name a tool of server {one}, which is not running)"),
        many => format!(
            " (it may name a tool of servers {}, which are not running)",
            many.join(", ")
        ),
    }
}

fn compile_mode(config: &Config, name: &str, source_name: &str) -> Result<Mode> {
    let err = |message: String| Error::Config {
        source_name: source_name.to_owned(),
        message: config.located(message),
    };
    let m = &config.modes[name];
    let tools = match &m.tools {
        None => None,
        Some(list) => Some(
            list.iter()
                .enumerate()
                .map(|(i, p)| {
                    Pattern::of_tools(p).map_err(|e| err(format!("[modes.{name}] tools[{i}]: {e}")))
                })
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    if tools.is_none() && !m.read_only {
        return Err(err(format!(
            "[modes.{name}] must set `tools = [PATTERN, ...]` and/or `read_only = true`"
        )));
    }
    // A mode admits only the tools its patterns match: with none, it would hide every tool.
    if tools.as_ref().is_some_and(Vec::is_empty) {
        return Err(err(format!(
            "[modes.{name}] tools = [] admits no tool, so the mode would hide every tool: list the patterns of the tools it admits (tools = [\"^mcp__git__\"]), or leave tools out and set read_only = true"
        )));
    }
    Ok(Mode {
        name: name.to_owned(),
        tools,
        read_only: m.read_only,
        description: m.description.clone(),
    })
}

/// Each of `keys` (name and value) in `[section]` must be at least 1: the first that is 0, as
/// `[section] key must be at least 1 (got 0)`.
/// Every setting in seconds within [`crate::config::MAX_SECS`]: a deadline that far off is
/// none, and one past what a clock can add would end the process that sets it.
fn seconds_within_bounds(config: &Config) -> std::result::Result<(), String> {
    let mut settings: Vec<(String, u64)> = vec![
        (
            "[execute] call_timeout_secs".into(),
            config.execute.call_timeout_secs,
        ),
        ("[scripts] timeout_secs".into(), config.scripts.timeout_secs),
        (
            "[proxy] session_ttl_secs".into(),
            config.proxy.session_ttl_secs,
        ),
        (
            "[proxy] upstream_timeout_secs".into(),
            config.proxy.upstream_timeout_secs,
        ),
        (
            "[proxy] stream_hold_secs".into(),
            config.proxy.stream_hold_secs,
        ),
    ];
    if let Some(idle) = config.http.session_idle_secs {
        settings.push(("[http] session_idle_secs".into(), idle));
    }
    for (name, s) in &config.servers {
        settings.push((
            format!("[servers.{name}] startup_timeout_secs"),
            s.startup_timeout_secs,
        ));
        settings.push((
            format!("[servers.{name}] restart_delay_secs"),
            s.restart_delay_secs,
        ));
        if let Some(t) = s.call_timeout_secs {
            settings.push((format!("[servers.{name}] call_timeout_secs"), t));
        }
    }
    let max = crate::config::MAX_SECS;
    match settings.into_iter().find(|(_, v)| *v > max) {
        Some((key, v)) => Err(format!(
            "{key} must be at most {max} (about 31 years; got {v})"
        )),
        None => Ok(()),
    }
}

fn at_least_one(section: &str, keys: &[(&str, u64)]) -> std::result::Result<(), String> {
    match keys.iter().find(|(_, v)| *v == 0) {
        Some((key, v)) => Err(format!("[{section}] {key} must be at least 1 (got {v})")),
        None => Ok(()),
    }
}

/// Why `entry` of an `allow_hosts` list (`[scripts]`, `[authoring]`) would match no request, if
/// it would not: a script's URL is allowed when its host, or `host:port`, equals an entry (case
/// aside), so an entry is a host name or address with an optional numeric port, written as a
/// URL writes it (IPv6 in brackets, in its shortest form), nothing else.
fn allow_host_problem(entry: &str) -> Option<String> {
    let problem = "is not a host name, optionally with :port";
    let hint = match url_authority(entry) {
        Ok(canonical) if canonical == entry.to_ascii_lowercase() => return None,
        Ok(canonical) => format!("; write {canonical:?}"),
        Err(hint) => {
            // What the entry likely meant: its authority, without scheme, path or query.
            let (scheme, rest) = match entry.trim().split_once("://") {
                Some((_, rest)) => (true, rest),
                None => (false, entry.trim()),
            };
            let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
            match url_authority(authority) {
                Ok(canonical) if scheme => format!("; drop the scheme: write {canonical:?}"),
                Ok(canonical) => format!("; write {canonical:?}"),
                Err(_) => hint,
            }
        }
    };
    Some(format!("{problem}{hint}"))
}

/// `text`, a `host` or `host:port`, as a URL's host (and port) reads: the name in lower case,
/// an IP address in its canonical form. An error is a hint at what is wrong, or "".
fn url_authority(text: &str) -> std::result::Result<String, String> {
    let (host, port) = match text.strip_prefix('[') {
        Some(v6) => {
            let (addr, after) = v6.split_once(']').ok_or_else(String::new)?;
            let addr: std::net::Ipv6Addr = addr.parse().map_err(|_| String::new())?;
            // A URL writes an IPv4-mapped address in hex (`::ffff:7f00:1`), not as std does.
            let host = match addr.to_ipv4_mapped() {
                Some(v4) => {
                    let [a, b, c, d] = v4.octets();
                    format!(
                        "[::ffff:{:x}:{:x}]",
                        u16::from_be_bytes([a, b]),
                        u16::from_be_bytes([c, d])
                    )
                }
                None => format!("[{addr}]"),
            };
            match after {
                "" => (host, None),
                _ => (host, Some(after.strip_prefix(':').ok_or_else(String::new)?)),
            }
        }
        None => {
            let (name, port) = match text.split_once(':') {
                Some((name, port)) => (name, Some(port)),
                None => (text, None),
            };
            if name.contains('*') {
                return Err("; a wildcard matches nothing: list each host".to_owned());
            }
            if text.parse::<std::net::Ipv6Addr>().is_ok() {
                let bracketed = url_authority(&format!("[{text}]"))?;
                return Err(format!("; an IPv6 address goes in brackets: {bracketed:?}"));
            }
            let valid = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !valid {
                return Err(String::new());
            }
            // A name whose last label is a number is an IPv4 address to a URL.
            let last = name.rsplit('.').next().unwrap_or_default();
            let host = if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
                name.parse::<std::net::Ipv4Addr>()
                    .map_err(|_| "; an IPv4 address is four numbers (127.0.0.1)".to_owned())?
                    .to_string()
            } else {
                name.to_ascii_lowercase()
            };
            (host, port)
        }
    };
    match port {
        None => Ok(host),
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            let p: u16 = p
                .parse()
                .map_err(|_| "; a port is at most 65535".to_owned())?;
            Ok(format!("{host}:{p}"))
        }
        Some(_) => Err("; a port is a number (leave it out for any port)".to_owned()),
    }
}

/// The client paths the proxy appends to `[proxy] anthropic_upstream`.
pub const ANTHROPIC_PATHS: &str = "/v1/messages";

/// The client paths the proxy appends to `[proxy] openai_upstream`.
pub const OPENAI_PATHS: &str = "/v1/chat/completions or /v1/responses";

/// Why `url` cannot be a provider upstream of the proxy, if it cannot: it must be an `http://`
/// or `https://` URL, and since the client's path (one of `paths`, which the problem names) is
/// appended to it as it is, it must not end in `/v1` itself, as an SDK's base URL does, nor
/// have a query or fragment.
pub fn upstream_url_problem(url: &str, paths: &str) -> Option<String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let Some(rest) = rest else {
        return Some("must be an http:// or https:// URL".into());
    };
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("must not hold spaces or other whitespace".into());
    }
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(addr, _)| addr),
        None => host_port.split_once(':').map_or(host_port, |(h, _)| h),
    };
    if host.is_empty() {
        return Some("must name a host (http://HOST or https://HOST[:PORT])".into());
    }
    if rest.contains(['?', '#']) {
        return Some(format!(
            "must not have a query or fragment: the client's path ({paths}) is appended to it, \
             after them"
        ));
    }
    let trimmed = rest.trim_end_matches('/');
    if trimmed.ends_with("/v1") {
        let base = &url[..url.len() - rest.len() + trimmed.len() - "/v1".len()];
        return Some(format!(
            "must not end in /v1: the client's path ({paths}) is appended to it, so give {base}"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compile(toml: &str, mode: Option<&str>) -> Result<Compiled> {
        Compiled::new(Config::from_toml_str(toml, "t.toml")?, "t.toml", mode)
    }

    #[test]
    fn an_upstream_is_a_base_url_without_v1() {
        for ok in [
            "http://127.0.0.1:11434",
            "https://api.anthropic.com/",
            "https://gateway.ai.cloudflare.com/v1/account/gateway/openai",
            "http://host/v10",
        ] {
            assert_eq!(upstream_url_problem(ok, ANTHROPIC_PATHS), None, "{ok}");
        }
        for (bad, says) in [
            ("ftp://host", "must be an http:// or https:// URL"),
            ("127.0.0.1:11434", "must be an http:// or https:// URL"),
            (
                "http://127.0.0.1:11434/v1",
                "so give http://127.0.0.1:11434",
            ),
            (
                "https://api.example.com/v1/",
                "so give https://api.example.com",
            ),
            ("http://host/api/v1/", "so give http://host/api"),
            ("http://host/api?api-version=1", "must not have a query"),
        ] {
            let problem = upstream_url_problem(bad, ANTHROPIC_PATHS).unwrap_or_default();
            assert!(problem.contains(says), "{bad}: {problem}");
        }
    }

    /// A tool-name pattern written as a regular expression could match no tool: refused wherever
    /// tool names are matched, not only in permission rules and hooks.
    #[test]
    fn tool_name_patterns_written_as_regular_expressions_are_refused() {
        for (toml, key) in [
            (
                "[defer]\nrules = [\"NoDefer(^mcp__git__git_(status|diff))\"]",
                "[defer] rules[0]",
            ),
            (
                "[modes.m]\ntools = [\"^mcp__git__(git_log|git_status)\"]",
                "[modes.m] tools[0]",
            ),
            (
                "[[reminders]]\nid = \"r\"\ncategory = \"c\"\nmessage = \"m\"\nafter_tools = [\"^mcp__git__(git_commit|git_add)$\"]",
                "after_tools[0]",
            ),
        ] {
            let mode = toml.contains("[modes.m]").then_some("m");
            let e = compile(toml, mode)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                e.contains(key)
                    && e.contains("has '(', which no tool name holds: patterns are globs")
                    && e.contains("write one per alternative"),
                "{toml}: {e}"
            );
        }
        // The glob that means what the group meant is accepted.
        compile("[defer]\nrules = [\"NoDefer(^mcp__git__git_*)\"]", None).expect("a glob");
    }

    #[test]
    fn every_section_is_validated_with_its_key_named() {
        for (toml, says) in [
            ("[defer]\nrules = [\"Hide(x)\"]", "[defer] rules[0]"),
            (
                "[tools.\"\"]\nscript = \"x.star\"",
                "a tool's name is empty",
            ),
            (
                "[tools.a__b]\nscript = \"x.star\"",
                "[tools.\"a__b\"] script: a script tool's name cannot hold \"__\"",
            ),
            ("[modes.m]\ndescription = \"x\"", "[modes.m] must set"),
            ("[modes.m]\ntools = [\"\"]", "[modes.m] tools[0]"),
            (
                "[modes.m]\ntools = []",
                "[modes.m] tools = [] admits no tool, so the mode would hide every tool",
            ),
            (
                "[modes.m]\ntools = []\nread_only = true",
                "[modes.m] tools = [] admits no tool",
            ),
            ("[search]\ndefault_limit = 0", "[search] needs"),
            ("[search]\nresponse_budget_chars = 10", "at least 200"),
            ("[defer]\nwindow = 0", "[defer] window"),
            ("[servers.s]\nargs = []", "[servers.s] needs command"),
            (
                "[execute]\ncall_timeout_secs = 0",
                "[execute] call_timeout_secs",
            ),
            (
                "[scripts]\ntimeout_secs = 9223372036854775807",
                "[scripts] timeout_secs must be at most 1000000000 (about 31 years; got 9223372036854775807)",
            ),
            (
                "[servers.s]\ncommand = \"x\"\nrestart_delay_secs = 1000000001",
                "[servers.s] restart_delay_secs must be at most 1000000000",
            ),
            (
                "[[hooks.pre_call]]\ncommand = \"x\"\ntimeout_secs = 18446744073709551615",
                "[hooks] pre_call[0]: timeout_secs must be at most 1000000000",
            ),
            ("[permissions]\ndeny = [\"x(\"]", "[permissions] deny[0]"),
            (
                "[[hooks.pre_call]]\ncommand = \"\"",
                "[hooks] pre_call[0]: command is empty",
            ),
            (
                "[[hooks.session_start]]\ncommand = \"x\"\ntools = \"y\"",
                "tools only applies to call events",
            ),
            (
                "[store]\nurl = \"rediss://:secret@h\"",
                "[store] url must be a redis:// or unix:// URL (got the scheme \"rediss\"",
            ),
            (
                "[proxy]\nmax_search_rounds = 0",
                "[proxy] max_search_rounds must be at least 1",
            ),
            (
                "[store]\nkey_prefix = \"\"",
                "[store] key_prefix must not be empty (got \"\")",
            ),
            (
                "[ui]\ntoken = \"\"",
                "[ui] token must not be empty (got \"\"): set a token, or leave the key out for none",
            ),
            // Each key at fault is named alone, with its value.
            (
                "[store]\ntimeout_ms = 0",
                "[store] timeout_ms must be at least 1 (got 0)",
            ),
            (
                "[scripts]\nmax_concurrent = 0",
                "[scripts] max_concurrent must be at least 1 (got 0)",
            ),
            (
                "[scripts]\nmax_steps = 0",
                "[scripts] max_steps must be at least 1 (got 0)",
            ),
            (
                "[scripts]\nmax_steps = 5\nmax_memory_mb = 64",
                "t.toml: line 3: [scripts] max_memory_mb must be at least 256 (got 64): a script runner is the toolshelf binary itself",
            ),
            (
                "[proxy]\nsession_ttl_secs = 0",
                "[proxy] session_ttl_secs must be at least 1 (got 0)",
            ),
            (
                "[proxy]\nmax_sessions = 0",
                "[proxy] max_sessions must be at least 1 (got 0)",
            ),
            (
                "[proxy]\nupstream_timeout_secs = 0",
                "[proxy] upstream_timeout_secs must be at least 1 (got 0)",
            ),
            (
                "[session]\nactivation_ttl_calls = 0",
                "[session] activation_ttl_calls must be at least 1 (got 0)",
            ),
            (
                "[authoring]\nmax_script_bytes = 0",
                "[authoring] max_script_bytes must be at least 1 (got 0)",
            ),
        ] {
            let e = compile(toml, None).expect_err(toml).to_string();
            assert!(!e.contains("secret"), "a password is never echoed: {e}");
            assert!(
                e.starts_with("t.toml: ") && e.contains(says),
                "{toml:?}: {e}"
            );
        }
        assert!(compile("", None).is_ok());
        assert!(compile("[store]\nurl = \"redis://127.0.0.1:6379/2\"", None).is_ok());
    }

    /// `toml` fails to compile with a message naming the file and holding `says`.
    fn assert_refused(toml: &str, says: &str) {
        let e = compile(toml, None).expect_err(toml).to_string();
        assert!(
            e.starts_with("t.toml: ") && e.contains(says),
            "{toml:?}: {e}"
        );
    }

    /// A value the file gives that is out of range is refused with the line of its key, however
    /// the key is written; a configuration of no file has no lines to name.
    #[test]
    fn an_error_about_a_key_names_its_line() {
        for (toml, says) in [
            (
                "[defer]\ndefault = true\nwindow = 0\n",
                "t.toml: line 3: [defer] window must be a whole number of tokens, at least 1 (got 0)",
            ),
            (
                "defer = { window = 0 }\n",
                "t.toml: line 1: [defer] window must be",
            ),
            (
                "[session]\n\nactivation_ttl_turns = 0\n",
                "t.toml: line 3: [session] activation_ttl_turns must be at least 1",
            ),
            (
                "[modes.m]\ndescription = \"d\"\ntools = []\n",
                "t.toml: line 3: [modes.m] tools = [] admits no tool",
            ),
            (
                "[scripts]\nallow_hosts = [\"a b\"]\n",
                "t.toml: line 2: [scripts] allow_hosts[0]",
            ),
            // A table named with quotes in the message, as tool names are.
            (
                "[tools.x]\n\nscript = \" \"\n",
                "t.toml: line 3: [tools.\"x\"] script is empty",
            ),
            (
                "[tools.\"x\"]\ndescription_template = \"'d'\"\nscript = \"x.star\"\n",
                "t.toml: line 3: [tools.\"x\"] script and description_template are both set",
            ),
            // A permission rule, by its list's line.
            (
                "[defer]\ndefault = true\n[permissions]\ndeny = [\"x(\"]\n",
                "t.toml: line 4: [permissions] deny[0]",
            ),
            // A message about a table as a whole, by its header's line.
            (
                "[defer]\ndefault = true\n\n[servers.s]\ncommand = \"a\"\nurl = \"http://h\"\n",
                "t.toml: line 4: [servers.s] sets both command and url",
            ),
            // An element of an array of tables, by its header's line.
            (
                "[session]\nreminder_max_chars = 400\n\n[[reminders]]\nid = \"a\"\ncategory = \"c\"\nmessage = \"m\"\nintents = [\"deploy\"]\n\n[[reminders]]\nid = \"b\"\ncategory = \"c\"\nmessage = \"m\"\n",
                "t.toml: line 10: [[reminders]] 1 \"b\": needs a trigger",
            ),
            (
                "[[reminders]]\nid = \"a\"\ncategory = \"c\"\nmessage = \"m\"\nintents = [\"deploy\"]\n[[reminders]]\nid = \"a\"\ncategory = \"c\"\nmessage = \"m\"\nintents = [\"deploy\"]\n",
                "t.toml: line 6: [[reminders]] 1 \"a\": id used twice",
            ),
        ] {
            let e = compile(toml, None).expect_err(toml).to_string();
            assert!(e.starts_with(says), "{toml:?}: {e}");
        }
        let mut config = Config::default();
        config.defer.window = 0;
        let e = Compiled::new(config, "built", None)
            .expect_err("window")
            .to_string();
        assert_eq!(
            e,
            "built: [defer] window must be a whole number of tokens, at least 1 (got 0)"
        );
    }

    #[test]
    fn server_and_mode_names_and_env_keys_are_checked() {
        for (toml, says) in [
            (
                "[servers.\"\"]\ncommand = \"x\"",
                "[servers.\"\"]: a server's name is empty",
            ),
            (
                "[servers.\" \"]\ncommand = \"x\"",
                "[servers.\" \"]: a server's name is empty",
            ),
            (
                "[modes.\"\"]\nread_only = true",
                "[modes.\"\"]: a mode's name is empty",
            ),
            (
                "[modes.ask]\nread_only = true\n[modes.\" ask\"]\nread_only = true",
                "[modes.\" ask\"]: a mode's name has leading or trailing spaces",
            ),
            (
                "[modes.\"ask \"]\nread_only = true",
                "[modes.\"ask \"]: a mode's name has leading or trailing spaces",
            ),
            (
                "[servers.s]\ncommand = \"x\"\nenv = { \"\" = \"1\" }",
                "[servers.s] env: \"\" is not a variable name",
            ),
            (
                "[servers.s]\ncommand = \"x\"\nenv = { \"A=B\" = \"1\" }",
                "[servers.s] env: \"A=B\" is not a variable name",
            ),
        ] {
            assert_refused(toml, says);
        }
        let c = compile(
            "[servers.s]\ncommand = \"x\"\nenv = { A_1 = \"\", \"lower.dot\" = \"x\" }\n\
             [modes.\"read only\"]\nread_only = true",
            Some("read only"),
        )
        .expect("plain names");
        assert_eq!(c.mode(), Some("read only"));
    }

    #[test]
    fn scripts_max_result_bytes_must_be_at_least_one() {
        assert_refused(
            "[scripts]\nmax_result_bytes = 0",
            "[scripts] max_result_bytes must be at least 1 (got 0)",
        );
        assert!(compile("[scripts]\nmax_result_bytes = 1", None).is_ok());
    }

    #[test]
    fn allow_hosts_entries_are_host_names_with_an_optional_port() {
        for ok in [
            "dict.internal",
            "127.0.0.1:8080",
            "LOCALHOST",
            "my_host-1.example.com:443",
            "[::1]",
            "[::1]:8080",
            "[2001:db8::1]:443",
            "[::ffff:7f00:1]",
            "10.0.0.1:0",
        ] {
            for section in ["scripts", "authoring"] {
                let toml = format!("[{section}]\nallow_hosts = [{ok:?}]");
                assert!(compile(&toml, None).is_ok(), "{toml}");
            }
        }
        for (entry, says) in [
            (
                "http://127.0.0.1:18992",
                "\"http://127.0.0.1:18992\" is not a host name, optionally with :port; drop the scheme: write \"127.0.0.1:18992\"",
            ),
            (
                "https://api.example.com/v1",
                "drop the scheme: write \"api.example.com\"",
            ),
            (
                "127.0.0.1/",
                "\"127.0.0.1/\" is not a host name, optionally with :port; write \"127.0.0.1\"",
            ),
            ("", "\"\" is not a host name, optionally with :port"),
            ("a b", "\"a b\" is not a host name"),
            (" a", "\" a\" is not a host name"),
            ("h:", "\"h:\" is not a host name"),
            ("h:80:80", "\"h:80:80\" is not a host name"),
            ("h:99999", "a port is at most 65535"),
            ("h:+80", "a port is a number (leave it out for any port)"),
            ("h:*", "a port is a number"),
            ("h:080", "; write \"h:80\""),
            (
                "*.example.com",
                "a wildcard matches nothing: list each host",
            ),
            ("::1", "an IPv6 address goes in brackets: \"[::1]\""),
            ("::FFFF:127.0.0.1", "in brackets: \"[::ffff:7f00:1]\""),
            ("[0:0::1]:80", "; write \"[::1]:80\""),
            ("[::ffff:127.0.0.1]", "; write \"[::ffff:7f00:1]\""),
            ("127.1", "an IPv4 address is four numbers"),
            ("host.1", "an IPv4 address is four numbers"),
            ("01.2.3.4", "an IPv4 address is four numbers"),
            ("[::1", "\"[::1\" is not a host name"),
            ("[::1]x", "\"[::1]x\" is not a host name"),
            ("[host]", "\"[host]\" is not a host name"),
            ("user@h", "\"user@h\" is not a host name"),
            ("b\u{fc}cher.de", "is not a host name"),
        ] {
            for section in ["scripts", "authoring"] {
                let toml = format!("[{section}]\nallow_hosts = [\"ok.host\", {entry:?}]");
                assert_refused(&toml, &format!("[{section}] allow_hosts[1]: {entry:?} "));
                assert_refused(&toml, says);
            }
        }
    }

    #[test]
    fn an_upstream_in_the_file_names_the_paths_of_its_api() {
        assert_refused(
            "[proxy]\nopenai_upstream = \"http://host/?x=1\"",
            "[proxy] openai_upstream must not have a query or fragment: the client's path (/v1/chat/completions or /v1/responses) is appended to it, after them (got \"http://host/?x=1\")",
        );
        assert_refused(
            "[proxy]\nopenai_upstream = \"http://host/v1\"",
            "[proxy] openai_upstream must not end in /v1: the client's path (/v1/chat/completions or /v1/responses) is appended to it, so give http://host",
        );
        assert_refused(
            "[proxy]\nanthropic_upstream = \"http://host/?x=1\"",
            "[proxy] anthropic_upstream must not have a query or fragment: the client's path (/v1/messages) is appended",
        );
    }

    #[test]
    fn an_upstream_names_a_host_and_holds_no_whitespace() {
        for ok in [
            "http://[::1]:8080",
            "http://user@host",
            "https://host:8443/base",
        ] {
            assert_eq!(upstream_url_problem(ok, ANTHROPIC_PATHS), None, "{ok}");
        }
        for (bad, says) in [
            ("http://", "must name a host"),
            ("https://", "must name a host"),
            ("http:///v1/x", "must name a host"),
            ("http://:8080", "must name a host"),
            ("http://user@/x", "must name a host"),
            ("http://[]:80", "must name a host"),
            ("https://api.openai.com /x", "must not hold spaces"),
            ("https://api.openai.com\t", "must not hold spaces"),
            (
                " https://api.openai.com",
                "must be an http:// or https:// URL",
            ),
        ] {
            let problem = upstream_url_problem(bad, ANTHROPIC_PATHS).unwrap_or_default();
            assert!(problem.contains(says), "{bad:?}: {problem}");
        }
        assert_refused(
            "[proxy]\nanthropic_upstream = \"http://\"",
            "[proxy] anthropic_upstream must name a host (http://HOST or https://HOST[:PORT]) (got \"http://\")",
        );
        assert_refused(
            "[proxy]\nopenai_upstream = \"https://api.openai.com /x\"",
            "[proxy] openai_upstream must not hold spaces or other whitespace",
        );
    }

    #[test]
    fn cache_and_audit_paths_are_not_empty() {
        for key in ["cache", "audit"] {
            for path in ["", "  "] {
                assert_refused(
                    &format!("[{key}]\npath = {path:?}"),
                    &format!("[{key}] path is empty (got {path:?})"),
                );
            }
            assert!(compile(&format!("[{key}]\npath = \"rel\""), None).is_ok());
        }
    }

    #[test]
    fn an_unknown_mode_lists_the_defined_ones() {
        let e = compile("[modes.ask]\nread_only = true", Some("bogus"))
            .expect_err("unknown")
            .to_string();
        assert!(e.contains("bogus") && e.contains("ask"), "{e}");
    }

    #[test]
    fn rules_that_name_no_tool_are_reported() {
        let c = Catalog::from_value(
            &json!({"builtin": [{"name": "Read"}], "servers": [{"name": "a.b", "tools": [{"name": "t"}]}]}),
            "c",
        )
        .expect("catalog");
        let compiled = compile(
            "[defer]\nrules = [\"Defer(Read)\", \"NoDefer(Raed)\", \"NoDefer(^mcp__a.b__)\"]\n\
             [modes.m]\ntools = [\"^Read$\", \"^Write$\", \"^mcp__a.b__t$\"]\n\
             [permissions]\ndeny = [\"^mcp__a.b__t$\", \"^mcp__nope__\"]\nallow = [\"^mcp__a.b__t$\"]\n\
             [[hooks.pre_call]]\ncommand = \"x\"\ntools = \"zzz\"",
            None,
        )
        .expect("compiles");
        let got = compiled.unmatched(&c);
        let down = compiled.unmatched_while_down(&c, &["nope".to_owned(), "x.y".to_owned()]);
        // With servers down, a pattern that may name one of their tools says so (`^Write$` and
        // the mcp__a.b__ ones cannot); the others read as before.
        let noted: Vec<&str> = down
            .iter()
            .map(String::as_str)
            .filter(|w| w.contains("not running"))
            .collect();
        assert_eq!(
            noted,
            [
                "[defer] rule NoDefer(Raed) matches no tool (it may name a tool of servers \"nope\", \"x.y\", which are not running)",
                "[permissions] deny[1] \"^mcp__nope__\" matches no tool (it may name a tool of server \"nope\", which is not running)",
                "[hooks] pre_call[0] \"x\" tools pattern \"zzz\" matches no tool (it may name a tool of servers \"nope\", \"x.y\", which are not running)",
            ][..]
        );
        assert_eq!(
            got,
            [
                "[defer] rule NoDefer(Raed) matches no tool",
                "[defer] rule NoDefer(^mcp__a.b__) matches no tool by its canonical name ([defer] rules match canonical names only; see `toolshelf explain`)",
                "[modes.m] tools pattern \"^Write$\" matches no tool",
                "[modes.m] tools pattern \"^mcp__a.b__t$\" matches no tool by its canonical name (mode tools patterns match canonical names only; see `toolshelf explain`)",
                "[permissions] deny[1] \"^mcp__nope__\" matches no tool",
                "[permissions] allow[0] \"^mcp__a.b__t$\" matches no tool by its canonical name (allow rules match canonical names only; see `toolshelf explain`)",
                "[hooks] pre_call[0] \"x\" tools pattern \"zzz\" matches no tool",
            ]
        );
    }
}

//! What the HTTP listeners (`serve --http` and `proxy`, `[http]`) accept: origins, hosts, how
//! many sessions, and how long an idle one lives.
//!
//! Parsing and matching live here, with no I/O, so the configuration check, the gateway's request
//! guard and the proxy's read `allowed_origins` and `allowed_hosts` the same way
//! ([`Listener::check`]). Loopback origins and hosts are always accepted (the listener is for
//! local clients; the lists only add to that), which is what the MCP transport's defence against
//! DNS rebinding asks for. Sessions and idle time are the gateway's only.
//!
//! `session_idle_secs` is tied to the timeouts because a session's idle timer runs on while a
//! tool call is silent: a session closed as idle in the middle of a call loses its answer. So the
//! idle time must outlast the longest silent call: a lazily started server's start-up, the
//! `pre_call` hooks, the call, then the `post_call` or `call_failed` hooks.

use crate::config::{Config, HookCommand};

/// Seconds an idle session outlives the longest silent call (the answer still has to be written).
pub const IDLE_MARGIN_SECS: u64 = 5;
/// `session_idle_secs` when not set (raised to fit the longest call).
pub const DEFAULT_SESSION_IDLE_SECS: u64 = 900;

/// An `Origin` header's parts; the port is the scheme's default when not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

/// A port in an allowed origin or host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Port {
    Any,
    Exact(Option<u16>),
}

/// One entry of `allowed_origins`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AllowedOrigin {
    /// `null`, as sandboxed pages send it.
    Null,
    Tuple {
        scheme: String,
        host: String,
        port: Port,
    },
}

/// One entry of `allowed_hosts`: a name, with any port or one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct AllowedHost {
    host: String,
    port: Port,
}

/// Why the listener's header checks refuse a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// More than one header of this name (`Host` or `Origin`): a server reading only the first
    /// would judge another value than the one a later reader uses.
    Repeated(&'static str),
    /// An `Origin` that is neither loopback nor in `allowed_origins`.
    Origin(String),
    /// A `Host` that is neither loopback nor in `allowed_hosts`.
    Host(String),
}

impl Refusal {
    /// The HTTP status of the refusal: 400 for a repeated header, else 403.
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Repeated(_) => 400,
            Refusal::Origin(_) | Refusal::Host(_) => 403,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Repeated(name) => write!(f, "more than one {name} header"),
            Refusal::Origin(origin) => write!(
                f,
                "Origin {origin:?} is not allowed; toolshelf accepts loopback origins and those in [http] allowed_origins"
            ),
            Refusal::Host(host) => write!(
                f,
                "Host {host:?} is not allowed; toolshelf accepts loopback hosts and those in [http] allowed_hosts"
            ),
        }
    }
}

/// The listener's checks, compiled from `[http]`.
#[derive(Debug, Clone)]
pub struct Listener {
    origins: Vec<AllowedOrigin>,
    hosts: Vec<AllowedHost>,
    /// Sessions served at once.
    pub max_sessions: usize,
    /// Seconds without traffic after which a session is closed.
    pub session_idle_secs: u64,
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// `localhost`, `127.0.0.1` or `::1` (with or without brackets), in any case.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host == "127.0.0.1" || host == "::1"
}

/// Splits `host[:port]` (`[v6]:port` for IPv6); the port stays text (`*` is allowed in lists).
fn split_authority(text: &str) -> Option<(String, Option<&str>)> {
    if text.is_empty() || text.contains(['/', '?', '#', '@', ' ']) {
        return None;
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (v6.to_owned(), port)
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h.to_owned(), Some(p)),
            Some(_) => return None,
            None => (text.to_owned(), None),
        }
    };
    if host.is_empty() {
        return None;
    }
    Some((host.to_ascii_lowercase(), port))
}

fn parse_port(text: Option<&str>, wildcard: bool) -> Option<Option<Port>> {
    match text {
        None => Some(None),
        Some("*") if wildcard => Some(Some(Port::Any)),
        Some(p) => p.parse().ok().map(|p| Some(Port::Exact(Some(p)))),
    }
}

fn split_origin(text: &str) -> Option<(String, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let valid = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    valid.then_some((scheme, rest))
}

/// An `Origin` header value (`scheme://host[:port]`); `None` for `null` or anything else.
pub fn parse_origin(text: &str) -> Option<Origin> {
    let (scheme, rest) = split_origin(text)?;
    let (host, port) = split_authority(rest)?;
    let port = match parse_port(port, false)? {
        Some(Port::Exact(p)) => p,
        _ => default_port(&scheme),
    };
    Some(Origin { scheme, host, port })
}

fn parse_allowed_origin(text: &str) -> Result<AllowedOrigin, String> {
    if text == "null" {
        return Ok(AllowedOrigin::Null);
    }
    let bad = || format!("{text:?} is not scheme://host[:port] (the port may be *)");
    let (scheme, rest) = split_origin(text).ok_or_else(bad)?;
    let (host, port) = split_authority(rest).ok_or_else(bad)?;
    let port = parse_port(port, true)
        .ok_or_else(bad)?
        .unwrap_or(Port::Exact(default_port(&scheme)));
    Ok(AllowedOrigin::Tuple { scheme, host, port })
}

fn parse_allowed_host(text: &str) -> Result<AllowedHost, String> {
    let bad = || format!("{text:?} is not a host name, optionally with :port");
    let (host, port) = split_authority(text).ok_or_else(bad)?;
    let port = parse_port(port, true).ok_or_else(bad)?.unwrap_or(Port::Any);
    Ok(AllowedHost { host, port })
}

impl Port {
    fn matches(self, port: Option<u16>) -> bool {
        match self {
            Port::Any => true,
            Port::Exact(p) => p == port,
        }
    }
}

/// An IPv6 address in brackets, as authorities write it.
fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    }
}

fn hook_secs(hooks: &[HookCommand]) -> u64 {
    hooks.iter().map(|h| h.timeout_secs).sum()
}

/// The longest a tool call can go without a message to the client, in seconds: the slowest
/// enabled server's start-up plus its call timeout (or, with `[authoring]` enabled, the script
/// runner's `[scripts] timeout_secs`, which bounds `tool_define` and every tool the model wrote,
/// when that is longer), plus every `pre_call` hook's timeout, plus the longer of the
/// `post_call` and `call_failed` chains.
pub fn longest_silent_call_secs(config: &Config) -> u64 {
    let server = config
        .servers
        .values()
        .filter(|s| s.enabled)
        .map(|s| {
            s.startup_timeout_secs.saturating_add(
                s.call_timeout_secs
                    .unwrap_or(config.execute.call_timeout_secs),
            )
        })
        .max()
        .unwrap_or(0);
    let own = if config.authoring.enabled {
        config.scripts.timeout_secs
    } else {
        0
    };
    let server = server.max(own);
    let hooks = &config.hooks;
    server
        .saturating_add(hook_secs(&hooks.pre_call))
        .saturating_add(hook_secs(&hooks.post_call).max(hook_secs(&hooks.call_failed)))
}

/// `url` fit for a message: its userinfo and query, where tokens go, become `…`
/// (`http://…@host/mcp?…`), and a fragment is dropped to `#…`.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    let host = match authority.rfind('@') {
        Some(at) => format!("…@{}", &authority[at + 1..]),
        None => authority.to_owned(),
    };
    let (path, extra) = tail.split_at(tail.find(['?', '#']).unwrap_or(tail.len()));
    let hidden = match extra.chars().next() {
        Some('?') => "?…",
        Some(_) => "#…",
        None => "",
    };
    format!("{scheme}{host}{path}{hidden}")
}

/// Secrets shorter than this are not searched for in messages: replacing a one- or
/// two-character value everywhere would garble the message and hide nothing.
const MIN_SECRET_CHARS: usize = 4;
/// The shortest query value searched for on its own (the whole query always is).
const MIN_QUERY_VALUE_CHARS: usize = 8;

/// `text` with what it may quote of a server's secrets hidden: `url` (the whole URL, as
/// [`redact_url`] shows it, and its userinfo, query and query values on their own, since library
/// errors quote them) and each of `secrets` (header values; for `Bearer TOKEN` the token too).
pub fn scrub(text: &str, url: Option<&str>, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    let mut needles: Vec<String> = Vec::new();
    if let Some(url) = url {
        out = out.replace(url, &redact_url(url));
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        if let Some((userinfo, _)) = authority.rsplit_once('@') {
            needles.push(userinfo.to_owned());
            needles.extend(userinfo.split_once(':').map(|(_, pw)| pw.to_owned()));
            // Sent as `Authorization: Basic BASE64(user:password)`, percent-escapes decoded, which
            // a server may quote back.
            let decoded = percent_decode(userinfo, false);
            needles.push(base64(&decoded));
            if decoded != userinfo.as_bytes() {
                needles.push(base64(userinfo.as_bytes()));
            }
        }
        if let Some((_, query)) = url.split_once('?') {
            let query = query.split('#').next().unwrap_or_default();
            needles.push(query.to_owned());
            // A query value on its own only when it is long enough to be a token:
            // `transport=http` must not hide every "http" of the message.
            needles.extend(
                query
                    .split('&')
                    .filter_map(|kv| kv.split_once('=').map(|(_, v)| v.to_owned()))
                    .filter(|v| v.chars().count() >= MIN_QUERY_VALUE_CHARS),
            );
        }
    }
    for secret in secrets {
        needles.push(secret.clone());
        needles.extend(
            secret
                .split_once(' ')
                .map(|(_, token)| token.trim().to_owned()),
        );
    }
    needles.retain(|n| n.chars().count() >= MIN_SECRET_CHARS);
    needles.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for needle in needles {
        out = out.replace(&needle, "…");
    }
    out
}

/// `text` with its `%XX` escapes decoded (a `%` not followed by two hex digits is kept), and
/// with `plus_is_space` a `+` read as a space (a form-encoded query value).
pub fn percent_decode(text: &str, plus_is_space: bool) -> Vec<u8> {
    let bytes = text.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (
            bytes[i],
            bytes.get(i + 1).and_then(|&b| hex(b)),
            bytes.get(i + 2).and_then(|&b| hex(b)),
        ) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b'+', _, _) if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// Standard base64, padded: the form HTTP Basic credentials take.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

impl Listener {
    /// Checks `[http]` of `config`; errors name the key.
    pub fn new(config: &Config) -> Result<Self, String> {
        let http = &config.http;
        if http.max_sessions == 0 {
            return Err("[http] max_sessions must be at least 1".into());
        }
        let needed = longest_silent_call_secs(config).saturating_add(IDLE_MARGIN_SECS);
        let session_idle_secs = match http.session_idle_secs {
            None => DEFAULT_SESSION_IDLE_SECS.max(needed),
            Some(secs) if secs < needed => {
                return Err(format!(
                    "[http] session_idle_secs = {secs} is too short: a tool call can run {}s without a message to the client (start-up, hooks and call timeouts), and a session idle that long would be closed during it; set at least {needed}",
                    needed - IDLE_MARGIN_SECS
                ));
            }
            Some(secs) => secs,
        };
        let origins = http
            .allowed_origins
            .iter()
            .enumerate()
            .map(|(i, o)| {
                parse_allowed_origin(o).map_err(|e| format!("[http] allowed_origins[{i}]: {e}"))
            })
            .collect::<Result<_, _>>()?;
        let hosts = http
            .allowed_hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                parse_allowed_host(h).map_err(|e| format!("[http] allowed_hosts[{i}]: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            origins,
            hosts,
            max_sessions: http.max_sessions,
            session_idle_secs,
        })
    }

    /// Whether a request with this `Origin` header may be served: a loopback origin over http or
    /// https, or one that `allowed_origins` lists.
    pub fn origin_allowed(&self, header: &str) -> bool {
        let Some(origin) = parse_origin(header) else {
            return header == "null" && self.origins.contains(&AllowedOrigin::Null);
        };
        if matches!(origin.scheme.as_str(), "http" | "https") && is_loopback(&origin.host) {
            return true;
        }
        self.origins.iter().any(|a| match a {
            AllowedOrigin::Null => false,
            AllowedOrigin::Tuple { scheme, host, port } => {
                *scheme == origin.scheme && *host == origin.host && port.matches(origin.port)
            }
        })
    }

    /// Whether a request with this `Host` header may be served: a loopback host, or one that
    /// `allowed_hosts` lists.
    pub fn host_allowed(&self, header: &str) -> bool {
        let Some((host, port)) = split_authority(header) else {
            return false;
        };
        let port = match port.map(str::parse::<u16>) {
            None => None,
            Some(Ok(p)) => Some(p),
            Some(Err(_)) => return false,
        };
        is_loopback(&host)
            || self
                .hosts
                .iter()
                .any(|a| a.host == host && a.port.matches(port))
    }

    /// Whether a request with these `Host` and `Origin` header values (every value of each, as
    /// received; none when absent) may be served. Repeated headers are refused first, then the
    /// origin, then the host.
    pub fn check(&self, hosts: &[String], origins: &[String]) -> Result<(), Refusal> {
        if hosts.len() > 1 {
            return Err(Refusal::Repeated("Host"));
        }
        if origins.len() > 1 {
            return Err(Refusal::Repeated("Origin"));
        }
        if let Some(origin) = origins.first()
            && !self.origin_allowed(origin)
        {
            return Err(Refusal::Origin(origin.clone()));
        }
        if let Some(host) = hosts.first()
            && !self.host_allowed(host)
        {
            return Err(Refusal::Host(host.clone()));
        }
        Ok(())
    }

    /// Every accepted origin in rmcp's `allowed_origins` syntax (ports explicit), loopback ones
    /// included, for rmcp's own check behind this one.
    pub fn rmcp_origins(&self) -> Vec<String> {
        let mut out: Vec<String> = ["http", "https"]
            .iter()
            .flat_map(|s| ["localhost", "127.0.0.1", "[::1]"].map(|h| format!("{s}://{h}:*")))
            .collect();
        for o in &self.origins {
            out.push(match o {
                AllowedOrigin::Null => "null".into(),
                AllowedOrigin::Tuple { scheme, host, port } => {
                    let host = bracketed(host);
                    match port {
                        Port::Any => format!("{scheme}://{host}:*"),
                        Port::Exact(Some(p)) => format!("{scheme}://{host}:{p}"),
                        Port::Exact(None) => format!("{scheme}://{host}"),
                    }
                }
            });
        }
        out
    }

    /// Every accepted host in rmcp's `allowed_hosts` syntax, loopback ones included.
    pub fn rmcp_hosts(&self) -> Vec<String> {
        let mut out: Vec<String> = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
        for h in &self.hosts {
            out.push(match h.port {
                Port::Exact(Some(p)) => format!("{}:{p}", bracketed(&h.host)),
                _ => h.host.clone(),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_userinfo_or_query() {
        for (url, shown) in [
            (
                "http://127.0.0.1:9/mcp?api_key=sk-LEAKME",
                "http://127.0.0.1:9/mcp?…",
            ),
            ("https://u:pw@h.example/x#frag", "https://…@h.example/x#…"),
            ("https://h.example?t=1", "https://h.example?…"),
            ("http://127.0.0.1:9/mcp", "http://127.0.0.1:9/mcp"),
        ] {
            assert_eq!(redact_url(url), shown);
        }
    }

    #[test]
    fn scrub_hides_urls_query_values_and_header_values() {
        let url = "http://me:hunter22@127.0.0.1:9/mcp?api_key=sk-LEAKME&v=2";
        let text = format!(
            "initialize at {url} failed: url: \"http://127.0.0.1:9/mcp?api_key=sk-LEAKME&v=2\", \
             password hunter22, token sk-LEAKME, header Bearer ghp_SECRET, bare ghp_SECRET"
        );
        let out = scrub(&text, Some(url), &["Bearer ghp_SECRET".to_owned()]);
        for secret in ["sk-LEAKME", "hunter22", "ghp_SECRET"] {
            assert!(!out.contains(secret), "{out}");
        }
        assert!(
            out.contains("initialize at http://…@127.0.0.1:9/mcp?… failed"),
            "{out}"
        );
        // Userinfo is sent as Basic credentials, which a server may quote back: hidden too,
        // percent-escapes decoded as they are sent.
        let url = "http://alice:hunter2pass@127.0.0.1:9/mcp";
        let out = scrub(
            "rejected: auth=[Basic YWxpY2U6aHVudGVyMnBhc3M=]",
            Some(url),
            &[],
        );
        assert_eq!(out, "rejected: auth=[Basic …]");
        let url = "http://a%40b:p%3Ass@127.0.0.1:9/mcp";
        let out = scrub("auth Basic YUBiOnA6c3M= sent", Some(url), &[]);
        assert_eq!(out, "auth Basic … sent");
        assert_eq!(
            [
                base64(b""),
                base64(b"f"),
                base64(b"fo"),
                base64(b"foo"),
                base64(b"foob")
            ],
            ["", "Zg==", "Zm8=", "Zm9v", "Zm9vYg=="]
        );
        // A short query value is not a token: the words it spells stay.
        let url = "https://h.example/mcp?transport=http";
        let out = scrub("connecting over http failed", Some(url), &[]);
        assert_eq!(out, "connecting over http failed");
    }

    fn listener(http: &str) -> Result<Listener, String> {
        let config = Config::from_toml_str(http, "test.toml").map_err(|e| e.to_string())?;
        Listener::new(&config)
    }

    #[test]
    fn loopback_origins_pass_and_others_need_listing() {
        let l = listener(
            "[http]\nallowed_origins = [\"https://app.example.com\", \"http://dev.example:*\", \"null\"]",
        )
        .expect("valid");
        for ok in [
            "http://localhost:5173",
            "http://127.0.0.1",
            "https://[::1]:8443",
            "http://LOCALHOST:3000",
            "https://app.example.com",
            "https://app.example.com:443",
            "http://dev.example:1234",
            "null",
        ] {
            assert!(l.origin_allowed(ok), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "https://app.example.com:8443",
            "http://app.example.com",
            "http://localhost.evil.example",
            "ftp://localhost",
            "http://127.0.0.1/path",
            "localhost",
            "",
        ] {
            assert!(!l.origin_allowed(bad), "{bad}");
        }
        let strict = listener("").expect("valid");
        assert!(!strict.origin_allowed("null"));
        assert!(!strict.origin_allowed("https://app.example.com"));
    }

    #[test]
    fn hosts_are_loopback_or_listed() {
        let l = listener("[http]\nallowed_hosts = [\"gw.internal\", \"box:8848\"]").expect("valid");
        for ok in [
            "localhost:8848",
            "127.0.0.1",
            "[::1]:1",
            "gw.internal:9",
            "box:8848",
        ] {
            assert!(l.host_allowed(ok), "{ok}");
        }
        for bad in ["evil.example", "box:9", "box", "gw.internal:x", "::1", ""] {
            assert!(!l.host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn a_request_is_checked_for_repeats_then_origin_then_host() {
        let l = listener("[http]\nallowed_hosts = [\"gw.internal\"]").expect("valid");
        let v = |xs: &[&str]| xs.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        assert_eq!(l.check(&v(&["gw.internal:9"]), &v(&[])), Ok(()));
        assert_eq!(l.check(&v(&[]), &v(&["http://localhost:3000"])), Ok(()));
        let refused = l
            .check(
                &v(&["evil.example:8849"]),
                &v(&["http://evil.example:8849"]),
            )
            .expect_err("foreign");
        assert_eq!(refused.status(), 403);
        assert_eq!(
            refused.to_string(),
            "Origin \"http://evil.example:8849\" is not allowed; toolshelf accepts loopback origins and those in [http] allowed_origins"
        );
        assert_eq!(
            l.check(&v(&["evil.example:8849"]), &v(&[]))
                .expect_err("foreign host")
                .to_string(),
            "Host \"evil.example:8849\" is not allowed; toolshelf accepts loopback hosts and those in [http] allowed_hosts"
        );
        let twice = l
            .check(&v(&["localhost", "localhost"]), &v(&[]))
            .expect_err("twice");
        assert_eq!(
            (twice.status(), twice.to_string()),
            (400, "more than one Host header".to_owned())
        );
    }

    #[test]
    fn idle_time_outlasts_the_longest_call() {
        let base = "[servers.a]\ncommand = \"x\"\nstartup_timeout_secs = 20\ncall_timeout_secs = 100\n\
                    [[hooks.pre_call]]\ncommand = \"h\"\ntimeout_secs = 7\n\
                    [[hooks.post_call]]\ncommand = \"h\"\ntimeout_secs = 3\n\
                    [[hooks.call_failed]]\ncommand = \"h\"\ntimeout_secs = 4\n";
        let config = Config::from_toml_str(base, "t").expect("config");
        assert_eq!(longest_silent_call_secs(&config), 20 + 100 + 7 + 4);
        assert_eq!(
            listener(base).expect("valid").session_idle_secs,
            DEFAULT_SESSION_IDLE_SECS
        );
        let slow = base.replace("call_timeout_secs = 100", "call_timeout_secs = 3600");
        assert_eq!(
            listener(&slow).expect("valid").session_idle_secs,
            20 + 3600 + 7 + 4 + IDLE_MARGIN_SECS
        );
        // Tools the model writes run as long as the script runner allows.
        let authoring = format!(
            "{base}[authoring]\nenabled = true\n[scripts]\ntimeout_secs = 400\n[http]\nsession_idle_secs = 200\n"
        );
        assert!(
            listener(&authoring)
                .expect_err("shorter than a model-written tool may run")
                .ends_with(&format!("set at least {}", 400 + 7 + 4 + IDLE_MARGIN_SECS)),
        );
        let e = listener(&format!("{base}[http]\nsession_idle_secs = 60\n")).expect_err("short");
        assert!(
            e.starts_with("[http] session_idle_secs = 60 is too short: a tool call can run 131s")
                && e.ends_with("set at least 136"),
            "{e}"
        );
        assert_eq!(
            listener(&format!("{base}[http]\nsession_idle_secs = 136\n"))
                .expect("valid")
                .session_idle_secs,
            136
        );
    }

    #[test]
    fn bad_entries_name_their_key() {
        for (text, expected) in [
            ("max_sessions = 0", "[http] max_sessions must be at least 1"),
            (
                "allowed_origins = [\"localhost:3000\"]",
                "[http] allowed_origins[0]: \"localhost:3000\" is not scheme://host[:port]",
            ),
            (
                "allowed_origins = [\"https://a.example/x\"]",
                "[http] allowed_origins[0]",
            ),
            (
                "allowed_hosts = [\"ok\", \"http://h\"]",
                "[http] allowed_hosts[1]: \"http://h\" is not a host name",
            ),
            ("sesion_idle_secs = 1", "sesion_idle_secs"),
        ] {
            let e = listener(&format!("[http]\n{text}")).expect_err(text);
            assert!(e.contains(expected), "{e:?} lacks {expected:?}");
        }
        // Compiling the configuration checks [http] too.
        let config = Config::from_toml_str("[http]\nmax_sessions = 0", "test.toml").expect("shape");
        let e = crate::Compiled::new(config, "test.toml", None)
            .expect_err("invalid")
            .to_string();
        assert_eq!(
            e,
            "test.toml: line 2: [http] max_sessions must be at least 1"
        );
    }
}

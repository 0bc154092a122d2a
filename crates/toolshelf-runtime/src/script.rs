//! Running script tools: the environment a script's `run(params)` gets, and the limits it runs
//! under.
//!
//! The environment is the description-template one ([`toolshelf_core::template`]) with three
//! stubs made real: `time` (`time.now()`, seconds since the Unix epoch as a float;
//! `time.iso()`, the UTC time as `YYYY-MM-DDTHH:MM:SSZ`), `random` (`random.random()` in
//! [0, 1), `random.randint(a, b)` with both ends included) and `http` (`http.get(url,
//! headers={})`, `http.post(url, body="", headers={})`, each returning `{"status", "headers",
//! "body"}`; the response's `headers` are a dict of text, see `response_headers`). `uuid`,
//! `fs`, `exec` and `env` stay stubs. `http` reaches only the hosts of `[scripts] allow_hosts`:
//! any other URL is refused before a connection is made, redirects are not followed, and a
//! response body is cut at [`MAX_BODY_BYTES`]. A script's `headers` may not set `Host` (which
//! would reach a virtual host the allow-list never named) or a header that frames or carries the
//! request ([`RESERVED_HEADERS`], `Proxy-*`): the request is refused naming the header, as it is
//! for a name or value HTTP does not allow (a space in a name, a CR or LF in a value).
//!
//! A run is meant to happen in a process of its own (see `toolshelf`'s runner): the Starlark
//! limits (steps, heap, call depth) stop a script with an error naming the limit, and the
//! process's address-space limit and wall-clock timeout stop what Starlark cannot see (one huge
//! allocation, a slow host), without taking the caller down.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, SET_COOKIE};
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};
use starlark::environment::{Globals, GlobalsBuilder};
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::none::NoneType;
use toolshelf_core::template::{self, Limits, SessionValues};

/// The most bytes of a response body a script receives.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Headers the HTTP client sets and a script may not (compared without case), besides every
/// `Proxy-*` header: `Host` comes from the URL the allow-list checked, the others frame or carry
/// the request.
pub const RESERVED_HEADERS: [&str; 8] = [
    "host",
    "connection",
    "content-length",
    "transfer-encoding",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
];

/// Whether a script may set the header `name`.
fn settable(name: &str) -> bool {
    let lower = name.trim().to_ascii_lowercase();
    !(RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("proxy-"))
}

/// What the runner is asked to do with a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Job {
    /// Read its definition in the template environment: `{"description", "schema"}`.
    Define,
    /// Read the top level of a script the model wrote (`tool_define`, which gives the
    /// description and schema) in the template environment, as `Define` reads a script tool's:
    /// `null`, or the error that refuses the definition.
    #[serde(rename = "top_level")]
    TopLevel,
    /// Call its `run(params)` in the script environment.
    Run,
}

/// One run of a script tool, as the runner receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// Define or run.
    pub job: Job,
    /// Names the tool in errors: `script tool "mcp__scripts__x" (x.star)`.
    pub owner: String,
    /// The script's source.
    pub source: String,
    /// The call's params.
    pub params: Json,
    /// `pkg` values.
    pub pkg: BTreeMap<String, Json>,
    /// `session` values.
    pub session: SessionValues,
    /// Function calls and loop iterations.
    pub max_steps: u64,
    /// Bytes of Starlark heap.
    pub max_heap_bytes: usize,
    /// Nested calls.
    pub max_call_depth: usize,
    /// `[scripts] allow_hosts`, or `[authoring] allow_hosts` for a tool the model wrote.
    pub allow_hosts: Vec<String>,
    /// The setting `allow_hosts` comes from, for errors.
    #[serde(default = "scripts_hosts")]
    pub allow_hosts_setting: String,
    /// Seconds one HTTP request may take.
    pub http_timeout_secs: u64,
    /// Seconds the whole run may take (`[scripts] timeout_secs`): the runner ends itself past
    /// them, even when nothing is left to kill it. 0: no limit of its own.
    #[serde(default)]
    pub timeout_secs: u64,
}

/// What the runner answers: `{"ok": RESULT}` or `{"error": TEXT}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunResponse {
    /// `run`'s value.
    Ok(Json),
    /// Why the run failed, naming the tool, the line and the limit where one was reached.
    Error(String),
}

fn scripts_hosts() -> String {
    "[scripts] allow_hosts".to_owned()
}

/// The HTTP policy of the run on this thread.
#[derive(Debug, Clone, Default)]
struct HttpPolicy {
    allow: Vec<String>,
    setting: String,
    timeout: Duration,
}

thread_local! {
    static POLICY: RefCell<HttpPolicy> = RefCell::new(HttpPolicy::default());
}

/// Runs `request` on this thread.
pub fn run(request: &RunRequest) -> RunResponse {
    POLICY.with(|p| {
        *p.borrow_mut() = HttpPolicy {
            allow: request.allow_hosts.clone(),
            setting: request.allow_hosts_setting.clone(),
            timeout: Duration::from_secs(request.http_timeout_secs.max(1)),
        }
    });
    let limits = Limits {
        max_steps: request.max_steps,
        max_heap_bytes: request.max_heap_bytes,
        max_call_depth: request.max_call_depth,
    };
    if request.job == Job::Define {
        let define = |pkg: &BTreeMap<String, Json>| {
            template::script_definition(&request.source, &request.owner, pkg, &request.session)
        };
        // The description may read pkg.params and pkg.required, which come from the schema the
        // same script sets: a first pass finds the schema, a second renders with them.
        let defined = define(&request.pkg).and_then(|first| {
            let mut pkg = request.pkg.clone();
            for (key, field) in [("params", "properties"), ("required", "required")] {
                let names = crate::scripts::schema_names(&first.schema, field);
                pkg.insert(key.to_owned(), json!(names));
            }
            define(&pkg)
        });
        return match defined {
            Ok(d) => RunResponse::Ok(json!({"description": d.description, "schema": d.schema})),
            Err(e) => RunResponse::Error(e.to_string()),
        };
    }
    if request.job == Job::TopLevel {
        return match template::script_top_level(
            &request.source,
            &request.owner,
            &request.pkg,
            &request.session,
        ) {
            Ok(()) => RunResponse::Ok(Json::Null),
            Err(e) => RunResponse::Error(e.to_string()),
        };
    }
    match template::run_script(
        &request.source,
        &request.owner,
        &environment(),
        &request.pkg,
        &request.session,
        &request.params,
        limits,
    ) {
        Ok(v) => RunResponse::Ok(v),
        // The stubs' own words are about descriptions; a run is told what it has instead.
        Err(e) => match &e.kind {
            template::TemplateErrorKind::Stub(name) => RunResponse::Error(format!(
                "{}: {}{}: uses {name}, which a script's run cannot: of the outside world it has time, random and http only",
                e.owner,
                e.what,
                e.line.map(|l| format!(" line {l}")).unwrap_or_default()
            )),
            _ => RunResponse::Error(e.to_string()),
        },
    }
}

/// The environment scripts run in.
pub fn environment() -> Globals {
    template::environment(|b| {
        b.namespace("time", time_module);
        b.namespace("random", random_module);
        b.namespace("http", http_module);
    })
}

/// Whether `url` may be requested under `allow`: its host (any port) or `host:port` is listed.
pub fn allowed(url: &reqwest::Url, allow: &[String]) -> Result<(), String> {
    allowed_by(url, allow, "[scripts] allow_hosts")
}

/// [`allowed`], naming the setting the list is (`[scripts] allow_hosts`) in the refusal.
pub fn allowed_by(url: &reqwest::Url, allow: &[String], setting: &str) -> Result<(), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{url} is not an http:// or https:// URL; scripts reach nothing else"
        ));
    }
    let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
    let port = url.port_or_known_default().unwrap_or(0);
    let with_port = format!("{host}:{port}");
    if allow
        .iter()
        .map(|a| a.to_ascii_lowercase())
        .any(|a| a == host || a == with_port)
    {
        return Ok(());
    }
    Err(format!(
        "host {with_port} is not in {setting} ({})",
        if allow.is_empty() {
            "empty: scripts may reach no host".to_owned()
        } else {
            allow.join(", ")
        }
    ))
}

/// A script's `headers` argument as (name, value) pairs; what is no string is named by its
/// kind, never quoted (a header may hold a secret).
fn headers_of(method: &str, v: Value) -> anyhow::Result<Vec<(String, String)>> {
    if v.is_none() {
        return Ok(Vec::new());
    }
    let kind = |j: &Json| match j {
        Json::Null => "None",
        Json::Bool(_) => "a bool",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a dict",
    };
    match v.to_json_value()? {
        Json::Object(m) => m
            .into_iter()
            .map(|(k, v)| match v {
                Json::String(s) => Ok((k, s)),
                other => Err(anyhow::anyhow!(
                    "http.{method}: header {k:?} must be a string, found {}",
                    kind(&other)
                )),
            })
            .collect(),
        other => Err(anyhow::anyhow!(
            "http.{method}: headers must be a dict of strings, found {}",
            kind(&other)
        )),
    }
}

/// `name: value` as the HTTP client takes them, or an error naming the header and what is wrong
/// with it (never quoting the value, which may be a secret). A value is sent as its UTF-8 bytes.
fn checked_header(
    method: &str,
    name: &str,
    value: &str,
) -> anyhow::Result<(HeaderName, HeaderValue)> {
    let name_ok = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
        anyhow::anyhow!(
            "http.{method}: header {name:?} is not a valid header name: a name is ASCII letters, digits and !#$%&'*+-.^_`|~ only"
        )
    })?;
    let value_ok = HeaderValue::from_bytes(value.as_bytes()).map_err(|_| {
        let why = if value.contains(['\r', '\n']) {
            "a control character (CR/LF): a value is one line".to_owned()
        } else {
            let c = value
                .chars()
                .find(|c| c.is_ascii_control() && *c != '\t')
                .unwrap_or_default();
            format!("a control character (U+{:04X})", u32::from(c))
        };
        anyhow::anyhow!("http.{method}: header {name:?} has a value with {why}")
    })?;
    Ok((name_ok, value_ok))
}

/// A response's headers as a script sees them: a dict from lower-case name to text, in the
/// order the names first arrived. A name sent more than once has its values joined in order
/// with ", ", as RFC 9110 combines field lines, except `set-cookie`, whose values may hold
/// commas themselves (`Expires=Wed, 21 Oct ...`) and are joined with "\n" (never part of a
/// value). A value that is not UTF-8 is read as Latin-1 (ISO-8859-1: each byte the code point of
/// the same number), as HTTP historically meant.
fn response_headers(headers: &HeaderMap) -> serde_json::Map<String, Json> {
    let text = |bytes: &[u8]| match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => bytes.iter().map(|&b| char::from(b)).collect(),
    };
    headers
        .keys()
        .map(|name| {
            let sep = if name == SET_COOKIE { "\n" } else { ", " };
            let values: Vec<String> = headers
                .get_all(name)
                .iter()
                .map(|v| text(v.as_bytes()))
                .collect();
            (name.as_str().to_owned(), Json::String(values.join(sep)))
        })
        .collect()
}

fn request(method: &str, url: &str, body: Option<&str>, headers: Value) -> anyhow::Result<Json> {
    let policy = POLICY.with(|p| p.borrow().clone());
    let parsed =
        reqwest::Url::parse(url).map_err(|e| anyhow::anyhow!("http.{method}: {url:?}: {e}"))?;
    allowed_by(&parsed, &policy.allow, &policy.setting)
        .map_err(|e| anyhow::anyhow!("http.{method}: {e}"))?;
    let headers = headers_of(method, headers)?;
    if let Some((name, _)) = headers.iter().find(|(k, _)| !settable(k)) {
        return Err(anyhow::anyhow!(
            "http.{method}: a script cannot set the header {name:?}: the HTTP client sets Host (from the URL), Connection, Content-Length, Transfer-Encoding, Keep-Alive, TE, Trailer, Upgrade and Proxy-* itself; leave it out"
        ));
    }
    let headers = headers
        .into_iter()
        .map(|(k, v)| checked_header(method, &k, &v))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let client = reqwest::blocking::Client::builder()
        .timeout(policy.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .map_err(|e| anyhow::anyhow!("http.{method}: {e}"))?;
    let mut req = match body {
        None => client.get(parsed),
        Some(b) => client.post(parsed).body(b.to_owned()),
    };
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let resp = req
        .send()
        .map_err(|e| anyhow::anyhow!("http.{method} {url}: {e}"))?;
    let status = resp.status().as_u16();
    let hs = response_headers(resp.headers());
    let mut bytes = Vec::new();
    resp.take(MAX_BODY_BYTES as u64)
        .read_to_end(&mut bytes)
        .map_err(|e| anyhow::anyhow!("http.{method} {url}: reading the body: {e}"))?;
    Ok(json!({
        "status": status,
        "headers": hs,
        "body": String::from_utf8_lossy(&bytes),
    }))
}

#[starlark_module]
fn http_module(builder: &mut GlobalsBuilder) {
    fn get<'v>(
        url: &str,
        #[starlark(default = NoneType)] headers: Value<'v>,
    ) -> anyhow::Result<Json> {
        request("get", url, None, headers)
    }

    fn post<'v>(
        url: &str,
        #[starlark(default = "")] body: &str,
        #[starlark(default = NoneType)] headers: Value<'v>,
    ) -> anyhow::Result<Json> {
        request("post", url, Some(body), headers)
    }
}

fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// `YYYY-MM-DDTHH:MM:SSZ` for `secs` since the Unix epoch (proleptic Gregorian, UTC).
pub fn iso(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[starlark_module]
fn time_module(builder: &mut GlobalsBuilder) {
    fn now() -> anyhow::Result<f64> {
        Ok(since_epoch().as_secs_f64())
    }

    fn iso() -> anyhow::Result<String> {
        Ok(self::iso(since_epoch().as_secs()))
    }
}

/// 64 random bits, from the standard library's randomly keyed hasher.
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(since_epoch().as_nanos());
    h.finish()
}

#[starlark_module]
fn random_module(builder: &mut GlobalsBuilder) {
    fn random() -> anyhow::Result<f64> {
        Ok((random_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }

    fn randint(a: i32, b: i32) -> anyhow::Result<i32> {
        if a > b {
            return Err(anyhow::anyhow!("randint: {a} > {b}"));
        }
        let span = (i64::from(b) - i64::from(a) + 1) as u64;
        Ok((i64::from(a) + (random_u64() % span) as i64) as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(source: &str) -> RunRequest {
        RunRequest {
            job: Job::Run,
            owner: "script tool \"t\"".into(),
            source: source.into(),
            params: json!({"word": "hi"}),
            pkg: BTreeMap::new(),
            session: SessionValues::default(),
            max_steps: 100_000,
            max_heap_bytes: 8 << 20,
            max_call_depth: 50,
            allow_hosts: vec!["127.0.0.1:9".into()],
            allow_hosts_setting: scripts_hosts(),
            http_timeout_secs: 2,
            timeout_secs: 0,
        }
    }

    #[test]
    fn run_gets_the_params_and_its_value_is_the_result() {
        let r = run(&req(
            "description = 'x'\nschema = {}\ndef run(params):\n    return {'echo': params['word'], 'n': 2}\n",
        ));
        assert_eq!(r, RunResponse::Ok(json!({"echo": "hi", "n": 2})));
        let r = run(&req(
            "def run(params):\n    return part('a', params['word'])\n",
        ));
        assert_eq!(r, RunResponse::Ok(json!("a hi")));
    }

    #[test]
    fn a_definition_is_read_in_the_template_environment() {
        let mut r = req(
            "description = part('Echo', pkg.x)\nschema = {'properties': {'word': {'type': 'string'}}}\ndef run(params):\n    return time.now()\n",
        );
        r.job = Job::Define;
        r.pkg.insert("x".into(), json!("words"));
        assert_eq!(
            run(&r),
            RunResponse::Ok(json!({
                "description": "Echo words",
                "schema": {"properties": {"word": {"type": "string"}}, "type": "object"}
            }))
        );
        // The top level is as pure as a template: time is a stub there.
        let mut r =
            req("t = time.now()\ndescription = 'x'\nschema = {}\ndef run(p):\n    return 1\n");
        r.job = Job::Define;
        let RunResponse::Error(e) = run(&r) else {
            panic!("defined")
        };
        assert!(e.contains("script line 1: uses time,"), "{e}");
        let mut r = req("description = 'x'\ndef run(p):\n    return 1\n");
        r.job = Job::Define;
        let RunResponse::Error(e) = run(&r) else {
            panic!("defined")
        };
        assert!(e.contains("a script must set `schema"), "{e}");
    }

    /// A script the model wrote has its top level read as a script tool's is, before it is
    /// defined: pure, as a description template, and what it may not do is said in a tool's
    /// terms. Its description and schema come from `tool_define`, so it needs neither.
    #[test]
    fn a_model_scripts_top_level_is_read_as_a_script_tools_is() {
        let top = |source: &str| {
            let mut r = req(source);
            r.job = Job::TopLevel;
            r.owner = "tool_define \"t\"".into();
            run(&r)
        };
        assert_eq!(
            top("n = len('ab')\ndef run(params):\n    return time.now() + n\n"),
            RunResponse::Ok(Json::Null)
        );
        for (source, says) in [
            (
                "x = time.now()\ndef run(params):\n    return 1\n",
                "tool_define \"t\": script line 1: uses time, which a script's top level cannot: it is read once, when the tool is defined, and is as pure as a description template (call time inside run, which has it)",
            ),
            (
                "x = turn.number\ndef run(params):\n    return 1\n",
                "tool_define \"t\": script line 1: reads turn.number, a per-turn value, which a tool's script cannot read: a tool is defined once and called from any turn (take what a call needs as a param; pkg.* and session.* hold the fixed values)",
            ),
            (
                "fail(\"boom\")\ndef run(params):\n    return 1\n",
                "tool_define \"t\": script line 1: failed: fail: boom",
            ),
            (
                "def run(params):\n    return 1\nrun = 5\n",
                "tool_define \"t\": script line 3: failed: `run` is an int, not a function: a script must define `def run(params): ...` and not bind `run` to anything else",
            ),
        ] {
            assert_eq!(top(source), RunResponse::Error(says.into()), "{source}");
        }
    }

    #[test]
    fn time_and_random_are_real_here() {
        let r = run(&req(
            "def run(params):\n    t = time.now()\n    x = random.random()\n    n = random.randint(3, 3)\n    return [t > 1.0e9, 0 <= x and x < 1, n, len(time.iso())]\n",
        ));
        assert_eq!(r, RunResponse::Ok(json!([true, true, 3, 20])));
    }

    #[test]
    fn a_definition_reads_the_params_of_its_own_schema() {
        let mut r = req(
            "schema = {'properties': {'word': {}, 'n': {}}, 'required': ['word']}\ndescription = 'Takes ' + ', '.join(pkg.params) + '; needs ' + ', '.join(pkg.required)\ndef run(params):\n    return 1\n",
        );
        r.job = Job::Define;
        r.pkg = BTreeMap::from([
            ("params".to_owned(), json!([])),
            ("required".to_owned(), json!([])),
        ]);
        let RunResponse::Ok(v) = run(&r) else {
            panic!("defines")
        };
        assert_eq!(v["description"], "Takes n, word; needs word");
    }

    #[test]
    fn a_result_json_cannot_hold_is_an_error_not_null() {
        for value in [
            "float('nan')",
            "{'a': [1, float('-inf')]}",
            "(float('inf'),)",
        ] {
            let r = run(&req(&format!("def run(params):\n    return {value}\n")));
            let RunResponse::Error(e) = r else {
                panic!("{value}: {r:?}")
            };
            assert!(e.contains("NaN or infinite"), "{value}: {e}");
        }
        assert_eq!(
            run(&req("def run(params):\n    return [1.5, None]\n")),
            RunResponse::Ok(json!([1.5, null]))
        );
    }

    #[test]
    fn the_other_stubs_stay_stubs() {
        for stub in ["uuid", "fs", "exec", "env"] {
            let r = run(&req(&format!("def run(params):\n    return {stub}()\n")));
            let RunResponse::Error(e) = r else {
                panic!("{stub} ran")
            };
            assert!(
                e.contains(&format!(
                    "script line 2: uses {stub}, which a script's run cannot: of the outside world it has time, random and http only"
                )),
                "{stub}: {e}"
            );
        }
    }

    #[test]
    fn limits_are_named() {
        for (source, says) in [
            (
                "def run(params):\n    n = 0\n    for i in range(1000000000):\n        n += i\n    return n\n",
                "the CPU-step limit of 100000 function calls and loop iterations was reached",
            ),
            (
                "def f(n):\n    return f(n + 1)\ndef run(params):\n    return f(0)\n",
                "the call-depth limit of 50 nested calls was reached",
            ),
            (
                "def run(params):\n    x = []\n    for i in range(50000):\n        x.append('y' * 1000 + str(i))\n    return len(x)\n",
                "the memory limit of 8388608 bytes of Starlark heap was reached",
            ),
            (
                "def run(params):\n    return http.get('http://example.com/x')\n",
                "http.get: host example.com:80 is not in [scripts] allow_hosts (127.0.0.1:9)",
            ),
        ] {
            let RunResponse::Error(e) = run(&req(source)) else {
                panic!("{source} ran")
            };
            assert!(e.contains(says), "{source}: {e}");
            assert!(e.starts_with("script tool \"t\": script"), "{e}");
            eprintln!("{e}");
        }
    }

    #[test]
    fn a_script_cannot_set_host_or_hop_by_hop_headers() {
        for name in [
            "Host",
            "host",
            "Connection",
            "Transfer-Encoding",
            "content-length",
            "Proxy-Authorization",
            "TE",
            "Upgrade",
        ] {
            let source = format!(
                "def run(params):\n    return http.get('http://127.0.0.1:9/', headers={{'Accept': 'x', {name:?}: 'admin.internal'}})\n"
            );
            let RunResponse::Error(e) = run(&req(&source)) else {
                panic!("{name}: sent")
            };
            assert!(
                e.contains(&format!(
                    "http.get: a script cannot set the header {name:?}: the HTTP client sets Host"
                )) && e.contains("leave it out"),
                "{name}: {e}"
            );
        }
        // Other headers are the script's; the request is made (and here finds no server).
        let RunResponse::Error(e) = run(&req(
            "def run(params):\n    return http.post('http://127.0.0.1:9/', body='x', headers={'Authorization': 'Bearer t', 'X-Host': 'y'})\n",
        )) else {
            panic!("no server listens on port 9")
        };
        assert!(!e.contains("cannot set the header"), "{e}");
    }

    #[test]
    fn the_allow_list_matches_host_and_port() {
        let u = |s: &str| reqwest::Url::parse(s).expect("url");
        let allow = ["api.example.com".to_owned(), "127.0.0.1:8080".to_owned()];
        assert!(allowed(&u("https://API.example.com/x"), &allow).is_ok());
        assert!(allowed(&u("http://127.0.0.1:8080/"), &allow).is_ok());
        assert!(allowed(&u("http://127.0.0.1:8081/"), &allow).is_err());
        assert!(allowed(&u("http://api.example.com.evil.org/"), &allow).is_err());
        assert!(allowed(&u("file:///etc/passwd"), &allow).is_err());
    }

    #[test]
    fn iso_dates() {
        assert_eq!(iso(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(iso(1_764_547_199), "2025-11-30T23:59:59Z");
    }
}

//! End-to-end tests of how `toolshelf proxy` finds a request's session from its headers, with
//! plain HTTP requests (curl, which sends a header twice when asked to) against the scripted
//! model API.

mod common;

use std::process::Command;

use common::{ProxyProc, Scratch, Upstream, chat_tools, tools};
use serde_json::{Value, json};

/// POSTs `body` to `url` with each of `headers` as given (a name twice is sent twice): the
/// status and the body as JSON.
fn curl_post(url: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-X", "POST"])
        .args(["-H", "content-type: application/json"])
        .args([
            "-H",
            "x-api-key: test-key",
            "-H",
            "anthropic-version: 2023-06-01",
        ]);
    for (name, value) in headers {
        cmd.args(["-H", &format!("{name}: {value}")]);
    }
    let out = cmd
        .args(["--data-binary", &body.to_string(), url])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("the status after the body");
    let json = serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()));
    (code.trim().parse().expect("a status"), json)
}

/// Two `x-toolshelf-session` headers (or two `x-claude-code-session-id`) name two sessions, or
/// one twice: the request is refused with a 400 in its API's error shape naming the header, as
/// two `Host` headers are, rather than served in whichever session the first names.
#[test]
fn two_session_headers_on_one_request_are_refused_naming_the_header() {
    let s = Scratch::new("proxy-two-session-headers");
    let upstream = Upstream::start(&s, &json!({"steps": [{"text": "One."}, {"text": "Two."}]}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "", &[]);
    let messages = json!({"model": "m", "max_tokens": 64, "system": "You help.", "tools": tools(),
                          "messages": [{"role": "user", "content": "hi"}]});
    let chat = json!({"model": "m", "tools": chat_tools(),
                      "messages": [{"role": "user", "content": "hi"}]});
    let anthropic = format!("{}/v1/messages", proxy.url);
    let openai = format!("{}/v1/chat/completions", proxy.url);
    for header in ["x-toolshelf-session", "x-claude-code-session-id"] {
        for (url, body) in [(&anthropic, &messages), (&openai, &chat)] {
            for values in [["one", "two"], ["same", "same"]] {
                let (status, answer) =
                    curl_post(url, body, &[(header, values[0]), (header, values[1])]);
                assert_eq!(status, 400, "{header} {values:?} {url}: {answer}");
                let error = &answer["error"];
                assert_eq!(error["type"], "invalid_request_error", "{answer}");
                let message = error["message"].as_str().unwrap_or_default();
                assert!(
                    message.contains(&format!("2 {header} headers")),
                    "{message}"
                );
            }
        }
        let anthropic_shape = curl_post(&anthropic, &messages, &[(header, "a"), (header, "b")]).1;
        assert_eq!(anthropic_shape["type"], "error", "{anthropic_shape}");
    }
    assert!(
        upstream.records().iter().all(|r| r["kind"] != "request"),
        "nothing went upstream"
    );
    // One of each is served.
    let (status, answer) = curl_post(
        &anthropic,
        &messages,
        &[
            ("x-toolshelf-session", "one"),
            ("x-claude-code-session-id", "c"),
        ],
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["content"][0]["text"], "One.");
    let log = proxy.log();
    assert!(
        log.contains("failed: the request has 2 x-toolshelf-session headers"),
        "{log}"
    );
}

/// The value of the sample `series` (its name and labels as written) in a scrape of `proxy`.
fn sample(proxy: &ProxyProc, series: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sS", &format!("{}/metrics", proxy.url)])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .map(str::to_owned)
    })
}

/// Sessions evicted at `[proxy] max_sessions` are counted (the status, the metrics), said in the
/// log once for the burst, not once each, and the sessions held are a gauge.
#[test]
fn sessions_evicted_at_max_sessions_are_counted_and_said_once() {
    let s = Scratch::new("proxy-evictions");
    let upstream = Upstream::start(&s, &json!({"steps": [{"text": "Fine."}]}));
    let proxy = ProxyProc::start(&s, &upstream.url(), "[proxy]\nmax_sessions = 2\n", &[]);
    assert_eq!(
        sample(&proxy, "toolshelf_proxy_sessions_evicted_total").as_deref(),
        Some("0"),
        "registered at 0"
    );
    let body = json!({"model": "m", "max_tokens": 64, "system": "probe", "tools": tools(),
                      "messages": [{"role": "user", "content": "hi"}]});
    let url = format!("{}/v1/messages", proxy.url);
    for name in ["a", "b", "c", "d", "e"] {
        let (status, answer) = curl_post(&url, &body, &[("x-toolshelf-session", name)]);
        assert_eq!(status, 200, "{answer}");
    }
    let store = proxy.status()["store"].clone();
    assert_eq!(
        (&store["kind"], &store["up"], &store["max_sessions"]),
        (&json!("memory"), &json!(true), &json!(2)),
        "{store}"
    );
    let evicted = store["evicted"].as_u64().unwrap_or(0);
    assert!(evicted >= 3, "five sessions in a store of two: {store}");
    assert_eq!(store["entries"], 2, "{store}");
    assert_eq!(
        sample(&proxy, "toolshelf_proxy_sessions_evicted_total"),
        Some(evicted.to_string())
    );
    assert_eq!(
        sample(&proxy, "toolshelf_proxy_sessions").as_deref(),
        Some("2")
    );
    assert_eq!(
        sample(
            &proxy,
            &format!(
                "toolshelf_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            )
        )
        .as_deref(),
        Some("1")
    );
    let log = proxy.log();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("evicted to stay within [proxy] max_sessions = 2"))
        .collect();
    assert_eq!(said.len(), 1, "once for the burst:\n{log}");
    assert!(
        said[0].contains("WARN") && said[0].contains("1 live session evicted"),
        "{log}"
    );
}

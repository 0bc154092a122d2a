//! End-to-end tests of how the gateway reads what its configuration names: secrets in a server's
//! URL and headers (sent, never shown), HTTP servers that require a header
//! (`fixtures/http_server.py`), and hook programs (`~/` expanded, a missing one named at
//! start-up). Real `toolshelf` binary, real rmcp client.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// `fixtures/http_server.py` requiring `Authorization: Bearer TOKEN`; the child and its port.
fn http_server(s: &Scratch, token: &str) -> (Reaped, u16) {
    let port_file = s.path("http-server.port");
    let child = std::process::Command::new("python3")
        .args([
            &fixture("http_server.py"),
            &port_file,
            "Authorization",
            &format!("Bearer {token}"),
        ])
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn http_server.py");
    let child = Reaped(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    let port = loop {
        if let Some(port) = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            break port;
        }
        assert!(Instant::now() < deadline, "http_server.py did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    (child, port)
}

/// `toolshelf status ARGS --json` with `env`: the status JSON and stderr.
fn status_json(args: &[&str], env: &[(&str, &str)]) -> (Value, String) {
    let out = std::process::Command::new(TOOLSHELF)
        .arg("status")
        .args(args)
        .arg("--json")
        .envs(env.iter().copied())
        .env_remove("TOOLSHELF_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("status");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status JSON ({e}); stderr: {stderr}"));
    (v, stderr)
}

fn server<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no server {name} in {status}"))
}

/// `toolshelf serve ARGS` over stdio at default verbosity, with `env`, its stderr in `log`.
async fn serve_logged(args: &[&str], env: &[(&str, &str)], log: &str) -> Client {
    let mut cmd = tokio::process::Command::new(TOOLSHELF);
    cmd.arg("serve")
        .args(args)
        .envs(env.iter().copied())
        .env_remove("TOOLSHELF_LOG")
        .env_remove("RUST_LOG");
    stdio_client_logged(cmd, std::path::Path::new(log)).await
}

async fn server_state(client: &Client, name: &str) -> String {
    let status = status(client).await;
    server(&status, name)["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A token in a server's URL is a secret: the status (the operator's and the model's), the
/// refusal a call reads, the audit log and the log lines (the MCP library's included) show the
/// URL with its query hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_in_a_server_url_reaches_no_message() {
    let s = Scratch::new("urlsecret");
    let port = closed_port();
    let secret = "sk-LEAKME-url-7f3a";
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}[execute]\nrequire_search = false\n\
             [servers.remote]\nurl = \"http://127.0.0.1:{port}/mcp?api_key=${{TS_URL_KEY}}\"\n",
            files_sections(&s)
        ),
    );
    let env = [("TS_URL_KEY", secret)];
    let (v, stderr) = status_json(&["--config", &config], &env);
    let reason = server(&v, "remote")["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(&format!(
            "initialize at http://127.0.0.1:{port}/mcp?… failed: cannot connect"
        )),
        "{reason}"
    );
    assert!(!stderr.contains(secret), "{stderr}");

    let log = s.path("serve.log");
    let client = serve_logged(&["--config", &config], &env, &log).await;
    wait_for("the server to fail", || async {
        server_state(&client, "remote").await == "failed"
    })
    .await;
    let refusal = err(&exec(&client, "mcp__remote__anything", json!({})).await);
    assert!(
        refusal.contains(&format!(
            "initialize at http://127.0.0.1:{port}/mcp?… failed"
        )),
        "{refusal}"
    );
    let resource = status(&client).await.to_string();
    client.cancel().await.expect("close");
    let audit = std::fs::read_to_string(s.path("audit.jsonl")).unwrap_or_default();
    let log = std::fs::read_to_string(&log).expect("log");
    assert!(log.contains("/mcp?… failed"), "{log}");
    for (what, text) in [
        ("the refusal", &refusal),
        ("the status resource", &resource),
        ("the audit log", &audit),
        ("the log", &log),
    ] {
        assert!(!text.contains(secret), "{what} shows the token: {text}");
    }
}

/// `headers` of a server (in `[servers.NAME]` and imported from an mcp.json entry) go with every
/// request, with `${VAR}` expanded; a server that refuses the token says so in plain words; no
/// message shows a header's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_reach_an_http_server_and_no_message() {
    let s = Scratch::new("headers");
    let token = "tok-SECRET-e2e-4411";
    let wrong = "tok-WRONG-e2e-9922";
    let (_server, port) = http_server(&s, token);
    let url = format!("http://127.0.0.1:{port}/mcp");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}[execute]\nrequire_search = false\n\
             [servers.good]\nurl = {url:?}\nheaders = {{ Authorization = \"Bearer ${{TS_TOKEN}}\" }}\n\
             [servers.bad]\nurl = {url:?}\nheaders = {{ Authorization = \"Bearer {wrong}\" }}\n",
            files_sections(&s)
        ),
    );
    let mcp = s.write(
        "mcp.json",
        &json!({"mcpServers": {"imported": {
            "type": "http",
            "url": url,
            "headers": {"Authorization": "Bearer ${env:TS_TOKEN}"}
        }}})
        .to_string(),
    );
    let env = [("TS_TOKEN", token)];
    let args = ["--config", config.as_str(), "--mcp-config", mcp.as_str()];
    let (v, stderr) = status_json(&args, &env);
    assert!(!stderr.contains("is not used"), "{stderr}");
    for name in ["good", "imported"] {
        assert_eq!(server(&v, name)["state"], "ready", "{name}: {v}");
        assert_eq!(server(&v, name)["tools"], 1, "{name}: {v}");
    }
    assert_eq!(
        server(&v, "bad")["reason"],
        format!(
            "initialize at {url} failed: the server answered 401 Unauthorized: check its \
             headers/token ([servers.NAME] headers, or \"headers\" in mcp.json)"
        )
    );

    let log = s.path("serve.log");
    let client = serve_logged(&args, &env, &log).await;
    for tool in ["mcp__good__whoami", "mcp__imported__whoami"] {
        assert_eq!(ok(&exec(&client, tool, json!({})).await), "authorized");
    }
    wait_for("the refusing server to fail", || async {
        server_state(&client, "bad").await == "failed"
    })
    .await;
    let resource = status(&client).await.to_string();
    let refusal = err(&exec(&client, "mcp__bad__whoami", json!({})).await);
    assert!(refusal.contains("401 Unauthorized"), "{refusal}");
    client.cancel().await.expect("close");
    let audit = std::fs::read_to_string(s.path("audit.jsonl")).unwrap_or_default();
    let log = std::fs::read_to_string(&log).expect("log");
    for (what, text) in [
        ("status", &v.to_string()),
        ("status stderr", &stderr),
        ("the status resource", &resource),
        ("the refusal", &refusal),
        ("the audit log", &audit),
        ("the log", &log),
    ] {
        for secret in [token, wrong] {
            assert!(!text.contains(secret), "{what} shows a header: {text}");
        }
    }
}

/// A hook's `command` may start with `~/`, as a server's may; a hook whose program cannot be
/// found is named at start-up, in the status warnings, instead of only failing its events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_programs_expand_home_and_missing_ones_are_named() {
    let s = Scratch::new("hookhome");
    let ok_hook = s.write("home/bin/ok", "#!/bin/sh\ncat >/dev/null\nexit 0\n");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ok_hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}[execute]\nrequire_search = false\n{}\
             [[hooks.pre_call]]\ncommand = \"~/bin/ok\"\non_error = \"deny\"\n\
             [[hooks.post_call]]\ncommand = \"toolshelf-no-such-hook\"\n",
            files_sections(&s),
            named_server(
                "svc",
                &json!([tool(
                    "ping",
                    "Ping",
                    json!({"type": "object", "properties": {}})
                )]),
                ""
            ),
        ),
    );
    let home = s.path("home");
    let log = s.path("serve.log");
    let client = serve_logged(&["--config", &config], &[("HOME", &home)], &log).await;
    let answer = exec(&client, "mcp__svc__ping", json!({})).await;
    assert_ne!(answer.is_error, Some(true), "{}", text(&answer));
    let warnings = status(&client).await["warnings"].to_string();
    client.cancel().await.expect("close");
    assert!(
        warnings.contains(
            "[hooks] post_call[0] \\\"toolshelf-no-such-hook\\\": its program cannot be run"
        ),
        "{warnings}"
    );
    assert!(!warnings.contains("~/bin/ok"), "{warnings}");
    let log = std::fs::read_to_string(&log).expect("log");
    assert!(log.contains("toolshelf-no-such-hook"), "{log}");
}

/// A `command` with its arguments written in it fails to start with a hint that arguments go in
/// `args`.
#[test]
fn a_command_with_arguments_in_it_points_at_args() {
    let s = Scratch::new("cmdargs");
    let config = s.write(
        "toolshelf.toml",
        "[cache]\nenabled = false\n[servers.py]\ncommand = \"python3 /tmp/server.py\"\n",
    );
    let (v, _) = status_json(&["--config", &config], &[]);
    let reason = server(&v, "py")["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("cannot run \"python3 /tmp/server.py\": No such file or directory")
            && reason.ends_with(
                "; command is one program, its arguments go in args: command = \"python3\", args = [\"/tmp/server.py\"]"
            ),
        "{reason}"
    );
}

/// A variable that is not set fails its server's start with a message naming the variable and
/// never quoting the value it is used in (an `env` value or argument often holds a secret around
/// the variable): not in the status, the status resource, nor the refusal a call reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unset_variable_fails_its_server_without_quoting_the_value() {
    let s = Scratch::new("unsetvar");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "{}[execute]\nrequire_search = false\n\
             [servers.envs]\ncommand = \"python3\"\n\
             env = {{ API_KEY = \"sk-ENVSECRET-${{TS_LEAK_SUFFIX}}\" }}\n\
             [servers.argv]\ncommand = \"python3\"\n\
             args = [\"-c\", \"pass\", \"--key=sk-ARGSECRET-${{TS_LEAK_SUFFIX}}\"]\n",
            files_sections(&s)
        ),
    );
    let (v, stderr) = status_json(&["--config", &config], &[]);
    // Named with where it is used instead.
    for (name, at) in [
        ("envs", "[servers.envs] env.API_KEY"),
        ("argv", "[servers.argv] args[2]"),
    ] {
        let reason = server(&v, name)["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(&format!(
                "{at}: environment variable TS_LEAK_SUFFIX is not set"
            )),
            "{name}: {reason}"
        );
    }

    let log = s.path("serve.log");
    let client = serve_logged(&["--config", &config], &[], &log).await;
    wait_for("the servers to fail", || async {
        server_state(&client, "envs").await == "failed"
            && server_state(&client, "argv").await == "failed"
    })
    .await;
    let refusal = err(&exec(&client, "mcp__envs__anything", json!({})).await);
    assert!(refusal.contains("TS_LEAK_SUFFIX is not set"), "{refusal}");
    let resource = status(&client).await.to_string();
    client.cancel().await.expect("close");
    let log = std::fs::read_to_string(&log).expect("log");
    for (what, text) in [
        ("status", &v.to_string()),
        ("status stderr", &stderr),
        ("the refusal", &refusal),
        ("the status resource", &resource),
        ("the log", &log),
    ] {
        for secret in ["sk-ENVSECRET", "sk-ARGSECRET"] {
            assert!(!text.contains(secret), "{what} quotes the value: {text}");
        }
    }
}

/// A relative `[cache] path` and `[audit] path` are the configuration file's directory's, as a
/// script's path is, whatever directory the gateway runs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relative_cache_and_audit_paths_are_the_configurations_directory() {
    let s = Scratch::new("relpaths");
    let config = s.write(
        "toolshelf.toml",
        &format!(
            "[audit]\npath = \"rel-audit.jsonl\"\n[cache]\npath = \"rel-cache\"\n{}",
            named_server("a", &json!([tool("alpha", "Alpha.", json!({}))]), "")
        ),
    );
    let elsewhere = s.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let mut cmd = tokio::process::Command::new(TOOLSHELF);
    cmd.args(["serve", "--config", &config])
        .current_dir(&elsewhere);
    let client = stdio_client_logged(cmd, std::path::Path::new(&s.path("serve.log"))).await;
    wait_for("the server to list its tools", || async {
        server_state(&client, "a").await == "ready"
    })
    .await;
    // The cache is written after the server listed its tools, not before `ready`.
    let cached = || {
        std::fs::read_dir(s.path("rel-cache"))
            .map(|d| d.filter_map(|e| e.ok()).count())
            .unwrap_or(0)
    };
    wait_for(
        "the catalog cache in the configuration's rel-cache",
        || async { cached() > 0 },
    )
    .await;
    client.cancel().await.expect("close");
    assert!(std::path::Path::new(&s.path("rel-audit.jsonl")).exists());
    assert!(
        !std::path::Path::new(&format!("{elsewhere}/rel-cache")).exists()
            && !std::path::Path::new(&format!("{elsewhere}/rel-audit.jsonl")).exists(),
        "written relative to the current directory"
    );
}

//! Description templates through the real gateway: each MCP session's frozen list is rendered for
//! that session, equal inputs give equal bytes, and a failing template fails the first list.

mod common;

use common::*;
use serde_json::{Value, json};

fn config(s: &Scratch, template: &str) -> String {
    format!(
        "{}[tools.\"mcp__docs__read\"]\ndescription_template = {template:?}\n\
         [defer]\nrules = [\"NoDefer(^mcp__docs__read$)\"]\n\
         [template]\nworkspace = \"/src/shop\"\n{}",
        named_server(
            "docs",
            &json!([
                tool("read", "Read a page.", json!({"type": "object"})),
                tool("write", "Write a page.", json!({"type": "object"}))
            ]),
            "description = \"Documentation pages.\"\n\
             description_template = \"part(pkg.description, 'of', session.workspace)\""
        ),
        files_sections(s)
    )
}

async fn listed(cfg: &str) -> Vec<Value> {
    let client = stdio_client(cfg, TestClient::default()).await;
    let tools = client.list_all_tools().await.expect("tools/list");
    client.cancel().await.expect("close");
    tools
        .into_iter()
        .map(|t| serde_json::to_value(t).expect("json"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_session_gets_its_rendering_and_equal_sessions_equal_bytes() {
    let s = Scratch::new("templates");
    let cfg = s.write(
        "toolshelf.toml",
        &config(
            &s,
            "part(pkg.description, 'Client:', session.client, tag('ws', session.workspace))",
        ),
    );
    let first = listed(&cfg).await;
    let second = listed(&cfg).await;
    assert_eq!(
        serde_json::to_string(&first).expect("json"),
        serde_json::to_string(&second).expect("json"),
        "two sessions with equal inputs list the same bytes"
    );
    let read = first
        .iter()
        .find(|t| t["name"] == "docs__read")
        .expect("the resident tool");
    assert_eq!(
        read["description"],
        "Read a page. Client: toolshelf-e2e <ws>/src/shop</ws>"
    );
    let search = first
        .iter()
        .find(|t| t["name"] == "tool_search")
        .expect("tool_search");
    let index = search["description"].as_str().expect("text");
    assert!(
        index.contains("mcp__docs: Documentation pages. of /src/shop\n  write"),
        "the group header is rendered too: {index}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_that_reads_a_turn_value_fails_the_first_list() {
    let s = Scratch::new("templates-bad");
    let cfg = s.write(
        "toolshelf.toml",
        &config(&s, "a = pkg.description\na + str(turn.number)"),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    let e = client
        .list_all_tools()
        .await
        .expect_err("the list fails")
        .to_string();
    assert!(
        e.contains("tool \"mcp__docs__read\": description template line 2: reads turn.number"),
        "{e}"
    );
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_tools_search_hit_shows_its_sessions_rendering() {
    let s = Scratch::new("templates-search");
    let cfg = s.write(
        "toolshelf.toml",
        &format!(
            "{}[tools.\"mcp__docs__write\"]\n\
             description_template = \"part(pkg.description, 'Client:', session.client)\"\n",
            config(&s, "pkg.description")
        ),
    );
    let client = stdio_client(&cfg, TestClient::default()).await;
    client.list_all_tools().await.expect("tools/list");
    let hit = ok(&search(&client, json!({"tool_names": ["mcp__docs__write"]})).await);
    assert!(
        hit.contains("Write a page. Client: toolshelf-e2e"),
        "the rendered description, not the catalog's: {hit}"
    );
    client.cancel().await.expect("close");
}

//! `toolshelf search` query handling through the real binary: server listings among several
//! intents, folded `server:` values, names next to punctuation, `+term` on canonical names and a
//! capped limit, on the bundled example and on small catalogs.

use std::process::Command;

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toolshelf"))
}

/// `toolshelf search ARGS`: its standard output, after checking it succeeded.
fn ok(args: &[&str]) -> String {
    let out = bin()
        .arg("search")
        .args(args)
        .output()
        .expect("run toolshelf");
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// `toolshelf search ARGS --json`.
fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    serde_json::from_str(&ok(&all)).expect("json")
}

/// The names of the hits the text lists (`hits` of `--json`), in order.
fn listed(v: &Value) -> Vec<String> {
    v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["name"].as_str().expect("name").to_owned())
        .collect()
}

fn temp_file(name: &str, content: &str) -> String {
    let dir = std::env::temp_dir().join(format!("toolshelf-search-queries-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, content).expect("write");
    path.display().to_string()
}

/// A catalog with `brave-search` and `github` servers, and another server with a search tool.
fn hosted() -> String {
    temp_file(
        "hosted.json",
        r#"{"servers": [
            {"name": "brave-search", "description": "Web search",
             "tools": [{"name": "brave_web_search", "description": "Search the web"},
                       {"name": "brave_local_search", "description": "Search for places nearby"}]},
            {"name": "github", "description": "Code hosting",
             "tools": [{"name": "search_code", "description": "Search code in repositories"},
                       {"name": "create_issue", "description": "Open an issue"}]},
            {"name": "notes", "description": "Notebook",
             "tools": [{"name": "search", "description": "Search notes"}]}
        ]}"#,
    )
}

#[test]
fn server_listings_among_several_queries_each_list_their_server() {
    let v = json(&["-q", "server:git", "-q", "server:time"]);
    let names = listed(&v);
    assert!(
        names.iter().any(|n| n.starts_with("mcp__git__")),
        "{}",
        v["text"]
    );
    assert!(
        names.iter().any(|n| n.starts_with("mcp__time__")),
        "{}",
        v["text"]
    );
    assert_eq!(
        names[..2],
        ["mcp__git__git_add", "mcp__time__convert_time"],
        "{}",
        v["text"]
    );
    // With an intent of words, the git listing keeps its place.
    let v = json(&["-q", "server:git", "-q", "current time"]);
    let names = listed(&v);
    assert_eq!(names[0], "mcp__git__git_add", "{}", v["text"]);
    assert!(
        names.iter().any(|n| n.starts_with("mcp__time__")),
        "{}",
        v["text"]
    );
}

#[test]
fn a_listing_of_several_servers_takes_each_in_turn() {
    let v = json(&["-k", "5", "-q", "server:git server:time"]);
    assert_eq!(
        listed(&v),
        [
            "mcp__git__git_add",
            "mcp__time__convert_time",
            "mcp__git__git_branch",
            "mcp__time__get_current_time",
            "mcp__git__git_checkout"
        ],
        "{}",
        v["text"]
    );
}

#[test]
fn server_values_are_folded() {
    let v = json(&["-q", "server:sequential_thinking"]);
    assert_eq!(
        listed(&v),
        ["mcp__sequential-thinking__sequentialthinking"],
        "{}",
        v["text"]
    );
    assert!(
        !v["text"].as_str().expect("text").contains("Note: "),
        "{}",
        v["text"]
    );
    let catalog = hosted();
    for q in ["server:brave_search", "server:brave", "server:Brave-Search"] {
        let v = json(&["--catalog", &catalog, "-q", q]);
        assert_eq!(
            listed(&v),
            [
                "mcp__brave-search__brave_local_search",
                "mcp__brave-search__brave_web_search"
            ],
            "{q}: {}",
            v["text"]
        );
    }
    // A value that names no server is searched for as a word.
    let text = ok(&["--catalog", &catalog, "-q", "server:repositories"]);
    assert!(
        text.starts_with("Note: \"server:repositories\" names no server"),
        "{text}"
    );
    assert!(text.contains("mcp__github__search_code"), "{text}");
}

#[test]
fn a_name_next_to_punctuation_is_still_a_name() {
    for (q, name) in [
        ("use read_text_file.", "mcp__filesystem__read_text_file"),
        ("git_status.", "mcp__git__git_status"),
        ("git_status?", "mcp__git__git_status"),
        ("`git_status`", "mcp__git__git_status"),
        ("read_text_file()", "mcp__filesystem__read_text_file"),
        (
            "get_current_time(timezone='Asia/Tokyo')",
            "mcp__time__get_current_time",
        ),
    ] {
        let v = json(&["-q", q]);
        assert_eq!(v["hits"][0]["name"], name, "{q}: {}", v["text"]);
        assert_eq!(
            v["hits"][0]["reason"], "exact name in the query",
            "{q}: {}",
            v["text"]
        );
    }
}

#[test]
fn a_plus_term_matches_the_server_part_of_the_name() {
    let catalog = hosted();
    let v = json(&["--catalog", &catalog, "-q", "+search +github"]);
    let text = v["text"].as_str().expect("text");
    assert!(!text.contains("Note: "), "{text}");
    assert_eq!(listed(&v), ["mcp__github__search_code"], "{text}");
}

#[test]
fn a_capped_limit_is_noted() {
    let text = ok(&["-k", "100", "-q", "file"]);
    let notes: Vec<&str> = text.lines().filter(|l| l.starts_with("Note: ")).collect();
    assert_eq!(
        notes,
        ["Note: the limit 100 was capped at 10, the most one search returns."],
        "{text}"
    );
    let text = ok(&["-k", "10", "-q", "file"]);
    assert!(!text.contains("Note: "), "{text}");
}

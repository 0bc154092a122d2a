//! `replay` and `ledger --transcript` through the real binary, on the bundled example.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolshelf"))
        .args(args)
        .output()
        .expect("run toolshelf")
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn example(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(file)
        .display()
        .to_string()
}

fn temp(name: &str, content: &str) -> String {
    let dir = std::env::temp_dir().join(format!("toolshelf-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let p = dir.join(name);
    std::fs::write(&p, content).expect("write");
    p.display().to_string()
}

#[test]
fn replayed_bodies_keep_their_prefix_in_every_format() {
    let transcript = example("transcript.jsonl");
    for format in ["anthropic", "openai", "openai-responses"] {
        let bodies = ok(&["replay", "--transcript", &transcript, "--format", format]);
        let lines: Vec<Value> = bodies
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON body a line"))
            .collect();
        assert_eq!(lines.len(), 14, "{format}: one body per model request");
        let file = temp(&format!("bodies-{format}.jsonl"), &bodies);
        let check = ok(&["prefix-check", &file]);
        assert!(
            check.contains("every request keeps the previous one's prefix"),
            "{check}"
        );
        // The example's reminder reaches the model after the commit, as an injected block.
        assert!(
            bodies.contains("<system-reminder>\\nDecisions worth keeping"),
            "{format}"
        );
    }
}

#[test]
fn explain_says_what_the_session_did() {
    let text = ok(&[
        "replay",
        "--transcript",
        &example("transcript.jsonl"),
        "--explain",
    ]);
    assert!(
        text.contains("reminder memory fired: mcp__git__git_commit was just called"),
        "{text}"
    );
    assert!(text.contains("reminder memory suppressed"), "{text}");
    assert!(
        text.contains("activated: mcp__memory__create_entities"),
        "{text}"
    );
    let json = ok(&[
        "replay",
        "--transcript",
        &example("transcript.jsonl"),
        "--explain",
        "--json",
    ]);
    let turns: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(turns.len(), 14);
    assert!(
        turns
            .iter()
            .all(|t| t["bytes"]["tools"].as_u64() > Some(1000))
    );
}

#[test]
fn the_ledger_accounts_the_whole_session() {
    let v: Value = serde_json::from_str(&ok(&[
        "ledger",
        "--transcript",
        &example("transcript.jsonl"),
        "--json",
    ]))
    .expect("json");
    assert_eq!(v["requests"], 14);
    let t = &v["totals"];
    let (input, cached, all) = (
        t["input_tokens"].as_u64().expect("input"),
        t["cached_tokens"].as_u64().expect("cached"),
        t["all_resident_tokens"].as_u64().expect("all"),
    );
    assert!(cached < input && cached * 10 > input * 8, "{t}");
    assert!(all > input, "{t}");
    let turns = v["turns"].as_array().expect("turns");
    assert_eq!(
        turns[0]["cached"], 0,
        "nothing to reuse before the first request"
    );
    for pair in turns.windows(2) {
        assert_eq!(
            pair[1]["cached"], pair[0]["total"],
            "each request reuses the whole previous one"
        );
    }
    let table = ok(&["ledger", "--transcript", &example("transcript.jsonl")]);
    assert!(table.contains("served by a prefix cache"), "{table}");
}

#[test]
fn bad_transcripts_and_rules_are_named() {
    let bad = temp("bad.jsonl", "{\"user\": \"hi\"}\n{\"shout\": \"x\"}\n");
    let out = run(&["replay", "--transcript", &bad]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("bad.jsonl:2: unknown event \"shout\""), "{e}");
    let config = temp(
        "rules.toml",
        "[[reminders]]\nid = \"git\"\ncategory = \"git history\"\nmessage = \"Pass repo_path to see the history.\"\nsearch_hint = [\"git log\"]\nintents = [\"history\"]\n",
    );
    let ok_transcript = temp("t.jsonl", "{\"user\": \"hi\"}\n");
    let out = run(&[
        "replay",
        "--catalog",
        &example("catalog.json"),
        "--config",
        &config,
        "--transcript",
        &ok_transcript,
    ]);
    assert!(!out.status.success());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("names the parameter \"repo_path\""), "{e}");
}

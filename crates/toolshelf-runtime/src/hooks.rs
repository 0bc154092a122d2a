//! Running hook commands: spawn, feed the event on stdin, collect the answer, enforce the timeout.
//!
//! What an answer means is decided in `toolshelf_core::hook`; this module only runs processes.
//! Hooks of one event run in configuration order, each seeing the params or result as rewritten by
//! the previous one; the first deny stops the chain.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::AsyncWriteExt;
use toolshelf_core::Tool;
use toolshelf_core::config::HookCommand;
use toolshelf_core::hook::{Hook, HookEvent, HookOutcome, HookRun, interpret};

/// What the hooks of one event decided together.
#[derive(Debug, Default)]
pub struct HookVerdict {
    /// The reason of the first hook that denied.
    pub denied: Option<String>,
    /// Params as rewritten (`pre_call`).
    pub params: Option<Map<String, Value>>,
    /// Result as rewritten (`post_call`).
    pub result: Option<Value>,
    /// Guidance for the model, in hook order.
    pub guidance: Vec<String>,
    /// Hooks that failed, as reported.
    pub failures: Vec<String>,
}

/// Runs the `hooks` that apply to `tool` (the call's target; `None` for events without one)
/// for `event`, and combines their answers.
pub async fn run(hooks: &[Hook], tool: Option<&Tool>, mut event: HookEvent) -> HookVerdict {
    let mut verdict = HookVerdict::default();
    for hook in hooks.iter().filter(|h| h.applies_to(tool)) {
        let input = serde_json::to_vec(&event).unwrap_or_default();
        let run = run_one(&hook.command, &input).await;
        let (outcome, failure) = interpret(&hook.label, event.event, run, hook.command.on_error);
        if let Some(f) = failure {
            tracing::warn!("{f}");
            verdict.failures.push(f);
        }
        match outcome {
            HookOutcome::Deny(reason) => {
                verdict.denied = Some(reason);
                return verdict;
            }
            HookOutcome::Allow(answer) => {
                if let Some(p) = answer.params {
                    event.params = Some(p.clone());
                    verdict.params = Some(p);
                }
                if let Some(r) = answer.result {
                    event.result = Some(r.clone());
                    verdict.result = Some(r);
                }
                verdict.guidance.extend(answer.guidance);
            }
        }
    }
    verdict
}

async fn run_one(hook: &HookCommand, input: &[u8]) -> HookRun {
    let mut cmd = tokio::process::Command::new(&hook.command);
    cmd.args(&hook.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return HookRun::Failed(format!("cannot run it: {e}")),
    };
    let work = async {
        if let Some(mut stdin) = child.stdin.take() {
            // A hook that ignores its input may close stdin early; that is not a failure.
            let _ = stdin.write_all(input).await;
        }
        child.wait_with_output().await
    };
    match tokio::time::timeout(Duration::from_secs(hook.timeout_secs), work).await {
        Err(_) => HookRun::Failed(format!("timed out after {}s", hook.timeout_secs)),
        Ok(Err(e)) => HookRun::Failed(format!("waiting for it failed: {e}")),
        Ok(Ok(out)) => HookRun::Exited {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolshelf_core::config::{HooksConfig, OnError};
    use toolshelf_core::hook::{HookEventKind, Hooks};

    fn sh(script: &str, on_error: OnError, timeout_secs: u64) -> HookCommand {
        HookCommand {
            command: "sh".into(),
            args: vec!["-c".into(), script.into()],
            tools: None,
            timeout_secs,
            on_error,
        }
    }

    fn compiled(commands: Vec<HookCommand>) -> Vec<Hook> {
        let config = HooksConfig {
            pre_call: commands,
            ..Default::default()
        };
        Hooks::new(&config)
            .expect("valid")
            .of(HookEventKind::PreCall)
            .to_vec()
    }

    fn tool(name: &str) -> Tool {
        toolshelf_core::Catalog::from_value(&serde_json::json!([{ "name": name }]), "c")
            .expect("catalog")
            .tools()[0]
            .clone()
    }

    fn event() -> HookEvent {
        let mut e = HookEvent::new(HookEventKind::PreCall, "s");
        e.tool = Some("mcp__a__t".into());
        e
    }

    #[tokio::test]
    async fn hooks_chain_rewrites_and_stop_at_the_first_deny() {
        let rewrite = sh(
            r#"cat >/dev/null; echo '{"params": {"x": 1}, "guidance": "g1"}'"#,
            OnError::Allow,
            10,
        );
        // The second hook sees the first one's params.
        let check = sh(
            r#"grep -q '"x":1' || exit 1; echo '{"guidance": "g2"}'"#,
            OnError::Deny,
            10,
        );
        let t = tool("mcp__a__t");
        let v = run(&compiled(vec![rewrite.clone(), check]), Some(&t), event()).await;
        assert_eq!(
            (v.denied.as_deref(), v.guidance.as_slice()),
            (None, &["g1".to_owned(), "g2".to_owned()][..])
        );
        assert_eq!(v.params.expect("rewritten")["x"], 1);
        let deny = sh("echo 'not today' >&2; exit 2", OnError::Allow, 10);
        let never = sh("echo '{\"guidance\": \"never\"}'", OnError::Allow, 10);
        let v = run(&compiled(vec![deny, never]), Some(&t), event()).await;
        assert_eq!(v.denied.as_deref(), Some("not today"));
        assert!(v.guidance.is_empty());
    }

    #[tokio::test]
    async fn failing_hooks_follow_on_error() {
        let slow = |on| sh("sleep 5", on, 1);
        let v = run(&compiled(vec![slow(OnError::Allow)]), None, event()).await;
        assert!(
            v.denied.is_none() && v.failures[0].contains("timed out after 1s"),
            "{v:?}"
        );
        let v = run(&compiled(vec![slow(OnError::Deny)]), None, event()).await;
        assert!(v.denied.expect("closed").contains("on_error = \"deny\""));
        let missing = HookCommand {
            command: "/nonexistent/hook".into(),
            ..sh("", OnError::Allow, 1)
        };
        let v = run(&compiled(vec![missing]), None, event()).await;
        assert!(v.failures[0].contains("cannot run it"), "{v:?}");
    }

    #[tokio::test]
    async fn tool_patterns_select_hooks() {
        let mut only_b = sh("exit 2", OnError::Allow, 10);
        only_b.tools = Some("^mcp__b__".into());
        let hooks = compiled(vec![only_b]);
        assert!(
            run(&hooks, Some(&tool("mcp__a__t")), event())
                .await
                .denied
                .is_none()
        );
        assert!(
            run(&hooks, Some(&tool("mcp__b__t")), event())
                .await
                .denied
                .is_some()
        );
    }
}

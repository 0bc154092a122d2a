//! Running hook commands: spawn, feed the event on stdin, collect the answer, enforce the timeout.
//!
//! What an answer means is decided in `toolshelf_core::hook`; this module only runs processes.
//! Hooks of one event run in configuration order, each seeing the params or result as rewritten by
//! the previous one; the first deny stops the chain.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use toolshelf_core::Tool;
use toolshelf_core::config::{HookCommand, OnError};
use toolshelf_core::hook::{Hook, HookDenial, HookEvent, HookOutcome, HookRun, interpret};

/// What the hooks of one event decided together.
#[derive(Debug, Default)]
pub struct HookVerdict {
    /// What the model reads of [`HookVerdict::denial`]: the hook's reason, or that a hook failed
    /// (never the failure's report).
    pub denied: Option<String>,
    /// Why the first hook that refused did: its decision, or its failure with `on_error = "deny"`.
    pub denial: Option<HookDenial>,
    /// Params as rewritten (`pre_call`).
    pub params: Option<Map<String, Value>>,
    /// Result as rewritten (`post_call`).
    pub result: Option<Value>,
    /// Guidance for the model, in hook order.
    pub guidance: Vec<String>,
    /// Hooks that failed, as reported.
    pub failures: Vec<String>,
}

impl HookVerdict {
    fn deny(&mut self, denial: HookDenial) {
        self.denied = Some(denial.reason().to_owned());
        self.denial = Some(denial);
    }
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
            HookOutcome::Deny(denial) => {
                verdict.deny(denial);
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

/// Runs the hooks that may replace a result (`post_call`, `post_search`) one at a time, so that a
/// `result` that `read` refuses is a failure of the hook that answered it: its `on_error`
/// decides, as for any hook failure (`deny` withholds the result; `allow` goes on with the
/// result as it was before that hook, which is what the next hook sees). Returns the hooks'
/// verdict (its `result` unset) and the replacement as `read` gives it.
pub async fn run_replacing<T>(
    hooks: &[Hook],
    tool: Option<&Tool>,
    mut event: HookEvent,
    read: impl Fn(&Value) -> Result<T, String>,
) -> (HookVerdict, Option<T>) {
    let mut verdict = HookVerdict::default();
    let mut replaced = None;
    for hook in hooks.iter().filter(|h| h.applies_to(tool)) {
        let one = run(std::slice::from_ref(hook), tool, event.clone()).await;
        verdict.failures.extend(one.failures);
        if let Some(denial) = one.denial {
            verdict.guidance.extend(one.guidance);
            verdict.deny(denial);
            break;
        }
        if let Some(value) = one.result {
            match read(&value) {
                Ok(r) => {
                    event.result = Some(value);
                    replaced = Some(r);
                }
                Err(e) => {
                    let failure = format!(
                        "hook {} failed: its \"result\" is not an MCP CallToolResult: {e}",
                        hook.label
                    );
                    tracing::warn!("{failure}");
                    verdict.failures.push(failure.clone());
                    if hook.command.on_error == OnError::Deny {
                        verdict.deny(HookDenial::Failed(format!(
                            "{failure} (on_error = \"deny\")"
                        )));
                        break;
                    }
                    // A hook that failed says nothing else either.
                    continue;
                }
            }
        }
        verdict.guidance.extend(one.guidance);
    }
    (verdict, replaced)
}

/// The most a hook may write to stdout: its answer, which may carry a rewritten result. A hook
/// that writes more has failed.
pub const MAX_STDOUT: usize = 16 << 20;
/// How much of the start of a hook's stderr is kept (a deny reason); past it, only the last
/// [`STDERR_TAIL`] bytes are (a failure's last words), the rest read and dropped.
pub const MAX_STDERR: usize = 64 << 10;
/// How much of the end of a long stderr is kept.
pub const STDERR_TAIL: usize = 4 << 10;

/// A hook's program with `~/` and `${VAR}` expanded, as a server's `command` is.
fn program(hook: &HookCommand) -> Result<String, String> {
    toolshelf_core::config::expand(&hook.command, &|k| std::env::var(k).ok())
}

/// Whether `program` can be run: a path (with a `/`) names an existing file, a bare name is
/// found in a directory of `PATH`.
fn can_be_found(program: &str) -> bool {
    if program.contains('/') {
        return std::path::Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// A warning for each hook whose program cannot be found, so that a typo shows at start-up
/// instead of as every event's hook failing (every call refused, with `on_error = "deny"`).
pub fn missing_programs(hooks: &toolshelf_core::hook::Hooks) -> Vec<String> {
    hooks
        .all()
        .filter_map(|hook| {
            let why = match program(&hook.command) {
                Ok(p) if can_be_found(&p) => return None,
                Ok(p) if p.contains('/') => format!("{p:?} does not exist"),
                Ok(p) => format!("{p:?} is not found on PATH"),
                Err(e) => e,
            };
            let outcome = match hook.command.on_error {
                OnError::Allow => "the event goes on",
                OnError::Deny => "the event is refused",
            };
            Some(format!(
                "[hooks] {}: its program cannot be run ({why}); each run will fail and {outcome} (on_error)",
                hook.label
            ))
        })
        .collect()
}

async fn run_one(hook: &HookCommand, input: &[u8]) -> HookRun {
    let program = match program(hook) {
        Ok(p) => p,
        Err(e) => return HookRun::Failed(format!("cannot run it: {e}")),
    };
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(&hook.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // A group of its own, so that what it started is stopped with it.
    #[cfg(unix)]
    cmd.process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return HookRun::Failed(format!("cannot run it: {e}")),
    };
    let mut group = Group(child.id());
    let limit = Duration::from_secs(hook.timeout_secs);
    let why = match tokio::time::timeout(limit, collect(&mut child, input)).await {
        Ok(Ok(run)) => {
            group.0 = None;
            return run;
        }
        Ok(Err(why)) => why,
        Err(_) => format!("timed out after {}s", hook.timeout_secs),
    };
    drop(group);
    let _ = child.kill().await;
    HookRun::Failed(why)
}

/// A hook's process group, killed when this is dropped unless the hook finished: a hook that
/// failed, or one whose caller went away mid-run, takes what it started with it.
struct Group(Option<u32>);

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(id) = self.0 {
            crate::kill_process_group(id);
        }
    }
}

/// Feeds `input` and reads the answer: the input is written while the output is read, so a hook
/// that answers before it has read all of it does not block on a full pipe.
async fn collect(child: &mut Child, input: &[u8]) -> Result<HookRun, String> {
    let stdin = child.stdin.take();
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err("its output could not be read".into());
    };
    let feed = async move {
        if let Some(mut stdin) = stdin {
            // A hook that ignores its input may close stdin early; that is not a failure.
            let _ = stdin.write_all(input).await;
        }
        Ok(())
    };
    let read_out = async move {
        let mut out = Vec::new();
        let n = stdout
            .take(MAX_STDOUT as u64 + 1)
            .read_to_end(&mut out)
            .await
            .map_err(|e| format!("reading its stdout failed: {e}"))?;
        if n > MAX_STDOUT {
            return Err(format!(
                "it wrote more than {} MiB to stdout",
                MAX_STDOUT >> 20
            ));
        }
        Ok(out)
    };
    let read_err = async move {
        let mut stderr = stderr;
        let mut head = Vec::new();
        let _ = (&mut stderr)
            .take(MAX_STDERR as u64)
            .read_to_end(&mut head)
            .await;
        // Past the head, the last bytes are kept in a window twice the tail's size.
        let mut tail: Vec<u8> = Vec::new();
        let mut dropped = 0usize;
        let mut buf = [0u8; 8192];
        while let Ok(n) = stderr.read(&mut buf).await
            && n > 0
        {
            tail.extend_from_slice(&buf[..n]);
            if tail.len() > 2 * STDERR_TAIL {
                let cut = tail.len() - STDERR_TAIL;
                dropped += cut;
                tail.drain(..cut);
            }
        }
        if dropped > 0 {
            head.extend_from_slice(format!("\n[… {dropped} bytes left out …]\n").as_bytes());
        }
        head.extend_from_slice(&tail);
        Ok(head)
    };
    let ((), out, err) = tokio::try_join!(feed, read_out, read_err)?;
    let status = child
        .wait()
        .await
        .map_err(|e| format!("waiting for it failed: {e}"))?;
    Ok(HookRun::Exited {
        code: status.code(),
        stdout: String::from_utf8_lossy(&out).into_owned(),
        stderr: String::from_utf8_lossy(&err).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolshelf_core::config::HooksConfig;
    use toolshelf_core::hook::{FAILED_CLOSED, HookEventKind, Hooks};

    fn sh(script: &str, on_error: OnError, timeout_secs: u64) -> HookCommand {
        HookCommand {
            command: "sh".into(),
            args: vec!["-c".into(), script.into()],
            tools: None,
            timeout_secs,
            on_error,
        }
    }

    #[test]
    fn hooks_whose_program_cannot_be_found_are_named() {
        let hook = |command: &str, on_error| HookCommand {
            command: command.into(),
            ..sh("", on_error, 5)
        };
        let config = HooksConfig {
            pre_call: vec![
                hook("sh", OnError::Deny),
                hook("/nonexistent/toolshelf-hook", OnError::Deny),
            ],
            session_start: vec![hook("toolshelf-no-such-hook", OnError::Allow)],
            ..Default::default()
        };
        let warnings = missing_programs(&Hooks::new(&config).expect("valid"));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(
            warnings[0].starts_with("[hooks] pre_call[1] \"/nonexistent/toolshelf-hook\"")
                && warnings[0].contains("does not exist")
                && warnings[0].contains("the event is refused"),
            "{warnings:?}"
        );
        assert!(
            warnings[1].contains("session_start[0]") && warnings[1].contains("not found on PATH"),
            "{warnings:?}"
        );
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
    async fn a_hook_that_fails_closed_leaves_its_failure_out_of_what_the_model_reads() {
        let crash = sh(
            "cat >/dev/null; echo 'hook crashed: DB_PASSWORD=hunter2' >&2; exit 1",
            OnError::Deny,
            10,
        );
        let v = run(&compiled(vec![crash]), None, event()).await;
        assert_eq!(v.denied.as_deref(), Some(FAILED_CLOSED));
        assert!(v.failures[0].ends_with("exit status 1: hook crashed: DB_PASSWORD=hunter2"));
        let Some(HookDenial::Failed(report)) = &v.denial else {
            panic!("failed closed: {v:?}")
        };
        assert!(report.contains("hunter2"), "{report}");
        // A result hook whose replacement is unreadable fails the same way.
        let bad_result = sh(r#"cat >/dev/null; echo '{"result": 1}'"#, OnError::Deny, 10);
        let mut post = event();
        post.event = HookEventKind::PostCall;
        let (v, replaced) = run_replacing(&compiled(vec![bad_result]), None, post, |_| {
            Err::<(), _>("not a result".to_owned())
        })
        .await;
        assert!(replaced.is_none());
        assert_eq!(v.denied.as_deref(), Some(FAILED_CLOSED));
        assert!(
            matches!(&v.denial, Some(HookDenial::Failed(r)) if r.contains("not a result")),
            "{v:?}"
        );
        // A deny is a decision, and its reason is the hook's.
        let deny = sh(
            "cat >/dev/null; echo 'not today' >&2; exit 2",
            OnError::Deny,
            10,
        );
        let v = run(&compiled(vec![deny]), None, event()).await;
        assert_eq!(v.denied.as_deref(), Some("not today"));
        assert_eq!(v.denial, Some(HookDenial::Decided("not today".into())));
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
        assert_eq!(v.denied.as_deref(), Some(FAILED_CLOSED));
        assert!(
            matches!(&v.denial, Some(HookDenial::Failed(r)) if r.contains("timed out after 1s") && r.contains("on_error = \"deny\"")),
            "{v:?}"
        );
        let missing = HookCommand {
            command: "/nonexistent/hook".into(),
            ..sh("", OnError::Allow, 1)
        };
        let v = run(&compiled(vec![missing]), None, event()).await;
        assert!(v.failures[0].contains("cannot run it"), "{v:?}");
    }

    #[tokio::test]
    async fn a_hook_that_writes_without_end_fails_and_its_output_is_bounded() {
        // Endless stdout fails at the bound, long before the timeout; endless stderr is read
        // and dropped past its bound until the timeout stops the hook.
        let flood = sh("cat >/dev/null; exec yes", OnError::Deny, 60);
        let v = run(&compiled(vec![flood]), None, event()).await;
        let denied = v.denial.expect("closed");
        assert!(
            denied.detail().contains("wrote more than 16 MiB to stdout"),
            "{denied:?}"
        );
        let chatty = sh("cat >/dev/null; yes >&2", OnError::Deny, 2);
        let v = run(&compiled(vec![chatty]), None, event()).await;
        assert!(v.failures[0].contains("timed out after 2s"), "{v:?}");
        // A deny reason is the kept part of stderr, cut for the model.
        let loud = sh(
            "cat >/dev/null; yes no | head -c 1000000 >&2; exit 2",
            OnError::Allow,
            30,
        );
        let v = run(&compiled(vec![loud]), None, event()).await;
        let reason = v.denied.expect("denied");
        assert!(reason.starts_with("no\nno\n"), "{reason}");
        assert!(
            reason.ends_with("(the rest of the hook's reason is cut)"),
            "{reason}"
        );
        // A failure keeps the end of a long stderr: its last words.
        let last = sh(
            "cat >/dev/null; yes no | head -c 1000000 >&2; echo 'the real cause' >&2; exit 1",
            OnError::Allow,
            30,
        );
        let v = run(&compiled(vec![last]), None, event()).await;
        assert!(
            v.failures[0].ends_with("the real cause"),
            "{:?}",
            v.failures
        );
    }

    #[tokio::test]
    async fn a_hook_that_answers_before_reading_a_large_input_does_not_block() {
        // 300 KB of output written before any input is read, with 1 MB of input: writing the
        // input first would fill both pipes and wait for the timeout.
        let eager = sh(
            r#"printf '%300000s' ''; echo '{"guidance": "read late"}'; cat >/dev/null"#,
            OnError::Deny,
            20,
        );
        let mut e = event();
        e.params = Some(
            serde_json::from_value(serde_json::json!({"blob": "x".repeat(1 << 20)})).expect("map"),
        );
        let v = run(&compiled(vec![eager]), None, e).await;
        assert_eq!((v.denied, v.guidance), (None, vec!["read late".to_owned()]));
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_timed_out_hook_is_stopped_with_what_it_started() {
        let dir = std::env::temp_dir().join(format!("toolshelf-hook-group-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let pid_file = dir.join("child.pid");
        let script = format!(
            "cat >/dev/null; sleep 300 & echo $! > {}; wait",
            pid_file.display()
        );
        let v = run(
            &compiled(vec![sh(&script, OnError::Deny, 1)]),
            None,
            event(),
        )
        .await;
        assert!(
            v.denial
                .expect("closed")
                .detail()
                .contains("timed out after 1s")
        );
        let pid = child_pid(&pid_file);
        // The grandchild was killed with the group; reaped by init, it is gone soon after.
        let _ = std::fs::remove_dir_all(&dir);
        assert!(gone(pid), "the hook's child {pid} outlived it");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_hook_whose_caller_goes_away_is_stopped_with_what_it_started() {
        let dir = std::env::temp_dir().join(format!("toolshelf-hook-drop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let pid_file = dir.join("child.pid");
        let script = format!(
            "cat >/dev/null; sleep 300 & echo $! > {}; wait",
            pid_file.display()
        );
        let hooks = compiled(vec![sh(&script, OnError::Deny, 600)]);
        // The caller gives up long before the hook's own timeout.
        let mut pending = Box::pin(run(&hooks, None, event()));
        let wrote = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                tokio::select! {
                    _ = &mut pending => panic!("the hook ended by itself"),
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
                if std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n')) {
                    break;
                }
            }
        })
        .await;
        assert!(wrote.is_ok(), "the hook wrote its child's pid");
        drop(pending);
        let pid = child_pid(&pid_file);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(gone(pid), "the hook's child {pid} outlived its caller");
    }

    /// The pid a hook's script wrote to `file` for the child it started.
    #[cfg(unix)]
    fn child_pid(file: &std::path::Path) -> i32 {
        std::fs::read_to_string(file)
            .expect("the hook wrote its child's pid")
            .trim()
            .parse()
            .expect("a pid")
    }

    /// Whether process `pid` is gone (or a zombie) within five seconds.
    #[cfg(unix)]
    fn gone(pid: i32) -> bool {
        (0..100).any(|_| {
            let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
                && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z "));
            if alive {
                std::thread::sleep(Duration::from_millis(50));
            }
            !alive
        })
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

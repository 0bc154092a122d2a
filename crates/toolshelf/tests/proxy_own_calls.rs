//! End-to-end tests of `toolshelf proxy` on calls of tools the client runs itself whose calls are
//! of their own kind (OpenAI Responses `custom_tool_call`, `local_shell_call`, `shell_call`,
//! `computer_call`; a Chat Completions tool call of type `custom`) and of client-run tools the
//! active mode hides: they meet the permission rules and the `pre_call` hooks like every client
//! tool's call, the client gets only the ones allowed, and the model reads each refusal in the
//! next request in the shape its API wants (a computer call's: a blank screenshot and a message
//! saying why), chained by `previous_response_id` too. A call of its own kind reaches the client
//! only when the client sent a tool of that kind and name, and one of a tool passed along as sent
//! that the client stopped sending is refused as gone. The upstream is
//! `fixtures/loop_upstream.py`, which checks every request as the providers check it.

mod common;

use common::{HEADERS, LoopUpstream, ProxyProc, Scratch, events, post, tool_uses, tools};
use serde_json::{Value, json};

const BEARER: [(&str, &str); 1] = [("authorization", "Bearer k")];

/// One Responses request; the response as the client reads it (a stream's last event's), and
/// the call ids of every item a stream showed the client.
fn responses(
    proxy: &ProxyProc,
    tools: &[Value],
    input: &[Value],
    stream: bool,
) -> (Value, Vec<String>) {
    responses_chained(proxy, tools, None, input, stream)
}

/// [`responses`], chained to the response `previous` when given.
fn responses_chained(
    proxy: &ProxyProc,
    tools: &[Value],
    previous: Option<&Value>,
    input: &[Value],
    stream: bool,
) -> (Value, Vec<String>) {
    let mut body = json!({"model": "m", "input": input, "tools": tools,
                          "instructions": "You help.", "stream": stream});
    if let Some(previous) = previous {
        body["previous_response_id"] = previous.clone();
    }
    let (status, answer) = post(&format!("{}/v1/responses", proxy.url), &body, &BEARER);
    assert_eq!(status, 200, "{answer}\nproxy log:\n{}", proxy.log());
    if !stream {
        let ids = call_ids(&answer["output"]);
        return (answer, ids);
    }
    let all = events(&answer);
    let mut shown: Vec<String> = Vec::new();
    for id in all.iter().filter_map(|e| e["item"]["call_id"].as_str()) {
        if !shown.iter().any(|s| s == id) {
            shown.push(id.to_owned());
        }
    }
    let last = all.last().expect("events").clone();
    assert_eq!(last["type"], "response.completed", "{answer}");
    (last["response"].clone(), shown)
}

fn call_ids(output: &Value) -> Vec<String> {
    output
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["call_id"].as_str().map(str::to_owned))
        .collect()
}

/// The item of `input` (a request's) that answers call `id`.
fn answer_of<'a>(input: &'a Value, id: &str) -> &'a Value {
    input
        .as_array()
        .expect("input")
        .iter()
        .find(|i| {
            i["type"].as_str().is_some_and(|t| t.ends_with("_output"))
                && (i["call_id"] == id || i["id"] == id)
        })
        .unwrap_or_else(|| panic!("no answer to {id}: {input}"))
}

/// A `pre_call` hook that appends every event it reads to `log`, and denies a call whose event
/// holds `refuse-me`.
fn logging_hook(log: &str) -> String {
    format!(
        "[[hooks.pre_call]]\ncommand = \"sh\"\n\
         args = [\"-c\", \"e=$(cat); printf '%s\\\\n' \\\"$e\\\" >> {log}; \
         case \\\"$e\\\" in *refuse-me*) echo 'not this one' >&2; exit 2;; esac\"]\n"
    )
}

fn hook_events(log: &str) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Responses calls of their own kind meet the permission rules (a deny rule that names the tool
/// hides it, and its call reads as one of a tool the client never sent; rules on their
/// arguments name themselves) and the `pre_call` hooks, streamed or not: the client gets the
/// allowed ones as the model wrote them and nothing of the refused ones, and the next request
/// answers each refusal with the output item of its kind, which the provider accepts.
#[test]
fn responses_calls_of_their_own_kind_meet_the_rules_and_hooks() {
    let s = Scratch::new("proxy-own-responses");
    let hook_log = s.path("hook.jsonl");
    let denied_patch = "*** Begin Patch\n*** Update File: /home/u/.ssh/authorized_keys\n+ssh-rsa EVIL\n*** End Patch";
    let hooked_patch = "*** Begin Patch\n*** Add File: refuse-me.txt\n+x\n*** End Patch";
    let good_patch = "*** Begin Patch\n*** Add File: notes.txt\n+hello\n*** End Patch";
    let rm = json!({"type": "exec", "command": ["rm", "-rf", "/home/u"], "env": {}});
    let ls =
        json!({"type": "exec", "command": ["ls", "-la"], "env": {}, "working_directory": "/tmp"});
    let round = json!({"text": "On it.", "calls": [
        {"kind": "custom", "name": "apply_patch", "input": denied_patch},
        {"kind": "custom", "name": "apply_patch", "input": hooked_patch},
        {"kind": "local_shell", "name": "", "input": rm},
        {"kind": "shell", "name": "", "input": {"commands": ["cat /etc/passwd"]}},
        {"kind": "custom", "name": "apply_patch", "input": good_patch},
        {"kind": "local_shell", "name": "", "input": ls},
    ]});
    let steps = json!([round, {"text": "Done."}, round, {"text": "Done."}]);
    let upstream = LoopUpstream::start(&s, &steps);
    let config = format!(
        "[permissions]\ndeny = [\"^apply_patch(input=*.ssh*)\", \"^local_shell(rm)\", \"^shell$\"]\n{}",
        logging_hook(&hook_log)
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), &config, &[]);
    let list = vec![
        json!({"type": "custom", "name": "apply_patch", "description": "Apply a patch."}),
        json!({"type": "local_shell"}),
        json!({"type": "shell"}),
        json!({"type": "function", "name": "Read", "description": "Read a file.",
               "parameters": {"type": "object", "properties": {"file_path": {"type": "string"}}}}),
    ];
    for (k, stream) in [false, true].into_iter().enumerate() {
        let step = 2 * k as u64;
        let user = json!({"role": "user", "content": format!("patch it ({stream})")});
        let (answer, shown) = responses(&proxy, &list, std::slice::from_ref(&user), stream);
        let made = upstream.call_ids(step);
        assert_eq!(made.len(), 6);
        let allowed = [made[4].clone(), made[5].clone()];
        assert_eq!(call_ids(&answer["output"]), allowed, "{answer}");
        if stream {
            assert_eq!(shown, allowed, "a stream shows no refused call");
        }
        let played = upstream.played();
        let sent = &played[step as usize]["body"];
        let tools_sent: Vec<String> = sent["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["name"].as_str().or(t["type"].as_str()).map(str::to_owned))
            .collect();
        assert!(!tools_sent.contains(&"shell".to_owned()), "{tools_sent:?}");
        // The allowed calls reach the client as the model wrote them.
        let output = answer["output"].as_array().expect("output");
        let patch = output
            .iter()
            .find(|i| i["type"] == "custom_tool_call")
            .expect("the patch");
        assert_eq!(patch["name"], "apply_patch");
        assert_eq!(patch["input"], good_patch);
        let shell = output
            .iter()
            .find(|i| i["type"] == "local_shell_call")
            .expect("the shell call");
        assert_eq!(shell["action"], ls);
        // The client answers its calls; the model reads the refusals of the others.
        let mut input = vec![user];
        input.extend(output.iter().cloned());
        input.push(
            json!({"type": "custom_tool_call_output", "call_id": made[4], "output": "patched"}),
        );
        input.push(json!({"type": "function_call_output", "call_id": made[5], "output": "a b c"}));
        let (answer, _) = responses(&proxy, &list, &input, stream);
        assert!(answer["output"].to_string().contains("Done."), "{answer}");
        assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
        let played = upstream.played();
        assert_eq!(played.len() as u64, step + 2, "no round in between");
        let next = &played[step as usize + 1]["body"]["input"];
        let denied = answer_of(next, &made[0]);
        assert_eq!(denied["type"], "custom_tool_call_output", "{denied}");
        assert!(denied["output"].to_string().contains("deny[0]"), "{denied}");
        let hooked = answer_of(next, &made[1]);
        assert_eq!(hooked["type"], "custom_tool_call_output", "{hooked}");
        assert!(
            hooked["output"].to_string().contains("not this one"),
            "{hooked}"
        );
        let rm_answer = answer_of(next, &made[2]);
        assert_eq!(rm_answer["type"], "function_call_output", "{rm_answer}");
        assert!(
            rm_answer["output"].to_string().contains("deny[1]"),
            "{rm_answer}"
        );
        let shell_answer = answer_of(next, &made[3]);
        assert_eq!(shell_answer["type"], "shell_call_output", "{shell_answer}");
        // The shell a deny rule hides reads as one the client never sent.
        assert!(
            shell_answer["output"]
                .to_string()
                .contains("no tool of type \\\"shell\\\" was given"),
            "{shell_answer}"
        );
    }
    // The hook saw the calls the rules let through, by the client's tool name, with params it can
    // judge; none the rules refused.
    let seen: Vec<(String, Value)> = hook_events(&hook_log)
        .iter()
        .map(|e| {
            (
                e["tool"].as_str().unwrap_or_default().to_owned(),
                e["params"].clone(),
            )
        })
        .collect();
    let once = [
        ("apply_patch".to_owned(), json!({"input": hooked_patch})),
        ("apply_patch".to_owned(), json!({"input": good_patch})),
        ("local_shell".to_owned(), ls.clone()),
    ];
    assert_eq!(seen, [once.clone(), once].concat(), "{seen:#?}");
}

/// The user message of `input` (a request's) whose text holds `needle`.
fn message_with<'a>(input: &'a Value, needle: &str) -> &'a Value {
    input
        .as_array()
        .expect("input")
        .iter()
        .find(|i| i["role"] == "user" && i["content"].to_string().contains(needle))
        .unwrap_or_else(|| panic!("no message with {needle:?}: {input}"))
}

/// Checks that `answer` is the `computer_call_output` of a refused computer call: a blank
/// screenshot (the refusal is told in a message after it).
fn assert_blank_screenshot(answer: &Value) {
    assert_eq!(answer["type"], "computer_call_output", "{answer}");
    assert_eq!(answer["output"]["type"], "computer_screenshot", "{answer}");
    assert!(
        answer["output"]["image_url"]
            .as_str()
            .is_some_and(|u| u.starts_with("data:image/png;base64,")),
        "{answer}"
    );
}

/// A refused computer call is answered like a refused call of any kind, not dropped: by a
/// `computer_call_output` whose screenshot is a blank placeholder, and a message after it that
/// says the call was refused and why. So a client that chains its requests by
/// `previous_response_id` (the provider keeps the response that holds the call) continues the
/// conversation: the results the proxy owes come first in the chained request, streamed or not,
/// for a computer call and an apply_patch call alike, and a computer call refused in a round the
/// proxy continues is answered there.
#[test]
fn a_refused_computer_call_is_answered_with_a_blank_screenshot_in_chained_requests() {
    let s = Scratch::new("proxy-own-computer");
    let double = json!({"type": "double_click", "x": 1, "y": 2});
    let patch = json!({"type": "update_file", "path": "/home/u/.ssh/authorized_keys", "diff": "+"});
    let first = json!({"text": "Patching.", "calls": [
        {"kind": "apply_patch", "name": "", "input": patch},
        {"kind": "computer", "name": "", "input": double},
        {"kind": "custom", "name": "Fmt", "input": "ok"},
    ]});
    let second = json!({"text": "Clicking.", "calls": [
        {"kind": "computer", "name": "", "input": double},
    ]});
    let mut steps = vec![
        first,
        second,
        json!({"text": "Done."}),
        json!({"text": "More."}),
    ];
    steps.extend(steps.clone());
    let steps = Value::Array(steps);
    let upstream = LoopUpstream::start(&s, &steps);
    let config = "[permissions]\ndeny = [\"^apply_patch(file:path=**/.ssh/**)\", \
                  \"^computer_use_preview(type=double_click)\"]\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let list = vec![
        json!({"type": "custom", "name": "Fmt", "description": "Format."}),
        json!({"type": "apply_patch"}),
        json!({"type": "computer_use_preview", "display_width": 1024, "display_height": 768,
               "environment": "linux"}),
    ];
    for (k, stream) in [false, true].into_iter().enumerate() {
        let step = 4 * k;
        let user = json!({"role": "user", "content": format!("go ({stream})")});
        let (answer, shown) = responses(&proxy, &list, std::slice::from_ref(&user), stream);
        let made = upstream.call_ids(step as u64);
        assert_eq!(call_ids(&answer["output"]), [made[2].clone()], "{answer}");
        if stream {
            assert_eq!(shown, [made[2].clone()], "a stream shows no refused call");
        }
        // The client answers its call in a request chained to the response.
        let mine = json!({"type": "custom_tool_call_output", "call_id": made[2], "output": "done"});
        let (answer, shown) = responses_chained(
            &proxy,
            &list,
            Some(&answer["id"]),
            std::slice::from_ref(&mine),
            stream,
        );
        assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
        assert!(call_ids(&answer["output"]).is_empty(), "{answer}");
        assert!(shown.is_empty(), "{shown:?}");
        let text = answer["output"].to_string();
        assert!(
            text.contains("Clicking.") && text.contains("Done."),
            "{answer}"
        );
        let played = upstream.played();
        assert_eq!(played.len(), step + 3, "one round in between");
        let sent = &played[step + 1]["body"];
        assert!(sent["previous_response_id"].is_string(), "{sent}");
        let input = &sent["input"];
        let patched = answer_of(input, &made[0]);
        assert_eq!(patched["type"], "apply_patch_call_output", "{patched}");
        assert_eq!(patched["status"], "failed", "{patched}");
        assert!(
            patched["output"].to_string().contains("deny[0]"),
            "{patched}"
        );
        assert_blank_screenshot(answer_of(input, &made[1]));
        let told = message_with(input, &made[1]);
        let told = told.to_string();
        assert!(
            told.contains("was refused")
                && told.contains("deny[1]")
                && told.contains("blank placeholder"),
            "{told}"
        );
        // The answers to the turn's calls stay together, the message after them.
        let items = input.as_array().expect("input");
        let at = |id: &str| {
            items
                .iter()
                .position(|i| i["call_id"] == id && i.get("role").is_none())
                .unwrap_or_else(|| panic!("no answer to {id}: {input}"))
        };
        let told_at = items
            .iter()
            .position(|i| i["role"] == "user")
            .expect("the message");
        assert!(
            at(&made[0]) < told_at && at(&made[1]) < told_at && at(&made[2]) < told_at,
            "{input}"
        );
        // The computer call refused in the round the proxy continued is answered there.
        let again = upstream.call_ids(step as u64 + 1);
        let input = &played[step + 2]["body"]["input"];
        assert_blank_screenshot(answer_of(input, &again[0]));
        assert!(
            message_with(input, &again[0])
                .to_string()
                .contains("deny[1]"),
            "{input}"
        );
        // And the conversation goes on chained.
        let (answer, _) = responses_chained(
            &proxy,
            &list,
            Some(&answer["id"]),
            &[json!({"role": "user", "content": "and now?"})],
            stream,
        );
        assert!(answer["output"].to_string().contains("More."), "{answer}");
        assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
    }
}

/// A call of its own kind reaches the client only when the client sent a tool of that kind
/// and name: a custom call named as a function tool (resident, deferred or hidden by a deny
/// rule) or as a built-in, and a call of a built-in kind the client never offered, are refused
/// to the model in their own kind, saying what to do, and never reach the client, streamed or
/// not; in Chat too.
/// A Responses turn whose upstream step `step` makes several calls, of which only call
/// `allowed` (a custom tool's) reaches the client, a stream showing no other; the client answers
/// it `ok` and the model ends with "Done.". The call ids the step made, and the input of the
/// request that answered them.
fn only_one_call_reaches_the_client(
    proxy: &ProxyProc,
    upstream: &LoopUpstream,
    list: &[Value],
    stream: bool,
    step: usize,
    allowed: usize,
) -> (Vec<String>, Value) {
    let user = json!({"role": "user", "content": format!("go ({stream})")});
    let (answer, shown) = responses(proxy, list, std::slice::from_ref(&user), stream);
    let made = upstream.call_ids(step as u64);
    assert_eq!(
        call_ids(&answer["output"]),
        [made[allowed].clone()],
        "{answer}"
    );
    if stream {
        assert_eq!(
            shown,
            [made[allowed].clone()],
            "a stream shows no refused call"
        );
    }
    let mut input = vec![user];
    input.extend(answer["output"].as_array().expect("output").iter().cloned());
    input
        .push(json!({"type": "custom_tool_call_output", "call_id": made[allowed], "output": "ok"}));
    let (answer, _) = responses(proxy, list, &input, stream);
    assert!(answer["output"].to_string().contains("Done."), "{answer}");
    let next = upstream.played()[step + 1]["body"]["input"].clone();
    (made, next)
}

#[test]
fn a_call_of_its_own_kind_needs_a_tool_of_that_kind() {
    let s = Scratch::new("proxy-own-kind");
    let round = json!({"calls": [
        {"kind": "custom", "name": "Bash", "input": "rm -rf /"},
        {"kind": "custom", "name": "Deferred", "input": "cat secret"},
        {"kind": "custom", "name": "Hidden", "input": "x"},
        {"kind": "custom", "name": "apply_patch", "input": "*** Begin Patch"},
        {"kind": "local_shell", "name": "",
         "input": {"type": "exec", "command": ["rm", "-rf", "/"], "env": {}}},
        {"kind": "computer", "name": "", "input": {"type": "click", "x": 1, "y": 2}},
        {"kind": "custom", "name": "Fmt", "input": "ok"},
    ]});
    let chat_round = json!({"calls": [
        {"kind": "custom", "name": "Bash", "input": "rm -rf /"},
        {"kind": "custom", "name": "Fmt", "input": "ok"},
    ]});
    let steps = json!([round, {"text": "Done."}, round, {"text": "Done."},
                       chat_round, {"text": "Done."}]);
    let upstream = LoopUpstream::start(&s, &steps);
    let config = "[defer]\ndefault = false\nrules = [\"Defer(^Deferred$)\"]\n\
                  [permissions]\ndeny = [\"^Bash(*rm -rf*)\", \"^Hidden\"]\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let function = |name: &str| {
        json!({"type": "function", "name": name, "description": name,
               "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}})
    };
    let list = vec![
        function("Bash"),
        function("Deferred"),
        function("Hidden"),
        json!({"type": "custom", "name": "Fmt", "description": "Format."}),
        json!({"type": "apply_patch"}),
    ];
    for (k, stream) in [false, true].into_iter().enumerate() {
        let step = 2 * k;
        let (made, next) =
            only_one_call_reaches_the_client(&proxy, &upstream, &list, stream, step, 6);
        assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
        let next = &next;
        let expect = [
            (
                0,
                "custom_tool_call_output",
                "it is not a custom tool. Call it as a function",
            ),
            (1, "custom_tool_call_output", "a deferred function tool"),
            (
                2,
                "custom_tool_call_output",
                "no custom tool of that name is available",
            ),
            (
                3,
                "custom_tool_call_output",
                "not a custom tool but the client's tool of type \\\"apply_patch\\\"",
            ),
            (
                4,
                "function_call_output",
                "no tool of type \\\"local_shell\\\" was given",
            ),
        ];
        for (i, kind, text) in expect {
            let refused = answer_of(next, &made[i]);
            assert_eq!(refused["type"], kind, "{refused}");
            assert!(refused["output"].to_string().contains(text), "{refused}");
        }
        assert_blank_screenshot(answer_of(next, &made[5]));
        message_with(next, "no tool of type \\\"computer\\\" was given");
    }
    // Chat: a custom call named as a function tool.
    let chat_tools = vec![
        json!({"type": "function", "function": {"name": "Bash", "description": "Run.",
               "parameters": {"type": "object"}}}),
        json!({"type": "custom", "custom": {"name": "Fmt", "description": "Format."}}),
    ];
    let user = json!({"role": "user", "content": "go (chat)"});
    let body = json!({"model": "m", "tools": chat_tools, "messages": [user]});
    let (status, answer) = post(
        &format!("{}/v1/chat/completions", proxy.url),
        &body,
        &BEARER,
    );
    assert_eq!(status, 200, "{answer}");
    let made = upstream.call_ids(4);
    let calls = chat_calls(&answer, false);
    assert_eq!(
        calls,
        [json!({"id": made[1], "type": "custom", "custom": {"name": "Fmt", "input": "ok"}})],
        "{answer}"
    );
    let messages = json!([user,
        {"role": "assistant", "content": null, "tool_calls": calls},
        {"role": "tool", "tool_call_id": made[1], "content": "ok"}]);
    let body = json!({"model": "m", "tools": chat_tools, "messages": messages});
    let (status, answer) = post(
        &format!("{}/v1/chat/completions", proxy.url),
        &body,
        &BEARER,
    );
    assert_eq!(status, 200, "{answer}");
    let played = upstream.played();
    let result = chat_result(&played[5]["body"], &made[0]);
    assert!(
        result["content"]
            .to_string()
            .contains("it is not a custom tool. Call it as a function"),
        "{result}"
    );
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
}

/// A `pre_call` hook's rewrite of a call of its own kind reaches the client when it fits the
/// item's shape; one that does not is refused with the reason, never handed over half-applied.
#[test]
fn a_hook_rewrite_of_a_call_of_its_own_kind_applies_only_when_it_fits() {
    let s = Scratch::new("proxy-own-rewrite");
    let steps = json!([
        {"calls": [{"kind": "custom", "name": "apply_patch", "input": "fit"},
                   {"kind": "local_shell", "name": "",
                    "input": {"type": "exec", "command": ["misfit"], "env": {}}}]},
        {"text": "Done."},
    ]);
    let upstream = LoopUpstream::start(&s, &steps);
    let config = "[[hooks.pre_call]]\ncommand = \"sh\"\n\
         args = [\"-c\", \"e=$(cat); case \\\"$e\\\" in \
         *fit*misfit*|*misfit*) echo '{\\\"params\\\": {\\\"command\\\": \\\"ls\\\"}}';; \
         *) echo '{\\\"params\\\": {\\\"input\\\": \\\"rewritten\\\"}}';; esac\"]\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let list = vec![
        json!({"type": "custom", "name": "apply_patch", "description": "Apply a patch."}),
        json!({"type": "local_shell"}),
    ];
    let user = json!({"role": "user", "content": "go"});
    let (answer, _) = responses(&proxy, &list, std::slice::from_ref(&user), false);
    let made = upstream.call_ids(0);
    let output = answer["output"].as_array().expect("output");
    assert_eq!(call_ids(&answer["output"]), [made[0].clone()], "{answer}");
    assert_eq!(output[0]["input"], "rewritten", "{answer}");
    let mut input = vec![user];
    input.extend(output.iter().cloned());
    input.push(json!({"type": "custom_tool_call_output", "call_id": made[0], "output": "ok"}));
    responses(&proxy, &list, &input, false);
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
    let played = upstream.played();
    let refused = answer_of(&played[1]["body"]["input"], &made[1]);
    assert!(
        refused["output"]
            .to_string()
            .contains("a pre_call hook rewrote its params into a shape its call cannot take"),
        "{refused}"
    );
}

/// A client-run tool the active mode hides is not sent upstream, and a call the model makes of
/// it anyway is refused as any hidden tool's call is, never handed to the client: Anthropic's
/// `bash`, and in the OpenAI formats a local shell and a custom tool, whose calls read what a
/// call of a tool of that kind the client never sent reads.
#[test]
fn a_client_run_tool_the_mode_hides_is_refused_when_called() {
    let s = Scratch::new("proxy-own-mode");
    let bash = json!({"name": "bash", "input": {"command": "echo PWNED > /tmp/pwned"}});
    let steps = json!([
        {"calls": [bash]}, {"text": "Not allowed."},
        {"calls": [bash]}, {"text": "Not allowed."},
        {"calls": [{"kind": "local_shell", "name": "",
                    "input": {"type": "exec", "command": ["touch", "x"], "env": {}}}]},
        {"text": "Not allowed."},
        {"calls": [{"kind": "custom", "name": "apply_patch", "input": "*** Begin Patch"}]},
        {"text": "Not allowed."},
    ]);
    let upstream = LoopUpstream::start(&s, &steps);
    let config = "[modes.web]\ntools = [\"^Read$\"]\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &["--mode", "web"]);
    let mut list = tools();
    list.push(json!({"type": "bash_20250124", "name": "bash"}));
    let refused_text = "No tool named \\\"bash\\\" is available";
    for (k, stream) in [false, true].into_iter().enumerate() {
        let body = json!({"model": "m", "max_tokens": 64, "tools": list, "stream": stream,
                          "messages": [{"role": "user", "content": format!("go {stream}")}]});
        let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &HEADERS);
        assert_eq!(status, 200, "{answer}");
        let said: String = if stream {
            let all = events(&answer);
            assert!(
                !all.iter().any(|e| e["content_block"]["type"] == "tool_use"),
                "{answer}"
            );
            all.iter()
                .filter_map(|e| e["delta"]["text"].as_str())
                .collect()
        } else {
            assert!(tool_uses(&answer).is_empty(), "{answer}");
            answer["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(said, "Not allowed.", "{answer}");
        let played = upstream.played();
        let sent = &played[2 * k];
        assert!(
            !sent["body"]["tools"].to_string().contains("bash_20250124"),
            "{}",
            sent["body"]["tools"]
        );
        let next = played[2 * k + 1]["body"]["messages"].to_string();
        assert!(next.contains(refused_text), "{next}");
    }
    // Responses: a local shell call.
    let openai = vec![
        json!({"type": "local_shell"}),
        json!({"type": "function", "name": "Read", "description": "Read a file.",
               "parameters": {"type": "object", "properties": {"file_path": {"type": "string"}}}}),
    ];
    let (answer, _) = responses(
        &proxy,
        &openai,
        &[json!({"role": "user", "content": "touch"})],
        false,
    );
    assert!(call_ids(&answer["output"]).is_empty(), "{answer}");
    let played = upstream.played();
    assert!(
        !played[4]["body"]["tools"]
            .to_string()
            .contains("local_shell")
    );
    let made = upstream.call_ids(4);
    let refusal = answer_of(&played[5]["body"]["input"], &made[0]);
    assert!(
        refusal["output"]
            .to_string()
            .contains("no tool of type \\\"local_shell\\\" was given"),
        "{refusal}"
    );
    // Chat: a custom tool.
    let chat_tools = vec![
        json!({"type": "custom", "custom": {"name": "apply_patch", "description": "Patch."}}),
        json!({"type": "function", "function": {"name": "Read", "description": "Read a file.",
               "parameters": {"type": "object"}}}),
    ];
    let body = json!({"model": "m", "tools": chat_tools,
                      "messages": [{"role": "user", "content": "patch"}]});
    let (status, answer) = post(
        &format!("{}/v1/chat/completions", proxy.url),
        &body,
        &BEARER,
    );
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["choices"][0]["message"]["tool_calls"].is_null(),
        "{answer}"
    );
    let played = upstream.played();
    let made = upstream.call_ids(6);
    let result = chat_result(&played[7]["body"], &made[0]);
    assert!(
        result["content"]
            .to_string()
            .contains("\\\"apply_patch\\\" was not run: no custom tool of that name is available"),
        "{result}"
    );
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
}

/// The tool calls of a Chat answer as the client reads them (a stream's pieces joined).
fn chat_calls(answer: &Value, stream: bool) -> Vec<Value> {
    if !stream {
        return answer["choices"][0]["message"]["tool_calls"]
            .as_array()
            .cloned()
            .unwrap_or_default();
    }
    let mut calls: Vec<Value> = Vec::new();
    for e in events(answer) {
        for tc in e["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = tc["index"].as_u64().expect("an index") as usize;
            if calls.len() <= i {
                let mut tc = tc.clone();
                if let Some(o) = tc.as_object_mut() {
                    o.remove("index");
                }
                calls.push(tc);
            } else if let Some(more) = tc["custom"]["input"].as_str() {
                let joined = format!(
                    "{}{more}",
                    calls[i]["custom"]["input"].as_str().unwrap_or("")
                );
                calls[i]["custom"]["input"] = joined.into();
            }
        }
    }
    calls
}

/// A Chat Completions call of a custom tool meets the rules and hooks: the client gets the
/// allowed one as the model wrote it, streamed or not, and the model reads the refusal of the
/// other as the `tool` message of its id.
#[test]
fn a_chat_custom_tool_call_meets_the_rules() {
    let s = Scratch::new("proxy-own-chat");
    let hook_log = s.path("hook.jsonl");
    let denied = "*** Update File: /home/u/.ssh/authorized_keys";
    let good = "*** Add File: notes.txt";
    let round = json!({"calls": [
        {"kind": "custom", "name": "apply_patch", "input": denied},
        {"kind": "custom", "name": "apply_patch", "input": good},
    ]});
    let steps = json!([round, {"text": "Done."}, round, {"text": "Done."}]);
    let upstream = LoopUpstream::start(&s, &steps);
    let config = format!(
        "[permissions]\ndeny = [\"^apply_patch(input=*.ssh*)\"]\n{}",
        logging_hook(&hook_log)
    );
    let proxy = ProxyProc::start(&s, &upstream.url(), &config, &[]);
    let list = vec![
        json!({"type": "custom", "custom": {"name": "apply_patch", "description": "Patch."}}),
        json!({"type": "function", "function": {"name": "Read", "description": "Read a file.",
               "parameters": {"type": "object"}}}),
    ];
    for (k, stream) in [false, true].into_iter().enumerate() {
        let step = 2 * k as u64;
        let user = json!({"role": "user", "content": format!("patch ({stream})")});
        let body = json!({"model": "m", "tools": list, "stream": stream, "messages": [user]});
        let (status, answer) = post(
            &format!("{}/v1/chat/completions", proxy.url),
            &body,
            &BEARER,
        );
        assert_eq!(status, 200, "{answer}");
        let made = upstream.call_ids(step);
        let calls = chat_calls(&answer, stream);
        assert_eq!(
            calls,
            [json!({"id": made[1], "type": "custom",
                    "custom": {"name": "apply_patch", "input": good}})],
            "{answer}"
        );
        let finish = if stream {
            events(&answer)
                .iter()
                .filter_map(|e| e["choices"][0]["finish_reason"].as_str().map(str::to_owned))
                .next_back()
                .unwrap_or_default()
        } else {
            answer["choices"][0]["finish_reason"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(finish, "tool_calls", "{answer}");
        let messages = json!([user,
            {"role": "assistant", "content": null, "tool_calls": calls},
            {"role": "tool", "tool_call_id": made[1], "content": "patched"}]);
        let body = json!({"model": "m", "tools": list, "stream": stream, "messages": messages});
        let (status, answer) = post(
            &format!("{}/v1/chat/completions", proxy.url),
            &body,
            &BEARER,
        );
        assert_eq!(status, 200, "{answer}");
        assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
        let played = upstream.played();
        assert_eq!(played.len() as u64, step + 2);
        let result = chat_result(&played[step as usize + 1]["body"], &made[0]);
        assert!(
            result["content"].to_string().contains("deny[0]"),
            "{result}"
        );
    }
    let seen: Vec<Value> = hook_events(&hook_log)
        .iter()
        .map(|e| json!([e["tool"], e["params"]]))
        .collect();
    let once = json!(["apply_patch", {"input": good}]);
    assert_eq!(seen, [once.clone(), once], "{seen:#?}");
}

/// A tool passed along as sent that the client stops sending stays in the session's frozen
/// list, but a call of it is refused to the model as gone, never handed to the client: Anthropic's
/// `bash`, a Responses custom tool and local shell, a Chat custom tool.
#[test]
fn a_passed_along_tool_the_client_stops_sending_is_refused_as_gone() {
    let gone = "the client no longer offers this tool";
    // Each API with an upstream of its own, so that each part stands alone.
    let start = |name: &str, calls: Value| {
        let s = Scratch::new(&format!("proxy-own-gone-{name}"));
        let steps = json!([{"text": "hello"}, {"calls": calls}, {"text": "ok"}]);
        let upstream = LoopUpstream::start(&s, &steps);
        let proxy = ProxyProc::start(&s, &upstream.url(), "[defer]\ndefault = false\n", &[]);
        (s, upstream, proxy)
    };
    // Anthropic: bash.
    let (_s, upstream, proxy) = start(
        "anthropic",
        json!([{"name": "bash", "input": {"command": "ls"}}]),
    );
    let headers = [
        HEADERS[0],
        HEADERS[1],
        ("x-toolshelf-session", "gone-anthropic"),
    ];
    let mut list = tools();
    let hi = json!({"role": "user", "content": "hi"});
    list.push(json!({"type": "bash_20250124", "name": "bash"}));
    let body = json!({"model": "m", "max_tokens": 64, "tools": list, "messages": [hi]});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &headers);
    assert_eq!(status, 200, "{answer}");
    let messages = json!([hi, {"role": "assistant", "content": answer["content"]},
                          {"role": "user", "content": "go"}]);
    let body = json!({"model": "m", "max_tokens": 64, "tools": tools(), "messages": messages});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &headers);
    assert_eq!(status, 200, "{answer}");
    assert!(tool_uses(&answer).is_empty(), "{answer}");
    let played = upstream.played();
    assert!(
        played[1]["body"]["tools"]
            .to_string()
            .contains("bash_20250124"),
        "the frozen list keeps it"
    );
    let next = played[2]["body"]["messages"].to_string();
    assert!(next.contains(gone), "{next}");
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
    // Responses: a custom tool and a local shell.
    let (_s, upstream, proxy) = start(
        "responses",
        json!([{"kind": "custom", "name": "Fmt", "input": "x"},
               {"kind": "local_shell", "name": "",
                "input": {"type": "exec", "command": ["ls"], "env": {}}}]),
    );
    let headers = [BEARER[0], ("x-toolshelf-session", "gone-responses")];
    let read = json!({"type": "function", "name": "Read", "description": "Read a file.",
                      "parameters": {"type": "object", "properties": {}}});
    let send = |tools: Value, input: Value| {
        let body = json!({"model": "m", "input": input, "tools": tools,
                          "instructions": "You help."});
        let (status, answer) = post(&format!("{}/v1/responses", proxy.url), &body, &headers);
        assert_eq!(status, 200, "{answer}");
        answer
    };
    let answer = send(
        json!([read, {"type": "custom", "name": "Fmt"}, {"type": "local_shell"}]),
        json!([hi]),
    );
    let mut input = vec![hi.clone()];
    input.extend(answer["output"].as_array().expect("output").iter().cloned());
    input.push(json!({"role": "user", "content": "go"}));
    let answer = send(json!([read]), json!(input));
    assert!(call_ids(&answer["output"]).is_empty(), "{answer}");
    let made = upstream.call_ids(1);
    let next = &upstream.played()[2]["body"]["input"];
    let fmt = answer_of(next, &made[0]);
    assert_eq!(fmt["type"], "custom_tool_call_output", "{fmt}");
    assert!(fmt["output"].to_string().contains(gone), "{fmt}");
    let shell = answer_of(next, &made[1]);
    assert_eq!(shell["type"], "function_call_output", "{shell}");
    assert!(shell["output"].to_string().contains(gone), "{shell}");
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
    // Chat: a custom tool.
    let (_s, upstream, proxy) = start(
        "chat",
        json!([{"kind": "custom", "name": "Fmt", "input": "x"}]),
    );
    let headers = [BEARER[0], ("x-toolshelf-session", "gone-chat")];
    let read = json!({"type": "function", "function": {"name": "Read", "description": "Read.",
                      "parameters": {"type": "object"}}});
    let fmt = json!({"type": "custom", "custom": {"name": "Fmt", "description": "Format."}});
    let body = json!({"model": "m", "tools": [read, fmt], "messages": [hi]});
    let (status, answer) = post(
        &format!("{}/v1/chat/completions", proxy.url),
        &body,
        &headers,
    );
    assert_eq!(status, 200, "{answer}");
    let messages = json!([hi, {"role": "assistant", "content": "hello"},
                          {"role": "user", "content": "go"}]);
    let body = json!({"model": "m", "tools": [read], "messages": messages});
    let (status, answer) = post(
        &format!("{}/v1/chat/completions", proxy.url),
        &body,
        &headers,
    );
    assert_eq!(status, 200, "{answer}");
    assert!(chat_calls(&answer, false).is_empty(), "{answer}");
    let made = upstream.call_ids(1);
    let played = upstream.played();
    let result = chat_result(&played[2]["body"], &made[0]);
    assert!(result["content"].to_string().contains(gone), "{result}");
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
}

/// The proxy's `/metrics` text.
fn metrics(proxy: &ProxyProc) -> String {
    let out = std::process::Command::new("curl")
        .args(["-sS", &format!("{}/metrics", proxy.url)])
        .output()
        .expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `tool` message of a Chat request's `body` that answers call `id`.
fn chat_result(body: &Value, id: &str) -> Value {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no result for {id}: {body}"))
}

/// A function call of a tool whose calls are of their own kind (a custom tool, a local shell)
/// is not handed to the client, where it would dodge the rules on the tool's own calls: it is
/// refused to the model in the function call's output kind, saying how to call the tool; the
/// call of its own kind goes on to the client. Responses (streamed or not) and Chat.
#[test]
fn a_function_call_of_a_tool_of_its_own_kind_is_refused() {
    let s = Scratch::new("proxy-own-fn-call");
    let round = json!({"calls": [
        {"name": "Fmt", "input": {"cmd": "rm -rf /"}},
        {"name": "local_shell", "input": {"command": ["rm", "-rf", "/"]}},
        {"kind": "custom", "name": "Fmt", "input": "ok"},
    ]});
    let chat_round = json!({"calls": [{"name": "Fmt", "input": {"cmd": "rm -rf /"}}]});
    let steps = json!([round, {"text": "Done."}, round, {"text": "Done."},
                       chat_round, {"text": "Done."}]);
    let upstream = LoopUpstream::start(&s, &steps);
    let config = "[defer]\ndefault = false\n[permissions]\ndeny = [\"^Fmt(input=rm *)\"]\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let list = vec![
        json!({"type": "function", "name": "Read", "description": "Read a file.",
               "parameters": {"type": "object", "properties": {}}}),
        json!({"type": "custom", "name": "Fmt", "description": "Format."}),
        json!({"type": "local_shell"}),
    ];
    for (k, stream) in [false, true].into_iter().enumerate() {
        let step = 2 * k;
        let (made, next) =
            only_one_call_reaches_the_client(&proxy, &upstream, &list, stream, step, 2);
        let next = &next;
        for (i, text) in [
            (
                0,
                "\\\"Fmt\\\" was not run: it is a custom tool; call it with a custom tool call",
            ),
            (
                1,
                "it is the client's tool of type \\\"local_shell\\\"; call it with a local_shell call",
            ),
        ] {
            let refused = answer_of(next, &made[i]);
            assert_eq!(refused["type"], "function_call_output", "{refused}");
            assert!(refused["output"].to_string().contains(text), "{refused}");
        }
    }
    // Chat: a function call named as the client's custom tool.
    let chat_tools = vec![
        json!({"type": "function", "function": {"name": "Read", "description": "Read.",
               "parameters": {"type": "object"}}}),
        json!({"type": "custom", "custom": {"name": "Fmt", "description": "Format."}}),
    ];
    let body = json!({"model": "m", "tools": chat_tools,
                      "messages": [{"role": "user", "content": "go (chat)"}]});
    let (status, answer) = post(
        &format!("{}/v1/chat/completions", proxy.url),
        &body,
        &BEARER,
    );
    assert_eq!(status, 200, "{answer}");
    assert!(chat_calls(&answer, false).is_empty(), "{answer}");
    let made = upstream.call_ids(4);
    let result = chat_result(&upstream.played()[5]["body"], &made[0]);
    assert!(
        result["content"]
            .to_string()
            .contains("it is a custom tool; call it with a custom tool call"),
        "{result}"
    );
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
}

/// A call of a tool passed along as sent that a deny rule hides reads exactly what a call of a
/// name the client never sent reads, in every kind, so the refusal does not tell the tool is
/// there; it counts as hidden. A deny rule on the arguments leaves the tool visible, and its
/// refusal still names the rule.
#[test]
fn a_call_of_a_hidden_passed_along_tool_reads_as_unknown() {
    let s = Scratch::new("proxy-own-hidden");
    let secret = json!({"kind": "custom", "name": "Secret", "input": "x"});
    let nope = json!({"kind": "custom", "name": "Nope", "input": "x"});
    let shell = json!({"kind": "local_shell", "name": "",
                       "input": {"type": "exec", "command": ["ls"], "env": {}}});
    let fmt = json!({"kind": "custom", "name": "Fmt", "input": "rm -rf /"});
    let function = json!({"name": "Secret", "input": {}});
    // The function call of a name the client never sent is the client's to judge: the second
    // round, from a client that never sent Secret nor a local shell, leaves it out.
    let steps = json!([{"calls": [secret, nope, shell, fmt, function]}, {"text": "Done."},
                       {"calls": [secret, nope, shell, fmt]}, {"text": "Done."}]);
    let upstream = LoopUpstream::start(&s, &steps);
    let config = "[defer]\ndefault = false\n\
                  [permissions]\ndeny = [\"Secret\", \"local_shell\", \"^Fmt(input=rm *)\"]\n";
    let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
    let sent = vec![
        json!({"type": "function", "name": "Read", "description": "Read a file.",
               "parameters": {"type": "object", "properties": {}}}),
        json!({"type": "custom", "name": "Secret", "description": "Secret."}),
        json!({"type": "custom", "name": "Fmt", "description": "Format."}),
        json!({"type": "local_shell"}),
    ];
    let never = vec![sent[0].clone(), sent[2].clone()];
    let mut outputs: Vec<Vec<String>> = Vec::new();
    for (k, list) in [sent, never].iter().enumerate() {
        let step = 2 * k;
        let user = json!({"role": "user", "content": format!("go {k}")});
        let (answer, _) = responses(&proxy, list, std::slice::from_ref(&user), false);
        assert!(answer["output"].to_string().contains("Done."), "{answer}");
        let made = upstream.call_ids(step as u64);
        let next = &upstream.played()[step + 1]["body"]["input"];
        let texts: Vec<String> = made
            .iter()
            .map(|id| {
                answer_of(next, id)["output"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        assert!(texts[3].contains("deny[2]"), "{}", texts[3]);
        outputs.push(texts);
    }
    let (hidden, never) = (&outputs[0], &outputs[1]);
    assert_eq!(
        hidden[0].replace("Secret", "Nope"),
        hidden[1],
        "a hidden custom tool reads as an unknown name"
    );
    // Hidden or never sent, the model reads the same.
    assert_eq!(hidden[0], never[0]);
    assert_eq!(hidden[2], never[2]);
    assert!(
        hidden[2].contains("no tool of type \"local_shell\" was given"),
        "{}",
        hidden[2]
    );
    // A function call of the hidden custom tool reads as any hidden tool's.
    assert!(
        hidden[4].starts_with("No tool named \"Secret\" is available."),
        "{}",
        hidden[4]
    );
    for t in [&hidden[0], &hidden[2], &hidden[4]] {
        assert!(!t.contains("deny"), "{t}");
    }
    let metrics = metrics(&proxy);
    assert!(
        metrics
            .lines()
            .any(|l| l == "toolshelf_proxy_refused_calls_total{reason=\"hidden\"} 3"),
        "{metrics}"
    );
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
}

/// A tool the client still sends under the same name, as another kind of tool, is not gone: a
/// call of it is judged as a call of the tool it is now. Anthropic: a function tool `bash` that
/// becomes `bash_20250124` is handed over under its rules; Responses: a function tool `Fmt`
/// that becomes a custom tool is refused as a function call of a custom tool; Chat: a custom
/// tool `Fmt` that becomes a function tool is refused as a custom call of a function tool.
#[test]
fn a_tool_sent_again_as_another_kind_is_not_gone() {
    let gone = "no longer offers";
    let start = |name: &str, calls: Value| {
        let s = Scratch::new(&format!("proxy-own-rekind-{name}"));
        let steps = json!([{"text": "hello"}, {"calls": calls}, {"text": "ok"}]);
        let upstream = LoopUpstream::start(&s, &steps);
        let config = "[defer]\ndefault = false\n[permissions]\ndeny = [\"^bash(command=rm *)\"]\n";
        let proxy = ProxyProc::start(&s, &upstream.url(), config, &[]);
        (s, upstream, proxy)
    };
    let hi = json!({"role": "user", "content": "hi"});
    // Anthropic: a function tool bash, then the built-in bash.
    let (_s, upstream, proxy) = start(
        "anthropic",
        json!([{"name": "bash", "input": {"command": "ls"}},
               {"name": "bash", "input": {"command": "rm -rf /"}}]),
    );
    let headers = [HEADERS[0], HEADERS[1], ("x-toolshelf-session", "rekind-a")];
    let mut list = tools();
    list.push(common::anthropic_tool(
        "bash",
        "Run a command.",
        json!({"command": {"type": "string"}}),
        &["command"],
    ));
    let body = json!({"model": "m", "max_tokens": 64, "tools": list, "messages": [hi]});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &headers);
    assert_eq!(status, 200, "{answer}");
    let mut list = tools();
    list.push(json!({"type": "bash_20250124", "name": "bash"}));
    let messages = json!([hi, {"role": "assistant", "content": answer["content"]},
                          {"role": "user", "content": "go"}]);
    let body = json!({"model": "m", "max_tokens": 64, "tools": list, "messages": messages});
    let (status, answer) = post(&format!("{}/v1/messages", proxy.url), &body, &headers);
    assert_eq!(status, 200, "{answer}");
    let uses = tool_uses(&answer);
    assert_eq!(uses.len(), 1, "{answer}");
    assert_eq!(uses[0]["name"], "bash", "{answer}");
    assert_eq!(uses[0]["input"], json!({"command": "ls"}), "{answer}");
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
    // Responses: a function tool Fmt, then a custom tool Fmt.
    let (_s, upstream, proxy) = start("responses", json!([{"name": "Fmt", "input": {}}]));
    let headers = [BEARER[0], ("x-toolshelf-session", "rekind-r")];
    let read = json!({"type": "function", "name": "Read", "description": "Read a file.",
                      "parameters": {"type": "object", "properties": {}}});
    let send = |tools: Value, input: Value| {
        let body = json!({"model": "m", "input": input, "tools": tools,
                          "instructions": "You help."});
        let (status, answer) = post(&format!("{}/v1/responses", proxy.url), &body, &headers);
        assert_eq!(status, 200, "{answer}");
        answer
    };
    let fmt = json!({"type": "function", "name": "Fmt", "description": "Format.",
                     "parameters": {"type": "object", "properties": {}}});
    let answer = send(json!([read, fmt]), json!([hi]));
    let mut input = vec![hi.clone()];
    input.extend(answer["output"].as_array().expect("output").iter().cloned());
    input.push(json!({"role": "user", "content": "go"}));
    let answer = send(
        json!([read, {"type": "custom", "name": "Fmt"}]),
        json!(input),
    );
    assert!(call_ids(&answer["output"]).is_empty(), "{answer}");
    let made = upstream.call_ids(1);
    let refused = answer_of(&upstream.played()[2]["body"]["input"], &made[0]).to_string();
    assert!(!refused.contains(gone), "{refused}");
    assert!(refused.contains("it is a custom tool"), "{refused}");
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
    // Chat: a custom tool Fmt, then a function tool Fmt.
    let (_s, upstream, proxy) = start(
        "chat",
        json!([{"kind": "custom", "name": "Fmt", "input": "x"}]),
    );
    let headers = [BEARER[0], ("x-toolshelf-session", "rekind-c")];
    let read = json!({"type": "function", "function": {"name": "Read", "description": "Read.",
                      "parameters": {"type": "object"}}});
    let custom = json!({"type": "custom", "custom": {"name": "Fmt", "description": "Format."}});
    let function = json!({"type": "function", "function": {"name": "Fmt",
                          "description": "Format.", "parameters": {"type": "object"}}});
    let url = format!("{}/v1/chat/completions", proxy.url);
    let body = json!({"model": "m", "tools": [read, custom], "messages": [hi]});
    let (status, answer) = post(&url, &body, &headers);
    assert_eq!(status, 200, "{answer}");
    let messages = json!([hi, {"role": "assistant", "content": "hello"},
                          {"role": "user", "content": "go"}]);
    let body = json!({"model": "m", "tools": [read, function], "messages": messages});
    let (status, answer) = post(&url, &body, &headers);
    assert_eq!(status, 200, "{answer}");
    assert!(chat_calls(&answer, false).is_empty(), "{answer}");
    let made = upstream.call_ids(1);
    let result = chat_result(&upstream.played()[2]["body"], &made[0]).to_string();
    assert!(!result.contains(gone), "{result}");
    assert!(result.contains("it is not a custom tool"), "{result}");
    assert!(upstream.refused().is_empty(), "{:?}", upstream.refused());
}

//! The result hooks on calls the proxy runs itself (script tools, model-written tools,
//! `tool_define`), as the gateway runs them on every call: `post_call` on a result (a failed
//! script is a result that reports an error, as the gateway's scripts server answers it),
//! `call_failed` when the proxy could not run the tool at all.

use serde_json::{Value, json};
use toolshelf_core::Tool;
use toolshelf_core::hook::{Hook, HookEvent, HookEventKind};
use toolshelf_runtime::hooks;

/// A result as the model reads it: its text and whether it reports a failure.
pub type Text = (String, bool);

/// The result as hooks see it: an MCP `CallToolResult` of one text block.
pub fn call_result((text, is_error): &Text) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": is_error})
}

/// A hook's replacement result, read as a `CallToolResult`: its text blocks joined (any other
/// block as its JSON) and its `isError`; the reason when it is not one.
pub fn read_result(v: &Value) -> Result<Text, String> {
    let o = v.as_object().ok_or("it is not an object")?;
    let blocks = o
        .get("content")
        .and_then(Value::as_array)
        .ok_or("it has no \"content\" array")?;
    let mut parts = Vec::new();
    for (k, b) in blocks.iter().enumerate() {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => match b.get("text").and_then(Value::as_str) {
                Some(t) => parts.push(t.to_owned()),
                None => return Err(format!("content[{k}] is a text block without \"text\"")),
            },
            Some(_) => parts.push(b.to_string()),
            None => return Err(format!("content[{k}] has no \"type\"")),
        }
    }
    let is_error = match o.get("isError") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("its \"isError\" is not a boolean".into()),
    };
    Ok((parts.join("\n"), is_error))
}

/// Runs the hooks of `event` (`post_call` or `call_failed`, its params set) that apply to `tool`
/// on `outcome` (`Ok` the result, `Err` why the tool could not be run): the text the model reads,
/// and what a hook did to the result, as the audit log says it (`result_withheld`, with the
/// reason, or `result_replaced`). The reports of hooks that failed go to `failures`.
pub async fn after_call(
    all: &toolshelf_core::hook::Hooks,
    tool: &Tool,
    mut event: HookEvent,
    outcome: Result<Text, String>,
    failures: &mut Vec<String>,
) -> (Text, Option<Changed>) {
    let name = &tool.name;
    match outcome {
        Ok(result) => {
            let post = all.of(HookEventKind::PostCall);
            if !post.iter().any(|h| h.applies_to(Some(tool))) {
                return (result, None);
            }
            event.event = HookEventKind::PostCall;
            event.result = Some(call_result(&result));
            let (verdict, replaced) =
                hooks::run_replacing(post, Some(tool), event, read_result).await;
            failures.extend(verdict.failures);
            let (denied, guidance) = (verdict.denied, verdict.guidance);
            let (result, changed) = match (denied, replaced) {
                (Some(reason), _) => (
                    (
                        format!("{name} ran, but a post_call hook withheld its result: {reason}"),
                        true,
                    ),
                    Some(Changed::Withheld(reason)),
                ),
                (None, Some(r)) => (r, Some(Changed::Replaced)),
                (None, None) => (result, None),
            };
            (with_guidance(result, guidance), changed)
        }
        Err(text) => {
            let failed = all.of(HookEventKind::CallFailed);
            if !failed.iter().any(|h| h.applies_to(Some(tool))) {
                return ((text, true), None);
            }
            event.event = HookEventKind::CallFailed;
            event.error = Some(text.clone());
            let verdict = hooks::run(failed, Some(tool), event).await;
            failures.extend(verdict.failures);
            (with_guidance((text, true), verdict.guidance), None)
        }
    }
}

/// What a hook did to a result, for the audit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changed {
    /// Withheld it, for this reason.
    Withheld(String),
    /// Replaced it.
    Replaced,
}

impl Changed {
    /// Says so in `record`.
    pub fn record(&self, record: &mut toolshelf_core::audit::AuditRecord) {
        match self {
            Self::Withheld(reason) => record.set_withheld(reason),
            Self::Replaced => record.hooks.push("result_replaced"),
        }
    }
}

/// Runs the `post_search` hooks on a search's answer (`event` has its arguments and the names it
/// loaded), as the gateway does: the text the model reads, and what a hook did to it. A search
/// whose result a hook withheld loads nothing: the model never saw the schemas. The reports of
/// hooks that failed go to `failures`.
pub async fn after_search(
    hooks: &[Hook],
    mut event: HookEvent,
    result: Text,
    failures: &mut Vec<String>,
) -> (Text, Option<Changed>) {
    event.result = Some(call_result(&result));
    let (verdict, replaced) = hooks::run_replacing(hooks, None, event, read_result).await;
    failures.extend(verdict.failures);
    if let Some(reason) = verdict.denied {
        let withheld = format!("The search result was withheld by a hook: {reason}");
        return ((withheld, true), Some(Changed::Withheld(reason)));
    }
    let changed = replaced.is_some().then_some(Changed::Replaced);
    (
        with_guidance(replaced.unwrap_or(result), verdict.guidance),
        changed,
    )
}

fn with_guidance((mut text, is_error): Text, guidance: Vec<String>) -> Text {
    for g in guidance {
        text.push_str("\n\n");
        text.push_str(&g);
    }
    (text, is_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replacement_reads_as_text_only_when_it_is_a_call_result() {
        assert_eq!(
            read_result(&call_result(&("a".into(), true))),
            Ok(("a".into(), true))
        );
        assert_eq!(
            read_result(&json!({"content": [{"type": "text", "text": "x"},
                                            {"type": "text", "text": "y"}]})),
            Ok(("x\ny".into(), false))
        );
        for bad in [
            json!("text"),
            json!({"text": "x"}),
            json!({"content": [{"text": "x"}]}),
            json!({"content": [{"type": "text"}]}),
            json!({"content": [], "isError": "yes"}),
        ] {
            assert!(read_result(&bad).is_err(), "{bad}");
        }
    }
}

//! `toolshelf prefix-check`: does a log of request bodies keep the provider's prompt cache?
//!
//! A prompt cache reuses work only for a byte-identical prefix: tools, system, then the messages
//! in order. A harness that rewrites an earlier message (a reminder spliced in, a timestamp
//! updated), reorders its tools or edits the system prompt pays for the whole prompt again on
//! every turn, and nothing in the responses says so. This command reads the bodies as they were
//! sent (one JSON object per line: from a proxy log, a harness's debug output, or
//! `toolshelf_core::request`) and, for each consecutive pair, checks that `system` and `tools`
//! are byte-identical and that the earlier request's messages are the first messages of the
//! later one. Every part is compared as canonical JSON ([`canonical_json`]), so key order does
//! not count and every other byte does. The API of each body is detected
//! ([`Api::detect`], or forced with `--api`) only to know where its system part and its messages
//! are ([`Sections`]).
//!
//! The settings that decide which cache a request can use at all are compared too: `model` (each
//! model has its own cache) and, for Anthropic, `tool_choice` and `thinking` (a change to either
//! invalidates the cached messages), and so is the API itself: a body of another API than the one
//! before it (detected, as only a log mixing APIs has) shares no cache with it. Plain user and
//! assistant messages may be Anthropic or Chat ([`Api::candidates`]) but are never Responses,
//! so a switch between `messages` and `input` is always a change of API; such a body is read
//! as its neighbour's API when that one can be told, so the same bytes split alike on both
//! sides of a pair. A Responses request chained by `previous_response_id` sends only its new
//! items, the earlier ones being the provider's: its input is not compared, only the settings,
//! the instructions and the tools. Other fields (`max_tokens`, `temperature`, `stream`) do not
//! enter the cached prefix and are not compared.
//!
//! A break is reported where it starts: the section (`api`, `model`, `system`, `tools`, `tool_choice`,
//! `thinking`, `messages[k]` or `input[k]`, k being the element's index in the body), the first differing byte in that
//! section's canonical JSON, and a short excerpt of both sides there. A message missing from the
//! later request is a break at byte 0 with an empty later excerpt. Any break makes the exit
//! status 1.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use serde::Serialize;
use serde_json::Value;
use toolshelf_core::request::{Api, Sections, canonical_json};

use super::{ApiArg, outln, print_json};

/// Arguments of `prefix-check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// JSON lines file of request bodies, one per line, in the order they were sent; blank lines
    /// are skipped. `-` reads standard input (`toolshelf replay ... | toolshelf prefix-check -`).
    #[arg(value_name = "FILE.jsonl")]
    file: PathBuf,
    /// Read every body as this API. Default: detected per body: `input` or `instructions` →
    /// openai-responses; a top-level `system`, a `tool_use`, `tool_result` or `thinking` block
    /// or a tool with `input_schema` → anthropic; a system, developer or tool message,
    /// `tool_calls` or a function tool → openai; a body of plain user and assistant messages,
    /// which either could be, is read as its neighbour's API where that one can be told (else
    /// anthropic). A body with neither `messages` nor `input` is an error.
    #[arg(long, value_enum)]
    api: Option<ApiArg>,
    /// Print {"requests", "pairs": [{"from", "to", "settings", "system", "tools",
    /// "messages_prefix", "chained"?, "break"?: {"section", "offset", "earlier", "later"}}],
    /// "ok"} instead of one line per pair ("chained": true for a Responses request chained by
    /// previous_response_id, whose input is not compared).
    #[arg(long)]
    json: bool,
}

/// One body's cache-relevant parts, each as canonical JSON.
#[derive(Debug)]
struct Canon {
    /// `model`, then for Anthropic `tool_choice` and `thinking`: each field's name and value
    /// (`null` when absent).
    settings: Vec<(&'static str, String)>,
    system: String,
    tools: String,
    /// The growing part, one string per element.
    elements: Vec<String>,
    sections: Sections,
    /// The APIs the body may be for ([`Api::candidates`]): one, or Anthropic and Chat for plain
    /// user and assistant messages; empty under `--api`.
    candidates: &'static [Api],
    /// The body, kept to read it again as its neighbour's API when its own cannot be told.
    body: Value,
    /// A Responses body chained to an earlier response (`previous_response_id`): its `input`
    /// holds only the new items, the earlier ones being the provider's.
    chained: bool,
}

impl Canon {
    fn new(api: Api, body: Value, forced: bool) -> Result<Self, String> {
        let sections = Sections::of(api, &body)?;
        let settings = api
            .cache_settings()
            .iter()
            .map(|&f| (f, canonical_json(body.get(f).unwrap_or(&Value::Null))))
            .collect();
        Ok(Self {
            settings,
            system: canonical_json(&sections.system),
            tools: canonical_json(&sections.tools),
            elements: sections.conversation.iter().map(canonical_json).collect(),
            sections,
            candidates: if forced { &[] } else { Api::candidates(&body) },
            chained: api == Api::OpenAiResponses
                && body
                    .get("previous_response_id")
                    .is_some_and(Value::is_string),
            body,
        })
    }

    /// The API the body is for beyond doubt, if it can be told.
    fn certain(&self) -> Option<Api> {
        match self.candidates {
            [api] => Some(*api),
            _ => None,
        }
    }

    /// The body read as `other`'s API, when its own cannot be told and `other`'s can and is
    /// one it may be for: the same bytes must split into the same sections on both sides of a
    /// pair (a Chat log's first body, plain user messages with a `cache_control` marker, is
    /// read as Anthropic alone, markers left out, but as Chat next to a body with a tool call).
    fn read_as_neighbour(&self, other: &Canon) -> Option<Canon> {
        let api = other.certain()?;
        (self.candidates.len() > 1 && self.candidates.contains(&api) && self.sections.api != api)
            .then(|| Canon::new(api, self.body.clone(), false).ok())
            .flatten()
    }
}

/// The candidate APIs as a break shows them: `openai`, or `anthropic or openai`.
fn api_names(candidates: &[Api]) -> String {
    candidates
        .iter()
        .map(|a| a.name())
        .collect::<Vec<_>>()
        .join(" or ")
}

/// Where a pair stops sharing a prefix.
#[derive(Debug, Serialize)]
struct Break {
    /// `system`, `tools`, `messages[k]` or `input[k]`.
    section: String,
    /// First differing byte in the section's canonical JSON.
    offset: usize,
    /// The earlier request's bytes around `offset`.
    earlier: String,
    /// The later request's bytes around `offset`; empty when the section is missing there.
    later: String,
}

/// The verdict on one consecutive pair of requests (numbered from 1 in file order).
#[derive(Debug, Serialize)]
struct Pair {
    from: usize,
    to: usize,
    /// `model` (and for Anthropic `tool_choice` and `thinking`) unchanged.
    settings: bool,
    system: bool,
    tools: bool,
    messages_prefix: bool,
    /// The later request is chained (`previous_response_id`): its input was not compared.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    chained: bool,
    /// The first break, in the order API, model, system, tools, other settings, messages.
    #[serde(rename = "break", skip_serializing_if = "Option::is_none")]
    first_break: Option<Break>,
}

/// Characters of context shown before and after a differing byte.
const BEFORE: usize = 20;
const AFTER: usize = 40;

/// The first byte at which `a` and `b` differ (one being a prefix of the other counts).
fn first_difference(a: &str, b: &str) -> Option<usize> {
    a.bytes()
        .zip(b.bytes())
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

/// About [`BEFORE`] characters before byte `offset` of `s` and [`AFTER`] from it, with `…` where
/// `s` goes on.
fn excerpt(s: &str, offset: usize) -> String {
    let at = s.floor_char_boundary(offset.min(s.len()));
    let start = s[..at]
        .char_indices()
        .rev()
        .nth(BEFORE - 1)
        .map_or(0, |(i, _)| i);
    let end = s[at..]
        .char_indices()
        .nth(AFTER)
        .map_or(s.len(), |(i, _)| at + i);
    format!(
        "{}{}{}",
        if start > 0 { "…" } else { "" },
        &s[start..end],
        if end < s.len() { "…" } else { "" }
    )
}

fn differs(section: String, a: &str, b: &str) -> Option<Break> {
    first_difference(a, b).map(|offset| Break {
        section,
        offset,
        earlier: excerpt(a, offset),
        later: excerpt(b, offset),
    })
}

fn compare(from: usize, a: &Canon, b: &Canon) -> Pair {
    let setting = |name: &str| {
        let value = |c: &Canon| {
            c.settings
                .iter()
                .find(|(f, _)| *f == name)
                .map_or_else(|| "null".to_owned(), |(_, v)| v.clone())
        };
        differs(name.to_owned(), &value(a), &value(b))
    };
    // A request of another API goes to another endpoint, so it shares no cache with the last.
    // A body whose API cannot be told (Anthropic or Chat) is of another API than a Responses
    // one all the same.
    let disjoint = !a.candidates.is_empty()
        && !b.candidates.is_empty()
        && !a.candidates.iter().any(|x| b.candidates.contains(x));
    let api = disjoint.then(|| Break {
        section: "api".into(),
        offset: 0,
        earlier: api_names(a.candidates),
        later: api_names(b.candidates),
    });
    let (a_as_b, b_as_a) = (a.read_as_neighbour(b), b.read_as_neighbour(a));
    let (a, b) = (a_as_b.as_ref().unwrap_or(a), b_as_a.as_ref().unwrap_or(b));
    let model = setting("model");
    // Only Anthropic says these invalidate its cache; a body read otherwise has none of them.
    let both_anthropic = a.sections.api == Api::Anthropic && b.sections.api == Api::Anthropic;
    let others = both_anthropic
        .then(|| setting("tool_choice").or_else(|| setting("thinking")))
        .flatten();
    let system = differs("system".into(), &a.system, &b.system);
    let tools = differs("tools".into(), &a.tools, &b.tools);
    // A chained request's earlier input is the provider's to keep: only its new items are sent.
    let messages = (!b.chained)
        .then(|| {
            a.elements.iter().enumerate().find_map(|(k, earlier)| {
                let name = a.sections.element_name(k);
                match b.elements.get(k) {
                    Some(later) => differs(name, earlier, later),
                    None => Some(Break {
                        section: name,
                        offset: 0,
                        earlier: excerpt(earlier, 0),
                        later: String::new(),
                    }),
                }
            })
        })
        .flatten();
    Pair {
        from,
        to: from + 1,
        settings: api.is_none() && model.is_none() && others.is_none(),
        system: system.is_none(),
        tools: tools.is_none(),
        messages_prefix: messages.is_none(),
        chained: b.chained,
        first_break: api.or(model).or(system).or(tools).or(others).or(messages),
    }
}

/// Reads the bodies and compares each with the one before; only two are held at a time.
fn check(path: &Path, api: Option<Api>) -> Result<(usize, Vec<Pair>)> {
    let mut previous: Option<Canon> = None;
    let mut requests = 0;
    let mut pairs = Vec::new();
    for line in crate::inputs::lines_of(path, "log")? {
        let (n, line) = line?;
        let at = || format!("{}:{n}", crate::inputs::shown(path));
        let body = crate::inputs::json_line(&line, &at(), "not a valid JSON request body")?;
        if !body.is_object() {
            bail!("{}: a request body must be a JSON object", at());
        }
        let forced = api.is_some();
        let Some(api) = api.or_else(|| Api::detect(&body)) else {
            if let Some(messages) = body.get("messages") {
                bail!(
                    "{}: cannot tell the API: `messages` must be an array, found {}",
                    at(),
                    toolshelf_core::catalog::kind_of(messages)
                );
            }
            bail!(
                "{}: cannot tell the API: the body has no `messages` or `input` array (use --api)",
                at()
            );
        };
        let seen = Api::detect_certain(&body);
        let current =
            Canon::new(api, body, forced).map_err(|e| anyhow::anyhow!("{}: {e}", at()))?;
        // A body plainly of another API would be read in the wrong places (an Anthropic
        // `system` is no part of a Chat request), and its breaks there missed.
        if let Some(seen) = seen.filter(|&seen| forced && seen != api) {
            bail!(
                "{}: the body is plainly an {} request, which --api {} would misread (its system part and messages are elsewhere, so breaks there would be missed); leave --api out to tell each body's API, or give --api {}",
                at(),
                seen.name(),
                api.name(),
                seen.name()
            );
        }
        requests += 1;
        if let Some(prev) = &previous {
            pairs.push(compare(requests - 1, prev, &current));
        }
        previous = Some(current);
    }
    anyhow::ensure!(
        requests > 0,
        "{} holds no request bodies",
        crate::inputs::shown(path)
    );
    Ok((requests, pairs))
}

/// Runs the check; `Ok(false)` when some pair breaks the prefix.
pub fn run(args: Args) -> Result<bool> {
    let (requests, pairs) = check(&args.file, args.api.map(Api::from))?;
    let broken = pairs.iter().filter(|p| p.first_break.is_some()).count();
    if args.json {
        print_json(&serde_json::json!({
            "requests": requests,
            "pairs": pairs,
            "ok": broken == 0,
        }))?;
        return Ok(broken == 0);
    }
    for p in &pairs {
        let Some(b) = &p.first_break else {
            if p.chained {
                outln!(
                    "{}→{} ok (chained by previous_response_id: the earlier input is the provider's, not compared)",
                    p.from,
                    p.to
                );
            } else {
                outln!("{}→{} ok", p.from, p.to);
            }
            continue;
        };
        let reported = match b.section.as_str() {
            "api" | "model" | "tool_choice" | "thinking" => "settings",
            "system" => "system",
            "tools" => "tools",
            _ => "messages",
        };
        let also: Vec<&str> = [
            (!p.settings, "settings"),
            (!p.system, "system"),
            (!p.tools, "tools"),
            (!p.messages_prefix, "messages"),
        ]
        .into_iter()
        .filter(|&(bad, name)| bad && name != reported)
        .map(|(_, name)| name)
        .collect();
        let also = if also.is_empty() {
            String::new()
        } else {
            format!(" (also broken: {})", also.join(", "))
        };
        if b.section == "api" {
            outln!(
                "{}→{} the API changes ({} → {}): a request to another API shares no cache{also}",
                p.from,
                p.to,
                b.earlier,
                b.later
            );
            continue;
        }
        if b.later.is_empty() {
            outln!(
                "{}→{} {} is missing from the later request{also}",
                p.from,
                p.to,
                b.section
            );
            continue;
        }
        let verb = if b.section == "tools" {
            "differ"
        } else {
            "differs"
        };
        // Each excerpt as it is (canonical JSON, so one line), the later under the earlier: the
        // bytes before the offset are the same in both, so the first difference is in one column.
        let head = format!(
            "{}→{} {} {verb} at byte {}{also}: ",
            p.from, p.to, b.section, b.offset
        );
        let indent = head.chars().count();
        outln!("{head}earlier {}", b.earlier);
        outln!("{:indent$}later   {}", "", b.later);
    }
    outln!(
        "{}, {}: {}",
        super::count(requests, "request", "requests"),
        super::count(pairs.len(), "pair", "pairs"),
        if broken == 0 {
            "every request keeps the previous one's prefix".to_owned()
        } else {
            format!("{broken} broken")
        }
    );
    Ok(broken == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_counts_bytes_and_prefixes() {
        assert_eq!(first_difference("abc", "abc"), None);
        assert_eq!(first_difference("abc", "abd"), Some(2));
        assert_eq!(first_difference("ab", "abc"), Some(2));
        assert_eq!(first_difference("abc", "ab"), Some(2));
        // "é" and "è" share their first byte.
        assert_eq!(first_difference("xé", "xè"), Some(2));
    }

    #[test]
    fn excerpts_are_cut_at_characters_around_the_offset() {
        let s: String = ('a'..='z').cycle().take(100).collect();
        let e = excerpt(&s, 50);
        assert_eq!(e, format!("…{}…", &s[30..90]));
        assert_eq!(excerpt("short", 2), "short");
        assert_eq!(excerpt("short", 5), "short");
        // An offset inside a multi-byte character starts at that character.
        let cjk = "名".repeat(100);
        let e = excerpt(&cjk, 3 * 50 + 1);
        assert_eq!(e, format!("…{}…", "名".repeat(60)));
    }
}

//! Canonical tool names.
//!
//! Providers accept tool names matching `^[a-zA-Z0-9_-]{1,64}$`, but real MCP servers are called
//! "Asset Price MCP" and real tools `triangle_properties.get`. We expose every tool under a
//! canonical name that satisfies the rule, and keep the original server and tool names beside it
//! so calls go out under the names the server knows. Everything here is a pure function of its
//! input: the same catalog always yields the same names, on every machine.
//!
//! Canonical MCP names are unambiguous by construction: a server segment never contains `__` and
//! never starts or ends with `_` ([`server_segment`]), so in `mcp__SERVER__TOOL` the server is
//! always the text up to the first `__` after the prefix ([`split_mcp`]). Servers `a` (tool
//! `b__c`) and `a__b` (tool `c`) therefore get two different names, `mcp__a__b__c` and
//! `mcp__a_b__c`, instead of contesting one.

/// Name of the search meta-tool.
pub const TOOL_SEARCH: &str = "tool_search";
/// Name of the execution meta-tool.
pub const DEFER_EXECUTE: &str = "defer_execute";
/// Both meta-tool names. A catalog tool with one of these names keeps a distinct name instead.
pub const META_TOOLS: [&str; 2] = [TOOL_SEARCH, DEFER_EXECUTE];

/// The meta-tool `name` is a spelling of, as names resolve ([`fold`]): `TOOL_SEARCH` is
/// `tool_search`.
pub fn meta_tool(name: &str) -> Option<&'static str> {
    let folded = fold(name);
    META_TOOLS.into_iter().find(|m| fold(m) == folded)
}

/// [`meta_tool`], also under a client's prefix ([`client_prefixed`]:
/// `mcp__toolshelf__tool_search`), as a model may write it in an argument.
pub fn meta_tool_as_called(name: &str) -> Option<&'static str> {
    meta_tool(name).or_else(|| client_prefixed(name).and_then(meta_tool))
}

/// The name a client's own prefix leaves, when `name` is `mcp__CLIENT_SERVER__REST`: an MCP
/// client names the tools of a server it connects to `mcp__SERVER__TOOL` after the name it gave
/// the server (`mcp__toolshelf__tool_search`, `mcp__toolshelf__mcp__git__git_log`), and a model
/// may copy that form into an argument. Whether `CLIENT_SERVER` is a server of the catalog is the
/// caller's to judge.
pub fn client_prefixed(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(MCP_PREFIX)?;
    let (server, rest) = rest.split_once("__")?;
    (!server.is_empty() && !rest.is_empty()).then_some(rest)
}

/// Longest name the providers accept.
pub const MAX_NAME_LEN: usize = 64;

/// Prefix of every MCP tool's canonical name: `mcp__<server>__<tool>`.
pub const MCP_PREFIX: &str = "mcp__";

/// Whether `name` satisfies the providers' rule `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Replaces every character outside `[a-zA-Z0-9_-]` with `_`. An empty input becomes `_`.
pub fn sanitize(raw: &str) -> String {
    let out: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() { "_".to_owned() } else { out }
}

/// [`sanitize`], unless that leaves no ASCII letter or digit (a name written entirely in, say,
/// Chinese would become a row of underscores): then `<prefix>_<short hash of raw>`, which is at
/// least distinct and stable.
pub fn sanitize_or_hash(raw: &str, prefix: &str) -> String {
    let s = sanitize(raw);
    if s.bytes().any(|b| b.is_ascii_alphanumeric()) {
        s
    } else {
        format!("{prefix}_{}", short_hash(raw))
    }
}

/// 64-bit FNV-1a: tiny, dependency-free and identical on every platform, which is all a name
/// suffix needs (this is not a security boundary).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Longest server segment. `mcp__`, the segment and `__` then take at most 39 of a name's 64
/// characters, so at least 25 are left for the tool: a tool name that does not fit there keeps
/// its first 16 or more characters before its hash suffix ([`fit`]), and never loses all of them.
pub const MAX_SERVER_LEN: usize = 32;

/// The canonical segment of a server's name: [`server_segment_in_full`], cut to
/// [`MAX_SERVER_LEN`] when longer: its head, without a trailing `_`, then `_` and [`short_hash`]
/// of `raw` (`Google_Cloud_Platform_BigQuery_Data_Warehouse_Admin` becomes
/// `Google_Cloud_Platform_B_<hash>`). Segments that fit are never changed.
pub fn server_segment(raw: &str) -> String {
    let full = server_segment_in_full(raw);
    if full.len() <= MAX_SERVER_LEN {
        return full;
    }
    server_with_suffix(&full, raw)
}

/// `segment` (a server segment) with `_` and [`short_hash`] of `key` appended, its head cut so
/// that the whole fits [`MAX_SERVER_LEN`]; a `_` left at the end of the head is dropped, so the
/// result never contains `__`. Used for long server names and to break server collisions.
pub fn server_with_suffix(segment: &str, key: &str) -> String {
    let suffix = format!("_{}", short_hash(key));
    // Server segments are ASCII, so byte slicing is safe.
    let keep = segment.len().min(MAX_SERVER_LEN - suffix.len());
    format!("{}{suffix}", segment[..keep].trim_end_matches('_'))
}

/// The segment of a server's name before any cut: [`sanitize`]d, runs of `_` folded into one and
/// `_` trimmed from both ends, so the segment can never contain the `__` separator or blur into
/// it. A name with no ASCII letter or digit left becomes `server_<hash>`.
pub fn server_segment_in_full(raw: &str) -> String {
    let sanitized = sanitize(raw);
    let mut out = String::with_capacity(sanitized.len());
    for c in sanitized.chars() {
        if c == '_' && (out.is_empty() || out.ends_with('_')) {
            continue;
        }
        out.push(c);
    }
    while out.ends_with('_') {
        out.pop();
    }
    if out.bytes().any(|b| b.is_ascii_alphanumeric()) {
        out
    } else {
        format!("server_{}", short_hash(raw))
    }
}

/// The canonical segment of a tool's name: [`sanitize_or_hash`] with prefix `tool`.
pub fn tool_segment(raw: &str) -> String {
    sanitize_or_hash(raw, "tool")
}

/// `mcp__<server>__<tool>` from two segments.
pub fn mcp_name(server: &str, tool: &str) -> String {
    format!("{MCP_PREFIX}{server}__{tool}")
}

/// Splits a canonical MCP name into (server segment, tool segment): the server is the text up to
/// the first `__` after the prefix. `None` for names without the prefix or the separator.
pub fn split_mcp(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix(MCP_PREFIX)?
        .split_once("__")
        .filter(|(s, t)| !s.is_empty() && !t.is_empty())
}

/// A short stable hash of `key`: 8 lowercase hex digits.
pub fn short_hash(key: &str) -> String {
    format!("{:08x}", fnv1a64(key.as_bytes()) as u32)
}

/// Makes `candidate` fit [`MAX_NAME_LEN`]: names that fit pass unchanged; longer ones keep
/// their head and get `_` plus [`short_hash`] of `key`, so two long names that share a head still
/// differ.
pub fn fit(candidate: String, key: &str) -> String {
    if candidate.len() <= MAX_NAME_LEN {
        return candidate;
    }
    with_suffix(&candidate, key)
}

/// `candidate` cut so that `_<hash of key>` fits, then that suffix appended. Used for long names
/// and to break collisions.
pub fn with_suffix(candidate: &str, key: &str) -> String {
    let suffix = format!("_{}", short_hash(key));
    // Sanitized names are ASCII, so byte slicing is safe.
    let keep = candidate.len().min(MAX_NAME_LEN - suffix.len());
    format!("{}{}", &candidate[..keep], suffix)
}

/// Splits a name into lowercase words: on `_ - . / :` and spaces, and at camelCase and
/// letter/digit boundaries. `getHTTPResponse_v2` gives `get http response v 2`.
///
/// Every word of every catalog and request passes here: each word is a slice of its part,
/// lower-cased once, without collecting the part's characters first.
pub fn split_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    for part in name.split(|c: char| !c.is_alphanumeric()) {
        let mut chars = part.char_indices();
        let Some((_, mut prev)) = chars.next() else {
            continue;
        };
        let mut start = 0;
        for (i, cur) in chars {
            let mut ahead = part[i + cur.len_utf8()..].chars();
            if word_boundary(prev, cur, ahead.next(), ahead.next()) {
                words.push(part[start..i].to_lowercase());
                start = i;
            }
            prev = cur;
        }
        words.push(part[start..].to_lowercase());
    }
    words
}

/// Whether a word ends between `prev` and `cur` (`next` and `after` follow `cur`): lower to
/// upper case, the last of a run of capitals before a lower-case letter, or a letter beside a
/// digit. A run of capitals followed by a lone `s` is an acronym's plural and stays one word:
/// `UUIDs`, `URLs` and `getPRsByID` give `uuids`, `urls` and `get prs by id` (not `uui ds`).
fn word_boundary(prev: char, cur: char, next: Option<char>, after: Option<char>) -> bool {
    let next_lower = next.is_some_and(char::is_lowercase);
    let plural = next == Some('s') && !after.is_some_and(char::is_lowercase);
    (prev.is_lowercase() && cur.is_uppercase())
        || (prev.is_uppercase() && cur.is_uppercase() && next_lower && !plural)
        || (prev.is_alphabetic() != cur.is_alphabetic()
            && (prev.is_ascii_digit() || cur.is_ascii_digit()))
}

/// Whether [`fold`] drops `c`: the separators `_ - .` and white space.
pub(crate) fn folds_away(c: char) -> bool {
    matches!(c, '_' | '-' | '.') || c.is_whitespace()
}

/// `name` as a name without an exact match is compared: lower-cased, with the separators
/// `_ - .` and white space taken out. `GIT_LOG`, `git-log`, `Git Log` and `gitlog` all fold to
/// `gitlog`, and `mcp__git__git_log` to `mcpgitgitlog`.
pub fn fold(name: &str) -> String {
    folded_chars(name).collect()
}

/// The characters of [`fold`]`(name)`, one by one, so two names compare without collecting
/// either.
pub fn folded_chars(name: &str) -> impl Iterator<Item = char> + '_ {
    name.chars()
        .filter(|&c| !folds_away(c))
        .flat_map(char::to_lowercase)
}

/// The most edits at which a folded name of `len` characters still counts as a typo of another:
/// 2 (a swap and a slip, or two slips, which a one-edit limit misses on short names: `fecht` for
/// `fetch`), or a fifth of the name when that is more, so a long name gets one more for every
/// five characters (`puppeteer_screenshoot`, 20 folded characters, allows 4).
pub fn typo_edits(len: usize) -> usize {
    (len / 5).max(2)
}

/// Up to `n` of `candidates` closest to `wanted`, closest first (in the order given below); none
/// that is not close. Every canonical name starts `mcp__` and shares `__` with every other, so whole names
/// are never compared: the tool segments are, and the server segments only order the tools that
/// are close. Tool segments are compared in three tiers, each after the one before:
///
/// 1. typos: at most [`typo_edits`] edits (insertions, deletions, substitutions and swaps of two
///    neighbours) between the [`fold`]ed segments (`git_stauts`, `GIT-STATSU`, `crate_issue`),
///    fewest edits first;
/// 2. the words of one are most of the other's, in order (`read_file` and `read_text_file`), or
///    the name is a server's alone (`time` finds that server's tools); in the server the name
///    names (below), any tool whose words hold all of the name's, in order (`read` in
///    `read_text_file`);
/// 3. a quarter of the longer segment's characters edited, case aside (`get_current_tim`).
///
/// A name that names a server (`mcp__SERVER__TOOL`, `SERVER__TOOL`, `mcp__SERVER`,
/// `SERVER__`, or a bare name that is a server's segment, case and separators aside) puts that
/// server's close tools before every other close tool: the built-ins and other servers' tools
/// follow, however close their tool segment alone is (`mcp__filesystem__read` lists the
/// filesystem server's `read_*` tools before the built-in `Read`). The server it names is the
/// catalog's server whose segment folds to the same, else the ones a typo away (as tool
/// segments are judged), else none, and the name is then read as a tool's alone. A name that is
/// a server alone (`mcp__git`, `mcp__git__`) lists that server's tools, and is not taken for a
/// typo of a tool (`git` is two edits from `Edit`).
///
/// Within a tier, fewer edits come first, then the nearer server (a built-in is as far from a
/// named server as the server's name is long), then the segment made of more of the same letters
/// (`bag_distance`: `fecht` is `fetch` mixed up, not `echo`, though each is two edits away),
/// then the name.
///
/// `wanted` may be canonical, bare, or `SERVER__TOOL` as a list may show it. Under a client's
/// prefix ([`client_prefixed`]: `mcp__toolshelf__mcp__git__git_log`, its server segment naming
/// no server), the names close to what the prefix leaves come first.
pub fn closest<'a>(
    wanted: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    n: usize,
) -> Vec<String> {
    let candidates: Vec<(&str, String)> = candidates
        .into_iter()
        .map(|c| (c, c.to_lowercase()))
        .collect();
    closest_among(wanted, &candidates, n)
}

/// [`closest`] among `candidates`, each with its lower-cased form.
fn closest_among(wanted: &str, candidates: &[(&str, String)], n: usize) -> Vec<String> {
    let w = wanted.to_lowercase();
    let prefixed = w.strip_prefix(MCP_PREFIX);
    let bare = prefixed.unwrap_or(&w);
    let servers: std::collections::BTreeSet<&str> = candidates
        .iter()
        .filter_map(|(_, lc)| split_mcp(lc).map(|(s, _)| s))
        .collect();
    // The server the name is written with, and its tool segment: `SERVER__TOOL` (with or without
    // the prefix), or a server alone, `mcp__SERVER` or `SERVER__` (a tool segment of separators).
    let written: Option<(&str, &str)> = match bare.split_once("__") {
        Some((s, t)) if !s.is_empty() => Some((s, t)),
        Some(_) => None,
        None if prefixed.is_some() && !bare.is_empty() => Some((bare, "")),
        None => None,
    };
    let named: Vec<&str> = match written {
        Some((s, _)) => named_servers(s, &servers, true),
        // A bare name names a server only when it is one, case and separators aside.
        None => named_servers(bare, &servers, false),
    };
    // A client's prefix on a name (`mcp__toolshelf__mcp__git__git_log`, the server segment
    // naming no server): the names close to what it leaves come first.
    if prefixed.is_some()
        && named.is_empty()
        && let Some(rest) = client_prefixed(wanted)
    {
        let mut found = closest_among(rest, candidates, n);
        for c in closest_as_written(bare, written, &named, candidates, n) {
            if found.len() < n && !found.contains(&c) {
                found.push(c);
            }
        }
        return found;
    }
    closest_as_written(bare, written, &named, candidates, n)
}

/// [`closest`] for the name as written: `bare` (lower-cased, without the prefix), read as
/// `written` (its server and tool segments) naming the servers `named`.
fn closest_as_written(
    bare: &str,
    written: Option<(&str, &str)>,
    named: &[&str],
    candidates: &[(&str, String)],
    n: usize,
) -> Vec<String> {
    let server_alone = written.is_some_and(|(_, t)| fold(t).is_empty());
    // A name with `__` may be `SERVER__TOOL` or a tool whose own name has `__`: both readings. A
    // server alone is read as that server when the catalog has it, else as a bare name.
    let mut readings: Vec<(Option<&str>, &str)> = Vec::new();
    if !server_alone || named.is_empty() {
        readings.push((None, bare));
    }
    if let Some((s, t)) = written
        && (!fold(t).is_empty() || !named.is_empty())
    {
        readings.push((Some(s), t));
    }
    let readings: Vec<(Option<&str>, &str, String)> =
        readings.into_iter().map(|(s, t)| (s, t, fold(t))).collect();
    let mut scored: Vec<(Closeness, &str)> = candidates
        .iter()
        .filter_map(|(c, lc)| {
            let (server, tool) = split_mcp(lc).map_or((None, lc.as_str()), |(s, t)| (Some(s), t));
            let in_named = server.is_some_and(|s| named.contains(&s));
            let folded = fold(tool);
            readings
                .iter()
                .filter_map(|(ws, wt, wf)| closeness(*ws, wt, wf, server, tool, &folded, in_named))
                .min()
                .map(|(tier, edits, server_edits, bag)| {
                    ((!in_named, tier, edits, server_edits, bag), *c)
                })
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(n)
        .map(|(_, c)| c.to_owned())
        .collect()
}

/// The servers of `servers` (lower-cased segments) that `written` names: those equal to it once
/// [`fold`]ed, else (with `typos`) those fewest edits away within [`typo_edits`], a name whose
/// every character had to change aside; none when no server is that close.
fn named_servers<'s>(
    written: &str,
    servers: &std::collections::BTreeSet<&'s str>,
    typos: bool,
) -> Vec<&'s str> {
    let wf = fold(written);
    if wf.is_empty() {
        return Vec::new();
    }
    let exact: Vec<&str> = servers.iter().copied().filter(|s| fold(s) == wf).collect();
    if !exact.is_empty() || !typos {
        return exact;
    }
    let wlen = wf.chars().count();
    let mut best: Option<usize> = None;
    let mut out = Vec::new();
    for &s in servers {
        let sf = fold(s);
        let d = edit_distance(&wf, &sf);
        if d > typo_edits(wlen) || d >= wlen.max(sf.chars().count()) || best.is_some_and(|b| d > b)
        {
            continue;
        }
        if best != Some(d) {
            out.clear();
            best = Some(d);
        }
        out.push(s);
    }
    out
}

/// How close a tool is to the wanted name, lower is closer: (outside the server the name names,
/// tier, edits between the tools, edits between the servers, letters not in common); see
/// [`closest`].
type Closeness = (bool, u8, usize, usize, usize);

/// How close tool `tool` (folded: `folded`) of `server` is to the wanted `wt` (folded: `wf`) of
/// `ws`, lower is closer: (tier, edits between the tools, edits between the servers, letters not
/// in common); `None` when it is not close. `in_named`: the tool is of the server the name names.
/// See [`closest`] for the tiers.
fn closeness(
    ws: Option<&str>,
    wt: &str,
    wf: &str,
    server: Option<&str>,
    tool: &str,
    folded: &str,
    in_named: bool,
) -> Option<(u8, usize, usize, usize)> {
    let server_edits = match (ws, server) {
        (Some(a), Some(b)) => edit_distance(a, b),
        // A built-in has no server: as far from the named one as removing all of it.
        (Some(a), None) => a.chars().count(),
        (None, _) => 0,
    };
    let (wlen, flen) = (wf.chars().count(), folded.chars().count());
    if wlen == 0 {
        // A server alone: every tool of the server it names.
        return in_named.then_some((1, flen, server_edits, flen));
    }
    let typos = edit_distance(wf, folded);
    // Not a typo when every character had to change (`ab` and `cd`).
    if typos <= typo_edits(wlen) && typos < wlen.max(flen) {
        return Some((0, typos, server_edits, bag_distance(wf, folded)));
    }
    let edits = edit_distance(wt, tool);
    let tier = if words_within(wt, tool)
        || (ws.is_none() && server.is_some_and(|s| s == wt || fold(s) == wf))
        || (in_named && ws.is_some() && words_in_order(wt, tool))
    {
        1
    } else if edits <= (wt.chars().count().max(tool.chars().count()) / 4).max(1) {
        2
    } else {
        return None;
    };
    Some((tier, edits, server_edits, bag_distance(wf, folded)))
}

/// Whether every word of `a` is a word of `b`, in order (`read` in `read_text_file`).
fn words_in_order(a: &str, b: &str) -> bool {
    let (a, b) = (split_words(a), split_words(b));
    let mut rest = b.iter();
    !a.is_empty() && a.iter().all(|w| rest.any(|l| l == w))
}

/// How many characters of one of `a` and `b` the other lacks, counting repeats, the larger of
/// the two counts: 0 for names made of the same letters in another order.
fn bag_distance(a: &str, b: &str) -> usize {
    let mut counts: std::collections::HashMap<char, isize> = std::collections::HashMap::new();
    for c in a.chars() {
        *counts.entry(c).or_default() += 1;
    }
    for c in b.chars() {
        *counts.entry(c).or_default() -= 1;
    }
    let (mut only_a, mut only_b) = (0, 0);
    for n in counts.into_values() {
        if n > 0 {
            only_a += n.unsigned_abs();
        } else {
            only_b += n.unsigned_abs();
        }
    }
    only_a.max(only_b)
}

/// Whether the words of the shorter of `a` and `b` are, in order, more than half of the other's
/// (`read_file` in `read_text_file`; not `fetch` in `fetch_issue`).
fn words_within(a: &str, b: &str) -> bool {
    let (a, b) = (split_words(a), split_words(b));
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let mut rest = long.iter();
    !short.is_empty() && 2 * short.len() > long.len() && short.iter().all(|w| rest.any(|l| l == w))
}

/// Edits (insertions, deletions, substitutions, and swaps of two neighbours) between two names,
/// over characters: optimal string alignment, so `gerp` is one edit from `grep`.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut before = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut row = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        row[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (prev[j] + 1).min(row[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut row);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_follows_the_provider_rule() {
        assert!(is_valid("mcp__docs__read_doc"));
        assert!(is_valid(&"a".repeat(64)));
        assert!(!is_valid(&"a".repeat(65)));
        assert!(!is_valid(""));
        assert!(!is_valid("triangle_properties.get"));
        assert!(!is_valid("Asset Price MCP"));
    }

    #[test]
    fn sanitize_replaces_invalid_characters() {
        assert_eq!(sanitize("Asset Price MCP"), "Asset_Price_MCP");
        assert_eq!(
            sanitize("triangle_properties.get"),
            "triangle_properties_get"
        );
        assert_eq!(sanitize("天气"), "__");
        assert_eq!(sanitize(""), "_");
    }

    #[test]
    fn names_without_any_ascii_letter_get_a_stable_hash() {
        assert_eq!(
            sanitize_or_hash("Asset Price MCP", "server"),
            "Asset_Price_MCP"
        );
        let a = sanitize_or_hash("住处选择建议通用工具", "tool");
        assert!(a.starts_with("tool_") && is_valid(&a), "{a}");
        assert_eq!(a, sanitize_or_hash("住处选择建议通用工具", "tool"));
        assert_ne!(a, sanitize_or_hash("健康状况监测助手", "tool"));
        assert_eq!(sanitize_or_hash("天气weather", "tool"), "__weather");
    }

    #[test]
    fn server_segments_cannot_contain_the_separator() {
        assert_eq!(server_segment("git"), "git");
        assert_eq!(server_segment("a__b"), "a_b");
        assert_eq!(server_segment("x.y"), "x_y");
        assert_eq!(server_segment("_lead__and_trail_"), "lead_and_trail");
        assert_eq!(server_segment("Asset Price MCP"), "Asset_Price_MCP");
        let h = server_segment("天气");
        assert!(h.starts_with("server_") && is_valid(&h), "{h}");
        for raw in ["a__b", "__", "a___", "_x_", "x..y", "--a__-b"] {
            let s = server_segment(raw);
            assert!(
                !s.contains("__") && !s.starts_with('_') && !s.ends_with('_'),
                "{raw:?} -> {s:?}"
            );
        }
    }

    #[test]
    fn long_server_segments_are_cut_to_leave_room_for_the_tool() {
        let fits = "s".repeat(MAX_SERVER_LEN);
        assert_eq!(server_segment(&fits), fits, "a segment that fits is kept");
        // The head of this one ends with `_` where it is cut: the `_` goes, so no `__` appears.
        for raw in [
            "Google Cloud Platform BigQuery Data Warehouse Admin",
            "abcdefghijklmnopqrstuv wxyz and more words after it",
            &"x".repeat(200),
        ] {
            let s = server_segment(raw);
            assert!(s.len() <= MAX_SERVER_LEN, "{s}");
            assert!(!s.contains("__") && !s.ends_with('_'), "{raw:?} -> {s:?}");
            assert!(s.ends_with(&short_hash(raw)), "{s}");
            assert_eq!(s, server_segment(raw), "stable");
            let long_tool = fit(mcp_name(&s, &"t".repeat(60)), "k");
            assert_eq!(
                split_mcp(&long_tool).map(|(server, _)| server),
                Some(s.as_str())
            );
            assert!(
                long_tool.contains(&format!("{s}__{}", "t".repeat(16))),
                "{long_tool}"
            );
        }
        assert_eq!(
            server_segment("abcdefghijklmnopqrstuv wxyz and more words after it"),
            format!(
                "abcdefghijklmnopqrstuv_{}",
                short_hash("abcdefghijklmnopqrstuv wxyz and more words after it")
            )
        );
        assert_eq!(
            server_segment_in_full("Google Cloud Platform BigQuery Data Warehouse Admin"),
            "Google_Cloud_Platform_BigQuery_Data_Warehouse_Admin"
        );
        // A short segment's collision suffix is the same as any name's.
        assert_eq!(server_with_suffix("x_y", "x.y"), with_suffix("x_y", "x.y"));
    }

    #[test]
    fn mcp_names_split_back_into_their_segments() {
        // Servers `a` (tool `b__c`) and `a__b` (tool `c`): two names, each splitting back.
        let one = mcp_name(&server_segment("a"), &tool_segment("b__c"));
        let two = mcp_name(&server_segment("a__b"), &tool_segment("c"));
        assert_ne!(one, two);
        assert_eq!(split_mcp(&one), Some(("a", "b__c")));
        assert_eq!(split_mcp(&two), Some(("a_b", "c")));
        // A tool segment may start with `_`; the server segment never ends with one.
        assert_eq!(split_mcp(&mcp_name("a", "_b")), Some(("a", "_b")));
        assert_eq!(split_mcp("Read"), None);
        assert_eq!(split_mcp("mcp__only"), None);
    }

    #[test]
    fn fit_keeps_short_names_and_hashes_long_ones() {
        assert_eq!(fit("short".into(), "k"), "short");
        let long = "x".repeat(80);
        let a = fit(long.clone(), "a");
        let b = fit(long, "b");
        assert_eq!(a.len(), MAX_NAME_LEN);
        assert!(is_valid(&a));
        assert_ne!(a, b);
        assert_eq!(a, fit("x".repeat(80), "a"), "stable");
    }

    #[test]
    fn hash_is_the_published_fnv1a() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn closest_prefers_containment_then_distance() {
        let names = [
            "mcp__fs__read_text_file",
            "mcp__fs__write_file",
            "Read",
            "Grep",
        ];
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("gerp", "grep"), 1);
        assert_eq!(closest("read_text", names, 3)[0], "mcp__fs__read_text_file");
        assert!(closest("read_file", names, 3).contains(&"mcp__fs__read_text_file".to_owned()));
        assert_eq!(closest("Gerp", names, 1), ["Grep"]);
        assert!(closest("zzzzzzzzzz", names, 3).is_empty());
    }

    #[test]
    fn closest_judges_the_tool_not_the_shared_prefix() {
        let names = [
            "mcp__memory__create_entities",
            "mcp__memory__read_graph",
            "mcp__time__convert_time",
            "mcp__time__get_current_time",
            "mcp__fetch__fetch",
            "mcp__docs__read_doc",
            "mcp__docs__write_doc",
            "mcp__notes__add_note",
        ];
        // Names that share only `mcp__` and `__` with every tool get no suggestion.
        for unrelated in [
            "mcp__github__create_issue",
            "mcp__mail__send_mail",
            "mcp__github__fetch_issue",
        ] {
            assert_eq!(
                closest(unrelated, names, 5),
                [] as [String; 0],
                "{unrelated}"
            );
        }
        // A typo, the right tool of another server, a list's `SERVER__TOOL`, a server alone.
        assert_eq!(
            closest("mcp__time__get_current_tim", names, 5),
            ["mcp__time__get_current_time"]
        );
        assert_eq!(
            closest("mcp__clock__get_current_time", names, 5),
            ["mcp__time__get_current_time"]
        );
        assert_eq!(
            closest("time__convert_tme", names, 5),
            ["mcp__time__convert_time"]
        );
        assert_eq!(
            closest("mcp__time", names, 5),
            ["mcp__time__convert_time", "mcp__time__get_current_time"]
        );
        assert_eq!(closest("read_docs", names, 5), ["mcp__docs__read_doc"]);
        // A client's prefix (its own name for the gateway) on a canonical or a listed name.
        assert_eq!(
            closest("mcp__toolshelf__mcp__docs__read_doc", names, 1),
            ["mcp__docs__read_doc"]
        );
        assert_eq!(
            closest("mcp__gw__time__convert_time", names, 1),
            ["mcp__time__convert_time"]
        );
        // The nearer server comes first among the same tool.
        let twice = ["mcp__gitlab__list_issues", "mcp__jira__list_issues"];
        assert_eq!(
            closest("mcp__gitlab_ce__list_issue", twice, 5),
            ["mcp__gitlab__list_issues", "mcp__jira__list_issues"]
        );
    }

    #[test]
    fn closest_prefers_the_server_the_name_names() {
        let names = [
            "Edit",
            "Read",
            "mcp__filesystem__read_file",
            "mcp__filesystem__read_text_file",
            "mcp__filesystem__write_file",
            "mcp__git__git_add",
            "mcp__git__git_status",
            "mcp__docs__read",
        ];
        // The named server's tools whose words hold the name's come first; the built-in that is
        // the tool segment exactly, and another server's, follow.
        let fs = [
            "mcp__filesystem__read_file",
            "mcp__filesystem__read_text_file",
            "mcp__docs__read",
            "Read",
        ];
        for written in [
            "mcp__filesystem__read",
            "filesystem__read",
            "MCP__FileSystem__Read",
            "mcp__filesytem__read",
        ] {
            assert_eq!(closest(written, names, 5), fs, "{written}");
        }
        // A server alone lists its tools, and is no typo of `Edit`.
        let git = ["mcp__git__git_add", "mcp__git__git_status"];
        for written in ["mcp__git", "mcp__git__", "git__", "mcp__gti", "MCP__Git"] {
            assert_eq!(closest(written, names, 5), git, "{written}");
        }
        // A bare name may be a tool's: when it is a server's too, that server's tools come first,
        // its typos after.
        assert_eq!(
            closest("git", names, 5),
            ["mcp__git__git_add", "mcp__git__git_status", "Edit"]
        );
        // Written as the server is once case and separators are folded away.
        let drive = ["mcp__google_drive__list_files", "mcp__google_drive__upload"];
        for written in [
            "google-drive",
            "googledrive",
            "Google Drive",
            "GOOGLE_DRIVE",
        ] {
            let mut found = closest(written, drive, 5);
            found.sort();
            assert_eq!(found, drive, "{written}");
        }
        // A name whose server the catalog lacks is read as before: the tool segment decides.
        assert_eq!(closest("mcp__nosuch", names, 5), [] as [String; 0]);
        assert_eq!(
            closest("mcp__read_file", names, 2),
            [
                "mcp__filesystem__read_file",
                "mcp__filesystem__read_text_file"
            ]
        );
        // A tool of the named server that is not close is not listed; the close one elsewhere is.
        assert_eq!(
            closest("mcp__git__write_file", names, 5),
            ["mcp__filesystem__write_file"]
        );
        // A built-in is as far from a named server as its name is long: the server nearer by
        // name comes first among tools equally close.
        assert_eq!(
            closest(
                "mcp__gitlab_ce__list_issue",
                [
                    "list_issues",
                    "mcp__gitlab__list_issues",
                    "mcp__jira__list_issues"
                ],
                5
            ),
            [
                "mcp__gitlab__list_issues",
                "mcp__jira__list_issues",
                "list_issues"
            ]
        );
    }

    #[test]
    fn folding_drops_case_and_separators() {
        for written in [
            "GIT_LOG", "git-log", "gitlog", "Git Log", "git.log", "GitLog",
        ] {
            assert_eq!(fold(written), "gitlog", "{written}");
        }
        assert_eq!(fold("mcp__git__git_log"), "mcpgitgitlog");
        assert_eq!(fold("notion-search"), fold("notion_search"));
        assert_eq!(fold("_-. \t"), "");
        assert_eq!(fold("ÉcoleNormale"), "écolenormale");
        assert!(folded_chars("Post-Message").eq(fold("post_message").chars()));
        assert_eq!(typo_edits(4), 2);
        assert_eq!(typo_edits(20), 4);
    }

    #[test]
    fn closest_puts_typos_first_fewest_edits_first() {
        let git = [
            "mcp__git__git_add",
            "mcp__git__git_branch",
            "mcp__git__git_checkout",
            "mcp__git__git_commit",
            "mcp__git__git_diff",
            "mcp__git__git_log",
            "mcp__git__git_show",
            "mcp__git__git_status",
        ];
        assert_eq!(closest("git_stauts", git, 5)[0], "mcp__git__git_status");
        assert_eq!(closest("GIT-STATSU", git, 5)[0], "mcp__git__git_status");
        // A typo comes before a tool whose words merely contain the name's.
        let issues = ["mcp__gh__create_issue", "mcp__gh__create_issues_batch"];
        assert_eq!(
            closest("create_issues", issues, 5),
            ["mcp__gh__create_issue", "mcp__gh__create_issues_batch"]
        );
        assert_eq!(
            closest("crate_issue", issues, 5)[0],
            "mcp__gh__create_issue"
        );
        // Two edits still count on a short name: one slip and one swap.
        let fetch = ["WebFetch", "mcp__fetch__fetch", "Read"];
        assert_eq!(closest("fecht", fetch, 5), ["mcp__fetch__fetch"]);
        // Equally many edits: the same letters mixed up come before other letters.
        assert_eq!(bag_distance("fecht", "fetch"), 0);
        assert_eq!(bag_distance("fecht", "echo"), 2);
        assert_eq!(
            closest("fecht", ["mcp__everything__echo", "mcp__fetch__fetch"], 5),
            ["mcp__fetch__fetch", "mcp__everything__echo"]
        );
        // The typo nearest by edits is first, whatever the words or the order given.
        let puppeteer = [
            "mcp__puppeteer__puppeteer_click",
            "mcp__puppeteer__puppeteer_evaluate",
            "mcp__puppeteer__puppeteer_fill",
            "mcp__puppeteer__puppeteer_hover",
            "mcp__puppeteer__puppeteer_navigate",
            "mcp__puppeteer__puppeteer_screenshot",
            "mcp__puppeteer__puppeteer_select",
        ];
        let mut reversed = puppeteer;
        reversed.reverse();
        for list in [puppeteer, reversed] {
            assert_eq!(
                closest("puppeteer_screenshoot", list, 5)[0],
                "mcp__puppeteer__puppeteer_screenshot"
            );
        }
        // Equally close typos are ordered by name.
        assert_eq!(
            closest("git_lag", ["mcp__b__git_log", "mcp__a__git_log"], 5),
            ["mcp__a__git_log", "mcp__b__git_log"]
        );
        assert_eq!(
            closest(
                "notion-serach",
                ["mcp__notion__notion-search", "mcp__notion__notion-fetch"],
                5
            )[0],
            "mcp__notion__notion-search"
        );
        // Replacing every character is no typo.
        assert!(closest("ab", ["cd", "xy"], 5).is_empty());
    }

    /// The words of one part as the characters give them, collected first: the reference
    /// [`split_words`] is checked against.
    fn split_by_chars(part: &str, words: &mut Vec<String>) {
        let chars: Vec<char> = part.chars().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            if word_boundary(
                chars[i - 1],
                chars[i],
                chars.get(i + 1).copied(),
                chars.get(i + 2).copied(),
            ) {
                words.push(chars[start..i].iter().collect::<String>().to_lowercase());
                start = i;
            }
        }
        if start < chars.len() {
            words.push(chars[start..].iter().collect::<String>().to_lowercase());
        }
    }

    #[test]
    fn words_are_split_as_the_characters_give_them() {
        // Every string of up to five characters over letters of both cases, digits and a
        // separator, longer generated ones, and non-ASCII ones: slicing the part gives the words
        // collecting its characters gives.
        let alphabet = ['a', 'b', 'Q', 'Z', '7', '0', '_', 's', 'H'];
        let mut cases: Vec<String> = vec![String::new()];
        for _ in 0..5 {
            let longer: Vec<String> = cases
                .iter()
                .filter(|c| c.len() == cases.last().map_or(0, String::len))
                .flat_map(|c| alphabet.iter().map(move |&a| format!("{c}{a}")))
                .collect();
            cases.extend(longer);
        }
        let mut next = crate::testing::xorshift(0x9e37_79b9_7f4a_7c15);
        for _ in 0..2000 {
            let s: String = (0..24)
                .map(|_| char::from(b' ' + (next() % 95) as u8))
                .collect();
            cases.push(s);
        }
        cases.extend(
            [
                "ÉcoleNormale2",
                "straßeÜber",
                "getΣigmaValue",
                "文件Read读取v2",
                "İstanbulX",
            ]
            .map(str::to_owned),
        );
        assert!(cases.len() > 60_000);
        for case in &cases {
            let mut by_chars = Vec::new();
            for part in case.split(|c: char| !c.is_alphanumeric()) {
                split_by_chars(part, &mut by_chars);
            }
            assert_eq!(split_words(case), by_chars, "{case:?}");
        }
    }

    #[test]
    fn split_words_handles_case_and_separators() {
        assert_eq!(
            split_words("getHTTPResponse_v2"),
            ["get", "http", "response", "v", "2"]
        );
        assert_eq!(
            split_words("mcp__git__git_log"),
            ["mcp", "git", "git", "log"]
        );
        assert_eq!(
            split_words("triangle_properties.get"),
            ["triangle", "properties", "get"]
        );
        assert_eq!(split_words("read-file/path"), ["read", "file", "path"]);
        // An acronym's plural is one word; a capital word after an acronym is another.
        assert_eq!(split_words("generate UUIDs"), ["generate", "uuids"]);
        assert_eq!(split_words("getPRsByID"), ["get", "prs", "by", "id"]);
        assert_eq!(split_words("URLs"), ["urls"]);
        assert_eq!(split_words("HTTPServer"), ["http", "server"]);
        assert_eq!(split_words("HTTPSession"), ["http", "session"]);
    }
}

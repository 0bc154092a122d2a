//! The bundled model's tokenizer for plain text (ASCII, and Chinese), giving the same token ids
//! as the `tokenizers` crate.
//!
//! `tokenizer.json` normalises with SentencePiece's precompiled character map and lower-casing,
//! splits on whitespace, marks each word with `▁`, and cuts words into pieces by Unigram Viterbi.
//! Through the `tokenizers` crate the first three steps keep byte alignments for every character
//! and allocate per word, which was most of a query's embedding time. For text of printable ASCII
//! and ordinary whitespace the pipeline reduces to: lower-case, split on whitespace, Viterbi over
//! `▁word`. Chinese adds little: the map keeps CJK unified ideographs, `、` and `。` as they are
//! and turns full-width ASCII forms and the ideographic space into ASCII, as NFKC does, and
//! Viterbi runs over characters of several bytes. English text typed in editors adds a few
//! characters of the same two kinds: curly quotes, dashes and symbols such as `°` kept as they
//! are, the no-break space and `…` turned into ASCII. This module does that and nothing else: any
//! other character, or an added token's text, makes [`AsciiUnigram::ids`] decline, and the
//! caller uses the crate.
//!
//! The reduction rests on two things. The character map must do what is said above; it is a
//! compiled table this module does not read, so [`crate::Embedder`] checks it against the crate
//! when it loads: ASCII on every character (else the crate takes all text), the ideographs in
//! runs covering the block (else the crate takes all but ASCII), and each other character on its
//! own, kept or mapped (one the map treats otherwise is left to the crate). And Viterbi must run
//! exactly as the crate runs it: candidates by start character, then by length (shortest first),
//! a candidate replacing the best path only on a strictly higher score; a character with no
//! one-character piece scores `min_score - 10` as unknown; a run of unknown pieces fuses into
//! one, which is the piece it spells if there is one, else the unknown id.
//!
//! Only pieces that can match such input are kept: ASCII and the kept characters in UTF-8
//! after an optional leading `▁`, which is stored as the single byte `0x80`. No piece's UTF-8 can
//! begin with that byte (it only continues a character), and the marker is only ever first.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde::de::IgnoredAny;

const NONE: u32 = u32::MAX;
/// `▁` (U+2581), the word marker, as the trie stores it.
const MARK: u8 = 0x80;
/// The crate's `K_UNK_PENALTY`.
const UNK_PENALTY: f64 = 10.0;

/// A byte trie laid out for the walk: nodes in breadth-first order (the shallow nodes every walk
/// visits sit together), each holding its first edge, its piece's id and score, so a step reads
/// one node and one run of edge bytes. Breadth-first, every node but the root is the child of
/// exactly one edge, and edge `j` leads to node `j + 1`. The root and the word-marker node,
/// where almost every walk starts, look their children up in a full table. A walk that starts
/// at a CJK ideograph (each character of Chinese text starts one) takes the node after its three
/// bytes from a table too, where stepping would search two runs of up to 64 edges, and a walk
/// steps over each later ideograph (Chinese pieces run to several characters) by one lookup of
/// the node and the character.
#[derive(Debug, Default)]
struct Trie {
    nodes: Vec<Node>,
    /// The byte of each edge, each node's run sorted.
    edges: Vec<u8>,
    root: Vec<u32>,
    mark: Vec<u32>,
    mark_node: u32,
    /// For each ideograph from [`IDEOGRAPHS`], the node its UTF-8 leads to from the root
    /// (`NONE`: no piece begins with it); empty unless every piece is whole characters after
    /// its marker, so that no piece ends inside an ideograph's bytes.
    ideographs: Vec<u32>,
    /// The node that an ideograph's three bytes lead to from a node, keyed by [`step_key`], for
    /// every such step a piece takes; empty when [`Self::ideographs`] is. Chinese pieces run to
    /// several characters, and a walk through one costs a node and a search of its edges per
    /// byte.
    after_ideograph: FxHashMap<u64, u32>,
}

/// The key of a step from `node` over the ideograph `code` in [`Trie::after_ideograph`].
fn step_key(node: u32, code: u32) -> u64 {
    u64::from(node) << 32 | u64::from(code)
}

/// The code point of the CJK unified ideograph that `bytes` begin with, if they do.
#[inline]
fn ideograph_code(bytes: &[u8]) -> Option<u32> {
    let &[a, b, c, ..] = bytes else { return None };
    if a & 0xf0 != 0xe0 {
        return None;
    }
    let code = u32::from(a & 0x0f) << 12 | u32::from(b & 0x3f) << 6 | u32::from(c & 0x3f);
    IDEOGRAPHS.contains(&code).then_some(code)
}

/// The CJK unified ideographs [`Trie::ideographs`] covers.
const IDEOGRAPHS: std::ops::RangeInclusive<u32> = 0x4E00..=0x9FFF;

#[derive(Debug, Clone, Copy)]
struct Node {
    first_edge: u32,
    /// Piece id, or `NONE`.
    token: u32,
    score: f64,
}

impl Trie {
    /// `pieces` are byte strings with their ids; `scores` is indexed by id. A piece listed twice
    /// resolves to its last id, as the crate's piece-to-id map does.
    fn build(pieces: &[(Vec<u8>, u32)], scores: &[f64]) -> Self {
        let mut sorted: Vec<(&[u8], u32)> = pieces.iter().map(|(b, id)| (&b[..], *id)).collect();
        // Stable: equal pieces keep their order, and the last one's id stays.
        sorted.sort_by(|a, b| a.0.cmp(b.0));
        let mut unique: Vec<(&[u8], u32)> = Vec::with_capacity(sorted.len());
        for (bytes, id) in sorted {
            match unique.last_mut() {
                Some(last) if last.0 == bytes => last.1 = id,
                _ => unique.push((bytes, id)),
            }
        }
        // Breadth-first, the nodes of one depth are the distinct prefixes of that length in
        // byte order, and a node's children follow each other in the next depth.
        let mut trie = Trie::default();
        let mut level: Vec<(&[u8], u32)> = vec![(&[], NONE)];
        let mut base = 0;
        loop {
            let depth = level[0].0.len();
            let mut next: Vec<(&[u8], u32)> = Vec::new();
            for &(bytes, id) in unique.iter().filter(|p| p.0.len() > depth) {
                let prefix = &bytes[..=depth];
                if next.last().map(|n| n.0) != Some(prefix) {
                    // A piece sorts before the longer pieces it begins.
                    let token = if bytes.len() == depth + 1 { id } else { NONE };
                    next.push((prefix, token));
                }
            }
            let next_base = base + level.len();
            let mut child = 0;
            for &(prefix, token) in &level {
                trie.nodes.push(Node {
                    first_edge: (next_base + child - 1) as u32,
                    token,
                    score: if token == NONE {
                        0.0
                    } else {
                        scores[token as usize]
                    },
                });
                while child < next.len() && next[child].0.starts_with(prefix) {
                    child += 1;
                }
            }
            trie.edges.extend(next.iter().map(|n| n.0[depth]));
            if next.is_empty() {
                break;
            }
            base = next_base;
            level = next;
        }
        trie.nodes.push(Node {
            first_edge: trie.edges.len() as u32,
            token: NONE,
            score: 0.0,
        });
        trie.root = (0..=255u8).map(|b| trie.child_by_scan(0, b)).collect();
        trie.mark_node = trie.root[usize::from(MARK)];
        trie.mark = (0..=255u8)
            .map(|b| {
                if trie.mark_node == NONE {
                    NONE
                } else {
                    trie.child_by_scan(trie.mark_node, b)
                }
            })
            .collect();
        // A walk may step over a character whole only if no piece ends inside one: every piece
        // is whole characters after its marker.
        let whole = unique
            .iter()
            .all(|(b, _)| std::str::from_utf8(b.strip_prefix(&[MARK]).unwrap_or(b)).is_ok());
        if whole {
            trie.ideographs = IDEOGRAPHS
                .map(|c| {
                    let mut utf8 = [0u8; 4];
                    let c = char::from_u32(c).expect("the block holds only characters");
                    c.encode_utf8(&mut utf8)
                        .bytes()
                        .try_fold(0, |node, b| match trie.child(node, b) {
                            NONE => None,
                            next => Some(next),
                        })
                        .unwrap_or(NONE)
                })
                .collect();
            // Every step over an ideograph is a step some piece takes: walk each piece, by
            // characters where it has ideographs.
            for &(bytes, _) in &unique {
                let (mut node, mut at) = (0, 0);
                while at < bytes.len() {
                    let from = node;
                    let code = ideograph_code(&bytes[at..]);
                    let step = if code.is_some() { 3 } else { 1 };
                    for &b in &bytes[at..at + step] {
                        node = trie.child(node, b);
                    }
                    if let Some(code) = code {
                        trie.after_ideograph.insert(step_key(from, code), node);
                    }
                    at += step;
                }
            }
        }
        trie
    }

    /// The node that the ideograph `code` leads to from `node` (`NONE`: no piece continues so).
    #[inline]
    fn after_ideograph(&self, node: u32, code: u32) -> u32 {
        self.after_ideograph
            .get(&step_key(node, code))
            .copied()
            .unwrap_or(NONE)
    }

    /// The node that the three bytes at the start of `bytes` lead to from the root, when they
    /// are an ideograph [`Self::ideographs`] covers.
    #[inline]
    fn ideograph(&self, bytes: &[u8]) -> Option<u32> {
        let code = ideograph_code(bytes)?;
        self.ideographs
            .get((code - IDEOGRAPHS.start()) as usize)
            .copied()
    }

    fn child_by_scan(&self, node: u32, b: u8) -> u32 {
        let (lo, hi) = (
            self.nodes[node as usize].first_edge as usize,
            self.nodes[node as usize + 1].first_edge as usize,
        );
        match self.edges[lo..hi].binary_search(&b) {
            Ok(i) => (lo + i + 1) as u32,
            Err(_) => NONE,
        }
    }

    #[inline]
    fn child(&self, node: u32, b: u8) -> u32 {
        if node == 0 {
            self.root[usize::from(b)]
        } else if node == self.mark_node {
            self.mark[usize::from(b)]
        } else {
            self.child_by_scan(node, b)
        }
    }

    fn get(&self, bytes: &[u8]) -> u32 {
        let mut node = 0;
        for &b in bytes {
            node = self.child(node, b);
            if node == NONE {
                return NONE;
            }
        }
        self.nodes[node as usize].token
    }
}

/// The best path ending at a byte of a word.
#[derive(Clone, Copy)]
struct Best {
    score: f64,
    /// Where its last piece starts, or `NONE` while unset.
    from: u32,
    id: u32,
}

/// The parts of `tokenizer.json` this module reads; the rest (the compiled character map, the
/// decoder) is skipped unparsed.
#[derive(Deserialize)]
struct TokenizerJson {
    #[serde(default)]
    truncation: Option<IgnoredAny>,
    #[serde(default)]
    padding: Option<IgnoredAny>,
    #[serde(default)]
    added_tokens: Vec<AddedToken>,
    normalizer: Option<Sequence>,
    pre_tokenizer: Option<Sequence>,
    model: ModelJson,
}

#[derive(Deserialize)]
struct AddedToken {
    content: String,
}

/// A normalizer or pre-tokenizer: its type, and the steps of a sequence.
#[derive(Deserialize)]
struct Sequence {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default, alias = "normalizers", alias = "pretokenizers")]
    steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Step {
    #[serde(rename = "type")]
    kind: String,
    replacement: Option<String>,
    prepend_scheme: Option<String>,
    split: Option<bool>,
}

#[derive(Deserialize)]
struct ModelJson {
    #[serde(rename = "type")]
    kind: String,
    unk_id: Option<u64>,
    #[serde(default)]
    byte_fallback: bool,
    #[serde(default)]
    vocab: Vec<(String, f64)>,
}

/// Unigram tokenisation of plain ASCII text for one `tokenizer.json`.
#[derive(Debug)]
pub(crate) struct AsciiUnigram {
    trie: Trie,
    unk_id: u32,
    unk_score: f64,
    /// Number of pieces: every id given is below it.
    vocab_size: usize,
    /// Texts the crate would cut out before normalising (added tokens); text containing one is
    /// left to the crate.
    added: Vec<String>,
    /// The model truncates text to this many characters before tokenising.
    max_chars: usize,
    /// Distinguishes this tokenizer's entries in the per-thread word memo.
    instance: u64,
    /// Whether text with Chinese ideographs, full-width forms and typographic punctuation is
    /// taken too (see [`AsciiUnigram::ids`]); off when the check at load finds the model's map
    /// differs.
    wide: bool,
    /// Non-ASCII characters the check at load found mapped otherwise than [`normalise_wide`]
    /// maps them: text with one is left to the crate.
    differ: Vec<char>,
}

/// Words seen lately on this thread and their ids: a request's words recur across requests, and a
/// memo hit costs a hash lookup where Viterbi walks the trie from every byte of the word.
#[derive(Default)]
struct Memo {
    instance: u64,
    words: FxHashMap<Box<[u8]>, (u32, u32)>,
    /// The ids of every remembered word, each a range of this.
    ids: Vec<u32>,
    /// Scratch for one word and its Viterbi paths.
    word: Vec<u8>,
    best: Vec<Best>,
}

/// Words, and their ids in all, remembered per thread before the memo starts over.
const MEMO_WORDS: usize = 1 << 14;
const MEMO_IDS: usize = 1 << 18;

thread_local! {
    static MEMO: RefCell<Memo> = RefCell::default();
}

static INSTANCES: AtomicU64 = AtomicU64::new(1);

impl AsciiUnigram {
    /// Reads `tokenizer.json`; `None` unless its pipeline is the one this module reproduces
    /// (precompiled map then lower-case; whitespace split then `▁` always prepended and split;
    /// Unigram with an unknown id and no byte fallback). `max_tokens` is the model's truncation
    /// length in tokens, which it turns into characters by the median piece length.
    pub(crate) fn from_json(bytes: &[u8], max_tokens: usize) -> Option<Self> {
        let json: TokenizerJson = serde_json::from_slice(bytes).ok()?;
        fn kinds(v: &Sequence) -> Option<Vec<&str>> {
            (v.kind == "Sequence").then(|| v.steps.iter().map(|s| s.kind.as_str()).collect())
        }
        let (normalizer, pre) = (json.normalizer.as_ref()?, json.pre_tokenizer.as_ref()?);
        if kinds(normalizer)? != ["Precompiled", "Lowercase"]
            || kinds(pre)? != ["WhitespaceSplit", "Metaspace"]
            || json.truncation.is_some()
            || json.padding.is_some()
        {
            return None;
        }
        let meta = &pre.steps[1];
        if meta.replacement.as_deref() != Some("▁")
            || meta.prepend_scheme.as_deref() != Some("always")
            || meta.split != Some(true)
        {
            return None;
        }
        let model = &json.model;
        if model.kind != "Unigram" || model.byte_fallback {
            return None;
        }
        let unk_id = u32::try_from(model.unk_id?).ok()?;
        let scores: Vec<f64> = model.vocab.iter().map(|v| v.1).collect();
        let mut pieces = Vec::new();
        for (id, (piece, _)) in model.vocab.iter().enumerate() {
            let body = piece.strip_prefix('▁');
            let rest = body.unwrap_or(piece);
            if rest.chars().all(|c| c.is_ascii() || kept_wide(c)) {
                let mut key = Vec::with_capacity(rest.len() + 1);
                if body.is_some() {
                    key.push(MARK);
                }
                key.extend_from_slice(rest.as_bytes());
                pieces.push((key, u32::try_from(id).ok()?));
            }
        }
        if unk_id as usize >= scores.len() {
            return None;
        }
        let min_score = scores.iter().copied().fold(f64::INFINITY, f64::min);
        // Median byte length of the distinct pieces, as model2vec computes it.
        let mut distinct: Vec<&str> = model.vocab.iter().map(|v| v.0.as_str()).collect();
        distinct.sort_unstable();
        distinct.dedup();
        let mut lens: Vec<usize> = distinct.iter().map(|p| p.len()).collect();
        lens.sort_unstable();
        let median = lens.get(lens.len() / 2).copied().unwrap_or(1);
        let added = json.added_tokens.into_iter().map(|t| t.content).collect();
        let trie = Trie::build(&pieces, &scores);
        if trie.nodes.len() >= NONE as usize {
            return None;
        }
        Some(Self {
            trie,
            unk_id,
            unk_score: min_score - UNK_PENALTY,
            vocab_size: scores.len(),
            added,
            max_chars: max_tokens.saturating_mul(median),
            instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
            wide: true,
            differ: Vec::new(),
        })
    }

    /// Leaves all but plain ASCII text to the crate.
    pub(crate) fn ascii_only(&mut self) {
        self.wide = false;
    }

    /// Leaves text with any of `chars` to the crate.
    pub(crate) fn leave_to_crate(&mut self, chars: &[char]) {
        self.differ.extend_from_slice(chars);
    }

    /// Whether text beyond plain ASCII is taken (see [`AsciiUnigram::ids`]).
    pub(crate) fn takes_wide(&self) -> bool {
        self.wide
    }

    /// The unknown token's id.
    pub(crate) fn unk_id(&self) -> u32 {
        self.unk_id
    }

    /// Number of pieces of the vocabulary.
    pub(crate) fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Appends the token ids of `text` to `ids`, after the model's truncation, or returns false
    /// (leaving `ids` as it was) if `text` is not plain: no added token's text in it, and every
    /// character printable ASCII or one of space, `\t`, `\n`, `\r`, or (unless
    /// [`Self::ascii_only`]) a CJK unified ideograph, `、`, `。`, one of [`KEPT_PUNCTUATION`], a
    /// full-width ASCII form, the ideographic or no-break space, or `…`. The character map keeps
    /// the first four kinds as they are and turns the others into ASCII, as NFKC does.
    pub(crate) fn ids(&self, text: &str, ids: &mut Vec<u32>) -> bool {
        if self.added.iter().any(|a| text.contains(a.as_str())) {
            return false;
        }
        let bytes = text.as_bytes();
        let plain = |b: &u8| matches!(b, 0x20..=0x7e | b'\t' | b'\n' | b'\r');
        let normal;
        let bytes = if bytes.iter().all(plain) {
            &bytes[..bytes.len().min(self.max_chars)]
        } else {
            if !self.wide {
                return false;
            }
            let Some(n) = normalise_wide(text, self.max_chars, &self.differ) else {
                return false;
            };
            normal = n;
            &normal[..]
        };
        MEMO.with_borrow_mut(|memo| {
            if memo.instance != self.instance
                || memo.words.len() >= MEMO_WORDS
                || memo.ids.len() >= MEMO_IDS
            {
                memo.instance = self.instance;
                memo.words.clear();
                memo.ids.clear();
            }
            let Memo {
                words,
                ids: remembered,
                word,
                best,
                ..
            } = memo;
            for w in bytes
                .split(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
                .filter(|w| !w.is_empty())
            {
                word.clear();
                word.push(MARK);
                word.extend(w.iter().map(u8::to_ascii_lowercase));
                if let Some(&(from, to)) = words.get(&word[..]) {
                    ids.extend_from_slice(&remembered[from as usize..to as usize]);
                    continue;
                }
                let mark = ids.len();
                self.viterbi(word, best, ids);
                let from = remembered.len() as u32;
                remembered.extend_from_slice(&ids[mark..]);
                words.insert(word.as_slice().into(), (from, remembered.len() as u32));
            }
        });
        true
    }

    /// Appends the ids of one marked word, as the crate's `Unigram::encode_optimized` and
    /// `tokenize` give them.
    fn viterbi(&self, word: &[u8], best: &mut Vec<Best>, ids: &mut Vec<u32>) {
        let size = word.len();
        best.clear();
        best.resize(
            size + 1,
            Best {
                score: 0.0,
                from: NONE,
                id: 0,
            },
        );
        best[0].from = 0;
        let relax = |target: &mut Best, score: f64, from: usize, id: u32| {
            if target.from == NONE || score > target.score {
                *target = Best {
                    score,
                    from: from as u32,
                    id,
                };
            }
        };
        // Paths start at characters: the marker (which stands for `▁`) and each UTF-8 lead byte.
        // With the table of ideographs, an ideograph is stepped over whole: no piece ends inside
        // one's bytes.
        let by_character = !self.trie.after_ideograph.is_empty();
        for start in 0..size {
            let len = if start == 0 {
                1
            } else {
                match word[start] {
                    0x00..=0x7f => 1,
                    0x80..=0xbf => continue,
                    0xc0..=0xdf => 2,
                    0xe0..=0xef => 3,
                    _ => 4,
                }
            };
            let till_here = best[start].score;
            let mut single = false;
            let (mut node, mut from) = (0, start);
            if start > 0
                && len == 3
                && let Some(char_node) = self.trie.ideograph(&word[start..])
            {
                // No piece ends inside the character's bytes, so the walk may jump past them;
                // when no piece begins with the character, there is nothing to walk.
                node = char_node;
                from = size;
                if node != NONE {
                    from = start + 3;
                    let Node {
                        token: id, score, ..
                    } = self.trie.nodes[node as usize];
                    if id != NONE {
                        relax(&mut best[from], score + till_here, start, id);
                        single = true;
                    }
                }
            }
            let mut end = from;
            while end < size {
                let code = if by_character {
                    ideograph_code(&word[end..])
                } else {
                    None
                };
                match code {
                    Some(code) => {
                        node = self.trie.after_ideograph(node, code);
                        end += 3;
                    }
                    None => {
                        node = self.trie.child(node, word[end]);
                        end += 1;
                    }
                }
                if node == NONE {
                    break;
                }
                let Node {
                    token: id, score, ..
                } = self.trie.nodes[node as usize];
                if id != NONE {
                    relax(&mut best[end], score + till_here, start, id);
                    single |= end == start + len;
                }
            }
            if !single {
                relax(
                    &mut best[start + len],
                    self.unk_score + till_here,
                    start,
                    self.unk_id,
                );
            }
        }
        // Walk back, fusing runs of unknown pieces; ids come out reversed.
        let mark = ids.len();
        let mut end = size;
        let mut unk_run_end = None;
        while end > 0 {
            let path = best[end];
            if path.id == self.unk_id {
                unk_run_end.get_or_insert(end);
            } else {
                if let Some(run_end) = unk_run_end.take() {
                    ids.push(self.fused(&word[end..run_end]));
                }
                ids.push(path.id);
            }
            end = path.from as usize;
        }
        if let Some(run_end) = unk_run_end {
            ids.push(self.fused(&word[..run_end]));
        }
        ids[mark..].reverse();
    }

    /// A fused run of unknown pieces: the piece it spells, else the unknown id.
    fn fused(&self, run: &[u8]) -> u32 {
        match self.trie.get(run) {
            NONE => self.unk_id,
            id => id,
        }
    }
}

/// Caseless punctuation and symbols of English text that NFKC leaves alone: typographic quotes
/// and dashes, degrees, currencies, bullets. A request typed in an editor that curls its
/// apostrophes would otherwise leave the path on one `’`.
pub(crate) const KEPT_PUNCTUATION: [char; 22] = [
    '‘', '’', '‚', '“', '”', '„', '–', '—', '°', '€', '£', '¥', '¢', '·', '•', '×', '÷', '§', '©',
    '®', '±', '«',
];

/// Every character beyond ASCII and the CJK unified ideographs that [`normalise_wide`] takes,
/// mapped or kept: the model's load checks each on its own against the crate, and leaves one
/// that disagrees to it (see [`AsciiUnigram::leave_to_crate`]).
pub(crate) fn checked_one_by_one() -> impl Iterator<Item = char> {
    ('\u{ff01}'..='\u{ff5e}')
        .chain(['\u{3000}', '、', '。', '\u{a0}', '…'])
        .chain(KEPT_PUNCTUATION)
}

/// A non-ASCII character the model's map keeps as it is and the trie holds pieces of: a CJK
/// unified ideograph, `、`, `。` or one of [`KEPT_PUNCTUATION`].
fn kept_wide(c: char) -> bool {
    matches!(c, '\u{4e00}'..='\u{9fff}' | '、' | '。') || KEPT_PUNCTUATION.contains(&c)
}

/// `text` cut to `max_chars` characters and mapped as the model's character map maps it, as
/// UTF-8, or `None` if a character is not one [`AsciiUnigram::ids`] takes or is in `differ`.
fn normalise_wide(text: &str, max_chars: usize, differ: &[char]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars().take(max_chars) {
        match c {
            ' '..='~' | '\t' | '\n' | '\r' => out.push(c as u8),
            c if differ.contains(&c) => return None,
            // Full-width forms of `!` to `~`.
            '\u{ff01}'..='\u{ff5e}' => out.push((u32::from(c) - 0xff01 + 0x21) as u8),
            // The ideographic and the no-break space.
            '\u{3000}' | '\u{a0}' => out.push(b' '),
            '…' => out.extend_from_slice(b"..."),
            // Last, since it may scan the list of kept marks.
            c if kept_wide(c) => {
                out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            }
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokenizer(vocab: &[(&str, f64)]) -> AsciiUnigram {
        let json = serde_json::json!({
            "truncation": null, "padding": null,
            "added_tokens": [{"id": 0, "content": "<unk>"}],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Precompiled", "precompiled_charsmap": ""}, {"type": "Lowercase"}]},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "WhitespaceSplit"},
                {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}]},
            "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": false, "vocab": vocab},
        });
        AsciiUnigram::from_json(json.to_string().as_bytes(), 512).expect("pipeline accepted")
    }

    fn ids(t: &AsciiUnigram, text: &str) -> Option<Vec<u32>> {
        let mut out = Vec::new();
        t.ids(text, &mut out).then_some(out)
    }

    #[test]
    fn viterbi_takes_the_best_path_and_the_first_of_equal_ones() {
        let t = tokenizer(&[
            ("<unk>", 0.0),
            ("▁ab", -1.0),
            ("▁a", -1.0),
            ("b", -1.0),
            ("▁abc", -5.0),
            ("c", -1.0),
            ("bc", -0.5),
        ]);
        // ▁a + bc (-1.5) beats ▁ab + c (-2) and ▁abc (-5).
        assert_eq!(ids(&t, "ABC"), Some(vec![2, 6]));
        // ▁ab (-1) and ▁a + b (-2): one piece wins.
        assert_eq!(ids(&t, "ab"), Some(vec![1]));
        // Words split on any of the four whitespace bytes.
        assert_eq!(ids(&t, " ab\tab\r\nab "), Some(vec![1, 1, 1]));
    }

    #[test]
    fn a_piece_listed_twice_is_its_last_id() {
        let t = tokenizer(&[("<unk>", 0.0), ("▁a", -1.0), ("b", -1.0), ("▁a", -3.0)]);
        assert_eq!(ids(&t, "a"), Some(vec![3]));
        // Scored as the last id: ▁a + b is -4 with it (-2 with the first), so ▁ab (-3.5) wins.
        let t = tokenizer(&[
            ("<unk>", 0.0),
            ("▁a", -1.0),
            ("b", -1.0),
            ("▁a", -3.0),
            ("▁ab", -3.5),
        ]);
        assert_eq!(ids(&t, "ab"), Some(vec![4]));
    }

    #[test]
    fn unknown_characters_fuse_into_one_piece() {
        let t = tokenizer(&[("<unk>", 0.0), ("▁a", -1.0), ("xy", -20.0)]);
        // `x` and `y` have no one-character piece, but `xy` beats two unknowns.
        assert_eq!(ids(&t, "axy"), Some(vec![1, 2]));
        // `z` and `z` are unknown and fuse: one unknown id, not two.
        assert_eq!(ids(&t, "azz"), Some(vec![1, 0]));
        // The marker alone has no piece: `▁z` fuses into the unknown id.
        assert_eq!(ids(&t, "z"), Some(vec![0]));
    }

    #[test]
    fn other_text_is_declined() {
        let t = tokenizer(&[("<unk>", 0.0), ("▁a", -1.0)]);
        for text in ["café", "a\u{0}b", "a\u{b}b", "x <unk> y", "中文 é", "ｶﾀｶﾅ"] {
            assert_eq!(ids(&t, text), None, "{text:?}");
        }
        assert_eq!(ids(&t, ""), Some(vec![]));
        let mut t = t;
        t.ascii_only();
        assert_eq!(ids(&t, "中文"), None);
        assert_eq!(ids(&t, "a"), Some(vec![1]));
    }

    #[test]
    fn chinese_is_cut_by_characters_and_full_width_forms_are_ascii() {
        let t = tokenizer(&[
            ("<unk>", 0.0),
            ("▁查询", -1.0),
            ("天气", -1.0),
            ("▁查", -1.0),
            ("询天", -1.0),
            ("气", -3.0),
            ("▁a", -1.0),
            ("。", -1.0),
            ("▁!", -1.0),
        ]);
        // ▁查询 + 天气 (-2) beats ▁查 + 询天 + 气 (-5).
        assert_eq!(ids(&t, "查询天气"), Some(vec![1, 2]));
        // `字` has no piece: one unknown, whole, after ▁a; a run of unknown characters fuses.
        assert_eq!(ids(&t, "a字"), Some(vec![6, 0]));
        assert_eq!(ids(&t, "字字"), Some(vec![0]));
        // Full-width `Ａ` and `！` are `a` and `!`; the ideographic space splits words.
        assert_eq!(ids(&t, "Ａ　！。"), Some(vec![6, 8, 7]));
    }

    /// The node [`Trie::ideograph`] gives is the one stepping byte by byte reaches, for every
    /// ideograph, whether a piece begins with it or not; and a trie with a piece that ends
    /// inside an ideograph's bytes has no table, so every walk steps.
    #[test]
    fn an_ideograph_leads_where_its_bytes_lead() {
        let pieces: Vec<(Vec<u8>, u32)> = ["查", "查询", "询", "天气", "a", "一", "\u{9fff}x"]
            .iter()
            .enumerate()
            .map(|(i, p)| (p.as_bytes().to_vec(), i as u32))
            .collect();
        let scores = vec![-1.0; pieces.len()];
        let trie = Trie::build(&pieces, &scores);
        let mut led = 0;
        for c in IDEOGRAPHS {
            let c = char::from_u32(c).expect("an ideograph");
            let mut utf8 = [0u8; 4];
            let bytes = c.encode_utf8(&mut utf8).as_bytes();
            let stepped = bytes
                .iter()
                .try_fold(0, |node, &b| match trie.child(node, b) {
                    NONE => None,
                    next => Some(next),
                });
            assert_eq!(trie.ideograph(bytes), Some(stepped.unwrap_or(NONE)), "{c}");
            led += usize::from(stepped.is_some());
        }
        assert_eq!(led, 5, "查 询 天 一 and U+9FFF begin pieces");
        // From every node, a step over an ideograph lands where its three bytes do.
        let mut continued = 0;
        for node in 0..trie.nodes.len() as u32 - 1 {
            for c in "查询天气一乙\u{9fff}".chars() {
                let mut utf8 = [0u8; 4];
                let bytes = c.encode_utf8(&mut utf8).as_bytes();
                let stepped = bytes
                    .iter()
                    .try_fold(node, |node, &b| match trie.child(node, b) {
                        NONE => None,
                        next => Some(next),
                    });
                let code = ideograph_code(bytes).expect("an ideograph");
                assert_eq!(
                    trie.after_ideograph(node, code),
                    stepped.unwrap_or(NONE),
                    "{c} from node {node}"
                );
                continued += usize::from(stepped.is_some() && node != 0);
            }
        }
        assert_eq!(continued, 2, "询 after 查, 气 after 天");
        assert_eq!(trie.ideograph("a查".as_bytes()), None, "not an ideograph");
        assert_eq!(trie.ideograph("가".as_bytes()), None, "outside the block");
        let mut cut = pieces.clone();
        cut.push(("查".as_bytes()[..2].to_vec(), cut.len() as u32));
        let trie = Trie::build(&cut, &vec![-1.0; cut.len()]);
        assert_eq!(trie.ideograph("查".as_bytes()), None);
        assert!(trie.after_ideograph.is_empty());
        // A piece that ends inside an ideograph after another character turns both tables off.
        let mut cut = pieces.clone();
        cut.push(("a查".as_bytes()[..3].to_vec(), cut.len() as u32));
        let trie = Trie::build(&cut, &vec![-1.0; cut.len()]);
        assert_eq!(trie.ideograph("查".as_bytes()), None);
        assert!(trie.after_ideograph.is_empty());
    }

    #[test]
    fn typed_punctuation_is_kept_or_made_ascii() {
        let t = tokenizer(&[
            ("<unk>", 0.0),
            ("▁it", -1.0),
            ("’s", -1.0),
            ("▁...", -1.0),
            ("▁°c", -1.0),
            ("▁a", -1.0),
        ]);
        // `’` is kept, so `’s` is a piece; `…` is `...`; the no-break space splits words.
        assert_eq!(ids(&t, "It’s\u{a0}…"), Some(vec![1, 2, 3]));
        assert_eq!(ids(&t, "°C a"), Some(vec![4, 5]));
        let mut t = t;
        t.leave_to_crate(&['’']);
        assert_eq!(ids(&t, "It’s"), None);
        t.ascii_only();
        assert_eq!(ids(&t, "°C"), None);
    }

    #[test]
    fn other_pipelines_are_refused() {
        let json = serde_json::json!({
            "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}]},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"},
                {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}]},
            "model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]},
        });
        assert!(AsciiUnigram::from_json(json.to_string().as_bytes(), 512).is_none());
    }
}

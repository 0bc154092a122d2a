//! Text analysis shared by indexing and querying: one function turns any text into terms.
//!
//! Tool text mixes identifiers (`getHTTPResponse_v2`), English prose and Chinese prose, often in
//! one description. Latin runs are split at separators and camelCase, lower-cased, stripped of
//! stop words and stemmed (Snowball English), so "files" finds "file" and "Listing" finds "list".
//! Chinese runs are segmented with jieba (search mode, which also emits the shorter words inside
//! long ones) and, because a query's word boundaries often differ from a description's, also
//! indexed as overlapping character bigrams under a separate `~` prefix, so they score as a weak,
//! separate signal rather than as words. (Single characters were measured too: about as good on
//! ACEBench zh but slower, since common characters have long posting lists.) The jieba dictionary
//! loads once, on first use.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use jieba_rs::Jieba;
use rust_stemmers::{Algorithm, Stemmer};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::name::split_words;

/// Prefix of Chinese character-bigram terms.
pub const CJK_CHAR_PREFIX: char = '~';

fn jieba() -> &'static Jieba {
    static J: OnceLock<Jieba> = OnceLock::new();
    J.get_or_init(Jieba::new)
}

fn stemmer() -> &'static Stemmer {
    static S: OnceLock<Stemmer> = OnceLock::new();
    S.get_or_init(|| Stemmer::create(Algorithm::English))
}

/// Loads the segmenter and stemmer now instead of on the first query.
pub fn warm_up() {
    let _ = jieba();
    let _ = stemmer();
}

/// Whether `c` is a CJK ideograph (the ranges Chinese text uses).
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2A6DF | 0x2A700..=0x2EBEF)
}

/// English words too common in tool text and requests to carry meaning.
const EN_STOP: &[&str] = &[
    "a", "about", "above", "after", "again", "all", "also", "am", "an", "and", "any", "are", "as",
    "at", "be", "been", "before", "being", "below", "between", "both", "but", "by", "can", "could",
    "did", "do", "does", "doing", "down", "during", "each", "etc", "few", "for", "from", "further",
    "had", "has", "have", "having", "he", "her", "here", "hers", "him", "his", "how", "i", "if",
    "in", "into", "is", "it", "its", "itself", "just", "let", "like", "me", "might", "more",
    "most", "must", "my", "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only",
    "or", "other", "our", "ours", "out", "over", "own", "please", "same", "shall", "she", "should",
    "so", "some", "such", "than", "that", "the", "their", "them", "then", "there", "these", "they",
    "this", "those", "through", "to", "too", "under", "until", "up", "us", "very", "was", "we",
    "were", "what", "when", "where", "which", "while", "who", "whom", "why", "will", "with",
    "would", "you", "your", "yours", "yourself", "e", "g", "ie", "eg", "want", "need", "help",
    "give", "tell", "know", "okay", "hi", "hello", "thank", "thanks", "im", "ve", "ll", "d", "s",
    "t", "re", "m",
];

/// Chinese function words and request fillers.
const ZH_STOP: &[&str] = &[
    "的", "了", "和", "是", "在", "我", "你", "他", "她", "它", "们", "我们", "你们", "这", "那",
    "这个", "那个", "一个", "一下", "有", "就", "也", "都", "而", "及", "与", "或", "等", "把",
    "被", "让", "给", "对", "从", "到", "为", "以", "于", "中", "上", "下", "吗", "呢", "吧", "啊",
    "请", "帮", "帮我", "需要", "想", "想要", "希望", "能", "能否", "可以", "如何", "怎么", "什么",
    "哪些", "一些", "进行", "使用", "用", "根据", "并", "及其", "其", "该", "此", "之", "个", "些",
    "所", "着", "过", "还", "又", "再", "很", "最", "更", "已", "已经", "将", "会", "要", "如果",
    "因为", "所以", "但是", "然后", "比如", "例如", "是否", "告诉", "知道", "获取",
];

fn is_stop(word: &str) -> bool {
    static SET: OnceLock<FxHashSet<&'static str>> = OnceLock::new();
    SET.get_or_init(|| EN_STOP.iter().chain(ZH_STOP).copied().collect())
        .contains(word)
}

/// Stems one lower-case Latin word.
pub fn stem(word: &str) -> Cow<'_, str> {
    if word.len() <= 3 || word.bytes().any(|b| b.is_ascii_digit()) {
        return Cow::Borrowed(word);
    }
    stemmer().stem(word)
}

/// A run of text analysed as one piece: Latin words (with their `_ - . /` separators) or
/// Chinese characters. Runs are analysed independently of each other.
#[derive(Clone, Copy)]
enum Run {
    Latin,
    Cjk,
}

/// Calls `run` for each Latin and Chinese run of `text`, in order: a Chinese run is a stretch of
/// CJK ideographs; a Latin run a stretch of other alphanumeric characters and the separators
/// `_ - . /`, which it holds as spaces. Each run is a slice of `text` but for a Latin run with a
/// separator, so a plain word is analysed without a copy.
fn runs(text: &str, mut run: impl FnMut(Run, &str)) {
    if text.is_ascii() {
        return ascii_runs(text, run);
    }
    let mut spaced = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if is_cjk(c) {
            let mut end = text.len();
            while let Some(&(i, c)) = chars.peek() {
                if !is_cjk(c) {
                    end = i;
                    break;
                }
                chars.next();
            }
            run(Run::Cjk, &text[start..end]);
        } else if c.is_alphanumeric() || is_separator(c) {
            let (mut end, mut separated) = (text.len(), false);
            while let Some(&(i, c)) = chars.peek() {
                if is_cjk(c) || !(c.is_alphanumeric() || is_separator(c)) {
                    end = i;
                    break;
                }
                separated |= is_separator(c);
                chars.next();
            }
            latin_run(&text[start..end], separated, &mut spaced, &mut run);
        } else {
            chars.next();
        }
    }
}

/// [`runs`] of ASCII text, on its bytes.
fn ascii_runs(text: &str, mut run: impl FnMut(Run, &str)) {
    let bytes = text.as_bytes();
    let in_run = |b: u8| b.is_ascii_alphanumeric() || is_separator(char::from(b));
    let mut spaced = String::new();
    let mut i = 0;
    while i < bytes.len() {
        if !in_run(bytes[i]) {
            i += 1;
            continue;
        }
        let (start, mut separated) = (i, false);
        while i < bytes.len() && in_run(bytes[i]) {
            separated |= is_separator(char::from(bytes[i]));
            i += 1;
        }
        latin_run(&text[start..i], separated, &mut spaced, &mut run);
    }
}

/// Whether `c` joins the words of a Latin run, which holds it as a space.
fn is_separator(c: char) -> bool {
    matches!(c, '_' | '-' | '.' | '/')
}

/// Hands `run` the Latin run `slice`: itself, or, when it has a separator (`separated`), a copy
/// in `spaced` with its separators as spaces.
fn latin_run(slice: &str, separated: bool, spaced: &mut String, run: &mut impl FnMut(Run, &str)) {
    if separated {
        spaced.clear();
        spaced.extend(slice.chars().map(|c| if is_separator(c) { ' ' } else { c }));
        run(Run::Latin, spaced);
    } else {
        run(Run::Latin, slice);
    }
}

/// The terms of one run, borrowed where they are the text's own (a term is only allocated by
/// a caller that keeps it).
fn analyze_run(kind: Run, text: &str, emit: &mut dyn FnMut(Cow<'_, str>, &str)) {
    match kind {
        Run::Latin => {
            for w in split_words(text) {
                if w.is_empty() || is_stop(&w) {
                    continue;
                }
                emit(stem(&w), &w);
            }
        }
        Run::Cjk => {
            for t in jieba().cut_for_search(text, true) {
                if !is_stop(t.word) {
                    emit(Cow::Borrowed(t.word), t.word);
                }
            }
            // Each pair of neighbouring characters, as a slice of the run, and its term.
            let bounds: Vec<usize> = text
                .char_indices()
                .map(|(i, _)| i)
                .chain([text.len()])
                .collect();
            let mut term = String::new();
            for w in bounds.windows(3) {
                let bigram = &text[w[0]..w[2]];
                term.clear();
                term.push(CJK_CHAR_PREFIX);
                term.push_str(bigram);
                emit(Cow::Borrowed(&term), bigram);
            }
        }
    }
}

/// Calls `emit(term, surface)` for every term of `text`; `surface` is the word as written
/// (lower-cased, before stemming), for reasons shown to the model.
pub fn analyze_with(text: &str, mut emit: impl FnMut(String, &str)) {
    runs(text, |kind, run| {
        analyze_run(kind, run, &mut |term, surface| {
            emit(term.into_owned(), surface)
        })
    });
}

/// Analyses of runs already seen, reused: successive requests to one agent repeat most of their
/// words, so a memo may be kept across requests (see [`Memo::bound`]), and a clause whose words
/// are cut by its bounds analyses runs its request had. Analysis is a pure function of the run,
/// so the terms are the same as [`analyze_with`]'s.
#[derive(Debug, Default)]
pub struct Memo {
    /// Each run seen, and its terms as a range of `seq`.
    runs: FxHashMap<Box<str>, (u32, u32)>,
    /// `(term, surface)` string ids of every remembered run, run after run.
    seq: Vec<(u32, u32)>,
    /// Distinct terms and surfaces, by id: a query's words are compared and counted as ids, and
    /// only its distinct terms are handed out, shared (see [`Memo::shared`]).
    strs: Vec<Arc<str>>,
    ids: FxHashMap<Arc<str>, u32>,
    /// Per string id, the last count that met it as a term and its place in that count's
    /// output (see [`analyze_counted`]): distinct terms are found without a map per query.
    met: Vec<(u32, u32)>,
    /// The current count (0: none yet).
    counting: u32,
    /// Per string id, who last looked it up (see [`Memo::found`]; 0: no one) and what they
    /// found ([`ABSENT`]: nothing).
    found: Vec<(u64, [u32; 2])>,
}

/// In [`Memo::found`]: looked up and absent.
const ABSENT: u32 = u32::MAX;

/// Terms a [`Memo`] holds at most between calls to [`Memo::bound`] (a few MB).
const MEMO_TERMS: usize = 1 << 15;

impl Memo {
    /// Forgets every run (the memo grows with what it analysed).
    pub fn clear(&mut self) {
        self.runs.clear();
        self.seq.clear();
        self.strs.clear();
        self.ids.clear();
        self.met.clear();
        self.found.clear();
    }

    /// Forgets every run once the memo holds more than `MEMO_TERMS` terms, so that one kept
    /// across requests stays small. Ids given out before are void after it.
    pub fn bound(&mut self) {
        if self.seq.len() > MEMO_TERMS {
            self.clear();
        }
    }

    /// The term or surface with id `id`, as [`analyze_memo`] gave it since the last clear.
    pub fn str(&self, id: u32) -> &str {
        &self.strs[id as usize]
    }

    /// [`Memo::str`], shared: a parsed query holds its terms without copying them.
    pub fn shared(&self, id: u32) -> Arc<str> {
        Arc::clone(&self.strs[id as usize])
    }

    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.strs.len() as u32;
        let s: Arc<str> = s.into();
        self.strs.push(Arc::clone(&s));
        self.ids.insert(s, id);
        self.found.push((0, [ABSENT; 2]));
        id
    }

    /// What `look_up` gives for the string with id `id`, asked once per string for each
    /// `owner` (non-zero, and different whenever `look_up` would give something else): a long
    /// request's terms are looked up in an index's vocabulary once, not again for each of its
    /// clauses and for each later request that repeats them.
    pub fn found(
        &mut self,
        owner: u64,
        id: u32,
        look_up: impl FnOnce(&str) -> [Option<u32>; 2],
    ) -> [Option<u32>; 2] {
        debug_assert_ne!(owner, 0, "owner 0 means no one");
        let i = id as usize;
        if self.found[i].0 != owner {
            let ids = look_up(&self.strs[i]).map(|x| match x {
                Some(x) => {
                    assert_ne!(x, ABSENT, "an index id collides with the memo's marker");
                    x
                }
                None => ABSENT,
            });
            self.found[i] = (owner, ids);
        }
        self.found[i].1.map(|x| (x != ABSENT).then_some(x))
    }
}

/// A surface as [`analyze_memo`] gives it, as written: a Chinese character bigram's surface id
/// is its term's, whose text is the bigram behind [`CJK_CHAR_PREFIX`] (no other term begins with
/// it), so a request's many bigrams are interned once, not twice.
pub fn shown(surface: &str) -> &str {
    surface.strip_prefix(CJK_CHAR_PREFIX).unwrap_or(surface)
}

/// [`analyze_with`], reusing and filling `memo`: calls `emit(term, surface)` with ids for
/// [`Memo::str`], equal ids for equal strings; a surface reads as written through [`shown`].
pub fn analyze_memo(text: &str, memo: &mut Memo, mut emit: impl FnMut(u32, u32)) {
    runs(text, |kind, run| {
        let (from, to) = match memo.runs.get(run) {
            Some(&range) => range,
            None => {
                let from = memo.seq.len() as u32;
                analyze_run(kind, run, &mut |term, surface| {
                    let t = memo.intern(&term);
                    // Most terms are their own surface (words not changed by stemming, Chinese
                    // words), and a character bigram's is its term without the prefix (see
                    // [`shown`]): one lookup serves both.
                    let pair = (
                        t,
                        if term == surface || term.starts_with(CJK_CHAR_PREFIX) {
                            t
                        } else {
                            memo.intern(surface)
                        },
                    );
                    memo.seq.push(pair);
                });
                let range = (from, memo.seq.len() as u32);
                memo.runs.insert(run.into(), range);
                range
            }
        };
        for &(term, surface) in &memo.seq[from as usize..to as usize] {
            emit(term, surface);
        }
    });
}

/// The distinct terms of `text` as [`analyze_memo`] gives them, in first-seen order, each with
/// its first surface and how often it occurs: `(term id, surface id, count)` into `out`.
pub fn analyze_counted(text: &str, memo: &mut Memo, out: &mut Vec<(u32, u32, f32)>) {
    count_terms(memo, out, |memo, emit| analyze_memo(text, memo, emit));
}

/// Counts the `(term, surface)` ids that `fill` emits as [`analyze_counted`] counts a text's:
/// distinct terms in first-seen order, each with its first surface and how often it occurs, into
/// `out`. `fill` may analyse with the memo or replay ids it gave before (a clause's words, taken
/// from the whole request's analysis).
pub fn count_terms(
    memo: &mut Memo,
    out: &mut Vec<(u32, u32, f32)>,
    fill: impl FnOnce(&mut Memo, &mut dyn FnMut(u32, u32)),
) {
    out.clear();
    memo.counting = memo.counting.wrapping_add(1);
    if memo.counting == 0 {
        memo.met.fill((0, 0));
        memo.counting = 1;
    }
    let now = memo.counting;
    // Taken out while the memo analyses; terms it interns meanwhile are added here.
    let mut met = std::mem::take(&mut memo.met);
    fill(memo, &mut |term, surface| {
        if met.len() <= term as usize {
            met.resize(term as usize + 1, (0, 0));
        }
        let m = &mut met[term as usize];
        if m.0 == now {
            out[m.1 as usize].2 += 1.0;
        } else {
            *m = (now, out.len() as u32);
            out.push((term, surface, 1.0));
        }
    });
    memo.met = met;
}

/// Appends the terms of `text` to `out`.
pub fn analyze_into(text: &str, out: &mut Vec<String>) {
    analyze_with(text, |term, _| out.push(term));
}

/// The terms of `text`.
pub fn analyze(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    analyze_into(text, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runs as they were first written: every character pushed into one of two buffers.
    fn runs_by_pushing(text: &str) -> Vec<(bool, String)> {
        let (mut out, mut latin, mut cjk) = (Vec::new(), String::new(), String::new());
        let flush = |buf: &mut String, chinese: bool, out: &mut Vec<(bool, String)>| {
            if !buf.is_empty() {
                out.push((chinese, std::mem::take(buf)));
            }
        };
        for c in text.chars() {
            if is_cjk(c) {
                flush(&mut latin, false, &mut out);
                cjk.push(c);
            } else {
                flush(&mut cjk, true, &mut out);
                if c.is_alphanumeric() {
                    latin.push(c);
                } else if matches!(c, '_' | '-' | '.' | '/') {
                    latin.push(' ');
                } else {
                    flush(&mut latin, false, &mut out);
                }
            }
        }
        flush(&mut latin, false, &mut out);
        flush(&mut cjk, true, &mut out);
        out
    }

    /// Runs taken as slices (and the ASCII path on bytes) are the runs of pushing every
    /// character, on every string of up to four characters from a pool of each kind the runs
    /// tell apart, and on random longer ones.
    #[test]
    fn runs_are_those_of_pushing_each_character() {
        let pool = [
            'a', 'Z', '7', '_', '-', '.', '/', ' ', ',', '?', '+', '天', '气', '。', 'é', 'Ａ',
            '١', '\n', '’',
        ];
        let collect = |text: &str| {
            let mut out = Vec::new();
            runs(text, |kind, run| {
                out.push((matches!(kind, Run::Cjk), run.to_owned()));
            });
            out
        };
        let mut texts: Vec<String> = vec![String::new()];
        let mut level = texts.clone();
        for _ in 0..4 {
            level = level
                .iter()
                .flat_map(|t| pool.iter().map(move |&c| format!("{t}{c}")))
                .collect();
            texts.extend(level.iter().cloned());
        }
        let mut next = crate::testing::xorshift(0x5eed_0f2a);
        for _ in 0..2_000 {
            let len = (next() % 40) as usize;
            texts.push(
                (0..len)
                    .map(|_| pool[(next() % pool.len() as u64) as usize])
                    .collect(),
            );
        }
        let ascii = texts.iter().filter(|t| t.is_ascii()).count();
        assert!(
            ascii > 1_000 && texts.len() - ascii > 1_000,
            "both paths are taken"
        );
        for text in &texts {
            assert_eq!(collect(text), runs_by_pushing(text), "{text:?}");
        }
    }

    #[test]
    fn english_is_split_lowered_stemmed_and_stopped() {
        assert_eq!(
            analyze("Reads the files in a Directory"),
            ["read", "file", "directori"]
        );
        assert_eq!(
            analyze("getHTTPResponse_v2"),
            ["get", "http", "respons", "v", "2"]
        );
        assert_eq!(analyze("read_text_file"), ["read", "text", "file"]);
        assert_eq!(
            analyze("git-log/branch.list"),
            ["git", "log", "branch", "list"]
        );
    }

    #[test]
    fn chinese_is_segmented_and_also_kept_as_bigrams() {
        let t = analyze("读取文件");
        assert!(
            t.contains(&"读取".to_owned()) && t.contains(&"文件".to_owned()),
            "{t:?}"
        );
        assert!(
            t.contains(&"~读取".to_owned())
                && t.contains(&"~取文".to_owned())
                && t.contains(&"~文件".to_owned()),
            "{t:?}"
        );
        assert!(
            !analyze("我的")
                .iter()
                .any(|w| w == "我" || w == "的" || w == "~的")
        );
    }

    #[test]
    fn mixed_text_works() {
        let t = analyze("用git提交commit");
        assert!(
            t.contains(&"git".to_owned())
                && t.contains(&"commit".to_owned())
                && t.contains(&"提交".to_owned()),
            "{t:?}"
        );
    }

    #[test]
    fn analysis_of_mixed_text_is_pinned_and_independent_of_what_came_before() {
        let s = "Create a new branch 创建新的分支 from HEAD";
        let expected = [
            "creat", "new", "branch", "创建", "新", "分支", "~创建", "~建新", "~新的", "~的分",
            "~分支", "head",
        ];
        assert_eq!(analyze(s), expected);
        // Analysing other text first (jieba's caches, the stemmer) changes nothing.
        let _ = analyze("读取文件并提交代码 commit the changes to the repository");
        let from_threads: Vec<Vec<String>> = (0..4)
            .map(|_| std::thread::spawn(move || analyze(s)))
            .map(|h| h.join().expect("thread"))
            .collect();
        for t in from_threads {
            assert_eq!(t, expected);
        }
    }

    /// The `(term, surface)` strings [`analyze_memo`] gives for `text`.
    fn memoised(text: &str, memo: &mut Memo) -> Vec<(String, String)> {
        let mut ids = Vec::new();
        analyze_memo(text, memo, |t, s| ids.push((t, s)));
        ids.iter()
            .map(|&(t, s)| (memo.str(t).to_owned(), shown(memo.str(s)).to_owned()))
            .collect()
    }

    #[test]
    fn a_memo_gives_the_same_terms_and_surfaces() {
        let texts = [
            "Find flights to Tokyo. Also convert 300 USD to yen",
            "convert 300 USD to yen",
            "查询天气。然后预订酒店 getHTTPResponse_v2",
            "预订酒店",
            "Find flights to Tokyo",
        ];
        let mut memo = Memo::default();
        for _ in 0..2 {
            for text in texts {
                let mut plain = Vec::new();
                analyze_with(text, |t, s| plain.push((t, s.to_owned())));
                assert_eq!(memoised(text, &mut memo), plain, "{text}");
            }
        }
        assert!(memo.runs.contains_key("预订酒店"), "{memo:?}");
        // Equal strings have equal ids: "file" from two runs is one id.
        let (mut a, mut b) = (Vec::new(), Vec::new());
        analyze_memo("files", &mut memo, |t, _| a.push(t));
        analyze_memo("file", &mut memo, |t, _| b.push(t));
        assert_eq!(a, b);
    }

    /// [`analyze_counted`] gives each distinct term once, in first-seen order, with its first
    /// surface and its count, as counting [`analyze_with`]'s terms does; whatever the memo
    /// holds from before.
    #[test]
    fn counted_terms_are_the_distinct_terms_in_order() {
        let texts = [
            "files and file, Files: FILE_list",
            "查询天气。查询天气 weather 天气",
            "",
            "one two one two one",
        ];
        let mut memo = Memo::default();
        let mut out = Vec::new();
        for round in 0..3 {
            for text in texts {
                let mut expected: Vec<(String, String, f32)> = Vec::new();
                analyze_with(text, |t, s| match expected.iter_mut().find(|e| e.0 == t) {
                    Some(e) => e.2 += 1.0,
                    None => expected.push((t, s.to_owned(), 1.0)),
                });
                analyze_counted(text, &mut memo, &mut out);
                let got: Vec<(String, String, f32)> = out
                    .iter()
                    .map(|&(t, s, n)| (memo.str(t).to_owned(), shown(memo.str(s)).to_owned(), n))
                    .collect();
                assert_eq!(got, expected, "round {round}: {text}");
            }
            if round == 1 {
                memo.clear();
            }
        }
        assert_eq!(
            out.iter().map(|x| x.2).collect::<Vec<_>>(),
            [3.0, 2.0],
            "one two one two one"
        );
    }

    /// A lookup is asked once per string and owner; another owner, or a cleared memo, asks
    /// again.
    #[test]
    fn lookups_are_remembered_per_owner() {
        let mut memo = Memo::default();
        let mut ids = Vec::new();
        analyze_memo("files listed", &mut memo, |t, _| ids.push(t));
        let mut asked = Vec::new();
        let mut look = |memo: &mut Memo, owner: u64, id: u32| {
            memo.found(owner, id, |s| {
                asked.push((owner, s.to_owned()));
                [Some(s.len() as u32 + owner as u32), None]
            })
        };
        for owner in [1, 1, 2, 1] {
            for &id in &ids {
                let expected = memo.str(id).len() as u32 + owner as u32;
                assert_eq!(look(&mut memo, owner, id), [Some(expected), None]);
            }
        }
        memo.clear();
        let mut again = Vec::new();
        analyze_memo("files", &mut memo, |t, _| again.push(t));
        assert_eq!(look(&mut memo, 1, again[0]), [Some(5), None]);
        let asked: Vec<(u64, &str)> = asked.iter().map(|(o, s)| (*o, s.as_str())).collect();
        assert_eq!(
            asked,
            [
                (1, "file"),
                (1, "list"),
                (2, "file"),
                (2, "list"),
                (1, "file"),
                (1, "list"),
                (1, "file")
            ]
        );
    }

    #[test]
    fn a_memo_kept_across_texts_is_bounded_and_stays_exact() {
        let mut memo = Memo::default();
        let mut most = 0;
        for i in 0..3 * MEMO_TERMS {
            memo.bound();
            let text = format!("word{i} files 查询{i}");
            let mut plain = Vec::new();
            analyze_with(&text, |t, s| plain.push((t, s.to_owned())));
            assert_eq!(memoised(&text, &mut memo), plain, "{text}");
            most = most.max(memo.seq.len());
        }
        let held: u32 = memo.runs.values().map(|&(from, to)| to - from).sum();
        assert_eq!(held as usize, memo.seq.len());
        assert!(most <= MEMO_TERMS + 16, "the memo grew to {most} terms");
        assert!(most > MEMO_TERMS / 2, "the memo was cleared early: {most}");
    }
}

//! BM25F over the fields of a tool.
//!
//! A tool's name, description, parameters, server and tags say different things with different
//! reliability: a word in the name is strong evidence, the same word in a parameter description is
//! weak. BM25F keeps per-field term frequencies, normalises each by its field's length, weights and
//! sums them, and saturates once per term, so a term repeated across fields is not counted as
//! several independent matches (as it would be by summing per-field BM25 scores).
//!
//! The index is a plain inverted file: a term dictionary and postings sorted by document, each
//! holding its saturated frequency. It is built once per catalog; a query touches only the
//! postings of its terms. Beside it, each document's terms and the fields they are in, which only
//! reasons read: they walk a few documents' terms against every term of a request.

use rustc_hash::FxHashMap;

use super::analyze::CJK_CHAR_PREFIX;

/// The indexed fields of a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    /// Tool name split into words (and the original name).
    Name = 0,
    /// Tool description and title.
    Description = 1,
    /// Parameter names, descriptions and enum values, at every depth.
    Params = 2,
    /// Server name and description.
    Server = 3,
    /// Tags.
    Tags = 4,
}

/// Number of fields.
pub const FIELDS: usize = 5;

impl Field {
    /// All fields in index order.
    pub const ALL: [Field; FIELDS] = [
        Field::Name,
        Field::Description,
        Field::Params,
        Field::Server,
        Field::Tags,
    ];

    /// The field's name in reasons.
    pub fn label(self) -> &'static str {
        match self {
            Field::Name => "name",
            Field::Description => "description",
            Field::Params => "parameters",
            Field::Server => "server",
            Field::Tags => "tags",
        }
    }
}

/// Ranking parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f32,
    /// Length normalisation per field.
    pub b: [f32; FIELDS],
    /// Weight per field.
    pub weight: [f32; FIELDS],
    /// Multiplier for Chinese character-bigram terms (a weaker signal than words).
    pub cjk_char_weight: f32,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Self {
            k1: 1.2,
            b: [0.3, 0.75, 0.75, 0.5, 0.3],
            weight: [5.0, 1.5, 0.6, 0.4, 1.5],
            cjk_char_weight: 0.3,
        }
    }
}

/// One term's occurrence in one document, as a query reads it.
#[derive(Debug, Clone, Copy)]
struct Posting {
    doc: u32,
    /// The saturated field-weighted, length-normalised frequency `w / (k1 + w)` with
    /// `w = Σ factor[f] · tf[f]`: it depends on the document alone, so a query's scoring is one
    /// multiply-add per posting, with no division.
    saturated: f32,
}

/// One document's terms, per field, as produced by the analyzer.
pub type DocFields = [Vec<String>; FIELDS];

/// The inverted index.
#[derive(Debug, Clone, Default)]
pub struct Bm25Index {
    dict: FxHashMap<String, u32>,
    /// Every term's postings, sorted by document, term after term: term `t`'s are
    /// `starts[t]..starts[t + 1]`. Scoring reads these alone, 8 bytes a posting.
    postings: Vec<Posting>,
    starts: Vec<u32>,
    /// Every document's terms, sorted by id, document after document: document `d`'s are
    /// `doc_starts[d]..doc_starts[d + 1]`, and `doc_fields` holds at the same place the fields
    /// each is in (bit `f` for field `f`). Only reasons read them, for a few documents and many
    /// terms: searching one document's few terms stays in a cache line or two, where searching
    /// a common term's postings for the document strays over kilobytes.
    doc_terms: Vec<u32>,
    doc_fields: Vec<u8>,
    doc_starts: Vec<u32>,
    idf: Vec<f32>,
    /// The first weak (Chinese character bigram) term's id: strong terms take the ids below it
    /// and weak ones the rest, each kind in first-seen order, so a document's terms, sorted by
    /// id, list its strong ones first.
    first_weak: u32,
    /// Number of documents.
    docs: usize,
    params: Bm25Params,
}

/// A document's score and the terms that produced it.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// Document id.
    pub doc: u32,
    /// BM25F score.
    pub score: f32,
}

impl Bm25Index {
    /// Builds the index from every document's fields (document ids are positions).
    pub fn build(docs: &[DocFields], params: Bm25Params) -> Self {
        let mut dict: FxHashMap<String, u32> = FxHashMap::default();
        // Each term's documents and per-field frequencies, in document order.
        let mut lists: Vec<Vec<(u32, [u16; FIELDS])>> = Vec::new();
        let mut lengths = Vec::with_capacity(docs.len());
        let mut totals = [0f64; FIELDS];
        for (d, fields) in docs.iter().enumerate() {
            let mut len = [0u32; FIELDS];
            for (f, terms) in fields.iter().enumerate() {
                len[f] = terms.len() as u32;
                totals[f] += terms.len() as f64;
                for t in terms {
                    // Look up before inserting: most occurrences are of known terms, and an
                    // `entry` would copy the term every time.
                    let id = match dict.get(t.as_str()) {
                        Some(&id) => id,
                        None => {
                            let id = lists.len() as u32;
                            dict.insert(t.clone(), id);
                            lists.push(Vec::new());
                            id
                        }
                    };
                    let list = &mut lists[id as usize];
                    match list.last_mut() {
                        Some((doc, tf)) if *doc == d as u32 => tf[f] = tf[f].saturating_add(1),
                        _ => {
                            let mut tf = [0u16; FIELDS];
                            tf[f] = 1;
                            list.push((d as u32, tf));
                        }
                    }
                }
            }
            lengths.push(len);
        }
        // Strong terms first (see `first_weak`); each kind keeps its first-seen order.
        let mut is_weak = vec![false; lists.len()];
        for (term, &id) in &dict {
            is_weak[id as usize] = term.starts_with(CJK_CHAR_PREFIX);
        }
        let first_weak = is_weak.iter().filter(|&&w| !w).count() as u32;
        let mut renumbered = vec![0u32; lists.len()];
        let (mut strong, mut weak) = (0u32, first_weak);
        for (id, &w) in is_weak.iter().enumerate() {
            let next = if w { &mut weak } else { &mut strong };
            renumbered[id] = *next;
            *next += 1;
        }
        let mut by_new_id = vec![Vec::new(); lists.len()];
        for (id, list) in lists.into_iter().enumerate() {
            by_new_id[renumbered[id] as usize] = list;
        }
        let lists = by_new_id;
        for id in dict.values_mut() {
            *id = renumbered[*id as usize];
        }
        let n = docs.len().max(1) as f64;
        let mut avg = [0f32; FIELDS];
        for f in 0..FIELDS {
            avg[f] = ((totals[f] / n) as f32).max(1.0);
        }
        let factors: Vec<[f32; FIELDS]> = lengths
            .iter()
            .map(|len: &[u32; FIELDS]| {
                std::array::from_fn(|f| {
                    params.weight[f] / (1.0 - params.b[f] + params.b[f] * len[f] as f32 / avg[f])
                })
            })
            .collect();
        let total: usize = lists.iter().map(Vec::len).sum();
        let mut postings = Vec::with_capacity(total);
        let mut starts = Vec::with_capacity(lists.len() + 1);
        starts.push(0u32);
        // Each document's place in the forward lists: its count of terms, summed.
        let mut doc_starts = vec![0u32; docs.len() + 1];
        for list in &lists {
            for &(doc, _) in list {
                doc_starts[doc as usize + 1] += 1;
            }
        }
        for d in 0..docs.len() {
            doc_starts[d + 1] += doc_starts[d];
        }
        let mut next = doc_starts.clone();
        let (mut doc_terms, mut doc_fields) = (vec![0u32; total], vec![0u8; total]);
        for (term, list) in lists.iter().enumerate() {
            for &(doc, tf) in list {
                let mut weighted = 0f32;
                for (&count, &k) in tf.iter().zip(&factors[doc as usize]) {
                    weighted += k * f32::from(count);
                }
                let saturated = weighted / (params.k1 + weighted);
                postings.push(Posting { doc, saturated });
                // Terms come in id order, so each document's list is sorted as it fills.
                let at = &mut next[doc as usize];
                doc_terms[*at as usize] = term as u32;
                doc_fields[*at as usize] = tf
                    .iter()
                    .enumerate()
                    .fold(0u8, |m, (f, &n)| m | u8::from(n > 0) << f);
                *at += 1;
            }
            starts.push(postings.len() as u32);
        }
        let idf = lists
            .iter()
            .map(|list| {
                let df = list.len() as f64;
                ((n - df + 0.5) / (df + 0.5)).ln_1p() as f32
            })
            .collect();
        Self {
            dict,
            postings,
            starts,
            doc_terms,
            doc_fields,
            doc_starts,
            idf,
            first_weak,
            docs: docs.len(),
            params,
        }
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.docs
    }

    /// Whether the index has no documents.
    pub fn is_empty(&self) -> bool {
        self.docs == 0
    }

    /// Id of `term`, if any document has it.
    pub fn term_id(&self, term: &str) -> Option<u32> {
        self.dict.get(term).copied()
    }

    /// Whether `term` is a weak (Chinese character bigram) term.
    #[inline]
    pub fn is_weak(&self, term: u32) -> bool {
        term >= self.first_weak
    }

    /// The id of the first weak term: a document's terms ([`Self::doc_terms`]) below it are
    /// strong, the rest weak.
    pub fn first_weak(&self) -> u32 {
        self.first_weak
    }

    /// The fields `term` is in in `doc`, bit `f` for field `f` (zero when absent).
    #[inline]
    pub fn fields(&self, term: u32, doc: u32) -> u8 {
        let d = doc as usize;
        let (from, to) = (self.doc_starts[d] as usize, self.doc_starts[d + 1] as usize);
        match self.doc_terms[from..to].binary_search(&term) {
            Ok(i) => self.doc_fields[from + i],
            Err(_) => 0,
        }
    }

    /// The documents that have `term`, in order.
    pub fn docs_with(&self, term: u32) -> impl Iterator<Item = u32> + '_ {
        self.postings[self.range(term)].iter().map(|p| p.doc)
    }

    /// Number of distinct terms; term ids are below it.
    pub fn terms(&self) -> usize {
        self.idf.len()
    }

    /// `doc`'s terms, sorted by id (so its strong terms first, see [`Self::first_weak`]), and
    /// beside each the fields it is in (as [`Self::fields`]).
    pub fn doc_terms(&self, doc: u32) -> (&[u32], &[u8]) {
        let d = doc as usize;
        let range = self.doc_starts[d] as usize..self.doc_starts[d + 1] as usize;
        (&self.doc_terms[range.clone()], &self.doc_fields[range])
    }

    /// The places of `term`'s postings.
    #[inline]
    fn range(&self, term: u32) -> std::ops::Range<usize> {
        let t = term as usize;
        self.starts[t] as usize..self.starts[t + 1] as usize
    }

    /// Adds the BM25F contribution of each `(term, query weight)` to `scores` (indexed by doc,
    /// sized to at least [`Self::len`]), and counts strong and weak matched terms per doc in
    /// `hits` (`[strong, weak]`, side by side so that a posting touches one place). Each document
    /// touched for the first time (both counts zero before) is pushed to `touched`, so callers
    /// visit only the matches, not the catalog.
    pub fn accumulate(
        &self,
        terms: &[(u32, f32)],
        scores: &mut [f32],
        hits: &mut [[u16; 2]],
        touched: &mut Vec<u32>,
    ) {
        let p = &self.params;
        let n = self.docs;
        let (scores, hits) = (&mut scores[..n], &mut hits[..n]);
        // Whether a posting's document is new is data no predictor learns, so every document is
        // written at the end of `touched` and the end moves on only for a new one: room for each
        // document the postings can touch, plus the one slot written past the last.
        let most: usize = terms.iter().map(|&(term, _)| self.range(term).len()).sum();
        let mut end = touched.len();
        touched.resize(end + most.min(n) + 1, 0);
        for &(term, qweight) in terms {
            let is_weak = self.is_weak(term);
            let idf =
                self.idf[term as usize] * qweight * if is_weak { p.cjk_char_weight } else { 1.0 };
            let slot = usize::from(is_weak);
            for post in &self.postings[self.range(term)] {
                let d = post.doc as usize;
                scores[d] += idf * post.saturated;
                let h = &mut hits[d];
                touched[end] = post.doc;
                end += usize::from(*h == [0, 0]);
                h[slot] += 1;
            }
        }
        touched.truncate(end);
    }

    /// Whether any of `terms` is weak: only then does a match need [`Self::accumulate`]'s counts.
    pub fn any_weak(&self, terms: &[(u32, f32)]) -> bool {
        terms.iter().any(|&(term, _)| self.is_weak(term))
    }

    /// [`Self::accumulate`] for terms none of which is weak ([`Self::any_weak`]), with no counts:
    /// a document then has a strong match exactly when it has a positive score, so a score's
    /// first rise from zero marks the document as new, and only documents with a positive score
    /// are pushed to `touched` (at their first positive share, where [`Self::accumulate`] pushes
    /// a document at its first match). `scores` must be zero for every document not yet touched.
    pub fn accumulate_strong(
        &self,
        terms: &[(u32, f32)],
        scores: &mut [f32],
        touched: &mut Vec<u32>,
    ) {
        debug_assert!(!self.any_weak(terms));
        let n = self.docs;
        let scores = &mut scores[..n];
        let most: usize = terms.iter().map(|&(term, _)| self.range(term).len()).sum();
        let mut end = touched.len();
        touched.resize(end + most.min(n) + 1, 0);
        for &(term, qweight) in terms {
            let idf = self.idf[term as usize] * qweight;
            for post in &self.postings[self.range(term)] {
                let d = post.doc as usize;
                let (before, after) = (scores[d], scores[d] + idf * post.saturated);
                scores[d] = after;
                touched[end] = post.doc;
                end += usize::from((before == 0.0) & (after > 0.0));
            }
        }
        touched.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(name: &[&str], description: &[&str]) -> DocFields {
        let v = |s: &[&str]| s.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
        [v(name), v(description), vec![], vec![], vec![]]
    }

    fn rank(index: &Bm25Index, terms: &[&str]) -> Vec<(u32, f32)> {
        let ids: Vec<(u32, f32)> = terms
            .iter()
            .filter_map(|t| index.term_id(t))
            .map(|id| (id, 1.0))
            .collect();
        let n = index.len();
        let (mut s, mut hits) = (vec![0.0; n], vec![[0, 0]; n]);
        let mut touched = Vec::new();
        index.accumulate(&ids, &mut s, &mut hits, &mut touched);
        touched.sort_unstable();
        let matched: Vec<u32> = (0..n as u32).filter(|&d| s[d as usize] > 0.0).collect();
        assert_eq!(touched, matched);
        let mut out: Vec<(u32, f32)> = s
            .into_iter()
            .enumerate()
            .filter(|(_, x)| *x > 0.0)
            .map(|(d, x)| (d as u32, x))
            .collect();
        out.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
        out
    }

    #[test]
    fn name_matches_outrank_description_matches() {
        let idx = Bm25Index::build(
            &[
                doc(&["list", "file"], &["show", "entri"]),
                doc(&["show", "tree"], &["list", "file", "recurs"]),
            ],
            Bm25Params::default(),
        );
        let r = rank(&idx, &["list", "file"]);
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn rare_terms_weigh_more() {
        let idx = Bm25Index::build(
            &[
                doc(&["a"], &["common", "rare"]),
                doc(&["b"], &["common"]),
                doc(&["c"], &["common"]),
            ],
            Bm25Params::default(),
        );
        let r = rank(&idx, &["common", "rare"]);
        assert_eq!(r[0].0, 0);
        assert!(r[0].1 > 2.0 * r[1].1, "{r:?}");
    }

    #[test]
    fn each_term_and_document_has_its_own_fields() {
        // Terms whose postings sit side by side hold the same documents, and documents whose
        // terms sit side by side hold the same terms, so a lookup that strays into a neighbour's
        // finds a match and reports the wrong fields.
        let docs = [
            doc(&["a", "b"], &["b", "c", "c"]),
            doc(&["c"], &["a", "a", "b"]),
            doc(&["b", "c"], &[]),
            doc(&[], &["d"]),
        ];
        let idx = Bm25Index::build(&docs, Bm25Params::default());
        for term in ["a", "b", "c", "d"] {
            let id = idx.term_id(term).expect("indexed");
            for (d, fields) in docs.iter().enumerate() {
                let expected = (0..FIELDS)
                    .filter(|&f| fields[f].iter().any(|t| t.as_str() == term))
                    .fold(0u8, |m, f| m | 1 << f);
                assert_eq!(
                    idx.fields(id, d as u32),
                    expected,
                    "{term:?} in document {d}"
                );
            }
        }
    }

    /// Strong terms take the ids below [`Bm25Index::first_weak`] and bigrams the rest, each in
    /// first-seen order; a document's terms list its strong ones first, with their fields, and
    /// scores are those of the terms, whatever their ids.
    #[test]
    fn strong_terms_have_the_low_ids() {
        let docs = [
            doc(&["~查询", "weather"], &["天气", "~天气", "city"]),
            doc(&["~天气"], &["weather", "天气"]),
        ];
        let idx = Bm25Index::build(&docs, Bm25Params::default());
        let id = |t: &str| idx.term_id(t).expect("indexed");
        let ids: Vec<u32> = ["weather", "天气", "city", "~查询", "~天气"]
            .iter()
            .map(|t| id(t))
            .collect();
        assert_eq!(ids, [0, 1, 2, 3, 4]);
        assert_eq!(idx.first_weak(), 3);
        assert!(!idx.is_weak(id("city")) && idx.is_weak(id("~查询")));
        let (terms, fields) = idx.doc_terms(0);
        assert_eq!(terms, [0, 1, 2, 3, 4]);
        assert_eq!(fields, [1, 2, 2, 1, 2]);
        let (terms, fields) = idx.doc_terms(1);
        assert_eq!(terms, [0, 1, 4]);
        assert_eq!(fields, [2, 2, 1]);
        // "weather" is in both documents, "~查询" in the first only: the first outranks the
        // second on both, though the bigram was seen first.
        let ranked = rank(&idx, &["~查询", "weather"]);
        assert_eq!(ranked.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn strong_terms_accumulate_as_with_counts() {
        // Parameters weigh nothing here, so a document matched only there has a zero score:
        // it must be left out, and not pushed twice when a later term scores it.
        let params = Bm25Params {
            weight: [5.0, 1.5, 0.0, 0.4, 1.5],
            ..Bm25Params::default()
        };
        let v = |s: &[&str]| s.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
        let docs: Vec<DocFields> = vec![
            [v(&["a"]), v(&["b", "c"]), v(&["c"]), vec![], vec![]],
            [vec![], vec![], v(&["a", "b"]), vec![], vec![]],
            [vec![], v(&["b"]), v(&["a"]), vec![], vec![]],
            [v(&["c"]), vec![], vec![], v(&["a"]), vec![]],
            [vec![], vec![], v(&["d"]), vec![], vec![]],
        ];
        let idx = Bm25Index::build(&docs, params);
        let id = |t: &str| idx.term_id(t).expect("indexed");
        for terms in [
            vec![(id("a"), 1.0), (id("b"), 2.0)],
            vec![(id("c"), 1.0), (id("a"), 1.0), (id("d"), 3.0)],
            vec![(id("d"), 1.0)],
        ] {
            assert!(!idx.any_weak(&terms));
            let n = idx.len();
            let (mut counted, mut hits, mut all) = (vec![0.0; n], vec![[0, 0]; n], Vec::new());
            idx.accumulate(&terms, &mut counted, &mut hits, &mut all);
            let mut scored: Vec<u32> = all
                .into_iter()
                .filter(|&d| hits[d as usize][0] > 0 && counted[d as usize] > 0.0)
                .collect();
            let (mut scores, mut touched) = (vec![0.0; n], Vec::new());
            idx.accumulate_strong(&terms, &mut scores, &mut touched);
            let bits = |s: &[f32]| s.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&scores), bits(&counted), "{terms:?}");
            // The same documents, each once (in the order of their first positive share, where
            // the counts push a document at its first match).
            let pushed = touched.len();
            touched.sort_unstable();
            touched.dedup();
            assert_eq!(touched.len(), pushed, "{touched:?}");
            scored.sort_unstable();
            assert_eq!(touched, scored, "{terms:?}");
        }
    }

    #[test]
    fn unknown_terms_score_nothing() {
        let idx = Bm25Index::build(&[doc(&["a"], &["b"])], Bm25Params::default());
        assert!(rank(&idx, &["zzz"]).is_empty());
        assert_eq!(idx.fields(idx.term_id("b").expect("b"), 0), 0b10);
    }
}

//! toolshelf-embed: a semantic [`Retriever`] for `tool_search`, fully offline.
//!
//! Lexical search misses paraphrases, task-style requests and cross-language matches (a Chinese
//! query for an English description). This crate ranks by meaning with a static embedding model
//! (model2vec format: one vector per token, mean-pooled), distilled from a multilingual teacher by
//! `scripts/distill-embeddings` and embedded in the binary, so nothing is downloaded and a query
//! costs microseconds.
//!
//! Shape: [`Embedder`] wraps the model (loaded once, lazily: about half a second); [`Semantic`]
//! holds one int8 row per tool, built at index time, and scores a query with exact dot products
//! over contiguous rows. Plain text (ASCII, and Chinese with full-width punctuation) is
//! tokenised and pooled here (`unigram`, `pool`), giving the same vector as model2vec bit for
//! bit at a fraction of the cost; other text goes through model2vec and the `tokenizers` crate.
//! Vectors are quantised to int8 with fixed rounding, so scores are equal across runs and
//! machines. The core fuses it with BM25F through the [`Retriever`] seam.
//!
//! In a catalog of server groups a tool's meaning is partly its server's, as on the lexical side:
//! `trending` on a video-search server and on a music server embed alike, while their servers'
//! other tools do not. So each group also has a vector, the normalised sum of its tools' rows, and
//! a tool's similarity moves toward its group's ([`Semantic::group_blend`]) by as much as that
//! vector stands for the group's tools: half way for a server of near-synonymous tools, little
//! for a large server of unrelated ones, whose vector is only a broad topic.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::OnceLock;

mod pool;
mod unigram;

use model2vec_rs::model::StaticModel;
use toolshelf_core::Catalog;
use toolshelf_core::search::{ParsedQuery, Retriever, SearchIndex, doc_text, server_group_of};

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model files could not be read or parsed.
    #[error("cannot load the embedding model from {source_name}: {message}")]
    Load {
        /// Where the model came from.
        source_name: String,
        /// What went wrong.
        message: String,
    },
    /// The binary was built without the bundled model.
    #[error("this build has no bundled embedding model (cargo feature `bundled-model` is off)")]
    NotBundled,
}

/// The embedding model.
pub struct Embedder {
    model: StaticModel,
    /// The tokeniser and rows for plain text, when the model's pipeline is the one they
    /// reproduce and they agree with model2vec on the load-time probes.
    ascii: Option<Ascii>,
}

#[derive(Debug)]
struct Ascii {
    tokens: unigram::AsciiUnigram,
    rows: pool::Rows,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("dim", &self.model.dim())
            .field("ascii_path", &self.ascii.is_some())
            .finish()
    }
}

/// Tokens per text model2vec keeps (its `encode_single` default).
const MAX_TOKENS: usize = 512;

#[cfg(feature = "bundled-model")]
mod bundled {
    pub const TOKENIZER: &[u8] = include_bytes!("../../../models/zh-en-static/tokenizer.json");
    pub const MODEL: &[u8] = include_bytes!("../../../models/zh-en-static/model.safetensors");
    pub const CONFIG: &[u8] = include_bytes!("../../../models/zh-en-static/config.json");
}

/// `models/zh-en-static/SHA256SUMS`: the recorded checksum of every artifact file.
pub const BUNDLED_SHA256SUMS: &str = include_str!("../../../models/zh-en-static/SHA256SUMS");

/// The recorded sha256 of an artifact file, from [`BUNDLED_SHA256SUMS`].
pub fn recorded_sha256(file: &str) -> Option<&'static str> {
    BUNDLED_SHA256SUMS.lines().find_map(|l| {
        let (hash, name) = l.split_once(char::is_whitespace)?;
        (name.trim().trim_start_matches('*') == file).then_some(hash)
    })
}

/// The bundled model's files (tokenizer, weights, config), when built with `bundled-model`.
pub fn bundled_files() -> Option<[(&'static str, &'static [u8]); 3]> {
    #[cfg(feature = "bundled-model")]
    {
        Some([
            ("tokenizer.json", bundled::TOKENIZER),
            ("model.safetensors", bundled::MODEL),
            ("config.json", bundled::CONFIG),
        ])
    }
    #[cfg(not(feature = "bundled-model"))]
    {
        None
    }
}

impl Embedder {
    /// Loads a model from its three files' bytes.
    pub fn from_bytes(
        tokenizer: &[u8],
        model: &[u8],
        config: &[u8],
        source_name: &str,
    ) -> Result<Self, Error> {
        Self::load(tokenizer, Cow::Owned(model.to_vec()), config, source_name)
    }

    fn load(
        tokenizer: &[u8],
        model: Cow<'static, [u8]>,
        config: &[u8],
        source_name: &str,
    ) -> Result<Self, Error> {
        let static_model =
            StaticModel::from_bytes(tokenizer, &model, config, Some(true)).map_err(|e| {
                Error::Load {
                    source_name: source_name.to_owned(),
                    message: format!("{e:#}"),
                }
            })?;
        let mut embedder = Self {
            model: static_model,
            ascii: None,
        };
        let ascii = unigram::AsciiUnigram::from_json(tokenizer, MAX_TOKENS)
            .zip(pool::Rows::from_safetensors(model))
            // A row for every piece, or ids would index past the rows.
            .filter(|(tokens, rows)| rows.len() >= tokens.vocab_size());
        if let Some((tokens, rows)) = ascii {
            embedder.ascii = Some(Ascii { tokens, rows });
            if embedder.ascii_agrees() {
                embedder.check_wide();
            } else {
                embedder.ascii = None;
            }
        }
        Ok(embedder)
    }

    /// Checks the crate's own path against model2vec, bit for bit, on text beyond ASCII: every
    /// CJK unified ideograph (in runs of consecutive code points, alone, between ASCII words and
    /// beside full-width punctuation) and Chinese text long enough to be truncated, else only
    /// ASCII stays on the path; then each full-width form, the ideographic and no-break spaces,
    /// `…`, `、`, `。` and each typographic mark the path keeps, in several positions, and a
    /// character whose probes differ is left to model2vec. This checks the part of the model's
    /// character map the path relies on and cannot read: that it keeps the ideographs and the
    /// marks and maps the full-width forms to ASCII as NFKC does (the bundled model's map turns
    /// `～` into something else).
    fn check_wide(&mut self) {
        let agrees = |e: &Self, p: &str| {
            e.ascii_f32(p).map(|v| bits(&v)) == Some(bits(&e.model.encode_single(p)))
        };
        let ideographs: Vec<char> = ('\u{4e00}'..='\u{9fff}').collect();
        let mut probes: Vec<String> = ideographs
            .chunks(64)
            .enumerate()
            .map(|(i, run)| {
                let run: String = run.iter().collect();
                match i % 3 {
                    0 => run,
                    1 => format!("Find {run} now"),
                    _ => format!("{run}，查询。{run}"),
                }
            })
            .collect();
        probes.push("查询北京的天气，然后预订一家酒店。".repeat(200));
        probes.push("中文 ".repeat(2000));
        if !probes.iter().all(|p| agrees(self, p)) {
            if let Some(a) = self.ascii.as_mut() {
                a.tokens.ascii_only();
            }
            return;
        }
        let differ: Vec<char> = unigram::checked_one_by_one()
            .filter(|c| {
                ![
                    format!("{c}"),
                    format!("a{c}b"),
                    format!("查询{c}天气"),
                    format!("Ｔｏｋｙｏ{c} x"),
                    format!("Don{c}t pay 30{c}{c} in Tokyo{c}s {c}Best{c}"),
                ]
                .iter()
                .all(|p| agrees(self, p))
            })
            .collect();
        if let Some(a) = self.ascii.as_mut() {
            a.tokens.leave_to_crate(&differ);
        }
    }

    /// Whether the ASCII path gives model2vec's vector, bit for bit, for every printable ASCII
    /// character and whitespace byte in several positions, mixed case, and texts long enough to
    /// be truncated. This checks what [`unigram`] cannot read for itself: that the model's
    /// character map leaves printable ASCII alone and turns `\t`, `\n`, `\r` into whitespace.
    fn ascii_agrees(&self) -> bool {
        let mut probes: Vec<String> = (0x20u8..0x7f)
            .chain([b'\t', b'\n', b'\r'])
            .map(char::from)
            .flat_map(|c| {
                [
                    format!("{c}"),
                    format!("a{c}b"),
                    format!("{c}Word"),
                    format!("Xy9{c}{c}z"),
                ]
            })
            .collect();
        probes.push("a\r\nb \t\tc".into());
        probes.push("Find the CHEAPEST flight to Tokyo, then convert the price to yen.".into());
        probes.push("x ".repeat(2000));
        probes.push("Convert-currency_rates ".repeat(400));
        probes.iter().all(|p| {
            self.ascii_f32(p).map(|v| bits(&v)) == Some(bits(&self.model.encode_single(p)))
        })
    }

    /// The vector of `text` by [`unigram`] and [`pool`], if it is text they take (plain ASCII,
    /// and Chinese ideographs and full-width forms as [`Self::check_wide`] found) and the path is on.
    fn ascii_f32(&self, text: &str) -> Option<Vec<f32>> {
        let ascii = self.ascii.as_ref()?;
        let mut ids = Vec::new();
        ascii
            .tokens
            .ids(text, &mut ids)
            .then(|| ascii.rows.pool(&ids, ascii.tokens.unk_id(), MAX_TOKENS))
    }

    /// Loads a model from a model2vec folder (`tokenizer.json`, `model.safetensors`, `config.json`).
    pub fn from_dir(dir: &std::path::Path) -> Result<Self, Error> {
        let read = |name: &str| {
            std::fs::read(dir.join(name)).map_err(|e| Error::Load {
                source_name: dir.display().to_string(),
                message: format!("{name}: {e}"),
            })
        };
        Self::load(
            &read("tokenizer.json")?,
            Cow::Owned(read("model.safetensors")?),
            &read("config.json")?,
            &dir.display().to_string(),
        )
    }

    /// The bundled model, loaded on first use and shared.
    pub fn bundled() -> Result<&'static Embedder, Error> {
        #[cfg(feature = "bundled-model")]
        {
            static MODEL: OnceLock<Result<Embedder, String>> = OnceLock::new();
            MODEL
                .get_or_init(|| {
                    Embedder::load(
                        bundled::TOKENIZER,
                        Cow::Borrowed(bundled::MODEL),
                        bundled::CONFIG,
                        "the bundled model",
                    )
                    .map_err(|e| e.to_string())
                })
                .as_ref()
                .map_err(|message| Error::Load {
                    source_name: "the bundled model".into(),
                    message: message.clone(),
                })
        }
        #[cfg(not(feature = "bundled-model"))]
        {
            let _: Option<&OnceLock<()>> = None;
            Err(Error::NotBundled)
        }
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.model.dim()
    }

    /// The unit vector of `text`, quantised (see [`quantize`]).
    pub fn embed(&self, text: &str) -> Vec<i8> {
        quantize(&self.embed_f32(text))
    }

    /// The unit vector of `text` in f32, before quantisation.
    pub fn embed_f32(&self, text: &str) -> Vec<f32> {
        self.ascii_f32(text)
            .unwrap_or_else(|| self.model.encode_single(text))
    }

    /// Whether plain ASCII text takes this crate's own tokeniser (see `unigram`).
    pub fn has_ascii_path(&self) -> bool {
        self.ascii.is_some()
    }

    /// Whether Chinese text (ideographs, full-width forms, ASCII) takes it too.
    pub fn has_wide_path(&self) -> bool {
        self.ascii.as_ref().is_some_and(|a| a.tokens.takes_wide())
    }
}

/// A vector's floats as their bits, to compare them exactly.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Scale of the int8 grid: a unit vector's components lie in [-1, 1]; 127 per unit would waste
/// most of the range (components of a 256-d unit vector are mostly below 0.3), so values are
/// scaled by this and clamped.
pub const QUANT_SCALE: f32 = 400.0;

/// Rounds a unit vector onto the int8 grid with a fixed rule (round half away from zero), so the
/// same text gives the same bytes everywhere.
pub fn quantize(v: &[f32]) -> Vec<i8> {
    v.iter().map(|&x| to_grid(x * QUANT_SCALE)).collect()
}

/// `x.round().clamp(-127.0, 127.0) as i8`, without the call to `roundf` that the baseline x86-64
/// target makes for each component: clamped first (which gives the same result, as ±127 are
/// integers), the value is truncated and its fraction, which subtracting the truncation leaves
/// exact, decides the half-away-from-zero step. The loop over a vector then vectorises.
#[inline]
fn to_grid(x: f32) -> i8 {
    let y = x.clamp(-127.0, 127.0);
    // NaN casts to 0, as `NaN as i8` does, and its comparisons below are false.
    let whole = y as i32;
    let fraction = y - whole as f32;
    (whole + i32::from(fraction >= 0.5) - i32::from(fraction <= -0.5)) as i8
}

/// Dot products of `q` with every row of `rows` (row-major, `q.len()` wide) into `out`, given
/// each row's sum, its [`lane_square`], and whether every row byte is above −128 (`narrow`),
/// exactly, in integers.
///
/// Where the CPU has VNNI, `q` is shifted to unsigned bytes, the shape `vpdpbusd` multiplies (64
/// products per instruction), and `Σ q·r = Σ (q + 128)·r − 128·Σ r`. Else, on rows that are
/// `narrow` (every row the quantiser makes), AVX2 multiplies `|q|` by `r` carrying `q`'s sign,
/// which needs no shift; the portable loop takes the rest. This loop is most of a query's cost in
/// a large catalog. Every path computes the same integers, so scores are equal across machines.
fn dot_all(q: &[i8], rows: &[i8], sums: &[i32], lanes: &[u32], narrow: bool, out: &mut [i32]) {
    if !simd::vnni(q, rows, out) {
        if narrow && simd::avx2(q, rows, lanes, out) {
            return;
        }
        dot_all_portable(&shifted(q), rows, out);
    }
    for (o, &sum) in out.iter_mut().zip(sums) {
        *o -= 128 * sum;
    }
}

/// The largest sum of squares over the bytes of `v` that meet in one 16-bit lane of the AVX2
/// kernel: bytes `2j` and `2j + 1` of every 32-byte block, for lane `j`. By Cauchy–Schwarz, the
/// products of a query and a row that meet in a lane sum, at every step, to at most
/// `√(lane_square(q) · lane_square(r))` in size, so when that is at most `i16::MAX` their sum
/// can be kept in 16 bits.
fn lane_square(v: &[i8]) -> u32 {
    let mut lanes = [0u32; 16];
    for (i, &x) in v.iter().enumerate() {
        lanes[(i % 32) / 2] += u32::from(x.unsigned_abs()).pow(2);
    }
    lanes.into_iter().max().unwrap_or(0)
}

/// [`lane_square`] of each `dim`-wide row.
fn lane_squares(rows: &[i8], dim: usize) -> Vec<u32> {
    rows.chunks_exact(dim.max(1)).map(lane_square).collect()
}

/// `q + 128`, as unsigned bytes.
fn shifted(q: &[i8]) -> Vec<u8> {
    q.iter().map(|&x| (i16::from(x) + 128) as u8).collect()
}

/// Every how many documents [`best_keys`] samples one to place its cut.
const SAMPLE_EVERY: usize = 8;

/// One key per allowed document whose dot is at least `min_dot`: dot descending (as
/// `i32::MAX - dot`, which is non-negative for a dot at least 0), then document; the `k` smallest
/// keys, in no particular order (every key when `k` is 0, in document order): their scores are
/// fused document by document, so sorting them would buy nothing.
///
/// The same keys a full sort would give, found in about one pass: a cut is placed where twice
/// `k` survivors are expected to reach (from every [`SAMPLE_EVERY`]th document's dot), the
/// survivors at or above it are kept, and when at least `k` are, the best `k` of all are among
/// them, since each of those has a dot at least the `k`-th largest; otherwise the cut falls back
/// to `min_dot`. A heap of 100 over a few thousand survivors cost more than the dot products
/// themselves; a histogram of the dots, which this replaced, cost twice as many instructions.
fn best_keys(dots: &[i32], allowed: &[bool], min_dot: i32, k: usize) -> Vec<u64> {
    let min_dot = min_dot.max(0);
    let n = dots.len().min(allowed.len());
    let (dots, allowed) = (&dots[..n], &allowed[..n]);
    let at_or_above = |cut: i32| -> Vec<u64> {
        let mut keys = Vec::with_capacity(4 * k.max(1));
        keys_at_or_above(dots, allowed, cut, &mut keys);
        keys
    };
    if k == 0 {
        return at_or_above(min_dot);
    }
    let mut sample: Vec<i32> = Vec::with_capacity(n / SAMPLE_EVERY + 1);
    for d in (0..n).step_by(SAMPLE_EVERY) {
        if allowed[d] & (dots[d] >= min_dot) {
            sample.push(dots[d]);
        }
    }
    let rank = (2 * k).div_ceil(SAMPLE_EVERY);
    let cut = if rank < sample.len() {
        *sample.select_nth_unstable_by(rank, |a, b| b.cmp(a)).1
    } else {
        min_dot
    };
    let mut keys = at_or_above(cut);
    if keys.len() < k && cut > min_dot {
        keys = at_or_above(min_dot);
    }
    if keys.len() > k {
        keys.select_nth_unstable(k - 1);
        keys.truncate(k);
    }
    keys
}

/// Appends the key of each allowed document whose dot is at least `cut` (see [`best_keys`]) to
/// `keys`, in document order.
///
/// A cut keeps a few documents in a hundred, scattered: a branch per document mispredicts on
/// most of them. Each block of [`BLOCK`] documents is turned into a mask first (compares that
/// vectorise), a block with no survivor costs one test, and the others visit their set bits.
#[multiversion::multiversion(targets = "simd")]
fn keys_at_or_above(dots: &[i32], allowed: &[bool], cut: i32, keys: &mut Vec<u64>) {
    let key = |d: usize, dot: i32| (u64::from((i32::MAX - dot) as u32) << 32) | d as u64;
    let n = dots.len().min(allowed.len());
    let whole = n - n % BLOCK;
    for (b, (dots, allowed)) in dots[..whole]
        .chunks_exact(BLOCK)
        .zip(allowed[..whole].chunks_exact(BLOCK))
        .enumerate()
    {
        let mut mask = 0u64;
        for (i, (&dot, &ok)) in dots.iter().zip(allowed).enumerate() {
            mask |= u64::from(ok & (dot >= cut)) << i;
        }
        while mask != 0 {
            let i = mask.trailing_zeros() as usize;
            keys.push(key(b * BLOCK + i, dots[i]));
            mask &= mask - 1;
        }
    }
    for d in whole..n {
        if allowed[d] & (dots[d] >= cut) {
            keys.push(key(d, dots[d]));
        }
    }
}

/// Documents per mask in [`keys_at_or_above`].
const BLOCK: usize = 64;

/// `Σ q·r` for each row, compiled for several instruction sets and chosen at run time.
#[multiversion::multiversion(targets = "simd")]
fn dot_all_portable(q: &[u8], rows: &[i8], out: &mut [i32]) {
    for (o, r) in out.iter_mut().zip(rows.chunks_exact(q.len())) {
        *o = q
            .iter()
            .zip(r)
            .map(|(x, y)| i32::from(*x) * i32::from(*y))
            .sum();
    }
}

/// The hand-written kernels, the only hand-written `unsafe` of the workspace: AVX-512 VNNI
/// where the CPU has it, else AVX2. Compilers do not emit `vpdpbusd` from the portable loop,
/// which left the dot products of a 10k-tool catalog at a third of a query's time; and from it
/// they emit AVX2 that widens every byte to 32 bits and multiplies with `vpmulld`, where the
/// AVX2 kernel multiplies bytes and adds pairs into 16 bits with `vpmaddubsw`, 32 products per
/// instruction.
#[allow(unsafe_code)]
mod simd {
    /// Writes `Σ (q + 128)·r` for each row of `rows` into `out` with AVX-512 VNNI and returns
    /// true, or returns false (writing nothing) where the CPU lacks it or `q`'s width is not a
    /// non-zero multiple of 64 up to 1024.
    pub(super) fn vnni(q: &[i8], rows: &[i8], out: &mut [i32]) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            if x86::takes(q.len(), 64)
                && std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni")
            {
                // SAFETY: the CPU has every feature the function enables (checked above).
                unsafe { x86::dot_all(&super::shifted(q), rows, out) };
                return true;
            }
        }
        let _ = (q, rows, out);
        false
    }

    /// Writes `Σ q·r` for each row of `rows` into `out` with AVX2 and returns true, or returns
    /// false (writing nothing) where the CPU lacks AVX2 or `q`'s width is not a non-zero
    /// multiple of 32 up to 1024. `lanes` holds each row's [`super::lane_square`] (a row
    /// without one, or with one larger than its own, is summed in 32 bits). The sums are exact
    /// when no row byte is −128.
    pub(super) fn avx2(q: &[i8], rows: &[i8], lanes: &[u32], out: &mut [i32]) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            if x86::takes(q.len(), 32) && std::arch::is_x86_feature_detected!("avx2") {
                // Rows whose lane squares stay within this keep their sums in 16 bits.
                let limit = (i16::MAX as u64).pow(2) / u64::from(super::lane_square(q)).max(1);
                let limit = u32::try_from(limit).unwrap_or(u32::MAX);
                // SAFETY: the CPU has AVX2 (checked above).
                unsafe { x86::dot_all_avx2(q, rows, lanes, limit, out) };
                return true;
            }
        }
        let _ = (q, rows, lanes, out);
        false
    }

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use std::arch::x86_64::{
            __m128i, __m256i, __m512i, _mm_add_epi32, _mm_cvtsi128_si32, _mm_shuffle_epi32,
            _mm_storeu_si128, _mm256_abs_epi8, _mm256_add_epi16, _mm256_add_epi32,
            _mm256_castsi256_si128, _mm256_extracti128_si256, _mm256_hadd_epi32,
            _mm256_loadu_si256, _mm256_madd_epi16, _mm256_maddubs_epi16, _mm256_set1_epi16,
            _mm256_setzero_si256, _mm256_sign_epi8, _mm512_castsi512_si256, _mm512_dpbusd_epi32,
            _mm512_extracti64x4_epi64, _mm512_loadu_si512, _mm512_reduce_add_epi32,
            _mm512_setzero_si512,
        };

        /// The widest `q` the kernels take.
        const WIDEST: usize = 1024;

        /// Whether a kernel that steps through a `q` of `width` bytes `step` at a time takes it:
        /// a non-zero multiple of `step`, at most [`WIDEST`].
        pub(super) fn takes(width: usize, step: usize) -> bool {
            width != 0 && width.is_multiple_of(step) && width <= WIDEST
        }

        /// Rows whose dot products are accumulated side by side and summed together.
        const ROWS: usize = 4;

        /// # Safety
        /// The CPU must have AVX-512 F, BW and VNNI; `q.len()` must be a multiple of 64, at most
        /// 1024.
        #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vnni")]
        pub(super) unsafe fn dot_all(q: &[u8], rows: &[i8], out: &mut [i32]) {
            let (width, blocks) = (q.len(), q.len() / 64);
            let mut qv = [_mm512_setzero_si512(); 16];
            for (k, v) in qv.iter_mut().take(blocks).enumerate() {
                // SAFETY: block k lies within q (blocks * 64 == q.len()); unaligned load.
                *v = unsafe { _mm512_loadu_si512(q.as_ptr().add(64 * k).cast::<__m512i>()) };
            }
            // Four rows at a time: four independent sums, reduced together (integer sums, so
            // the order of the additions does not change them).
            let four = out.len().min(rows.len() / width) / ROWS;
            for (o, r) in out
                .chunks_exact_mut(ROWS)
                .zip(rows.chunks_exact(ROWS * width))
            {
                let mut acc = [_mm512_setzero_si512(); ROWS];
                for (k, v) in qv.iter().take(blocks).enumerate() {
                    for (j, a) in acc.iter_mut().enumerate() {
                        // SAFETY: row j's block k lies within r (r.len() == ROWS * width).
                        let rv = unsafe {
                            _mm512_loadu_si512(r.as_ptr().add(j * width + 64 * k).cast::<__m512i>())
                        };
                        *a = _mm512_dpbusd_epi32(*a, *v, rv);
                    }
                }
                store_four([half(acc[0]), half(acc[1]), half(acc[2]), half(acc[3])], o);
            }
            let done = four * ROWS;
            for (o, r) in out[done..]
                .iter_mut()
                .zip(rows[done * width..].chunks_exact(width))
            {
                let mut acc = _mm512_setzero_si512();
                for (k, v) in qv.iter().take(blocks).enumerate() {
                    // SAFETY: block k lies within the row (r.len() == q.len()); unaligned load.
                    let rv =
                        unsafe { _mm512_loadu_si512(r.as_ptr().add(64 * k).cast::<__m512i>()) };
                    acc = _mm512_dpbusd_epi32(acc, *v, rv);
                }
                *o = _mm512_reduce_add_epi32(acc);
            }
        }

        /// The sum of a vector's two 256-bit halves.
        #[inline]
        #[target_feature(enable = "avx2,avx512f")]
        fn half(a: __m512i) -> __m256i {
            _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64::<1>(a))
        }

        /// Writes the sum of `acc[j]`'s eight lanes to `o[j]`, for the four rows of a step.
        /// Pairwise sums within each 128-bit lane put row j's sum over the lane in place j; the
        /// two lanes are then added.
        #[inline]
        #[target_feature(enable = "avx2")]
        fn store_four(acc: [__m256i; ROWS], o: &mut [i32]) {
            let s01 = _mm256_hadd_epi32(acc[0], acc[1]);
            let s23 = _mm256_hadd_epi32(acc[2], acc[3]);
            let s = _mm256_hadd_epi32(s01, s23);
            let sums = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
            assert!(o.len() >= ROWS);
            // SAFETY: `o` holds at least ROWS = 4 i32 (asserted), the 16 bytes stored; unaligned.
            unsafe { _mm_storeu_si128(o.as_mut_ptr().cast::<__m128i>(), sums) };
        }

        /// `acc` plus `Σ q·r` over one block of 32 bytes, given the block's signs (`q`) and sizes
        /// (`|q|`) and the row's block `r` (see [`dot_all_avx2`]).
        #[inline]
        #[target_feature(enable = "avx2")]
        fn step(acc: __m256i, r: __m256i, sign: __m256i, size: __m256i, ones: __m256i) -> __m256i {
            let pairs = _mm256_maddubs_epi16(size, _mm256_sign_epi8(r, sign));
            _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones))
        }

        /// The sums of `Σ q·r` of four `width`-wide rows (`r`, one after another) in 32-bit lanes,
        /// given `q`'s blocks' signs and sizes (see [`dot_all_avx2`]). `SHORT` rows add their
        /// pairs in 16 bits and widen once at the end; the caller has checked that they fit.
        #[inline]
        #[target_feature(enable = "avx2")]
        fn four_rows<const SHORT: bool>(
            r: &[i8],
            width: usize,
            signs: &[__m256i],
            sizes: &[__m256i],
            ones: __m256i,
        ) -> [__m256i; ROWS] {
            assert!(r.len() >= ROWS * width && 32 * signs.len() <= width);
            let mut acc = [_mm256_setzero_si256(); ROWS];
            for (k, (&sign, &size)) in signs.iter().zip(sizes).enumerate() {
                for (j, a) in acc.iter_mut().enumerate() {
                    // SAFETY: row j's block k lies within r (asserted: 32 * (k + 1) <= width).
                    let rv =
                        unsafe { _mm256_loadu_si256(r.as_ptr().add(j * width + 32 * k).cast()) };
                    *a = if SHORT {
                        _mm256_add_epi16(*a, _mm256_maddubs_epi16(size, _mm256_sign_epi8(rv, sign)))
                    } else {
                        step(*a, rv, sign, size, ones)
                    };
                }
            }
            if SHORT {
                acc.map(|a| _mm256_madd_epi16(a, ones))
            } else {
                acc
            }
        }

        /// # Safety
        /// The CPU must have AVX2; `q.len()` must be a multiple of 32, at most [`WIDEST`].
        ///
        /// `vpmaddubsw` multiplies unsigned by signed bytes and adds pairs into 16 bits, with
        /// saturation: `q·r` is taken as `|q| · (r with q's sign)` (`vpsignb`), and a pair is then
        /// at most 2 · 128 · 127 in size, so nothing saturates unless a row byte is −128 (whose
        /// negation does not fit a byte). `vpmaddwd` by ones adds pairs into 32 bits.
        ///
        /// Four rows whose [`super::super::lane_square`]s (in `lanes`, one per row) are all at
        /// most `limit` keep adding pairs in 16 bits, where every partial sum fits, and widen
        /// once at the end: four operations per block instead of five. The quantiser's rows
        /// nearly always qualify; the others, and the last rows, widen every block.
        #[target_feature(enable = "avx2")]
        pub(super) unsafe fn dot_all_avx2(
            q: &[i8],
            rows: &[i8],
            lanes: &[u32],
            limit: u32,
            out: &mut [i32],
        ) {
            let (width, blocks) = (q.len(), q.len() / 32);
            let ones = _mm256_set1_epi16(1);
            let mut signs = [_mm256_setzero_si256(); WIDEST / 32];
            let mut sizes = [_mm256_setzero_si256(); WIDEST / 32];
            for (k, (sign, size)) in signs.iter_mut().zip(&mut sizes).take(blocks).enumerate() {
                // SAFETY: block k lies within q (32 * blocks == q.len()); unaligned load.
                *sign = unsafe { _mm256_loadu_si256(q.as_ptr().add(32 * k).cast()) };
                *size = _mm256_abs_epi8(*sign);
            }
            let four = out.len().min(rows.len() / width) / ROWS;
            let (q_signs, q_sizes) = (&signs[..blocks], &sizes[..blocks]);
            for (i, (o, r)) in out
                .chunks_exact_mut(ROWS)
                .zip(rows.chunks_exact(ROWS * width))
                .enumerate()
            {
                let short = lanes
                    .get(ROWS * i..ROWS * (i + 1))
                    .is_some_and(|l| l.iter().all(|&x| x <= limit));
                let acc = if short {
                    four_rows::<true>(r, width, q_signs, q_sizes, ones)
                } else {
                    four_rows::<false>(r, width, q_signs, q_sizes, ones)
                };
                store_four(acc, o);
            }
            let done = four * ROWS;
            for (o, r) in out[done..]
                .iter_mut()
                .zip(rows[done * width..].chunks_exact(width))
            {
                let mut acc = _mm256_setzero_si256();
                for k in 0..blocks {
                    // SAFETY: block k lies within the row (r.len() == q.len()).
                    let rv = unsafe { _mm256_loadu_si256(r.as_ptr().add(32 * k).cast()) };
                    acc = step(acc, rv, signs[k], sizes[k], ones);
                }
                let x = _mm_add_epi32(
                    _mm256_castsi256_si128(acc),
                    _mm256_extracti128_si256::<1>(acc),
                );
                let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0b01_00_11_10>(x));
                let x = _mm_add_epi32(x, _mm_shuffle_epi32::<0b10_11_00_01>(x));
                *o = _mm_cvtsi128_si32(x);
            }
        }
    }
}

thread_local! {
    /// Per-thread dot products of every row for [`Semantic::score`], so a query allocates
    /// nothing per document.
    static DOTS: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
    /// Per-thread sums of each server group's dot products, then its dot product.
    static GROUP_DOTS: RefCell<Vec<i64>> = const { RefCell::new(Vec::new()) };
}

/// Fusion weight of the semantic ranker relative to BM25F (which weighs 1).
pub const DEFAULT_WEIGHT: f32 = 0.8;

/// Adds the bundled model's semantic ranker to `index` at [`DEFAULT_WEIGHT`].
pub fn attach_bundled(index: &mut SearchIndex, catalog: &Catalog) -> Result<(), Error> {
    attach_bundled_cached(index, catalog, &mut VectorCache::default())
}

/// [`attach_bundled`], taking tool vectors from `cache` and adding the ones it lacks.
pub fn attach_bundled_cached(
    index: &mut SearchIndex,
    catalog: &Catalog,
    cache: &mut VectorCache,
) -> Result<(), Error> {
    let embedder = Embedder::bundled()?;
    let semantic = Semantic::build_cached(embedder, catalog, index, cache);
    index.add_retriever(Box::new(semantic), DEFAULT_WEIGHT);
    Ok(())
}

/// Tool vectors by the hash of the text they embed, kept with the gateway's catalog cache so a
/// restart or a catalog change embeds only tools whose text is new.
///
/// The file is small and private to this crate: a header line naming the model (the sha256 of
/// its weights, so vectors of another model are never reused), then fixed-size records of an
/// 8-byte little-endian key and `dim` int8 components. A file that does not parse is ignored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VectorCache {
    vectors: std::collections::BTreeMap<u64, Vec<i8>>,
    dirty: bool,
    embedded: usize,
}

const CACHE_MAGIC: &str = "toolshelf-vectors-v1";

fn cache_header() -> String {
    format!(
        "{CACHE_MAGIC} {}\n",
        recorded_sha256("model.safetensors").unwrap_or("unknown")
    )
}

impl VectorCache {
    /// Loads `path`; an absent, foreign or damaged file gives an empty cache.
    pub fn load(path: &std::path::Path, dim: usize) -> Self {
        let Ok(bytes) = std::fs::read(path) else {
            return Self::default();
        };
        let header = cache_header();
        let Some(body) = bytes.strip_prefix(header.as_bytes()) else {
            return Self::default();
        };
        let record = 8 + dim;
        if dim == 0 || body.len() % record != 0 {
            return Self::default();
        }
        let vectors = body
            .chunks_exact(record)
            .map(|r| {
                let mut key = [0u8; 8];
                key.copy_from_slice(&r[..8]);
                (
                    u64::from_le_bytes(key),
                    r[8..].iter().map(|&b| b as i8).collect(),
                )
            })
            .collect();
        Self {
            vectors,
            dirty: false,
            embedded: 0,
        }
    }

    /// Writes the cache to `path` (atomically, via a temporary file) if anything was added.
    pub fn save(&mut self, path: &std::path::Path) -> std::io::Result<()> {
        if !self.dirty {
            return Ok(());
        }
        let mut out = cache_header().into_bytes();
        for (key, v) in &self.vectors {
            out.extend_from_slice(&key.to_le_bytes());
            out.extend(v.iter().map(|&x| x as u8));
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, out)?;
        std::fs::rename(&tmp, path)?;
        self.dirty = false;
        Ok(())
    }

    /// How many vectors this cache had to embed (misses) since it was created or loaded.
    pub fn embedded(&self) -> usize {
        self.embedded
    }

    /// Number of cached vectors.
    pub fn len(&self) -> usize {
        self.vectors.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.vectors.is_empty()
    }

    /// The vector of `text`, embedded on a miss.
    fn get_or_embed(&mut self, embedder: &Embedder, text: &str) -> &[i8] {
        let key =
            toolshelf_core::name::fnv1a64(text.as_bytes()) ^ (text.len() as u64).rotate_left(32);
        let (dirty, embedded) = (&mut self.dirty, &mut self.embedded);
        self.vectors.entry(key).or_insert_with(|| {
            *dirty = true;
            *embedded += 1;
            embedder.embed(text)
        })
    }
}

/// One int8 row per searchable tool, in the search index's document order.
#[derive(Debug, Clone)]
pub struct Semantic {
    embedder: &'static Embedder,
    dim: usize,
    rows: Vec<i8>,
    /// Sum of each row's values, for [`dot_all`].
    sums: Vec<i32>,
    /// Each row's [`lane_square`], for [`dot_all`].
    lanes: Vec<u32>,
    /// No row byte is −128 (none the quantiser makes is; a vector cache could hold one), for
    /// [`dot_all`].
    narrow: bool,
    /// Cosine below which a tool does not count as related (taken as 0 when negative).
    pub min_cosine: f32,
    /// At most this many tools per query get a semantic score.
    pub top_k: usize,
    /// Cosine a tool needs to be a hit on meaning alone, sharing no word with the query.
    pub min_cosine_alone: f32,
    /// Whether a tool's similarity moves toward its server group's (at most half way, as on the
    /// lexical side a tool gains half its group's score; see `Groups::share`), or is its own
    /// only.
    pub group_blend: bool,
    /// Server groups; `None` for a catalog with fewer than two servers.
    groups: Option<Groups>,
}

/// Server groups (the built-in tools are one more) for the semantic side. A group's vector is
/// the normalised sum of its tools' rows, and its dot product with a query is the sum of its
/// tools' dot products divided by that sum's length, so it costs no dot products of its own.
#[derive(Debug, Clone)]
struct Groups {
    /// Runs of consecutive documents of one group, `(first, end, group)`, in document order:
    /// documents are in name order, so a server's tools are one run, and both passes below work
    /// on whole slices.
    runs: Vec<(u32, u32, u32)>,
    /// Whether each group is a single run.
    contiguous: bool,
    /// When each group is a single run, the runs to blend (a group with a share), in document
    /// order within each length: of one, two and three documents, then longer ones. Most
    /// servers have a few tools, and their lengths in name order are data no branch predictor
    /// learns; taken length by length, each loop is straight code.
    by_length: [Vec<Run>; 4],
    /// Per group, `QUANT_SCALE / |Σ rows|` in fixed point ([`SCALE_BITS`] fraction bits): turns
    /// the sum of its tools' dots into the dot with its unit vector, on the tools' scale (0 for
    /// an empty group).
    scale: Vec<i64>,
    /// Per group, the share of its dot in a member's blended one, in fixed point
    /// ([`SHARE_BITS`] fraction bits): half the group's coherence, `|Σ cᵢ| / Σ |cᵢ|` over its
    /// tools' rows `cᵢ` centred on the catalog's mean row. That is how well one direction stands
    /// for all of its tools: 1 for near-synonyms, about `1/√n` for `n` unrelated tools. Centring
    /// matters because every row of the model shares a common component, which would make any
    /// set of tools look coherent.
    share: Vec<i64>,
}

impl Groups {
    /// The groups of `index`'s documents, as the lexical side forms them: one per server of the
    /// catalog, and one for the built-ins, when there are at least two servers (and every tool's
    /// server is one of them).
    fn build(catalog: &Catalog, index: &SearchIndex, rows: &[i8], dim: usize) -> Option<Self> {
        let servers = catalog.servers();
        if servers.len() < 2 || dim == 0 {
            return None;
        }
        let of_doc = server_group_of(catalog, index.catalog_indices());
        if of_doc.contains(&u32::MAX) {
            return None;
        }
        let groups = servers.len() + 1;
        let mut sum = vec![0i64; groups * dim];
        for (row, &g) in rows.chunks_exact(dim).zip(&of_doc) {
            let at = g as usize * dim;
            for (a, &x) in sum[at..at + dim].iter_mut().zip(row) {
                *a += i64::from(x);
            }
        }
        let scale: Vec<i64> = sum
            .chunks_exact(dim)
            .map(|v| {
                let norm = length(v.iter().map(|&x| x as f64));
                if norm > 0.0 {
                    (f64::from(QUANT_SCALE) / norm * f64::from(1u32 << SCALE_BITS)).round() as i64
                } else {
                    0
                }
            })
            .collect();
        let share = Self::shares(rows, dim, &of_doc, groups);
        Some(Self::from_layout(&of_doc, scale, share))
    }

    /// Each of `groups` groups' [`Self::share`], from the rows (`dim` wide) and each row's group.
    fn shares(rows: &[i8], dim: usize, of_doc: &[u32], groups: usize) -> Vec<i64> {
        let mut mean = vec![0f64; dim];
        for row in rows.chunks_exact(dim) {
            for (m, &x) in mean.iter_mut().zip(row) {
                *m += f64::from(x);
            }
        }
        let docs = of_doc.len().max(1) as f64;
        mean.iter_mut().for_each(|m| *m /= docs);
        // Each group's sum of centred rows, and the sum of their lengths.
        let mut centred = vec![0f64; groups * dim];
        let mut lengths = vec![0f64; groups];
        for (row, &g) in rows.chunks_exact(dim).zip(of_doc) {
            let at = g as usize * dim;
            let c = row.iter().zip(&mean).map(|(&x, m)| f64::from(x) - m);
            for (a, c) in centred[at..at + dim].iter_mut().zip(c.clone()) {
                *a += c;
            }
            lengths[g as usize] += length(c);
        }
        centred
            .chunks_exact(dim)
            .zip(&lengths)
            .map(|(v, &total)| {
                if total > 0.0 {
                    let coherence = (length(v.iter().copied()) / total).min(1.0);
                    (0.5 * coherence * f64::from(1u32 << SHARE_BITS)).round() as i64
                } else {
                    0
                }
            })
            .collect()
    }

    /// Groups from each document's group and each group's scale: the runs, and whether each
    /// group is one run.
    fn from_layout(of_doc: &[u32], scale: Vec<i64>, share: Vec<i64>) -> Self {
        let mut runs: Vec<(u32, u32, u32)> = Vec::new();
        for (d, &g) in of_doc.iter().enumerate() {
            match runs.last_mut() {
                Some(run) if run.2 == g => run.1 = d as u32 + 1,
                _ => runs.push((d as u32, d as u32 + 1, g)),
            }
        }
        let mut seen = vec![false; scale.len()];
        let contiguous = runs
            .iter()
            .all(|&(_, _, g)| !std::mem::replace(&mut seen[g as usize], true));
        let mut by_length: [Vec<Run>; 4] = Default::default();
        if contiguous {
            for &(first, end, g) in &runs {
                let (scale, share) = (scale[g as usize], share[g as usize]);
                if share != 0 {
                    let class = (end - first).min(4) as usize - 1;
                    by_length[class].push(Run {
                        first,
                        end,
                        scale,
                        share,
                    });
                }
            }
        }
        Self {
            runs,
            contiguous,
            by_length,
            scale,
            share,
        }
    }

    /// Moves each of `dots` (by document) toward its group's by the group's share:
    /// `(1 - share) · own + share · group`, rounded down.
    fn blend(&self, dots: &mut [i32]) {
        if self.contiguous {
            // One run per group: sum it and blend it while it is in cache. Short runs are
            // blended dot by dot, where a loop over 64-bit lanes would spend more on its set-up
            // than on them.
            let [ones, twos, threes, longer] = &self.by_length;
            for r in ones {
                let a = &mut dots[r.first as usize];
                *a = mover(r.scale, r.share, i64::from(*a))(*a);
            }
            for r in twos {
                let at = r.first as usize;
                let [a, b] = &mut dots[at..at + 2] else {
                    unreachable!("a run of two")
                };
                let moved = mover(r.scale, r.share, i64::from(*a) + i64::from(*b));
                (*a, *b) = (moved(*a), moved(*b));
            }
            for r in threes {
                let at = r.first as usize;
                let [a, b, c] = &mut dots[at..at + 3] else {
                    unreachable!("a run of three")
                };
                let moved = mover(
                    r.scale,
                    r.share,
                    i64::from(*a) + i64::from(*b) + i64::from(*c),
                );
                (*a, *b, *c) = (moved(*a), moved(*b), moved(*c));
            }
            for r in longer {
                let run = &mut dots[r.first as usize..r.end as usize];
                let moved = mover(r.scale, r.share, run.iter().map(|&d| i64::from(d)).sum());
                run.iter_mut().for_each(|dot| *dot = moved(*dot));
            }
            return;
        }
        let blend = |run: &mut [i32], sum: i64, g: u32| {
            let (scale, share) = (self.scale[g as usize], self.share[g as usize]);
            if share != 0 {
                let moved = mover(scale, share, sum);
                run.iter_mut().for_each(|dot| *dot = moved(*dot));
            }
        };
        GROUP_DOTS.with_borrow_mut(|sums| {
            sums.clear();
            sums.resize(self.scale.len(), 0);
            for &(first, end, g) in &self.runs {
                let run = &dots[first as usize..end as usize];
                sums[g as usize] += run.iter().map(|&d| i64::from(d)).sum::<i64>();
            }
            for &(first, end, g) in &self.runs {
                blend(&mut dots[first as usize..end as usize], sums[g as usize], g);
            }
        });
    }
}

/// A group's run of documents `first..end` and what blending it takes (see [`Groups::blend`]).
#[derive(Debug, Clone, Copy)]
struct Run {
    first: u32,
    end: u32,
    scale: i64,
    share: i64,
}

/// A blended dot of a group with `scale` and `share` whose dots sum to `sum`:
/// `(1 - share) · dot + share · group`, rounded down. |dot| ≤ QUANT_SCALE² + rounding, so the
/// group's dot fits an i32, and the weighted sum of two fits an i64 before the shift.
#[inline]
fn mover(scale: i64, share: i64, sum: i64) -> impl Fn(i32) -> i32 {
    let group = (sum * scale + (1 << (SCALE_BITS - 1))) >> SCALE_BITS;
    let (own, toward) = ((1 << SHARE_BITS) - share, group * share);
    move |dot: i32| ((i64::from(dot) * own + toward) >> SHARE_BITS) as i32
}

/// Fraction bits of [`Groups::scale`].
const SCALE_BITS: u32 = 20;

/// Fraction bits of [`Groups::share`].
const SHARE_BITS: u32 = 16;

/// Euclidean length of a vector.
fn length(v: impl Iterator<Item = f64>) -> f64 {
    v.map(|x| x * x).sum::<f64>().sqrt()
}

/// Sum of each `dim`-wide row's values, for [`dot_all`].
fn row_sums(rows: &[i8], dim: usize) -> Vec<i32> {
    rows.chunks_exact(dim.max(1))
        .map(|r| r.iter().map(|&x| i32::from(x)).sum())
        .collect()
}

impl Semantic {
    /// Embeds every tool of `index` (its document order).
    pub fn build(embedder: &'static Embedder, catalog: &Catalog, index: &SearchIndex) -> Self {
        Self::build_cached(embedder, catalog, index, &mut VectorCache::default())
    }

    /// [`Self::build`], reusing and filling `cache`.
    pub fn build_cached(
        embedder: &'static Embedder,
        catalog: &Catalog,
        index: &SearchIndex,
        cache: &mut VectorCache,
    ) -> Self {
        let dim = embedder.dim();
        let mut rows = Vec::with_capacity(index.len() * dim);
        for (d, &i) in index.catalog_indices().iter().enumerate() {
            let text = doc_text(catalog, &catalog.tools()[i], index.name_pieces(d));
            rows.extend_from_slice(cache.get_or_embed(embedder, &text));
        }
        let groups = Groups::build(catalog, index, &rows, dim);
        Self {
            embedder,
            dim,
            sums: row_sums(&rows, dim),
            lanes: lane_squares(&rows, dim),
            narrow: !rows.contains(&i8::MIN),
            rows,
            min_cosine: 0.1,
            top_k: 100,
            min_cosine_alone: 0.25,
            group_blend: true,
            groups,
        }
    }

    /// The raw int8 rows (document-major), e.g. to cache them with the catalog.
    pub fn rows(&self) -> &[i8] {
        &self.rows
    }
}

impl Retriever for Semantic {
    fn name(&self) -> &'static str {
        "semantic"
    }

    fn alone_floor(&self) -> f32 {
        self.min_cosine_alone - self.min_cosine
    }

    fn score(&self, query: &ParsedQuery, allowed: &[bool], scores: &mut [f32]) {
        self.scored(query, allowed, |d, s| scores[d as usize] = s);
    }

    fn score_sparse(
        &self,
        query: &ParsedQuery,
        allowed: &[bool],
        _scores: &mut [f32],
        out: &mut Vec<(u32, f32)>,
    ) {
        self.scored(query, allowed, |d, s| out.push((d, s)));
    }
}

impl Semantic {
    /// Moves each tool's dot product toward its group's (see [`Groups::share`]), in integers, so
    /// a blended dot is on the same scale and the cosine floors keep their meaning.
    fn blend_groups(&self, dots: &mut [i32]) {
        if let (Some(groups), true) = (&self.groups, self.group_blend) {
            groups.blend(dots);
        }
    }

    /// Calls `emit(document, score)` for each of the query's best `top_k` tools at or above
    /// `min_cosine` (at most `top_k`, in no particular order).
    fn scored(&self, query: &ParsedQuery, allowed: &[bool], mut emit: impl FnMut(u32, f32)) {
        if query.text.trim().is_empty() {
            return;
        }
        let q = self.embedder.embed(&query.text);
        let scale = QUANT_SCALE * QUANT_SCALE;
        DOTS.with_borrow_mut(|dots| {
            // `dot_all` writes every row's dot: no need to zero them first.
            dots.resize(self.rows.len() / self.dim.max(1), 0);
            dot_all(&q, &self.rows, &self.sums, &self.lanes, self.narrow, dots);
            self.blend_groups(dots);
            let min_dot = (self.min_cosine * scale).ceil() as i32;
            let kept = best_keys(dots, allowed, min_dot, self.top_k);
            for key in kept {
                let dot = i32::MAX - (key >> 32) as i32;
                emit(key as u32, dot as f32 / scale - self.min_cosine);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grid rounding agrees with `round`, clamp and cast on every kind of value: halves of
    /// both signs, values next to them, the ends of the range and past them, and non-numbers.
    #[test]
    fn grid_rounding_is_round_half_away_from_zero() {
        let reference = |x: f32| x.round().clamp(-127.0, 127.0) as i8;
        let mut values = vec![
            0.0,
            -0.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN,
            f32::MIN_POSITIVE,
            127.5,
            -127.5,
            126.5,
            -126.5,
            128.0,
            -128.0,
            1e9,
            -1e9,
        ];
        for k in -130..=130 {
            let half = k as f32 + 0.5;
            values.extend([half, half.next_up(), half.next_down(), k as f32]);
        }
        let mut random = xorshift(0x9e37_79b9_7f4a_7c15);
        values.extend((0..100_000).map(|_| (random() % 1_000_000) as f32 / 3_700.0 - 135.0));
        for x in values {
            assert_eq!(to_grid(x), reference(x), "{x:?}");
        }
    }

    /// A fixed pseudo-random sequence (xorshift64), so generated cases are the same every run.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    /// Forty texts of each length from 1 to 3,000 characters, each made of `piece`s, which draw
    /// from `next(n)` (a number below `n`).
    #[cfg(feature = "bundled-model")]
    fn generated(
        next: &mut dyn FnMut(usize) -> usize,
        piece: impl Fn(&mut dyn FnMut(usize) -> usize, &mut String),
    ) -> Vec<String> {
        let mut texts = Vec::new();
        for len in [1, 2, 5, 20, 80, 400, 3000] {
            for _ in 0..40 {
                let mut t = String::new();
                while t.chars().count() < len {
                    piece(next, &mut t);
                }
                texts.push(t);
            }
        }
        texts
    }

    /// The sampled-cut selection keeps the keys a full sort keeps: on dots spread wide and
    /// narrow, with ties, filtered documents, dots below the floor, and `k` from 1 past the
    /// number of survivors.
    #[test]
    fn best_keys_are_a_full_sorts_best() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        for round in 0..400 {
            let n = 1 + (next() % 3000) as usize;
            let spread = [3, 300, 40_000, 170_000][round % 4];
            let dots: Vec<i32> = (0..n)
                .map(|_| (next() % (2 * spread + 1)) as i32 - spread as i32 / 2)
                .collect();
            let allowed: Vec<bool> = (0..n).map(|_| !next().is_multiple_of(7)).collect();
            let min_dot = [0, 1, spread as i32 / 4, 16_000][round % 4 / 2 + round % 2 * 2];
            let key = |d: usize, dot: i32| (u64::from((i32::MAX - dot) as u32) << 32) | d as u64;
            let all: Vec<u64> = (0..n)
                .filter(|&d| allowed[d] && dots[d] >= min_dot)
                .map(|d| key(d, dots[d]))
                .collect();
            assert_eq!(best_keys(&dots, &allowed, min_dot, 0), all, "round {round}");
            let mut sorted = all.clone();
            sorted.sort_unstable();
            for k in [1, 2, 10, 100, n, n + 5] {
                let best: Vec<u64> = sorted.iter().copied().take(k).collect();
                let mut got = best_keys(&dots, &allowed, min_dot, k);
                got.sort_unstable();
                assert_eq!(got, best, "round {round}, k {k}");
            }
        }
        // The sampled documents are the best and the rest far below: the sample's cut leaves
        // too few, and the cut falls back to the floor.
        let dots: Vec<i32> = (0..800)
            .map(|d| {
                if d % SAMPLE_EVERY == 0 {
                    10_000 - d as i32
                } else {
                    5
                }
            })
            .collect();
        let allowed = vec![true; dots.len()];
        let mut got = best_keys(&dots, &allowed, 0, 150);
        got.sort_unstable();
        assert_eq!(got.len(), 150);
        assert_eq!(got[99] & u64::from(u32::MAX), 792);
        assert_eq!(got[100] & u64::from(u32::MAX), 1);
    }

    /// The ASCII path gives model2vec's vector bit for bit: on every tool text and request of the
    /// example catalog and transcript, and on generated text mixing case, digits, punctuation,
    /// whitespace runs, words cut from the vocabulary's pieces, and lengths past truncation.
    /// Text it must not take (any other character, an added token) goes to model2vec.
    #[cfg(feature = "bundled-model")]
    #[test]
    fn the_ascii_path_gives_model2vecs_vectors_bit_for_bit() {
        let e = Embedder::bundled().expect("model loads");
        assert!(e.has_ascii_path(), "the bundled model takes the ASCII path");
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
        let mut texts: Vec<String> = Vec::new();
        for file in ["catalog.json", "transcript.jsonl"] {
            let raw = std::fs::read_to_string(format!("{root}/{file}")).expect("example file");
            // Every JSON string of the file, descriptions and requests alike.
            let mut strings = Vec::new();
            for line in raw.lines().filter(|l| !l.trim().is_empty()) {
                let value: serde_json::Value = match serde_json::from_str(line) {
                    Ok(v) => v,
                    Err(_) => serde_json::from_str(&raw).expect("valid JSON"),
                };
                collect_strings(&value, &mut strings);
                if file == "catalog.json" {
                    break;
                }
            }
            texts.extend(strings);
        }
        let examples = texts.len();
        // The unknown token's text in another case is no added token: it is tokenised, and the
        // piece `<unk>` it contains counts as unknown on both paths.
        texts.extend(["Use <UNK> here", "a<Unk>b", "<UNK>", "<unk"].map(String::from));
        let mut random = xorshift(0x2545_f491_4f6c_dd1d);
        let mut next = move |n: usize| (random() % n as u64) as usize;
        let alphabet: Vec<char> = (0x20u8..0x7f)
            .map(char::from)
            .chain(['\t', '\n', '\r'])
            .collect();
        let words = [
            "search",
            "Flights",
            "tokyo",
            "CONVERT",
            "currency",
            "get_order",
            "listAllItems",
            "v2",
            "3.14",
            "e-mail",
            "don't",
            "(yen)",
            "a",
            "I",
            "--json",
            "https://x.io/a?b=c",
        ];
        texts.extend(generated(&mut next, |next, t| {
            if next(3) == 0 {
                t.push(alphabet[next(alphabet.len())]);
            } else {
                t.push_str(words[next(words.len())]);
                t.push([' ', ' ', ' ', '\t', '\n', '-', '.'][next(7)]);
            }
        }));
        assert!(
            e.has_wide_path(),
            "the bundled model takes Chinese text too"
        );
        let plain_generated = texts.len();
        // Chinese: ideographs from anywhere in the block and common ones, full-width forms, the
        // ideographic space, mixed with ASCII words, up to lengths past truncation.
        let common: Vec<char> = "查询北京天气预订酒店航班文件读取写入列出目录的是了在和"
            .chars()
            .collect();
        let wide: Vec<char> = ('\u{ff01}'..='\u{ff5e}')
            .chain(['\u{3000}', '、', '。'])
            .collect();
        texts.extend(generated(&mut next, |next, t| match next(6) {
            0 => t.push(char::from_u32(0x4e00 + next(0x5200) as u32).expect("CJK")),
            1 => t.push(wide[next(wide.len())]),
            2 => {
                t.push_str(words[next(words.len())]);
                t.push(' ');
            }
            _ => t.push(common[next(common.len())]),
        }));
        let plain_and_chinese = texts.len();
        // English as editors type it: curly quotes, dashes, symbols, no-break spaces, `…`.
        let marks: Vec<char> = unigram::KEPT_PUNCTUATION
            .into_iter()
            .chain(['\u{a0}', '…'])
            .collect();
        texts.extend(generated(&mut next, |next, t| match next(4) {
            0 => t.push(marks[next(marks.len())]),
            1 => t.push(alphabet[next(alphabet.len())]),
            _ => {
                t.push_str(words[next(words.len())]);
                t.push([' ', '’', '\u{a0}', '—'][next(4)]);
            }
        }));
        let mut ascii_examples = 0;
        for (i, t) in texts.iter().enumerate() {
            assert_eq!(
                bits(&e.embed_f32(t)),
                bits(&e.model.encode_single(t)),
                "{t:?}"
            );
            let took = e.ascii_f32(t).is_some();
            if i < examples {
                ascii_examples += usize::from(took);
            } else if i < plain_generated {
                assert!(took, "generated plain ASCII {t:?} takes the ASCII path");
            } else if i < plain_and_chinese {
                // The bundled model's map turns `～` into something other than `~`.
                assert_eq!(took, !t.contains('～'), "generated Chinese {t:?}");
            } else {
                assert!(took, "generated typed English {t:?} takes the path");
            }
        }
        assert!(
            ascii_examples * 2 > examples,
            "most example texts are plain ASCII: {ascii_examples} of {examples}"
        );
        assert!(e.ascii_f32("查询天气，Ｔｏｋｙｏ。").is_some());
        assert!(e.ascii_f32("It’s 30°C in “Tokyo” — 5\u{a0}€…").is_some());
        assert!(e.ascii_f32("a～b").is_none());
        for t in [
            "café au lait",
            "查询天气 café",
            "한국어",
            "ｶﾀｶﾅ",
            "a\u{0}b",
            "x <unk> y",
            "form\u{c}feed",
            "trademark™",
            "½ cup",
        ] {
            assert!(e.ascii_f32(t).is_none(), "{t:?} is left to model2vec");
        }
    }

    #[cfg(feature = "bundled-model")]
    fn collect_strings(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
            serde_json::Value::Object(o) => o.values().for_each(|x| collect_strings(x, out)),
            _ => {}
        }
    }

    /// Every kernel gives the plain signed dot product, for widths the fast paths take and
    /// widths they leave to the portable loop, and for any row count (four rows at a time and
    /// the rest). Each kernel the CPU has is checked on its own.
    #[test]
    fn dot_products_are_exact_on_every_path() {
        let mut random = xorshift(0x9e37_79b9_7f4a_7c15);
        // The quantiser's range, extremes included.
        let mut next = move || ((random() % 255) as i16 - 127) as i8;
        #[cfg(target_arch = "x86_64")]
        let has_avx2 = std::arch::is_x86_feature_detected!("avx2");
        #[cfg(not(target_arch = "x86_64"))]
        let has_avx2 = false;
        // No kernel takes an empty query (a width of zero has no rows to step through).
        assert!(!simd::vnni(&[], &[1, 2], &mut [0]) && !simd::avx2(&[], &[1, 2], &[], &mut [0]));
        for dim in [64, 256, 48, 1024, 40, 1040] {
            let rows: Vec<i8> = (0..dim * 37).map(|_| next()).collect();
            let mut q: Vec<i8> = (0..dim).map(|_| next()).collect();
            q[0] = 127;
            q[1] = -127;
            let sums: Vec<i32> = rows
                .chunks_exact(dim)
                .map(|r| r.iter().map(|&x| i32::from(x)).sum())
                .collect();
            let expected: Vec<i32> = rows
                .chunks_exact(dim)
                .map(|r| {
                    q.iter()
                        .zip(r)
                        .map(|(a, b)| i32::from(*a) * i32::from(*b))
                        .sum()
                })
                .collect();
            // Every path writes each row's dot over what the buffer held.
            let stale = i32::MIN / 3;
            let lanes = lane_squares(&rows, dim);
            let mut out = vec![stale; 37];
            dot_all(&q, &rows, &sums, &lanes, true, &mut out);
            assert_eq!(out, expected, "dim {dim}");
            let unshift = |raw: &[i32]| -> Vec<i32> {
                raw.iter().zip(&sums).map(|(p, s)| p - 128 * s).collect()
            };
            let mut portable = vec![stale; 37];
            dot_all_portable(&shifted(&q), &rows, &mut portable);
            assert_eq!(unshift(&portable), expected, "portable, dim {dim}");
            let mut vnni = vec![stale; 37];
            if simd::vnni(&q, &rows, &mut vnni) {
                assert_eq!(unshift(&vnni), expected, "VNNI, dim {dim}");
            }
            let mut avx2 = vec![stale; 37];
            let took = simd::avx2(&q, &rows, &lanes, &mut avx2);
            // Where the CPU has AVX2, the kernel takes every width that is a multiple of 32 up
            // to 1024, and no other.
            assert_eq!(took, has_avx2 && dim % 32 == 0 && dim <= 1024, "dim {dim}");
            if took {
                assert_eq!(avx2, expected, "AVX2, dim {dim}");
            }
            // The extremes a pair of products reaches on narrow rows: nothing saturates.
            for (qx, rx) in [(127i8, 127i8), (127, -127), (-128, 127), (-128, -127)] {
                let mut extreme = vec![0; 5];
                let rows = vec![rx; dim * 5];
                if simd::avx2(
                    &vec![qx; dim],
                    &rows,
                    &lane_squares(&rows, dim),
                    &mut extreme,
                ) {
                    let each = i32::from(qx) * i32::from(rx) * dim as i32;
                    assert_eq!(extreme, vec![each; 5], "AVX2 {qx}·{rx}, dim {dim}");
                }
            }
            // A row byte of −128 is left to a path that takes it exactly.
            let (q_min, rows_min) = (vec![-127i8; dim], vec![-128i8; dim * 5]);
            let sums_min = vec![-128 * dim as i32; 5];
            let mut wide = vec![0; 5];
            let lanes_min = lane_squares(&rows_min, dim);
            dot_all(&q_min, &rows_min, &sums_min, &lanes_min, false, &mut wide);
            assert_eq!(
                wide,
                vec![127 * 128 * dim as i32; 5],
                "−128 rows, dim {dim}"
            );
        }
    }

    /// Rows whose lane squares allow it are summed in 16 bits by the AVX2 kernel, and exactly:
    /// the quantiser's typical rows, rows at the bound (one block of ±127 or −128 against 127),
    /// and groups of four mixing them with rows that must widen every block.
    #[test]
    fn sums_kept_in_16_bits_are_exact() {
        let mut random = xorshift(0x2545_f491_4f6c_dd1d);
        let mut small = move || ((random() % 81) as i16 - 40) as i8;
        let plain = |q: &[i8], rows: &[i8]| -> Vec<i32> {
            rows.chunks_exact(q.len())
                .map(|r| {
                    q.iter()
                        .zip(r)
                        .map(|(a, b)| i32::from(*a) * i32::from(*b))
                        .sum()
                })
                .collect()
        };
        let fits = |q: &[i8], r: &[i8]| {
            u64::from(lane_square(q)) * u64::from(lane_square(r)) <= (i16::MAX as u64).pow(2)
        };
        for dim in [32, 256, 1024] {
            // Components shrink as the width grows, as a unit vector's do.
            let shrink = if dim > 256 { 2 } else { 1 };
            let q: Vec<i8> = (0..dim).map(|_| small() / shrink).collect();
            let mut rows: Vec<i8> = (0..dim * 37).map(|_| small() / shrink).collect();
            // Every seventh row is 127 with q's sign: its sums outgrow 16 bits from 256
            // components up, so it must widen every block.
            for r in rows.chunks_exact_mut(dim).step_by(7) {
                for (x, &y) in r.iter_mut().zip(&q) {
                    *x = if y < 0 { -127 } else { 127 };
                }
            }
            let fitting = rows.chunks_exact(dim).filter(|r| fits(&q, r)).count();
            let expected = if dim >= 256 { 37 - 6 } else { 37 };
            assert_eq!(fitting, expected, "dim {dim}: rows that fit 16 bits");
            let mut out = vec![i32::MIN / 3; 37];
            if simd::avx2(&q, &rows, &lane_squares(&rows, dim), &mut out) {
                assert_eq!(out, plain(&q, &rows), "dim {dim}");
            }
        }
        for (qx, rx) in [(127i8, 127i8), (-127, 127), (-128, 127), (-128, -127)] {
            let (q, rows) = (vec![qx; 32], vec![rx; 32 * 8]);
            assert!(fits(&q, &rows[..32]), "{qx}·{rx}");
            let mut out = vec![0; 8];
            if simd::avx2(&q, &rows, &lane_squares(&rows, 32), &mut out) {
                assert_eq!(out, plain(&q, &rows), "{qx}·{rx}");
            }
        }
        // Rows given no lane squares are summed in 32 bits.
        let (q, rows) = (vec![127i8; 64], vec![127i8; 64 * 4]);
        let mut out = vec![0; 4];
        if simd::avx2(&q, &rows, &[], &mut out) {
            assert_eq!(out, plain(&q, &rows));
        }
    }

    /// The sum of the dots of group `g`'s documents.
    fn group_sum(dots: &[i32], of_doc: &[u32], g: u32) -> i64 {
        dots.iter()
            .zip(of_doc)
            .filter(|&(_, &x)| x == g)
            .map(|(&d, _)| i64::from(d))
            .sum()
    }

    /// Blending moves each document's dot toward its group's (the group's sum scaled to a unit
    /// vector) by the group's share, whether a group is one run of documents or scattered.
    #[test]
    fn blending_moves_toward_the_group_by_its_share_in_any_layout() {
        let dots = [1000, -300, 2000, 50, 7, 123_456];
        let of_doc = [0u32, 0, 1, 0, 2, 1];
        let scale = [1 << SCALE_BITS, 3 << (SCALE_BITS - 2), 0];
        let one = 1i64 << SHARE_BITS;
        let share = [one / 2, one / 5, one / 2];
        let scattered = Groups::from_layout(&of_doc, scale.to_vec(), share.to_vec());
        let mut got = dots;
        scattered.blend(&mut got);
        let sum = |g: u32| group_sum(&dots, &of_doc, g);
        let group = |g: u32| {
            (sum(g) as f64 * scale[g as usize] as f64 / f64::from(1 << SCALE_BITS)).round() as i32
        };
        let want: Vec<i32> = dots
            .iter()
            .zip(&of_doc)
            .map(|(&d, &g)| {
                let w = share[g as usize];
                (i64::from(d) * (one - w) + i64::from(group(g)) * w).div_euclid(one) as i32
            })
            .collect();
        // A group's share of a half is the mean of own and group.
        assert_eq!(want[0], (1000 + group(0)).div_euclid(2));
        assert_eq!(got.to_vec(), want);
        // The same groups laid out as one run each.
        let order = [0usize, 1, 3, 2, 5, 4];
        let sorted: Vec<i32> = order.iter().map(|&d| dots[d]).collect();
        let contiguous = Groups::from_layout(&[0, 0, 0, 1, 1, 2], scale.to_vec(), share.to_vec());
        let mut got = sorted.clone();
        contiguous.blend(&mut got);
        let want_sorted: Vec<i32> = order.iter().map(|&d| want[d]).collect();
        assert_eq!(got, want_sorted);
    }

    /// Runs of every length from 1 to 12 (short ones are blended dot by dot, longer ones in a
    /// loop), one run a group or scattered, give the fixed-point formula's dots.
    #[test]
    fn blending_is_the_formula_for_runs_of_any_length() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let one = 1i64 << SHARE_BITS;
        for round in 0..300 {
            let groups = 1 + (next() % 12) as usize;
            let lengths: Vec<usize> = (0..groups).map(|_| 1 + (next() % 12) as usize).collect();
            let mut of_doc: Vec<u32> = lengths
                .iter()
                .enumerate()
                .flat_map(|(g, &n)| std::iter::repeat_n(g as u32, n))
                .collect();
            if round % 2 == 1 {
                // Scattered: the same groups in a shuffled order.
                for i in (1..of_doc.len()).rev() {
                    of_doc.swap(i, (next() % (i as u64 + 1)) as usize);
                }
            }
            let dots: Vec<i32> = of_doc
                .iter()
                .map(|_| (next() % 33_000_000) as i32 - 16_500_000)
                .collect();
            let scale: Vec<i64> = (0..groups)
                .map(|_| (next() % (2 << SCALE_BITS)) as i64)
                .collect();
            let share: Vec<i64> = (0..groups)
                .map(|_| (next() % (one as u64 / 2 + 1)) as i64)
                .collect();
            let layout = Groups::from_layout(&of_doc, scale.clone(), share.clone());
            assert!(layout.contiguous || round % 2 == 1);
            let mut got = dots.clone();
            layout.blend(&mut got);
            let sum = |g: u32| group_sum(&dots, &of_doc, g);
            let want: Vec<i32> = dots
                .iter()
                .zip(&of_doc)
                .map(|(&d, &g)| {
                    let (w, s) = (share[g as usize], scale[g as usize]);
                    // The group's dot, rounded half up.
                    let group = (sum(g) * s + (1 << (SCALE_BITS - 1))).div_euclid(1 << SCALE_BITS);
                    (i64::from(d) * (one - w) + group * w).div_euclid(one) as i32
                })
                .collect();
            assert_eq!(got, want, "round {round}, lengths {lengths:?}");
        }
    }

    /// A group's share is half its coherence: near-synonyms get about a half, unrelated tools
    /// much less, once the rows' common component is taken out.
    #[test]
    fn a_group_weighs_as_much_as_it_is_coherent() {
        // 8-wide rows sharing a large common component (the first coordinate), as the model's
        // rows do: three near-synonyms, four tools on four different axes, three more on three
        // others, and a single tool.
        let axis = |i: usize, v: i8| {
            let mut row = [0i8; 8];
            row[0] = 100;
            row[i] = v;
            row
        };
        let rows: Vec<i8> = [
            axis(1, 40),
            axis(1, 41),
            axis(1, 39),
            axis(2, 40),
            axis(3, 40),
            axis(4, 40),
            axis(5, 40),
            axis(6, 40),
            axis(7, 40),
            axis(2, -40),
            [100, 10, 10, 10, 10, 10, 10, 10],
        ]
        .concat();
        let of_doc = [0u32, 0, 0, 1, 1, 1, 1, 3, 3, 3, 2];
        let share = Groups::shares(&rows, 8, &of_doc, 4);
        let half = 1i64 << (SHARE_BITS - 1);
        // Uncentred, every group would look coherent: the rows of each are within about 30° of
        // each other.
        assert!(share[0] > half * 9 / 10, "{share:?}");
        assert!(share[1] < half * 6 / 10, "{share:?}");
        assert!(share[3] < half * 7 / 10, "{share:?}");
        // A single tool is its own group's direction.
        assert_eq!(share[2], half);
    }
}

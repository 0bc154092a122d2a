#!/usr/bin/env python3
"""Per-query latency and recall of the `bm25s` package on the evaluation sets.

The reference point for `toolshelf eval`'s latency figures: the same catalogs and queries, one
query at a time, warm. Each tool is indexed by its text as the catalog gives it, name and
description (the bare tool name for grouped catalogs, split into words at `_ - .` and camelCase,
since the pattern below would keep `get_order` whole), with bm25s's own tokenizer (lower-case,
English stop words, `(?u)\\b\\w\\w+\\b`) and the PyStemmer English stemmer. Chinese has no spaces,
so runs of Chinese characters are rewritten as overlapping character bigrams first (the plain-BM25
floor's treatment); English text is untouched by that step.

A query's time is tokenising it plus `retrieve(k=10)` on one thread, measured with
`time.perf_counter_ns` after one warm-up pass over every query.

    python3 -m venv /tmp/bm25s-venv && /tmp/bm25s-venv/bin/pip install bm25s==0.3.16 PyStemmer
    /tmp/bm25s-venv/bin/python scripts/bench-bm25s.py [--eval-dir ../shared/eval] [--json] [SET ...]

Prints, per set: tools, queries, R@1 / R@5 / R@10 (|gold ∩ top-k| / |gold|, averaged, as
`toolshelf eval` counts it) and p50 / p99 latency in µs.

With `--toolshelf BIN`, each set's bm25s run is followed at once by `BIN eval` on the same set,
at first sight and with `--warm-up`, and the line adds toolshelf's p50s and their ratios to
bm25s's. This machine's speed drifts by a third from one minute to the next, so a ratio is only
meaningful between runs made back to back; `--rounds N` repeats everything N times and ends with
each set's ratios and their median:

    /tmp/bm25s-venv/bin/python scripts/bench-bm25s.py --toolshelf target/release/toolshelf --rounds 3
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import bm25s
import Stemmer

SETS = ["acebench_zh", "acebench_en", "metatool_single", "metatool_multi", "stabletoolbench"]

CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def cjk_bigrams(text: str) -> str:
    """Replaces each run of Chinese characters by its overlapping bigrams, space-separated."""

    def split(m: "re.Match[str]") -> str:
        run = m.group(0)
        if len(run) < 2:
            return " "
        return " " + " ".join(run[i : i + 2] for i in range(len(run) - 1)) + " "

    return CJK_RUN.sub(split, text)


def name_words(name: str) -> str:
    """`getOrder_v2.list-all` -> `get Order v2 list all`: bm25s's pattern keeps `_` inside words."""
    return re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name).replace("_", " ").replace("-", " ").replace(".", " ")


def load_catalog(path: str) -> list[tuple[str, str]]:
    """(canonical name, indexed text) of every tool."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    tools = []
    if isinstance(data, dict) and "servers" in data:
        for server in data["servers"]:
            for t in server.get("tools", []):
                canonical = f"mcp__{server['name']}__{t['name']}"
                tools.append((canonical, f"{name_words(t['name'])} {t.get('description') or ''}"))
    else:
        for t in data:
            tools.append((t["name"], f"{name_words(t['name'])} {t.get('description') or ''}"))
    return tools


def load_queries(path: str) -> list[tuple[str, list[str]]]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                out.append((row["query"], row["gold"]))
    return out


def percentile(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return 0.0
    rank = round(p / 100.0 * (len(sorted_values) - 1))
    return sorted_values[min(rank, len(sorted_values) - 1)]


def run_set(eval_dir: str, name: str) -> dict:
    tools = load_catalog(os.path.join(eval_dir, f"{name}.catalog.json"))
    queries = load_queries(os.path.join(eval_dir, f"{name}.queries.jsonl"))
    stemmer = Stemmer.Stemmer("english")
    names = [n for n, _ in tools]
    corpus = [cjk_bigrams(text) for _, text in tools]
    t0 = time.perf_counter()
    tokens = bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    build_ms = (time.perf_counter() - t0) * 1000.0
    k = min(10, len(tools))

    def search(text: str):
        q = bm25s.tokenize(
            [cjk_bigrams(text)], stopwords="en", stemmer=stemmer, show_progress=False
        )
        docs, _scores = retriever.retrieve(q, k=k, show_progress=False, n_threads=1)
        return docs[0]

    for text, _ in queries:  # warm-up
        search(text)
    recall = [0.0, 0.0, 0.0]
    latencies = []
    for text, gold in queries:
        t = time.perf_counter_ns()
        ranked = search(text)
        latencies.append((time.perf_counter_ns() - t) / 1000.0)
        if not gold:
            continue
        top = [names[i] for i in ranked]
        for slot, cut in enumerate((1, 5, 10)):
            recall[slot] += len(set(gold) & set(top[:cut])) / len(gold)
    latencies.sort()
    n = len(queries)
    return {
        "set": name,
        "tools": len(tools),
        "queries": n,
        "build_ms": round(build_ms, 1),
        "recall": {"1": round(recall[0] / n, 4), "5": round(recall[1] / n, 4), "10": round(recall[2] / n, 4)},
        "latency_us": {"p50": round(percentile(latencies, 50), 1), "p99": round(percentile(latencies, 99), 1)},
    }


def run_toolshelf(binary: str, eval_dir: str, name: str, warm_up: bool) -> dict:
    """`toolshelf eval --json` on one set (hybrid, the default ranker): its p50 / p99 in µs."""
    cmd = [
        binary,
        "eval",
        "--catalog",
        os.path.join(eval_dir, f"{name}.catalog.json"),
        "--queries",
        os.path.join(eval_dir, f"{name}.queries.jsonl"),
        "--json",
    ]
    if warm_up:
        cmd.append("--warm-up")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout)["latency_us"]


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval-dir", default=os.path.join(here, "..", "..", "shared", "eval"))
    ap.add_argument("--json", action="store_true", help="one JSON object per set")
    ap.add_argument(
        "--toolshelf",
        metavar="BIN",
        help="after each set, time `BIN eval` on it (first sight and --warm-up) and give ratios",
    )
    ap.add_argument("--rounds", type=int, default=1, help="repeat every set this many times")
    ap.add_argument("sets", nargs="*", default=SETS)
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.toolshelf and not os.access(args.toolshelf, os.X_OK):
        ap.error(f"--toolshelf {args.toolshelf}: not an executable file")
    print(f"bm25s {bm25s.__version__}", file=sys.stderr)
    # Per set, the ratios (first sight, warm) of every round.
    ratios: dict[str, list[tuple[float, float]]] = {name: [] for name in args.sets}
    for round_no in range(1, args.rounds + 1):
        if args.rounds > 1 and not args.json:
            print(f"round {round_no}", flush=True)
        for name in args.sets:
            r = run_set(args.eval_dir, name)
            if args.rounds > 1:
                r["round"] = round_no
            line = ""
            if args.toolshelf:
                first = run_toolshelf(args.toolshelf, args.eval_dir, name, warm_up=False)
                warm = run_toolshelf(args.toolshelf, args.eval_dir, name, warm_up=True)
                base = r["latency_us"]["p50"]
                pair = (first["p50"] / base, warm["p50"] / base)
                ratios[name].append(pair)
                r["toolshelf"] = {
                    "first_sight": first,
                    "warm": warm,
                    "ratio_first_sight": round(pair[0], 3),
                    "ratio_warm": round(pair[1], 3),
                }
                line = (
                    f"  toolshelf p50 {first['p50']:.0f} µs ({pair[0]:.2f}×), "
                    f"warm {warm['p50']:.0f} µs ({pair[1]:.2f}×)"
                )
            if args.json:
                print(json.dumps(r), flush=True)
            else:
                rc, lat = r["recall"], r["latency_us"]
                print(
                    f"{name:<16} {r['tools']:>5} tools {r['queries']:>6} queries  "
                    f"R@1 {rc['1']:.3f}  R@5 {rc['5']:.3f}  R@10 {rc['10']:.3f}  "
                    f"p50 {lat['p50']:.0f} µs  p99 {lat['p99']:.0f} µs{line}",
                    flush=True,
                )
    if args.toolshelf and args.rounds > 1 and not args.json:
        print("ratio of toolshelf's p50 to bm25s's, round by round (median):")
        for name, pairs in ratios.items():
            for label, i in (("first sight", 0), ("warm", 1)):
                values = [p[i] for p in pairs]
                listed = ", ".join(f"{v:.2f}" for v in values)
                print(f"  {name:<16} {label:<11} {listed} ({statistics.median(values):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

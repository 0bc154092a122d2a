#!/usr/bin/env bash
# Compares two builds' search latency on one evaluation set, alternating them run by run.
#
#   scripts/ab-latency.sh [--rounds N] [--copies C] BIN_A BIN_B SET
#
# Each round runs `BIN_A eval` and then `BIN_B eval` over the set's requests repeated C times
# (default 6, so five passes in six are warm), and prints each build's p50 µs per round, their
# medians and B's median over A's. This machine's speed drifts by a third from one minute to the
# next, so only runs made back to back compare; one build against itself
# (`ab-latency.sh BIN BIN SET`) shows how far apart two equal builds land that hour. Rankings are
# compared by bytes, not here: `BIN search --batch FILE -k 10 --json` of both builds.
#
# SET is a name under $TOOLSHELF_EVAL_DIR (default ../shared/eval): SET.catalog.json and
# SET.queries.jsonl.
set -euo pipefail
rounds=6
copies=6
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --copies) copies=$2; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
if [[ $# -ne 3 ]]; then
  echo "usage: $0 [--rounds N] [--copies C] BIN_A BIN_B SET" >&2
  exit 2
fi
a=$1 b=$2 set=$3
for bin in "$a" "$b"; do
  [[ -x "$bin" ]] || { echo "$0: $bin is not an executable file" >&2; exit 2; }
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "$0: --rounds takes a positive number, not '$rounds'" >&2; exit 2; }
[[ "$copies" =~ ^[1-9][0-9]*$ ]] || { echo "$0: --copies takes a positive number, not '$copies'" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
eval_dir=${TOOLSHELF_EVAL_DIR:-$here/../shared/eval}
catalog=$eval_dir/$set.catalog.json
queries=$eval_dir/$set.queries.jsonl
for f in "$catalog" "$queries"; do
  [[ -f "$f" ]] || { echo "$0: no $f (set TOOLSHELF_EVAL_DIR?)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for _ in $(seq "$copies"); do cat "$queries"; done > "$work/queries.jsonl"

p50() {
  "$1" eval --catalog "$catalog" --queries "$work/queries.jsonl" --json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["latency_us"]["p50"])'
}

pa=() pb=()
for _ in $(seq "$rounds"); do
  pa+=("$(p50 "$a")")
  pb+=("$(p50 "$b")")
done
python3 - "$set" "${pa[*]}" "${pb[*]}" <<'EOF'
import statistics
import sys

name, a, b = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
for label, runs in (("A", a), ("B", b)):
    print(f"{name} {label} p50 µs: {' '.join(f'{x:.1f}' for x in runs)}  median {statistics.median(runs):.1f}")
print(f"{name} B/A medians: {statistics.median(b) / statistics.median(a):.3f}")
EOF

#!/usr/bin/env bash
# Instructions per search request, counted by callgrind: the figure the speed log compares builds
# by, since this machine's timings drift by a third between runs while instruction counts do not.
#
#   scripts/instructions-per-request.sh [--cache] BIN [SET ...]
#
# For each set (default: acebench_zh acebench_en stabletoolbench, from $TOOLSHELF_EVAL_DIR or
# ../shared/eval), runs `BIN eval` under callgrind on the set's first request and on its first 201,
# counting only inside the ranking (`--toggle-collect` on `rank_with`), and prints
# (count over 201 − count over 1) / 200: the first request, which loads the segmenter and fills
# the memos, is left out. `--cache` also simulates the caches and prints the L1 data misses per
# request the same way. Callgrind has no AVX-512, so the dot products take the AVX2 kernel, not
# VNNI's, and it counts `rep stosb` byte by byte: both weigh more in its counts than in time.
set -euo pipefail
cache=()
if [[ "${1:-}" == "--cache" ]]; then
  cache=(--cache-sim=yes)
  shift
fi
if [[ $# -lt 1 ]]; then
  echo "usage: $0 [--cache] BIN [SET ...]" >&2
  exit 2
fi
bin=$1
shift
[[ -x "$bin" ]] || { echo "$0: $bin is not an executable file" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "$0: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
eval_dir=${TOOLSHELF_EVAL_DIR:-$here/../shared/eval}
sets=("$@")
[[ ${#sets[@]} -gt 0 ]] || sets=(acebench_zh acebench_en stabletoolbench)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Prints "instructions l1-data-misses" of one callgrind run over QUERIES.
count() {
  local catalog=$1 queries=$2 out
  out=$(valgrind --tool=callgrind "${cache[@]}" --callgrind-out-file="$work/cg.out" \
    --toggle-collect='*rank_with*' "$bin" eval --catalog "$catalog" --queries "$queries" --json \
    2>&1 >/dev/null)
  local ir d1
  ir=$(grep -m1 "refs:" <<<"$out" | awk '{gsub(",", "", $NF); print $NF}')
  d1=$(grep -m1 "D1  misses:" <<<"$out" | awk '{gsub(",", "", $4); print $4}' || true)
  echo "$ir ${d1:-0}"
}

printf '%-16s %14s' set instructions
[[ ${#cache[@]} -gt 0 ]] && printf ' %14s' "L1d misses"
printf '\n'
for set in "${sets[@]}"; do
  catalog=$eval_dir/$set.catalog.json
  queries=$eval_dir/$set.queries.jsonl
  [[ -f "$catalog" && -f "$queries" ]] || { echo "$0: no set $set in $eval_dir" >&2; exit 2; }
  head -n 1 "$queries" >"$work/q1.jsonl"
  head -n 201 "$queries" >"$work/q201.jsonl"
  read -r ir1 d11 < <(count "$catalog" "$work/q1.jsonl")
  read -r ir201 d1201 < <(count "$catalog" "$work/q201.jsonl")
  printf '%-16s %14d' "$set" $(((ir201 - ir1) / 200))
  [[ ${#cache[@]} -gt 0 ]] && printf ' %14d' $(((d1201 - d11) / 200))
  printf '\n'
done

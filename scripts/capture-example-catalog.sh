#!/usr/bin/env bash
# Regenerate examples/catalog.json from real MCP servers.
#
# Installs pinned MCP reference servers (npm + PyPI) into a local prefix that is
# NOT part of the repository, starts each one over stdio, lists its tools with
# scripts/capture_catalog.py (plain MCP JSON-RPC, standard library only), and
# merges them with the hand-written built-in tools in scripts/builtin-tools.json.
#
# Usage:  scripts/capture-example-catalog.sh [OUTPUT]     (default examples/catalog.json)
#
# Environment:
#   TOOLSHELF_MCP_PREFIX       install prefix (default ~/.cache/toolshelf-mcp);
#                              npm packages go to $PREFIX/npm, a venv to $PREFIX/venv
#   TOOLSHELF_CAPTURE_TIMEOUT  seconds allowed per server (default 60)
#   PYTHON                     Python >= 3.11 used for the venv and the helper (default python3)
#
# Needs: node >= 18 with npm, python3 (>= 3.11) with venv, git. Network access to
# the npm registry and PyPI on the first run only (installs are skipped when the
# prefix already holds exactly these pins).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PREFIX=${TOOLSHELF_MCP_PREFIX:-$HOME/.cache/toolshelf-mcp}
TIMEOUT=${TOOLSHELF_CAPTURE_TIMEOUT:-60}
PYTHON=${PYTHON:-python3}
OUT=${1:-$ROOT/examples/catalog.json}
HELPER=$ROOT/scripts/capture_catalog.py
BUILTIN=$ROOT/scripts/builtin-tools.json
MIN_TOOLS=40

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

START=$SECONDS

# The pinned servers (and their prerequisites) are installed by their own script.
TOOLSHELF_MCP_PREFIX=$PREFIX PYTHON=$PYTHON bash "$ROOT/scripts/install-mcp-servers.sh"
NPM_BIN=$PREFIX/npm/node_modules/.bin
PY_BIN=$PREFIX/venv/bin

# --- scratch space: filesystem root, git repository, memory file --------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/toolshelf-capture.XXXXXX")
WORK=$(cd "$WORK" && pwd -P)  # resolved, as the filesystem server resolves it
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/allowed" "$WORK/captures"
printf 'hello from toolshelf\n' > "$WORK/allowed/README.txt"
git -c init.defaultBranch=main init -q "$WORK/repo"
printf '# scratch repository for mcp-server-git\n' > "$WORK/repo/README.md"

capture() {  # capture NAME [capture_catalog.py capture options] -- COMMAND...
  local name=$1; shift
  "$PYTHON" "$HELPER" capture --name "$name" --out "$WORK/captures/$name.json" \
    --timeout "$TIMEOUT" --redact "$WORK" "/tmp/toolshelf-capture" \
    --env "MEMORY_FILE_PATH=$WORK/memory.jsonl" --env "TZ=Etc/UTC" \
    "$@" || die "could not capture the '$name' server"
}

log "capturing tools/list from each server (timeout ${TIMEOUT}s each)"
# The everything server's `instructions` are guidance addressed to the model
# ("Audience: ..."), not a description of the server, so give one.
capture everything \
  --description "Reference and test server that exercises every MCP feature: echo, arithmetic, images, resource links, structured content, logging, long-running operations and tasks." \
  -- "$NPM_BIN/mcp-server-everything" stdio
capture filesystem \
  --fallback-description "Secure file operations (read, write, edit, move, search, list, tree) restricted to a set of allowed directories." \
  -- "$NPM_BIN/mcp-server-filesystem" "$WORK/allowed"
capture memory \
  --fallback-description "Persistent knowledge-graph memory: entities, relations and observations that survive across conversations." \
  -- "$NPM_BIN/mcp-server-memory"
capture sequential-thinking \
  --fallback-description "Structured step-by-step reasoning: a scratchpad of numbered thoughts that can be revised and branched." \
  -- "$NPM_BIN/mcp-server-sequential-thinking"
# --local-timezone pins the zone that the tool descriptions mention.
capture time \
  --fallback-description "Current time in any IANA time zone and conversion of times between zones." \
  -- "$PY_BIN/mcp-server-time" --local-timezone Etc/UTC
capture git \
  --fallback-description "Read and change a local Git repository: status, diffs, log, show, branches, staging and commits." \
  -- "$PY_BIN/mcp-server-git" --repository "$WORK/repo"
# Only tools/list is sent, so the fetch server never touches the network.
capture fetch \
  --fallback-description "Fetches a URL from the internet and returns its content as markdown, in chunks." \
  -- "$PY_BIN/mcp-server-fetch"

"$PYTHON" "$HELPER" merge --builtin "$BUILTIN" --out "$OUT" --min-tools "$MIN_TOOLS" \
  "$WORK"/captures/*.json

if grep -qF "$WORK" "$OUT"; then
  die "a scratch path leaked into $OUT"
fi
log "done in $((SECONDS - START))s"

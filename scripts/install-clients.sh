#!/usr/bin/env bash
# Install the pinned clients that toolshelf's end-to-end tests drive, into a prefix outside the
# repository: the MCP clients Claude Code and Qwen Code (from npm), the official Anthropic and
# OpenAI Python SDKs (from PyPI) that the proxy tests point at `toolshelf proxy`, and the
# Prometheus Python client whose parser reads the `/metrics` scrapes.
#
# Usage:  scripts/install-clients.sh
#
# Environment:
#   TOOLSHELF_CLIENTS_PREFIX  install prefix (default ~/.cache/toolshelf-clients); the packages go
#                             to $PREFIX/npm, binaries in $PREFIX/npm/node_modules/.bin (claude,
#                             qwen); the SDKs to the virtual environment $PREFIX/venv (its
#                             interpreter $PREFIX/venv/bin/python)
#
# Needs: node >= 20 with npm, python3 >= 3.9 with its venv module. Network access to the npm
# registry and PyPI on the first run only: the install is skipped when the prefix already holds
# exactly these pins (a stamp file records them, with the node and python versions).
# Claude Code's package brings its native binary as a platform package (an optional dependency)
# that its postinstall links in place; nothing is downloaded from elsewhere. Both packages declare
# node >= 22; Claude Code runs without node, and Qwen Code's non-interactive mode, which the tests
# use, runs on node 20 (npm prints an EBADENGINE warning).
set -euo pipefail

PREFIX=${TOOLSHELF_CLIENTS_PREFIX:-$HOME/.cache/toolshelf-clients}

# --- pins -------------------------------------------------------------------
# Bump deliberately (`npm view NAME version`), and run the client tests: they pin the versions too.
CLAUDE_CODE=@anthropic-ai/claude-code@2.1.328
QWEN_CODE=@qwen-code/qwen-code@0.24.4
NPM_CLIENTS=("$CLAUDE_CODE" "$QWEN_CODE")
# Bump deliberately (`pip index versions NAME`), and run the proxy SDK tests.
ANTHROPIC_SDK=anthropic==2.14.0
OPENAI_SDK=openai==3.57.0
PROMETHEUS_CLIENT=prometheus_client==0.26.0
PY_CLIENTS=("$ANTHROPIC_SDK" "$OPENAI_SDK" "$PROMETHEUS_CLIENT")

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# --- prerequisites ------------------------------------------------------------
command -v node >/dev/null || die "node is required (>= 20)"
command -v npm >/dev/null || die "npm is required"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || die "node >= 20 required, found $(node --version)"
command -v python3 >/dev/null || die "python3 is required (>= 3.9)"
python3 -c 'import sys, venv; sys.exit(sys.version_info < (3, 9))' 2>/dev/null \
  || die "python3 >= 3.9 with the venv module required, found $(python3 --version 2>&1)"

BIN=$PREFIX/npm/node_modules/.bin
VENV=$PREFIX/venv

# The installed Python packages' versions, in the order of PY_CLIENTS.
py_versions() {
  "$VENV/bin/python" -c 'import importlib.metadata as m
print(*(m.version(p) for p in ("anthropic", "openai", "prometheus_client")))'
}

# The installed clients answer --version with their pins, and the SDKs report theirs.
check() {
  "$BIN/claude" --version 2>/dev/null | grep -qF "${CLAUDE_CODE##*@} (Claude Code)" \
    && [ "$("$BIN/qwen" --version 2>/dev/null)" = "${QWEN_CODE##*@}" ] \
    && [ "$(py_versions 2>/dev/null)" \
         = "${ANTHROPIC_SDK##*==} ${OPENAI_SDK##*==} ${PROMETHEUS_CLIENT##*==}" ]
}

# --- install (skipped when the prefix already has exactly these pins) ---------
mkdir -p "$PREFIX"
PIN_HASH=$(printf '%s\n' "${NPM_CLIENTS[@]}" "${PY_CLIENTS[@]}" "$(node --version)" \
  "$(python3 --version 2>&1)" "$(uname -m)" | sha256sum | cut -d' ' -f1)
STAMP=$PREFIX/installed.sha256
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$PIN_HASH" ]; then
  rm -f "$STAMP"
  log "installing MCP clients into $PREFIX/npm"
  mkdir -p "$PREFIX/npm"
  npm install --prefix "$PREFIX/npm" --save-exact --no-audit --no-fund --loglevel=error \
    "${NPM_CLIENTS[@]}"
  if ! "$BIN/claude" --version >/dev/null 2>&1; then
    # The postinstall that puts the native binary in place did not run (scripts disabled).
    log "linking Claude Code's native binary"
    (cd "$PREFIX/npm/node_modules/@anthropic-ai/claude-code" && node install.cjs)
  fi
  log "installing the Python packages into $VENV"
  # A venv made by another python would keep its interpreter: start afresh.
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    "${PY_CLIENTS[@]}"
  check || die "the installed clients do not report the pinned versions: \
claude $("$BIN/claude" --version 2>&1 || true), qwen $("$BIN/qwen" --version 2>&1 || true), \
Python packages $(py_versions 2>&1 || true)"
  echo "$PIN_HASH" > "$STAMP"
else
  log "pinned clients already installed in $PREFIX"
fi

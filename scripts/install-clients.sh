#!/usr/bin/env bash
# Install the pinned MCP clients that toolshelf's client end-to-end tests drive (Claude Code and
# Qwen Code, from npm), into a prefix outside the repository.
#
# Usage:  scripts/install-clients.sh
#
# Environment:
#   TOOLSHELF_CLIENTS_PREFIX  install prefix (default ~/.cache/toolshelf-clients); the packages go
#                             to $PREFIX/npm, binaries in $PREFIX/npm/node_modules/.bin (claude,
#                             qwen)
#
# Needs: node >= 20 with npm. Network access to the npm registry on the first run only: the
# install is skipped when the prefix already holds exactly these pins (a stamp file records them).
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

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# --- prerequisites ------------------------------------------------------------
command -v node >/dev/null || die "node is required (>= 20)"
command -v npm >/dev/null || die "npm is required"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || die "node >= 20 required, found $(node --version)"

BIN=$PREFIX/npm/node_modules/.bin

# The installed clients answer --version with their pins.
check() {
  "$BIN/claude" --version 2>/dev/null | grep -qF "${CLAUDE_CODE##*@} (Claude Code)" \
    && [ "$("$BIN/qwen" --version 2>/dev/null)" = "${QWEN_CODE##*@}" ]
}

# --- install (skipped when the prefix already has exactly these pins) ---------
mkdir -p "$PREFIX"
PIN_HASH=$(printf '%s\n' "${NPM_CLIENTS[@]}" "$(node --version)" "$(uname -m)" | sha256sum | cut -d' ' -f1)
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
  check || die "the installed clients do not report the pinned versions: \
claude $("$BIN/claude" --version 2>&1 || true), qwen $("$BIN/qwen" --version 2>&1 || true)"
  echo "$PIN_HASH" > "$STAMP"
else
  log "pinned clients already installed in $PREFIX"
fi

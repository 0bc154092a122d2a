#!/usr/bin/env bash
# Install the pinned MCP reference servers that toolshelf's example catalog, example
# gateway configuration and end-to-end tests use, into a prefix outside the repository.
#
# Usage:  scripts/install-mcp-servers.sh
#
# Environment:
#   TOOLSHELF_MCP_PREFIX  install prefix (default ~/.cache/toolshelf-mcp); npm packages go to
#                         $PREFIX/npm (binaries in $PREFIX/npm/node_modules/.bin), a venv to
#                         $PREFIX/venv (binaries in $PREFIX/venv/bin)
#   PYTHON                Python >= 3.11 used for the venv (default python3)
#
# Needs: node >= 18 with npm, python3 (>= 3.11) with venv, git. Network access to the npm
# registry and PyPI on the first run only: the install is skipped when the prefix already holds
# exactly these pins (a stamp file records them).
set -euo pipefail

PREFIX=${TOOLSHELF_MCP_PREFIX:-$HOME/.cache/toolshelf-mcp}
PYTHON=${PYTHON:-python3}

# --- pins -------------------------------------------------------------------
# Servers. Bump deliberately: `npm view NAME version`, `pip index versions NAME`.
NPM_SERVERS=(
  @modelcontextprotocol/server-everything@2026.8.31
  @modelcontextprotocol/server-filesystem@2026.8.31
  @modelcontextprotocol/server-memory@2026.8.31
  @modelcontextprotocol/server-sequential-thinking@2026.8.31
)
# The TypeScript SDK and zod generate the servers' JSON Schemas, so they are
# pinned too (installed at top level, npm dedupes the servers onto them).
NPM_SCHEMA_DEPS=(
  @modelcontextprotocol/sdk@1.32.2
  zod@4.6.7
  zod-to-json-schema@3.25.2
)
PIP_SERVERS=(
  mcp-server-time==2026.10.19
  mcp-server-git==2026.10.19
  mcp-server-fetch==2026.10.24
)
# Every transitive Python dependency, as resolved when the pins above were chosen
# (pydantic and mcp shape the schemas; the rest keeps the venv reproducible).
read -r -d '' PIP_CONSTRAINTS <<'EOF' || true
annotated-types==0.8.0
anyio==4.16.0
attrs==26.1.0
beautifulsoup4==4.15.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
cryptography==50.0.2
gitdb==4.0.12
GitPython==3.2.1
h11==0.16.0
html5lib==1.1
httpcore==1.0.9
httpcore2==2.16.2
httpx==0.28.1
httpx2==2.16.2
idna==3.20
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
lxml==6.1.3
markdownify==1.2.3
mcp==2.3.0
mcp-types==2.3.0
opentelemetry-api==1.45.2
Protego==0.7.0
pycparser==3.12
pydantic==2.14.4
pydantic_core==2.50.5
PyJWT==2.15.1
python-multipart==0.0.34
readabilipy==0.3.0
referencing==0.37.0
regex==2026.11.19
requests==2.34.2
rpds-py==2026.9.1
six==1.17.0
smmap==5.0.3
socksio==1.0.0
soupsieve==4.1.3
sse-starlette==3.7.0
starlette==1.10.0
truststore==0.10.5
typing-inspection==0.4.5
typing_extensions==4.16.0
tzdata==2026.6
tzlocal==5.4.5
urllib3==2.8.0
uvicorn==0.54.0
webencodings==0.6.1
EOF

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# --- prerequisites ------------------------------------------------------------
command -v node >/dev/null || die "node is required (>= 18)"
command -v npm >/dev/null || die "npm is required"
command -v git >/dev/null || die "git is required"
command -v "$PYTHON" >/dev/null || die "$PYTHON is required (>= 3.11)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 18 ] || die "node >= 18 required, found $(node --version)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$PYTHON must be >= 3.11, found $("$PYTHON" --version 2>&1)"

# --- install (skipped when the prefix already has exactly these pins) ---------
mkdir -p "$PREFIX"
# The Python that counts is the venv's once it exists (it is never re-created): another python3
# on PATH must neither trigger a reinstall into the old venv nor be recorded for it.
VENV_PYTHON=$PREFIX/venv/bin/python
if [ -x "$VENV_PYTHON" ]; then PY_VERSION=$("$VENV_PYTHON" --version 2>&1); else PY_VERSION=$("$PYTHON" --version 2>&1); fi
PIN_HASH=$(printf '%s\n' "${NPM_SERVERS[@]}" "${NPM_SCHEMA_DEPS[@]}" "${PIP_SERVERS[@]}" "$PIP_CONSTRAINTS" \
  "$(node --version)" "$PY_VERSION" | sha256sum | cut -d' ' -f1)
STAMP=$PREFIX/installed.sha256
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$PIN_HASH" ]; then
  rm -f "$STAMP"
  log "installing npm servers into $PREFIX/npm"
  mkdir -p "$PREFIX/npm"
  npm install --prefix "$PREFIX/npm" --save-exact --no-audit --no-fund --loglevel=error \
    "${NPM_SERVERS[@]}" "${NPM_SCHEMA_DEPS[@]}"
  log "installing PyPI servers into $PREFIX/venv"
  [ -x "$PREFIX/venv/bin/python" ] || "$PYTHON" -m venv "$PREFIX/venv"
  printf '%s\n' "$PIP_CONSTRAINTS" > "$PREFIX/constraints.txt"
  "$PREFIX/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -c "$PREFIX/constraints.txt" "${PIP_SERVERS[@]}"
  echo "$PIN_HASH" > "$STAMP"
else
  log "pinned servers already installed in $PREFIX"
fi

#!/usr/bin/env bash
# Install the Debian packages that toolshelf's end-to-end tests drive: redis-server and redis-cli
# (the shared session store), Chromium and ChromeDriver (the dashboard). A no-op when they are
# already there.
#
# Usage:  scripts/install-system-packages.sh
#
# Needs: Debian's apt, as root (CI) or through sudo. Network access to Debian's mirrors on the
# first run only.
set -euo pipefail

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

need=()
{ command -v redis-server && command -v redis-cli; } >/dev/null || need+=(redis-server)
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
if [ ${#need[@]} -eq 0 ]; then
  log "system packages already installed"
  exit 0
fi
command -v apt-get >/dev/null || die "apt-get not found: install ${need[*]} by hand"
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null; then
  as_root=(sudo)
else
  die "installing ${need[*]} needs root: run as root or install them by hand"
fi
log "installing ${need[*]}"
"${as_root[@]}" apt-get update -q
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -q --no-install-recommends "${need[@]}"

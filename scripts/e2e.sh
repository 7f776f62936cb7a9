#!/usr/bin/env bash
# End-to-end tests against a real `macp serve`: three Python MCP clients plus a fresh one, one
# TypeScript SDK client, and the MCP conformance suite. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
macp="$target/debug/macp"
python=$(bash scripts/setup-e2e.sh | tail -n 1)
node_dir=tests/e2e/node
node22="$node_dir/node_modules/.bin/node"
work=$(mktemp -d)
pids=()
cleanup() {
  # A server stopped by SIGTERM keeps its search indexes on the way out: wait for it, or the
  # removal below races the file it is writing ("Directory not empty").
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# Starts `macp serve` on a free loopback port with extra arguments; sets $url.
start_server() {
  local name=$1; shift
  "$macp" serve --bind 127.0.0.1:0 --data-dir "$work/$name" "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    url=$(grep -m1 -o 'http://[^ ]*/mcp' "$work/$name.log" || true)
    [ -n "$url" ] && return 0
    sleep 0.1
  done
  echo "server $name did not start:"; cat "$work/$name.log"; return 1
}

echo "--> three Python MCP agents and a fresh one (auth off)"
"$python" tests/e2e/mcp_e2e.py --macp "$macp"

echo "--> the same scenario with OAuth on: JWKS on loopback, one token per user, scopes"
"$python" tests/e2e/auth_e2e.py --macp "$macp"

echo "--> artifacts: curl upload to a presigned URL, register, list and download by another agent"
"$python" tests/e2e/artifacts_e2e.py --macp "$macp"

echo "--> the room feed: push on both protocol generations, waiting get_updates, the loop sees every change"
"$python" tests/e2e/feed_e2e.py --macp "$macp"

echo "--> stdio transport (Python client) and the human-facing commands"
"$python" tests/e2e/stdio_cli.py --macp "$macp"

echo "--> the replayed investigation: 4 agent processes + a late joiner, OAuth on, close, restart, re-check"
"$python" tests/e2e/replay_e2e.py --macp "$macp"

echo "--> a session outlives its server: one Python client across a crash and a graceful restart (SQLite)"
"$python" tests/e2e/restart_e2e.py --macp "$macp"

echo "--> the web view in headless Chromium: live feed, injection as text, a person's answer and marker, auth"
"$python" tests/e2e/web_e2e.py --macp "$macp"

echo "--> TypeScript SDK client"
start_server ts
node "$node_dir/ts_client.mjs" "$url"

# conformance LABEL PACKAGE EXPECTED-FAILURES [ARGS…]: one run of an MCP conformance suite
# against $url; every scenario (and check) outside the expected-failures list must pass.
conformance() {
  local label=$1 package=$2 expected=$3 out="$work/conformance-$1.out"
  shift 3
  echo "--> MCP conformance suite, $label (expected failures: $expected)"
  if "$node22" "$node_dir/node_modules/$package/dist/index.js" server "$@" \
      --url "$url" --expected-failures "$expected" >"$out" 2>&1; then
    passed=$(grep -c '^✓' "$out" || true)
    echo "conformance $label: every scenario outside the fixture list passes ($passed scenarios green)"
  else
    sed 's/\x1b\[[0-9;]*m//g' "$out" | tail -n 60
    echo "conformance suite ($label) failed"
    exit 1
  fi
}

start_server conformance
conformance 2025-11-25 @modelcontextprotocol/conformance tests/e2e/conformance-expected-failures.yml
conformance 2026-07-28 conformance-2026 tests/e2e/conformance-2026-expected-failures.yml --requirements 2026-07-28

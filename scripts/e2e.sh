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
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
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

echo "--> the web view in headless Chromium: live feed, injection as text, a person's answer and marker, auth"
"$python" tests/e2e/web_e2e.py --macp "$macp"

echo "--> TypeScript SDK client"
start_server ts
node "$node_dir/ts_client.mjs" "$url"

echo "--> MCP conformance suite (expected failures: tests/e2e/conformance-expected-failures.yml)"
start_server conformance
if "$node22" "$node_dir/node_modules/@modelcontextprotocol/conformance/dist/index.js" server \
    --url "$url" --expected-failures tests/e2e/conformance-expected-failures.yml >"$work/conformance.out" 2>&1; then
  passed=$(grep -c '^✓' "$work/conformance.out" || true)
  echo "conformance: every scenario outside the fixture list passes ($passed scenarios green)"
else
  sed 's/\x1b\[[0-9;]*m//g' "$work/conformance.out" | tail -n 60
  echo "conformance suite failed"
  exit 1
fi

echo "--> MCP conformance suite, 2026-07-28 revision (stateless; expected failures: tests/e2e/conformance-2026-expected-failures.yml)"
if "$node22" "$node_dir/node_modules/conformance-2026/dist/index.js" server --requirements 2026-07-28 \
    --url "$url" --expected-failures tests/e2e/conformance-2026-expected-failures.yml >"$work/conformance-2026.out" 2>&1; then
  passed=$(grep -c '^✓' "$work/conformance-2026.out" || true)
  echo "conformance 2026-07-28: every scenario and check outside the fixture list passes ($passed scenarios green)"
else
  sed 's/\x1b\[[0-9;]*m//g' "$work/conformance-2026.out" | tail -n 60
  echo "conformance suite (2026-07-28) failed"
  exit 1
fi

#!/usr/bin/env bash
# Runs every test of the project. This is the README's test command, and what CI runs.
#
#   bash scripts/test.sh
#
# Idempotent: safe to run again on the same machine; anything it installs is reused.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; SECONDS=0; }
took() { echo "($1 took ${SECONDS}s)"; }

step "unit, conformance (memory + sqlite) and property tests"
# The AWS conformance cases skip here; they run against moto below.
env -u MACP_AWS_TEST_ENDPOINT cargo test --workspace --all-features
took "cargo test"

step "API docs build without warnings (missing_docs is denied on public items)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --quiet
took "cargo doc"

step "example: an embedded investigation"
MACP_DATA_DIR="$(mktemp -d)" cargo run --quiet -p macp-examples --example investigation >/dev/null
echo "example ran"

step "search quality on the labelled set (goal: MRR >= 0.62, keyword hit@1 >= 0.95)"
eval_set="${MACP_EVAL_SET:-../shared/eval/search-relevance.json}"
if [ -f "$eval_set" ]; then
  cargo run --quiet -p macp-examples --bin search-eval -- "$eval_set" --check
else
  echo "no labelled set at $eval_set (set MACP_EVAL_SET): skipped"
fi

step "end-to-end: the macp server with real MCP clients"
cargo build --quiet -p macp-mcp --bin macp
bash scripts/e2e.sh
took "end-to-end"

step "AWS backend: emulator checks, OpenTofu module, conformance and two servers on moto"
bash scripts/aws-tests.sh
took "AWS backend"

step "all tests passed"

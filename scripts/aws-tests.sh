#!/usr/bin/env bash
# The AWS backend's tests, without AWS: moto_server (PyPI, pinned in tests/e2e/requirements.txt)
# with the project's S3 Vectors extension (tests/aws/moto_macp.py) on a free loopback port.
# Called by scripts/test.sh; safe to run alone:  bash scripts/aws-tests.sh
#
#   1. verify_moto.py  - every moto behaviour macp-aws relies on, checked with boto3
#   2. check_tofu.py   - deploy/tofu parsed (python-hcl2) and held to macp-aws/schema.json
#   3. the macp-testkit conformance suite on macp-aws (MACP_AWS_TEST_ENDPOINT)
#   4. two `macp serve --backend aws` on the same moto, three agents spread over both
#   5. failover_e2e.py - two servers behind a round-robin proxy; one crashes, one is replaced
#
# moto keeps everything in memory; each run starts its own server (clean state) and the
# server stops when this script exits, however it exits (--exit-on-stdin-eof).
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
python=$(bash scripts/setup-e2e.sh | tail -n 1)
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-west-2
unset AWS_PROFILE AWS_SESSION_TOKEN MACP_AWS_ENDPOINT_URL MACP_AWS_TABLE_PREFIX

section() { printf -- '--> %s\n' "$*"; SECONDS=0; }
took() { echo "    ($1: ${SECONDS}s)"; }

section "moto behaviours macp-aws relies on"
"$python" tests/aws/verify_moto.py
took "verify_moto"

section "OpenTofu module against macp-aws/schema.json"
"$python" tests/aws/check_tofu.py
took "check_tofu"

# The server's stdin is this coprocess pipe: when the script ends, moto sees EOF and stops.
coproc MOTO { exec "$python" tests/aws/moto_macp.py --port 0 --exit-on-stdin-eof 2>/dev/null; }
read -r -t 60 line <&"${MOTO[0]}" || { echo "moto_server did not start"; exit 1; }
endpoint=${line#listening on }
echo "moto_server at $endpoint"

section "macp-testkit conformance on macp-aws (moto)"
# Property tests create fresh tables per case; moto is far slower than DynamoDB at that, so they
# run 32 cases here (MACP_AWS_PROPTEST_CASES) instead of the 256 of the in-process backends.
MACP_AWS_TEST_ENDPOINT="$endpoint" MACP_PROPTEST_CASES="${MACP_AWS_PROPTEST_CASES:-32}" \
  cargo test -p macp-aws --test conformance -- --ignored
took "AWS conformance"

section "two macp servers on one moto, three agents spread over both, plus a fresh agent"
cargo build --quiet -p macp-mcp --bin macp --features aws
curl -fsS -X POST "$endpoint/moto-api/reset" >/dev/null
"$python" tests/e2e/mcp_e2e.py --macp "$target/debug/macp" --aws-endpoint "$endpoint" --servers 2
took "multi-instance"

section "failover: two servers behind a round-robin proxy, one crashed and one replaced mid-investigation"
curl -fsS -X POST "$endpoint/moto-api/reset" >/dev/null
"$python" tests/e2e/failover_e2e.py --macp "$target/debug/macp" --aws-endpoint "$endpoint"
took "failover"

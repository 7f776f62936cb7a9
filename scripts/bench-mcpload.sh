#!/usr/bin/env bash
# The "Through the binary" figures of BENCHMARKS.md: the release `macp serve` driven over real
# connections by the independent load generator ../shared/bench/mcpload (rmcp 3.11 client), with
# its minimal rmcp server (echo-server) as the floor, in one run.
#
#   bash scripts/bench-mcpload.sh            # about 5 minutes on 2 cores (plus builds)
#   bash scripts/bench-mcpload.sh --soak     # and the 10-minute soak, 32 agents
#   bash scripts/bench-mcpload.sh --soak-aws # only the 5-minute soak on the AWS backend (moto), 8 agents
#   bash scripts/bench-mcpload.sh --feed     # only the room feed's wake-up figures (examples/feed_bench.rs)
#   bash scripts/bench-mcpload.sh --feed-aws # the same across two servers on one moto
#   bash scripts/bench-mcpload.sh --redaction # post_finding with the redactor on and with every kind off
#
# The load generator is built outside the tree (MCPLOAD_DIR, default ../shared/bench/mcpload;
# its build goes to MCPLOAD_TARGET, default ~/.cache/macp/mcpload-target). Every run gets a fresh
# data directory. "server" columns are the tool's own time from the server's log line (what the
# SDK call costs inside the binary); "added" is end-to-end minus that: the MCP transport, JSON
# and the client's work.
set -euo pipefail
cd "$(dirname "$0")/.."

soak=false
[ "${1:-}" = "--soak" ] && soak=true
if [ "${1:-}" = "--feed" ]; then
  # The room feed's wake-up figures on the embedded default (examples/feed_bench.rs).
  target="${CARGO_TARGET_DIR:-target}"
  cargo build --release --quiet -p macp-mcp --bin macp -p macp-examples --bin feed-bench
  "$target/release/feed-bench" --macp "$target/release/macp" "${@:2}"
  exit 0
fi
if [ "${1:-}" = "--feed-aws" ]; then
  # The same with two servers on one moto: a write on one wakes a reader on the other.
  target="${CARGO_TARGET_DIR:-target}"
  python=$(bash scripts/setup-e2e.sh | tail -n 1)
  cargo build --release --quiet -p macp-mcp --bin macp --features aws -p macp-examples --bin feed-bench
  export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-west-2
  coproc MOTO { exec "$python" tests/aws/moto_macp.py --port 0 --exit-on-stdin-eof 2>/dev/null; }
  read -r line <&"${MOTO[0]}"
  export MACP_AWS_ENDPOINT_URL=${line#listening on } MACP_AWS_TABLE_PREFIX=feed-
  "$target/release/macp" setup --backend aws >/dev/null
  "$target/release/feed-bench" --macp "$target/release/macp" --servers 2 --waiters 50 --wakes 50 \
    --idle-seconds 10 --server-arg --backend --server-arg aws "${@:2}"
  exit 0
fi
if [ "${1:-}" = "--soak-aws" ]; then
  # The AWS backend on moto (scripts/aws-tests.sh starts it the same way), 32 agents, 5 minutes.
  target="${CARGO_TARGET_DIR:-target}"
  python=$(bash scripts/setup-e2e.sh | tail -n 1)
  cargo build --release --quiet -p macp-mcp --bin macp --features aws
  cargo build --release --quiet -p macp-examples --bin soak
  export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-west-2
  coproc MOTO { exec "$python" tests/aws/moto_macp.py --port 0 --exit-on-stdin-eof 2>/dev/null; }
  read -r line <&"${MOTO[0]}"
  export MACP_AWS_ENDPOINT_URL=${line#listening on } MACP_AWS_TABLE_PREFIX=soak-
  "$target/release/macp" setup --backend aws >/dev/null
  # moto serves one request at a time: 8 agents keep it busy without only measuring its queue.
  echo "### Soak: 8 agents, 5 minutes, AWS backend on moto ($MACP_AWS_ENDPOINT_URL)"
  echo '```'
  "$target/release/soak" --macp "$target/release/macp" --agents 8 --seconds 300 \
    --server-arg --backend --server-arg aws
  echo '```'
  exit 0
fi
mcpload_dir="${MCPLOAD_DIR:-../shared/bench/mcpload}"
redaction=false
[ "${1:-}" = "--redaction" ] && redaction=true
if [ ! -f "$mcpload_dir/Cargo.toml" ]; then
  echo "no load generator at $mcpload_dir (set MCPLOAD_DIR)"; exit 1
fi
mcpload_target="${MCPLOAD_TARGET:-$HOME/.cache/macp/mcpload-target}"
(cd "$mcpload_dir" && CARGO_TARGET_DIR="$mcpload_target" cargo build --release --quiet)
B="$mcpload_target/release"
target="${CARGO_TARGET_DIR:-target}"
cargo build --release --quiet -p macp-mcp --bin macp
$redaction || cargo build --release --quiet -p macp-examples --bin soak
M="$target/release/macp"
W="$mcpload_dir/workloads"
L=benches/mcpload
work=$(mktemp -d)
pids=()
cleanup() {
  # Wait for each stopped server: on SIGTERM it writes its kept indexes into $work.
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# start NAME [args]: a fresh server on a free port; sets $url and $pid.
start() {
  local name=$1; shift
  "$M" serve --bind 127.0.0.1:0 --data-dir "$work/$name" "$@" >"$work/$name.log" 2>&1 &
  pid=$!; pids+=("$pid")
  for _ in $(seq 1 100); do
    url=$(grep -m1 -o 'http://[^ ]*/mcp' "$work/$name.log" || true)
    [ -n "$url" ] && return 0
    sleep 0.1
  done
  echo "server $name did not start"; cat "$work/$name.log"; exit 1
}

# load WORKLOAD CLIENTS [N]: one mcpload run; prints "calls/s p50 p99 errors lost calls
# client-CPU-µs-per-call".
load() {
  local n=${3:+-n $3}
  # A run that fails prints its own error instead of a summary: show it, and stop.
  if ! "$B/mcpload" --http "$url" -w "$1" -c "$2" $n --max-seconds 900 >"$work/mcpload.out" 2>"$work/mcpload.err"; then
    echo "mcpload failed on $1:" >&2; cat "$work/mcpload.err" "$work/mcpload.out" >&2; exit 1
  fi
  tail -n 1 "$work/mcpload.out" \
    | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); l=d["latency_ms"]; print(d["calls_per_s"], l["p50"], l["p99"], d["errors"], d.get("lost_writes", 0), d["calls"], round(d["client_cpu_us_per_call"]))'
}

# server_ms LOG TOOL: median of the server's own time for the tool's calls.
server_ms() {
  python3 - "$1" "$2" <<'PY'
import json, sys
ms = sorted(json.loads(l)["fields"]["ms"] for l in open(sys.argv[1]) if f'"tool":"{sys.argv[2]}"' in l)
print(f"{ms[len(ms)//2]:.3f}" if ms else "nan")
PY
}

# cpu_us PID: the process's CPU time so far (user + system), in µs.
cpu_us() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.0f", ($14 + $15) * 1000000 / hz}' "/proc/$1/stat"; }
# per_call BEFORE PID CALLS: the process's CPU per call since BEFORE, in µs.
per_call() { echo $(( ($(cpu_us "$2") - $1) / $3 )); }

rss_mb() { awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$1/status"; }


if $redaction; then
  # What the redactor costs a post through the binary: two servers, one with every built-in kind
  # on (the default) and one with every kind off (it then reads nothing), loaded in turn, five
  # rounds of 3,000 posts from one client each.
  off=$(python3 -c 'import re,sys; s=open("macp-core/src/redact.rs").read(); b=s[s.index("pub const KINDS"):]; b=b[:b.index("];")]; print(",".join(re.findall(r"\"([a-z0-9-]+)\"", b)))')
  # Both from the built-in defaults, whatever this shell's environment configures.
  unset MACP_REDACT_OFF MACP_CONFIG
  start on; on_pid=$pid; on_url=$url
  start off --redact-off "$off"; off_pid=$pid; off_url=$url
  echo "## post_finding through the release binary: redactor on, and every kind off ($(date -u +%Y-%m-%d), $(nproc) cores, 1 client)"
  echo
  echo "| round | server | calls/s | median ms | p99 ms | errors / lost | server CPU µs/call |"
  echo "|---|---|---|---|---|---|---|"
  for r in 1 2 3 4 5; do
    for side in on off; do
      if [ "$side" = on ]; then pid=$on_pid url=$on_url; else pid=$off_pid url=$off_url; fi
      c0=$(cpu_us "$pid")
      read -r cps p50 p99 err lost calls ccpu < <(load "$W/macp-post-finding.json" 1 3000)
      printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$r" "$side" "$cps" "$p50" "$p99" "$err / $lost" "$(per_call "$c0" "$pid" "$calls")"
    done
  done
  exit 0
fi

echo "## mcpload against the release binary, $(date -u +%Y-%m-%d), $(nproc) cores"
echo
# CPU per call, client and server, says what a goal would need: one client waits for each answer,
# so its calls/s cannot pass 1 / (client CPU + server CPU + the wire), and on two shared cores
# many clients cannot pass 2 s / (client CPU + server CPU) per second.
echo "| what | clients | calls/s | median ms | p99 ms | errors / lost | client CPU µs/call | server CPU µs/call |"
echo "|---|---|---|---|---|---|---|---|"
row() { printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$@"; }
"$B/echo-server" >"$work/echo.url" & pid=$!; pids+=("$pid")
sleep 0.5
url=$(cat "$work/echo.url")
# The floor with one client, and with eight: what any rmcp server reaches on this machine with
# this client, before doing any work.
for c in 1 8; do
  c0=$(cpu_us "$pid")
  read -r cps p50 p99 err lost calls ccpu < <(load "$W/echo-note.json" "$c" $((c == 1 ? 4000 : 16000)))
  row "floor: echo-server \`note\`" "$c" "$cps" "$p50" "$p99" "$err / $lost" "$ccpu" "$(per_call "$c0" "$pid" "$calls")"
done
for c in 1 8; do
  start "post$c"
  c0=$(cpu_us "$pid")
  read -r cps p50 p99 err lost calls ccpu < <(load "$W/macp-post-finding.json" "$c" $((c == 1 ? 4000 : 16000)))
  row "\`post_finding\` (durable, indexed inline)" "$c" "$cps" "$p50" "$p99" "$err / $lost" "$ccpu" "$(per_call "$c0" "$pid" "$calls")"
  kill "$pid"; wait "$pid" 2>/dev/null || true
done
start summary
c0=$(cpu_us "$pid")
read -r cps p50 p99 err lost calls ccpu < <(load "$W/macp-room-summary.json" 1 4000)
row "\`get_room_summary\`" 1 "$cps" "$p50" "$p99" "$err / $lost" "$ccpu" "$(per_call "$c0" "$pid" "$calls")"
kill "$pid"; wait "$pid" 2>/dev/null || true

echo
echo "### One room of 100,000 findings"
echo
start big
t0=$(date +%s)
read -r cps p50 p99 err lost _ _ < <(load "$W/macp-post-finding.json" 8 100000)
echo "Loaded with 8 clients in $(( $(date +%s) - t0 )) s: $cps posts/s, p50 $p50 ms, p99 $p99 ms, errors $err, lost $lost; RSS $(rss_mb "$pid") MB before any search."
echo
echo "| call | median ms | p99 ms | server median ms | added by MCP ms | client CPU µs/call | server CPU µs/call |"
echo "|---|---|---|---|---|---|---|"
for w in search-common search-note room-context updates-page updates-idle; do
  cp "$work/big.log" "$work/before.log"
  c0=$(cpu_us "$pid")
  read -r cps p50 p99 err lost calls ccpu < <(load "$L/$w.json" 1)
  tool=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["call"]["tool"])' "$L/$w.json")
  tail -n +"$(( $(wc -l <"$work/before.log") + 1 ))" "$work/big.log" >"$work/part.log"
  s=$(server_ms "$work/part.log" "$tool")
  printf '| `%s` | %s | %s | %s | %s | %s | %s |\n' "$w" "$p50" "$p99" "$s" "$(python3 -c "print(f'{$p50 - $s:.3f}')")" \
    "$ccpu" "$(per_call "$c0" "$pid" "$calls")"
done
echo
echo "RSS with the room's search indexes loaded: $(rss_mb "$pid") MB."
kill "$pid"; wait "$pid" 2>/dev/null || true
# Restart on the same data: the time to the first search answer, from the moment the server
# says it is listening, and from the moment it was started. The server above was stopped with
# SIGTERM, so it kept its indexes (SqliteStore::keep_indexes); a SIGKILL keeps nothing, and the
# server after it loads the room from the database.
restart() {
  local t0 t1
  t0=$(date +%s%N)
  "$M" serve --bind 127.0.0.1:0 --data-dir "$work/big" >"$work/big2.log" 2>&1 & pid=$!; pids+=("$pid")
  for _ in $(seq 1 1000); do
    url=$(grep -m1 -o 'http://[^ ]*/mcp' "$work/big2.log" || true); [ -n "$url" ] && break; sleep 0.005
  done
  t1=$(date +%s%N)
  read -r cps p50 p99 err lost _ _ < <(load "$L/search-common.json" 1 1)
  echo "After a restart ($1): listening $(( (t1 - t0) / 1000000 )) ms after the start; the first search answered in $p50 ms after that; $(python3 -c '
import json,sys
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    m = json.loads(l)["fields"]
    if "read back" in m["message"]: print("indexes kept at the last stop read back before listening"); break
    if "indexes loaded" in m["message"]: print("indexes loaded from the database in", m["ms"], "ms"); break
else: print("(indexes not loaded yet)")' "$work/big2.log"); RSS $(rss_mb "$pid") MB."
  echo
}
restart "SIGTERM before: indexes kept"
kill "$pid"; wait "$pid" 2>/dev/null || true
echo "Kept at that stop: $(python3 -c '
import json,sys
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    m = json.loads(l)["fields"]
    if "kept for the next start" in m["message"]: print(m["bytes"] // 1000000, "MB written in", m["ms"], "ms")' "$work/big2.log")."
echo
restart "SIGTERM before: indexes kept"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
restart "SIGKILL before: nothing kept"
kill "$pid"; wait "$pid" 2>/dev/null || true

if $soak; then
  echo
  echo "### Soak: 32 agents, 10 minutes, embedded default"
  echo '```'
  "$target/release/soak" --macp "$M" --agents 32 --seconds 600
  echo '```'
fi

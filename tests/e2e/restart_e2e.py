#!/usr/bin/env python3
"""End-to-end: an MCP session (2025-11-25) outlives its server on the embedded default.

    python tests/e2e/restart_e2e.py --macp target/debug/macp

One `macp serve` on SQLite (auth off) on a fixed loopback port. A Python `mcp` client opens a
session, creates a room, joins it once and posts. The server is killed (SIGKILL, a crash) and
started again on the same port and data directory; the same client, in the same session, posts
again without naming its agent. Then the server is stopped gracefully (SIGTERM) and started
again, and the client posts a third time. Checks: each post answered, attributed to the agent
the session joined as; the room holds exactly the three findings, in order, and one join; the
client's session id never changed; once the client ends its session (DELETE), the restarted
server refuses it (404).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcp_e2e import Failure, call, expect, session  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(macp: str, port: int, data_dir: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [macp, "serve", "--bind", f"127.0.0.1:{port}", "--data-dir", data_dir],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("listening on "):
            return proc
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise Failure(f"macp serve did not start on port {port}")


async def run(macp: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with tempfile.TemporaryDirectory() as data_dir:
        server = start(macp, port, data_dir)
        try:
            http, client = await session(url, None)
            ids: set[str] = set()

            async def note_session(r: httpx2.Request) -> None:
                ids.add(r.headers.get("mcp-session-id", ""))

            http.event_hooks["request"] = [note_session]
            async with http, client:
                room = (await call(client, "create_room", {"objective": "Does a session outlive its server?"}))[
                    "room_id"
                ]
                await call(client, "join_room", {"room_id": room, "agent_id": "keeper"})
                posted = []

                async def post(text: str) -> None:
                    r = await call(client, "post_finding", {"room_id": room, "content": text})
                    expect(r["finding"]["agent_id"] == "keeper", f"posted as {r['finding']['agent_id']}, not keeper")
                    posted.append(r["finding"]["finding_id"])

                await post("before the crash: p99 latency of checkout rose at 09:41")
                server.send_signal(signal.SIGKILL)
                server.wait()
                server = start(macp, port, data_dir)
                await post("after the crash: the session carried on without joining again")
                server.send_signal(signal.SIGTERM)
                expect(server.wait(20) == 0, "macp serve did not exit 0 on SIGTERM")
                server = start(macp, port, data_dir)
                await post("after a graceful restart: still the same session")

                feed = await call(client, "get_updates", {"room_id": room})
                seen = [f["finding_id"] for f in feed["findings"]]
                expect(seen == posted, f"the room holds {seen}, expected exactly {posted}")
                summary = await call(client, "get_room_summary", {"room_id": room})
                expect(summary["agents"]["total"] == 1, f"agents in the room: {summary['agents']}")
            sid = {i for i in ids if i}
            expect(len(sid) == 1, f"the client used {len(sid)} session ids: {sid}")
            # The client ended its session on exit (DELETE): the server refuses it from now on.
            body = '{"jsonrpc": "2.0", "id": 9, "method": "tools/list"}'
            headers = {
                "content-type": "application/json", "accept": "application/json, text/event-stream",
                "mcp-protocol-version": "2025-11-25", "mcp-session-id": sid.pop(),
            }
            async with httpx2.AsyncClient() as raw:
                r = await raw.post(url, content=body, headers=headers)
            expect(r.status_code == 404, f"an ended session answered {r.status_code}")
        finally:
            server.kill()
            server.wait()
    print("restart e2e: one session, three posts across a crash and a graceful restart, ended: ok")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--macp", required=True)
    args = ap.parse_args()
    try:
        asyncio.run(run(args.macp))
    except Failure as e:
        print(f"restart e2e FAILED: {e}")
        sys.exit(1)
    except BaseExceptionGroup as g:  # a Failure raised inside the client's task group
        failures = [str(e) for e in g.exceptions if isinstance(e, Failure)]
        print(f"restart e2e FAILED: {'; '.join(failures) or g!r}")
        sys.exit(1)


if __name__ == "__main__":
    main()

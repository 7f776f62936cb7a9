#!/usr/bin/env python3
"""stdio transport and the human-facing commands, on one data directory.

    python tests/e2e/stdio_cli.py --macp target/debug/macp

A Python `mcp` client starts `macp serve --stdio` as a subprocess (one local user), creates a
room and posts findings; then `macp rooms`, `macp timeline`, `macp search`, `macp reconcile` and `macp backup`
read the same data directory and must show what was written.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile

from mcp import Client, StdioServerParameters

FINDINGS = [
    ("Disk on the logging volume of ip-10-0-3-17 is 97% full since 02:00.", ["evidence"]),
    ("The log rotation cron job was removed by commit 4f2a9c1.", ["root-cause"]),
    ("Restoring the cron job frees 40 GB within minutes.", ["remediation"]),
]


def fail(msg: str) -> None:
    print(f"STDIO/CLI FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


async def write(macp: str, data_dir: str) -> str:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"), "MACP_LOG": "warn"}
    params = StdioServerParameters(command=macp, args=["serve", "--stdio", "--data-dir", data_dir, "--local-user", "alice"], env=env)
    async with Client(params, mode="legacy") as c:
        tools = await c.list_tools()
        if len(tools.tools) < 15:
            fail(f"stdio server lists {len(tools.tools)} tools")
        r = await c.call_tool("create_room", {"objective": "Why is the logging disk full?", "name": "disk-full"})
        room = r.structured_content["room_id"]
        r = await c.call_tool("join_room", {"room_id": room, "agent_id": "cli-check"})
        if r.structured_content["user_id"] != "alice":
            fail(f"stdio acts for the local user, got {r.structured_content['user_id']}")
        for content, tags in FINDINGS:
            r = await c.call_tool("post_finding", {"room_id": room, "content": content, "tags": tags})
            if r.is_error:
                fail(r.content[0].text)
        return room


def run(macp: str, data_dir: str, *args: str) -> str:
    out = subprocess.run([macp, *args, "--data-dir", data_dir], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        fail(f"macp {' '.join(args)} exited {out.returncode}: {out.stderr}")
    return out.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--macp", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        room = asyncio.run(write(args.macp, d))
        rooms = run(args.macp, d, "rooms")
        if room not in rooms or "disk-full" not in rooms:
            fail(f"`macp rooms` does not list the room:\n{rooms}")
        timeline = run(args.macp, d, "timeline", room)
        for content, _ in FINDINGS:
            if content not in timeline:
                fail(f"`macp timeline` lacks {content!r}:\n{timeline}")
        lines = [json.loads(l) for l in run(args.macp, d, "timeline", room, "--json").splitlines()]
        if [f["seq"] for f in lines] != [1, 2, 3] or any(f["user_id"] != "alice" for f in lines):
            fail(f"`macp timeline --json` gave {lines}")
        found = json.loads(run(args.macp, d, "search", room, "which change stopped old logs from being cleaned up", "--json"))
        top = found["results"][0]["finding"]["content"]
        if "cron" not in top:
            fail(f"`macp search` ranked {top!r} first")
        rec = run(args.macp, d, "reconcile")
        if "indexed 0 pending findings" not in rec:
            fail(f"`macp reconcile`: {rec}")
        # A backup is a data directory of its own: the same record, readable by every command.
        copy = os.path.join(d, "backup-1")
        out = run(args.macp, d, "backup", copy)
        if "database" not in out:
            fail(f"`macp backup`: {out}")
        if run(args.macp, copy, "timeline", room, "--json") != run(args.macp, d, "timeline", room, "--json"):
            fail("the backup's timeline differs from the original's")
        again = subprocess.run([args.macp, "backup", copy, "--data-dir", d], capture_output=True, text=True, timeout=60)
        if again.returncode == 0 or "not empty" not in again.stderr:
            fail(f"a second backup into the same directory must be refused: {again.stderr}")
        print(json.dumps({"ok": True, "room": room, "search_top": top, "backup": out.strip()}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Artifacts end to end through `macp serve`: one agent uploads a file with curl to the URL it
was given and registers it linked to a finding; a second agent lists the room's artifacts and
downloads the same bytes with plain HTTP. Negative paths: wrong size, wrong type, tampered
signature, another room's key, path-like filenames, a key never uploaded.

    python tests/e2e/artifacts_e2e.py --macp target/debug/macp
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile

import httpx2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcp_e2e  # noqa: E402
from mcp_e2e import Failure, call, expect, session  # noqa: E402


async def tool_error(client, tool: str, args: dict) -> dict:
    r = await client.call_tool(tool, args)
    expect(bool(r.is_error), f"{tool} should have failed: {r.structured_content}")
    return r.structured_content["error"]


async def run(url: str, work: str) -> dict:
    body = ("".join(f"{i} 2026-11-30T09:41:{i % 60:02d}Z checkout-7f9 connection pool timeout\n" for i in range(5000))).encode()
    path = os.path.join(work, "pool-timeouts.log")
    open(path, "wb").write(body)
    http_a, a = await session(url, None)
    http_b, b = await session(url, None)
    async with http_a, a, http_b, b, httpx2.AsyncClient(timeout=30) as plain:
        room = (await call(a, "create_room", {"objective": "Attach the evidence"}))["room_id"]
        other_room = (await call(a, "create_room", {"objective": "Another investigation"}))["room_id"]
        await call(a, "join_room", {"room_id": room, "agent_id": "uploader"})
        await call(a, "join_room", {"room_id": other_room, "agent_id": "uploader-2"})
        await call(b, "join_room", {"room_id": room, "agent_id": "reader"})
        finding = (await call(a, "post_finding", {"room_id": room, "agent_id": "uploader", "content": "Pool timeouts from 09:41, log attached."}))["finding"]
        ticket = await call(a, "request_artifact_upload", {"room_id": room, "agent_id": "uploader", "filename": "pool-timeouts.log",
                                                          "content_type": "text/plain", "size": len(body)})
        expect(ticket["method"] == "PUT" and ticket["key"].startswith(f"rooms/{room}/"), f"ticket {ticket}")

        # Negative uploads first: each is refused and stores nothing.
        r = await plain.put(ticket["upload_url"], content=body + b"x", headers={"Content-Type": "text/plain"})
        expect(r.status_code == 403, f"wrong size answered {r.status_code}")
        r = await plain.put(ticket["upload_url"], content=body, headers={"Content-Type": "text/html"})
        expect(r.status_code == 403, f"wrong type answered {r.status_code}")
        bad = ticket["upload_url"][:-1] + ("A" if ticket["upload_url"][-1] != "A" else "B")
        r = await plain.put(bad, content=body, headers={"Content-Type": "text/plain"})
        expect(r.status_code == 403, f"tampered signature answered {r.status_code}")
        err = await tool_error(a, "register_artifact", {"room_id": room, "agent_id": "uploader", "key": ticket["key"]})
        expect(err["code"] == "not_found", f"a key never uploaded: {err}")

        # The real upload, with curl, exactly as an agent would run it.
        headers = sum((["-H", f"{k}: {v}"] for k, v in ticket["headers"].items() if k.lower() != "content-length"), [])
        out = subprocess.run(["curl", "-sS", "-X", "PUT", *headers, "--data-binary", f"@{path}", "-o", "/dev/null",
                              "-w", "%{http_code}", ticket["upload_url"]], capture_output=True, text=True, timeout=60)
        expect(out.stdout.strip() == "200", f"curl upload answered {out.stdout} {out.stderr}")
        reg = await call(a, "register_artifact", {"room_id": room, "agent_id": "uploader", "key": ticket["key"],
                                                  "description": "connection pool timeouts, 09:41-09:49",
                                                  "linked_finding_ids": [finding["finding_id"]], "idempotency_key": "att-1"})
        expect(reg["artifact"]["size"] == len(body) and reg["artifact"]["content_type"] == "text/plain", f"registered {reg}")
        again = await call(a, "register_artifact", {"room_id": room, "agent_id": "uploader", "key": ticket["key"],
                                                    "description": "connection pool timeouts, 09:41-09:49",
                                                    "linked_finding_ids": [finding["finding_id"]], "idempotency_key": "att-1"})
        expect(again["replayed"], "register is idempotent")
        # Another room's key, and path-like names, are refused.
        err = await tool_error(a, "register_artifact", {"room_id": other_room, "agent_id": "uploader-2", "key": ticket["key"]})
        expect(err["code"] == "invalid_input", f"another room's key: {err}")
        for name in ["../../etc/passwd", "logs/app.log", "..\\\\win.ini"]:
            err = await tool_error(a, "request_artifact_upload", {"room_id": room, "agent_id": "uploader", "filename": name,
                                                                  "content_type": "text/plain", "size": 3})
            expect(err["code"] == "invalid_input" and err.get("field") == "filename", f"{name!r}: {err}")

        # The second agent lists and downloads the same bytes.
        listed = await call(b, "list_artifacts", {"room_id": room, "finding_id": finding["finding_id"]})
        expect(len(listed["artifacts"]) == 1, f"listed {listed}")
        art = listed["artifacts"][0]
        r = await plain.get(art["download_url"])
        expect(r.status_code == 200 and r.content == body, f"download {r.status_code}, {len(r.content)} bytes")
        expect(r.headers.get("content-type") == "text/plain", f"download type {r.headers.get('content-type')}")
        r = await plain.get(art["download_url"].replace("sig=", "sig=x"))
        expect(r.status_code == 403, f"tampered download answered {r.status_code}")
        return {"ok": True, "key": ticket["key"], "bytes": len(body)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--macp", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        proc, url = mcp_e2e.start_server(args.macp, os.path.join(d, "data"), [], {})
        try:
            print(json.dumps(asyncio.run(run(url, d))))
        except Failure as e:
            print(f"ARTIFACTS E2E FAILED: {e}", file=sys.stderr)
            sys.exit(1)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)


if __name__ == "__main__":
    main()

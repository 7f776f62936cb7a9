"""The room's event feed through real MCP clients (the Python `mcp` package) on a real
`macp serve`:

1. push, 2025-11-25 sessions: `resources/subscribe` to `macp://rooms/{id}`, then one
   `notifications/resources/updated` per change another client makes; `resources/read` of the
   room gives its bounded context;
2. push, 2026-07-28 (stateless): `subscriptions/listen` naming the room resource gets
   `notifications/resources/updated` for it when another client writes;
3. a waiting `get_updates` (`wait_seconds`) answers as soon as another client's change commits;
4. the issue's scenario: an agent that only runs the documented loop (get_updates with its
   cursor, acknowledging what it processed) sees every change once, and a restarted client
   without its cursor continues from its read position.

Usage: feed_e2e.py --macp target/debug/macp
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import warnings

import mcp_types as types
from mcp import Client

from mcp_e2e import Failure, call, expect, session, start_server


async def legacy_push(url: str, room: str) -> None:
    uri = f"macp://rooms/{room}"
    got: list[str] = []
    arrived = asyncio.Event()

    async def on_message(m) -> None:
        if isinstance(m, types.ResourceUpdatedNotification):
            got.append(str(m.params.uri))
            arrived.set()

    http, watcher = await session(url, None)
    watcher.message_handler = on_message
    http2, writer = await session(url, None)
    async with http, watcher, http2, writer:
        templates = await watcher.list_resource_templates()
        expect(any(t.uri_template == "macp://rooms/{room_id}" for t in templates.resource_templates),
               "rooms are listed as a resource template")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await watcher.subscribe_resource(uri)
        await call(writer, "join_room", {"room_id": room, "agent_id": "pusher"})
        await call(writer, "post_finding", {"room_id": room, "content": "push: one"})
        await call(writer, "declare_status", {"room_id": room, "status": "blocked", "reason": "push: two"})
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), timeout=deadline - time.monotonic())
            except asyncio.TimeoutError:
                break
        expect(got == [uri] * 3, f"one notifications/resources/updated per change (join, post, status): {got}")
        read = await watcher.read_resource(uri)
        ctx = json.loads(read.contents[0].text)
        expect(ctx["room"]["room_id"] == room and ctx["findings"]["total"] >= 1, "reading the room gives its context")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await watcher.unsubscribe_resource(uri)
        await call(writer, "post_finding", {"room_id": room, "content": "after unsubscribe"})
        await asyncio.sleep(0.5)
        expect(len(got) == 3, f"nothing after unsubscribing: {got}")
    print("  legacy resources/subscribe: 3 changes, 3 notifications; unsubscribe stops them")


async def modern_push(url: str, room: str) -> None:
    uri = f"macp://rooms/{room}"
    http, listener = await session(url, None, mode="auto")
    http2, writer = await session(url, None)
    async with http, listener, http2, writer:
        expect(listener.protocol_version == "2026-07-28", f"negotiated {listener.protocol_version}")
        async with listener.listen(resource_subscriptions=[uri]) as sub:
            await call(writer, "join_room", {"room_id": room, "agent_id": "listen-writer"})
            await call(writer, "post_finding", {"room_id": room, "content": "listen: one"})
            event = await asyncio.wait_for(sub.__anext__(), timeout=10)
            expect(getattr(event, "uri", None) == uri, f"resource updated for the room: {event}")
    print("  2026-07-28 subscriptions/listen: notified of the room's change")


async def waiting_reader(url: str, room: str) -> None:
    http, reader = await session(url, None)
    http2, writer = await session(url, None)
    async with http, reader, http2, writer:
        await call(writer, "join_room", {"room_id": room, "agent_id": "wake-writer"})
        head = (await call(reader, "get_updates", {"room_id": room}))["cursor"]
        while True:
            u = await call(reader, "get_updates", {"room_id": room, "cursor": head})
            head = u["cursor"]
            if not u["has_more"]:
                break
        latencies = []
        for i in range(5):
            task = asyncio.create_task(
                call(reader, "get_updates", {"room_id": room, "cursor": head, "wait_seconds": 20}))
            await asyncio.sleep(0.3)
            expect(not task.done(), "the reader waits while nothing happens")
            t = time.monotonic()
            await call(writer, "post_finding", {"room_id": room, "content": f"wake {i}"})
            u = await asyncio.wait_for(task, timeout=10)
            latencies.append((time.monotonic() - t) * 1000)
            expect([f["content"] for f in u["findings"]] == [f"wake {i}"], f"woken with the post: {u}")
            head = u["cursor"]
    print(f"  waiting get_updates woken by another client's post: {', '.join(f'{x:.0f}' for x in latencies)} ms "
          "(post call + wake)")


async def the_loop_sees_everything(url: str, room: str) -> None:
    http, agent = await session(url, None)
    http2, other = await session(url, None)
    async with http, agent, http2, other:
        joined = await call(agent, "join_room", {"room_id": room, "agent_id": "looper"})
        expect("unread" in joined, "join_room says what is unread")
        await call(other, "join_room", {"room_id": room, "agent_id": "teammate"})
        await call(other, "declare_status", {"room_id": room, "status": "blocked", "reason": "need prod DB access"})
        a = await call(other, "add_entity", {"room_id": room, "name": "orders db", "type": "resource",
                                             "identifiers": [{"type": "hostname", "value": "db-1"}]})
        b = await call(other, "add_entity", {"room_id": room, "name": "orders database", "type": "resource",
                                             "identifiers": [{"type": "ip", "value": "10.0.0.9"}]})
        await call(other, "merge_entities", {"room_id": room, "winner_entity_id": a["entity"]["entity_id"],
                                             "loser_entity_id": b["entity"]["entity_id"]})
        ctx = await call(agent, "get_room_context", {"room_id": room})
        expect(ctx["unread"]["by_kind"].get("status_declared") == 1 or ctx["unread"]["total"] > 0,
               f"the context counts what is unread: {ctx.get('unread')}")
        seen: list[tuple[int, str]] = []
        cursor = None
        while True:
            args = {"room_id": room, "limit": 3}
            if cursor:
                args.update(cursor=cursor, ack=True)
            u = await call(agent, "get_updates", args)
            seen += [(e["seq"], e["kind"]) for e in u["events"]]
            seen += [(0, "finding_posted") for _ in u["findings"]]
            cursor = u["cursor"]
            if not u["has_more"]:
                break
        await call(agent, "get_updates", {"room_id": room, "cursor": cursor, "ack": True})
        kinds = [k for _, k in seen]
        for k in ("agent_joined", "status_declared", "entity_added", "entities_merged"):
            expect(k in kinds, f"the loop saw {k}: {kinds}")
        seqs = [s for s, _ in seen if s]
        expect(len(seqs) == len(set(seqs)), f"no change twice: {seqs}")
        await call(other, "close_room", {"room_id": room})
    # A new session continuing as the same agent, without a cursor: only what is new.
    http3, again = await session(url, None)
    async with http3, again:
        u = await call(again, "get_updates", {"room_id": room, "agent_id": "looper"})
        expect([e["kind"] for e in u["events"]] == ["room_closed"] and not u["findings"],
               f"a restarted client continues from its read position: {u}")
    print(f"  the documented loop saw all {len(seen)} changes once; a restarted client resumed at the close")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--macp", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        proc, url = start_server(args.macp, d, ["--embedder", "none"], {})
        try:
            http, c = await session(url, None)
            async with http, c:
                rooms = [(await call(c, "create_room", {"objective": f"feed e2e {i}"}))["room_id"] for i in range(4)]
            await legacy_push(url, rooms[0])
            await modern_push(url, rooms[1])
            await waiting_reader(url, rooms[2])
            await the_loop_sees_everything(url, rooms[3])
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)

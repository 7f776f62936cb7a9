#!/usr/bin/env python3
"""End-to-end: a real `macp serve`, three agents in separate processes using the Python `mcp`
client, and a fourth fresh agent that orients from get_room_context alone.

    python tests/e2e/mcp_e2e.py --macp target/debug/macp [--auth-env FILE]

The orchestrator starts the server on a free port, creates a room, runs the three agent
processes concurrently, then checks the record and runs the fresh agent. Exits non-zero on the
first broken expectation, printing what it expected and what it saw.

With --tokens FILE (JSON: {"url": ..., "server_args": [...], "tokens": {"user": "jwt", ...}}),
the server is started with those extra arguments and every agent sends its user's bearer
token: the same scenario then runs with OAuth on, and every finding must carry its user's id.

With --aws-endpoint URL (moto_server, see tests/aws/), `macp setup --backend aws` creates fresh
tables and buckets there and --servers N (default 2) `macp serve --backend aws` processes share
them: the agents are spread over the servers (agent i talks to server i mod N, the fresh agent to
the last), so every agent reads what agents on other servers wrote, each finding exactly once.
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
import threading
import time

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

AGENTS = {
    "ana": {
        "service": "checkout-api",
        "findings": [
            ("Checkout 502 rate rose from 0.1% to 14% at 09:41 UTC, right after deploy checkout-v7.", ["triage"]),
            ("checkout-api pods log 'timeout acquiring connection from pool' for orders-db-1 since 09:41.", ["evidence"]),
            ("Rolling checkout-api back to v6 in staging removes the pool timeouts.", ["hypothesis"]),
        ],
        "paraphrase_of": ("ben", 0),
        "query": "database refusing new clients because the connection limit was reached",
    },
    "ben": {
        "service": "orders-db",
        "findings": [
            ("orders-db-1 reports max_connections=500 reached; new connections are refused.", ["evidence"]),
            ("Connections per checkout pod went from 20 to 80: the v7 pool size was quadrupled.", ["root-cause"]),
            ("CPU and IOPS on orders-db-1 are normal; the outage is connection exhaustion, not load.", ["dead-end"]),
        ],
        "paraphrase_of": ("cho", 1),
        "query": "how to cap the pool so pods stop exhausting the database",
    },
    "cho": {
        "service": "payments-worker",
        "findings": [
            ("payments-worker retries amplify load: each failed checkout triggers three retries.", ["evidence"]),
            ("Set the checkout pool size back to 20 per pod and add a global cap of 400 connections.", ["remediation"]),
            ("No DNS or network changes in the window; VPC flow logs are clean.", ["dead-end"]),
        ],
        "paraphrase_of": ("ana", 0),
        "query": "error rate jumped right after the new release went out",
    },
}
SHARED_HOST = "orders-db-1.prod.internal"


class Failure(Exception):
    pass


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise Failure(what)


def http_client(token: str | None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))


async def call(client: Client, tool: str, args: dict) -> dict:
    r = await client.call_tool(tool, args)
    if r.is_error:
        raise Failure(f"{tool}({json.dumps(args)[:200]}) failed: {r.content[0].text}")
    expect(r.structured_content is not None, f"{tool} returned no structured content")
    return r.structured_content


async def session(url: str, token: str | None, mode: str = "legacy"):
    """A client. "legacy" negotiates an MCP session (2025-11-25, what Claude Code and Kiro use):
    writes then default to the agent the session joined with. "auto" lets the client pick the
    newest protocol (stateless 2026-07-28), where writes name their agent_id."""
    http = http_client(token)
    return http, Client(streamable_http_client(url, http_client=http), mode=mode)


# ----------------------------------------------------------------------------------------------
# One agent (runs in its own process)


async def agent_main(url: str, room: str, name: str, token: str | None) -> dict:
    me = AGENTS[name]
    http, client = await session(url, token)
    async with http, client:
        joined = await call(client, "join_room", {"room_id": room, "agent_id": name, "agent_type": "python-mcp"})
        await call(client, "get_room_context", {"room_id": room})
        # Poll from the beginning: this agent must see every finding, its own and the others',
        # exactly once. (The context's cursor would skip what the context already showed.)
        cursor = None
        # Every agent names the shared database host; they must converge on one entity.
        db = await call(client, "add_entity", {
            "room_id": room, "name": "orders database", "type": "resource",
            "identifiers": [{"type": "hostname", "value": SHARED_HOST if name != "ben" else SHARED_HOST.upper()}],
            "idempotency_key": f"{name}-db",
        })
        svc = await call(client, "add_entity", {
            "room_id": room, "name": me["service"], "type": "service",
            "identifiers": [{"type": "service", "value": me["service"]}],
        })
        await call(client, "add_relationship", {
            "room_id": room, "source_entity_id": svc["entity"]["entity_id"],
            "target_entity_id": db["entity"]["entity_id"], "relationship_type": "depends_on",
            "evidence": [{"kind": "log", "ref": f"{me['service']} connection config"}],
        })
        posted = []
        for i, (content, tags) in enumerate(me["findings"]):
            r = await call(client, "post_finding", {
                "room_id": room, "content": content, "tags": tags,
                "entity_refs": [svc["entity"]["entity_id"], db["entity"]["entity_id"]],
                "evidence": [{"kind": "url", "ref": f"https://grafana.example/{name}/{i}"}],
                "idempotency_key": f"{name}-{i}",
            })
            posted.append(r["finding"]["finding_id"])
        # A retry of the first post (network blip) writes nothing new.
        again = await call(client, "post_finding", {
            "room_id": room, "content": me["findings"][0][0], "tags": me["findings"][0][1],
            "entity_refs": [svc["entity"]["entity_id"], db["entity"]["entity_id"]],
            "evidence": [{"kind": "url", "ref": f"https://grafana.example/{name}/0"}],
            "idempotency_key": f"{name}-0",
        })
        expect(again["replayed"] and again["finding"]["finding_id"] == posted[0], "retry replays the first post")
        # Poll until every agent's findings arrived: each exactly once.
        seen: list[dict] = []
        deadline = time.monotonic() + 60
        while len(seen) < 9:
            expect(time.monotonic() < deadline, f"{name} saw only {len(seen)} of 9 findings")
            args = {"room_id": room} if cursor is None else {"room_id": room, "cursor": cursor}
            u = await call(client, "get_updates", args)
            seen.extend(u["findings"])
            cursor = u["cursor"]
            if not u["findings"]:
                await asyncio.sleep(0.2)
        ids = [f["finding_id"] for f in seen]
        expect(len(ids) == len(set(ids)) == 9, f"{name}: updates repeated or missed findings: {ids}")
        expect([f["seq"] for f in seen] == sorted(f["seq"] for f in seen), f"{name}: updates out of order")
        by_agent = {a: sum(f["agent_id"] == a for f in seen) for a in AGENTS}
        expect(by_agent == {a: 3 for a in AGENTS}, f"{name}: per-agent counts {by_agent}")
        # Search by meaning for a colleague's finding (no shared wording).
        who, idx = me["paraphrase_of"]
        target = next(f for f in seen if f["agent_id"] == who and f["content"] == AGENTS[who]["findings"][idx][0])
        res = await call(client, "search_findings", {"room_id": room, "query": me["query"], "limit": 3})
        top = [h["finding"]["finding_id"] for h in res["results"]]
        expect(target["finding_id"] in top, f"{name}: search {me['query']!r} top 3 {top} misses {target['content']!r}")
        await call(client, "declare_status", {"room_id": room, "status": "idle", "reason": "my lines are posted"})
        return {"agent": name, "user_id": joined["user_id"], "posted": posted, "db": db["entity"]["entity_id"], "search_top": top,
                "created_db": db["created"], "other_matches": db["other_matches"]}


# ----------------------------------------------------------------------------------------------
# Orchestrator


def aws_env(endpoint: str) -> dict:
    """The environment of `macp --backend aws` against an emulator, with a fresh name prefix."""
    return {
        "MACP_BACKEND": "aws", "MACP_EMBEDDER": "builtin", "MACP_AWS_ENDPOINT_URL": endpoint,
        "MACP_AWS_TABLE_PREFIX": f"e2e{os.getpid()}-{int(time.time())}-", "AWS_REGION": "us-west-2",
        "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
    }


def start_server(macp: str, data_dir: str, extra: list[str], env: dict) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [macp, "serve", "--bind", "127.0.0.1:0", "--data-dir", data_dir, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env},
    )
    deadline = time.monotonic() + 60
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("listening on "):
            # Keep draining both pipes: a server blocked on a full log pipe would look hung.
            for pipe in (proc.stdout, proc.stderr):
                threading.Thread(target=lambda p=pipe: [None for _ in p], daemon=True).start()
            return proc, line.split()[-1]
    proc.kill()
    raise Failure(f"server did not start: {proc.stderr.read() if proc.stderr else ''}")


async def orchestrate(args) -> None:
    tokens = {}
    extra: list[str] = []
    env: dict = {}
    if args.tokens:
        spec = json.load(open(args.tokens))
        tokens, extra, env = spec["tokens"], spec.get("server_args", []), spec.get("server_env", {})
    token_of = lambda user: tokens.get(user)  # noqa: E731
    n_servers = 1
    if args.aws_endpoint:
        env = {**env, **aws_env(args.aws_endpoint)}
        n_servers = args.servers
        setup = subprocess.run([args.macp, "setup"], env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
        expect(setup.returncode == 0, f"macp setup --backend aws failed: {setup.stderr.strip()}")
    with tempfile.TemporaryDirectory() as data_dir:
        servers = [start_server(args.macp, os.path.join(data_dir, f"s{i}"), extra, env) for i in range(n_servers)]
        urls = [u for _, u in servers]
        url = urls[0]
        try:
            t0 = time.monotonic()
            http, admin = await session(url, token_of("ana"))
            async with http, admin:
                room = (await call(admin, "create_room", {
                    "name": "checkout-502", "objective": "Find why checkout returns 502s since 09:41 UTC and what fixes it.",
                    "tags": ["sev-2"],
                }))["room_id"]
            procs = [
                subprocess.Popen([sys.executable, __file__, "agent", urls[i % n_servers], room, name, token_of(name) or ""],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i, name in enumerate(AGENTS)
            ]
            results, failures = [], []
            for name, p in zip(AGENTS, procs):
                out, err = p.communicate(timeout=180)
                if p.returncode != 0:
                    reason = next((l for l in reversed(err.splitlines()) if "Failure:" in l or "Error" in l), err.strip()[-500:])
                    failures.append(f"{name}: {reason.strip()}")
                else:
                    results.append(json.loads(out.strip().splitlines()[-1]))
            if failures:
                raise Failure("agent processes failed:\n  " + "\n  ".join(failures))
            dbs = {r["db"] for r in results}
            expect(len(dbs) == 1, f"agents did not converge on one database entity: {dbs}")
            expect(sum(r["created_db"] for r in results) == 1, "exactly one agent created the shared entity")
            if tokens:
                for r in results:
                    expect(r["user_id"] == r["agent"], f"agent {r['agent']} joined as user {r['user_id']}")
            # The fourth, fresh agent orients from the context alone.
            http, fresh = await session(urls[-1], token_of("dee"), mode="auto")
            async with http, fresh:
                ctx = await call(fresh, "get_room_context", {"room_id": room})
                expect("502" in ctx["room"]["objective"], "context carries the objective")
                expect(ctx["findings"]["total"] == 9, f"context total {ctx['findings']['total']}")
                authors = {f["agent_id"] for f in ctx["findings"]["items"]}
                expect(authors == set(AGENTS), f"context shows findings of every agent: {authors}")
                expect(ctx["tag_counts"].get("dead-end") == 2 and ctx["tag_counts"].get("root-cause") == 1, f"tag counts {ctx['tag_counts']}")
                statuses = {a["agent_id"]: a["agent_status"] for a in ctx["agents"]["items"]}
                expect(statuses == {a: "idle" for a in AGENTS}, f"statuses {statuses}")
                db = next(e for e in ctx["entities"]["items"] if any(i["value"] == SHARED_HOST.lower() for i in e["identifiers"]))
                expect(db["degree"] == 3, f"the database has 3 dependents, degree {db['degree']}")
                await call(fresh, "join_room", {"room_id": room, "agent_id": "dee", "agent_type": "python-mcp"})
                # Stateless (2026-07-28): no session remembers the join, so a write that does not
                # name its agent is refused with what to do, and writes nothing.
                anon = await fresh.call_tool("post_finding", {"room_id": room, "content": "who am I?"})
                expect(anon.is_error and anon.structured_content["error"]["code"] == "not_joined"
                       and "agent_id" in anon.structured_content["error"]["message"],
                       f"a stateless write without agent_id: {anon.content[0].text}")
                follow = await call(fresh, "post_finding", {
                    "room_id": room, "agent_id": "dee", "tags": ["follow-up"], "entity_refs": [db["entity_id"]],
                    "content": "Follow-up: add an alarm on orders-db-1 connections above 80% of max_connections.",
                })
                u = await call(fresh, "get_updates", {"room_id": room, "cursor": ctx["cursor"]})
                expect([f["finding_id"] for f in u["findings"]] == [follow["finding"]["finding_id"]],
                       "polling from the context cursor returns exactly the new finding")
                graph = await call(fresh, "get_entity_graph", {"room_id": room, "entity_id": db["entity_id"], "depth": 1})
                deps = sorted(e["entity"]["name"] if "entity" in e else e["name"] for e in graph["entities"][1:])
                expect(deps == sorted(a["service"] for a in AGENTS.values()), f"graph neighbours {deps}")
                timeline = await call(fresh, "get_timeline", {"room_id": room, "limit": 200})
                users = {f["agent_id"]: f["user_id"] for f in timeline["findings"]}
                if tokens:
                    expect(all(users[a] == a for a in AGENTS) and users["dee"] == "dee", f"findings attributed to users: {users}")
            elapsed = time.monotonic() - t0
            print(json.dumps({"ok": True, "urls": urls, "room": room, "seconds": round(elapsed, 2),
                              "auth": bool(tokens), "search_tops": {r["agent"]: r["search_top"] for r in results}}))
        finally:
            for proc, _ in servers:
                proc.send_signal(signal.SIGTERM)
            codes = []
            for proc, _ in servers:
                try:
                    codes.append(proc.wait(timeout=20))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    raise Failure("server did not shut down within 20 s of SIGTERM")
        expect(codes == [0] * n_servers, f"servers exited with {codes} after SIGTERM")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "agent":
        _, _, url, room, name, token = sys.argv
        out = asyncio.run(agent_main(url, room, name, token or None))
        print(json.dumps(out))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--macp", required=True, help="path to the macp binary")
    ap.add_argument("--tokens", help="JSON file with server_args and per-user bearer tokens")
    ap.add_argument("--aws-endpoint", help="run on --backend aws against this emulator endpoint (moto)")
    ap.add_argument("--servers", type=int, default=2, help="with --aws-endpoint: how many servers share the tables")
    args = ap.parse_args()
    try:
        asyncio.run(orchestrate(args))
    except Failure as e:
        print(f"E2E FAILED: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Replays a real-shaped investigation through a running MACP server, one MCP client process per
agent, each agent following SKILL.md's loop.

    macp serve &                                    # listening on http://127.0.0.1:8765/mcp
    python examples/replay_investigation.py --url http://127.0.0.1:8765/mcp

(Python 3.10+ with the `mcp` package, as pinned in tests/e2e/requirements.txt; `bash
scripts/setup-e2e.sh` prints a venv python that has it.)

The scenario is room r1 of the labelled search set (../shared/eval/search-relevance.json, or
--eval-set): "INC-4471 checkout 5xx spike", 60 findings by four agents (ana, raj, li, mo). The
findings are posted in their recorded order by four concurrent processes. Each agent loops:

  get_updates from its cursor -> if the next finding of the record is its own:
  search_findings before posting (skip if a colleague already said it) -> add_entity for every
  host, service, commit, pull request and incident it mentions, by typed identifier (two agents
  naming the same identifier converge on one entity) -> post_finding with tags, entity_refs and
  evidence -> add_relationship for the links it states -> declare_status -> repeat.

Along the way: raj attaches the thread dump behind f034 as an artifact (presigned PUT, then
register_artifact); raj and mo first know payflow by different identifiers (its API host, its
status page), so the room holds two payflow entities until mo, at f043, names both identifiers
and merges them.

Then the team coordinates, as SKILL.md teaches, through the same MCP clients and a person at the
command line (`macp`, on the server's data directory: --macp, --data-dir): the incident
commander (ana, the person) marks the phase ("mitigation done, root cause next"); raj offers a
hypothesis; li claims testing it, and mo, claiming the same work, gets a conflict naming li; li
refutes it with evidence in its thread, mentioning raj, who finds the refutation in his feed
(about_me) and answers in the thread; mo asks the people whether to roll back PR #8870, and ana
answers on the command line (recorded as a person's answer); li releases the claim.

Then a late joiner, zoe, orients from get_room_context alone and posts a follow-up that
references the incident's service and the commit behind it.

Prints one JSON line: the room id and what each agent did (the end-to-end test,
tests/e2e/replay_e2e.py, checks the record against it). With --tokens FILE (JSON
{"agent-ana": "<jwt>", ...}) each agent sends its own user's bearer token.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import time

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_EVAL_SET = os.path.join(HERE, "..", "..", "shared", "eval", "search-relevance.json")
ROOM_KEY = "r1"
AGENTS = ["agent-ana", "agent-raj", "agent-li", "agent-mo"]
LATE_JOINER = "agent-zoe"

# What an agent recognises in a finding: pattern -> (entity name, type, identifiers). `{0}` is
# the first group of the match. Identifiers are what make colleagues converge.
CATALOG = [
    (r"\bcheckout-api\b", "checkout-api", "service", [("service", "checkout-api")]),
    (r"\bpayments-gateway\b", "payments-gateway", "service", [("service", "payments-gateway")]),
    (r"\bfulfillment-svc\b", "fulfillment-svc", "service", [("service", "fulfillment-svc")]),
    (r"\borders-db-primary\b", "orders-db-primary", "resource", [("hostname", "orders-db-primary")]),
    (r"\borders-db-replica-2\b", "orders-db-replica-2", "resource", [("hostname", "orders-db-replica-2")]),
    (r"\bredis-checkout-01\b", "redis-checkout-01", "resource", [("hostname", "redis-checkout-01")]),
    (r"\b(ip-\d+-\d+-\d+-\d+\.ec2\.internal)\b", "{0}", "resource", [("hostname", "{0}")]),
    (r"\bcommit ([0-9a-f]{7})\b", "commit {0}", "event", [("commit", "{0}")]),
    (r"\bPR #(\d+)", "PR #{0}", "event", [("pull-request", "#{0}")]),
    (r"\bINC-4471\b", "INC-4471", "event", [("incident", "INC-4471")]),
]
# payflow, the card processor: raj knows it by its API host, mo by its status page.
PAYFLOW = {"agent-mo": [("statuspage", "status.payflow.com")]}
PAYFLOW_DEFAULT = [("hostname", "api.payflow.com")]
# At f043 mo names both, which shows the two payflow entities are one.
BOTH_PAYFLOW = {"f043": [("statuspage", "status.payflow.com"), ("hostname", "api.payflow.com")]}

# The links each finding states: (source, relationship, target), by entity name.
LINKS = {
    "f004": [("payments-gateway", "depends_on", "payflow"), ("checkout-api", "depends_on", "payments-gateway")],
    "f007": [("checkout-api", "changed_by", "commit 7f3c2a1")],
    "f009": [("checkout-api", "depends_on", "orders-db-primary")],
    "f011": [("INC-4471", "caused_by", "commit 7f3c2a1")],
    "f013": [("checkout-api", "depends_on", "redis-checkout-01")],
    "f026": [("checkout-api", "changed_by", "PR #8812")],
    "f041": [("checkout-api", "changed_by", "PR #8870")],
    "f043": [("payments-gateway", "depends_on", "payflow")],
    "f053": [("orders-db-replica-2", "depends_on", "orders-db-primary")],
}
ARTIFACT_FINDING = "f034"
# How an agent names a link's endpoint it has not mentioned itself (same identifiers as above,
# so it converges on the colleague's entity).
KNOWN = {
    "INC-4471": ("event", [("incident", "INC-4471")]),
    "commit 7f3c2a1": ("event", [("commit", "7f3c2a1")]),
    "checkout-api": ("service", [("service", "checkout-api")]),
    "payments-gateway": ("service", [("service", "payments-gateway")]),
    "orders-db-primary": ("resource", [("hostname", "orders-db-primary")]),
}


def load(eval_set: str) -> tuple[dict, list[dict]]:
    with open(eval_set, encoding="utf-8") as f:
        data = json.load(f)
    room = next(r for r in data["rooms"] if r["key"] == ROOM_KEY)
    findings = sorted((f for f in data["findings"] if f["room"] == ROOM_KEY), key=lambda f: f["key"])
    return room, findings


def mentions(agent: str, finding: dict) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """The entities `agent` recognises in `finding`, in order, without repeats."""
    out: dict[str, tuple[str, str, list[tuple[str, str]]]] = {}
    for pattern, name, etype, idents in CATALOG:
        for m in re.finditer(pattern, finding["content"]):
            g = m.groups()
            n = name.format(*g)
            out.setdefault(n, (n, etype, [(t, v.format(*g)) for t, v in idents]))
    if re.search(r"\bpayflow\b", finding["content"]):
        ids = BOTH_PAYFLOW.get(finding["key"]) or PAYFLOW.get(agent, PAYFLOW_DEFAULT)
        out.setdefault("payflow", ("payflow", "service", ids))
    return list(out.values())


def evidence_for(finding: dict) -> list[dict]:
    kind = {"triage": "url", "evidence": "log", "remediation": "url"}.get(finding["tags"][0], "url")
    return [{"kind": kind, "ref": f"https://wiki.example.internal/inc-4471/{finding['key']}",
             "description": f"source of {finding['key']}"}]


def thread_dump() -> bytes:
    lines = ["Full thread dump checkout-api-6d9f7c-xk2lp 2024-03-12T14:22:03Z"]
    for i in range(212):
        state = "WAITING (parking) at com.zaxxer.hikari.pool.HikariPool.getConnection" if i < 196 else "RUNNABLE"
        lines.append(f'"http-nio-8080-exec-{i}" #{100 + i} daemon prio=5 {state}')
    return ("\n".join(lines) + "\n").encode()


class Failure(Exception):
    pass


async def call(client: Client, tool: str, args: dict) -> dict:
    r = await client.call_tool(tool, args)
    if r.is_error:
        raise Failure(f"{tool}({json.dumps(args)[:160]}) failed: {r.content[0].text}")
    return r.structured_content


def connect(url: str, token: str | None) -> tuple[httpx2.AsyncClient, Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))
    return http, Client(streamable_http_client(url, http_client=http), mode="legacy")


# ------------------------------------------------------------------------------------------------
# One agent, in its own process


async def agent_main(url: str, room: str, me: str, eval_set: str, token: str | None) -> dict:
    _, script = load(eval_set)
    mine = {f["key"] for f in script if f["agent"] == me}
    entity_ids: dict[str, str] = {}
    posted: dict[str, str] = {}
    merges: list[dict] = []
    artifact: dict | None = None
    skipped: list[str] = []
    http, client = connect(url, token)
    async with http, client, httpx2.AsyncClient(timeout=30) as plain:
        joined = await call(client, "join_room", {"room_id": room, "agent_id": me.removeprefix("agent-"),
                                                  "agent_type": "replay-python-mcp"})
        ctx = await call(client, "get_room_context", {"room_id": room})
        if "INC-4471" not in ctx["room"]["name"]:
            raise Failure(f"not the replay room: {ctx['room']['name']!r}")
        # The replay keeps the record's order, so this agent reads everything from the start (a
        # real agent would start from the context's cursor).
        cursor = None
        seen_contents: set[str] = set()
        done = 0
        deadline = time.monotonic() + 600
        while done < len(script):
            if time.monotonic() > deadline:
                raise Failure(f"{me} waited too long at {script[done]['key']}")
            # 1-2. Catch up from the cursor.
            u = await call(client, "get_updates", {"room_id": room} if cursor is None else {"room_id": room, "cursor": cursor})
            cursor = u["cursor"]
            for f in u["findings"]:
                seen_contents.add(f["content"])
            done = sum(1 for f in script if f["content"] in seen_contents)
            if u["has_more"]:
                continue
            if done >= len(script) or script[done]["key"] not in mine:
                await asyncio.sleep(0.05)
                continue
            nxt = script[done]
            # 3. Search before posting: a colleague may already have said it.
            hits = await call(client, "search_findings", {"room_id": room, "query": nxt["content"][:300], "limit": 3})
            if any(h["finding"]["content"] == nxt["content"] for h in hits["results"]):
                skipped.append(nxt["key"])
                seen_contents.add(nxt["content"])
                continue
            # 4. Name what it is about, by identifiers; merge what turns out to be one thing.
            refs = []
            for name, etype, idents in mentions(me, nxt):
                e = await call(client, "add_entity", {
                    "room_id": room, "name": name, "type": etype,
                    "identifiers": [{"type": t, "value": v} for t, v in idents],
                    "idempotency_key": f"{me}-{nxt['key']}-" + re.sub(r"[^A-Za-z0-9._-]", "_", name),
                })
                eid = e["entity"]["entity_id"]
                for other in e["other_matches"]:
                    # Another entity holds some of these identifiers: the same thing twice.
                    m = await call(client, "merge_entities", {"room_id": room, "winner_entity_id": other,
                                                              "loser_entity_id": eid})
                    merges.append({"at": nxt["key"], "name": name, "winner": other, "loser": eid,
                                   "aliases": m["entity"]["aliases"], "already_merged": m["already_merged"]})
                    eid = other
                entity_ids[name] = eid
                refs.append(eid)
            evidence = evidence_for(nxt)
            key = None
            if nxt["key"] == ARTIFACT_FINDING:
                body = thread_dump()
                ticket = await call(client, "request_artifact_upload", {
                    "room_id": room, "filename": "thread-dump-xk2lp.txt", "content_type": "text/plain", "size": len(body)})
                r = await plain.put(ticket["upload_url"], content=body,
                                    headers={k: v for k, v in ticket["headers"].items() if k.lower() != "content-length"})
                if r.status_code != 200:
                    raise Failure(f"artifact upload answered {r.status_code}")
                key = ticket["key"]
                evidence.append({"kind": "artifact", "ref": key, "description": "thread dump at 14:22 UTC"})
            p = await call(client, "post_finding", {
                "room_id": room, "content": nxt["content"], "tags": nxt["tags"], "entity_refs": refs,
                "evidence": evidence, "idempotency_key": f"replay-{nxt['key']}",
            })
            fid = p["finding"]["finding_id"]
            posted[nxt["key"]] = fid
            if key:
                reg = await call(client, "register_artifact", {
                    "room_id": room, "key": key, "description": "thread dump of checkout-api-6d9f7c-xk2lp at 14:22 UTC",
                    "linked_finding_ids": [fid], "linked_entity_ids": [entity_ids["checkout-api"]],
                    "idempotency_key": f"replay-artifact-{nxt['key']}",
                })
                artifact = {"key": key, "artifact_id": reg["artifact"]["artifact_id"], "finding": fid,
                            "sha256": hashlib.sha256(body).hexdigest(), "size": len(body)}
            for src, rel, dst in LINKS.get(nxt["key"], []):
                for end in (src, dst):
                    if end not in entity_ids and end in KNOWN:
                        etype, idents = KNOWN[end]
                        e = await call(client, "add_entity", {
                            "room_id": room, "name": end, "type": etype,
                            "identifiers": [{"type": t, "value": v} for t, v in idents]})
                        entity_ids[end] = e["entity"]["entity_id"]
                if src in entity_ids and dst in entity_ids:
                    await call(client, "add_relationship", {
                        "room_id": room, "source_entity_id": entity_ids[src], "target_entity_id": entity_ids[dst],
                        "relationship_type": rel, "description": f"stated in {nxt['key']}",
                        "evidence": [{"kind": "url", "ref": f"https://wiki.example.internal/inc-4471/{nxt['key']}"}],
                    })
            # 5. Say what you are doing.
            await call(client, "declare_status", {"room_id": room, "status": "active", "reason": f"posted {nxt['key']}"})
        await call(client, "declare_status", {"room_id": room, "status": "idle", "reason": "my part of the record is posted"})
    return {"agent": me, "agent_id": joined["agent_id"], "user_id": joined["user_id"], "posted": posted,
            "skipped": skipped, "entities": entity_ids, "merges": merges, "artifact": artifact}


# ------------------------------------------------------------------------------------------------
# Coordination: a phase, a hypothesis refuted in its thread, a claim conflict, a mention, and a
# decision a person answers


COMMANDER = "ana"  # the person running the incident, at the command line
PHASE = "mitigation done, root cause next"
HYPOTHESIS = ("Hypothesis: the 5xx spike came from payflow rotating its TLS certificate at 14:00 UTC "
              "(handshake failures between payments-gateway and api.payflow.com).")
REFUTATION = ("Refuted: payments-gateway logs no TLS handshake failure 13:50-14:30 UTC, and payflow's "
              "certificate was rotated on the 9th, not today.")
ACK = "Agreed, dropping the TLS line; back on the connection pool."
QUESTION = "Roll back PR #8870 (pool size change) now?"


def person(macp: str, data_dir: str | None, *args: str) -> str:
    """A person's own command on the server's data directory: recorded as a person's act."""
    cmd = [macp, *(["--data-dir", data_dir] if data_dir else []), "--embedder", "none", *args,
           "--local-user", COMMANDER]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise Failure(f"{' '.join(args[:2])} failed: {r.stderr.strip()[-800:]}")
    return r.stdout


async def coordinate(url: str, room: str, tokens: dict, macp: str, data_dir: str | None) -> dict:
    out: dict = {}
    person(macp, data_dir, "steer", room, "--marker", PHASE)
    # A person's command changes the room under the running server, which holds a room it has
    # read for at most a second before reading it again (macp-local's room cache): the agents
    # below see the marker once that second is over. Reading sooner was a flake in CI.
    await asyncio.sleep(1.2)
    async with contextlib.AsyncExitStack() as stack:
        c = {}
        for a in AGENTS:
            http, client = connect(url, tokens.get(a))
            await stack.enter_async_context(http)
            c[a.removeprefix("agent-")] = await stack.enter_async_context(client)
        for name, client in c.items():
            await call(client, "join_room", {"room_id": room, "agent_id": name, "agent_type": "replay-python-mcp"})
        ctx = await call(c["raj"], "get_room_context", {"room_id": room})
        out["phase"] = ctx.get("phase")
        hyp = await call(c["raj"], "post_finding", {
            "room_id": room, "content": HYPOTHESIS, "tags": ["hypothesis"], "hypothesis": True,
            "idempotency_key": "replay-coord-hypothesis"})
        out["hypothesis"] = hyp["finding"]["finding_id"]
        subject = "testing the payflow TLS rotation hypothesis"
        claim = await call(c["li"], "claim_work", {"room_id": room, "subject": subject, "minutes": 30})
        out["claim"] = claim["claim"]
        clash = await c["mo"].call_tool("claim_work", {"room_id": room, "subject": subject.upper()})
        if not clash.is_error:
            raise Failure("a second claim on the same work was accepted")
        out["conflict"] = clash.structured_content["error"]
        ref = await call(c["li"], "post_finding", {
            "room_id": room, "content": REFUTATION, "tags": ["dead-end"], "reply_to": out["hypothesis"],
            "verdict": "refutes", "mentions": ["raj"],
            "evidence": [{"kind": "log", "ref": "kubectl logs -n payments deploy/payments-gateway --since=2h | grep -c handshake",
                          "description": "0 handshake failures"}],
            "idempotency_key": "replay-coord-refutation"})
        out["refutation"] = ref["finding"]["finding_id"]
        mine = await call(c["raj"], "get_updates", {"room_id": room, "about_me": True, "cursor": ctx["cursor"]})
        out["raj_about_me"] = [f["finding_id"] for f in mine["findings"]]
        ack = await call(c["raj"], "post_finding", {
            "room_id": room, "content": ACK, "reply_to": out["refutation"], "idempotency_key": "replay-coord-ack"})
        out["ack"] = ack["finding"]["finding_id"]
        asked = await call(c["mo"], "ask_decision", {
            "room_id": room, "question": QUESTION, "options": ["yes, now", "no, wait for the fix"],
            "urgency": "high"})
        out["decision"] = asked["decision_id"]
        person(macp, data_dir, "decide", room, asked["decision_id"], "yes, now")
        seen = await call(c["mo"], "get_updates", {"room_id": room, "cursor": ctx["cursor"], "kinds": ["decision_answered"]})
        out["mo_saw_answer"] = [e["summary"] for e in seen["events"]]
        await call(c["li"], "claim_work", {"room_id": room, "subject": subject, "release": True})
        for client in c.values():
            await call(client, "declare_status", {"room_id": room, "status": "idle", "reason": "coordination done"})
    return out


# ------------------------------------------------------------------------------------------------
# The late joiner: orients from the context alone


async def late_joiner(url: str, room: str, token: str | None) -> dict:
    http, client = connect(url, token)
    async with http, client:
        ctx = await call(client, "get_room_context", {"room_id": room})
        by_ident = {(i["type"], i["value"]): e for e in ctx["entities"]["items"] for i in e["identifiers"]}
        service = by_ident.get(("service", "checkout-api"))
        commit = by_ident.get(("commit", "7f3c2a1"))
        if not service or not commit:
            raise Failure(f"the context's entities lack checkout-api or commit 7f3c2a1: {sorted(by_ident)}")
        closed = {t: n for t, n in ctx["tag_counts"].items()}
        joined = await call(client, "join_room", {"room_id": room, "agent_id": "zoe", "agent_type": "replay-python-mcp"})
        follow = await call(client, "post_finding", {
            "room_id": room, "tags": ["follow-up"], "entity_refs": [service["entity_id"], commit["entity_id"]],
            "content": (f"Follow-up (late joiner, from the room context: {closed.get('root-cause', 0)} root-cause, "
                        f"{closed.get('dead-end', 0)} dead-end findings): add a contract test to checkout-api's "
                        "pipeline that fails when a config key renamed in a commit like 7f3c2a1 is still set in any "
                        "Helm values file."),
            "evidence": [{"kind": "url", "ref": "https://wiki.example.internal/inc-4471/postmortem"}],
            "idempotency_key": "replay-zoe-follow-up",
        })
        after = await call(client, "get_updates", {"room_id": room, "cursor": ctx["cursor"]})
        await call(client, "declare_status", {"room_id": room, "status": "idle", "reason": "follow-up posted"})
    return {"agent": LATE_JOINER, "agent_id": joined["agent_id"], "user_id": joined["user_id"],
            "finding": follow["finding"]["finding_id"], "refs": [service["entity_id"], commit["entity_id"]],
            "context_total": ctx["findings"]["total"], "context_bytes": len(json.dumps(ctx)),
            "updates_after_context": [f["finding_id"] for f in after["findings"]]}


# ------------------------------------------------------------------------------------------------


async def create_room(url: str, eval_set: str, token: str | None) -> str:
    room, _ = load(eval_set)
    http, client = connect(url, token)
    async with http, client:
        r = await call(client, "create_room", {"name": room["name"], "objective": room["objective"],
                                               "tags": ["replay", "sev-1"]})
    return r["room_id"]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "agent":
        _, _, url, room, me, eval_set, token = sys.argv
        print(json.dumps(asyncio.run(agent_main(url, room, me, eval_set, token or None))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8765/mcp", help="the server's MCP endpoint")
    ap.add_argument("--eval-set", default=os.environ.get("MACP_EVAL_SET", DEFAULT_EVAL_SET))
    ap.add_argument("--tokens", help='JSON file {"agent-ana": "<jwt>", ...}: each agent\'s bearer token')
    ap.add_argument("--macp", default="macp", help="the macp binary, for the person's own commands")
    ap.add_argument("--data-dir", help="the server's data directory (default: macp's)")
    args = ap.parse_args()
    tokens = json.load(open(args.tokens)) if args.tokens else {}
    try:
        t0 = time.monotonic()
        room = asyncio.run(create_room(args.url, args.eval_set, tokens.get(AGENTS[0])))
        procs = {a: subprocess.Popen([sys.executable, __file__, "agent", args.url, room, a, args.eval_set, tokens.get(a, "")],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for a in AGENTS}
        agents, failed = [], []
        # Wait for all, but stop at the first failure: the others would wait for its turn forever.
        deadline = time.monotonic() + 900
        while procs and not failed and time.monotonic() < deadline:
            for a, p in list(procs.items()):
                if p.poll() is None:
                    continue
                out, err = p.communicate()
                del procs[a]
                if p.returncode != 0:
                    failed.append(f"{a}: {err.strip()[-1500:]}")
                else:
                    agents.append(json.loads(out.strip().splitlines()[-1]))
            time.sleep(0.1)
        for a, p in procs.items():
            p.kill()
            failed.append(f"{a}: stopped" + ("" if failed else " (timed out)"))
        if failed:
            raise Failure("agent processes failed:\n  " + "\n  ".join(failed))
        coordination = asyncio.run(coordinate(args.url, room, tokens, args.macp, args.data_dir))
        late = asyncio.run(late_joiner(args.url, room, tokens.get(LATE_JOINER)))
        print(json.dumps({"room_id": room, "seconds": round(time.monotonic() - t0, 2), "agents": agents,
                          "coordination": coordination, "late_joiner": late}))
    except Failure as e:
        print(f"replay failed: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

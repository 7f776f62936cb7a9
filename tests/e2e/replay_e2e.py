#!/usr/bin/env python3
"""End-to-end: the replayed investigation (examples/replay_investigation.py) through a real
`macp serve` with OAuth on (one user per agent), then the record checked, the room closed, the
server restarted on the same data directory, and the record checked again.

    python tests/e2e/replay_e2e.py --macp target/debug/macp [--eval-set ../shared/eval/search-relevance.json]

Checks: every finding of the record present exactly once, in order, attributed to its agent and
its user; agents converged on one entity per identifier; the payflow duplicate merged, its old
id resolving to the survivor; the graph around checkout-api connected as the findings state;
the thread dump downloadable with the bytes uploaded; the late joiner's follow-up referencing
checkout-api and commit 7f3c2a1, and polling from its context cursor returning only that
follow-up; the coordination (a phase marked by a person on the command line, a hypothesis
refuted in its thread with evidence, a claim conflict naming the holder, a mention reaching its
agent, a decision answered by a person and recorded as such, the digest since the marker); and
after close + restart: the room closed, refusing writes, and still fully
readable (context, timeline, search, graph, artifact download).
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile

import httpx2

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
import auth_e2e  # noqa: E402
import mcp_e2e  # noqa: E402
import replay_investigation as replay  # noqa: E402
from mcp_e2e import Failure, call, expect, session  # noqa: E402

AUDITOR = "auditor"
GRAPH_AROUND_CHECKOUT = {"orders-db-primary", "redis-checkout-01", "commit 7f3c2a1", "PR #8812", "PR #8870",
                         "payments-gateway", "INC-4471", "orders-db-replica-2", "payflow"}


def user_of(agent: str) -> str:
    return agent.removeprefix("agent-")


async def all_findings(c, room: str) -> list[dict]:
    out, cursor = [], None
    while True:
        args = {"room_id": room, "limit": 200, **({"cursor": cursor} if cursor else {})}
        page = await call(c, "get_timeline", args)
        out.extend(page["findings"])
        cursor = page.get("next_cursor")
        if not cursor:
            return out


async def check_record(url: str, token: str, result: dict, script: list[dict], *, closed: bool) -> dict:
    room = result["room_id"]
    agents = {a["agent"]: a for a in result["agents"]}
    late = result["late_joiner"]
    http, c = await session(url, token)
    async with http, c, httpx2.AsyncClient(timeout=30) as plain:
        # Every finding once, in the record's order, attributed.
        found = await all_findings(c, room)
        ids = [f["finding_id"] for f in found]
        extra = 1 + COORDINATION_FINDINGS
        expect(len(ids) == len(set(ids)) == len(script) + extra,
               f"{len(ids)} findings ({len(set(ids))} distinct), want {len(script) + extra}")
        expect([f["seq"] for f in found] == list(range(1, len(found) + 1)), "timeline in commit order without gaps")
        for want, got in zip(script, found):
            who = agents[want["agent"]]
            expect(got["content"] == want["content"], f"{want['key']} out of order or altered: {got['content'][:60]!r}")
            expect(got["finding_id"] == who["posted"][want["key"]], f"{want['key']} is the finding its agent posted")
            expect(got["agent_id"] == who["agent_id"] and got["user_id"] == user_of(want["agent"]),
                   f"{want['key']} attributed to {got['agent_id']}/{got['user_id']}, want {who['agent_id']}/{user_of(want['agent'])}")
            expect(got["tags"] == want["tags"], f"{want['key']} tags {got['tags']}")
        last = found[-1]
        expect(last["finding_id"] == late["finding"] and last["user_id"] == "zoe", "the late joiner's follow-up is last, by zoe")

        # Convergence: one entity per identifier, whoever named it; the payflow pair merged.
        merges = [m for a in agents.values() for m in a["merges"]]
        expect(len(merges) == 1 and merges[0]["name"] == "payflow" and merges[0]["at"] == "f043", f"merges {merges}")
        merge = merges[0]
        canonical: dict[str, set[str]] = {}
        for a in agents.values():
            for name, eid in a["entities"].items():
                g = await call(c, "get_entity_graph", {"room_id": room, "entity_id": eid, "depth": 1})
                canonical.setdefault(name, set()).add(g["root"])
        split = {n: s for n, s in canonical.items() if len(s) != 1}
        expect(not split, f"agents did not converge: {split}")
        payflow = await call(c, "get_entity_graph", {"room_id": room, "entity_id": merge["loser"], "depth": 1})
        root = payflow["entities"][0]
        expect(payflow["root"] == merge["winner"] and merge["loser"] in root["aliases"], f"merged payflow {root}")
        idents = {(i["type"], i["value"]) for i in root["identifiers"]}
        expect({("hostname", "api.payflow.com"), ("statuspage", "status.payflow.com")} <= idents, f"payflow identifiers {idents}")
        shared = [n for n in canonical if sum(n in a["entities"] for a in agents.values()) > 1]
        expect(len(shared) >= 4, f"several entities named by more than one agent: {shared}")

        # The graph around the incident's service.
        checkout = next(iter(canonical["checkout-api"]))
        g = await call(c, "get_entity_graph", {"room_id": room, "entity_id": checkout, "depth": 2})
        names = {e["name"] for e in g["entities"]} - {"checkout-api"}
        expect(GRAPH_AROUND_CHECKOUT <= names, f"graph around checkout-api lacks {GRAPH_AROUND_CHECKOUT - names}")
        expect(sum(e["name"] == "payflow" for e in g["entities"]) == 1, "payflow appears once after the merge")

        # The artifact: listed under its finding, same bytes.
        art = next(a["artifact"] for a in agents.values() if a["artifact"])
        listed = await call(c, "list_artifacts", {"room_id": room, "finding_id": art["finding"]})
        expect(len(listed["artifacts"]) == 1 and listed["artifacts"][0]["key"] == art["key"], f"artifacts {listed}")
        r = await plain.get(listed["artifacts"][0]["download_url"])
        expect(r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == art["sha256"],
               f"artifact download {r.status_code}, {len(r.content)} bytes")
        by_entity = await call(c, "list_artifacts", {"room_id": room, "entity_id": checkout})
        expect([a["key"] for a in by_entity["artifacts"]] == [art["key"]], "the artifact is linked to checkout-api")

        # The late joiner oriented from the context alone and referenced the right entities.
        commit = next(iter(canonical["commit 7f3c2a1"]))
        expect(set(late["refs"]) == {checkout, commit}, f"follow-up refs {late['refs']}")
        expect(late["updates_after_context"] == [late["finding"]], "polling from the context cursor: only the follow-up")
        expect(late["context_total"] == len(script) + COORDINATION_FINDINGS, f"the context counted {late['context_total']}")
        await check_coordination(c, room, result["coordination"], late["finding"])

        # Search still finds by words and by meaning.
        hits = await call(c, "search_findings", {"room_id": room, "query": "HikariPool connection is not available", "limit": 3})
        f003 = agents["agent-li"]["posted"]["f003"]
        expect(f003 in [h["finding"]["finding_id"] for h in hits["results"]], "keyword search finds f003")
        ctx = await call(c, "get_room_context", {"room_id": room})
        expect(ctx["findings"]["total"] == len(script) + extra, f"context total {ctx['findings']['total']}")
        expect(ctx["room"]["status"] == ("closed" if closed else "active"), f"room status {ctx['room']['status']}")
        statuses = {a["agent_id"]: a["agent_status"] for a in ctx["agents"]["items"]}
        expect(set(statuses.values()) == {"idle"} and len(statuses) == 5, f"statuses {statuses}")
        if closed:
            err = await c.call_tool("post_finding", {"room_id": room, "agent_id": "ana", "content": "too late"})
            expect(err.is_error and "room_closed" in err.content[0].text, "a closed room refuses writes")
        return {"findings": len(found), "entities": ctx["entities"]["total"], "relationships": ctx["entities"]["relationship_total"]}


COORDINATION_FINDINGS = 3  # the hypothesis, its refutation, and the answer in its thread


async def check_coordination(c, room: str, co: dict, follow_up: str) -> None:
    """The coordination episode, as the record and every read path show it."""
    phase = co["phase"]
    expect(phase and phase["marker_id"] == "m1" and phase["label"] == replay.PHASE, f"phase {phase}")
    expect(phase["by"]["channel"] == "person" and "agent_id" not in phase["by"] and phase["by"]["user_id"] == "ana",
           f"the marker is the person's: {phase['by']}")
    conflict = co["conflict"]
    expect(conflict["code"] == "conflict" and "`li`" in conflict["message"], f"claim conflict {conflict}")
    expect(co["claim"]["agent_id"] == "li", f"li holds the claim {co['claim']}")
    expect(co["raj_about_me"] == [co["refutation"]], f"raj's feed about him: {co['raj_about_me']}")
    thread = await call(c, "get_timeline", {"room_id": room, "thread": co["hypothesis"]})
    got = [f["finding_id"] for f in thread["findings"]]
    expect(got == [co["hypothesis"], co["refutation"]], f"the hypothesis's thread {got}")
    hyp = thread["findings"][0]
    expect(hyp.get("hypothesis") is True, "marked a hypothesis")
    st = hyp.get("standing") or {}
    expect(st.get("verdict") == "refutes" and st.get("by") == co["refutation"] and st.get("agent_id") == "li",
           f"the hypothesis stands refuted by li's finding: {st}")
    reply = await call(c, "get_timeline", {"room_id": room, "thread": co["refutation"]})
    expect([f["finding_id"] for f in reply["findings"]] == [co["refutation"], co["ack"]], "raj answered in the thread")
    hits = await call(c, "search_findings", {"room_id": room, "query": "payflow TLS certificate rotation", "limit": 5})
    found = {h["finding"]["finding_id"]: h["finding"] for h in hits["results"]}
    expect(co["hypothesis"] in found and (found[co["hypothesis"]].get("standing") or {}).get("verdict") == "refutes",
           "search shows the hypothesis as refuted")
    phase_only = await call(c, "get_timeline", {"room_id": room, "after_marker": "m1"})
    expect([f["finding_id"] for f in phase_only["findings"]] == [co["hypothesis"], co["refutation"], co["ack"], follow_up],
           "the timeline from the marker holds the phase's findings")
    expect(co["mo_saw_answer"], "mo saw the answer in its feed")
    s = await call(c, "get_room_summary", {"room_id": room, "since_marker": "m1"})
    expect(not s["open_decisions"], f"no decision left open: {s['open_decisions']}")
    d = s["digest"]
    answered = d["decisions_answered"]
    expect(len(answered) == 1 and answered[0]["decision_id"] == co["decision"], f"answered {answered}")
    ans = answered[0]["answer"]
    expect(ans["channel"] == "person" and "agent_id" not in ans and ans["user_id"] == "ana" and ans["text"] == "yes, now",
           f"answered by the person herself: {ans}")
    expect(d["claims"]["total"] == 2, f"claimed then released: {d['claims']}")
    expect([p["marker_id"] for p in d["phases"]] == ["m1"], f"phases {d['phases']}")
    by_agent = {a["agent_id"]: a for a in d["agents"]}
    expect(by_agent["li"]["by_tag"] == {"dead-end": 1} and by_agent["raj"]["findings"] == 2, f"digest agents {d['agents']}")
    ctx = await call(c, "get_room_context", {"room_id": room})
    shown = {f["finding_id"]: f for f in ctx["findings"]["items"]}
    expect(co["hypothesis"] in shown, "the hypothesis is among the context's latest findings")
    expect(shown[co["hypothesis"]].get("standing") == "refutes", "the context shows the standing")
    expect(ctx.get("phase", {}).get("marker_id") == "m1", "the context names the current phase")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--macp", required=True)
    ap.add_argument("--eval-set", default=os.environ.get("MACP_EVAL_SET", replay.DEFAULT_EVAL_SET))
    args = ap.parse_args()
    if not os.path.exists(args.eval_set):
        print(f"replay e2e: no labelled set at {args.eval_set} (set MACP_EVAL_SET)", file=sys.stderr)
        sys.exit(1)
    _, script = replay.load(args.eval_set)
    rsa_key, ec_key, doc = auth_e2e.keys()
    jwks = auth_e2e.serve_jwks(doc)
    users = [*replay.AGENTS, replay.LATE_JOINER]
    tokens = {a: auth_e2e.token(rsa_key, "rsa-e2e", "RS256", user_of(a), "macp:read macp:write") for a in users}
    reader = auth_e2e.token(ec_key, "ec-e2e", "ES256", AUDITOR, "macp:read macp:write")
    server_args = ["--auth-issuer", auth_e2e.ISSUER, "--auth-jwks-url", jwks, "--auth-audience", auth_e2e.AUDIENCE,
                   "--auth-read-scope", "macp:read", "--auth-write-scope", "macp:write"]
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "data")
        spec = os.path.join(work, "tokens.json")
        json.dump(tokens, open(spec, "w"))
        proc, url = mcp_e2e.start_server(args.macp, data, server_args, {})
        try:
            run = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "replay_investigation.py"),
                                  "--url", url, "--eval-set", args.eval_set, "--tokens", spec,
                                  "--macp", args.macp, "--data-dir", data],
                                 capture_output=True, text=True, timeout=900)
            expect(run.returncode == 0, f"the replay failed: {run.stderr.strip()[-2000:]}")
            result = json.loads(run.stdout.strip().splitlines()[-1])
            before = asyncio.run(check_record(url, reader, result, script, closed=False))

            async def close() -> None:
                http, c = await session(url, tokens[replay.AGENTS[0]])
                async with http, c:
                    await call(c, "close_room", {"room_id": result["room_id"]})
            asyncio.run(close())
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        expect(code == 0, f"server exited with {code}")
        proc, url = mcp_e2e.start_server(args.macp, data, server_args, {})
        try:
            after = asyncio.run(check_record(url, reader, result, script, closed=True))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        print(json.dumps({"ok": True, "room": result["room_id"], "replay_seconds": result["seconds"],
                          "before_restart": before, "after_restart": after}))


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print(f"REPLAY E2E FAILED: {e}", file=sys.stderr)
        sys.exit(1)

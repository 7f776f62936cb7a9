#!/usr/bin/env python3
"""End-to-end failover: two `macp serve --backend aws` on one moto behind a round-robin proxy,
agents of both MCP generations running a replayed investigation through it while one instance
crashes and the other is replaced (issue 18).

    python tests/e2e/failover_e2e.py --macp target/debug/macp [--aws-endpoint URL] [--only-stateless]

Without --aws-endpoint the test starts its own moto (tests/aws/moto_macp.py, as
scripts/aws-tests.sh does) and stops it at the end. The macp binary must be built with the
`aws` feature. The record replayed is room r1 of the labelled search set
(../shared/eval/search-relevance.json, or --eval-set / MACP_EVAL_SET).

What runs:
  * `macp setup` with a fresh table prefix; instances A and B (`macp serve --backend aws`, auth
    off, each its own --data-dir, on fixed ports the test picked so each can come back on its
    port).
  * A reverse proxy in this process (its own thread and event loop; raw asyncio HTTP/1.1): keeps
    client connections alive, picks a target ROUND ROBIN PER REQUEST among the healthy ones, with
    one counter per (mcp-session-id, method) so that every MCP session's POSTs alternate between
    the instances whatever other clients and GET streams do (requests without a session id share
    one counter per method), forwards every header and the body, streams chunked/SSE responses as they come (buffers a
    Content-Length response, as nginx does by default, so a target dying mid-answer is a clean
    502), health-checks every target by TCP connect every 200 ms (an ALB's check, faster), marks
    a target unhealthy at once when a connection to it fails, and answers 502 when the chosen
    target's connection fails before its answer is complete. It records every request (the
    mcp-session-id the client sent, the target, the phase it was routed in and ended in, and its
    outcome: served with a status, refused = no connection, the proxy's 502; broken = connected but
    dropped before the answer's head, a 502 that is the target's fault; cut = a stream cut mid-body),
    counts requests per target and phase, and tags every answer with `X-Failover-Target`.
  * Three legacy agents (ana, raj, li; MCP 2025-11-25 sessions) and two stateless agents (mo,
    zoe; 2026-07-28), concurrently through the proxy. Each joins once, then posts its script
    (--posts, default 30 findings with tags, entities and evidence, from the record), polling
    get_updates before every post, searching before every fourth, reading get_room_context every
    tenth and adding the entities each finding names. Legacy agents never pass agent_id after
    join_room: their MCP session must remember the join on whichever instance serves them.
    Stateless agents name agent_id on every write. Every post carries an idempotency_key. A call
    that fails with a 5xx/502, a transport error, a timeout or a retryable tool error is retried
    with the same arguments after a short backoff (30 s deadline). A legacy agent never
    re-initializes or re-joins: a lost session ("Session terminated", a 404 from an instance that
    does not know it) or a forgotten join (`not_joined`) fails the test.
  * Chaos, while the agents post: at 25% of the posts, SIGKILL of A (a crash), A restarted on its
    port 1.5 s later; at 60%, SIGTERM of B (a graceful rolling replacement: it must exit 0), B
    restarted. Agents keep polling until both are back.
  * Then the first legacy agent (ana) calls join_room again with a new agent_id (ana-2) through
    the proxy and posts at least 4 times without agent_id (until both instances served some); the
    others keep polling meanwhile. Everyone then reads their feed to the end. ana then ends its
    session as the client does on exit (DELETE with its mcp-session-id, through the proxy), and a
    raw POST with that session id is sent to each instance directly.

Checks (each fails the run with its reason):
  * every acknowledged post is in the room exactly once (by content and finding id, read by a
    fresh stateless client through the proxy with get_timeline), attributed to the agent it was
    posted as; nothing in the room that no agent posted (a post in flight when its agent failed may
    be there once); each agent's own get_updates feed delivered every finding of the room exactly
    once;
  * joins: each agent called join_room once (ana twice: as ana, then as ana-2) and each agent id
    has exactly one agent_joined event (a retried join_room cannot add a second: the agent row and
    its event are one conditional transaction); no other agent ids joined;
  * legacy sessions: each legacy agent sent one and the same mcp-session-id on every request after
    initialize, for the whole run, and was never answered another; its POSTs were served by both A
    and B while both were up (before the crash) and again by both restarted processes at the end;
  * the re-join: each of ana's posts after re-joining is attributed to ana-2 by whichever instance
    served it, and both served some; the DELETE ending the session is acknowledged (2xx), and
    afterwards each instance, asked directly, answers 404 for that session;
  * the replacement: B exits 0 within 5 s of SIGTERM (the server's grace is 10 s), and B answered
    no 5xx, dropped no accepted connection before answering and cut no stream for any request
    routed to it, or still running, while it was being replaced (the proxy's 502s for connections
    B refused once it had stopped listening are fine);
  * every instance served requests before and after the crash and after the replacement.
Prints the figures: requests per instance and phase, 502s,
retries, replays (retries whose first attempt had been applied), failover time seen by clients
(median and max from a call's first failure to its success), the longest stall per client,
instance downtime seen by the proxy, and the total duration. Exits non-zero with the reasons.

--only-stateless runs just the stateless agents: what must pass on a build whose MCP sessions are
not shared between instances (there, legacy agents lose their session at the first request the
proxy sends to the other instance, and this test says so).
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types.jsonrpc import CONNECTION_CLOSED, INTERNAL_ERROR, REQUEST_TIMEOUT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
import replay_investigation as replay  # noqa: E402
from mcp_e2e import Failure, aws_env  # noqa: E402

HOST = "127.0.0.1"
LEGACY = ["ana", "raj", "li"]
STATELESS = ["mo", "zoe"]
RETRY_DEADLINE = 30.0  # seconds a call may keep failing before the test gives up on it
CALL_TIMEOUT = 25.0  # seconds one attempt may take
KILL_AT, TERM_AT = 0.25, 0.60  # fractions of the posts done when A is killed / B is replaced
DOWN_SECONDS = 1.5  # how long A stays dead
TEST_DEADLINE = 170.0
TERM_EXIT_MAX = 5.0  # seconds B may take to exit after SIGTERM (the server's grace is 10 s)


class SessionLost(Failure):
    """A legacy agent's MCP session is gone: it could only go on by re-initializing and re-joining."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------------------------
# The proxy


class Target:
    """One backend instance as the proxy sees it."""

    def __init__(self, name: str, port: int):
        self.name, self.port = name, port
        self.healthy = False
        self.routed = 0  # requests sent its way
        self.served = collections.Counter()  # complete answers relayed, per phase
        self.bad_gateway = collections.Counter()  # 502s the proxy answered for it, per phase
        self.refused = collections.Counter()  # ... of which: no connection (it was not listening), per phase
        self.cut = 0  # streamed answers cut mid-body (the client connection is then closed)
        self.statuses = collections.Counter()
        self.errors: collections.deque = collections.deque(maxlen=20)  # (status, method, body excerpt, when)
        self.health: list[tuple[float, bool]] = []  # (time, healthy) at each change


class UpstreamBroken(Exception):
    pass


class Proxy:
    """A small HTTP/1.1 reverse proxy, round robin per request, with health checks."""

    HOP = {"connection", "keep-alive", "proxy-connection"}

    def __init__(self, targets: list[Target], t0: float):
        self.targets, self.t0 = targets, t0
        # Round robin per request, one counter per (MCP session, method): every session's POSTs
        # alternate between the healthy targets whatever the other clients and the GET streams do.
        # Requests without a session (initialize, stateless clients) share one counter per method.
        self.rr: dict[tuple[str | None, str], int] = collections.defaultdict(int)
        # One record per request: the session id the client sent, where it went, what came of it.
        self.log: list[dict] = []
        self.phase = "before"
        self.no_target = 0
        self.port = 0
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._conns: set[asyncio.Task] = set()
        self._error: BaseException | None = None

    # -- lifecycle (called from the test's thread)

    def start(self) -> str:
        self._thread = threading.Thread(target=self._run, name="proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise Failure(f"the proxy did not start: {self._error!r}")
        return f"http://{HOST}:{self.port}/mcp"

    def stop(self) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread:
            self._thread.join(10)

    def target(self, name: str) -> Target:
        return next(t for t in self.targets if t.name == name)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as e:  # noqa: BLE001 - reported by start()
            self._error = e
            self._ready.set()
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._client, HOST, 0, limit=1 << 22)
        self.port = server.sockets[0].getsockname()[1]
        health = asyncio.create_task(self._health())
        await self._probe_all()
        self._ready.set()
        await self._stop.wait()
        health.cancel()
        # Let the health check's probes unwind before the loop closes (else asyncio warns that
        # pending tasks were destroyed).
        await asyncio.gather(health, return_exceptions=True)
        server.close()
        for t in list(self._conns):
            t.cancel()
        await asyncio.gather(*self._conns, return_exceptions=True)

    # -- health checks: a TCP connect every 200 ms

    async def _health(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            await self._probe_all()

    async def _probe_all(self) -> None:
        await asyncio.gather(*(self._probe(t) for t in self.targets))

    async def _probe(self, t: Target) -> None:
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection(HOST, t.port), 0.5)
            w.close()
            self._mark(t, True)
        except (OSError, asyncio.TimeoutError):
            self._mark(t, False)

    def _mark(self, t: Target, healthy: bool) -> None:
        if t.healthy != healthy:
            t.healthy = healthy
            t.health.append((time.monotonic(), healthy))

    def _pick(self, key: tuple[str | None, str]) -> Target | None:
        n, start = len(self.targets), self.rr[key]
        for i in range(n):
            t = self.targets[(start + i) % n]
            if t.healthy:
                self.rr[key] = (start + i + 1) % n
                return t
        self.rr[key] = (start + 1) % n
        return None

    # -- one client connection (keep-alive: any number of requests)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head[:-4].decode("latin-1").split("\r\n")
                method, path, version = lines[0].split(" ", 2)
                headers = [(k.strip(), v.strip()) for k, v in (line.split(":", 1) for line in lines[1:] if line)]
                body = await self._read_body(reader, headers)
                close = version == "HTTP/1.0" or "close" in _header(headers, "connection").lower()
                keep = await self._forward(method, path, headers, body, writer)
                if not keep or close:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        except asyncio.CancelledError:
            pass
        finally:
            self._conns.discard(task)
            writer.transport.abort()

    @staticmethod
    async def _read_body(reader: asyncio.StreamReader, headers: list[tuple[str, str]]) -> bytes:
        """The request body exactly as sent (chunked stays chunked)."""
        if "chunked" in _header(headers, "transfer-encoding").lower():
            raw = bytearray()
            while True:
                line = await reader.readuntil(b"\r\n")
                raw += line
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:
                        trailer = await reader.readuntil(b"\r\n")
                        raw += trailer
                        if trailer == b"\r\n":
                            return bytes(raw)
                raw += await reader.readexactly(size + 2)
        n = _header(headers, "content-length")
        return await reader.readexactly(int(n)) if n else b""

    async def _answer(self, writer: asyncio.StreamWriter, status: int, text: str) -> None:
        body = text.encode()
        reason = {502: "Bad Gateway", 503: "Service Unavailable"}.get(status, "Error")
        writer.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {len(body)}\r\n"
                     f"x-failover-target: proxy\r\n\r\n".encode() + body)
        await writer.drain()

    async def _forward(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes,
                       writer: asyncio.StreamWriter) -> bool:
        """Sends one request to the next target and relays its answer; False: close the client."""
        sid = _header(headers, "mcp-session-id") or None
        t = self._pick((sid, method))
        phase = self.phase
        # outcome: served (a complete answer relayed, any status), refused (no connection: the
        # proxy's 502), broken (connected, failed before the answer's head: the proxy's 502, the
        # target's fault), cut (a streamed answer cut mid-body: the target's fault), no_target.
        rec = {"sid": sid, "method": method, "target": t.name if t else None, "routed": phase,
               "ended": phase, "outcome": "no_target", "status": None, "detail": ""}
        self.log.append(rec)
        if t is None:
            self.no_target += 1
            await self._answer(writer, 503, "no healthy target")
            return True
        t.routed += 1
        try:
            ur, uw = await asyncio.wait_for(asyncio.open_connection(HOST, t.port, limit=1 << 22), 2)
        except (OSError, asyncio.TimeoutError) as e:
            self._mark(t, False)  # passive health check
            t.bad_gateway[phase] += 1
            t.refused[phase] += 1
            rec.update(outcome="refused", status=502, ended=self.phase, detail=repr(e))
            await self._answer(writer, 502, f"target {t.name}: cannot connect: {e!r}")
            return True
        try:
            # Before the answer's head: a failure is a 502.
            try:
                out = [f"{method} {path} HTTP/1.1"]
                out += [f"{k}: {v}" for k, v in headers if k.lower() not in self.HOP]
                out += [f"x-forwarded-for: {HOST}", "x-forwarded-proto: http", "connection: close"]
                uw.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
                await uw.drain()
                rhead = await ur.readuntil(b"\r\n\r\n")
                rlines = rhead[:-4].decode("latin-1").split("\r\n")
                status = int(rlines[0].split(" ", 2)[1])
                rheaders = [(k.strip(), v.strip()) for k, v in (line.split(":", 1) for line in rlines[1:] if line)]
                if method == "HEAD" or status < 200 or status in (204, 304):
                    mode, payload = "none", b""
                elif "chunked" in _header(rheaders, "transfer-encoding").lower():
                    mode, payload = "chunked", b""
                elif _header(rheaders, "content-length"):
                    # Buffered (nginx's default): a target dying mid-answer is still a clean 502.
                    mode, payload = "length", await ur.readexactly(int(_header(rheaders, "content-length")))
                else:
                    mode, payload = "eof", b""
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, IndexError) as e:
                self._mark(t, False)
                t.bad_gateway[phase] += 1
                rec.update(outcome="broken", status=502, ended=self.phase, detail=repr(e))
                await self._answer(writer, 502, f"target {t.name}: connection failed before the answer: {e!r}")
                return True
            keep_client = mode != "eof"
            out = [rlines[0]] + [f"{k}: {v}" for k, v in rheaders if k.lower() not in self.HOP]
            out.append(f"x-failover-target: {t.name}")
            if not keep_client:
                out.append("connection: close")
            writer.write(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + payload)
            await writer.drain()
            excerpt = bytearray(payload[:300])
            # Streamed bodies: relayed as they come; a failure now can only cut the connection.
            try:
                if mode == "chunked":
                    while True:
                        line = await _up(ur.readuntil(b"\r\n"))
                        size = int(line.split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            rest = bytearray(line)
                            while True:
                                trailer = await _up(ur.readuntil(b"\r\n"))
                                rest += trailer
                                if trailer == b"\r\n":
                                    break
                            writer.write(bytes(rest))
                            await writer.drain()
                            break
                        chunk = await _up(ur.readexactly(size + 2))
                        if status >= 400 and len(excerpt) < 300:
                            excerpt += chunk[:-2]
                        writer.write(line + chunk)
                        await writer.drain()
                elif mode == "eof":
                    while data := await _up(ur.read(65536)):
                        writer.write(data)
                        await writer.drain()
            except UpstreamBroken as e:
                t.cut += 1
                rec.update(outcome="cut", status=status, ended=self.phase, detail=str(e))
                return False
            rec.update(outcome="served", status=status, ended=self.phase,
                       detail=bytes(excerpt[:200]).decode("utf-8", "replace") if status >= 400 else "")
            t.served[phase] += 1
            t.statuses[status] += 1
            if status >= 400:
                t.errors.append((status, method, bytes(excerpt[:300]).decode("utf-8", "replace"),
                                 f"{phase!r}, answered at {time.monotonic() - self.t0:.2f} s"))
            return keep_client
        finally:
            uw.transport.abort()


async def _up(aw):
    """An upstream read; its failure is the target's, not the client's."""
    try:
        return await aw
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
        raise UpstreamBroken(repr(e)) from e


def _header(headers: list[tuple[str, str]], name: str) -> str:
    return next((v for k, v in headers if k.lower() == name), "")


# ----------------------------------------------------------------------------------------------
# The instances


class Instance:
    """`macp serve --backend aws` on a fixed port, restartable on that port."""

    def __init__(self, name: str, macp: str, port: int, work: str, env: dict):
        self.name, self.macp, self.port, self.env = name, macp, port, env
        self.data_dir = os.path.join(work, f"data-{name}")
        self.log_path = os.path.join(work, f"{name}.log")
        self.proc: subprocess.Popen | None = None
        self.generation = 0

    def start(self) -> None:
        """Starts it and waits for "listening on" (a port still held by the old process: retried)."""
        deadline = time.monotonic() + 30
        while True:
            log = open(self.log_path, "a")
            log.write(f"---- start {self.generation + 1} ----\n")
            log.flush()
            proc = subprocess.Popen(
                [self.macp, "serve", "--backend", "aws", "--bind", f"{HOST}:{self.port}", "--data-dir", self.data_dir],
                stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ, **self.env},
                stdin=subprocess.DEVNULL)
            log.close()
            assert proc.stdout is not None
            watchdog = threading.Timer(60, proc.kill)  # neither listening nor exiting: give up
            watchdog.start()
            try:
                for line in proc.stdout:
                    if line.startswith("listening on "):
                        threading.Thread(target=lambda p=proc.stdout: [None for _ in p], daemon=True).start()
                        self.proc = proc
                        self.generation += 1
                        STARTED.append(self)
                        return
            finally:
                watchdog.cancel()
            proc.wait()
            tail = self.log_tail()
            if "cannot listen" in tail and time.monotonic() < deadline:
                time.sleep(0.3)
                continue
            raise Failure(f"instance {self.name} did not start (exit {proc.returncode}): {tail[-1500:]}")

    def log_tail(self, n: int = 4000) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-n:]

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def terminate(self, timeout: float = 20) -> tuple[int | None, float]:
        """SIGTERM; returns (exit code or None if it had to be killed, seconds to exit)."""
        assert self.proc is not None
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        return code, time.monotonic() - t0

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.terminate(20)


STARTED: list[Instance] = []  # stopped at exit, however the run ends


def start_moto() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "aws", "moto_macp.py"), "--port", "0",
                             "--exit-on-stdin-eof"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise Failure(f"moto_server did not start: {line!r}")
    return proc, line.split()[-1]


def stop_moto(proc: subprocess.Popen) -> None:
    with contextlib.suppress(Exception):
        assert proc.stdin is not None
        proc.stdin.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)


# ----------------------------------------------------------------------------------------------
# The investigation each agent replays


def build_scripts(eval_set: str, names: list[str], posts: int) -> dict[str, list[dict]]:
    """Per agent, `posts` findings: its share of the record (every fifth finding), then re-checks
    of those. Every content is distinct, so the room can be compared with what was acknowledged."""
    _, record = replay.load(eval_set)
    scripts: dict[str, list[dict]] = {}
    for k, name in enumerate(names):
        own = [f for i, f in enumerate(record) if i % len(names) == k]
        steps = []
        for j in range(posts):
            base = own[j % len(own)]
            round_ = j // len(own)
            content = base["content"] if round_ == 0 else (
                f"Re-check {round_} by {name} of {base['key']} ({j:02d}): still holds. {base['content']}")
            evidence = replay.evidence_for(base)
            if round_:
                evidence = [{**e, "ref": f"{e['ref']}#recheck-{name}-{j}"} for e in evidence]
            steps.append({"key": f"{name}-{j:02d}", "content": content,
                          "tags": base["tags"] if round_ == 0 else ["follow-up", *base["tags"]][:3],
                          "mentions": replay.mentions(f"agent-{name}", base), "evidence": evidence})
        scripts[name] = steps
    contents = [s["content"] for steps in scripts.values() for s in steps]
    assert len(contents) == len(set(contents)), "script contents must be distinct"
    return scripts


# ----------------------------------------------------------------------------------------------
# An agent: one MCP client through the proxy, retrying what failed in transit


class Agent:
    def __init__(self, name: str, mode: str, url: str, proxy: Proxy, script: list[dict] | None = None,
                 rejoin_as: str | None = None):
        self.name, self.mode, self.url, self.proxy = name, mode, url, proxy
        self.rejoin_as = rejoin_as  # legacy: re-join under this id at the end, post, end the session
        self.stateless = mode != "legacy"
        self.script = script or []
        self.room = ""
        self.client: Client | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        # figures
        self.calls = 0
        self.retries = 0
        self.retried_calls = 0
        self.replays = 0  # post retries the server answered as replays: the first attempt was applied
        self.failovers: list[float] = []  # first failure -> success, per retried call
        self.longest = (0.0, "")  # the longest call (all attempts), and which tool
        self.retry_reasons: collections.Counter = collections.Counter()
        # outcome
        self.join_calls = 0
        self.joined_as: list[str] = []  # agent ids join_room answered, in order
        self.acked: dict[str, dict] = {}  # idempotency key -> {content, finding_id, agent_id}
        self.rejoin_posts: list[tuple[str, str | None, str]] = []  # (key, target that served it, agent_id)
        self.ended: dict | None = None  # the end of the session: DELETE's answer, then each instance's
        self.inflight: dict | None = None  # the post being attempted (may be applied if the agent fails)
        self.posted = 0
        self.cursor: str | None = None
        self.seen: dict[str, dict] = {}  # finding_id -> finding, from this agent's own feed
        self.repeats: list[str] = []
        self.entities: dict[str, str] = {}
        self.failure: str | None = None
        self.finished_posting = False
        self.completed = False
        # transport view
        self.session_id: str | None = None
        self.session_origin: str | None = None  # the target that answered initialize with the session id
        self.responses: collections.deque = collections.deque(maxlen=12)
        self.sent: list[tuple[str, str | None]] = []  # per request: (method, mcp-session-id it carried)
        # per answer: (method, session id the request carried, session id answered, status, target)
        self.exchanges: list[tuple[str, str | None, str | None, int, str | None]] = []

    async def _on_request(self, req: httpx2.Request) -> None:
        self.sent.append((req.method, req.headers.get("mcp-session-id")))

    async def _on_response(self, resp: httpx2.Response) -> None:
        target = resp.headers.get("x-failover-target")
        sid = resp.headers.get("mcp-session-id")
        if sid and self.session_id is None:
            self.session_id, self.session_origin = sid, target
        self.responses.append((resp.request.method, resp.status_code, target))
        self.exchanges.append((resp.request.method, resp.request.headers.get("mcp-session-id"), sid,
                               resp.status_code, target))

    async def connect(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=60),
                                  event_hooks={"request": [self._on_request], "response": [self._on_response]})
        await self._stack.enter_async_context(http)
        self.client = await self._stack.enter_async_context(
            Client(streamable_http_client(self.url, http_client=http), mode=self.mode, read_timeout_seconds=CALL_TIMEOUT))
        modern = self.client.protocol_version in MODERN_PROTOCOL_VERSIONS
        if modern != self.stateless:
            raise Failure(f"{self.name} ({self.mode}) negotiated {self.client.protocol_version}")

    async def close(self) -> None:
        """Closes the client: in the task that connected it (anyio's cancel scopes insist)."""
        if self._stack:
            stack, self._stack = self._stack, None
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await stack.aclose()

    def _args(self, args: dict) -> dict:
        """A call's arguments. Stateless agents name themselves on every call (writes must; reads then
        keep the agent's read position); legacy agents never do: their session knows who they are."""
        out = {"room_id": self.room, **args}
        if self.stateless:
            out["agent_id"] = self.name
        return out

    def _lost(self, tool: str, attempt: int, detail: str) -> SessionLost:
        last = next((r for r in reversed(self.responses) if r[1] == 404), None)
        where = "an instance"
        body = ""
        if last and last[2]:
            where = f"instance {last[2]}"
            body = next((e[2] for e in reversed(self.proxy.target(last[2]).errors) if e[0] == 404), "")
        return SessionLost(
            f"legacy agent {self.name} lost its MCP session at {tool} (attempt {attempt}, after {self.calls} "
            f"successful calls, {self.posted} posts): session {self.session_id} was created by instance "
            f"{self.session_origin}; the proxy sent the request to {where}, which answered 404 "
            f"{body.strip()!r} (client: {detail}). A 2025-11-25 client cannot go on without re-initializing and "
            f"re-joining, which this test forbids: MCP sessions are not shared between instances")

    async def call(self, tool: str, args: dict) -> dict:
        assert self.client is not None
        start = time.monotonic()
        first_fail: float | None = None
        attempt = 0
        while True:
            attempt += 1
            why = ""
            try:
                async with asyncio.timeout(CALL_TIMEOUT + 5):  # in this task: anyio's scopes need that
                    r = await self.client.call_tool(tool, args)
            except MCPError as e:
                msg = e.error.message
                if not self.stateless and ("Session terminated" in msg or "ession not found" in msg):
                    raise self._lost(tool, attempt, msg) from None
                if e.code not in (INTERNAL_ERROR, CONNECTION_CLOSED, REQUEST_TIMEOUT):
                    raise Failure(f"{self.name}: {tool} failed: MCP error {e.code}: {msg}") from None
                why = f"mcp {e.code} {msg}"
            except (httpx2.TransportError, asyncio.TimeoutError) as e:
                why = type(e).__name__
            else:
                if not r.is_error:
                    now = time.monotonic()
                    self.calls += 1
                    if first_fail is not None:
                        self.failovers.append(now - first_fail)
                        self.retried_calls += 1
                    if now - start > self.longest[0]:
                        self.longest = (now - start, tool)
                    return r.structured_content or {}
                err = (r.structured_content or {}).get("error") or {}
                text = r.content[0].text if r.content else str(err)
                if err.get("code") == "not_joined" and not self.stateless:
                    raise SessionLost(
                        f"legacy agent {self.name}: {tool} was refused not_joined on attempt {attempt}: the instance "
                        f"that served it ({self.responses[-1][2] if self.responses else '?'}) has the session but not "
                        f"the agent it joined as: {text[:300]}")
                if not err.get("retryable"):
                    raise Failure(f"{self.name}: {tool}({json.dumps(args)[:200]}) failed: {text[:400]}")
                why = f"retryable {err.get('code')}"
            now = time.monotonic()
            first_fail = first_fail or now
            self.retries += 1
            self.retry_reasons[re.sub(r"\d{3,}", "N", why)[:80]] += 1
            if now - first_fail > RETRY_DEADLINE:
                raise Failure(f"{self.name}: {tool} still failing after {RETRY_DEADLINE:.0f} s and {attempt} attempts: {why}")
            await asyncio.sleep(min(0.1 * attempt, 0.5))

    async def poll(self) -> dict:
        args = self._args({} if self.cursor is None else {"cursor": self.cursor})
        u = await self.call("get_updates", args)
        for f in u.get("findings", []):
            if f["finding_id"] in self.seen:
                self.repeats.append(f["finding_id"])
            else:
                self.seen[f["finding_id"]] = f
        self.cursor = u.get("cursor", self.cursor)
        return u

    async def entity(self, name: str, etype: str, idents: list[tuple[str, str]]) -> str:
        if name not in self.entities:
            e = await self.call("add_entity", self._args({
                "name": name, "type": etype, "identifiers": [{"type": t, "value": v} for t, v in idents],
                "idempotency_key": f"{self.name}-e-" + re.sub(r"[^A-Za-z0-9._-]", "_", name)}))
            self.entities[name] = e["entity"]["entity_id"]
        return self.entities[name]

    async def join(self, agent_id: str) -> None:
        self.join_calls += 1
        joined = await self.call("join_room", {"room_id": self.room, "agent_id": agent_id,
                                               "agent_type": f"failover-{self.mode}"})
        self.joined_as.append(joined.get("agent_id"))
        if joined.get("agent_id") != agent_id:
            raise Failure(f"{self.name} joined as {joined.get('agent_id')}, asked for {agent_id}")

    def _served_last_post(self) -> str | None:
        """The target that answered this agent's last POST (the call that just returned)."""
        return next((x[4] for x in reversed(self.exchanges) if x[0] == "POST"), None)

    async def rejoin_and_post(self, n: int = 4) -> None:
        """Legacy, after both restarts: join_room again as a new agent through the proxy, then post
        without agent_id; each post must be attributed to the new agent whichever instance serves it,
        and both instances must serve some (up to 2n posts to get both)."""
        new = self.rejoin_as
        assert new and not self.stateless
        await self.join(new)
        for k in range(2 * n):
            served = {t for _, t, _ in self.rejoin_posts}
            if k >= n and {"A", "B"} <= served:
                break
            key = f"{new}-{k:02d}"
            content = f"After both restarts {self.name} re-joined as {new}: check {k} of the failover ({key})."
            self.inflight = {"content": content}
            p = await self.call("post_finding", self._args({"content": content, "tags": ["failover"],
                                                            "idempotency_key": key}))
            target = self._served_last_post()
            got = p["finding"].get("agent_id")
            self.acked[key] = {"content": content, "finding_id": p["finding"]["finding_id"], "agent_id": new}
            self.inflight = None
            self.rejoin_posts.append((key, target, got))
            if got != new:
                raise Failure(f"{self.name} re-joined as {new} on its MCP session {self.session_id}, but instance "
                              f"{target} attributed its post {key} (no agent_id) to {got!r}")
        served = collections.Counter(t for _, t, _ in self.rejoin_posts)
        if set(served) != {"A", "B"}:
            raise Failure(f"{self.name}'s posts after re-joining as {new} were not served by both instances: "
                          f"{dict(served)}")

    async def end_session(self) -> None:
        """Ends the MCP session as the client does on exit (DELETE with its mcp-session-id, through
        the proxy); then each instance, asked directly, must not know the session any more (404)."""
        sid, version = self.session_id, self.client.protocol_version if self.client else None
        n = len(self.exchanges)
        await self.close()
        deletes = [x for x in self.exchanges[n:] if x[0] == "DELETE"]
        self.ended = {"delete": [(x[3], x[4]) for x in deletes], "probes": {}}
        if not any(x[1] == sid and 200 <= x[3] < 300 for x in deletes):
            raise Failure(f"{self.name}: ending MCP session {sid} (DELETE through the proxy) was not acknowledged: "
                          f"{[(x[1], x[3], x[4]) for x in deletes] or 'no DELETE sent'}")
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "get_updates", "arguments": {"room_id": self.room}}}
        headers = {"mcp-session-id": sid, "mcp-protocol-version": version or "2025-11-25",
                   "accept": "application/json, text/event-stream", "content-type": "application/json"}
        async with httpx2.AsyncClient(timeout=10) as http:
            for t in self.proxy.targets:
                r = await http.post(f"http://{HOST}:{t.port}/mcp", headers=headers, json=body)
                self.ended["probes"][t.name] = r.status_code
                if r.status_code != 404:
                    raise Failure(f"{self.name}: after its session {sid} was ended (DELETE answered "
                                  f"{deletes[-1][3]} by {deletes[-1][4]}), instance {t.name} asked directly answered "
                                  f"{r.status_code}, want 404: {r.text[:300]!r}")

    async def run(self, room: str, rng: random.Random, posting_done: asyncio.Event, chaos_done: asyncio.Event,
                  rejoin_done: asyncio.Event) -> None:
        self.room = room
        try:
            await self.connect()
            await self.join(self.name)
            ctx = await self.call("get_room_context", self._args({}))
            if "INC-4471" not in ctx["room"]["name"]:
                raise Failure(f"{self.name}: not the replay room: {ctx['room']['name']!r}")
            for j, step in enumerate(self.script):
                u = await self.poll()
                while u.get("has_more"):
                    u = await self.poll()
                if j % 4 == 1:
                    await self.call("search_findings", self._args({"query": step["content"][:200], "limit": 3}))
                if j % 10 == 5:
                    await self.call("get_room_context", self._args({}))
                refs = [await self.entity(n, t, ids) for n, t, ids in step["mentions"]]
                self.inflight = step
                p = await self.call("post_finding", self._args({
                    "content": step["content"], "tags": step["tags"], "entity_refs": refs,
                    "evidence": step["evidence"], "idempotency_key": step["key"]}))
                if p.get("replayed"):
                    self.replays += 1
                self.acked[step["key"]] = {"content": step["content"], "finding_id": p["finding"]["finding_id"],
                                           "agent_id": self.name}
                self.inflight = None
                self.posted += 1
                await asyncio.sleep(rng.uniform(0, 0.15))
            await self.call("declare_status", self._args({"status": "idle", "reason": "my part of the record is posted"}))
            self.finished_posting = True
            # Keep reading through the replacement, then read the feed to its end.
            while not (chaos_done.is_set() and posting_done.is_set()):
                await self.poll()
                await asyncio.sleep(0.3)
            # Both instances are back: one legacy agent re-joins as a new agent and posts; the others
            # wait for that before reading their feed to the end (it must hold those posts too).
            if self.rejoin_as:
                try:
                    await self.rejoin_and_post()
                finally:
                    rejoin_done.set()
            while not rejoin_done.is_set():
                await self.poll()
                await asyncio.sleep(0.3)
            while True:
                u = await self.poll()
                if not u.get("has_more") and not u.get("findings"):
                    break
            self.completed = True
            if self.rejoin_as:
                await self.end_session()
        except Failure as e:
            self.failure = str(e)
        except Exception as e:  # noqa: BLE001 - e.g. the MCP client's transport broke
            self.failure = f"{self.name}: {type(e).__name__}: {e}"
        finally:
            self.finished_posting = True
            if self.rejoin_as:
                rejoin_done.set()
            await self.close()


# ----------------------------------------------------------------------------------------------
# The run


async def wait_progress(agents: list[Agent], frac: float, deadline: float) -> None:
    while time.monotonic() < deadline:
        alive = [a for a in agents if a.failure is None]
        want = sum(len(a.script) for a in alive)
        if not alive or not want or sum(a.posted for a in alive) >= frac * want:
            return
        await asyncio.sleep(0.05)


async def wait_healthy(t: Target, timeout: float = 10) -> float:
    t0 = time.monotonic()
    while not t.healthy:
        if time.monotonic() - t0 > timeout:
            raise Failure(f"the proxy did not see instance {t.name} healthy again within {timeout:.0f} s")
        await asyncio.sleep(0.02)
    return time.monotonic()


async def chaos(a: Instance, b: Instance, proxy: Proxy, agents: list[Agent], done: asyncio.Event,
                log: list, t0: float, deadline: float) -> dict:
    out: dict = {}

    def note(what: str) -> None:
        log.append((round(time.monotonic() - t0, 2), what))

    try:
        await wait_progress(agents, KILL_AT, deadline)
        proxy.phase = "A down"
        note("SIGKILL A")
        killed = time.monotonic()
        await asyncio.to_thread(a.kill)
        await asyncio.sleep(DOWN_SECONDS)
        note("restarting A")
        await asyncio.to_thread(a.start)
        back = await wait_healthy(proxy.target("A"))
        proxy.phase = "between"
        out["A_down_seconds"] = round(back - killed, 2)
        note(f"A back (down {out['A_down_seconds']} s)")
        await wait_progress(agents, TERM_AT, deadline)
        proxy.phase = "B replaced"
        note("SIGTERM B")
        termed = time.monotonic()
        code, took = await asyncio.to_thread(b.terminate, 20)
        out["B_exit"], out["B_exit_seconds"] = code, round(took, 2)
        note(f"B exited {code} after {took:.2f} s; restarting B")
        await asyncio.to_thread(b.start)
        back = await wait_healthy(proxy.target("B"))
        proxy.phase = "after"
        out["B_down_seconds"] = round(back - termed, 2)
        note(f"B back (down {out['B_down_seconds']} s)")
        await asyncio.sleep(2.0)  # traffic on both new instances before the agents wind down
    finally:
        done.set()
    return out


async def read_room(auditor: Agent, room: str) -> tuple[list[dict], list[dict]]:
    """The whole timeline, and every agent_joined event, as a fresh client reads them."""
    found, cursor = [], None
    while True:
        page = await auditor.call("get_timeline", {"room_id": room, "limit": 200, **({"cursor": cursor} if cursor else {})})
        found.extend(page["findings"])
        cursor = page.get("next_cursor")
        if not cursor:
            break
    joins, cursor = [], None
    while True:
        u = await auditor.call("get_updates", {"room_id": room, "kinds": ["agent_joined"], "limit": 200,
                                               **({"cursor": cursor} if cursor else {})})
        joins.extend(e for e in u.get("events", []) if e.get("kind") == "agent_joined")
        cursor = u["cursor"]
        if not u.get("has_more"):
            break
    return found, joins


def check(agents: list[Agent], found: list[dict], joins: list[dict], proxy: Proxy, chaos_out: dict) -> list[str]:
    problems: list[str] = []
    ids = [f["finding_id"] for f in found]
    if len(ids) != len(set(ids)):
        problems.append(f"the timeline repeats findings: {[i for i, n in collections.Counter(ids).items() if n > 1]}")
    by_content: dict[str, list[dict]] = collections.defaultdict(list)
    for f in found:
        by_content[f["content"]].append(f)
    lost, twice, misattributed = [], [], []
    for a in agents:
        for key, ack in a.acked.items():
            got = by_content.get(ack["content"], [])
            if not got:
                lost.append(key)
            elif len(got) > 1:
                twice.append(f"{key} x{len(got)}")
            elif got[0]["finding_id"] != ack["finding_id"] or got[0]["agent_id"] != ack["agent_id"]:
                misattributed.append(f"{key}: {got[0]['finding_id']}/{got[0]['agent_id']}, "
                                     f"acked {ack['finding_id']}/{ack['agent_id']}")
    if lost:
        problems.append(f"{len(lost)} acknowledged posts are not in the room: {lost[:10]}")
    if twice:
        problems.append(f"posts applied more than once: {twice[:10]}")
    if misattributed:
        problems.append(f"posts attributed wrongly: {misattributed[:5]}")
    acked = {ack["content"] for a in agents for ack in a.acked.values()}
    maybe = {a.inflight["content"] for a in agents if a.failure and a.inflight}
    extra = [f for f in found if f["content"] not in acked]
    unexplained = [f"{f['agent_id']}: {f['content'][:60]!r}" for f in extra if f["content"] not in maybe]
    if unexplained:
        problems.append(f"findings in the room that no agent had acknowledged: {unexplained[:5]}")
    dup_maybe = [c[:60] for c in maybe if len(by_content.get(c, [])) > 1]
    if dup_maybe:
        problems.append(f"an in-flight post was applied more than once: {dup_maybe}")
    # Each agent's own feed: every finding once.
    for a in agents:
        if not a.completed:
            continue
        if a.repeats:
            problems.append(f"{a.name}'s get_updates delivered findings twice: {a.repeats[:5]}")
        missing = set(ids) - set(a.seen)
        unknown = set(a.seen) - set(ids)
        if missing or unknown:
            problems.append(f"{a.name}'s feed missed {len(missing)} and invented {len(unknown)} findings")
    # Joins: one join_room call each, but for the deliberate re-join under a new id at the end (legacy
    # agents otherwise never rejoin); one agent_joined event per agent id. Counting events, not just
    # agents, cannot false-fail on a retried join_room: the store writes the agent row (conditioned on
    # its absence) and its agent_joined event in one transaction, and a retry that finds the row
    # emits nothing (JoinRoom -> insert_agent -> Insert::Existing). Two events would be a real bug.
    per_agent = collections.Counter(e.get("agent_id") for e in joins)
    expected_ids: set[str] = set()
    for a in agents:
        want = [a.name] + ([a.rejoin_as] if a.rejoin_as and a.failure is None else [])
        expected_ids.update(want)
        if a.failure is None and a.joined_as != want:
            problems.append(f"{a.name} joined as {a.joined_as} ({a.join_calls} join_room calls), want {want}")
        for agent_id in (want if a.acked else []):
            if per_agent[agent_id] != 1:
                problems.append(f"agent {agent_id} ({a.name}'s) has {per_agent[agent_id]} agent_joined events, want 1")
    strangers = set(per_agent) - expected_ids - {a.rejoin_as for a in agents if a.rejoin_as}
    if strangers:
        problems.append(f"agents joined that the test did not run: {sorted(strangers)}")
    # The re-join and the end of the session (the details fail the agent in the run; this makes sure
    # they happened).
    for a in agents:
        if a.rejoin_as and a.failure is None:
            if len(a.rejoin_posts) < 4 or {t for _, t, _ in a.rejoin_posts} != {"A", "B"}:
                problems.append(f"{a.name} re-joined as {a.rejoin_as} but its posts were {a.rejoin_posts}")
            if not a.ended or a.ended["probes"] != {"A": 404, "B": 404}:
                problems.append(f"{a.name}'s ended session was not checked on both instances: {a.ended}")
    # Legacy MCP sessions: one session id for the whole run (sent on every request after initialize,
    # never another one answered), and round robin per request really exercised: each session's
    # POSTs served by both instances while both were up, and again by both fresh processes at the end.
    for a in agents:
        if a.stateless or a.session_id is None:
            if not a.stateless:
                problems.append(f"legacy agent {a.name} never got an MCP session id")
            continue
        sids = collections.Counter(sid for _, sid in a.sent)
        bare = [m for m, sid in a.sent[1:] if sid is None]
        if set(sids) - {None} != {a.session_id} or bare:
            problems.append(f"legacy agent {a.name}'s mcp-session-id changed: it sent {dict(sids)} "
                            f"({len(bare)} requests after initialize without one: {bare[:5]})")
        answered = {x[2] for x in a.exchanges if x[2]} - {a.session_id}
        if answered:
            problems.append(f"legacy agent {a.name} was answered other session ids: {sorted(answered)}")
        mine = [r for r in proxy.log if r["sid"] == a.session_id and r["method"] == "POST"
                and r["outcome"] == "served" and r["status"] < 500]
        for phase in ("before", "after"):
            by = collections.Counter(r["target"] for r in mine if r["routed"] == phase)
            if set(by) != {"A", "B"}:
                problems.append(f"legacy agent {a.name}'s session {a.session_id}: its POSTs in phase {phase!r} were "
                                f"served by {dict(by) or 'no instance'}, want both A and B (round robin per request)")
    # The instances: each served before and after its outage, the replacement was graceful.
    a_t, b_t = proxy.target("A"), proxy.target("B")
    need = {("A", "before"): a_t, ("A", "between"): a_t, ("A", "after"): a_t,
            ("B", "before"): b_t, ("B", "A down"): b_t, ("B", "after"): b_t}
    for (name, phase), t in need.items():
        if t.served[phase] == 0:
            problems.append(f"instance {name} served no request in phase {phase!r}")
    if "B_exit" in chaos_out and chaos_out["B_exit"] != 0:
        problems.append(f"instance B exited {chaos_out['B_exit']} after SIGTERM (want 0 within the grace period)")
    if "B_exit" in chaos_out and chaos_out["B_exit_seconds"] >= TERM_EXIT_MAX:
        problems.append(f"instance B took {chaos_out['B_exit_seconds']} s to exit after SIGTERM (want < "
                        f"{TERM_EXIT_MAX:g} s, well under the server's 10 s grace)")
    # The graceful replacement: B itself failed nothing routed to it, or still running, while it was
    # being replaced. A 502 because B no longer accepted connections (refused) is the proxy's; a 5xx
    # from B, a connection B accepted and dropped before answering (broken), or a stream it cut are B's.
    bad = [r for r in proxy.log if r["target"] == "B" and "B replaced" in (r["routed"], r["ended"])
           and (r["outcome"] in ("broken", "cut") or (r["outcome"] == "served" and r["status"] >= 500))]
    for r in bad[:5]:
        problems.append(f"instance B, being replaced (SIGTERM), failed a {r['method']} routed to it in phase "
                        f"{r['routed']!r}: {r['outcome']} (status {r['status']}) {r['detail'][:200]!r}")
    if len(bad) > 5:
        problems.append(f"... and {len(bad) - 5} more requests B failed while being replaced")
    return problems


def figures(agents: list[Agent], proxy: Proxy, chaos_out: dict, log: list, seconds: float, found: int) -> dict:
    fo = sorted(x for a in agents for x in a.failovers)
    phases = ["before", "A down", "between", "B replaced", "after"]
    return {
        "seconds": round(seconds, 1),
        "findings_in_room": found,
        "requests_per_instance": {
            t.name: {"routed": t.routed, "served": sum(t.served.values()),
                     "served_per_phase": {p: t.served[p] for p in phases},
                     "502_per_phase": {p: n for p, n in t.bad_gateway.items() if n},
                     "502_refused_per_phase": {p: n for p, n in t.refused.items() if n}, "cut_streams": t.cut,
                     "statuses": dict(t.statuses), "health_changes": len(t.health),
                     "error_answers": [f"{st} {m} (routed in {when}): {body[:160]}" for st, m, body, when in t.errors]}
            for t in proxy.targets},
        "no_healthy_target": proxy.no_target,
        "chaos": {**chaos_out, "timeline": [f"{at:.2f} s {what}" for at, what in log]},
        "retries": sum(a.retries for a in agents),
        "retried_calls": sum(a.retried_calls for a in agents),
        "replayed_posts": sum(a.replays for a in agents),
        "retry_reasons": dict(sum((a.retry_reasons for a in agents), collections.Counter())),
        "failover_seconds": {"count": len(fo), "median": round(statistics.median(fo), 3) if fo else None,
                             "max": round(max(fo), 3) if fo else None},
        "per_agent": {a.name: {"mode": a.mode, "posts": a.posted, "calls": a.calls, "retries": a.retries,
                               "longest_stall_s": round(a.longest[0], 3), "longest_stall_tool": a.longest[1],
                               "ok": a.failure is None and a.completed}
                      for a in agents},
        "legacy_sessions": {
            a.name: {"session_ids_sent": len({sid for _, sid in a.sent if sid}), "origin": a.session_origin,
                     "posts_served": {p: dict(sorted(collections.Counter(
                         r["target"] for r in proxy.log if r["sid"] == a.session_id and r["method"] == "POST"
                         and r["outcome"] == "served" and r["routed"] == p).items())) for p in phases}}
            for a in agents if not a.stateless},
        "rejoin": {a.name: {"as": a.rejoin_as, "posts": [f"{t}:{who}" for _, t, who in a.rejoin_posts], **(a.ended or {})}
                   for a in agents if a.rejoin_as},
    }


def summary(f: dict) -> str:
    """The figures issue 18 asks for, for a person."""
    lines = [f"failover e2e: {f['findings_in_room']} findings in the room after {f['seconds']} s"]
    phases = "/".join(next(iter(f["requests_per_instance"].values()))["served_per_phase"])
    for name, t in f["requests_per_instance"].items():
        per = " ".join(str(n) for n in t["served_per_phase"].values())
        lines.append(f"  instance {name}: {t['served']} requests served ({phases}: {per}), "
                     f"502s {sum(t['502_per_phase'].values())} ({sum(t['502_refused_per_phase'].values())} refused), "
                     f"streams cut {t['cut_streams']}, statuses {t['statuses']}")
    for name, t in f["requests_per_instance"].items():
        for e in t["error_answers"]:
            if e.startswith("5"):
                lines.append(f"  instance {name} answered {e}")
    c = f["chaos"]
    lines.append(f"  A crashed: back after {c.get('A_down_seconds')} s; B replaced: exit {c.get('B_exit')} after "
                 f"{c.get('B_exit_seconds')} s, back after {c.get('B_down_seconds')} s")
    fo = f["failover_seconds"]
    lines.append(f"  retries {f['retries']} over {f['retried_calls']} calls ({f['replayed_posts']} posts replayed); "
                 f"failover seen by clients: median {fo['median']} s, max {fo['max']} s")
    for n, s in f["legacy_sessions"].items():
        lines.append(f"  {n}: {s['session_ids_sent']} session id(s) sent, created by {s['origin']}; POSTs served "
                     + ", ".join(f"{p} {'/'.join(f'{t}{c}' for t, c in by.items()) or '-'}"
                                 for p, by in s["posts_served"].items()))
    for n, r in f["rejoin"].items():
        lines.append(f"  {n} re-joined as {r['as']}: posts {' '.join(r['posts'])}; session ended: DELETE "
                     f"{r.get('delete')}, then asked directly {r.get('probes')}")
    lines.append("  longest stall per client: " + ", ".join(
        f"{n} {a['longest_stall_s']} s ({a['longest_stall_tool'] or '-'}){'' if a['ok'] else ' FAILED'}"
        for n, a in f["per_agent"].items()))
    return "\n".join(lines)


async def run(args, endpoint: str, work: str) -> tuple[dict, list[str]]:
    t0 = time.monotonic()
    deadline = t0 + TEST_DEADLINE
    env = {**aws_env(endpoint), "MACP_AWS_TABLE_PREFIX": f"fo{os.getpid()}-{int(time.time())}-"}
    setup = await asyncio.to_thread(subprocess.run, [args.macp, "setup", "--backend", "aws"], env={**os.environ, **env},
                                    capture_output=True, text=True, timeout=120)
    if setup.returncode != 0:
        raise Failure(f"macp setup --backend aws failed: {setup.stderr.strip()[-1500:]}")
    a = Instance("A", args.macp, free_port(), work, env)
    b = Instance("B", args.macp, free_port(), work, env)
    proxy = Proxy([Target("A", a.port), Target("B", b.port)], t0)
    agents: list[Agent] = []
    try:
        await asyncio.gather(asyncio.to_thread(a.start), asyncio.to_thread(b.start))
        url = proxy.start()
        for t in proxy.targets:
            await wait_healthy(t)
        names = ([] if args.only_stateless else LEGACY) + STATELESS
        scripts = build_scripts(args.eval_set, names, args.posts)
        auditor = Agent("auditor", "auto", url, proxy)
        await auditor.connect()
        try:
            room_meta, _ = replay.load(args.eval_set)
            room = (await auditor.call("create_room", {"name": room_meta["name"], "objective": room_meta["objective"],
                                                       "tags": ["failover", "sev-1"]}))["room_id"]
            rejoiner = next((n for n in names if n in LEGACY), None)
            agents = [Agent(n, "legacy" if n in LEGACY else "auto", url, proxy, scripts[n],
                            rejoin_as=f"{n}-2" if n == rejoiner else None) for n in names]
            posting_done, chaos_done, rejoin_done = asyncio.Event(), asyncio.Event(), asyncio.Event()
            if rejoiner is None:
                rejoin_done.set()
            rng = random.Random(18)
            log: list = []

            async def watch_posting() -> None:
                while not all(x.finished_posting for x in agents):
                    await asyncio.sleep(0.05)
                posting_done.set()

            tasks = [asyncio.create_task(x.run(room, rng, posting_done, chaos_done, rejoin_done)) for x in agents]
            watcher = asyncio.create_task(watch_posting())
            chaos_task = asyncio.create_task(chaos(a, b, proxy, agents, chaos_done, log, t0, deadline))
            remaining = deadline - time.monotonic()
            done, pending = await asyncio.wait([*tasks, chaos_task], timeout=remaining)
            for p in pending:
                p.cancel()
            watcher.cancel()
            for x, t in zip(agents, tasks):
                if t in pending and x.failure is None:
                    x.failure = f"{x.name}: did not finish within the test's {TEST_DEADLINE:.0f} s"
            chaos_out: dict = {}
            problems: list[str] = []
            if chaos_task in pending:
                problems.append("the kill/restart sequence did not finish in time")
            elif chaos_task.exception():
                problems.append(f"kill/restart: {chaos_task.exception()}")
            else:
                chaos_out = chaos_task.result()
            found, joins = await read_room(auditor, room)
        finally:
            await auditor.close()
        problems += check(agents, found, joins, proxy, chaos_out)
        failures = [x.failure for x in agents if x.failure]
        figs = figures(agents, proxy, chaos_out, log, time.monotonic() - t0, len(found))
        return figs, failures + problems
    finally:
        proxy.stop()
        for inst in (a, b):
            await asyncio.to_thread(inst.stop)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--macp", required=True, help="the macp binary (built with the aws feature)")
    ap.add_argument("--aws-endpoint", help="a running moto (tests/aws/moto_macp.py); default: start one")
    ap.add_argument("--eval-set", default=os.environ.get("MACP_EVAL_SET", replay.DEFAULT_EVAL_SET))
    ap.add_argument("--posts", type=int, default=30, help="findings each agent posts (default 30)")
    ap.add_argument("--only-stateless", action="store_true",
                    help="run only the stateless agents (what passes without MCP sessions shared between instances)")
    ap.add_argument("--verbose", action="store_true", help="show the MCP client's own warnings")
    args = ap.parse_args()
    if not args.verbose:
        # The client logs a failed DELETE of a lost session and GET-stream reconnects: noise here.
        for name in ("mcp", "httpx2", "httpcore2"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    if not os.path.exists(args.eval_set):
        print(f"FAILOVER E2E FAILED: no labelled set at {args.eval_set} (set MACP_EVAL_SET or --eval-set)", file=sys.stderr)
        sys.exit(1)
    moto = None
    try:
        endpoint = args.aws_endpoint
        if not endpoint:
            moto, endpoint = start_moto()
        with tempfile.TemporaryDirectory(prefix="macp-failover-") as work:
            figs, problems = asyncio.run(run(args, endpoint, work))
            print(json.dumps(figs))
            print(summary(figs))
            if problems:
                for name in ("A", "B"):
                    panics = [line for line in open(os.path.join(work, f"{name}.log"), errors="replace")
                              if '"level":"ERROR"' in line or "panicked" in line]
                    if panics:
                        problems.append(f"instance {name} logged {len(panics)} errors, last: {panics[-1].strip()[:400]}")
    except Failure as e:
        problems = [str(e)]
    finally:
        for inst in STARTED:
            inst.stop()
        if moto:
            stop_moto(moto)
    if problems:
        print("FAILOVER E2E FAILED:\n  - " + "\n  - ".join(problems), file=sys.stderr)
        sys.exit(1)
    print("failover e2e: ok", file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The web view, driven in real headless Chromium (Debian's `chromium` + `chromium-driver`,
through selenium) against a real `macp serve`, with a real MCP agent (the Python `mcp` client)
on the other side.

    python tests/e2e/web_e2e.py --macp target/debug/macp [--screenshots DIR] [--bench N]

Checks, as a person would see them: the rooms page lists the room; the room page shows the
agent's finding; a finding the agent posts appears without a reload (the latency is printed);
a finding whose content is `<img src=x onerror=alert(1)>` renders as text (no element, no
script); a decision answered in the page reaches the asking agent's feed, recorded as a
person's answer through the web channel; a phase marked in the page is the room's phase; a
refuted hypothesis is marked as such; a state-changing request without the page's header, or
from another origin, is refused; every response carries the Content-Security-Policy. With auth
on, the page without a session gets the sign-in and never the data, and the API refuses it;
a person signs in at an issuer (tests/e2e/oauth_issuer.py: code + PKCE, public client) and lands
back in the room; the session cookie is HttpOnly and SameSite=Strict, changes need its CSRF
token, an expired access token is refreshed, signing out ends the session on the server;
`macp timeline`, `macp search` and `macp decide` reach the server with the user's token.

--bench N seeds a room with N findings and prints the room page's first render (ms) and page
weight (bytes over the wire); --screenshots DIR saves the rooms page and a busy room page.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import time

import httpx2
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import auth_e2e  # noqa: E402
import mcp_e2e  # noqa: E402
import oauth_issuer  # noqa: E402
from mcp_e2e import Failure, call, expect, session  # noqa: E402

XSS = "<img src=x onerror=alert(1)>"


def browser() -> webdriver.Chrome:
    o = webdriver.ChromeOptions()
    o.binary_location = os.environ.get("MACP_CHROMIUM", "/usr/bin/chromium")
    for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1000"]:
        o.add_argument(flag)
    o.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='macp-chromium-')}")
    return webdriver.Chrome(service=Service(os.environ.get("MACP_CHROMEDRIVER", "/usr/bin/chromedriver")), options=o)


def wait_for(what: str, f, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = f()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 — the page may be mid-render
            last = e
        time.sleep(0.02)
    raise Failure(f"timed out waiting for {what}" + (f" ({last})" if last else ""))


def no_alert(d) -> None:
    try:
        a = d.switch_to.alert
        raise Failure(f"a script ran: alert {a.text!r}")
    except NoAlertPresentException:
        pass


async def agent_setup(url: str) -> dict:
    http, c = await session(url, None)
    async with http, c:
        room = (await call(c, "create_room", {"name": "INC-7 checkout 502s", "objective": "Find why checkout returns 502s",
                                                "tags": ["sev-2"]}))["room_id"]
        await call(c, "join_room", {"room_id": room, "agent_id": "ana-claude", "agent_type": "claude-code"})
        first = await call(c, "post_finding", {"room_id": room, "content": "502s began at 14:02 UTC on checkout-api",
                                                "tags": ["triage"]})
        hyp = await call(c, "post_finding", {"room_id": room, "content": "Hypothesis: the ALB certificate expired",
                                              "hypothesis": True})
        await call(c, "post_finding", {"room_id": room, "content": "Refuted: the certificate is valid until 2027",
                                        "reply_to": hyp["finding"]["finding_id"], "verdict": "refutes",
                                        "evidence": [{"kind": "log", "ref": "openssl s_client output"}]})
        d = await call(c, "ask_decision", {"room_id": room, "question": "Roll back deploy 4471?",
                                            "options": ["yes", "no"], "urgency": "high"})
        ctx = await call(c, "get_room_context", {"room_id": room})
    return {"room": room, "first": first["finding"]["finding_id"], "hypothesis": hyp["finding"]["finding_id"],
            "decision": d["decision_id"], "cursor": ctx["cursor"]}


async def agent_post(url: str, room: str, content: str) -> str:
    http, c = await session(url, None)
    async with http, c:
        await call(c, "join_room", {"room_id": room, "agent_id": "ana-claude"})
        return (await call(c, "post_finding", {"room_id": room, "content": content}))["finding"]["finding_id"]


async def agent_feed(url: str, room: str, cursor: str) -> list[dict]:
    http, c = await session(url, None)
    async with http, c:
        u = await call(c, "get_updates", {"room_id": room, "cursor": cursor, "kinds": ["decision_answered"]})
        d = await call(c, "get_room_summary", {"room_id": room})
        return [u["events"], d]


async def agent_erase(url: str, room: str, finding: str | None, cursor: str) -> list:
    """Ana's agent erases its finding (when given one); returns the erasure events it then sees."""
    http, c = await session(url, None)
    async with http, c:
        await call(c, "join_room", {"room_id": room, "agent_id": "ana-claude"})
        if finding:
            out = await call(c, "erase", {"room_id": room, "finding_id": finding, "reason": "customer number"})
            expect(out["notice"].startswith("[erased by ") and out["erasure"]["agent_id"] == "ana-claude",
                   f"the erase answer: {out}")
        u = await call(c, "get_updates", {"room_id": room, "cursor": cursor, "kinds": ["erased"]})
        return [u["events"], None]


def check_http(base: str) -> None:
    """The API's guards, with a plain HTTP client."""
    r = httpx2.get(base + "/")
    expect(r.status_code == 200 and "script-src 'self'" in r.headers.get("content-security-policy", ""),
           f"the page carries the CSP: {r.headers.get('content-security-policy')}")
    expect(r.headers.get("x-content-type-options") == "nosniff", "nosniff")
    room = httpx2.get(base + "/api/rooms").json()[0]["room"]["room_id"]
    steer = f"{base}/api/rooms/{room}/steer"
    r = httpx2.post(steer, json={"marker": "x"})
    expect(r.status_code == 403 and r.json()["error"]["code"] == "csrf", f"a change without the header: {r.status_code}")
    r = httpx2.post(steer, json={"marker": "x"}, headers={"X-MACP-Web": "1", "Origin": "https://evil.example"})
    expect(r.status_code == 403, f"a change from another origin: {r.status_code}")
    r = httpx2.get(base + "/api/rooms", headers={"Host": "evil.example"})
    expect(r.status_code == 403, f"another Host (DNS rebinding): {r.status_code}")


def run_auth_off(macp: str, shots: str | None, bench: int) -> dict:
    out: dict = {}
    with tempfile.TemporaryDirectory() as work:
        proc, url = mcp_e2e.start_server(macp, os.path.join(work, "data"), ["--embedder", "none"], {})
        base = url.removesuffix("/mcp")
        d = browser()
        try:
            s = asyncio.run(agent_setup(url))
            room = s["room"]
            t0 = time.monotonic()
            d.get(base + "/")
            wait_for("the room on the rooms page", lambda: d.find_elements(By.CSS_SELECTOR, f'[data-room="{room}"]'))
            out["rooms_page_ms"] = round((time.monotonic() - t0) * 1000)
            card = d.find_element(By.CSS_SELECTOR, f'[data-room="{room}"]').text
            expect("INC-7" in card and "1 open decision" in card, f"the room card: {card!r}")
            if shots:
                d.save_screenshot(os.path.join(shots, "rooms.png"))
            d.find_element(By.CSS_SELECTOR, f'[data-room="{room}"]').click()
            wait_for("the agent's finding", lambda: d.find_elements(By.CSS_SELECTOR, f'[data-finding="{s["first"]}"]'))
            hyp = d.find_element(By.CSS_SELECTOR, f'#feed [data-finding="{s["hypothesis"]}"]').text
            expect("hypothesis" in hyp and "refuted" in hyp, f"the hypothesis shows its standing: {hyp!r}")

            # Live: a finding posted by the agent appears without a reload.
            lat = []
            for i in range(5):
                fid = asyncio.run(agent_post(url, room, f"live finding {i}"))
                t = time.monotonic()
                wait_for("a live finding", lambda: d.find_elements(By.CSS_SELECTOR, f'[data-finding="{fid}"]'), timeout=5)
                lat.append(round((time.monotonic() - t) * 1000))
            out["live_ms"] = lat
            expect(max(lat) < 1000, f"live findings appear within a second: {lat}")

            # Script injection renders as text.
            xid = asyncio.run(agent_post(url, room, XSS))
            row = wait_for("the injection attempt", lambda: d.find_elements(By.CSS_SELECTOR, f'[data-finding="{xid}"]'))[0]
            content = row.find_element(By.CSS_SELECTOR, ".content")
            expect(content.text == XSS, f"rendered as text: {content.text!r}")
            expect(not row.find_elements(By.TAG_NAME, "img"), "no element was made from it")
            no_alert(d)

            # A person answers the decision in the page.
            box = d.find_element(By.CSS_SELECTOR, f'[data-decision="{s["decision"]}"]')
            box.find_element(By.NAME, "answer").send_keys("yes, roll back")
            box.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
            wait_for("the decision leaving the open list",
                     lambda: not d.find_elements(By.CSS_SELECTOR, f'[data-decision="{s["decision"]}"]'))
            events, summary = asyncio.run(agent_feed(url, room, s["cursor"]))
            expect(len(events) == 1 and "yes, roll back" in events[0]["summary"] and "agent_id" not in events[0],
                   f"the agent's feed has the person's answer: {events}")
            expect(not summary["open_decisions"], "no open decision left")

            # A person marks a phase in the page.
            d.find_element(By.CSS_SELECTOR, "#mark input").send_keys("mitigation done, root cause next")
            d.find_element(By.CSS_SELECTOR, "#mark button").click()
            wait_for("the phase in the header", lambda: "mitigation done" in d.find_element(By.ID, "roomhead").text)
            phase = httpx2.get(f"{base}/api/rooms/{room}/context").json()["phase"]
            expect(phase["by"]["channel"] == "web" and "agent_id" not in phase["by"], f"the marker is the person's: {phase}")
            decisions = httpx2.get(f"{base}/api/rooms/{room}/decisions").json()
            expect(decisions[0]["answer"]["channel"] == "web", f"answered through the web channel: {decisions[0]['answer']}")
            no_alert(d)

            # A person erases an agent's finding in the page: asked why, the row shows the notice,
            # the record keeps who and why, and the agents' feed says so.
            row = d.find_element(By.CSS_SELECTOR, f'#feed [data-finding="{s["first"]}"]')
            row.find_element(By.CSS_SELECTOR, ".erase").click()
            prompt = wait_for("the reason prompt", lambda: d.switch_to.alert)
            prompt.send_keys("pasted a customer's address")
            prompt.accept()
            wait_for("the notice in place of the text", lambda: d.find_element(
                By.CSS_SELECTOR, f'#feed [data-finding="{s["first"]}"] .content').text.startswith("[erased by "))
            page = httpx2.get(f"{base}/api/rooms/{room}/timeline?thread={s['first']}").json()["findings"][0]
            expect(page["erased"]["reason"] == "pasted a customer's address" and "agent_id" not in page["erased"]
                   and "14:02" not in page["content"], f"the record keeps who and why, not the text: {page}")
            events, _ = asyncio.run(agent_erase(url, room, None, s["cursor"]))
            expect(any(e["kind"] == "erased" and e.get("finding_id") == s["first"] for e in events),
                   f"the agents' feed carries the erasure: {events}")
            # An agent erases its own finding through MCP: the open page drops the text live.
            own = asyncio.run(agent_post(url, room, "pasted by mistake: customer 4411"))
            wait_for("the agent's finding", lambda: d.find_elements(By.CSS_SELECTOR, f'#feed [data-finding="{own}"]'))
            asyncio.run(agent_erase(url, room, own, s["cursor"]))
            wait_for("the live erasure", lambda: "4411" not in d.find_element(
                By.CSS_SELECTOR, f'#feed [data-finding="{own}"] .content').text, timeout=5)
            no_alert(d)
            if shots:
                d.execute_script("window.scrollTo(0, 0)")
                d.save_screenshot(os.path.join(shots, "room.png"))
            check_http(base)
            if bench:
                out["bench"] = bench_room(url, base, d, bench, shots)
        finally:
            d.quit()
            proc.terminate()
            proc.wait(timeout=30)
    return out


async def seed(url: str, n: int) -> str:
    http, c = await session(url, None)
    async with http, c:
        room = (await call(c, "create_room", {"name": "INC-9 busy room", "objective": "A room with many findings"}))["room_id"]
    clients = 8

    async def one(k: int) -> None:
        http, c = await session(url, None)
        async with http, c:
            await call(c, "join_room", {"room_id": room, "agent_id": f"agent-{k}"})
            for i in range(k, n, clients):
                await call(c, "post_finding", {"room_id": room, "content": f"finding {i}: pool at {i % 100} of 100",
                                               "tags": ["evidence" if i % 3 else "triage"]})
    await asyncio.gather(*(one(k) for k in range(clients)))
    return room


def bench_room(url: str, base: str, d, n: int, shots: str | None) -> dict:
    room = asyncio.run(seed(url, n))
    runs = []
    for _ in range(5):
        d.get("about:blank")
        d.get(f"{base}/#/room/{room}")
        wait_for("the busy room", lambda: len(d.find_elements(By.CSS_SELECTOR, "#feed .row")) >= 50, timeout=30)
        wait_for("the render mark", lambda: d.execute_script("return window.__macpRendered"))
        m = d.execute_script("""
            const nav = performance.getEntriesByType('navigation')[0];
            const res = performance.getEntriesByType('resource');
            return {render: window.__macpRendered, load: nav.loadEventEnd, dom: nav.domContentLoadedEventEnd,
                    bytes: nav.transferSize + res.reduce((a, r) => a + r.transferSize, 0),
                    decoded: nav.decodedBodySize + res.reduce((a, r) => a + r.decodedBodySize, 0),
                    requests: 1 + res.length, rows: document.querySelectorAll('#feed .row').length};""")
        runs.append(m)
    if shots:
        d.save_screenshot(os.path.join(shots, "busy-room.png"))
    runs.sort(key=lambda m: m["render"])
    med = runs[len(runs) // 2]
    return {"findings": n, "first_render_ms_median": round(med["render"] + med["dom"]), "api_and_render_ms": round(med["render"]),
            "page_bytes": med["bytes"], "decoded_bytes": med["decoded"], "requests": med["requests"], "rows_shown": med["rows"],
            "runs_ms": [round(m["render"] + m["dom"]) for m in runs]}


def run_auth_on(macp: str) -> dict:
    """Auth on, with browser sign-in: the page shows nothing without a session; a person signs
    in at the issuer (code + PKCE, public client); the session cookie is HttpOnly and
    SameSite=Strict; changes need the session's CSRF token; an expired access token is
    refreshed; signing out ends the session."""
    rsa_key, _, doc = auth_e2e.keys()
    # Tokens from the token endpoint live 3 s (and the server allows no clock skew), so the
    # session must refresh while the test runs.
    iss = oauth_issuer.Issuer(rsa_key, "rsa-e2e", "RS256", auth_e2e.AUDIENCE, "macp-web", "macp:read macp:write", access_ttl=3)
    iss.jwks = doc
    args = ["--embedder", "none", "--auth-issuer", iss.url, "--auth-audience", auth_e2e.AUDIENCE,
            "--auth-read-scope", "macp:read", "--auth-write-scope", "macp:write", "--auth-leeway", "0",
            "--web-client-id", "macp-web"]
    token = iss.access_token("ana", ttl=900)
    out: dict = {}
    with tempfile.TemporaryDirectory() as work:
        proc, url = mcp_e2e.start_server(macp, os.path.join(work, "data"), args, {})
        base = url.removesuffix("/mcp")
        iss.redirect_uris.add(base + "/auth/callback")
        d = browser()
        try:
            async def make() -> tuple[str, str]:
                http, c = await session(url, token)
                async with http, c:
                    room = (await call(c, "create_room", {"name": "SECRET-ROOM", "objective": "hidden"}))["room_id"]
                    await call(c, "join_room", {"room_id": room, "agent_id": "ana-kiro"})
                    await call(c, "post_finding", {"room_id": room, "content": "pool exhausted at 14:01"})
                    d = await call(c, "ask_decision", {"room_id": room, "question": "Fail over now?"})
                    return room, d["decision_id"]
            room, decision = asyncio.run(make())
            # The person's commands against the team server, with the user's token.
            remote = ["--server", base, "--token", token]
            out_ = subprocess.run([macp, "timeline", room, "--json", *remote], capture_output=True, text=True, timeout=60)
            expect(out_.returncode == 0 and "pool exhausted" in out_.stdout, f"macp timeline --server: {out_.stderr}")
            out_ = subprocess.run([macp, "search", room, "pool", *remote], capture_output=True, text=True, timeout=60)
            expect(out_.returncode == 0 and "pool exhausted" in out_.stdout, f"macp search --server: {out_.stderr}")
            out_ = subprocess.run([macp, "decide", room, decision, "yes, fail over", *remote], capture_output=True, text=True, timeout=60)
            expect(out_.returncode == 0, f"macp decide --server: {out_.stderr}")
            ans = httpx2.get(f"{base}/api/rooms/{room}/decisions", headers={"Authorization": f"Bearer {token}"}).json()[0]["answer"]
            expect(ans["user_id"] == "ana" and ans["channel"] == "web" and "agent_id" not in ans, f"the person's answer: {ans}")
            out_ = subprocess.run([macp, "timeline", room, "--server", base], capture_output=True, text=True, timeout=60)
            expect(out_.returncode != 0 and "unauthenticated" in out_.stderr, f"without a token: {out_.stderr!r}")
            r = httpx2.get(f"{base}/api/rooms")
            expect(r.status_code == 401, f"the API without a token: {r.status_code}")
            r = httpx2.get(f"{base}/api/rooms", headers={"Authorization": f"Bearer {token}"})
            expect(r.status_code == 200 and r.json()[0]["room"]["room_id"] == room, "the API with the user's token")
            # A bearer token is what agents hold: erasing anyone's finding needs a signed-in browser.
            any_finding = httpx2.get(f"{base}/api/rooms/{room}/timeline", headers={"Authorization": f"Bearer {token}"}).json()["findings"][0]
            r = httpx2.post(f"{base}/api/rooms/{room}/erase", json={"finding_id": any_finding["finding_id"], "reason": "x"},
                            headers={"Authorization": f"Bearer {token}", "X-MACP-Web": "1"})
            expect(r.status_code == 403 and r.json()["error"]["code"] == "permission_denied", f"erase with a token: {r.status_code} {r.text}")
            # A members-only room does not exist for someone else, in the web API as anywhere.
            async def private_room() -> str:
                http, c = await session(url, token)
                async with http, c:
                    return (await call(c, "create_room", {"objective": "payroll exposure", "members": ["ana"]}))["room_id"]
            hidden = asyncio.run(private_room())
            bob = {"Authorization": f"Bearer {iss.access_token('bob', ttl=900)}"}
            listed = [x["room"]["room_id"] for x in httpx2.get(f"{base}/api/rooms", headers=bob).json()]
            expect(hidden not in listed and room in listed, f"bob's room list: {listed}")
            for path in ["summary", "context", "timeline", "feed", "graph", "decisions", "artifacts"]:
                r = httpx2.get(f"{base}/api/rooms/{hidden}/{path}", headers=bob)
                expect(r.status_code == 404, f"bob reads {path} of a members-only room: {r.status_code}")
            r = httpx2.get(f"{base}/api/rooms/{hidden}/summary", headers={"Authorization": f"Bearer {token}"})
            expect(r.status_code == 200, f"ana, a member, reads it: {r.status_code}")
            # Bob cannot let himself in; ana (its creator) adds him from the person's API.
            r = httpx2.post(f"{base}/api/rooms/{hidden}/steer", json={"add_members": ["bob"]}, headers={**bob, "X-MACP-Web": "1"})
            expect(r.status_code == 404, f"bob adding himself: {r.status_code}")
            r = httpx2.post(f"{base}/api/rooms/{hidden}/steer", json={"add_members": ["bob"]},
                            headers={"Authorization": f"Bearer {token}", "X-MACP-Web": "1"})
            expect(r.status_code == 200 and sorted(r.json()["members"]) == ["ana", "bob"], f"ana adds bob: {r.status_code} {r.text}")
            r = httpx2.get(f"{base}/api/rooms/{hidden}/summary", headers=bob)
            expect(r.status_code == 200, f"bob, now a member, reads it: {r.status_code}")
            r = httpx2.get(f"{base}/api/rooms", headers={"Cookie": "macp_session=made-up"})
            expect(r.status_code == 401, f"a made-up session: {r.status_code}")

            # No session: the sign-in, and nothing of the room.
            d.get(f"{base}/#/room/{room}")
            wait_for("the sign-in", lambda: d.find_elements(By.ID, "signin-link"))
            page = d.find_element(By.TAG_NAME, "body").text
            expect("SECRET-ROOM" not in page and "hidden" not in page and "pool exhausted" not in page
                   and not d.find_elements(By.CSS_SELECTOR, "[data-room]"), "no data without a session")

            # A person signs in at the issuer and lands back in the room.
            t0 = time.monotonic()
            d.find_element(By.ID, "signin-link").click()
            wait_for("the issuer's form", lambda: d.find_elements(By.ID, "username"))
            expect(d.current_url.startswith(iss.url + "/authorize"), f"at the issuer: {d.current_url}")
            d.find_element(By.ID, "username").send_keys("ben")
            d.find_element(By.ID, "login").click()
            wait_for("the room after signing in", lambda: "pool exhausted" in d.find_element(By.TAG_NAME, "body").text)
            out["sign_in_ms"] = round((time.monotonic() - t0) * 1000)
            expect(d.current_url == f"{base}/#/room/{room}", f"back where the person was: {d.current_url}")
            expect("ben" in d.find_element(By.ID, "user").text, "the page names the signed-in person")
            tr = iss.token_requests[0]
            expect(tr["grant_type"] == "authorization_code" and len(tr.get("code_verifier", "")) >= 43
                   and "client_secret" not in tr, f"code exchanged with a PKCE verifier and no secret: {sorted(tr)}")
            cookie = d.get_cookie("macp_session")
            expect(cookie is not None and cookie["httpOnly"] and cookie.get("sameSite") == "Strict",
                   f"the session cookie is HttpOnly and SameSite=Strict: {cookie}")
            expect("macp_session" not in d.execute_script("return document.cookie"), "scripts cannot read the session")

            # A change from the page carries the CSRF token; the same change without it is refused.
            d.find_element(By.CSS_SELECTOR, "#mark input").send_keys("failover started")
            d.find_element(By.CSS_SELECTOR, "#mark button").click()
            wait_for("the phase in the header", lambda: "failover started" in d.find_element(By.ID, "roomhead").text)
            jar = {"Cookie": f"macp_session={cookie['value']}"}
            phase = httpx2.get(f"{base}/api/rooms/{room}/context", headers=jar).json()["phase"]
            expect(phase["by"]["user_id"] == "ben" and phase["by"]["channel"] == "web", f"the marker is ben's: {phase}")
            steer = f"{base}/api/rooms/{room}/steer"
            for bad in ({}, {"X-MACP-CSRF": "guess"}):
                r = httpx2.post(steer, json={"marker": "forged"}, headers={**jar, "X-MACP-Web": "1", **bad})
                expect(r.status_code == 403 and "x-macp-csrf" in r.json()["error"]["message"],
                       f"a change with the session cookie and CSRF token {bad}: {r.status_code} {r.text}")
            r = httpx2.post(f"{base}/auth/logout", json={}, headers={**jar, "X-MACP-Web": "1"})
            expect(r.status_code == 403, f"signing out without the CSRF token: {r.status_code}")
            marks = httpx2.get(f"{base}/api/rooms/{room}/context", headers=jar).json()
            expect("forged" not in json.dumps(marks), "no forged change landed")

            # The access token (3 s) expires: five requests at once find it so, and the session
            # renews it once (the issuer's refresh tokens are single-use) and goes on.
            refreshes = lambda: sum(t["grant_type"] == "refresh_token" for t in iss.token_requests)  # noqa: E731
            time.sleep(4)
            before = refreshes()
            with concurrent.futures.ThreadPoolExecutor(5) as pool:
                codes = list(pool.map(lambda _: httpx2.get(f"{base}/api/rooms", headers=jar).status_code, range(5)))
            expect(codes == [200] * 5 and refreshes() == before + 1, f"one refresh for five requests: {codes}, {refreshes() - before}")
            d.refresh()
            wait_for("the room after the token expired", lambda: "pool exhausted" in d.find_element(By.TAG_NAME, "body").text)
            expect(not d.find_elements(By.ID, "signin"), "still signed in")
            no_alert(d)

            # Signing out ends the session on the server, not only in the browser.
            d.find_element(By.ID, "signout").click()
            wait_for("the sign-in after signing out", lambda: d.find_elements(By.ID, "signin-link"))
            r = httpx2.get(f"{base}/api/rooms", headers=jar)
            expect(r.status_code == 401, f"the old session after signing out: {r.status_code}")
            r = httpx2.post(f"{base}/auth/logout", json={}, headers={**jar, "X-MACP-Web": "1"})
            expect(r.status_code == 200, f"signing out a session already ended: {r.status_code}")
            # The start of a sign-in: PKCE S256 to the issuer, the state in an HttpOnly Lax
            # cookie, and a return address that can only be a place in the page.
            r = httpx2.get(f"{base}/auth/login?next=//evil.example")
            loc, cookie_set = r.headers.get("location", ""), r.headers.get("set-cookie", "")
            expect(r.status_code == 303 and loc.startswith(iss.url + "/authorize?") and "code_challenge_method=S256" in loc
                   and "client_secret" not in loc, f"the redirect to the issuer: {r.status_code} {loc}")
            expect("HttpOnly" in cookie_set and "SameSite=Lax" in cookie_set and cookie_set.startswith("macp_login=")
                   and cookie_set.split(";")[0].endswith("."), f"the login cookie, with no return address: {cookie_set}")
            # A forged callback (state not started in this browser) opens nothing.
            r = httpx2.get(f"{base}/auth/callback?code=x&state=y", headers={"Cookie": "macp_login=z"})
            expect(r.status_code == 400 and "set-cookie" not in r.headers, f"a forged callback: {r.status_code}")
        finally:
            d.quit()
            iss.close()
            proc.terminate()
            proc.wait(timeout=30)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--macp", required=True)
    ap.add_argument("--screenshots")
    ap.add_argument("--bench", type=int, default=0)
    a = ap.parse_args()
    if a.screenshots:
        os.makedirs(a.screenshots, exist_ok=True)
    out = run_auth_off(a.macp, a.screenshots, a.bench)
    out["auth_on"] = run_auth_on(a.macp)
    print(json.dumps({"ok": True, **out}))


if __name__ == "__main__":
    try:
        main()
    except Failure as e:
        print(f"WEB E2E FAILED: {e}", file=sys.stderr)
        sys.exit(1)

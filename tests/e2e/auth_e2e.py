#!/usr/bin/env python3
"""The three-agent scenario with OAuth on: keys generated here (RSA for some users, EC for
others), a JWKS served on loopback by this script, one token per user minted with PyJWT, and
the server started with --auth-issuer / --auth-jwks-url / --auth-audience and scopes. Every
finding must carry its user's id. Also checks the 401 challenge and the metadata with plain
HTTP, and one read-only token refused a write with 403 insufficient_scope.

    python tests/e2e/auth_e2e.py --macp target/debug/macp
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx2
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mcp_e2e  # noqa: E402

ISSUER = "https://login.example.test/pool-1"
AUDIENCE = "macp-e2e"


def b64(n: int, size: int | None = None) -> str:
    raw = n.to_bytes(size or (n.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def keys():
    r = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    e = ec.generate_private_key(ec.SECP256R1())
    rn = r.public_key().public_numbers()
    en = e.public_key().public_numbers()
    jwks = {"keys": [
        {"kty": "RSA", "kid": "rsa-e2e", "alg": "RS256", "use": "sig", "n": b64(rn.n), "e": b64(rn.e)},
        {"kty": "EC", "kid": "ec-e2e", "alg": "ES256", "use": "sig", "crv": "P-256", "x": b64(en.x, 32), "y": b64(en.y, 32)},
    ]}
    return r, e, jwks


def serve_jwks(doc: dict) -> str:
    body = json.dumps(doc).encode()

    class H(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_port}/jwks"


def token(key, kid: str, alg: str, user: str, scope: str) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": user, "scope": scope, "iat": now, "exp": now + 900}
    return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--macp", required=True)
    args = ap.parse_args()
    r, e, doc = keys()
    jwks_url = serve_jwks(doc)
    users = {"ana": (r, "rsa-e2e", "RS256"), "ben": (e, "ec-e2e", "ES256"), "cho": (r, "rsa-e2e", "RS256"), "dee": (e, "ec-e2e", "ES256")}
    tokens = {u: token(k, kid, alg, u, "macp:read macp:write") for u, (k, kid, alg) in users.items()}
    server_args = ["--auth-issuer", ISSUER, "--auth-jwks-url", jwks_url, "--auth-audience", AUDIENCE,
                   "--auth-read-scope", "macp:read", "--auth-write-scope", "macp:write"]
    with tempfile.TemporaryDirectory() as d:
        spec = os.path.join(d, "tokens.json")
        json.dump({"tokens": tokens, "server_args": server_args}, open(spec, "w"))
        # Plain-HTTP checks against a server of our own.
        proc, url = mcp_e2e.start_server(args.macp, os.path.join(d, "plain"), server_args, {})
        try:
            base = url.rsplit("/mcp", 1)[0]
            with httpx2.Client(timeout=10) as c:
                resp = c.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                              headers={"accept": "application/json, text/event-stream"})
                ch = resp.headers.get("www-authenticate", "")
                mcp_e2e.expect(resp.status_code == 401 and f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in ch,
                               f"no token: {resp.status_code} {ch}")
                meta = c.get(f"{base}/.well-known/oauth-protected-resource/mcp").json()
                mcp_e2e.expect(meta["authorization_servers"] == [ISSUER] and meta["resource"] == url
                               and meta["scopes_supported"] == ["macp:read", "macp:write"], f"metadata {meta}")
            reader = token(r, "rsa-e2e", "RS256", "rita", "macp:read")
            asyncio.run(read_only(url, reader))
        finally:
            proc.terminate()
            proc.wait(timeout=20)
        # The full scenario, authenticated.
        sys.argv = [sys.argv[0], "--macp", args.macp, "--tokens", spec]
        mcp_e2e.main()


async def read_only(url: str, tok: str) -> None:
    http, client = await mcp_e2e.session(url, tok)
    async with http, client:
        rooms = await mcp_e2e.call(client, "list_rooms", {})
        mcp_e2e.expect("rooms" in rooms, "a read-only token may read")
        try:
            r = await client.call_tool("create_room", {"objective": "should be refused"})
            mcp_e2e.expect(False, f"a read-only token wrote: {r}")
        except mcp_e2e.Failure:
            raise
        except Exception as exc:  # the client surfaces the 403 as an error
            mcp_e2e.expect("insufficient_scope" in str(exc), f"the refusal names the missing scope: {exc!r}")


if __name__ == "__main__":
    try:
        main()
    except mcp_e2e.Failure as exc:
        print(f"AUTH E2E FAILED: {exc}", file=sys.stderr)
        sys.exit(1)

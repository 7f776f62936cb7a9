"""A small OAuth 2.1 / OpenID issuer on loopback for the browser sign-in test: discovery,
JWKS, an authorization endpoint with a sign-in form a person fills in, and a token endpoint
that accepts public clients only with PKCE S256 (no client secret), one use per code, and
refresh tokens. Its access tokens are JWTs signed with the key it is given, so `macp serve`
checks them exactly as it checks an agent's.

It refuses what a real issuer refuses (unknown client, redirect URI not registered, no or plain
PKCE, wrong verifier, a code used twice) and records every token request, so the test can see
what the server sent.
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlencode, urlparse

import jwt


class Issuer:
    def __init__(self, key, kid: str, alg: str, audience: str, client_id: str, scope: str, access_ttl: int = 900):
        self.key, self.kid, self.alg = key, kid, alg
        self.audience, self.client_id, self.scope = audience, client_id, scope
        self.access_ttl = access_ttl
        self.redirect_uris: set[str] = set()
        self.codes: dict[str, dict] = {}
        self.refresh: dict[str, str] = {}
        self.token_requests: list[dict] = []
        self.jwks: dict = {}
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        # `localhost`, while the server is reached at 127.0.0.1: the issuer is another site, as
        # in life, so the browser applies its cross-site cookie rules to the redirects.
        self.url = f"http://localhost:{self.srv.server_port}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.srv.shutdown()

    def access_token(self, user: str, ttl: int | None = None) -> str:
        now = int(time.time())
        claims = {"iss": self.url, "aud": self.audience, "sub": user, "scope": self.scope, "iat": now,
                  "exp": now + (ttl or self.access_ttl)}
        return jwt.encode(claims, self.key, algorithm=self.alg, headers={"kid": self.kid})

    def _handler(self):
        issuer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def send(self, status: int, body: bytes, ctype: str = "application/json", headers: dict | None = None):
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def json(self, status: int, doc: dict):
                self.send(status, json.dumps(doc).encode())

            def do_GET(self):  # noqa: N802
                u = urlparse(self.path)
                q = {k: v[0] for k, v in parse_qs(u.query).items()}
                if u.path == "/.well-known/openid-configuration":
                    return self.json(200, {
                        "issuer": issuer.url, "authorization_endpoint": issuer.url + "/authorize",
                        "token_endpoint": issuer.url + "/token", "jwks_uri": issuer.url + "/jwks",
                        "code_challenge_methods_supported": ["S256"], "response_types_supported": ["code"],
                        "token_endpoint_auth_methods_supported": ["none"]})
                if u.path == "/jwks":
                    return self.json(200, issuer.jwks)
                if u.path == "/authorize":
                    problem = issuer.check_authorize(q)
                    if problem:
                        return self.send(400, problem.encode(), "text/plain")
                    hidden = "".join(f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in q.items())
                    page = ("<!doctype html><title>Sign in</title><h1>Example issuer</h1>"
                            f'<form method="post" action="/authorize">{hidden}'
                            '<label>User <input name="username" id="username"></label>'
                            '<button type="submit" id="login">Sign in</button></form>')
                    return self.send(200, page.encode(), "text/html; charset=utf-8")
                self.send(404, b"{}")

            def form(self) -> dict:
                n = int(self.headers.get("content-length") or 0)
                return {k: v[0] for k, v in parse_qs(self.rfile.read(n).decode()).items()}

            def do_POST(self):  # noqa: N802
                u = urlparse(self.path)
                f = self.form()
                if u.path == "/authorize":
                    problem = issuer.check_authorize(f)
                    if problem or not f.get("username"):
                        return self.send(400, (problem or "no user").encode(), "text/plain")
                    code = secrets.token_urlsafe(24)
                    issuer.codes[code] = {"user": f["username"], "redirect_uri": f["redirect_uri"],
                                          "challenge": f["code_challenge"], "client_id": f["client_id"]}
                    to = f["redirect_uri"] + "?" + urlencode({"code": code, "state": f.get("state", "")})
                    return self.send(302, b"", "text/plain", {"location": to})
                if u.path == "/token":
                    issuer.token_requests.append(f)
                    status, doc = issuer.token(f, self.headers.get("authorization"))
                    return self.json(status, doc)
                self.send(404, b"{}")

        return H

    def check_authorize(self, q: dict) -> str | None:
        if q.get("response_type") != "code":
            return "response_type must be code"
        if q.get("client_id") != self.client_id:
            return "unknown client"
        if q.get("redirect_uri") not in self.redirect_uris:
            return f"redirect_uri not registered: {q.get('redirect_uri')}"
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return "PKCE with S256 is required"
        if not q.get("state"):
            return "state is required"
        return None

    def token(self, f: dict, authorization: str | None) -> tuple[int, dict]:
        if authorization or f.get("client_secret"):
            return 401, {"error": "invalid_client", "error_description": "a public client has no secret"}
        if f.get("client_id") != self.client_id:
            return 401, {"error": "invalid_client"}
        if f.get("grant_type") == "authorization_code":
            c = self.codes.pop(f.get("code", ""), None)
            if c is None:
                return 400, {"error": "invalid_grant", "error_description": "unknown or used code"}
            if c["redirect_uri"] != f.get("redirect_uri") or c["client_id"] != f.get("client_id"):
                return 400, {"error": "invalid_grant", "error_description": "redirect_uri or client mismatch"}
            verifier = f.get("code_verifier", "")
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if digest != c["challenge"]:
                return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
            user = c["user"]
        elif f.get("grant_type") == "refresh_token":
            user = self.refresh.pop(f.get("refresh_token", ""), None)
            if user is None:
                return 400, {"error": "invalid_grant", "error_description": "unknown refresh token"}
        else:
            return 400, {"error": "unsupported_grant_type"}
        refresh = secrets.token_urlsafe(24)
        self.refresh[refresh] = user
        return 200, {"access_token": self.access_token(user), "token_type": "Bearer", "expires_in": self.access_ttl,
                     "refresh_token": refresh}

#!/usr/bin/env python3
"""Writes macp-core/tests/redaction-corpus.jsonl: the labelled corpus the redactor is measured
on (macp-core/tests/redaction_quality.rs; figures in BENCHMARKS.md).

Each line is {"text": ..., "secret": "<the value that must not survive>"} for a text carrying a
secret, or {"text": ..., "secret": null} for an innocent text that must come out unchanged. The
secrets are well-formed but fake, generated from a fixed seed, and set in the places incident
notes put them: log lines, env files, JSON, YAML, curl commands, connection strings, chat
pastes. The innocent texts are the look-alikes an incident room is full of: commit hashes,
UUIDs, ULIDs, ARNs, base64 image data, pod names, digests, long hex ids, and prose that talks
about tokens and passwords without containing one.

    python3 scripts/make-redaction-corpus.py   # deterministic: the same file every time
"""
from __future__ import annotations

import base64
import json
import os
import random
import string

R = random.Random(20261201)
UP, LO, DG = string.ascii_uppercase, string.ascii_lowercase, string.digits
B64 = UP + LO + DG + "+/"
URLSAFE = UP + LO + DG + "-_"


def pick(alphabet: str, n: int) -> str:
    return "".join(R.choice(alphabet) for _ in range(n))


def mixed(alphabet: str, n: int) -> str:
    """n characters with at least one upper, one lower and one digit (as real keys have)."""
    while True:
        s = pick(alphabet, n)
        if any(c in UP for c in s) and any(c in LO for c in s) and any(c in DG for c in s):
            return s


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def jwt() -> str:
    head = b64url(json.dumps({"alg": R.choice(["RS256", "HS256", "ES256"]), "typ": "JWT"}).encode())
    body = b64url(json.dumps({"sub": pick(LO, 8), "exp": R.randint(1_700_000_000, 1_800_000_000)}).encode())
    return f"{head}.{body}.{b64url(R.randbytes(R.choice([32, 64, 256])))}"


def pem(kind: str) -> str:
    body = base64.b64encode(R.randbytes(R.choice([120, 240, 600]))).decode()
    lines = "\n".join(body[i:i + 64] for i in range(0, len(body), 64))
    return f"-----BEGIN {kind}-----\n{lines}\n-----END {kind}-----"


SECRETS = [
    ("aws-access-key", lambda: "AKIA" + pick(UP + DG, 16)),
    ("aws-access-key", lambda: "ASIA" + pick(UP + DG, 16)),
    ("aws-secret-key", lambda: mixed(B64, 40)),
    ("github-token", lambda: "ghp_" + pick(UP + LO + DG, 36)),
    ("github-token", lambda: "github_pat_" + pick(UP + LO + DG, 22) + "_" + pick(UP + LO + DG, 59)),
    ("github-token", lambda: "ghs_" + pick(UP + LO + DG, 36)),
    ("gitlab-token", lambda: "glpat-" + pick(UP + LO + DG + "-_", 20)),
    ("slack-token", lambda: f"xoxb-{pick(DG, 12)}-{pick(DG, 13)}-{pick(UP + LO + DG, 24)}"),
    ("slack-token", lambda: f"xoxp-{pick(DG, 12)}-{pick(DG, 12)}-{pick(DG, 13)}-{pick(LO + DG, 32)}"),
    ("slack-webhook", lambda: f"https://hooks.slack.com/services/T{pick(UP + DG, 8)}/B{pick(UP + DG, 10)}/{pick(UP + LO + DG, 24)}"),
    ("openai", lambda: "sk-proj-" + pick(URLSAFE, 48)),
    ("openai", lambda: "sk-" + pick(UP + LO + DG, 48)),
    ("anthropic", lambda: "sk-ant-api03-" + pick(URLSAFE, 93) + "AA"),
    ("stripe", lambda: "sk_live_" + pick(UP + LO + DG, 24)),
    ("stripe", lambda: "rk_live_" + pick(UP + LO + DG, 24)),
    ("stripe", lambda: "whsec_" + pick(UP + LO + DG, 32)),
    ("google", lambda: "AIza" + pick(URLSAFE, 35)),
    ("npm", lambda: "npm_" + pick(UP + LO + DG, 36)),
    ("jwt", jwt),
]

# Where a secret value appears: {s} is the secret.
PLACES = [
    "found {s} in the deploy log at 14:02Z",
    "export AWS_ACCESS_KEY_ID={s}",
    'config: {{"api_key": "{s}", "region": "us-east-1"}}',
    "curl -H 'Authorization: Bearer {s}' https://api.internal/v1/orders",
    "the leaked credential was {s}; rotated at 14:20",
    "  token: {s}",
    "env SECRET={s} ./run.sh",
    "client configured with key={s}&region=eu-west-1",
    "stack trace shows `{s}` passed as the password argument",
    "- name: API_TOKEN\n  value: \"{s}\"",
    "payment webhook signed with ({s}) per the vault dump",
    "grep hit: {s}.",
]

CONTEXT_SECRETS = [
    # (text, secret): secrets that only their context makes secret.
    lambda: (lambda p: (f"psql postgres://app:{p}@orders-db.internal:5432/orders", p))(pick(LO + DG, 14)),
    lambda: (lambda p: (f"mongodb+srv://admin:{p}@cluster0.x1y2z.mongodb.net/prod", p))(mixed(UP + LO + DG, 16)),
    lambda: (lambda p: (f"redis://:{p}@cache-01:6379/0", p))(pick(LO + DG, 20)),
    lambda: (lambda p: (f"Server=tcp:sql01,1433;User ID=sa;Password={p};Encrypt=true", p))(pick(UP + LO + DG + "!#", 12)),
    lambda: (lambda p: (f"DefaultEndpointsProtocol=https;AccountName=logs;AccountKey={p};EndpointSuffix=core.windows.net", p))(base64.b64encode(R.randbytes(64)).decode()),
    lambda: (lambda p: (f"DB_PASSWORD={p}", p))(pick(LO + DG, 12)),
    lambda: (lambda p: (f"password: {p}", p))(pick(LO + DG + "!", 10)),
    lambda: (lambda p: (f'{{"username": "svc", "password": "{p}"}}', p))(pick(LO + UP + DG, 14)),
    lambda: (lambda p: (f"Authorization: Basic {p}", p))(base64.b64encode(f"svc:{pick(LO, 10)}".encode()).decode()),
    lambda: (lambda p: (f"Authorization: token {p}", p))(pick(LO + DG, 40)),
    lambda: (lambda p: (f"https://bucket.s3.amazonaws.com/x.csv?X-Amz-Credential=AKIA/x&X-Amz-Signature={p}", p))(pick("0123456789abcdef", 64)),
    lambda: (lambda p: (f"aws_secret_access_key = {p}", p))(mixed(B64, 40)),
    lambda: (lambda p: (f"AWS_SECRET_ACCESS_KEY={p}", p))(mixed(B64, 40)),
    lambda: (lambda p: (f"the pair was AKIA{pick(UP + DG, 16)} / {p}", p))(mixed(B64, 40)),
    lambda: (lambda k: (f"key file:\n{k}", k))(pem("RSA PRIVATE KEY")),
    lambda: (lambda k: (f"pasted {k} by mistake", k))(pem("PRIVATE KEY")),
    lambda: (lambda k: (f"ssh key: {k}", k))(pem("OPENSSH PRIVATE KEY")),
    lambda: (lambda k: (f"ec: {k}", k))(pem("EC PRIVATE KEY")),
    lambda: (lambda k: (json.dumps({"type": "service_account", "project_id": "prod-1", "private_key_id": pick("0123456789abcdef", 40),
                                    "private_key": k + "\n", "client_email": "svc@prod-1.iam.gserviceaccount.com"}),
                        k.split("\n")[1]))(pem("PRIVATE KEY")),
    lambda: (lambda p: (f"x-api-key: {p}", p))(pick(LO + DG, 32)),
    lambda: (lambda p: (f"https://api.example.com/v2/items?api_key={p}&page=2", p))(pick(LO + DG, 32)),
    lambda: (lambda p: (f"ftp://deploy:{p}@files.internal/releases", p))(pick(LO + DG, 12)),
    lambda: (lambda p: (f"SLACK_BOT_TOKEN={p}", p))(f"xoxb-{pick(DG, 12)}-{pick(DG, 13)}-{pick(UP + LO + DG, 24)}"),
    lambda: (lambda p: (f"client_secret={p}", p))(pick(URLSAFE, 40)),
]

INNOCENT = [
    lambda: f"deployed commit {pick('0123456789abcdef', 40)} to prod at 14:02Z",
    lambda: f"git revert {pick('0123456789abcdef', 7)} (the retry change)",
    lambda: f"request id {R.randbytes(16).hex()[:8]}-{R.randbytes(2).hex()}-4{R.randbytes(2).hex()[1:]}-a{R.randbytes(2).hex()[1:]}-{R.randbytes(6).hex()} failed with 503",
    lambda: f"event 01J{pick('0123456789ABCDEFGHJKMNPQRSTVWXYZ', 23)} processed twice",
    lambda: f"role arn:aws:iam::{pick(DG, 12)}:role/checkout-{pick(LO, 6)} assumed by the job",
    lambda: f"bucket arn:aws:s3:::prod-{pick(LO, 8)}-logs/2026/12/01/",
    lambda: f"lambda arn:aws:lambda:us-east-1:{pick(DG, 12)}:function:orders-{pick(LO, 5)}:42",
    lambda: f"screenshot: data:image/png;base64,{base64.b64encode(R.randbytes(R.choice([90, 300, 1200]))).decode()}",
    lambda: f"pod checkout-{pick('0123456789abcdef', 10)}-{pick(LO + DG, 5)} OOMKilled at 14:01",
    lambda: f"image sha256:{pick('0123456789abcdef', 64)} pulled on node ip-10-0-{R.randint(0, 255)}-{R.randint(0, 255)}",
    lambda: f"trace {pick('0123456789abcdef', 32)} spans 14 services",
    lambda: f"object etag \"{pick('0123456789abcdef', 32)}\" mismatched",
    lambda: f"kafka offset {R.randint(10**9, 10**10)} on partition {R.randint(0, 63)}",
    lambda: f"span id {pick('0123456789abcdef', 16)} has the slow query",
    lambda: f"The token bucket limiter refills {R.randint(10, 500)} per second; the password policy was not involved.",
    lambda: f"the auth service returned 401 for {R.randint(2, 90)}% of requests after the deploy",
    lambda: "rotate the secret in vault after the incident; the token expiry is 1h",
    lambda: f"p99 latency {R.randint(200, 3000)} ms on orders-db since 14:0{R.randint(0, 9)}Z",
    lambda: f"https://grafana.internal/d/{pick(LO + DG, 9)}/orders?orgId=1&from=now-1h&to=now",
    lambda: f"see https://github.com/acme/checkout/pull/{R.randint(100, 9999)}/commits/{pick('0123456789abcdef', 40)}",
    lambda: f"host ip-10-{R.randint(0, 255)}-{R.randint(0, 255)}-{R.randint(0, 255)}.ec2.internal, az us-east-1{R.choice('abcdef')}",
    lambda: f"user {pick(LO, 6)}@example.com reported checkout failures",
    lambda: f"the bearer of the pager, {pick(LO, 5)}, escalated at 14:10",
    lambda: f"md5 {pick('0123456789abcdef', 32)} of the config matches staging",
    lambda: f"cloudfront distribution E{pick(UP + DG, 13)} invalidated",
    lambda: f"instance i-{pick('0123456789abcdef', 17)} failed its health check",
    lambda: f"vpc-{pick('0123456789abcdef', 17)} / subnet-{pick('0123456789abcdef', 17)} route table changed",
    lambda: f"PR title: \"fix(auth): refresh the token before it expires\" ({pick('0123456789abcdef', 12)})",
    lambda: f"log: level=error msg=\"password check failed\" user_id={R.randint(1000, 99999)} attempt={R.randint(1, 5)}",
    lambda: f"secret rotation job {pick(LO, 4)}-{R.randint(1, 99)} finished in {R.randint(2, 90)} s",
    lambda: f"base64 payload {base64.b64encode(R.randbytes(R.choice([48, 96]))).decode()} decoded to the order JSON",
    lambda: f"SELECT * FROM orders WHERE id = '{pick('0123456789abcdef', 24)}' took 4.2 s",
    lambda: f"k8s secret name: checkout-db-credentials (namespace {pick(LO, 6)})",
    lambda: f"sk-learn model v{R.randint(1, 9)}.{R.randint(0, 20)} scored the anomaly at 0.{R.randint(10, 99)}",
    lambda: f"ticket OPS-{R.randint(1000, 99999)}: token: see vault path secret/data/checkout",
    lambda: f"ssh-ed25519 fingerprint SHA256:{b64url(R.randbytes(32))} matches the bastion",
    lambda: f"the AKIA key prefix means a long-term IAM user key, not a role session",
    lambda: f"docker run -e LOG_LEVEL=debug -e REGION=us-east-1 acme/checkout:{pick('0123456789abcdef', 12)}",
]


def main() -> None:
    rows: list[dict] = []
    for _ in range(5):
        for kind, make in SECRETS:
            s = make()
            place = R.choice(PLACES)
            rows.append({"text": place.format(s=s), "secret": s, "kind": kind})
    for _ in range(4):
        for make in CONTEXT_SECRETS:
            text, s = make()
            rows.append({"text": text, "secret": s, "kind": "context"})
    for _ in range(8):
        for make in INNOCENT:
            rows.append({"text": make(), "secret": None, "kind": "innocent"})
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "macp-core", "tests", "redaction-corpus.jsonl")
    with open(out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    n = sum(r["secret"] is not None for r in rows)
    print(f"{out}: {n} texts with a secret, {len(rows) - n} innocent")


if __name__ == "__main__":
    main()

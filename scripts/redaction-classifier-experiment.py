#!/usr/bin/env python3
"""Would a learned classifier, run after the redactor's rules, catch what they miss?

An experiment (2026-12-02), not part of the product: its answer was no (see BENCHMARKS.md,
"Redaction"). Kept so that the figures can be reproduced and the idea tried again with better
features.

    cargo run --release -p macp-examples --bin redact-jsonl -- \
        macp-core/tests/redaction-{corpus,holdout,blind,final,unseen,sixth,seventh,eighth}.jsonl > dump.jsonl
    python3 scripts/redaction-classifier-experiment.py dump.jsonl [NEVER_TUNED_SET]

What it does: every word of a text that could be a secret (6-256 characters of two or more
kinds: lower, upper, digit, symbol; quoted literals whole, `key=value` values alone) gets
features of its shape (length, kinds of characters, transitions between kinds, hex, base64,
padding, entropy, prefix shape, dots, slashes, a capitalised word) and of its context (the words
before and after it, the character before it, inside a public-key block, at a line's start),
hashed into 2^16 weights of a logistic regression trained by SGD. Training words are labelled
from the original texts: a word holding the secret (or 12 characters of it) is positive, a word
of an innocent text negative, any other word of a secret's text a weak negative. The trained
model then masks words of the rules' output whose score passes a threshold.

Leave one set out: for each set, train on the development sets but that one (never on the
never-tuned set, `eighth` unless named), and measure recall and false positives on it (rules, then the
model). `gated` only lets the model mask a word on a line that names a credential (pass, key,
token, secret, auth, … in several languages).
"""
import collections
import json
import math
import random
import re
import sys

QUOTED = re.compile(r"""(['"`])([^\s'"`]{6,256})\1""")
BARE = re.compile(r"""[^\s"'`()\[\]{}<>,;|]+""")
WORD = re.compile(r"\w+")
HEX = re.compile(r"^[0-9a-fA-F]+$")
B64 = re.compile(r"^[A-Za-z0-9+/_-]+=*$")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
CREDENTIAL_WORDS = re.compile(
    r"(?i)pass|pwd|auth|secret|token|cred|login|sign|hmac|cipher|wallet|seed|psk|community|bind|"
    r"secure|private|mnemonic|otp|recovery|backup|contrase|passwort|mot de passe|senha|пароль|hasło|"
    r"haslo|wachtwoord|lösenord|şifre|パスワード|密码|密碼|비밀번호|पासवर्ड|key"
)
BUCKETS = 1 << 16


def survives(secret, out):
    """The quality test's rule: 12 characters of the secret (or all of a shorter one) remain."""
    s, o = secret.replace("\n", ""), out.replace("\n", "")
    if len(s) <= 12:
        return secret in out
    return any(s[i : i + 12] in o for i in range(len(s) - 11))


def kind(c):
    return "l" if c.islower() else "u" if c.isupper() else "d" if c.isdigit() else "s"


def shape(w):
    n = len(w)
    f = ["len%d" % min(n // 4, 16), "cl" + "".join(sorted(set(kind(c) for c in w)))]
    t = sum(1 for a, b in zip(w, w[1:]) if kind(a) != kind(b))
    f.append("tr%d" % min(int(10 * t / n), 6))
    f.append("dg%d" % min(int(10 * sum(c.isdigit() for c in w) / n), 9))
    f.append("up%d" % min(int(10 * sum(c.isupper() for c in w) / n), 9))
    if HEX.match(w):
        f += ["hex", "hexlen%d" % min(n, 80)]
    if B64.match(w):
        f.append("b64")
    if w.endswith("="):
        f.append("pad")
    if UUID.search(w):
        f.append("uuid")
    if "://" in w:
        f.append("url")
    if "@" in w:
        f.append("at")
    if "/" in w:
        f.append("slash%d" % min(w.count("/"), 3))
    if "." in w:
        f.append("dot%d" % min(w.count("."), 3))
    if re.match(r"^[a-z]{2,5}_", w):
        f.append("pfx_")
    if re.match(r"^[a-z]+(-[a-z0-9]+)+$", w):
        f.append("kebab")
    if re.match(r"^\d", w):
        f.append("startdigit")
    f += ["sym" + s for s in sorted(set(c for c in w if not c.isalnum()))[:4]]
    if re.search(r"[A-Z][a-z]{3,}", w):
        f.append("capword")
    if re.search(r"[a-z]{4,}", w):
        f.append("lowrun")
    run = max((len(x) for x in re.findall(r"[A-Za-z]+", w)), default=0)
    f.append("alpharun%d" % min(run // 3, 6))
    counts = collections.Counter(w)
    entropy = -sum(v / n * math.log2(v / n) for v in counts.values())
    f.append("ent%d" % min(int(entropy * 2), 12))
    f.append("p3:" + re.sub(r"[a-z]", "a", re.sub(r"[A-Z]", "A", re.sub(r"\d", "9", w[:3]))))
    return f


def context(text, s, e):
    before, after = text[max(0, s - 80) : s], text[e : e + 40]
    f = []
    for i, t in enumerate(reversed([t.lower() for t in WORD.findall(before)][-5:])):
        if i < 2:
            f.append("p%d:%s" % (i + 1, t))
        f.append("b:" + t)
    for i, t in enumerate([t.lower() for t in WORD.findall(after)][:2]):
        f.append("n%d:%s" % (i + 1, t))
    f.append("pc:" + (before.rstrip()[-1:] or "^"))
    f.append("pcx:" + (before[-1:] or "^"))
    opened = text[:s].rfind("-----BEGIN")
    if re.search(r"-----BEGIN [A-Z ]*(CERTIFICATE|PUBLIC KEY|PGP PUBLIC)", text[:s]) and "-----END" not in text[opened:s]:
        f.append("inpub")
    f.append("col0" if text.rfind("\n", 0, s) + 1 == s else "colN")
    return f


def candidates(text):
    seen = set()
    for m in QUOTED.finditer(text):
        seen.add((m.start(2), m.end(2)))
        yield m.start(2), m.end(2), True
    for m in BARE.finditer(text):
        s, e = m.start(), m.end()
        while e > s and text[e - 1] in ".:,":
            e -= 1
        if (s, e) in seen:
            continue
        yield s, e, False
        if "=" in text[s:e].rstrip("="):
            k = text.index("=", s, e) + 1
            if e - k >= 6:
                yield k, e, False


def could_be_secret(w):
    if len(w) < 6 or len(w) > 256 or "redacted" in w:
        return False
    return len(set(kind(c) for c in w)) >= 2 and any(c.isalnum() for c in w)


def bucket(feature):
    x = 2166136261
    for b in feature.encode():
        x = ((x ^ b) * 16777619) & 0xFFFFFFFF
    return x % BUCKETS


def words(text):
    for s, e, quoted in candidates(text):
        w = text[s:e]
        if could_be_secret(w):
            fs = ["bias"] + shape(w) + context(text, s, e) + (["quoted"] if quoted else [])
            yield s, e, w, [bucket(x) for x in fs]


def train(rows, epochs=8, rate=0.2, l2=1e-5):
    weights = [0.0] * BUCKETS
    data = []
    for r in rows:
        for _, _, w, fs in words(r["text"]):
            secret = r["secret"]
            if secret is None:
                data.append((fs, 0, 1.0))
            elif (len(w) >= 6 and w in secret) or survives(secret, w):
                data.append((fs, 1, 1.0))
            else:
                data.append((fs, 0, 0.3))
    random.seed(7)
    for _ in range(epochs):
        random.shuffle(data)
        for fs, y, weight in data:
            z = max(-30.0, min(30.0, sum(weights[i] for i in fs)))
            g = (1 / (1 + math.exp(-z)) - y) * weight * rate
            for i in fs:
                weights[i] -= g + l2 * weights[i]
    return weights


def masked(weights, out, threshold, gated):
    spans = []
    for s, e, _, fs in words(out):
        line_start = out.rfind("\n", 0, s) + 1
        line_end = out.find("\n", e)
        line = out[line_start:s] + " " + out[e : len(out) if line_end < 0 else line_end]
        if gated and not CREDENTIAL_WORDS.search(line):
            continue
        z = max(-30.0, min(30.0, sum(weights[i] for i in fs)))
        if 1 / (1 + math.exp(-z)) > threshold:
            spans.append((s, e))
    parts, last = [], 0
    for s, e in sorted(spans):
        if s >= last:
            parts += [out[last:s], "[redacted:secret]"]
            last = e
    return "".join(parts + [out[last:]])


def main():
    rows = [json.loads(line) for line in open(sys.argv[1])]
    never = sys.argv[2] if len(sys.argv) > 2 else "eighth"
    sets = list(dict.fromkeys(r["set"] for r in rows))
    by_set = {s: [r for r in rows if r["set"] == s] for s in sets}
    print("held-out set | model | threshold | recall (rules -> rules+model) | false positives")
    for held in sets:
        weights = train([r for s in sets if s not in (held, never) for r in by_set[s]])
        for gated in (False, True):
            for threshold in (0.5, 0.8, 0.95):
                secrets = caught = innocent = changed = rules_caught = rules_changed = 0
                for r in by_set[held]:
                    out = masked(weights, r["out"], threshold, gated)
                    if r["secret"] is None:
                        innocent += 1
                        changed += out != r["text"]
                        rules_changed += r["out"] != r["text"]
                    else:
                        secrets += 1
                        caught += not survives(r["secret"], out)
                        rules_caught += not survives(r["secret"], r["out"])
                print(
                    f"{held} | {'gated' if gated else 'all words'} | {threshold} | "
                    f"{rules_caught / secrets:.3f} -> {caught / secrets:.3f} | "
                    f"{rules_changed / innocent * 100:.2f}% -> {changed / innocent * 100:.2f}%"
                )


if __name__ == "__main__":
    main()

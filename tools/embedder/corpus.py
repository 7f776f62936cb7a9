"""Distillation corpus: domain-like sentences that are NOT the evaluation set.

Sources (all from pinned PyPI packages, read from their installed files; deterministic):
- botocore==1.44.8 (Apache-2.0): the `documentation` strings of the newest API model of every AWS
  service (`botocore/data/<service>/<newest date>/service-2.json.gz`), HTML stripped, split into
  sentences. Cloud / IAM / networking / storage / database vocabulary.
- kubernetes==37.0.2 (Apache-2.0): the field `description=` strings of the generated API model
  classes (`kubernetes/client/models/*.py`), URLs removed. Pods, nodes, probes, scheduling, rollouts.
- synth_sre.py: template-generated incident-investigation findings (our own text, see that file).

Sentences are de-duplicated, filtered to 4..60 words, and sub-sampled with a fixed seed.
"""
from __future__ import annotations

import gzip
import html
import importlib.util
import json
import os
import random
import re

_TAG = re.compile(r"<[^>]+>")
_WS = re.compile(r"\s+")
_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"'`])")


def _pkg_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"python package {name} is not installed (see requirements.txt)")
    return list(spec.submodule_search_locations)[0]


def _clean(text: str) -> str:
    text = _TAG.sub(" ", text)
    text = html.unescape(text)
    return _WS.sub(" ", text).strip()


def _sentences(text: str) -> list[str]:
    out = []
    for s in _SENT.split(_clean(text)):
        s = s.strip()
        n = len(s.split())
        if 4 <= n <= 60 and not s.startswith(("http", "{", "[")):
            out.append(s)
    return out


def botocore_sentences() -> list[str]:
    root = os.path.join(_pkg_dir("botocore"), "data")
    seen, out = set(), []
    for svc in sorted(os.listdir(root)):
        sdir = os.path.join(root, svc)
        if not os.path.isdir(sdir):
            continue
        versions = sorted(v for v in os.listdir(sdir) if os.path.isdir(os.path.join(sdir, v)))
        if not versions:
            continue
        path = os.path.join(sdir, versions[-1], "service-2.json.gz")
        if not os.path.exists(path):
            continue
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            model = json.load(fh)
        docs = []

        def walk(o):
            if isinstance(o, dict):
                for k in sorted(o):
                    v = o[k]
                    if k == "documentation" and isinstance(v, str):
                        docs.append(v)
                    else:
                        walk(v)
            elif isinstance(o, list):
                for v in o:
                    walk(v)

        walk(model)
        for d in docs:
            for s in _sentences(d):
                if s not in seen:
                    seen.add(s)
                    out.append(s)
    return out


_K8S_DESC = re.compile(r'description="((?:[^"\\]|\\.)*)"')
_URL = re.compile(r"More info: \S+|https?://\S+")


def kubernetes_sentences() -> list[str]:
    root = os.path.join(_pkg_dir("kubernetes"), "client", "models")
    seen, out = set(), []
    for fn in sorted(os.listdir(root)):
        if not fn.endswith(".py"):
            continue
        src = open(os.path.join(root, fn), encoding="utf-8").read()
        for m in _K8S_DESC.finditer(src):
            text = _URL.sub(" ", m.group(1).replace('\\"', '"'))
            for s in _sentences(text):
                if s not in seen:
                    seen.add(s)
                    out.append(s)
    return out


def build_corpus(n_botocore: int, n_k8s: int, n_synth: int, seed: int = 1234) -> list[str]:
    from synth_sre import generate

    rng = random.Random(seed)
    b = botocore_sentences()
    k = kubernetes_sentences()
    rng.shuffle(b)
    rng.shuffle(k)
    s = generate(n_synth, seed=seed)
    corpus = b[:n_botocore] + k[:n_k8s] + s
    seen, out = set(), []
    for t in corpus:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


if __name__ == "__main__":
    b = botocore_sentences()
    k = kubernetes_sentences()
    print("botocore", len(b), "kubernetes", len(k))
    rng = random.Random(0)
    for s in rng.sample(b, 8) + rng.sample(k, 8):
        print(" -", s)

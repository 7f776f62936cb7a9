#!/usr/bin/env python3
"""Search-relevance harness for MACP's default search (static model + FTS5-style BM25).

Per query the WHOLE room is ranked (score descending, ties by rowid = insertion order);
hit@1, recall@5 and MRR are reported overall, per kind and per room, then the stability check:
fusion parameters chosen on 3 rooms and scored on the 4th (leave-one-room-out), and on all
2-vs-2 room splits.

Usage:
  python eval.py                      # shipped model + BM25 + fusions (+ reference static model if present)
  python eval.py --transformer        # also the full MiniLM-L6 transformer (about 10 s)
  python eval.py --bm25-scope room    # BM25 statistics per room instead of over the whole table
  python eval.py --json out.json
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import evallib  # noqa: E402
import modelfile  # noqa: E402
import pipeline  # noqa: E402

DEFAULT_EVAL = "/work/shared/eval/search-relevance.json"
REF_MODEL = "/work/shared/models/minilm-static-256/model.safetensors"

BETAS = (0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5)
POWERS = (1.0, 2.0)
RRF_K = (10.0, 30.0, 60.0)
RRF_WB = (0.25, 0.5, 1.0)


def load_wordpiece(vocab_path: str):
    """BERT-uncased WordPiece from the shipped vocab.txt (same ids as the base model's tokenizer)."""
    from tokenizers import BertWordPieceTokenizer

    return BertWordPieceTokenizer(vocab_path, lowercase=True, clean_text=True, handle_chinese_chars=True,
                                  strip_accents=None, wordpieces_prefix="##")


def check_against_sqlite(es: evallib.EvalSet) -> str:
    """Compare the Python BM25 mirror with real SQLite FTS5 bm25() (if this Python's sqlite3 has
    FTS5): same matched rows and scores for every query, same vocabulary / document counts."""
    import sqlite3

    con = sqlite3.connect(":memory:")
    try:
        con.execute("CREATE VIRTUAL TABLE fts USING fts5(content)")
    except sqlite3.OperationalError:
        return "sqlite3 without FTS5: cross-check skipped"
    con.executemany("INSERT INTO fts(rowid, content) VALUES (?, ?)", [(i + 1, t) for i, t in enumerate(es.texts)])
    idx = pipeline.BM25Index(es.texts)
    allrows = list(range(len(es.texts)))
    worst, bad = 0.0, 0
    for q in es.queries:
        terms = idx.query_terms(q["text"])
        if not terms:
            continue
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        got = np.zeros(len(es.texts))
        for rowid, score in con.execute("SELECT rowid, -bm25(fts) FROM fts WHERE fts MATCH ?", (match,)):
            got[rowid - 1] = score
        mine = idx.scores(q["text"], allrows)
        bad += int(not np.array_equal(mine > 0, got > 0))
        worst = max(worst, float(np.abs(mine - got).max()))
    con.execute("CREATE VIRTUAL TABLE v USING fts5vocab(fts, 'row')")
    same_vocab = dict(con.execute("SELECT term, doc FROM v").fetchall()) == dict(idx.df)
    return (f"FTS5 cross-check (SQLite {sqlite3.sqlite_version}): max |bm25 mirror - FTS5| = {worst:.2e}, "
            f"queries with different matched rows: {bad}, identical term/doc-count vocabulary: {same_vocab}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval", default=DEFAULT_EVAL)
    ap.add_argument("--model", default=os.path.join(HERE, "model"))
    ap.add_argument("--bm25-scope", choices=("table", "room"), default="table")
    ap.add_argument("--transformer", action="store_true", help="also score the full MiniLM-L6 transformer")
    ap.add_argument("--json", default=None)
    ap.add_argument("--bench", action="store_true", help="measure static-model encoding throughput and exit")
    args = ap.parse_args()

    es = evallib.EvalSet(args.eval, args.bm25_scope)
    meta = json.load(open(os.path.join(args.model, "model.json")))
    E = modelfile.read(os.path.join(args.model, meta["file"]))
    tok = load_wordpiece(os.path.join(args.model, meta["vocab_file"]))
    qtexts = [q["text"] for q in es.queries]
    if args.bench:
        import time

        sm = pipeline.StaticModel(E, tok)
        texts = es.texts * 50
        t0 = time.perf_counter()
        ids = sm.token_ids(texts)
        t1 = time.perf_counter()
        ntok = sum(len(x) for x in ids)
        for x in ids:  # pooling as the Rust port does it: gather rows, sum, normalise
            if x:
                v = E[x].sum(0)
                v /= np.linalg.norm(v)
        t2 = time.perf_counter()
        n = len(texts)
        print(f"{n} findings, {ntok} tokens: tokenize {n / (t1 - t0):,.0f} sent/s, pool+normalise "
              f"{n / (t2 - t1):,.0f} sent/s ({ntok / (t2 - t1):,.0f} tok/s), total {n / (t2 - t0):,.0f} sent/s")
        docs = np.random.default_rng(0).standard_normal((10000, E.shape[1])).astype(np.float32)
        qv = docs[0]
        tt = time.perf_counter()  # brute-force scoring of one query against a 10k-finding room
        for _ in range(100):
            _ = docs @ qv
        print(f"cosine scoring of 10,000 findings: {(time.perf_counter() - tt) / 100 * 1e3:.2f} ms per query")
        return
    qi = {q["key"]: i for i, q in enumerate(es.queries)}

    sem = {}
    sm = pipeline.StaticModel(E, tok)
    sem["static (ours)"] = (sm.encode(es.texts), sm.encode(qtexts))
    if os.path.exists(REF_MODEL):
        from safetensors.numpy import load_file

        ref = load_file(REF_MODEL)["embeddings"]
        rm = pipeline.StaticModel(ref, tok)
        sem["static (reference)"] = (rm.encode(es.texts), rm.encode(qtexts))
    if args.transformer:
        import minilm

        m = minilm.MiniLM()
        mt = minilm.load_tokenizer()
        sem["transformer"] = (minilm.encode_sentences(m, mt, es.texts), minilm.encode_sentences(m, mt, qtexts))

    B = {q["key"]: es.bm25_scores(q) for q in es.queries}
    ideal = {}
    for q in es.queries:
        idx, _ = es.bm25[q["room"]]
        ideal[q["key"]] = idx.ideal(q["text"])

    def cosf(name):
        D, Q = sem[name]
        return lambda q, rows: D[rows] @ Q[qi[q["key"]]]

    results = {}
    perq = {}

    def report(name, fn, queries=None):
        per = evallib.evaluate(es, fn, queries)
        s = evallib.summarize(per)
        results[name] = s
        perq[name] = np.array([r["mrr"] for r in per])
        print(evallib.fmt_row(name, s, 46))
        return s

    print(f"eval set: {args.eval}  ({len(es.queries)} queries, {len(es.findings)} findings, "
          f"BM25 statistics over the {args.bm25_scope})")
    print(check_against_sqlite(es))
    print("columns: overall MRR, hit@1, recall@5 | per kind MRR/hit@1/recall@5")
    report("BM25 (FTS5 mirror)", lambda q, rows: B[q["key"]])
    for name in sem:
        report(name + " alone", cosf(name))
    print()
    for name in sem:
        c = cosf(name)
        report(f"{name} + BM25, RRF k=60", lambda q, rows, c=c: pipeline.rrf_fusion(c(q, rows), B[q["key"]], 60.0))
        report(f"{name} + BM25, coverage b=0.5 p=2 [default]",
               lambda q, rows, c=c: pipeline.coverage_fusion(c(q, rows), B[q["key"]], ideal[q["key"]]))
    print()

    # ---- uncertainty: paired bootstrap over queries (10,000 resamples, fixed seed)
    rng = np.random.default_rng(0)
    boot = rng.integers(0, len(es.queries), size=(10000, len(es.queries)))
    default = "static (ours) + BM25, coverage b=0.5 p=2 [default]"
    m = perq[default]
    lo, hi = np.percentile(m[boot].mean(1), [2.5, 97.5])
    print(f"bootstrap 95% interval of the default's MRR: [{lo:.3f}, {hi:.3f}]")
    for other in ("BM25 (FTS5 mirror)", "static (reference) + BM25, RRF k=60", "transformer alone",
                  "static (ours) alone"):
        if other in perq:
            d = (m - perq[other])[boot].mean(1)
            lo, hi = np.percentile(d, [2.5, 97.5])
            print(f"  default minus {other}: {float((m - perq[other]).mean()):+.3f}  95% interval [{lo:+.3f}, {hi:+.3f}]")
    print()

    # ---- stability: parameters chosen on some rooms, scored on the others
    c = cosf("static (ours)")
    families = {
        "coverage fusion (beta, power)": (
            list(itertools.product(BETAS, POWERS)),
            lambda p: (lambda q, rows: pipeline.coverage_fusion(c(q, rows), B[q["key"]], ideal[q["key"]], p[0], p[1])),
        ),
        "weighted RRF (k, w_bm25)": (
            list(itertools.product(RRF_K, RRF_WB)),
            lambda p: (lambda q, rows: pipeline.rrf_fusion(c(q, rows), B[q["key"]], p[0], p[1])),
        ),
    }
    rooms = es.rooms
    for fam, (grid, make) in families.items():
        per_param = {p: evallib.evaluate(es, make(p)) for p in grid}
        print(f"grid for {fam} (static (ours) + BM25), MRR overall / keyword hit@1:")
        line = []
        for p in grid:
            s = evallib.summarize(per_param[p])
            line.append(f"{p}: {s['all']['mrr']:.3f}/{s['keyword']['hit1']:.2f}")
        for i in range(0, len(line), 4):
            print("   " + "   ".join(line[i : i + 4]))

        def choose(train_rooms):
            best, bestv = None, -1.0
            for p in grid:
                rows = [r for r in per_param[p] if r["room"] in train_rooms]
                v = float(np.mean([r["mrr"] for r in rows]))
                if v > bestv + 1e-12:
                    best, bestv = p, v
            return best

        held = []
        picks = []
        for r in rooms:
            p = choose(set(rooms) - {r})
            picks.append((r, p))
            held += [x for x in per_param[p] if x["room"] == r]
        s = evallib.summarize(held)
        results[f"LORO {fam}"] = s
        print(f"  leave-one-room-out picks: {picks}")
        print("  " + evallib.fmt_row("LORO held-out", s, 44))
        splits = []
        for a in itertools.combinations(rooms, 2):
            b = tuple(x for x in rooms if x not in a)
            p = choose(set(a))
            held2 = [x for x in per_param[p] if x["room"] in b]
            s2 = evallib.summarize(held2)
            splits.append((a, b, p, s2["all"]["mrr"]))
        print("  2-vs-2 (tune on A, score B): " + "; ".join(
            f"{'+'.join(a)}->{'+'.join(b)} {p} {m:.3f}" for a, b, p, m in splits))
        print()

    for r in rooms:
        print(f"room {r}: " + ", ".join(
            f"{n.split(' [')[0]} {results[n]['room:' + r]['mrr']:.3f}" for n in results
            if ("room:" + r) in results[n] and not n.startswith("LORO")))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()

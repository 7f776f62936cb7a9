"""Evaluation helpers: data loading, metrics, per-kind and per-room reports."""
from __future__ import annotations

import json
from collections import defaultdict

import numpy as np

from pipeline import BM25Index, rank_order

KINDS = ("paraphrase", "keyword", "conceptual")


class EvalSet:
    def __init__(self, path: str, bm25_scope: str = "table"):
        d = json.load(open(path))
        self.rooms = [r["key"] for r in d["rooms"]]
        self.findings = d["findings"]
        self.queries = d["queries"]
        self.fkey = [f["key"] for f in self.findings]
        self.texts = [f["content"] for f in self.findings]
        self.room_rows = defaultdict(list)  # rows in insertion (rowid) order
        for i, f in enumerate(self.findings):
            self.room_rows[f["room"]].append(i)
        # bm25 statistics: "table" = one FTS5 table holding every room (as in MACP's SQLite),
        # "room" = a separate index per room.
        self.bm25_scope = bm25_scope
        if bm25_scope == "table":
            idx = BM25Index(self.texts)
            self.bm25 = {r: (idx, self.room_rows[r]) for r in self.rooms}
        else:
            self.bm25 = {}
            for r in self.rooms:
                rows = self.room_rows[r]
                sub = BM25Index([self.texts[i] for i in rows])
                self.bm25[r] = (sub, list(range(len(rows))))

    def bm25_scores(self, q) -> np.ndarray:
        idx, rows = self.bm25[q["room"]]
        return idx.scores(q["text"], rows)


def metrics_for(order_keys: list[str], relevant: list[str]) -> tuple[float, float, float]:
    rel = set(relevant)
    hit1 = 1.0 if order_keys[0] in rel else 0.0
    r5 = len(rel & set(order_keys[:5])) / len(rel)
    mrr = 0.0
    for i, k in enumerate(order_keys):
        if k in rel:
            mrr = 1.0 / (i + 1)
            break
    return hit1, r5, mrr


def evaluate(es: EvalSet, score_fn, queries=None) -> dict:
    """score_fn(query_dict, room_row_indices) -> np.ndarray of scores (higher = better) over the room.
    Ties are broken by rowid (insertion order). Returns per-query metrics list."""
    qs = es.queries if queries is None else queries
    per = []
    for q in qs:
        rows = es.room_rows[q["room"]]
        s = np.asarray(score_fn(q, rows), dtype=np.float64)
        order = rank_order(s)
        keys = [es.fkey[rows[i]] for i in order]
        h, r, m = metrics_for(keys, q["relevant"])
        per.append({"key": q["key"], "room": q["room"], "kind": q["kind"], "hit1": h, "r5": r, "mrr": m})
    return per


def summarize(per: list[dict]) -> dict:
    def agg(rows):
        if not rows:
            return {"n": 0, "hit1": float("nan"), "r5": float("nan"), "mrr": float("nan")}
        return {
            "n": len(rows),
            "hit1": float(np.mean([r["hit1"] for r in rows])),
            "r5": float(np.mean([r["r5"] for r in rows])),
            "mrr": float(np.mean([r["mrr"] for r in rows])),
        }

    out = {"all": agg(per)}
    for k in KINDS:
        out[k] = agg([r for r in per if r["kind"] == k])
    for room in sorted({r["room"] for r in per}):
        out["room:" + room] = agg([r for r in per if r["room"] == room])
    return out


def fmt_row(name: str, s: dict, width: int = 34) -> str:
    a = s["all"]
    parts = [f"{name:<{width}} MRR {a['mrr']:.3f} h@1 {a['hit1']:.3f} R@5 {a['r5']:.3f}"]
    for k in KINDS:
        parts.append(f"| {k[:4]} {s[k]['mrr']:.3f}/{s[k]['hit1']:.2f}/{s[k]['r5']:.2f}")
    return " ".join(parts)

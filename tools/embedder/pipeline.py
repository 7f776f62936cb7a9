"""Reference implementation of the MACP search pipeline (the thing the Rust code ports).

- fts5_tokens(): mirror of SQLite FTS5's default `unicode61` tokenizer (remove_diacritics=1).
- BM25Index: mirror of FTS5's `bm25()` (k1=1.2, b=0.75, FTS5 idf), OR-query of distinct terms.
- StaticModel: static token-vector model, mean pooling, L2 normalisation.
- fusion functions.
"""
from __future__ import annotations

import math
import unicodedata
from collections import Counter

import numpy as np

# ---------------------------------------------------------------- FTS5 unicode61 mirror


def _is_token_char(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return cat[0] in ("L", "N") or cat == "Co"


def _fold(ch: str) -> str:
    # lower-case + remove diacritics (unicode61 remove_diacritics=1 folds e.g. é->e, ñ->n)
    low = ch.lower()
    out = []
    for c in low:
        d = unicodedata.normalize("NFD", c)
        base = "".join(x for x in d if not unicodedata.combining(x))
        out.append(base if base else c)
    return "".join(out)


def fts5_tokens(text: str) -> list[str]:
    toks, cur = [], []
    for ch in text:
        if _is_token_char(ch):
            cur.append(_fold(ch))
        elif unicodedata.combining(ch) and cur:
            # combining diacritic after a token char: dropped by remove_diacritics
            continue
        else:
            if cur:
                toks.append("".join(cur))
                cur = []
    if cur:
        toks.append("".join(cur))
    return toks


class BM25Index:
    """FTS5 bm25() over a single-column table. Statistics (N, avgdl, n(q)) are over the whole
    table (`docs` as passed), exactly as FTS5 computes them, whatever the WHERE filter."""

    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b
        self.doc_tokens = [fts5_tokens(d) for d in docs]
        self.tf = [Counter(t) for t in self.doc_tokens]
        self.dl = np.array([len(t) for t in self.doc_tokens], dtype=np.float64)
        self.N = len(docs)
        self.avgdl = float(self.dl.sum()) / max(self.N, 1)
        self.df = Counter()
        for c in self.tf:
            self.df.update(c.keys())

    def idf(self, term: str) -> float:
        n = self.df.get(term, 0)
        v = math.log((self.N - n + 0.5) / (n + 0.5))
        return v if v > 0.0 else 1e-6

    @staticmethod
    def query_terms(query: str) -> list[str]:
        seen, out = set(), []
        for t in fts5_tokens(query):
            if t not in seen:
                seen.add(t)
                out.append(t)
        return out

    def ideal(self, query: str) -> float:
        """Sum of FTS5 idf over the distinct query terms (terms absent from the table count with
        n=0, i.e. idf = ln((N+0.5)/0.5)). Normaliser of the BM25 'coverage'."""
        return float(sum(self.idf(t) for t in self.query_terms(query)))

    def scores(self, query: str, rows: list[int]) -> np.ndarray:
        """Positive BM25 (= -bm25() of FTS5) for each row in `rows`; 0.0 where no term matches
        (such rows are not returned by FTS5 MATCH at all)."""
        terms = self.query_terms(query)
        out = np.zeros(len(rows), dtype=np.float64)
        k1, b = self.k1, self.b
        for t in terms:
            if self.df.get(t, 0) == 0:
                continue
            idf = self.idf(t)
            for j, r in enumerate(rows):
                f = self.tf[r].get(t, 0)
                if f:
                    out[j] += idf * (f * (k1 + 1.0)) / (f + k1 * (1.0 - b + b * self.dl[r] / self.avgdl))
        return out


# ---------------------------------------------------------------- static embedding model


class StaticModel:
    def __init__(self, emb: np.ndarray, tokenizer, weights: np.ndarray | None = None):
        self.emb = emb.astype(np.float32)
        self.tok = tokenizer
        self.weights = weights  # optional per-token scalar (applied at pooling)

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        enc = self.tok.encode_batch(texts, add_special_tokens=False)
        return [[i for i in e.ids if i != 100] for e in enc]  # drop [UNK]

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.emb.shape[1]), dtype=np.float32)
        for k, ids in enumerate(self.token_ids(texts)):
            if not ids:
                continue
            v = self.emb[ids]
            if self.weights is not None:
                v = v * self.weights[ids][:, None]
            s = v.sum(0)
            n = np.linalg.norm(s)
            if n > 0:
                out[k] = s / n
        return out


# ---------------------------------------------------------------- fusion

FUSION_BETA = 0.5   # weight of the lexical coverage term
FUSION_POWER = 2.0  # exponent of the lexical coverage term


def coverage_fusion(cos: np.ndarray, bm25: np.ndarray, ideal: float,
                    beta: float = FUSION_BETA, power: float = FUSION_POWER) -> np.ndarray:
    """Default MACP ranking score: cos(q, d) + beta * (bm25(q, d) / ideal(q)) ** power.
    bm25 is FTS5's -bm25() (0 for rows MATCH did not return); ideal(q) = sum of idf of the
    distinct query terms. A query whose terms are all rare identifiers that a finding contains
    gets coverage ~1 and dominates; paraphrases (few, common shared words) get coverage ~0.1."""
    cov = bm25 / ideal if ideal > 0 else np.zeros_like(bm25)
    return cos + beta * np.power(cov, power)


def rrf_fusion(cos: np.ndarray, bm25: np.ndarray, k: float = 60.0, w_bm25: float = 1.0,
               w_cos: float = 1.0) -> np.ndarray:
    """(Weighted) reciprocal rank fusion. Semantic ranks over all rows; BM25 ranks over the rows
    FTS5 MATCH returned (bm25 > 0) only, others get no BM25 term."""
    out = w_cos / (k + ranks_of(cos))
    matched = bm25 > 0
    rb = ranks_of(bm25, matched)
    out = out + np.where(matched, w_bm25 / (k + np.where(matched, rb, 1.0)), 0.0)
    return out


def rank_order(scores: np.ndarray, rowids: np.ndarray | None = None) -> np.ndarray:
    """Indices sorted by descending score, ties broken by ascending rowid (insertion order)."""
    n = len(scores)
    rid = np.arange(n) if rowids is None else rowids
    return np.lexsort((rid, -scores))


def ranks_of(scores: np.ndarray, matched: np.ndarray | None = None) -> np.ndarray:
    """1-based rank of each item; items with matched==False get rank=inf."""
    order = rank_order(scores)
    r = np.empty(len(scores), dtype=np.float64)
    r[order] = np.arange(1, len(scores) + 1)
    if matched is not None:
        r[~matched] = np.inf
    return r

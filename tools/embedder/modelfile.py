"""MACP static embedding file format ("MACPSEMB" v1): write / read.

Layout (all little-endian):
    offset  size        field
    0       8           magic b"MACPSEMB"
    8       4  u32      format version = 1
    12      4  u32      vocab_size V (30522, = lines of vocab.txt; row i is token id i)
    16      4  u32      dim D
    20      4  u32      dtype: 1 = int8 rows with one f32 scale per row
    24      4  u32      flags: bit 0 = L2-normalise the pooled vector (always set)
    28      4  u32      reserved, 0
    32      4*V f32     scale[i]
    32+4V   V*D i8      q[i*D + j]
    vector(i)[j] = scale[i] * q[i*D + j]      (rows that are all zero: token contributes nothing)
"""
from __future__ import annotations

import hashlib
import struct

import numpy as np

MAGIC = b"MACPSEMB"
HEADER = struct.Struct("<8sIIIIII")


def quantize_int8(E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    E = E.astype(np.float32)
    amax = np.abs(E).max(axis=1)
    scale = (amax / 127.0).astype(np.float32)
    safe = np.where(scale > 0, scale, 1.0).astype(np.float32)
    q = np.clip(np.rint(E / safe[:, None]), -127, 127).astype(np.int8)
    q[scale == 0] = 0
    return scale, q


def dequantize(scale: np.ndarray, q: np.ndarray) -> np.ndarray:
    return scale[:, None].astype(np.float32) * q.astype(np.float32)


def write(path: str, E: np.ndarray) -> tuple[str, np.ndarray]:
    """Quantize and write. Returns (sha256 hex, dequantized matrix as stored)."""
    V, D = E.shape
    scale, q = quantize_int8(E)
    data = HEADER.pack(MAGIC, 1, V, D, 1, 1, 0) + scale.astype("<f4").tobytes() + q.tobytes()
    with open(path, "wb") as fh:
        fh.write(data)
    return hashlib.sha256(data).hexdigest(), dequantize(scale, q)


def read(path: str) -> np.ndarray:
    data = open(path, "rb").read()
    magic, ver, V, D, dtype, flags, _ = HEADER.unpack_from(data, 0)
    assert magic == MAGIC and ver == 1 and dtype == 1, "not a MACPSEMB v1 int8 file"
    off = HEADER.size
    scale = np.frombuffer(data, dtype="<f4", count=V, offset=off)
    q = np.frombuffer(data, dtype=np.int8, count=V * D, offset=off + 4 * V).reshape(V, D)
    return dequantize(scale, q)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

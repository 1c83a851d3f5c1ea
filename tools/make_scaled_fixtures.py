#!/usr/bin/env python3
"""Golden fixtures for the scaled weight formats of HF quantized checkpoints (tests/golden/scaled/).

An independent numpy implementation of the four layouts basalt reads and of the amax-based
quantisers that produce them:

  nvfp4         ModelOpt NVFP4: weight U8 [N, K/2] (two e2m1 codes a byte, element 2j in the low
                nibble), weight_scale F8_E4M3 [N, K/16], weight_scale_2 F32 [], input_scale F32 []
                W = f32(f32(e2m1(q) * e4m3(S[n, k/16])) * g),  g = weight_scale_2
  fp8_tensor    ModelOpt FP8: weight F8_E4M3 [N, K], weight_scale F32 [], input_scale F32 []
                W = f32(e4m3(q) * s)
  fp8_channel   compressed-tensors FP8, strategy "channel": weight F8_E4M3 [N, K],
                weight_scale F32 (one vector case BF16, as many real checkpoints) [N, 1];
                W = f32(e4m3(q) * s[n])
  fp8_block128  Qwen3-FP8 / DeepSeek-V3: weight F8_E4M3 [N, K], weight_scale_inv F32
                [ceil(N/128), ceil(K/128)] (multiplied, despite the name);
                W = f32(e4m3(q) * s[n/128, k/128])

Writes
  vectors.safetensors + vectors.json   format-level cases: source x, quantised tensors under
                                       their real names (prefix "<case>."), expected dequant
  e4m3_encode.npy, e2m1_encode.npy     f32 [M, 2]: input value, expected code (as float)
  <source>.<fmt>/                      quantised copies of two golden checkpoints with the fp32
                                       transformers logits / greedy chain on the dequantised W

    .venv-ref/bin/python tools/make_scaled_fixtures.py --out tests/golden/scaled --verify

--verify re-reads every written file (safetensors header parsed by hand), dequantises from the
stored bytes by a second code path (float64 products rounded once to f32), checks the .dequant
tensors bit for bit, re-quantises and compares bytes, checks the nibble order on a hand-made
case, and runs make_reference.py's float64 numpy forward on the dequantised model weights
against each logits.npy (1e-5 of max|logit|) and greedy chain.

Deterministic: same bytes on re-run (torch single-threaded; all quantisation is numpy f32).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import struct
import sys
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

import make_reference as mr  # noqa: E402  (load_f32, compute_reference, numpy forward)

F32 = np.float32
E4M3_MAX = 448.0
E2M1_MAX = 6.0
NVFP4_GROUP = 16
FP8_BLOCK = 128
VERIFY_REL_TOL = 1e-5

# ----------------------------------------------------------------------------------------------
# codes


def _e4m3_value(c: int) -> float:
    """OCP float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no inf; S.1111.111 = NaN."""
    s = -1.0 if c & 0x80 else 1.0
    e, m = (c >> 3) & 0xF, c & 0x7
    if e == 0xF and m == 0x7:
        return math.nan
    if e == 0:
        return s * m * 2.0 ** -9  # subnormal: step 2^-9
    return s * (1.0 + m / 8.0) * 2.0 ** (e - 7)


E4M3_TABLE = np.array([_e4m3_value(c) for c in range(256)], dtype=F32)
E2M1_MAGS = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)
E2M1_TABLE = np.array([(-1.0 if c & 8 else 1.0) * E2M1_MAGS[c & 7] for c in range(16)], dtype=F32)


def e4m3_encode_np(x) -> np.ndarray:
    """Hand-written f32 -> e4m3 code: round to nearest even, saturating to +-448 (code 0x7e),
    NaN -> 0x7f | sign, the sign bit kept for every negative input (-0.0 and tiny negatives that
    round to zero give 0x80)."""
    x = np.asarray(x, dtype=F32)
    with np.errstate(invalid="ignore"):  # NaN payloads
        a = np.abs(x).astype(np.float64)  # exact
    sign = (np.signbit(x).astype(np.uint8) << 7).astype(np.uint8)
    nan = np.isnan(x)
    sat = ~nan & (a >= E4M3_MAX)
    fin = ~nan & ~sat
    af = np.where(fin, a, 1.0)
    _, ex = np.frexp(af)  # af = m * 2^ex, m in [0.5, 1): floor(log2 af) = ex - 1 (0 -> ex 0)
    e = np.maximum(ex.astype(np.int64) - 1, -6)  # below 2^-6 the subnormal grid (step 2^-9)
    quantum = np.ldexp(1.0, (e - 3).astype(np.int32))  # 3 mantissa bits
    m = np.rint(af / quantum)  # exact division (power of two); rint = ties to even
    v = m * quantum  # the rounded magnitude, <= 448
    sub = v < 2.0 ** -6
    _, ex2 = np.frexp(np.where(sub, 1.0, v))
    E = ex2.astype(np.int64) - 1
    norm_code = ((E + 7) << 3) | (np.where(sub, 8.0, v / np.ldexp(1.0, (E - 3).astype(np.int32))).astype(np.int64) - 8)
    code = np.where(sub, (v / 2.0 ** -9).astype(np.int64), norm_code)
    code = np.where(sat, 0x7E, code)
    code = np.where(nan, 0x7F, code)
    assert np.all((code >= 0) & (code <= 0x7F))
    return (code.astype(np.uint8) | sign).astype(np.uint8)


def e4m3_encode_torch(x) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=F32))
    return t.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8).numpy().copy()


def e4m3_encode(x) -> np.ndarray:
    """The encoder every quantiser uses: the numpy one, asserted equal to torch's cast."""
    got = e4m3_encode_np(x)
    ref = e4m3_encode_torch(x)
    if not np.array_equal(got, ref):
        bad = np.flatnonzero(got.reshape(-1) != ref.reshape(-1))[:5]
        xs = np.asarray(x, F32).reshape(-1)[bad]
        raise AssertionError(f"e4m3 numpy vs torch differ at {xs.tolist()}: "
                             f"{got.reshape(-1)[bad].tolist()} vs {ref.reshape(-1)[bad].tolist()}")
    return got


def e2m1_encode(x) -> np.ndarray:
    """f32 -> e2m1 code: nearest of [0, .5, 1, 1.5, 2, 3, 4, 6], ties to the even code index,
    saturating at 6; sign bit iff x < 0 (so -0.0 -> 0, -0.1 -> 0x8); NaN -> 0."""
    x = np.asarray(x, dtype=F32)
    with np.errstate(invalid="ignore"):  # NaN payloads
        a = np.abs(x).astype(np.float64)
    fin = np.isfinite(a)
    d = np.abs(np.where(fin, a, 0.0)[..., None] - E2M1_MAGS)  # exact (all dyadic)
    cand = d == d.min(-1, keepdims=True)
    first = np.argmax(cand, -1)  # lowest candidate; a tie always involves first and first + 1
    tie = cand.sum(-1) == 2
    idx = np.where(tie & (first % 2 == 1), first + 1, first)
    idx = np.where(a >= E2M1_MAX, 7, idx)  # saturate (incl. inf)
    code = idx.astype(np.uint8) | np.where(x < 0, 8, 0).astype(np.uint8)
    code = np.where(np.isnan(x), 0, code).astype(np.uint8)
    # a second formulation: thresholds at the midpoints, "<=" where the lower code is even
    t = a
    alt = np.select([t <= 0.25, t < 0.75, t <= 1.25, t < 1.75, t <= 2.5, t < 3.5, t <= 5.0],
                    [0, 1, 2, 3, 4, 5, 6], 7).astype(np.uint8)
    alt = np.where(np.isnan(x), 0, alt | np.where(x < 0, 8, 0)).astype(np.uint8)
    assert np.array_equal(code, alt), "e2m1 encoders disagree"
    return code


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """[..., K] codes -> [..., K/2] bytes, element 2j in the low nibble, 2j+1 in the high."""
    c = codes.astype(np.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)


def unpack_nibbles(b: np.ndarray) -> np.ndarray:
    out = np.empty(b.shape[:-1] + (b.shape[-1] * 2,), np.uint8)
    out[..., 0::2] = b & 0xF
    out[..., 1::2] = b >> 4
    return out


# ----------------------------------------------------------------------------------------------
# quantisers (every step an f32 operation, in the order of the spec)


def quantize_nvfp4(x: np.ndarray) -> dict[str, np.ndarray]:
    x = np.asarray(x, F32)
    N, K = x.shape
    assert K % NVFP4_GROUP == 0, K
    ax = np.abs(x)
    amax = ax.max() if x.size else F32(0)
    g = F32(amax) / F32(2688.0) if amax != 0 else F32(1.0)
    t = F32(F32(6.0) * g)
    a = ax.reshape(N, K // NVFP4_GROUP, NVFP4_GROUP).max(-1)
    sf = (a / t).astype(F32)
    S = e4m3_encode(sf)
    S = np.where(sf == 0, np.uint8(0x38), S).astype(np.uint8)
    denom = (E4M3_TABLE[S] * g).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        y = (x.reshape(N, K // NVFP4_GROUP, NVFP4_GROUP) / denom[..., None]).astype(F32)
    y = np.where(denom[..., None] == 0, F32(0), y)
    q = e2m1_encode(y)
    q = np.where(denom[..., None] == 0, np.uint8(0), q).astype(np.uint8).reshape(N, K)
    assert y.dtype == F32 and denom.dtype == F32 and sf.dtype == F32
    return {"weight": pack_nibbles(q), "weight_scale": S, "weight_scale_2": np.array(g, F32),
            "input_scale": np.array(1.0, F32)}


def _fp8_scale(amax) -> np.ndarray:
    amax = np.asarray(amax, F32)
    s = (amax / F32(E4M3_MAX)).astype(F32)
    return np.where(amax == 0, F32(1.0), s).astype(F32)


def quantize_fp8_tensor(x: np.ndarray) -> dict[str, np.ndarray]:
    x = np.asarray(x, F32)
    s = _fp8_scale(np.abs(x).max())
    q = e4m3_encode((x / s).astype(F32))
    return {"weight": q, "weight_scale": np.array(s, F32), "input_scale": np.array(1.0, F32)}


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round to nearest even (finite inputs), as uint16 bits; checked against torch."""
    b = np.asarray(x, F32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    t = torch.from_numpy(np.asarray(x, F32).copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(r, t), "bf16 rounding differs from torch"
    return r


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b, np.uint16).astype(np.uint32) << 16).view(F32)


def _scale_f32(s: np.ndarray) -> np.ndarray:
    """A stored scale as f32: BF16 scales are kept as their uint16 bits."""
    return bf16_bits_to_f32(s) if s.dtype == np.uint16 else s.astype(F32)


def quantize_fp8_channel(x: np.ndarray, scale_dtype: str = "F32") -> dict[str, np.ndarray]:
    """scale_dtype "BF16" (an addition to the spec, as many compressed-tensors checkpoints store
    it): s_n = bf16(amax_row / 448) (RNE), then q = e4m3(x / s_n) with that rounded scale."""
    x = np.asarray(x, F32)
    s = _fp8_scale(np.abs(x).max(1, keepdims=True))  # [N, 1]
    stored = s
    if scale_dtype == "BF16":
        stored = f32_to_bf16_bits(s)
        s = bf16_bits_to_f32(stored)
    else:
        assert scale_dtype == "F32", scale_dtype
    q = e4m3_encode((x / s).astype(F32))
    return {"weight": q, "weight_scale": stored}


def quantize_fp8_block(x: np.ndarray, B: int = FP8_BLOCK) -> dict[str, np.ndarray]:
    x = np.asarray(x, F32)
    N, K = x.shape
    nb, kb = -(-N // B), -(-K // B)
    s = np.empty((nb, kb), F32)
    q = np.empty((N, K), np.uint8)
    for i in range(nb):
        for j in range(kb):
            blk = x[i * B:(i + 1) * B, j * B:(j + 1) * B]
            s[i, j] = _fp8_scale(np.abs(blk).max())
            q[i * B:(i + 1) * B, j * B:(j + 1) * B] = e4m3_encode((blk / s[i, j]).astype(F32))
    return {"weight": q, "weight_scale_inv": s}


QUANTIZERS = {"nvfp4": quantize_nvfp4, "fp8_tensor": quantize_fp8_tensor,
              "fp8_channel": quantize_fp8_channel, "fp8_block128": quantize_fp8_block}

# ----------------------------------------------------------------------------------------------
# dequantisation, generator side: f32 numpy arithmetic in the spec's order


def dequant(fmt: str, t: dict[str, np.ndarray]) -> np.ndarray:
    if fmt == "nvfp4":
        q = unpack_nibbles(t["weight"])
        N, K = q.shape
        S = np.repeat(E4M3_TABLE[t["weight_scale"]], NVFP4_GROUP, axis=1)
        inner = (E2M1_TABLE[q] * S).astype(F32)  # exact
        return (inner * F32(t["weight_scale_2"])).astype(F32)
    q = E4M3_TABLE[t["weight"]]
    if fmt == "fp8_tensor":
        return (q * F32(t["weight_scale"])).astype(F32)
    if fmt == "fp8_channel":
        return (q * _scale_f32(t["weight_scale"])).astype(F32)
    if fmt == "fp8_block128":
        s = t["weight_scale_inv"].astype(F32)
        N, K = q.shape
        full = np.repeat(np.repeat(s, FP8_BLOCK, 0), FP8_BLOCK, 1)[:N, :K]
        return (q * full).astype(F32)
    raise ValueError(fmt)


# dequantisation, verifier side: codes decoded from bit fields, products formed exactly in float64
# (at most 4 + 4 + 24 significant bits), rounded once to f32


def _e4m3_bits_f64(c: np.ndarray) -> np.ndarray:
    c = c.astype(np.int64)
    s = np.where(c & 0x80, -1.0, 1.0)
    e, m = (c >> 3) & 0xF, c & 7
    v = np.where(e == 0, np.ldexp(m.astype(np.float64), -9),
                 np.ldexp(8.0 + m, (e - 10).astype(np.int32)))  # (1 + m/8) 2^(e-7)
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return s * v


def _e2m1_bits_f64(c: np.ndarray) -> np.ndarray:
    c = c.astype(np.int64)
    e, m = (c >> 1) & 3, c & 1  # e2m1: 2 exponent bits (bias 1), 1 mantissa bit
    v = np.where(e == 0, 0.5 * m, np.ldexp(1.0 + 0.5 * m, (e - 1).astype(np.int32)))
    return np.where(c & 8, -1.0, 1.0) * v


def dequant_verify(fmt: str, t: dict[str, np.ndarray]) -> np.ndarray:
    if fmt == "nvfp4":
        b = t["weight"]
        N = b.shape[0]
        lo, hi = b & 0xF, b >> 4
        codes = np.stack([lo, hi], -1).reshape(N, -1)  # element 2j = low nibble
        S = _e4m3_bits_f64(t["weight_scale"])
        w = _e2m1_bits_f64(codes) * np.repeat(S, 16, 1) * float(t["weight_scale_2"].reshape(()))
        return w.astype(F32)
    q = _e4m3_bits_f64(t["weight"])
    if fmt == "fp8_tensor":
        return (q * float(t["weight_scale"].reshape(()))).astype(F32)
    if fmt == "fp8_channel":
        return (q * _scale_f32(t["weight_scale"]).astype(np.float64).reshape(-1, 1)).astype(F32)
    if fmt == "fp8_block128":
        s = t["weight_scale_inv"].astype(np.float64)
        n = np.arange(q.shape[0]) // 128
        k = np.arange(q.shape[1]) // 128
        return (q * s[n[:, None], k[None, :]]).astype(F32)
    raise ValueError(fmt)


# ----------------------------------------------------------------------------------------------
# encode vectors and the numpy-vs-torch check


def _mids(vals: np.ndarray) -> np.ndarray:
    v = np.unique(vals.astype(np.float64))
    return ((v[:-1] + v[1:]) / 2).astype(F32)  # exact: adjacent codes differ in the last bit


def _around(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, F32)
    return np.concatenate([v, np.nextafter(v, F32(np.inf)), np.nextafter(v, F32(-np.inf))])


def e4m3_test_inputs(extended: bool = False) -> np.ndarray:
    """Every positive code value and every midpoint between adjacent ones (ties), each with the
    f32 neighbours either side; saturation, inf, NaN, 0, f32 subnormals; the e4m3 subnormal range
    in steps of 2^-14; random values; all of it with both signs. extended: also 2^20 random f32
    bit patterns (any exponent, inf, NaN payloads), every f32 in [1, 2), every 16th f32 in
    [2^-12, 2^-5) (the subnormal/normal boundary) and in [256, 512) (saturation) -- checked, not
    written."""
    rng = np.random.default_rng(8001)
    pos = E4M3_TABLE[:0x7F].astype(F32)  # 0 .. 448
    mids = _mids(pos)
    special = np.array([448, 449, 460, 464, 480, 500, 1e4, 1e30, 3.4e38, np.inf, np.nan, 2.0 ** -10,
                        2.0 ** -11, 1e-9, 1e-30, 1e-38, 1e-45, 2.0 ** -126, 2.0 ** -149, 2.0 ** -6 - 2.0 ** -10,
                        2.0 ** -6 - 2.0 ** -11, 0.1, 1 / 3], dtype=F32)
    sub = (np.arange(1, 2 ** 8) * 2.0 ** -14).astype(F32)
    rnd = np.concatenate([
        (rng.standard_normal(300) * np.exp2(rng.uniform(-12, 9, 300))).astype(F32),
        (np.exp2(rng.uniform(-20, 10, 200)) * rng.choice([-1, 1], 200)).astype(F32)])
    base = np.concatenate([_around(pos), _around(mids), _around(special), sub, rnd])
    full = np.concatenate([base, -base]).astype(F32)
    if extended:
        bits = rng.integers(0, 2 ** 32, 2 ** 20, dtype=np.uint64).astype(np.uint32).view(F32)
        dense = [np.arange(np.float32(lo).view(np.uint32), np.float32(hi).view(np.uint32), step,
                           dtype=np.uint32).view(F32)
                 for lo, hi, step in ((1.0, 2.0, 1), (2.0 ** -12, 2.0 ** -5, 16), (256.0, 512.0, 16))]
        full = np.concatenate([full, bits] + dense + [-d for d in dense]).astype(F32)
    return full


def e2m1_test_inputs() -> np.ndarray:
    rng = np.random.default_rng(8002)
    mags = E2M1_MAGS.astype(F32)
    mids = _mids(mags)
    special = np.array([0.0, -0.0, 6.0, 6.5, 7.0, 8.0, 100.0, 1e30, np.inf, np.nan, 0.1, 1e-9, 1e-45,
                        2.0 ** -126, 0.24, 0.26, 5.5, 5.9], F32)
    rnd = np.concatenate([rng.uniform(-8, 8, 400), rng.standard_normal(100) * 0.3]).astype(F32)
    base = np.concatenate([_around(mags), _around(mids), _around(special), rnd])
    return np.concatenate([base, -base]).astype(F32)


def check_e4m3_against_torch() -> int:
    """The hand-written RNE encoder and torch's clamp + cast must agree everywhere."""
    x = e4m3_test_inputs(extended=True)
    a, b = e4m3_encode_np(x), e4m3_encode_torch(x)
    e2m1_encode(x)  # its two formulations agree on the same values (asserted inside)
    bad = np.flatnonzero(a != b)
    assert bad.size == 0, f"e4m3 numpy vs torch: {bad.size} differ, e.g. {x[bad[:8]].tolist()} " \
                          f"{a[bad[:8]].tolist()} vs {b[bad[:8]].tolist()}"
    # decode: our table vs torch's f8 -> f32 for all 256 codes
    dec = torch.from_numpy(np.arange(256, dtype=np.uint8)).view(torch.float8_e4m3fn).float().numpy()
    assert np.array_equal(np.isnan(dec), np.isnan(E4M3_TABLE)) and np.isnan(E4M3_TABLE).sum() == 2
    assert np.array_equal(dec[~np.isnan(dec)].view(np.uint32), E4M3_TABLE[~np.isnan(E4M3_TABLE)].view(np.uint32))
    # round trip of every finite code
    codes = np.array([c for c in range(256) if c not in (0x7F, 0xFF)], np.uint8)
    assert np.array_equal(e4m3_encode_np(E4M3_TABLE[codes]), codes)
    # the verifier's decoder agrees with the table
    v = _e4m3_bits_f64(np.arange(256))
    assert np.array_equal(np.isnan(v), np.isnan(E4M3_TABLE))
    assert np.array_equal(v[~np.isnan(v)].astype(F32).view(np.uint32),
                          E4M3_TABLE[~np.isnan(E4M3_TABLE)].view(np.uint32))
    assert np.array_equal(_e2m1_bits_f64(np.arange(16)).astype(F32).view(np.uint32), E2M1_TABLE.view(np.uint32))
    # spec anchors
    anchors = {-1e-9: 0x80, 448.0: 0x7E, 1e9: 0x7E, -1e9: 0xFE, 1.0: 0x38, 2.0 ** -9: 0x01,
               2.0 ** -10: 0x00, 3 * 2.0 ** -10: 0x02, 1.0625: 0x38, 1.1875: 0x3A, 464.0: 0x7E}
    for xv, c in anchors.items():
        assert int(e4m3_encode_np(np.array([xv], F32))[0]) == c, (xv, c)
    assert int(e4m3_encode_np(np.array([np.nan], F32))[0]) == 0x7F
    assert int(e4m3_encode_np(np.array([-np.nan], F32))[0]) == 0xFF
    e2 = {0.25: 0, 0.75: 2, 1.25: 2, 1.75: 4, 2.5: 4, 3.5: 6, 5.0: 6, 6.0: 7, 7.0: 7, -0.1: 8, -0.0: 0,
          -5.0: 14, -0.26: 9}
    for xv, c in e2.items():
        assert int(e2m1_encode(np.array([xv], F32))[0]) == c, (xv, c)
    assert int(e2m1_encode(np.array([np.nan], F32))[0]) == 0
    return x.size


def write_encode_vectors(out: Path) -> dict:
    x4 = e4m3_test_inputs()
    c4 = e4m3_encode(x4)
    x2 = e2m1_test_inputs()
    c2 = e2m1_encode(x2)
    np.save(out / "e4m3_encode.npy", np.stack([x4, c4.astype(F32)], 1), allow_pickle=False)
    np.save(out / "e2m1_encode.npy", np.stack([x2, c2.astype(F32)], 1), allow_pickle=False)
    return {"e4m3_encode.npy": {"rows": int(x4.size)}, "e2m1_encode.npy": {"rows": int(x2.size)}}


# ----------------------------------------------------------------------------------------------
# format-level cases


def case_nvfp4_normal() -> np.ndarray:
    rng = np.random.default_rng(9101)
    x = rng.standard_normal((48, 64)) * np.exp2(rng.uniform(-4, 2, (48, 4))).repeat(16, 1)
    x[5, 17] = 40.0  # an outlier: smaller groups get small scales
    return x.astype(F32)


def case_nvfp4_edge() -> np.ndarray:
    """[8, 64], tensor amax 168 so g = 168 / 2688 = 1/16 exactly and 6g = 0.375."""
    rng = np.random.default_rng(9102)
    x = np.zeros((8, 64), np.float64)
    G = lambda r, j: (r, slice(16 * j, 16 * j + 16))  # noqa: E731
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    # row 0: outlier group with amax exactly 6 * scale (sf = 448 -> S = 448, denom 28)
    x[G(0, 0)] = 28.0 * np.array([6, -6, 0.25, 0.5, 3.5, -5.0, 1.0, -1.75, 2.5, 0.75, -0.25, 4, 3, -1.5, 1.25, 0])
    # row 0, group 1: all zero (sf = 0 -> S = 1.0, codes 0)
    # row 0, group 2: scale underflows e4m3 (sf ~ 2.7e-4 -> 0): denom 0, every code 0
    x[G(0, 2)] = 1e-4 * rng.uniform(-1, 1, 16)
    x[0, 32] = -1e-4
    # row 0, group 3: sf exactly 2^-10, the e4m3 tie between 0 and 2^-9 -> 0 (not the 1.0 fallback)
    x[G(0, 3)] = 0.375 * 2.0 ** -10 * np.array([1, -0.5, 0.25, 0.9] * 4)
    # row 1, group 0: sf = 1.5 * 2^-9 (subnormal tie) -> 2^-8; denom 2^-12; a/denom = 4.5 -> 4
    x[G(1, 0)] = 0.375 * 1.5 * 2.0 ** -9 * np.linspace(-1, 1, 16)
    # row 1, group 1: sf = 2^-9 (smallest subnormal), denom 2^-13, ties and amax at 6 * scale
    x[G(1, 1)] = 2.0 ** -13 * np.concatenate([[6], ties, -ties, [-6]])
    # row 1, groups 2 and 3: exact e2m1 ties, S = 2 (denom 0.125) and S = 3 (denom 0.1875)
    x[G(1, 2)] = 0.125 * np.concatenate([[6], ties, -ties, [-6]])
    x[G(1, 3)] = 0.1875 * np.concatenate([-ties, [6], ties, [-6]])
    # row 2, group 0: one ulp either side of the ties (denom 0.125, a power of two: exact)
    t = (0.125 * ties).astype(F32)
    up, dn = np.nextafter(t, F32(np.inf)), np.nextafter(t, F32(0))
    x[G(2, 0)] = np.concatenate([[0.75], up, -dn, [-0.0]])
    # row 2, group 1: sf = 1.0625, an e4m3 tie -> 1.0; a / denom = 6.375 saturates to 6
    x[G(2, 1)] = (1.0 / 16) * np.array([6.375, 6.2, 6.0, -5.9, 5.5, 0.3, -0.2, 2.6, 2.4, -3.6, 3.4, 1.0,
                                        -4.9, 5.1, 0.74, 0.76])
    # row 2, group 2: sf = 1.1875, an e4m3 tie -> 1.25; denom 0.078125
    x[G(2, 2)] = 0.4453125 * np.array([1, -1, 0.5, 0.25, -0.75, 0.1, 0.9, -0.3, 0.6, 0.2, 0, 0.05, -0.05,
                                       0.45, 0.55, -0.65])
    # row 2, group 3: sf = 426.67 -> e4m3 416 (RNE), denom 26; -160 / 26 -> -6 (code 0xF)
    x[G(2, 3)] = np.array([-160, 150, 1, -1, 13, 39, 65, -91, 117, 143, -10, 0.5, -0.5, 25, -26, 52])
    # row 3: negative values only, four magnitudes
    for j, m in enumerate([1e-2, 0.3, 5.0, 60.0]):
        x[G(3, j)] = np.maximum(-np.abs(rng.standard_normal(16)) * m - 1e-3 * m, -150)
    # rows 4..7: random groups over many magnitudes; one with one non-zero element; one mostly tiny
    # relative to its amax (codes 0 and 0x8 for negatives); one -0.0 element (code 0, not 0x8)
    for r in range(4, 8):
        for j in range(4):
            x[G(r, j)] = np.clip(rng.standard_normal(16) * np.exp2(rng.uniform(-10, 6)), -150, 150)
    x[G(4, 1)] = 0.0
    x[4, 16 + 7] = -3.0
    x[G(5, 2)] = rng.uniform(-0.01, 0.01, 16)
    x[5, 32 + 3] = 0.75
    x[6, 5] = -0.0
    x = x.astype(F32)
    assert np.abs(x).max() == 168.0 and F32(168.0) / F32(2688.0) == F32(1 / 16)
    return x


def _e4m3_ties_scaled(s: float) -> np.ndarray:
    """Every midpoint between adjacent positive e4m3 values (and one ulp either side), times s."""
    mids = _mids(E4M3_TABLE[:0x7F])
    return (_around(mids).astype(np.float64) * s).astype(F32)


def case_fp8_tensor() -> np.ndarray:
    rng = np.random.default_rng(9103)
    n = 40 * 48
    ties = _e4m3_ties_scaled(0.125)  # amax 56: s = 56 / 448 = 0.125 exactly
    ties = ties * np.where(np.arange(ties.size) % 2, -1, 1).astype(F32)
    rest = np.clip(rng.standard_normal(n - ties.size - 1) * 8.0, -55, 55)
    v = np.concatenate([[56.0], ties, rest]).astype(F32)
    v = v[rng.permutation(n)]
    assert np.abs(v).max() == 56.0
    return v.reshape(40, 48)


def case_fp8_channel() -> np.ndarray:
    rng = np.random.default_rng(9104)
    x = rng.standard_normal((24, 40)) * np.exp2(rng.uniform(-14, 10, (24, 1)))
    x[0] = 0.0  # s = 1.0
    # row 1: amax 14 -> s = 2^-5; half of it e4m3 ties
    t = _e4m3_ties_scaled(2.0 ** -5)
    x[1] = np.concatenate([[14.0], t[rng.choice(t.size, 39, replace=False)]])
    # row 2: huge range -> e4m3 subnormals and tiny negatives that round to -0 (code 0x80)
    x[2] = np.concatenate([[1.0, -1e-7, -1e-6, -1e-5, 1e-5, -3e-5, 1e-4, -1e-3], rng.standard_normal(32) * 1e-3])
    x[3] = -np.abs(x[3])  # negatives only
    return x.astype(F32)


def case_fp8_channel_bf16() -> np.ndarray:
    rng = np.random.default_rng(9106)
    x = rng.standard_normal((16, 40)) * np.exp2(rng.uniform(-12, 8, (16, 1)))
    x[0] = 0.0
    return x.astype(F32)


def case_fp8_block() -> np.ndarray:
    rng = np.random.default_rng(9105)
    x = rng.standard_normal((136, 260))
    mags = [[1.0, 0.02, 300.0], [1e-3, 0.0, 7.0]]  # block (1, 1) all zero -> s = 1.0
    for i in range(2):
        for j in range(3):
            x[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] *= mags[i][j]
    return x.astype(F32)


def case_nvfp4_nibble() -> np.ndarray:
    x = np.zeros((1, 16), F32)
    x[0, :2] = [1.0, -6.0]
    return x


VECTOR_CASES = [
    ("nvfp4_normal", "nvfp4", case_nvfp4_normal,
     "normal random, group magnitudes 2^-4..2^2, one outlier 40 at [5, 17]"),
    ("nvfp4_edge", "nvfp4", case_nvfp4_edge,
     "tensor amax 168 -> g = 1/16 exactly. [0,g0] amax 168 = 6*28 (S 448); [0,g1] zeros (sf 0 -> S 0x38); "
     "[0,g2] sf ~2.7e-4 underflows e4m3 -> S 0, all codes 0; [0,g3] sf = 2^-10 exactly -> e4m3 tie -> S 0; "
     "[1,g0] sf = 1.5*2^-9 -> S 2^-8 (subnormal tie up); [1,g1] S 2^-9, e2m1 ties; [1,g2]/[1,g3] exact e2m1 "
     "ties, S 2 / S 3; [2,g0] 1 ulp above/below the ties and one -0.0 (code 0); [2,g1] sf 1.0625 -> S 1.0, "
     "x/denom 6.375 saturates; [2,g2] sf 1.1875 -> S 1.25; [2,g3] sf 426.7 -> S 416; row 3 negatives only; "
     "rows 4-7 random (a group with one non-zero, a group with tiny values -> codes 0/0x8, -0.0 at [6,5])"),
    ("nvfp4_nibble", "nvfp4", case_nvfp4_nibble,
     "x = [1, -6, 0 x 14]: codes 0x2, 0xF -> first byte 0xF2 (element 0 in the low nibble)"),
    ("fp8_tensor", "fp8_tensor", case_fp8_tensor,
     "amax 56 -> s = 0.125 exactly; every e4m3 midpoint (and 1 ulp either side) times s, alternating sign"),
    ("fp8_channel", "fp8_channel", case_fp8_channel,
     "row scales 2^-14..2^10; row 0 zeros (s 1.0); row 1 amax 14 (s 2^-5) with e4m3 ties; row 2 range 1..1e-7 "
     "(subnormals, tiny negatives -> 0x80); row 3 negatives"),
    ("fp8_channel_bf16", "fp8_channel", case_fp8_channel_bf16,
     "as fp8_channel but weight_scale stored BF16 (as many real checkpoints): s = bf16(amax_row / 448), "
     "q = e4m3(x / s) with the rounded s (x / s may exceed 448 -> saturates); row 0 zeros"),
    ("fp8_block128", "fp8_block128", case_fp8_block,
     "2x3 blocks of 128 (partial: rows 128..199, cols 256..299), magnitudes [[1, .02, 300], [1e-3, 0, 7]]; "
     "block (1,1) all zero -> s 1.0"),
]

QUANT_OPTS = {"fp8_channel_bf16": {"scale_dtype": "BF16"}}

SAFETENSORS_DTYPE = {torch.float32: "F32", torch.uint8: "U8", torch.float8_e4m3fn: "F8_E4M3",
                     torch.float16: "F16", torch.bfloat16: "BF16"}


def qtensors_to_torch(fmt: str, q: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in q.items():
        t = torch.from_numpy(np.ascontiguousarray(v).reshape(v.shape))  # keeps 0-d scalars 0-d
        if v.dtype == np.uint16:  # bf16 bits
            t = torch.from_numpy(np.ascontiguousarray(v).view(np.int16)).view(torch.bfloat16)
        if v.dtype == np.uint8 and not (fmt == "nvfp4" and k == "weight"):
            t = t.view(torch.float8_e4m3fn)  # e4m3 codes
        out[k] = t
    return out


def check_error_bound(fmt: str, x: np.ndarray, q: dict, w: np.ndarray) -> None:
    """Sanity: each dequantised element is within the rounding error of its code grid."""
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    if fmt == "nvfp4":
        N, K = x.shape
        S = np.repeat(E4M3_TABLE[q["weight_scale"]].astype(np.float64), 16, 1)
        denom = S * float(q["weight_scale_2"])
        # half the widest e2m1 gap (4 -> 6) is 1 step of denom; zero-scale groups lose everything
        ok = np.where(denom == 0, np.abs(w64) == 0, np.abs(w64 - x64) <= denom * 1.0 + np.abs(w64) * 2.0 ** -23)
    else:
        if fmt == "fp8_tensor":
            s = float(q["weight_scale"])
        elif fmt == "fp8_channel":
            s = _scale_f32(q["weight_scale"]).astype(np.float64)
        else:
            s = np.repeat(np.repeat(q["weight_scale_inv"].astype(np.float64), 128, 0), 128, 1)[:x.shape[0], :x.shape[1]]
        y = np.abs(x64 / s)
        tol = np.maximum(np.maximum(y, 2.0 ** -6) * 2.0 ** -4, np.maximum(y - 448, 0)) * s * (1 + 1e-6)
        ok = np.abs(w64 - x64) <= tol + np.abs(w64) * 2.0 ** -23
    assert ok.all(), f"{fmt}: {int((~ok).sum())} elements outside the rounding bound"


def write_vectors(out: Path) -> dict:
    tensors, cases = {}, []
    for name, fmt, make, note in VECTOR_CASES:
        x = make()
        q = QUANTIZERS[fmt](x, **QUANT_OPTS.get(name, {}))
        w = dequant(fmt, q)
        check_error_bound(fmt, x, q, w)
        tensors[f"{name}.x"] = torch.from_numpy(x)
        entry = {"name": name, "format": fmt, "shape": list(x.shape), "tensors": {}, "note": note}
        for k, t in qtensors_to_torch(fmt, q).items():
            tensors[f"{name}.{k}"] = t
            entry["tensors"][f"{name}.{k}"] = {"dtype": SAFETENSORS_DTYPE[t.dtype], "shape": list(t.shape)}
        tensors[f"{name}.dequant"] = torch.from_numpy(w)
        entry["tensors"][f"{name}.x"] = {"dtype": "F32", "shape": list(x.shape)}
        entry["tensors"][f"{name}.dequant"] = {"dtype": "F32", "shape": list(x.shape)}
        entry["stats"] = {"max_abs_x": float(np.abs(x).max()),
                          "max_abs_err": float(np.abs(w.astype(np.float64) - x).max())}
        if fmt == "nvfp4":
            entry["stats"]["weight_scale_2"] = float(q["weight_scale_2"])
            entry["stats"]["zero_scale_groups"] = int((q["weight_scale"] == 0).sum())
        cases.append(entry)
    save_file(tensors, str(out / "vectors.safetensors"), metadata={"format": "pt"})
    return {"cases": cases}


# ----------------------------------------------------------------------------------------------
# quantised model fixtures

QUANT_RE = re.compile(r"^model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight$")

MODELOPT_PRODUCER = {"name": "modelopt", "version": "0.29.0"}


def quant_configs(fmt: str) -> tuple[dict, dict | None]:
    """(config.json quantization_config, hf_quant_config.json or None)."""
    if fmt == "nvfp4":
        hf = {"producer": MODELOPT_PRODUCER,
              "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                               "exclude_modules": ["lm_head"]}}
        qc = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": None,
              "exclude_modules": ["lm_head"]}
        return qc, hf
    if fmt == "fp8_tensor":
        hf = {"producer": MODELOPT_PRODUCER,
              "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None, "exclude_modules": ["lm_head"]}}
        qc = {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": None,
              "exclude_modules": ["lm_head"]}
        return qc, hf
    if fmt == "fp8_channel":
        qc = {"quant_method": "compressed-tensors", "format": "float-quantized",
              "config_groups": {"group_0": {
                  "targets": ["Linear"],
                  "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                              "dynamic": False},
                  "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True,
                                        "symmetric": True}}},
              "ignore": ["lm_head"]}
        return qc, None
    if fmt == "fp8_block128":
        return {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "weight_block_size": [128, 128]}, None
    raise ValueError(fmt)


MODEL_CASES = [  # (source case, directory suffix, format)
    ("llama_gqa_untied", "nvfp4", "nvfp4"),
    ("llama_gqa_untied", "fp8", "fp8_tensor"),
    ("qwen3_untied_f16", "fp8_channel", "fp8_channel"),
    ("qwen3_untied_f16", "fp8_block", "fp8_block128"),
]


def quantize_state(src_dir: Path, fmt: str):
    """Source tensors (original dtypes) -> (tensors to save, {module weight name: dequantised W})."""
    st = load_file(str(src_dir / "model.safetensors"))
    out, deq = {}, {}
    for name in sorted(st):
        t = st[name]
        if QUANT_RE.match(name) and t.ndim == 2:
            x = t.float().numpy()  # f16 -> f32 exact
            q = QUANTIZERS[fmt](x)
            deq[name] = dequant(fmt, q)
            check_error_bound(fmt, x, q, deq[name])
            mod = name.removesuffix(".weight")
            for k, v in qtensors_to_torch(fmt, q).items():
                out[f"{mod}.{k}"] = v
        else:
            out[name] = t
    assert len(deq) > 0
    return out, deq


def write_model_case(golden: Path, out: Path, src: str, suffix: str, fmt: str) -> dict:
    src_dir = golden / src
    dst = out / f"{src}.{suffix}"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    tensors, deq = quantize_state(src_dir, fmt)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})

    cfg = json.loads((src_dir / "config.json").read_text())
    qc, hf = quant_configs(fmt)
    cfg["quantization_config"] = qc
    (dst / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if hf is not None:
        (dst / "hf_quant_config.json").write_text(json.dumps(hf, indent=2) + "\n")
    shutil.copyfile(src_dir / "generation_config.json", dst / "generation_config.json")

    # reference: transformers fp32 on the source model with every quantised Linear's weight
    # replaced by our dequantised W
    src_ref = json.loads((src_dir / "reference.json").read_text())
    case = next(c for c in mr.CASES if c.name == src)
    model = mr.load_f32(src_dir)
    params = dict(model.named_parameters())
    for name, w in deq.items():
        p = params[name]
        assert tuple(p.shape) == w.shape
        with torch.no_grad():
            p.copy_(torch.from_numpy(w))
    for name, p in params.items():  # untouched tensors are the exact upcast of the stored ones
        if name not in deq and name in tensors:
            assert torch.equal(p.detach(), tensors[name].float()), name
    input_ids, prompt = src_ref["input_ids"], src_ref["greedy_prompt"]
    logits, new_ids, margin = mr.compute_reference(model, case, input_ids, prompt)
    np.save(dst / "logits.npy", logits.astype(np.float32), allow_pickle=False)
    ref = {
        "case": dst.name,
        "architecture": type(model).__name__,
        "dtype": src_ref["dtype"],
        "input_ids": input_ids,
        "logits_file": "logits.npy",
        "logits_shape": list(logits.shape),
        "max_abs_logit": float(np.abs(logits).max()),
        "greedy_prompt": prompt,
        "greedy_ids": new_ids,
        "greedy_min_rel_margin": round(margin, 6),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
        "seed": src_ref["seed"],
        "source": src,
        "format": fmt,
        "quantized_modules": len(deq),
        "note": "reference = transformers fp32 on the source checkpoint with every quantised Linear's weight "
                "replaced by its dequantised W (f32); non-quantised tensors keep the source dtype "
                f"({src_ref['dtype']}), upcast exactly",
    }
    (dst / "reference.json").write_text(json.dumps(ref, indent=2) + "\n")
    src_logits = np.load(src_dir / src_ref["logits_file"])
    drift = float(np.abs(logits - src_logits).max() / np.abs(src_logits).max())
    return dict(dir=dst, margin=margin, n_new=len(new_ids), drift=drift,
                same_greedy=new_ids == src_ref["greedy_ids"], eos=case.config["eos_token_id"] in new_ids)


# ----------------------------------------------------------------------------------------------
# --verify


ST_NP = {"F32": "<f4", "F16": "<f2", "U8": "u1", "F8_E4M3": "u1", "BF16": "<u2"}


def read_safetensors_raw(path: Path) -> dict[str, tuple[str, np.ndarray]]:
    """Hand-written reader: {name: (dtype string, array of the raw stored values)}; F8_E4M3 as
    uint8 codes, BF16 as uint16 bits."""
    raw = path.read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen])
    base = 8 + hlen
    out, end = {}, 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        n = int(np.prod(info["shape"], dtype=np.int64))
        dt = np.dtype(ST_NP[info["dtype"]])
        assert b - a == n * dt.itemsize, (name, info)
        out[name] = (info["dtype"], np.frombuffer(raw[base + a:base + b], dt).reshape(info["shape"]))
        end = max(end, b)
    assert base + end == len(raw), f"{path}: trailing bytes"
    return out


def _as_f32(dtype: str, v: np.ndarray) -> np.ndarray:
    if dtype == "BF16":
        return (v.astype(np.uint32) << 16).view(F32)
    return v.astype(F32)


def stored_qtensors(st: dict, prefix: str, fmt: str) -> dict[str, np.ndarray]:
    want = {"nvfp4": {"weight": ("U8", 2), "weight_scale": ("F8_E4M3", 2), "weight_scale_2": ("F32", 0),
                      "input_scale": ("F32", 0)},
            "fp8_tensor": {"weight": ("F8_E4M3", 2), "weight_scale": ("F32", 0), "input_scale": ("F32", 0)},
            "fp8_channel": {"weight": ("F8_E4M3", 2), "weight_scale": (("F32", "BF16"), 2)},
            "fp8_block128": {"weight": ("F8_E4M3", 2), "weight_scale_inv": ("F32", 2)}}[fmt]
    out = {}
    for k, (dt, nd) in want.items():
        got_dt, v = st[f"{prefix}.{k}"]
        assert got_dt in ((dt,) if isinstance(dt, str) else dt) and v.ndim == nd, (prefix, k, got_dt, v.shape)
        out[k] = v if got_dt in ("U8", "F8_E4M3", "BF16") else _as_f32(got_dt, v)  # BF16: raw bits
    w = out["weight"]
    N, K = w.shape[0], w.shape[1] * (2 if fmt == "nvfp4" else 1)
    if fmt == "nvfp4":
        assert out["weight_scale"].shape == (N, K // 16)
    elif fmt == "fp8_channel":
        assert out["weight_scale"].shape == (N, 1)
    elif fmt == "fp8_block128":
        assert out["weight_scale_inv"].shape == (-(-N // 128), -(-K // 128))
    return out


def verify_vectors(out: Path) -> None:
    st = read_safetensors_raw(out / "vectors.safetensors")
    meta = json.loads((out / "vectors.json").read_text())
    names = set()
    for c in meta["cases"]:
        name, fmt = c["name"], c["format"]
        q = stored_qtensors(st, name, fmt)
        _, want = st[f"{name}.dequant"]
        _, x = st[f"{name}.x"]
        names |= {f"{name}.{k}" for k in q} | {f"{name}.dequant", f"{name}.x"}
        assert list(x.shape) == c["shape"]
        got = dequant_verify(fmt, q)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"{name}: dequant differs"
        got2 = dequant(fmt, q)
        assert np.array_equal(got2.view(np.uint32), want.view(np.uint32)), f"{name}: f32 dequant differs"
        re_q = QUANTIZERS[fmt](x, **QUANT_OPTS.get(name, {}))  # re-quantise the stored x: the same bytes
        for k, v in re_q.items():
            assert np.asarray(v).shape == q[k].shape and np.asarray(v).tobytes() == q[k].tobytes(), f"{name}.{k}"
        print(f"[verify] vectors {name} ({fmt}, {c['shape']}): dequant from bytes == .dequant, "
              f"re-quantised bytes equal, max|W - x| {c['stats']['max_abs_err']:.3g}")
    assert names == set(st), set(st) ^ names
    # nibble order by hand: x = [1, -6, 0...] -> codes 2, 0xF -> first byte 0xF2
    _, b = st["nvfp4_nibble.weight"]
    assert int(b[0, 0]) == 0xF2 and np.all(b[0, 1:] == 0), b
    assert int(quantize_nvfp4(case_nvfp4_nibble())["weight"][0, 0]) == 0xF2
    hand = {"weight": np.array([[0xF2] + [0] * 7], np.uint8), "weight_scale": np.array([[0x38]], np.uint8),
            "weight_scale_2": np.array(0.5, F32)}
    w = dequant_verify("nvfp4", hand)
    assert w[0, 0] == 0.5 and w[0, 1] == -3.0 and np.all(w[0, 2:] == 0), w
    # specific edge expectations
    _, S = st["nvfp4_edge.weight_scale"]
    _, g = st["nvfp4_edge.weight_scale_2"]
    assert float(g) == 1 / 16
    assert S[0].tolist() == [0x7E, 0x38, 0x00, 0x00] and S[1, 0] == 0x02 and S[1, 1] == 0x01
    assert S[1, 2] == 0x40 and S[1, 3] == 0x44 and S[2, 1] == 0x38 and S[2, 2] == 0x3A and S[2, 3] == 0x7D
    codes = unpack_nibbles(st["nvfp4_edge.weight"][1])
    assert codes[1, 32:48].tolist() == [7, 0, 2, 2, 4, 4, 6, 6, 8, 10, 10, 12, 12, 14, 14, 15]
    assert codes[1, 16:32].tolist() == codes[1, 32:48].tolist()  # S = 2^-9: the same ties
    assert codes[2, 16:32].tolist() == [7, 7, 7, 15, 7, 1, 8, 5, 4, 14, 5, 2, 14, 7, 1, 2]
    assert codes[2, 48:64].tolist() == [15, 7, 0, 8, 1, 3, 4, 14, 6, 7, 9, 0, 8, 2, 10, 4]
    assert np.all(codes[0, 32:64] == 0) and codes[6, 5] == 0
    print("[verify] nibble order (0xF2), nvfp4_edge scales and tie codes as designed")
    # encode vectors
    for fname, enc in (("e4m3_encode.npy", e4m3_encode), ("e2m1_encode.npy", e2m1_encode)):
        v = np.load(out / fname)
        x, c = v[:, 0], v[:, 1]
        assert np.array_equal(enc(x).astype(F32), c), fname
        print(f"[verify] {fname}: {len(x)} rows re-encoded equal")


def verify_model(golden: Path, dst: Path) -> float:
    ref = json.loads((dst / "reference.json").read_text())
    src, fmt = ref["source"], ref["format"]
    cfg = json.loads((dst / "config.json").read_text())
    src_cfg = json.loads((golden / src / "config.json").read_text())
    qc, hf = quant_configs(fmt)
    assert cfg.pop("quantization_config") == qc and cfg == src_cfg
    assert (dst / "hf_quant_config.json").exists() == (hf is not None)
    if hf is not None:
        assert json.loads((dst / "hf_quant_config.json").read_text()) == hf
    st = read_safetensors_raw(dst / "model.safetensors")
    src_st = read_safetensors_raw(golden / src / "model.safetensors")
    W, used = {}, set()
    for name, (dt, v) in src_st.items():
        if QUANT_RE.match(name):
            mod = name.removesuffix(".weight")
            q = stored_qtensors(st, mod, fmt)
            used |= {f"{mod}.{k}" for k in q}
            w = dequant_verify(fmt, q)
            x = _as_f32(dt, v)
            assert w.shape == x.shape
            re_q = QUANTIZERS[fmt](x)
            for k, rv in re_q.items():
                assert np.asarray(rv).shape == q[k].shape and np.asarray(rv).tobytes() == q[k].tobytes(), f"{mod}.{k}"
            assert np.array_equal(dequant(fmt, q).view(np.uint32), w.view(np.uint32)), name
            W[name] = w.astype(np.float64)
        else:
            got_dt, gv = st[name]
            assert got_dt == dt and gv.tobytes() == v.tobytes(), f"{name}: not copied as is"
            used.add(name)
            W[name] = _as_f32(dt, v).astype(np.float64)
    assert used == set(st), set(st) ^ used
    Wg = {mr.hf_to_gguf_name(k).removesuffix(".weight"): v for k, v in W.items()}
    D = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    hp = dict(H=cfg["num_attention_heads"], Hkv=cfg["num_key_value_heads"], D=D, L=cfg["num_hidden_layers"],
              eps=cfg["rms_norm_eps"], inv_freq=mr.inv_freq_np(cfg, D), qk_norm=cfg["model_type"] == "qwen3")
    return mr.check_against(dst / ref["logits_file"], Wg, hp, ref, interleaved=False)


# ----------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("tests/golden/scaled"))
    ap.add_argument("--golden", type=Path, default=None, help="source checkpoints (default: parent of --out)")
    ap.add_argument("--verify", action="store_true", help="re-read and check everything written")
    ap.add_argument("--verify-only", action="store_true", help="only check what is already in --out")
    args = ap.parse_args()
    golden = args.golden or args.out.resolve().parent

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    n = check_e4m3_against_torch()
    print(f"e4m3: numpy RNE encoder == torch clamp + float8_e4m3fn cast on {n} values; e2m1 two encoders agree")

    if not args.verify_only:
        args.out.mkdir(parents=True, exist_ok=True)
        meta = write_vectors(args.out)
        meta["encode"] = write_encode_vectors(args.out)
        meta["versions"] = {"numpy": np.__version__, "torch": torch.__version__.split("+")[0],
                            "safetensors": safetensors.__version__}
        (args.out / "vectors.json").write_text(json.dumps(meta, indent=2) + "\n")
        for src, suffix, fmt in MODEL_CASES:
            r = write_model_case(golden, args.out, src, suffix, fmt)
            print(f"{r['dir'].name}: logits vs source {r['drift']:.3g} of max|logit|, greedy margin "
                  f"{r['margin']:.4f}, {r['n_new']} new tokens{'' if r['same_greedy'] else ' (chain differs from source)'}"
                  f"{' EOS IN CHAIN' if r['eos'] else ''}")
    if args.verify or args.verify_only:
        verify_vectors(args.out)
        for src, suffix, fmt in MODEL_CASES:
            err = verify_model(golden, args.out / f"{src}.{suffix}")
            print(f"[verify] {src}.{suffix}: numpy float64 forward on dequantised bytes vs logits.npy "
                  f"{err:.2e} of max|logit|, greedy chain ok")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden dequantisation fixtures for tests/ops/test_quants.cpp.

For each GGUF block type (Q4_0, Q4_K, Q5_K, Q6_K, and Q8_0 for comparison) writes
  tests/golden/quants/<type>.gguf  one 2-D tensor "w" of ROWS x COLS, random but valid blocks
  tests/golden/quants/<type>.npy   its values as float32, dequantized by gguf-py
gguf-py's numpy dequantizers (gguf.quants) are written independently of ggml's C code and of
basalt's ops/ref/quants.cpp, so they serve as the independent reference.

Blocks: every byte random (nibbles, high bits, packed 6-bit scales and mins, int8 scales),
except the f16 scale fields, which get sane random values (never zero, both signs, a few
subnormal and large ones) instead of random bit patterns that could be inf/NaN.

Run on CPU with the reference venv:
  /work/venv-ref/bin/python tools/make_quant_fixtures.py
"""
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf.constants import GGML_QUANT_SIZES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "golden", "quants")

# type -> (rows, cols, byte offsets of the f16 scale fields inside a block)
TYPES = {
    Q.Q4_0: (4, 512, [0]),
    Q.Q8_0: (2, 512, [0]),
    Q.Q4_K: (3, 768, [0, 2]),  # d, dmin
    Q.Q5_K: (3, 768, [0, 2]),  # d, dmin
    Q.Q6_K: (3, 768, [208]),  # d
}


def f16_scales(rng, n):
    """n sane f16 values: mostly |x| in [2^-10, 2^-2], some subnormal, some large."""
    mag = np.exp2(rng.uniform(-10, -2, n))
    kind = rng.random(n)
    mag = np.where(kind < 0.05, np.exp2(rng.uniform(-24, -15, n)), mag)  # f16 subnormals
    mag = np.where(kind > 0.97, np.exp2(rng.uniform(4, 10, n)), mag)
    sign = np.where(rng.random(n) < 0.3, -1.0, 1.0)
    h = (sign * mag).astype(np.float16)
    h[h == 0] = np.float16(2.0**-24)
    return h.view(np.uint8).reshape(n, 2)


def make(qtype, rows, cols, scale_offsets, seed):
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block_elems
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        blocks[:, off:off + 2] = f16_scales(rng, n_blocks)
    data = blocks.reshape(rows, cols // block_elems * block_bytes)
    values = gguf.quants.dequantize(data, qtype).astype(np.float32)
    assert values.shape == (rows, cols), values.shape
    assert np.all(np.isfinite(values)) and np.any(values != 0)
    return data, values


def main():
    os.makedirs(OUT, exist_ok=True)
    for i, (qtype, (rows, cols, offs)) in enumerate(TYPES.items()):
        name = qtype.name
        data, values = make(qtype, rows, cols, offs, seed=1000 + i)
        path = os.path.join(OUT, f"{name}.gguf")
        w = gguf.GGUFWriter(path, "basalt-quant-fixture")
        w.add_tensor("w", data, raw_shape=data.shape, raw_dtype=qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        np.save(os.path.join(OUT, f"{name}.npy"), values)
        print(f"{name}: {rows}x{cols}, {data.nbytes} bytes of blocks, "
              f"|x| max {np.abs(values).max():.4g}")


if __name__ == "__main__":
    main()

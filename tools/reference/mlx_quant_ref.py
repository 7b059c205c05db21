#!/usr/bin/env python3
"""Independent reimplementation of MLX's affine quantize / dequantize, and the fixture writer
for tests/unit/test_quant.c.

    python3 tools/reference/mlx_quant_ref.py OUTDIR

writes OUTDIR/tests/fixtures/quant/q{bits}_g{group}_{dtype}.bin for every bits (2, 3, 4, 5, 6,
8) x group size (32, 64, 128) in bf16, plus f16 and f32 cases, and a MANIFEST.txt.

Two implementations live here and must agree byte for byte before anything is written:
  * `scalar`: plain Python, fp32 emulated by rounding every operation to fp32 (exact: a double
    result of +, -, *, / on fp32 operands rounded to fp32 is the correctly rounded fp32 result),
    packing written the way MLX's kernels write bytes (packs of 8 codes in 3 or 5 bytes for
    3/5-bit, 4 codes in 3 bytes for 6-bit, codes at bits*i of a uint32 for 2/4/8-bit);
  * `numpy`: vectorised float32 arithmetic and a bit-stream packer (used when numpy imports).
Neither shares code with the C implementation (src/quant/quant.c).

The algorithm (MLX mlx/backend/metal/kernels/quantized.h affine_quantize, same in the CUDA
backend), per group of fp32 values:
    w_min = min(w); w_max = max(0, max(w))          (the GPU kernels start the max at 0)
    scale = max((w_max - w_min) / (2^bits - 1), 1e-7)
    side = |w_min| > |w_max|; scale = side ? scale : -scale; edge = side ? w_min : w_max
    q0 = round(edge / scale)                         (round half away from zero)
    if q0 != 0: scale = edge / q0; bias = edge  else: bias = 0
    q = min(round((w - bias) / scale), 2^bits - 1)   (with the fp32 scale and bias)
    stored scale, bias = fp32 values rounded to the model dtype (nearest even)
Dequantized value (mlxcel's definition): model-dtype value nearest to fp32(scale)*q + fp32(bias).

File layout (little-endian): b"MLXQFX01", u32 rows, cols, bits, group_size, dtype (0 F32,
1 BF16, 2 F16); then input [rows*cols] (dtype), packed [rows*cols*bits/32] u32, scales
[rows*cols/group] (dtype), biases (same), dequantized [rows*cols] (dtype).
"""
import math
import os
import random
import struct
import sys

BITS = (2, 3, 4, 5, 6, 8)
GROUPS = (32, 64, 128)
ROWS, COLS = 4, 256
DT_F32, DT_BF16, DT_F16 = 0, 1, 2
DT_NAME = {DT_F32: "f32", DT_BF16: "bf16", DT_F16: "f16"}
# (bits, group) pairs also written in f16 and f32
EXTRA = ((4, 64), (3, 32), (8, 128), (6, 64), (5, 128), (2, 32))


# ==== fp32 / bf16 / f16 scalar helpers ====

def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bits_f32(u):
    return struct.unpack("<f", struct.pack("<I", u))[0]


def bf16_bits(x):
    """fp32 value -> bf16 bit pattern, round to nearest even (finite inputs)."""
    u = f32_bits(x)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def to_dtype_bits(x, dt):
    if dt == DT_BF16:
        return bf16_bits(x)
    if dt == DT_F16:
        return f16_bits(x)
    return f32_bits(x)


def from_dtype_bits(u, dt):
    if dt == DT_BF16:
        return bits_f32(u << 16)
    if dt == DT_F16:
        return struct.unpack("<e", struct.pack("<H", u))[0]
    return bits_f32(u)


def round_dtype(x, dt):
    return from_dtype_bits(to_dtype_bits(x, dt), dt)


def round_away(x):
    """Round half away from zero (Metal/CUDA round()); exact for fp32 inputs held in doubles."""
    return math.copysign(math.floor(abs(x) + 0.5), x)


# ==== scalar implementation ====

def scalar_quantize_group(w, bits):
    n_bins = float((1 << bits) - 1)
    eps = f32(1e-7)
    w_min = min(w)
    w_max = max(0.0, max(w))
    scale = max(f32(f32(w_max - w_min) / n_bins), eps)
    side = abs(w_min) > abs(w_max)
    scale = scale if side else -scale
    edge = w_min if side else w_max
    q0 = round_away(f32(edge / scale))
    if q0 != 0.0:
        scale = f32(edge / q0)
        bias = edge
    else:
        bias = 0.0
    q = []
    for v in w:
        c = min(round_away(f32(f32(v - bias) / scale)), n_bins)
        q.append(int(c) if c > 0 else 0)
    return q, scale, bias


def scalar_pack_row(q, bits):
    """MLX's byte layout, then read as little-endian uint32 words."""
    out = bytearray()
    if bits in (2, 4, 8):
        per = 32 // bits
        for j in range(0, len(q), per):
            word = 0
            for i in range(per):
                word |= q[j + i] << (bits * i)
            out += struct.pack("<I", word)
    else:
        per, nbytes = {3: (8, 3), 5: (8, 5), 6: (4, 3)}[bits]
        for j in range(0, len(q), per):
            acc = 0
            for i in range(per):
                acc |= q[j + i] << (bits * i)
            out += acc.to_bytes(nbytes, "little")
    return list(struct.unpack("<%dI" % (len(out) // 4), bytes(out)))


def scalar_case(x, rows, cols, bits, gs, dt):
    packed, scales, biases, deq = [], [], [], []
    for r in range(rows):
        row = x[r * cols:(r + 1) * cols]
        codes = []
        for g in range(cols // gs):
            q, s, b = scalar_quantize_group(row[g * gs:(g + 1) * gs], bits)
            codes += q
            sb, bb = to_dtype_bits(s, dt), to_dtype_bits(b, dt)
            scales.append(sb)
            biases.append(bb)
            s_, b_ = from_dtype_bits(sb, dt), from_dtype_bits(bb, dt)
            for c in q:
                deq.append(to_dtype_bits(f32(f32(s_ * c) + b_), dt))
        packed += scalar_pack_row(codes, bits)
    return packed, scales, biases, deq


# ==== numpy implementation ====

def numpy_case(x, rows, cols, bits, gs, dt):
    import numpy as np

    def rnd(a):  # half away from zero, on float32 values (exact in float64)
        a = a.astype(np.float64)
        return np.trunc(a + np.copysign(0.5, a))

    def to_bits(a):  # float32 array -> dtype bit patterns
        a = a.astype(np.float32)
        if dt == DT_F32:
            return a.view(np.uint32).astype(np.uint64)
        if dt == DT_F16:
            return a.astype(np.float16).view(np.uint16).astype(np.uint64)
        u = a.view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF

    def from_bits(u):
        if dt == DT_F32:
            return u.astype(np.uint32).view(np.float32)
        if dt == DT_F16:
            return u.astype(np.uint16).view(np.float16).astype(np.float32)
        return (u.astype(np.uint32) << 16).view(np.float32)

    w = np.array(x, dtype=np.float32).reshape(rows, cols // gs, gs)
    n_bins = np.float32((1 << bits) - 1)
    w_min = w.min(axis=-1)
    w_max = np.maximum(w.max(axis=-1), np.float32(0))
    scale = np.maximum((w_max - w_min) / n_bins, np.float32(1e-7)).astype(np.float32)
    side = np.abs(w_min) > np.abs(w_max)
    scale = np.where(side, scale, -scale).astype(np.float32)
    edge = np.where(side, w_min, w_max).astype(np.float32)
    q0 = rnd((edge / scale).astype(np.float32)).astype(np.float32)
    at_zero = q0 == 0
    safe_q0 = np.where(at_zero, np.float32(1), q0).astype(np.float32)
    scale = np.where(at_zero, scale, (edge / safe_q0).astype(np.float32)).astype(np.float32)
    bias = np.where(at_zero, np.float32(0), edge).astype(np.float32)
    t = ((w - bias[..., None]).astype(np.float32) / scale[..., None]).astype(np.float32)
    q = np.clip(np.minimum(rnd(t), float(n_bins)), 0, None).astype(np.uint64)

    # bit stream: code i at bits [i*bits, (i+1)*bits) of the row, 32 bits a word
    q = q.reshape(rows, cols)
    bitarr = (q[:, :, None] >> np.arange(bits, dtype=np.uint64)) & 1  # [rows, cols, bits]
    bitarr = bitarr.reshape(rows, cols * bits // 32, 32)
    words = (bitarr << np.arange(32, dtype=np.uint64)).sum(axis=-1)

    sb, bb = to_bits(scale), to_bits(bias)
    s_, b_ = from_bits(sb), from_bits(bb)
    prod = (s_[..., None] * q.reshape(rows, cols // gs, gs).astype(np.float32)).astype(np.float32)
    deq = to_bits((prod + b_[..., None]).astype(np.float32))
    return ([int(v) for v in words.reshape(-1)], [int(v) for v in sb.reshape(-1)],
            [int(v) for v in bb.reshape(-1)], [int(v) for v in deq.reshape(-1)])


# ==== inputs ====

def make_inputs(bits, gs, dt, seed):
    """rows*cols fp32 values already rounded to dt. Row 0: weight-like normal values. Row 1:
    first half all negative (the GPU kernels' w_max = 0 start), second half a wide dynamic
    range. Row 2: exact ties for round-half-away: positive integer/half values in [0, n_bins]
    with 0 and n_bins in every 32-chunk, then their negatives. Row 3: 32-chunks of zeros, a
    constant, tiny values (below the 1e-7 scale floor) and normal values with an outlier."""
    rng = random.Random(seed)
    n_bins = (1 << bits) - 1
    x = []
    x += [rng.gauss(0.0, 0.02) for _ in range(COLS)]
    x += [rng.uniform(-2.0, -0.05) for _ in range(COLS // 2)]
    x += [rng.uniform(-1.0, 1.0) * 10.0 ** rng.uniform(-3.0, 2.0) for _ in range(COLS // 2)]
    ties = []
    for c in range(COLS // 2):
        if c % 32 == 0:
            ties.append(0.0)
        elif c % 32 == 1:
            ties.append(float(n_bins))
        elif rng.random() < 0.7:  # a half value: k + 0.5 exact in bf16 while k < 128
            ties.append(rng.randrange(0, min(n_bins, 127)) + 0.5)
        else:
            ties.append(float(rng.randrange(0, n_bins + 1)))
    x += ties + [-v for v in ties]
    for c in range(COLS // 32):
        kind = c % 4
        if kind == 0:
            x += [0.0] * 32
        elif kind == 1:
            x += [0.3] * 32
        elif kind == 2:
            x += [rng.uniform(-1.0, 1.0) * 1e-9 for _ in range(32)]
        else:
            chunk = [rng.gauss(0.0, 0.05) for _ in range(32)]
            chunk[rng.randrange(32)] = rng.choice((-1.0, 1.0)) * 3.0
            x += chunk
    return [round_dtype(f32(v), dt) for v in x]


# ==== output ====

def write_case(path, x, bits, gs, dt, packed, scales, biases, deq):
    code = {DT_F32: "I", DT_BF16: "H", DT_F16: "H"}[dt]
    with open(path, "wb") as f:
        f.write(b"MLXQFX01")
        f.write(struct.pack("<5I", ROWS, COLS, bits, gs, dt))
        f.write(struct.pack("<%d%s" % (len(x), code), *[to_dtype_bits(v, dt) for v in x]))
        f.write(struct.pack("<%dI" % len(packed), *packed))
        f.write(struct.pack("<%d%s" % (len(scales), code), *scales))
        f.write(struct.pack("<%d%s" % (len(biases), code), *biases))
        f.write(struct.pack("<%d%s" % (len(deq), code), *deq))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: mlx_quant_ref.py OUTDIR")
    outdir = os.path.join(sys.argv[1], "tests", "fixtures", "quant")
    os.makedirs(outdir, exist_ok=True)
    try:
        import numpy  # noqa: F401
        have_numpy = True
    except ImportError:
        have_numpy = False
        print("numpy not available: writing from the scalar implementation only", file=sys.stderr)
    cases = [(b, g, DT_BF16) for b in BITS for g in GROUPS]
    cases += [(b, g, dt) for (b, g) in EXTRA for dt in (DT_F16, DT_F32)]
    names = []
    for i, (bits, gs, dt) in enumerate(cases):
        x = make_inputs(bits, gs, dt, seed=1000 + i)
        ref = scalar_case(x, ROWS, COLS, bits, gs, dt)
        if have_numpy:
            alt = numpy_case(x, ROWS, COLS, bits, gs, dt)
            for what, a, b in zip(("packed", "scales", "biases", "dequantized"), ref, alt):
                if a != b:
                    bad = next(j for j in range(len(a)) if a[j] != b[j])
                    sys.exit("q%d g%d %s: scalar and numpy disagree on %s[%d]: %#x vs %#x"
                             % (bits, gs, DT_NAME[dt], what, bad, a[bad], b[bad]))
        name = "q%d_g%d_%s.bin" % (bits, gs, DT_NAME[dt])
        write_case(os.path.join(outdir, name), x, bits, gs, dt, *ref)
        names.append(name)
    with open(os.path.join(outdir, "MANIFEST.txt"), "w") as f:
        f.write("# written by tools/reference/mlx_quant_ref.py (%s)\n"
                % ("scalar + numpy, cross-checked" if have_numpy else "scalar only"))
        for n in names:
            f.write(n + "\n")
    print("wrote %d cases to %s" % (len(names), outdir))


if __name__ == "__main__":
    main()

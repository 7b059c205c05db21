#!/usr/bin/env python3
"""Pure-Python model of qmv_i8.cu's index math (4- and 8-bit) (prep layout, m16n8k32 u8 x s8 fragments per the
PTX ISA, the column trick, the per-group scaling) against the plain dot product, on small
shapes: a design check (not wired into the tests; the GPU tests check the kernel itself).
Prints the worst |y - ref| / sum |w x| per case (int8 x: ~1e-3; a wrong mapping: ~1).

    python3 tools/diag/qmv_i8_layout_sim.py"""
import random, struct
random.seed(1)
def u32(x): return x & 0xffffffff
def s8(b): return b - 256 if b >= 128 else b
def run(N, K, G, rows, BITS=4):
    C, CPG, RPT = 128 // G, G // 32, 8 // (128 // G)
    NT = 2 if (G == 64 and rows > 4) else 1
    S = (K + 127) // 128; NG = K // G
    W = [[random.randrange(1 << BITS) for _ in range(K)] for _ in range(N)]
    sc = [[random.uniform(-0.1, 0.1) for _ in range(NG)] for _ in range(N)]
    bi = [[random.uniform(-0.1, 0.1) for _ in range(NG)] for _ in range(N)]
    X = [[random.uniform(-1, 1) for _ in range(K)] for _ in range(rows)]
    # packed bytes per row
    def rowbytes(n):
        bs = bytearray(K * BITS // 8)
        for i in range(K):
            if BITS == 4:
                bs[i // 2] |= W[n][i] << (4 * (i % 2))
            else:
                bs[i] = W[n][i]
        return bs
    RB = [rowbytes(n) for n in range(N)]
    # prep
    xq = {}  # (r, s, h, slot) -> [4 words]
    xsc = {}; xsum = {}
    for r in range(8):
        for s in range(S):
            # per class: gather threads
            vals = {}
            for t in range(4):
                for j in range(4):
                    k = s * 128 + 32 * t + 8 * j
                    f = [X[r][k + e] if (r < rows and k < K) else 0.0 for e in range(8)]
                    vals[(t, j)] = f
            for c in range(C):
                ts = range(c * CPG, (c + 1) * CPG)
                amax = max(abs(v) for t in ts for j in range(4) for v in vals[(t, j)])
                sm = sum(v for t in ts for j in range(4) for v in vals[(t, j)])
                inv = 127.0 / amax if amax > 0 else 0.0
                xsc[(s, r * C + c)] = amax / 127.0; xsum[(s, r * C + c)] = sm
                for t in ts:
                    for j in range(4):
                        q = [int(round(v * inv)) for v in vals[(t, j)]]
                        pk = lambda a, b, c_, d: (a & 255) | (b & 255) << 8 | (c_ & 255) << 16 | (d & 255) << 24
                        if r < rows:
                            key = (r, s, j // 2, t)
                            xq.setdefault(key, [0, 0, 0, 0])
                            if BITS == 4:
                                xq[key][(j & 1) * 2] = pk(q[0], q[2], q[4], q[6])
                                xq[key][(j & 1) * 2 + 1] = pk(q[1], q[3], q[5], q[7])
                            else:
                                xq[key][(j & 1) * 2] = pk(q[0], q[1], q[2], q[3])
                                xq[key][(j & 1) * 2 + 1] = pk(q[4], q[5], q[6], q[7])
                            if r == 0:
                                xq[(0, s, j // 2, 4 + t)] = [0, 0, 0, 0]
    # kernel, ks = 1, one warp per 16 rows
    Y = [[None] * N for _ in range(rows)]
    for n0 in range(0, N, 16):
        acc = {}
        for s in range(S):
            for nt in range(NT):
                A = [[0] * 32 for _ in range(16)]; B = [[0] * 8 for _ in range(32)]
                D = [[0] * 8 for _ in range(16)]
                for w in range(4):
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        na, nb = min(n0 + g, N - 1), min(n0 + g + 8, N - 1)
                        LQ = BITS // 4
                        def word(n, i):
                            off = s * 64 * LQ + 16 * LQ * t + 4 * i
                            if s * 128 + 32 * t >= K: return 0
                            return struct.unpack('<I', bytes(RB[n][off:off + 4]))[0]
                        if BITS == 4:
                            wa, wb = word(na, w), word(nb, w)
                            regs = [wa & 0x0F0F0F0F, wb & 0x0F0F0F0F, (wa >> 4) & 0x0F0F0F0F,
                                    (wb >> 4) & 0x0F0F0F0F]
                        else:
                            regs = [word(na, 2 * w), word(nb, 2 * w), word(na, 2 * w + 1),
                                    word(nb, 2 * w + 1)]
                        for ri, reg in enumerate(regs):
                            m = g + (8 if ri in (1, 3) else 0)
                            kb = 4 * t + (16 if ri >= 2 else 0)
                            for e in range(4): A[m][kb + e] = (reg >> (8 * e)) & 255
                        br = nt * RPT + g // C
                        on = (g % C == t // CPG) and br < rows
                        key = (br, s, w >> 1, t) if on else (0, s, w >> 1, 4 + t)
                        q = xq[key]
                        b0, b1 = (q[2], q[3]) if (w & 1) else (q[0], q[1])
                        for bi_, reg in enumerate((b0, b1)):
                            kb = 4 * t + 16 * bi_
                            for e in range(4): B[kb + e][g] = s8((reg >> (8 * e)) & 255)
                    for m in range(16):
                        for n in range(8):
                            D[m][n] += sum(A[m][k] * B[k][n] for k in range(32))
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    na, nb = min(n0 + g, N - 1), min(n0 + g + 8, N - 1)
                    for i in range(4):
                        m = g + (8 if i >= 2 else 0); col = 2 * t + (i & 1)
                        row = na if i < 2 else nb
                        grp = s * C + (col % C)
                        if grp >= NG: sw = bw = 0.0
                        else: sw, bw = sc[row][grp], bi[row][grp]
                        c = nt * 8 + col
                        acc[(lane, nt, i)] = acc.get((lane, nt, i), 0.0) + sw * xsc[(s, c)] * D[m][col] + bw * xsum[(s, c)]
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for nt in range(NT):
                for h in range(2):
                    n = n0 + g + 8 * h
                    if n >= N: continue
                    if C == 1:
                        for e in range(2):
                            r = nt * 8 + 2 * t + e
                            if r < rows: Y[r][n] = acc[(lane, nt, 2 * h + e)]
                    else:
                        r = nt * RPT + t
                        if r < rows: Y[r][n] = acc[(lane, nt, 2 * h)] + acc[(lane, nt, 2 * h + 1)]
    worst = 0
    for r in range(rows):
        for n in range(N):
            ref = sum(X[r][k] * (sc[n][k // G] * W[n][k] + bi[n][k // G]) for k in range(K))
            den = sum(abs(X[r][k] * (sc[n][k // G] * W[n][k] + bi[n][k // G])) for k in range(K))
            assert Y[r][n] is not None, (r, n)
            worst = max(worst, abs(Y[r][n] - ref) / den)
    return worst
for BITS in (4, 8):
    for (N, K, G, rows) in [(16, 256, 64, 1), (20, 384, 64, 3), (16, 256, 128, 1), (24, 256, 128, 8),
                            (16, 256, 64, 6), (16, 64, 64, 2), (17, 640, 64, 5)]:
        print(f"{BITS}-bit", N, K, G, rows, "worst rel", run(N, K, G, rows, BITS))

#!/usr/bin/env python3
# Development aid (no GPU): emulates the PTX fragment semantics of mma.m16n8k16 and ldmatrix
# x4 (+ .trans) to check the index logic of attn_decode.cu's tensor-core walk for one
# 16-token chunk (S = Q K^T and O = P V, with the hi / lo parts of q and P as rows g and g + 8)
# against direct sums. Session 11: S max err ~6e-15, O ~9e-16 (float64 rounding only).
#   python3 tools/diag/frag_emu_attn_tc.py
import random, math
random.seed(1)
D = 128; LD = D + 8; G = 4
KS = D // 16; DN = D // 8

def mma(c, a, b):
    # a: per lane (a0,a1,a2,a3) each (x,y) pairs; b: per lane (b0,b1); c: per lane [4]
    A = [[0.0]*16 for _ in range(16)]; B = [[0.0]*8 for _ in range(16)]
    for l in range(32):
        g, t = l >> 2, l & 3
        a0, a1, a2, a3 = a[l]
        A[g][2*t], A[g][2*t+1] = a0
        A[g+8][2*t], A[g+8][2*t+1] = a1
        A[g][2*t+8], A[g][2*t+9] = a2
        A[g+8][2*t+8], A[g+8][2*t+9] = a3
        b0, b1 = b[l]
        B[2*t][g], B[2*t+1][g] = b0
        B[2*t+8][g], B[2*t+9][g] = b1
    Cm = [[sum(A[i][k]*B[k][j] for k in range(16)) for j in range(8)] for i in range(16)]
    for l in range(32):
        g, t = l >> 2, l & 3
        c[l][0] += Cm[g][2*t]; c[l][1] += Cm[g][2*t+1]
        c[l][2] += Cm[g+8][2*t]; c[l][3] += Cm[g+8][2*t+1]

def ldsm(smem, addr, trans):
    # addr: per lane, the flat index of a row start (8 consecutive elements);
    # returns per lane 4 registers (pairs)
    out = [[None]*4 for _ in range(32)]
    for i in range(4):
        rows = [addr[8*i + r] for r in range(8)]
        M = [[smem[rows[r] + c] for c in range(8)] for r in range(8)]
        for l in range(32):
            if not trans:
                out[l][i] = (M[l//4][2*(l%4)], M[l//4][2*(l%4)+1])
            else:
                out[l][i] = (M[2*(l%4)][l//4], M[2*(l%4)+1][l//4])
    return out

K = [[random.uniform(-1,1) for _ in range(D)] for _ in range(16)]
V = [[random.uniform(-1,1) for _ in range(D)] for _ in range(16)]
Q = [[random.uniform(-1,1) for _ in range(D)] for _ in range(G)]
sk = [0.0]*(16*LD); sv = [0.0]*(16*LD)
for r in range(16):
    for c in range(D):
        sk[r*LD+c] = K[r][c]; sv[r*LD+c] = V[r][c]
# q fragments: q split as 0.7 (hi, row g) + 0.3 (lo, row g + 8)
qa = [[None]*KS for _ in range(32)]
for l in range(32):
    g, t = l >> 2, l & 3
    for ks in range(KS):
        fr = []
        for half in range(2):
            d0 = ks*16 + half*8 + 2*t
            x = (Q[g][d0], Q[g][d0+1]) if g < G else (0.0, 0.0)
            fr += [(0.7*x[0], 0.7*x[1]), (0.3*x[0], 0.3*x[1])]  # hi row g, lo row g+8
        qa[l][ks] = fr
s = [[[0.0]*4 for _ in range(32)] for _ in range(2)]
for j in range(2):
    for ks in range(0, KS, 2):
        addr = [(j*8 + (l & 7))*LD + ks*16 + (l >> 3)*8 for l in range(32)]
        r = ldsm(sk, addr, False)
        mma(s[j], [qa[l][ks] for l in range(32)], [(r[l][0], r[l][1]) for l in range(32)])
        mma(s[j], [qa[l][ks+1] for l in range(32)], [(r[l][2], r[l][3]) for l in range(32)])
err = 0.0
for l in range(32):
    g, t = l >> 2, l & 3
    if g >= G: continue
    for j in range(2):
        for e in range(2):
            key = 8*j + 2*t + e
            ref = sum(Q[g][d]*K[key][d] for d in range(D))
            err = max(err, abs(s[j][l][e] + s[j][l][2+e] - ref))
print("S max err", err)
# P (use arbitrary values per head/key), PV
P = [[random.uniform(0,1) for _ in range(16)] for _ in range(8)]
o = [[[0.0]*4 for _ in range(32)] for _ in range(DN)]
afr = []
for l in range(32):
    g, t = l >> 2, l & 3
    p = [[P[g][8*j + 2*t + e] for e in range(2)] for j in range(2)]
    # P split as 0.6 (hi, row g) + 0.4 (lo, row g + 8)
    afr.append([(0.6*p[0][0], 0.6*p[0][1]), (0.4*p[0][0], 0.4*p[0][1]),
                (0.6*p[1][0], 0.6*p[1][1]), (0.4*p[1][0], 0.4*p[1][1])])
for dn in range(0, DN, 2):
    addr = [((l & 7) + ((l >> 3) & 1)*8)*LD + dn*8 + (l >> 4)*8 for l in range(32)]
    r = ldsm(sv, addr, True)
    mma(o[dn], afr, [(r[l][0], r[l][1]) for l in range(32)])
    mma(o[dn+1], afr, [(r[l][2], r[l][3]) for l in range(32)])
err = 0.0
for l in range(32):
    g, t = l >> 2, l & 3
    if g >= G: continue
    for dn in range(DN):
        for e in range(2):
            d = dn*8 + 2*t + e
            ref = sum(P[g][k]*V[k][d] for k in range(16))
            err = max(err, abs(o[dn][l][e] + o[dn][l][2+e] - ref))
print("O max err", err)

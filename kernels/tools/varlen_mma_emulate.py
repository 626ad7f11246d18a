#!/usr/bin/env python3
"""Check the index arithmetic of `varlen_mma` (kernels/fused.cu) without a GPU.

A per-lane transcription of the kernel: every lane's fragment registers are filled with the same indices the CUDA
code uses, and each `mma.sync.m16n8k16` is emulated by reassembling the warp's A, B and C matrices from those
registers with the PTX ISA's fragment layouts (groupID = lane >> 2, threadID_in_group = lane % 4). The result is
compared with plain attention in numpy, for causal segments with a cached prefix, ragged tails, GQA and several
key tiles. Everything stays in float64: this checks which element goes where (masking, the score-to-P register
reuse, the V operand), not the rounding. Run it after changing the kernel's tiling:

    python3 kernels/tools/varlen_mma_emulate.py      # needs numpy; prints the largest difference per case
"""
import sys

import numpy as np
VM_ROWS, VM_KEYS = 64, 64
def mma(d, a, b):
    # d: [32][4] f32, a: [32][8] elements (a0..a7), b: [32][4] (b0..b3). Reassemble full matrices per ISA layout.
    A = np.zeros((16,16)); B = np.zeros((16,8)); C = np.zeros((16,8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for i in range(8):
            r = g + 8*((i//2)%2); c = 2*t + (i&1) + 8*(i//4); A[r,c] = a[lane][i]
        for i in range(4):
            r = 2*t + (i&1) + 8*(i//2); B[r, g] = b[lane][i]
        for i in range(4):
            C[g + 8*(i//2), 2*t + (i&1)] = d[lane][i]
    D = A @ B + C
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for i in range(4): d[lane][i] = D[g + 8*(i//2), 2*t + (i&1)]
def kernel(q, k, v, segs, causal, scale, heads, kv_heads, D):
    # segs: list of (start, len, P, pk, pv) with pk (KV, cap, D)
    out = np.full(q.shape, np.nan)
    tiles = [(s, r0) for s, seg in enumerate(segs) for r0 in range(0, seg[1], VM_ROWS)]
    for (s, row0) in tiles:
        start, ln, P, pk, pv = segs[s]
        for h in range(heads):
            kvh = h // (heads // kv_heads)
            row_last = min(row0 + VM_ROWS, ln) - 1
            n_keys = P + row_last + 1 if causal else P + ln
            for warp in range(4):
                lanes = range(32)
                def qw(r, c):
                    return (0.0, 0.0) if r >= ln else (q[start + r, h, c], q[start + r, h, c + 1])
                qa = []
                for lane in lanes:
                    g, t = lane >> 2, lane & 3
                    rl = row0 + warp*16 + g; rh = rl + 8
                    frs = []
                    for kk in range(D//16):
                        c = kk*16 + 2*t
                        frs.append(qw(rl, c) + qw(rh, c) + qw(rl, c+8) + qw(rh, c+8))
                    qa.append(frs)
                o = [[[0.0]*4 for _ in range(D//8)] for _ in lanes]
                m = [[-np.inf]*2 for _ in lanes]; l = [[0.0]*2 for _ in lanes]
                lim = []
                for lane in lanes:
                    g = lane >> 2; rl = row0 + warp*16 + g; rh = rl + 8
                    lim.append([P + min(rl, ln-1) + 1 if causal else P + ln, P + min(rh, ln-1) + 1 if causal else P + ln])
                for kb in range(0, n_keys, VM_KEYS):
                    ks = np.zeros((VM_KEYS, D)); vs = np.zeros((VM_KEYS, D))
                    for t_ in range(VM_KEYS):
                        j = kb + t_
                        if j < n_keys:
                            if j < P: ks[t_] = pk[kvh, j]; vs[t_] = pv[kvh, j]
                            else: ks[t_] = k[start + j - P, kvh]; vs[t_] = v[start + j - P, kvh]
                    sc = [[[0.0]*4 for _ in range(VM_KEYS//8)] for _ in lanes]
                    for nt in range(VM_KEYS//8):
                        d = [sc[lane][nt] for lane in lanes]
                        for kk in range(D//16):
                            a = [[x for x in qa[lane][kk]] for lane in lanes]
                            # a regs: (lo,hi) pairs: qa tuple order = reg0(lo,hi), reg1, reg2, reg3 -> elements a0..a7
                            b = []
                            for lane in lanes:
                                g, t = lane >> 2, lane & 3
                                row = nt*8 + g; c = kk*16 + 2*t
                                b.append([ks[row, c], ks[row, c+1], ks[row, c+8], ks[row, c+9]])
                            mma(d, a, b)
                    tmax = [[-np.inf]*2 for _ in lanes]
                    for lane in lanes:
                        t = lane & 3
                        for nt in range(VM_KEYS//8):
                            for i in range(4):
                                key = kb + nt*8 + 2*t + (i&1)
                                x = sc[lane][nt][i]*scale if key < lim[lane][i>>1] else -np.inf
                                sc[lane][nt][i] = x; tmax[lane][i>>1] = max(tmax[lane][i>>1], x)
                    for r in range(2):
                        for x in (1, 2):
                            tm = [max(tmax[lane][r], tmax[lane ^ x][r]) for lane in lanes]
                            for lane in lanes: tmax[lane][r] = tm[lane]
                    for lane in lanes:
                        corr = []
                        for r in range(2):
                            mn = max(m[lane][r], tmax[lane][r]); corr.append(np.exp(m[lane][r] - mn)); m[lane][r] = mn; l[lane][r] *= corr[r]
                        for nt in range(D//8):
                            o[lane][nt] = [o[lane][nt][0]*corr[0], o[lane][nt][1]*corr[0], o[lane][nt][2]*corr[1], o[lane][nt][3]*corr[1]]
                        for nt in range(VM_KEYS//8):
                            for i in range(4):
                                p = np.exp(sc[lane][nt][i] - m[lane][i>>1]); sc[lane][nt][i] = p; l[lane][i>>1] += p
                    for kk in range(VM_KEYS//16):
                        a = [[sc[lane][2*kk][0], sc[lane][2*kk][1], sc[lane][2*kk][2], sc[lane][2*kk][3],
                              sc[lane][2*kk+1][0], sc[lane][2*kk+1][1], sc[lane][2*kk+1][2], sc[lane][2*kk+1][3]] for lane in lanes]
                        for nt in range(D//8):
                            b = []
                            for lane in lanes:
                                g, t = lane >> 2, lane & 3
                                key0 = kk*16 + 2*t; col = nt*8 + g
                                b.append([vs[key0, col], vs[key0+1, col], vs[key0+8, col], vs[key0+9, col]])
                            d = [o[lane][nt] for lane in lanes]
                            mma(d, a, b)
                # The row sums are partial per lane until here: reduce over the quad, as the kernel's shuffles do.
                ls = [[l[lane][r] + l[lane^1][r] for r in range(2)] for lane in lanes]
                ls = [[ls[lane][r] + ls[lane^2][r] for r in range(2)] for lane in lanes]
                for lane in lanes:
                    g, t = lane >> 2, lane & 3
                    rl = row0 + warp*16 + g; rh = rl + 8
                    for nt in range(D//8):
                        c = nt*8 + 2*t
                        if rl < ln: out[start+rl, h, c:c+2] = np.array(o[lane][nt][0:2]) / ls[lane][0]
                        if rh < ln: out[start+rh, h, c:c+2] = np.array(o[lane][nt][2:4]) / ls[lane][1]
    return out
def reference(q, k, v, segs, causal, scale, heads, kv_heads):
    out = np.zeros(q.shape)
    for (start, ln, P, pk, pv) in segs:
        for h in range(heads):
            kvh = h // (heads // kv_heads)
            K = np.concatenate([pk[kvh, :P], k[start:start+ln, kvh]]); V = np.concatenate([pv[kvh, :P], v[start:start+ln, kvh]])
            S = q[start:start+ln, h] @ K.T * scale
            if causal:
                for i in range(ln): S[i, P+i+1:] = -np.inf
            S = np.exp(S - S.max(1, keepdims=True)); S /= S.sum(1, keepdims=True)
            out[start:start+ln, h] = S @ V
    return out
rng = np.random.default_rng(0)
worst = 0.0
for (heads, kv, D, causal, spec) in [(2, 1, 16, True, [(5, 0, 0), (70, 20, 24), (17, 64, 64)]),
                                    (2, 2, 32, False, [(64, 0, 0), (7, 0, 0), (80, 0, 0)]),
                                    (1, 1, 80, True, [(20, 50, 50)])]:
    n = sum(s[0] for s in spec)
    q = rng.uniform(-2, 2, (n, heads, D)); k = rng.uniform(-2, 2, (n, kv, D)); v = rng.uniform(-1, 1, (n, kv, D))
    segs = []; st = 0
    for (ln, P, cap) in spec:
        segs.append((st, ln, P, rng.uniform(-2, 2, (kv, max(cap, 1), D)), rng.uniform(-1, 1, (kv, max(cap, 1), D)))); st += ln
    got = kernel(q, k, v, segs, causal, 1/np.sqrt(D), heads, kv, D)
    want = reference(q, k, v, segs, causal, 1/np.sqrt(D), heads, kv)
    diff = np.abs(got - want).max()
    worst = max(worst, diff if not np.isnan(got).any() else np.inf)
    print(f"heads {heads}/{kv} d{D} causal={causal} segments {spec}: max |diff| {diff:.2e}")
sys.exit(0 if worst < 1e-9 else 1)

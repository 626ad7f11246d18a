// The project's own CUDA kernels: fused ops candle lacks, each with a CPU reference in src/ops/ and a test that
// compares the two (src/ops/check/, run on a GPU by `mobile-r1-eval self-test --device cuda`, and on the CPU by
// tests/it/kernels_emulated.rs, which builds this file against kernels/emu/cuda_emu.h; a new entry point must also
// be listed in kernels/emu/emu.cpp). Launch geometry: src/ops/launch.rs.
//
// * rmsnorm_hf_*    Qwen2 RMSNorm in transformers' cast order: mean of squares in f32, x·rsqrt(ms+eps) rounded to
//                   the activation dtype, then multiplied by the weight (rounded again). One block per row.
// * swiglu_packed_* silu(gate)·up of a packed [gate | up] projection, optionally adding its bias first, with
//                   transformers' roundings: silu in f32 rounded to the dtype, the product rounded again.
// * bias_*          The biases of the Linear layers folded into one pass: bias_add (y + b) and
//                   bias_residual (r + (y + b), a projection closing a residual branch), each op rounded to the dtype as transformers does. Rows × columns grid, no
//                   division per element.
// * qkv_rope_*      A packed q/k/v projection (one GEMM) + its bias, split into q, k and v, with the rotary
//                   embedding (rotate-half) applied to q and k; transformers' roundings: in the activation dtype
//                   for the text model, in f32 for the vision tower (qkv_rope_f32rot_*). One block per row.
// * decode_attn_*   One decode step of attention for a batch of sequences whose KV caches are separate buffers
//                   (kv_heads, capacity, head_dim): writes each sequence's new K/V at its position `len`, then
//                   attends its query heads over positions 0..=len (GQA), softmax in f32 with an online max.
//                   One block per (sequence, kv head); one launch per layer instead of several per sequence.
// * varlen_attn_*   Prefill attention over packed variable-length segments (the vision tower's windows and
//                   images, the prompts of a prefill batch): each segment's queries attend to its own keys,
//                   optionally causally and after a cached prefix whose K/V live in a separate buffer. Flash-style
//                   (K/V tiles in shared memory, online softmax in f32), no score matrix, one launch per layer.
//
// Compiled by kernels/build.rs when the `cuda` feature is on: a fatbin with machine code for $CUDA_COMPUTE_CAP and
// PTX for newer GPUs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

template <typename T> __device__ __forceinline__ float to_f(T x);
template <> __device__ __forceinline__ float to_f<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }

// Round through the activation dtype (what one torch op on a bf16/f16 tensor does to its f32 result).
template <typename T> __device__ __forceinline__ float round_to(float x) { return to_f<T>(from_f<T>(x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

// ---------------------------------------------------------------------------------------------------------------
// RMSNorm (HF order). x, out: (rows, cols) contiguous; w: (cols).
template <typename T>
__device__ void rmsnorm_hf(const T *x, const T *w, T *out, int cols, float eps) {
    const int row = blockIdx.x;
    const T *xr = x + (size_t)row * cols;
    T *yr = out + (size_t)row * cols;
    float ss = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = to_f<T>(xr[c]);
        ss += v * v;
    }
    __shared__ float partial[32];
    ss = warp_sum(ss);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        float t = lane < (blockDim.x + 31) / 32 ? partial[lane] : 0.f;
        t = warp_sum(t);
        if (lane == 0) partial[0] = t;
    }
    __syncthreads();
    const float inv = rsqrtf(partial[0] / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float normed = round_to<T>(to_f<T>(xr[c]) * inv);
        yr[c] = from_f<T>(normed * to_f<T>(w[c]));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Bias epilogues. y, g, u, r, out: (rows, cols) contiguous; b, bg, bu: (cols). Grid: x over column blocks, y over
// rows (grid-stride in both).
#define ROWS_COLS_LOOP(BODY)                                                                                      \
    for (int row = blockIdx.y; row < rows; row += gridDim.y) {                                                    \
        const size_t base = (size_t)row * cols;                                                                   \
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {              \
            const size_t i = base + c;                                                                            \
            BODY                                                                                                  \
        }                                                                                                         \
    }

template <typename T> __device__ void bias_add(const T *y, const T *b, T *out, int rows, int cols) {
    ROWS_COLS_LOOP(out[i] = from_f<T>(to_f<T>(y[i]) + to_f<T>(b[c]));)
}

// SwiGLU of a packed projection: gu (rows, 2·cols) = [gate | up], bias (2·cols) added first when has_bias;
// out (rows, cols).
template <typename T>
__device__ void swiglu_packed(const T *gu, const T *bias, int has_bias, T *out, int rows, int cols) {
    for (int row = blockIdx.y; row < rows; row += gridDim.y) {
        const T *gr = gu + (size_t)row * 2 * cols;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
            float gv = to_f<T>(gr[c]), uv = to_f<T>(gr[cols + c]);
            if (has_bias) {
                gv = round_to<T>(gv + to_f<T>(bias[c]));
                uv = round_to<T>(uv + to_f<T>(bias[cols + c]));
            }
            const float sv = round_to<T>(gv / (1.f + expf(-gv)));
            out[(size_t)row * cols + c] = from_f<T>(sv * uv);
        }
    }
}

template <typename T>
__device__ void bias_residual(const T *y, const T *b, const T *r, T *out, int rows, int cols) {
    ROWS_COLS_LOOP(const float yv = round_to<T>(to_f<T>(y[i]) + to_f<T>(b[c]));
                   out[i] = from_f<T>(to_f<T>(r[i]) + yv);)
}

// ---------------------------------------------------------------------------------------------------------------
// Packed qkv + bias + rotary. y: (N, (H + 2·KV)·D) projection without bias, b: ((H + 2·KV)·D); cos, sin: (N, D/2)
// half-tables of type C. q: (N, H, D), k, v: (N, KV, D). Per rotated head and j < D/2, with x = round(y + b):
// out[j] = x[j]·cos − x[j+D/2]·sin, out[j+D/2] = x[j+D/2]·cos + x[j]·sin, each op rounded to C, the result to T
// (v = x). C = T is the text model (transformers' q·cos + rotate_half(q)·sin in the activation dtype); C = float
// is the vision tower (rotary in f32, rounded once).
template <typename T, typename C>
__device__ void qkv_rope(const T *y, const T *b, const C *cos, const C *sin, T *q, T *k, T *v, int heads,
                         int kv_heads, int D) {
    const int row = blockIdx.x, half = D / 2, width = (heads + 2 * kv_heads) * D;
    const T *yr = y + (size_t)row * width;
    const C *cr = cos + (size_t)row * half, *sr = sin + (size_t)row * half;
    for (int idx = threadIdx.x; idx < (heads + kv_heads) * half; idx += blockDim.x) {
        const int hh = idx / half, j = idx % half;
        const int c1 = hh * D + j, c2 = c1 + half;
        const float x1 = round_to<T>(to_f<T>(yr[c1]) + to_f<T>(b[c1]));
        const float x2 = round_to<T>(to_f<T>(yr[c2]) + to_f<T>(b[c2]));
        const float cs = to_f<C>(cr[j]), sn = to_f<C>(sr[j]);
        T *dst = hh < heads ? q + ((size_t)row * heads + hh) * D : k + ((size_t)row * kv_heads + hh - heads) * D;
        dst[j] = from_f<T>(round_to<C>(__fmul_rn(x1, cs)) - round_to<C>(__fmul_rn(x2, sn)));
        dst[j + half] = from_f<T>(round_to<C>(__fmul_rn(x2, cs)) + round_to<C>(__fmul_rn(x1, sn)));
    }
    for (int idx = threadIdx.x; idx < kv_heads * D; idx += blockDim.x) {
        const int c = (heads + kv_heads) * D + idx;
        v[(size_t)row * kv_heads * D + idx] = from_f<T>(to_f<T>(yr[c]) + to_f<T>(b[c]));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Decode attention over per-sequence KV caches.
//   q:      (B, KV·G, D)   new queries (after rotary), contiguous
//   k_new:  (B, KV, D)     new keys (after rotary), contiguous; v_new likewise
//   k_ptrs: (B) device addresses of each sequence's K buffer of `layer`, (KV, cap_b, D) contiguous; v_ptrs likewise
//   caps:   (B) capacity of each buffer;  lens: (B) valid positions before this step (the new one goes at lens[b])
//   out:    (B, KV·G, D)
// Block (b, kvh): 8 warps split the positions round-robin; lane l holds dims l, l+32, ... (D ≤ 256); each warp
// keeps an online softmax per query head; the warps are merged through shared memory at the end. D must be
// 32·DL with DL in {1, 2, 4} and the group at most 8; other shapes take the composed path.
#define DA_WARPS 8
#define DA_MAX_G 8
#define DA_MAX_DL 4

template <typename T, int DL>
__device__ void decode_attn(const T *q, const T *k_new, const T *v_new, const uint64_t *k_ptrs,
                            const uint64_t *v_ptrs, const int *caps, const int *lens, T *out, int kv_heads,
                            int group, float scale) {
    const int b = blockIdx.x, kvh = blockIdx.y;
    const int D = DL * 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int cap = caps[b], len = lens[b];
    T *kc = reinterpret_cast<T *>(k_ptrs[b]) + (size_t)kvh * cap * D;
    T *vc = reinterpret_cast<T *>(v_ptrs[b]) + (size_t)kvh * cap * D;
    const T *kn = k_new + ((size_t)b * kv_heads + kvh) * D;
    const T *vn = v_new + ((size_t)b * kv_heads + kvh) * D;
    // Write the new position (every warp reads it from k_new/v_new below, so no ordering is needed).
    if (warp == 0) {
        for (int i = lane; i < D; i += 32) {
            kc[(size_t)len * D + i] = kn[i];
            vc[(size_t)len * D + i] = vn[i];
        }
    }
    float qv[DA_MAX_G][DL], acc[DA_MAX_G][DL], m[DA_MAX_G], l[DA_MAX_G];
#pragma unroll
    for (int h = 0; h < DA_MAX_G; ++h) {
        const T *qh = q + ((size_t)b * kv_heads * group + (size_t)kvh * group + h) * D;
#pragma unroll
        for (int j = 0; j < DL; ++j) {
            qv[h][j] = h < group ? to_f<T>(qh[lane + 32 * j]) * scale : 0.f;
            acc[h][j] = 0.f;
        }
        m[h] = -INFINITY;
        l[h] = 0.f;
    }
    for (int p = warp; p <= len; p += DA_WARPS) {
        const T *kp = p == len ? kn : kc + (size_t)p * D;
        const T *vp = p == len ? vn : vc + (size_t)p * D;
        float kv[DL], vv[DL];
#pragma unroll
        for (int j = 0; j < DL; ++j) {
            kv[j] = to_f<T>(kp[lane + 32 * j]);
            vv[j] = to_f<T>(vp[lane + 32 * j]);
        }
        // The scores of all the group's heads, reduced together: five rounds of independent shuffles rather
        // than one dependent chain of five per head (the same butterfly as warp_sum, so the same sums).
        float s[DA_MAX_G];
#pragma unroll
        for (int h = 0; h < DA_MAX_G; ++h) {
            s[h] = 0.f;
#pragma unroll
            for (int j = 0; j < DL; ++j) s[h] += qv[h][j] * kv[j];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
            for (int h = 0; h < DA_MAX_G; ++h)
                if (h < group) s[h] += __shfl_xor_sync(0xffffffff, s[h], o);
        }
#pragma unroll
        for (int h = 0; h < DA_MAX_G; ++h) {
            if (h >= group) break;
            const float m_new = fmaxf(m[h], s[h]);
            const float corr = __expf(m[h] - m_new);
            const float e = __expf(s[h] - m_new);
            l[h] = l[h] * corr + e;
#pragma unroll
            for (int j = 0; j < DL; ++j) acc[h][j] = acc[h][j] * corr + e * vv[j];
            m[h] = m_new;
        }
    }
    // Merge the warps: per head, the max over warps, then the rescaled sums.
    __shared__ float sm_m[DA_WARPS][DA_MAX_G], sm_l[DA_WARPS][DA_MAX_G];
    __shared__ float sm_acc[DA_WARPS][DA_MAX_G * DA_MAX_DL * 32];
#pragma unroll
    for (int h = 0; h < DA_MAX_G; ++h) {
        if (h >= group) break;
        if (lane == 0) {
            sm_m[warp][h] = m[h];
            sm_l[warp][h] = l[h];
        }
#pragma unroll
        for (int j = 0; j < DL; ++j) sm_acc[warp][h * D + lane + 32 * j] = acc[h][j];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < group * D; idx += blockDim.x) {
        const int h = idx / D;
        float mx = -INFINITY;
        for (int w = 0; w < DA_WARPS; ++w) mx = fmaxf(mx, sm_m[w][h]);
        float num = 0.f, den = 0.f;
        for (int w = 0; w < DA_WARPS; ++w) {
            if (sm_m[w][h] == -INFINITY) continue;
            const float c = __expf(sm_m[w][h] - mx);
            num += sm_acc[w][idx] * c;
            den += sm_l[w][h] * c;
        }
        out[((size_t)b * kv_heads * group + (size_t)kvh * group) * D + idx] = from_f<T>(num / den);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Varlen attention.
//   q:     (N, H, D)   packed query rows;  k, v: (N, KV, D) packed key/value rows of the same segments
//   meta:  int32 [cu (S+1) | prefix_len (S) | prefix_cap (S) | tile_seg (T) | tile_row0 (T)]
//          segment s owns rows cu[s]..cu[s+1]; tile t covers rows tile_row0[t].. +VA_ROWS of segment tile_seg[t]
//   ptrs:  uint64 [prefix_k (S) | prefix_v (S)]: (KV, prefix_cap, D) buffers holding prefix_len positions, or 0
//   out:   (N, H, D)
// Key j of segment s is prefix position j (j < P) or packed row cu[s] + j − P; query i sees key j when
// j < P + len (non-causal) or j ≤ P + i (causal). Block (tile, head): VA_TPR threads per query row, each holding
// D / VA_TPR dims (interleaved: dim j·VA_TPR + part, so the threads of a row read adjacent shared-memory
// banks) of q and of the output accumulator; keys are staged VA_KEYS at a time in shared memory (f32).
#define VA_ROWS 32
#define VA_TPR 4
#define VA_KEYS 32

// Key j of a varlen segment: position j of the cached prefix (j < P; buffers pk/pv of (KV, cap, D)) or packed row
// start + j − P of k/v ((N, KV, D)). Returns the element offset of kv head kvh's row in the buffer it lives in.
__device__ __forceinline__ size_t key_offset(int j, int P, int cap, int start, int kv_heads, int kvh, int D) {
    return j < P ? ((size_t)kvh * cap + j) * D : ((size_t)(start + j - P) * kv_heads + kvh) * D;
}

// The tile a varlen block works on (blockIdx.x: tile, blockIdx.y: query head), read from the metadata:
// its segment's first packed row and length, the prefix length, capacity and buffers, the tile's first row.
template <typename T> struct VarlenTile {
    int h, kvh, row0, start, len, P, cap;
    const T *pk, *pv;
    __device__ VarlenTile(const int *meta, const uint64_t *ptrs, int n_seg, int n_tiles, int heads, int kv_heads) {
        const int *cu = meta, *plen = meta + n_seg + 1, *pcap = plen + n_seg, *tseg = pcap + n_seg;
        const int *trow = tseg + n_tiles;
        const int s = tseg[blockIdx.x];
        h = blockIdx.y;
        kvh = h / (heads / kv_heads);
        row0 = trow[blockIdx.x];
        start = cu[s];
        len = cu[s + 1] - cu[s];
        P = plen[s];
        cap = pcap[s];
        pk = reinterpret_cast<const T *>(ptrs[s]);
        pv = reinterpret_cast<const T *>(ptrs[n_seg + s]);
    }
};

template <typename T, int DPT>
__device__ void varlen_attn(const T *q, const T *k, const T *v, const int *meta, const uint64_t *ptrs, T *out,
                            int n_seg, int n_tiles, int heads, int kv_heads, int causal, float scale) {
    constexpr int D = DPT * VA_TPR;
    __shared__ float ks[VA_KEYS][D];
    __shared__ float vs[VA_KEYS][D];
    const VarlenTile<T> tl(meta, ptrs, n_seg, n_tiles, heads, kv_heads);
    const int h = tl.h, kvh = tl.kvh, row0 = tl.row0, start = tl.start, len = tl.len, P = tl.P, cap = tl.cap;
    const T *pk = tl.pk, *pv = tl.pv;
    const int r = threadIdx.x / VA_TPR, part = threadIdx.x % VA_TPR;
    const int qi = row0 + r;
    const bool valid = qi < len;
    const int lane = threadIdx.x & 31;
    const unsigned group_mask = 0xfu << (lane & ~(VA_TPR - 1));
    float qv[DPT], acc[DPT];
#pragma unroll
    for (int j = 0; j < DPT; ++j) {
        qv[j] = valid ? to_f<T>(q[((size_t)(start + qi) * heads + h) * D + j * VA_TPR + part]) * scale : 0.f;
        acc[j] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const int row_last = min(row0 + VA_ROWS, len) - 1;
    const int n_keys = causal ? P + row_last + 1 : P + len;  // keys any row of this tile may see
    const int my_keys = causal ? P + qi + 1 : P + len;        // keys this row sees
    for (int kb = 0; kb < n_keys; kb += VA_KEYS) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < VA_KEYS * D; idx += blockDim.x) {
            const int t = idx / D, c = idx % D, j = kb + t;
            float kx = 0.f, vx = 0.f;
            if (j < n_keys) {
                const size_t off = key_offset(j, P, cap, start, kv_heads, kvh, D) + c;
                kx = to_f<T>((j < P ? pk : k)[off]);
                vx = to_f<T>((j < P ? pv : v)[off]);
            }
            ks[t][c] = kx;
            vs[t][c] = vx;
        }
        __syncthreads();
        if (!valid) continue;
        float sc[VA_KEYS];
        float tmax = -INFINITY;
#pragma unroll
        for (int t = 0; t < VA_KEYS; ++t) {
            float d = 0.f;
#pragma unroll
            for (int j = 0; j < DPT; ++j) d += qv[j] * ks[t][j * VA_TPR + part];
            d += __shfl_xor_sync(group_mask, d, 1);
            d += __shfl_xor_sync(group_mask, d, 2);
            sc[t] = kb + t < my_keys ? d : -INFINITY;
            tmax = fmaxf(tmax, sc[t]);
        }
        const float m_new = fmaxf(m, tmax);
        if (m_new == -INFINITY) continue;  // nothing visible yet (cannot happen for key 0, kept for safety)
        const float corr = __expf(m - m_new);
        l *= corr;
#pragma unroll
        for (int j = 0; j < DPT; ++j) acc[j] *= corr;
#pragma unroll
        for (int t = 0; t < VA_KEYS; ++t) {
            const float p = __expf(sc[t] - m_new);
            l += p;
#pragma unroll
            for (int j = 0; j < DPT; ++j) acc[j] += p * vs[t][j * VA_TPR + part];
        }
        m = m_new;
    }
    if (valid) {
        T *o = out + ((size_t)(start + qi) * heads + h) * D + part;
#pragma unroll
        for (int j = 0; j < DPT; ++j) o[j * VA_TPR] = from_f<T>(acc[j] / l);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Varlen attention on tensor cores (bf16/f16 only): the same inputs, outputs and masking rules as varlen_attn, in
// the FlashAttention-2 shape. Block = 4 warps = VM_ROWS query rows of one (tile, head); warp w owns rows
// 16w..16w+15 of the tile. Q·Kᵀ and P·V are mma.sync.m16n8k16 with f32 accumulation (PTX ISA fragment layouts:
// lane = 4·group + quad; an A fragment holds rows group and group+8, columns 2·quad(+1) and 2·quad+8(+1); a B
// fragment holds column group, rows 2·quad(+1) and 2·quad+8(+1); a C fragment holds rows group and group+8,
// columns 2·quad and 2·quad+1). Scores are scaled and masked in f32, the online softmax runs on the C fragments
// (a row's four owners are one quad, reduced with two shuffles), and the probabilities are rounded to T and fed
// back as the A fragments of P·V. K and V tiles of VM_KEYS keys are staged in shared memory; Q stays in registers.
// tests/it/kernels_emulated.rs runs this kernel on the CPU (kernels/emu/cuda_emu.h emulates mma.sync's fragments).
#define VM_ROWS 64
#define VM_KEYS 64
#define VM_PAD 8

template <typename T> __device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                               uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                        uint32_t b1) {
#ifdef MRE_CPU_EMULATION
    emu::mma_m16n8k16<__nv_bfloat16>(d, a, b0, b1);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef MRE_CPU_EMULATION
    emu::mma_m16n8k16<__half>(d, a, b0, b1);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Two floats rounded to T, packed low-first into one register (the element order of the fragments).
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

template <typename T, int D>
__device__ void varlen_mma(const T *q, const T *k, const T *v, const int *meta, const uint64_t *ptrs, T *out,
                           int n_seg, int n_tiles, int heads, int kv_heads, int causal, float scale) {
    constexpr int LD = D + VM_PAD;  // shared row stride (elements): spreads a fragment's rows over all banks
    constexpr int KSTEPS = D / 16;  // k-steps of Q·Kᵀ
    constexpr int NT = D / 8;       // n-tiles of the output
    constexpr int ST = VM_KEYS / 8; // n-tiles of a score tile
    __shared__ __align__(16) T ks[VM_KEYS * LD];
    __shared__ __align__(16) T vs[VM_KEYS * LD];
    const uint16_t *vs16 = reinterpret_cast<const uint16_t *>(vs);
    const VarlenTile<T> tl(meta, ptrs, n_seg, n_tiles, heads, kv_heads);
    const int h = tl.h, kvh = tl.kvh, row0 = tl.row0, start = tl.start, len = tl.len, P = tl.P, cap = tl.cap;
    const T *pk = tl.pk, *pv = tl.pv;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, grp = lane >> 2, quad = lane & 3;
    const int r_lo = row0 + warp * 16 + grp, r_hi = r_lo + 8;  // this thread's two query rows
    auto q_word = [&](int r, int c) -> uint32_t {
        if (r >= len) return 0u;
        return *reinterpret_cast<const uint32_t *>(q + ((size_t)(start + r) * heads + h) * D + c);
    };
    uint32_t qa[KSTEPS][4];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
        const int c = kk * 16 + 2 * quad;
        qa[kk][0] = q_word(r_lo, c);
        qa[kk][1] = q_word(r_hi, c);
        qa[kk][2] = q_word(r_lo, c + 8);
        qa[kk][3] = q_word(r_hi, c + 8);
    }
    float o[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const int row_last = min(row0 + VM_ROWS, len) - 1;
    const int n_keys = causal ? P + row_last + 1 : P + len;  // keys any row of this tile may see
    // Keys each of this thread's rows sees (rows past the segment end behave like its last row; never written).
    const int lim[2] = {causal ? P + min(r_lo, len - 1) + 1 : P + len, causal ? P + min(r_hi, len - 1) + 1 : P + len};
    for (int kb = 0; kb < n_keys; kb += VM_KEYS) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < VM_KEYS * (D / 2); idx += blockDim.x) {
            const int t = idx / (D / 2), c = (idx % (D / 2)) * 2, j = kb + t;
            uint32_t kx = 0u, vx = 0u;
            if (j < n_keys) {
                const size_t off = key_offset(j, P, cap, start, kv_heads, kvh, D) + c;
                kx = *reinterpret_cast<const uint32_t *>((j < P ? pk : k) + off);
                vx = *reinterpret_cast<const uint32_t *>((j < P ? pv : v) + off);
            }
            *reinterpret_cast<uint32_t *>(&ks[t * LD + c]) = kx;
            *reinterpret_cast<uint32_t *>(&vs[t * LD + c]) = vx;
        }
        __syncthreads();
        // S = Q·Kᵀ for the warp's 16 rows and the tile's keys; B(k = dim, n = key) = K[key][dim].
        float sc[ST][4];
#pragma unroll
        for (int nt = 0; nt < ST; ++nt) {
            sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
            const T *krow = ks + (nt * 8 + grp) * LD + 2 * quad;
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) {
                const uint32_t b0 = *reinterpret_cast<const uint32_t *>(krow + kk * 16);
                const uint32_t b1 = *reinterpret_cast<const uint32_t *>(krow + kk * 16 + 8);
                mma16816<T>(sc[nt], qa[kk], b0, b1);
            }
        }
        // Scale and mask in f32; the rows' maxima over the quad.
        float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < ST; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int key = kb + nt * 8 + 2 * quad + (i & 1);
                const float x = key < lim[i >> 1] ? sc[nt][i] * scale : -INFINITY;
                sc[nt][i] = x;
                tmax[i >> 1] = fmaxf(tmax[i >> 1], x);
            }
        }
        float corr[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffff, tmax[r], 1));
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffff, tmax[r], 2));
            const float m_new = fmaxf(m[r], tmax[r]);  // finite: key 0 is in the first tile of every row
            corr[r] = __expf(m[r] - m_new);
            m[r] = m_new;
            l[r] *= corr[r];
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            o[nt][0] *= corr[0];
            o[nt][1] *= corr[0];
            o[nt][2] *= corr[1];
            o[nt][3] *= corr[1];
        }
#pragma unroll
        for (int nt = 0; nt < ST; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float p = __expf(sc[nt][i] - m[i >> 1]);
                sc[nt][i] = p;
                l[i >> 1] += p;  // this thread's columns; the quad is summed at the end
            }
        }
        // O += P·V: the C fragments of score n-tiles 2kk and 2kk+1 are the A fragment of k-step kk;
        // B(k = key, n = dim) = V[key][dim], two keys per register.
#pragma unroll
        for (int kk = 0; kk < VM_KEYS / 16; ++kk) {
            const uint32_t pa[4] = {pack2<T>(sc[2 * kk][0], sc[2 * kk][1]), pack2<T>(sc[2 * kk][2], sc[2 * kk][3]),
                                    pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                                    pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
            const uint16_t *vcol = vs16 + (kk * 16 + 2 * quad) * LD + grp;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const uint16_t *vp = vcol + nt * 8;
                const uint32_t b0 = (uint32_t)vp[0] | ((uint32_t)vp[LD] << 16);
                const uint32_t b1 = (uint32_t)vp[8 * LD] | ((uint32_t)vp[9 * LD] << 16);
                mma16816<T>(o[nt], pa, b0, b1);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffff, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffff, l[r], 2);
    }
    const float inv_lo = 1.f / l[0], inv_hi = 1.f / l[1];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int c = nt * 8 + 2 * quad;
        if (r_lo < len)
            *reinterpret_cast<uint32_t *>(out + ((size_t)(start + r_lo) * heads + h) * D + c) =
                pack2<T>(o[nt][0] * inv_lo, o[nt][1] * inv_lo);
        if (r_hi < len)
            *reinterpret_cast<uint32_t *>(out + ((size_t)(start + r_hi) * heads + h) * D + c) =
                pack2<T>(o[nt][2] * inv_hi, o[nt][3] * inv_hi);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Entry points, one per dtype (and per head-dim class for decode attention).
#define RMS(NAME, T)                                                                                              \
    extern "C" __global__ void rmsnorm_hf_##NAME(const T *x, const T *w, T *out, int cols, float eps) {          \
        rmsnorm_hf<T>(x, w, out, cols, eps);                                                                     \
    }
#define SWIGLU(NAME, T)                                                                                           \
    extern "C" __global__ void swiglu_packed_##NAME(const T *gu, const T *bias, int has_bias, T *out, int rows,  \
                                                    int cols) {                                                  \
        swiglu_packed<T>(gu, bias, has_bias, out, rows, cols);                                                   \
    }
#define DECODE(NAME, T, DL)                                                                                       \
    extern "C" __global__ void __launch_bounds__(DA_WARPS * 32)                                                  \
        decode_attn_d##DL##_##NAME(const T *q, const T *k_new, const T *v_new, const uint64_t *k_ptrs,          \
                                   const uint64_t *v_ptrs, const int *caps, const int *lens, T *out,            \
                                   int kv_heads, int group, float scale) {                                      \
        decode_attn<T, DL>(q, k_new, v_new, k_ptrs, v_ptrs, caps, lens, out, kv_heads, group, scale);            \
    }
#define VARLEN(NAME, T, D)                                                                                        \
    extern "C" __global__ void __launch_bounds__(VA_ROWS * VA_TPR)                                               \
        varlen_attn_d##D##_##NAME(const T *q, const T *k, const T *v, const int *meta, const uint64_t *ptrs,     \
                                  T *out, int n_seg, int n_tiles, int heads, int kv_heads, int causal,          \
                                  float scale) {                                                                \
        varlen_attn<T, D / VA_TPR>(q, k, v, meta, ptrs, out, n_seg, n_tiles, heads, kv_heads, causal, scale);    \
    }
#define BIAS(NAME, T)                                                                                             \
    extern "C" __global__ void bias_add_##NAME(const T *y, const T *b, T *out, int rows, int cols) {             \
        bias_add<T>(y, b, out, rows, cols);                                                                      \
    }                                                                                                             \
    extern "C" __global__ void bias_residual_##NAME(const T *y, const T *b, const T *r, T *out, int rows,        \
                                                    int cols) {                                                  \
        bias_residual<T>(y, b, r, out, rows, cols);                                                              \
    }
#define QKV_ROPE(NAME, T)                                                                                         \
    extern "C" __global__ void qkv_rope_##NAME(const T *y, const T *b, const T *cos, const T *sin, T *q, T *k,    \
                                               T *v, int heads, int kv_heads, int d) {                           \
        qkv_rope<T, T>(y, b, cos, sin, q, k, v, heads, kv_heads, d);                                             \
    }                                                                                                             \
    extern "C" __global__ void qkv_rope_f32rot_##NAME(const T *y, const T *b, const float *cos,                  \
                                                      const float *sin, T *q, T *k, T *v, int heads,            \
                                                      int kv_heads, int d) {                                    \
        qkv_rope<T, float>(y, b, cos, sin, q, k, v, heads, kv_heads, d);                                         \
    }
#define VARLEN_MMA(NAME, T, D)                                                                                    \
    extern "C" __global__ void __launch_bounds__(128)                                                             \
        varlen_mma_d##D##_##NAME(const T *q, const T *k, const T *v, const int *meta, const uint64_t *ptrs,      \
                                 T *out, int n_seg, int n_tiles, int heads, int kv_heads, int causal,           \
                                 float scale) {                                                                 \
        varlen_mma<T, D>(q, k, v, meta, ptrs, out, n_seg, n_tiles, heads, kv_heads, causal, scale);               \
    }
#define ALL(NAME, T)                                                                                              \
    RMS(NAME, T)                                                                                                  \
    SWIGLU(NAME, T)                                                                                               \
    BIAS(NAME, T)                                                                                                 \
    QKV_ROPE(NAME, T)                                                                                             \
    DECODE(NAME, T, 1) DECODE(NAME, T, 2) DECODE(NAME, T, 4)                                                      \
    VARLEN(NAME, T, 64) VARLEN(NAME, T, 80) VARLEN(NAME, T, 128)

ALL(f32, float)
ALL(bf16, __nv_bfloat16)
ALL(f16, __half)
VARLEN_MMA(bf16, __nv_bfloat16, 64) VARLEN_MMA(bf16, __nv_bfloat16, 80) VARLEN_MMA(bf16, __nv_bfloat16, 128)
VARLEN_MMA(f16, __half, 64) VARLEN_MMA(f16, __half, 80) VARLEN_MMA(f16, __half, 128)

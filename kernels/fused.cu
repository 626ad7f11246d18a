// The project's own CUDA kernels: fused ops candle lacks, each with a CPU reference in src/ops/ and a test that
// compares the two (src/ops/tests.rs, run on a GPU by `mobile-r1-eval self-test --device cuda`).
//
// * rmsnorm_hf_*    Qwen2 RMSNorm in transformers' cast order: mean of squares in f32, x·rsqrt(ms+eps) rounded to
//                   the activation dtype, then multiplied by the weight (rounded again). One block per row.
// * swiglu_*        silu(gate)·up with transformers' roundings: silu in f32 rounded to the dtype, the product
//                   rounded again. Elementwise.
// * decode_attn_*   One decode step of attention for a batch of sequences whose KV caches are separate buffers
//                   (kv_heads, capacity, head_dim): writes each sequence's new K/V at its position `len`, then
//                   attends its query heads over positions 0..=len (GQA), softmax in f32 with an online max.
//                   One block per (sequence, kv head); one launch per layer instead of several per sequence.
// * varlen_attn_*   Prefill attention over packed variable-length segments (the vision tower's windows and
//                   images, the prompts of a prefill batch): each segment's queries attend to its own keys,
//                   optionally causally and after a cached prefix whose K/V live in a separate buffer. Flash-style
//                   (K/V tiles in shared memory, online softmax in f32), no score matrix, one launch per layer.
//
// Compiled to PTX by kernels/build.rs when the `cuda` feature is on.
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
// SwiGLU: out = silu(g)·u, all (n) contiguous.
template <typename T>
__device__ void swiglu(const T *g, const T *u, T *out, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gv = to_f<T>(g[i]);
        float s = round_to<T>(gv / (1.f + expf(-gv)));
        out[i] = from_f<T>(s * to_f<T>(u[i]));
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
        if (h >= group) break;
        const T *qh = q + ((size_t)b * kv_heads * group + (size_t)kvh * group + h) * D;
#pragma unroll
        for (int j = 0; j < DL; ++j) {
            qv[h][j] = to_f<T>(qh[lane + 32 * j]) * scale;
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
#pragma unroll
        for (int h = 0; h < DA_MAX_G; ++h) {
            if (h >= group) break;
            float s = 0.f;
#pragma unroll
            for (int j = 0; j < DL; ++j) s += qv[h][j] * kv[j];
            s = warp_sum(s);
            const float m_new = fmaxf(m[h], s);
            const float corr = __expf(m[h] - m_new);
            const float e = __expf(s - m_new);
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

template <typename T, int DPT>
__device__ void varlen_attn(const T *q, const T *k, const T *v, const int *meta, const uint64_t *ptrs, T *out,
                            int n_seg, int n_tiles, int heads, int kv_heads, int causal, float scale) {
    constexpr int D = DPT * VA_TPR;
    __shared__ float ks[VA_KEYS][D];
    __shared__ float vs[VA_KEYS][D];
    const int *cu = meta, *plen = meta + n_seg + 1, *pcap = plen + n_seg, *tseg = pcap + n_seg;
    const int *trow = tseg + n_tiles;
    const int tile = blockIdx.x, h = blockIdx.y, kvh = h / (heads / kv_heads);
    const int s = tseg[tile], row0 = trow[tile];
    const int start = cu[s], len = cu[s + 1] - cu[s], P = plen[s], cap = pcap[s];
    const T *pk = reinterpret_cast<const T *>(ptrs[s]);
    const T *pv = reinterpret_cast<const T *>(ptrs[n_seg + s]);
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
                size_t off;
                const T *kbase, *vbase;
                if (j < P) {
                    off = ((size_t)kvh * cap + j) * D + c;
                    kbase = pk;
                    vbase = pv;
                } else {
                    off = ((size_t)(start + j - P) * kv_heads + kvh) * D + c;
                    kbase = k;
                    vbase = v;
                }
                kx = to_f<T>(kbase[off]);
                vx = to_f<T>(vbase[off]);
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
// Entry points, one per dtype (and per head-dim class for decode attention).
#define RMS(NAME, T)                                                                                              \
    extern "C" __global__ void rmsnorm_hf_##NAME(const T *x, const T *w, T *out, int cols, float eps) {          \
        rmsnorm_hf<T>(x, w, out, cols, eps);                                                                     \
    }
#define SWIGLU(NAME, T)                                                                                           \
    extern "C" __global__ void swiglu_##NAME(const T *g, const T *u, T *out, size_t n) { swiglu<T>(g, u, out, n); }
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
#define ALL(NAME, T)                                                                                              \
    RMS(NAME, T)                                                                                                  \
    SWIGLU(NAME, T)                                                                                               \
    DECODE(NAME, T, 1) DECODE(NAME, T, 2) DECODE(NAME, T, 4)                                                      \
    VARLEN(NAME, T, 64) VARLEN(NAME, T, 80) VARLEN(NAME, T, 128)

ALL(f32, float)
ALL(bf16, __nv_bfloat16)
ALL(f16, __half)

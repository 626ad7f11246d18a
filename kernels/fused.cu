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
#define ALL(NAME, T)                                                                                              \
    RMS(NAME, T)                                                                                                  \
    SWIGLU(NAME, T)                                                                                               \
    DECODE(NAME, T, 1) DECODE(NAME, T, 2) DECODE(NAME, T, 4)

ALL(f32, float)
ALL(bf16, __nv_bfloat16)
ALL(f16, __half)

// A CPU stand-in for the small part of CUDA that kernels/fused.cu uses, so that the kernels' own source runs on a
// machine without a GPU (tests/it/kernels_emulated.rs).
//
// Every CUDA thread of a block is a fiber (its own stack, switched cooperatively); a block's fibers run on one OS
// thread, and blocks run in parallel on a few OS threads, so `__shared__` variables are thread-local statics. A
// fiber runs until it reaches a synchronisation point, then yields; the scheduler resumes the block's fibers in
// turn until all have finished.
//
// Emulated: threadIdx/blockIdx/blockDim/gridDim, __syncthreads, __shfl_xor_sync (only the lanes of its member
// mask meet), mma.sync.m16n8k16 with f32 accumulation (the PTX ISA's fragment layouts, gathered across the warp),
// bf16/f16 storage types with round-to-nearest-even conversions, and the float intrinsics (__expf is expf,
// __fmul_rn a plain product). A shuffle whose source lane is outside its mask, a shuffle or mma in a warp missing
// lanes, and a block whose fibers all wait for each other stop the process with a message naming the block.
//
// Not emulated: timing, occupancy, register limits, memory ordering between warps without a barrier, and the
// hardware's own rounding inside mma and __expf (the comparisons use `self-test`'s tolerances). Fibers switch only
// at synchronisation points, so a race shows up only as an order the scheduler happens to pick (the order of
// each pass is shuffled); `__shared__` memory keeps the previous block's data rather than garbage.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include <sys/mman.h>
// The hand-written switch is for x86-64 ELF (Linux); elsewhere the fibers use ucontext.
#if defined(__x86_64__) && defined(__ELF__)
#define MRE_EMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

#define MRE_CPU_EMULATION 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static thread_local

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

using std::max;
using std::min;

namespace emu {

// ---- fibers --------------------------------------------------------------------------------------------------
#if defined(MRE_EMU_ASM_SWITCH)
// Saves the callee-saved registers and the SSE/x87 control words on the current stack, stores the stack pointer
// in *from, and resumes the context whose stack pointer is `to`.
extern "C" void mre_emu_switch(void **from, void *to);
asm(R"(
    .pushsection .text
    .globl mre_emu_switch
    .hidden mre_emu_switch
    .type mre_emu_switch, @function
mre_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mre_emu_switch, .-mre_emu_switch
    .popsection
)");
#endif

constexpr size_t STACK_BYTES = 256 * 1024;
constexpr size_t PAGE = 4096;

[[noreturn]] void fail(const char *what);

struct Fiber {
    dim3 tid;
    int linear = 0;
    bool done = false;
    char *mem = nullptr;  // guard page + stack
#if defined(MRE_EMU_ASM_SWITCH)
    void *sp = nullptr;
#else
    ucontext_t ctx;
#endif
};

// Synchronisation state of a group of fibers (a block, or the lanes of one member mask): a generation counter,
// the arrivals in the current generation, and the values its shuffles exchange. Values are kept by generation
// parity: a lane can only write a slot again two generations later, after every lane has read it.
struct Group {
    int arrived = 0;
    unsigned long gen = 0;
    const char *op = nullptr;  // what the first arrival of this generation does; the others must do the same
    uint64_t slot[2][32];
};

struct Warp {
    unsigned present = 0;  // lanes that exist (a block's last warp may be partial)
    std::map<unsigned, Group> groups;
    uint32_t a[2][32][4], b[2][32][2];  // mma fragments, by the parity of the full mask's generation
};

struct Block {
    dim3 idx;
    int threads = 0;
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    Group barrier;
    unsigned long progress = 0;  // bumped at every arrival; a scheduler pass without it is a deadlock
    const char *waiting_on = "";
#if defined(MRE_EMU_ASM_SWITCH)
    void *sched_sp = nullptr;
#else
    ucontext_t sched;
#endif
};

inline dim3 grid_dim, block_dim;
inline thread_local Block *cur_block = nullptr;
inline thread_local Fiber *cur_fiber = nullptr;

inline void fail(const char *what) {
    const dim3 b = cur_block ? cur_block->idx : dim3{0, 0, 0};
    std::fprintf(stderr, "cuda_emu: %s in block (%u, %u, %u)", what, b.x, b.y, b.z);
    if (cur_fiber) std::fprintf(stderr, ", thread (%u, %u, %u)", cur_fiber->tid.x, cur_fiber->tid.y, cur_fiber->tid.z);
    std::fprintf(stderr, "\n");
    std::fflush(stderr);
    std::abort();
}

// Back to the scheduler; returns when the scheduler resumes this fiber.
inline void yield() {
    Fiber *f = cur_fiber;
    Block *b = cur_block;
#if defined(MRE_EMU_ASM_SWITCH)
    mre_emu_switch(&f->sp, b->sched_sp);
#else
    swapcontext(&f->ctx, &b->sched);
#endif
}

// Arrive at `g` (a group of `count` fibers) and wait until all have arrived.
inline void arrive_and_wait(Group &g, int count, const char *what) {
    const unsigned long gen = g.gen;
    cur_block->progress++;
    if (g.arrived == 0) {
        g.op = what;
    } else if (g.op != what) {
        fail("threads of one group meet at different operations (e.g. an mma.sync and a shuffle)");
    }
    if (++g.arrived == count) {
        g.arrived = 0;
        g.gen++;
        return;
    }
    cur_block->waiting_on = what;
    while (g.gen == gen) yield();
}

inline int lane() { return cur_fiber->linear & 31; }

inline Warp &my_warp(unsigned mask, const char *op) {
    Warp &w = cur_block->warps[cur_fiber->linear / 32];
    if (!(mask >> lane() & 1) || (mask & w.present) != mask) fail(op);
    return w;
}

template <typename V> V shfl_xor(unsigned mask, V v, int lane_mask) {
    static_assert(sizeof(V) <= 8, "shuffle of a value wider than 64 bits");
    Warp &w = my_warp(mask, "__shfl_xor_sync with a member mask that does not hold this lane, or missing lanes");
    if (lane_mask < 0 || lane_mask > 31) fail("__shfl_xor_sync with a lane mask outside 0..31");
    const int me = lane(), src = me ^ lane_mask;
    if (!(mask >> src & 1)) fail("__shfl_xor_sync reading a lane outside its member mask");
    Group &g = w.groups[mask];
    const int parity = (int)(g.gen & 1);
    std::memcpy(&g.slot[parity][me], &v, sizeof(V));
    arrive_and_wait(g, __builtin_popcount(mask), "__shfl_xor_sync");
    V out;
    std::memcpy(&out, &g.slot[parity][src], sizeof(V));
    return out;
}

// Element `half` (0: low 16 bits, 1: high) of a packed pair, as f32, for the storage type T.
template <typename T> float elem(uint32_t pair, int half);

// d += A·B for one m16n8k16 tile, A row-major, B column-major, f32 accumulate. Lane = 4·group + quad.
// A (16×16): reg r of a lane holds row group + 8·(r & 1), columns 2·quad + 8·(r >> 1) + {0, 1}.
// B (16×8):  reg r holds column group, rows 2·quad + 8·r + {0, 1}.
// C, D:      element i holds row group + 8·(i >> 1), column 2·quad + (i & 1).
template <typename T> void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    Warp &w = my_warp(0xffffffffu, "mma.sync in a warp missing lanes");
    const int me = lane(), grp = me >> 2, quad = me & 3;
    Group &g = w.groups[0xffffffffu];
    const int p = (int)(g.gen & 1);
    std::memcpy(w.a[p][me], a, sizeof(w.a[p][me]));
    w.b[p][me][0] = b0;
    w.b[p][me][1] = b1;
    arrive_and_wait(g, 32, "mma.sync");
    for (int i = 0; i < 4; ++i) {
        const int row = grp + 8 * (i >> 1), col = 2 * quad + (i & 1);
        float acc = d[i];
        for (int k = 0; k < 16; ++k) {
            const int a_lane = 4 * (row & 7) + ((k & 7) >> 1), a_reg = (row >> 3) + 2 * (k >> 3);
            const int b_lane = 4 * col + ((k & 7) >> 1), b_reg = k >> 3;
            acc += elem<T>(w.a[p][a_lane][a_reg], k & 1) * elem<T>(w.b[p][b_lane][b_reg], k & 1);
        }
        d[i] = acc;
    }
}

// ---- launching ------------------------------------------------------------------------------------------------
using Body = void (*)(void *);
inline thread_local Body fiber_body = nullptr;
inline thread_local void *fiber_arg = nullptr;

[[noreturn]] inline void fiber_main() {
    fiber_body(fiber_arg);
    cur_fiber->done = true;
    cur_block->progress++;
    yield();
    fail("a finished fiber was resumed");
}

inline void start_fiber(Fiber &f) {
    if (!f.mem) {
        void *m = mmap(nullptr, STACK_BYTES + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) fail("cannot allocate a fiber stack");
        f.mem = static_cast<char *>(m);
        mprotect(f.mem, PAGE, PROT_NONE);  // a stack overflow faults instead of corrupting memory
    }
#if defined(MRE_EMU_ASM_SWITCH)
    char *top = f.mem + PAGE + STACK_BYTES;
    // What mre_emu_switch pops: the control words, six registers, then the "return address" fiber_main, entered
    // with the stack aligned as after a call.
    uint64_t *sp = reinterpret_cast<uint64_t *>(top) - 1;
    *--sp = reinterpret_cast<uint64_t>(&fiber_main);
    for (int i = 0; i < 6; ++i) *--sp = 0;
    *--sp = 0;
    const uint32_t mxcsr = 0x1f80;
    const uint16_t fpucw = 0x037f;
    std::memcpy(sp, &mxcsr, 4);
    std::memcpy(reinterpret_cast<char *>(sp) + 4, &fpucw, 2);
    f.sp = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.mem + PAGE;
    f.ctx.uc_stack.ss_size = STACK_BYTES;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, (void (*)())fiber_main, 0);
#endif
}

// Run block `idx` of the current launch on this OS thread: every thread a fiber, resumed in turn until all finish.
// Each pass resumes the fibers in a new pseudo-random order (seeded by the block index, so runs repeat): code that
// needs a barrier it lacks then reads data the other threads have not written yet.
inline void run_block(Block &b, dim3 idx, Body body, void *arg) {
    b.idx = idx;
    b.barrier = Group{};
    for (auto &w : b.warps) w.groups.clear();
    for (auto &f : b.fibers) {
        f.done = false;
        start_fiber(f);
    }
    cur_block = &b;
    fiber_body = body;
    fiber_arg = arg;
    std::vector<int> order(b.threads);
    for (int t = 0; t < b.threads; ++t) order[t] = t;
    uint64_t seed = 0x9E3779B97F4A7C15ull ^ (((uint64_t)idx.z << 42) | ((uint64_t)idx.y << 21) | idx.x);
    for (int live = b.threads; live > 0;) {
        const unsigned long before = b.progress;
        for (int t = b.threads - 1; t > 0; --t) {  // Fisher-Yates with xorshift64
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            std::swap(order[t], order[seed % (uint64_t)(t + 1)]);
        }
        live = 0;
        for (int t : order) {
            Fiber &f = b.fibers[t];
            if (f.done) continue;
            cur_fiber = &f;
#if defined(MRE_EMU_ASM_SWITCH)
            mre_emu_switch(&b.sched_sp, f.sp);
#else
            swapcontext(&b.sched, &f.ctx);
#endif
            live += !f.done;
        }
        cur_fiber = nullptr;
        if (live > 0 && b.progress == before) {  // every live fiber waits for one that never comes
            char what[160];
            std::snprintf(what, sizeof what, "deadlock: %d of %d threads wait (the last at %s), the rest finished",
                          live, b.threads, b.waiting_on);
            fail(what);
        }
    }
}

inline Block make_block(int threads) {
    Block b;
    b.threads = threads;
    b.fibers.resize(threads);
    b.warps.resize((threads + 31) / 32);
    for (int t = 0; t < threads; ++t) {
        Fiber &f = b.fibers[t];
        f.linear = t;
        f.tid = {t % block_dim.x, (t / block_dim.x) % block_dim.y, t / (block_dim.x * block_dim.y)};
        b.warps[t / 32].present |= 1u << (t % 32);
    }
    return b;
}

inline void free_block(Block &b) {
    for (auto &f : b.fibers)
        if (f.mem) munmap(f.mem, STACK_BYTES + PAGE);
}

}  // namespace emu

#define threadIdx (emu::cur_fiber->tid)
#define blockIdx (emu::cur_block->idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)

inline void __syncthreads() {
    emu::arrive_and_wait(emu::cur_block->barrier, emu::cur_block->threads, "__syncthreads");
}
template <typename V> inline V __shfl_xor_sync(unsigned mask, V v, int lane_mask) {
    return emu::shfl_xor(mask, v, lane_mask);
}

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __fmul_rn(float a, float b) {
    volatile float p = a * b;  // never contracted into an fma
    return p;
}

// 16-bit storage types, converted with round-to-nearest-even as cuda_bf16.h / cuda_fp16.h do.
struct __nv_bfloat16 {
    uint16_t bits;
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
struct __half {
    uint16_t bits;
};
struct alignas(4) __half2 {
    __half x, y;
};

inline float __bfloat162float(__nv_bfloat16 h) {
    const uint32_t u = (uint32_t)h.bits << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {0x7fff};  // the canonical NaN, as CUDA returns
    u += 0x7fffu + ((u >> 16) & 1);
    return {(uint16_t)(u >> 16)};
}
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
    return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
// f16 at the bit level (no compiler support for _Float16 needed); checked against _Float16 for every f32 input.
inline float __half2float(__half h) {
    const uint32_t sign = (uint32_t)(h.bits & 0x8000u) << 16;
    uint32_t exp = (h.bits >> 10) & 0x1fu, mant = h.bits & 0x3ffu, x;
    if (exp == 0x1f) {
        x = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
        x = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        x = sign;
    } else {  // subnormal: normalise
        int shifts = 0;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            ++shifts;
        }
        x = sign | ((uint32_t)(113 - shifts) << 23) | ((mant & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
inline __half __float2half_rn(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
    const int e = (int)((x >> 23) & 0xffu) - 127 + 15;
    if (e == 0xff - 127 + 15) return {(uint16_t)(mant ? 0x7fffu : (sign | 0x7c00u))};  // NaN (canonical), inf
    if (e >= 31) return {(uint16_t)(sign | 0x7c00u)};
    if (e <= 0) {  // subnormal or zero
        if (e < -10) return {(uint16_t)sign};
        const uint32_t m = mant | 0x800000u;
        const int shift = 14 - e;
        uint32_t h = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1))) ++h;
        return {(uint16_t)(sign | h)};
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // a carry into the exponent is still right
    return {(uint16_t)h};
}
inline __half2 __floats2half2_rn(float lo, float hi) { return {__float2half_rn(lo), __float2half_rn(hi)}; }

template <> inline float emu::elem<__nv_bfloat16>(uint32_t pair, int half) {
    return __bfloat162float({(uint16_t)(pair >> (16 * half))});
}
template <> inline float emu::elem<__half>(uint32_t pair, int half) {
    return __half2float({(uint16_t)(pair >> (16 * half))});
}

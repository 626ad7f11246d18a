// kernels/fused.cu built for the CPU (see cuda_emu.h), as a shared library with one C entry point that launches a
// kernel by name with cuLaunchKernel's conventions: a grid, a block, and one pointer per kernel argument.
//
//   c++ -std=c++20 -O1 -shared -fPIC -pthread -fno-strict-aliasing -Ikernels/emu/include kernels/emu/emu.cpp
//
// tests/it/kernels_emulated.rs builds it and compares every kernel with its CPU reference in src/ops/reference.rs.
#include "cuda_emu.h"

#include "../fused.cu"

#include <functional>
#include <mutex>
#include <thread>
#include <string>
#include <utility>

namespace {

using Entry = std::function<void(void **)>;

template <typename... A, size_t... I> void call_with(void (*f)(A...), void **args, std::index_sequence<I...>) {
    f(*static_cast<A *>(args[I])...);
}

template <typename... A> Entry entry(void (*f)(A...)) {
    return [f](void **args) { call_with(f, args, std::index_sequence_for<A...>{}); };
}

#define E(NAME) {#NAME, entry(&NAME)},
#define EMU_ALL(S)                                                                                                \
    E(rmsnorm_hf_##S) E(swiglu_packed_##S) E(bias_add_##S) E(bias_residual_##S) E(qkv_rope_##S)                   \
    E(qkv_rope_f32rot_##S) E(decode_attn_d1_##S) E(decode_attn_d2_##S) E(decode_attn_d4_##S)                     \
    E(varlen_attn_d64_##S) E(varlen_attn_d80_##S) E(varlen_attn_d128_##S)
#define EMU_MMA(S) E(varlen_mma_d64_##S) E(varlen_mma_d80_##S) E(varlen_mma_d128_##S)

const std::map<std::string, Entry> &registry() {
    static const std::map<std::string, Entry> kernels = {EMU_ALL(f32) EMU_ALL(bf16) EMU_ALL(f16) EMU_MMA(bf16)
                                                             EMU_MMA(f16)};
    return kernels;
}

// One launch's kernel and arguments, run by every fiber.
struct Call {
    const Entry *kernel;
    void **args;
    static void run(void *self) {
        const Call *c = static_cast<const Call *>(self);
        (*c->kernel)(c->args);
    }
};

}  // namespace

// Run kernel `name` over grid[0..3] blocks of block[0..3] threads; args[i] points to the i-th argument's value.
// Each block runs on one OS thread with one fiber per CUDA thread; blocks are spread over a few OS threads.
// Returns 0, or 1 for an unknown kernel.
extern "C" int mre_emu_launch(const char *name, const unsigned *grid, const unsigned *block, void **args) {
    static std::mutex one_launch_at_a_time;
    std::lock_guard<std::mutex> lock(one_launch_at_a_time);
    const auto found = registry().find(name);
    if (found == registry().end()) return 1;
    const Entry *kernel = &found->second;
    emu::grid_dim = {grid[0], grid[1], grid[2]};
    emu::block_dim = {block[0], block[1], block[2]};
    const int threads = (int)(block[0] * block[1] * block[2]);
    const size_t blocks = (size_t)grid[0] * grid[1] * grid[2];
    // At most 8 workers: each maps two regions (guard page, stack) per fiber, and the kernel's map count is bounded.
    const size_t workers = std::min<size_t>({blocks, 8, std::max(1u, std::thread::hardware_concurrency())});
    std::atomic<size_t> next{0};
    Call call{kernel, args};
    std::vector<std::thread> pool;
    for (size_t w = 0; w < workers; ++w) {
        pool.emplace_back([&] {
            emu::Block b = emu::make_block(threads);
            for (size_t bi; (bi = next++) < blocks;) {
                const dim3 idx = {(unsigned)(bi % grid[0]), (unsigned)(bi / grid[0] % grid[1]),
                                  (unsigned)(bi / ((size_t)grid[0] * grid[1]))};
                emu::run_block(b, idx, &Call::run, &call);
            }
            emu::free_block(b);
        });
    }
    for (auto &t : pool) t.join();
    return 0;
}

// The kernels this library can launch, one name per line.
extern "C" const char *mre_emu_kernels() {
    static const std::string names = [] {
        std::string s;
        for (const auto &k : registry()) s += k.first + "\n";
        return s;
    }();
    return names.c_str();
}

// mbarriers and bulk copies (sm_90) for warp-specialized kernels: a ring of shared-memory stages,
// each gated by a `full` barrier (its copies landed) and an `empty` one (its readers are done).
// Used by mxfp4_gemm_sm90_pipe.cu and tools/floor_ladder.py's TMA rungs.
#pragma once

// A tensor map (CUtensorMap) taken by value as a `const __grid_constant__` kernel parameter;
// runtime.tensor_map_2d encodes it on the host.
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

__device__ __forceinline__ unsigned int mbar_addr(const void* p) { return (unsigned int)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(unsigned long long* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(mbar_addr(bar)), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrives once this thread's earlier cp.asyncs have landed (the count set at init includes it).
__device__ __forceinline__ void mbar_arrive_on_copies(unsigned long long* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(mbar_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" :: "r"(mbar_addr(bar)) : "memory");
}
// Arrives and adds `bytes` to the phase's expected transaction count (what the bulk copies that
// complete on this barrier will deliver).
__device__ __forceinline__ void mbar_arrive_expect_bytes(unsigned long long* bar, unsigned int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(mbar_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned int parity) {
    asm volatile("{\n.reg .pred done;\nwait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra wait_%=;\n}\n" :: "r"(mbar_addr(bar)), "r"(parity) : "memory");
}

// The box at (x: element along the row, y: row) of a 2-D tensor map into shared memory (128-byte
// aligned); completes on `bar`. Elements outside the tensor arrive as zeros and count as bytes.
__device__ __forceinline__ void tma_box(void* dst, const TensorMap& map, int x, int y, unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(mbar_addr(dst)), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y),
                    "r"(mbar_addr(bar)) : "memory");
}
// `bytes` (a multiple of 16) contiguous bytes into shared memory; completes on `bar`.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned int bytes, unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 :: "r"(mbar_addr(dst)), "l"(src), "r"(bytes), "r"(mbar_addr(bar)) : "memory");
}
// Bulk copy multicast: the same bytes land at dst's offset in the shared memory of every CTA of the
// cluster whose rank bit is set in `ctas`, each completing on the barrier at bar's offset there.
__device__ __forceinline__ void bulk_copy_multicast(void* dst, const void* src, unsigned int bytes,
                                                    unsigned long long* bar, unsigned short ctas) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1], %2, [%3], %4;\n"
                 :: "r"(mbar_addr(dst)), "l"(src), "r"(bytes), "r"(mbar_addr(bar)), "h"(ctas) : "memory");
}
// Arrives on the barrier at the same offset in the shared memory of cluster CTA `rank` (itself included).
// Default semantics (release at CTA scope), as CUTLASS's cluster barrier: a release at cluster scope
// costs a MEMBAR.GPU before every arrival, and a consumer releasing a stage has only read it.
__device__ __forceinline__ void mbar_arrive_cluster(unsigned long long* bar, unsigned int rank) {
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(mbar_addr(bar)), "r"(rank) : "memory");
}

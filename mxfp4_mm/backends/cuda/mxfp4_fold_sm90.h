// Folded-scale MXFP4 operands for bf16 tensor-core MMAs on Hopper, shared by mxfp4_gemm_sm90.cu
// (mma.sync) and mxfp4_gemm_sm90_pipe.cu (wgmma):
//   B: a nibble (s,e1,e0,m) placed as bf16 bits s<<15 | e1e0m<<6 is exactly e2m1 * 2^-126
//      (code 1 = 0.5 becomes a bf16 subnormal); one bf16x2 multiply by 2^(sb-64) scales it.
//   A: quantized bit-exactly (format.md §2) in bf16x2 arithmetic, then multiplied by
//      2^(sa-127) * 2^63, so both operands are normal bf16 and their products are exact in fp32
//      while B scale bytes are in [65, 191] (or 0) and A block exponents are <= 64. Out of that
//      range the fold and the multiplier give inf, so a kernel sees non-finite sums and takes its
//      exact fallback.
// Plus the few PTX wrappers both kernels use (cp.async, cluster shared memory).
#pragma once

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(u32 dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }

__device__ __forceinline__ uint4 ld_global_nc(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

__device__ __forceinline__ u32 mul_bf16x2(u32 a, u32 b) {
    u32 d;
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
    u32 d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

// Four fp32 results -> four bf16 (round to nearest even) in one 8-byte store: the C tile's writes.
__device__ __forceinline__ void store_bf16x4(u16* dst, float4 v) {
    uint2 out;
    out.x = pack_bf16x2(v.x, v.y);
    out.y = pack_bf16x2(v.z, v.w);
    *reinterpret_cast<uint2*>(dst) = out;
}

__device__ __forceinline__ u32 prmt(u32 a, u32 b, u32 sel) {
    u32 d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}
__device__ __forceinline__ u32 max_u16x2(u32 a, u32 b) {
    u32 d;
    asm("max.u16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ u32 add_bf16x2(u32 a, u32 b) {
    u32 d;
    asm("add.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ u32 sub_bf16x2(u32 a, u32 b) {
    u32 d;
    asm("sub.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ u32 clamp6_bf16x2(u32 a) {
    u32 d;
    asm("min.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(0x40C040C0u));
    asm("max.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(d), "r"(0xC0C0C0C0u));
    return d;
}

// ---- B: packed nibbles -> bf16 pairs -------------------------------------------------------

// Nibbles (a, a+4) of w as bf16x2 raw values e2m1 * 2^-126 (sign at bit 15, code at bits 6..8).
template <int A>
__device__ __forceinline__ u32 nibble_pair(u32 w) {
    const u32 mag = (A == 0 ? w << 6 : A == 1 ? w << 2 : A == 2 ? w >> 2 : w >> 6) & 0x01C001C0u;
    const u32 sgn = (A == 0 ? w << 12 : A == 1 ? w << 8 : A == 2 ? w << 4 : w) & 0x80008000u;
    return mag | sgn;
}

// bf16x2 multiplier 2^(s-64) in both halves; inf for s >= 192 (not representable), which makes
// the CTA's sums non-finite and sends it to the exact fallback.
__device__ __forceinline__ u32 b_scale_multiplier(u32 s) {
    return (min(s, 192u) + 63u) * 0x00800080u;
}

// ---- A: format.md §2 quantization in bf16x2 arithmetic ---------------------------------------

// 2^-e in both halves, for a block exponent e (kernels/mxfp4_exact.h's block_exponent).
__device__ __forceinline__ u32 a_inverse_scale(int e) {
    return (u32)max(127 - e, 0) * 0x00800080u;
}

// q = x / 2^e (a bf16 pair) rounded onto the e2m1 grid: (q + magic) - magic, where
// magic = 1.5 * 2^(binade + 6) has the grid step as its bf16 ulp (0.5 below 2, then 1, then 2);
// the add rounds to nearest even, as format.md §2 asks; then clamped to +-6.
__device__ __forceinline__ u32 round_e2m1_bf16x2(u32 q) {
    const u32 magic = max_u16x2(q & 0x7F807F80u, 0x3F803F80u) + 0x03400340u;
    return clamp6_bf16x2(sub_bf16x2(add_bf16x2(q, magic), magic));
}

// 2^(e+63) in both halves: the fold of A's scale into its operand; inf when e > 64 (not
// representable), which sends the CTA to the exact fallback.
__device__ __forceinline__ u32 a_fold(int e) {
    return (u32)min(e + 190, 255) * 0x00800080u;
}

// ---- thread-block clusters (split-K partial sums, shared A) ---------------------------------

__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// Without release semantics (no MEMBAR.GPU waiting for the thread's global stores): for a barrier
// that only keeps shared memory alive until the peers' reads, whose values were already used.
__device__ __forceinline__ void cluster_sync_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}
__device__ __forceinline__ u32 cluster_addr(u32 local_addr, u32 rank) {
    u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local_addr), "r"(rank));
    return remote;
}
__device__ __forceinline__ void st_cluster_u4(u32 local_addr, u32 rank, uint4 v) {
    asm volatile("st.shared::cluster.v4.u32 [%0], {%1,%2,%3,%4};\n"
                 :: "r"(cluster_addr(local_addr, rank)), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ float4 ld_cluster_f4(u32 local_addr, u32 rank) {
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(cluster_addr(local_addr, rank)) : "memory");
    return v;
}

// Split-K epilogue shared by the pipe and fp8 kernels: the RANKS partial tiles of a cluster (ROWS x COLS
// fp32 at `part`, ROW_FLOATS floats a row, at the same offset in every rank's shared memory) summed in
// rank order (deterministic) and stored as bf16 to c[(m0 + row) * ldc + n0 + col]. Each rank stores its
// share of the tile's float4 columns; rows >= m_size and columns >= n_size are not stored. RANKS = 1
// reads the CTA's own tile. Split s is cluster rank rank0 + s * RANK_STEP (clusters that also span
// other tiles). The caller's barrier (cluster or CTA) must come first.
template <int RANKS, int ROWS, int COLS, int ROW_FLOATS, int THREADS, int RANK_STEP = 1>
__device__ __forceinline__ void store_split_sum(const float* part, u16* c, int ldc, int m0, int n0, int m_size,
                                                int n_size, int split, int tid, int rank0 = 0) {
    constexpr int F4 = ROWS * COLS / 4;
    const int f_begin = split * F4 / RANKS, f_end = (split + 1) * F4 / RANKS;
    for (int f = f_begin + tid; f < f_end; f += THREADS) {
        const int ml = f / (COLS / 4), nl = (f % (COLS / 4)) * 4;
        const int gm = m0 + ml, gn = n0 + nl;
        if (gm >= m_size) continue;  // (cluster peers are only read below: no barrier in this loop)
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
        const float* p = part + ml * ROW_FLOATS + nl;
#pragma unroll
        for (int s = 0; s < RANKS; ++s) {
            float4 v;
            if constexpr (RANKS > 1) v = ld_cluster_f4(smem_addr(p), (u32)(rank0 + s * RANK_STEP));
            else v = *reinterpret_cast<const float4*>(p);
            sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
        }
        if (gn < n_size) store_bf16x4(c + (size_t)gm * ldc + gn, sum);
    }
}

// Both operands to bf16 in one launch, for a cuBLAS bf16 GEMM after it (the cuda backend's
// DequantPlan): B [N, K] = e2m1 * 2^(s-127) from B_q and the shuffled scales, A [M, K] =
// dequant(quant(A)) (format.md §2). Every value is exact in bf16, as in the fp32 reference: a B
// value or a quantized A value has two significant bits and an exponent in [-128, 129], so
// overflow (inf) and NaN scales come out as the reference's fp32 gives them.
//
// One thread per 32-value block: B blocks first (16 code bytes in, 64 bytes out), then A blocks
// (64 bytes in and out). Compile-time: GK (K). M and N are launch arguments.

#include "mxfp4_exact.h"
#include "mxfp4_fold_sm90.h"

#ifndef GK
#define GK 512
#endif

constexpr int KBLOCKS = GK / 32;
constexpr int SCOLS = (KBLOCKS + 7) / 8 * 8;  // columns of the shuffled scale tensor

__device__ __forceinline__ int scale_index(int r, int c) {  // format.md §3
    return (r >> 5) * SCOLS * 32 + (c >> 3) * 256 + (c & 3) * 64 + (r & 15) * 4 + ((c & 7) >> 2) * 2 + ((r & 31) >> 4);
}

// Codes of byte b of w (values 2b, 2b+1) as a bf16 pair e2m1 * 2^-126 (sign at bit 15 / 31).
__device__ __forceinline__ u32 byte_pair(u32 w, int b) {
    const u32 x = (w >> (8 * b)) & 0xFFu;
    return (x & 7u) << 6 | (x & 0x70u) << 18 | (x & 8u) << 12 | (x & 0x80u) << 24;
}

// 2^(s-127) in both bf16 halves (s = 0: the subnormal 2^-127), NaN for s = 255.
__device__ __forceinline__ u32 scale_pair(u32 s) {
    return s == 255u ? 0x7FC07FC0u : s == 0u ? 0x00400040u : s * 0x00800080u;
}

__device__ void dequantize_b_block(const u8* __restrict__ b_q, const u8* __restrict__ b_scale_sh, u16* __restrict__ b_out,
                                   int n, int kb) {
    const uint4 codes = ld_global_nc(b_q + (size_t)n * (GK / 2) + kb * 16);
    const u32 mult = scale_pair(b_scale_sh[scale_index(n, kb)]);
    constexpr u32 two_126 = 0x7E807E80u;  // e2m1 * 2^-126 * 2^126: exact, also for the subnormal 0.5
    const u32 words[4] = {codes.x, codes.y, codes.z, codes.w};
    uint4* dst = reinterpret_cast<uint4*>(b_out + (size_t)n * GK + kb * 32);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        u32 v[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) v[b] = mul_bf16x2(mul_bf16x2(byte_pair(words[q], b), two_126), mult);
        dst[q] = make_uint4(v[0], v[1], v[2], v[3]);
    }
}

__device__ void dequantize_a_block(const u16* __restrict__ a, u16* __restrict__ a_out, int m, int kb) {
    const uint4* src = reinterpret_cast<const uint4*>(a + (size_t)m * GK + kb * 32);
    uint4 raw[4];
    u32 amax = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        raw[q] = ld_global_nc(src + q);
        const u32 w[4] = {raw[q].x, raw[q].y, raw[q].z, raw[q].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) amax = max(amax, max(w[j] & 0x7FFFu, (w[j] >> 16) & 0x7FFFu));  // NaN sorts last
    }
    const int e = block_exponent(amax);
    uint4* dst = reinterpret_cast<uint4*>(a_out + (size_t)m * GK + kb * 32);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const u32 w[4] = {raw[q].x, raw[q].y, raw[q].z, raw[q].w};
        u32 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = pack_bf16x2(quant_dequant(w[j] & 0xFFFFu, e), quant_dequant(w[j] >> 16, e));
        dst[q] = make_uint4(v[0], v[1], v[2], v[3]);
    }
}

extern "C" __global__ void __launch_bounds__(256)
mxfp4_dequantize_operands(const u16* __restrict__ a, const u8* __restrict__ b_q, const u8* __restrict__ b_scale_sh,
                          u16* __restrict__ a_out, u16* __restrict__ b_out, const int m_size, const int n_size) {
    const long long b_blocks = (long long)n_size * KBLOCKS, blocks = b_blocks + (long long)m_size * KBLOCKS;
    for (long long u = blockIdx.x * 256ll + threadIdx.x; u < blocks; u += (long long)gridDim.x * 256) {
        if (u < b_blocks) {
            dequantize_b_block(b_q, b_scale_sh, b_out, (int)(u / KBLOCKS), (int)(u % KBLOCKS));
        } else {
            const long long v = u - b_blocks;
            dequantize_a_block(a, a_out, (int)(v / KBLOCKS), (int)(v % KBLOCKS));
        }
    }
}

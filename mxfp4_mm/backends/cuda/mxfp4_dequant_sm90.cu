// Both operands to bf16 in one launch, for a cuBLAS bf16 GEMM after it (the cuda backend's
// DequantPlan): B [N, K] = e2m1 * 2^(s-127) from B_q and the shuffled scales, A [M, K] =
// dequant(quant(A)) (format.md §2). Every value is exact in bf16, as in the fp32 reference: a B
// value or a quantized A value has two significant bits and an exponent in [-128, 129], so
// overflow (inf) and NaN scales come out as the reference's fp32 gives them.
//
// A thread per 8 values, so every warp access is contiguous: B units (4 code bytes in, 16 bytes out;
// a warp stores 512 bytes at once), then A units (16 bytes in and out), 4 lanes per 32-value block
// sharing its amax through two shuffles. Compile-time: GK (K). M and N are launch arguments.

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

constexpr int UNITS_PER_ROW = GK / 8;  // 8-value units of a row of B or A

// B unit u: values 8j..8j+7 of row n, inside block j/4.
__device__ __forceinline__ void dequantize_b_unit(const u8* __restrict__ b_q, const u8* __restrict__ b_scale_sh,
                                                  u16* __restrict__ b_out, long long u) {
    const int n = (int)(u / UNITS_PER_ROW), j = (int)(u % UNITS_PER_ROW);
    const u32 codes = __ldg(reinterpret_cast<const u32*>(b_q + (size_t)n * (GK / 2)) + j);
    const u32 mult = scale_pair(__ldg(b_scale_sh + scale_index(n, j >> 2)));
    constexpr u32 two_126 = 0x7E807E80u;  // e2m1 * 2^-126 * 2^126: exact, also for the subnormal 0.5
    u32 v[4];
#pragma unroll
    for (int b = 0; b < 4; ++b) v[b] = mul_bf16x2(mul_bf16x2(byte_pair(codes, b), two_126), mult);
    *reinterpret_cast<uint4*>(b_out + (size_t)n * GK + j * 8) = make_uint4(v[0], v[1], v[2], v[3]);
}

// A unit u (valid or not: every lane of the warp joins the block's shuffles); lanes 4i..4i+3 hold
// one 32-value block, since u is warp-aligned at its base and a row has a multiple of 8 units.
__device__ __forceinline__ void dequantize_a_unit(const u16* __restrict__ a, u16* __restrict__ a_out, long long u,
                                                  bool valid) {
    const size_t offset = (size_t)(u / UNITS_PER_ROW) * GK + (size_t)(u % UNITS_PER_ROW) * 8;
    const uint4 raw = valid ? ld_global_nc(a + offset) : make_uint4(0u, 0u, 0u, 0u);
    const u32 w[4] = {raw.x, raw.y, raw.z, raw.w};
    u32 amax = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) amax = max(amax, max(w[j] & 0x7FFFu, (w[j] >> 16) & 0x7FFFu));  // NaN sorts last
    amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
    amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
    const int e = block_exponent(amax);
    u32 v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = pack_bf16x2(quant_dequant(w[j] & 0xFFFFu, e), quant_dequant(w[j] >> 16, e));
    if (valid) *reinterpret_cast<uint4*>(a_out + offset) = make_uint4(v[0], v[1], v[2], v[3]);
}

extern "C" __global__ void __launch_bounds__(256)
mxfp4_dequantize_operands(const u16* __restrict__ a, const u8* __restrict__ b_q, const u8* __restrict__ b_scale_sh,
                          u16* __restrict__ a_out, u16* __restrict__ b_out, const int m_size, const int n_size) {
    const long long b_units = (long long)n_size * UNITS_PER_ROW, a_units = (long long)m_size * UNITS_PER_ROW;
    const long long first = blockIdx.x * 256ll + threadIdx.x, step = (long long)gridDim.x * 256;
    for (long long u = first; u < b_units; u += step) dequantize_b_unit(b_q, b_scale_sh, b_out, u);
    // A: the loop runs from the warp's first lane, so all 32 lanes take the same trips
    const int lane = threadIdx.x & 31;
    for (long long base = first - lane; base < a_units; base += step)
        dequantize_a_unit(a, a_out, base + lane, base + lane < a_units);
}

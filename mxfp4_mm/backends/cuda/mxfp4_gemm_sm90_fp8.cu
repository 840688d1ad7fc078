// a4w4 MXFP4 GEMM for Hopper (sm_90a) on e4m3 tensor cores: C[M,N] = dq(q(A)) @ dq(B)^T in two
// launches, the second a programmatic dependent of the first.
//
// Why e4m3: every e2m1 value times 2^d is an exact e4m3 normal for d in [-5, 6] (0.5 * 2^-5 = 2^-6 is
// e4m3's smallest normal, 6 * 2^6 = 384 <= 448). So a row whose blocks' scales lie within 11 of its
// largest is exactly (e4m3 values) x 2^(row exponent), the per-block scales fold into the bytes, and
// one k32 e4m3 wgmma covers a block. The epilogue multiplies by 2^(A row exponent + B row exponent).
//
// 1. mxfp4_quant_a_e4m3 (one CTA per row of A, a thread per 8 values): aiter's quantization
//    (format.md §2, bit-exact), then the codes as e4m3 with the row's offset, written in the GEMM's
//    chunk layout so that a chunk of A is one contiguous bulk copy; a_exp[m] = the row's exponent, or
//    ROW_INEXACT when the row does not fold (a block more than 11 binades below the row's largest,
//    an exponent out of [-64, 64], NaN or inf).
// 2. mxfp4_gemm_fp8 (one CTA per 64 rows of B, MP rows of A and K range: SPLITK CTAs along K form
//    a cluster and sum their partial tiles in rank order through distributed shared memory): a copy
//    warp fills a ring of chunks (B codes through a tensor map with the 128-byte swizzle, A's e4m3 chunk by a
//    bulk copy issued after griddepcontrol.wait, so B's first two chunks are in flight while A is
//    quantized, and the ring's other first stages are filled after A's first chunks; the tile's row
//    exponents come the same way, so only the copy warp waits for that grid; with MC > 1, MC CTAs of
//    neighbouring B tiles form a cluster along x and each copies 1/MC of every A chunk to all of them
//    by multicast, so A leaves L2 once per MC tiles, and a stage is refilled once the consumers of
//    all MC CTAs released it). CG consumer warpgroups each
//    take NB / CG of a chunk's 32-value blocks: they convert those blocks' B codes to e4m3 straight
//    into the wgmma's A registers (a byte lookup by prmt per 4 codes; B rows = wgmma M, the tokens =
//    its N, from shared memory), so B's converted bytes never go back to shared memory and no barrier
//    or proxy fence stands between the conversion and the MMAs. A's K order inside a chunk is the one
//    these register fragments take (a_permuted_offset). One warpgroup leaves one converting warp per
//    scheduler; more share the conversion, each its own blocks, and their partial tiles are added in
//    warpgroup order at the end.
//    A warpgroup's MMAs accumulate into a partial sum that is added to fp32 registers every CG chunks
//    (its blocks of them: KC values), so Hopper's reduced-precision fp8 accumulation spans at most KC
//    values whatever CG is, and the promotion's adds do not grow with it.
//    A tile that does not fold (its B rows' scale bytes spread by more than 11, out of [63, 191], or
//    an inexact A row) is recomputed in plain fp32 from A and B (`exact_partial`). Every CTA of a
//    cluster reaches the same verdict: the B verdict reads the rows' scales over all of K.
//
// Layouts (A's wgmma operand K-major without swizzle: 8-row x 16-byte core matrices, LBO = the
// bytes between k16 groups, SBO = 128 between 8-row groups):
//   A e4m3 in global memory: [M tile][chunk][k16 group][MP rows] x 16 B, K permuted inside a chunk
//   (a_permuted_offset); in a stage: one (M tile, chunk);
//   B converted: in registers, two sets (the chunk converted, the chunk multiplied);
//   B codes as the tensor map lands them: 64 rows x 128 B, 16-byte unit u of row r at r*128 + (u ^ r%8)*16;
//   B converted ahead (AHEAD): [chunk][k16 group][64 rows] x 16 B, A's K order (store_fragments).
//
// Compile-time configuration (-D): GN GK (shape), MP (rows of A per CTA: the wgmma n, 8..128),
// STAGES (ring slots), SPLITK (CTAs along K, one cluster), CG (consumer warpgroups: 1, 2, 4), MC (B
// tiles sharing A's copies by multicast: 1, 2, 4; the grid's x a multiple of it), AHEAD (a CTA's first
// AHEAD chunks of B converted into shared memory before A is waited for). M is a launch argument; the
// grid's z covers it in tiles of MP rows.
//
// AHEAD is for small M and long K, where A (behind B's copies and the quantization grid) lands
// microseconds after B's first chunks while the loop, latency-bound on B's conversion, waits for it:
// the first chunks' conversion runs while A is on its way, and their MMAs (from shared memory) take
// little once A is there; the other chunks go through the ring as without AHEAD. The shared memory
// bounds AHEAD (16 KB of converted B and MP x 256 B of A a chunk); converting all of a CTA's range
// needed splits whose clusters did not all fit on the GPU at once (notes/cuda.md).

#ifndef GN
#define GN 7168
#define GK 2048
#define MP 64
#define STAGES 6
#endif
#ifndef SPLITK
#define SPLITK 1
#endif
#ifndef CG
#define CG 1
#endif
#ifndef MC
#define MC 1
#endif
#ifndef AHEAD
#define AHEAD 0
#endif
#ifndef CV
#define CV 0
#endif

#include "mxfp4_exact.h"
#include "mxfp4_fold_sm90.h"
#include "tma_sm90.h"
#include "wgmma_sm90a.h"

typedef unsigned long long u64;

constexpr int KC = 256;                            // K per chunk: a B box row is 128 bytes, the swizzle's span
constexpr int BN = 64;                             // rows of B per CTA: one m64 wgmma tile
constexpr int KBLOCKS = GK / 32;
constexpr int SCOLS = (KBLOCKS + 7) / 8 * 8;       // columns of the shuffled scale tensor
constexpr int CHUNKS = GK / KC;
constexpr int NB = KC / 32;                        // blocks per chunk
constexpr int B_BOX = BN * KC / 2;                 // a chunk's B codes
constexpr int A_CHUNK = MP * KC;                   // a chunk's A bytes (e4m3)
constexpr int STAGE = B_BOX + A_CHUNK;
constexpr int BX_CHUNK = BN * KC;                  // a chunk of B converted to e4m3 (AHEAD)
constexpr int A_SLICE = A_CHUNK / MC;              // the part of an A chunk each CTA of a multicast group copies
constexpr int GROUP_SCALES = SCOLS * 32;           // the scale bytes of one 32-row group of B
constexpr int WG = 128;                            // threads of a warpgroup
constexpr int CONSUMERS = CG * WG;                 // the warpgroups that convert B
// CV > 0: the converters store B's e4m3 chunks to a ring of CV slots, one more warpgroup multiplies
// them (and A, in a ring of as many slots) from shared memory, and B and A have a copy warp each.
constexpr int WORKERS = CONSUMERS + (CV ? WG : 0);
constexpr int NTHREADS = WORKERS + (CV ? 64 : 32);  // + the copy warp(s)
constexpr int MMA_WGS = CV ? 1 : CG;               // the warpgroups that hold accumulators
constexpr int B_STRIDE = CV ? B_BOX : STAGE;       // between B's slots in the ring
constexpr int WG_BLOCKS = NB / CG;                 // a warpgroup's blocks of each chunk
constexpr int ROW_INEXACT = -1000;
constexpr int P_STRIDE = BN + 4;                   // floats per row of the partial tile (conflict-free stores)
// B's chunks copied before the grid-dependency wait; the ring's other first stages follow A's first
// chunks. B's bytes in flight delay that grid's completion as this CTA sees it (H100: the wait passed
// ~1.4 us after the grid's end with 2 stages in flight, ~2.2 with 4, ~3.0 with 10), and A then lands
// 0.3 us after the wait.
constexpr int B_BEFORE_A = 2;  // at most STAGES (static_assert: STAGES >= 2)
// Dynamic shared memory: STAGES * B_STRIDE + (AHEAD + CV) * (BX_CHUNK + A_CHUNK) + 2 * GROUP_SCALES
// + 1024 (plans.py's fp8_smem_bytes).

static_assert(GK % KC == 0, "GK: whole chunks");
static_assert(MP % 8 == 0 && MP >= 8 && MP <= 128, "MP: a wgmma n with a wrapper");
static_assert(MP == 8 || MP == 16 || MP == 32 || MP == 64 || MP == 128, "MP: a wrapper of wgmma_sm90a.h");
static_assert(STAGE % 1024 == 0, "stages stay 1024-byte aligned (the 128-byte swizzle)");
static_assert(STAGES >= 2 && STAGES <= 16, "STAGES");
static_assert(MP * P_STRIDE * 4 <= STAGES * B_STRIDE + CV * (BX_CHUNK + A_CHUNK), "the partial tile fits the rings");
static_assert(SPLITK >= 1 && SPLITK <= 8 && SPLITK <= CHUNKS, "SPLITK");
static_assert(CG == 1 || CG == 2 || CG == 4, "CG: divides a chunk's blocks and its conversion items");
static_assert((MC == 1 || MC == 2 || MC == 4) && MC * SPLITK <= 8, "MC: a cluster of at most 8 CTAs");
// Every CTA has chunks left for the ring after its AHEAD ones (the fewest a CTA takes: CHUNKS / SPLITK).
static_assert(AHEAD >= 0 && AHEAD < CHUNKS / SPLITK && (AHEAD == 0 || MC == 1), "AHEAD: A's ahead chunks copied whole by each CTA");
static_assert(CV >= 0 && CV <= 16 && (CV == 0 || (MC == 1 && AHEAD == 0)), "CV: one CTA's copies, no chunks ahead");
// A stage's consumers release it: every thread (MC = 1), or lane 0 of every warp of each CTA of the
// multicast group on every CTA's barrier (MC > 1).
constexpr int EMPTY_ARRIVALS = MC == 1 ? CONSUMERS : MC * CONSUMERS / 32;

#if SPLITK > 1 || MC > 1
#define CLUSTER_ATTR __cluster_dims__(MC, SPLITK, 1)
#else
#define CLUSTER_ATTR
#endif

__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
// 2^p for p in [-126, 127] (the folded rows' exponents: A's in [-64, 64], B's b_max - 139 in [-76, 52]).
__device__ __forceinline__ float pow2_normal(int p) { return __int_as_float((p + 127) << 23); }
__device__ __forceinline__ void workers_sync() { asm volatile("bar.sync 1, %0;\n" :: "n"(WORKERS) : "memory"); }
__device__ __forceinline__ void warpgroup_sync(int wg) { asm volatile("bar.sync %0, %1;\n" :: "r"(2 + wg), "n"(WG) : "memory"); }

// e4m3 bytes of the e2m1 magnitudes 0..7 times 2^d (d in [-5, 6]): exponent field + d. Code 0 stays 0.
__device__ __forceinline__ u32 e4m3_lut_lo(int d) { return 0x3C383000u + (u32)(8 * d) * 0x01010100u; }
__device__ __forceinline__ u32 e4m3_lut_hi(int d) { return 0x4C484440u + (u32)(8 * d) * 0x01010101u; }
// Eight e2m1 codes (a word, first value lowest) -> eight e4m3 bytes (two words): per 4 codes one prmt
// looks up the magnitudes and one makes the sign bytes. prmt reads only its selector's low 16 bits, so
// the word's selectors are masked once and the high half's are shifted down (11 instructions a word).
__device__ __forceinline__ uint2 e2m1x8_to_e4m3(u32 w, u32 lo, u32 hi) {
    const u32 magnitude = w & 0x77777777u, sign = (w >> 3) & 0x11111111u;
    return make_uint2(prmt(lo, hi, magnitude) | prmt(0x8000u, 0u, sign),
                      prmt(lo, hi, magnitude >> 16) | prmt(0x8000u, 0u, sign >> 16));
}

// Four floats (exact e4m3 values) -> their e4m3 bytes, the first lowest.
__device__ __forceinline__ u32 e4m3x4(float v0, float v1, float v2, float v3) {
    u32 out;
    asm("{\n.reg .b16 lo, hi;\n"
        "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
        "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
        "mov.b32 %0, {lo, hi};\n}\n" : "=r"(out) : "f"(v0), "f"(v1), "f"(v2), "f"(v3));
    return out;
}

// ---- 1. A: quantized once per call -----------------------------------------------------------

// Byte offset of (row m, k16 group g of K) in the chunk layout.
__device__ __forceinline__ int a_offset(int m, int g) {
    return (((m / MP * CHUNKS + g / (KC / 16)) * (KC / 16) + g % (KC / 16)) * MP + m % MP) * 16;
}

// K inside a chunk runs in the order the GEMM's B fragments take it (a dot product does not mind the
// order, as long as A and B share it): the wgmma k32 step s, thread t = lane % 4 holds K bytes 4t..4t+3
// and 16+4t..16+4t+3 of it, and those are code word w = s % 4 of block b = 4 (s / 4) + t: one thread
// reads whole 16-byte code units of B. So word w of block b (values 8w..8w+7) lands in k16 groups 2s
// (its first 4 values) and 2s + 1 (its last 4), bytes 4t.., with s = 4 (b / 4) + w.
__device__ __forceinline__ int a_permuted_offset(int m, int block, int word, int half) {
    const int chunk = block / NB, b = block % NB, s = 4 * (b / 4) + word;
    return a_offset(m, chunk * (KC / 16) + 2 * s + half) + 4 * (b % 4);
}

// A thread per 8 values (a code word), so a row's CTA has 4 threads per 32-value block, each with a
// quarter of the rounding chain (with a thread per block, ~690 instructions a thread at a warp or two a
// scheduler). A block's 4 words sit in 4 neighbouring lanes and exchange their maximum by shuffles.
// QUANT_THREADS is the launch's block (plans.py's fp8_quant_threads), QW words a thread.
constexpr int QUANT_WORDS = GK / 8;
constexpr int QW = (QUANT_WORDS + QUANT_THREADS - 1) / QUANT_THREADS;
static_assert(QUANT_THREADS % 32 == 0 && QUANT_THREADS <= 1024, "whole warps (a block's 4 words in one warp)");

extern "C" __global__ void __launch_bounds__(1024)
mxfp4_quant_a_e4m3(const u16* __restrict__ a, u8* __restrict__ a_e4m3, int* __restrict__ a_exp, int m_size) {
    griddep_launch_dependents();  // the GEMM's CTAs may start now: they wait for this grid's writes
    __shared__ int row_max, row_inexact;
    const int m = blockIdx.x, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) { row_max = -127; row_inexact = 0; }
    __syncthreads();
    uint4 v[QW];
    u32 amax[QW];
    int e_max = -127;
#pragma unroll
    for (int j = 0; j < QW; ++j) {
        const int word = j * QUANT_THREADS + threadIdx.x;
        v[j] = make_uint4(0, 0, 0, 0);  // words past the row and rows from m_size to the tile's end: zeros
        if (word < QUANT_WORDS && m < m_size) v[j] = ld_global_nc(a + (size_t)m * GK + word * 8);
        const u32 pair = max_u16x2(max_u16x2(v[j].x & 0x7FFF7FFFu, v[j].y & 0x7FFF7FFFu),
                                   max_u16x2(v[j].z & 0x7FFF7FFFu, v[j].w & 0x7FFF7FFFu));
        u32 x = max(pair & 0xFFFFu, pair >> 16);  // bf16 magnitudes order like unsigned integers; NaN sorts last
        x = max(x, __shfl_xor_sync(0xFFFFFFFFu, x, 1));  // the block's 4 words: lanes 4b..4b+3
        amax[j] = max(x, __shfl_xor_sync(0xFFFFFFFFu, x, 2));
        e_max = max(e_max, block_exponent(amax[j]));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) e_max = max(e_max, __shfl_xor_sync(0xFFFFFFFFu, e_max, o));
    if (lane == 0) atomicMax(&row_max, e_max);
    __syncthreads();
    const int emax = row_max;
#pragma unroll
    for (int j = 0; j < QW; ++j) {
        const int word = j * QUANT_THREADS + threadIdx.x, e = block_exponent(amax[j]), d = e - emax + 6;
        if (amax[j] != 0 && d < -5) row_inexact = 1;  // zeros where no value is: no false verdicts
        const u32 w[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
        // each value rounded as the reference rounds it (e2m1_round), times 2^d: an exact e4m3 value
        const float inverse = pow2_exact(-e), step = pow2_exact(max(d, -5));
        float q[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float x = __uint_as_float(i & 1 ? w[i / 2] & 0xFFFF0000u : w[i / 2] << 16) * inverse;
            q[i] = copysignf(e2m1_round(fabsf(x)), x) * step;
        }
        if (word < QUANT_WORDS) {
            const int blk = word / 4, wi = word % 4;
            *reinterpret_cast<u32*>(a_e4m3 + a_permuted_offset(m, blk, wi, 0)) = e4m3x4(q[0], q[1], q[2], q[3]);
            *reinterpret_cast<u32*>(a_e4m3 + a_permuted_offset(m, blk, wi, 1)) = e4m3x4(q[4], q[5], q[6], q[7]);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        // an all-zero row folds at any exponent; NaN/inf blocks have exponent 127
        const bool folds = !row_inexact && (emax == -127 || (emax >= -64 && emax <= 64));
        a_exp[m] = m >= m_size ? 0 : !folds ? ROW_INEXACT : emax == -127 ? 0 : emax;
    }
}

// ---- 2. the GEMM --------------------------------------------------------------------------------

// Byte of scale (row r, block c) in the shuffled scale tensor (format.md §3); the CTA's copy of its two
// 32-row groups has the same layout, so local rows index it too.
__device__ __forceinline__ int scale_index(int r, int c) {
    return (r >> 5) * GROUP_SCALES + (c >> 3) * 256 + (c & 3) * 64 + (r & 15) * 4 + ((c & 7) >> 2) * 2 + ((r & 31) >> 4);
}

// Largest and smallest scale byte of every row of the tile: thread t reads the words holding
// (rows r, r+16 of its 32-row group) x (blocks q, q+4 of every 8), atomics combine its 4 q's.
__device__ __forceinline__ void scale_range(const u8* scales, int* b_max, int* b_min, int t) {
    const int r16 = t & 15, q = (t >> 4) & 3, g = t >> 6;
    int hi0 = 0, hi1 = 0, lo0 = 255, lo1 = 255;
    for (int o = 0; o < SCOLS / 8; ++o) {
        const u32 w = *reinterpret_cast<const u32*>(scales + g * GROUP_SCALES + o * 256 + q * 64 + r16 * 4);
        const int c = 8 * o + q;
        if (c < KBLOCKS) {
            hi0 = max(hi0, (int)(w & 0xFF)); lo0 = min(lo0, (int)(w & 0xFF));
            hi1 = max(hi1, (int)(w >> 8 & 0xFF)); lo1 = min(lo1, (int)(w >> 8 & 0xFF));
        }
        if (c + 4 < KBLOCKS) {
            hi0 = max(hi0, (int)(w >> 16 & 0xFF)); lo0 = min(lo0, (int)(w >> 16 & 0xFF));
            hi1 = max(hi1, (int)(w >> 24)); lo1 = min(lo1, (int)(w >> 24));
        }
    }
    atomicMax(&b_max[g * 32 + r16], hi0); atomicMin(&b_min[g * 32 + r16], lo0);
    atomicMax(&b_max[g * 32 + r16 + 16], hi1); atomicMin(&b_min[g * 32 + r16 + 16], lo1);
}

// A thread's B fragments: the warpgroup's WG_BLOCKS k32 steps of a chunk, each the wgmma's 4 registers
// (rows g and g + 8 of the warp's 16, K bytes 4t.. and 16 + 4t..: wgmma_rs_e4m3). With A's K order
// (a_permuted_offset), step s of the thread is code word s % 4 of 16-byte unit s / 4, so a thread reads
// UNITS whole units a row (block 4 (b0 / 4 + u) + t, from word b0 % 4) and converts them in registers:
// B never goes back to shared memory. Addresses, scale indices and the rows' largest scales are worked
// out once, before the chunk loop (a chunk further on, the scale index moves by 256: format.md §3's
// 8-column groups).
constexpr int UNITS = (WG_BLOCKS + 3) / 4;             // code units a thread reads per row and chunk
constexpr int WORDS = WG_BLOCKS < 4 ? WG_BLOCKS : 4;   // words of each it converts
static_assert(NB == 8, "a chunk is one 8-column group of the scale layout: the next chunk's index is 256 on");
static_assert(UNITS * WORDS == WG_BLOCKS, "a warpgroup's steps are whole words of whole units");
struct BFragments {
    int codes[2][UNITS];  // in a stage: the unit's first word, swizzled as the tensor map lands it
    int scale[2][UNITS];  // in the CTA's scales: (row, unit's block of the CTA's first chunk)
    int shift[2];         // 6 - the row's largest scale byte (d = scale + shift, at least -5)
};
typedef u32 Fragments[WG_BLOCKS][4];

__device__ __forceinline__ BFragments b_fragments(const int* b_max, int first_chunk, int b0, int wt) {
    BFragments f;
    const int t = wt & 3, g = (wt & 31) >> 2, warp_rows = 16 * (wt >> 5);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = warp_rows + g + 8 * h;
#pragma unroll
        for (int u = 0; u < UNITS; ++u) {
            const int b = 4 * (b0 / 4 + u) + t;
            f.codes[h][u] = r * 128 + ((b ^ (r & 7)) * 16) + 4 * (b0 % 4);
            f.scale[h][u] = scale_index(r, first_chunk * NB + b);
        }
        f.shift[h] = 6 - b_max[r];
    }
    return f;
}

// A warpgroup's B fragments of the CTA's lc-th chunk: B codes -> e4m3, straight into registers.
__device__ __forceinline__ void convert_b_fragments(const BFragments& f, const u8* codes, const u8* scales, int lc,
                                                    Fragments& frag) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int u = 0; u < UNITS; ++u) {
            u32 w[WORDS];
            if constexpr (WORDS == 4) {
                const uint4 x = *reinterpret_cast<const uint4*>(codes + f.codes[h][u]);
                w[0] = x.x; w[1] = x.y; w[2] = x.z; w[3] = x.w;
            } else {
                const uint2 x = *reinterpret_cast<const uint2*>(codes + f.codes[h][u]);
                w[0] = x.x; w[1] = x.y;
            }
            const int d = max((int)scales[f.scale[h][u] + lc * 256] + f.shift[h], -5);
            const u32 lo = e4m3_lut_lo(d), hi = e4m3_lut_hi(d);
#pragma unroll
            for (int j = 0; j < WORDS; ++j) {
                const uint2 e = e2m1x8_to_e4m3(w[j], lo, hi);
                frag[WORDS * u + j][h] = e.x;
                frag[WORDS * u + j][2 + h] = e.y;
            }
        }
}

// AHEAD: a thread's fragments into the converted chunk, where a no-swizzle K-major wgmma operand reads
// them back as the same matrix: [k16 group][64 rows] x 16 bytes (A's chunk layout with 64 rows). Step
// s's a[0] (row g, K bytes 4t..) goes to k16 group 2s, a[1] to row g + 8, a[2] and a[3] to group 2s + 1.
// Eight rows of one 4-byte column a warp's store: every bank once.
__device__ __forceinline__ void store_fragments(u8* chunk, const Fragments& frag, int b0, int wt) {
    const int t = wt & 3, row = 16 * (wt >> 5) + ((wt & 31) >> 2);
#pragma unroll
    for (int s = 0; s < WG_BLOCKS; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int group = 2 * (b0 + s) + (i >> 1), r = row + 8 * (i & 1);
            *reinterpret_cast<u32*>(chunk + (group * BN + r) * 16 + 4 * t) = frag[s][i];
        }
}

__device__ __forceinline__ void keep_fragments(Fragments& frag) {
#pragma unroll
    for (int s = 0; s < WG_BLOCKS; ++s)
#pragma unroll
        for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(frag[s][i])::"memory");
}

// A warpgroup's WG_BLOCKS wgmmas of a chunk (k32 steps from b0) into the partial sum (a fresh one
// unless `keep`), one commit group.
__device__ __forceinline__ void issue_block_mmas(float (&part)[MP / 8][4], const Fragments& frag, u32 a_chunk, int b0,
                                                 bool keep) {
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < WG_BLOCKS; ++s)
        wgmma_rs_e4m3<MP>(part, frag[s], wgmma_desc(a_chunk + 2 * (b0 + s) * MP * 16, MP * 16, 128), s > 0 || keep);
    wgmma_commit();
}

// AHEAD: the same WG_BLOCKS wgmmas with B's converted chunk from shared memory.
__device__ __forceinline__ void issue_block_mmas_ss(float (&part)[MP / 8][4], u32 b_chunk, u32 a_chunk, int b0) {
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < WG_BLOCKS; ++s)
        wgmma_ss_e4m3<MP>(part, wgmma_desc(b_chunk + 2 * (b0 + s) * BN * 16, BN * 16, 128),
                          wgmma_desc(a_chunk + 2 * (b0 + s) * MP * 16, MP * 16, 128), s > 0);
    wgmma_commit();
}

// CV: the MMA warpgroup's wgmmas of a whole chunk, B converted and A from their rings, one commit group.
__device__ __forceinline__ void issue_chunk_mmas_ss(float (&part)[MP / 8][4], u32 b_chunk, u32 a_chunk) {
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < NB; ++s)
        wgmma_ss_e4m3<MP>(part, wgmma_desc(b_chunk + 2 * s * BN * 16, BN * 16, 128),
                          wgmma_desc(a_chunk + 2 * s * MP * 16, MP * 16, 128), s > 0);
    wgmma_commit();
}

// The CTA's B scales (its 32-row groups over all of K: the first bytes its consumers wait for).
__device__ __forceinline__ void copy_scales(u8* scales, const u8* b_scale_sh, int n0, int groups, u64* landed) {
    mbar_arrive_expect_bytes(landed, groups * GROUP_SCALES);
    for (int g = 0; g < groups; ++g)
        bulk_copy(scales + g * GROUP_SCALES, b_scale_sh + (size_t)(n0 / 32 + g) * GROUP_SCALES, GROUP_SCALES, landed);
}

// A chunk of the M tile's A into a stage: one bulk copy, or this CTA's slice (x of MC) multicast to
// its group, the cluster ranks group0 .. group0 + MC - 1. `full` expects the whole chunk either way.
__device__ __forceinline__ void copy_a(u8* stage, const u8* a_tile, int chunk, u64* full, int x, int group0) {
    const u8* src = a_tile + (size_t)chunk * A_CHUNK;
    mbar_arrive_expect_bytes(full, A_CHUNK);
    if constexpr (MC == 1) bulk_copy(stage + B_BOX, src, A_CHUNK, full);
    else bulk_copy_multicast(stage + B_BOX + x * A_SLICE, src + x * A_SLICE, A_SLICE, full,
                             (unsigned short)(((1u << MC) - 1) << group0));
}

// A stage read by this thread's finished MMAs: released to this CTA's copy warp, or (MC > 1) to the
// copy warps of the whole multicast group (ranks from group0), whose next copies into it land here too.
__device__ __forceinline__ void release_stage(u64* empty, int lane, int group0) {
    if constexpr (MC == 1) {
        mbar_arrive(empty);
    } else {
        __syncwarp();
        if (lane == 0)
            for (int r = 0; r < MC; ++r) mbar_arrive_cluster(empty, (unsigned)(group0 + r));
    }
}

__device__ __forceinline__ void add_partial(float (&acc)[MP / 8][4], float (&part)[MP / 8][4]) {
#pragma unroll
    for (int j = 0; j < MP / 8; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[j][q] += part[j][q];
}

__device__ float b_value(const u8* __restrict__ b_q, const u8* __restrict__ b_scale_sh, int n, int k) {
    const u32 byte = b_q[(size_t)n * (GK / 2) + k / 2];
    return e2m1_e8m0_value(k & 1 ? byte >> 4 : byte & 15u, b_scale_sh[scale_index(n, k / 32)]);
}

// The CTA's partial tile over its K blocks in plain fp32 (the reference's arithmetic, in K order),
// for operands that do not fold (never on real data: this path is for correctness, not speed).
__device__ __noinline__ void exact_partial(const u16* __restrict__ a, const u8* __restrict__ b_q,
                                          const u8* __restrict__ b_scale_sh, float* part, int n0, int kb_begin,
                                          int kb_end, int m_size, int t) {
    for (int p = t; p < m_size * BN; p += WORKERS) {
        const int m = p / BN, n = n0 + p % BN;
        float acc = 0.f;
        for (int kb = kb_begin; kb < kb_end && n < GN; ++kb) {
            const u16* row = a + (size_t)m * GK + kb * 32;
            u32 amax = 0;
            for (int i = 0; i < 32; ++i) amax = max(amax, (u32)(row[i] & 0x7FFFu));
            const int e = block_exponent(amax);
            for (int i = 0; i < 32; ++i) acc = fmaf(quant_dequant(row[i], e), b_value(b_q, b_scale_sh, n, kb * 32 + i), acc);
        }
        part[m * P_STRIDE + p % BN] = acc;
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1) CLUSTER_ATTR
mxfp4_gemm_fp8(const __grid_constant__ TensorMap b_map, const u8* __restrict__ b_scale_sh,
               const u8* __restrict__ a_e4m3, const int* __restrict__ a_exp, const u16* __restrict__ a,
               const u8* __restrict__ b_q, u16* __restrict__ c, const int m_size) {
    extern __shared__ __align__(1024) u8 smem_raw[];
    // B's and A's parts of a stage land on separate barriers: B's conversion need not wait for A
    // (at the start A comes later: it waits for the quantization grid).
    __shared__ u64 full_b[STAGES], full_a[CV ? CV : STAGES], empty[STAGES], scales_landed, a_exp_landed, a_ahead_landed;
#if CV
    __shared__ u64 full_x[CV], empty_x[CV], empty_a[CV];  // the converted-B ring; A's ring is released on its own
#endif
    __shared__ int b_max[BN], b_min[BN], inexact;
    __shared__ __align__(16) int a_row_exp[MP];  // the tile's A row exponents (one bulk copy)
    // The 128-byte swizzle repeats every 1024 bytes from a 1024-byte aligned address: the launch adds
    // 1 KB of slack, and the ring starts at the first such address (static shared memory comes first).
    u8* const smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    u8* const b_ahead = smem + STAGES * B_STRIDE;    // AHEAD: B's first chunks as e4m3; CV: the converted ring
    u8* const a_ahead = b_ahead + (AHEAD + CV) * BX_CHUNK;  // AHEAD: A's first chunks; CV: A's ring
    u8* const scales = a_ahead + (AHEAD + CV) * A_CHUNK;
    float* const part_tile = reinterpret_cast<float*>(smem);  // after the last chunk: the ring is free
    // The warp index through a shuffle: ptxas then knows the roles are warp-uniform (asynchronous wgmmas).
    const int tid = threadIdx.x, lane = tid & 31, warp = __shfl_sync(0xFFFFFFFFu, tid >> 5, 0);
    const int n0 = blockIdx.x * BN, split = blockIdx.y, m0 = blockIdx.z * MP;
    const int chunk_begin = split * CHUNKS / SPLITK, chunks = (split + 1) * CHUNKS / SPLITK - chunk_begin;
    const int groups = min(2, (GN - n0 + 31) / 32);  // 32-row groups of scales inside the tensor
    const u8* const a_tile = a_e4m3 + (size_t)blockIdx.z * CHUNKS * A_CHUNK;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full_b[s], 1);
            if constexpr (CV == 0) mbar_init(&full_a[s], 1);
            mbar_init(&empty[s], EMPTY_ARRIVALS);
        }
#if CV
        for (int s = 0; s < CV; ++s) {
            mbar_init(&full_a[s], 1);
            mbar_init(&empty_a[s], WG);
            mbar_init(&full_x[s], CONSUMERS);
            mbar_init(&empty_x[s], WG);
        }
#endif
        mbar_init(&scales_landed, 1);
        mbar_init(&a_exp_landed, 1);
        if constexpr (AHEAD > 0) mbar_init(&a_ahead_landed, 1);
        mbar_init_fence();
        inexact = 0;
    }
    if (tid < BN) { b_max[tid] = 0; b_min[tid] = 255; }
    if constexpr (MC > 1) cluster_sync();  // the peers' barriers exist before any multicast reaches them
    else __syncthreads();
    // In the cluster (MC, SPLITK): this CTA is rank x + group0; its multicast group is its split's MC ranks.
    const int x = blockIdx.x % MC, group0 = MC * split;

    const bool consumer = warp < WORKERS / 32;
    float acc[MP / 8][4], part[MP / 8][4];
#pragma unroll
    for (int j = 0; j < MP / 8; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[j][q] = part[j][q] = 0.f;
    if (CV && !consumer) {  // CV: a copy warp for B's ring (scales first), one for A's (after the grid dependency)
#if CV
        if (lane == 0 && warp == WORKERS / 32) {
            copy_scales(scales, b_scale_sh, n0, groups, &scales_landed);
            for (int lc = 0; lc < chunks; ++lc) {
                const int s = lc % STAGES;
                if (lc >= STAGES) mbar_wait(&empty[s], (lc / STAGES - 1) & 1);
                mbar_arrive_expect_bytes(&full_b[s], B_BOX);
                tma_box(smem + s * B_BOX, b_map, (chunk_begin + lc) * KC / 2, n0, &full_b[s]);
            }
        } else if (lane == 0) {
            griddep_wait();  // only this warp waits for the quantization grid
            asm volatile("fence.proxy.async.global;\n" ::: "memory");  // A's bulk copies read what the first grid wrote
            for (int lc = 0; lc < chunks; ++lc) {
                const int s = lc % CV;
                if (lc >= CV) mbar_wait(&empty_a[s], (lc / CV - 1) & 1);
                mbar_arrive_expect_bytes(&full_a[s], A_CHUNK);
                bulk_copy(a_ahead + s * A_CHUNK, a_tile + (size_t)(chunk_begin + lc) * A_CHUNK, A_CHUNK, &full_a[s]);
                if (lc == min(CV, chunks) - 1) {  // the row exponents, for the epilogue, behind A's first slots
                    mbar_arrive_expect_bytes(&a_exp_landed, MP * 4);
                    bulk_copy(a_row_exp, a_exp + m0, MP * 4, &a_exp_landed);
                }
            }
        }
#endif
        __syncwarp();
    } else if (!consumer) {  // the copy warp: B's first stages, then (A ready) A's, then the ring
        if (lane == 0) {
            copy_scales(scales, b_scale_sh, n0, groups, &scales_landed);
            auto copy_b = [&](int lc) {
                const int s = lc % STAGES;
                mbar_arrive_expect_bytes(&full_b[s], B_BOX);
                tma_box(smem + s * STAGE, b_map, (chunk_begin + lc) * KC / 2, n0, &full_b[s]);
            };
            auto copy_a_chunk = [&](int lc) {
                const int s = lc % STAGES;
                copy_a(smem + s * STAGE, a_tile, chunk_begin + lc, &full_a[s], x, group0);
            };
            auto refill_b = [&](int lc) {  // into the stage chunk lc - STAGES was released from
                mbar_wait(&empty[lc % STAGES], (lc / STAGES - 1) & 1);
                copy_b(lc);
            };
            const int first = min(AHEAD ? STAGES : B_BEFORE_A, chunks);
            for (int lc = 0; lc < first; ++lc) copy_b(lc);
            // AHEAD: the stages the ahead chunks release need no A: refill them before the grid
            // dependency (after it, the consumers would wait for B behind the quantization grid)
            const int b_copied = AHEAD ? min(AHEAD + STAGES, chunks) : first;
            for (int lc = first; lc < b_copied; ++lc) refill_b(lc);
            griddep_wait();
            asm volatile("fence.proxy.async.global;\n" ::: "memory");  // A's bulk copies read what the first grid wrote
            if constexpr (AHEAD > 0) {  // the ahead chunks' A, on one barrier
                mbar_arrive_expect_bytes(&a_ahead_landed, AHEAD * A_CHUNK);
                for (int lc = 0; lc < AHEAD; ++lc)
                    bulk_copy(a_ahead + lc * A_CHUNK, a_tile + (size_t)(chunk_begin + lc) * A_CHUNK, A_CHUNK, &a_ahead_landed);
            }
            for (int lc = AHEAD; lc < b_copied; ++lc) copy_a_chunk(lc);
            // the tile's row exponents, read by the consumers only in the epilogue: they never wait
            // for the quantization grid themselves
            mbar_arrive_expect_bytes(&a_exp_landed, MP * 4);
            bulk_copy(a_row_exp, a_exp + m0, MP * 4, &a_exp_landed);
            for (int lc = b_copied; lc < chunks; ++lc) {
                if (lc < STAGES) copy_b(lc);  // a first stage left for after A's
                else refill_b(lc);
                copy_a_chunk(lc);
            }
        }
        __syncwarp();
    } else {
        const int t = tid, wg = warp / 4, wt = t % WG, b0 = wg * WG_BLOCKS;
        mbar_wait(&scales_landed, 0);
        if (wg == 0) scale_range(scales, b_max, b_min, wt);
        workers_sync();
        if (t < BN && n0 + t < GN) {
            const int hi = b_max[t], lo = b_min[t];
            if (hi - lo > 11 || hi < 63 || hi > 191) inexact = 1;
        }
#if CV
        if (wg < CG) {  // a converter: B's codes from their ring to e4m3 in the converted ring
            const BFragments frags = b_fragments(b_max, chunk_begin, b0, wt);
            Fragments frag;
#pragma unroll 1
            for (int lc = 0; lc < chunks; ++lc) {
                const int s = lc % STAGES, xs = lc % CV;
                mbar_wait(&full_b[s], (lc / STAGES) & 1);
                convert_b_fragments(frags, smem + s * B_BOX, scales, lc, frag);
                mbar_arrive(&empty[s]);
                if (lc >= CV) mbar_wait(&empty_x[xs], (lc / CV - 1) & 1);
                store_fragments(b_ahead + xs * BX_CHUNK, frag, b0, wt);
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the stores, seen by the wgmmas
                mbar_arrive(&full_x[xs]);
            }
        } else {  // the MMA warpgroup: a chunk's wgmmas, then its partial sum added, then its slots released
#pragma unroll 1
            for (int lc = 0; lc < chunks; ++lc) {
                const int xs = lc % CV;
                mbar_wait(&full_x[xs], (lc / CV) & 1);
                mbar_wait(&full_a[xs], (lc / CV) & 1);
                issue_chunk_mmas_ss(part, smem_addr(b_ahead + xs * BX_CHUNK), smem_addr(a_ahead + xs * A_CHUNK));
                wgmma_wait<0>();
                wgmma_keep(part);
                mbar_arrive(&empty_x[xs]);
                mbar_arrive(&empty_a[xs]);
                add_partial(acc, part);
            }
        }
#else
        const BFragments frags = b_fragments(b_max, chunk_begin, b0, wt);
        if constexpr (AHEAD > 0) {
            // the first AHEAD chunks converted and their stages released with no wait on A
            Fragments frag;
#pragma unroll 1
            for (int lc = 0; lc < AHEAD; ++lc) {
                const int s = lc % STAGES;
                mbar_wait(&full_b[s], (lc / STAGES) & 1);
                convert_b_fragments(frags, smem + s * STAGE, scales, lc, frag);
                store_fragments(b_ahead + lc * BX_CHUNK, frag, b0, wt);
                release_stage(&empty[s], lane, group0);
            }
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // the stores, seen by the wgmmas
            warpgroup_sync(wg);  // a warpgroup's wgmmas read the rows of its 4 warps
            mbar_wait(&a_ahead_landed, 0);
            // a chunk's wgmmas back to back, then its partial sum added (a second partial tile added
            // while the next chunk's wgmmas run had ptxas serialize every wgmma: C7514)
#pragma unroll 1
            for (int lc = 0; lc < AHEAD; ++lc) {
                issue_block_mmas_ss(part, smem_addr(b_ahead + lc * BX_CHUNK), smem_addr(a_ahead + lc * A_CHUNK), b0);
                wgmma_wait<0>();
                wgmma_keep(part);
                add_partial(acc, part);
            }
        }
        // Chunk lc converts into one set of fragment registers while chunk lc-1's wgmmas read the other.
        // (Past the ahead chunks: a stage's A comes once for each of its chunks from AHEAD on.)
        Fragments even, odd;
        auto chunk_step = [&](int lc, Fragments& cur, Fragments& prev) {
            const int s = lc % STAGES;
            mbar_wait(&full_b[s], (lc / STAGES) & 1);
            convert_b_fragments(frags, smem + s * STAGE, scales, lc, cur);
            if (lc > AHEAD) {  // chunk lc-1's MMAs: done, its stage released, the partial added after CG chunks
                wgmma_wait<0>();
                wgmma_keep(part);
                keep_fragments(prev);
                if ((lc - AHEAD) % CG == 0) add_partial(acc, part);
                release_stage(&empty[(lc - 1) % STAGES], lane, group0);
            }
            mbar_wait(&full_a[s], ((lc - AHEAD) / STAGES) & 1);
            issue_block_mmas(part, cur, smem_addr(smem + s * STAGE + B_BOX), b0, (lc - AHEAD) % CG != 0);
        };
#pragma unroll 1
        for (int lc = AHEAD; lc < chunks; lc += 2) {
            chunk_step(lc, even, odd);
            if (lc + 1 < chunks) chunk_step(lc + 1, odd, even);
        }
        wgmma_wait<0>();
        wgmma_keep(part);
        keep_fragments(even);
        keep_fragments(odd);
        add_partial(acc, part);
#endif
        mbar_wait(&a_exp_landed, 0);  // landed long ago: the copy warp issued it before the ring's refills
        for (int m = t; m < MP; m += WORKERS) {
            const int e = a_row_exp[m];
            if (e == ROW_INEXACT && m0 + m < m_size) inexact = 1;
        }
        workers_sync();  // every chunk landed and was read: the ring becomes the partial tile; verdicts in

        if (inexact) {
            exact_partial(a + (size_t)m0 * GK, b_q, b_scale_sh, part_tile, n0, chunk_begin * NB,
                          (chunk_begin + chunks) * NB, min(MP, m_size - m0), t);
        } else {
            // accumulator d[j][q]: B row 16 * (warp % 4) + lane / 4 (+8 for q >= 2), token 8j + 2 * (lane % 4)
            // (+1 odd q); the row exponents scale it exactly (a power of two), so the warpgroups' and
            // the splits' partials share their units. Warpgroup 0 stores, the others add in order.
            // Two multiplies, by 2^(token's exponent) then 2^(B row's), round as one by 2^(their sum):
            // the token's is in [-64, 64] and a nonzero accumulator in [2^-18, 2^31) (sums of e4m3
            // products), so the first is exact; and a factor a token, one a row, not one a value.
            const int r = 16 * (warp % 4) + (lane >> 2), m_pair = 2 * (lane & 3);
            // 127 bias + 6 (B) + 6 (A); rows past N (b_max 0) are never stored: any normal factor will do
            const float fb0 = pow2_normal(max(b_max[r] - 139, -126)), fb1 = pow2_normal(max(b_max[r + 8] - 139, -126));
#pragma unroll 1
            for (int g = 0; g < MMA_WGS; ++g) {
                if (wg == g + (CV ? CG : 0)) {
#pragma unroll
                    for (int j = 0; j < MP / 8; ++j) {
                        const int m = 8 * j + m_pair;
                        float* p = part_tile + m * P_STRIDE + r;
                        const float fa0 = pow2_normal(a_row_exp[m]), fa1 = pow2_normal(a_row_exp[m + 1]);
                        const float v[4] = {acc[j][0] * fa0 * fb0, acc[j][1] * fa1 * fb0,
                                            acc[j][2] * fa0 * fb1, acc[j][3] * fa1 * fb1};
                        p[0] = g ? p[0] + v[0] : v[0];
                        p[P_STRIDE] = g ? p[P_STRIDE] + v[1] : v[1];
                        p[8] = g ? p[8] + v[2] : v[2];
                        p[P_STRIDE + 8] = g ? p[P_STRIDE + 8] + v[3] : v[3];
                    }
                }
                if (MMA_WGS > 1) workers_sync();
            }
        }
    }
    // The partial tiles, summed over the cluster's ranks in rank order (deterministic).
    // (With MC > 1 this cluster barrier also keeps every CTA alive until its peers' last arrivals.)
    if constexpr (SPLITK > 1 || MC > 1) cluster_sync();
    else __syncthreads();
    store_split_sum<SPLITK, MP, BN, P_STRIDE, NTHREADS, MC>(part_tile, c, GN, m0, n0, m_size, GN, split, tid, x);
    if constexpr (SPLITK > 1) cluster_sync_relaxed();  // peers may still be reading this CTA's partial tile
}

// a4w4 MXFP4 GEMM for Hopper (sm_90a), the "pipe" kernel: C[M,N] = dq(q(A)) @ dq(B)^T in one launch,
// chunk-pipelined, with warpgroup MMAs whose operands both come from shared memory.
//
// Swap-AB wgmma: the weights (BN rows of N) are wgmma's A operand, one m64 tile per warpgroup;
// the activations (BM rows of M, up to 256) are its B operand (n = BM). So each CTA converts its
// B tile once for all of its BM rows and quantizes A once for all of its BN rows. The scales are
// folded into the bf16 operands (mxfp4_fold_sm90.h), so the fp32 accumulators run over the whole
// K range with no per-block epilogue.
//
// Shared memory, per K chunk of KC values (KC/32 scale blocks):
//   stage ring (STAGES slots, filled by cp.async ahead of the chunk converted):
//     A  [k8 group][m] x 16 B: raw bf16, quantized in place into the wgmma operand
//     Bq [block][n] x 16 B: the packed codes of one 32-block of one row of B
//     Bs per (32-row group, block): the 64 bytes of the shuffled scale tensor holding its bytes
//   B operand, double-buffered: [k8 group][n] x 16 B bf16, converted from Bq and Bs.
// Both operands are K-major core matrices without swizzle (8 rows x 16 B; LBO = rows * 16 bytes
// between the two k8 halves of a k16 step, SBO = 128 bytes between 8-row groups).
// A B block (one row, 16 bytes of codes) belongs to one thread and becomes 4 pieces of its
// operand; an A block (one row, 4 pieces) is quantized in place by 4 lanes, one piece each (amax
// over two shuffles). Every warp's 16-byte shared-memory accesses are conflict-free. Inside each
// 8-value piece both operands use the k order (0,4,1,5,2,6,3,7) (bf16 pairs (x_a, x_{a+4})), which
// makes the B conversion a few shifts and masks; the dot product does not depend on the order.
//
// COPY_WARPS = 0, per chunk: wait for its copies, barrier (also: every warpgroup's MMAs of chunk
// c-2 are done, so that stage and the B operand buffer are free), refill that stage with chunk
// c+STAGES-2, convert, proxy fence + barrier, issue the chunk's KC/16 wgmmas and commit, wait until
// only this chunk's group runs: its MMAs overlap the next chunk's conversion.
// COPY_WARPS > 0 (warp-specialized): extra warps after the warpgroups issue every copy, STAGES
// chunks ahead, gated per stage by mbarriers (`full`: the copies landed; `empty`: the MMAs that
// read the stage are done). The warpgroups wait on `full`, convert, and meet once per chunk at a
// named barrier that excludes the copy warps; their fences no longer wait on copies in flight.
// COPY_TMA (with one copy warp): its first lane issues each chunk as tensor-map copies (TMA:
// cp.async.bulk.tensor, one box per A k8 group, per B block and one for the scales, the stage's
// layout exactly; rows and blocks past the tensors arrive as zeros) completing on `full` by their
// byte count, so one thread keeps the whole ring in flight.
// The proxy fence is CTA-scoped (`fence.proxy.async.shared::cta`; the plain `fence.proxy.async`
// compiles to MEMBAR.ALL.GPU). On the H200 the two time the same (notes/cuda.md).
//
// Split-K runs across a (1, SPLITK, 1) thread-block cluster; partial tiles are summed in rank
// order through distributed shared memory (deterministic; no scratch, no counters). M is a launch
// argument: rows >= M are zero-filled by the copies and never stored.
// Operands outside the folded range (B scale bytes 1..64 or >= 192, A block exponents > 64,
// NaN/inf in A) make a CTA recompute its partial tile in plain fp32 (`exact_partial`).
//
// Compile-time configuration (-D): GN GK (shape), BN (rows of N per CTA: 64 per warpgroup),
// BM (rows of M per CTA: the wgmma n), SPLITK (CTAs along K), KC (K per chunk: 64 or 128),
// STAGES (stage ring slots, >= 3), COPY_WARPS (warps that only issue copies; 0: every thread),
// COPY_TMA (1: the copy warp issues tensor-map copies; the launch then passes three maps).
// plans.py's compile_options writes COPY_WARPS only where it differs from its default; without GN
// the file builds a default plan.

#ifndef GN
#define GN 256
#define GK 512
#define BN 128
#define BM 64
#define SPLITK 1
#define KC 64
#define STAGES 4
#endif
#ifndef COPY_WARPS
#define COPY_WARPS 0
#endif
#ifndef COPY_TMA
#define COPY_TMA 0
#endif

#include "mxfp4_exact.h"
#include "mxfp4_fold_sm90.h"
#include "wgmma_sm90a.h"
#include "tma_sm90.h"

constexpr int KBLOCKS = GK / 32;                   // scale blocks per row
constexpr int SCOLS = (KBLOCKS + 7) / 8 * 8;       // columns of the shuffled scale tensor
constexpr int NB = KC / 32;                        // scale blocks per chunk
constexpr int NCHUNK = (GK + KC - 1) / KC;         // chunks (the last may be partial)
constexpr int CONVERTERS = BN / 64 * 128;          // one warpgroup per 64 rows of N: convert + MMA
constexpr int NTHREADS = CONVERTERS + COPY_WARPS * 32;  // copy warps come after the warpgroups
constexpr int ISSUERS = COPY_WARPS ? COPY_WARPS * 32 : NTHREADS;  // threads issuing copies
// Copy loops of a copy warp run many iterations: unrolled fully they hoist more addresses than
// the registers hold.
constexpr int COPY_UNROLL = COPY_WARPS ? 4 : 64;
constexpr int A_STAGE = BM * KC * 2;
constexpr int BQ_STAGE = BN * KC / 2;
constexpr int BS_STAGE = BN / 32 * NB * 64;
constexpr int STAGE_BYTES = A_STAGE + BQ_STAGE + BS_STAGE;
constexpr int BOP_BYTES = BN * KC * 2;
constexpr int P_STRIDE = BN + 4;  // floats; keeps the accumulator stores conflict-free
// Dynamic shared memory = max(STAGES * STAGE_BYTES + 2 * BOP_BYTES, BM * P_STRIDE * 4):
// plans.py's pipe_smem_bytes mirrors this.

static_assert(BN % 64 == 0 && BN <= 256, "BN: whole warpgroups");
static_assert(BM == 16 || BM == 32 || BM == 64 || BM == 128 || BM == 256, "BM: a wgmma n with a wrapper");
static_assert(KC == 64 || KC == 128, "KC");
static_assert(STAGES >= 3, "STAGES: a stage is refilled two chunks after its MMAs were issued");
static_assert(COPY_WARPS >= 0 && COPY_WARPS <= 2, "COPY_WARPS");
static_assert(!COPY_TMA || COPY_WARPS == 1, "COPY_TMA: one copy warp");
static_assert(SPLITK >= 1 && SPLITK <= 8 && SPLITK <= NCHUNK, "SPLITK");

#if SPLITK > 1
#define CLUSTER_ATTR __cluster_dims__(1, SPLITK, 1)
#else
#define CLUSTER_ATTR
#endif

__device__ __forceinline__ int scale_index(int r, int c) {  // format.md §3
    return (r >> 5) * SCOLS * 32 + (c >> 3) * 256 + (c & 3) * 64 + (r & 15) * 4 + ((c & 7) >> 2) * 2 + ((r & 31) >> 4);
}

// No-swizzle K-major descriptor of a [k8 group][rows] x 16 B operand at k16 step `step`, from row
// `row0` (a multiple of 8).
template <int ROWS>
__device__ __forceinline__ unsigned long long operand_desc(u32 base, int step, int row0) {
    return wgmma_desc(base + (2 * step * ROWS + row0) * 16, ROWS * 16, 128);
}

// ---- copies of one chunk into a stage ----------------------------------------------------------

struct Tile {
    const u16* a;
    const u8* b_q;
    const u8* b_scale_sh;
    int m_size, m0, n0, chunk_begin;
};

// Piece p of a chunk's BM rows of A: its k8 group and row. A warp covers 8 rows x 4
// consecutive 16-byte pieces: 64-byte runs in global memory, 512 contiguous bytes in shared memory.
__device__ __forceinline__ int a_piece_k8(int p) { return ((p >> 5) / (BM / 8)) * 4 + ((p >> 3) & 3); }
__device__ __forceinline__ int a_piece_row(int p) { return ((p >> 5) % (BM / 8)) * 8 + (p & 7); }

// cp.async of chunk `lc` (of this CTA's range) into `stage` by issuer `tid` of ISSUERS; one commit
// group per call. A warp covers 8 rows x 4 consecutive 16-byte pieces per instruction: 64-byte runs
// in global memory, 512 contiguous bytes in shared memory.
__device__ __forceinline__ void issue_chunk(const Tile& tile, u8* stage, int lc, int tid) {
    const int k0 = (tile.chunk_begin + lc) * KC;
    const u32 a_dst = smem_addr(stage), bq_dst = a_dst + A_STAGE, bs_dst = bq_dst + BQ_STAGE;
    constexpr int A_PIECES = BM * KC / 8;
#pragma unroll COPY_UNROLL
    for (int p0 = 0; p0 < A_PIECES; p0 += ISSUERS) {
        const int p = p0 + tid;
        const int kg = a_piece_k8(p), row = a_piece_row(p), gm = tile.m0 + row, k = k0 + kg * 8;
        const bool valid = gm < tile.m_size && k < GK;
        if (A_PIECES % ISSUERS == 0 || p < A_PIECES)
            cp_async16(a_dst + (kg * BM + row) * 16, valid ? tile.a + (size_t)gm * GK + k : tile.a, valid);
    }
    constexpr int B_PIECES = BN * NB;
#pragma unroll COPY_UNROLL
    for (int p0 = 0; p0 < B_PIECES; p0 += ISSUERS) {
        const int p = p0 + tid;
        const int b = (p >> 3) % NB, row = (p / (8 * NB)) * 8 + (p & 7);
        const int gn = tile.n0 + row, block = k0 / 32 + b;
        const bool valid = gn < GN && block < KBLOCKS;
        if (B_PIECES % ISSUERS == 0 || p < B_PIECES)
            cp_async16(bq_dst + (b * BN + row) * 16, valid ? tile.b_q + (size_t)gn * (GK / 2) + block * 16 : tile.b_q, valid);
    }
    // Scales: per (32-row group, block) the 64 bytes at (block % 4) * 64 of the group's 256 (they hold
    // blocks block and block ^ 4 of rows 0..31). Groups of rows >= N are skipped (their bytes are
    // never used); a group below N lies inside the tensor, whose rows are padded to 32.
    constexpr int S_PIECES = BN / 32 * NB * 4;
#pragma unroll COPY_UNROLL
    for (int p0 = 0; p0 < S_PIECES; p0 += ISSUERS) {
        const int p = p0 + tid;
        if (S_PIECES % ISSUERS != 0 && p >= S_PIECES) break;
        const int j = p & 3, b = (p >> 2) % NB, group = p / (4 * NB);
        const int gn = tile.n0 + group * 32, block = k0 / 32 + b;
        const bool valid = gn < GN && block < KBLOCKS;
        const u8* src = tile.b_scale_sh + (gn >> 5) * SCOLS * 32 + (block >> 3) * 256 + (block & 3) * 64 + j * 16;
        cp_async16(bs_dst + ((group * NB + b) * 4 + j) * 16, valid ? src : tile.b_scale_sh, valid);
    }
    cp_async_commit();
}

// Chunk `lc` into `stage` through the tensor maps, by one thread: A [M rows x 8 bf16] boxes at each k8
// group, B codes [N rows x 16 bytes] boxes at each block, and the scales as [32-row groups x bytes]
// (a chunk's NB <= 4 blocks are NB * 64 contiguous bytes of each group's 256: they never straddle a
// 4-block boundary, since chunks start at multiples of NB). All complete on `full`.
__device__ __forceinline__ void issue_chunk_tma(const TensorMap& a_map, const TensorMap& b_map, const TensorMap& s_map,
                                                const Tile& tile, u8* stage, int lc, unsigned long long* full) {
    const int k0 = (tile.chunk_begin + lc) * KC, block0 = k0 / 32;
    mbar_arrive_expect_bytes(full, STAGE_BYTES);
#pragma unroll
    for (int g = 0; g < KC / 8; ++g) tma_box(stage + g * BM * 16, a_map, k0 + 8 * g, tile.m0, full);
#pragma unroll
    for (int b = 0; b < NB; ++b) tma_box(stage + A_STAGE + b * BN * 16, b_map, (block0 + b) * 16, tile.n0, full);
    tma_box(stage + A_STAGE + BQ_STAGE, s_map, (block0 >> 3) * 256 + (block0 & 3) * 64, tile.n0 / 32, full);
}

// ---- conversion of one chunk into the two wgmma operands ---------------------------------------

// A piece (row r, block b of the chunk, piece i of its 4): raw bf16 in place -> quantized values
// times 2^(e+63) in the pair order (x_a, x_{a+4}) (format.md §2, bit-exact). The 4 pieces of a
// block sit in lanes l, l^8, l^16, l^24 of the warp: the block's amax takes two shuffles, so the
// dependent chain per block is a quarter of one thread doing the whole block, and every warp that
// has A work does it with all of its lanes. Callers keep the warp converged (warp-uniform tasks).
__device__ __forceinline__ uint4 quantize_a_piece(const uint4 raw) {
    // amax on magnitude bits (bf16 orders like unsigned integers; NaN stays largest)
    u32 m = max_u16x2(max_u16x2(raw.x & 0x7FFF7FFFu, raw.y & 0x7FFF7FFFu),
                      max_u16x2(raw.z & 0x7FFF7FFFu, raw.w & 0x7FFF7FFFu));
    m = max_u16x2(m, __shfl_xor_sync(0xFFFFFFFFu, m, 8));
    m = max_u16x2(m, __shfl_xor_sync(0xFFFFFFFFu, m, 16));
    const int e = block_exponent(max(m & 0xFFFFu, m >> 16));  // kernels/mxfp4_exact.h
    const u32 inv_scale = a_inverse_scale(e), fold = a_fold(e);
    const u32 x[4] = {prmt(raw.x, raw.z, 0x5410), prmt(raw.x, raw.z, 0x7632),
                      prmt(raw.y, raw.w, 0x5410), prmt(raw.y, raw.w, 0x7632)};
    u32 q[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) q[a] = mul_bf16x2(round_e2m1_bf16x2(mul_bf16x2(x[a], inv_scale)), fold);
    return make_uint4(q[0], q[1], q[2], q[3]);
}

// B block (row n, block b of the chunk): 16 bytes of codes -> 4 pieces of bf16 operand. Returns
// whether its scale byte is below the folded range (1..64; byte 0 is an all-zero block, exact).
__device__ __forceinline__ bool convert_b_block(const u8* stage, u8* b_op, int n, int b, int block, int gn) {
    const uint4 codes = *reinterpret_cast<const uint4*>(stage + A_STAGE + (b * BN + n) * 16);
    const u8* scales = stage + A_STAGE + BQ_STAGE + ((n >> 5) * NB + b) * 64;
    const bool valid = gn < GN && block < KBLOCKS;
    const u32 s = valid ? scales[(n & 15) * 4 + ((block & 7) >> 2) * 2 + ((n & 31) >> 4)] : 0u;
    const u32 mult = b_scale_multiplier(s);
    const u32 w[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
    for (int i = 0; i < 4; ++i)
        *reinterpret_cast<uint4*>(b_op + ((4 * b + i) * BN + n) * 16) =
            make_uint4(mul_bf16x2(nibble_pair<0>(w[i]), mult), mul_bf16x2(nibble_pair<1>(w[i]), mult),
                       mul_bf16x2(nibble_pair<2>(w[i]), mult), mul_bf16x2(nibble_pair<3>(w[i]), mult));
    return s - 1u < 64u;
}

// A: a warp task is 8 rows x one block (lane = 8 * piece + row), tasks to warps 0, 1, ...
// Lanes 0-7 of an A task read 8 consecutive 16-byte rows: conflict-free.
constexpr int A_TASKS = BM / 8 * NB;
constexpr int CONVERT_WARPS = CONVERTERS / 32;

// The chunk's A quantized in place in the stage (it is the wgmma operand).
__device__ __forceinline__ void quantize_a_chunk(u8* stage, int warp, int lane) {
#pragma unroll
    for (int i = 0; i < (A_TASKS + CONVERT_WARPS - 1) / CONVERT_WARPS; ++i) {
        const int task = warp + i * CONVERT_WARPS;  // warp-uniform: the shuffles need the whole warp
        if (A_TASKS % CONVERT_WARPS != 0 && task >= A_TASKS) continue;
        const int r = (task % (BM / 8)) * 8 + (lane & 7), kg = 4 * (task / (BM / 8)) + (lane >> 3);
        uint4* const piece = reinterpret_cast<uint4*>(stage + (kg * BM + r) * 16);
        *piece = quantize_a_piece(*piece);
    }
}

// B: each warpgroup converts the 64 rows its own wgmmas read (NB / 2 blocks per thread), so only
// its own earlier MMAs read the B operand buffer it overwrites. Returns whether a scale byte was
// below the folded range.
__device__ __forceinline__ bool convert_b_chunk(const Tile& tile, const u8* stage, u8* b_op, int lc, int tid) {
    const int block0 = (tile.chunk_begin + lc) * NB;
    bool low = false;
    const int row0 = (tid >> 7) * 64, t = tid & 127;
#pragma unroll
    for (int i = 0; i < NB / 2; ++i) {
        const int task = t + i * 128, n = row0 + task % 64, b = task / 64;
        low |= convert_b_block(stage, b_op, n, b, block0 + b, tile.n0 + n);
    }
    return low;
}

// ---- copy-warp mode (mbarriers: tma_sm90.h) -----------------------------------------------------

// Named barrier over the converting warpgroups only (the copy warps never wait on it).
__device__ __forceinline__ void converters_sync() {
    asm volatile("bar.sync 1, %0;\n" :: "n"(CONVERTERS) : "memory");
}
// ---- exact fallback (operands outside the folded range; never taken on real data) ---------------

__device__ float b_dequant(const u8* __restrict__ b_q, const u8* __restrict__ b_scale_sh, int n, int k) {
    const u32 byte = b_q[(size_t)n * (GK / 2) + k / 2];
    return e2m1_e8m0_value(k & 1 ? byte >> 4 : byte & 15u, b_scale_sh[scale_index(n, k / 32)]);
}

// This CTA's partial tile over its K range in plain fp32 (the reference GEMM's arithmetic).
__device__ __noinline__ void exact_partial(const Tile& tile, float* part, int chunks, int tid) {
    const int kb_begin = tile.chunk_begin * NB, kb_end = min((tile.chunk_begin + chunks) * NB, KBLOCKS);
    for (int p = tid; p < BM * (BN / 4); p += NTHREADS) {
        const int ml = p % BM, nl = (p / BM) * 4, gm = tile.m0 + ml;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        for (int kb = kb_begin; kb < kb_end && gm < tile.m_size; ++kb) {
            const u16* row = tile.a + (size_t)gm * GK + kb * 32;
            u32 amax = 0;
            for (int i = 0; i < 32; ++i) amax = max(amax, (u32)(row[i] & 0x7FFFu));  // NaN bits sort last
            const int e = block_exponent(amax);
            for (int i = 0; i < 32; ++i) {
                const float av = quant_dequant(row[i], e);
                for (int j = 0; j < 4; ++j)
                    if (tile.n0 + nl + j < GN)
                        acc[j] = fmaf(av, b_dequant(tile.b_q, tile.b_scale_sh, tile.n0 + nl + j, kb * 32 + i), acc[j]);
            }
        }
        for (int j = 0; j < 4; ++j) part[ml * P_STRIDE + nl + j] = acc[j];
    }
}

// ---- the GEMM -------------------------------------------------------------------------------

// Generic-proxy stores of the operands -> their wgmma (async-proxy) reads.
__device__ __forceinline__ void proxy_fence() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// A quantized in place in the stage, this warpgroup's B rows converted, both fenced for
// the wgmmas. Returns whether a B scale byte was below the folded range.
__device__ __forceinline__ bool convert_chunk(const Tile& tile, u8* stage, u8* b_op, int lc, int tid, int warp, int lane) {
    quantize_a_chunk(stage, warp, lane);
    const bool low = convert_b_chunk(tile, stage, b_op, lc, tid);
    proxy_fence();
    return low;
}

// One chunk's KC/16 wgmmas of this warpgroup (its 64 rows of the B operand at wg_row0), one group.
__device__ __forceinline__ void issue_chunk_mmas(float (&acc)[BM / 8][4], u32 b_op, u32 a_op, int wg_row0) {
    wgmma_fence();
#pragma unroll
    for (int step = 0; step < KC / 16; ++step)
        wgmma_ss_bf16<BM>(acc, operand_desc<BN>(b_op, step, wg_row0), operand_desc<BM>(a_op, step, 0));
    wgmma_commit();
}

extern "C" __global__ void __launch_bounds__(NTHREADS, 1) CLUSTER_ATTR
mxfp4_gemm_pipe(const u16* __restrict__ a, const u8* __restrict__ b_q, const u8* __restrict__ b_scale_sh,
                u16* __restrict__ c, const int m_size
#if COPY_TMA
                , const __grid_constant__ TensorMap a_map, const __grid_constant__ TensorMap b_map,
                const __grid_constant__ TensorMap s_map
#endif
                ) {
    extern __shared__ __align__(128) u8 smem[];
    u8* const b_ops = smem + STAGES * STAGE_BYTES;
    // The warp index through a shuffle: ptxas then knows the roles below are warp-uniform and keeps
    // the wgmmas of the converting warps asynchronous (else: C7518, serialized wgmmas).
    const int tid = threadIdx.x, lane = tid & 31, warp = __shfl_sync(0xFFFFFFFFu, tid >> 5, 0);
    // Warp-uniform roles: the warpgroups convert and multiply (and issue the copies too when there
    // are no copy warps); the COPY_WARPS warps after them issue every copy and nothing else.
    const bool converts = warp < CONVERTERS / 32;
    const bool copies = COPY_WARPS ? !converts : true;
    const int issuer = COPY_WARPS ? tid - CONVERTERS : tid;
    const int split = blockIdx.y;
    const int chunk_begin = split * NCHUNK / SPLITK;
    const int chunks = (split + 1) * NCHUNK / SPLITK - chunk_begin;
    const Tile tile = {a, b_q, b_scale_sh, m_size, (int)blockIdx.z * BM, (int)blockIdx.x * BN, chunk_begin};

    float acc[BM / 8][4];
#pragma unroll
    for (int j = 0; j < BM / 8; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[j][q] = 0.f;
#if COPY_WARPS && SPLITK == 1
    // Pins the zeroing here: otherwise ptxas sinks it into the chunk loop and serializes every
    // wgmma (advisory C7515) in these builds.
    wgmma_keep(acc);
#endif
    bool b_scale_low = false;
    const int wg_row0 = (warp >> 2) * 64;  // this warpgroup's 64 rows of the B operand
#if COPY_WARPS
    // Warp-specialized: the copy warps fill the ring as far ahead as its stages are free (`empty`,
    // arrived by every converting thread once nothing reads the stage any more) and signal `full`
    // when their copies land; the converting warpgroups wait on `full`, convert, and issue the
    // chunk's wgmmas.
    // A is quantized in place in the stage, so the stage is free once the chunk's MMAs are done
    // (released one chunk later); one named barrier over the converters publishes A.
    __shared__ unsigned long long full[STAGES], empty[STAGES];
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], COPY_TMA ? 1 : ISSUERS);
            mbar_init(&empty[s], CONVERTERS);
        }
        if (COPY_TMA) mbar_init_fence();
    }
    __syncthreads();
    if (!converts) {
#pragma unroll 1
        for (int lc = 0; lc < chunks; ++lc) {
            const int s = lc % STAGES;
#if COPY_TMA
            (void)issuer;
            if (lane != 0) break;
            if (lc >= STAGES) mbar_wait(&empty[s], (lc / STAGES - 1) & 1);
            issue_chunk_tma(a_map, b_map, s_map, tile, smem + s * STAGE_BYTES, lc, &full[s]);
#else
            if (lc >= STAGES) mbar_wait(&empty[s], (lc / STAGES - 1) & 1);
            issue_chunk(tile, smem + s * STAGE_BYTES, lc, issuer);
            mbar_arrive_on_copies(&full[s]);
#endif
        }
    } else {
#pragma unroll 1
        for (int lc = 0; lc < chunks; ++lc) {
            const int s = lc % STAGES;
            mbar_wait(&full[s], (lc / STAGES) & 1);
            u8* const stage = smem + s * STAGE_BYTES;
            u8* const b_op = b_ops + (lc & 1) * BOP_BYTES;
            b_scale_low |= convert_chunk(tile, stage, b_op, lc, tid, warp, lane);
            converters_sync();
            issue_chunk_mmas(acc, smem_addr(b_op), smem_addr(stage), wg_row0);
            wgmma_wait<1>();  // chunk lc-1's MMAs are done
            if (lc > 0) mbar_arrive(&empty[(lc - 1) % STAGES]);
        }
    }
#else
    // Every thread copies, converts and multiplies: a CTA barrier per chunk publishes the landed
    // copies and frees the stage of chunk lc-2.
#pragma unroll 1
    for (int j = 0; j < STAGES - 2; ++j) {
        if (j < chunks) issue_chunk(tile, smem + j * STAGE_BYTES, j, issuer);
        else cp_async_commit();
    }
#pragma unroll 1
    for (int lc = 0; lc < chunks; ++lc) {
        cp_async_wait<STAGES - 3>();  // this thread's copies of chunk lc (groups complete in order)
        __syncthreads();  // everyone's copies; and every warpgroup's MMAs of chunk lc-2 are done
        u8* const stage = smem + (lc % STAGES) * STAGE_BYTES;
        const int refill = lc + STAGES - 2;
        if (refill < chunks) issue_chunk(tile, smem + (refill % STAGES) * STAGE_BYTES, refill, issuer);
        else cp_async_commit();
        u8* const b_op = b_ops + (lc & 1) * BOP_BYTES;
        b_scale_low |= convert_chunk(tile, stage, b_op, lc, tid, warp, lane);
        __syncthreads();
        issue_chunk_mmas(acc, smem_addr(b_op), smem_addr(stage), wg_row0);
        wgmma_wait<1>();
    }
#endif
    wgmma_wait<0>();  // (copy warps: nothing outstanding)
    wgmma_keep(acc);
    if (copies) cp_async_wait<0>();

    bool out_of_range = b_scale_low;
#pragma unroll
    for (int j = 0; j < BM / 8; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) out_of_range |= !(fabsf(acc[j][q]) <= 3.402823466e38f);  // inf or NaN
    const bool wide = __syncthreads_or(out_of_range);  // also: stage space becomes the partial tile

    // Partial tile [m][n] in shared memory (accumulator d[j][q]: row n = 16 * warp + g (+8 for
    // q >= 2) of the tile, column m = 8j + 2t (+1 for odd q)), then the sum over cluster ranks.
    float* const part = reinterpret_cast<float*>(smem);
    if (wide) {
        exact_partial(tile, part, chunks, tid);
    } else if (converts) {
        const int nl = warp * 16 + (lane >> 2), ml0 = 2 * (lane & 3);
#pragma unroll
        for (int j = 0; j < BM / 8; ++j) {
            float* p = part + (8 * j + ml0) * P_STRIDE + nl;
            p[0] = acc[j][0];
            p[P_STRIDE] = acc[j][1];
            p[8] = acc[j][2];
            p[P_STRIDE + 8] = acc[j][3];
        }
    }
    if constexpr (SPLITK > 1) cluster_sync();
    else __syncthreads();
    store_split_sum<SPLITK, BM, BN, P_STRIDE, NTHREADS>(part, c, GN, tile.m0, tile.n0, m_size, GN, split, tid);
    if constexpr (SPLITK > 1) cluster_sync_relaxed();  // peers may still be reading this CTA's partial tile
}

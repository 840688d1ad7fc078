// a4w4 MXFP4 GEMM for Hopper (sm_90), one launch per call:  C[M,N] = dq(q(A)) @ dq(B)^T.
//
// Swap-AB: the MMA's 16-row side is N (weights), its 8-column side is M (activations).
// Both operands enter `mma.m16n8k16.bf16` with their e8m0 scales folded in, so the fp32
// accumulators run over the whole K with no per-block epilogue:
//   B: a nibble (s,e1,e0,m) placed as bf16 bits s<<15 | e1e0m<<6 is exactly e2m1 * 2^-126
//      (code 1 = 0.5 becomes a bf16 subnormal); one bf16x2 multiply by 2^(sb-64) scales it.
//   A: quantized in the CTA (format.md §2, bit-exact rounding via a magic-number add), stored in
//      shared memory as bf16 e2m1 * 2^(sa-127) * 2^63 (exact: two significant bits).
//   Products are a*b*2^(sa+sb-254): exact in fp32 while both operands are normal bf16, i.e. B
//   scale bytes in [65, 191] (or 0: an all-zero block) and A block exponents <= 62 (|A| up to
//   ~2^64): always, for real data. Outside that range a CTA recomputes its tile exactly
//   (`exact_partial`, below).
// The 32 K values of a thread's scale block may be visited in any order as long as A and B
// agree, so each thread owns one whole scale block per 128-K chunk and pairs its nibbles as
// (j, j+4): that makes the B conversion a few shifts and masks.
// Split-K runs across the CTAs of one thread-block cluster; partial tiles are summed in rank
// order through distributed shared memory (deterministic; no scratch, no counters).
// With CN > 1 the cluster also spans CN neighbouring N tiles that share one A slab: each
// CTA quantizes 1/CN of it and stores the fragments into every peer, so A is quantized once
// per cluster instead of once per N tile.
//
// Compile-time configuration (-D, as plans.py's compile_options writes it): GN GK
// (shape; M is a launch argument, so one build serves every M: rows >= M are zero-filled on load
// and never stored), BM (rows of M per CTA, multiple of 8), WN (warps along N), NT (16-row N tiles
// per warp), WK (warps along K), SPLITK (CTAs along K), and where they differ from their
// defaults CN (N tiles sharing A; cluster size CN * SPLITK) and RING (B chunks in flight per
// thread; 0 = all of a warp's chunks at once). Without GN the file builds a default plan.

#ifndef GN
#define GN 256
#define GK 512
#define BM 16
#define WN 2
#define NT 1
#define WK 2
#define SPLITK 1
#endif
#ifndef CN
#define CN 1
#endif
#ifndef RING
#define RING 0
#endif
#include "mxfp4_exact.h"
#include "mxfp4_fold_sm90.h"

constexpr int KBLOCKS = GK / 32;                        // scale blocks per row
constexpr int SCOLS = (KBLOCKS + 7) / 8 * 8;            // columns of the shuffled scale tensor
constexpr int NCHUNK = (GK + 127) / 128;                // 128-K chunks (the last may be half)
constexpr int CH_MAX = (NCHUNK + SPLITK - 1) / SPLITK;  // chunks per split, at most
constexpr int CHW = (CH_MAX + WK - 1) / WK;             // chunks per warp, at most
constexpr int MT = BM / 8;                              // 8-column MMA tiles along M
constexpr int BN = WN * NT * 16;
constexpr int NWARPS = WN * WK;
constexpr int NTHREADS = NWARPS * 32;
// 4-word loop unrolled for ILP, unless the accumulators already fill the register file.
constexpr int WORD_UNROLL = NT * MT < 16 ? 4 : 1;
// B_LATE: issue the B copies only once this thread's A rows have landed, so a large A slab does
// not come back behind the B traffic (measured on the H200, notes/cuda.md); for a small slab
// issuing B at once is better.
constexpr bool B_LATE = BM * ((GK + 127) / 128 + SPLITK - 1) / SPLITK * 256 >= 16384;

// Shared memory: B pieces (each thread reads back only what it copied), A fragments, B scales;
// after the MMAs the same space holds the fp32 partial tiles.
// B pieces are private to the thread that copies them, so a ring of B_SLOTS chunk slots needs no
// barrier: a thread refills a slot only after its own conversions consumed it.
constexpr int B_SLOTS = RING == 0 || RING >= CHW ? CHW : RING;
constexpr bool B_RING = B_SLOTS < CHW;
constexpr int B_SMEM = B_SLOTS * NT * 2 * NTHREADS * 16;
constexpr int A_SMEM = MT * CH_MAX * 2048;
constexpr int S_PER_THREAD = CHW * NT * 2;                 // scale bytes each thread uses
constexpr int S_SMEM = (S_PER_THREAD * NTHREADS + 15) / 16 * 16;
constexpr int P_STRIDE = BN + 4;  // floats; 4 mod 32 keeps the fragment stores conflict-free
constexpr int P_SMEM = WK * BM * P_STRIDE * 4;
// Dynamic shared memory = max(B_SMEM + A_SMEM + S_SMEM, P_SMEM); plans.py mirrors this.

static_assert(BM % 8 == 0 && BM <= 256, "BM");
static_assert(CHW <= 32 && S_PER_THREAD <= 64, "too many chunks per warp");
static_assert(CN >= 1 && CN * SPLITK <= 8, "cluster size");

// Index of the 16-row N tile that warp wn handles as its nt-th.
__device__ __forceinline__ int n_tile16(int wn, int nt) { return wn * NT + nt; }

// ---- small helpers -----------------------------------------------------------------------

__device__ __forceinline__ void mma_bf16(float (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}


// Flat index of unshuffled scale (r, c) in the shuffled tensor (format.md §3), split into a row part
// and a column part: index = scale_row_offset(r) + scale_col_offset(c).
__device__ __forceinline__ int scale_row_offset(int r) {
    return (r >> 5) * SCOLS * 32 + (r & 15) * 4 + ((r & 31) >> 4);
}
__device__ __forceinline__ int scale_col_offset(int c) {
    return (c >> 3) * 256 + (c & 3) * 64 + ((c & 7) >> 2) * 2;
}

// ---- A: format.md §2 quantization of 8 consecutive values; 4 lanes (xor 8, 16) share a block ----

// Quantizes the 8 bf16 x0..x7 in `raw`, two at a time in bf16x2 arithmetic. Returns
// r[a] = (x_a, x_{a+4}) / 2^e rounded onto the e2m1 grid (exact bf16 in [-6, 6]) and the
// block's scale exponent e.
__device__ __forceinline__ void quantize8(uint4 raw, u32 (&r)[4], int& e) {
    u32 x[4];
    x[0] = prmt(raw.x, raw.z, 0x5410);  // (x0, x4)
    x[1] = prmt(raw.x, raw.z, 0x7632);  // (x1, x5)
    x[2] = prmt(raw.y, raw.w, 0x5410);  // (x2, x6)
    x[3] = prmt(raw.y, raw.w, 0x7632);  // (x3, x7)
    // amax on magnitude bits (bf16 order like unsigned integers; NaN stays largest).
    u32 m = max_u16x2(max_u16x2(x[0] & 0x7FFF7FFFu, x[1] & 0x7FFF7FFFu),
                      max_u16x2(x[2] & 0x7FFF7FFFu, x[3] & 0x7FFF7FFFu));
    m = max(m & 0xFFFFu, m >> 16);
    m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, 8));
    m = max(m, __shfl_xor_sync(0xFFFFFFFFu, m, 16));
    e = block_exponent(m);  // kernels/mxfp4_exact.h
    const u32 inv_scale = a_inverse_scale(e);
#pragma unroll
    for (int a = 0; a < 4; ++a) r[a] = round_e2m1_bf16x2(mul_bf16x2(x[a], inv_scale));
}

// The 8 values as MMA operand pairs (x_a, x_{a+4}) * 2^(sa-127) * 2^63 (see the top of the file).
__device__ __forceinline__ uint4 quantize_fragment(uint4 raw) {
    u32 rq[4];
    int e;
    quantize8(raw, rq, e);
    const u32 fold = a_fold(e);  // inf when e > 64: see exact_partial
    return make_uint4(mul_bf16x2(rq[0], fold), mul_bf16x2(rq[1], fold), mul_bf16x2(rq[2], fold),
                      mul_bf16x2(rq[3], fold));
}

// e2m1 code of a rounded bf16 value r (16 bits), with x's sign bit (debug path).
__device__ __forceinline__ u32 e2m1_code(u32 r, u32 x_sign) {
    const float q = __uint_as_float((r & 0x7FFFu) << 16);
    const u32 mag = q == 0.f ? 0u : q < 1.f ? 1u : (__float_as_uint(q) >> 22) - 252u;
    return mag | (x_sign ? 8u : 0u);
}

// ---- the GEMM ------------------------------------------------------------------------------

// Shared-memory offset of A task `task` (a row pair and a 128-K chunk) for this lane: lane =
// i*8 + r*4 + t holds row 2*pair+r, K values 32t+8i..+7; fragment layout [m/8][chunk][i][m%8][t].
__device__ __forceinline__ int a_fragment_offset(int task, int chunks, int lane) {
    const int mp = task / chunks, lc = task - mp * chunks;
    const int ml = 2 * mp + ((lane >> 2) & 1);
    return (((ml >> 3) * CH_MAX + lc) * 4 + (lane >> 3)) * 512 + ((ml & 7) * 4 + (lane & 3)) * 16;
}

#if CN > 1
// A 1-D cluster of CN * SPLITK CTAs along x; rank = n_rank * SPLITK + split.
#define CLUSTER_ATTR __cluster_dims__(CN * SPLITK, 1, 1)
constexpr int CLUSTER = CN * SPLITK;
__device__ __forceinline__ int cta_split() { return (int)(blockIdx.x % CLUSTER) % SPLITK; }
__device__ __forceinline__ int cta_n_rank() { return (int)(blockIdx.x % CLUSTER) / SPLITK; }
__device__ __forceinline__ int cta_n_tile() { return (int)(blockIdx.x / CLUSTER) * CN + cta_n_rank(); }
__device__ __forceinline__ u32 split_peer_rank(int s) { return (u32)(cta_n_rank() * SPLITK + s); }
#else
#if SPLITK > 1
#define CLUSTER_ATTR __cluster_dims__(1, SPLITK, 1)
#else
#define CLUSTER_ATTR
#endif
__device__ __forceinline__ int cta_split() { return (int)blockIdx.y; }
__device__ __forceinline__ int cta_n_rank() { return 0; }
__device__ __forceinline__ int cta_n_tile() { return (int)blockIdx.x; }
__device__ __forceinline__ u32 split_peer_rank(int s) { return (u32)s; }
#endif

// ---- exact fallback (operands outside the folded-scale range; never taken on real data) -----

__device__ float b_dequant(const u8* __restrict__ b_q, const u8* __restrict__ b_scale_sh, int n, int k) {
    const u32 byte = b_q[(size_t)n * (GK / 2) + k / 2];
    return e2m1_e8m0_value(k & 1 ? byte >> 4 : byte & 15u, b_scale_sh[scale_row_offset(n) + scale_col_offset(k / 32)]);
}

// A CTA whose operands leave the folded-scale range (a B scale byte in 1..64, or an A block
// exponent or B scale that the fold turns into inf: then its partial sums are not finite)
// recomputes its partial tile here: slow, but never silently wrong.
// This CTA's partial tile over its K range in plain fp32 (the reference GEMM's arithmetic), into
// warp slice 0 of `part`; the other slices are zeroed so the usual reduction follows.
__device__ __noinline__ void exact_partial(const u16* __restrict__ a, const u8* __restrict__ b_q,
                                          const u8* __restrict__ b_scale_sh, float* part, int m_size, int m0,
                                          int n0, int chunk_begin, int chunks, int tid) {
    const int kb_begin = chunk_begin * 4, kb_end = min((chunk_begin + chunks) * 4, KBLOCKS);
    for (int p = tid; p < BM * (BN / 4); p += NTHREADS) {
        const int ml = p % BM, nl = (p / BM) * 4, gm = m0 + ml;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        for (int kb = kb_begin; kb < kb_end && gm < m_size; ++kb) {
            const u16* row = a + (size_t)gm * GK + kb * 32;
            u32 amax = 0;
            for (int i = 0; i < 32; ++i) amax = max(amax, (u32)(row[i] & 0x7FFFu));  // NaN bits sort last
            const int e = block_exponent(amax);
            for (int i = 0; i < 32; ++i) {
                const float av = quant_dequant(row[i], e);
                for (int j = 0; j < 4; ++j)
                    if (n0 + nl + j < GN) acc[j] = fmaf(av, b_dequant(b_q, b_scale_sh, n0 + nl + j, kb * 32 + i), acc[j]);
            }
        }
        for (int w = 0; w < WK; ++w)
            for (int j = 0; j < 4; ++j) part[(w * BM + ml) * P_STRIDE + nl + j] = w == 0 ? acc[j] : 0.f;
    }
}

extern "C" __global__ void __launch_bounds__(NTHREADS) CLUSTER_ATTR
mxfp4_gemm(const u16* __restrict__ a, const u8* __restrict__ b_q, const u8* __restrict__ b_scale_sh,
           u16* __restrict__ c, const int m_size) {
    extern __shared__ __align__(16) u8 smem[];
    u8* const b_smem = smem;
    u8* const a_smem = smem + B_SMEM;
    u8* const s_smem = smem + B_SMEM + A_SMEM;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wn = warp % WN, wk = warp / WN;
    const int g = lane >> 2, t = lane & 3;
    const int n0 = cta_n_tile() * BN;
    const int split = cta_split();
#if CN > 1
    // Peers write into this CTA's shared memory below: make sure every CTA has started.
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
    const int m0 = blockIdx.z * BM;
    const int chunk_begin = split * NCHUNK / SPLITK;
    const int chunks = (split + 1) * NCHUNK / SPLITK - chunk_begin;

    // 1. A rows of this K range, raw bf16, each 16 bytes staged where its fragment will live.
    // This CTA's share of the tasks: every CN-th group of NWARPS.
    const int a_tasks = (BM / 2) * chunks;
    const int a_task0 = cta_n_rank() * NWARPS + warp;
#pragma unroll 1
    for (int task = a_task0; task < a_tasks; task += NWARPS * CN) {
        const int mp = task / chunks, lc = task - mp * chunks;
        const int gm = m0 + 2 * mp + ((lane >> 2) & 1);
        const int k = (chunk_begin + lc) * 128 + 32 * t + 8 * (lane >> 3);
        const bool valid = gm < m_size && k < GK;
        cp_async16(smem_addr(a_smem + a_fragment_offset(task, chunks, lane)),
                   valid ? a + (size_t)gm * GK + k : a, valid);
    }
    cp_async_commit();

    // 2. B codes: every thread copies the 16-byte pieces it will consume, one group per chunk
    // (the first B_SLOTS chunks now; with a ring, the rest as slots free up in step 5).
    // Loops over chunks stay rolled: right after the harness's L2 flush every instruction-cache
    // line is a DRAM round trip, so the executed code must stay small.
    auto copy_b_chunk = [&](int j) {
        const int lc = wk + j * WK;
        const int block = (chunk_begin + lc) * 4 + t;
        const int slot = B_RING ? j % B_SLOTS : j;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = n0 + n_tile16(wn, nt) * 16 + g + 8 * h;
                const bool valid = (!B_RING || j < CHW) && lc < chunks && row < GN && block < KBLOCKS;
                const u8* src = valid ? b_q + (size_t)row * (GK / 2) + block * 16 : b_q;
                cp_async16(smem_addr(b_smem + ((slot * NT + nt) * 2 + h) * NTHREADS * 16 + tid * 16), src, valid);
            }
        }
        cp_async_commit();
    };
    if (!B_LATE) {
#pragma unroll 1
        for (int j = 0; j < B_SLOTS; ++j) copy_b_chunk(j);
    }

    // 3. B scales: the bytes this thread's MMAs use (read now, parked in shared memory after the
    // A work). Never the padding: rows < N and blocks < K/32 only. (ptxas sinks these loads below
    // the A wait; parking them before it was measured slower overall: notes/cuda.md.)
    u32 s_val[S_PER_THREAD];
#pragma unroll
    for (int j = 0; j < CHW; ++j) {
        const int lc = wk + j * WK;
        const int block = (chunk_begin + lc) * 4 + t;
#pragma unroll
        for (int q = 0; q < NT * 2; ++q) {
            const int row = n0 + n_tile16(wn, q / 2) * 16 + g + 8 * (q % 2);
            const bool valid = lc < chunks && row < GN && block < KBLOCKS;
            s_val[j * NT * 2 + q] = valid ? __ldg(b_scale_sh + scale_row_offset(row) + scale_col_offset(block)) : 0u;
        }
    }

    // 4. A: quantize the raw rows staged in shared memory in place, into MMA-ready fragments;
    // two tasks per iteration so their dependent chains (loads, shuffles, rounding) overlap.
    if (B_LATE) {
        cp_async_wait<0>();  // this thread's A group, the only one so far
#pragma unroll 1
        for (int j = 0; j < B_SLOTS; ++j) copy_b_chunk(j);
    } else {
        cp_async_wait<(B_SLOTS < 7 ? B_SLOTS : 7)>();  // this thread's A group (groups complete in order)
    }
#if CN > 1
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
#endif
#pragma unroll 1
    for (int task = a_task0; task < a_tasks; task += 2 * NWARPS * CN) {
        const bool has_second = task + NWARPS * CN < a_tasks;  // warp-uniform
        uint4* const first = reinterpret_cast<uint4*>(a_smem + a_fragment_offset(task, chunks, lane));
        uint4* const second = has_second
            ? reinterpret_cast<uint4*>(a_smem + a_fragment_offset(task + NWARPS * CN, chunks, lane)) : first;
        const uint4 raw_first = *first, raw_second = *second;
        const uint4 q_first = quantize_fragment(raw_first);
        const uint4 q_second = quantize_fragment(raw_second);
#if CN > 1
#pragma unroll
        for (int r = 0; r < CN; ++r) {  // same slot in every CTA of this split
            const u32 rank = (u32)(r * SPLITK + split);
            st_cluster_u4(smem_addr(first), rank, q_first);
            if (has_second) st_cluster_u4(smem_addr(second), rank, q_second);
        }
#else
        *first = q_first;
        if (has_second) *second = q_second;
#endif
    }
    // A B scale below the folded range (see exact_partial), checked here where the bytes are
    // consumed anyway: a check right after the loads made the warp wait for them before the A
    // work (measured +0.7-1.6 µs). Byte 0 (an all-zero block, or no block) is exact as it is.
    bool b_scale_low = false;
#pragma unroll
    for (int q = 0; q < S_PER_THREAD; ++q) {
        s_smem[q * NTHREADS + tid] = (u8)s_val[q];
        b_scale_low |= s_val[q] - 1u < 64u;
    }
#if CN > 1
    cluster_sync();  // every peer's A fragments have landed here
#else
    __syncthreads();
#endif

    // 5. MMAs over this warp's chunks.
    float acc[NT][MT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int q = 0; q < 4; ++q) acc[nt][mt][q] = 0.f;

#pragma unroll 1
    for (int j = 0; j < CHW; ++j) {
        const int lc = wk + j * WK;
        if (lc >= chunks) break;
        if (B_RING) {  // one refill group per earlier iteration, so always B_SLOTS - 1 after this chunk's
            cp_async_wait<(B_RING ? B_SLOTS - 1 : 0)>();
        } else {
            switch (CHW - 1 - j) {  // wait for this chunk's group (groups complete in order)
                case 0: cp_async_wait<0>(); break;
                case 1: cp_async_wait<1>(); break;
                case 2: cp_async_wait<2>(); break;
                case 3: cp_async_wait<3>(); break;
                case 4: cp_async_wait<4>(); break;
                case 5: cp_async_wait<5>(); break;
                case 6: cp_async_wait<6>(); break;
                default: cp_async_wait<7>(); break;
            }
        }
        uint4 wb[NT][2];
        u32 mult[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const u8* pieces = b_smem + (((B_RING ? j % B_SLOTS : j) * NT + nt) * 2 + h) * NTHREADS * 16;
                const int scales = ((j * NT + nt) * 2 + h) * NTHREADS;
                wb[nt][h] = *reinterpret_cast<const uint4*>(pieces + tid * 16);
                mult[nt][h] = b_scale_multiplier(s_smem[scales + tid]);
            }
#pragma unroll WORD_UNROLL
        for (int i = 0; i < 4; ++i) {  // word i of each piece; the words rotate through .x
            u32 bf[NT][2][4];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const u32 w = wb[nt][h].x;
                    wb[nt][h] = make_uint4(wb[nt][h].y, wb[nt][h].z, wb[nt][h].w, w);
                    bf[nt][h][0] = mul_bf16x2(nibble_pair<0>(w), mult[nt][h]);
                    bf[nt][h][1] = mul_bf16x2(nibble_pair<1>(w), mult[nt][h]);
                    bf[nt][h][2] = mul_bf16x2(nibble_pair<2>(w), mult[nt][h]);
                    bf[nt][h][3] = mul_bf16x2(nibble_pair<3>(w), mult[nt][h]);
                }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const uint4 x = *reinterpret_cast<const uint4*>(a_smem + ((mt * CH_MAX + lc) * 4 + i) * 512 + lane * 16);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    mma_bf16(acc[nt][mt], bf[nt][0][0], bf[nt][1][0], bf[nt][0][1], bf[nt][1][1], x.x, x.y);
                    mma_bf16(acc[nt][mt], bf[nt][0][2], bf[nt][1][2], bf[nt][0][3], bf[nt][1][3], x.z, x.w);
                }
            }
        }
        if (B_RING) copy_b_chunk(j + B_SLOTS);  // this slot's words are all consumed
    }
    cp_async_wait<0>();
    bool out_of_range = b_scale_low;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int q = 0; q < 4; ++q) out_of_range |= !(fabsf(acc[nt][mt][q]) <= 3.402823466e38f);  // inf or NaN
    const bool wide = __syncthreads_or(out_of_range);  // also: operand space becomes the partial-tile space

    // 6. Partial tile [wk][m][n] in shared memory, then sum over warps and cluster ranks.
    float* const part = reinterpret_cast<float*>(smem);
    if (wide) {
        exact_partial(a, b_q, b_scale_sh, part, m_size, m0, n0, chunk_begin, chunks, tid);
    } else {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int nl = n_tile16(wn, nt) * 16 + g, ml = mt * 8 + 2 * t;
                float* p = part + (wk * BM + ml) * P_STRIDE + nl;
                p[0] = acc[nt][mt][0];
                p[P_STRIDE] = acc[nt][mt][1];
                p[8] = acc[nt][mt][2];
                p[P_STRIDE + 8] = acc[nt][mt][3];
            }
    }
#if SPLITK > 1
    cluster_sync();
#else
    __syncthreads();
#endif
    constexpr int F4 = BM * BN / 4;
    const int f_begin = split * F4 / SPLITK, f_end = (split + 1) * F4 / SPLITK;
    for (int f = f_begin + tid; f < f_end; f += NTHREADS) {
        const int ml = f / (BN / 4), nl = (f % (BN / 4)) * 4;
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int s = 0; s < SPLITK; ++s)
#pragma unroll
            for (int w = 0; w < WK; ++w) {
                const float* p = part + (w * BM + ml) * P_STRIDE + nl;
#if SPLITK > 1
                const float4 v = ld_cluster_f4(smem_addr(p), split_peer_rank(s));
#else
                const float4 v = *reinterpret_cast<const float4*>(p);
#endif
                sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
            }
        const int gm = m0 + ml, gn = n0 + nl;
        if (gm < m_size && gn < GN) store_bf16x4(c + (size_t)gm * GN + gn, sum);
    }
#if SPLITK > 1
    cluster_sync();  // peers may still be reading this CTA's partial tile
#endif
}

// Debug: the fused A quantization alone -> codes [m_size, GK/2], scale bytes [m_size, GK/32].
// One warp handles 8 scale blocks: lane = i*8 + slot, 8 values per lane.
extern "C" __global__ void mxfp4_quant_debug(const u16* __restrict__ a, u8* __restrict__ codes, u8* __restrict__ scales,
                                             const int m_size) {
    const int lane = threadIdx.x & 31;
    const int i = lane >> 3, slot = lane & 7;
    const int block = (blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5)) * 8 + slot;
    const bool valid = block < m_size * KBLOCKS;
    const int row = block / KBLOCKS, col = block % KBLOCKS;
    const u16* src = a + (size_t)row * GK + col * 32 + 8 * i;
    const uint4 raw = valid ? ld_global_nc(src) : make_uint4(0, 0, 0, 0);
    u32 rq[4];
    int e;
    quantize8(raw, rq, e);
    if (!valid) return;
    const u32 w[4] = {raw.x, raw.y, raw.z, raw.w};
    u32 packed = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const u32 r = j < 4 ? rq[j] & 0xFFFFu : rq[j - 4] >> 16;
        const u32 x_sign = j & 1 ? w[j / 2] >> 31 : (w[j / 2] >> 15) & 1u;
        packed |= e2m1_code(r, x_sign) << (4 * j);
    }
    *reinterpret_cast<u32*>(codes + (size_t)row * (GK / 2) + col * 16 + 4 * i) = packed;
    if (i == 0) scales[(size_t)row * KBLOCKS + col] = (u8)(e + 127);
}

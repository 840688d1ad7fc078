"""Timing ladder between the memory floor and a GEMM's skeleton (NVIDIA GPU, sm_90; timing only).

The memory-floor bench path (mxfp4_mm/floor_kernels.py) reads a shape's bytes with every thread of
up to 8 CTAs per SM issuing its loads at once. A GEMM reads the same bytes in another structure: one
CTA per (N tile, K range), A re-read by every N tile, partial tiles summed across the K ranges. Each
rung below adds one of those to a kernel that does no arithmetic but fold its loads (so none is
dropped), so each rung's time above the previous one is what that structure costs
(notes/next.md, the cuda section):

  floor          the memory-floor path itself
  pattern        the same bytes in the GEMM's pattern: CTA (tile, split) reads its tile's B rows and
                 scales over its K range, and 1/tiles of A's rows there (A read once in all)
  A bf16         every CTA reads all of A's rows over its K range, as bf16 (what the kernels do)
  A compact      the same rows as quantized codes + scales (a quarter of the bytes and a bit more)
  A published    A compact, but made in the same launch: every CTA first reads its 1/G share of A's
                 bf16 bytes and writes a compact share (the bytes a quantizer would write) to a
                 scratch, counts itself on a counter (release), reads its B, then waits until all G
                 CTAs have counted (acquire; a per-call epoch, no reset) and reads its compact rows
                 from the scratch. Its time above `A compact` is what quantizing A once per call in
                 the GEMM's own launch costs (next.md, "What the targets ask of a kernel"); it needs
                 every CTA resident at once (the geometries here are one or two CTAs an SM; the wait
                 gives up after ~2^22 polls and the run reports it, rather than hang)
  ..., 12 loads  pattern and A compact again with 12 loads in flight per thread instead of 4 (48 KB a
                 CTA, nearer what the shipped kernel issues up front; 16 would spill)
  + cluster sum  A bf16, then partial tiles summed through the cluster's shared memory
  + global sum   A bf16, then partial tiles summed through global memory and a per-tile counter
  TMA B          the pattern's B codes through tensor-map copies (cp.async.bulk.tensor) into a ring
                 of stages in shared memory, issued by one thread STAGES chunks ahead (up to ~200 KB
                 in flight a CTA), the K range's scale bytes by bulk copies up front; no A
  TMA A bf16     the same, with all of A's rows over the K range in the same stages, as bf16
  TMA A codes    the same, with A's rows as packed codes instead (the compact A without its scale
                 bytes, 1/17 of it)
  TMA A published  (geometries of at most one CTA per SM) TMA A codes, the codes made by the launch itself: the copy thread issues the first
                 STAGES chunks' B boxes, the other warps meanwhile read the CTA's 1/G share of A's bf16
                 bytes and store its packed codes to a scratch and count the CTA (release); the copy
                 thread waits for all G (acquire), then issues the A boxes from the scratch. Its time
                 above `TMA A codes` is what quantizing A once per call costs when B's copies are
                 already in flight (the same residency caveat as `A published`)
  The TMA rungs ask whether a GEMM fed by one copy thread reads at the floor's rate with one CTA an
  SM, where the rungs above hold 16 or 48 KB in flight a CTA and the floor path 128 KB an SM.
  TMA B + bf16 MMA, TMA B + fp8 MMA
                 `TMA B` with a producer warpgroup (one thread copies) and one consumer warpgroup per 64
                 rows of BN that issues, per landed chunk, the GEMM's wgmmas for it (m64 x n(M, to a
                 multiple of 8) x KC: bf16 k16 or e4m3 k32 steps, operands from shared memory, values
                 without meaning), waits for them and frees the stage. Their time above `TMA B` is what
                 the MMAs cost when nothing else (no conversion, no A, no split-K sum) competes.

Every rung writes C once (values without meaning). Timed with the harness's method (caches flushed,
events around one call), rungs interleaved per repetition, medians in µs.

    python3 tools/floor_ladder.py                                  # the six benchmark shapes
    python3 tools/floor_ladder.py --geometry "64,7168,2048:256,4"  # M,N,K:BN,SPLIT
"""

import argparse
import ctypes
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cuda_lab  # noqa: E402  (tools/, beside this file)
from mxfp4_mm import bench, floor_kernels, runtime  # noqa: E402
from mxfp4_mm.backends import cuda  # noqa: E402

# (BN, SPLIT) per benchmark shape: about one CTA per SM, K ranges of whole 256-K scale chunks.
GEOMETRY = {(4, 2880, 512): (64, 2), (16, 2112, 7168): (64, 4), (32, 4096, 512): (64, 2),
            (32, 2880, 512): (64, 2), (64, 7168, 2048): (128, 2), (256, 3072, 1536): (128, 6)}
THREADS = 256
# (name, A_MODE, REDUCE, LOADS): A_MODE 0 = A once in all, 1 = bf16 per tile, 2 = compact per tile,
# 3 = compact per tile, published by the launch itself;
# REDUCE 0 = none (split s writes C rows s mod SPLIT), 1 = cluster shared memory, 2 = global + counter;
# LOADS: 16-byte loads each thread has in flight before it uses any.
RUNGS = (("pattern", 0, 0, 4), ("pattern, 12 loads", 0, 0, 12), ("A bf16", 1, 0, 4), ("A compact", 2, 0, 4),
         ("A compact, 12 loads", 2, 0, 12), ("A published", 3, 0, 4), ("+ cluster sum", 1, 1, 4),
         ("+ global sum", 1, 2, 4))

# The published-A rungs (A_MODE 3): each CTA compacts a share of A into a scratch, counts itself, and
# later waits for every CTA's count. The counter is never reset: call c waits for c x CTAs arrivals.
_PUBLISH_HELPERS = r"""
constexpr u32 MAX_POLLS = 1u << 22;  // give up rather than hang when not every CTA is resident

// The CTA's share of `total` scratch units (the grid split evenly), each folded from four 16-byte
// units of A (wrapping at a_units); thread t of `stride`. Returns the fold of what it wrote.
__device__ __forceinline__ u32 compact_a_share(const uint4* a, uint4* scratch, u32 total, u32 a_units, u32 t,
                                               u32 stride) {
    const u32 ctas = gridDim.x * gridDim.y, cta = blockIdx.y * gridDim.x + blockIdx.x;
    const u32 begin = (u64)total * cta / ctas, end = (u64)total * (cta + 1) / ctas;
    u32 acc = 0;
    for (u32 u = begin + t; u < end; u += stride) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const u32 i = 4 * u + j;
            v[j] = __ldg(a + (i < a_units ? i : i - a_units));  // the compact A runs past bf16 A by 1/16
        }
        const uint4 out = make_uint4(fold(v[0]), fold(v[1]), fold(v[2]), fold(v[3]));
        __stcg(scratch + u, out);
        acc ^= out.x;
    }
    return acc;
}

// The CTA's one release count, by one thread after a barrier over the share's writers: the barrier
// orders their stores before it (cumulative at gpu scope, as CUTLASS's semaphores do; a __threadfence
// in every thread first measured 0.2-0.6 us more on an H100).
__device__ __forceinline__ void count_arrival(u32* arrived) {
    asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(arrived) : "memory");
}

// Polls (acquire) until `target` arrivals; if it gives up, sets arrived[1] for the host to report.
__device__ __forceinline__ void poll_until(u32* arrived, u32 target) {
    u32 seen = 0, polls = 0;
    do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(arrived) : "memory");
    while ((int)(seen - target) < 0 && ++polls < MAX_POLLS);
    if ((int)(seen - target) < 0) atomicOr(arrived + 1, 1u);
}
"""


class _Arrivals:
    """The published-A rungs' counter [arrivals, gave up], never reset: each call's target is its
    epoch (calls x CTAs)."""

    def __init__(self, device, ctas):
        self.buffer = torch.zeros(2, dtype=torch.int32, device=device)
        self.ctas, self.calls = ctas, 0

    def next_target(self):
        self.calls += 1
        return self.calls * self.ctas % 2**32

    def gave_up(self):  # a wait that gave up: not every CTA was resident
        return bool(int(self.buffer[1]))


SOURCE = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

constexpr int TILES = GN / BN;
constexpr int RB = KR / 32;                                  // 16-byte units of B codes per row
constexpr int SCOLS = (GK / 32 + 7) / 8 * 8;                 // columns of the shuffled scales
constexpr int SU = KR / 256 * 16;                            // scale units per 32-row group
constexpr int RA = A_MODE >= 2 ? KR * 17 / 512 : KR / 8;     // A units per row (compact or bf16)
constexpr int B_UNITS = BN * RB, S_UNITS = BN / 32 * SU;
static_assert(GN % BN == 0 && BN % 32 == 0 && KR % 256 == 0 && GK % KR == 0 && SPLIT == GK / KR, "geometry");

__device__ __forceinline__ u32 fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

// The CTA's 16-byte unit u: B codes (row-major B_q), then B scales (32-row groups of the shuffled
// tensor, the K range's 256-byte chunks), then A (rows of the mode's layout).
__device__ __forceinline__ const uint4* unit_address(const uint4* a, const uint4* b, const uint4* s, int m,
                                                     int tile, int split, u32 u) {
    const int n0 = tile * BN, k0 = split * KR;
    if (u < B_UNITS)
        return b + ((u64)(n0 + u / RB) * (GK / 2) + k0 / 2) / 16 + u % RB;
    u -= B_UNITS;
    if (u < S_UNITS)
        return s + ((u64)(n0 / 32 + u / SU) * SCOLS * 32 + (k0 / 256) * 256) / 16 + u % SU;
    u -= S_UNITS;
    const u32 r = u / RA, j = u % RA;
    if (A_MODE >= 2) return a + (u64)(split * m + r) * RA + j;  // mode 3: `a` is the scratch
    const u32 row = A_MODE == 0 ? tile + r * TILES : r;
    return a + ((u64)row * GK * 2 + k0 * 2) / 16 + j;
}

__device__ __forceinline__ u32 a_rows(int m, int tile) {
    return A_MODE == 0 ? (m > tile ? (m - 1 - tile) / TILES + 1 : 0) : m;
}

#if REDUCE == 1
#define CLUSTER_ATTR __cluster_dims__(1, SPLIT, 1)
#else
#define CLUSTER_ATTR
#endif

// Folds the CTA's units [begin, end), LOADS loads in flight per thread; `coherent` reads through L2
// only (data written by this launch).
__device__ __forceinline__ u32 fold_units(const uint4* a, const uint4* b, const uint4* s, int m, int tile,
                                          int split, u32 begin, u32 end, bool coherent) {
    u32 acc = 0;
    for (u32 base = begin + threadIdx.x; base < end; base += THREADS * LOADS) {
        uint4 v[LOADS];
#pragma unroll
        for (int j = 0; j < LOADS; ++j) {
            const u32 u = base + j * THREADS;
            const uint4* p = unit_address(a, b, s, m, tile, split, u);
            v[j] = u >= end ? make_uint4(0u, 0u, 0u, 0u) : coherent ? __ldcg(p) : __ldg(p);
        }
#pragma unroll
        for (int j = 0; j < LOADS; ++j) acc ^= fold(v[j]);
    }
    return acc;
}

PUBLISH_HELPERS
extern "C" __global__ void __launch_bounds__(THREADS) CLUSTER_ATTR
read_gemm_tiles(const uint4* __restrict__ a, const uint4* __restrict__ b, const uint4* __restrict__ s,
                u16* __restrict__ c, float* __restrict__ partial, u32* __restrict__ counters, int m,
                u32* __restrict__ published, u32 target) {
    const int tile = blockIdx.x, split = blockIdx.y, tid = threadIdx.x;
    const u32 units = B_UNITS + S_UNITS + a_rows(m, tile) * RA;
    u32 acc = 0;
    if (A_MODE == 3) {  // A's share first, then B, then the wait, then A's compact rows
        uint4* scratch = reinterpret_cast<uint4*>(partial);
        acc = compact_a_share(a, scratch, (u32)SPLIT * m * RA, (u32)m * GK / 8, tid, THREADS);
        __syncthreads();
        if (tid == 0) count_arrival(published);
        acc ^= fold_units(a, b, s, m, tile, split, 0, B_UNITS + S_UNITS, false);
        if (tid == 0) poll_until(published, target);
        __syncthreads();
        acc ^= fold_units(scratch, b, s, m, tile, split, B_UNITS + S_UNITS, units, true);
    } else {
        acc = fold_units(a, b, s, m, tile, split, 0, units, false);
    }
    const float value = __uint_as_float(acc & 0x3F7FFFFFu);  // finite, without meaning
    const int n0 = tile * BN, cells = m * BN;
#if REDUCE == 0
    for (int i = tid; i < cells; i += THREADS)
        if ((i / BN) % SPLIT == split) c[(u64)(i / BN) * GN + n0 + i % BN] = (u16)(acc ^ i);
#elif REDUCE == 1
    extern __shared__ float part[];
    for (int i = tid; i < cells; i += THREADS) part[i] = value;
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    u32 rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    for (int i = tid; i < cells; i += THREADS) {
        if ((i / BN) % SPLIT != (int)rank) continue;
        float sum = 0.f;
        const u32 local = (u32)__cvta_generic_to_shared(part + i);
        for (u32 q = 0; q < SPLIT; ++q) {
            u32 remote;
            float v;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(q));
            asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
            sum += v;
        }
        c[(u64)(i / BN) * GN + n0 + i % BN] = (u16)(__float_as_uint(sum) >> 16);
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
#else
    __shared__ bool last;
    float* mine = partial + ((u64)split * TILES + tile) * cells;
    for (int i = tid; i < cells; i += THREADS) mine[i] = value;
    __threadfence();
    __syncthreads();
    if (tid == 0) last = atomicAdd(&counters[tile], 1u) == SPLIT - 1;
    __syncthreads();
    if (last) {
        __threadfence();
        for (int i = tid; i < cells; i += THREADS) {
            float sum = 0.f;
            for (int q = 0; q < SPLIT; ++q) sum += __ldcg(partial + ((u64)q * TILES + tile) * cells + i);
            c[(u64)(i / BN) * GN + n0 + i % BN] = (u16)(__float_as_uint(sum) >> 16);
        }
        if (tid == 0) counters[tile] = 0;  // ready for the next call
    }
#endif
}
""".replace("PUBLISH_HELPERS", _PUBLISH_HELPERS)


# (name, A_MODE): A_MODE 0 = no A, 1 = A bf16 per tile, 2 = A as packed codes per tile.
TMA_RUNGS = (("TMA B", 0), ("TMA A bf16", 1), ("TMA A codes", 2), ("TMA A published", 3))
# (name, MMA): 1 = bf16 wgmma (k16 steps), 2 = e4m3 wgmma (k32 steps), 3 = e4m3 wgmma with the tokens'
# operand from the ring too (A as e4m3 bytes, [k16 group][rows] x 16 B boxes: what a kernel reading
# A quantized once per call, as fp8, copies per chunk).
MMA_RUNGS = (("TMA B + bf16 MMA", 1), ("TMA B + fp8 MMA", 2), ("TMA A fp8 + fp8 MMA", 3))
TMA_SHARED_BYTES = 200 * 1024  # the ring's budget; the rest of the 227 KB is left for the barriers
TMA_MAX_STAGES = 16

# One copy thread (warp 0, lane 0) fills a ring of STAGES chunks of KC values: B codes [BN rows x KC/2
# bytes] and A [M rows x KC values] per chunk through tensor maps, each chunk gated by `full` (copies
# landed: the transaction count) and `empty` (every consumer thread has read it). The other warps
# wait for each chunk, fold one 16-byte word each from it and release it.
_RING_HELPERS = r"""
// The ring's barriers: `full` completes on one arrival and the copies' bytes, `empty` on every consumer.
__device__ __forceinline__ void init_ring(u64* full, u64* empty, u64* scales_landed) {
    for (int i = 0; i < STAGES; ++i) {
        mbar_init(&full[i], 1);
        mbar_init(&empty[i], CONSUMERS);
    }
    mbar_init(scales_landed, 1);
    mbar_init_fence();
}

// The K range's scale bytes of the tile's 32-row groups, one bulk copy per group.
__device__ __forceinline__ void copy_scales(u8* scales, const u8* s, int n0, int k0, u64* landed) {
    mbar_arrive_expect_bytes(landed, S_BYTES);
    for (int g = 0; g < BN / 32; ++g)
        bulk_copy(scales + g * KR, s + (u64)(n0 / 32 + g) * SCOLS * 32 + k0, KR, landed);
}
"""

TMA_SOURCE = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;
typedef unsigned char u8;
#include "tma_sm90.h"  // the package's mbarrier and bulk-copy wrappers (mxfp4_mm/backends/cuda)

constexpr int SCOLS = (GK / 32 + 7) / 8 * 8;                       // columns of the shuffled scales
constexpr int S_BYTES = BN / 32 * KR;                              // a 32-row group's K range: KR bytes
constexpr int B_BOX = BN * KC / 2;
constexpr int A_BOX = A_MODE == 1 ? AM * KC * 2 : A_MODE >= 2 ? AM * KC / 2 : 0;  // 3: codes from the scratch
constexpr int STAGE = B_BOX + A_BOX;
constexpr int CHUNKS = KR / KC;
constexpr int CONSUMERS = THREADS - 32;
static_assert(GN % BN == 0 && BN % 32 == 0 && KR % 256 == 0 && GK % KR == 0 && SPLIT == GK / KR, "geometry");
static_assert(KR % KC == 0 && KC % 64 == 0 && KC <= 256 && AM <= 256 && STAGES >= 1, "chunks");
static_assert(STAGE % 128 == 0 && S_BYTES % 128 == 0, "copy destinations stay 128-byte aligned");
RING_HELPERS
__device__ __forceinline__ u32 fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }
PUBLISH_HELPERS
extern "C" __global__ void __launch_bounds__(THREADS)
read_gemm_tiles_tma(const __grid_constant__ TensorMap b_map, const __grid_constant__ TensorMap a_map,
                    const u8* __restrict__ s, u16* __restrict__ c, int m, const uint4* __restrict__ a_raw,
                    uint4* __restrict__ scratch, u32* __restrict__ published, u32 target) {
    extern __shared__ __align__(1024) u8 smem[];
    __shared__ u64 full[STAGES], empty[STAGES], scales_landed;
    u8* const scales = smem + STAGES * STAGE;
    const int tile = blockIdx.x, split = blockIdx.y, tid = threadIdx.x, warp = tid >> 5;
    const int n0 = tile * BN, k0 = split * KR;
    if (tid == 0) init_ring(full, empty, &scales_landed);
    __syncthreads();
    u32 acc = 0;
    if (warp == 0) {
        if (tid == 0) {
            copy_scales(scales, s, n0, k0, &scales_landed);
            constexpr int DEFERRED = A_MODE == 3 ? (STAGES < CHUNKS ? STAGES : CHUNKS) : 0;
            for (int lc = 0; lc < CHUNKS; ++lc) {
                const int st = lc % STAGES, k = k0 + lc * KC;
                if (lc >= STAGES) mbar_wait(&empty[st], (lc / STAGES - 1) & 1);
                mbar_arrive_expect_bytes(&full[st], STAGE);
                tma_box(smem + st * STAGE, b_map, k / 2, n0, &full[st]);
                if (A_MODE == 3 && lc == DEFERRED - 1) {  // B of the first stages in flight: now A's
                    poll_until(published, target);
                    asm volatile("fence.proxy.async.global;" ::: "memory");  // the A boxes read after the acquire
                    for (int d = 0; d < DEFERRED; ++d)
                        tma_box(smem + d * STAGE + B_BOX, a_map, (k0 + d * KC) / 2, 0, &full[d]);
                } else if (A_MODE && (A_MODE != 3 || lc >= DEFERRED)) {
                    tma_box(smem + st * STAGE + B_BOX, a_map, A_MODE == 1 ? k : k / 2, 0, &full[st]);
                }
            }
        }
    } else {
        const int t = tid - 32;
        if (A_MODE == 3) {  // A's packed codes, 16 bytes from 32 bf16 values; the consumers' barrier, one count
            acc ^= compact_a_share(a_raw, scratch, (u32)m * GK / 32, (u32)m * GK / 8, t, CONSUMERS);
            asm volatile("bar.sync 1, %0;" :: "n"(CONSUMERS) : "memory");
            if (t == 0) count_arrival(published);
        }
        mbar_wait(&scales_landed, 0);
        acc ^= reinterpret_cast<const u32*>(scales)[t % (S_BYTES / 4)];
        for (int lc = 0; lc < CHUNKS; ++lc) {
            const int st = lc % STAGES;
            mbar_wait(&full[st], (lc / STAGES) & 1);
            acc ^= fold(reinterpret_cast<const uint4*>(smem + st * STAGE)[t % (STAGE / 16)]);
            mbar_arrive(&empty[st]);
        }
    }
    const int cells = m * BN;
    for (int i = tid; i < cells; i += THREADS)
        if ((i / BN) % SPLIT == split) c[(u64)(i / BN) * GN + n0 + i % BN] = (u16)(acc ^ i);
}
""".replace("RING_HELPERS", _RING_HELPERS).replace("PUBLISH_HELPERS", _PUBLISH_HELPERS)


def wgmma_e4m3_wrapper(n):
    """wgmma m64n{n}k32 e4m3 x e4m3 -> f32, both operands from shared memory (the accumulator list
    written out: the instruction names its n/2 registers)."""
    regs = ", ".join(f"%{i}" for i in range(n // 2))
    outs = ", ".join(f'"+f"(d[{i // 4}][{i % 4}])' for i in range(n // 2))
    return (f"__device__ __forceinline__ void wgmma_ss_e4m3(float (&d)[{n // 8}][4], u64 desc_a, u64 desc_b) {{\n"
            f'    asm volatile("{{\\n.reg .pred accumulate;\\nsetp.ne.b32 accumulate, %{n // 2 + 2}, 0;\\n"\n'
            f'                 "wgmma.mma_async.sync.aligned.m64n{n}k32.f32.e4m3.e4m3 {{{regs}}}, %{n // 2}, '
            f'%{n // 2 + 1}, accumulate, 1, 1;\\n}}\\n"\n'
            f"                 : {outs}\n"
            f'                 : "l"(desc_a), "l"(desc_b), "r"(1));\n}}\n')


MMA_SOURCE = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;
typedef unsigned char u8;
#include "tma_sm90.h"    // mbarriers, tensor-map copies
#include "wgmma_sm90a.h"  // wgmma_desc, fence/commit/wait, the bf16 "SS" wrappers

constexpr int SCOLS = (GK / 32 + 7) / 8 * 8;
constexpr int S_BYTES = BN / 32 * KR;
constexpr int B_BOX = BN * KC / 2;
constexpr int A_BOX = MMA == 3 ? MN * KC : 0;     // the tokens' e4m3 bytes (MMA 3)
constexpr int STAGE = B_BOX + A_BOX;
constexpr int CHUNKS = KR / KC;
constexpr int WGS = BN / 64;                       // consumer warpgroups
constexpr int NTHREADS = 128 * (WGS + 1);          // warpgroup 0 produces
constexpr int CONSUMERS = 128 * WGS;
constexpr int WG_BYTES = 64 * KC / 2;              // one warpgroup's rows of a stage
constexpr int STEPS = MMA == 1 ? KC / 16 : KC / 32;  // wgmmas per chunk (the GEMM's K per chunk)
static_assert(BN % 64 == 0 && KR % KC == 0 && MN % 8 == 0 && MN <= 256 && WG_BYTES % 2048 == 0, "geometry");
RING_HELPERS
WGMMA_E4M3

extern "C" __global__ void __launch_bounds__(NTHREADS)
read_gemm_tiles_mma(const __grid_constant__ TensorMap b_map, const __grid_constant__ TensorMap a_map,
                    const u8* __restrict__ s, u16* __restrict__ c, int m) {
    extern __shared__ __align__(1024) u8 smem[];
    __shared__ u64 full[STAGES], empty[STAGES], scales_landed;
    u8* const scales = smem + STAGES * STAGE;
    u8* const a_tile = scales + S_BYTES;  // the tokens' operand, MN rows x 32 bytes, never written: no meaning
    const int tile = blockIdx.x, split = blockIdx.y, tid = threadIdx.x, wg = tid >> 7;
    const int n0 = tile * BN, k0 = split * KR;
    if (tid == 0) init_ring(full, empty, &scales_landed);
    __syncthreads();
    float d[MN / 8][4] = {};
    u32 acc = 0;
    if (wg == 0) {
        if (tid == 0) {
            copy_scales(scales, s, n0, k0, &scales_landed);
            for (int lc = 0; lc < CHUNKS; ++lc) {
                const int st = lc % STAGES;
                if (lc >= STAGES) mbar_wait(&empty[st], (lc / STAGES - 1) & 1);
                mbar_arrive_expect_bytes(&full[st], STAGE);
                tma_box(smem + st * STAGE, b_map, (k0 + lc * KC) / 2, n0, &full[st]);
                if (MMA == 3)
                    for (int g = 0; g < KC / 16; ++g)
                        tma_box(smem + st * STAGE + B_BOX + g * MN * 16, a_map, k0 + lc * KC + 16 * g, 0, &full[st]);
            }
        }
    } else {
        const int t = tid - 128, w = wg - 1;
        mbar_wait(&scales_landed, 0);
        acc ^= reinterpret_cast<const u32*>(scales)[t % (S_BYTES / 4)];
        const u32 b_desc_base = (u32)__cvta_generic_to_shared(a_tile);
        for (int lc = 0; lc < CHUNKS; ++lc) {
            const int st = lc % STAGES;
            mbar_wait(&full[st], (lc / STAGES) & 1);
            const u32 rows = (u32)__cvta_generic_to_shared(smem + st * STAGE + w * WG_BYTES);
            const u32 tokens = (u32)__cvta_generic_to_shared(smem + st * STAGE + B_BOX);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < STEPS; ++kk) {
                // 2 KB footprints (8 row groups 256 B apart, 2 K halves 128 B apart) inside the rows
                const u64 da = wgmma_desc(rows + (kk * 2048) % WG_BYTES, 128, 256);
#if MMA == 1
                wgmma_ss_bf16<MN>(d, da, wgmma_desc(b_desc_base, 128, 256));
#elif MMA == 2
                wgmma_ss_e4m3(d, da, wgmma_desc(b_desc_base, 128, 256));
#else  // the chunk's tokens: [k16 group][MN rows] x 16 B, a k32 step two groups
                wgmma_ss_e4m3(d, da, wgmma_desc(tokens + 2 * kk * MN * 16, MN * 16, 128));
#endif
            }
            wgmma_commit();
            wgmma_wait<1>();  // the previous chunk's MMAs are done: release its stage
            if (lc > 0) mbar_arrive(&empty[(lc - 1) % STAGES]);
        }
        wgmma_wait<0>();
    }
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < MN / 8; ++j) sum += d[j][0] + d[j][1] + d[j][2] + d[j][3];
    acc ^= __float_as_uint(sum);
    const int cells = m * BN;
    for (int i = tid; i < cells; i += NTHREADS)
        if ((i / BN) % SPLIT == split) c[(u64)(i / BN) * GN + n0 + i % BN] = (u16)(acc ^ i);
}
""".replace("RING_HELPERS", _RING_HELPERS)


MMA_NS = (16, 32, 64, 128, 256)  # the n sizes of wgmma_sm90a.h's bf16 wrappers


def mma_n(m):
    """The wgmma n for M rows of tokens: the smallest wrapper's n that holds them (0: none)."""
    return next((n for n in MMA_NS if m <= n), 0)


def mma_source(m):
    return MMA_SOURCE.replace("WGMMA_E4M3", wgmma_e4m3_wrapper(mma_n(m)))


def mma_chunking(m, n, k, bn, split, mma=1):
    """(KC, STAGES) for the MMA rungs: B codes per stage, and the tokens' e4m3 bytes too for MMA 3;
    the tokens' fixed operand tile is left out of the ring's budget."""
    return _ring_chunking(k, bn, split, mma_n(m) if mma == 3 else 0, mma_n(m) * 32)


def check_mma_geometry(m, n, k, bn, split):
    check_tma_geometry(m, n, k, bn, split)
    if bn % 64:
        raise ValueError(f"MMA geometry: BN must be a multiple of 64 (a warpgroup's m64), got {bn}")
    if not mma_n(m):
        raise ValueError(f"MMA geometry: M = {m} is more than the widest wgmma n ({MMA_NS[-1]})")


def mma_compile_options(m, n, k, bn, split, mma):
    kc, stages = mma_chunking(m, n, k, bn, split, mma)
    return (f"-DGN={n}", f"-DGK={k}", f"-DBN={bn}", f"-DKR={k // split}", f"-DSPLIT={split}", f"-DMN={mma_n(m)}",
            f"-DKC={kc}", f"-DSTAGES={stages}", f"-DMMA={mma}")


def mma_shared_bytes(m, n, k, bn, split, mma=1):
    kc, stages = mma_chunking(m, n, k, bn, split, mma)
    a_box = mma_n(m) * kc if mma == 3 else 0
    return stages * (bn * kc // 2 + a_box) + bn // 32 * (k // split) + mma_n(m) * 32 + 1024


def _load_kernel(source, device, options, name, shared, arch=None):
    """The kernel `name` of `source`, allowed `shared` bytes of dynamic shared memory (when > 0)."""
    function = runtime.load_module(source, device, options, arch).function(name)
    if shared:
        api = runtime.api_for(device)
        api.check(api.drv.cuFuncSetAttribute(function.handle, cuda._MAX_DYNAMIC_SHARED_ATTR, ctypes.c_int(shared)),
                  "cuFuncSetAttribute")
    return function


def make_mma_runner(m, n, k, device, bn, split, mma):
    """run(a, b_q, b_shuffle, b_scale_sh) -> a fresh C [m, n] (values without meaning), through the
    MMA rung's kernel (sm_90a)."""
    check_mma_geometry(m, n, k, bn, split)
    device = runtime.normalize_device(device)
    kc, _ = mma_chunking(m, n, k, bn, split, mma)
    shared = mma_shared_bytes(m, n, k, bn, split, mma)
    function = _load_kernel(mma_source(m), device, mma_compile_options(m, n, k, bn, split, mma), "read_gemm_tiles_mma",
                            shared, "sm_90a")
    launch = function.launcher("TTppi")
    b_map, a_map = runtime.TensorMap(), runtime.TensorMap()
    threads = 128 * (bn // 64 + 1)

    def run(a, b_q, b_shuffle, b_scale_sh):
        runtime.tensor_map_2d(device, b_q.data_ptr(), 1, n, k // 2, k // 2, bn, kc // 2, out=b_map)
        if mma == 3:  # A's first M * K bytes read as its e4m3 codes, 16-byte columns of the wgmma n rows
            runtime.tensor_map_2d(device, a.data_ptr(), 1, m, k, k, mma_n(m), 16, out=a_map)
        out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
        launch((n // bn, split, 1), (threads, 1, 1), shared, b_map, a_map if mma == 3 else b_map, b_scale_sh, out, m)
        return out

    return run


def _ring_chunking(k, bn, split, a_bytes_per_k, reserved):
    """(KC, STAGES) of a ring whose stage holds BN rows of B codes and `a_bytes_per_k` bytes of A per K:
    the widest chunk (256, 128 or 64 K) whose stage stays within 40 KB, and as many stages as the
    ring's budget holds beside the K range's scale bytes and `reserved` bytes."""
    kr = k // split
    for kc in (256, 128, 64):
        stage = bn * kc // 2 + int(a_bytes_per_k * kc)
        if kr % kc == 0 and (stage <= 40 * 1024 or kc == 64):
            stages = min(kr // kc, TMA_MAX_STAGES, (TMA_SHARED_BYTES - bn // 32 * kr - reserved) // stage)
            if stages < 1:
                raise ValueError(f"geometry BN={bn} SPLIT={split}: one stage of {stage} bytes does not fit the ring")
            return kc, stages
    raise ValueError(f"geometry: the K range {kr} is not a multiple of 64")


def tma_chunking(m, n, k, bn, split, a_mode):
    """(KC, STAGES) for the TMA rungs."""
    return _ring_chunking(k, bn, split, {0: 0, 1: 2 * m, 2: m / 2, 3: m / 2}[a_mode], 0)


def check_tma_geometry(m, n, k, bn, split):
    check_geometry(m, n, k, bn, split)
    if m > 256 or bn > 256:
        raise ValueError(f"TMA geometry: a box holds at most 256 rows, got M={m}, BN={bn}")


def tma_compile_options(m, n, k, bn, split, a_mode):
    kc, stages = tma_chunking(m, n, k, bn, split, a_mode)
    return (f"-DGN={n}", f"-DGK={k}", f"-DBN={bn}", f"-DKR={k // split}", f"-DSPLIT={split}", f"-DA_MODE={a_mode}",
            f"-DAM={m}", f"-DKC={kc}", f"-DSTAGES={stages}", f"-DTHREADS={THREADS}")


def tma_shared_bytes(m, n, k, bn, split, a_mode):
    kc, stages = tma_chunking(m, n, k, bn, split, a_mode)
    a_box = {0: 0, 1: m * kc * 2, 2: m * kc // 2, 3: m * kc // 2}[a_mode]
    return stages * (bn * kc // 2 + a_box) + bn // 32 * (k // split) + 1024  # + the alignment of the ring


def make_tma_runner(m, n, k, device, bn, split, a_mode):
    """run(a, b_q, b_shuffle, b_scale_sh) -> a fresh C [m, n] (values without meaning), through the
    TMA kernel; the tensor maps are encoded per call (the pointers may change)."""
    check_tma_geometry(m, n, k, bn, split)
    device = runtime.normalize_device(device)
    kc, _ = tma_chunking(m, n, k, bn, split, a_mode)
    shared = tma_shared_bytes(m, n, k, bn, split, a_mode)
    function = _load_kernel(TMA_SOURCE, device, tma_compile_options(m, n, k, bn, split, a_mode), "read_gemm_tiles_tma",
                            shared)
    launch = function.launcher("TTppipppI")
    b_map, a_map = runtime.TensorMap(), runtime.TensorMap()
    scratch = torch.empty(m * k // 2 if a_mode == 3 else 16, dtype=torch.uint8, device=device)  # A's packed codes
    arrivals = _Arrivals(device, n // bn * split)
    if a_mode == 3:
        runtime.tensor_map_2d(device, scratch.data_ptr(), 1, m, k // 2, k // 2, m, kc // 2, out=a_map)

    def run(a, b_q, b_shuffle, b_scale_sh):
        runtime.tensor_map_2d(device, b_q.data_ptr(), 1, n, k // 2, k // 2, bn, kc // 2, out=b_map)
        if a_mode == 1:
            runtime.tensor_map_2d(device, a.data_ptr(), 2, m, k, 2 * k, m, kc, out=a_map)
        elif a_mode == 2:  # A's first M * K / 2 bytes read as packed codes
            runtime.tensor_map_2d(device, a.data_ptr(), 1, m, k // 2, k // 2, m, kc // 2, out=a_map)
        out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
        launch((n // bn, split, 1), (THREADS, 1, 1), shared, b_map, a_map if a_mode else b_map, b_scale_sh, out, m,
               a, scratch, arrivals.buffer, arrivals.next_target())
        return out

    run.gave_up = arrivals.gave_up
    return run


def check_geometry(m, n, k, bn, split):
    if n % bn or bn % 32 or k % split or (k // split) % 256:
        raise ValueError(f"geometry BN={bn} SPLIT={split} does not fit {m}x{n}x{k}: needs N % BN == 0, "
                         "BN % 32 == 0, K % SPLIT == 0 and (K / SPLIT) % 256 == 0")


def compile_options(n, k, bn, split, a_mode, reduce, loads=4):
    return (f"-DGN={n}", f"-DGK={k}", f"-DBN={bn}", f"-DKR={k // split}", f"-DSPLIT={split}", f"-DA_MODE={a_mode}",
            f"-DREDUCE={reduce}", f"-DTHREADS={THREADS}", f"-DLOADS={loads}")


def make_runner(m, n, k, device, bn, split, a_mode, reduce, loads=4):
    """run(a, b_q, b_shuffle, b_scale_sh) -> a fresh C [m, n] (values without meaning; b_shuffle
    unused), called like the GEMM runners."""
    check_geometry(m, n, k, bn, split)
    device = runtime.normalize_device(device)
    shared = m * bn * 4 if reduce == 1 else 0
    function = _load_kernel(SOURCE, device, compile_options(n, k, bn, split, a_mode, reduce, loads), "read_gemm_tiles",
                            shared)
    launch = function.launcher("ppppppipI")
    tiles = n // bn
    compact_floats = split * m * (k // split * 17 // 512) * 4  # A_MODE 3's scratch: 16-byte units
    partial = torch.empty(split * tiles * m * bn if reduce == 2 else compact_floats if a_mode == 3 else 1,
                          dtype=torch.float32, device=device)
    counters = torch.zeros(tiles, dtype=torch.int32, device=device)
    arrivals = _Arrivals(device, tiles * split)

    def run(a, b_q, b_shuffle, b_scale_sh):
        out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
        launch((tiles, split, 1), (THREADS, 1, 1), shared, a, b_q, b_scale_sh, out, partial, counters, m,
               arrivals.buffer, arrivals.next_target())
        return out

    run.counters = counters
    run.gave_up = arrivals.gave_up
    return run


def parse_geometry(text):
    """[((m, n, k), (bn, split)), ...] from 'M,N,K:BN,SPLIT ...' (a shape may come more than once)."""
    out = []
    for item in text.split():
        shape, geometry = item.split(":")
        out.append((tuple(int(v) for v in shape.split(",")), tuple(int(v) for v in geometry.split(","))))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--geometry", default="", help="'M,N,K:BN,SPLIT ...' (default: the six benchmark shapes)")
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--out", help="also write the medians as JSON here")
    parser.add_argument("--rungs", default="", help="'name,name': only these rungs (and the floor)")
    args = parser.parse_args(argv)
    wanted = set(filter(None, args.rungs.split(",")))
    unknown = wanted - {name for name, *_ in RUNGS + TMA_RUNGS + MMA_RUNGS}
    if unknown:
        parser.error(f"--rungs: unknown {sorted(unknown)}")
    chosen = lambda rungs: [r for r in rungs if not wanted or r[0] in wanted]  # noqa: E731
    if not torch.cuda.is_available() or torch.version.hip:
        sys.exit("floor_ladder: needs an NVIDIA GPU")
    device = torch.device("cuda")
    timer = bench.Timer(device)
    geometry = parse_geometry(args.geometry) if args.geometry else list(GEOMETRY.items())
    rows = []
    print("µs, median of", args.reps, "interleaved calls")
    for (m, n, k), (bn, split) in geometry:
        runs = {"floor": floor_kernels.make_runner(m, n, k, device)}
        runs.update({name: make_runner(m, n, k, device, bn, split, a_mode, reduce, loads)
                     for name, a_mode, reduce, loads in chosen(RUNGS)})
        if m <= 256 and bn <= 256:
            units = torch.cuda.get_device_properties(device).multi_processor_count
            runs.update({name: make_tma_runner(m, n, k, device, bn, split, a_mode) for name, a_mode in chosen(TMA_RUNGS)
                         if a_mode != 3 or n // bn * split <= units})  # its ring holds one CTA an SM
            if bn % 64 == 0 and mma_n(m):
                runs.update({name: make_mma_runner(m, n, k, device, bn, split, mma) for name, mma in chosen(MMA_RUNGS)})
        medians = cuda_lab.interleaved_medians(runs, cuda_lab.input_sets(m, n, k, device), args.reps, timer)
        if any(getattr(run, "gave_up", lambda: False)() for run in runs.values()):
            print(f"{m}x{n}x{k}: a published-A wait gave up (CTAs not all resident): that rung's time is void")
        rows.append({"shape": [m, n, k], "bn": bn, "split": split, "us": medians})
        print(f"{m}x{n}x{k} BN {bn} split {split}".ljust(34)
              + "  ".join(f"{name} {us:6.2f}" for name, us in medians.items()), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

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
  ..., 12 loads  pattern and A compact again with 12 loads in flight per thread instead of 4 (48 KB a
                 CTA, nearer what the shipped kernel issues up front; 16 would spill)
  + cluster sum  A bf16, then partial tiles summed through the cluster's shared memory
  + global sum   A bf16, then partial tiles summed through global memory and a per-tile counter

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
# (name, A_MODE, REDUCE, LOADS): A_MODE 0 = A once in all, 1 = bf16 per tile, 2 = compact per tile;
# REDUCE 0 = none (split s writes C rows s mod SPLIT), 1 = cluster shared memory, 2 = global + counter;
# LOADS: 16-byte loads each thread has in flight before it uses any.
RUNGS = (("pattern", 0, 0, 4), ("pattern, 12 loads", 0, 0, 12), ("A bf16", 1, 0, 4), ("A compact", 2, 0, 4),
         ("A compact, 12 loads", 2, 0, 12), ("+ cluster sum", 1, 1, 4), ("+ global sum", 1, 2, 4))

SOURCE = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

constexpr int TILES = GN / BN;
constexpr int RB = KR / 32;                                  // 16-byte units of B codes per row
constexpr int SCOLS = (GK / 32 + 7) / 8 * 8;                 // columns of the shuffled scales
constexpr int SU = KR / 256 * 16;                            // scale units per 32-row group
constexpr int RA = A_MODE == 2 ? KR * 17 / 512 : KR / 8;     // A units per row (compact or bf16)
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
    if (A_MODE == 2) return a + (u64)(split * m + r) * RA + j;
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

extern "C" __global__ void __launch_bounds__(THREADS) CLUSTER_ATTR
read_gemm_tiles(const uint4* __restrict__ a, const uint4* __restrict__ b, const uint4* __restrict__ s,
                u16* __restrict__ c, float* __restrict__ partial, u32* __restrict__ counters, int m) {
    const int tile = blockIdx.x, split = blockIdx.y, tid = threadIdx.x;
    const u32 units = B_UNITS + S_UNITS + a_rows(m, tile) * RA;
    u32 acc = 0;
    for (u32 base = tid; base < units; base += THREADS * LOADS) {
        uint4 v[LOADS];
#pragma unroll
        for (int j = 0; j < LOADS; ++j) {
            const u32 u = base + j * THREADS;
            v[j] = u < units ? __ldg(unit_address(a, b, s, m, tile, split, u)) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int j = 0; j < LOADS; ++j) acc ^= fold(v[j]);
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
"""


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
    function = runtime.load_module(SOURCE, device, compile_options(n, k, bn, split, a_mode, reduce, loads)).function(
        "read_gemm_tiles")
    shared = m * bn * 4 if reduce == 1 else 0
    if shared:
        api = runtime.api_for(device)
        api.check(api.drv.cuFuncSetAttribute(function.handle, cuda._MAX_DYNAMIC_SHARED_ATTR, ctypes.c_int(shared)),
                  "cuFuncSetAttribute")
    launch = function.launcher("ppppppi")
    tiles = n // bn
    partial = torch.empty(split * tiles * m * bn if reduce == 2 else 1, dtype=torch.float32, device=device)
    counters = torch.zeros(tiles, dtype=torch.int32, device=device)

    def run(a, b_q, b_shuffle, b_scale_sh):
        out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
        launch((tiles, split, 1), (THREADS, 1, 1), shared, a, b_q, b_scale_sh, out, partial, counters, m)
        return out

    run.counters = counters
    return run


def parse_geometry(text):
    """{(m, n, k): (bn, split)} from 'M,N,K:BN,SPLIT ...'."""
    out = {}
    for item in text.split():
        shape, geometry = item.split(":")
        out[tuple(int(v) for v in shape.split(","))] = tuple(int(v) for v in geometry.split(","))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--geometry", default="", help="'M,N,K:BN,SPLIT ...' (default: the six benchmark shapes)")
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--out", help="also write the medians as JSON here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or torch.version.hip:
        sys.exit("floor_ladder: needs an NVIDIA GPU")
    device = torch.device("cuda")
    timer = bench.Timer(device)
    geometry = parse_geometry(args.geometry) if args.geometry else GEOMETRY
    rows = []
    print("µs, median of", args.reps, "interleaved calls;", ", ".join(name for name, *_ in RUNGS))
    for (m, n, k), (bn, split) in geometry.items():
        runs = {"floor": floor_kernels.make_runner(m, n, k, device)}
        runs.update({name: make_runner(m, n, k, device, bn, split, a_mode, reduce, loads)
                     for name, a_mode, reduce, loads in RUNGS})
        medians = cuda_lab.interleaved_medians(runs, cuda_lab.input_sets(m, n, k, device), args.reps, timer)
        rows.append({"shape": [m, n, k], "bn": bn, "split": split, "us": medians})
        print(f"{m}x{n}x{k} BN {bn} split {split}".ljust(34)
              + "  ".join(f"{name} {us:6.2f}" for name, us in medians.items()), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

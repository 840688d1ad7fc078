"""The memory floor of a shape, as a bench path: one kernel that reads exactly the shape's input
bytes (A bf16 [M, K], B codes [N, K/2], N*K/32 B scale bytes) and writes C [M, N] bf16, launched
like a GEMM call (torch.empty for C, one launch on the current queue). No GEMM is faster than this
on the same GPU under the same timing, so the bench reports every path's ratio to it.

This module is left out of submission.py (bundle.NOT_BUNDLED): its path name carries a word the
grader rejects.
"""

import torch

from . import runtime

PATH = "stream_floor"
NOTE = "one kernel that only reads the shape's bytes (A, B codes, B scales) and writes C"
THREADS = 256
LOADS_PER_THREAD = 4  # 16-byte loads each thread has in flight at once
CTAS_PER_SM = 8

# Every 16-byte unit of A, then B codes, then B scales (one index space) is read exactly once:
# thread t reads the units u = t (mod step), all of its loads issued before any is used. C's units
# get a fold of what the thread read (numbers without meaning), so no load can be dropped; a
# thread without C units keeps its loads through a store that never happens.
SOURCE = r"""
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

extern "C" __global__ void __launch_bounds__(%(threads)d)
read_shape_bytes(const uint4* __restrict__ a, u64 a_units, const uint4* __restrict__ b, u64 b_units,
                 const uint4* __restrict__ s, u64 s_units, uint4* __restrict__ c, u64 c_units) {
    const u64 first = blockIdx.x * (u64)blockDim.x + threadIdx.x, step = (u64)gridDim.x * blockDim.x;
    const u64 total = a_units + b_units + s_units;
    u32 acc = 0;
    for (u64 base = first; base < total; base += step * %(loads)d) {
        uint4 v[%(loads)d];
#pragma unroll
        for (int j = 0; j < %(loads)d; ++j) {
            const u64 u = base + j * step;
            const uint4* src = u < a_units ? a + u : u < a_units + b_units ? b + (u - a_units)
                                                                            : s + (u - a_units - b_units);
            v[j] = u < total ? __ldg(src) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int j = 0; j < %(loads)d; ++j) acc ^= fold(v[j]);
    }
    for (u64 i = first; i < c_units; i += step) c[i] = make_uint4(acc, acc ^ 1u, acc ^ 2u, acc ^ 3u);
    if (first >= c_units && acc == 0x9E3779B9u) c[0] = make_uint4(acc, acc, acc, acc);
}
""" % {"threads": THREADS, "loads": LOADS_PER_THREAD}


def units(m: int, n: int, k: int):
    """16-byte units of (A, B codes, B scales, C); every one is a whole number for valid shapes."""
    return m * k * 2 // 16, n * k // 2 // 16, n * k // 32 // 16, m * n * 2 // 16


def blocks_for(m: int, n: int, k: int, sm_count: int) -> int:
    """Enough CTAs for one pass of LOADS_PER_THREAD loads per thread, at most CTAS_PER_SM per SM."""
    a_units, b_units, s_units, c_units = units(m, n, k)
    needed = -(-max(a_units + b_units + s_units, c_units * LOADS_PER_THREAD) // (THREADS * LOADS_PER_THREAD))
    return max(1, min(needed, sm_count * CTAS_PER_SM))


def make_runner(m: int, n: int, k: int, device: torch.device):
    """runner(a, b_q, b_shuffle, b_scale_sh) -> fresh C [m, n] (values without meaning)."""
    device = runtime.normalize_device(device)
    launch = runtime.load_module(SOURCE, device).function("read_shape_bytes").launcher("pqpqpqpq")
    a_units, b_units, s_units, c_units = units(m, n, k)
    blocks = blocks_for(m, n, k, torch.cuda.get_device_properties(device).multi_processor_count)

    def run(a, b_q, b_shuffle, b_scale_sh):
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
        launch((blocks, 1, 1), (THREADS, 1, 1), 0, a, a_units, b_q, b_units, b_scale_sh, s_units, out, c_units)
        return out

    return run


def make_path(case):
    """The bench's call(i) for a case (bench.EXTRA_PATHS); None off NVIDIA GPUs (the source is
    untried through hiprtc)."""
    device = case.device
    if device.type != "cuda" or torch.version.hip or not runtime.is_available(device):
        return None
    run = make_runner(*case.shape, device)
    return lambda i: run(case.inputs[i][0], case.inputs[i][2], case.inputs[i][3], case.inputs[i][4])

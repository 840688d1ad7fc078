"""Same-process A/B of two versions of the CUDA kernel source on the table plans of the benchmark
shapes (harness method, alternating repetitions): the package's kernel against an older file.

    git show REV:mxfp4_mm/kernels/mxfp4_gemm_sm90.cu > ab/before.cu
    python3 tools/ab_cuda.py ab/before.cu [--reps 100]
"""

import argparse
import ctypes
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mxfp4_mm import runtime  # noqa: E402
from mxfp4_mm.backends import cuda  # noqa: E402
from mxfp4_mm.kernels import read_source  # noqa: E402
from bench_cuda import BENCH_SHAPES, geomean, input_sets_for, time_runner  # noqa: E402
from conftest import reference_output  # noqa: E402
from tune_cuda import is_correct  # noqa: E402


def runner_from_source(source, m, n, k, device, plan):
    function = runtime.load_module(source, device, cuda.compile_options(m, n, k, plan),
                                   cuda.compile_target(device, plan)).function("mxfp4_gemm")
    shared = cuda.smem_bytes(m, n, k, plan)
    api = runtime.api_for(device)
    api.check(api.drv.cuFuncSetAttribute(function.handle, 8, ctypes.c_int(shared)), "cuFuncSetAttribute")
    launch = function.launcher("pppp")
    dims, block = cuda.grid(m, n, plan), (plan.wn * plan.wk * 32, 1, 1)

    def run(a, b_q, b_shuffle, b_scale_sh):
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
        launch(dims, block, shared, a, b_q, b_scale_sh, out)
        return out

    return run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("before", help="older kernel source file")
    parser.add_argument("--reps", type=int, default=100)
    args = parser.parse_args()
    device = torch.device("cuda")
    sources = {"before": Path(args.before).read_text(), "now": read_source(cuda.SOURCE)}
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device=device)
    totals = {name: [] for name in sources}
    for m, n, k in BENCH_SHAPES:
        sets = input_sets_for(m, n, k)
        ref = reference_output(sets[0])
        plan = cuda.plan_for(m, n, k, device)
        runs = {name: runner_from_source(src, m, n, k, device, plan) for name, src in sources.items()}
        ok = {name: is_correct(run(sets[0][0], sets[0][2], sets[0][3], sets[0][4]), ref) for name, run in runs.items()}
        samples = {name: [] for name in runs}
        for _ in range(10):  # interleaved batches, so drift hits both alike
            for name, run in runs.items():
                samples[name].append(time_runner(run, sets, max(1, args.reps // 10), flush))
        row = []
        for name in runs:
            us = sorted(samples[name])[len(samples[name]) // 2]
            totals[name].append(us)
            row.append(f"{name} {us:6.2f} us {'ok' if ok[name] else 'BAD'}")
        print(f"{m:4d} {n:5d} {k:5d}  " + "   ".join(row), flush=True)
    print("geomean: " + "   ".join(f"{name} {geomean(v):.2f} us" for name, v in totals.items()), flush=True)


if __name__ == "__main__":
    main()

"""Quick harness-method timing of the CUDA backend (dev loop): per call sync, L2 flush (512 MB),
start event, one call, end event; fresh inputs rotated from several sets; median over reps.

    python3 tools/bench_cuda.py [--reps 200] [--shapes bench|all] [--against old_cuda_plans.py]

With --against, each shape's plan from that (older) table is timed in the same process, alternating
with the current table's plan: a before/after comparison under the same conditions.
"""

import argparse
import importlib.util
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from mxfp4_mm.backends import cuda  # noqa: E402
from conftest import make_inputs  # noqa: E402

BENCH_SHAPES = [(4, 2880, 512), (16, 2112, 7168), (32, 4096, 512), (32, 2880, 512), (64, 7168, 2048),
                (256, 3072, 1536)]
TEST_SHAPES = [(8, 2112, 7168), (16, 3072, 1536), (64, 3072, 1536), (256, 2880, 512)]
SETS = 4


def time_runner(run, input_sets, reps, flush):
    """Median µs of `reps` calls, harness method."""
    times = []
    for i in range(reps):
        a, _, b_q, b_shuffle, b_scale_sh = input_sets[i % len(input_sets)]
        torch.cuda.synchronize()
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run(a, b_q, b_shuffle, b_scale_sh)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    times.sort()
    return times[len(times) // 2]


def input_sets_for(m, n, k):
    return [make_inputs(m, n, k, seed=100 + s, device="cuda") for s in range(SETS)]


def old_plans(path):
    spec = importlib.util.spec_from_file_location("old_cuda_plans", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PLANS


def geomean(values):
    return math.exp(sum(map(math.log, values)) / len(values))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--shapes", choices=("bench", "all"), default="bench")
    parser.add_argument("--against", help="an older tables/cuda_plans.py to time alongside")
    args = parser.parse_args()
    device = torch.device("cuda")
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device=device)
    shapes = BENCH_SHAPES + (TEST_SHAPES if args.shapes == "all" else [])
    before = old_plans(args.against) if args.against else {}
    rows = []
    for m, n, k in shapes:
        sets = input_sets_for(m, n, k)
        plan = cuda.plan_for(m, n, k, device)
        run = cuda.make_runner(m, n, k, device, plan)
        run(sets[0][0], sets[0][2], sets[0][3], sets[0][4])
        old = cuda.Plan(*before[(m, n, k)]) if (m, n, k) in before else None
        old_run = cuda.make_runner(m, n, k, device, old) if old else None
        us, old_us = [], []
        for _ in range(4):  # alternate, so drifts hit both alike
            us.append(time_runner(run, sets, args.reps // 4, flush))
            if old_run:
                old_us.append(time_runner(old_run, sets, args.reps // 4, flush))
        us = sorted(us)[len(us) // 2]
        old_us = sorted(old_us)[len(old_us) // 2] if old_us else float("nan")
        rows.append((m, n, k, plan, us, old, old_us))
        print(f"{m:4d} {n:5d} {k:5d}  {us:7.2f} us  {tuple(plan)}"
              + (f"   before {old_us:7.2f} us  {tuple(old)}" if old else ""), flush=True)
    bench = [r for r in rows if (r[0], r[1], r[2]) in BENCH_SHAPES]
    print(f"geomean over the 6 benchmark shapes: {geomean([r[4] for r in bench]):.2f} us"
          + (f"  (before {geomean([r[6] for r in bench]):.2f} us)" if before else ""))


if __name__ == "__main__":
    main()

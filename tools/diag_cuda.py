"""Where does the time go? For each benchmark shape: harness-method median, back-to-back launch
time (no flush; throughput), and, with --ncu-shape, one plain launch for Nsight Compute to profile.

    python3 tools/diag_cuda.py                      # timings
    ncu --clock-control none -k mxfp4_gemm -c 1 --section SpeedOfLight --section WarpStateStats \
        --section Occupancy python3 tools/diag_cuda.py --ncu-shape 1
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from mxfp4_mm.backends import cuda  # noqa: E402
from bench_cuda import BENCH_SHAPES, input_sets_for, time_runner  # noqa: E402


def back_to_back_us(run, data, reps=200):
    a, _, b_q, b_shuffle, b_scale_sh = data
    run(a, b_q, b_shuffle, b_scale_sh)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        run(a, b_q, b_shuffle, b_scale_sh)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / reps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ncu-shape", type=int, default=None, help="index into the 6 benchmark shapes")
    args = parser.parse_args()
    device = torch.device("cuda")
    if args.ncu_shape is not None:
        m, n, k = BENCH_SHAPES[args.ncu_shape]
        data = input_sets_for(m, n, k)[0]
        cuda.make_runner(m, n, k, device)(data[0], data[2], data[3], data[4])
        torch.cuda.synchronize()
        return
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device=device)
    for m, n, k in BENCH_SHAPES:
        sets = input_sets_for(m, n, k)
        run = cuda.make_runner(m, n, k, device)
        harness = time_runner(run, sets, 100, flush)
        print(f"{m:4d} {n:5d} {k:5d}  harness {harness:7.2f} us  back-to-back {back_to_back_us(run, sets[0]):7.2f} us"
              f"  {tuple(cuda.plan_for(m, n, k, device))}", flush=True)


if __name__ == "__main__":
    main()

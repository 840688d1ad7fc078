"""Host cost of one call for eager users (GPU): what the harness's flush hides.

For each benchmark shape, back-to-back calls with no flush and no sync between them:
  host   - CPU time spent inside one call (perf_counter around the call, median)
  rate   - wall time per call over a burst of calls (the GPU or the host, whichever is slower)
for mxfp4_mm.custom_kernel (validation + dispatch + torch.empty + launch), the bare cuda launcher
(preallocated output, no checks), and torch.mm on bf16 operands of the same size (a reference
point for "one torch op").

    python3 tools/host_overhead.py [--calls 2000] [--out host.json]
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mxfp4_mm  # noqa: E402
from mxfp4_mm import bench  # noqa: E402
from mxfp4_mm.backends import cuda  # noqa: E402
from bench_cuda import BENCH_SHAPES  # noqa: E402


def measure(call, calls):
    for _ in range(50):
        call()
    torch.cuda.synchronize()
    host = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        host.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    rate = (time.perf_counter() - t0) / calls
    return statistics.median(host) * 1e6, rate * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out")
    args = parser.parse_args()
    device = torch.device("cuda")
    rows = []
    print(f"{'shape':>16} {'custom_kernel host/rate':>24} {'bare launch host/rate':>22} {'torch.mm host/rate':>20}  (µs)")
    for m, n, k in BENCH_SHAPES:
        data = bench.generate_input(m, n, k, 0, device)
        a, _, b_q, _, b_scale_sh = data
        launch = cuda.make_launcher(m, n, k, device, cuda.plan_for(m, n, k, device))
        out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
        a_bf, b_bf = torch.randn((m, k), dtype=torch.bfloat16, device=device), torch.randn((k, n), dtype=torch.bfloat16, device=device)
        row = {"shape": [m, n, k],
               "custom_kernel": measure(lambda: mxfp4_mm.custom_kernel(data), args.calls),
               "bare_launch": measure(lambda: launch(a, b_q, b_scale_sh, out), args.calls),
               "torch_mm": measure(lambda: torch.mm(a_bf, b_bf), args.calls)}
        rows.append(row)
        print(f"{m}x{n}x{k}".rjust(16) + "".join(f"{row[p][0]:>14.1f} / {row[p][1]:<6.1f}"
                                               for p in ("custom_kernel", "bare_launch", "torch_mm")), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

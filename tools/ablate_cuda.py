"""Where the CUDA kernel's time goes: time the table plan of each benchmark shape with stages left
out (kernels/mxfp4_gemm_sm90.cu, -DABLATE mask; results are wrong, timing only), harness method.

    python3 tools/ablate_cuda.py [--reps 60] [--out ablate.json]
"""

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mxfp4_mm.backends import cuda  # noqa: E402
from bench_cuda import BENCH_SHAPES, input_sets_for, time_runner  # noqa: E402

MASKS = {"full": 0, "no A quant": 1, "no B convert": 2, "no MMA": 4, "no B load": 8,
         "no quant/convert/MMA": 7, "none of them": 15}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--out")
    args = parser.parse_args()
    device = torch.device("cuda")
    flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device=device)
    rows = []
    print("shape".ljust(16) + "".join(name.rjust(22) for name in MASKS), flush=True)
    for m, n, k in BENCH_SHAPES:
        sets = input_sets_for(m, n, k)
        plan = cuda.plan_for(m, n, k, device)
        times = {}
        for name, mask in MASKS.items():
            run = cuda.make_runner(m, n, k, device, plan, (f"-DABLATE={mask}",) if mask else ())
            run(*[sets[0][i] for i in (0, 2, 3, 4)])
            times[name] = time_runner(run, sets, args.reps, flush)
        rows.append({"shape": [m, n, k], "plan": list(plan), "us": times})
        print(f"{m}x{n}x{k}".ljust(16) + "".join(f"{t:22.2f}" for t in times.values()), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""A/B experiment for compile-time kernel options: for each benchmark shape, the table plan and
its B-ring variants, each without and with every given option set; every build checked against
the reference once, then timed with the harness method in one process.

    python3 tools/experiment_cuda.py --option=-DB_LATE=0 --option=-DB_LATE=1 [--reps 60]
    (write --option=VALUE: a value that starts with "-" is otherwise taken for a flag)
"""

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
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


def variants(m, n, k, plan):
    found = []
    for ring in (plan.ring, 0, 2, 3):
        p = plan._replace(ring=ring)
        ok = cuda.is_valid(m, n, k, p) and (ring == 0 or ring < cuda.chunks_per_warp(k, p))
        if ok and p not in found:
            found.append(p)
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--option", action="append", required=True, help="an option set (repeatable)")
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--out")
    args = parser.parse_args()
    device = torch.device("cuda")
    option_sets = [()] + [tuple(o.split()) for o in args.option]
    work = [((m, n, k), p, opts) for m, n, k in BENCH_SHAPES
            for p in variants(m, n, k, cuda.plan_for(m, n, k, device)) for opts in option_sets]
    api, source = runtime.api_for(device), read_source(cuda.SOURCE)

    def build(item):
        (m, n, k), plan, opts = item
        target = cuda.compile_target(device, plan)
        runtime._code_object(api, source, runtime._headers_of(source, {}),
                             runtime.default_options(device, target) + cuda.compile_options(m, n, k, plan) + opts,
                             target)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(build, work))
    flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device=device)
    rows, best = [], {}
    for (m, n, k) in BENCH_SHAPES:
        sets = input_sets_for(m, n, k)
        ref = reference_output(sets[0])
        for shape, plan, opts in [w for w in work if w[0] == (m, n, k)]:
            run = cuda.make_runner(m, n, k, device, plan, opts)
            ok = is_correct(run(sets[0][0], sets[0][2], sets[0][3], sets[0][4]), ref)
            us = time_runner(run, sets, args.reps, flush)
            rows.append({"shape": [m, n, k], "plan": list(plan), "options": list(opts), "ok": ok, "us": us})
            print(f"{m:4d} {n:5d} {k:5d}  {str(tuple(plan)):28s} {' '.join(opts) or '-':14s} "
                  f"{'ok ' if ok else 'BAD'} {us:7.2f} us", flush=True)
            key = (m, n, k), opts
            if ok and (key not in best or us < best[key][1]):
                best[key] = (plan, us)
    for opts in option_sets:
        values = [best[(s, opts)][1] for s in BENCH_SHAPES if (s, opts) in best]
        print(f"best per shape with [{' '.join(opts) or 'no options'}]: "
              + " ".join(f"{v:.2f}" for v in values) + f"  geomean {geomean(values):.2f} us", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""Sweep CUDA-backend plans on the device and rewrite tables/cuda_plans.py (with --write).

For each task shape: the table's plan, the general rule's, and neighbours (split-K, warps along K,
tile width); each checked once against the reference, then timed with the harness method
(tools/bench_cuda.py); the fastest correct plan wins.

    python3 tools/tune_cuda.py [--reps 60] [--write] [--shapes bench|all]
"""

import argparse
import itertools
import random
import re
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tools"))

from mxfp4_mm.backends import cuda  # noqa: E402
from mxfp4_mm.tables import cuda_plans  # noqa: E402
from bench_cuda import BENCH_SHAPES, TEST_SHAPES, input_sets_for, time_runner  # noqa: E402
from conftest import reference_output  # noqa: E402


MAX_CANDIDATES = 24


def candidates(m, n, k):
    seeds = [cuda_plans.PLANS.get((m, n, k)), tuple(cuda_plans.general_plan(m, n, k))]
    if seeds[0] and seeds[0][0] >= 32:  # also fewer rows of M per CTA
        seeds.append((seeds[0][0] // 2,) + tuple(seeds[0][1:]))
    found = []
    for seed in filter(None, seeds):
        bm, wn, nt, wk, split_k = seed
        for d_split, d_wk, d_nt, d_wn in itertools.product((1, 2, 0.5), (1, 2, 0.5), (0, 1, -1), (0, 2, -1)):
            plan = cuda.Plan(bm, max(1, wn + d_wn), max(1, nt + d_nt), max(1, int(wk * d_wk)),
                             max(1, int(split_k * d_split)))
            if cuda.is_valid(m, n, k, plan) and plan not in found:
                found.append(plan)
    seeds_first, rest = found[:1], found[1:]
    random.Random(0).shuffle(rest)  # a spread of neighbours, not just the first axis
    return seeds_first + rest[:MAX_CANDIDATES - 1]


def precompile(shape_plans, device):
    """Compile every candidate in parallel into the disk cache (NVRTC runs outside the GIL)."""
    from concurrent.futures import ThreadPoolExecutor
    from mxfp4_mm import runtime
    from mxfp4_mm.kernels import read_source

    api, arch = runtime.api_for(device), runtime.kernel_arch(device)
    source = read_source(cuda.SOURCE)

    def build(item):
        (m, n, k), plan = item
        options = runtime.default_options(device) + cuda.compile_options(m, n, k, plan)
        runtime._code_object(api, source, {}, options, arch)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(build, shape_plans))


def is_correct(out, ref):
    out, ref = out.float(), ref.float().to(out.device)
    return bool(((out - ref).abs() <= 1e-2 + 1e-2 * ref.abs()).all())


def tune_shape(m, n, k, reps, flush):
    sets = input_sets_for(m, n, k)
    ref = reference_output(sets[0])
    best = None
    for plan in candidates(m, n, k):
        try:
            run = cuda.make_runner(m, n, k, torch.device("cuda"), plan)
            ok = is_correct(run(sets[0][0], sets[0][2], sets[0][3], sets[0][4]), ref)
        except Exception as exc:  # a plan that fails to build or launch is skipped
            print(f"  {tuple(plan)} failed: {type(exc).__name__}: {exc}", flush=True)
            continue
        us = time_runner(run, sets, reps, flush) if ok else float("inf")
        print(f"  {tuple(plan)} {'ok ' if ok else 'BAD'} {us:7.2f} us", flush=True)
        if ok and (best is None or us < best[1]):
            best = (plan, us)
    return best


def write_table(results):
    path = ROOT / "mxfp4_mm" / "tables" / "cuda_plans.py"
    text = path.read_text()
    body = "".join(f"    {shape}: {tuple(plan)},  # " + (f"{us:.2f} us" if us == us else "kept, not re-tuned") + "\n"
                   for shape, (plan, us) in results.items())
    stamp = f"    # measured by tools/tune_cuda.py on {torch.cuda.get_device_name()} {time.strftime('%Y-%m-%d')}\n"
    text = re.sub(r"PLANS = \{\n.*?\n\}\n", "PLANS = {\n" + stamp + body + "}\n", text, flags=re.S)
    path.write_text(text)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--shapes", choices=("bench", "all"), default="all")
    args = parser.parse_args()
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    shapes = BENCH_SHAPES + (TEST_SHAPES if args.shapes == "all" else [])
    t0 = time.time()
    precompile([(shape, plan) for shape in shapes for plan in candidates(*shape)], torch.device("cuda"))
    print(f"precompiled in {time.time() - t0:.1f} s", flush=True)
    results = {}
    for shape in shapes:
        print(f"{shape}:", flush=True)
        best = tune_shape(*shape, args.reps, flush)
        if best is not None:
            results[shape] = best
            print(f"  best {tuple(best[0])} {best[1]:.2f} us", flush=True)
    for shape, plan in cuda_plans.PLANS.items():
        if shape not in results:
            results[shape] = (cuda.Plan(*plan), float("nan"))
    if args.write:
        write_table(results)


if __name__ == "__main__":
    main()

"""Sweep CUDA-backend plans on the device and rewrite tables/cuda_plans.py (with --write).

For each task shape: the table's plan, the general rule's, and neighbours (split-K, warps along K,
tile width, v5's N tiles sharing A); each checked once against the reference, then timed with the
harness method (tools/bench_cuda.py); the fastest correct plan wins if it beats the table's plan
by more than MARGIN (else the table's plan stays).

    python3 tools/tune_cuda.py [--reps 60] [--write] [--shapes bench|all]
    # one shape per process (a faulting candidate cannot take the others down):
    python3 tools/tune_cuda.py --precompile-only
    python3 tools/tune_cuda.py --only 64,7168,2048 --results r.jsonl   (per shape)
    python3 tools/tune_cuda.py --write-from r.jsonl
"""

import argparse
import itertools
import json
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


MAX_CANDIDATES = 44
MARGIN = 0.03  # a new plan must be this much faster than the table's in the same sweep


def table_plan(m, n, k):
    listed = cuda_plans.PLANS.get((m, n, k))
    return cuda.Plan(*listed) if listed else None


def fills_sms(m, n, plan, compute_units=132):
    """One or two full waves of CTAs (within 10 %)."""
    ctas = 1
    for d in cuda.grid(m, n, plan):
        ctas *= d
    return any(0.9 * compute_units * waves <= ctas <= compute_units * waves for waves in (1, 2))


def candidates(m, n, k, v5=True):
    seeds = [table_plan(m, n, k), cuda_plans.general_plan(m, n, k)]
    if seeds[0] and seeds[0].bm >= 32:  # also fewer rows of M per CTA
        seeds.append(seeds[0]._replace(bm=seeds[0].bm // 2))
    def useful(plan):  # valid, and a ring shorter than the warp's chunk count (else it is v4's layout)
        return cuda.is_valid(m, n, k, plan) and plan.ring < cuda.chunks_per_warp(k, plan) if plan.ring \
            else cuda.is_valid(m, n, k, plan)

    found = []
    v5_axes = ((1, 2, 4), (0, 2, 3)) if v5 else ((1,), (0,))
    for seed in filter(None, seeds):
        bm, wn, nt, wk, split_k = seed[:5]
        for d_split, d_wk, d_nt, d_wn, cn, ring in itertools.product((1, 2, 0.5), (1, 2, 0.5), (0, 1, -1),
                                                                      (0, 2, -1, -2, 1), *v5_axes):
            plan = cuda.Plan(bm, max(1, wn + d_wn), max(1, nt + d_nt), max(1, int(wk * d_wk)),
                             max(1, int(split_k * d_split)), cn, ring)
            if useful(plan) and plan not in found:
                found.append(plan)
    seed_variants = [found[0]] + ([found[0]._replace(cn=2), found[0]._replace(cn=4), found[0]._replace(ring=2),
                                   found[0]._replace(ring=3), found[0]._replace(cn=2, ring=2)] if v5 else [])
    first = [p for p in seed_variants if useful(p)]
    rest = [p for p in found if p not in first]
    random.Random(0).shuffle(rest)  # a spread of neighbours, not just the first axis
    rest.sort(key=lambda p: not fills_sms(m, n, p))  # stable: plans filling the SMs first
    return first + rest[:MAX_CANDIDATES - len(first)]


def wide_candidates(m, n, k, bases=20, bms=(16, 32, 64, 128), wgmma=False):
    """The usual neighbours plus a full grid of plans (larger M tiles too) filling 0.5-2 waves of
    SMs: the `bases` best (bm, wn, nt, wk, split_k) by the cost model, each with its cn/ring variants."""
    from mxfp4_mm.tables.cuda_plans import plan_cost
    m_pad = -(-m // 8) * 8
    ranked = []
    for bm, wn, nt, wk, split_k in itertools.product(bms, (1, 2, 3, 4, 6, 8), (1, 2, 3, 4),
                                                     (1, 2, 4), (1, 2, 4, 8)):
        base = cuda.Plan(min(bm, m_pad), wn, nt, wk, split_k)
        ctas = 1
        for d in cuda.grid(m, n, base):
            ctas *= d
        if base not in ranked and cuda.is_valid(m, n, k, base) and 66 <= ctas <= 264:
            ranked.append(base)
    ranked.sort(key=lambda p: plan_cost(m, n, k, p))
    found = candidates(m, n, k)
    for base in ranked[:bases]:
        for cn, ring, wg in itertools.product((1, 2, 4), (0, 2), (0, 1) if wgmma else (0,)):
            plan = base._replace(cn=cn, ring=ring, wg=wg)
            if plan not in found and cuda.is_valid(m, n, k, plan) and (
                    not ring or ring < cuda.chunks_per_warp(k, plan)):
                found.append(plan)
    return found


def precompile(shape_plans, device):
    """Compile every candidate in parallel into the disk cache (NVRTC runs outside the GIL)."""
    from concurrent.futures import ThreadPoolExecutor
    from mxfp4_mm import runtime
    from mxfp4_mm.kernels import read_source

    api = runtime.api_for(device)
    source = read_source(cuda.SOURCE)

    def build(item):
        (m, n, k), plan = item
        target = cuda.compile_target(device, plan)
        options = runtime.default_options(device, target) + cuda.compile_options(m, n, k, plan)
        runtime._code_object(api, source, runtime._headers_of(source, {}), options, target)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(build, shape_plans))


def is_correct(out, ref):
    out, ref = out.float(), ref.float().to(out.device)
    return bool(((out - ref).abs() <= 1e-2 + 1e-2 * ref.abs()).all())


def tune_shape(m, n, k, reps, flush, v5=True, wide=None):
    """(best plan, its µs, the table plan's µs in the same sweep); the table's plan unless beaten by MARGIN."""
    sets = input_sets_for(m, n, k)
    ref = reference_output(sets[0])
    best, listed, listed_us = None, table_plan(m, n, k), float("nan")
    for plan in (wide((m, n, k)) if wide else candidates(m, n, k, v5)):
        try:
            run = cuda.make_runner(m, n, k, torch.device("cuda"), plan)
            ok = is_correct(run(sets[0][0], sets[0][2], sets[0][3], sets[0][4]), ref)
        except Exception as exc:  # a plan that fails to build or launch is skipped
            print(f"  {tuple(plan)} failed: {type(exc).__name__}: {exc}", flush=True)
            continue
        us = time_runner(run, sets, reps, flush) if ok else float("inf")
        print(f"  {tuple(plan)} {'ok ' if ok else 'BAD'} {us:7.2f} us", flush=True)
        if plan == listed:
            listed_us = us
        if ok and (best is None or us < best[1]):
            best = (plan, us)
    if best is not None and listed_us == listed_us and best[1] > listed_us * (1 - MARGIN):
        best = (listed, listed_us)
    return best + (listed_us,) if best else None


def write_table(results):
    path = ROOT / "mxfp4_mm" / "tables" / "cuda_plans.py"
    text = path.read_text()
    def entry(plan):  # 5 fields for v4 plans, 7 when a v5 field (cn, ring) is used, 8 for wgmma plans
        return tuple(plan) if plan.wg else tuple(plan)[:7] if (plan.cn, plan.ring) != (1, 0) else tuple(plan)[:5]

    old_notes = dict(re.findall(r"^    (\(\d+, \d+, \d+\)): .*?  # (.*)$", text, flags=re.M))
    def note(shape, us):  # a shape not measured in this run keeps its earlier note
        return f"{us:.2f} us" if us == us else old_notes.get(str(shape), "kept, not re-tuned")

    body = "".join(f"    {shape}: {entry(plan)},  # {note(shape, us)}\n" for shape, (plan, us) in results.items())
    stamp = f"    # measured by tools/tune_cuda.py on {torch.cuda.get_device_name() if torch.cuda.is_available() else 'a results file'} {time.strftime('%Y-%m-%d')}\n"
    text = re.sub(r"PLANS = \{\n.*?\n\}\n", "PLANS = {\n" + stamp + body + "}\n", text, flags=re.S)
    path.write_text(text)


def complete(results):
    for shape, plan in cuda_plans.PLANS.items():
        if shape not in results:
            results[shape] = (cuda.Plan(*plan), float("nan"))
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--shapes", choices=("bench", "all"), default="all")
    parser.add_argument("--only", help="'M,N,K [M,N,K ...]': tune these shapes only")
    parser.add_argument("--results", help="append this run's winners to a JSON-lines file")
    parser.add_argument("--precompile-only", action="store_true")
    parser.add_argument("--no-v5", action="store_true", help="v4 plans only (cn = 1)")
    parser.add_argument("--write-from", help="rewrite the table from a JSON-lines results file")
    parser.add_argument("--wide", action="store_true", help="a full plan grid ranked by the cost model")
    parser.add_argument("--wide-bases", type=int, default=20, help="--wide: how many base plans")
    parser.add_argument("--bms", default="16,32,64,128", help="--wide: rows of M per CTA to try")
    parser.add_argument("--wgmma", action="store_true", help="--wide: also the wgmma (v7) variant of each plan")
    args = parser.parse_args()
    if args.write_from:
        results = {}
        for line in Path(args.write_from).read_text().splitlines():
            row = json.loads(line)
            results[tuple(row["shape"])] = (cuda.Plan(*row["plan"]), row["us"])
        write_table(complete(results))
        return
    shapes = BENCH_SHAPES + (TEST_SHAPES if args.shapes == "all" else [])
    if args.only:
        shapes = [tuple(int(v) for v in shape.split(",")) for shape in args.only.split()]
    if args.precompile_only or not args.only or args.wide:
        t0 = time.time()
        bms = tuple(int(v) for v in args.bms.split(","))
        pick = (lambda shape: wide_candidates(*shape, args.wide_bases, bms, args.wgmma)) if args.wide else (lambda shape: candidates(*shape, not args.no_v5))
        precompile([(shape, plan) for shape in shapes for plan in pick(shape)],
                   torch.device("cuda"))
        print(f"precompiled in {time.time() - t0:.1f} s", flush=True)
        if args.precompile_only:
            return
    flush = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
    results = {}
    for shape in shapes:
        print(f"{shape}:", flush=True)
        best = tune_shape(*shape, args.reps, flush, not args.no_v5, pick if args.wide else None)
        if best is not None:
            results[shape] = best[:2]
            print(f"  best {tuple(best[0])} {best[1]:.2f} us (table plan {best[2]:.2f} us)", flush=True)
            if args.results:
                with open(args.results, "a") as f:
                    f.write(json.dumps({"shape": shape, "plan": tuple(best[0]), "us": best[1],
                                        "table_us": best[2]}) + "\n")
    if args.write:
        write_table(complete(results))


if __name__ == "__main__":
    main()

"""Picks the Triton backend's plan per shape on the current GPU and rewrites tables/triton_plans.py.

    python3 tools/tune_triton.py [--shapes all] [--budget-s 90] [--log tune.json]

Candidates: the listed plan (else the general rule) and its neighbours (a local search step; run
it again to step further), each checked against the reference on every pooled input, then timed with the harness method (L2 flush, events, one call,
fresh input set per repetition; median). Shapes not reached within the budget keep the rule.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mxfp4_mm import bench  # noqa: E402
from mxfp4_mm.backends import triton_backend  # noqa: E402
from mxfp4_mm.tables import triton_plans  # noqa: E402

TABLE = REPO / "mxfp4_mm" / "tables" / "triton_plans.py"


def candidates(m, n, k, compute_units, arch):
    """The listed plan (else the rule) first, then its neighbours: split-K x2 and /2 (and x4 when
    nothing is listed yet), block_n, block_m and block_k halved/doubled, 8 warps, 3 stages."""
    rule = triton_backend.general_plan(m, n, k, compute_units)
    listed = triton_plans.PLANS.get(arch, {}).get((m, n, k))
    start = triton_backend.Plan(*listed) if listed else rule
    k_steps = lambda plan: -(-k // plan.block_k)  # noqa: E731
    plans = [start, rule]
    splits = (start.split_k * 2, start.split_k // 2) + (() if listed else (start.split_k * 4,))
    plans += [start._replace(split_k=s) for s in splits if s >= 1]
    plans += [start._replace(block_n=b) for b in (start.block_n // 2, start.block_n * 2) if 32 <= b <= 256]
    plans += [start._replace(block_m=b) for b in (start.block_m // 2, start.block_m * 2) if 16 <= b < 2 * m]
    for block_k in (start.block_k // 2, start.block_k * 2):
        if 128 <= block_k <= 256:  # same K per split, in steps of the other size
            plans.append(start._replace(block_k=block_k, split_k=start.split_k))
    plans += [start._replace(num_warps=8), start._replace(num_stages=3)]
    clamped = [p._replace(split_k=triton_backend.split_k_steps(k_steps(p), p.split_k)[0]) for p in plans]
    return list(dict.fromkeys(clamped))


def time_plan(case, plan, timer, reps):
    m, n, k = case.shape
    launch = triton_backend.make_launcher(m, n, k, case.device, plan)

    def call(i):
        a, _, b_q, _, b_scale_sh = case.inputs[i]
        out = torch.empty((m, n), dtype=torch.bfloat16, device=case.device)
        launch(a, a, b_q, b_scale_sh, out)
        return out

    for i in range(len(case.inputs)):
        if not bench.harness_close(call(i), case.references[i]):
            return None
    samples = [timer.time_us(lambda: call(rep % len(case.inputs)))[1] for rep in range(reps)]
    return bench.stats(samples)["median_us"]


def write_table(arch, chosen):
    plans = {key: dict(value) for key, value in triton_plans.PLANS.items()}
    plans.setdefault(arch, {}).update(chosen)
    body = ["PLANS = {"]
    for arch_name, table in plans.items():
        body.append(f"    {arch_name!r}: {{")
        body += [f"        {shape!r}: {tuple(plan)!r}," for shape, plan in sorted(table.items())]
        body.append("    },")
    body.append("}")
    text = TABLE.read_text()
    TABLE.write_text(text[:text.index("PLANS = {")] + "\n".join(body) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shapes", default="all")
    parser.add_argument("--budget-s", type=float, default=90)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--log", type=Path)
    args = parser.parse_args()
    device = torch.device("cuda")
    arch = triton_backend.kernel_arch(device)
    units = torch.cuda.get_device_properties(device).multi_processor_count
    timer = bench.Timer(device)
    started = time.perf_counter()
    chosen, log = {}, {}
    for shape in bench.parse_shapes(args.shapes):
        case = bench.Case(*shape, seed=7, pool=4, device=device)
        timings = {}
        for plan in candidates(*shape, units, arch):
            if time.perf_counter() - started > args.budget_s:
                break
            timings[tuple(plan)] = time_plan(case, plan, timer, args.reps)
        valid = {p: t for p, t in timings.items() if t is not None}
        log[bench.shape_key(shape)] = {str(p): t for p, t in timings.items()}
        if valid:
            best = min(valid, key=valid.get)
            chosen[shape] = best
            rule_time = timings.get(tuple(triton_backend.general_plan(*shape, units)))
            print(f"{bench.shape_key(shape):>16}: best {best} {valid[best]:.2f} µs (rule {rule_time}); "
                  f"{len(timings)} tried, {len(timings) - len(valid)} wrong", flush=True)
    write_table(arch, chosen)
    if args.log:
        args.log.write_text(json.dumps({"device": bench.device_description(device), "arch": arch, "timings": log},
                                       indent=1))
    print(f"wrote {TABLE} for {arch} ({len(chosen)} shapes) in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()

"""Picks the Triton backend's plan per shape on the current GPU and rewrites tables/triton_plans.py.

    python3 tools/tune_triton.py [--shapes all] [--budget-s 90] [--log tune.json]

Candidates around the general rule (block_n 32/64/128 x split-K halved/kept/doubled), each checked
against the reference once, then timed with the harness method (L2 flush, events, one call,
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


def candidates(m, n, k, compute_units):
    rule = triton_backend.general_plan(m, n, k, compute_units)
    k_steps = -(-k // rule.block_k)
    plans = [rule]
    for block_n in (32, 64, 128):
        tiles = -(-m // rule.block_m) * -(-n // block_n)
        wanted = max(1, round(compute_units / tiles))
        for split in (max(1, wanted // 2), wanted, wanted * 2):
            split = triton_backend.split_k_steps(k_steps, split)[0]
            plans.append(rule._replace(block_n=block_n, split_k=split))
    if k <= 1024:  # short K: finer K steps give split-K room
        for split in (1, 2, 4):
            plans.append(rule._replace(block_k=128, split_k=triton_backend.split_k_steps(-(-k // 128), split)[0]))
    return list(dict.fromkeys(plans))


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
        for plan in candidates(*shape, units):
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

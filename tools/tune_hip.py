"""Picks the HIP backend's plan (kernel variant, split-K) per shape and rewrites tables/hip_plans.py.

    python3 tools/tune_hip.py [--shapes all] [--reps 30] [--budget-s 300] [--log tune.json]
        On an MI355X (gfx950) only: every candidate is checked against the reference, then timed
        with the harness method (L2 flush, events around one call, next input set of a pool each
        repetition; median), and the fastest correct one goes into the table. Timings anywhere
        else say nothing about MI355X, so this mode refuses to run elsewhere.
    python3 tools/tune_hip.py --emulated [--shapes ...]
        On an NVIDIA GPU: the same sweep through the wave64 emulation (hip.make_emulated_runner),
        for correctness only. Prints what it checked; never rewrites the table.
    python3 tools/tune_hip.py --static
        Anywhere, no GPU: PLANS = the general rule, annotated with the static model.

Candidates: every variant (B_shuffle and B_q readers) x split-K 1..min(chunks, 16) whose grid stays
within two blocks per CU.
"""

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mxfp4_mm import bench, dispatch  # noqa: E402
from mxfp4_mm.backends import hip  # noqa: E402
from mxfp4_mm.tables import hip_plans  # noqa: E402
from mxfp4_mm.tables.hip_plans import Plan  # noqa: E402

TABLE = REPO / "mxfp4_mm" / "tables" / "hip_plans.py"
BEGIN, END = "# BEGIN PLANS", "# END PLANS"
TASK_SHAPES = {"tests": bench.TEST_SHAPES, "benchmarks": bench.BENCHMARK_SHAPES}


# ---- the static model -------------------------------------------------------------------------

def mfma_count(m, n, k, variant):
    """Scaled MFMA instructions of the whole launch (the K tail chunk issues fewer steps)."""
    groups = 64 // variant.mfma                      # K slices of 32 per MFMA step
    slices = k // 32
    steps = (slices // 8) * (8 // groups) + -(-(slices % 8) // groups)
    per_tile = (variant.tile_m // variant.mfma) * (variant.tile_n // variant.mfma) * steps
    return hip_plans.grid_blocks(m, n, variant) * per_tile


def hbm_bytes(m, n, k, split_k):
    return n * k // 2 + n * k // 32 + m * k * 2 + m * n * 2 + hip_plans.partial_bytes(m, n, split_k)


def why_rule(m, n, k, variant, split_k):
    blocks = hip_plans.grid_blocks(m, n, variant)
    if blocks >= hip_plans.TARGET_BLOCKS:
        tile = f"least L2 traffic of the tiles with >= {hip_plans.TARGET_BLOCKS} blocks"
    else:
        tile = f"no tile reaches {hip_plans.TARGET_BLOCKS} blocks: the most blocks"
    unsplit = hip_plans.chain(k, variant, 1)
    if split_k == 1:
        split = f"no split (chain {unsplit} <= 2)" if unsplit <= 2 else "no split fits the CUs"
    else:
        split = f"split {split_k}: chain {unsplit} -> {hip_plans.chain(k, variant, split_k)}"
    return f"{tile}; {split}"


def static_model(m, n, k, plan):
    v = hip.kernel_variants()[plan.variant]
    blocks = hip_plans.grid_blocks(m, n, v) * plan.split_k
    return (f"hbm {hbm_bytes(m, n, k, plan.split_k) / 1e6:.2f} MB, "
            f"l2 {hip_plans.cache_read_bytes(m, n, k, v) / 1e6:.1f} MB, "
            f"{mfma_count(m, n, k, v)} mfma{v.mfma}, {blocks} blocks / {hip_plans.COMPUTE_UNITS} CUs, "
            f"chain {hip_plans.chain(k, v, plan.split_k)}")


def rule_plan(m, n, k):
    return hip_plans.general_plan(m, n, k, [v for v in hip.kernel_variants().values() if v.b_shuffled])


# ---- the table --------------------------------------------------------------------------------

def render_plans(chosen, why, source_line):
    """The PLANS block: test shapes, then benchmark shapes with their static model and reason."""
    lines = [f"{BEGIN} (written by tools/tune_hip.py)", f"# {source_line}", "PLANS = {"]
    for group, shapes in TASK_SHAPES.items():
        lines.append(f"    # {group}")
        for shape in shapes:
            plan = chosen[shape]
            if group == "benchmarks":
                lines.append(f"    # {static_model(*shape, plan)}")
                lines.append(f"    #   {why[shape]}")
            lines.append(f"    {shape!r}: Plan({plan.variant!r}, {plan.split_k}),")
    extra = sorted(set(chosen) - {s for shapes in TASK_SHAPES.values() for s in shapes})
    lines += [f"    {shape!r}: Plan({chosen[shape].variant!r}, {chosen[shape].split_k}),  # {why[shape]}"
              for shape in extra]
    lines += ["}", END]
    return "\n".join(lines)


def write_table(chosen, why, source_line, path=TABLE):
    text = path.read_text()
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    path.write_text(head + render_plans(chosen, why, source_line) + tail)


def static_plans(shapes):
    chosen, why = {}, {}
    for shape in shapes:
        chosen[shape] = rule_plan(*shape)
        v = hip.kernel_variants()[chosen[shape].variant]
        why[shape] = why_rule(*shape, v, chosen[shape].split_k)
    return chosen, why


# ---- the sweep --------------------------------------------------------------------------------

def candidates(m, n, k):
    plans = [rule_plan(m, n, k)]
    for v in hip.kernel_variants().values():
        blocks = hip_plans.grid_blocks(m, n, v)
        for split_k in range(1, min(hip_plans.chunks_of(k), hip_plans.MAX_SPLIT) + 1):
            if split_k == 1 or blocks * split_k <= 2 * hip_plans.COMPUTE_UNITS:
                plans.append(Plan(v.name, split_k))
    return list(dict.fromkeys(plans))


def sweep_shape(case, make, timer, reps, deadline, progress):
    """{plan: median µs, or None when wrong}; stops at the deadline."""
    m, n, k = case.shape
    results = {}
    plans = candidates(m, n, k)
    for i, plan in enumerate(plans):
        if time.perf_counter() > deadline:
            print(f"  budget spent after {i}/{len(plans)} candidates", flush=True)
            break
        runner = make(m, n, k, case.device, plan)

        def call(j):
            a, _, b_q, b_shuffle, b_scale_sh = case.inputs[j]
            return runner(a, b_q, b_shuffle, b_scale_sh)

        correct = all(bench.harness_close(call(j), case.references[j]) for j in range(len(case.inputs)))
        time_us = None
        if correct:
            samples = [timer.time_us(lambda: call(rep % len(case.inputs)))[1] for rep in range(reps)]
            time_us = bench.stats(samples)["median_us"]
        results[plan] = time_us
        progress(i + 1, len(plans), plan, time_us, correct)
    return results


def _us(values):
    return f"{values[0]:.2f} µs" if values else "n/a"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--static", action="store_true", help="write the general rule's plans (no GPU)")
    mode.add_argument("--emulated", action="store_true", help="correctness sweep through the NVIDIA emulation")
    parser.add_argument("--shapes", default="all", help="all | bench | test | 'M,N,K;M,N,K'")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--budget-s", type=float, default=600)
    parser.add_argument("--log", type=Path, help="write every candidate's result as JSON")
    args = parser.parse_args()
    shapes = bench.parse_shapes(args.shapes)

    if args.static:
        chosen, why = static_plans(bench.TEST_SHAPES + bench.BENCHMARK_SHAPES)
        write_table(chosen, why, "static model (tools/tune_hip.py --static); not measured")
        print(f"wrote {TABLE} from the general rule")
        return 0

    device = torch.device("cuda")
    if args.emulated:
        if not torch.cuda.is_available() or dispatch.device_kind(device) != "nvidia":
            sys.exit("--emulated needs an NVIDIA GPU")
        make, reps = hip.make_emulated_runner, 3
        print("EMULATED on NVIDIA: checks correctness of every candidate; the times mean nothing for MI355X")
    else:
        if not torch.cuda.is_available() or not hip.is_available(device):
            sys.exit("tuning needs an MI355X (gfx950) with hiprtc; use --emulated or --static elsewhere")
        make, reps = hip.make_runner, args.reps

    timer = bench.Timer(device)
    deadline = time.perf_counter() + args.budget_s
    log, wrong = {}, 0
    chosen, why = static_plans(bench.TEST_SHAPES + bench.BENCHMARK_SHAPES)
    for shape, plan in hip_plans.PLANS.items():  # shapes not swept now keep their entry
        if plan != chosen.get(shape):
            chosen[shape], why[shape] = plan, "kept from the previous table"
    for index, shape in enumerate(shapes):
        key = bench.shape_key(shape)
        print(f"[{index + 1}/{len(shapes)}] {key}: {len(candidates(*shape))} candidates", flush=True)

        def progress(i, total, plan, time_us, correct):
            shown = "WRONG" if not correct else f"{time_us:8.2f} µs"
            print(f"  [{i}/{total}] {plan.variant} split {plan.split_k}: {shown}", flush=True)

        case = bench.Case(*shape, seed=7, pool=2 if args.emulated else 4, device=device)
        results = sweep_shape(case, make, timer, reps, deadline, progress)
        log[key] = {f"{p.variant}/{p.split_k}": t for p, t in results.items()}
        wrong += sum(t is None for t in results.values())
        timed = {p: t for p, t in results.items() if t is not None}
        if timed and not args.emulated:
            best = min(timed, key=timed.get)
            rule = timed.get(rule_plan(*shape))
            chosen[shape] = best
            why[shape] = (f"measured {timed[best]:.2f} µs; next best {_us(sorted(timed.values())[1:2])}, "
                          f"rule {_us([rule] if rule else [])}; {len(results)} candidates")
            print(f"  best {best.variant} split {best.split_k}: {timed[best]:.2f} µs", flush=True)

    if args.log:
        args.log.write_text(json.dumps({"device": bench.device_description(device), "emulated": args.emulated,
                                        "median_us": log}, indent=1))
    if args.emulated:
        print(f"emulated sweep: {sum(map(len, log.values()))} plans run, {wrong} wrong")
        return 1 if wrong else 0
    today = datetime.date.today().isoformat()
    write_table(chosen, why, f"measured on {bench.device_description(device)}, {today}, median of {reps}")
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

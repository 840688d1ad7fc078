"""Timing experiments on the cuda backend's kernels (NVIDIA GPU), harness method throughout: L2
flushed, events around one call, a fresh input set per repetition, variants interleaved
repetition by repetition so drift hits them alike, medians.

    python3 tools/cuda_lab.py ab BEFORE.cu [OTHER.cu ...]
        The package's kernel source ("now") against other versions of it (the file the plans build
        from; several are named by their file stems), same plans, same process
        (e.g. `git show REV:mxfp4_mm/backends/cuda/mxfp4_gemm_sm90.cu > before.cu`).
    python3 tools/cuda_lab.py host [--calls 2000]
        Eager host cost per call, back to back without flush: custom_kernel (validation + dispatch +
        launch) vs the bare runner vs one torch.mm of the same size.
    python3 tools/cuda_lab.py plans [--max-plans 8] [--plans "M,N,K:PLAN ..."]
        Plans of each shape (default: its pipe plans with the tensor-map twins of the copy-warp
        ones, backends/cuda/mxfp4_gemm_sm90_pipe.cu) against
        the table's plan and cuBLAS bf16 on pre-dequantized operands (bf16_matmul); every plan checked
        once.
    python3 tools/cuda_lab.py once 16,2112,7168 [--plan PLAN]
        One call of one shape, for a profiler: ncu -k mxfp4_gemm -c 1 python3 tools/cuda_lab.py once ...
    python3 tools/cuda_lab.py clusters [--plans "M,N,K:PLAN ..."]
        Per fp8 plan (default: each shape's fp8 plans): its CTAs, clusters and how many clusters the GPU
        runs at once; a grid of more runs in waves (the whole-range ahead plans' late CTAs, notes/cuda.md).

Shapes default to the 6 benchmark shapes and plans to the table's; a PLAN is the cuda Plan's
fields, comma-separated (e.g. 64,8,1,1,2,4,0), a PipePlan's (e.g. pipe,256,64,4,64,9,1; a last field 1 for tensor-map copies) or dq. Every
subcommand takes --reps and --out FILE.json. The timing builds of the kernels (phase timelines,
ablations, option sets) are at the tag cuda-lab-2026-12-04.
"""

import argparse
import concurrent.futures
import ctypes
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mxfp4_mm  # noqa: E402
from mxfp4_mm import bench, runtime  # noqa: E402
from mxfp4_mm.backends import cuda  # noqa: E402
from mxfp4_mm.backends.cuda import plans as cuda_plans  # noqa: E402

POOL = 4


# ---- shared ---------------------------------------------------------------------------------

def parse_shape(text):
    return tuple(int(v) for v in text.split(","))


def parse_plan(text):
    """A cuda Plan from '64,8,1,1,2,4,0', a PipePlan from 'pipe,256,64,4,64,9,1', the DequantPlan from 'dq'."""
    return cuda_plans.plan_from_fields([int(v) if v.isdigit() else v for v in text.split(",")])


def parse_work(shapes, plans):
    """[(shape, plan or None)] from --plans 'M,N,K:PLAN ...', else --shapes, else the benchmark shapes."""
    if plans:
        return [(parse_shape(item.split(":")[0]), parse_plan(item.split(":")[1])) for item in plans.split()]
    return [(parse_shape(s), None) for s in shapes.split()] if shapes else [(s, None) for s in bench.BENCHMARK_SHAPES]


def input_sets(m, n, k, device):
    return [bench.generate_input(m, n, k, 100 + s, device) for s in range(POOL)]


def runner_args(data):
    a, _, b_q, b_shuffle, b_scale_sh = data
    return a, b_q, b_shuffle, b_scale_sh


def plan_text(runner, plan):
    plan = getattr(runner, "plan", plan)
    return ",".join(map(str, plan)) if plan is not None else "table"


def interleaved_medians(runs, sets, reps, timer):
    """{name: median µs} of `reps` harness-method calls per runner, runners interleaved."""
    samples = {name: [] for name in runs}
    for i in range(reps):
        for name, run in runs.items():
            samples[name].append(timer.time_us(lambda: run(*runner_args(sets[i % len(sets)])))[1])
    return {name: statistics.median(values) for name, values in samples.items()}


def is_correct(run, data):
    return bench.harness_close(run(*runner_args(data)), bench.reference(data))


def quantized_a(module, threads, a, rows, k, m):
    """The bytes the fp8 module's quantization kernel writes for A (its e4m3 chunks, then the row
    exponents), launched with `threads` a CTA over a scratch buffer pre-filled with 0x5A, so that
    bytes it leaves alone show."""
    scratch = torch.full((rows * k + 4 * rows,), 0x5A, dtype=torch.uint8, device=a.device)
    module.function("mxfp4_quant_a_e4m3").launcher("pppi")((rows, 1, 1), (threads, 1, 1), 0, a, scratch,
                                                           scratch.data_ptr() + rows * k, m)
    torch.cuda.synchronize(a.device)
    return scratch.cpu()


def checked_medians(runs, m, n, k, device, reps, timer, check=True):
    """({name: median µs}, {name: correct}) of runners of one shape: each checked once against the
    reference (unless check is off), then timed interleaved on fresh input sets."""
    sets = input_sets(m, n, k, device)
    checked = {name: is_correct(run, sets[0]) for name, run in runs.items()} if check else {}
    return interleaved_medians(runs, sets, reps, timer), checked


def variant_line(m, n, k, what, medians, checked):
    """One printed line: the shape, what was compared, each variant's median and BAD where it was wrong."""
    return f"{m}x{n}x{k} {what}: " + "  ".join(
        f"{name} {us:6.2f}" + ("" if checked.get(name, True) else " BAD") for name, us in medians.items())


def write_json(path, rows):
    if path:
        Path(path).write_text(json.dumps(rows, indent=1))


# ---- subcommands ----------------------------------------------------------------------------

def compare(args, device, timer, variants_of):
    """Time the variants {name: runner} of every shape interleaved; print and return the medians."""
    rows, totals = [], {}
    for (m, n, k), plan in parse_work(args.shapes, args.plans):
        runs = variants_of(m, n, k, plan)
        medians, checked = checked_medians(runs, m, n, k, device, args.reps, timer, args.check)
        for name, us in medians.items():
            totals.setdefault(name, []).append(us)
        rows.append({"shape": [m, n, k], "us": medians, "correct": checked})
        print(f"{m}x{n}x{k}".ljust(16) + "   ".join(
            f"{name} {us:7.2f}" + ("" if name not in checked else " ok" if checked[name] else " BAD")
            for name, us in medians.items()), flush=True)
    print("geomean".ljust(16) + "   ".join(f"{name} {bench.geomean(v):7.2f}" for name, v in totals.items()))
    write_json(args.out, rows)


def runner_from_source(text, m, n, k, device, plan=None):
    """A runner of `plan` (the table's when None) whose kernel is built from `text` in place of the file
    that plan builds from; exits when the build did not read `text`."""
    # the plan the runner will run (the table's when none is named), so the file it builds from is
    # the one replaced: a table plan of another kernel would otherwise build from the package's
    # source, and the "variant" would time the shipped kernel against itself
    plan = plan or cuda.plan_for(m, n, k, device)
    replaced = cuda._source(plan)
    original, reads = cuda.read_source, []

    def read(name):
        if name != replaced:
            return original(name)
        reads.append(name)
        return text
    cuda.read_source = read
    try:
        runner = cuda.make_runner(m, n, k, device, plan)
    finally:
        cuda.read_source = original
    if not reads:
        sys.exit(f"cuda_lab ab: {m}x{n}x{k}'s plan {plan} was built without reading the other source ({replaced})")
    return runner


def ab(args, device, timer):
    """The table's plans built from this kernel source ("now") and from each other source file (named by
    its stem; "before" when there is one), interleaved."""
    paths = [Path(path) for path in args.before]
    names = ["before"] if len(paths) == 1 else [path.stem for path in paths]
    if len(set(names)) != len(names) or "now" in names:
        sys.exit("cuda_lab ab: the other sources need distinct file names, none called now")
    others = {name: path.read_text() for name, path in zip(names, paths)}
    if not hasattr(cuda, "read_source"):
        sys.exit("cuda_lab ab: the cuda backend no longer reads its source through read_source")
    compare(args, device, timer, lambda m, n, k, plan: {
        **{name: runner_from_source(text, m, n, k, device, plan) for name, text in others.items()},
        "now": cuda.make_runner(m, n, k, device, plan)})


def host(args, device, timer):
    def per_call(call):
        """(median host µs inside one call, wall µs per call over a burst)."""
        for _ in range(50):
            call()
        torch.cuda.synchronize(device)
        inside = []
        for _ in range(args.calls):
            begin = time.perf_counter()
            call()
            inside.append((time.perf_counter() - begin) * 1e6)
        torch.cuda.synchronize(device)
        begin = time.perf_counter()
        for _ in range(args.calls):
            call()
        torch.cuda.synchronize(device)
        return statistics.median(inside), (time.perf_counter() - begin) * 1e6 / args.calls

    print("shape".ljust(16) + "".join(p.rjust(26) for p in ("custom_kernel host/rate", "runner host/rate",
                                                            "torch.mm host/rate")) + "  (µs)")
    rows = []
    for (m, n, k), plan in parse_work(args.shapes, args.plans):
        data = bench.generate_input(m, n, k, 0, device)
        run = cuda.make_runner(m, n, k, device, plan)
        a_bf16, b_bf16 = torch.randn((m, k), dtype=torch.bfloat16, device=device), \
            torch.randn((k, n), dtype=torch.bfloat16, device=device)
        row = {"shape": [m, n, k], "custom_kernel": per_call(lambda: mxfp4_mm.custom_kernel(data)),
               "runner": per_call(lambda: run(*runner_args(data))),
               "torch_mm": per_call(lambda: torch.mm(a_bf16, b_bf16))}
        rows.append(row)
        print(f"{m}x{n}x{k}".ljust(16) + "".join(f"{row[p][0]:17.1f} / {row[p][1]:<6.1f}"
                                                for p in ("custom_kernel", "runner", "torch_mm")), flush=True)
    write_json(args.out, {"device": torch.cuda.get_device_name(device), "rows": rows})


def plans_work(args, device):
    """[(shape, plans)]: --plans grouped by shape, else each shape's first --max-plans pipe plans."""
    if args.plans:
        work = {}
        for shape, plan in parse_work("", args.plans):
            work.setdefault(shape, []).append(plan)
        return list(work.items())
    return [((m, n, k), cuda_plans.pipe_plans(m, n, k, cuda.compute_units(device), tma=True)[: args.max_plans])
            for (m, n, k), _ in parse_work(args.shapes, "")]


def plans(args, device, timer):
    """Plans (default: the pipe plans) vs the table's plan vs bf16_matmul, interleaved, per shape."""
    rows, totals = [], {}
    for (m, n, k), plans in plans_work(args, device):
        case = bench.Case(m, n, k, 100, POOL, device)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:  # NVRTC runs outside the GIL
            list(pool.map(lambda plan: cuda.build(m, n, k, device, plan), plans))
        runners = {"table " + cuda.plan_label(cuda.plan_for(m, n, k, device)): cuda.make_runner(m, n, k, device)}
        runners.update({cuda.plan_label(plan): cuda.make_runner(m, n, k, device, plan) for plan in plans})
        correct = {name: bench.harness_close(run(*runner_args(case.inputs[0])), case.references[0])
                   for name, run in runners.items()}
        calls = {name: (lambda run: lambda i: run(*runner_args(case.inputs[i])))(run) for name, run in runners.items()}
        calls["bf16_matmul"] = bench.baseline_paths(case)["bf16_matmul"]
        samples = {name: [] for name in calls}
        for rep in range(args.reps):
            for name, call in calls.items():
                samples[name].append(timer.time_us(lambda: call(rep % POOL))[1])
        medians = {name: statistics.median(values) for name, values in samples.items()}
        offered = {cuda.plan_label(plan) for plan in plans}
        best = min((us for name, us in medians.items() if name in offered and correct[name]), default=None)
        for key, us in (("table", next(us for name, us in medians.items() if name.startswith("table"))),
                        ("best offered", best), ("bf16_matmul", medians["bf16_matmul"])):
            if us is not None:  # (no correct plan: the geomean of "best offered" covers fewer shapes)
                totals.setdefault(key, []).append(us)
        rows.append({"shape": [m, n, k], "us": medians, "correct": correct})
        print(f"{m}x{n}x{k}", flush=True)
        for name, us in sorted(medians.items(), key=lambda item: item[1]):
            verdict = "" if name not in correct else " ok" if correct[name] else " WRONG"
            print(f"    {name:28s} {us:8.2f}{verdict}", flush=True)
    print("geomean: " + "   ".join(f"{key} {bench.geomean(values):.2f}" for key, values in totals.items()))
    write_json(args.out, rows)


def max_active_clusters(function, grid, block, shared_bytes: int) -> int:
    """cuOccupancyMaxActiveClusters: clusters of `function` (its compile-time cluster shape) the GPU runs
    at once with this grid, block and dynamic shared memory."""
    api = function.module.api
    query = api.drv.cuOccupancyMaxActiveClusters
    query.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(runtime._LaunchConfig)]
    config = runtime._LaunchConfig(num_attrs=0)
    config.grid[:], config.block[:], config.shared_bytes = tuple(grid), tuple(block), shared_bytes
    count = ctypes.c_int(0)
    api.check(query(ctypes.byref(count), function.handle, ctypes.byref(config)), f"max active clusters of {function.name}")
    return count.value


def clusters(args, device, timer):
    """CTAs, clusters and clusters at once of each fp8 plan (no call is made)."""
    device = runtime.normalize_device(device)
    api, units = runtime.api_for(device), cuda.compute_units(device)
    work = plans_work(args, device) if args.plans else [
        ((m, n, k), cuda_plans.fp8_plans(m, n, k, units)) for (m, n, k), _ in parse_work(args.shapes, "")]
    rows = []
    print(f"{'shape':16s}{'plan':26s}{'CTAs':>6s}{'cluster':>9s}{'clusters':>10s}{'at once':>9s}")
    for (m, n, k), plans in work:
        for plan in plans:
            if not isinstance(plan, cuda_plans.Fp8Plan):
                continue
            gemm = cuda._module(n, k, device, plan).function("mxfp4_gemm_fp8")
            shared = cuda.smem_bytes(m, n, k, plan)  # allowed as the fp8 launcher allows it
            api.check(api.drv.cuFuncSetAttribute(gemm.handle, cuda._MAX_DYNAMIC_SHARED_ATTR, ctypes.c_int(shared)),
                      "cuFuncSetAttribute")
            grid = cuda.grid(m, n, plan)
            ctas, size = grid[0] * grid[1] * grid[2], plan.split_k * plan.mc
            at_once = max_active_clusters(gemm, grid, (cuda_plans.fp8_threads(plan), 1, 1), shared)
            rows.append({"shape": [m, n, k], "plan": cuda.plan_label(plan), "ctas": ctas, "cluster": size,
                         "clusters": ctas // size, "at_once": at_once})
            print(f"{f'{m}x{n}x{k}':16s}{cuda.plan_label(plan):26s}{ctas:6d}{size:9d}{ctas // size:10d}{at_once:9d}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


def once(args, device, timer):
    m, n, k = parse_shape(args.shape)
    plan = parse_plan(args.plan) if args.plan else None
    run = cuda.make_runner(m, n, k, device, plan)
    run(*runner_args(bench.generate_input(m, n, k, 0, device)))
    torch.cuda.synchronize(device)


# ---- command line ---------------------------------------------------------------------------

def parser():
    top = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = top.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--shapes", default="", help="'M,N,K ...' (default: the benchmark shapes)")
    common.add_argument("--plans", default="", help="'M,N,K:PLAN ...' (shape and plan; default: the table's)")
    common.add_argument("--reps", type=int, default=60)
    common.add_argument("--out", help="also write the rows as JSON here")
    common.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                        help="check each variant's result once against the reference")
    commands = {
        "ab": (ab, "this kernel source against another version"),
        "host": (host, "eager host cost per call"),
        "plans": (plans, "plans (default: pipe plans) vs the table plan vs bf16_matmul"),
        "once": (once, "one call of one shape (for a profiler)"),
        "clusters": (clusters, "fp8 plans: clusters the GPU runs at once"),
    }
    for name, (function, text) in commands.items():
        command = sub.add_parser(name, parents=[common], help=text, description=text)
        command.set_defaults(function=function)
    sub.choices["ab"].add_argument("before", nargs="+", help="the other kernel source files")
    sub.choices["host"].add_argument("--calls", type=int, default=2000)
    sub.choices["plans"].add_argument("--max-plans", type=int, default=8, help="pipe plans per shape")
    sub.choices["once"].add_argument("shape", help="M,N,K")
    sub.choices["once"].add_argument("--plan", help="PLAN fields (default: the table's)")
    return top


def main(argv=None):
    args = parser().parse_args(argv)
    if not torch.cuda.is_available() or torch.version.hip:
        sys.exit("cuda_lab: needs an NVIDIA GPU")
    device = torch.device("cuda")
    args.function(args, device, bench.Timer(device))


if __name__ == "__main__":
    main()

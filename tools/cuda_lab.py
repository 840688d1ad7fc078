"""Timing experiments on the cuda backend's kernel (NVIDIA GPU), harness method throughout: L2
flushed, events around one call, a fresh input set per repetition, variants interleaved
repetition by repetition so drift hits them alike, medians.

    python3 tools/cuda_lab.py timeline [--shapes "M,N,K ..."] [--plans "M,N,K:PLAN ..."] [--flush none]
        Per-CTA phase times: the kernel built with -DTIMELINE=1 (thread 0 of each CTA writes
        %globaltimer / clock64 marks into C; results are not written), medians and maxima over CTAs.
        Pipe plans ("M,N,K:pipe,BN,BM,SPLITK,KC,STAGES,CW") show per-chunk phases (PIPE_PHASES).
    python3 tools/cuda_lab.py ablate
        Each table plan with stages left out (-DABLATE mask; results are wrong, timing only).
    python3 tools/cuda_lab.py ab BEFORE.cu
        The package's kernel source against another version of it, same plans, same process
        (e.g. `git show REV:mxfp4_mm/kernels/mxfp4_gemm_sm90.cu > /tmp/before.cu`).
    python3 tools/cuda_lab.py options --option=-DB_LATE=0 [--option=...]
        Compile-time option sets against the default build; every build checked once for correctness.
    python3 tools/cuda_lab.py host [--calls 2000]
        Eager host cost per call, back to back without flush: custom_kernel (validation + dispatch +
        launch) vs the bare runner vs one torch.mm of the same size.
    python3 tools/cuda_lab.py pipe [--max-plans 8] [--plans "M,N,K:pipe,... ..."] [--no-first-version]
        The v9 pipe plans (kernels/mxfp4_gemm_sm90_pipe.cu) of each shape against the table's plan
        and cuBLAS bf16 on pre-dequantized operands (bf16_matmul); every plan checked once. Also the
        first plan as the first version ran it (4 stages, no copy warps; "v9.0:" with its GPU-scoped
        proxy fence, -DFENCE_GPU=1), unless --no-first-version.
    python3 tools/cuda_lab.py once 16,2112,7168 [--plan PLAN]
        One call of one shape, for a profiler: ncu -k mxfp4_gemm -c 1 python3 tools/cuda_lab.py once ...

Shapes default to the 6 benchmark shapes and plans to the table's; a PLAN is the cuda Plan's
fields, comma-separated (e.g. 64,8,2,1,2,4,0,1), or a PipePlan's (e.g. pipe,256,64,4,64,9,1). Every subcommand takes --reps and --out FILE.json.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mxfp4_mm  # noqa: E402
from mxfp4_mm import bench  # noqa: E402
from mxfp4_mm.backends import cuda  # noqa: E402
from mxfp4_mm.tables import cuda_plans  # noqa: E402

PHASES = ["start", "a_issue", "s_issue", "a_wait", "quant", "main", "partial", "reduce", "end"]
TIMELINE_WORDS = 24  # u64 marks per CTA written by a -DTIMELINE=1 build
# The pipe kernel's marks (kernels/mxfp4_gemm_sm90_pipe.cu, TIMELINE): clock64 at start, prologue
# issued, then per chunk c < 4 "land" (copies landed, barrier passed), "conv" (converted), "mma"
# (published, MMAs issued, the previous chunk's MMAs waited for); loop end, partial tile, end.
PIPE_TL_CHUNKS = 4
PIPE_MARKS = 2 + 3 * PIPE_TL_CHUNKS + 3
PIPE_PHASES = (["start", "prologue"] + [f"{p}{c}" for c in range(PIPE_TL_CHUNKS) for p in ("land", "conv", "mma")]
               + ["rest", "partial", "reduce", "end"])
ABLATE_MASKS = {"full": 0, "no A quant": 1, "no B convert": 2, "no MMA": 4, "no B load": 8,
                "no quant/convert/MMA": 7, "none of them": 15}
POOL = 4


# ---- shared ---------------------------------------------------------------------------------

def parse_shape(text):
    return tuple(int(v) for v in text.split(","))


def parse_plan(text):
    """A cuda Plan from '64,8,1,1,2,4,0', a PipePlan from 'pipe,256,64,4,64,9,1'."""
    fields = text.split(",")
    if fields[0] == cuda_plans.PIPE:
        return cuda.PipePlan(fields[0], *map(int, fields[1:]))
    return cuda.Plan(*map(int, fields))


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


def write_json(path, rows):
    if path:
        Path(path).write_text(json.dumps(rows, indent=1))


# ---- subcommands ----------------------------------------------------------------------------

def cta_count(m, n, plan):
    count = 1
    for extent in cuda_plans.grid(m, n, plan):
        count *= extent
    return count


def timeline(args, device, timer):
    print("µs, median/max over CTAs (last repetition)")
    print("shape:plan".ljust(36) + "event".rjust(8) + "".join(p.rjust(12) for p in PHASES))
    rows = []
    pipe_header = False
    for (m, n, k), plan in parse_work(args.shapes, args.plans):
        run = cuda.make_runner(m, n, k, device, plan, ("-DTIMELINE=1",) + tuple(args.options.split()))
        plan = getattr(run, "plan", plan) or cuda.plan_for(m, n, k, device)
        sets, ctas, events, out = input_sets(m, n, k, device), cta_count(m, n, plan), [], None
        for i in range(args.reps):
            if args.flush == "none":
                torch.cuda.synchronize(device)
                begin = time.perf_counter()
                out = run(*runner_args(sets[i % POOL]))
                torch.cuda.synchronize(device)
                events.append((time.perf_counter() - begin) * 1e6)
            else:
                out, us = timer.time_us(lambda: run(*runner_args(sets[i % POOL])))
                events.append(us)
        marks = out.view(torch.int64).flatten()[: ctas * TIMELINE_WORDS].view(ctas, TIMELINE_WORDS).cpu()
        is_pipe = isinstance(plan, cuda.PipePlan)
        phases = summarize_pipe_marks(marks, args.clock_ghz) if is_pipe else summarize_marks(marks, args.clock_ghz)
        rows.append({"shape": [m, n, k], "plan": list(plan), "ctas": ctas, "event_us": statistics.median(events),
                     "phases_us": phases})
        if is_pipe:
            print_pipe_timeline(f"{m}x{n}x{k}:{cuda.plan_label(plan)}", statistics.median(events), phases,
                                not pipe_header)
            pipe_header = True
            continue
        print(f"{m}x{n}x{k}:{plan_text(run, plan)}".ljust(36) + f"{statistics.median(events):8.2f}"
              + "".join(f"{phases[p][0]:6.2f}/{phases[p][1]:<5.2f}" for p in PHASES), flush=True)
    write_json(args.out, rows)


def summarize_pipe_marks(marks, clock_ghz):
    """Pipe kernel: each phase's clock64 delta from the mark before it; start/end from %globaltimer
    relative to the first CTA (words PIPE_MARKS and PIPE_MARKS + 1)."""
    clock_us = marks[:, :PIPE_MARKS].double() / (clock_ghz * 1e3)
    timer_us = marks[:, PIPE_MARKS:PIPE_MARKS + 2].double() / 1e3
    t0 = timer_us[:, 0].min()
    rows = {"start": timer_us[:, 0] - t0, "end": timer_us[:, 1] - t0}
    for i, name in enumerate(PIPE_PHASES[1:-1]):
        rows[name] = clock_us[:, i + 1] - clock_us[:, i]
    return {name: (statistics.median(rows[name].tolist()), max(rows[name].tolist())) for name in PIPE_PHASES}


def print_pipe_timeline(title, event_us, phases, header):
    if header:
        print("pipe plans: µs per phase, median over CTAs, then max; start/end: globaltimer from the first CTA")
        print("shape:plan".ljust(36) + "event".rjust(8) + "".join(p.rjust(9) for p in PIPE_PHASES))
    print(title.ljust(36) + f"{event_us:8.2f}" + "".join(f"{phases[p][0]:9.2f}" for p in PIPE_PHASES))
    print("  max".ljust(44) + "".join(f"{phases[p][1]:9.2f}" for p in PIPE_PHASES), flush=True)


def summarize_marks(marks, clock_ghz):
    """Phase lengths from clock64 deltas; start/end from %globaltimer relative to the first CTA."""
    timer_us, clock_us = marks[:, :8].double() / 1e3, marks[:, 8:16].double() / (clock_ghz * 1e3)
    t0 = timer_us[:, 0].min()
    rows = {"start": timer_us[:, 0] - t0, "end": timer_us[:, 7] - t0}
    for i, name in enumerate(PHASES[1:8]):
        rows[name] = clock_us[:, i + 1] - clock_us[:, i]
    return {name: (statistics.median(v.tolist()), max(v.tolist())) for name, v in rows.items()}


def compare(args, device, timer, variants_of):
    """Time the variants {name: runner} of every shape interleaved; print and return the medians."""
    rows, totals = [], {}
    for (m, n, k), plan in parse_work(args.shapes, args.plans):
        sets = input_sets(m, n, k, device)
        runs = variants_of(m, n, k, plan)
        checked = {name: is_correct(run, sets[0]) for name, run in runs.items()} if args.check else {}
        medians = interleaved_medians(runs, sets, args.reps, timer)
        for name, us in medians.items():
            totals.setdefault(name, []).append(us)
        rows.append({"shape": [m, n, k], "us": medians, "correct": checked})
        print(f"{m}x{n}x{k}".ljust(16) + "   ".join(
            f"{name} {us:7.2f}" + ("" if name not in checked else " ok" if checked[name] else " BAD")
            for name, us in medians.items()), flush=True)
    print("geomean".ljust(16) + "   ".join(f"{name} {bench.geomean(v):7.2f}" for name, v in totals.items()))
    write_json(args.out, rows)


def ablate(args, device, timer):
    args.check = False  # the ablated builds compute wrong results on purpose
    compare(args, device, timer, lambda m, n, k, plan: {
        name: cuda.make_runner(m, n, k, device, plan, (f"-DABLATE={mask}",) if mask else ())
        for name, mask in ABLATE_MASKS.items()})


def ab(args, device, timer):
    before = Path(args.before).read_text()
    if not hasattr(cuda, "read_source"):
        sys.exit("cuda_lab ab: backends/cuda.py no longer reads its source through read_source")

    def with_source(text, m, n, k, plan):
        original = cuda.read_source
        cuda.read_source = lambda name: text if name == cuda.SOURCE else original(name)
        try:
            return cuda.make_runner(m, n, k, device, plan)
        finally:
            cuda.read_source = original

    compare(args, device, timer, lambda m, n, k, plan: {
        "before": with_source(before, m, n, k, plan), "now": cuda.make_runner(m, n, k, device, plan)})


def options(args, device, timer):
    sets = [()] + [tuple(o.split()) for o in args.option]
    compare(args, device, timer, lambda m, n, k, plan: {
        " ".join(opts) or "default": cuda.make_runner(m, n, k, device, plan, opts) for opts in sets})


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


def pipe_work(args, device):
    """[(shape, pipe plans)]: --plans grouped by shape, else each shape's first --max-plans offers."""
    if args.plans:
        work = {}
        for shape, plan in parse_work("", args.plans):
            work.setdefault(shape, []).append(plan)
        return list(work.items())
    return [((m, n, k), cuda_plans.pipe_plans(m, n, k, cuda.compute_units(device))[: args.max_plans])
            for (m, n, k), _ in parse_work(args.shapes, "")]


def first_version_runners(m, n, k, device, plan):
    """`plan` as the first version ran it: 4 stages, no copy warps; with and without that version's
    GPU-scoped proxy fence (-DFENCE_GPU=1)."""
    old = plan._replace(stages=4, cw=0)
    if not cuda.is_valid(m, n, k, old):
        return {}
    return {"v9.0:" + cuda.plan_label(old): cuda.make_runner(m, n, k, device, old, ("-DFENCE_GPU=1",)),
            cuda.plan_label(old): cuda.make_runner(m, n, k, device, old)}


def pipe(args, device, timer):
    """Pipe plans vs the table's plan vs bf16_matmul, interleaved, per shape (sm_90 only)."""
    rows, totals = [], {}
    for (m, n, k), plans in pipe_work(args, device):
        case = bench.Case(m, n, k, 100, POOL, device)
        cuda.prepare(m, n, k, device, plans)
        runners = {"table " + cuda.plan_label(cuda.plan_for(m, n, k, device)): cuda.make_runner(m, n, k, device)}
        runners.update({cuda.plan_label(plan): cuda.make_runner(m, n, k, device, plan) for plan in plans})
        if args.first_version and plans:
            runners.update(first_version_runners(m, n, k, device, plans[0]))
        correct = {name: bench.harness_close(run(*runner_args(case.inputs[0])), case.references[0])
                   for name, run in runners.items()}
        calls = {name: (lambda run: lambda i: run(*runner_args(case.inputs[i])))(run) for name, run in runners.items()}
        calls["bf16_matmul"] = bench.baseline_paths(case)["bf16_matmul"]
        samples = {name: [] for name in calls}
        for rep in range(args.reps):
            for name, call in calls.items():
                samples[name].append(timer.time_us(lambda: call(rep % POOL))[1])
        medians = {name: statistics.median(values) for name, values in samples.items()}
        best_pipe = min((us for name, us in medians.items() if name.startswith("p.") and correct[name]), default=None)
        for key, us in (("table", next(us for name, us in medians.items() if name.startswith("table"))),
                        ("best pipe", best_pipe), ("bf16_matmul", medians["bf16_matmul"])):
            if us is not None:  # (no correct pipe plan: the geomean of "best pipe" covers fewer shapes)
                totals.setdefault(key, []).append(us)
        rows.append({"shape": [m, n, k], "us": medians, "correct": correct})
        print(f"{m}x{n}x{k}", flush=True)
        for name, us in sorted(medians.items(), key=lambda item: item[1]):
            verdict = "" if name not in correct else " ok" if correct[name] else " WRONG"
            print(f"    {name:28s} {us:8.2f}{verdict}", flush=True)
    print("geomean: " + "   ".join(f"{key} {bench.geomean(values):.2f}" for key, values in totals.items()))
    write_json(args.out, rows)


def once(args, device, timer):
    m, n, k = parse_shape(args.shape)
    plan = parse_plan(args.plan) if args.plan else None
    run = cuda.make_runner(m, n, k, device, plan, tuple(args.options.split()))
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
        "timeline": (timeline, "per-CTA phase times (-DTIMELINE=1)"),
        "ablate": (ablate, "stages left out (-DABLATE mask)"),
        "ab": (ab, "this kernel source against another version"),
        "options": (options, "compile-time option sets against the default build"),
        "host": (host, "eager host cost per call"),
        "pipe": (pipe, "v9 pipe plans vs the table plan vs bf16_matmul"),
        "once": (once, "one call of one shape (for a profiler)"),
    }
    for name, (function, text) in commands.items():
        command = sub.add_parser(name, parents=[common], help=text, description=text)
        command.set_defaults(function=function)
    sub.choices["timeline"].add_argument("--options", default="",
                                         help="more -D flags, space-separated; write --options=-DX=1 (with '=')")
    sub.choices["timeline"].add_argument("--flush", choices=("harness", "none"), default="harness")
    sub.choices["timeline"].add_argument("--clock-ghz", type=float, default=1.98, help="SM clock for clock64 deltas")
    sub.choices["timeline"].set_defaults(reps=5)
    sub.choices["ab"].add_argument("before", help="the other kernel source file")
    sub.choices["options"].add_argument("--option", action="append", required=True,
                                        help="an option set, e.g. --option=-DB_LATE=0 (repeatable)")
    sub.choices["host"].add_argument("--calls", type=int, default=2000)
    sub.choices["pipe"].add_argument("--max-plans", type=int, default=8, help="pipe plans per shape")
    sub.choices["pipe"].add_argument("--first-version", action=argparse.BooleanOptionalAction, default=True,
                                     help="also the first plan as the first version ran it (v9.0: and fence-fixed)")
    sub.choices["once"].add_argument("shape", help="M,N,K")
    sub.choices["once"].add_argument("--plan", help="PLAN fields (default: the table's)")
    sub.choices["once"].add_argument("--options", default="", help="-D flags, space-separated; write --options=-DX=1")
    return top


def main(argv=None):
    args = parser().parse_args(argv)
    if not torch.cuda.is_available() or torch.version.hip:
        sys.exit("cuda_lab: needs an NVIDIA GPU")
    device = torch.device("cuda")
    args.function(args, device, bench.Timer(device))


if __name__ == "__main__":
    main()

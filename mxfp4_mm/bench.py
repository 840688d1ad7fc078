"""Times every available backend and the baselines with the leaderboard harness's method.

    python -m mxfp4_mm.bench                    # the 6 benchmark shapes
    python -m mxfp4_mm.bench --shapes test      # the 4 test shapes ("all": both; or "4,2880,512;16,2112,7168")
    python -m mxfp4_mm.bench --backends cuda,triton   # only these backends (baselines always run)
    python -m mxfp4_mm.bench --plot-only bench/results/nvidia-h200.json
    python -m mxfp4_mm.bench --autotune [--cold]  # first-use tuning vs an exhaustive sweep (GPU)

Method (GPU), per repetition: synchronize, flush the caches by writing max(2 x L2, 512 MB), record a
start event, make one call, record an end event, synchronize. Every repetition takes the next
input set from a pool generated up front, and the paths are interleaved repetition by repetition,
so drift hits them alike. On the CPU the same loop runs with host timers and no flush.

Paths: each backend (`dispatch.load_backend(name).make_runner`; the `torch` backend is the
"torch dequant + matmul" baseline), plus
  bf16_matmul  torch.mm on operands dequantized beforehand (cuBLAS on NVIDIA),
  floor        torch.empty + one trivial Triton kernel (torch.empty alone on the CPU),
  and every path registered in EXTRA_PATHS.
Writes bench/results/<device-slug>.json and, when matplotlib is importable, a PNG beside it.

--autotune (GPU) checks the first-use tuner on the 6 benchmark + 4 test shapes: first each shape's
first call is made as the harness makes it (tuning included; its wall time is tune_s), then every
candidate the tuner chose from is timed with the method above (exhaustive, same process), and
`"autotune": {"MxNxK": {"chosen", "chosen_us", "best", "best_us", "tune_s", "candidates"}}` (and the
run's date, versions and budget under "autotune_run") is merged into the device's JSON. --cold points
the kernel caches at empty folders first.
"""

import argparse
import datetime
import json
import math
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import torch

from . import autotune, dispatch, spec
from .tuning import buildpool, timing, tuner, verify

BENCHMARK_SHAPES = [(4, 2880, 512), (16, 2112, 7168), (32, 4096, 512), (32, 2880, 512),
                    (64, 7168, 2048), (256, 3072, 1536)]
BENCHMARK_SEEDS = [4565, 15, 457, 54, 687, 7856]
TEST_SHAPES = [(8, 2112, 7168), (16, 3072, 1536), (64, 3072, 1536), (256, 2880, 512)]
FLOOR = "floor"
BASELINE_NOTES = {
    "torch": "torch backend: spec quant of A + dequant + fp32 matmul",
    "bf16_matmul": "torch.mm on operands dequantized beforehand (cuBLAS on NVIDIA)",
    FLOOR: "torch.empty + one trivial Triton kernel (CPU: torch.empty)",
}
# More baselines: name -> (note, make_path(case) -> call(i) returning C, or None where it cannot run).
EXTRA_PATHS = {}
# Paths whose output is no GEMM result (not checked), and the path every ratio is taken to: the
# memory floor, whose module is left out of submission.py (its name is not bundlable), else FLOOR.
UNCHECKED = {FLOOR}
RATIO_TO = FLOOR
try:
    from . import floor_kernels
    EXTRA_PATHS[floor_kernels.PATH] = (floor_kernels.NOTE, floor_kernels.make_path)
    UNCHECKED.add(floor_kernels.PATH)
    RATIO_TO = floor_kernels.PATH
except ImportError:
    pass
try:
    from . import peer_humming
    EXTRA_PATHS[peer_humming.PATH] = (peer_humming.NOTE, peer_humming.make_path)
except ImportError:  # left out of submission.py
    pass


def floor_of(per_path):
    """Median µs of the path ratios are taken to (the trivial-kernel floor where it is absent)."""
    row = per_path.get(RATIO_TO) or per_path.get(FLOOR) or {}
    return row.get("median_us")


# ---- inputs ---------------------------------------------------------------------------------

generate_input = verify.generate_input  # (A, B, B_q, B_shuffle, B_scale_sh) as the harness makes them
with_huge_a_block = verify.with_out_of_range_block
blockwise_exact_reference = verify.blockwise_exact_reference


def reference(data):
    a, _, b_q, _, b_scale_sh = data
    return spec.reference_gemm(a, b_q, spec.e8m0_unshuffle(b_scale_sh, b_q.shape[0], a.shape[1] // 32))


harness_close = verify.harness_close


# ---- timing ---------------------------------------------------------------------------------

class Timer:
    """One call between two events with the caches flushed before (GPU: the tuner's EventTimer, so
    the bench and the tuner time alike), or between host clocks (CPU)."""

    def __init__(self, device):
        self.on_gpu = device.type == "cuda"
        self.events = timing.EventTimer(device) if self.on_gpu else None

    def time_us(self, call):
        """(output, µs) of one call."""
        if self.on_gpu:
            return self.events.time_us(call)
        begin = time.perf_counter()
        out = call()
        return out, (time.perf_counter() - begin) * 1e6


def stats(samples):
    """The harness's statistics: mean, sample std, err = std/sqrt(runs), plus the median."""
    runs = len(samples)
    mean = sum(samples) / runs
    std = math.sqrt(sum((s - mean) ** 2 for s in samples) / (runs - 1)) if runs > 1 else 0.0
    ordered = sorted(samples)
    middle = runs // 2
    median = ordered[middle] if runs % 2 else 0.5 * (ordered[middle - 1] + ordered[middle])
    return {"runs": runs, "mean_us": mean, "median_us": median, "std_us": std,
            "err_us": std / math.sqrt(runs), "best_us": ordered[0], "worst_us": ordered[-1]}


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


# ---- the paths ------------------------------------------------------------------------------

def _trivial_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def touch(out_ptr):
        tl.store(out_ptr, 0.0)

    return touch


class Case:
    """A pool of input sets for one shape, with what each baseline needs derived up front."""

    def __init__(self, m, n, k, seed, pool, device):
        self.shape = (m, n, k)
        self.device = device
        self.inputs = [generate_input(m, n, k, seed + 13 * i, device) for i in range(pool)]
        self.references = [reference(d) for d in self.inputs]
        self._extras = {}

    def extra(self, name, make):
        if name not in self._extras:
            self._extras[name] = [make(d) for d in self.inputs]
        return self._extras[name]


_reported_missing = set()


def backend_paths(case, names=None):
    """{name: call(i)} for every backend (of `names`, default all) that builds a runner here."""
    m, n, k = case.shape
    paths = {}
    for name in names or dispatch.BACKEND_MODULES:
        try:
            module = dispatch.load_backend(name)
            if not module.is_available(case.device):
                continue
            runner = module.make_runner(m, n, k, case.device)
        except Exception as exc:  # a backend missing here is reported once, not fatal
            if name not in _reported_missing:
                _reported_missing.add(name)
                print(f"  {name}: unavailable ({type(exc).__name__}: {exc})", file=sys.stderr)
            continue
        paths[name] = (lambda runner: lambda i: runner(*_runner_args(case.inputs[i])))(runner)
    return paths


def _runner_args(data):
    a, _, b_q, b_shuffle, b_scale_sh = data
    return a, b_q, b_shuffle, b_scale_sh


def _dequantized(data):
    a, _, b_q, _, b_scale_sh = data
    a_codes, a_scales = spec.quantize_mxfp4(a)
    b_scales = spec.e8m0_unshuffle(b_scale_sh, b_q.shape[0], a.shape[1] // 32)
    return (spec.dequantize_mxfp4(a_codes, a_scales).to(torch.bfloat16),
            spec.dequantize_mxfp4(b_q, b_scales).to(torch.bfloat16).t())


def baseline_paths(case):
    m, n, k = case.shape
    device = case.device
    operands = case.extra("dequantized", _dequantized)
    paths = {"bf16_matmul": lambda i: torch.mm(*operands[i])}
    if device.type != "cuda":
        paths[FLOOR] = lambda i: torch.empty((m, n), dtype=torch.bfloat16, device=device)
        return paths
    touch = _trivial_kernel()

    def floor(i):
        out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
        touch[(1,)](out)
        return out

    paths[FLOOR] = floor
    return paths


def extra_paths(case):
    paths = {}
    for name, (_, make_path) in EXTRA_PATHS.items():
        call = make_path(case)
        if call is not None:
            paths[name] = call
    return paths


# ---- the first-use tuner against an exhaustive sweep ----------------------------------------

def sweep(case, candidates, timer, reps):
    """{"backend:label": stats + correct} for every candidate: compiled in worker processes first,
    built and checked on every input set, then the correct ones timed, interleaved. Candidates run
    in this process: the bench is a tool, not a process that must survive a fault."""
    m, n, k = case.shape
    if case.device.type == "cuda":
        pool = buildpool.BuildPool()
        try:
            pool.run([(c.backend, m, n, k, str(case.device), c.plan) for c in candidates
                      if hasattr(c.module, "build") and c.plan is not None], time.time() + 600)
        finally:
            pool.close()
    calls, rows = {}, {}
    for candidate in candidates:
        name = tuner.full_label(candidate)
        try:
            runner = tuner.make_runner(candidate, m, n, k, case.device)
            correct = all(harness_close(runner(*_runner_args(d)), r) for d, r in zip(case.inputs, case.references))
        except Exception as exc:  # reported in the row, like a wrong result
            rows[name] = {"correct": False, "error": f"{type(exc).__name__}: {exc}"[:200]}
            continue
        if correct:
            calls[name] = (lambda runner: lambda i: runner(*_runner_args(case.inputs[i])))(runner)
        else:
            rows[name] = {"correct": False}
    samples = {name: [] for name in calls}
    for rep in range(reps):
        for name, call in calls.items():
            samples[name].append(timer.time_us(lambda: call(rep % len(case.inputs)))[1])
    rows.update({name: {**stats(samples[name]), "correct": True} for name in calls})
    return rows


def _offered(case, served=None):
    """The tuner's candidates for the case, and the plan that served if it is not one of them (the
    reference backend, which serves on a CPU and is never a tuning candidate)."""
    backends = dispatch.available_backends(case.device)
    candidates = tuner.candidate_list(backends, *case.shape, case.device)[0]
    backend, _, label = (served or "").partition(":")
    if served and served not in {tuner.full_label(c) for c in candidates} and label == "default":
        module = dict(backends).get(backend)
        if module is not None:
            candidates.append(tuner.Candidate(backend, module, None, label, served))
    return candidates


def head_to_head(case, labels, candidates, timer, reps):
    """{label: median µs} of a few of the candidates re-timed together, interleaved: the sweep's
    minimum is biased low (the luckiest of many), so the chosen plan is judged against the best this way."""
    m, n, k = case.shape
    by_label = {tuner.full_label(c): c for c in candidates}
    runners = {label: tuner.make_runner(by_label[label], m, n, k, case.device) for label in dict.fromkeys(labels)}
    samples = {label: [] for label in runners}
    for rep in range(reps):
        for label, runner in runners.items():
            samples[label].append(timer.time_us(lambda: runner(*_runner_args(case.inputs[rep % len(case.inputs)])))[1])
    return {label: stats(s)["median_us"] for label, s in samples.items()}


def _first_call_s(case):
    """Wall seconds of the shape's first call (tuning included); the choice it made."""
    dispatch.reset()
    data = case.inputs[0]
    if case.device.type == "cuda":
        torch.cuda.synchronize(case.device)
    started = time.perf_counter()
    out = dispatch.run_gemm(*case.shape, *_runner_args(data))
    if case.device.type == "cuda":
        torch.cuda.synchronize(case.device)
    elapsed = time.perf_counter() - started
    if not harness_close(out, case.references[0]):
        raise AssertionError(f"{shape_key(case.shape)}: the first call's result is wrong")
    return elapsed, dispatch.last_choice()


def autotune_check(shapes, reps, pool, device, progress=sys.stderr):
    """{shape key: chosen, chosen_us, best, best_us, tune_s, candidates, ...}: all first calls first
    (as in the harness, which runs every case in one process), then the exhaustive sweeps; the
    chosen plan and the sweep's best are then re-timed head to head (`ratio`)."""
    cases, firsts = [], []
    for index, shape in enumerate(shapes):
        cases.append(Case(*shape, 2000 + index, pool, device))
        firsts.append(_first_call_s(cases[-1]))
        print(f"  {shape_key(shape)}: first call {firsts[-1][0]:.2f} s -> {firsts[-1][1]}", file=progress, flush=True)
    timer = Timer(device)
    report = {}
    for case, (tune_s, chosen) in zip(cases, firsts):
        candidates = _offered(case, chosen)
        rows = sweep(case, candidates, timer, reps)
        timed = {name: row["median_us"] for name, row in rows.items() if row["correct"]}
        best = min(timed, key=timed.get) if timed else None
        row = report[shape_key(case.shape)] = {
            "chosen": chosen, "chosen_us": timed.get(chosen), "best": best, "best_us": timed.get(best),
            "tune_s": tune_s, "candidates": len(candidates), "wrong": sorted(set(rows) - set(timed))}
        if best and chosen in timed:
            again = head_to_head(case, [chosen, best], candidates, timer, 3 * reps)
            row.update(chosen_h2h_us=again[chosen], best_h2h_us=again[best], ratio=again[chosen] / again[best])
        print(f"  {shape_key(case.shape)}: chosen/best {row.get('ratio', float('nan')):.3f} "
              f"over {len(candidates)} candidates", file=progress, flush=True)
    return report


def autotune_table(report):
    lines = [f"{'shape':>16} {'tune s':>7} {'chosen µs':>10} {'best µs':>8} {'ratio':>6}  chosen / best"]
    for key, row in report.items():
        ratio = row.get("ratio", float("nan"))
        lines.append(f"{key:>16} {row['tune_s']:>7.2f} {row['chosen_us'] or float('nan'):>10.2f} "
                     f"{row['best_us'] or float('nan'):>8.2f} {ratio:>6.3f}  {row['chosen']} / {row['best']}")
    return "\n".join(lines)


def _use_empty_caches():
    """Kernel caches and tuning records (ours and Triton's) in fresh folders: a cold start."""
    root = Path(tempfile.mkdtemp(prefix="mxfp4_mm_cold_"))
    os.environ["MXFP4_MM_CACHE_DIR"] = str(root / "mxfp4_mm")
    os.environ["TRITON_CACHE_DIR"] = str(root / "triton")


def _compile_step(seconds):
    """`python -m mxfp4_mm.prepare`, as the runner's compile step runs before each mode: (s, output)."""
    import subprocess
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mxfp4_mm.prepare", "--deadline-s", str(seconds)],
                          capture_output=True, text=True, timeout=seconds + 60)
    return time.perf_counter() - started, done.stdout + done.stderr


def run_autotune(args, device):
    """--autotune: the tuner's check, merged into the device's JSON."""
    if args.cold:
        _use_empty_caches()
    compile_s = None
    if not args.no_compile_step:
        compile_s, output = _compile_step(float(os.environ.get("MXFP4_MM_PREPARE_DEADLINE_S", 100)))
        print(output, end="")
    shapes = BENCHMARK_SHAPES + TEST_SHAPES if args.shapes == "bench" else parse_shapes(args.shapes)
    report = autotune_check(shapes, args.reps or 50, args.pool or 4, device)
    json_path = args.out / f"{device_slug(device_description(device))}.json"
    existing = json.loads(json_path.read_text()) if json_path.exists() else {"device": device_description(device)}
    existing["autotune"] = report  # {"MxNxK": {"chosen", "chosen_us", "best", "best_us", "ratio", "tune_s", ...}}
    existing["autotune_run"] = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                                "torch": versions()[0], "triton": versions()[1], "cold": bool(args.cold),
                                "compile_step_s": compile_s, "budget_s": autotune.budget_s()}
    args.out.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(existing, indent=1))
    print(autotune_table(report))
    within = sum(1 for row in report.values() if row.get("ratio", float("inf")) <= 1.03)
    print(f"chosen within 1.03x of the best (head to head): {within}/{len(report)} shapes")
    print(f"wrote the autotune section of {json_path}")
    return 0


# ---- the run --------------------------------------------------------------------------------

def shape_key(shape):
    return "x".join(map(str, shape))


def bench_shape(case, timer, reps, warmup, backends=None):
    """{path: stats + correct} for one shape, paths interleaved per repetition."""
    paths = {**backend_paths(case, backends), **baseline_paths(case), **extra_paths(case)}
    correct = {}
    for name, call in paths.items():
        for i in range(warmup):
            out = call(i % len(case.inputs))
        out = call(0)
        # a path computing something else (a peer's W4A16) carries its own reference
        expected = call.reference(0) if hasattr(call, "reference") else case.references[0]
        correct[name] = None if name in UNCHECKED else harness_close(out.float().cpu(), expected.float().cpu())
    samples = {name: [] for name in paths}
    for rep in range(reps):
        i = rep % len(case.inputs)
        for name, call in paths.items():
            samples[name].append(timer.time_us(lambda: call(i))[1])
    rows = {name: {**stats(samples[name]), "correct": correct[name]} for name in paths}
    floor = floor_of(rows)
    for row in rows.values():
        row["ratio_to_floor"] = row["median_us"] / floor if floor else None
    return rows


def parse_shapes(text):
    if text == "bench":
        return BENCHMARK_SHAPES
    if text == "test":
        return TEST_SHAPES
    if text == "all":
        return TEST_SHAPES + BENCHMARK_SHAPES
    return [tuple(int(v) for v in part.split(",")) for part in text.split(";") if part.strip()]


def device_description(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform
    return f"cpu {platform.machine()} {platform.processor() or ''}".strip()


def device_slug(description):
    return re.sub(r"[^a-z0-9]+", "-", description.lower()).strip("-")


def run(shapes, reps, warmup, pool, device, backends=None, progress=sys.stderr):
    timer = Timer(device)
    results = {}
    for index, shape in enumerate(shapes):
        seed = BENCHMARK_SEEDS[BENCHMARK_SHAPES.index(shape)] if shape in BENCHMARK_SHAPES else 1000 + index
        print(f"[{index + 1}/{len(shapes)}] {shape_key(shape)}: inputs ...", file=progress, flush=True)
        case = Case(*shape, seed, pool, device)
        started = time.perf_counter()
        results[shape_key(shape)] = bench_shape(case, timer, reps, warmup, backends)
        print(f"[{index + 1}/{len(shapes)}] {shape_key(shape)}: {len(results[shape_key(shape)])} paths timed "
              f"in {time.perf_counter() - started:.1f} s", file=progress, flush=True)
    return results


def summarize(results):
    paths = []
    for per_path in results.values():
        paths += [p for p in per_path if p not in paths]
    geomeans = {}
    for path in paths:
        rows = [per_path.get(path) for per_path in results.values()]
        if all(rows):
            geomeans[path] = {"median_us": geomean([r["median_us"] for r in rows]),
                              "mean_us": geomean([r["mean_us"] for r in rows])}
    floor = floor_of(geomeans)
    for row in geomeans.values():
        row["ratio_to_floor"] = row["median_us"] / floor if floor else None
    return paths, geomeans


def table(results, paths, geomeans):
    """Median µs per shape and path, with the ratio to the floor; geomeans last."""
    width = max(16, *(len(p) + 2 for p in paths))
    lines = ["shape".ljust(16) + "".join(p.rjust(width) for p in paths)]
    for key, per_path in results.items():
        floor = floor_of(per_path)
        cells = []
        for path in paths:
            row = per_path.get(path)
            if row is None:
                cells.append("-".rjust(width))
                continue
            ratio = f" {row['median_us'] / floor:4.1f}x" if floor else ""
            flag = "!" if row["correct"] is False else ""
            cells.append(f"{flag}{row['median_us']:.2f}{ratio}".rjust(width))
        lines.append(key.ljust(16) + "".join(cells))
    floor = floor_of(geomeans)
    cells = []
    for path in paths:
        g = geomeans.get(path)
        ratio = f" {g['median_us'] / floor:4.1f}x" if g and floor else ""
        cells.append((f"{g['median_us']:.2f}{ratio}" if g else "-").rjust(width))
    lines.append("geomean".ljust(16) + "".join(cells))
    lines.append(f"median µs (ratio to {RATIO_TO if RATIO_TO in paths else FLOOR}); ! = wrong result")
    return "\n".join(lines)


def plot(report, png_path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib not importable: no plot (python -m mxfp4_mm.bench --plot-only JSON later)")
        return None
    shapes = list(report["results"])
    paths = report["paths"]
    fig, ax = plt.subplots(figsize=(1.6 * len(shapes) + 3, 4.5))
    width = 0.8 / len(paths)
    for j, path in enumerate(paths):
        values = [report["results"][s].get(path, {}).get("median_us", float("nan")) for s in shapes]
        ax.bar([i + j * width for i in range(len(shapes))], values, width, label=path)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(shapes))], shapes, rotation=20)
    ax.set_yscale("log")
    ax.set_ylabel("median µs (L2 flushed, one call)")
    ax.set_title(f"mxfp4 GEMM on {report['device']} ({report['date'][:10]})")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    return png_path


def versions():
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return torch.__version__, triton_version


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="bench", help="bench | test | all | 'm,n,k;m,n,k'")
    parser.add_argument("--reps", type=int, help="timed repetitions per path (default 100 GPU, 5 CPU)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--pool", type=int, help="input sets per shape (default 8 GPU, 2 CPU)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--backends", help="comma-separated backend names (default: every one)")
    parser.add_argument("--plot-only", type=Path, help="re-draw the PNG of a result JSON")
    parser.add_argument("--autotune", action="store_true",
                        help="first-use tuning vs an exhaustive sweep (default shapes: benchmark + test)")
    parser.add_argument("--cold", action="store_true", help="--autotune with empty kernel caches and records")
    parser.add_argument("--no-compile-step", action="store_true",
                        help="--autotune without running `python -m mxfp4_mm.prepare` first")
    args = parser.parse_args(argv)
    if args.plot_only:
        plot(json.loads(args.plot_only.read_text()), args.plot_only.with_suffix(".png"))
        return 0
    device = torch.device(args.device)
    if args.autotune:
        return run_autotune(args, device)
    on_gpu = device.type == "cuda"
    reps = args.reps or (100 if on_gpu else 5)
    pool = args.pool or (8 if on_gpu else 2)
    shapes = parse_shapes(args.shapes)
    backends = args.backends.split(",") if args.backends else None
    results = run(shapes, reps, args.warmup, pool, device, backends)
    paths, geomeans = summarize(results)
    description = device_description(device)
    torch_version, triton_version = versions()
    report = {
        "device": description,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch_version,
        "triton": triton_version,
        "method": ("L2 flush (512 MB write), events around one call, fresh input set per repetition"
                   if on_gpu else "host timer around one call, fresh input set per repetition"),
        "reps": reps,
        "pool": pool,
        "paths": paths,
        "path_notes": {p: BASELINE_NOTES.get(p) or EXTRA_PATHS.get(p, ("backend",))[0] for p in paths},
        "results": results,
        "geomean_us": geomeans,
        "ratio_to": RATIO_TO if RATIO_TO in paths else FLOOR,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"{device_slug(description)}.json"
    if json_path.exists():  # keep what other modes wrote there (--autotune, tools/runner_flow.py)
        previous = json.loads(json_path.read_text())
        report.update({key: value for key, value in previous.items() if key not in report})
    json_path.write_text(json.dumps(report, indent=1))
    print(table(results, paths, geomeans))
    print(f"wrote {json_path}")
    png = plot(report, json_path.with_suffix(".png"))
    if png:
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

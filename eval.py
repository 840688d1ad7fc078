"""Evaluation harness of the `amd-mxfp4-mm` task.

Popcorn mode (what the grader runs; same protocol as gpu-mode reference-kernels'
problems/amd_202602/eval.py):

    POPCORN_FD=3 python eval.py {test|benchmark|leaderboard|profile} cases.txt 3>log

`cases.txt` holds one case per line (`m: 4; n: 2880; k: 512; seed: 4565`); results go to
the fd as `key: value` lines. Env POPCORN_SEED (optional, secret) is mixed into every
case's seed. Cases run in a spawned worker process.

Local mode (no POPCORN_FD): runs task.yml's tests, then its benchmarks, and prints a table.

    python eval.py [--mode test|benchmark|leaderboard|all] [--cases FILE | --shapes "m,n,k;..."]
                   [--backend NAME] [--budget-s S] [--submission FILE]

`--submission` (or env MXFP4_MM_SUBMISSION) loads another file as the `submission` module;
`--backend` sets env MXFP4_MM_BACKEND for the submission. Exit status: 0 when everything
passed, 112 on a failed case, 113 on an unreadable case file, 2 on bad usage.
"""

import argparse
import base64
import dataclasses
import importlib.util
import json
import math
import multiprocessing
import os
import re
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Optional

import torch

from reference import check_implementation, generate_input
from utils import DEFAULT_L2_FLUSH_MB, L2_FLUSH_ENV, clear_l2_cache, set_seed

SUBMISSION_ENV = "MXFP4_MM_SUBMISSION"
BACKEND_ENV = "MXFP4_MM_BACKEND"
TASK_YML = Path(__file__).resolve().parent / "task.yml"
CPU_BUDGET_S = 0.5  # local runs on CPU: timed seconds per benchmark case
EXIT_FAIL, EXIT_BAD_CASES = 112, 113


# ---- cases --------------------------------------------------------------------------

@dataclasses.dataclass
class TestCase:
    args: dict
    spec: str


def _combine(a: int, b: int) -> int:
    # Cantor pairing, as upstream: a large secret seed gives a large combined seed, so the
    # small public per-case seeds reveal nothing about the data.
    return int(a + (a + b) * (a + b + 1) // 2)


_CASE_PART = r"\s*([a-zA-Z_]\w*):\s*([a-zA-Z_]\w*|[+-]?[0-9]+)\s*"


def _parse_value(text: str):
    try:
        return int(text)
    except ValueError:
        return {"true": True, "false": False}.get(text, text)


def parse_cases(text: str, seed: Optional[int]) -> list[TestCase]:
    """Case lines `key: value; key: value` -> TestCases; seeds mixed with the secret seed."""
    tests = []
    for line in filter(str.strip, text.splitlines()):
        case = {}
        for part in line.split(";"):
            matched = re.fullmatch(_CASE_PART, part)
            if not matched:
                print(f"invalid test case: '{line}': '{part}'", file=sys.stderr)
                sys.exit(EXIT_BAD_CASES)
            case[matched[1]] = _parse_value(matched[2])
        if seed is not None and "seed" in case:
            case["seed"] = _combine(case["seed"], seed)
        tests.append(TestCase(args=case, spec=line))
    return tests


def read_case_file(file_name: str) -> str:
    try:
        return Path(file_name).read_text()
    except Exception as e:
        print(f"Could not open test file`{file_name}`: {e}", file=sys.stderr)
        sys.exit(EXIT_BAD_CASES)


def get_test_cases(file_name: str, seed: Optional[int]) -> list[TestCase]:
    return parse_cases(read_case_file(file_name), seed)


def _case_line(m: int, n: int, k: int, seed: int) -> str:
    return f"m: {m}; n: {n}; k: {k}; seed: {seed}"


def task_yml_cases(section: str) -> str:
    """Case lines of task.yml's `tests:` or `benchmarks:` list (entries are JSON flow maps)."""
    lines, inside = [], False
    for raw in TASK_YML.read_text().splitlines():
        if raw and not raw[0].isspace() and not raw.startswith("#"):
            inside = raw.rstrip() == f"{section}:"
        elif inside and raw.strip().startswith("- {"):
            lines.append(_case_line(**json.loads(raw.strip()[2:])))
    return "\n".join(lines)


def shapes_cases(shapes: str, seed: int = 42) -> str:
    """`m,n,k;m,n,k` -> case lines, all with one fixed seed."""
    lines = []
    for shape in filter(str.strip, shapes.split(";")):
        m, n, k = (int(v) for v in shape.split(","))
        lines.append(_case_line(m, n, k, seed))  # main() has checked the shapes
    return "\n".join(lines)


def _pop_secret_seed() -> Optional[int]:
    # Removed from the environment so neither the submission nor the worker can read it.
    seed = os.environ.pop("POPCORN_SEED", None)
    return int(seed) if seed else None


# ---- what runs in the worker process --------------------------------------------------

@dataclasses.dataclass
class Stats:
    runs: int
    mean: float
    std: float
    err: float
    best: float
    worst: float


@dataclasses.dataclass
class Limits:
    """Benchmark stop rule: at least 3 runs, then stop at err/mean < 0.1%, at
    mean*runs > max_time_ns, at max_wall_ns of wall time, or after max_repeats."""
    max_repeats: int
    max_time_ns: float
    max_wall_ns: float = 120e9


@dataclasses.dataclass
class Outcome:
    """What the worker sends back for one case."""
    good: bool
    message: str = ""
    stats: Optional[Stats] = None
    backend: str = "?"


def calculate_stats(durations: list[float]) -> Stats:
    runs = len(durations)
    mean = sum(durations) / runs
    std = math.sqrt(sum((d - mean) ** 2 for d in durations) / (runs - 1))
    return Stats(runs=runs, mean=mean, std=std, err=std / math.sqrt(runs),
                 best=float(min(durations)), worst=float(max(durations)))


def _clone_data(data):
    if isinstance(data, tuple):
        return tuple(_clone_data(x) for x in data)
    if isinstance(data, list):
        return [_clone_data(x) for x in data]
    if isinstance(data, dict):
        return {k: _clone_data(v) for k, v in data.items()}
    if isinstance(data, torch.Tensor):
        return data.clone()
    return data


def wrap_check_implementation(data, output) -> tuple[bool, str]:
    # Old-style checks return only an error string (empty when fine).
    result = check_implementation(data, output)
    if isinstance(result, tuple):
        return result
    return not bool(result), result


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _load_submission():
    """`submission` from sys.path, or the file named by MXFP4_MM_SUBMISSION registered under
    that name (so `import submission` elsewhere, e.g. in reference.py, finds the same module)."""
    if "submission" in sys.modules:
        return sys.modules["submission"]
    path = os.environ.get(SUBMISSION_ENV)
    if not path:
        import submission
        return submission
    spec = importlib.util.spec_from_file_location("submission", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["submission"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["submission"]
        raise
    return module


def _backend_name(submission) -> str:
    """`backend:plan` that served the last call (mxfp4_mm's dispatcher), else the backend name."""
    named = getattr(submission, "last_backend_name", None)
    dispatcher = sys.modules.get("mxfp4_mm.dispatch")
    if named is not None and named is getattr(dispatcher, "last_backend_name", None):
        named = getattr(dispatcher, "last_choice", named)
    report = getattr(submission, "last_choice", None) or named or (lambda: "?")
    try:
        return str(report())
    except Exception:
        return "?"


def _timed_call(custom_kernel, data):
    """One timed call. GPU: as upstream (sync, flush L2, events around the call, sync), so
    host work inside the call counts. CPU: the host clock, no flush."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        clear_l2_cache()
        start_event = torch.cuda.Event(enable_timing=True)
        end_event = torch.cuda.Event(enable_timing=True)
        start_event.record()
        output = custom_kernel(data)
        end_event.record()
        torch.cuda.synchronize()
        return output, start_event.elapsed_time(end_event) * 1e6
    start = time.perf_counter_ns()
    output = custom_kernel(data)
    return output, float(time.perf_counter_ns() - start)


def _run_single_test(test: TestCase) -> Outcome:
    submission = _load_submission()
    data = generate_input(**test.args)
    _sync()
    output = submission.custom_kernel(_clone_data(data))
    _sync()
    good, message = wrap_check_implementation(data, output)
    return Outcome(bool(good), str(message), backend=_backend_name(submission))


def _should_stop(stats: Stats, wall_ns: float, limits: Limits) -> bool:
    return (stats.err < 0.001 * stats.mean or stats.mean * stats.runs > limits.max_time_ns
            or wall_ns > limits.max_wall_ns)


def _run_single_benchmark(test: TestCase, recheck: bool, limits: Limits) -> Outcome:
    """One obligatory correctness check, then timed runs; with `recheck` (leaderboard) every
    run gets fresh data (seed += 13) and is checked."""
    submission = _load_submission()
    custom_kernel = submission.custom_kernel
    args = dict(test.args)
    data = generate_input(**args)
    check_copy = _clone_data(data)
    good, message = wrap_check_implementation(check_copy, custom_kernel(data))
    if not good:
        return Outcome(False, str(message), backend=_backend_name(submission))

    durations = []
    start = time.perf_counter_ns()
    for i in range(max(limits.max_repeats, 3)):
        if recheck:
            if "seed" in args:
                args["seed"] += 13
            data = generate_input(**args)
            check_copy = _clone_data(data)
        output, duration = _timed_call(custom_kernel, data)
        if recheck:
            good, message = wrap_check_implementation(check_copy, output)
            if not good:
                return Outcome(False, str(message), backend=_backend_name(submission))
        del output
        durations.append(duration)
        if i > 1 and _should_stop(calculate_stats(durations), time.perf_counter_ns() - start, limits):
            break
    return Outcome(True, "", calculate_stats(durations), _backend_name(submission))


def _run_single_profile(test: TestCase) -> Outcome:
    from torch.profiler import ProfilerActivity, profile
    submission = _load_submission()
    data = generate_input(**test.args)
    _sync()
    on_gpu = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        submission.custom_kernel(data)
        _sync()
    sort_by = "self_cuda_time_total" if on_gpu else "self_cpu_time_total"
    return Outcome(True, prof.key_averages().table(sort_by=sort_by, row_limit=20),
                   backend=_backend_name(submission))


def _in_worker(fn, *args) -> Outcome:
    # An exception in the submission fails the case with its traceback instead of
    # killing the harness.
    try:
        return fn(*args)
    except (Exception, SystemExit):
        return Outcome(False, traceback.format_exc())


class Worker:
    """The spawned process cases run in (upstream: a spawn Pool(1), reused across cases).
    If the process dies (a crashing kernel), the case fails and the next one gets a new process."""

    def __init__(self):
        self._context = multiprocessing.get_context("spawn")
        self._pool = None

    def run(self, fn, *args) -> Outcome:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=self._context)
        try:
            return self._pool.submit(_in_worker, fn, *args).result()
        except BrokenProcessPool:
            self._pool = None
            return Outcome(False, "the worker process died (crash or out of memory)")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)


# ---- popcorn mode ---------------------------------------------------------------------

OFFICIAL_LIMITS = {  # upstream's (max_repeats, max_time_ns)
    "benchmark-warmup": Limits(100, 10e7),
    "benchmark": Limits(1000, 50e9),
    "leaderboard-warmup": Limits(100, 1e7),
    "leaderboard": Limits(100, 30e9),
}


def budget_limits(mode: str, budget_s: Optional[float]) -> Limits:
    """Upstream's limits, or with a budget: that many timed seconds per case and at most
    10x that in wall time (on CPU, regenerating leaderboard data dominates)."""
    official = OFFICIAL_LIMITS[mode]
    if budget_s is None:
        return official
    return Limits(official.max_repeats, budget_s * 1e9, min(official.max_wall_ns, 10 * budget_s * 1e9))


class PopcornOutput:
    def __init__(self, fd: int):
        self.file = os.fdopen(fd, "w")
        os.set_inheritable(fd, False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def log(self, key, value):
        # One line per key: a multi-line value (a traceback) would break the protocol.
        print(f"{key}: {str(value).replace(chr(10), chr(92) + 'n')}", file=self.file, flush=True)


def run_testing(logger: PopcornOutput, worker: Worker, tests: list[TestCase]) -> int:
    passed = True
    logger.log("test-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"test.{idx}.spec", test.spec)
        outcome = worker.run(_run_single_test, test)
        if outcome.good:
            logger.log(f"test.{idx}.status", "pass")
            if outcome.message:
                logger.log(f"test.{idx}.message", outcome.message)
        else:
            logger.log(f"test.{idx}.status", "fail")
            logger.log(f"test.{idx}.error", outcome.message)
            passed = False
    logger.log("check", "pass" if passed else "fail")
    return 0 if passed else EXIT_FAIL


def _log_stats(logger: PopcornOutput, idx: int, stats: Stats) -> None:
    for field in dataclasses.fields(Stats):
        logger.log(f"benchmark.{idx}.{field.name}", getattr(stats, field.name))


def run_benchmarking(logger: PopcornOutput, worker: Worker, tests: list[TestCase],
                     mode: str, budget_s: Optional[float]) -> int:
    """`benchmark` mode, or `leaderboard` (fresh, re-checked data on every run).
    Stops at the first failing case, as upstream."""
    recheck = mode == "leaderboard"
    worker.run(_run_single_benchmark, tests[0], False, OFFICIAL_LIMITS[f"{mode}-warmup"])
    limits = budget_limits(mode, budget_s)
    passed = True
    logger.log("benchmark-count", len(tests))
    for idx, test in enumerate(tests):
        if not recheck:
            logger.log(f"benchmark.{idx}.spec", test.spec)
        outcome = worker.run(_run_single_benchmark, test, recheck, limits)
        if recheck:  # upstream's leaderboard logs the spec after the run
            logger.log(f"benchmark.{idx}.spec", test.spec)
        if outcome.good:
            _log_stats(logger, idx, outcome.stats)
        else:
            passed = False
            logger.log(f"benchmark.{idx}.status", "fail")
            logger.log(f"benchmark.{idx}.error", outcome.message)
            break
    logger.log("check", "pass" if passed else "fail")
    return 0 if passed else EXIT_FAIL


def run_profiling(logger: PopcornOutput, worker: Worker, tests: list[TestCase]) -> int:
    passed = True
    logger.log("benchmark-count", len(tests))
    for idx, test in enumerate(tests):
        logger.log(f"benchmark.{idx}.spec", test.spec)
        outcome = worker.run(_run_single_profile, test)
        if outcome.good:
            report = base64.b64encode(outcome.message.encode("utf-8"), b"+*").decode("utf-8")
            logger.log(f"benchmark.{idx}.report", report)
        else:
            passed = False
            logger.log(f"benchmark.{idx}.status", "fail")
            logger.log(f"benchmark.{idx}.error", outcome.message)
    logger.log("check", "pass" if passed else "fail")
    return 0 if passed else EXIT_FAIL


def popcorn_main(fd: int, mode: str, cases_file: str, budget_s: Optional[float]) -> int:
    seed = _pop_secret_seed()
    set_seed(seed or 42)
    tests = get_test_cases(cases_file, seed)
    with PopcornOutput(fd) as logger, Worker() as worker:
        if mode == "test":
            return run_testing(logger, worker, tests)
        if mode in ("benchmark", "leaderboard"):
            return run_benchmarking(logger, worker, tests, mode, budget_s)
        if mode == "profile":
            return run_profiling(logger, worker, tests)
        return 2


# ---- local mode -----------------------------------------------------------------------

@dataclasses.dataclass
class Row:
    mode: str
    test: TestCase
    outcome: Outcome


def _fmt_ns(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e3:.2f} us"


def _timing_note(budget_s: Optional[float]) -> str:
    if torch.cuda.is_available():
        flush_mb = os.environ.get(L2_FLUSH_ENV, DEFAULT_L2_FLUSH_MB)
        budget = "upstream budgets" if budget_s is None else f"budget {budget_s:g} s/case"
        return f"device {torch.cuda.get_device_name()}: events, {flush_mb} MB L2 flush, {budget}"
    return (f"CPU: host clock, no L2 flush, budget {budget_s:g} s/case "
            "(capped for local runs; not comparable to the leaderboard)")


def _run_local_cases(worker: Worker, mode: str, tests: list[TestCase],
                     budget_s: Optional[float], progress) -> list[Row]:
    if mode != "test":
        worker.run(_run_single_benchmark, tests[0], False, OFFICIAL_LIMITS[f"{mode}-warmup"])
    rows = []
    for test in tests:
        progress(mode, test)
        if mode == "test":
            outcome = worker.run(_run_single_test, test)
        else:
            outcome = worker.run(_run_single_benchmark, test, mode == "leaderboard",
                                 budget_limits(mode, budget_s))
        rows.append(Row(mode, test, outcome))
    return rows


def _table(rows: list[Row]) -> str:
    header = ("mode", "case", "status", "mean ± err", "best", "runs", "backend:plan", "check")
    lines = [header]
    for row in rows:
        o, s = row.outcome, row.outcome.stats
        timing = (f"{_fmt_ns(s.mean)} ± {_fmt_ns(s.err)}", _fmt_ns(s.best), str(s.runs)) if s else ("-", "-", "-")
        check = o.message.split("\\n")[0][:40] if o.good else "see below"
        lines.append((row.mode, row.test.spec, "pass" if o.good else "FAIL", *timing, o.backend, check))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def _failures(rows: list[Row]) -> str:
    out = []
    for row in rows:
        if not row.outcome.good:
            message = row.outcome.message.replace("\\n", "\n").strip()
            out.append(f"FAIL {row.mode} {row.test.spec}:\n    " + message.replace("\n", "\n    "))
    return "\n".join(out)


def local_main(args) -> int:
    seed = _pop_secret_seed()
    set_seed(seed or 42)
    if args.cases:
        custom = read_case_file(args.cases)
    elif args.shapes:
        custom = shapes_cases(args.shapes)
    else:
        custom = None
    modes = ["test", "benchmark"] if args.mode == "all" else [args.mode]
    budget_s = args.budget_s
    if budget_s is None and not torch.cuda.is_available():
        budget_s = CPU_BUDGET_S

    cases = {mode: parse_cases(custom or task_yml_cases("tests" if mode == "test" else "benchmarks"), seed)
             for mode in modes}
    total, done = sum(len(c) for c in cases.values()), [0]

    def progress(mode, test):
        done[0] += 1
        print(f"[{done[0]}/{total}] {mode} {test.spec} ...", file=sys.stderr, flush=True)

    print(f"mxfp4-mm eval: {_timing_note(budget_s)}", flush=True)
    rows = []
    with Worker() as worker:
        for mode in modes:
            rows += _run_local_cases(worker, mode, cases[mode], budget_s, progress)
    print(_table(rows))
    failures = _failures(rows)
    if failures:
        print("\n" + failures)
    passed = all(row.outcome.good for row in rows)
    print(f"\n{'all passed' if passed else 'FAILED'}")
    return 0 if passed else EXIT_FAIL


# ---- entry point --------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("popcorn_mode", nargs="?", metavar="MODE",
                   help="test | benchmark | leaderboard | profile (popcorn protocol, with FILE)")
    p.add_argument("popcorn_cases", nargs="?", metavar="FILE", help="case file, one case per line")
    p.add_argument("--mode", choices=["test", "benchmark", "leaderboard", "all"], default="all",
                   help="local mode: what to run (all = tests, then benchmarks)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--cases", help="local mode: case file instead of task.yml")
    source.add_argument("--shapes", help='local mode: "m,n,k;m,n,k" instead of task.yml (seed 42)')
    p.add_argument("--backend", help=f"sets {BACKEND_ENV} for the submission")
    p.add_argument("--budget-s", type=float, help="timed seconds per benchmark case "
                   f"(default: upstream's on GPU, {CPU_BUDGET_S} on CPU in local mode)")
    p.add_argument("--submission", help=f"submission file (default: submission.py; env {SUBMISSION_ENV})")
    return p


POPCORN_MODES = ("test", "benchmark", "leaderboard", "profile")


def _check_shapes(parser: argparse.ArgumentParser, shapes: str) -> None:
    """--shapes must name valid task shapes: bad ones are usage errors (exit 2), not tracebacks."""
    given = [s.strip() for s in shapes.split(";") if s.strip()]
    if not given:
        parser.error('--shapes: no shapes given (expected "m,n,k;m,n,k")')
    for shape in given:
        try:
            m, n, k = (int(v) for v in shape.split(","))
        except ValueError:
            parser.error(f'--shapes: "{shape}" is not m,n,k (three integers separated by commas)')
        # reference.generate_input's rules (the task's valid shapes)
        if m < 1:
            parser.error(f'--shapes: "{shape}": m must be >= 1')
        if n < 16 or n % 16:
            parser.error(f'--shapes: "{shape}": n must be a positive multiple of 16')
        if k < 64 or k % 64:
            parser.error(f'--shapes: "{shape}": k must be a positive multiple of 64')


def _check_usage(parser: argparse.ArgumentParser, args, fd: Optional[str]) -> None:
    """Every usage error ends in parser.error: one line on stderr (after the usage) and exit 2."""
    if args.shapes is not None:
        _check_shapes(parser, args.shapes)
    if args.budget_s is not None and not args.budget_s > 0:  # also rejects nan
        parser.error(f"--budget-s must be > 0, got {args.budget_s:g}")
    if args.submission and not Path(args.submission).is_file():
        parser.error(f"--submission: no such file: {args.submission}")
    if fd:
        if not fd.isdigit():
            parser.error(f"POPCORN_FD must be a file descriptor number, got {fd!r}")
        if args.popcorn_mode not in POPCORN_MODES or not args.popcorn_cases:
            parser.error(f"with POPCORN_FD set, give MODE FILE with MODE one of {'|'.join(POPCORN_MODES)}")
    elif args.popcorn_mode:
        if args.popcorn_mode not in ("test", "benchmark", "leaderboard") or not args.popcorn_cases:
            parser.error("without POPCORN_FD, MODE FILE must be test|benchmark|leaderboard and a case file")
        if args.cases or args.shapes:
            parser.error("give either MODE FILE or --cases/--shapes, not both")


def main(argv=None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    fd = os.getenv("POPCORN_FD")
    _check_usage(parser, args, fd)
    # Set before the worker is spawned, so the submission sees them when it is imported.
    if args.backend:
        os.environ[BACKEND_ENV] = args.backend
    if args.submission:
        os.environ[SUBMISSION_ENV] = str(Path(args.submission).resolve())

    if fd:
        return popcorn_main(int(fd), args.popcorn_mode, args.popcorn_cases, args.budget_s)
    if args.popcorn_mode:  # `eval.py MODE FILE` without POPCORN_FD: the local table
        args.mode, args.cases = args.popcorn_mode, args.popcorn_cases
    return local_main(args)


if __name__ == "__main__":
    sys.exit(main())

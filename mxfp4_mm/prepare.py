"""The compile step: prepares this machine for the task's shapes before anything is timed.

    python3 submission.py                # what the leaderboard runner runs, untimed, before each mode
    python -m mxfp4_mm.prepare [--shapes task|bench|test|"m,n,k;..."] [--deadline-s S]

For every shape (the task's 6 benchmarks first, then its 4 tests): every candidate of every
available backend is compiled in worker processes, proven (first run in a child process, recorded
in the ledger), checked on fresh inputs and on one with an out-of-range block, timed the harness's
way, and the choice written to the memo (`tuning/`), each result as soon as it is known. A later
run continues where the last stopped. The timed processes then serve those choices without running
anything new. Ends by its own deadline (`MXFP4_MM_PREPARE_DEADLINE_S`, default 100 s, inside the
runner's 120 s), always with exit status 0, one line per shape, nothing of ours left running.
"""

import argparse
import sys
import time

from . import settings

DEADLINE_ENV = "MXFP4_MM_PREPARE_DEADLINE_S"
DEFAULT_DEADLINE_S = 100.0
# task.yml's shapes, benchmarks (ranked) first
BENCHMARK_SHAPES = [(4, 2880, 512), (16, 2112, 7168), (32, 4096, 512), (32, 2880, 512),
                    (64, 7168, 2048), (256, 3072, 1536)]
TEST_SHAPES = [(8, 2112, 7168), (16, 3072, 1536), (64, 3072, 1536), (256, 2880, 512)]
TASK_SHAPES = BENCHMARK_SHAPES + TEST_SHAPES


def _say(text):
    print(f"mxfp4_mm prepare: {text}", flush=True)


def parse_shapes(text):
    named = {"task": TASK_SHAPES, "bench": BENCHMARK_SHAPES, "test": TEST_SHAPES}
    if text in named:
        return named[text]
    shapes = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        dims = part.replace("x", ",").split(",")
        if len(dims) != 3 or not all(d.strip().isdigit() for d in dims):
            raise ValueError(f"--shapes: {part!r} must be M,N,K (or task, bench, test)")
        shapes.append(tuple(int(d) for d in dims))
    return shapes


def deadline_s(text=None) -> float:
    return settings.seconds(DEADLINE_ENV, DEFAULT_DEADLINE_S, text)


def summary(device, shape) -> str:
    from . import dispatch
    from .tuning import records
    memo = records.Memo(device, shape, list(dispatch.candidate_backends(device)))
    d = memo.data
    chosen = d["chosen"] or (memo.ranked() or [None])[0]
    us = d["final"].get(chosen, d["timed"].get(chosen)) if chosen else None
    served = f"{chosen} {us:.2f} us" if chosen else "nothing measured"
    return (f"{records.shape_key(shape)}: {served}; {len(d['timed'])} timed, {len(d['wrong'])} wrong, "
            f"{len(d['failed'])} failed to build; sweep {'complete' if d['complete'] else 'partial'}"
            + (f"; settled (served {d['served']})" if d.get("served") else ""))


def prepare(shapes, seconds, workers=0):
    import torch
    from .tuning import supervise
    started = time.time()
    if not torch.cuda.is_available():
        _say("no GPU here: nothing to prepare")
        return
    device = torch.device("cuda", torch.cuda.current_device())
    events = supervise.run_tuner(device, shapes, started + seconds, workers=workers)
    for family, why, label in events:
        _say(f"{family} ({why}{', at ' + label if label else ''}): never offered again on this device")
    for shape in shapes:
        _say(summary(device, shape))
    _say(f"{len(shapes)} shapes in {time.time() - started:.1f} s")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="task", help="task | bench | test | 'm,n,k;m,n,k'")
    parser.add_argument("--deadline-s", help=f"seconds (default ${DEADLINE_ENV} or {DEFAULT_DEADLINE_S:.0f})")
    parser.add_argument("--workers", type=int, default=0, help="build processes (default: one per core)")
    args = parser.parse_args(argv)
    try:
        shapes, seconds = parse_shapes(args.shapes), deadline_s(args.deadline_s)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        prepare(shapes, seconds, args.workers)
    except Exception as exc:  # the compile step must never fail the submission: the eval measures itself
        _say(f"stopped early ({type(exc).__name__}: {exc}); the eval will measure what is missing")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The entry point of our child processes (`procs.start(procs.CHILD_MODULE, ...)`):

    tune --device cuda:0 --shapes "4,2880,512;16,2112,7168" --deadline EPOCH [--only "backend:label,..."]
        the tuner: sweeps the shapes (or, with --only, proves those candidates and times nothing)
    build-worker
        a build pool's worker: compiles the jobs it reads from stdin into the on-disk caches

Here, not in the modules it runs, because it needs the dispatcher, which imports the tuning
machinery: the children are the only place where both meet."""

import argparse
import os
import sys

import torch

from .. import dispatch
from . import buildpool, procs, timing, tuner


def _tune(argv):
    parser = argparse.ArgumentParser(prog="child tune")
    parser.add_argument("--device", required=True)
    parser.add_argument("--shapes", required=True)
    parser.add_argument("--deadline", type=float, required=True, help="epoch seconds")
    parser.add_argument("--only", default="", help="comma-separated backend:label to prove, no timing")
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    verbose = os.environ.get("MXFP4_MM_TUNE_VERBOSE", "0") not in ("", "0")
    say = (lambda text: print(f"mxfp4_mm tuner: {text}", file=sys.stderr, flush=True)) if verbose else None
    shapes = tuner.parse_shapes(args.shapes)
    backends = dispatch.available_backends(device)
    names = dispatch.candidate_backends(device)
    if args.only:
        proving = tuner.Tuner(device, backends, names, args.deadline, say=say)
        for shape in shapes:
            proving.prove_only(shape, set(args.only.split(",")))
        return 0
    pool = buildpool.BuildPool(args.workers or None, verbose=verbose)
    try:
        tuner.Tuner(device, backends, names, args.deadline, pool=pool, timer=timing.timer_for(device),
                    say=say).sweep(shapes)
    finally:
        pool.close()
    return 0


def _build(job):
    backend, m, n, k, device, plan = job
    dispatch.load_backend(backend).build(m, n, k, torch.device(device), plan)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    procs.die_with_parent()
    if argv[:1] == ["tune"]:
        return _tune(argv[1:])
    if argv == ["build-worker"]:
        buildpool.worker_loop(sys.stdin, sys.stdout, _build)
        return 0
    print("usage: child tune --device D --shapes S --deadline T [--only L] | child build-worker", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

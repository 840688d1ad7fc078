"""Compiles candidates in worker processes, in the order given, until a deadline that holds.

hiprtc compiles one program at a time per process (comgr locks its steps) and Triton's compiler
holds the GIL, so threads give no parallelism there: processes do, one per core. A build still
running at the deadline is killed with its worker. Each worker is a fresh interpreter running
`child.main(["build-worker"])`: it reads one job per line (base64 pickle) and answers one line per job.

A job is (backend name, M, N, K, device, plan); the worker calls the backend's
`build(m, n, k, device, plan)`, which leaves the compiled code in the on-disk caches (ours and
Triton's), so the tuner's own process finds it there."""

import base64
import json
import os
import pickle
import selectors
import subprocess
import time

from . import procs

ANSWER = "mxfp4_mm-build "  # prefix of a worker's answer line (libraries may print to stdout too)


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class _Worker:
    def __init__(self, verbose):
        self.proc = procs.start(procs.CHILD_MODULE, ["build-worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=None if verbose else subprocess.DEVNULL, text=True, bufsize=1)
        self.job = None  # index of the job in flight

    def send(self, index, job):
        self.job = index
        self.proc.stdin.write(base64.b64encode(pickle.dumps(job)).decode() + "\n")
        self.proc.stdin.flush()


class BuildPool:
    """Up to `workers` worker processes, started at the first jobs and kept between `run`s."""

    def __init__(self, workers=None, verbose=False):
        self.size = workers or default_workers()
        self.verbose = verbose
        self.workers = []

    def run(self, jobs, deadline, clock=time.time):
        """{index: None (built) | "error text" | "timeout"} for jobs [(backend, m, n, k, device, plan)];
        jobs not started by the deadline are left out."""
        results, queue = {}, list(enumerate(jobs))
        selector = selectors.DefaultSelector()
        for worker in self.workers:  # kept from an earlier run: their answers come through this selector too
            selector.register(worker.proc.stdout, selectors.EVENT_READ, worker)
        try:
            while (queue or any(w.job is not None for w in self.workers)) and clock() < deadline:
                self._hand_out(queue, selector)
                for key, _ in selector.select(timeout=max(0.0, min(0.5, deadline - clock()))):
                    self._collect(key.data, results, selector)
            for worker in list(self.workers):  # past the deadline: kill what still compiles
                if worker.job is not None:
                    results[worker.job] = "timeout"
                    self._drop(worker, selector)
        finally:
            selector.close()
        return results

    def _hand_out(self, queue, selector):
        idle = [w for w in self.workers if w.job is None]
        while queue and len(self.workers) < self.size and len(idle) < len(queue):
            worker = _Worker(self.verbose)
            self.workers.append(worker)
            selector.register(worker.proc.stdout, selectors.EVENT_READ, worker)
            idle.append(worker)
        for worker in idle:
            if not queue:
                break
            try:
                worker.send(*queue[0])
                queue.pop(0)
            except (BrokenPipeError, OSError):
                self._drop(worker, selector)

    def _collect(self, worker, results, selector):
        line = worker.proc.stdout.readline()
        if not line:  # the worker died (a compiler crash): its job failed
            if worker.job is not None:
                results[worker.job] = f"build worker died (exit {worker.proc.poll()})"
                worker.job = None
            self._drop(worker, selector)
            return
        if line.startswith(ANSWER) and worker.job is not None:
            answer = json.loads(line[len(ANSWER):])
            results[worker.job] = answer.get("error")
            worker.job = None

    def _drop(self, worker, selector):
        try:
            selector.unregister(worker.proc.stdout)
        except (KeyError, ValueError):
            pass
        procs.kill(worker.proc)
        self.workers.remove(worker)

    def close(self):
        for worker in list(self.workers):
            try:
                worker.proc.stdin.close()  # the worker's loop ends at end of input
                worker.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
            procs.kill(worker.proc)
        self.workers = []


def worker_loop(lines, out, build):
    """A build worker's life (`child.main(["build-worker"])`): `build(job)` for each job line."""
    for line in lines:
        try:
            build(pickle.loads(base64.b64decode(line)))
            answer = {}
        except Exception as exc:  # reported to the tuner, which drops the candidate
            answer = {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
        out.write(ANSWER + json.dumps(answer) + "\n")
        out.flush()

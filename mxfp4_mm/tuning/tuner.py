"""The tuning loop, run in a child process (`supervise` starts it): for each shape, every candidate
plan of every available backend is built (worker processes), proven (its first run recorded in the
ledger before and after), checked on the proof inputs, timed the harness's way, and the fastest few
re-timed; the winner is checked on fresh inputs once more and written to the memo.

Passes: first every shape's likeliest candidates (`FIRST_PASS` by prior), so each shape has a
choice early; then the rest. Every result is saved as soon as known: a kill loses only the
candidate in flight, and a later run continues with what is untried. A shape whose sweep is
complete is not measured again (its choice stays as made).

Its process is started by `supervise` through `child` (the entry point of our child processes).
"""

import collections
import os
import sys
import time

import torch

from . import records, timing, verify

QUICK_REPS = 3
FINALISTS = 6
FINAL_REPS = 30
FRESH_CHECKS = 3  # the winner's last test, on new inputs (split-K plans race if anything does)
FIRST_PASS = 6  # candidates per shape, by prior, before any shape gets the rest
FIRST_RUN_LIMIT_S = 20.0  # a first run (proof inputs + synchronize) taking longer is a hang
TIMING_RESERVE_S = 4.0  # of a deadline, kept for proving and timing what was built
FAULT_EXIT = 70  # the child's exit status after a fault that left the GPU context unusable

Candidate = collections.namedtuple("Candidate", "backend module plan label family")


# ---- candidates ---------------------------------------------------------------------------------

def label_of(module, plan) -> str:
    if plan is None:
        return "default"
    labeler = getattr(module, "plan_label", None)
    if labeler is not None:
        return str(labeler(plan))
    return "-".join(map(str, plan)) if isinstance(plan, tuple) else str(plan).replace(" ", "")


def family_of(name, module, plan) -> str:
    """The group of plans that share code paths: one fault rules out the whole group."""
    grouper = getattr(module, "plan_family", None)
    return f"{name}:{grouper(plan) if grouper is not None and plan is not None else label_of(module, plan)}"


def is_reference(module) -> bool:
    """The torch backend computes the spec's reference: never a tuning candidate, never proven."""
    return bool(getattr(module, "REFERENCE", False))


def candidate_list(backends, m, n, k, device):
    """(candidates by prior, failures): backends = [(name, module)] in dispatch order, the
    reference backend left out; interleaved by rank (every backend's first plan, then every
    backend's second, ...) so a cut sweep keeps each backend's likeliest plans."""
    per_backend, failures = [], []
    for name, module in backends:
        if is_reference(module):
            continue
        offer = getattr(module, "candidates", None)
        try:
            plans = [None] if offer is None else list(offer(m, n, k, device))
        except Exception as exc:  # a backend that cannot list plans offers none
            failures.append((f"{name}:candidates", exc))
            continue
        per_backend.append([Candidate(name, module, plan, label_of(module, plan), family_of(name, module, plan))
                            for plan in plans])
    ordered = []
    for rank in range(max(map(len, per_backend), default=0)):
        ordered += [plans[rank] for plans in per_backend if rank < len(plans)]
    return ordered, failures


def full_label(candidate) -> str:
    return f"{candidate.backend}:{candidate.label}"


def make_runner(candidate, m, n, k, device):
    if candidate.plan is None:
        return candidate.module.make_runner(m, n, k, device)
    return candidate.module.make_runner(m, n, k, device, plan=candidate.plan)


def first_run_limit(candidate) -> float:
    return float(getattr(candidate.module, "FIRST_RUN_LIMIT_S", FIRST_RUN_LIMIT_S))


# ---- proving ------------------------------------------------------------------------------------

def context_usable(device) -> bool:
    """Whether the GPU still runs work after an error (NVIDIA keeps a fault as a sticky error)."""
    if device.type != "cuda":
        return True
    try:
        torch.cuda.synchronize(device)
        return torch.ones(1, device=device).add_(1).item() == 2.0
    except Exception:
        return False


def prove(candidate, runner, shape, proof, ledger, proven, device):
    """Run the candidate on the proof inputs, its first run bracketed by ledger lines (where it has
    not run here before). WrongResult if it computes a wrong result. A fault that leaves the GPU
    unusable ends this process with the run left open: the supervisor rules the family out."""
    key = (records.shape_key(shape), full_label(candidate))
    run = None if key in proven else ledger.begin(shape, full_label(candidate), candidate.family,
                                                   first_run_limit(candidate))
    try:
        proof.check(runner, full_label(candidate))
    except verify.WrongResult:
        if run:
            ledger.end(run)
            proven.add(key)
        raise
    except Exception:
        if not context_usable(device):
            sys.stderr.flush()
            os._exit(FAULT_EXIT)
        if run:
            ledger.end(run)
            proven.add(key)
        raise
    if run:
        ledger.end(run)
        proven.add(key)


# ---- the loop -----------------------------------------------------------------------------------

class Tuner:
    """Sweeps shapes on one device, recording everything in the ledger and the memos."""

    def __init__(self, device, backends, names, deadline, pool=None, timer=None, clock=time.time, say=None):
        """backends: [(name, module)] available, in dispatch order; names: the dispatcher's backend
        names for the device (the memo's key: configuration, not availability)."""
        self.device, self.backends, self.deadline = device, backends, deadline
        self.names = list(names)
        self.pool, self.clock = pool, clock
        self.timer = timer
        self.ledger = records.ledger_for(device)
        self.wrong_families = set()  # dropped for this process
        self.say = say or (lambda text: None)
        self._proofs = {}

    # -- what to try

    def memo(self, shape):
        return records.Memo(self.device, shape, self.names)

    def offered(self, shape):
        """The shape's candidates less the families ruled out here (ledger) or in this process."""
        _, bad, _ = self.ledger.state()
        candidates, _ = candidate_list(self.backends, *shape, self.device)
        return [c for c in candidates if c.family not in bad and c.family not in self.wrong_families]

    def _untried(self, shape, width):
        memo = self.memo(shape)
        if memo.settled():
            return []
        offered = self.offered(shape)
        return [c for c in offered[:width] if full_label(c) not in memo.tried()]

    # -- building

    def _build(self, todo):
        """Compile [(shape, candidate)] in the pool, in that order. Returns ({(shape, label): error}
        of the builds that failed, {(shape, label)} of those the deadline cut: tried again later)."""
        if self.pool is None:
            return {}, set()
        todo = [(shape, c) for shape, c in todo if hasattr(c.module, "build") and c.plan is not None]
        jobs = [(c.backend, *shape, str(self.device), c.plan) for shape, c in todo]
        results = self.pool.run(jobs, self.deadline - TIMING_RESERVE_S) if jobs else {}
        failed, cut = {}, set()
        for i, (shape, c) in enumerate(todo):
            result = results.get(i, "timeout")
            if result == "timeout":
                cut.add((shape, full_label(c)))
            elif result is not None:
                failed[(shape, full_label(c))] = result
        return failed, cut

    # -- proving and timing

    def _proof(self, shape):
        if shape not in self._proofs:
            self._proofs = {shape: verify.ProofInputs(*shape, self.device)}  # one shape's inputs at a time
        return self._proofs[shape]

    def _measure(self, shape, candidate, memo, proven):
        label = full_label(candidate)
        try:
            if self.pool is None and hasattr(candidate.module, "build") and candidate.plan is not None:
                candidate.module.build(*shape, self.device, candidate.plan)
            runner = make_runner(candidate, *shape, self.device)
        except Exception as exc:  # a build error: this candidate is out
            memo.data["failed"][label] = f"{type(exc).__name__}: {str(exc)[:300]}"
            return
        proof = self._proof(shape)
        try:
            prove(candidate, runner, shape, proof, self.ledger, proven, self.device)
        except verify.WrongResult as exc:
            memo.data["wrong"][label] = str(exc)[:300]
            self.wrong_families.add(candidate.family)
            self.say(f"{records.shape_key(shape)} {label}: wrong ({exc}); its family is dropped")
            return
        except Exception as exc:
            memo.data["failed"][label] = f"{type(exc).__name__}: {str(exc)[:300]}"
            return
        if self.timer is None:  # proving only
            return
        args = proof.timing_args()
        memo.data["timed"][label] = timing.median([self.timer(runner, args) for _ in range(QUICK_REPS)])
        self.say(f"{records.shape_key(shape)} {label}: {memo.data['timed'][label]:.2f} us")

    def _finals(self, shape, memo):
        """Re-time the fastest few interleaved; the fastest that passes the fresh checks is chosen."""
        by_label = {full_label(c): c for c in candidate_list(self.backends, *shape, self.device)[0]}
        _, bad, _ = self.ledger.state()
        timed = memo.data["timed"]
        ranked = sorted((label for label in timed if label in by_label and by_label[label].family not in bad
                         and by_label[label].family not in self.wrong_families), key=timed.get)
        finalists = []
        for label in ranked[:FINALISTS]:
            try:
                finalists.append((label, make_runner(by_label[label], *shape, self.device)))
            except Exception as exc:
                memo.data["failed"][label] = f"{type(exc).__name__}: {str(exc)[:300]}"
        if not finalists:
            return
        args = self._proof(shape).timing_args()
        final = timing.interleaved_medians([r for _, r in finalists], self.timer, args, FINAL_REPS)
        memo.data["final"] = {label: us for (label, _), us in zip(finalists, final)}
        for us, (label, runner) in sorted(zip(final, finalists), key=lambda row: row[0]):
            try:
                verify.fresh_checks(runner, *shape, self.device, FRESH_CHECKS, label, seed=hash(label) % 10007)
            except verify.WrongResult as exc:
                memo.data["wrong"][label] = str(exc)[:300]
                timed.pop(label, None)
                self.wrong_families.add(by_label[label].family)
                continue
            memo.data["chosen"], memo.data["chosen_us"] = label, us
            return

    # -- the sweep

    def sweep(self, shapes):
        """Both passes over `shapes` (listed by priority), as far as the deadline allows: first every
        shape's likeliest plans, built rank by rank across shapes so that a cut build phase leaves
        each shape its likeliest; then the rest, shape by shape."""
        self._pass([(shape, self._untried(shape, FIRST_PASS)) for shape in shapes], FIRST_PASS)
        for shape in shapes:
            if self.clock() >= self.deadline:
                return
            self._pass([(shape, self._untried(shape, None))], None)

    def _pass(self, per_shape, width):
        rows = [[(shape, c) for c in todo] for shape, todo in per_shape]
        todo = [row[rank] for rank in range(max(map(len, rows), default=0)) for row in rows if rank < len(row)]
        started = self.clock()
        failed, cut = self._build(todo)
        if todo:
            self.say(f"built {len(todo) - len(cut)} of {len(todo)} in {self.clock() - started:.1f} s "
                     f"({len(failed)} failed)")
        for shape, _ in per_shape:
            if self.clock() >= self.deadline:
                return
            if not self.memo(shape).settled():  # a settled shape's choice stays as it is
                self._sweep_shape(shape, width, [c for s, c in todo if s == shape], failed, cut)

    def _sweep_shape(self, shape, width, todo, failed, cut):
        memo = self.memo(shape)
        proven, _, _ = self.ledger.state()
        timed_before, started = len(memo.data["timed"]), self.clock()
        for candidate in todo:
            label = full_label(candidate)
            if self.clock() >= self.deadline:
                break
            if candidate.family in self.wrong_families or (shape, label) in cut:
                continue
            if (shape, label) in failed:
                memo.data["failed"][label] = failed[(shape, label)][:300]
            else:
                self._measure(shape, candidate, memo, proven)
            memo.save()
        news = len(memo.data["timed"]) != timed_before or memo.data["chosen"] is None
        measured = self.clock()
        if news and self.clock() < self.deadline:
            self._finals(shape, memo)
            self.say(f"{records.shape_key(shape)}: {len(memo.data['timed']) - timed_before} measured in "
                     f"{measured - started:.1f} s, finals {self.clock() - measured:.1f} s -> {memo.data['chosen']}")
        if width is None and self.clock() < self.deadline:
            untried = [c for c in self.offered(shape) if full_label(c) not in memo.tried()]
            memo.data["complete"] = not untried and memo.data["chosen"] is not None
        memo.save()

    def prove_only(self, shape, labels):
        """Prove the named candidates on the shape (no timing): the table path's and a pin's."""
        memo = self.memo(shape)
        proven, _, _ = self.ledger.state()
        for candidate in self.offered(shape):
            if full_label(candidate) in labels:
                self._measure(shape, candidate, memo, proven)
        memo.save()


def parse_shapes(text):
    return [tuple(int(v) for v in part.split(",")) for part in text.split(";") if part.strip()]

"""The dispatcher's side of tuning: at a shape's first call on a GPU, serve what the machine has
measured (the memo written by `python3 submission.py` / `python -m mxfp4_mm.prepare`, or by an
earlier process), else measure now in a child process (`tuning.supervise`), then serve the fastest
candidate that is proven on this device and verifies on the call's own inputs.

Nothing runs here for the first time: a candidate serves only once a tuner process has run it on
this shape and device and it returned (the ledger says so). A candidate that is not proven yet is
first run in a child, with a time limit (`MXFP4_MM_PROVE=inline` runs it here instead: tests,
machines whose faults are harmless).

Environment:
  MXFP4_MM_TUNE_BUDGET_S  seconds to measure an unprepared shape at its first call, the child's
                          start included (default 20; 0 = no measuring: the memo or the table plans)
  MXFP4_MM_TUNE_CAP_S     seconds of such measuring per process, all shapes together (default 120)
  MXFP4_MM_PROVE          "child" (default) or "inline": where an unproven candidate first runs
  MXFP4_MM_TUNE_VERBOSE   "1" = the tuner prints each candidate's result to stderr
  MXFP4_MM_PLAN           pin a plan: "backend:label" for every shape, or
                          "MxNxK=backend:label,MxNxK=backend:label" per shape (labels: as eval.py prints)
"""

import collections
import os
import sys
import time
import warnings

import torch

from . import devices, settings
from .tuning import records, supervise, timing, tuner, verify

BUDGET_ENV = "MXFP4_MM_TUNE_BUDGET_S"
CAP_ENV = "MXFP4_MM_TUNE_CAP_S"
PROVE_ENV = "MXFP4_MM_PROVE"
VERBOSE_ENV = "MXFP4_MM_TUNE_VERBOSE"
PLAN_ENV = "MXFP4_MM_PLAN"
DEFAULT_BUDGET_S = 20.0
DEFAULT_CAP_S = 120.0
PROVE_LIMIT_S = 60.0  # a child proving one candidate: its start, the build and the first run

# how: "memo" (measured before this call), "tuned" (measured at this call), "pinned" (MXFP4_MM_PLAN)
Choice = collections.namedtuple("Choice", "backend label plan runner out how us")

WrongResult = verify.WrongResult
candidate_list = tuner.candidate_list
label_of = tuner.label_of

_spent = [0.0]  # seconds of first-call measuring in this process
_reported_failures = set()


# ---- settings -----------------------------------------------------------------------------------

def budget_s() -> float:
    return settings.seconds(BUDGET_ENV, DEFAULT_BUDGET_S)


def cap_s() -> float:
    return settings.seconds(CAP_ENV, DEFAULT_CAP_S)


def prove_inline() -> bool:
    mode = os.environ.get(PROVE_ENV, "child").strip() or "child"
    if mode not in ("child", "inline"):
        raise ValueError(f"{PROVE_ENV}={mode!r}: must be 'child' or 'inline'")
    return mode == "inline"


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "0") not in ("", "0")


def _say(text):
    print(f"mxfp4_mm tuner: {text}", file=sys.stderr, flush=True)


def should_tune(device: torch.device) -> bool:
    """Tune on GPUs only (the CPU has the reference alone), outside graph capture."""
    return device.type == "cuda" and not devices.capturing()


def runner_label(module, runner) -> str:
    """Label of the plan a runner built with the default plan actually uses."""
    return label_of(module, getattr(runner, "plan", None))


def _warn_failures(failures, shape):
    """One RuntimeWarning for the failures not reported before in this process."""
    new = []
    for what, exc in failures:
        key = (what, type(exc).__name__)
        if key not in _reported_failures:
            _reported_failures.add(key)
            new.append(f"{what} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
    if new:
        shown = "; ".join(new[:8]) + (f"; and {len(new) - 8} more" if len(new) > 8 else "")
        warnings.warn(f"mxfp4_mm: {len(new)} candidate(s) dropped for M={shape[0]} N={shape[1]} "
                      f"K={shape[2]}: {shown}", RuntimeWarning, stacklevel=4)


# ---- proving before serving ---------------------------------------------------------------------

def is_proven(device, shape, candidate, state=None) -> bool:
    """Whether a tuner process ran the candidate on this shape here and it returned, and its family
    never faulted or hung here. The reference backend needs no proof. `state`: the ledger's state,
    read once by a caller that asks about many candidates."""
    if tuner.is_reference(candidate.module):
        return True
    proven, bad, _ = state or records.ledger_for(device).state()
    return candidate.family not in bad and (records.shape_key(shape), tuner.full_label(candidate)) in proven


def ensure_proven(device, shape, candidate, backends, names) -> bool:
    """Prove the candidate (in a child, or here with MXFP4_MM_PROVE=inline) unless it is already."""
    if is_proven(device, shape, candidate):
        return True
    _, bad, _ = records.ledger_for(device).state()
    if candidate.family in bad:
        return False
    label = tuner.full_label(candidate)
    if prove_inline():
        tuner.Tuner(device, backends, names, time.time() + PROVE_LIMIT_S).prove_only(shape, {label})
    else:
        supervise.run_tuner(device, [shape], time.time() + PROVE_LIMIT_S, only=[label])
    return is_proven(device, shape, candidate)


def _serve(candidate, m, n, k, device, args, ref):
    runner = tuner.make_runner(candidate, m, n, k, device)
    out = runner(*args)
    verify.check(out, ref, f"{tuner.full_label(candidate)}, first call for M={m} N={n} K={k}")
    return runner, out


# ---- pinning ------------------------------------------------------------------------------------

def pinned(m, n, k):
    """(backend, label) that MXFP4_MM_PLAN pins for this shape, or None. Raises on bad syntax."""
    text = os.environ.get(PLAN_ENV, "").strip()
    general = None
    for part in filter(None, (p.strip() for p in text.split(","))):
        shape, has_shape, choice = part.rpartition("=")
        backend, colon, label = choice.strip().partition(":")
        if not (colon and backend and label):
            raise ValueError(f"{PLAN_ENV}: {part!r} must be 'backend:label' or 'MxNxK=backend:label'")
        if not has_shape:
            general = (backend, label)
            continue
        dims = shape.strip().lower().split("x")
        if len(dims) != 3 or not all(d.isdigit() for d in dims):
            raise ValueError(f"{PLAN_ENV}: {shape.strip()!r} in {part!r} must be MxNxK, e.g. 16x2112x7168")
        if tuple(map(int, dims)) == (m, n, k):
            return backend, label
    return general


def pinned_choice(pin, m, n, k, args, backends, names, device):
    """The pinned candidate, proven, built and verified; errors are raised (a pin is an explicit
    request). The reference backend may be pinned as "torch:default"."""
    backend, label = pin
    modules = dict(backends)
    if backend in modules and tuner.is_reference(modules[backend]) and label == "default":
        runner = modules[backend].make_runner(m, n, k, device)
        return Choice(backend, label, None, runner, runner(*args), "pinned", None)
    candidates, _ = candidate_list(backends, m, n, k, device)
    matches = [c for c in candidates if (c.backend, c.label) == pin]
    if not matches:
        offered = ", ".join(tuner.full_label(c) for c in candidates) or "none"
        raise ValueError(f"{PLAN_ENV}: {backend}:{label} is not offered for M={m} N={n} K={k} on {device} "
                         f"(offered: {offered})")
    if device.type == "cuda" and not ensure_proven(device, (m, n, k), matches[0], backends, names):
        raise RuntimeError(f"{PLAN_ENV}: {backend}:{label} faulted, hung or could not run on {device} "
                           f"for M={m} N={n} K={k} (proven in a child process first)")
    runner, out = _serve(matches[0], m, n, k, device, args, verify.reference_output(m, n, k, args))
    return Choice(backend, label, matches[0].plan, runner, out, "pinned", None)


# ---- the memo, and measuring now ----------------------------------------------------------------

def _measure_now(device, shape, backends, names, budget):
    """Tune the shape in a child (or here, inline) within the budget and this process's cap."""
    allowed = min(budget, cap_s() - _spent[0])
    if allowed <= 0:
        return
    started = time.time()
    try:
        if prove_inline():
            tuner.Tuner(device, backends, names, started + allowed, timer=timing.timer_for(device),
                        say=_say if verbose() else None).sweep([shape])
        else:
            supervise.run_tuner(device, [shape], started + allowed)
    finally:
        _spent[0] += time.time() - started


def _from_memo(memo, m, n, k, args, backends, device, how):
    """The fastest measured candidate that is proven here and verifies on these inputs, or None."""
    candidates, _ = candidate_list(backends, m, n, k, device)
    by_label = {tuner.full_label(c): c for c in candidates}
    ref = verify.reference_output(m, n, k, args)
    failures = []
    state = records.ledger_for(device).state()  # one read of the ledger for every candidate
    for label in memo.ranked():
        candidate = by_label.get(label)
        if candidate is None or not is_proven(device, (m, n, k), candidate, state):
            continue
        try:
            runner, out = _serve(candidate, m, n, k, device, args, ref)
        except Exception as exc:  # wrong or broken here: the next one
            failures.append((label, exc))
            continue
        _warn_failures(failures, (m, n, k))
        memo.mark_served(label)  # settled: later sweeps leave the shape as it served
        us = memo.data["final"].get(label, memo.data["timed"].get(label))
        return Choice(candidate.backend, candidate.label, candidate.plan, runner, out, how, us)
    _warn_failures(failures, (m, n, k))
    return None


def choose(m, n, k, args, backends, names, device):
    """A Choice for this shape's first call (pinned, prepared, or measured now), or None: then the
    dispatcher's table path serves. backends = [(name, module)] available on the device, in
    dispatch order; names = the dispatcher's backend names for the device (the memo's key).
    Only a pin raises."""
    pin = pinned(m, n, k)
    if pin is not None:
        return pinned_choice(pin, m, n, k, args, backends, names, device)
    budget = budget_s()
    prove_inline()  # settings are checked up front: a bad one raises
    try:
        memo = records.Memo(device, (m, n, k), list(names))
        how = "memo"
        if not memo.ranked() and budget > 0:
            _measure_now(device, (m, n, k), backends, names, budget)
            memo.reload()
            how = "tuned"
        return _from_memo(memo, m, n, k, args, backends, device, how)
    except Exception as exc:  # the table path serves
        _warn_failures([("autotune", exc)], (m, n, k))
        return None

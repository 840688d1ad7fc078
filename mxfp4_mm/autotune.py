"""First-use autotuning: at a shape's first call on a GPU, every candidate plan of every available
backend is built, run on the call's own inputs, checked against the spec's reference GEMM, timed
the way the harness times, and the fastest correct one serves every later call of that shape.

Candidates: each available backend (dispatch's order) x `backend.candidates(m, n, k, device)` (a
backend without it offers one plan, its default), interleaved by rank (every backend's first plan,
then every backend's second, ...) so a cut budget keeps each backend's likeliest plans. Backends
with `prepare` compile in a thread pool ahead of use (NVRTC / hiprtc release the GIL); the others
build on the calling thread when reached (Triton compiles at its first launch).

Timing: events on the current queue around one call, caches flushed before each repetition by
writing a buffer of max(2 x L2, 512 MB) (twice the MI355X's 256 MB MALL); a quick median of a few
repetitions per candidate, then the best few re-timed, interleaved, with more repetitions.

Environment:
  MXFP4_MM_TUNE_BUDGET_S  wall seconds per shape, compilation included (default 5; 0 = the table
                          plan without measuring). A build under way when it runs out still finishes.
  MXFP4_MM_TUNE_MEMO      "0" = no on-disk memo of the choice (keyed by device, arch, versions,
                          package sources and shape; never by data), under MXFP4_MM_CACHE_DIR.
  MXFP4_MM_TUNE_VERBOSE   "1" = print each candidate's result to stderr.
  MXFP4_MM_PLAN           pin a plan: "backend:label" for every shape, or
                          "MxNxK=backend:label,MxNxK=backend:label" per shape (labels: plan_label).
Failures (a build error, a wrong result) drop the candidate; one RuntimeWarning lists them.
"""

import collections
import concurrent.futures
import hashlib
import json
import linecache
import os
import sys
import time
import warnings
from pathlib import Path

import torch

from . import devices

BUDGET_ENV = "MXFP4_MM_TUNE_BUDGET_S"
MEMO_ENV = "MXFP4_MM_TUNE_MEMO"
VERBOSE_ENV = "MXFP4_MM_TUNE_VERBOSE"
PLAN_ENV = "MXFP4_MM_PLAN"
DEFAULT_BUDGET_S = 5.0
MIN_FLUSH_BYTES = 512 * 1024 * 1024
QUICK_REPS = 3
FINALISTS = 4
FINAL_REPS = 20
MAX_BUILD_THREADS = 16
# A candidate built on the calling thread (a Triton JIT) cannot be interrupted: start one only
# with this much budget left, so the budget holds even with cold compiler caches.
INLINE_BUILD_RESERVE_S = 2.0
RTOL = ATOL = 1e-2  # the harness's tolerance

Candidate = collections.namedtuple("Candidate", "backend module plan label")
# how: "tuned" (measured now), "memo" (an earlier measurement), "pinned" (MXFP4_MM_PLAN)
Choice = collections.namedtuple("Choice", "backend label plan runner out how us")

_reported_failures = set()


class WrongResult(RuntimeError):
    pass


# ---- settings ---------------------------------------------------------------------------------

def budget_s() -> float:
    text = os.environ.get(BUDGET_ENV, "").strip()
    if not text:
        return DEFAULT_BUDGET_S
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{BUDGET_ENV}={text!r}: must be a number of seconds >= 0") from None
    if not value >= 0:
        raise ValueError(f"{BUDGET_ENV}={text!r}: must be a number of seconds >= 0")
    return value


def _verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "0") not in ("", "0")


def _say(text):
    if _verbose():
        print(f"mxfp4_mm autotune: {text}", file=sys.stderr, flush=True)


def should_tune(device: torch.device) -> bool:
    """Tune on GPUs only (the CPU has one backend), outside graph capture."""
    return device.type == "cuda" and not devices.capturing()


# ---- candidates -------------------------------------------------------------------------------

def label_of(module, plan) -> str:
    if plan is None:
        return "default"
    labeler = getattr(module, "plan_label", None)
    if labeler is not None:
        return str(labeler(plan))
    return "-".join(map(str, plan)) if isinstance(plan, tuple) else str(plan).replace(" ", "")


def runner_label(module, runner) -> str:
    """Label of the plan a runner built with the default plan actually uses."""
    return label_of(module, getattr(runner, "plan", None))


def candidate_list(backends, m, n, k, device):
    """(candidates by prior, failures): backends = [(name, module)] in dispatch order."""
    per_backend, failures = [], []
    for name, module in backends:
        offer = getattr(module, "candidates", None)
        try:
            plans = [None] if offer is None else list(offer(m, n, k, device))
        except Exception as exc:  # a backend that cannot list plans offers none
            failures.append((f"{name}:candidates", exc))
            continue
        per_backend.append([Candidate(name, module, plan, label_of(module, plan)) for plan in plans])
    ordered = []
    for rank in range(max(map(len, per_backend), default=0)):
        ordered += [plans[rank] for plans in per_backend if rank < len(plans)]
    return ordered, failures


def make_runner(candidate, m, n, k, device):
    if candidate.plan is None:
        return candidate.module.make_runner(m, n, k, device)
    return candidate.module.make_runner(m, n, k, device, plan=candidate.plan)


class Builder:
    """Compiles the candidates of backends with `prepare` in a thread pool, in order, so they are
    ready (or nearly) when the tuner reaches them; `runner` waits for one, then builds it."""

    def __init__(self, candidates, m, n, k, device):
        self.shape, self.device = (m, n, k), device
        preparable = [c for c in candidates if c.plan is not None and hasattr(c.module, "prepare")]
        self.pool = None
        self.futures = {}
        if preparable:
            self.pool = concurrent.futures.ThreadPoolExecutor(min(MAX_BUILD_THREADS, os.cpu_count() or 1))
            for c in preparable:
                self.futures[id(c)] = self.pool.submit(c.module.prepare, m, n, k, device, [c.plan])

    def compiles_ahead(self, candidate) -> bool:
        """Whether the candidate is compiled in the pool (else its build runs on the calling thread)."""
        return id(candidate) in self.futures

    def runner(self, candidate, timeout=None):
        """The candidate's runner; concurrent.futures.TimeoutError if its compile is not done in time."""
        future = self.futures.get(id(candidate))
        if future is not None:
            future.result(timeout=timeout)
        return make_runner(candidate, *self.shape, self.device)

    def close(self):
        if self.pool is not None:  # queued compiles are dropped; running ones finish in the background
            self.pool.shutdown(wait=False, cancel_futures=True)


# ---- checking and timing ----------------------------------------------------------------------

def reference_output(m, n, k, args):
    from . import spec
    a, b_q, _, b_scale_sh = args
    return spec.reference_gemm(a, b_q, spec.e8m0_unshuffle(b_scale_sh, n, k // spec.SCALE_BLOCK))


def harness_close(out, ref) -> bool:
    """The harness's check: |out - ref| <= 1e-2 + 1e-2*|ref|, NaN/inf matching."""
    out, ref = out.float(), ref.float()
    close = (out - ref).abs() <= ATOL + RTOL * ref.abs()
    same_special = (out.isnan() & ref.isnan()) | (out.isinf() & (out == ref))
    return bool((close | same_special).all())


def check(out, ref, what):
    """Raises WrongResult unless out matches ref within the harness's tolerance (NaN/inf matching)."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != ref.dtype:
        raise WrongResult(f"{what} returned {getattr(out, 'dtype', type(out).__name__)} "
                          f"{tuple(getattr(out, 'shape', ()))}, expected {ref.dtype} {tuple(ref.shape)}")
    if not harness_close(out, ref):
        worst = (out.float() - ref.float()).abs().nan_to_num(float("inf")).max().item()
        raise WrongResult(f"{what}: disagrees with the reference (max abs error {worst:.3g})")


def flush_bytes(device) -> int:
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    return max(2 * l2, MIN_FLUSH_BYTES)


class EventTimer:
    """µs of one call the harness's way: synchronize, flush the caches, event, call, event,
    synchronize. The flush buffer lives as long as the timer (one shape's tuning)."""

    def __init__(self, device):
        self.device = device
        self.flush = torch.empty(flush_bytes(device) // 4, dtype=torch.int32, device=device)
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def __call__(self, runner, args) -> float:
        return self.time_us(lambda: runner(*args))[1]

    def time_us(self, call):
        """(output, µs) of one call."""
        torch.cuda.synchronize(self.device)
        self.flush.fill_(1)
        self.start.record()
        out = call()
        self.end.record()
        torch.cuda.synchronize(self.device)
        return out, self.start.elapsed_time(self.end) * 1e3


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else 0.5 * (ordered[middle - 1] + ordered[middle])


def _retime(finalists, timer, args, reps):
    """Median µs of each finalist, repetitions interleaved so drift hits them alike."""
    samples = [[] for _ in finalists]
    for _ in range(reps):
        for i, (_, _, runner) in enumerate(finalists):
            samples[i].append(timer(runner, args))
    return [median(s) for s in samples]


# ---- the tuner --------------------------------------------------------------------------------

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
        warnings.warn(f"mxfp4_mm: {len(new)} candidate(s) dropped while tuning M={shape[0]} N={shape[1]} "
                      f"K={shape[2]}: {shown}", RuntimeWarning, stacklevel=4)


def _verified_output(candidate, runner, args, ref):
    out = runner(*args)
    check(out, ref, f"{candidate.backend}:{candidate.label}")
    return out


def tune(m, n, k, args, candidates, device, budget, timer, clock=time.perf_counter, ref=None):
    """The fastest verified candidate as a Choice (its `out` is a verified result for `args`), or
    None when none verified within the budget. Never raises for a candidate's failure."""
    deadline = clock() + budget
    ref = reference_output(m, n, k, args) if ref is None else ref
    failures, measured = [], []  # measured: (quick µs, candidate, runner)
    builder = Builder(candidates, m, n, k, device)
    try:
        for candidate in candidates:
            remaining = deadline - clock()
            if remaining <= 0:
                break
            what = f"{candidate.backend}:{candidate.label}"
            if measured and not builder.compiles_ahead(candidate) and remaining < INLINE_BUILD_RESERVE_S:
                _say(f"{what}: skipped (too little budget left for an inline build)")
                continue
            try:
                runner = builder.runner(candidate, timeout=remaining)
                _verified_output(candidate, runner, args, ref)
                quick = median([timer(runner, args) for _ in range(QUICK_REPS)])
            except concurrent.futures.TimeoutError:
                _say(f"{what}: not compiled within the budget")
                continue
            except Exception as exc:  # a candidate that fails must not take the call down
                failures.append((what, exc))
                _say(f"{what}: dropped ({type(exc).__name__}: {exc})")
                continue
            measured.append((quick, candidate, runner))
            _say(f"{what}: {quick:.2f} us")
        choice = _final_choice(measured, args, ref, timer, failures)
    finally:
        builder.close()
    _warn_failures(failures, (m, n, k))
    return choice


def _final_choice(measured, args, ref, timer, failures):
    """Re-time the best few; the fastest whose fresh output verifies wins."""
    finalists = sorted(measured, key=lambda row: row[0])[:FINALISTS]
    if not finalists:
        return None
    final = _retime(finalists, timer, args, FINAL_REPS) if len(finalists) > 1 else [finalists[0][0]]
    for us, (_, candidate, runner) in sorted(zip(final, finalists), key=lambda row: row[0]):
        try:
            out = _verified_output(candidate, runner, args, ref)
        except Exception as exc:
            failures.append((f"{candidate.backend}:{candidate.label}", exc))
            continue
        _say(f"chose {candidate.backend}:{candidate.label} ({us:.2f} us)")
        return Choice(candidate.backend, candidate.label, candidate.plan, runner, out, "tuned", us)
    return None


# ---- pinning ----------------------------------------------------------------------------------

def pinned(m, n, k):
    """(backend, label) that MXFP4_MM_PLAN pins for this shape, or None."""
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


def _pinned_choice(pin, m, n, k, args, candidates, device):
    """The pinned candidate, built and verified; errors are raised (a pin is an explicit request)."""
    backend, label = pin
    matches = [c for c in candidates if (c.backend, c.label) == pin]
    if not matches:
        offered = ", ".join(f"{c.backend}:{c.label}" for c in candidates)
        raise ValueError(f"{PLAN_ENV}: {backend}:{label} is not offered for M={m} N={n} K={k} on {device} "
                         f"(offered: {offered})")
    runner = make_runner(matches[0], m, n, k, device)
    out = _verified_output(matches[0], runner, args, reference_output(m, n, k, args))
    return Choice(backend, label, matches[0].plan, runner, out, "pinned", None)


# ---- the on-disk memo -------------------------------------------------------------------------

def _module_source(module) -> str:
    path = getattr(module, "__file__", None)
    if path:
        return Path(path).read_text()
    return "".join(linecache.getlines(f"<bundled {module.__name__}>"))  # served from submission.py


def _package_digest() -> str:
    """Hash of every loaded package module's source and every kernel source."""
    from . import kernels
    digest = hashlib.sha256()
    for name in sorted(n for n in sys.modules if n == __package__ or n.startswith(__package__ + ".")):
        digest.update(name.encode() + _module_source(sys.modules[name]).encode())
    names = sorted(kernels.BUNDLED) or kernels.source_names()
    for name in names:
        digest.update(name.encode() + kernels.read_source(name).encode())
    return digest.hexdigest()


def _driver_versions(device) -> str:
    from . import runtime
    import ctypes
    api = runtime.api_for(device)
    version = ctypes.c_int()
    getter = getattr(api.drv, "cuDriverGetVersion" if api.vendor == "nvidia" else "hipDriverGetVersion")
    getter(ctypes.byref(version))
    return f"{api.vendor}-driver-{version.value} {api.rtc_version}"


def _device_identity(device):
    """(name, arch, driver and compiler versions) of the device."""
    if device.type != "cuda":
        import platform
        return "cpu", platform.machine(), None
    from .devices import kernel_arch
    return torch.cuda.get_device_name(device), kernel_arch(device), _driver_versions(device)


def memo_key(device, m, n, k, backends) -> dict:
    """What a choice depends on besides the shape: the device, its software, our sources."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    name, arch, driver = _device_identity(device)
    return {
        "device": name,
        "arch": arch,
        "torch": torch.__version__,
        "toolkit": torch.version.hip or torch.version.cuda,
        "triton": triton_version,
        "driver": driver,
        "package": _package_digest(),
        "backends": list(backends),
        "shape": [m, n, k],
    }


def _memo_path(key) -> Path:
    from . import runtime
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]
    return runtime._cache_dir() / "autotune" / f"{digest}.json"


def memo_enabled() -> bool:
    return os.environ.get(MEMO_ENV, "1") != "0"


def read_memo(key):
    """(backend, label, budget_s) remembered for key, or None."""
    try:
        entry = json.loads(_memo_path(key).read_text())
        return entry["backend"], entry["label"], float(entry["budget_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_memo(key, choice, budget):
    path = _memo_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "backend": choice.backend, "label": choice.label,
                                   "us": choice.us, "budget_s": budget}, indent=1))
        os.replace(tmp, path)  # atomic: concurrent processes never read a partial file
    except OSError:
        pass  # a read-only cache only costs a re-tune next time


def _memo_choice(remembered, m, n, k, args, candidates, device, ref):
    """The remembered candidate, if still offered and still verified on these inputs."""
    backend, label, _ = remembered
    for candidate in candidates:
        if (candidate.backend, candidate.label) == (backend, label):
            try:
                runner = make_runner(candidate, m, n, k, device)
                out = _verified_output(candidate, runner, args, ref)
            except Exception:  # re-tune instead
                return None
            _say(f"{backend}:{label} from the memo")
            return Choice(backend, label, candidate.plan, runner, out, "memo", None)
    return None


# ---- entry point used by the dispatcher -------------------------------------------------------

def choose(m, n, k, args, backends, device, timer_factory=None, clock=time.perf_counter):
    """A Choice for this shape's first call (pinned, remembered, or measured now), or None: then
    the dispatcher's table path serves (budget 0, or nothing verified in time).
    backends = [(name, module)] available on the device, in dispatch order. Only a pin raises."""
    pin = pinned(m, n, k)
    budget = budget_s()
    if pin is None and budget == 0:
        return None
    candidates, failures = candidate_list(backends, m, n, k, device)
    if pin is not None:
        return _pinned_choice(pin, m, n, k, args, candidates, device)
    _warn_failures(failures, (m, n, k))
    try:
        return _remembered_or_tuned(m, n, k, args, candidates, device, budget, timer_factory or EventTimer, clock,
                                    [name for name, _ in backends])
    except Exception as exc:  # e.g. no memory for the flush buffer: the table path serves
        _warn_failures([("autotune", exc)], (m, n, k))
        return None


def _remembered_or_tuned(m, n, k, args, candidates, device, budget, timer_factory, clock, names):
    started = clock()
    ref = reference_output(m, n, k, args)
    key = _safe_memo_key(device, m, n, k, names)
    remembered = read_memo(key) if key else None
    if remembered is not None and remembered[2] >= budget:
        choice = _memo_choice(remembered, m, n, k, args, candidates, device, ref)
        if choice is not None:
            return choice
    timer = timer_factory(device)
    choice = tune(m, n, k, args, candidates, device, budget - (clock() - started), timer, clock, ref)
    del timer  # frees the flush buffer (to torch's allocator cache) before the harness times
    if choice is not None and key:
        write_memo(key, choice, budget)
    return choice


def _safe_memo_key(device, m, n, k, names):
    if not memo_enabled():
        return None
    try:
        return memo_key(device, m, n, k, names)
    except Exception:  # a version we cannot read only costs the memo
        return None

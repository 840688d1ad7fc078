"""Picks a backend for the device and shape, and caches one runner per (device, M, N, K).

Order by device (first that builds a runner wins; a failure warns once and falls through):
  gfx950 (MI355X):   hip -> triton -> aiter -> torch
  other ROCm GPUs:   aiter -> triton -> torch
  NVIDIA:            cuda -> triton -> torch
  CPU:               torch
MXFP4_MM_BACKEND=name forces one backend (errors are raised, not hidden).
MXFP4_MM_EXTRA_BACKENDS="name=module,..." puts more backend modules (importable by that dotted
name) ahead of the device's order: your own kernels, or the tests' fault injection.

On a GPU a shape's first call is served from the tuning records (autotune.py): the fastest
candidate measured on this machine that is proven here and verifies on the call's inputs,
measured now in a child process if the shape was never prepared. When none is (budget 0, nothing
verified), the table path serves: each backend's first plan in the order above, proven first,
its first call checked against the reference GEMM; a backend that disagrees is dropped like one
that fails to build (MXFP4_MM_VERIFY_FIRST_CALL=0 skips that check on the table path).
MXFP4_MM_SERVED_LOG=path appends one line per shape's first call: "MxNxK backend:label how".
"""

import collections
import importlib
import os
import warnings

import torch

from . import autotune
from .devices import capturing, kernel_arch
from .tuning import tuner, verify

BACKEND_MODULES = {
    "hip": "mxfp4_mm.backends.hip",
    "cuda": "mxfp4_mm.backends.cuda",
    "triton": "mxfp4_mm.backends.triton",
    "aiter": "mxfp4_mm.backends.aiter_backend",
    "torch": "mxfp4_mm.backends.torch_backend",
}
ORDER_BY_DEVICE_KIND = {
    "gfx950": ("hip", "triton", "aiter", "torch"),
    "rocm": ("aiter", "triton", "torch"),
    "nvidia": ("cuda", "triton", "torch"),
    "cpu": ("torch",),
}
FORCE_ENV = "MXFP4_MM_BACKEND"
EXTRA_ENV = "MXFP4_MM_EXTRA_BACKENDS"
VERIFY_ENV = "MXFP4_MM_VERIFY_FIRST_CALL"  # "0" skips the first-call check against the reference
SERVED_LOG_ENV = "MXFP4_MM_SERVED_LOG"

Served = collections.namedtuple("Served", "backend label runner")

_runners = {}          # (device, m, n, k) -> Served
_broken = set()        # (backend name, device) that failed once
_device_kinds = {}
_last_served = [None]
WrongResult = verify.WrongResult


def device_kind(device: torch.device) -> str:
    if device.type != "cuda":
        return "cpu"
    if device not in _device_kinds:
        if torch.version.hip:
            _device_kinds[device] = "gfx950" if kernel_arch(device) == "gfx950" else "rocm"
        else:
            _device_kinds[device] = "nvidia"
    return _device_kinds[device]


def extra_backends() -> dict:
    """{name: module path} from MXFP4_MM_EXTRA_BACKENDS."""
    extra = {}
    for part in filter(None, (p.strip() for p in os.environ.get(EXTRA_ENV, "").split(","))):
        name, eq, module = part.partition("=")
        if not (eq and name.strip() and module.strip()):
            raise ValueError(f"{EXTRA_ENV}: {part!r} must be 'name=dotted.module.path'")
        extra[name.strip()] = module.strip()
    return extra


def load_backend(name: str):
    modules = {**BACKEND_MODULES, **extra_backends()}
    if name not in modules:
        raise ValueError(f"{FORCE_ENV}: unknown backend {name!r}; choose from {sorted(modules)}")
    return importlib.import_module(modules[name])


def candidate_backends(device: torch.device):
    forced = os.environ.get(FORCE_ENV)
    if forced:
        return (forced,)
    return tuple(extra_backends()) + ORDER_BY_DEVICE_KIND[device_kind(device)]


def _disable(name, device, exc, stacklevel=3):
    _broken.add((name, device))
    warnings.warn(f"mxfp4_mm: backend {name!r} failed on {device} ({type(exc).__name__}: {exc}); "
                  "falling back to the next one", RuntimeWarning, stacklevel=stacklevel + 1)


def available_backends(device):
    """[(name, module)] of the backends that can run on `device`, in dispatch order."""
    found = []
    for name in candidate_backends(device):
        if (name, device) in _broken:
            continue
        try:
            module = load_backend(name)
            if module.is_available(device):
                found.append((name, module))
        except Exception as exc:  # unavailable like a backend that fails to build
            if os.environ.get(FORCE_ENV):
                raise
            _disable(name, device, exc)
    return found


def _first_plan(name, module, m, n, k, device):
    """The backend's first candidate (its table plan), or None for a backend without candidates."""
    candidates, failures = tuner.candidate_list([(name, module)], m, n, k, device)
    if failures:
        raise failures[0][1]
    return candidates[0] if candidates else None


def _try_backend(name, device, m, n, k, args):
    """(Served, output) of the backend's table plan, proven first and checked; None (after one
    warning) if anything fails. With MXFP4_MM_BACKEND set, failures raise."""
    try:
        module = load_backend(name)
        if not module.is_available(device):
            return None
        if tuner.is_reference(module):
            runner = module.make_runner(m, n, k, device)
            return Served(name, "default", runner), runner(*args)
        candidate = _first_plan(name, module, m, n, k, device)
        if candidate is None:
            return None
        if device.type == "cuda" and not autotune.ensure_proven(device, (m, n, k), candidate, [(name, module)],
                                                                candidate_backends(device)):
            raise RuntimeError(f"{tuner.full_label(candidate)} faulted, hung or failed when first run "
                               f"in a child process for M={m} N={n} K={k}")
        runner = tuner.make_runner(candidate, m, n, k, device)
        out = runner(*args)
        if os.environ.get(VERIFY_ENV, "1") != "0":
            verify.check(out, verify.reference_output(m, n, k, args),
                         f"{name}, first call for M={m} N={n} K={k}")
        return Served(name, candidate.label, runner), out
    except Exception as exc:  # a backend that cannot build or run must not break the call
        if os.environ.get(FORCE_ENV):
            raise RuntimeError(f"mxfp4_mm: the forced backend {name!r} ({FORCE_ENV}) failed for "
                               f"M={m} N={n} K={k} on {device}: {type(exc).__name__}: {exc}") from exc
        _disable(name, device, exc)
        return None


def _tuned(m, n, k, args):
    """(Served, verified output) from the tuning records, or None (table path)."""
    device = args[0].device
    if not autotune.should_tune(device):
        pin = autotune.pinned(m, n, k)  # a pin is checked everywhere: a bad one raises
        if pin is None:
            return None
        choice = autotune.pinned_choice(pin, m, n, k, args, available_backends(device), candidate_backends(device),
                                        device)
    else:
        choice = autotune.choose(m, n, k, args, available_backends(device), candidate_backends(device), device)
    if choice is None:
        return None
    return Served(choice.backend, choice.label, choice.runner), choice.out


def _table_path(m, n, k, args):
    device = args[0].device
    for name in candidate_backends(device):
        if (name, device) in _broken:
            continue
        built = _try_backend(name, device, m, n, k, args)
        if built is not None:
            return built
    forced = os.environ.get(FORCE_ENV)
    which = f"the forced backend {forced!r} ({FORCE_ENV})" if forced else "no backend"
    raise RuntimeError(f"mxfp4_mm: {which} could run M={m} N={n} K={k} on {device}")


def _log_served(m, n, k, served, how):
    path = os.environ.get(SERVED_LOG_ENV)
    if path:
        try:
            with open(path, "a") as log:
                log.write(f"{m}x{n}x{k} {served.backend}:{served.label} {how}\n")
        except OSError:
            pass


def run_gemm(m, n, k, a, b_q, b_shuffle, b_scale_sh):
    """C = A @ B^T for validated inputs, through the cached runner for this device and shape.
    The first call of a shape returns the verified output of the candidate that won."""
    key = (a.device, m, n, k)
    served = _runners.get(key)
    if served is not None:
        _last_served[0] = served
        return served.runner(a, b_q, b_shuffle, b_scale_sh)
    if a.device.type == "cuda" and capturing():
        # Building and checking a runner synchronizes, which a graph capture forbids; failing
        # here leaves every backend usable once the shape is warmed up outside the capture.
        raise RuntimeError(f"mxfp4_mm: first call for M={m} N={n} K={k} inside a CUDA graph capture; "
                           "call this shape once before capturing")
    args = (a, b_q, b_shuffle, b_scale_sh)
    tuned = _tuned(m, n, k, args)
    served, out = tuned or _table_path(m, n, k, args)
    _runners[key] = _last_served[0] = served
    _log_served(m, n, k, served, "records" if tuned else "table")
    return out


def last_backend_name():
    """Name of the backend that served the most recent call (None before any call)."""
    return _last_served[0].backend if _last_served[0] else None


def last_choice():
    """"backend:plan label" that served the most recent call (None before any call)."""
    served = _last_served[0]
    return f"{served.backend}:{served.label}" if served else None


def reset():
    """Forget runners and failures (tests; after changing FORCE_ENV)."""
    _runners.clear()
    _broken.clear()
    _last_served[0] = None

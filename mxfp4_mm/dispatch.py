"""Picks a backend for the device and shape, and caches one runner per (device, M, N, K).

Order by device (first that builds a runner wins; a failure warns once and falls through):
  gfx950 (MI355X):   hip -> triton -> aiter -> torch
  other ROCm GPUs:   aiter -> triton -> torch
  NVIDIA:            cuda -> triton -> torch
  CPU:               torch
MXFP4_MM_BACKEND=name forces one backend (errors are raised, not hidden).

On a GPU a shape's first call is tuned (autotune.py): every plan of every backend above is built,
checked against the spec's reference GEMM and timed; the fastest correct one serves the shape.
With MXFP4_MM_TUNE_BUDGET_S=0, or when no candidate verifies within the budget, the table path
serves: each backend's default plan in the order above, its first call checked against the
reference GEMM; a backend that disagrees is dropped like one that fails to build
(MXFP4_MM_VERIFY_FIRST_CALL=0 skips that check on the table path).
"""

import collections
import importlib
import os
import warnings

import torch

from . import autotune
from .devices import capturing, kernel_arch  # noqa: F401  (backends and tools use dispatch.kernel_arch)

BACKEND_MODULES = {
    "hip": "mxfp4_mm.backends.hip",
    "cuda": "mxfp4_mm.backends.cuda",
    "triton": "mxfp4_mm.backends.triton_backend",
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
VERIFY_ENV = "MXFP4_MM_VERIFY_FIRST_CALL"  # "0" skips the first-call check against the reference

Served = collections.namedtuple("Served", "backend label runner")

_runners = {}          # (device, m, n, k) -> Served
_broken = set()        # (backend name, device) that failed once
_device_kinds = {}
_last_served = [None]


def device_kind(device: torch.device) -> str:
    if device.type != "cuda":
        return "cpu"
    if device not in _device_kinds:
        if torch.version.hip:
            _device_kinds[device] = "gfx950" if kernel_arch(device) == "gfx950" else "rocm"
        else:
            _device_kinds[device] = "nvidia"
    return _device_kinds[device]


def load_backend(name: str):
    if name not in BACKEND_MODULES:
        raise ValueError(f"{FORCE_ENV}: unknown backend {name!r}; choose from {sorted(BACKEND_MODULES)}")
    return importlib.import_module(BACKEND_MODULES[name])


def candidate_backends(device: torch.device):
    forced = os.environ.get(FORCE_ENV)
    if forced:
        return (forced,)
    return ORDER_BY_DEVICE_KIND[device_kind(device)]


WrongResult = autotune.WrongResult


def _check_against_reference(name, out, m, n, k, args):
    """The first call of a backend for a shape is compared with the spec's GEMM (the harness's
    tolerance), so a kernel that is wrong on this machine (e.g. never run on this GPU before) is
    dropped instead of returning wrong numbers. Costs one reference GEMM per shape, once."""
    autotune.check(out, autotune.reference_output(m, n, k, args),
                   f"{name}, first call for M={m} N={n} K={k}")


def _try_backend(name, device, m, n, k, args):
    """Build the runner and run it once; None (after one warning) if anything fails."""
    try:
        backend = load_backend(name)
        if not backend.is_available(device):
            return None
        runner = backend.make_runner(m, n, k, device)
        out = runner(*args)
        if name != "torch" and os.environ.get(VERIFY_ENV, "1") != "0":
            _check_against_reference(name, out, m, n, k, args)
        return Served(name, autotune.runner_label(backend, runner), runner), out
    except Exception as exc:  # a backend that cannot build or run must not break the call
        if os.environ.get(FORCE_ENV):
            raise
        _broken.add((name, device))
        warnings.warn(f"mxfp4_mm: backend {name!r} failed on {device} ({type(exc).__name__}: {exc}); "
                      "falling back to the next one", RuntimeWarning, stacklevel=3)
        return None


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
            _broken.add((name, device))
            warnings.warn(f"mxfp4_mm: backend {name!r} failed on {device} ({type(exc).__name__}: {exc})",
                          RuntimeWarning, stacklevel=3)
    return found


def _tuned(m, n, k, args):
    """(Served, verified output) of the first-use tuner, or None (table path)."""
    if not autotune.should_tune(args[0].device):
        return None
    choice = autotune.choose(m, n, k, args, available_backends(args[0].device), args[0].device)
    if choice is None:
        return None
    return Served(choice.backend, choice.label, choice.runner), choice.out


def _table_path(m, n, k, args):
    for name in candidate_backends(args[0].device):
        if (name, args[0].device) in _broken:
            continue
        built = _try_backend(name, args[0].device, m, n, k, args)
        if built is not None:
            return built
    raise RuntimeError(f"mxfp4_mm: no backend could run M={m} N={n} K={k} on {args[0].device}")


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
    served, out = _tuned(m, n, k, args) or _table_path(m, n, k, args)
    _runners[key] = _last_served[0] = served
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

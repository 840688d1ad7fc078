"""Picks a backend for the device and shape, and caches one runner per (device, M, N, K).

Order by device (first that builds a runner wins; a failure warns once and falls through):
  gfx950 (MI355X):   hip -> triton -> aiter -> torch
  other ROCm GPUs:   aiter -> triton -> torch
  NVIDIA:            cuda -> triton -> torch
  CPU:               torch
MXFP4_MM_BACKEND=name forces one backend (errors are raised, not hidden).
Each backend's first call for a shape is checked against the spec's reference GEMM; a backend
that disagrees is dropped like one that fails to build (MXFP4_MM_VERIFY_FIRST_CALL=0 skips this).
"""

import importlib
import os
import warnings

import torch

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

_runners = {}          # (device, m, n, k) -> (backend name, runner)
_broken = set()        # (backend name, device) that failed once
_device_kinds = {}
_last_backend = [None]


def kernel_arch(device: torch.device) -> str:
    """The GPU's code-object target: "gfx950", "sm_90", ..."""
    props = torch.cuda.get_device_properties(device)
    if torch.version.hip:
        return props.gcnArchName.split(":")[0]
    return f"sm_{props.major}{props.minor}"


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


class WrongResult(RuntimeError):
    pass


def _check_against_reference(name, out, m, n, k, a, b_q, b_shuffle, b_scale_sh):
    """The first call of a backend for a shape is compared with the spec's GEMM (the harness's
    tolerance), so a kernel that is wrong on this machine (e.g. never run on this GPU before) is
    dropped instead of returning wrong numbers. Costs one reference GEMM per shape, once."""
    from . import spec
    ref = spec.reference_gemm(a, b_q, spec.e8m0_unshuffle(b_scale_sh, n, k // spec.SCALE_BLOCK))
    if not torch.allclose(out.float(), ref.float(), rtol=1e-2, atol=1e-2, equal_nan=True):
        worst = (out.float() - ref.float()).abs().nan_to_num(float("inf")).max().item()
        raise WrongResult(f"{name} disagrees with the reference on its first call for "
                          f"M={m} N={n} K={k} (max abs error {worst:.3g})")


def _try_backend(name, device, m, n, k, args):
    """Build the runner and run it once; None (after one warning) if anything fails."""
    try:
        backend = load_backend(name)
        if not backend.is_available(device):
            return None
        runner = backend.make_runner(m, n, k, device)
        out = runner(*args)
        if name != "torch" and os.environ.get(VERIFY_ENV, "1") != "0":
            _check_against_reference(name, out, m, n, k, *args)
        return runner, out
    except Exception as exc:  # a backend that cannot build or run must not break the call
        if os.environ.get(FORCE_ENV):
            raise
        _broken.add((name, device))
        warnings.warn(f"mxfp4_mm: backend {name!r} failed on {device} ({type(exc).__name__}: {exc}); "
                      "falling back to the next one", RuntimeWarning, stacklevel=3)
        return None


def run_gemm(m, n, k, a, b_q, b_shuffle, b_scale_sh):
    """C = A @ B^T for validated inputs, through the cached runner for this device and shape."""
    key = (a.device, m, n, k)
    entry = _runners.get(key)
    if entry is not None:
        _last_backend[0] = entry[0]
        return entry[1](a, b_q, b_shuffle, b_scale_sh)
    args = (a, b_q, b_shuffle, b_scale_sh)
    for name in candidate_backends(a.device):
        if (name, a.device) in _broken:
            continue
        built = _try_backend(name, a.device, m, n, k, args)
        if built is not None:
            _runners[key] = (name, built[0])
            _last_backend[0] = name
            return built[1]
    raise RuntimeError(f"mxfp4_mm: no backend could run M={m} N={n} K={k} on {a.device}")


def last_backend_name():
    """Name of the backend that served the most recent call (None before any call)."""
    return _last_backend[0]


def reset():
    """Forget runners and failures (tests; after changing FORCE_ENV)."""
    _runners.clear()
    _broken.clear()

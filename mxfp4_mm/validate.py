"""Input checks for the GEMM entry points: clear errors naming the argument and the rule."""

import torch

from .spec import (CODE_DTYPES, CODE_RULE, SCALE_BLOCK, SCALE_DTYPES, SCALE_RULE, _require_dtype,
                   _require_tensor)


def _require_contiguous(name, t):
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (its byte layout is read directly)")


def _require_shape(name, t, expected):
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {list(expected)}, got {list(t.shape)}")


def scale_cols(k: int) -> int:
    """Columns of a shuffled scale tensor for K: K/32 padded to a multiple of 8."""
    return -(-(k // SCALE_BLOCK) // 8) * 8


# Signatures of inputs that passed the checks -> (M, N, K). A signature holds everything the checks
# read (types, shapes, dtypes, devices, the B tensors' contiguity), never data; a repeated call
# costs one tuple and one lookup instead of ~25 tensor queries. Bounded for callers whose shapes vary.
_valid_signatures = {}
_MAX_SIGNATURES = 4096


def check_gemm_inputs(a, b_q, b_scale_sh, b_shuffle=None):
    """Validate (A, B_q, B_scale_sh[, B_shuffle]); return (M, N, K).

    A: bf16 [M, K], K % 64 == 0, any M >= 0 (M = 0 is checked like any other M). B_q: fp4x2/uint8 [N, K/2], N % 16 == 0.
    B_scale_sh: e8m0/uint8 [R, ceil(K/256)*8] with R >= N and R % 32 == 0 (aiter pads R to 256).
    B_shuffle (optional): like B_q. All on A's device; the B tensors contiguous.
    """
    try:
        signature = (
            type(a), a.shape, a.dtype, a.device,
            type(b_q), b_q.shape, b_q.dtype, b_q.device, b_q.is_contiguous(),
            type(b_scale_sh), b_scale_sh.shape, b_scale_sh.dtype, b_scale_sh.device, b_scale_sh.is_contiguous(),
            None if b_shuffle is None else (type(b_shuffle), b_shuffle.shape, b_shuffle.dtype, b_shuffle.device,
                                            b_shuffle.is_contiguous()))
        mnk = _valid_signatures.get(signature)
    except (AttributeError, TypeError):  # not tensor-like, or symbolic sizes: check without caching
        return _check_gemm_inputs(a, b_q, b_scale_sh, b_shuffle)
    if mnk is None:
        mnk = _check_gemm_inputs(a, b_q, b_scale_sh, b_shuffle)
        if len(_valid_signatures) >= _MAX_SIGNATURES:
            _valid_signatures.clear()
        _valid_signatures[signature] = mnk
    return mnk


def _check_gemm_inputs(a, b_q, b_scale_sh, b_shuffle):
    _require_tensor("A", a)
    _require_tensor("B_q", b_q)
    _require_tensor("B_scale_sh", b_scale_sh)
    if a.dtype != torch.bfloat16:
        raise TypeError(f"A must be torch.bfloat16, got dtype {a.dtype}")
    if a.dim() != 2:
        raise ValueError(f"A must be 2-D [M, K], got shape {list(a.shape)}")
    m, k = a.shape
    if k % 64:
        raise ValueError(f"K (A.shape[1]) must be a multiple of 64, got {k}")
    _require_dtype("B_q", b_q, CODE_DTYPES, CODE_RULE)
    if b_q.dim() != 2:
        raise ValueError(f"B_q must be 2-D [N, K/2], got shape {list(b_q.shape)}")
    n = b_q.shape[0]
    if n % 16 or n < 16:
        raise ValueError(f"N (B_q.shape[0]) must be a positive multiple of 16, got {n}")
    _require_shape("B_q", b_q, (n, k // 2))
    _require_dtype("B_scale_sh", b_scale_sh, SCALE_DTYPES, SCALE_RULE)
    rows = b_scale_sh.shape[0] if b_scale_sh.dim() == 2 else -1
    if b_scale_sh.dim() != 2 or rows < n or rows % 32 or b_scale_sh.shape[1] != scale_cols(k):
        raise ValueError(
            f"B_scale_sh must be the shuffled scales [R, {scale_cols(k)}] with R >= N={n} and "
            f"R % 32 == 0 (e8m0_shuffle output), got shape {list(b_scale_sh.shape)}")
    tensors = [("B_q", b_q), ("B_scale_sh", b_scale_sh)]
    if b_shuffle is not None:
        _require_tensor("B_shuffle", b_shuffle)
        _require_dtype("B_shuffle", b_shuffle, CODE_DTYPES, CODE_RULE)
        _require_shape("B_shuffle", b_shuffle, (n, k // 2))
        tensors.append(("B_shuffle", b_shuffle))
    for name, t in tensors:
        if t.device != a.device:
            raise ValueError(f"{name} is on {t.device} but A is on {a.device}: all inputs must share a device")
        _require_contiguous(name, t)
    return m, n, k

"""mxfp4-mm: a4w4 MXFP4 GEMM (bf16 A quantized on the fly, pre-quantized MXFP4 B) -> bf16 C.

Entry points:
  custom_kernel(data)  -- the GPU MODE amd-mxfp4-mm signature: data = (A, B, B_q, B_shuffle, B_scale_sh)
  gemm(A, B_q, B_scale_sh, B_shuffle=None) -- the same GEMM for library users
"""

import torch

from . import dispatch
from .validate import check_gemm_inputs

__all__ = ["custom_kernel", "gemm", "last_backend_name", "last_choice"]


def _as_bytes(t):
    return t if t is None or t.dtype == torch.uint8 else t.view(torch.uint8)


def gemm(a, b_q, b_scale_sh, b_shuffle=None):
    """C [M, N] bf16 = dequant(quant_mxfp4(A)) @ dequant(B)^T, fp32 accumulation.

    A: bf16 [M, K] (K % 64 == 0; M = 0 gives an empty [0, N]); B_q: packed fp4 [N, K/2] (N % 16 == 0);
    B_scale_sh: e8m0 scales after e8m0_shuffle, [R >= N, ceil(K/256)*8];
    B_shuffle: optional shuffle_weight(B_q). Returns a new tensor on every call.
    """
    m, n, k = check_gemm_inputs(a, b_q, b_scale_sh, b_shuffle)
    if m == 0:  # torch.mm's answer for zero rows; no backend is asked to launch an empty grid
        return torch.empty((0, n), dtype=torch.bfloat16, device=a.device)
    a = a.contiguous()  # a strided A is read row-major by every backend
    return dispatch.run_gemm(m, n, k, a, _as_bytes(b_q), _as_bytes(b_shuffle), _as_bytes(b_scale_sh))


def custom_kernel(data):
    """GPU MODE entry point: data = (A, B, B_q, B_shuffle, B_scale_sh); B (bf16) is not read."""
    if not isinstance(data, (tuple, list)) or len(data) != 5:
        raise TypeError("data must be the 5-tuple (A, B, B_q, B_shuffle, B_scale_sh)")
    a, _, b_q, b_shuffle, b_scale_sh = data
    return gemm(a, b_q, b_scale_sh, b_shuffle)


last_backend_name = dispatch.last_backend_name
last_choice = dispatch.last_choice  # "backend:plan" of the most recent call

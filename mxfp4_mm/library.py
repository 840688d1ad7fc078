"""`torch.ops.mxfp4_mm.gemm`: the GEMM as a torch.library custom op, for use under torch.compile.

    import mxfp4_mm.library  # registers the op once
    c = torch.ops.mxfp4_mm.gemm(a, b_q, b_scale_sh)            # or mxfp4_mm.library.gemm(...)
    c = torch.ops.mxfp4_mm.gemm(a, b_q, b_scale_sh, b_shuffle)

Arguments as `mxfp4_mm.gemm`: A bf16 [M, K] (K % 64 == 0); B_q packed fp4 [N, K/2] (N % 16 == 0,
uint8 or float4_e2m1fn_x2); B_scale_sh e8m0 scales after aiter's e8m0_shuffle [R >= N, ceil(K/256)*8]
(uint8 or float8_e8m0fnu); B_shuffle optional shuffle_weight(B_q). Returns a new bf16 C [M, N] =
dequant(quant_mxfp4(A)) @ dequant(B)^T with fp32 accumulation, computed by the fastest backend for
the device (see `mxfp4_mm.dispatch`).

torch.compile treats the op as opaque: the fake implementation gives dynamo/inductor the output's
shape and dtype without running a kernel; the call itself runs eagerly inside the compiled graph.
The op has no gradient: backward through it raises.

The op is defined with torch.library.Library rather than the `custom_op` decorator, whose Python
wrappers cost more per eager call (torch 2.13 CPU, a no-op body: 34 -> 20 us with grad mode on,
12.5 -> 6 us under torch.inference_mode).
"""

from typing import Optional

import torch

from . import gemm as _gemm

NAMESPACE = "mxfp4_mm"
OP_NAME = "mxfp4_mm::gemm"
SCHEMA = "gemm(Tensor a, Tensor b_q, Tensor b_scale_sh, Tensor? b_shuffle=None) -> Tensor"


def _registered():
    try:
        torch.ops.mxfp4_mm.gemm
        return True
    except (AttributeError, RuntimeError):
        return False


def _output_like(a, b_q, b_scale_sh, b_shuffle=None):
    return a.new_empty((a.shape[0], b_q.shape[0]), dtype=torch.bfloat16)


def _no_gradient(ctx, grad):
    raise RuntimeError(f"{OP_NAME} has no gradient (an inference GEMM of quantized operands); "
                       "call it under torch.no_grad() or on detached inputs")


def _register():
    """Define the op; the returned Library owns the registrations (they end when it is freed)."""
    library = torch.library.Library(NAMESPACE, "DEF")
    library.define(SCHEMA)
    library.impl("gemm", _gemm, "CompositeExplicitAutograd")
    torch.library.register_fake(OP_NAME, _output_like, lib=library)
    torch.library.register_autograd(OP_NAME, _no_gradient, lib=library)
    return library


if not _registered():  # the package and a bundled submission may both import this module
    _LIBRARY = _register()


def gemm(a: torch.Tensor, b_q: torch.Tensor, b_scale_sh: torch.Tensor,
         b_shuffle: Optional[torch.Tensor] = None) -> torch.Tensor:
    """C [M, N] bf16 through the custom op (see the module docstring)."""
    return torch.ops.mxfp4_mm.gemm(a, b_q, b_scale_sh, b_shuffle)

"""Triton backend: one `tl.dot_scaled` kernel launch per call, A quantized inside the kernel.

Portable fallback: native scaled MFMA on gfx950, emulated (fp4 -> bf16 MMA) on Hopper.
Plans come from `tables/triton_plans.py` per kernel arch and shape, else from `general_plan`.
The split-K workspace and per-tile counters come from `scratch.split_k_workspace`, one per
(device, current queue, shape, plan): calls on two queues never share them.
"""

import collections

import torch

from ..dispatch import kernel_arch
from ..scratch import split_k_workspace

NAME = "triton"

Plan = collections.namedtuple("Plan", "block_m block_n block_k split_k num_warps num_stages")


def is_available(device: torch.device) -> bool:
    if device.type != "cuda":
        return False
    try:
        import triton  # noqa: F401
        import triton.language as tl
    except ImportError:
        return False
    return hasattr(tl, "dot_scaled")


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def split_k_steps(k_steps: int, split_k: int):
    """(split_k, steps per split) with no empty split: every split gets ceil(k_steps/split_k) steps but the last."""
    split_k = max(1, min(split_k, k_steps))
    steps = -(-k_steps // split_k)
    return -(-k_steps // steps), steps


def general_plan(m: int, n: int, k: int, compute_units: int) -> Plan:
    """Small-M GEMMs are bandwidth-bound: tiles of 16..64 rows by 64 columns, and split K until
    the launch has about one program per compute unit."""
    block_m = min(64, max(16, _next_pow2(m)))
    block_n = 64
    block_k = 256 if k >= 256 else 128
    tiles = -(-m // block_m) * -(-n // block_n)
    split_k = split_k_steps(-(-k // block_k), round(compute_units / tiles))[0]
    return Plan(block_m, block_n, block_k, split_k, 4, 2)


def plan_for(m: int, n: int, k: int, device: torch.device) -> Plan:
    from ..tables.triton_plans import PLANS
    listed = PLANS.get(kernel_arch(device), {}).get((m, n, k))
    if listed is not None:
        return Plan(*listed)
    return general_plan(m, n, k, torch.cuda.get_device_properties(device).multi_processor_count)


def make_launcher(m, n, k, device, plan: Plan, a_prequantized=False):
    """launch(a, a_scales, b_q, b_scale_sh, out): one kernel launch writing out [m, n]."""
    from .. import triton_kernels

    split_k, steps = split_k_steps(-(-k // plan.block_k), plan.split_k)
    tiles = -(-m // plan.block_m) * -(-n // plan.block_n)
    grid = (tiles, split_k)
    partials_shape = (split_k * tiles * plan.block_m * plan.block_n if split_k > 1 else 1,)
    workspace_key = (NAME, m, n, k, plan, a_prequantized)
    constants = dict(BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, BLOCK_K=plan.block_k, USE_SPLIT_K=split_k > 1,
                     A_PREQUANTIZED=a_prequantized, num_warps=plan.num_warps, num_stages=plan.num_stages)
    kernel = triton_kernels.mxfp4_gemm_kernel[grid]

    def launch(a, a_scales, b_q, b_scale_sh, out):
        partial, counters = split_k_workspace(device, workspace_key, partials_shape, tiles)
        kernel(a, a_scales, b_q, b_scale_sh, out, partial, counters, m, n, k, b_scale_sh.shape[1],
               split_k, steps, tiles, **constants)

    return launch


def make_runner(m: int, n: int, k: int, device: torch.device):
    launch = make_launcher(m, n, k, device, plan_for(m, n, k, device))

    def run(a, b_q, b_shuffle, b_scale_sh):
        out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
        launch(a, a, b_q, b_scale_sh, out)  # a_scales unused when A is quantized in the kernel
        return out

    return run


def quantize(x: torch.Tensor, block_m: int = 16, block_k: int = 256):
    """Debug path: the kernel's fused A quantization alone -> (codes [M, K/2], scales [M, K/32])."""
    from .. import triton_kernels

    m, k = x.shape
    if k % block_k:
        raise ValueError(f"quantize: K={k} must be a multiple of block_k={block_k}")
    codes = torch.empty((m, k // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((m, k // 32), dtype=torch.uint8, device=x.device)
    grid = (-(-m // block_m), k // block_k)
    triton_kernels.quantize_kernel[grid](x.contiguous(), codes, scales, m, k, BLOCK_M=block_m, BLOCK_K=block_k)
    return codes, scales

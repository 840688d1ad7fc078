"""CUDA backend (Hopper, sm_90+): one launch of `kernels/mxfp4_gemm_sm90.cu` per call.

The kernel quantizes A itself, reads B codes once from B_q and B scales from the shuffled
B_scale_sh, runs bf16 tensor-core MMAs with the scales folded into the operands, and sums split-K
partials inside a thread-block cluster. It keeps no state between calls (no scratch, no counters),
so one runner may serve any queue. Compiled once per shape through NVRTC (disk-cached).
"""

import ctypes

import torch

from .. import runtime
from ..kernels import read_source
from ..tables.cuda_plans import (  # noqa: F401  (re-exported: tests and tools use cuda.<name>)
    MAX_SMEM, PLANS, WGMMA_BMS, Plan, chunks, chunks_per_warp, compile_options, general_plan, grid,
    is_valid, plan_cost, smem_bytes)

NAME = "cuda"
SOURCE = "mxfp4_gemm_sm90.cu"
_MAX_DYNAMIC_SHARED_ATTR = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def is_available(device: torch.device) -> bool:
    if device.type != "cuda" or torch.version.hip:
        return False
    if torch.cuda.get_device_capability(device) < (9, 0):
        return False  # clusters, mapa and bf16x2 multiplies need sm_90
    return runtime.is_available(device)


def plan_for(m: int, n: int, k: int, device: torch.device) -> Plan:
    listed = PLANS.get((m, n, k))
    if listed is not None:
        return Plan(*listed)
    return general_plan(m, n, k, torch.cuda.get_device_properties(device).multi_processor_count)


# ---- launch ---------------------------------------------------------------------------------

def compile_target(device: torch.device, plan: Plan) -> str:
    """The compile target for `plan`: the device's own, or sm_90a for wgmma plans (that target
    runs only on sm_90 GPUs)."""
    if not plan.wg:
        return runtime.kernel_arch(device)
    if torch.cuda.get_device_capability(device) != (9, 0):
        raise ValueError(f"cuda: wgmma plan {plan} needs an sm_90 GPU")
    return "sm_90a"


def _module(m, n, k, device, plan, extra_options=()):
    return runtime.load_module(read_source(SOURCE), device, compile_options(m, n, k, plan) + tuple(extra_options),
                               compile_target(device, plan))


def make_launcher(m: int, n: int, k: int, device: torch.device, plan: Plan, extra_options=()):
    """launch(a, b_q, b_scale_sh, out): one kernel launch writing out [m, n].
    extra_options: more -D flags (timing experiments, e.g. tools/ablate_cuda.py)."""
    if not is_valid(m, n, k, plan):
        raise ValueError(f"cuda: invalid plan {plan} for M={m} N={n} K={k}")
    device = runtime.normalize_device(device)
    function = _module(m, n, k, device, plan, extra_options).function("mxfp4_gemm")
    shared = smem_bytes(m, n, k, plan)
    api = runtime.api_for(device)
    api.check(api.drv.cuFuncSetAttribute(function.handle, _MAX_DYNAMIC_SHARED_ATTR, ctypes.c_int(shared)),
              "cuFuncSetAttribute")
    launch = function.launcher("pppp")
    dims, block = grid(m, n, plan), (plan.wn * plan.wk * 32, 1, 1)

    def run(a, b_q, b_scale_sh, out):
        launch(dims, block, shared, a, b_q, b_scale_sh, out)

    return run


def make_runner(m: int, n: int, k: int, device: torch.device, plan: Plan = None, extra_options=()):
    launch = make_launcher(m, n, k, device, plan or plan_for(m, n, k, device), extra_options)

    def run(a, b_q, b_shuffle, b_scale_sh):
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
        launch(a, b_q, b_scale_sh, out)
        return out

    return run


def quantize(x: torch.Tensor):
    """Debug path: the kernel's A quantization alone -> (codes [M, K/2], scale bytes [M, K/32])."""
    m, k = x.shape
    device = runtime.normalize_device(x.device)
    plan = Plan(8, 1, 1, 4, min(8, chunks(k)))  # any plan compiles; this one for any K
    function = _module(m, 16, k, device, plan).function("mxfp4_quant_debug")
    codes = torch.empty((m, k // 2), dtype=torch.uint8, device=device)
    scales = torch.empty((m, k // 32), dtype=torch.uint8, device=device)
    warps = 4
    blocks = -(-(m * k // 32) // (8 * warps))
    function.launcher("ppp")((blocks, 1, 1), (32 * warps, 1, 1), 0, x.contiguous(), codes, scales)
    return codes, scales

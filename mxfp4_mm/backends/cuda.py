"""CUDA backend (Hopper, sm_90+): one launch of `kernels/mxfp4_gemm_sm90.cu` per call.

The kernel quantizes A itself, reads B codes once from B_q and B scales from the shuffled
B_scale_sh, runs bf16 tensor-core MMAs with the scales folded into the operands, and sums split-K
partials inside a thread-block cluster. It keeps no state between calls (no scratch, no counters),
so one runner may serve any queue. Compiled once per shape through NVRTC (disk-cached).
"""

import collections
import ctypes

import torch

from .. import runtime
from ..kernels import read_source

NAME = "cuda"
SOURCE = "mxfp4_gemm_sm90.cu"
MAX_SMEM = 227 * 1024
_MAX_DYNAMIC_SHARED_ATTR = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

# bm: rows of M per CTA; wn: warps along N; nt: 16-row N tiles per warp; wk: warps along K;
# split_k: CTAs along K (one cluster); cn: neighbouring N tiles quantizing A together (v5 when > 1;
# cluster size cn * split_k, at most 8); ring: B chunks in flight per thread (v5 when > 0; 0 = all);
# wg: 1 = warpgroup wgmma MMAs (v7, sm_90a only: wn % 4 == 0, bm in WGMMA_BMS).
Plan = collections.namedtuple("Plan", "bm wn nt wk split_k cn ring wg", defaults=(1, 0, 0))
WGMMA_BMS = (16, 32, 64, 128)  # the wgmma N sizes kernels/wgmma_sm90a.h provides


def is_available(device: torch.device) -> bool:
    if device.type != "cuda" or torch.version.hip:
        return False
    if torch.cuda.get_device_capability(device) < (9, 0):
        return False  # clusters, mapa and bf16x2 multiplies need sm_90
    return runtime.is_available(device)


# ---- plan geometry (mirrors the constexprs at the top of the kernel) ----------------------

def chunks(k: int) -> int:
    return -(-k // 128)


def chunks_per_warp(k: int, plan: Plan) -> int:
    return -(-(-(-chunks(k) // plan.split_k)) // plan.wk)


def smem_bytes(m: int, n: int, k: int, plan: Plan) -> int:
    threads = plan.wn * plan.wk * 32
    ch_max = -(-chunks(k) // plan.split_k)
    chw = chunks_per_warp(k, plan)
    bn = plan.wn * plan.nt * 16
    b_slots = min(chw, plan.ring) if plan.ring else chw
    b = b_slots * plan.nt * 2 * threads * 16
    a = plan.bm // 8 * ch_max * 2048
    s = -(-chw * plan.nt * 2 * threads // 16) * 16
    partial = plan.wk * plan.bm * (bn + 4) * 4
    return max(b + a + s, partial)


def grid(m: int, n: int, plan: Plan):
    n_tiles, m_tiles = -(-n // (plan.wn * plan.nt * 16)), -(-m // plan.bm)
    if plan.cn > 1:  # v5: 1-D clusters of cn N tiles x split_k along x (tiles padded to cn)
        return (-(-n_tiles // plan.cn) * plan.cn * plan.split_k, 1, m_tiles)
    return (n_tiles, plan.split_k, m_tiles)


def is_valid(m: int, n: int, k: int, plan: Plan) -> bool:
    threads = plan.wn * plan.wk * 32
    ch_max = -(-chunks(k) // plan.split_k)
    return (plan.bm % 8 == 0 and 8 <= plan.bm <= 256 and 1 <= plan.split_k <= min(8, chunks(k))
            and plan.cn >= 1 and plan.cn * plan.split_k <= 8 and plan.ring >= 0
            and 32 <= threads <= 1024 and plan.nt * plan.bm // 8 * 4 <= 128
            and -(-ch_max // plan.wk) <= 32 and -(-ch_max // plan.wk) * plan.nt * 2 <= 64
            and smem_bytes(m, n, k, plan) <= MAX_SMEM
            and (not plan.wg or (plan.wn % 4 == 0 and plan.bm in WGMMA_BMS)))


def compile_options(m: int, n: int, k: int, plan: Plan) -> tuple:
    values = dict(GM=m, GN=n, GK=k, BM=plan.bm, WN=plan.wn, NT=plan.nt, WK=plan.wk, SPLITK=plan.split_k)
    if plan.cn > 1:
        values["CN"] = plan.cn
    if plan.ring > 0:
        values["RING"] = plan.ring
    if plan.wg:
        values["WGMMA"] = 1
    return tuple(f"-D{key}={value}" for key, value in values.items())


def plan_for(m: int, n: int, k: int, device: torch.device) -> Plan:
    from ..tables.cuda_plans import PLANS, general_plan
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

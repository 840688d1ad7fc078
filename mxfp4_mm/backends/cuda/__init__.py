"""CUDA backend (Hopper, sm_90+): one launch of `mxfp4_gemm_sm90.cu` (beside this file) per call, or,
for a PipePlan (sm_90a), of `mxfp4_gemm_sm90_pipe.cu` (chunk-pipelined wgmma, both operands from
shared memory), or, for an Fp8Plan (sm_90a), the two kernels of `mxfp4_gemm_sm90_fp8.cu` (A to e4m3
once, then e4m3 wgmma as its programmatic dependent), or, for the DequantPlan, `mxfp4_dequant_sm90.cu`
(both operands to bf16, exactly) followed by one cuBLAS bf16 GEMM. Plans, their geometry and cost
models are in `plans.py`.

The kernel quantizes A itself, reads B codes once from B_q and B scales from the shuffled
B_scale_sh, runs bf16 tensor-core MMAs with the scales folded into the operands, and sums split-K
partials inside a thread-block cluster. It keeps no state between calls (scratch only inside a call, no counters),
so one runner may serve any queue. Compiled through NVRTC (disk-cached) once per (N, K, plan):
M is a launch argument, and plans are picked per M class, so varying batch sizes reuse builds.
"""

import ctypes
import functools

import torch

from ... import runtime
from ...kernels import read_source
from .plans import (DEQUANT_THREADS, FP8_BN, DequantPlan, Fp8Plan, PipePlan, Plan, chunks, compile_options,
                    dequant_grid, fp8_m_tiles, fp8_plans, fp8_quant_threads, fp8_threads, grid, is_valid,
                    pipe_plans, pipe_threads, plan_for_shape, ranked_plans, smem_bytes)

NAME = "cuda"
SOURCE = "mxfp4_gemm_sm90.cu"
PIPE_SOURCE = "mxfp4_gemm_sm90_pipe.cu"
DEQUANT_SOURCE = "mxfp4_dequant_sm90.cu"
FP8_SOURCE = "mxfp4_gemm_sm90_fp8.cu"
_MAX_DYNAMIC_SHARED_ATTR = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
MAX_GRID_Z = 65535  # the grid's M tiles run along z


def is_available(device: torch.device) -> bool:
    if device.type != "cuda" or torch.version.hip:
        return False
    if torch.cuda.get_device_capability(device) < (9, 0):
        return False  # clusters, mapa and bf16x2 multiplies need sm_90
    return runtime.is_available(device)


def compute_units(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def plan_for(m: int, n: int, k: int, device: torch.device) -> Plan:
    """The table's plan for M's class, else the cost model's (`plans.plan_for_shape`)."""
    return plan_for_shape(m, n, k, compute_units(device))


# ---- the autotuner's interface ----------------------------------------------------------------

MAX_CANDIDATES = 24  # NVRTC builds take ~1 s each (the compile step's build pool runs them concurrently)
PIPE_CANDIDATES = 4  # pipe plans offered after the mma.sync plans (sm_90 only; slower on the H200)
# The tuner may only be offered kernels that passed compute-sanitizer memcheck on odd shapes
# (tools/sanitize_kernels.py covers the pipe plans either way): the pipe kernel has
# (notes/verification.md).
PIPE_MEMCHECKED = True
# The pipe plans' tensor-map copy mode (`tma`): its GPU tests and tools/sanitize_kernels.py under
# memcheck passed on an H200 (2026-12-05, notes/verification.md), so its twins are offered too.
PIPE_TMA_MEMCHECKED = True
# The fp8 plans (A to e4m3 once per call, then e4m3 wgmma over all of K or a split of it), with their
# later fields (consumer warpgroups, A shared by multicast, tiles along M): their GPU tests and
# tools/sanitize_kernels.py under memcheck passed (notes/verification.md), so the tuner is offered them.
FP8_MEMCHECKED = True
FP8_FIELDS_MEMCHECKED = True
# The widest split memcheck has run (sanitize_kernels.py --shapes fp8: splits 1-8, clusters of up to 8
# CTAs along K; notes/verification.md). A wider one would be offered only once memcheck has run it.
FP8_MEMCHECKED_MAX_SPLIT = 8
# Plans that convert B's first chunks ahead of A (Fp8Plan.ahead): offered once their GPU tests and
# memcheck have passed.
FP8_AHEAD_CHECKED = True
# Plans whose converter warpgroups feed one MMA warpgroup through shared memory (Fp8Plan.cv): offered
# once their GPU tests and memcheck have passed.
FP8_CV_CHECKED = True


@functools.lru_cache(maxsize=256)
def _candidates(m, n, k, units, pipe, tma, fp8, fp8_fields, fp8_max_split, fp8_ahead, fp8_cv):
    first = plan_for_shape(m, n, k, units)
    plans = [first] + [plan for plan in ranked_plans(m, n, k, units, MAX_CANDIDATES) if plan != first]
    plans = plans[:MAX_CANDIDATES]
    if DequantPlan() != first:
        plans.append(DequantPlan())
    if fp8:
        plans += [plan for plan in fp8_plans(m, n, k, units)
                  if plan != first and (fp8_fields or (plan.cg == 1 and plan.mc == 1 and m <= plan.mp))
                  and plan.split_k <= fp8_max_split and (fp8_ahead or not plan.ahead) and (fp8_cv or not plan.cv)]
    if pipe:
        plans += [plan for plan in pipe_plans(m, n, k, units, PIPE_CANDIDATES, tma) if plan != first]
    return plans


def offers_pipe(device: torch.device) -> bool:
    """Pipe plans run on sm_90 only (wgmma, sm_90a), and are offered once memchecked."""
    if not PIPE_MEMCHECKED or device.type != "cuda" or torch.version.hip:
        return False
    try:
        return torch.cuda.get_device_capability(device) == (9, 0)
    except (AssertionError, RuntimeError):  # a torch without a CUDA runtime
        return False


def candidates(m: int, n: int, k: int, device: torch.device) -> list:
    """The plan `plan_for` picks; then the cost model's ranking of the mma.sync plan grid; then the
    DequantPlan; then, where `offers_pipe`, up to PIPE_CANDIDATES pipe plans by their cost model (2-6
    µs slower than the table on the H200, notes/cuda.md). No compilation."""
    return candidates_for_units(m, n, k, compute_units(device), offers_pipe(device))


def candidates_for_units(m: int, n: int, k: int, units: int, sm90: bool) -> list:
    """`candidates` on a GPU of `units` SMs, sm_90 or not, under the flags above as they are now."""
    return list(_candidates(m, n, k, units, sm90, PIPE_TMA_MEMCHECKED, FP8_MEMCHECKED and sm90,
                            FP8_FIELDS_MEMCHECKED, FP8_MEMCHECKED_MAX_SPLIT, FP8_AHEAD_CHECKED, FP8_CV_CHECKED))


def plan_label(plan) -> str:
    """E.g. "m32w6t2k2s1c2r2": rows of M, warps along N, tiles per warp, warps along K, split-K,
    then cn and ring where they differ from their defaults. A pipe plan:
    "p.n128.m256.s4.k64.q4" (rows of N and M per CTA, split-K, K per chunk, stages), then ".w1" for
    copy warps where there are any and ".t" for tensor-map copies. The DequantPlan: "dq.cublas". An
    fp8 plan: "f8.m64.q7" (rows of A per CTA, stages), then ".s4" for split-K, ".g2" for consumer
    warpgroups and ".x4" for B tiles sharing A's copies, where there is more than one, ".a6" for
    the chunks of B converted ahead of A and ".v4" for the converted ring of converter warpgroups."""
    if isinstance(plan, DequantPlan):
        return "dq.cublas"
    if isinstance(plan, Fp8Plan):
        return (f"f8.m{plan.mp}.q{plan.stages}" + (f".s{plan.split_k}" if plan.split_k > 1 else "")
                + (f".g{plan.cg}" if plan.cg > 1 else "") + (f".x{plan.mc}" if plan.mc > 1 else "")
                + (f".a{plan.ahead}" if plan.ahead else "") + (f".v{plan.cv}" if plan.cv else ""))
    if isinstance(plan, PipePlan):
        label = f"p.n{plan.bn}.m{plan.bm}.s{plan.split_k}.k{plan.kc}.q{plan.stages}"
        return label + (f".w{plan.cw}" if plan.cw else "") + (".t" if plan.tma else "")
    label = f"m{plan.bm}w{plan.wn}t{plan.nt}k{plan.wk}s{plan.split_k}"
    return label + (f"c{plan.cn}" if plan.cn != 1 else "") + (f"r{plan.ring}" if plan.ring else "")


def plan_family(plan) -> str:
    """Plans sharing code paths: the kernel, and whether partials are summed (split-K)."""
    if isinstance(plan, DequantPlan):
        return "dq"
    if isinstance(plan, Fp8Plan):
        return "f8"
    if isinstance(plan, PipePlan):
        return "pipe" + (".tma" if plan.tma else "") + (".sk" if plan.split_k > 1 else "")
    return "mma" + (".sk" if plan.split_k > 1 else "")


def _source(plan) -> str:
    if isinstance(plan, Fp8Plan):
        return FP8_SOURCE
    return PIPE_SOURCE if isinstance(plan, PipePlan) else DEQUANT_SOURCE if isinstance(plan, DequantPlan) else SOURCE


def build(m: int, n: int, k: int, device: torch.device, plan) -> None:
    """Compile the plan's kernel into the disk cache (a build worker's job; nothing is loaded)."""
    runtime.build_code(read_source(_source(plan)), runtime.normalize_device(device), compile_options(n, k, plan),
                       compile_target(device, plan))


# ---- launch ---------------------------------------------------------------------------------

def compile_target(device: torch.device, plan) -> str:
    """The compile target for `plan`: the device's own, or sm_90a for pipe and fp8 plans (wgmma; that
    target runs only on sm_90 GPUs)."""
    if not isinstance(plan, (PipePlan, Fp8Plan)):
        return runtime.kernel_arch(device)
    if torch.cuda.get_device_capability(device) != (9, 0):
        raise ValueError(f"cuda: plan {plan} needs an sm_90 GPU (wgmma)")
    return "sm_90a"


def _module(n, k, device, plan):
    """The kernel built for (N, K, plan): one build serves every M."""
    return runtime.load_module(read_source(_source(plan)), device, compile_options(n, k, plan),
                               compile_target(device, plan))


def _entry_and_block(plan):
    """The kernel's name and its block size."""
    if isinstance(plan, PipePlan):
        return "mxfp4_gemm_pipe", (pipe_threads(plan), 1, 1)
    return "mxfp4_gemm", (plan.wn * plan.wk * 32, 1, 1)


def _check_plan(m, n, k, plan):
    if not is_valid(m, n, k, plan):
        raise ValueError(f"cuda: invalid plan {plan} for M={m} N={n} K={k}")


def make_launcher(m: int, n: int, k: int, device: torch.device, plan):
    """launch(a, b_q, b_scale_sh, out): one kernel launch writing out [m, n] (not for the DequantPlan)."""
    _check_plan(m, n, k, plan)
    if isinstance(plan, DequantPlan):
        raise TypeError("cuda: a DequantPlan allocates its C itself; build it with make_runner")
    if isinstance(plan, Fp8Plan):
        return _fp8_launcher(m, n, k, runtime.normalize_device(device), plan)
    name, block = _entry_and_block(plan)
    dims = grid(m, n, plan)
    if dims[2] > MAX_GRID_Z:
        raise ValueError(f"cuda: M={m} needs {dims[2]} tiles of {plan.bm} rows; at most {MAX_GRID_Z}")
    device = runtime.normalize_device(device)
    function = _module(n, k, device, plan).function(name)
    shared = smem_bytes(m, n, k, plan)
    api = runtime.api_for(device)
    api.check(api.drv.cuFuncSetAttribute(function.handle, _MAX_DYNAMIC_SHARED_ATTR, ctypes.c_int(shared)),
              "cuFuncSetAttribute")
    if isinstance(plan, PipePlan) and plan.tma:
        return _tma_launcher(m, n, k, device, plan, function.launcher("ppppiTTT"), dims, block, shared)
    launch = function.launcher("ppppi")

    def run(a, b_q, b_scale_sh, out):
        launch(dims, block, shared, a, b_q, b_scale_sh, out, m)

    return run


def _map_of_last_address(encode):
    """lookup(address) -> encode(address), encoded again only when the address changes. For B's maps:
    the same weights come call after call, and a map holds only an address and the runner's fixed
    geometry, never data. The launcher copies a map into its own arguments, so threads may share it;
    (address, map) is replaced as one tuple, so a racing thread at worst encodes it once more."""
    last = (None, None)

    def lookup(address):
        nonlocal last
        known, tensor_map = last
        if known != address:
            tensor_map = encode(address)
            last = (address, tensor_map)
        return tensor_map

    return lookup


def _tma_launcher(m, n, k, device, plan, launch, dims, block, shared):
    """launch(a, b_q, b_scale_sh, out) of a pipe plan with tensor-map copies: A's map is encoded per
    call (host work only; A is new every call), B's two as their addresses change; boxes as the
    kernel's stage layout reads them."""
    scale_cols = (k // 32 + 7) // 8 * 8
    b_map_of = _map_of_last_address(
        lambda address: runtime.tensor_map_2d(device, address, 1, n, k // 2, k // 2, plan.bn, 16))
    s_map_of = _map_of_last_address(
        lambda address: runtime.tensor_map_2d(device, address, 1, -(-n // 32), scale_cols * 32, scale_cols * 32,
                                              plan.bn // 32, plan.kc // 32 * 64))

    def run(a, b_q, b_scale_sh, out):
        a_map = runtime.tensor_map_2d(device, a.data_ptr(), 2, m, k, 2 * k, plan.bm, 8)
        launch(dims, block, shared, a, b_q, b_scale_sh, out, m, a_map, b_map_of(b_q.data_ptr()),
               s_map_of(b_scale_sh.data_ptr()))

    return run


def _fp8_launcher(m, n, k, device, plan):
    """launch(a, b_q, b_scale_sh, out) of an fp8 plan: A's e4m3 chunks and row exponents in a buffer
    of this call, the quantization kernel, then the GEMM as its programmatic dependent (it starts
    copying B while A is quantized); B's tensor map (128-byte swizzle) is encoded when B's address
    changes."""
    module = _module(n, k, device, plan)
    quantize_a = module.function("mxfp4_quant_a_e4m3").launcher("pppi")
    gemm = module.function("mxfp4_gemm_fp8")
    shared = smem_bytes(m, n, k, plan)
    api = runtime.api_for(device)
    api.check(api.drv.cuFuncSetAttribute(gemm.handle, _MAX_DYNAMIC_SHARED_ATTR, ctypes.c_int(shared)),
              "cuFuncSetAttribute")
    launch_gemm = gemm.launcher("Tppppppi", dependent=True)
    rows = fp8_m_tiles(m, plan) * plan.mp  # A padded to whole tiles (the quantization writes zeros there)
    a_bytes = rows * k
    quant_block = (fp8_quant_threads(k), 1, 1)  # a thread per 8 values of a row
    gemm_block = (fp8_threads(plan), 1, 1)
    dims = grid(m, n, plan)
    b_map_of = _map_of_last_address(
        lambda address: runtime.tensor_map_2d(device, address, 1, n, k // 2, k // 2, FP8_BN, 128,
                                              swizzle=runtime.SWIZZLE_128B))

    def run(a, b_q, b_scale_sh, out):
        scratch = torch.empty(a_bytes + 4 * rows, dtype=torch.uint8, device=a.device)
        a_exp = scratch.data_ptr() + a_bytes  # the row exponents after A's bytes (an address: no view per call)
        b_map = b_map_of(b_q.data_ptr())
        quantize_a((rows, 1, 1), quant_block, 0, a, scratch, a_exp, m)
        launch_gemm(dims, gemm_block, shared, b_map, b_scale_sh, scratch, a_exp, a, b_q, out, m)

    return run


def _dequant_runner(m, n, k, device, plan):
    """runner(a, b_q, b_shuffle, b_scale_sh) -> fresh C for the DequantPlan: the operands to bf16 in
    buffers of this call, then torch.mm, both on the current queue. cuBLAS accumulates in fp32; the
    bf16 operands are the reference's fp32 values exactly. Few host operations (two allocations, the
    launch, a transposed view, the mm that allocates C): on a slow host each costs several µs."""
    dequantize = _module(n, k, device, plan).function("mxfp4_dequantize_operands").launcher("pppppii")
    dims = dequant_grid(m, n, k, compute_units(device))

    def run(a, b_q, b_shuffle, b_scale_sh):
        a_bf16 = torch.empty((m, k), dtype=torch.bfloat16, device=a.device)
        b_bf16 = torch.empty((n, k), dtype=torch.bfloat16, device=a.device)
        dequantize(dims, (DEQUANT_THREADS, 1, 1), 0, a, b_q, b_scale_sh, a_bf16, b_bf16, m, n)
        return torch.mm(a_bf16, b_bf16.t())

    return run


def make_runner(m: int, n: int, k: int, device: torch.device, plan=None):
    """runner(a, b_q, b_shuffle, b_scale_sh) -> fresh C; runner.plan is the plan it runs."""
    plan = plan or plan_for(m, n, k, device)
    if isinstance(plan, DequantPlan):
        _check_plan(m, n, k, plan)
        run = _dequant_runner(m, n, k, runtime.normalize_device(device), plan)
        run.plan = plan
        return run
    launch = make_launcher(m, n, k, device, plan)

    def run(a, b_q, b_shuffle, b_scale_sh):
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
        launch(a, b_q, b_scale_sh, out)
        return out

    run.plan = plan
    return run


def quantize(x: torch.Tensor):
    """Debug path: the kernel's A quantization alone -> (codes [M, K/2], scale bytes [M, K/32])."""
    m, k = x.shape
    device = runtime.normalize_device(x.device)
    plan = Plan(8, 1, 1, 4, min(8, chunks(k)))  # any plan compiles; this one for any K
    function = _module(16, k, device, plan).function("mxfp4_quant_debug")
    codes = torch.empty((m, k // 2), dtype=torch.uint8, device=device)
    scales = torch.empty((m, k // 32), dtype=torch.uint8, device=device)
    warps = 4
    blocks = -(-(m * k // 32) // (8 * warps))
    function.launcher("pppi")((blocks, 1, 1), (32 * warps, 1, 1), 0, x.contiguous(), codes, scales, m)
    return codes, scales

"""Triton backend: one `tl.dot_scaled` kernel launch per call, A quantized inside the kernel.

Portable fallback: native scaled MFMA on gfx950, emulated (fp4 -> bf16 MMA) on Hopper; on NVIDIA the
candidates also hold "folded" plans (both operands as exact bf16 values into a plain bf16 dot: wgmma
on Hopper from 64 rows up).
Plans come from `plans.py` (beside this file; the kernels are in `kernels.py`) per kernel arch and shape (gfx950: AMD's tuned
`gemm_a16wfp4` figures), else from `general_plan`; `candidates` lists the plans worth timing.
The split-K workspace and per-tile counters come from `scratch.split_k_workspace`, one per
(device, current queue, shape, plan): calls on two queues never share them.
"""

import torch

from ...devices import kernel_arch
from ...scratch import split_k_workspace
from . import plans as triton_plans
from .plans import Plan, general_plan, split_k_steps

NAME = "triton"

# Plan fields, b_layout: "gather" (B_q; scales gathered byte by byte), "vector" (B_q; scales read
# as 256-byte chunks), "shuffled" (B_shuffle; scales as "vector"). cache_modifier applies to B's loads.
B_LAYOUTS = {"gather": 0, "vector": 1, "shuffled": 2}  # kernels.B_GATHER, B_VECTOR, B_SHUFFLED
MFMA_NONK_DIM = 16  # gfx950: v_mfma_scale_f32_16x16x128 (AMD's configs use 16 throughout)


def is_available(device: torch.device) -> bool:
    if device.type != "cuda":
        return False
    try:
        import triton  # noqa: F401
        import triton.language as tl
    except ImportError:
        return False
    return hasattr(tl, "dot_scaled")


def fits(plan: Plan, n: int, k: int) -> bool:
    """Whether the kernel supports this plan on N, K: the chunked B layouts read whole 32-row scale
    groups and whole K steps."""
    if plan.b_layout == "gather":
        return True
    return n % 32 == 0 and plan.block_n % 32 == 0 and plan.block_k % 256 == 0 and k % plan.block_k == 0


def plan_label(plan: Plan) -> str:
    """e.g. "m16n128k512w4s1.sk4.e2.g1.cg.shuffled": tile, warps, stages, split-K, waves per EU,
    group size, cache modifier, B layout; then ".hw" (".emu") where A goes through the hardware
    convert (its emulation), ".fold" for a folded plan."""
    cache = plan.cache_modifier.lstrip(".") or "ca"
    convert = {"arithmetic": "", "hardware": ".hw", "emulated": ".emu", "folded": ".fold"}[plan.a_convert]
    return (f"m{plan.block_m}n{plan.block_n}k{plan.block_k}w{plan.num_warps}s{plan.num_stages}.sk{plan.split_k}"
            f".e{plan.waves_per_eu}.g{plan.group_size_m}.{cache}.{plan.b_layout}{convert}")


def _table_plan(m, n, k, arch):
    listed = triton_plans.PLANS.get(arch, {}).get((m, n, k))
    return None if listed is None else Plan(*listed)


def _general_plan(m, n, k, arch, compute_units):
    """`general_plan`, quantizing A with the hardware convert where the arch has one."""
    plan = general_plan(m, n, k, compute_units)
    return plan._replace(a_convert="hardware") if arch == "gfx950" else plan


def plan_for(m: int, n: int, k: int, device: torch.device) -> Plan:
    arch = kernel_arch(device)
    listed = _table_plan(m, n, k, arch)
    if listed is not None and fits(listed, n, k):
        return listed
    return _general_plan(m, n, k, arch, torch.cuda.get_device_properties(device).multi_processor_count)


def candidates_for_arch(m: int, n: int, k: int, arch: str, compute_units: int):
    """Every plan for the shape on this arch, prior first; no compilation."""
    listed = _table_plan(m, n, k, arch)
    first = listed if listed is not None else _general_plan(m, n, k, arch, compute_units)
    plans = [first] + triton_plans.variations(m, n, k, arch, first, compute_units)
    return list(dict.fromkeys(p for p in plans if fits(p, n, k)))


# B layouts whose kernels have passed compute-sanitizer memcheck on odd shapes (H200, 2026-12-03,
# tools/sanitize_kernels.py; both arches' plans, the gfx950 hardware-convert ones with the convert
# emulated: the same loads). A faulting kernel takes the whole process down on AMD GPUs, so the
# tuner is offered only these. The folded plans read with the same loads (A as the convert's bf16
# pairs, B through the same layout code; their own memcheck: H100, 2026-12-05) and are offered on
# NVIDIA only.
MEMCHECKED_LAYOUTS = ("gather", "vector", "shuffled")


def candidates(m: int, n: int, k: int, device: torch.device):
    """The tuner's candidates: `candidates_for_arch` less the layouts not yet memchecked."""
    if device.type != "cuda":
        return []
    units = torch.cuda.get_device_properties(device).multi_processor_count
    plans = candidates_for_arch(m, n, k, kernel_arch(device), units)
    return [plan for plan in plans if plan.b_layout in MEMCHECKED_LAYOUTS]


def plan_family(plan: Plan) -> str:
    """Plans sharing code paths: B's layout, A's convert, and whether partials are summed (split-K)."""
    return f"{plan.b_layout}.{plan.a_convert}" + (".sk" if plan.split_k > 1 else "")


def _launch_arguments(m, n, k, plan: Plan):
    """(grid, tiles, partials shape, the kernel's keyword arguments, split_k, steps) of a launch."""
    split_k, steps = split_k_steps(-(-k // plan.block_k), plan.split_k)
    tiles = -(-m // plan.block_m) * -(-n // plan.block_n)
    partials_shape = (split_k * tiles * plan.block_m * plan.block_n if split_k > 1 else 1,)
    arguments = dict(kernel_constants(plan, k, split_k), **_compile_options(plan))
    return (tiles, split_k), tiles, partials_shape, arguments, split_k, steps


def build(m: int, n: int, k: int, device: torch.device, plan: Plan) -> None:
    """Compile the plan's kernel into Triton's disk cache without launching it (a build worker's
    job): the launch's own specialization (aligned pointers, the same integers), so the launch finds it."""
    from . import kernels
    from ...validate import scale_cols

    if not fits(plan, n, k):
        raise ValueError(f"plan: {plan_label(plan)} needs N % 32 == 0 and K % block_k == 0 (N={n}, K={k})")
    grid, tiles, _, arguments, split_k, steps = _launch_arguments(m, n, k, plan)
    bf16, u8 = torch.bfloat16, torch.uint8
    with torch.cuda.device(device):
        kernels.mxfp4_gemm_kernel.warmup(bf16, u8, u8, bf16, torch.float32, torch.int32, m, n, k,
                                                scale_cols(k), split_k, steps, tiles, grid=grid, **arguments)


def with_convert_emulated(plan: Plan) -> Plan:
    """The plan runnable on any GPU: gfx950's hardware fp4 convert replaced by its emulation, the
    kernel otherwise the same (loads, packing, stores)."""
    return plan._replace(a_convert="emulated") if plan.a_convert == "hardware" else plan


def _compile_options(plan: Plan) -> dict:
    options = dict(num_warps=plan.num_warps, num_stages=plan.num_stages)
    if torch.version.hip:
        options.update(waves_per_eu=plan.waves_per_eu, matrix_instr_nonkdim=MFMA_NONK_DIM)
    return options


def kernel_constants(plan: Plan, k: int, split_k: int) -> dict:
    """The kernel's constexpr arguments for this plan (shared by launches and AOT compiles)."""
    return dict(BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, BLOCK_K=plan.block_k, GROUP_SIZE_M=plan.group_size_m,
                USE_SPLIT_K=split_k > 1, B_LAYOUT=B_LAYOUTS[plan.b_layout],
                EVEN_K=k % plan.block_k == 0, CACHE_MODIFIER=plan.cache_modifier,
                A_CONVERT=triton_plans.A_CONVERTS[plan.a_convert])


def make_launcher(m, n, k, device, plan: Plan):
    """launch(a, b, b_scale_sh, out): one kernel launch writing out [m, n]; b is B_shuffle
    for a "shuffled" plan, else B_q."""
    from . import kernels

    if not fits(plan, n, k):
        raise ValueError(f"plan: {plan_label(plan)} needs N % 32 == 0 and K % block_k == 0 (N={n}, K={k})")
    if plan.a_convert == "hardware" and kernel_arch(device) != "gfx950":
        raise ValueError(f"plan: {plan_label(plan)} uses gfx950's fp4 convert; this GPU is {kernel_arch(device)}")
    grid, tiles, partials_shape, arguments, split_k, steps = _launch_arguments(m, n, k, plan)
    workspace_key = (NAME, m, n, k, plan)
    kernel = kernels.mxfp4_gemm_kernel[grid]
    # The current queue's workspace now, so the first call launches nothing but the GEMM.
    split_k_workspace(device, workspace_key, partials_shape, tiles)

    def launch(a, b, b_scale_sh, out):
        partial, counters = split_k_workspace(device, workspace_key, partials_shape, tiles)
        kernel(a, b, b_scale_sh, out, partial, counters, m, n, k, b_scale_sh.shape[1],
               split_k, steps, tiles, **arguments)

    return launch


def make_runner(m: int, n: int, k: int, device: torch.device, plan: Plan = None):
    """The runner for this shape; `plan` overrides the table (the tuner sweeps with it). A
    "shuffled" plan called without B_shuffle runs its "vector" twin on B_q."""
    plan = plan or plan_for(m, n, k, device)
    launch = make_launcher(m, n, k, device, plan)
    fallback = plan._replace(b_layout="vector")
    launch_without_shuffle = make_launcher(m, n, k, device, fallback) if plan.b_layout == "shuffled" else launch

    def run(a, b_q, b_shuffle, b_scale_sh):
        out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
        if plan.b_layout == "shuffled" and b_shuffle is not None:
            launch(a, b_shuffle, b_scale_sh, out)
        else:
            launch_without_shuffle(a, b_q, b_scale_sh, out)
        return out

    run.plan = plan
    return run


# ---- ahead-of-time compilation (CI checks and tools/gfx950_compare.py; needs no GPU) ---------

_POINTERS = {"a_ptr": "*bf16", "b_ptr": "*u8", "bs_ptr": "*u8", "c_ptr": "*bf16",
             "partial_ptr": "*fp32", "counter_ptr": "*i32"}
_SIZES = ("M", "N", "K", "scale_cols_padded", "split_k", "steps_per_split", "num_tiles")


def aot_compile(plan: Plan, n: int, k: int, target, split_k: int = None):
    """triton.compile of the plan's kernel for `target` (e.g. GPUTarget("hip", "gfx950", 64)), with
    the specializations a launch on that target gets: 16-byte aligned pointers within 2 GB (AMD
    buffer loads), N and K divisibility by 16 where they have it."""
    import triton
    from triton.compiler import ASTSource

    from . import kernels

    split_k = split_k_steps(-(-k // plan.block_k), plan.split_k)[0] if split_k is None else split_k
    constants = kernel_constants(plan, k, split_k)
    names = kernels.mxfp4_gemm_kernel.arg_names
    signature = dict(_POINTERS, **{s: "i32" for s in _SIZES}, **{c: "constexpr" for c in constants})
    pointer_attrs = [["tt.divisibility", 16]] + ([["tt.pointer_range", 32]] if target.backend == "hip" else [])
    attrs = {(names.index(p),): pointer_attrs for p in _POINTERS}
    attrs.update({(names.index(s),): [["tt.divisibility", 16]] for s, v in (("N", n), ("K", k)) if v % 16 == 0})
    options = dict(num_warps=plan.num_warps, num_stages=plan.num_stages)
    if target.backend == "hip":
        options.update(waves_per_eu=plan.waves_per_eu, matrix_instr_nonkdim=MFMA_NONK_DIM)
    return triton.compile(ASTSource(kernels.mxfp4_gemm_kernel, signature, constants, attrs),
                          target=target, options=options)


def quantize(x: torch.Tensor, block_m: int = 16, block_k: int = 256, a_convert: str = "arithmetic"):
    """Debug path: the kernel's fused A quantization alone -> (codes [M, K/2], scales [M, K/32]);
    a_convert as the plan field."""
    from . import kernels

    m, k = x.shape
    if k % block_k:
        raise ValueError(f"quantize: K={k} must be a multiple of block_k={block_k}")
    codes = torch.empty((m, k // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((m, k // 32), dtype=torch.uint8, device=x.device)
    grid = (-(-m // block_m), k // block_k)
    kernels.quantize_kernel[grid](x.contiguous(), codes, scales, m, k, BLOCK_M=block_m, BLOCK_K=block_k,
                                         A_CONVERT=triton_plans.A_CONVERTS[a_convert])
    return codes, scales

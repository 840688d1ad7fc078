"""HIP backend: the gfx950 scaled-MFMA kernels of mxfp4_gemm.hip (beside this file), compiled by hiprtc at
first use, one launch per call (A quantized in the kernel, split-K reduced in the same launch).

The plan (variant, split-K, specialized) comes from plans.py (beside this file): a generic plan runs one
of the variants of the one module that holds them all; a specialized plan runs a build for its shape
and split (hiprtc -D options: M, N, K, split-K and the tile as compile-time constants). `candidates`
lists the plans the tuner may time, `prepare` compiles them. Split-K scratch (fp32 partials and
per-tile counters) comes from `scratch.split_k_workspace`: one per (device, current queue, shape,
plan), so two queues never share a mutable buffer.

`make_emulated_runner` runs the same source on NVIDIA: without __AMDGCN__ it compiles through the
wave64 emulation of arch_gfx950_emulated.h with NVRTC. It exists to verify every plan on an H200.
"""

import collections
import os
import re

import torch

from ... import devices, runtime
from ...kernels import read_source
from ...scratch import split_k_workspace
from ...validate import scale_cols
from . import plans as hip_plans

NAME = "hip"
SOURCE = "mxfp4_gemm.hip"
# A, B (B_shuffle or B_q), B_scale_sh, C, partials, counters, M, N, K, scale_cols, split_k
ARG_TYPES = "ppppppiiiii"

Variant = collections.namedtuple("Variant", "name mfma tile_m tile_n waves b_shuffled")
_VARIANT_LINE = re.compile(r"^MXFP4_GEMM_VARIANT\((\w+), (\d+), (\d+), (\d+), (\d+), (true|false)\)", re.M)

_variants = {}


def kernel_variants() -> dict:
    """{name: Variant} of every GEMM variant instantiated in the kernel source."""
    if not _variants:
        for name, mfma, sub_m, sub_n, waves, shuffled in _VARIANT_LINE.findall(read_source(SOURCE)):
            mfma = int(mfma)
            _variants[name] = Variant(name, mfma, mfma * int(sub_m), mfma * int(sub_n), int(waves),
                                      shuffled == "true")
    return _variants


def tile_configs() -> dict:
    """{name: Variant} of the tiles offered as shape-specialized builds: every B_shuffle variant of
    the source, and each with 2 waves instead of 4 (more blocks per CU, shorter reduction)."""
    tiles = {}
    for v in kernel_variants().values():
        if v.b_shuffled:
            tiles[v.name] = v
            if v.waves == 4:
                two = v._replace(name=v.name.replace("w4", "w2"), waves=2)
                tiles[two.name] = two
    return tiles


def variant_of(plan: hip_plans.Plan) -> Variant:
    return (tile_configs() if plan.specialized else kernel_variants())[plan.variant]


def is_available(device: torch.device) -> bool:
    return (bool(torch.version.hip) and device.type == "cuda" and devices.kernel_arch(device) == "gfx950"
            and runtime.is_available(device))


def plan_for(m: int, n: int, k: int) -> hip_plans.Plan:
    """The table's (generic) plan, else the general rule's."""
    listed = hip_plans.PLANS.get((m, n, k))
    if listed is not None:
        return listed
    shuffled = [v for v in kernel_variants().values() if v.b_shuffled]
    return hip_plans.general_plan(m, n, k, shuffled)


def candidates(m: int, n: int, k: int, device=None) -> list:
    """Every plan offered for the shape, by static prior: specialized builds first (the table plan's
    tile and split leading), the generic table plan last. No compilation."""
    return hip_plans.candidate_plans(m, n, k, tile_configs().values(), plan_for(m, n, k))


def plan_label(plan: hip_plans.Plan) -> str:
    """e.g. "m16n64w4.sk7.c" (.c: M, N, K and split-K compiled in)."""
    label = f"{plan.variant.replace('mxfp4_gemm_', '')}.sk{plan.split_k}"
    return label + ".c" if plan.specialized else label


def compile_options(m: int, n: int, k: int, plan: hip_plans.Plan) -> tuple:
    """The -D options of a plan's build: none for a generic plan (one module holds every variant)."""
    if not plan.specialized:
        return ()
    v = variant_of(plan)
    defines = dict(SPECIALIZED=1, M=m, N=n, K=k, SPLIT_K=plan.split_k, MFMA=v.mfma, SUB_M=v.tile_m // v.mfma,
                   SUB_N=v.tile_n // v.mfma, WAVES=v.waves, B_SHUFFLED="true" if v.b_shuffled else "false")
    return tuple(f"-DMXFP4_{key}={value}" for key, value in defines.items())


def kernel_name(plan: hip_plans.Plan) -> str:
    return "mxfp4_gemm_specialized" if plan.specialized else plan.variant


def line_info_options() -> tuple:
    """NVRTC's -lineinfo for the emulated builds when MXFP4_MM_LINEINFO=1, so that a sanitizer's
    report (kernel+offset) maps to source lines (nvdisasm -g); otherwise none."""
    return ("-lineinfo",) if os.environ.get("MXFP4_MM_LINEINFO") == "1" and not torch.version.hip else ()


def _module(m, n, k, device, plan):
    return runtime.load_module(read_source(SOURCE), device, compile_options(m, n, k, plan) + line_info_options())


def plan_family(plan: hip_plans.Plan) -> str:
    """Plans sharing code paths: the tile variant, built generic or specialized, split-K or not."""
    return plan.variant + (".c" if plan.specialized else "") + (".sk" if plan.split_k > 1 else "")


def build(m: int, n: int, k: int, device: torch.device, plan: hip_plans.Plan) -> None:
    """Compile the plan's build into the disk cache (a build worker's job; nothing is loaded)."""
    runtime.build_code(read_source(SOURCE), runtime.normalize_device(device),
                       compile_options(m, n, k, plan) + line_info_options())


def fallback_plan(m: int, n: int, k: int, plan: hip_plans.Plan) -> hip_plans.Plan:
    """Plan for calls without B_shuffle: the plan itself if its variant reads B_q, else the rule
    over the generic B_q variants."""
    if not variant_of(plan).b_shuffled:
        return plan
    row_major = [v for v in kernel_variants().values() if not v.b_shuffled]
    return hip_plans.general_plan(m, n, k, row_major)


def scratch_for(device, m: int, n: int, variant: Variant, split_k: int):
    """(partials, counters) of the current queue; (0, 0) (null pointers) without split-K."""
    if split_k == 1:
        return 0, 0
    tiles = -(-m // variant.tile_m) * -(-n // variant.tile_n)
    return split_k_workspace(device, (NAME, m, n, variant.name, split_k), (split_k, m, n), tiles)


class _Launch:
    """One plan bound to its compiled module: grid, block and launcher."""

    def __init__(self, m, n, k, device, plan):
        self.variant = variant_of(plan)
        self.split_k = plan.split_k
        self.grid = (-(-n // self.variant.tile_n), -(-m // self.variant.tile_m), plan.split_k)
        self.block = (64 * self.variant.waves, 1, 1)
        self.launch = _module(m, n, k, device, plan).function(kernel_name(plan)).launcher(ARG_TYPES)


def _build_runner(m, n, k, device, plan, fallback):
    main = _Launch(m, n, k, device, plan)
    without_shuffle = []  # built at the first call without B_shuffle (another module to compile)
    cols = scale_cols(k)
    # The current queue's scratch now, so the first call launches nothing but the GEMM.
    scratch_for(device, m, n, main.variant, main.split_k)

    def run(a, b_q, b_shuffle, b_scale_sh):
        use = main
        if b_shuffle is None and main.variant.b_shuffled:
            if not without_shuffle:
                without_shuffle.append(_Launch(m, n, k, device, fallback))
            use = without_shuffle[0]
        b = b_shuffle if use.variant.b_shuffled else b_q
        partials, counters = scratch_for(device, m, n, use.variant, use.split_k)
        c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
        use.launch(use.grid, use.block, 0, a, b, b_scale_sh, c, partials, counters, m, n, k, cols, use.split_k)
        return c

    run.plan, run.fallback_plan = plan, fallback
    return run


def make_runner(m: int, n: int, k: int, device: torch.device, plan: hip_plans.Plan = None):
    """The runner for this shape; plan=None: the first candidate (the table plan, specialized)."""
    plan = plan or candidates(m, n, k, device)[0]
    return _build_runner(m, n, k, device, plan, fallback_plan(m, n, k, plan))


def make_emulated_runner(m: int, n: int, k: int, device: torch.device, plan: hip_plans.Plan = None):
    """The HIP backend's runner on an NVIDIA device (NVRTC + wave64 emulation): same kernels, same
    plans, same scratch handling. For verification; it is slow."""
    if torch.version.hip or device.type != "cuda":
        raise RuntimeError(f"the emulated HIP runner needs an NVIDIA device, got {device}")
    plan = plan or candidates(m, n, k, device)[0]
    return _build_runner(m, n, k, device, plan, fallback_plan(m, n, k, plan))

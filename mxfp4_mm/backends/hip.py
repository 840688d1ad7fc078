"""HIP backend: the gfx950 scaled-MFMA kernels of kernels/mxfp4_gemm.hip, compiled by hiprtc at
first use, one launch per call (A quantized in the kernel, split-K reduced in the same launch).

The plan (variant, split-K) comes from tables/hip_plans.py. Split-K scratch (fp32 partials and
per-tile counters) comes from `scratch.split_k_workspace`: one per (device, current queue, shape,
plan), so two queues never share a mutable buffer.

`make_emulated_runner` runs the same source on NVIDIA: without __AMDGCN__ it compiles through the
wave64 emulation of arch_nvidia.h with NVRTC. It exists to verify every plan on an H200.
"""

import collections
import re

import torch

from .. import dispatch, runtime
from ..kernels import read_source
from ..tables import hip_plans
from ..scratch import split_k_workspace
from ..validate import scale_cols

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


def is_available(device: torch.device) -> bool:
    return bool(torch.version.hip) and dispatch.device_kind(device) == "gfx950" and runtime.is_available(device)


def plan_for(m: int, n: int, k: int) -> hip_plans.Plan:
    listed = hip_plans.PLANS.get((m, n, k))
    if listed is not None:
        return listed
    shuffled = [v for v in kernel_variants().values() if v.b_shuffled]
    return hip_plans.general_plan(m, n, k, shuffled)


def fallback_plan(m: int, n: int, k: int, plan: hip_plans.Plan) -> hip_plans.Plan:
    """Plan for calls without B_shuffle: the plan itself if its variant reads B_q, else the rule
    over the B_q variants."""
    if not kernel_variants()[plan.variant].b_shuffled:
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
    """One variant + split-K, bound to a compiled module: grid, block and launcher."""

    def __init__(self, module, m, n, k, plan):
        self.variant = kernel_variants()[plan.variant]
        self.split_k = plan.split_k
        self.grid = (-(-n // self.variant.tile_n), -(-m // self.variant.tile_m), plan.split_k)
        self.block = (64 * self.variant.waves, 1, 1)
        self.launch = module.function(plan.variant).launcher(ARG_TYPES)


def _build_runner(m, n, k, device, plan, fallback):
    module = runtime.load_module(read_source(SOURCE), device)
    main, without_shuffle = _Launch(module, m, n, k, plan), _Launch(module, m, n, k, fallback)
    cols = scale_cols(k)
    # The current queue's scratch now, so the first call launches nothing but the GEMM.
    scratch_for(device, m, n, main.variant, main.split_k)

    def run(a, b_q, b_shuffle, b_scale_sh):
        use = main if b_shuffle is not None or not main.variant.b_shuffled else without_shuffle
        b = b_shuffle if use.variant.b_shuffled else b_q
        partials, counters = scratch_for(device, m, n, use.variant, use.split_k)
        c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
        use.launch(use.grid, use.block, 0, a, b, b_scale_sh, c, partials, counters, m, n, k, cols, use.split_k)
        return c

    run.plan, run.fallback_plan = plan, fallback
    return run


def make_runner(m: int, n: int, k: int, device: torch.device, plan: hip_plans.Plan = None):
    """The runner for this shape; `plan` overrides the table (the tuner sweeps with it)."""
    plan = plan or plan_for(m, n, k)
    return _build_runner(m, n, k, device, plan, fallback_plan(m, n, k, plan))


def make_emulated_runner(m: int, n: int, k: int, device: torch.device, plan: hip_plans.Plan = None):
    """The HIP backend's runner on an NVIDIA device (NVRTC + wave64 emulation): same kernels, same
    plans, same scratch handling. For verification; it is slow."""
    if torch.version.hip or dispatch.device_kind(device) != "nvidia":
        raise RuntimeError(f"the emulated HIP runner needs an NVIDIA device, got {device}")
    plan = plan or plan_for(m, n, k)
    return _build_runner(m, n, k, device, plan, fallback_plan(m, n, k, plan))

"""aiter backend (ROCm, when aiter imports): aiter's own kernels through its public API.

Plan kinds, prior first:
- "a16wfp4_preshuffle": `gemm_a16wfp4_preshuffle` -- bf16 A quantized inside aiter's Triton GEMM,
  B_shuffle as given (viewed [N/16, 16*K/2]) and the shuffled scales viewed [N_pad/32, 32*cols]
  (the same bytes: aiter's gfx950 scale preshuffle is e8m0_shuffle's layout). The design of the
  phase-1 winner (format.md §6), with AMD's tuned configs.
- "a16wfp4": `gemm_a16wfp4` on B_q with unshuffled scales (one extra copy per call).
- "a4w4": the task's reference pipeline: aiter's per-1x32 Triton quant of A (shuffled scales),
  then `gemm_a4w4` on B_shuffle. Two launches per call, three where its ASM kernel splits K (it
  clears the output first).
aiter picks its own config per shape (its gfx950 JSON files); split-K configs add a reduce launch.
Checked against aiter's source (2026-08), not yet run against it: names, argument order, layouts.
"""

import collections
import importlib

import torch

from .. import spec

NAME = "aiter"
A16WFP4_MODULE = "aiter.ops.triton.gemm_a16wfp4"  # aiter maps this public path to its gemm package

Plan = collections.namedtuple("Plan", "kind")
A16WFP4_PRESHUFFLE, A16WFP4, A4W4 = Plan("a16wfp4_preshuffle"), Plan("a16wfp4"), Plan("a4w4")


def _import_aiter():
    import aiter
    return aiter


def _a16wfp4_api():
    """aiter's bf16-activation fp4 GEMM module, or None where this aiter lacks it."""
    try:
        return importlib.import_module(A16WFP4_MODULE)
    except Exception:  # older aiter, or one without its Triton ops
        return None


def is_available(device: torch.device) -> bool:
    if device.type != "cuda" or not torch.version.hip:
        return False
    try:
        _import_aiter()
    except Exception:  # not installed, or installed without a usable ROCm build
        return False
    return True


def available_plans():
    """The kinds this aiter offers, prior first."""
    api = _a16wfp4_api()
    plans = []
    if api is not None and hasattr(api, "gemm_a16wfp4_preshuffle"):
        plans.append(A16WFP4_PRESHUFFLE)
    if api is not None and hasattr(api, "gemm_a16wfp4"):
        plans.append(A16WFP4)
    return plans + [A4W4]


# aiter's preshuffle kernel loads A and B only in whole 512-K steps (no masked tail): other K fail
# to compile there, so it is not offered for them.
PRESHUFFLE_K_STEP = 512


# Its B loads wrap rows with `% N` on the unpacked N, not on the [N/16] rows they index: where N is
# not a multiple of its BLOCK_N (aiter's configs use up to 256) the last tile reads past B_shuffle.
PRESHUFFLE_N_STEP = 256


def fits(plan: Plan, k: int, n: int = None) -> bool:
    if plan != A16WFP4_PRESHUFFLE:
        return True
    return k % PRESHUFFLE_K_STEP == 0 and (n is None or n % PRESHUFFLE_N_STEP == 0)


def candidates(m: int, n: int, k: int, device: torch.device):
    return [plan for plan in available_plans() if fits(plan, k, n)] if is_available(device) else []


def plan_label(plan: Plan) -> str:
    return plan.kind


def plan_family(plan: Plan) -> str:
    return plan.kind


# aiter compiles its Triton kernels inside the first call: a first run includes that compile.
FIRST_RUN_LIMIT_S = 120.0


def _b_shuffle_or_made(b_q, b_shuffle):
    return spec.shuffle_weight(b_q) if b_shuffle is None else b_shuffle


def _a16wfp4_preshuffle_runner(n, k):
    gemm = _a16wfp4_api().gemm_a16wfp4_preshuffle

    def run(a, b_q, b_shuffle, b_scale_sh):
        w = _b_shuffle_or_made(b_q, b_shuffle).view(torch.uint8).view(n // 16, 16 * (k // 2))
        scales = b_scale_sh.view(torch.uint8).view(b_scale_sh.shape[0] // 32, 32 * b_scale_sh.shape[1])
        return gemm(a, w, scales, prequant=True, dtype=torch.bfloat16)

    return run


def _a16wfp4_runner(n, k):
    gemm = _a16wfp4_api().gemm_a16wfp4

    def run(a, b_q, b_shuffle, b_scale_sh):
        scales = spec.e8m0_unshuffle(b_scale_sh.view(torch.uint8), n, k // spec.SCALE_BLOCK)
        return gemm(a, b_q.view(torch.uint8), scales, dtype=torch.bfloat16)

    return run


def _a4w4_runner(n, k):
    aiter = _import_aiter()
    quant_a = aiter.get_triton_quant(aiter.QuantType.per_1x32)
    fp4x2, e8m0, bf16 = aiter.dtypes.fp4x2, aiter.dtypes.fp8_e8m0, aiter.dtypes.bf16

    def run(a, b_q, b_shuffle, b_scale_sh):
        # Inputs arrive as uint8 views; gemm_a4w4 dispatches on aiter's own dtypes.
        a_q, a_scale_sh = quant_a(a, shuffle=True)
        return aiter.gemm_a4w4(a_q, _b_shuffle_or_made(b_q, b_shuffle).view(fp4x2), a_scale_sh,
                               b_scale_sh.view(e8m0), dtype=bf16, bpreshuffle=True)

    return run


_RUNNERS = {A16WFP4_PRESHUFFLE: _a16wfp4_preshuffle_runner, A16WFP4: _a16wfp4_runner, A4W4: _a4w4_runner}


def make_runner(m: int, n: int, k: int, device: torch.device, plan: Plan = None):
    """The runner for this shape; `plan` (a kind) overrides the prior (the tuner sweeps with it)."""
    plan = plan or next(p for p in available_plans() if fits(p, k, n))
    if plan not in _RUNNERS:
        raise ValueError(f"plan: unknown aiter kind {plan!r}; choose from {[p.kind for p in _RUNNERS]}")
    run = _RUNNERS[plan](n, k)
    run.plan = plan
    return run

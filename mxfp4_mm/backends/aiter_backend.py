"""aiter backend: the task's reference pipeline, used as a fallback on ROCm when aiter imports.

Same calls as the official reference: aiter's per-1x32 Triton quant of A (shuffled scales),
then `aiter.gemm_a4w4` on the preshuffled B. Two launches per call, which is acceptable for a
fallback; the HIP backend is the fast path on gfx950.
"""

import torch

from .. import spec

NAME = "aiter"


def _import_aiter():
    import aiter
    return aiter


def is_available(device: torch.device) -> bool:
    if device.type != "cuda" or not torch.version.hip:
        return False
    try:
        _import_aiter()
    except Exception:  # not installed, or installed without a usable ROCm build
        return False
    return True


def make_runner(m: int, n: int, k: int, device: torch.device):
    aiter = _import_aiter()
    quant_a = aiter.get_triton_quant(aiter.QuantType.per_1x32)
    fp4x2, e8m0, bf16 = aiter.dtypes.fp4x2, aiter.dtypes.fp8_e8m0, aiter.dtypes.bf16

    def run(a, b_q, b_shuffle, b_scale_sh):
        # Inputs arrive as uint8 views; gemm_a4w4 dispatches on aiter's own dtypes.
        if b_shuffle is None:
            b_shuffle = spec.shuffle_weight(b_q)
        a_q, a_scale_sh = quant_a(a, shuffle=True)
        return aiter.gemm_a4w4(a_q, b_shuffle.view(fp4x2), a_scale_sh, b_scale_sh.view(e8m0),
                               dtype=bf16, bpreshuffle=True)

    return run

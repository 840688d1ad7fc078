"""Pure-torch backend: the spec's reference GEMM. Runs everywhere; the fallback of last resort."""

import torch

from .. import spec

NAME = "torch"
REFERENCE = True  # the spec itself: never a tuning candidate, runs no kernel of ours


def is_available(device: torch.device) -> bool:
    return True


def make_runner(m: int, n: int, k: int, device: torch.device):
    scale_cols = k // spec.SCALE_BLOCK

    def run(a, b_q, b_shuffle, b_scale_sh):
        b_scales = spec.e8m0_unshuffle(b_scale_sh, n, scale_cols)
        return spec.reference_gemm(a, b_q, b_scales)

    return run

"""Types of the `amd-mxfp4-mm` task (same names as the official popcorn task.py)."""

from typing import TypedDict, TypeVar

import torch

# (A, B, B_q, B_shuffle, B_scale_sh), see reference.generate_input.
input_t = TypeVar("input_t", bound=tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor])
output_t = TypeVar("output_t", bound=torch.Tensor)


class TestSpec(TypedDict):
    m: int
    n: int
    k: int
    seed: int

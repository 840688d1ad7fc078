"""M = 0: `gemm`, `custom_kernel` and the custom op return an empty bf16 [0, N] on A's device, as
torch.mm does, and still check everything else (K % 64, N % 16, dtypes, device, contiguity)."""

import pytest
import torch

import mxfp4_mm
import mxfp4_mm.library  # noqa: F401  registers torch.ops.mxfp4_mm.gemm
from conftest import make_inputs


def _zero_row_inputs(n, k):
    seed = int(torch.randint(0, 2 ** 31, ()))
    _, b, b_q, b_shuffle, b_scale_sh = make_inputs(1, n, k, seed=seed)
    return [torch.randn(0, k, dtype=torch.bfloat16), b, b_q, b_shuffle, b_scale_sh]


@pytest.mark.parametrize("n,k", [(16, 64), (48, 320), (2880, 512)])
def test_zero_rows_give_an_empty_bf16_result_like_torch_mm(n, k):
    a, b, b_q, b_shuffle, b_scale_sh = _zero_row_inputs(n, k)
    expected = torch.mm(a, b.t())
    calls = {
        "gemm": lambda: mxfp4_mm.gemm(a, b_q, b_scale_sh),
        "gemm with b_shuffle": lambda: mxfp4_mm.gemm(a, b_q, b_scale_sh, b_shuffle),
        "custom_kernel": lambda: mxfp4_mm.custom_kernel((a, b, b_q, b_shuffle, b_scale_sh)),
        "torch.ops": lambda: torch.ops.mxfp4_mm.gemm(a, b_q, b_scale_sh, b_shuffle),
    }
    outputs = []
    for name, call in calls.items():
        out = call()
        assert out.shape == expected.shape == (0, n), name
        assert out.dtype == torch.bfloat16 and out.device == a.device, name
        outputs.append(out)
    assert len({id(o) for o in outputs}) == len(outputs)  # a new tensor every call


def test_zero_rows_from_a_strided_view_of_a_bigger_a():
    a, _, b_q, b_shuffle, b_scale_sh = _zero_row_inputs(32, 128)
    wide = torch.randn(3, 256, dtype=torch.bfloat16)
    assert mxfp4_mm.gemm(wide[:0, :128], b_q, b_scale_sh, b_shuffle).shape == (0, 32)


def _replaced(index, make):
    data = _zero_row_inputs(32, 128)
    data[index] = make(data[index])
    return tuple(data)


@pytest.mark.parametrize("index,make,error,match", [
    (0, lambda a: torch.randn(0, 96, dtype=torch.bfloat16), ValueError, "multiple of 64"),
    (0, lambda a: a.float(), TypeError, "A must be torch.bfloat16"),
    (0, lambda a: a.reshape(0), ValueError, "A must be 2-D"),
    (0, lambda a: a.to("meta"), ValueError, "B_q is on cpu but A is on meta"),
    (2, lambda b_q: b_q[:24], ValueError, "multiple of 16"),
    (2, lambda b_q: b_q[:, :32], ValueError, "B_q must have shape"),
    (2, lambda b_q: b_q.float(), TypeError, "B_q must be packed fp4"),
    (2, lambda b_q: b_q.t().contiguous().t(), ValueError, "B_q must"),
    (2, lambda b_q: torch.zeros(32, 128, dtype=torch.uint8)[:, ::2], ValueError, "B_q must be contiguous"),
    (2, lambda b_q: b_q.to("meta"), ValueError, "B_q is on meta but A is on cpu"),
    (3, lambda b_shuffle: b_shuffle[:16], ValueError, "B_shuffle must have shape"),
    (4, lambda b_scale_sh: b_scale_sh[:, :4], ValueError, "B_scale_sh must be"),
    (4, lambda b_scale_sh: b_scale_sh.float(), TypeError, "B_scale_sh must be e8m0"),
])
def test_zero_rows_are_still_validated(index, make, error, match):
    data = _replaced(index, make)
    with pytest.raises(error, match=match):
        mxfp4_mm.custom_kernel(data)
    a, _, b_q, b_shuffle, b_scale_sh = data
    with pytest.raises(error, match=match):
        mxfp4_mm.gemm(a, b_q, b_scale_sh, b_shuffle)

"""The spec's public functions check their arguments (TypeError / ValueError naming the argument and
the rule, never a crash inside reshape) and give empty results of the right shape for zero rows."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from mxfp4_mm import spec

u8 = torch.uint8


def _codes(*shape):
    return torch.randint(0, 256, shape, dtype=u8)


def _scales(*shape):
    return torch.randint(100, 150, shape, dtype=u8)


def _bf16(*shape):
    return torch.randn(shape, dtype=torch.bfloat16)


@settings(max_examples=20, deadline=None)
@given(k32=st.integers(0, 8), n16=st.integers(0, 4), lead=st.integers(0, 3))
def test_zero_rows_give_empty_results_of_the_right_shape(k32, n16, lead):
    k, n = 32 * k32, 16 * n16
    codes, scales = spec.quantize_mxfp4(_bf16(lead, 0, k))
    assert codes.shape == (lead, 0, k // 2) and scales.shape == (lead, 0, k // 32)
    assert codes.dtype == scales.dtype == u8
    values = spec.dequantize_mxfp4(codes, scales)
    assert values.shape == (lead, 0, k) and values.dtype == torch.float32

    b_codes, b_scales = spec.quantize_mxfp4(_bf16(n, k))
    c = spec.reference_gemm(_bf16(0, k), b_codes, b_scales)
    assert c.shape == (0, n) and c.dtype == torch.bfloat16

    shuffled = spec.e8m0_shuffle(scales[0] if lead else _scales(0, k // 32))
    assert shuffled.shape == (0, spec.padded_scale_shape(0, k // 32)[1])
    assert spec.e8m0_unshuffle(shuffled, 0, k // 32).shape == (0, k // 32)


@settings(max_examples=20, deadline=None)
@given(n16=st.integers(0, 3), k64=st.integers(1, 4))
def test_zero_row_weights_shuffle_to_empty(n16, k64):
    codes = _codes(16 * n16, 32 * k64)
    shuffled = spec.shuffle_weight(codes)
    assert shuffled.shape == codes.shape
    assert torch.equal(spec.unshuffle_weight(shuffled), codes)


def test_reference_gemm_of_zero_rows_equals_torch_mm_shape():
    b_codes, b_scales = spec.quantize_mxfp4(_bf16(48, 128))
    a = _bf16(0, 128)
    assert spec.reference_gemm(a, b_codes, b_scales).shape == torch.mm(a, _bf16(128, 48)).shape


# Device mismatches use "meta", a second device on a CPU-only machine (the checks read only metadata).
BAD_CALLS = [
    # quantize_mxfp4
    (lambda: spec.quantize_mxfp4("x"), TypeError, r"x must be a torch\.Tensor"),
    (lambda: spec.quantize_mxfp4(torch.ones(2, 64, dtype=torch.int32)), TypeError, "x must be a floating-point"),
    (lambda: spec.quantize_mxfp4(torch.tensor(1.0)), ValueError, "x must have at least one dimension"),
    (lambda: spec.quantize_mxfp4(_bf16(4, 48)), ValueError, r"x: the last dim K must be a multiple of 32.*\[4, 48\]"),
    (lambda: spec.quantize_mxfp4(_bf16(0, 40)), ValueError, "multiple of 32"),
    # dequantize_mxfp4
    (lambda: spec.dequantize_mxfp4(_codes(2, 16).float(), _scales(2, 1)), TypeError, "codes must be packed fp4"),
    (lambda: spec.dequantize_mxfp4(_codes(2, 16), _scales(2, 1).float()), TypeError, "scales must be e8m0 bytes"),
    (lambda: spec.dequantize_mxfp4(_codes(2, 16), _scales(2, 2)), ValueError, r"codes \[\.\.\., K/2\] and scales"),
    (lambda: spec.dequantize_mxfp4(_codes(2, 16), _scales(3, 1)), ValueError, "must agree"),
    (lambda: spec.dequantize_mxfp4(_codes(0, 16), _scales(0, 2)), ValueError, "must agree"),
    (lambda: spec.dequantize_mxfp4(_codes(16), torch.tensor(127, dtype=u8)), ValueError, "must agree"),
    (lambda: spec.dequantize_mxfp4(_codes(2, 16), _scales(2, 1).to("meta")), ValueError,
     "scales is on meta but codes is on cpu"),
    # e8m0_shuffle / e8m0_unshuffle
    (lambda: spec.e8m0_shuffle([1, 2]), TypeError, r"scales must be a torch\.Tensor"),
    (lambda: spec.e8m0_shuffle(_scales(4, 2).float()), TypeError, "scales must be e8m0 bytes"),
    (lambda: spec.e8m0_shuffle(_scales(8)), ValueError, r"scales must be 2-D \[rows, cols\]"),
    (lambda: spec.e8m0_unshuffle(_scales(33, 8), 16, 4), ValueError, r"R % 32 == 0 and C % 8 == 0.*\[33, 8\]"),
    (lambda: spec.e8m0_unshuffle(_scales(256, 12), 16, 4), ValueError, "C % 8 == 0"),
    (lambda: spec.e8m0_unshuffle(_scales(256, 8, 1), 16, 4), ValueError, "shuffled must be 2-D"),
    (lambda: spec.e8m0_unshuffle(_scales(256, 8), 257, 4), ValueError, "rows, cols must fit.*rows=257"),
    (lambda: spec.e8m0_unshuffle(_scales(256, 8), 16, 9), ValueError, "rows, cols must fit.*cols=9"),
    (lambda: spec.e8m0_unshuffle(_scales(256, 8), -1, 4), ValueError, "rows must be >= 0"),
    (lambda: spec.e8m0_unshuffle(_scales(256, 8), 16.0, 4), TypeError, "rows must be an int, got float"),
    (lambda: spec.e8m0_unshuffle(_scales(256, 8), 16, True), TypeError, "cols must be an int, got bool"),
    (lambda: spec.e8m0_unshuffle(_scales(256, 8).float(), 16, 4), TypeError, "shuffled must be e8m0 bytes"),
    # shuffle_weight / unshuffle_weight
    (lambda: spec.shuffle_weight(_codes(24, 32)), ValueError, r"N \(codes\.shape\[0\]\) must be a multiple of 16, got 24"),
    (lambda: spec.shuffle_weight(_codes(16, 48)), ValueError, r"K/2 \(codes\.shape\[1\]\) must be a multiple of 32 \(K % 64"),
    (lambda: spec.shuffle_weight(_codes(2, 16, 32)), ValueError, r"codes must be 2-D \[N, K/2\]"),
    (lambda: spec.shuffle_weight(_codes(16, 32).float()), TypeError, "codes must be packed fp4"),
    (lambda: spec.unshuffle_weight(_codes(8, 32)), ValueError, r"N \(shuffled\.shape\[0\]\)"),
    (lambda: spec.unshuffle_weight(_codes(16, 40)), ValueError, r"K/2 \(shuffled\.shape\[1\]\)"),
    (lambda: spec.unshuffle_weight(None), TypeError, r"shuffled must be a torch\.Tensor, got NoneType"),
    # reference_gemm
    (lambda: spec.reference_gemm(_bf16(4, 64).int(), _codes(16, 32), _scales(16, 2)), TypeError, "a must be a floating"),
    (lambda: spec.reference_gemm(_bf16(64), _codes(16, 32), _scales(16, 2)), ValueError, r"a must be 2-D \[M, K\]"),
    (lambda: spec.reference_gemm(_bf16(4, 48), _codes(16, 24), _scales(16, 1)), ValueError,
     r"K \(a\.shape\[1\]\) must be a multiple of 32, got 48"),
    (lambda: spec.reference_gemm(_bf16(4, 64), _codes(16, 64), _scales(16, 2)), ValueError,
     r"b_codes must have shape \[N, K/2\] = \[N, 32\], got \[16, 64\]"),
    (lambda: spec.reference_gemm(_bf16(4, 64), _codes(16, 32), _scales(256, 8)), ValueError,
     r"b_scales must be the unshuffled scales \[N, K/32\] = \[16, 2\]"),
    (lambda: spec.reference_gemm(_bf16(4, 64), _codes(16, 32).float(), _scales(16, 2)), TypeError, "b_codes must be packed"),
    (lambda: spec.reference_gemm(_bf16(4, 64), _codes(16, 32), _scales(16, 2).float()), TypeError, "b_scales must be e8m0"),
    (lambda: spec.reference_gemm(_bf16(4, 64), _codes(16, 32).to("meta"), _scales(16, 2)), ValueError,
     "b_codes is on meta but a is on cpu"),
    (lambda: spec.reference_gemm(_bf16(0, 64), _codes(16, 32), _scales(16, 3)), ValueError, "b_scales must be"),
]


@pytest.mark.parametrize("call,error,match", BAD_CALLS)
def test_bad_arguments_raise_clear_errors(call, error, match):
    with pytest.raises(error, match=match) as raised:
        call()
    assert "reshape" not in str(raised.value) and "view" not in str(raised.value)


def test_valid_inputs_still_round_trip_with_fresh_data():
    """The checks reject nothing valid: fresh random B of an odd size through every function."""
    n, k = 48, 192
    b = _bf16(n, k) * torch.rand(()) * 100
    codes, scales = spec.quantize_mxfp4(b)
    assert torch.equal(spec.e8m0_unshuffle(spec.e8m0_shuffle(scales), n, k // 32), scales)
    assert torch.equal(spec.unshuffle_weight(spec.shuffle_weight(codes)), codes)
    a = _bf16(5, k)
    expected = (spec.dequantize_mxfp4(*spec.quantize_mxfp4(a)).double()
                @ spec.dequantize_mxfp4(codes, scales).double().T).to(torch.bfloat16)
    torch.testing.assert_close(spec.reference_gemm(a, codes, scales), expected, rtol=1e-2, atol=1e-2)
    # int8 views and torch's own fp4 / e8m0 dtypes are the same bytes
    same = spec.reference_gemm(a, codes.view(torch.int8), scales.view(torch.int8))
    assert torch.equal(same, spec.reference_gemm(a, codes, scales))

"""The spec module against the golden vectors, plus round-trip properties of the layouts."""

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

from mxfp4_mm import spec

GOLDEN = Path(__file__).parent / "data" / "mxfp4_quant.pt"


@pytest.fixture(scope="module")
def golden():
    return torch.load(GOLDEN)


def test_quant_matches_golden_bit_exactly_including_extreme_blocks(golden):
    assert len(golden["cases"]) >= 8
    for case in golden["cases"]:
        codes, scales = spec.quantize_mxfp4(case["x"])
        assert torch.equal(scales, case["scale"]), case["kind"]
        assert torch.equal(codes, case["fp4"]), case["kind"]


def test_golden_layouts(golden):
    sh = golden["shuffle"]
    codes, scales = spec.quantize_mxfp4(sh["B"])
    assert torch.equal(codes, sh["B_q"]) and torch.equal(scales, sh["B_scale"])
    assert torch.equal(spec.e8m0_shuffle(scales), sh["B_scale_sh_pad0"])
    assert torch.equal(spec.shuffle_weight(codes), sh["B_shuffle"])
    n, cols = scales.shape
    assert torch.equal(spec.e8m0_unshuffle(sh["B_scale_sh_pad0"], n, cols), scales)
    flat = sh["B_scale_sh_pad0"].flatten()
    padded_cols = sh["B_scale_sh_pad0"].shape[1]
    for r, c in [(0, 0), (17, 3), (95, 15), (40, 9), (63, 4)]:
        assert flat[spec.shuffled_scale_index(r, c, padded_cols)] == scales[r, c]


@pytest.mark.parametrize("value,code", [(0.25, 0), (0.75, 2), (1.25, 2), (1.75, 4), (2.5, 4),
                                        (3.5, 6), (5.0, 6), (5.01, 7), (100.0, 7), (0.26, 1)])
def test_e2m1_ties_round_to_even(value, code):
    assert spec.encode_e2m1(torch.tensor([value, -value])).tolist() == [code, code]


def test_scale_of_zero_block_is_byte_zero_and_decodes_to_2_pow_minus_127():
    codes, scales = spec.quantize_mxfp4(torch.zeros(1, 32, dtype=torch.bfloat16))
    assert scales.item() == 0 and codes.eq(0).all()
    assert spec.e8m0_to_float(scales).item() == 2.0 ** -127
    assert torch.isnan(spec.e8m0_to_float(torch.tensor([255], dtype=torch.uint8))).all()


def test_dequant_of_quant_is_within_one_code_step():
    x = torch.randn(8, 256, dtype=torch.bfloat16)
    back = spec.dequantize_mxfp4(*spec.quantize_mxfp4(x))
    scale = spec.e8m0_to_float(spec.quantize_mxfp4(x)[1]).repeat_interleave(32, dim=1)
    assert ((back - x.float()).abs() <= scale * 1.0 + 1e-30).all()


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(1, 300), cols=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_e8m0_shuffle_round_trip(rows, cols, seed):
    gen = torch.Generator().manual_seed(seed)
    s = torch.randint(0, 255, (rows, cols), dtype=torch.uint8, generator=gen)
    sh = spec.e8m0_shuffle(s)
    assert sh.shape == spec.padded_scale_shape(rows, cols)
    assert torch.equal(spec.e8m0_unshuffle(sh, rows, cols), s)
    flat = sh.flatten()
    r, c = rows - 1, cols - 1
    assert flat[spec.shuffled_scale_index(r, c, sh.shape[1])] == s[r, c]


@settings(max_examples=30, deadline=None)
@given(n16=st.integers(1, 8), k64=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_shuffle_weight_round_trip(n16, k64, seed):
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 256, (16 * n16, 32 * k64), dtype=torch.uint8, generator=gen)
    assert torch.equal(spec.unshuffle_weight(spec.shuffle_weight(codes)), codes)


def test_reference_gemm_equals_float64_product_of_dequantized_operands():
    a = torch.randn(5, 192, dtype=torch.bfloat16)
    b_codes, b_scales = spec.quantize_mxfp4(torch.randn(32, 192, dtype=torch.bfloat16))
    a_deq = spec.dequantize_mxfp4(*spec.quantize_mxfp4(a)).double()
    expected = (a_deq @ spec.dequantize_mxfp4(b_codes, b_scales).double().T).to(torch.bfloat16)
    torch.testing.assert_close(spec.reference_gemm(a, b_codes, b_scales), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("nan_bits", [0x7FC0, 0xFFC0, 0x7FE3, 0x7FFF, 0x7F81])
def test_a_nan_block_gets_the_top_scale_whatever_its_payload(nan_bits):
    """NaN amax -> exponent 127 and every code 0 (the block adds nothing), also for payloads whose
    rounding would carry out of the exponent field (a GPU's amax may keep the input's NaN bits)."""
    bits = torch.full((1, 32), 0x3F80, dtype=torch.int32)  # 1.0
    bits[0, 5] = nan_bits
    x = (bits - (bits >= 0x8000).int() * 0x10000).to(torch.int16).view(torch.bfloat16)
    codes, scales = spec.quantize_mxfp4(x)
    assert scales.item() == 254 and (spec.unpack_nibbles(codes) & 7).eq(0).all()
    amax = torch.tensor([(nan_bits & 0x7FFF) << 16], dtype=torch.int32).view(torch.float32)
    assert spec.exponent_of_amax(amax).item() == 127


def test_the_code_table_is_e2m1():
    assert spec.e2m1_lut("cpu").tolist() == list(spec.E2M1_VALUES) + [-v for v in spec.E2M1_VALUES]


def _dequantize_by_nibbles(codes, scales):
    """dequantize_mxfp4 written plainly: a code's value from e2m1_lut, times its block's scale."""
    values = spec.e2m1_lut(codes.device)[spec.unpack_nibbles(codes).long()]
    blocks = values.reshape(*values.shape[:-1], values.shape[-1] // 32, 32)
    return (blocks * spec.e8m0_to_float(scales).unsqueeze(-1)).reshape(values.shape)


def test_dequant_equals_the_per_code_lookup_bit_for_bit_on_every_byte_and_scale():
    # row r: scale byte r on every block; every packed byte in every block, in a fresh order per row
    g = torch.Generator().manual_seed(7)
    codes = torch.stack([torch.randperm(256, generator=g) for _ in range(256)]).to(torch.uint8).repeat(1, 2)
    scales = torch.arange(256, dtype=torch.uint8).unsqueeze(1).repeat(1, 32)
    got, want = spec.dequantize_mxfp4(codes, scales), _dequantize_by_nibbles(codes, scales)
    assert got.shape == (256, 1024) and got.view(torch.int32).equal(want.view(torch.int32))


@pytest.mark.parametrize("lead", [(), (0,), (3,), (2, 5)])
def test_dequant_keeps_leading_dims_and_reads_strided_codes(lead):
    g = torch.Generator().manual_seed(11)
    codes = torch.randint(0, 256, (*lead, 64, 2), dtype=torch.uint8, generator=g)[..., 0]  # strided
    scales = torch.randint(100, 150, (*lead, 4), dtype=torch.uint8, generator=g)
    got = spec.dequantize_mxfp4(codes, scales)
    assert got.shape == (*lead, 128) and got.equal(_dequantize_by_nibbles(codes.contiguous(), scales))

"""CPU: kernels/mxfp4_exact.h (the scalar MXFP4 math of the cuda kernel's exact fallback) compiled for
the host with the ziglang wheel's clang and checked against spec.py bit for bit: every bf16 bit
pattern through quantize + dequantize, and every (e2m1 code, e8m0 byte) pair. Skipped (not passed)
where ziglang is missing."""

import ctypes
import importlib.util
import subprocess
import sys

import pytest
import torch

from mxfp4_mm import spec
from mxfp4_mm.kernels import read_source

if importlib.util.find_spec("ziglang") is None:
    pytest.skip("ziglang (the host clang for this test) is not installed", allow_module_level=True)

DRIVER = r"""
#include "mxfp4_exact.h"
extern "C" void quant_dequant_blocks(const unsigned short* x, float* out, int blocks) {
    for (int b = 0; b < blocks; ++b) {
        unsigned int amax = 0;
        for (int i = 0; i < 32; ++i) amax = amax > (x[32 * b + i] & 0x7FFFu) ? amax : (x[32 * b + i] & 0x7FFFu);
        const int e = block_exponent(amax);
        for (int i = 0; i < 32; ++i) out[32 * b + i] = quant_dequant(x[32 * b + i], e);
    }
}
extern "C" long long rounding_mismatches() {  // e2m1_round against e2m1_code: every bf16, every e
    long long bad = 0;
    for (int e = -127; e <= 127; ++e)
        for (unsigned int bits = 0; bits < 65536; ++bits) {
            const float q = mxfp4_bits_to_float(bits << 16) * pow2_exact(-e);
            const float got = e2m1_round(q < 0.f ? -q : q), want = e2m1_magnitude(e2m1_code(bits, e));
            bad += got != want;  // a NaN got counts too
        }
    return bad;
}
extern "C" void code_scale_values(float* out) {
    for (unsigned int code = 0; code < 16; ++code)
        for (unsigned int s = 0; s < 256; ++s) out[code * 256 + s] = e2m1_e8m0_value(code, s);
}
"""


@pytest.fixture(scope="module")
def exact_lib(tmp_path_factory):
    d = tmp_path_factory.mktemp("exact")
    (d / "mxfp4_exact.h").write_text(read_source("mxfp4_exact.h"))
    (d / "driver.cpp").write_text(DRIVER)
    lib = d / "libexact.so"
    done = subprocess.run([sys.executable, "-m", "ziglang", "c++", "-shared", "-fPIC", "-O2", "-std=c++17",
                           "-o", str(lib), str(d / "driver.cpp")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return ctypes.CDLL(str(lib))


def _bits(t):
    return t.contiguous().view(torch.int32)


def test_quantize_dequantize_matches_spec_for_every_bf16_pattern(exact_lib):
    gen = torch.Generator().manual_seed(0)
    patterns = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    shuffled = patterns[torch.randperm(65536, generator=gen)]              # mixed blocks
    by_binade = patterns.view(-1, 32)                                      # neighbours share a block
    scaled = (torch.randn(4096, generator=gen) * torch.pow(2.0, torch.randint(-140, 128, (4096,), generator=gen).float())).to(torch.bfloat16).view(torch.int16)
    x = torch.cat([shuffled, by_binade.flatten(), scaled]).view(torch.bfloat16).reshape(-1, 32)
    want = spec.dequantize_mxfp4(*spec.quantize_mxfp4(x)).reshape(-1)
    got = torch.empty(x.numel(), dtype=torch.float32)
    raw = x.contiguous().view(torch.int16)
    exact_lib.quant_dequant_blocks(ctypes.c_void_p(raw.data_ptr()), ctypes.c_void_p(got.data_ptr()), x.shape[0])
    assert not want.isnan().any()  # NaN inputs quantize to code 0
    assert torch.equal(_bits(got), _bits(want))


def test_code_and_scale_values_match_spec(exact_lib):
    got = torch.empty(16 * 256, dtype=torch.float32)
    exact_lib.code_scale_values(ctypes.c_void_p(got.data_ptr()))
    codes = torch.arange(16, dtype=torch.uint8).repeat(2)                  # 32 codes = one block
    packed = spec.pack_nibbles(codes).expand(256, -1).contiguous()
    scales = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(256, 1)
    want = spec.dequantize_mxfp4(packed, scales)[:, :16].T.reshape(-1)    # [code, scale byte]
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan) and nan.sum() == 16             # byte 255 only
    assert torch.equal(_bits(got[~nan]), _bits(want[~nan]))


def test_two_add_rounding_matches_the_compares_for_every_bf16_and_exponent(exact_lib):
    """e2m1_round (the fp8 quantization's rounding) against e2m1_code over 65,536 patterns x 255
    exponents: NaN, inf, zeros, subnormals and every tie included."""
    exact_lib.rounding_mismatches.restype = ctypes.c_longlong
    assert exact_lib.rounding_mismatches() == 0

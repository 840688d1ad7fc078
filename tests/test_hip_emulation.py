"""The gfx950 HIP GEMM kernels, run on NVIDIA through arch_nvidia.h (wave64 and the scaled MFMA
emulated), from the very same source that hiprtc compiles for MI355X.

GPU only (@pytest.mark.gpu): every variant x split-K on the task shapes and odd shapes against the
spec's reference GEMM with the harness tolerance, poisoned scale padding, self-resetting tile
counters, and the in-kernel A quantization bit-exact against the golden vectors.
"""

import re
from pathlib import Path

import pytest
import torch

from mxfp4_mm import spec
from mxfp4_mm.kernels import read_source
from conftest import assert_harness_close, make_inputs, reference_output

pytestmark = pytest.mark.gpu

GOLDEN = Path(__file__).parent / "data" / "mxfp4_quant.pt"
SOURCE = "mxfp4_gemm.hip"
VARIANT = re.compile(r"^MXFP4_GEMM_VARIANT\((\w+), (\d+), (\d+), (\d+), (\d+), (true|false)\)", re.M)

TEST_SHAPES = [(8, 2112, 7168), (16, 3072, 1536), (64, 3072, 1536), (256, 2880, 512)]
BENCHMARK_SHAPES = [(4, 2880, 512), (16, 2112, 7168), (32, 4096, 512), (32, 2880, 512), (64, 7168, 2048),
                    (256, 3072, 1536)]
ODD_SHAPES = [(m, n, k) for m in (1, 3, 17, 33, 65) for n in (16, 48) for k in (64, 192, 576)]
SHAPES = TEST_SHAPES + BENCHMARK_SHAPES + ODD_SHAPES + [(5, 80, 384), (40, 144, 1344)]
SPLITS = (1, 2, 5)


def variants():
    """(name, tile_m, tile_n, waves, b_shuffled) of every GEMM variant in the source."""
    found = []
    for name, mfma, sub_m, sub_n, waves, shuffled in VARIANT.findall(read_source(SOURCE)):
        found.append((name, int(mfma) * int(sub_m), int(mfma) * int(sub_n), int(waves), shuffled == "true"))
    return found


@pytest.fixture(scope="module")
def module():
    from mxfp4_mm import runtime
    device = torch.device("cuda")
    if not runtime.is_available(device):
        pytest.skip("no NVRTC / driver")
    return runtime.load_module(read_source(SOURCE), device)


@pytest.fixture(scope="module")
def launchers(module):
    return {name: module.function(name).launcher("ppppppiiiii") for name, *_ in variants()}


def run_gemm(launch, variant, data, split_k, counters=None):
    _, tile_m, tile_n, waves, shuffled = variant
    a, _, b_q, b_shuffle, b_scale_sh = data
    m, k = a.shape
    n = b_q.shape[0]
    tiles_m, tiles_n = -(-m // tile_m), -(-n // tile_n)
    out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    partials = torch.empty((split_k, m, n) if split_k > 1 else (1,), dtype=torch.float32, device=a.device)
    if counters is None:
        counters = torch.zeros(tiles_m * tiles_n, dtype=torch.int32, device=a.device)
    launch((tiles_n, tiles_m, split_k), (64 * waves, 1, 1), 0, a, b_shuffle if shuffled else b_q, b_scale_sh,
           out, partials, counters, m, n, k, b_scale_sh.shape[1], split_k)
    return out


@pytest.fixture(scope="module")
def cases():
    """Inputs and reference output per shape, made once."""
    made = {}
    for i, shape in enumerate(SHAPES):
        data = make_inputs(*shape, seed=1000 + i, device="cuda")
        made[shape] = data, reference_output(data)
    return made


@pytest.mark.parametrize("variant", variants(), ids=lambda v: v[0])
@pytest.mark.parametrize("split_k", SPLITS)
def test_variant_matches_reference(launchers, cases, variant, split_k):
    for shape, (data, ref) in cases.items():
        counters = torch.zeros(1024 * 1024, dtype=torch.int32, device="cuda")
        out = run_gemm(launchers[variant[0]], variant, data, split_k, counters)
        torch.cuda.synchronize()
        assert int(counters.abs().sum()) == 0, f"{shape}: tile counters not reset"
        try:
            assert_harness_close(out, ref)
        except AssertionError as err:
            raise AssertionError(f"{variant[0]} split_k={split_k} shape={shape}: {err}") from None


def poison_scale_padding(b_scale_sh, n, k):
    """The same shuffled scales with every padding byte set to 255 (e8m0 NaN), as aiter may leave it."""
    real = spec.e8m0_shuffle(torch.ones((n, k // 32), dtype=torch.uint8, device=b_scale_sh.device))
    return torch.where(real.bool(), b_scale_sh, torch.full_like(b_scale_sh, 255))


@pytest.mark.parametrize("variant", variants(), ids=lambda v: v[0])
def test_scale_padding_is_never_used(launchers, variant):
    for shape in [(3, 48, 576), (17, 16, 192), (33, 2112, 7168 - 64)]:
        a, b, b_q, b_shuffle, b_scale_sh = make_inputs(*shape, seed=7, device="cuda")
        data = (a, b, b_q, b_shuffle, poison_scale_padding(b_scale_sh, shape[1], shape[2]))
        ref = reference_output((a, b, b_q, b_shuffle, b_scale_sh))
        for split_k in SPLITS:
            assert_harness_close(run_gemm(launchers[variant[0]], variant, data, split_k), ref)


def test_counters_reset_across_repeated_calls(launchers):
    variant = variants()[0]
    data = make_inputs(16, 2112, 7168, seed=3, device="cuda")
    ref = reference_output(data)
    counters = torch.zeros(64, dtype=torch.int32, device="cuda")
    for _ in range(3):
        assert_harness_close(run_gemm(launchers[variant[0]], variant, data, 4, counters), ref)
    torch.cuda.synchronize()
    assert int(counters.abs().sum()) == 0


def test_in_kernel_quantization_matches_golden(module):
    launch = module.function("mxfp4_quantize_a").launcher("pppii")
    for case in torch.load(GOLDEN)["cases"]:
        x = case["x"].cuda()
        m, k = x.shape
        codes = torch.empty((m, k // 2), dtype=torch.uint8, device="cuda")
        scales = torch.empty((m, k // 32), dtype=torch.uint8, device="cuda")
        launch((-(-m * (k // 32) // 256), 1, 1), (256, 1, 1), 0, x, codes, scales, m, k)
        ok = ~case["extreme_block"]
        assert torch.equal(scales.cpu()[ok], case["scale"][ok]), case["kind"]
        blocks = codes.cpu().reshape(m, k // 32, 16)
        assert torch.equal(blocks[ok], case["fp4"].reshape(m, k // 32, 16)[ok]), case["kind"]

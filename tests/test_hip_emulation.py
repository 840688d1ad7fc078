"""The gfx950 HIP GEMM kernels, run on NVIDIA through arch_gfx950_emulated.h (wave64, the scaled MFMA and the
fp4 convert emulated), from the very same source that hiprtc compiles for MI355X.

GPU only (@pytest.mark.gpu): every generic variant x split-K on the task shapes and odd shapes against
the spec's reference GEMM with the harness tolerance, poisoned scale padding, self-resetting tile
counters; every HIP candidate (specialized builds included) through the backend's runner on odd shapes
with poisoned padding, and the leading candidates on the task shapes; the emulated convert against
format.md §3 on every bf16 pattern; the in-kernel A quantization bit-exact against the golden vectors.
"""

import re
from pathlib import Path

import pytest
import torch

from mxfp4_mm import spec
from mxfp4_mm.backends import hip
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


def poison_scale_padding(b_scale_sh, n, k, random_bytes=False):
    """The same shuffled scales with every padding byte set to 255 (e8m0 NaN) or to random bytes, as
    aiter may leave it: reading a padding byte into a real column would show."""
    real = spec.e8m0_shuffle(torch.ones((n, k // 32), dtype=torch.uint8, device=b_scale_sh.device))
    fill = torch.full_like(b_scale_sh, 255)
    if random_bytes:
        fill = torch.randint(0, 256, b_scale_sh.shape, dtype=torch.uint8, device=b_scale_sh.device,
                             generator=torch.Generator(b_scale_sh.device).manual_seed(n + k))
    return torch.where(real.bool(), b_scale_sh, fill)


@pytest.mark.parametrize("variant", variants(), ids=lambda v: v[0])
def test_scale_padding_is_never_used(launchers, variant):
    for shape in [(3, 48, 576), (17, 16, 192), (33, 2112, 7168 - 64)]:
        a, b, b_q, b_shuffle, b_scale_sh = make_inputs(*shape, seed=7, device="cuda")
        data = (a, b, b_q, b_shuffle, poison_scale_padding(b_scale_sh, shape[1], shape[2]))
        ref = reference_output((a, b, b_q, b_shuffle, b_scale_sh))
        for split_k in SPLITS:
            assert_harness_close(run_gemm(launchers[variant[0]], variant, data, split_k), ref)
        data = (a, b, b_q, b_shuffle, poison_scale_padding(b_scale_sh, shape[1], shape[2], random_bytes=True))
        assert_harness_close(run_gemm(launchers[variant[0]], variant, data, 2), ref)


def test_counters_reset_across_repeated_calls(launchers):
    variant = variants()[0]
    data = make_inputs(16, 2112, 7168, seed=3, device="cuda")
    ref = reference_output(data)
    counters = torch.zeros(64, dtype=torch.int32, device="cuda")
    for _ in range(3):
        assert_harness_close(run_gemm(launchers[variant[0]], variant, data, 4, counters), ref)
    torch.cuda.synchronize()
    assert int(counters.abs().sum()) == 0


def quantize_in_kernel(module, x):
    launch = module.function("mxfp4_quantize_a").launcher("pppii")
    m, k = x.shape
    codes = torch.empty((m, k // 2), dtype=torch.uint8, device="cuda")
    scales = torch.empty((m, k // 32), dtype=torch.uint8, device="cuda")
    launch((-(-m * (k // 32) // 256), 1, 1), (256, 1, 1), 0, x, codes, scales, m, k)
    return codes.cpu().reshape(m, k // 32, 16), scales.cpu()


def test_in_kernel_quantization_matches_golden(module):
    """Non-extreme blocks: what the hardware must match bit for bit (the converts' contract)."""
    for case in torch.load(GOLDEN)["cases"]:
        codes, scales = quantize_in_kernel(module, case["x"].cuda())
        m, k = case["x"].shape
        ok = ~case["extreme_block"]
        assert torch.equal(scales[ok], case["scale"][ok]), case["kind"]
        assert torch.equal(codes[ok], case["fp4"].reshape(m, k // 32, 16)[ok]), case["kind"]


def test_emulated_quantization_matches_golden_on_extreme_blocks_too(module):
    """The emulation follows format.md §3 exactly (IEEE, no flush), so it also matches the golden
    vectors' exact results on extreme blocks, where the hardware may differ."""
    for case in torch.load(GOLDEN)["cases"]:
        codes, scales = quantize_in_kernel(module, case["x"].cuda())
        m, k = case["x"].shape
        assert torch.equal(scales, case["scale"]), case["kind"]
        assert torch.equal(codes, case["fp4"].reshape(m, k // 32, 16)), case["kind"]


CONVERT_EXPONENTS = (-127, -126, -125, -100, -3, -1, 0, 1, 4, 100, 125, 126, 127)


def expected_convert(pairs, exponents, old):
    """format.md §3: codes of bf16 * (1 / 2^e), RNE onto e2m1, saturating; byte i % 4 of old."""
    inv = spec._pow2_from_exponent(-exponents)
    codes = []
    for half in (pairs & 0xFFFF, pairs >> 16):
        x = (half << 16).to(torch.int32).view(torch.float32)
        codes.append(spec.encode_e2m1(x * inv).to(torch.int64) | ((half >> 12) & 8))
    byte = codes[0] | codes[1] << 4
    shift = 8 * (torch.arange(pairs.numel()) % 4)
    return (old & ~(255 << shift)) | byte << shift


def test_emulated_convert_follows_the_spec_on_every_bf16_pattern(module):
    launch = module.function("mxfp4_convert_pairs").launcher("ppppi")
    g = torch.Generator().manual_seed(5)
    patterns = torch.arange(65536, dtype=torch.int64)
    finite = (patterns & 0x7FFF) <= 0x7F80  # NaN patterns excluded: the instruction leaves them open
    low = patterns[finite]
    for e in CONVERT_EXPONENTS:
        high = low[torch.randperm(low.numel(), generator=g)]
        pairs = low | high << 16
        exponents = torch.full_like(pairs, e)
        old = torch.randint(0, 2 ** 32, pairs.shape, generator=g, dtype=torch.int64)
        scale = spec._pow2_from_exponent(exponents)
        out = torch.empty(pairs.numel(), dtype=torch.int32, device="cuda")
        launch((-(-pairs.numel() // 256), 1, 1), (256, 1, 1), 0, pairs.to(torch.int32).cuda(),
               scale.cuda(), old.to(torch.int32).cuda(), out, pairs.numel())
        got = out.cpu().to(torch.int64) & 0xFFFFFFFF
        assert torch.equal(got, expected_convert(pairs, exponents, old)), f"scale 2^{e}"


# ---- every candidate of the backend, through its runner ---------------------------------------------

# Odd shapes: M from 1, N % 32 == 16, K % 256 in {64, 192, 0} and K % 128 == 64; all candidates, padding
# poisoned. Task shapes: the first two candidates (each candidate is one more NVRTC compile).
CANDIDATE_ODD_SHAPES = [(1, 16, 64), (3, 48, 192), (17, 80, 576), (33, 144, 320), (65, 48, 1344)]
LEADING_CANDIDATES = 2


def candidate_cases():
    cases = [(shape, plan) for shape in CANDIDATE_ODD_SHAPES for plan in hip.candidates(*shape)]
    cases += [(shape, plan) for shape in TEST_SHAPES + BENCHMARK_SHAPES
              for plan in hip.candidates(*shape)[:LEADING_CANDIDATES]]
    return cases


@pytest.mark.parametrize("shape,plan", candidate_cases(),
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) and isinstance(v[0], int)
                         else hip.plan_label(v))
def test_candidate_through_the_backend_matches_reference(shape, plan):
    from mxfp4_mm import runtime
    device = torch.device("cuda")
    if not runtime.is_available(device):
        pytest.skip("no NVRTC / driver")
    runner = hip.make_emulated_runner(*shape, device, plan)
    assert runner.plan == plan
    for seed in range(2):  # twice on one runner: the split-K counters must have reset
        a, b, b_q, b_shuffle, b_scale_sh = make_inputs(*shape, seed=300 + seed, device="cuda")
        ref = reference_output((a, b, b_q, b_shuffle, b_scale_sh))
        poisoned = poison_scale_padding(b_scale_sh, shape[1], shape[2], random_bytes=seed == 1)
        try:
            assert_harness_close(runner(a, b_q, b_shuffle, poisoned), ref)
        except AssertionError as err:
            raise AssertionError(f"{hip.plan_label(plan)} shape={shape} seed={seed}: {err}") from None


# ---- values past the fp32 range: the exact fallback ------------------------------------------------

# Where the spec's fp32 GEMM overflows, the scaled MFMA (a block's exact dot product times 2^(ea+eb),
# wider range) would not: a block with such a scale byte recomputes its tile in scalar fp32. Each case
# edits ordinary inputs: A bf16 patterns at (row, col), B codes at (row, col), B scale bytes at (row, block).
EXTREME_CASES = {
    "a_inf": dict(a_bits={(0, 3): 0x7F80}),              # A code 6 under 2^127: +inf, NaN where B is 0
    "a_nan": dict(a_bits={(0, 3): 0x7FC0}),              # scale 2^127, every code 0: the block adds 0
    "a_neg_max": dict(a_bits={(0, 40): 0xFF7F}),         # bf16 -max rounds up to 2^128: byte 254, -inf
    "b_scale_252": dict(b_codes={(3, 7): 7}, b_scales={(3, 0): 252}),   # 6 * 2^125 * |a| >= 2^128
    "b_scale_253": dict(b_codes={(5, 0): 6, (5, 1): 7}, b_scales={(5, 0): 253}),  # 4 * 2^126: inf
    "b_scale_254": dict(b_codes={(2, 40): 4}, b_scales={(2, 1): 254}),  # 2 * 2^127: inf
    "b_scale_255": dict(b_scales={(9, 0): 255}),        # NaN: the whole column
}
EXTREME_SHAPES = [(1, 16, 64), (17, 80, 576)]


def extreme_inputs(m, n, k, seed, a_bits=(), b_codes=(), b_scales=()):
    """(A, None, B_q, B_shuffle, B_scale_sh) on the GPU: randn A and B (B quantized by the spec) with
    the case's edits."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn((m, k), generator=gen).to(torch.bfloat16)
    for (row, col), bits in dict(a_bits).items():
        a.view(torch.int16)[row, col] = bits - (1 << 16 if bits >= 1 << 15 else 0)
    b_q, b_scale = spec.quantize_mxfp4(torch.randn((n, k), generator=gen).to(torch.bfloat16))
    codes = spec.unpack_nibbles(b_q)
    for (row, col), code in dict(b_codes).items():
        codes[row, col] = code
    b_q = spec.pack_nibbles(codes)
    for (row, block), byte in dict(b_scales).items():
        b_scale[row, block] = byte
    return a.cuda(), None, b_q.cuda(), spec.shuffle_weight(b_q).cuda(), spec.e8m0_shuffle(b_scale).cuda()


def test_extreme_cases_reach_the_reference():
    """The cases mean what they say: the spec's GEMM is non-finite where a value or product overflows."""
    for name, edits in EXTREME_CASES.items():
        ref = reference_output(extreme_inputs(*EXTREME_SHAPES[0], 11, **edits)).cpu()
        assert bool(ref.isfinite().all()) == (name == "a_nan"), name
    ref = reference_output(extreme_inputs(*EXTREME_SHAPES[0], 11, **EXTREME_CASES["b_scale_255"])).cpu()
    assert bool(ref[:, 9].isnan().all()) and bool(ref[:, :9].isfinite().all())


@pytest.mark.parametrize("variant", variants(), ids=lambda v: v[0])
def test_variant_matches_reference_past_the_fp32_range(launchers, variant):
    for shape in EXTREME_SHAPES:
        for name, edits in EXTREME_CASES.items():
            data = extreme_inputs(*shape, 11, **edits)
            ref = reference_output(data)
            for split_k in SPLITS:
                try:
                    assert_harness_close(run_gemm(launchers[variant[0]], variant, data, split_k), ref)
                except AssertionError as err:
                    raise AssertionError(f"{name} shape={shape} split_k={split_k}: {err}") from None


def test_ordinary_blocks_beside_an_extreme_one_stay_exact(launchers):
    """One extreme block in the last K block of one row, every other block ordinary: the other tiles
    (fast path) and the recomputed one agree with the reference, with split-K partials mixed."""
    variant = variants()[0]
    m, n, k = 40, 144, 1344
    data = extreme_inputs(m, n, k, 12, a_bits={(m - 1, k - 5): 0x7F80})
    ref = reference_output(data)
    assert not bool(ref[m - 1].isfinite().any()) and bool(ref[:m - 1].isfinite().all())
    for split_k in SPLITS:
        assert_harness_close(run_gemm(launchers[variant[0]], variant, data, split_k), ref)


@pytest.mark.parametrize("shape", EXTREME_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_default_plan_matches_reference_past_the_fp32_range(shape):
    """The backend's first candidate (a specialized build) on the cases the extremes property test found."""
    from mxfp4_mm import runtime
    device = torch.device("cuda")
    if not runtime.is_available(device):
        pytest.skip("no NVRTC / driver")
    runner = hip.make_emulated_runner(*shape, device)
    for name, edits in EXTREME_CASES.items():
        a, _, b_q, b_shuffle, b_scale_sh = data = extreme_inputs(*shape, 11, **edits)
        try:
            assert_harness_close(runner(a, b_q, b_shuffle, b_scale_sh), reference_output(data))
        except AssertionError as err:
            raise AssertionError(f"{name} {hip.plan_label(runner.plan)}: {err}") from None

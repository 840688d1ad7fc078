"""NaN, +-Inf, bf16 max, denormals and zero rows in A, on every backend, against the spec.

Hypothesis draws a shape (M 1..80, N % 16 == 0 up to 512, K % 64 == 0 up to 1024), a seed for
ordinary randn operands, and a few special A blocks. What the spec makes of them (spec.py):
- a NaN anywhere in a block makes its amax NaN: scale 2^127, every code 0 -- the block adds 0;
- +-Inf (and bf16 max, whose amax rounds up to 2^128) gives scale 2^127 and code 6 (or 2) at that
  element, which dequantizes to +-inf in fp32: C's row turns +-inf, NaN where B's code is 0;
- denormal blocks quantize exactly (scale byte 0 or 1), adding almost nothing;
- zero blocks and zero rows: scale byte 0, codes 0.
Each backend must match spec.reference_gemm inf for inf, NaN for NaN, and every finite output either
within the harness tolerance of it or within fp32's summation-order slack of the exact (float64) sum:
a huge block's products can cancel, and then the spec's own fp32 result depends on the order in which
the reference adds them (its small terms vanish into the huge partial sums), which the spec does not fix.
"""

import collections

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from mxfp4_mm import spec
from conftest import GPU_BACKENDS, gpu_runner_factory

BF16_MAX_BITS = 0x7F7F
NAN_BITS = (0x7FC0, 0xFFC0, 0x7FE3, 0x7F81)  # quiet, negative, a payload that rounds past 0x7FFF, signalling
SPECIAL_KINDS = ("nan", "inf", "-inf", "max", "-max", "huge_block", "denormal_block", "zero_block")
# Backends whose default plan is a build per shape (cuda ~1 s each; hip's specialized builds, also
# through the emulation) draw shapes from this pool, so that a run compiles at most ten kernels.
# Odd M, N not a multiple of 64, K not a multiple of 128 included.
COMPILES_PER_SHAPE = ("cuda", "hip", "hip-emulated")
COMPILED_SHAPES = ((1, 16, 64), (3, 48, 192), (8, 512, 1024), (17, 208, 576), (33, 96, 320),
                   (64, 160, 1024), (80, 512, 512), (5, 272, 832), (16, 64, 128), (47, 384, 960))

Special = collections.namedtuple("Special", "kind row block position payload")


# ---- inputs ----------------------------------------------------------------------------------

@st.composite
def extreme_cases(draw, shapes=None):
    if shapes is None:
        m = draw(st.integers(1, 80))
        n = 16 * draw(st.integers(1, 32))
        k = 64 * draw(st.integers(1, 16))
    else:
        m, n, k = draw(st.sampled_from(shapes))
    specials = draw(st.lists(st.builds(
        Special, st.sampled_from(SPECIAL_KINDS), st.integers(0, m - 1), st.integers(0, k // 32 - 1),
        st.integers(0, 31), st.sampled_from(NAN_BITS)), max_size=10))
    zero_rows = draw(st.lists(st.integers(0, m - 1), max_size=3))
    return m, n, k, draw(st.integers(0, 2**31 - 1)), specials, zero_rows


def _apply(a_bits, special, gen):
    """Write one special block into A's bf16 bit pattern (int16 view) in place."""
    block = a_bits[special.row, special.block * 32:(special.block + 1) * 32]
    if special.kind == "nan":
        block[special.position] = special.payload - (1 << 16 if special.payload >= 1 << 15 else 0)
    elif special.kind in ("inf", "-inf"):
        block[special.position] = 0x7F80 if special.kind == "inf" else 0xFF80 - (1 << 16)
    elif special.kind in ("max", "-max"):
        block[special.position] = BF16_MAX_BITS if special.kind == "max" else (BF16_MAX_BITS | 0x8000) - (1 << 16)
    elif special.kind == "huge_block":  # finite, amax about 2^113: the fast paths' folded range is left,
        # while no product with ordinary B reaches 2^128 (there the spec's own fp32 result would depend
        # on the order and fusing of the reference matmul's sums)
        block.copy_((block.view(torch.bfloat16).float() * 2.0 ** 112).to(torch.bfloat16).view(torch.int16))
    elif special.kind == "denormal_block":  # every element a bf16 denormal, random sign
        mantissa = torch.randint(1, 0x80, (32,), generator=gen, dtype=torch.int16)
        sign = torch.randint(0, 2, (32,), generator=gen, dtype=torch.int16) * -(1 << 15)
        block.copy_(mantissa | sign)
    elif special.kind == "zero_block":
        block.zero_()
    else:
        raise ValueError(special.kind)


def make_case(m, n, k, seed, specials, zero_rows, device):
    """(A with the special blocks, B_q, B_shuffle, B_scale_sh) on `device`; B is ordinary randn."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn((m, k), generator=gen).to(torch.bfloat16)
    a_bits = a.view(torch.int16)
    for special in specials:
        _apply(a_bits, special, gen)
    a[zero_rows] = 0
    b_q, b_scale = spec.quantize_mxfp4(torch.randn((n, k), generator=gen).to(torch.bfloat16))
    return a.to(device), b_q.to(device), spec.shuffle_weight(b_q).to(device), spec.e8m0_shuffle(b_scale).to(device)


def check_runner(runner, case):
    """The runner's C equals the spec's GEMM: harness tolerance, NaN where the reference has NaN."""
    a, b_q, b_shuffle, b_scale_sh = case
    n, k = b_q.shape[0], a.shape[1]
    ref = spec.reference_gemm(a, b_q, spec.e8m0_unshuffle(b_scale_sh, n, k // 32)).cpu()
    out = runner(a, b_q, b_shuffle, b_scale_sh).cpu()
    nan_differs = out.isnan() != ref.isnan()
    assert not nan_differs.any(), (
        f"NaN positions differ at {nan_differs.nonzero()[:8].tolist()} (of {int(nan_differs.sum())}): "
        f"out {out[nan_differs][:8].tolist()}, ref {ref[nan_differs][:8].tolist()}")
    infinite = ref.isinf()
    assert torch.equal(out[infinite], ref[infinite]), "inf positions or signs differ"
    finite = ref.isfinite()
    out, ref = out.double(), ref.double()
    exact, magnitude = _exact_sum(a, b_q, b_scale_sh)
    near_ref = (out - ref).abs() <= 1e-2 + 1e-2 * ref.abs()
    near_exact = (out - exact).abs() <= 1e-2 + 1e-2 * exact.abs() + 2 * k * 2.0 ** -23 * magnitude
    wrong = finite & ~(near_ref | near_exact)
    assert not wrong.any(), (f"finite outputs off at {wrong.nonzero()[:8].tolist()}: out {out[wrong][:8].tolist()}, "
                             f"ref {ref[wrong][:8].tolist()}, exact {exact[wrong][:8].tolist()}")


def _exact_sum(a, b_q, b_scale_sh):
    """(exact sum of the dequantized products, sum of their magnitudes), float64 on the CPU."""
    n, k = b_q.shape[0], a.shape[1]
    a_dq = spec.dequantize_mxfp4(*spec.quantize_mxfp4(a.cpu())).double()
    b_dq = spec.dequantize_mxfp4(b_q.cpu(), spec.e8m0_unshuffle(b_scale_sh.cpu(), n, k // 32)).double()
    return (a_dq @ b_dq.T).nan_to_num(0.0, 0.0, 0.0), (a_dq.abs() @ b_dq.abs().T).nan_to_num(0.0, 0.0, 0.0)


# ---- backends -------------------------------------------------------------------------------

def _cached(factory):
    runners = {}

    def runner_for(m, n, k):
        if (m, n, k) not in runners:
            runners[m, n, k] = factory(m, n, k)
        return runners[m, n, k]

    return runner_for


GPU_SETTINGS = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_BACKENDS)
def test_gpu_backend_matches_the_spec_on_extreme_blocks(name):
    device = torch.device("cuda")
    runner_for = _cached(gpu_runner_factory(name, device))
    shapes = COMPILED_SHAPES if name in COMPILES_PER_SHAPE else None

    @GPU_SETTINGS
    @given(extreme_cases(shapes))
    def check(case):
        m, n, k, seed, specials, zero_rows = case
        check_runner(runner_for(m, n, k), make_case(m, n, k, seed, specials, zero_rows, device))

    check()


@settings(max_examples=15, deadline=None, derandomize=True, database=None)
@given(extreme_cases())
def test_cpu_torch_backend_matches_the_spec_on_extreme_blocks(case):
    from mxfp4_mm.backends import torch_backend
    m, n, k, seed, specials, zero_rows = case
    check_runner(torch_backend.make_runner(m, n, k, torch.device("cpu")),
                 make_case(m, n, k, seed, specials, zero_rows, "cpu"))


# ---- the cases mean what they say, and the check can fail --------------------------------------

def _reference_of(case):
    a, b_q, _, b_scale_sh = case
    return spec.reference_gemm(a, b_q, spec.e8m0_unshuffle(b_scale_sh, b_q.shape[0], a.shape[1] // 32))


@pytest.mark.parametrize("kind, row_is", [("nan", "finite"), ("inf", "inf_or_nan"), ("-max", "inf_or_nan"),
                                          ("huge_block", "finite"), ("denormal_block", "finite")])
def test_each_special_kind_reaches_the_output_as_the_spec_says(kind, row_is):
    case = make_case(4, 64, 128, 1, [Special(kind, 2, 1, 7, 0x7FC0)], [3], "cpu")
    ref = _reference_of(case)
    assert bool(ref[[0, 1]].isfinite().all())
    assert bool(ref[3].eq(0).all())  # the zero row
    if row_is == "finite":
        assert bool(ref[2].isfinite().all())
    else:
        assert bool((~ref[2].isfinite()).all())
    if kind == "huge_block":
        assert float(ref[2].abs().max()) > 1e30


def test_inf_gives_nan_where_the_b_code_is_zero():
    m, n, k = 2, 256, 64
    case = make_case(m, n, k, 3, [Special("inf", 0, 0, 0, 0)], [], "cpu")
    ref = _reference_of(case)
    b_codes_at_k0 = spec.unpack_nibbles(case[1])[:, 0] & 7
    assert torch.equal(ref[0].isnan(), b_codes_at_k0 == 0) and bool(ref[0].isnan().any())


def _runner_ignoring_nan(m, n, k, device):
    """A runner with the bug this test exists for: the block amax skips NaN (a float max), so a NaN
    block is quantized like its other elements instead of adding nothing."""
    def run(a, b_q, b_shuffle, b_scale_sh):
        return spec.reference_gemm(a.nan_to_num(0.0), b_q, spec.e8m0_unshuffle(b_scale_sh, n, k // 32))
    return run


def test_the_check_fails_on_a_runner_that_drops_nan():
    m, n, k = 3, 32, 128
    case = make_case(m, n, k, 5, [Special("nan", 1, 2, 4, 0x7FC0)], [], "cpu")
    with pytest.raises(AssertionError):
        check_runner(_runner_ignoring_nan(m, n, k, "cpu"), case)


def test_the_check_fails_on_nan_in_the_wrong_place():
    m, n, k = 2, 32, 64
    case = make_case(m, n, k, 6, [Special("inf", 0, 0, 0, 0)], [], "cpu")
    ref = _reference_of(case)
    assert bool(ref.isnan().any())
    with pytest.raises(AssertionError, match="NaN positions differ"):
        check_runner(lambda *args: ref.nan_to_num(0.0), case)


def test_the_check_fails_on_a_finite_error_even_beside_a_huge_block():
    """The summation-order slack is about fp32 rounding: one block counted twice is still caught."""
    m, n, k = 2, 32, 256
    case = make_case(m, n, k, 7, [Special("huge_block", 1, 0, 0, 0)], [], "cpu")
    a, b_q, _, b_scale_sh = case
    doubled = a.clone()
    doubled[0, 32:64] *= 2  # row 0 has no special block: its outputs are ordinary sums
    wrong = spec.reference_gemm(doubled, b_q, spec.e8m0_unshuffle(b_scale_sh, n, k // 32))
    with pytest.raises(AssertionError, match="finite outputs off"):
        check_runner(lambda *args: wrong, case)

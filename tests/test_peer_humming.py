"""The bench's humming_w4a16 peer path (mxfp4_mm/peer_humming.py, bench-only).

CPU: its W4A16 reference is bf16 A times the spec's dequantized B; the bench checks a path against
the path's own reference where it carries one; no path off NVIDIA. GPU (needs `humming` importable:
carry its wheel): the path runs on the benchmark shapes and its output is checked like the bench does.
"""

import pytest
import torch

from mxfp4_mm import bench, peer_humming, spec
from conftest import make_inputs


def test_w4a16_reference_is_bf16_a_times_the_dequantized_b():
    data = make_inputs(5, 64, 128, seed=3)
    a, _, b_q, _, b_scale_sh = data
    b = spec.dequantize_mxfp4(b_q, spec.e8m0_unshuffle(b_scale_sh, 64, 4))
    expected = (a.double() @ b.double().t()).to(torch.bfloat16)
    got = peer_humming.w4a16_reference(data)
    assert got.dtype == torch.bfloat16 and got.shape == (5, 64)
    assert bench.harness_close(got, expected)
    # and it is not the a4w4 reference: A is not quantized
    assert not torch.equal(got, bench.reference(data))


def test_no_path_off_nvidia():
    case = bench.Case(4, 64, 128, 1, 1, torch.device("cpu"))
    assert peer_humming.make_path(case) is None


def test_the_bench_checks_a_path_against_its_own_reference(monkeypatch):
    case = bench.Case(4, 64, 128, 1, 2, torch.device("cpu"))
    right = lambda i: peer_humming.w4a16_reference(case.inputs[i])  # noqa: E731
    right.reference = lambda i: peer_humming.w4a16_reference(case.inputs[i])
    wrong = lambda i: peer_humming.w4a16_reference(case.inputs[i])  # noqa: E731
    monkeypatch.setattr(bench, "EXTRA_PATHS", {"right": ("", lambda c: right), "wrong": ("", lambda c: wrong)})
    rows = bench.bench_shape(case, bench.Timer(case.device), reps=2, warmup=1, backends=["torch"])
    assert rows["right"]["correct"] is True
    assert rows["wrong"]["correct"] is False  # checked against the a4w4 reference, which it is not
    assert rows["torch"]["correct"] is True


@pytest.mark.gpu
@pytest.mark.parametrize("shape", bench.BENCHMARK_SHAPES)
def test_humming_path_runs_on_the_benchmark_shapes(shape):
    if not torch.cuda.is_available() or torch.version.hip:
        pytest.skip("needs an NVIDIA GPU")
    if not peer_humming.available():
        pytest.skip("humming (humming-kernels) does not import here")
    case = bench.Case(*shape, 7, 1, torch.device("cuda"))
    call = peer_humming.make_path(case)
    out = call(0)
    assert out.shape == shape[:2] and out.dtype == torch.bfloat16
    ref = call.reference(0).float()
    close = ((out.float() - ref).abs() <= 1e-2 + 1e-2 * ref.abs()).float().mean().item()
    print(f"humming {shape}: {close:.1%} of elements within the harness tolerance of its W4A16 reference")
    # The weights reach humming as it reads them (a wrong nibble or scale order leaves almost nothing
    # close); its stream-K shapes add partials into bf16 and miss the tolerance on some elements,
    # which the bench flags rather than this test.
    assert close > 0.8

"""CPU: the aiter backend's wiring, against a stand-in `aiter` package that records every call.

Checks argument order, dtype views, shapes, that B_shuffle is used when given (and made from B_q
when not), and that the bytes handed over are the task's (B_shuffle and the shuffled scales as
they came; unshuffled scales for the B_q kernel).
"""

import sys
import types

import pytest
import torch

from mxfp4_mm import spec
from mxfp4_mm.backends import aiter_backend
from conftest import make_inputs

M, N, K = 5, 48, 320  # scales [48, 10] arrive padded and shuffled to [256, 16]
FP4X2, E8M0 = torch.int8, torch.float8_e8m0fnu  # stand-ins distinct from uint8, one byte each


@pytest.fixture
def fake_aiter(monkeypatch):
    """sys.modules gets `aiter` and `aiter.ops.triton.gemm_a16wfp4`; returns the call log."""
    calls = []

    def record(name, result_shape=(M, N)):
        def call(*args, **kwargs):
            calls.append((name, args, kwargs))
            return torch.zeros(result_shape, dtype=torch.bfloat16)
        return call

    aiter = types.ModuleType("aiter")
    aiter.QuantType = types.SimpleNamespace(per_1x32="per_1x32")
    aiter.dtypes = types.SimpleNamespace(fp4x2=FP4X2, fp8_e8m0=E8M0, bf16=torch.bfloat16)

    def get_triton_quant(kind):
        assert kind == "per_1x32"

        def quant(a, shuffle):
            calls.append(("quant", (a,), {"shuffle": shuffle}))
            return torch.zeros((M, K // 2), dtype=FP4X2), torch.zeros((256, 16), dtype=E8M0)
        return quant

    aiter.get_triton_quant = get_triton_quant
    aiter.gemm_a4w4 = record("gemm_a4w4")
    api = types.ModuleType(aiter_backend.A16WFP4_MODULE)
    api.gemm_a16wfp4 = record("gemm_a16wfp4")
    api.gemm_a16wfp4_preshuffle = record("gemm_a16wfp4_preshuffle")
    modules = {"aiter": aiter, "aiter.ops": types.ModuleType("aiter.ops"),
               "aiter.ops.triton": types.ModuleType("aiter.ops.triton"), aiter_backend.A16WFP4_MODULE: api}
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return calls


def _inputs():
    _, _, b_q, b_shuffle, b_scale_sh = make_inputs(M, N, K, seed=3)
    a = torch.randn((M, K), dtype=torch.bfloat16)
    return a, b_q, b_shuffle, b_scale_sh


def test_kinds_in_prior_order(fake_aiter):
    assert aiter_backend.available_plans() == [aiter_backend.A16WFP4_PRESHUFFLE, aiter_backend.A16WFP4,
                                               aiter_backend.A4W4]
    assert [aiter_backend.plan_label(p) for p in aiter_backend.available_plans()] == [
        "a16wfp4_preshuffle", "a16wfp4", "a4w4"]
    assert aiter_backend.candidates(M, N, K, torch.device("cpu")) == []  # not a ROCm device


def test_preshuffle_is_offered_only_for_whole_512_k_and_256_n_steps(fake_aiter, monkeypatch):
    """Its kernel reads past B_shuffle where N % 256 != 0 (N = 2880, 2112 in the task)."""
    monkeypatch.setattr(aiter_backend, "is_available", lambda device: True)
    rocm = torch.device("cpu")
    rest = [aiter_backend.A16WFP4, aiter_backend.A4W4]
    assert aiter_backend.candidates(M, 256, 320, rocm) == rest
    assert aiter_backend.candidates(M, 256, 1536, rocm)[0] == aiter_backend.A16WFP4_PRESHUFFLE
    for n in (N, 2880, 2112):
        assert aiter_backend.candidates(M, n, 1536, rocm) == rest
    assert aiter_backend.make_runner(M, 256, 320, rocm).plan == aiter_backend.A16WFP4
    assert aiter_backend.make_runner(M, 2880, 2048, rocm).plan == aiter_backend.A16WFP4
    assert aiter_backend.make_runner(M, 4096, 2048, rocm).plan == aiter_backend.A16WFP4_PRESHUFFLE


def test_without_the_a16wfp4_module_only_a4w4_is_offered(fake_aiter, monkeypatch):
    monkeypatch.setitem(sys.modules, aiter_backend.A16WFP4_MODULE, None)  # import raises
    assert aiter_backend.available_plans() == [aiter_backend.A4W4]


def test_preshuffle_reads_b_shuffle_and_the_shuffled_scales_as_given(fake_aiter):
    a, b_q, b_shuffle, b_scale_sh = _inputs()
    runner = aiter_backend.make_runner(M, N, K, torch.device("cpu"), aiter_backend.A16WFP4_PRESHUFFLE)
    out = runner(a, b_q, b_shuffle, b_scale_sh)
    (name, (x, w, scales), kwargs), = fake_aiter
    assert name == "gemm_a16wfp4_preshuffle" and out.shape == (M, N)
    assert x is a and kwargs == {"prequant": True, "dtype": torch.bfloat16}
    assert w.shape == (N // 16, 16 * K // 2) and w.dtype == torch.uint8
    assert w.data_ptr() == b_shuffle.data_ptr()  # the given B_shuffle, not a copy
    assert scales.shape == (256 // 32, 32 * 16) and scales.data_ptr() == b_scale_sh.data_ptr()
    # The same bytes, in the layout aiter's kernel unpacks: [N/32, (c/8, c%4, r%16, (c%8)/4, (r%32)/16)].
    unpacked = scales.reshape(8, 2, 4, 16, 2, 2).permute(0, 5, 3, 1, 4, 2).reshape(256, 16)
    assert torch.equal(unpacked[:N, :K // 32], spec.e8m0_unshuffle(b_scale_sh, N, K // 32))


def test_preshuffle_without_b_shuffle_shuffles_b_q(fake_aiter):
    a, b_q, _, b_scale_sh = _inputs()
    aiter_backend.make_runner(M, N, K, torch.device("cpu"), aiter_backend.A16WFP4_PRESHUFFLE)(a, b_q, None, b_scale_sh)
    (_, (_, w, _), _), = fake_aiter
    assert torch.equal(w.reshape(N, K // 2), spec.shuffle_weight(b_q))


def test_a16wfp4_gets_b_q_and_unshuffled_scales(fake_aiter):
    a, b_q, b_shuffle, b_scale_sh = _inputs()
    runner = aiter_backend.make_runner(M, N, K, torch.device("cpu"), aiter_backend.A16WFP4)
    runner(a, b_q, b_shuffle, b_scale_sh)
    (name, (x, w, scales), kwargs), = fake_aiter
    assert name == "gemm_a16wfp4" and x is a and kwargs == {"dtype": torch.bfloat16}
    assert w.data_ptr() == b_q.data_ptr() and w.shape == (N, K // 2)
    assert torch.equal(scales, spec.e8m0_unshuffle(b_scale_sh, N, K // 32))


def test_a4w4_quantizes_a_then_calls_gemm_a4w4_with_aiter_dtypes(fake_aiter):
    a, b_q, b_shuffle, b_scale_sh = _inputs()
    runner = aiter_backend.make_runner(M, N, K, torch.device("cpu"), aiter_backend.A4W4)
    assert runner.plan == aiter_backend.A4W4
    runner(a, b_q, b_shuffle, b_scale_sh)
    (quant, (x,), quant_kwargs), (gemm, (a_q, w, a_scale, b_scale), kwargs) = fake_aiter
    assert (quant, gemm) == ("quant", "gemm_a4w4") and x is a and quant_kwargs == {"shuffle": True}
    assert a_q.dtype == FP4X2 and a_scale.dtype == E8M0
    assert w.dtype == FP4X2 and w.data_ptr() == b_shuffle.data_ptr()
    assert b_scale.dtype == E8M0 and b_scale.data_ptr() == b_scale_sh.data_ptr()
    assert kwargs == {"dtype": torch.bfloat16, "bpreshuffle": True}


def test_unknown_kind_is_refused(fake_aiter):
    with pytest.raises(ValueError, match="plan"):
        aiter_backend.make_runner(M, N, K, torch.device("cpu"), aiter_backend.Plan("afp4wfp4"))

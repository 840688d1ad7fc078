"""The custom op `mxfp4_mm::gemm`: eager, opcheck, and inside a torch.compile'd module on the CPU."""

import importlib

import pytest
import torch

import mxfp4_mm.library as library
from conftest import TinyModel, assert_harness_close, make_inputs, reference_output


def test_op_matches_reference_with_and_without_b_shuffle():
    data = make_inputs(5, 48, 192, seed=3)
    a, _, b_q, b_shuffle, b_scale_sh = data
    ref = reference_output(data)
    assert_harness_close(library.gemm(a, b_q, b_scale_sh), ref)
    assert_harness_close(torch.ops.mxfp4_mm.gemm(a, b_q, b_scale_sh, b_shuffle), ref)


def test_opcheck():
    a, _, b_q, b_shuffle, b_scale_sh = make_inputs(4, 32, 128, seed=4)
    torch.library.opcheck(torch.ops.mxfp4_mm.gemm.default, (a, b_q, b_scale_sh, b_shuffle))
    torch.library.opcheck(torch.ops.mxfp4_mm.gemm.default, (a, b_q, b_scale_sh, None))


@pytest.mark.parametrize("compile_backend", ["inductor", "aot_eager"])
def test_compiled_module_equals_eager(compile_backend):
    torch._dynamo.reset()
    a, _, b_q, b_shuffle, b_scale_sh = make_inputs(8, 64, 256, seed=5)
    model = TinyModel(b_q, b_scale_sh, b_shuffle)
    eager = model(a)
    compiled = torch.compile(model, backend=compile_backend, fullgraph=True)
    with torch.no_grad():
        assert torch.equal(compiled(a), eager)
        fresh = make_inputs(8, 64, 256, seed=6)[0]
        assert torch.equal(compiled(fresh), model(fresh))


def test_reimport_does_not_register_twice():
    importlib.reload(library)
    assert torch.ops.mxfp4_mm.gemm.default is not None


def test_forward_works_on_inputs_that_require_grad_and_backward_raises():
    a, _, b_q, b_shuffle, b_scale_sh = make_inputs(4, 32, 128, seed=7)
    a.requires_grad_(True)
    out = torch.ops.mxfp4_mm.gemm(a, b_q, b_scale_sh, b_shuffle)
    assert_harness_close(out.detach(), reference_output((a.detach(), None, b_q, b_shuffle, b_scale_sh)))
    with pytest.raises(RuntimeError, match="has no gradient"):
        out.float().sum().backward()

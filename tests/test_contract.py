"""The backend contract: every backend available on this machine, on every kind of shape.

Parametrized over (device, backend) pairs: CPU always; each GPU backend of the dispatch
order when a GPU is present (those params carry the gpu mark, so they skip without one).
"""

import pytest
import torch

import mxfp4_mm
from mxfp4_mm import dispatch
from conftest import HAS_GPU, assert_harness_close, make_inputs, reference_output

TASK_SHAPES = [(8, 2112, 7168), (16, 3072, 1536), (64, 3072, 1536), (256, 2880, 512),
               (4, 2880, 512), (16, 2112, 7168), (32, 4096, 512), (32, 2880, 512),
               (64, 7168, 2048), (256, 3072, 1536)]
ODD_SHAPES = [(m, n, k) for m in (1, 3, 4, 17) for n in (16, 48) for k in (64, 192, 576)]


def _backend_params():
    params = [pytest.param(("cpu", "torch"), id="cpu-torch")]
    gpu_order = dispatch.ORDER_BY_DEVICE_KIND[dispatch.device_kind(torch.device("cuda"))] if HAS_GPU \
        else ("torch",)
    params += [pytest.param(("cuda", name), id=f"gpu-{name}", marks=pytest.mark.gpu) for name in gpu_order]
    return params


@pytest.fixture(params=_backend_params())
def backend(request):
    device_name, name = request.param
    device = torch.device(device_name)
    try:
        module = dispatch.load_backend(name)
    except ImportError as exc:
        pytest.skip(f"backend {name} not importable here: {exc}")
    if not module.is_available(device):
        pytest.skip(f"backend {name} not available on {device}")

    def gemm(data):
        a, _, b_q, b_shuffle, b_scale_sh = data
        m, k = a.shape
        runner = module.make_runner(m, b_q.shape[0], k, device)
        return runner(a, b_q, b_shuffle, b_scale_sh)

    gemm.device = device
    return gemm


@pytest.mark.parametrize("m,n,k", TASK_SHAPES + ODD_SHAPES)
def test_matches_reference(backend, m, n, k):
    data = make_inputs(m, n, k, seed=m * 7 + n + k, device=backend.device)
    out = backend(data)
    assert_harness_close(out, reference_output(data))


def test_outputs_are_fresh_and_not_overwritten(backend):
    first = make_inputs(16, 64, 256, seed=1, device=backend.device)
    second = make_inputs(16, 64, 256, seed=2, device=backend.device)
    out1 = backend(first)
    kept = out1.clone()
    out2 = backend(second)
    assert out1.data_ptr() != out2.data_ptr()
    assert torch.equal(out1, kept)
    assert_harness_close(out2, reference_output(second))


def test_new_data_at_the_same_addresses_gives_the_new_answer(backend):
    data = make_inputs(8, 96, 512, seed=3, device=backend.device)
    backend(data)
    fresh = make_inputs(8, 96, 512, seed=4, device=backend.device)
    for old, new in zip(data, fresh):
        old.copy_(new)  # same buffers, new contents
    assert_harness_close(backend(data), reference_output(fresh))


# ---- input validation (shared by every backend: it runs before dispatch) -----------------

def _good():
    return list(make_inputs(4, 32, 128, seed=5))


def _replace(index, value):
    data = _good()
    data[index] = value(data) if callable(value) else value
    return tuple(data)


@pytest.mark.parametrize("data,error,match", [
    (lambda: _replace(0, lambda d: d[0].float()), TypeError, "A must be torch.bfloat16"),
    (lambda: _replace(0, lambda d: d[0][0]), ValueError, "A must be 2-D"),
    (lambda: _replace(0, lambda d: d[0][:, :96].contiguous()), ValueError, "multiple of 64"),
    (lambda: _replace(2, lambda d: d[2][:24]), ValueError, "multiple of 16"),
    (lambda: _replace(2, lambda d: d[2][:, :32]), ValueError, r"B_q must have shape"),
    (lambda: _replace(2, lambda d: d[2].float()), TypeError, "B_q must be packed fp4"),
    (lambda: _replace(4, lambda d: d[4][:, :4]), ValueError, "B_scale_sh must be"),
    (lambda: _replace(4, lambda d: d[4][:16]), ValueError, "B_scale_sh must be"),
    (lambda: _replace(2, lambda d: d[2].t().contiguous().t()), ValueError, "B_q must"),
    (lambda: _replace(3, lambda d: d[3][:16]), ValueError, "B_shuffle must have shape"),
    (lambda: _replace(0, "not a tensor"), TypeError, "A must be a torch.Tensor"),
    (lambda: tuple(_good()[:4]), TypeError, "5-tuple"),
])
def test_malformed_inputs_raise_clear_errors(data, error, match):
    with pytest.raises(error, match=match):
        mxfp4_mm.custom_kernel(data())


def test_non_contiguous_b_is_rejected_by_name():
    data = _good()
    wide = torch.zeros(32, 128, dtype=torch.uint8)
    data[2] = wide[:, ::2]
    with pytest.raises(ValueError, match="B_q must be contiguous"):
        mxfp4_mm.custom_kernel(tuple(data))


@pytest.mark.gpu
def test_inputs_on_mixed_devices_are_rejected():
    data = list(make_inputs(4, 32, 128, seed=6, device="cuda"))
    data[2] = data[2].cpu()
    with pytest.raises(ValueError, match="B_q is on cpu but A is on cuda"):
        mxfp4_mm.custom_kernel(tuple(data))


def test_strided_a_is_accepted():
    data = _good()
    wide = torch.randn(4, 256, dtype=torch.bfloat16)
    data[0] = wide[:, :128]
    out = mxfp4_mm.custom_kernel(tuple(data))
    assert_harness_close(out, reference_output((wide[:, :128].contiguous(), *data[1:])))


def test_dispatcher_picks_torch_on_cpu_and_reports_it():
    dispatch.reset()
    mxfp4_mm.custom_kernel(tuple(_good()))
    assert mxfp4_mm.last_backend_name() == "torch"


def test_a_backend_that_disagrees_with_the_reference_is_dropped(monkeypatch):
    """The dispatcher's first-call check: a wrong backend warns once and the next one serves."""
    import types
    wrong = types.SimpleNamespace(
        is_available=lambda device: True,
        make_runner=lambda m, n, k, device: lambda a, b_q, b_shuffle, b_scale_sh: torch.zeros(
            (m, n), dtype=torch.bfloat16))
    real_load = dispatch.load_backend
    monkeypatch.setattr(dispatch, "load_backend", lambda name: wrong if name == "wrong" else real_load(name))
    monkeypatch.setitem(dispatch.ORDER_BY_DEVICE_KIND, "cpu", ("wrong", "torch"))
    data = make_inputs(4, 32, 128, seed=7)

    dispatch.reset()
    with pytest.warns(RuntimeWarning, match="'wrong'.*WrongResult.*disagrees with the reference"):
        out = mxfp4_mm.custom_kernel(data)
    assert mxfp4_mm.last_backend_name() == "torch"
    assert_harness_close(out, reference_output(data))

    monkeypatch.setenv(dispatch.VERIFY_ENV, "0")  # without the check the wrong backend would serve
    dispatch.reset()
    assert mxfp4_mm.custom_kernel(data).eq(0).all()
    assert mxfp4_mm.last_backend_name() == "wrong"
    dispatch.reset()


def test_valid_signatures_are_checked_once_and_invalid_ones_every_time(monkeypatch):
    """check_gemm_inputs caches signatures that passed (shapes, dtypes, devices, contiguity, never
    data): a repeated signature skips the checks, anything that differs in a checked property is
    checked again and still raises."""
    from mxfp4_mm import validate
    monkeypatch.setattr(validate, "_valid_signatures", {})
    calls = []
    full_check = validate._check_gemm_inputs
    monkeypatch.setattr(validate, "_check_gemm_inputs", lambda *args: calls.append(1) or full_check(*args))
    a, _, b_q, b_shuffle, b_scale_sh = _good()
    for _ in range(3):
        assert validate.check_gemm_inputs(a, b_q, b_scale_sh, b_shuffle) == (4, 32, 128)
    assert validate.check_gemm_inputs(a.clone(), b_q.clone(), b_scale_sh, b_shuffle) == (4, 32, 128)
    assert len(calls) == 1
    strided_b_q = torch.zeros(32, 128, dtype=torch.uint8)[:, ::2]  # same shape and dtype, not contiguous
    for _ in range(2):
        with pytest.raises(ValueError, match="B_q must be contiguous"):
            validate.check_gemm_inputs(a, strided_b_q, b_scale_sh, b_shuffle)
        with pytest.raises(TypeError, match="A must be torch.bfloat16"):
            validate.check_gemm_inputs(a.half(), b_q, b_scale_sh, b_shuffle)
        with pytest.raises(TypeError, match="B_shuffle must be a torch.Tensor"):
            validate.check_gemm_inputs(a, b_q, b_scale_sh, b_shuffle.numpy())
    assert validate.check_gemm_inputs(a, b_q, b_scale_sh) == (4, 32, 128)  # without B_shuffle: new signature
    assert len(calls) == 1 + 6 + 1

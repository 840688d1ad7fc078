"""The HIP backend's wiring, plan table and candidates (CPU, with a faked gfx950 device and a stand-in
runtime whose "kernel" computes the spec GEMM from the arguments it is launched with), the aiter
backend's wiring with a stand-in `aiter` module, and (GPU) the backend path through the NVIDIA
emulation with two queues at once.
"""

import sys
import types
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st

import mxfp4_mm
from mxfp4_mm import dispatch, runtime, scratch, spec
from mxfp4_mm.backends import aiter_backend, hip
from mxfp4_mm.backends.hip import plans as hip_plans
from conftest import assert_harness_close, make_inputs, reference_output

TASK_SHAPES = [(8, 2112, 7168), (16, 3072, 1536), (64, 3072, 1536), (256, 2880, 512),
               (4, 2880, 512), (16, 2112, 7168), (32, 4096, 512), (32, 2880, 512),
               (64, 7168, 2048), (256, 3072, 1536)]
CUDA0 = torch.device("cuda", 0)


# ---- a faked gfx950 machine ---------------------------------------------------------------------

@pytest.fixture
def gfx950_props(monkeypatch):
    """torch looks like a ROCm build whose device 0 is an MI355X; hiprtc loads."""
    monkeypatch.setattr(torch.version, "hip", "7.0.0")
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(gcnArchName="gfx950:sramecc+:xnack-"))
    monkeypatch.setattr(dispatch, "_device_kinds", {})
    monkeypatch.setattr(runtime, "is_available", lambda device: True)


class FakeKernelModule:
    """Stands in for a compiled mxfp4_gemm.hip: each launch checks its arguments against the
    kernel's signature and fills C with the spec GEMM of the operands it was given."""

    def __init__(self, options=()):
        self.launches = []
        self.options = options

    def function(self, name):
        if name == "mxfp4_gemm_specialized":
            defines = dict(o[len("-DMXFP4_"):].split("=") for o in self.options)
            variant = next(v for v in hip.tile_configs().values()
                           if (v.mfma, v.tile_n // v.mfma, v.waves) == (int(defines["MFMA"]), int(defines["SUB_N"]),
                                                                       int(defines["WAVES"]))
                           and v.tile_m == v.mfma * int(defines["SUB_M"]))
        else:
            variant = hip.kernel_variants()[name]
        module = self

        class Function:
            def launcher(self, arg_types):
                assert arg_types == "ppppppiiiii"

                def launch(grid, block, shared, a, b, b_scale_sh, c, partials, counters, m, n, k, cols, split_k):
                    if module.options:  # a specialized build: the arguments match its constants
                        defines = dict(o[len("-DMXFP4_"):].split("=") for o in module.options)
                        assert (m, n, k, split_k) == tuple(int(defines[d]) for d in ("M", "N", "K", "SPLIT_K"))
                    module.launches.append(dict(variant=variant, grid=grid, block=block, b=b, c=c,
                                                partials=partials, counters=counters, split_k=split_k))
                    assert shared == 0 and block == (64 * variant.waves, 1, 1)
                    assert grid == (-(-n // variant.tile_n), -(-m // variant.tile_m), split_k)
                    assert (m, k) == tuple(a.shape) and c.shape == (m, n) and c.dtype == torch.bfloat16
                    assert cols == b_scale_sh.shape[1]
                    if split_k > 1:
                        assert partials.shape == (split_k, m, n) and partials.dtype == torch.float32
                        assert counters.dtype == torch.int32 and counters.numel() == grid[0] * grid[1]
                        assert int(counters.abs().sum()) == 0
                    else:
                        assert partials == 0 and counters == 0
                    b_q = spec.unshuffle_weight(b) if variant.b_shuffled else b
                    c.copy_(spec.reference_gemm(a, b_q, spec.e8m0_unshuffle(b_scale_sh, n, k // 32)))

                return launch

        return Function()


@pytest.fixture
def fake_gpu(gfx950_props, monkeypatch):
    """Dispatch sees a gfx950 device even for CPU tensors; kernels run as FakeKernelModule."""
    module = FakeKernelModule()
    modules = {}  # one per option set, sharing the launch log
    queue = {"handle": 1}

    def load_module(source, device, options=()):
        if not options:
            return module
        built = modules.setdefault(tuple(options), FakeKernelModule(tuple(options)))
        built.launches = module.launches
        return built

    monkeypatch.setattr(dispatch, "device_kind", lambda device: "gfx950")
    monkeypatch.setattr(hip, "is_available", lambda device: True)  # CPU tensors stand in for the GPU's
    monkeypatch.setattr(runtime, "load_module", load_module)
    monkeypatch.setattr(runtime, "current_queue_handle", lambda device: queue["handle"])
    monkeypatch.setattr(scratch, "_workspaces", {})
    dispatch.reset()
    yield types.SimpleNamespace(module=module, queue=queue)
    dispatch.reset()


def test_dispatcher_puts_hip_first_on_gfx950(gfx950_props):
    assert dispatch.device_kind(CUDA0) == "gfx950"
    assert dispatch.candidate_backends(CUDA0)[0] == "hip"
    assert hip.is_available(CUDA0)


def test_hip_unavailable_without_gfx950_or_hiprtc(gfx950_props, monkeypatch):
    monkeypatch.setattr(runtime, "is_available", lambda device: False)
    assert not hip.is_available(CUDA0)
    monkeypatch.setattr(runtime, "is_available", lambda device: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(gcnArchName="gfx942:sramecc+:xnack-"))
    monkeypatch.setattr(dispatch, "_device_kinds", {})
    assert not hip.is_available(CUDA0)
    assert not hip.is_available(torch.device("cpu"))


def test_gemm_runs_through_hip_with_one_launch(fake_gpu):
    data = make_inputs(16, 2112, 7168, seed=1)
    out = mxfp4_mm.custom_kernel(data)
    assert mxfp4_mm.last_backend_name() == "hip"
    assert len(fake_gpu.module.launches) == 1
    launch = fake_gpu.module.launches[0]
    assert (launch["variant"].name, launch["split_k"]) == tuple(hip_plans.PLANS[(16, 2112, 7168)])[:2]
    assert launch["b"] is data[3]  # B_shuffle, as the plan's variant reads it
    assert_harness_close(out, reference_output(data))


def test_compile_failure_warns_once_and_falls_back(fake_gpu, monkeypatch):
    def broken(source, device, options=()):
        raise runtime.CompileError("kernel compile failed: (stand-in)")

    monkeypatch.setattr(runtime, "load_module", broken)
    data = make_inputs(4, 64, 256, seed=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = mxfp4_mm.custom_kernel(data)
        again = mxfp4_mm.custom_kernel(make_inputs(8, 64, 256, seed=3))
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "'hip'" in messages[0] and "CompileError" in messages[0]
    assert mxfp4_mm.last_backend_name() == "torch"
    assert_harness_close(out, reference_output(data))
    assert again.shape == (8, 64)


def test_scratch_is_per_queue_and_reused_on_the_same_queue(fake_gpu):
    m, n, k = 16, 2112, 7168  # a split-K plan
    runner = hip.make_runner(m, n, k, torch.device("cpu"))
    assert runner.plan.split_k > 1
    data = make_inputs(m, n, k, seed=4)
    args = (data[0], data[2], data[3], data[4])
    first = runner(*args)
    fake_gpu.queue["handle"] = 2
    second = runner(*args)
    fake_gpu.queue["handle"] = 1
    third = runner(*args)
    one, two, three = fake_gpu.module.launches
    assert one["partials"].data_ptr() != two["partials"].data_ptr()
    assert one["counters"].data_ptr() != two["counters"].data_ptr()
    assert one["partials"] is three["partials"] and one["counters"] is three["counters"]
    assert len({first.data_ptr(), second.data_ptr(), third.data_ptr()}) == 3  # fresh outputs


def test_without_b_shuffle_a_b_q_variant_reads_b_q(fake_gpu):
    data = make_inputs(32, 2880, 512, seed=5)
    out = mxfp4_mm.gemm(data[0], data[2], data[4])
    launch = fake_gpu.module.launches[-1]
    assert not launch["variant"].b_shuffled and launch["b"] is data[2]
    assert_harness_close(out, reference_output(data))


def test_emulated_runner_needs_nvidia():
    with pytest.raises(RuntimeError, match="NVIDIA"):
        hip.make_emulated_runner(16, 64, 256, torch.device("cpu"), hip.candidates(16, 64, 256)[0])


# ---- the plan table and the general rule ----------------------------------------------------------

def _check_plan(plan, m, n, k, b_shuffled=True, by_rule=True):
    """What the kernel needs of a plan; with by_rule, also the rule's own limits."""
    v = hip.variant_of(plan)
    assert v.b_shuffled == b_shuffled
    assert v.tile_m % v.mfma == 0 and v.tile_n % v.mfma == 0 and v.tile_n % 16 == 0
    chunks = hip_plans.chunks_of(k)
    assert 1 <= plan.split_k <= min(chunks, hip_plans.MAX_SPLIT)
    # The kernel's split ranges: every split non-empty, on 256-K boundaries, covering K exactly.
    edges = [s * chunks // plan.split_k for s in range(plan.split_k + 1)]
    assert edges[0] == 0 and edges[-1] == chunks and all(a < b for a, b in zip(edges, edges[1:]))
    assert (chunks - 1) * hip_plans.CHUNK_K < k <= chunks * hip_plans.CHUNK_K
    tiles_n, tiles_m = -(-n // v.tile_n), -(-m // v.tile_m)
    assert tiles_m < 65536 and plan.split_k < 65536
    if by_rule and plan.split_k > 1:
        assert tiles_m * tiles_n * plan.split_k <= hip_plans.COMPUTE_UNITS
        assert hip_plans.partial_bytes(m, n, plan.split_k) <= hip_plans.MAX_PARTIAL_SHARE * n * k // 2


@pytest.mark.parametrize("shape", TASK_SHAPES)
def test_table_covers_every_task_shape_with_a_valid_plan(shape):
    assert shape in hip_plans.PLANS
    plan = hip_plans.PLANS[shape]  # measured entries may go past the rule's limits
    _check_plan(plan, *shape, b_shuffled=hip.kernel_variants()[plan.variant].b_shuffled, by_rule=False)
    assert hip.plan_for(*shape) == hip_plans.PLANS[shape]


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 4096), n16=st.integers(1, 2048), k64=st.integers(1, 256))
def test_general_rule_gives_valid_plans(m, n16, k64):
    n, k = 16 * n16, 64 * k64
    plan = hip_plans.general_plan(m, n, k, [v for v in hip.kernel_variants().values() if v.b_shuffled])
    _check_plan(plan, m, n, k)
    _check_plan(hip.fallback_plan(m, n, k, plan), m, n, k, b_shuffled=False)


def test_every_table_variant_and_both_layouts_exist_in_the_source():
    variants = hip.kernel_variants()
    assert {v.b_shuffled for v in variants.values()} == {True, False}
    assert all(v.mfma == 16 and v.waves >= 1 for v in variants.values())


def test_rule_reasons_about_the_task_shapes_as_documented():
    # Split K where one wave would otherwise walk many chunks; not for short K.
    assert hip.plan_for(16, 2112, 7168).split_k > 1
    assert hip.plan_for(4, 2880, 512).split_k == 1
    # Small M stays on the 16-row tile; large M takes a taller one (fewer B re-reads), still >= 192 blocks.
    assert hip.kernel_variants()[hip.plan_for(4, 2880, 512).variant].tile_m == 16
    big = hip.kernel_variants()[hip.plan_for(256, 3072, 1536).variant]
    assert big.tile_m > 16 and hip_plans.grid_blocks(256, 3072, big) >= hip_plans.TARGET_BLOCKS


@pytest.mark.parametrize("shape", TASK_SHAPES)
def test_candidates_lead_with_the_table_plan_specialized_and_are_valid(shape):
    plans = hip.candidates(*shape, CUDA0)
    table = hip.plan_for(*shape)
    assert plans[0] == hip_plans.Plan(table.variant, table.split_k, True)
    assert plans[-1] == table and not table.specialized
    assert len(plans) == len(set(plans)) and sum(p.specialized for p in plans) <= hip_plans.MAX_SPECIALIZED
    assert len({hip.plan_label(p) for p in plans}) == len(plans)
    assert all(" " not in hip.plan_label(p) for p in plans)
    for plan in plans:
        _check_plan(plan, *shape, by_rule=False)


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 4096), n16=st.integers(1, 2048), k64=st.integers(1, 256))
def test_candidates_of_any_shape_are_valid(m, n16, k64):
    n, k = 16 * n16, 64 * k64
    plans = hip.candidates(m, n, k)
    assert plans and plans[0].specialized
    for plan in plans:
        _check_plan(plan, m, n, k, by_rule=False)
        assert plan.split_k == 1 or hip_plans.grid_blocks(m, n, hip.variant_of(plan)) * plan.split_k <= \
            2 * hip_plans.COMPUTE_UNITS or plan.split_k == hip_plans.choose_split(m, n, k, hip.variant_of(plan))


def test_specialized_builds_get_their_constants_generic_ones_none():
    plan = hip.candidates(16, 2112, 7168)[0]
    options = dict(o.split("=") for o in hip.compile_options(16, 2112, 7168, plan))
    assert options["-DMXFP4_M"] == "16" and options["-DMXFP4_N"] == "2112" and options["-DMXFP4_K"] == "7168"
    assert options["-DMXFP4_SPLIT_K"] == str(plan.split_k) and options["-DMXFP4_B_SHUFFLED"] == "true"
    assert hip.compile_options(16, 2112, 7168, plan._replace(specialized=False)) == ()
    assert hip.kernel_name(plan) == "mxfp4_gemm_specialized"


def test_specialized_plans_run_through_the_backend(fake_gpu):
    """Every candidate of a split-K shape: its own build, its constants, the right answer; without
    B_shuffle the generic B_q fallback."""
    m, n, k = 16, 2112, 7168
    data = make_inputs(m, n, k, seed=8)
    ref = reference_output(data)
    for plan in hip.candidates(m, n, k):
        runner = hip.make_runner(m, n, k, torch.device("cpu"), plan)
        assert runner.plan == plan
        assert_harness_close(runner(data[0], data[2], data[3], data[4]), ref)
        launch = fake_gpu.module.launches[-1]
        assert launch["variant"] == hip.variant_of(plan) and launch["split_k"] == plan.split_k
        assert_harness_close(runner(data[0], data[2], None, data[4]), ref)
        assert not fake_gpu.module.launches[-1]["variant"].b_shuffled


def test_build_compiles_each_plan(fake_gpu, monkeypatch):
    monkeypatch.delenv("MXFP4_MM_LINEINFO", raising=False)
    compiled = []
    monkeypatch.setattr(runtime, "build_code", lambda source, device, options=(), *rest: compiled.append(options))
    plans = hip.candidates(4, 2880, 512)
    for plan in plans:
        hip.build(4, 2880, 512, torch.device("cpu"), plan)
    assert compiled == [hip.compile_options(4, 2880, 512, p) for p in plans]


def test_line_info_only_on_request_and_only_for_nvrtc(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.delenv("MXFP4_MM_LINEINFO", raising=False)
    assert hip.line_info_options() == ()
    monkeypatch.setenv("MXFP4_MM_LINEINFO", "1")
    assert hip.line_info_options() == ("-lineinfo",)
    compiled = []
    monkeypatch.setattr(runtime, "build_code", lambda source, device, options=(), *rest: compiled.append(options))
    plan = hip.candidates(4, 2880, 512)[0]
    hip.build(4, 2880, 512, torch.device("cpu"), plan)
    assert compiled == [hip.compile_options(4, 2880, 512, plan) + ("-lineinfo",)]
    monkeypatch.setattr(torch.version, "hip", "7.0.0")
    assert hip.line_info_options() == ()


def test_grid_mfma_counts():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    import gfx950_build
    v = hip.kernel_variants()["mxfp4_gemm_m16n64w4"]
    # 45 tiles x 4 N subtiles x (2 chunks x 2 steps of 128 K)
    assert gfx950_build.grid_mfma(4, 2880, 512, v) == 45 * 4 * 4
    # K % 256 == 64: the tail chunk has one 16x16x128 step (its second half empty)
    assert gfx950_build.grid_mfma(16, 64, 320, v) == 1 * 4 * 3


def test_no_forbidden_word_in_my_sources():
    root = Path(__file__).resolve().parent.parent / "mxfp4_mm"
    for path in [*(p for p in (root / "backends" / "hip").iterdir() if p.is_file()), root / "backends" / "aiter_backend.py"]:
        assert "stream" not in path.read_text().lower(), path


# ---- the aiter backend, with a stand-in aiter ---------------------------------------------------

class FakeAiter(types.ModuleType):
    """Records calls; quantizes with the spec and multiplies through the spec, after checking
    that every operand arrives in the dtype the real gemm_a4w4 dispatches on."""

    def __init__(self):
        super().__init__("aiter")
        self.calls = []
        self.QuantType = types.SimpleNamespace(per_1x32="per_1x32")
        self.dtypes = types.SimpleNamespace(fp4x2=torch.float4_e2m1fn_x2, fp8_e8m0=torch.float8_e8m0fnu,
                                            bf16=torch.bfloat16)

    def get_triton_quant(self, quant_type):
        assert quant_type == "per_1x32"

        def quant(x, shuffle=False):
            self.calls.append(("quant", x, shuffle))
            codes, scales = spec.quantize_mxfp4(x)
            scales = spec.e8m0_shuffle(scales) if shuffle else scales
            return codes.view(self.dtypes.fp4x2), scales.view(self.dtypes.fp8_e8m0)

        return quant

    def gemm_a4w4(self, a_q, b, a_scale, b_scale, dtype=None, bpreshuffle=False):
        self.calls.append(("gemm", a_q, b, a_scale, b_scale, dtype, bpreshuffle))
        assert a_q.dtype == b.dtype == self.dtypes.fp4x2
        assert a_scale.dtype == b_scale.dtype == self.dtypes.fp8_e8m0
        assert dtype == torch.bfloat16 and bpreshuffle is True
        m, n, k = a_q.shape[0], b.shape[0], 2 * a_q.shape[1]
        a_deq = spec.dequantize_mxfp4(a_q.view(torch.uint8),
                                      spec.e8m0_unshuffle(a_scale.view(torch.uint8), m, k // 32))
        b_deq = spec.dequantize_mxfp4(spec.unshuffle_weight(b.view(torch.uint8)),
                                      spec.e8m0_unshuffle(b_scale.view(torch.uint8), n, k // 32))
        return (a_deq @ b_deq.T).to(torch.bfloat16)


@pytest.fixture
def fake_aiter(monkeypatch):
    module = FakeAiter()
    monkeypatch.setitem(sys.modules, "aiter", module)
    monkeypatch.setattr(torch.version, "hip", "7.0.0")
    return module


def test_aiter_available_only_on_rocm_with_aiter(fake_aiter, monkeypatch):
    assert aiter_backend.is_available(CUDA0)
    assert not aiter_backend.is_available(torch.device("cpu"))
    monkeypatch.setitem(sys.modules, "aiter", None)  # import aiter raises ImportError
    assert not aiter_backend.is_available(CUDA0)
    monkeypatch.setitem(sys.modules, "aiter", fake_aiter)
    monkeypatch.setattr(torch.version, "hip", None)
    assert not aiter_backend.is_available(CUDA0)


@pytest.mark.parametrize("with_shuffle", [True, False])
def test_aiter_runner_calls_quant_then_gemm_as_the_reference(fake_aiter, with_shuffle):
    data = make_inputs(17, 48, 576, seed=6)
    a, _, b_q, b_shuffle, b_scale_sh = data
    runner = aiter_backend.make_runner(17, 48, 576, torch.device("cpu"))
    out = runner(a, b_q, b_shuffle if with_shuffle else None, b_scale_sh)
    (name_q, x, shuffle), gemm = fake_aiter.calls
    assert (name_q, shuffle) == ("quant", True) and x is a
    assert gemm[0] == "gemm" and torch.equal(gemm[2].view(torch.uint8), b_shuffle)
    assert torch.equal(gemm[4].view(torch.uint8), b_scale_sh)
    assert_harness_close(out, reference_output(data))


# ---- GPU: the backend path through the NVIDIA emulation ------------------------------------------

@pytest.mark.gpu
def test_emulated_backend_two_queues_at_once():
    """Every task-shape plan through hip's own runner (table plan, scratch, launch), then a split-K
    shape run concurrently on two queues: each must get its own answer."""
    device = torch.device("cuda")
    if dispatch.device_kind(device) != "nvidia" or not runtime.is_available(device):
        pytest.skip("the emulation runs on NVIDIA with NVRTC")
    for i, shape in enumerate(TASK_SHAPES):
        data = make_inputs(*shape, seed=50 + i, device="cuda")
        runner = hip.make_emulated_runner(*shape, device)
        assert_harness_close(runner(data[0], data[2], data[3], data[4]), reference_output(data))
        assert_harness_close(runner(data[0], data[2], None, data[4]), reference_output(data))

    shape = (16, 2112, 7168)
    runner = hip.make_emulated_runner(*shape, device)
    assert runner.plan.split_k > 1
    queues = [torch.cuda.Stream() for _ in range(2)]  # noqa: the word is fine in tests
    inputs = [make_inputs(*shape, seed=70 + q, device="cuda") for q in range(2)]
    torch.cuda.synchronize()
    for _ in range(3):
        outs = []
        for queue, data in zip(queues, inputs):
            with torch.cuda.stream(queue):
                outs.append(runner(data[0], data[2], data[3], data[4]))
        torch.cuda.synchronize()
        for out, data in zip(outs, inputs):
            assert_harness_close(out, reference_output(data))

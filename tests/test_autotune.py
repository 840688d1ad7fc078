"""First-use autotuning (mxfp4_mm/autotune.py) with fake backends and a fake timer on the CPU, and
on a GPU with the real backends."""

import collections
import json
import time
import types
import warnings

import pytest
import torch

import mxfp4_mm
from mxfp4_mm import autotune, bench, dispatch
from conftest import assert_harness_close, make_inputs, reference_output

FakePlan = collections.namedtuple("FakePlan", "name cost_us behaviour")
GOOD, WRONG, BUILD_FAILS, FLAKY = "good", "wrong", "build fails", "flaky"


def fake_backend(name, plans, prepare=False):
    """A backend module offering `plans`; each runner computes the reference (or garbage), and
    carries its plan so FakeTimer knows its cost."""
    calls = {"prepared": [], "built": []}

    def make_runner(m, n, k, device, plan=None):
        plan = plan or plans[0]
        calls["built"].append(plan.name)
        if plan.behaviour == BUILD_FAILS:
            raise RuntimeError(f"{plan.name}: compile failed (stand-in)")
        runs = [0]

        def run(a, b_q, b_shuffle, b_scale_sh):
            runs[0] += 1
            out = autotune.reference_output(m, n, k, (a, b_q, b_shuffle, b_scale_sh))
            if plan.behaviour == WRONG or (plan.behaviour == FLAKY and runs[0] > 1):
                out = torch.zeros_like(out)
            return out

        run.plan = plan
        return run

    module = types.SimpleNamespace(
        NAME=name, calls=calls, is_available=lambda device: True, make_runner=make_runner,
        candidates=lambda m, n, k, device: list(plans), plan_label=lambda plan: plan.name)
    if prepare:
        module.prepare = lambda m, n, k, device, todo: calls["prepared"].extend(p.name for p in todo)
    return module


class FakeTimer:
    """The plan's cost as its time (1 ms for a real backend's runner: the slowest); each timing
    advances the fake clock by 1 ms."""

    def __init__(self, clock=None):
        self.clock, self.timed = clock, []

    def __call__(self, runner, args):
        plan = getattr(runner, "plan", None) or FakePlan("real", 1e3, GOOD)
        self.timed.append(plan.name)
        if self.clock:
            self.clock.now += 1e-3
        return plan.cost_us


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


CPU = torch.device("cpu")
FAST = fake_backend("fast", [FakePlan("f1", 5.0, GOOD), FakePlan("f2", 3.0, GOOD),
                             FakePlan("fbroken", 1.0, BUILD_FAILS), FakePlan("fwrong", 0.5, WRONG)])
SLOW = fake_backend("slow", [FakePlan("s1", 9.0, GOOD)])


def _args(m=4, n=32, k=128, seed=3):
    data = make_inputs(m, n, k, seed=seed)
    return data, (data[0], data[2], data[3], data[4])


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """No env settings, a private cache dir, failures not yet reported, the dispatcher reset."""
    for name in (autotune.BUDGET_ENV, autotune.MEMO_ENV, autotune.PLAN_ENV, autotune.VERBOSE_ENV,
                 dispatch.FORCE_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MXFP4_MM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_reported_failures", set())
    dispatch.reset()
    yield tmp_path
    dispatch.reset()


def _tune(backends, budget=5.0, timer=None, clock=time.perf_counter):
    data, args = _args()
    candidates, _ = autotune.candidate_list(backends, 4, 32, 128, CPU)
    choice = autotune.tune(4, 32, 128, args, candidates, CPU, budget, timer or FakeTimer(), clock)
    return choice, data


def test_candidates_interleave_backends_by_rank():
    candidates, failures = autotune.candidate_list([("fast", FAST), ("slow", SLOW)], 4, 32, 128, CPU)
    assert [(c.backend, c.label) for c in candidates] == [
        ("fast", "f1"), ("slow", "s1"), ("fast", "f2"), ("fast", "fbroken"), ("fast", "fwrong")]
    assert failures == []


def test_a_backend_without_candidates_offers_its_default():
    plain = types.SimpleNamespace(make_runner=None, is_available=lambda device: True)
    candidates, _ = autotune.candidate_list([("plain", plain)], 4, 32, 128, CPU)
    assert [(c.backend, c.plan, c.label) for c in candidates] == [("plain", None, "default")]


def test_tuning_picks_the_fastest_verified_candidate_and_warns_once(fresh):
    timer = FakeTimer()
    with pytest.warns(RuntimeWarning) as caught:
        choice, data = _tune([("fast", FAST), ("slow", SLOW)], timer=timer)
    assert (choice.backend, choice.label, choice.how) == ("fast", "f2", "tuned")
    assert choice.us == 3.0
    assert_harness_close(choice.out, reference_output(data))
    assert "fwrong" not in timer.timed and "fbroken" not in timer.timed  # never timed unverified
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1
    assert "fast:fbroken" in messages[0] and "fast:fwrong" in messages[0] and "2 candidate" in messages[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same failures are not reported twice in a process
        _tune([("fast", FAST)])


def test_the_returned_output_is_verified_again(fresh):
    """A candidate right on its first run but wrong later (the output returned comes from a later
    run) is not chosen, though it times fastest."""
    flaky = fake_backend("flaky", [FakePlan("x1", 0.1, FLAKY), FakePlan("x2", 4.0, GOOD)])
    with pytest.warns(RuntimeWarning, match="flaky:x1"):
        choice, data = _tune([("flaky", flaky)])
    assert choice.label == "x2"
    assert_harness_close(choice.out, reference_output(data))


def test_a_cut_budget_keeps_each_backends_first_plans(fresh):
    clock = FakeClock()
    # QUICK_REPS timings advance the clock 3 ms per candidate: 5 ms = the first two candidates
    choice, _ = _tune([("fast", FAST), ("slow", SLOW)], budget=0.005, timer=FakeTimer(clock), clock=clock)
    assert (choice.backend, choice.label) == ("fast", "f1")  # f2 (faster) was never reached
    choice, _ = _tune([("fast", FAST), ("slow", SLOW)], budget=0.0, timer=FakeTimer(clock), clock=clock)
    assert choice is None


def test_prepare_runs_ahead_for_backends_that_have_it(fresh):
    prepared = fake_backend("prep", [FakePlan("p1", 2.0, GOOD), FakePlan("p2", 1.0, GOOD)], prepare=True)
    choice, _ = _tune([("prep", prepared)])
    assert choice.label == "p2"
    assert sorted(prepared.calls["prepared"]) == ["p1", "p2"]


def test_a_failing_prepare_drops_the_candidate(fresh):
    prepared = fake_backend("prep2", [FakePlan("q1", 2.0, GOOD), FakePlan("q2", 1.0, GOOD)])

    def prepare(m, n, k, device, plans):
        if plans[0].name == "q2":
            raise RuntimeError("no compiler (stand-in)")

    prepared.prepare = prepare
    with pytest.warns(RuntimeWarning, match="prep2:q2"):
        choice, _ = _tune([("prep2", prepared)])
    assert choice.label == "q1"


# ---- through the dispatcher -----------------------------------------------------------------

@pytest.fixture
def fake_gpu_dispatch(fresh, monkeypatch):
    """The dispatcher tunes CPU tensors with FAST, SLOW and torch, timed by FakeTimer."""
    backends = {"fast": FAST, "slow": SLOW}
    real_load = dispatch.load_backend
    monkeypatch.setattr(dispatch, "load_backend", lambda name: backends.get(name) or real_load(name))
    monkeypatch.setitem(dispatch.ORDER_BY_DEVICE_KIND, "cpu", ("fast", "slow", "torch"))
    monkeypatch.setattr(autotune, "should_tune", lambda device: True)
    timers = []
    monkeypatch.setattr(autotune, "EventTimer", lambda device: timers.append(FakeTimer()) or timers[-1])
    return types.SimpleNamespace(timers=timers, cache=fresh)


def test_dispatch_serves_the_tuned_winner_for_later_calls(fake_gpu_dispatch):
    data, _ = _args()
    with pytest.warns(RuntimeWarning):
        out = mxfp4_mm.custom_kernel(data)
    assert_harness_close(out, reference_output(data))
    assert mxfp4_mm.last_backend_name() == "fast" and dispatch.last_choice() == "fast:f2"
    timed = len(fake_gpu_dispatch.timers[0].timed)
    other, _ = _args(seed=9)
    again = mxfp4_mm.custom_kernel(other)
    assert_harness_close(again, reference_output(other))
    assert again.data_ptr() != out.data_ptr() and len(fake_gpu_dispatch.timers) == 1
    assert len(fake_gpu_dispatch.timers[0].timed) == timed  # no tuning on later calls
    assert dispatch.last_choice() == "fast:f2"


def test_budget_zero_is_the_table_path(fake_gpu_dispatch, monkeypatch):
    monkeypatch.setenv(autotune.BUDGET_ENV, "0")
    data, _ = _args()
    out = mxfp4_mm.custom_kernel(data)
    assert fake_gpu_dispatch.timers == []
    assert dispatch.last_choice() == "fast:f1"  # the backend's default plan
    assert_harness_close(out, reference_output(data))


def test_bad_budget_is_a_value_error(fake_gpu_dispatch, monkeypatch):
    monkeypatch.setenv(autotune.BUDGET_ENV, "-1")
    with pytest.raises(ValueError, match=autotune.BUDGET_ENV):
        mxfp4_mm.custom_kernel(_args()[0])


def test_nothing_verified_in_time_falls_back_to_the_table_path(fake_gpu_dispatch, monkeypatch):
    monkeypatch.setattr(autotune, "tune", lambda *a, **kw: None)
    data, _ = _args()
    out = mxfp4_mm.custom_kernel(data)
    assert dispatch.last_choice() == "fast:f1"
    assert_harness_close(out, reference_output(data))


def test_tuner_trouble_never_fails_the_call(fake_gpu_dispatch, monkeypatch):
    def no_memory(device):
        raise torch.OutOfMemoryError("flush buffer (stand-in)")

    monkeypatch.setattr(autotune, "EventTimer", no_memory)
    data, _ = _args()
    with pytest.warns(RuntimeWarning, match="autotune.*OutOfMemoryError"):
        out = mxfp4_mm.custom_kernel(data)
    assert dispatch.last_choice() == "fast:f1"
    assert_harness_close(out, reference_output(data))


@pytest.mark.parametrize("pin", ["fast:f1", "4x32x128=fast:f1", "slow:s1,4x32x128=fast:f1,8x8x8=slow:s1"])
def test_pinned_plan_is_served_without_measuring(fake_gpu_dispatch, monkeypatch, pin):
    monkeypatch.setenv(autotune.PLAN_ENV, pin)
    data, _ = _args()
    out = mxfp4_mm.custom_kernel(data)
    assert dispatch.last_choice() == "fast:f1" and fake_gpu_dispatch.timers == []
    assert_harness_close(out, reference_output(data))


def test_pin_for_another_shape_leaves_this_one_tuned(fake_gpu_dispatch, monkeypatch):
    monkeypatch.setenv(autotune.PLAN_ENV, "8x32x128=fast:f1")
    with pytest.warns(RuntimeWarning):
        mxfp4_mm.custom_kernel(_args()[0])
    assert dispatch.last_choice() == "fast:f2"


@pytest.mark.parametrize("pin, message", [("fast", "backend:label"), ("4x32=fast:f1", "MxNxK"),
                                          ("fast:nope", "not offered"), ("fast:fwrong", "disagrees")])
def test_bad_pins_raise(fake_gpu_dispatch, monkeypatch, pin, message):
    monkeypatch.setenv(autotune.PLAN_ENV, pin)
    with pytest.raises((ValueError, autotune.WrongResult), match=message):
        mxfp4_mm.custom_kernel(_args()[0])


# ---- the memo ---------------------------------------------------------------------------------

def test_memo_remembers_the_choice_per_shape(fake_gpu_dispatch, monkeypatch):
    data, _ = _args()
    with pytest.warns(RuntimeWarning):
        mxfp4_mm.custom_kernel(data)
    files = list((fake_gpu_dispatch.cache / "autotune").glob("*.json"))
    assert len(files) == 1
    entry = json.loads(files[0].read_text())
    assert (entry["backend"], entry["label"], entry["key"]["shape"]) == ("fast", "f2", [4, 32, 128])
    assert entry["budget_s"] == autotune.DEFAULT_BUDGET_S

    dispatch.reset()
    other, _ = _args(seed=11)  # other data, same shape: the memo serves, nothing is timed
    out = mxfp4_mm.custom_kernel(other)
    assert dispatch.last_choice() == "fast:f2" and len(fake_gpu_dispatch.timers) == 1
    assert_harness_close(out, reference_output(other))

    dispatch.reset()
    monkeypatch.setenv(autotune.BUDGET_ENV, "20")  # a larger budget than the memo's: tune again
    mxfp4_mm.custom_kernel(other)
    assert len(fake_gpu_dispatch.timers) == 2


def test_memo_off(fake_gpu_dispatch, monkeypatch):
    monkeypatch.setenv(autotune.MEMO_ENV, "0")
    with pytest.warns(RuntimeWarning):
        mxfp4_mm.custom_kernel(_args()[0])
    assert not (fake_gpu_dispatch.cache / "autotune").exists()


def test_memo_key_holds_versions_sources_and_shape_never_data(fresh, monkeypatch):
    key = autotune.memo_key(CPU, 4, 32, 128, ["torch"])
    assert set(key) == {"device", "arch", "torch", "toolkit", "triton", "driver", "package", "backends", "shape"}
    assert key["shape"] == [4, 32, 128] and key["torch"] == torch.__version__
    json.dumps(key)  # stored as JSON
    assert autotune.memo_key(CPU, 4, 32, 128, ["torch"]) == key
    assert autotune.memo_key(CPU, 8, 32, 128, ["torch"]) != key
    from mxfp4_mm import kernels
    monkeypatch.setitem(kernels.BUNDLED, "mxfp4_gemm_sm90.cu", "// another kernel")
    assert autotune.memo_key(CPU, 4, 32, 128, ["torch"])["package"] != key["package"]


def test_a_stale_memo_entry_is_ignored(fake_gpu_dispatch, monkeypatch):
    key = autotune.memo_key(CPU, 4, 32, 128, ["fast", "slow", "torch"])
    autotune.write_memo(key, autotune.Choice("fast", "gone", None, None, None, "tuned", 1.0), 99.0)
    with pytest.warns(RuntimeWarning):
        mxfp4_mm.custom_kernel(_args()[0])
    assert dispatch.last_choice() == "fast:f2" and len(fake_gpu_dispatch.timers) == 1


def test_verbose_prints_only_when_asked(fake_gpu_dispatch, monkeypatch, capsys):
    with pytest.warns(RuntimeWarning):
        mxfp4_mm.custom_kernel(_args()[0])
    assert capsys.readouterr() == ("", "")
    dispatch.reset()
    monkeypatch.setenv(autotune.VERBOSE_ENV, "1")
    monkeypatch.setenv(autotune.MEMO_ENV, "0")
    mxfp4_mm.custom_kernel(_args()[0])
    assert "chose fast:f2" in capsys.readouterr().err


def test_no_tuning_on_the_cpu(fresh):
    assert not autotune.should_tune(CPU)
    mxfp4_mm.custom_kernel(_args()[0])
    assert dispatch.last_choice() == "torch:default"


# ---- GPU ------------------------------------------------------------------------------------

TASK_SHAPES = bench.TEST_SHAPES + bench.BENCHMARK_SHAPES


@pytest.mark.gpu
@pytest.mark.parametrize("shape", TASK_SHAPES, ids=bench.shape_key)
def test_first_use_tuning_on_the_gpu_is_verified_and_within_10_s(fresh, monkeypatch, shape):
    monkeypatch.setenv(autotune.MEMO_ENV, "0")
    data = bench.generate_input(*shape, seed=5, device="cuda")
    torch.cuda.synchronize()
    started = time.perf_counter()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        out = mxfp4_mm.custom_kernel(data)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    assert_harness_close(out, reference_output(data))
    backend, _, label = dispatch.last_choice().partition(":")
    offered = autotune.candidate_list(dispatch.available_backends(data[0].device), *shape, data[0].device)[0]
    assert (backend, label) in {(c.backend, c.label) for c in offered}
    assert elapsed <= 10.0, f"tuning {shape} took {elapsed:.1f} s"
    other = bench.generate_input(*shape, seed=6, device="cuda")
    assert_harness_close(mxfp4_mm.custom_kernel(other), reference_output(other))


# ---- the table tuner (python -m mxfp4_mm.tune) ------------------------------------------------

def _load_table(path, name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"mxfp4_mm.tables.{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("backend, arch", [("cuda", None), ("triton", "sm_90"), ("triton", "gfx950"),
                                           ("hip", None)])
def test_table_writer_merges_one_shape_and_keeps_the_rest(tmp_path, backend, arch):
    from mxfp4_mm import tune
    from mxfp4_mm.tables import cuda_plans, hip_plans, triton_plans
    current = {"cuda": cuda_plans, "triton": triton_plans, "hip": hip_plans}[backend].PLANS
    old = current[arch] if arch else current
    some_plan = next(iter(triton_plans.PLANS["sm_90"].values())) if backend == "triton" else next(iter(old.values()))
    name = tune.TABLE_MODULES[backend]
    path = tmp_path / f"{name}.py"
    path.write_text((tune.TABLES_DIR / f"{name}.py").read_text())
    tune.write_table(backend, {(3, 48, 128): some_plan}, {(3, 48, 128): "1.23 us"}, ["stamp line"], arch=arch,
                     path=path)
    text = path.read_text()
    written = _load_table(path, name).PLANS
    table = written[arch] if arch else written
    assert tuple(table[(3, 48, 128)]) == tuple(some_plan) and "# 1.23 us" in text and "# stamp line" in text
    assert {s: tuple(p) for s, p in table.items() if s != (3, 48, 128)} == {s: tuple(p) for s, p in old.items()}
    if arch:
        assert set(written) == set(current)
    assert text.count("PLANS = {") == 1 and (tune.BEGIN in text) == (backend == "hip")


def test_static_hip_table_is_the_rule_with_its_model(tmp_path):
    from mxfp4_mm import tune
    path = tmp_path / "hip_plans.py"
    path.write_text((tune.TABLES_DIR / "hip_plans.py").read_text())
    tune.write_static_hip(path)
    written = _load_table(path, "hip_plans").PLANS
    chosen, _ = tune.static_plans(bench.TEST_SHAPES + bench.BENCHMARK_SHAPES)
    assert written == chosen
    text = path.read_text()
    assert "static model (python -m mxfp4_mm.tune --static)" in text and "mfma" in text and tune.END in text


def test_best_per_backend_skips_wrong_and_default_plans():
    from mxfp4_mm import tune
    candidates, _ = autotune.candidate_list([("fast", FAST), ("slow", SLOW)], 4, 32, 128, CPU)
    rows = {"fast:f1": {"correct": True, "median_us": 5.0}, "fast:f2": {"correct": True, "median_us": 3.0},
            "fast:fwrong": {"correct": False}, "slow:s1": {"correct": True, "median_us": 9.0}}
    best = tune.best_per_backend(rows, candidates)
    assert {name: (plan.name, us) for name, (plan, us) in best.items()} == {"fast": ("f2", 3.0), "slow": ("s1", 9.0)}

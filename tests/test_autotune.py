"""The dispatcher's side of tuning (mxfp4_mm/autotune.py) with fake backends and a fake timer on
the CPU: a shape's first call measured now (the tuner inline, MXFP4_MM_PROVE=inline), served from
the memo later, pins, budgets, and that tuner trouble never fails a call; on a GPU, the same with
the real backends and the tuner in a child process."""

import time
import types

import pytest
import torch

import mxfp4_mm
from mxfp4_mm import autotune, bench, dispatch
from mxfp4_mm.tuning import records, timing, tuner, verify
from conftest import assert_harness_close, make_inputs, reference_output
from fake_backends import BUILD_FAILS, FLAKY, GOOD, WRONG, FakePlan, FakeTimer, fake_backend

NAMES = ("fast", "slow", "torch")
SHAPE = (4, 32, 128)
CPU = torch.device("cpu")
FAST = fake_backend("fast", [FakePlan("f1", 5.0, GOOD), FakePlan("f2", 3.0, GOOD),
                             FakePlan("fbroken", 1.0, BUILD_FAILS), FakePlan("fwrong", 0.5, WRONG)])
SLOW = fake_backend("slow", [FakePlan("s1", 9.0, GOOD)])


def _data(seed=3, shape=SHAPE):
    return make_inputs(*shape, seed=seed)


def test_candidates_interleave_backends_by_rank():
    candidates, failures = tuner.candidate_list([("fast", FAST), ("slow", SLOW)], *SHAPE, CPU)
    assert [(c.backend, c.label) for c in candidates] == [
        ("fast", "f1"), ("slow", "s1"), ("fast", "f2"), ("fast", "fbroken"), ("fast", "fwrong")]
    assert failures == []


def test_a_backend_without_candidates_offers_its_default():
    plain = types.SimpleNamespace(make_runner=None, is_available=lambda device: True)
    candidates, _ = tuner.candidate_list([("plain", plain)], *SHAPE, CPU)
    assert [(c.backend, c.plan, c.label) for c in candidates] == [("plain", None, "default")]


def test_the_reference_backend_is_never_a_candidate():
    torch_backend = dispatch.load_backend("torch")
    assert tuner.is_reference(torch_backend)
    assert tuner.candidate_list([("torch", torch_backend)], *SHAPE, CPU) == ([], [])


# ---- through the dispatcher -----------------------------------------------------------------

@pytest.fixture
def gpu_like(monkeypatch, tmp_path):
    """The dispatcher tunes CPU tensors (tuner inline) with FAST, SLOW and torch, timed by FakeTimer;
    a private cache dir; no env settings; the dispatcher reset."""
    for name in (autotune.PLAN_ENV, autotune.VERBOSE_ENV, dispatch.FORCE_ENV, dispatch.EXTRA_ENV,
                 dispatch.SERVED_LOG_ENV, autotune.CAP_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(autotune.BUDGET_ENV, "5")
    monkeypatch.setenv(autotune.PROVE_ENV, "inline")
    monkeypatch.setenv("MXFP4_MM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_reported_failures", set())
    monkeypatch.setattr(autotune, "_spent", [0.0])
    backends = {"fast": FAST, "slow": SLOW}
    real_load = dispatch.load_backend
    monkeypatch.setattr(dispatch, "load_backend", lambda name: backends.get(name) or real_load(name))
    monkeypatch.setitem(dispatch.ORDER_BY_DEVICE_KIND, "cpu", NAMES)
    monkeypatch.setattr(autotune, "should_tune", lambda device: True)
    timers = []
    monkeypatch.setattr(timing, "timer_for", lambda device: timers.append(FakeTimer()) or timers[-1])
    dispatch.reset()
    yield types.SimpleNamespace(timers=timers, cache=tmp_path)
    dispatch.reset()


def _memo():
    return records.Memo(CPU, SHAPE, NAMES)


def test_the_first_call_measures_and_serves_the_fastest_right_candidate(gpu_like):
    data = _data()
    out = mxfp4_mm.custom_kernel(data)
    assert_harness_close(out, reference_output(data))
    assert mxfp4_mm.last_backend_name() == "fast" and dispatch.last_choice() == "fast:f2"
    timer, = gpu_like.timers
    assert "fwrong" not in timer.timed and "fbroken" not in timer.timed  # never timed unverified
    memo = _memo()
    assert memo.data["chosen"] == "fast:f2" and "fast:fwrong" in memo.data["wrong"]
    assert "compile failed" in memo.data["failed"]["fast:fbroken"]
    timed = len(timer.timed)
    other = _data(seed=9)  # later calls: the cached runner, nothing timed
    again = mxfp4_mm.custom_kernel(other)
    assert_harness_close(again, reference_output(other))
    assert again.data_ptr() != out.data_ptr() and len(timer.timed) == timed and len(gpu_like.timers) == 1


def test_a_later_process_is_served_from_the_memo_without_measuring(gpu_like):
    mxfp4_mm.custom_kernel(_data())
    dispatch.reset()  # as a new process: only the records remain
    other = _data(seed=11)  # other data, same shape
    out = mxfp4_mm.custom_kernel(other)
    assert dispatch.last_choice() == "fast:f2" and len(gpu_like.timers) == 1
    assert_harness_close(out, reference_output(other))


def test_a_candidate_wrong_after_its_proof_is_not_served(gpu_like, monkeypatch):
    """Right on its proof runs, wrong later (fresh checks and the served call catch it)."""
    flaky = fake_backend("flaky", [FakePlan("x1", 0.1, FLAKY), FakePlan("x2", 4.0, GOOD)])
    real_load = dispatch.load_backend
    monkeypatch.setattr(dispatch, "load_backend", lambda name: flaky if name == "flaky" else real_load(name))
    monkeypatch.setitem(dispatch.ORDER_BY_DEVICE_KIND, "cpu", ("flaky", "torch"))
    data = _data()
    out = mxfp4_mm.custom_kernel(data)
    assert dispatch.last_choice() == "flaky:x2"
    assert_harness_close(out, reference_output(data))


def test_budget_zero_is_the_table_path(gpu_like, monkeypatch):
    monkeypatch.setenv(autotune.BUDGET_ENV, "0")
    data = _data()
    out = mxfp4_mm.custom_kernel(data)
    assert gpu_like.timers == []
    assert dispatch.last_choice() == "fast:f1"  # the backend's first plan
    assert_harness_close(out, reference_output(data))


@pytest.mark.parametrize("env, value", [(autotune.BUDGET_ENV, "-1"), (autotune.BUDGET_ENV, "soon"),
                                        (autotune.PROVE_ENV, "maybe")])
def test_bad_settings_are_value_errors(gpu_like, monkeypatch, env, value):
    monkeypatch.setenv(env, value)
    with pytest.raises(ValueError, match=env):
        mxfp4_mm.custom_kernel(_data())


def test_the_cap_per_process_ends_measuring(gpu_like, monkeypatch):
    monkeypatch.setenv(autotune.CAP_ENV, "0")
    mxfp4_mm.custom_kernel(_data())
    assert gpu_like.timers == [] and dispatch.last_choice() == "fast:f1"


def test_tuner_trouble_never_fails_the_call(gpu_like, monkeypatch):
    def no_memory(device):
        raise torch.OutOfMemoryError("flush buffer (stand-in)")

    monkeypatch.setattr(timing, "timer_for", no_memory)
    data = _data()
    with pytest.warns(RuntimeWarning, match="autotune.*OutOfMemoryError"):
        out = mxfp4_mm.custom_kernel(data)
    assert dispatch.last_choice() == "fast:f1"
    assert_harness_close(out, reference_output(data))


def test_a_memo_naming_nothing_offered_leaves_the_table_path(gpu_like):
    memo = _memo()
    memo.data["timed"] = {"fast:gone": 1.0}
    memo.data["chosen"] = "fast:gone"
    memo.save()
    data = _data()
    out = mxfp4_mm.custom_kernel(data)
    assert dispatch.last_choice() == "fast:f1" and gpu_like.timers == []
    assert_harness_close(out, reference_output(data))


@pytest.mark.parametrize("pin", ["fast:f1", "4x32x128=fast:f1", "slow:s1,4x32x128=fast:f1,8x8x8=slow:s1"])
def test_pinned_plan_is_served_without_measuring(gpu_like, monkeypatch, pin):
    monkeypatch.setenv(autotune.PLAN_ENV, pin)
    data = _data()
    out = mxfp4_mm.custom_kernel(data)
    assert dispatch.last_choice() == "fast:f1" and gpu_like.timers == []
    assert_harness_close(out, reference_output(data))


def test_the_reference_may_be_pinned(gpu_like, monkeypatch):
    monkeypatch.setenv(autotune.PLAN_ENV, "torch:default")
    data = _data()
    assert_harness_close(mxfp4_mm.custom_kernel(data), reference_output(data))
    assert dispatch.last_choice() == "torch:default" and gpu_like.timers == []


def test_pin_for_another_shape_leaves_this_one_tuned(gpu_like, monkeypatch):
    monkeypatch.setenv(autotune.PLAN_ENV, "8x32x128=fast:f1")
    mxfp4_mm.custom_kernel(_data())
    assert dispatch.last_choice() == "fast:f2"


@pytest.mark.parametrize("pin, message", [("fast", "backend:label"), ("4x32=fast:f1", "MxNxK"),
                                          ("fast:nope", "not offered"), ("fast:fwrong", "disagrees")])
def test_bad_pins_raise(gpu_like, monkeypatch, pin, message):
    monkeypatch.setenv(autotune.PLAN_ENV, pin)
    with pytest.raises((ValueError, verify.WrongResult), match=message):
        mxfp4_mm.custom_kernel(_data())


def test_a_bad_pin_raises_on_the_cpu_too(monkeypatch):
    monkeypatch.setenv(autotune.PLAN_ENV, "fast")
    dispatch.reset()
    try:
        with pytest.raises(ValueError, match="backend:label"):
            mxfp4_mm.custom_kernel(_data())
    finally:
        dispatch.reset()


def test_the_served_log_says_what_served_and_how(gpu_like, monkeypatch, tmp_path):
    log = tmp_path / "served.log"
    monkeypatch.setenv(dispatch.SERVED_LOG_ENV, str(log))
    mxfp4_mm.custom_kernel(_data())
    mxfp4_mm.custom_kernel(_data(shape=(8, 32, 128)))
    mxfp4_mm.custom_kernel(_data())  # a later call of a served shape: not logged again
    assert log.read_text().splitlines() == ["4x32x128 fast:f2 records", "8x32x128 fast:f2 records"]


def test_verbose_prints_only_when_asked(gpu_like, monkeypatch, capsys):
    mxfp4_mm.custom_kernel(_data())
    assert capsys.readouterr() == ("", "")
    dispatch.reset()
    monkeypatch.setenv(autotune.VERBOSE_ENV, "1")
    mxfp4_mm.custom_kernel(_data(shape=(8, 32, 128)))
    assert "fast:f2" in capsys.readouterr().err


def test_no_tuning_on_the_cpu():
    assert not autotune.should_tune(CPU)
    dispatch.reset()
    mxfp4_mm.custom_kernel(_data())
    assert dispatch.last_choice() == "torch:default"


# ---- GPU: the real backends, the tuner in a child -------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4, 2880, 512), (16, 2112, 7168)], ids=bench.shape_key)
def test_first_use_tuning_on_the_gpu_serves_a_proven_verified_candidate(monkeypatch, tmp_path, shape):
    """How long it takes is the bench's business (`bench --autotune`), not a test's."""
    monkeypatch.setenv("MXFP4_MM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(autotune.BUDGET_ENV, "15")
    monkeypatch.setenv(autotune.PROVE_ENV, "child")
    monkeypatch.setattr(autotune, "_spent", [0.0])
    dispatch.reset()
    try:
        data = bench.generate_input(*shape, seed=5, device="cuda")
        out = mxfp4_mm.custom_kernel(data)
        assert_harness_close(out, reference_output(data))
        device = data[0].device
        backend, _, label = dispatch.last_choice().partition(":")
        offered = tuner.candidate_list(dispatch.available_backends(device), *shape, device)[0]
        served = next(c for c in offered if (c.backend, c.label) == (backend, label))
        assert autotune.is_proven(device, shape, served)  # a tuner child ran it first
        memo = records.Memo(device, shape, dispatch.candidate_backends(device))
        if memo.data["chosen"] is None:  # the budget ran out before a timing finished (a loaded GPU)
            assert served == offered[0]  # the table's plan serves, proven all the same
        else:
            assert memo.data["chosen"] == dispatch.last_choice()
        other = bench.generate_input(*shape, seed=6, device="cuda")
        assert_harness_close(mxfp4_mm.custom_kernel(other), reference_output(other))
    finally:
        dispatch.reset()


# ---- the table tuner (python -m mxfp4_mm.tune) ------------------------------------------------

def _load_table(path, name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"table_copy_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("backend, arch", [("cuda", None), ("triton", "sm_90"), ("triton", "gfx950"),
                                           ("hip", None)])
def test_table_writer_merges_one_shape_and_keeps_the_rest(tmp_path, backend, arch):
    from mxfp4_mm import tune
    import importlib
    from mxfp4_mm.backends.triton import plans as triton_plans
    current = importlib.import_module(tune.TABLE_MODULES[backend]).PLANS
    old = current[arch] if arch else current
    some_plan = next(iter(triton_plans.PLANS["sm_90"].values())) if backend == "triton" else next(iter(old.values()))
    name = f"{backend}_plans"
    path = tmp_path / f"{name}.py"
    path.write_text(tune.table_path(backend).read_text())
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
    if arch == "sm_90":  # the gfx950 table, not written, stays the comprehension over its prior
        assert "'gfx950': {shape: tuple(_gfx950_prior(shape)) for shape in AITER_CONFIGS}," in text


@pytest.mark.parametrize("backend, arch", [("cuda", None), ("triton", "sm_90")])
def test_a_second_write_keeps_the_other_entries_notes_and_one_stamp(tmp_path, backend, arch):
    """Shapes tuned one process at a time: each write keeps the notes of the entries it does not
    touch, and the table carries only the latest stamp."""
    from mxfp4_mm import tune
    import importlib
    table = importlib.import_module(tune.TABLE_MODULES[backend]).PLANS
    table = table[arch] if arch else table
    (first, plan_a), (second, plan_b) = list(table.items())[:2]
    path = tmp_path / f"{backend}_plans_twice.py"
    path.write_text(tune.table_path(backend).read_text())
    stamp = tune.STAMP
    tune.write_table(backend, {first: plan_a}, {first: "1.11 us, device A"}, [stamp + "A"], arch=arch, path=path)
    tune.write_table(backend, {second: plan_b}, {second: "2.22 us, device B"}, [stamp + "B"], arch=arch, path=path)
    text = path.read_text()
    assert text.count(tune.STAMP_PREFIX) == 1 and (tune.STAMP_PREFIX + "B") in text
    assert tune.entry_notes(text, arch)[first] == "1.11 us, device A"
    assert tune.entry_notes(text, arch)[second] == "2.22 us, device B"
    written = _load_table(path, f"{backend}_plans_twice").PLANS
    assert tuple((written[arch] if arch else written)[first]) == tuple(plan_a)


def test_static_hip_table_is_the_rule_with_its_model(tmp_path):
    from mxfp4_mm import tune
    path = tmp_path / "hip_plans.py"
    path.write_text(tune.table_path("hip").read_text())
    tune.write_static_hip(path)
    written = _load_table(path, "hip_plans").PLANS
    chosen, _ = tune.static_plans(bench.TEST_SHAPES + bench.BENCHMARK_SHAPES)
    assert written == chosen
    text = path.read_text()
    assert "static model (python -m mxfp4_mm.tune --static)" in text and "mfma" in text and tune.END in text


def test_best_per_backend_skips_wrong_and_default_plans():
    from mxfp4_mm import tune
    candidates, _ = tuner.candidate_list([("fast", FAST), ("slow", SLOW)], 4, 32, 128, CPU)
    rows = {"fast:f1": {"correct": True, "median_us": 5.0}, "fast:f2": {"correct": True, "median_us": 3.0},
            "fast:fwrong": {"correct": False}, "slow:s1": {"correct": True, "median_us": 9.0}}
    best = tune.best_per_backend(rows, candidates)
    assert {name: (plan.name, us) for name, (plan, us) in best.items()} == {"fast": ("f2", 3.0), "slow": ("s1", 9.0)}


def test_a_served_choice_settles_the_shape(gpu_like, monkeypatch):
    """Once a process served a choice, later sweeps leave the shape alone: the next processes (the
    benchmark run, then the ranked run) serve the same plan."""
    mxfp4_mm.custom_kernel(_data())
    memo = _memo()
    assert memo.data["served"] == "fast:f2" and memo.settled()
    faster = fake_backend("fast", [FakePlan("f0", 0.1, GOOD)] + FAST.candidates(*SHAPE, CPU))
    backends = [("fast", faster), ("slow", SLOW)]
    timer = FakeTimer()
    tuner.Tuner(CPU, backends, NAMES, time.time() + 30, timer=timer).sweep([SHAPE])
    assert timer.timed == [] and _memo().data["chosen"] == "fast:f2"


def test_table_writer_keeps_the_tag_of_a_plan_whose_fields_are_all_defaults(tmp_path):
    """A DequantPlan has one field, its tag "dq", which is also its default: written as () the
    table entry could not be read back (plan_from_fields(()) raised in the first H200 retune)."""
    from mxfp4_mm import tune
    from mxfp4_mm.backends.cuda import plans as cuda_plans
    path = tmp_path / "cuda_plans.py"
    path.write_text(tune.table_path("cuda").read_text())
    tune.write_table("cuda", {(3, 48, 128): cuda_plans.DequantPlan()}, {}, ["stamp line"], path=path)
    written = _load_table(path, "cuda_plans_dq").PLANS
    assert written[(3, 48, 128)] == ("dq",)
    assert cuda_plans.plan_from_fields(written[(3, 48, 128)]) == cuda_plans.DequantPlan()

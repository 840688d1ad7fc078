"""The tuning machinery (mxfp4_mm/tuning/) on the CPU: records, the tuner loop with fake backends,
the build pool and the supervisor with real child processes (a backend that crashes and one that
hangs in their first runs), and that nothing of ours outlives a call."""

import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from mxfp4_mm import dispatch
from mxfp4_mm.tuning import buildpool, procs, records, supervise, tuner, verify
from fake_backends import BUILD_FAILS, FLAKY, GOOD, WRONG, FakePlan, FakeTimer, fake_backend
from process_tree import descendants

CPU = torch.device("cpu")
SHAPE = (4, 32, 128)
TESTS_DIR = str(Path(__file__).resolve().parent)
NAMES = ("fast", "slow", "torch")  # the dispatch order the `cache` fixture sets for the CPU


@pytest.fixture
def cache(monkeypatch, tmp_path):
    monkeypatch.setenv("MXFP4_MM_CACHE_DIR", str(tmp_path))
    for name in (dispatch.FORCE_ENV, dispatch.EXTRA_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(dispatch.ORDER_BY_DEVICE_KIND, "cpu", NAMES)
    dispatch.reset()
    yield tmp_path
    dispatch.reset()


def _backends(*modules):
    return [(m.NAME, m) for m in modules] + [("torch", dispatch.load_backend("torch"))]


# ---- candidates -------------------------------------------------------------------------------

def test_candidates_interleave_by_rank_and_leave_the_reference_out():
    fast = fake_backend("fast", [FakePlan("f1", 5, GOOD, "a"), FakePlan("f2", 3, GOOD, "b")])
    slow = fake_backend("slow", [FakePlan("s1", 9, GOOD, "c")])
    candidates, failures = tuner.candidate_list(_backends(fast, slow), *SHAPE, CPU)
    assert [tuner.full_label(c) for c in candidates] == ["fast:f1", "slow:s1", "fast:f2"]
    assert [c.family for c in candidates] == ["fast:a", "slow:c", "fast:b"] and not failures


# ---- records ------------------------------------------------------------------------------------

def _dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_ledger_proves_returned_runs_and_rules_out_families_whose_process_died(cache):
    ledger = records.ledger_for(CPU)
    run = ledger.begin(SHAPE, "x:one", "x:fam1", 5.0)
    ledger.end(run)
    still = ledger.begin(SHAPE, "x:two", "x:fam2", 5.0)  # this process is alive: in flight
    proven, bad, open_runs = ledger.state()
    assert ("4x32x128", "x:one") in proven and not bad and [r["id"] for r in open_runs] == [still]
    ledger._append({"ev": "run", "id": "dead.1", "shape": "4x32x128", "label": "x:three", "family": "x:fam3",
                    "pid": _dead_pid(), "started": None, "limit_s": 5.0})
    assert ledger.state()[1] == {"x:fam3": "fault"}
    assert ledger.settle() == ["x:fam3"] and ledger.settle() == []
    assert [r["ev"] for r in ledger.records()].count("bad") == 1
    ledger.mark("x:fam2", "hang", "x:two", SHAPE)
    assert ledger.state()[1] == {"x:fam3": "fault", "x:fam2": "hang"}


def test_a_run_cut_by_a_deadline_is_neither_proven_nor_ruled_out(cache):
    ledger = records.ledger_for(CPU)
    ledger._append({"ev": "run", "id": "dead.2", "shape": "4x32x128", "label": "x:cut", "family": "x:cut",
                    "pid": _dead_pid(), "started": None, "limit_s": 5.0})
    ledger.abandon("dead.2")
    proven, bad, open_runs = ledger.state()
    assert not proven and not bad and not open_runs and ledger.settle() == []


def test_a_torn_ledger_line_is_skipped(cache):
    ledger = records.ledger_for(CPU)
    ledger.end(ledger.begin(SHAPE, "x:one", "x:f", 1.0))
    with open(ledger.path, "a") as f:
        f.write('{"ev": "run", "id": ')
    assert ("4x32x128", "x:one") in ledger.state()[0]


def test_memo_ranks_final_timings_first_and_survives_a_reload(cache):
    memo = records.Memo(CPU, SHAPE, ["fast"])
    memo.data["timed"] = {"a": 5.0, "b": 4.0, "c": 6.0}
    memo.data["final"] = {"a": 3.0}
    memo.save()
    again = records.Memo(CPU, SHAPE, ["fast"])
    assert again.ranked() == ["a", "b", "c"] and again.tried() == {"a", "b", "c"}
    assert records.Memo(CPU, SHAPE, ["slow"]).ranked() == []  # another backend set, another memo
    assert records.Memo(CPU, (8, 32, 128), ["fast"]).ranked() == []


def test_the_records_key_holds_every_shipped_source_whatever_is_imported():
    code = ("import sys; sys.path.insert(0, {root!r}); from mxfp4_mm.tuning import records; {more}"
            "print(records.package_digest())")
    root = str(Path(__file__).resolve().parents[1])
    plain = subprocess.run([sys.executable, "-c", code.format(root=root, more="")], capture_output=True,
                           text=True, check=True).stdout
    loaded = subprocess.run([sys.executable, "-c", code.format(
        root=root, more="import mxfp4_mm, mxfp4_mm.bench, mxfp4_mm.library, mxfp4_mm.selfbench; ")],
        capture_output=True, text=True, check=True).stdout
    assert plain == loaded and len(plain.strip()) == 64
    names = records.shipped_module_sources()
    assert "mxfp4_mm.tuning.child" in names and "mxfp4_mm.backends.cuda" in names and "mxfp4_mm.tune" not in names


def test_the_records_key_changes_with_any_source(monkeypatch):
    from mxfp4_mm import kernels
    before = records.package_digest()
    sources = records.shipped_module_sources()
    sources["mxfp4_mm.dispatch"] += "\n# changed\n"
    monkeypatch.setattr(kernels, "BUNDLED_MODULES", sources)
    records.package_digest.cache_clear()
    try:
        assert records.package_digest() != before
    finally:
        monkeypatch.undo()
        records.package_digest.cache_clear()
    assert records.package_digest() == before


# ---- the tuner loop, in this process --------------------------------------------------------------

def _tuner(backends, timer=None, deadline=None):
    return tuner.Tuner(CPU, backends, NAMES, deadline or time.time() + 60, timer=timer or FakeTimer())


def test_the_sweep_chooses_the_fastest_right_candidate_and_completes(cache):
    fast = fake_backend("fast", [FakePlan("f1", 5, GOOD, "a"), FakePlan("f2", 3, GOOD, "b"),
                                 FakePlan("fbroken", 1, BUILD_FAILS, "c"), FakePlan("fwrong", 0.5, WRONG, "d")])
    slow = fake_backend("slow", [FakePlan("s1", 9, GOOD, "e")])
    sweep = _tuner(_backends(fast, slow))
    sweep.sweep([SHAPE])
    memo = records.Memo(CPU, SHAPE, ["fast", "slow", "torch"])
    assert memo.data["chosen"] == "fast:f2" and memo.data["complete"]
    assert set(memo.data["timed"]) == {"fast:f1", "fast:f2", "slow:s1"}
    assert set(memo.data["wrong"]) == {"fast:fwrong"} and set(memo.data["failed"]) == {"fast:fbroken"}
    proven = records.ledger_for(CPU).state()[0]
    assert {label for _, label in proven} == {"fast:f1", "fast:f2", "slow:s1", "fast:fwrong"}
    built = len(fast.built)
    _tuner(_backends(fast, slow)).sweep([SHAPE])  # complete: its choice stays, nothing runs
    assert len(fast.built) == built


def test_a_family_that_computes_wrong_is_dropped_for_the_process(cache):
    fast = fake_backend("fast", [FakePlan("w1", 1, WRONG, "same"), FakePlan("w2", 0.5, GOOD, "same"),
                                 FakePlan("ok", 4, GOOD, "other")])
    sweep = _tuner(_backends(fast))
    sweep.sweep([SHAPE, (8, 32, 128)])
    for shape in (SHAPE, (8, 32, 128)):
        memo = records.Memo(CPU, shape, ["fast", "slow", "torch"])
        assert memo.data["chosen"] == "fast:ok" and "fast:w2" not in memo.data["timed"]
    assert fast.built.count("w1") == 1  # not rebuilt for the second shape


def test_a_winner_that_fails_the_fresh_checks_is_not_chosen(cache):
    fast = fake_backend("fast", [FakePlan("flaky", 1, FLAKY, "sk"), FakePlan("steady", 2, GOOD, "plain")])
    _tuner(_backends(fast)).sweep([SHAPE])
    memo = records.Memo(CPU, SHAPE, ["fast", "slow", "torch"])
    assert memo.data["chosen"] == "fast:steady" and "fast:flaky" in memo.data["wrong"]


def test_a_cut_sweep_saves_what_it_measured_and_the_next_one_continues(cache):
    plans = [FakePlan(f"p{i}", 10 - i, GOOD, f"f{i}") for i in range(10)]
    fast = fake_backend("fast", plans)
    clock = types.SimpleNamespace(now=0.0)

    class CountingTimer(FakeTimer):
        def __call__(self, runner, args):
            clock.now += 1.0
            return super().__call__(runner, args)

    cut = tuner.Tuner(CPU, _backends(fast), NAMES, deadline=13.5, timer=CountingTimer(), clock=lambda: clock.now)
    cut.sweep([SHAPE])
    memo = records.Memo(CPU, SHAPE, ["fast", "slow", "torch"])
    assert 0 < len(memo.data["timed"]) < 10 and not memo.data["complete"]
    first = set(memo.data["timed"])
    _tuner(_backends(fast)).sweep([SHAPE])
    memo.reload()
    assert first < set(memo.data["timed"]) and len(memo.data["timed"]) == 10
    assert memo.data["complete"] and memo.data["chosen"] == "fast:p9"


def test_families_ruled_out_in_the_ledger_are_not_offered(cache):
    fast = fake_backend("fast", [FakePlan("bad", 1, GOOD, "bad"), FakePlan("ok", 2, GOOD, "ok")])
    records.ledger_for(CPU).mark("fast:bad", "fault")
    _tuner(_backends(fast)).sweep([SHAPE])
    memo = records.Memo(CPU, SHAPE, ["fast", "slow", "torch"])
    assert memo.data["chosen"] == "fast:ok" and "bad" not in fast.built


# ---- child processes ------------------------------------------------------------------------------

def test_a_child_dies_with_its_parent(tmp_path):
    marker = tmp_path / "child.pid"
    parent_code = ("import sys, time; sys.path.insert(0, {root!r}); from mxfp4_mm.tuning import procs;"
                   "p = procs.start('time', []); open({marker!r}, 'w').write(str(p.pid)); time.sleep(60)")
    # `time` has no main(): the child would exit at once, so give it a module that sleeps
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\nfrom mxfp4_mm.tuning import procs\n\ndef main(argv):\n"
                       "    procs.die_with_parent()\n    time.sleep(60)\n")
    root = str(Path(__file__).resolve().parents[1])
    code = parent_code.format(root=root, marker=str(marker)).replace("'time', []", "'sleeper', []")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{root}")
    parent = subprocess.Popen([sys.executable, "-c", code], env=env)
    for _ in range(200):
        if marker.exists() and marker.read_text():
            break
        time.sleep(0.05)
    child = int(marker.read_text())
    time.sleep(1.0)  # the child sets its death signal first thing
    parent.kill()
    parent.wait()
    for _ in range(100):
        if not Path(f"/proc/{child}").exists() or Path(f"/proc/{child}/stat").read_text().split(") ")[1][0] == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail("the child outlived its parent")


def test_the_build_pool_builds_in_order_and_kills_what_runs_past_the_deadline(cache, monkeypatch, tmp_path):
    plugin = tmp_path / "build_plugin.py"
    plugin.write_text("import time\n\ndef build(m, n, k, device, plan):\n"
                      "    if plan == 'slow':\n        time.sleep(60)\n"
                      "    if plan == 'bad':\n        raise RuntimeError('does not compile')\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv(dispatch.EXTRA_ENV, "plug=build_plugin")
    pool = buildpool.BuildPool(workers=2)
    try:
        started = time.time()
        results = pool.run([("plug", 1, 16, 64, "cpu", p) for p in ("ok", "bad", "slow", "ok2")], time.time() + 8)
        assert time.time() - started < 15
        kept = list(pool.workers)
        # a later run uses the workers kept from the first (their answers must still come through)
        again = pool.run([("plug", 1, 16, 64, "cpu", p) for p in ("ok3", "bad")], time.time() + 20)
        assert kept and all(worker in pool.workers for worker in kept)
    finally:
        pool.close()
    assert results[0] is None and "does not compile" in results[1] and results[2] == "timeout"
    assert results[3] is None
    assert again[0] is None and "does not compile" in again[1]
    assert descendants() == []


def _child_env(monkeypatch, limit="2"):
    monkeypatch.setenv("PYTHONPATH", f"{TESTS_DIR}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setenv(dispatch.EXTRA_ENV, "fault=fault_plugin")
    monkeypatch.setenv("FAULT_PLUGIN_LIMIT_S", limit)
    monkeypatch.setitem(dispatch.ORDER_BY_DEVICE_KIND, "cpu", ("torch",))


def test_the_supervisor_survives_a_crash_and_a_hang_and_the_caller_serves_a_proven_candidate(cache, monkeypatch):
    _child_env(monkeypatch)
    started = time.time()
    events = supervise.run_tuner(CPU, [SHAPE], time.time() + 90)
    assert time.time() - started < 60
    assert ("fault:crash", "fault", None) in events and ("fault:spin", "hang", "fault:spin") in events
    assert descendants() == []  # nothing of ours left running
    proven, bad, open_runs = records.ledger_for(CPU).state()
    assert bad == {"fault:crash": "fault", "fault:spin": "hang"} and not open_runs
    memo = records.Memo(CPU, SHAPE, ["fault", "torch"])
    assert memo.data["chosen"] == "fault:good"
    # the caller's process: served from the records, the bad families never run here
    from mxfp4_mm import autotune
    data = verify.generate_input(*SHAPE, 11, CPU)
    args = verify.runner_args(data)
    choice = autotune.choose(*SHAPE, args, dispatch.available_backends(CPU), dispatch.candidate_backends(CPU), CPU)
    assert (choice.backend, choice.label, choice.how) == ("fault", "good", "memo")
    verify.check(choice.out, verify.reference_output(*SHAPE, args), "served")


def test_a_fault_left_by_a_dead_tuner_rules_its_family_out_for_the_next(cache, monkeypatch):
    _child_env(monkeypatch)
    child = procs.start(procs.CHILD_MODULE, ["tune", "--device", "cpu", "--shapes", "4,32,128",
                                             "--deadline", str(time.time() + 60)])
    assert child.wait(timeout=60) == 3  # the crash plan took the tuner down
    proven, bad, _ = records.ledger_for(CPU).state()
    assert bad == {"fault:crash": "fault"}
    monkeypatch.setenv("FAULT_PLUGIN_LIMIT_S", "1")
    supervise.run_tuner(CPU, [SHAPE], time.time() + 60)
    memo = records.Memo(CPU, SHAPE, ["fault", "torch"])
    assert memo.data["chosen"] == "fault:good" and "fault:crash" not in memo.data["timed"]

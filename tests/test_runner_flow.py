"""tools/runner_flow.py on the CPU: the pod it builds is the runner's (the task's cases, an empty
HOME, none of our settings), and it reads eval.py's output and the compile step's summary right.
The replay itself needs a GPU: `python tools/runner_flow.py` (see notes/verification.md)."""

import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import runner_flow  # noqa: E402
from mxfp4_mm import bench, prepare  # noqa: E402
from mxfp4_mm.tuning import records  # noqa: E402


def test_the_cases_are_task_ymls_and_prepare_knows_the_same_shapes():
    cases = runner_flow.task_cases(REPO / "task.yml")
    assert cases["tests"][0] == "m: 8; n: 2112; k: 7168; seed: 124" and len(cases["tests"]) == 4
    assert cases["benchmarks"][0] == "m: 4; n: 2880; k: 512; seed: 4565" and len(cases["benchmarks"]) == 6
    shapes = lambda lines: [tuple(int(v.split(": ")[1]) for v in line.split("; ")[:3]) for line in lines]
    assert shapes(cases["benchmarks"]) == prepare.BENCHMARK_SHAPES == bench.BENCHMARK_SHAPES
    assert shapes(cases["tests"]) == prepare.TEST_SHAPES == bench.TEST_SHAPES


def test_the_pod_holds_the_runners_files_and_an_empty_home(tmp_path, monkeypatch):
    official = tmp_path / "official"
    official.mkdir()
    for name in runner_flow.OFFICIAL_FILES:
        (official / name).write_text(f"# official {name}\n")
    pod = runner_flow.make_pod(tmp_path / "root", REPO / "submission.py", official)
    assert sorted(p.name for p in pod.iterdir()) == ["benchmark.txt", "eval.py", "reference.py", "submission.py",
                                                      "task.py", "test.txt", "utils.py"]
    assert (pod / "eval.py").read_text() == "# official eval.py\n"
    assert len((pod / "benchmark.txt").read_text().splitlines()) == 6
    monkeypatch.setenv("MXFP4_MM_TUNE_BUDGET_S", "7")
    env = runner_flow.pod_env(tmp_path / "root")
    assert env["HOME"] == str(tmp_path / "root" / "home") and not list((tmp_path / "root" / "home").iterdir())
    assert not [key for key in env if key.startswith(("MXFP4_MM_", "TRITON_", "XDG_"))]


def test_popcorn_lines_and_a_mode_result():
    keys = runner_flow.parse_popcorn("benchmark-count: 2\nbenchmark.0.spec: m: 4; n: 2880; k: 512; seed: 4565\n"
                                     "benchmark.0.runs: 100\nbenchmark.0.mean: 8000.0\n"
                                     "benchmark.1.spec: m: 16; n: 2112; k: 7168; seed: 15\n"
                                     "benchmark.1.mean: 18000.0\ncheck: pass\n")
    assert keys["benchmark.0.spec"] == "m: 4; n: 2880; k: 512; seed: 4565" and keys["check"] == "pass"
    plans = {"4x2880x512": ("cuda:a", "records"), "16x2112x7168": ("cuda:b", "records")}
    compiled = (12.0, 0, "mxfp4_mm prepare: 4x2880x512: cuda:a 8.00 us; 3 timed\nother output\n")
    result = runner_flow.mode_result("benchmark", compiled, (30.0, 0, keys, ""), plans, 0)
    assert result["shapes"]["4x2880x512"] == {"mean_us": 8.0, "runs": "100", "error": None, "plan": "cuda:a",
                                              "served_from": "records"}
    assert abs(result["geomean_us"] - 12.0) < 1e-9 and result["compile_summary"] == [compiled[2].splitlines()[0]]
    board = dict(result, shapes={**result["shapes"], "16x2112x7168": dict(result["shapes"]["16x2112x7168"],
                                                                           plan="cuda:c")})
    found = runner_flow.verdict({"benchmark": result, "leaderboard": board})
    assert found["all_pass"] and not found["same_plans_benchmark_leaderboard"]
    assert found["tuned_in_first_compile_step"] == ["4x2880x512"]


def test_the_compile_steps_summary_lines_are_read_as_prepare_writes_them(tmp_path, monkeypatch):
    monkeypatch.setenv("MXFP4_MM_CACHE_DIR", str(tmp_path))
    cpu = torch.device("cpu")
    memo = records.Memo(cpu, (4, 2880, 512), ["torch"])
    memo.data["timed"], memo.data["chosen"] = {"cuda:x": 8.5}, "cuda:x"
    memo.save()
    lines = [f"mxfp4_mm prepare: {prepare.summary(cpu, shape)}" for shape in [(4, 2880, 512), (16, 2112, 7168)]]
    assert runner_flow.first_compile_tuned(lines) == ["4x2880x512"]


def test_served_log_lines(tmp_path):
    log = tmp_path / "served.log"
    log.write_text("4x2880x512 cuda:a records\n4x2880x512 cuda:b table\n8x2112x7168 torch:default table\n")
    assert runner_flow.served_plans(log) == {"4x2880x512": ("cuda:a", "records"),
                                             "8x2112x7168": ("torch:default", "table")}

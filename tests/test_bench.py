"""The benchmark tool runs on the CPU (host timers) and writes the documented JSON."""

import json

from mxfp4_mm import bench


def test_bench_on_cpu_writes_the_json_schema(tmp_path, capsys):
    assert bench.main(["--shapes", "4,32,64;3,48,128", "--reps", "3", "--pool", "2",
                       "--out", str(tmp_path), "--device", "cpu"]) == 0
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1 and files[0].stem == bench.device_slug(bench.device_description(
        __import__("torch").device("cpu")))
    report = json.loads(files[0].read_text())
    for key in ("device", "date", "torch", "triton", "method", "reps", "paths", "results", "geomean_us"):
        assert key in report, key
    assert list(report["results"]) == ["4x32x64", "3x48x128"]
    assert {"torch", "bf16_matmul", "floor"} <= set(report["paths"])
    for per_path in report["results"].values():
        for path, row in per_path.items():
            assert row["runs"] == 3
            assert row["best_us"] <= row["median_us"] <= row["worst_us"]
            for key in ("mean_us", "err_us", "std_us"):
                assert row[key] >= 0
            assert row["correct"] is (None if path == "floor" else True)
    assert set(report["geomean_us"]) == set(report["paths"])
    printed = capsys.readouterr().out
    assert "geomean" in printed and "wrote" in printed


def test_stats_match_the_harness():
    row = bench.stats([1.0, 2.0, 3.0, 10.0])
    assert row["mean_us"] == 4.0 and row["median_us"] == 2.5
    assert abs(row["std_us"] - (50 / 3) ** 0.5) < 1e-12
    assert abs(row["err_us"] - row["std_us"] / 2) < 1e-12


def test_shape_lists():
    assert bench.parse_shapes("bench") == bench.BENCHMARK_SHAPES
    assert bench.parse_shapes("test") == bench.TEST_SHAPES
    assert bench.parse_shapes("1,16,64; 2,32,128") == [(1, 16, 64), (2, 32, 128)]


def test_autotune_check_on_cpu_merges_its_section(tmp_path, capsys, monkeypatch):
    """On the CPU the first call takes the torch backend (no tuning); the section's schema holds."""
    monkeypatch.delenv("MXFP4_MM_TUNE_BUDGET_S", raising=False)  # the default budget is recorded
    out = tmp_path / "results"
    assert bench.main(["--shapes", "4,32,64", "--reps", "3", "--pool", "2", "--out", str(out), "--device", "cpu"]) == 0
    assert bench.main(["--autotune", "--shapes", "4,32,64;3,48,128", "--reps", "3", "--pool", "2",
                       "--out", str(out), "--device", "cpu"]) == 0
    report = json.loads(next(out.glob("*.json")).read_text())
    assert "results" in report  # the normal bench's results are kept
    section, run = report["autotune"], report["autotune_run"]
    assert run["budget_s"] > 0 and run["cold"] is False
    assert set(section) == {"4x32x64", "3x48x128"}
    for row in section.values():
        assert row["chosen"] == row["best"] == "torch:default" and row["candidates"] == 1
        assert row["chosen_us"] == row["best_us"] > 0 and row["tune_s"] > 0 and row["wrong"] == []
    assert "chosen / best" in capsys.readouterr().out


def test_extra_paths_are_timed_beside_the_baselines(tmp_path, monkeypatch):
    import torch
    monkeypatch.setitem(bench.EXTRA_PATHS, "zeros", (
        "torch.zeros of C's shape", lambda case: lambda i: torch.zeros(case.shape[:2], dtype=torch.bfloat16)))
    monkeypatch.setitem(bench.EXTRA_PATHS, "absent", ("never runs", lambda case: None))
    assert bench.main(["--shapes", "4,32,64", "--reps", "3", "--pool", "2", "--out", str(tmp_path),
                       "--device", "cpu", "--backends", "torch"]) == 0
    report = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert "zeros" in report["paths"] and "absent" not in report["paths"]
    assert report["path_notes"]["zeros"] == "torch.zeros of C's shape"
    assert report["results"]["4x32x64"]["zeros"]["correct"] is False

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

"""The opt-in self-benchmark: the leaderboard loop on the CPU with a tiny shape."""

import subprocess
import sys
import time

import pytest

from mxfp4_mm import bench, selfbench


def test_run_prints_the_table_and_follows_the_stop_rule(capsys, monkeypatch):
    monkeypatch.setenv(selfbench.CPU_CAP_ENV, "inf")  # the harness's stop rule alone
    results = selfbench.run(shapes=[(4, 32, 64), (3, 16, 128)], device="cpu")
    printed = capsys.readouterr().out
    assert "4x32x64" in printed and "3x16x128" in printed and "geomean" in printed
    assert "capped" not in printed and "skipped" not in printed
    assert "torch:default" in printed  # the backend:plan that served
    for row in results.values():
        assert 3 <= row["runs"] <= selfbench.MAX_REPEATS
        assert row["best_us"] <= row["mean_us"] <= row["worst_us"]


def test_importing_prints_nothing():
    done = subprocess.run([sys.executable, "-c", "import mxfp4_mm.selfbench, mxfp4_mm.bench"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""


def test_cpu_run_is_capped_by_default_and_says_so(monkeypatch):
    monkeypatch.delenv(selfbench.CPU_CAP_ENV, raising=False)
    assert selfbench.cpu_cap_s() == selfbench.DEFAULT_CPU_CAP_S == 20.0
    for raw, cap in (("2.5", 2.5), (" 7 ", 7.0), ("inf", float("inf")), ("", 20.0)):
        monkeypatch.setenv(selfbench.CPU_CAP_ENV, raw)
        assert selfbench.cpu_cap_s() == cap
    for raw in ("0", "-1", "nan", "soon"):
        monkeypatch.setenv(selfbench.CPU_CAP_ENV, raw)
        with pytest.raises(ValueError, match=f"{selfbench.CPU_CAP_ENV}=.* must be a number of seconds > 0"):
            selfbench.cpu_cap_s()


def test_a_spent_cap_stops_the_shape_after_its_run_and_skips_the_rest(capsys, monkeypatch):
    monkeypatch.setenv(selfbench.CPU_CAP_ENV, "0.001")  # spent by the first shape's first check
    results = selfbench.run(shapes=[(4, 32, 64), (3, 16, 128), (2, 48, 64)], device="cpu")
    printed = capsys.readouterr().out
    assert "capped at 0.001 s" in printed and selfbench.CPU_CAP_ENV in printed
    assert list(results) == ["4x32x64"] and results["4x32x64"]["runs"] == 1
    assert "3x16x128  skipped" in printed and "2x48x64  skipped" in printed
    assert "(1 of 3 shapes timed)" in printed


def test_the_benchmark_shapes_on_cpu_end_near_the_cap(capsys, monkeypatch):
    """Uncapped, the 6 benchmark shapes took 146 s on a CPU; a 0.5 s cap ends the run after at most
    one started run of one shape past it (seconds here)."""
    monkeypatch.setenv(selfbench.CPU_CAP_ENV, "0.5")
    started = time.perf_counter()
    results = selfbench.run(device="cpu")
    elapsed = time.perf_counter() - started
    printed = capsys.readouterr().out
    assert elapsed < 20, f"{elapsed:.1f} s"
    assert 1 <= len(results) < len(bench.BENCHMARK_SHAPES) and "skipped: the 0.5 s CPU cap is spent" in printed
    assert all(row["runs"] <= selfbench.MAX_REPEATS for row in results.values())

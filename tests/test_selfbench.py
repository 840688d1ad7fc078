"""The opt-in self-benchmark: the leaderboard loop on the CPU with a tiny shape."""

import subprocess
import sys

from mxfp4_mm import selfbench


def test_run_prints_the_table_and_follows_the_stop_rule(capsys):
    results = selfbench.run(shapes=[(4, 32, 64), (3, 16, 128)], device="cpu")
    printed = capsys.readouterr().out
    assert "4x32x64" in printed and "3x16x128" in printed and "geomean" in printed
    assert "torch:default" in printed  # the backend:plan that served
    for row in results.values():
        assert 3 <= row["runs"] <= selfbench.MAX_REPEATS
        assert row["best_us"] <= row["mean_us"] <= row["worst_us"]


def test_importing_prints_nothing():
    done = subprocess.run([sys.executable, "-c", "import mxfp4_mm.selfbench, mxfp4_mm.bench"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""

"""pyproject.toml: the Triton range is what CI tests, and pytest sums up skips one line per reason
(tests/skip_summary.py, registered with `-p skip_summary`) instead of `-ra`'s line per location."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from skip_summary import skip_reason

REPO = Path(__file__).resolve().parents[1]

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")


def _pyproject():
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _requirement(name):
    deps = [d for d in _pyproject()["project"]["dependencies"] if re.match(rf"{name}\b", d)]
    assert len(deps) == 1, deps
    return SpecifierSet(deps[0][len(name):])


def test_triton_range_is_what_ci_tests():
    allowed = _requirement("triton")
    pinned = re.findall(r'"triton==([0-9.]+)"', (REPO / ".ci" / "run").read_text())
    assert pinned, ".ci/run must pin the Triton it tests"
    assert all(Version(v) in allowed for v in pinned), (allowed, pinned)
    # nothing newer than the tested minor: a plain `pip install -e .` once pulled 3.9
    for untested in ("3.7.0", "3.8.0", "3.9.0"):
        assert Version(untested) not in allowed, (allowed, untested)
    assert Version("3.4.0") in allowed and Version("3.3.1") not in allowed


def test_pytest_options_register_the_plugin_and_drop_ra():
    options = _pyproject()["tool"]["pytest"]["ini_options"]
    addopts = options["addopts"].split()
    assert "-ra" not in addopts and "-rfE" in addopts
    assert addopts[addopts.index("-p") + 1] == "skip_summary"
    assert "tests" in options["pythonpath"]


def test_skip_reason_drops_pytest_prefix():
    class Report:
        longrepr = ("tests/x.py", 3, "Skipped: needs a CUDA/ROCm GPU")
    assert skip_reason(Report()) == "needs a CUDA/ROCm GPU"
    Report.longrepr = ("tests/x.py", 3, "backend cuda not available on cpu")
    assert skip_reason(Report()) == "backend cuda not available on cpu"


SKIPPING_TESTS = '''
import pytest

@pytest.mark.parametrize("i", range(5))
@pytest.mark.skip(reason="needs a GPU")
def test_marked(i):
    pass

@pytest.mark.parametrize("i", range(3))
def test_called(i):
    pytest.skip("no compiler here")

def test_elsewhere():
    pytest.skip("needs a GPU")

def test_passes():
    pass
'''


def test_summary_has_one_line_per_reason_with_a_count(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_skips.py").write_text(SKIPPING_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "skip_summary", "-p", "no:cacheprovider",
         "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO / "tests")})
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    summary = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert summary == ["SKIPPED    6 x needs a GPU", "SKIPPED    3 x no compiler here"], out
    assert "9 skipped, by reason" in out and "1 passed, 9 skipped" in out

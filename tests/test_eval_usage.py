"""eval.py's bad usage exits 2 with one `eval.py: error: ...` line after the usage, never a
traceback (its --help promises exit 2 for bad usage)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import eval as harness  # noqa: E402

BAD_USAGE = [
    (["--shapes", "5,48"], r'--shapes: "5,48" is not m,n,k'),
    (["--shapes", "4,32,64;5,48"], r'"5,48" is not m,n,k'),
    (["--shapes", "4,32,64,1"], "is not m,n,k"),
    (["--shapes", "a,b,c"], "is not m,n,k"),
    (["--shapes", " ; "], "no shapes given"),
    (["--shapes", "0,32,64"], "m must be >= 1"),
    (["--shapes", "4,24,64"], "n must be a positive multiple of 16"),
    (["--shapes", "4,32,96"], "k must be a positive multiple of 64"),
    (["--budget-s", "0"], "--budget-s must be > 0"),
    (["--budget-s", "nan"], "--budget-s must be > 0"),
    (["--submission", "no/such/file.py"], "--submission: no such file"),
    (["profile", "cases.txt"], "without POPCORN_FD, MODE FILE must be"),
    (["test"], "without POPCORN_FD, MODE FILE must be"),
    (["test", "cases.txt", "--shapes", "4,32,64"], "either MODE FILE or --cases/--shapes"),
    (["--mode", "fast"], "invalid choice"),
]


def _error_lines(stderr):
    """stderr lines that are not argparse's usage (which starts with "usage:" and indents its rest)."""
    return [line for line in stderr.splitlines() if line and not line.startswith(("usage:", " "))]


@pytest.mark.parametrize("argv,message", BAD_USAGE)
def test_bad_usage_exits_2_with_one_error_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        harness.main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    lines = _error_lines(captured.err)
    assert len(lines) == 1 and ": error: " in lines[0], captured.err  # in-process, prog is pytest's name
    assert re.search(message, lines[0]), lines[0]
    assert captured.out == ""


@pytest.mark.parametrize("fd,argv,message", [
    ("3", ["test"], "with POPCORN_FD set, give MODE FILE"),
    ("3", ["fast", "cases.txt"], "with POPCORN_FD set, give MODE FILE"),
    ("x", ["test", "cases.txt"], "POPCORN_FD must be a file descriptor number"),
])
def test_bad_popcorn_usage_exits_2(fd, argv, message, monkeypatch, capsys):
    monkeypatch.setenv("POPCORN_FD", fd)
    with pytest.raises(SystemExit) as exited:
        harness.main(argv)
    assert exited.value.code == 2
    lines = _error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and ": error: " in lines[0] and message in lines[0]


@pytest.mark.parametrize("argv", [["--shapes", "5,48"], ["--shapes", "4,17,64", "--mode", "test"],
                                  ["benchmark"]])
def test_bad_usage_from_the_command_line(argv):
    """As a user runs it: no traceback, exit status 2, one error line."""
    done = subprocess.run([sys.executable, "eval.py", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = _error_lines(done.stderr)
    assert len(lines) == 1 and lines[0].startswith("eval.py: error: "), done.stderr
    assert done.stdout == ""


def test_valid_shapes_pass_the_check():
    parser = harness._parser()
    harness._check_shapes(parser, "4,32,64; 256,2880,512;1,16,64")  # no SystemExit
    assert harness.shapes_cases("4,32,64;1,16,64").count("\n") == 1

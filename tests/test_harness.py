"""The popcorn harness (eval.py, reference.py, utils.py, task.yml), run the way the grader runs it:
copies of the harness files and a stub submission in a bare directory, results read back
from the POPCORN_FD file. CPU only."""

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import eval as harness  # noqa: E402
import reference  # noqa: E402
import utils  # noqa: E402
from mxfp4_mm import spec  # noqa: E402

HARNESS_FILES = ("task.py", "reference.py", "utils.py", "eval.py", "task.yml")

# custom_kernel = the reference's own pure-torch path, so it must pass.
GOOD_STUB = """
import os
from reference import torch_ref_kernel

def custom_kernel(data):
    return torch_ref_kernel(data)

def last_backend_name():
    return os.environ.get("MXFP4_MM_BACKEND", "stub")
"""

# Off by 1.0 in one element: beyond the 1e-2 + 1e-2*|ref| tolerance for these small shapes.
WRONG_STUB = """
from reference import torch_ref_kernel

def custom_kernel(data):
    out = torch_ref_kernel(data)
    out[0, 0] += 1.0
    return out
"""

RAISING_STUB = """
def custom_kernel(data):
    raise RuntimeError("kernel exploded")
"""

SMALL_CASES = "m: 4; n: 32; k: 64; seed: 1\nm: 16; n: 64; k: 128; seed: 7\n"


def _workdir(tmp_path: Path, submission: str) -> Path:
    for name in HARNESS_FILES:
        shutil.copy(REPO / name, tmp_path / name)
    (tmp_path / "submission.py").write_text(submission)
    return tmp_path


def _env(**extra) -> dict:
    env = dict(os.environ)
    # The stub needs mxfp4_mm (reference.py's pure-torch path): the repo root, after the
    # workdir (the script's directory comes first on sys.path, so the copies win).
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("POPCORN_SEED", None)
    env.update(extra)
    return env


def _popcorn(workdir: Path, mode: str, cases: str, **env):
    """Run `POPCORN_FD=N python eval.py MODE cases.txt N>log`; return (rc, {key: value}, stderr)."""
    (workdir / "cases.txt").write_text(cases)
    log = workdir / "popcorn.log"
    with open(log, "w") as fd_file:
        fd = fd_file.fileno()
        proc = subprocess.run([sys.executable, "eval.py", mode, "cases.txt"], cwd=workdir,
                              env=_env(POPCORN_FD=str(fd), **env), pass_fds=(fd,),
                              capture_output=True, text=True, timeout=180)
    lines = log.read_text().splitlines()
    assert all(": " in line for line in lines), lines
    return proc.returncode, dict(line.split(": ", 1) for line in lines), proc.stderr


def _local(workdir: Path, *args):
    return subprocess.run([sys.executable, "eval.py", *args], cwd=workdir, env=_env(),
                          capture_output=True, text=True, timeout=180)


# ---- popcorn protocol ---------------------------------------------------------------------

def test_popcorn_test_mode_passes(tmp_path):
    rc, log, err = _popcorn(_workdir(tmp_path, GOOD_STUB), "test", SMALL_CASES)
    assert rc == 0, err
    assert log["test-count"] == "2"
    assert log["test.0.spec"] == "m: 4; n: 32; k: 64; seed: 1"
    assert log["test.0.status"] == "pass" and log["test.1.status"] == "pass"
    assert log["check"] == "pass"


def test_popcorn_benchmark_mode_reports_stats(tmp_path):
    rc, log, err = _popcorn(_workdir(tmp_path, GOOD_STUB), "benchmark", "m: 4; n: 32; k: 64; seed: 3\n")
    assert rc == 0, err
    assert log["benchmark-count"] == "1"
    assert log["benchmark.0.spec"] == "m: 4; n: 32; k: 64; seed: 3"
    stats = {key: float(log[f"benchmark.0.{key}"]) for key in ("runs", "mean", "std", "err", "best", "worst")}
    assert all(math.isfinite(v) for v in stats.values())
    assert stats["runs"] >= 3 and stats["runs"] == int(stats["runs"])
    assert 0 < stats["best"] <= stats["mean"] <= stats["worst"]
    assert log["check"] == "pass"


def test_popcorn_leaderboard_mode_rechecks_fresh_data(tmp_path):
    rc, log, err = _popcorn(_workdir(tmp_path, GOOD_STUB), "leaderboard", "m: 4; n: 32; k: 64; seed: 5\n",
                            POPCORN_SEED="987654321")
    assert rc == 0, err
    assert float(log["benchmark.0.runs"]) >= 3
    assert log["check"] == "pass"


def test_popcorn_wrong_submission_fails(tmp_path):
    rc, log, _ = _popcorn(_workdir(tmp_path, WRONG_STUB), "test", SMALL_CASES)
    assert rc == 112
    assert log["test.0.status"] == "fail"
    assert "mismatched elements" in log["test.0.error"]
    assert "ERROR at (0, 0)" in log["test.0.error"]
    assert log["check"] == "fail"


def test_popcorn_raising_submission_fails_on_one_line(tmp_path):
    rc, log, _ = _popcorn(_workdir(tmp_path, RAISING_STUB), "benchmark", SMALL_CASES)
    assert rc == 112
    assert log["benchmark.0.status"] == "fail"
    assert "kernel exploded" in log["benchmark.0.error"]
    assert "benchmark.1.spec" not in log  # upstream stops benchmarking at the first failure
    assert log["check"] == "fail"


# ---- local mode -----------------------------------------------------------------------------

def test_local_mode_table_and_exit_code_on_success(tmp_path):
    proc = _local(_workdir(tmp_path, GOOD_STUB), "--shapes", "4,32,64;16,64,128", "--budget-s", "0.05",
                  "--backend", "fancy")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count(" pass ") == 4  # 2 tests + 2 benchmarks
    assert proc.stdout.count("fancy") == 4  # --backend reached the worker; the backend column
    assert "[4/4]" in proc.stderr  # progress lines


def test_local_mode_exit_code_on_failure(tmp_path):
    proc = _local(_workdir(tmp_path, WRONG_STUB), "--mode", "test", "--shapes", "4,32,64")
    assert proc.returncode != 0
    assert "FAIL" in proc.stdout and "mismatched elements" in proc.stdout


# ---- case parsing, seeds, task.yml --------------------------------------------------------

def test_parse_cases_and_secret_seed():
    (case,) = harness.parse_cases("m: 4; n: 2880; k: 512; seed: 4565", None)
    assert case.args == {"m": 4, "n": 2880, "k": 512, "seed": 4565}
    (secret,) = harness.parse_cases("m: 4; n: 2880; k: 512; seed: 4565", 10**12)
    assert secret.args["seed"] == harness._combine(4565, 10**12) > 10**12
    assert secret.spec == case.spec  # the logged spec keeps the public seed


def test_task_yml_lists_the_official_cases():
    tests = harness.parse_cases(harness.task_yml_cases("tests"), None)
    benchmarks = harness.parse_cases(harness.task_yml_cases("benchmarks"), None)
    assert [(t.args["m"], t.args["n"], t.args["k"]) for t in tests] == [
        (8, 2112, 7168), (16, 3072, 1536), (64, 3072, 1536), (256, 2880, 512)]
    assert [(t.args["m"], t.args["n"], t.args["k"]) for t in benchmarks] == [
        (4, 2880, 512), (16, 2112, 7168), (32, 4096, 512), (32, 2880, 512), (64, 7168, 2048), (256, 3072, 1536)]


# ---- reference.py -------------------------------------------------------------------------

def test_generate_input_layouts_and_determinism():
    A, B, B_q, B_shuffle, B_scale_sh = reference.generate_input(m=5, n=32, k=320, seed=11)
    assert A.dtype == B.dtype == torch.bfloat16 and A.shape == (5, 320) and B.shape == (32, 320)
    assert B_q.shape == B_shuffle.shape == (32, 160)
    assert B_scale_sh.shape == (256, 16)  # rows padded to 256, K/32 = 10 padded to 16
    codes, scales = spec.quantize_mxfp4(B)
    assert torch.equal(B_q.view(torch.uint8), codes)
    assert torch.equal(B_shuffle.view(torch.uint8), spec.shuffle_weight(codes))
    assert torch.equal(spec.e8m0_unshuffle(B_scale_sh.view(torch.uint8), 32, 10), scales)
    again = reference.generate_input(m=5, n=32, k=320, seed=11)
    assert torch.equal(again[0], A) and torch.equal(again[1], B)


@pytest.mark.parametrize("m,n,k", [(4, 32, 96), (4, 40, 64), (0, 32, 64)])
def test_generate_input_rejects_bad_shapes(m, n, k):
    with pytest.raises(ValueError):
        reference.generate_input(m=m, n=n, k=k, seed=0)


def test_check_implementation_accepts_reference_output():
    data = reference.generate_input(m=8, n=64, k=256, seed=3)
    good, message = reference.check_implementation(data, reference.ref_kernel(data))
    assert good, message


# ---- utils.py -----------------------------------------------------------------------------

def _reference_returning(expected):
    return utils.make_match_reference(lambda data: expected, rtol=1e-2, atol=1e-2)


def test_match_reference_passes_exact_equality():
    expected = torch.randn(8, 16).to(torch.bfloat16)
    good, message = _reference_returning(expected)(None, expected.clone())
    assert good and message.startswith("Maximum error: 0")


def test_match_reference_catches_nan_mismatch():
    expected = torch.randn(8, 16)
    output = expected.clone()
    output[2, 3] = float("nan")
    good, message = _reference_returning(expected)(None, output)
    assert not good and "ERROR at (2, 3)" in message
    # NaN where the reference has NaN too is a match; NaN only in the reference is not.
    expected[2, 3] = float("nan")
    assert _reference_returning(expected)(None, output)[0]
    assert not _reference_returning(expected)(None, torch.zeros_like(expected))[0]


def test_match_reference_catches_inf_mismatch():
    expected = torch.ones(4, 4)
    output = expected.clone()
    output[1, 1] = float("inf")
    assert not _reference_returning(expected)(None, output)[0]
    expected[1, 1] = float("-inf")
    assert not _reference_returning(expected)(None, output)[0]
    expected[1, 1] = float("inf")
    assert _reference_returning(expected)(None, output)[0]


def test_match_reference_tolerance_boundary():
    expected = torch.tensor([[0.0, 100.0]])
    inside = torch.tensor([[0.0099, 100.0 + 1.0]])  # atol 0.01; 0.01 + 0.01*100 = 1.01
    outside = torch.tensor([[0.0, 100.0 + 1.05]])
    assert _reference_returning(expected)(None, inside)[0]
    good, message = _reference_returning(expected)(None, outside)
    assert not good and "Number of mismatched elements: 1" in message and "(0, 1)" in message


def test_match_reference_size_mismatch():
    good, message = _reference_returning(torch.zeros(4, 4))(None, torch.zeros(4, 5))
    assert not good and "SIZE MISMATCH" in message


def test_l2_flush_is_a_noop_without_gpu(monkeypatch):
    monkeypatch.setenv(utils.L2_FLUSH_ENV, "64")
    flush = utils.L2Flush()
    assert flush.size_mb == 64
    if not torch.cuda.is_available():
        flush()
        assert flush._buffer is None


@pytest.mark.gpu  # conftest skips it without a GPU
def test_l2_flush_writes_its_buffer_on_gpu():
    flush = utils.L2Flush(size_mb=8)
    flush()
    torch.cuda.synchronize()
    assert flush._buffer.numel() == 8 << 18 and int(flush._buffer[0]) == 42


def test_backend_column_shows_backend_and_plan():
    import types
    import mxfp4_mm
    from mxfp4_mm import dispatch
    dispatch.reset()
    mxfp4_mm.custom_kernel(harness.generate_input(m=4, n=32, k=64, seed=1))
    assert harness._backend_name(mxfp4_mm) == "torch:default"  # the package's own last_backend_name
    stub = types.SimpleNamespace(last_backend_name=lambda: "stub")  # another submission's
    assert harness._backend_name(stub) == "stub"
    assert harness._backend_name(types.SimpleNamespace(last_choice=lambda: "cuda:x")) == "cuda:x"
    assert harness._backend_name(types.SimpleNamespace()) == "?"

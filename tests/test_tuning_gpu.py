"""On a GPU: the compile step survives a candidate that faults (writes far out of bounds) and one
that hangs (spins forever) in their first runs, rules both families out on this device, and the
eval that follows, in popcorn mode, passes with a real backend serving."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
SHAPE = (8, 256, 512)

sys.path.insert(0, str(REPO / "tools"))
import runner_flow  # noqa: E402


def _env(cache):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MXFP4_MM_")}
    env.update(MXFP4_MM_CACHE_DIR=str(cache), MXFP4_MM_EXTRA_BACKENDS="fault=fault_plugin",
               PYTHONPATH=str(TESTS), FAULT_PLUGIN_LIMIT_S="3",
               MXFP4_MM_PROVE="child")
    return env


def _eval_files(pod):
    """The official eval.py, utils.py, task.py where this checkout has them (.official/), else ours
    (the same protocol); said in the test's output."""
    official = REPO / ".official"
    names = ("eval.py", "utils.py", "task.py")
    source = official if all((official / n).exists() for n in names) else REPO
    for name in names + ("reference.py",):
        (pod / name).write_text(((source if name != "reference.py" else REPO) / name).read_text())
    print(f"eval files from {'the official harness' if source == official else 'this repository'}")


@pytest.mark.gpu
def test_a_faulting_and_a_hanging_candidate_cannot_break_the_compile_step_or_the_eval(tmp_path):
    import torch
    from mxfp4_mm import dispatch
    from mxfp4_mm.tuning import records

    cache = tmp_path / "cache"
    env = _env(cache)
    shapes = ",".join(map(str, SHAPE))
    done = subprocess.run([sys.executable, "-m", "mxfp4_mm.prepare", "--shapes", shapes, "--deadline-s", "90"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=150)
    print(done.stdout, done.stderr)
    assert done.returncode == 0
    assert "fault:crash (fault" in done.stdout and "fault:spin (hang" in done.stdout

    os.environ["MXFP4_MM_CACHE_DIR"] = str(cache)  # read the records the compile step wrote
    old_extra = os.environ.get(dispatch.EXTRA_ENV)
    os.environ[dispatch.EXTRA_ENV] = env[dispatch.EXTRA_ENV]
    try:
        device = torch.device("cuda", torch.cuda.current_device())
        _, bad, open_runs = records.ledger_for(device).state()
        assert bad == {"fault:crash": "fault", "fault:spin": "hang"} and not open_runs
        memo = records.Memo(device, SHAPE, list(dispatch.candidate_backends(device)))
        assert memo.data["chosen"] and not memo.data["chosen"].startswith("fault:"), memo.data
    finally:
        del os.environ["MXFP4_MM_CACHE_DIR"]
        if old_extra is None:
            os.environ.pop(dispatch.EXTRA_ENV, None)
        else:
            os.environ[dispatch.EXTRA_ENV] = old_extra

    pod = tmp_path / "pod"
    pod.mkdir()
    _eval_files(pod)
    (pod / "submission.py").write_text((REPO / "submission.py").read_text())
    (pod / "test.txt").write_text("m: 8; n: 256; k: 512; seed: 5\nm: 8; n: 256; k: 512; seed: 77\n")
    served = pod / "served.log"
    seconds, status, keys, output = runner_flow.run_eval(pod, {**env, "MXFP4_MM_SERVED_LOG": str(served)}, [], "test")
    print(json.dumps(keys, indent=1), output[-3000:])
    assert status == 0 and keys.get("check") == "pass"
    plan, how = runner_flow.served_plans(served)["8x256x512"]
    assert how == "records" and not plan.startswith("fault:")

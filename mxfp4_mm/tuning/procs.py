"""Child processes of ours: started with the package this process runs (installed, a checkout, or
the single-file submission), ended with their parent, killed with everything they started.

The runner kills only the compile step's own process on its timeout: every child asks the kernel
to kill it when its parent dies (Linux PR_SET_PDEATHSIG), and each runs in its own process group,
so killing a child kills its workers too."""

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

PARENT_ENV = "MXFP4_MM_PARENT_PID"
CHILD_MODULE = "mxfp4_mm.tuning.child"  # the entry point of every child of ours
_PR_SET_PDEATHSIG = 1
# Variables a child must not inherit: the self-benchmark runs at the submission's import.
_DROPPED_ENV = ("MXFP4_MM_SELFBENCH",)


def module_command(module: str, args=()) -> list:
    """argv that runs `module.main(args)` of this very package in a fresh interpreter."""
    from .. import kernels
    if kernels.BUNDLED_FROM:
        load = ("import importlib.util as u;"
                f"s=u.spec_from_file_location('mxfp4_mm_submission',{kernels.BUNDLED_FROM[0]!r});"
                "m=u.module_from_spec(s);s.loader.exec_module(m);")
    else:
        root = str(Path(__file__).resolve().parents[2])
        load = f"import sys;sys.path.insert(0,{root!r});"
    code = f"{load}import importlib,sys;sys.exit(importlib.import_module({module!r}).main(sys.argv[1:]))"
    return [sys.executable, "-c", code, *map(str, args)]


def child_env(extra=None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env[PARENT_ENV] = str(os.getpid())
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def start(module: str, args=(), extra_env=None, **popen) -> subprocess.Popen:
    """A child running `module.main(args)` in its own process group."""
    return subprocess.Popen(module_command(module, args), env=child_env(extra_env), start_new_session=True,
                            **popen)


def die_with_parent():
    """Called first in a child: the kernel kills this process when the parent that started it dies;
    exits at once if that parent is already gone."""
    expected = os.environ.get(PARENT_ENV)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if expected and os.getppid() != int(expected):
        os._exit(1)


def kill(proc: subprocess.Popen):
    """Kill the child and what is left of its process group (its workers), and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        if proc.poll() is None:
            proc.kill()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass

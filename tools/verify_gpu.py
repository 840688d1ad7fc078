"""Verify a GPU machine end to end (NVIDIA or AMD), with every log in one folder.

    python3 tools/verify_gpu.py                                   # every phase, ~10 min on an H200
    python3 tools/verify_gpu.py --only tests,eval                 # some phases
    python3 tools/verify_gpu.py --out DIR --sanitizer nvidia_cuda_sanitizer_api-13.0.85-...whl

Phases, in this order (each one time-limited; a failing phase does not stop the others):
  contract-hip  ROCm only: the contract suite with the hip backend forced, so its errors are
                raised rather than hidden by the fallback to another backend
  tests         every GPU-marked test: pytest -m gpu -n 8
  eval          python3 eval.py (the harness: test cases, then benchmark cases) on the GPU
  bench         python3 -m mxfp4_mm.bench (JSON + PNG land in the log folder)
  memcheck      NVIDIA only: every kernel (HIP ones through their emulation) on odd shapes under
                compute-sanitizer memcheck (tools/sanitize_kernels.py)
  memcheck-fp8  NVIDIA only: the cuda fp8 plans on the shapes that reach their fields (multicast,
                M tiles, splits up to 8: sanitize_kernels.py --shapes fp8), under memcheck
  racecheck     NVIDIA only: the same under racecheck (fewer plans per shape: it is slow)

compute-sanitizer comes from --sanitizer (the `nvidia-cuda-sanitizer-api` wheel file, which is
unpacked under ~/.cache/mxfp4_mm, or the binary itself), else $COMPUTE_SANITIZER, else PATH, else an
installed nvidia-cuda-sanitizer-api package. The log folder (--out, default
./verify-logs/<date>-<device>) gets one <phase>.log per phase, machine.txt and summary.txt.
Exit status: 0 when every phase that ran passed, 1 otherwise.
"""

import argparse
import datetime
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("contract-hip", "tests", "eval", "bench", "memcheck", "memcheck-fp8", "racecheck")
LIMITS_S = {"contract-hip": 240, "tests": 180, "eval": 90, "bench": 110, "memcheck": 90, "memcheck-fp8": 120, "racecheck": 60}
SANITIZER_IN_WHEEL = ("nvidia/cu13/bin/compute-sanitizer", "nvidia/cu13/compute-sanitizer/compute-sanitizer")


def gpu_vendor():
    """'nvidia', 'rocm' or None, asked of torch in a child process (this one stays light)."""
    probe = "import torch; print(('rocm' if torch.version.hip else 'nvidia') if torch.cuda.is_available() else 'none')"
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout.strip()
    return None if found in ("", "none") else found


def machine_description():
    """One line: GPU, driver, torch, triton, python, source revision."""
    script = ("import torch, triton, platform; d = torch.cuda.get_device_properties(0);"
              "print(d.name, getattr(d, 'gcnArchName', ''), '| torch', torch.__version__,"
              "'| triton', triton.__version__, '| python', platform.python_version())")
    parts = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT).stdout.strip()]
    for command in (["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                    ["git", "rev-parse", "--short", "HEAD"]):
        if shutil.which(command[0]):
            found = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
            if found.returncode == 0 and found.stdout.strip():
                parts.append(f"{command[0]} {found.stdout.strip().splitlines()[0]}")
    return " | ".join(parts)


def default_out(description):
    slug = re.sub(r"[^a-z0-9]+", "-", description.split("|")[0].lower()).strip("-") or "gpu"
    return ROOT / "verify-logs" / f"{datetime.date.today().isoformat()}-{slug}"


def _members_to(archive, target):
    """Unpack a wheel keeping the executable bits (zipfile alone drops them)."""
    with zipfile.ZipFile(archive) as wheel:
        for info in wheel.infolist():
            path = Path(wheel.extract(info, target))
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                path.chmod(mode)


def find_sanitizer(given):
    """Path of a compute-sanitizer binary, or None."""
    candidates = [given, os.environ.get("COMPUTE_SANITIZER"), shutil.which("compute-sanitizer")]
    for candidate in filter(None, candidates):
        path = Path(candidate)
        if path.suffix == ".whl" and path.is_file():
            unpacked = Path.home() / ".cache" / "mxfp4_mm" / path.stem  # not in the log folder: 30 MB
            _members_to(path, unpacked)
            path = next((unpacked / p for p in SANITIZER_IN_WHEEL if (unpacked / p).is_file()), None)
        if path and path.is_file():
            path.chmod(path.stat().st_mode | 0o111)
            return path
    try:
        import nvidia
        for root in nvidia.__path__:
            for relative in SANITIZER_IN_WHEEL:
                path = Path(root).parent / relative
                if path.is_file():
                    return path
    except ImportError:
        pass
    return None


def run_phase(name, command, log_path, limit_s, env=None):
    """Run one command with its output in log_path; 'pass', 'FAIL (rc N)' or 'TIMEOUT'."""
    with open(log_path, "w") as log:
        log.write(f"$ {' '.join(command)}\n(limit {limit_s:.0f} s)\n\n")
        log.flush()
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                                   start_new_session=True)
        try:
            rc = process.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the whole group: pytest workers, eval's worker
            process.wait()
            return "TIMEOUT"
    return "pass" if rc == 0 else f"FAIL (rc {rc})"


def phase_commands(out, sanitizer, vendor):
    """{phase: (command, env), or the reason it is skipped}."""
    py = sys.executable
    parallel = ["-n", "8"] if importlib.util.find_spec("xdist") else []
    pytest = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu"]
    commands = {
        "contract-hip": (pytest + ["tests/test_contract.py"], {"MXFP4_MM_BACKEND": "hip"}),
        "tests": (pytest + parallel + ["tests/"], {}),
        "eval": ([py, "eval.py", "--budget-s", "2"], {}),
        "bench": ([py, "-m", "mxfp4_mm.bench", "--reps", "60", "--out", str(out / "bench")], {}),
    }
    if vendor != "rocm":
        commands["contract-hip"] = "skipped: ROCm only"
    fp8 = ["--backends", "cuda", "--label-prefix", "f8", "--shapes", "fp8"]
    for phase, tool, extra in (("memcheck", "memcheck", []), ("memcheck-fp8", "memcheck", fp8),
                               ("racecheck", "racecheck", ["--max-plans", "2"])):
        if vendor != "nvidia":
            commands[phase] = "skipped: NVIDIA only"
        elif sanitizer is None:
            commands[phase] = "skipped: no compute-sanitizer (pass --sanitizer WHEEL_OR_BINARY)"
        else:  # no caching allocator: an overrun past a tensor must not land inside torch's pool
            commands[phase] = ([str(sanitizer), "--tool", tool, "--error-exitcode", "1", py,
                                "tools/sanitize_kernels.py"] + extra, {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    return commands


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help=f"comma-separated phases (default: all of {','.join(PHASES)})")
    parser.add_argument("--skip", default="", help="comma-separated phases to leave out")
    parser.add_argument("--out", type=Path, default=os.environ.get("VERIFY_OUT"),
                        help="log folder (default: $VERIFY_OUT, else ./verify-logs/<date>-<device>)")
    parser.add_argument("--sanitizer", help="nvidia-cuda-sanitizer-api wheel, or a compute-sanitizer binary")
    parser.add_argument("--total-s", type=float, default=540, help="stop starting phases after this many seconds; "
                        "each phase gets at most what is left")
    parser.add_argument("--limit", action="append", default=[], metavar="PHASE=SECONDS",
                        help=f"a phase's own time limit (defaults: {LIMITS_S})")
    args = parser.parse_args(argv)
    chosen = [p for p in (args.only.split(",") if args.only else PHASES) if p not in args.skip.split(",")]
    unknown = set(chosen) - set(PHASES)
    if unknown:
        parser.error(f"--only/--skip: unknown phases {sorted(unknown)}; choose from {PHASES}")
    limits = {**LIMITS_S, **{k: float(v) for k, v in (item.split("=", 1) for item in args.limit)}}
    vendor = gpu_vendor()
    if vendor is None:
        print("verify_gpu: torch sees no GPU here; nothing to verify")
        return 2
    description = machine_description()
    out = Path(args.out) if args.out else default_out(description)
    out.mkdir(parents=True, exist_ok=True)
    (out / "machine.txt").write_text(description + "\n")
    print(f"verify_gpu: {description}\nlogs in {out}", flush=True)
    sanitizer = find_sanitizer(args.sanitizer) if vendor == "nvidia" else None
    commands = phase_commands(out, sanitizer, vendor)
    began, summary = time.monotonic(), []
    for phase in chosen:
        left = args.total_s - (time.monotonic() - began)
        planned = commands[phase]
        if isinstance(planned, str):
            verdict, seconds = planned, 0.0
        elif left < 10:
            verdict, seconds = "skipped: out of time (--total-s)", 0.0
        else:
            start = time.monotonic()
            verdict = run_phase(phase, planned[0], out / f"{phase}.log", min(limits[phase], left), planned[1])
            seconds = time.monotonic() - start
        summary.append(f"{phase:13s} {verdict:40s} {seconds:6.0f} s")
        print(summary[-1], flush=True)
    text = f"{description}\n" + "\n".join(summary) + "\n"
    (out / "summary.txt").write_text(text)
    print(f"summary in {out / 'summary.txt'}")
    failed = [line for line in summary if " FAIL" in line or " TIMEOUT" in line]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

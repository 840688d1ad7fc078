"""Replays the leaderboard runner's flow for a submission in one fresh "pod", and records it.

What the runner does (SPEC §1, "The runner"): one pod per submission (14 cores, cold caches, an
empty HOME); test, then benchmark, then leaderboard in that same pod; before each mode it runs
`python3 submission.py` once as an untimed compile step (120 s, failure ignored, only the direct
child killed on the timeout), then `python3 eval.py MODE cases` with POPCORN_FD.

This tool does the same with the official eval.py, utils.py and task.py (gpu-mode/reference-kernels,
problems/amd_202602, at OFFICIAL_COMMIT; not part of this repository: give a folder holding them
with --official, or they are downloaded into .official/). The reference is this repository's
reference.py (the official one needs aiter; ours is the same computation without it).

    python tools/runner_flow.py [--submission submission.py] [--modes test,benchmark,leaderboard]
                                [--cores 14] [--official DIR] [--json bench/results/DEVICE.json]

Prints per mode: the compile step's seconds and summary, what it left running, the check, each
shape's mean and the plan that served it; then whether benchmark and leaderboard served the same
plans and how their geomeans compare. With --json the result is merged as "runner_flow".
"""

import argparse
import datetime
import json
import math
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OFFICIAL_COMMIT = "f83cb92a534cc67fa98d7e9813e7f8238abdb4e0"
OFFICIAL_FILES = {"eval.py": "problems/amd_202602/eval.py", "utils.py": "problems/amd_202602/utils.py",
                  "task.py": "problems/amd_202602/mxfp4-mm/task.py"}
OFFICIAL_URL = "https://raw.githubusercontent.com/gpu-mode/reference-kernels/{commit}/{path}"
COMPILE_TIMEOUT_S = 120
MODE_TIMEOUT_S = {"test": 420, "benchmark": 420, "leaderboard": 600}
MODES = ("test", "benchmark", "leaderboard")


# ---- the pod ------------------------------------------------------------------------------------

def official_files(folder=None) -> Path:
    """A folder holding the official eval.py, utils.py and task.py (downloaded if need be)."""
    folder = Path(folder) if folder else REPO / ".official"
    missing = [name for name in OFFICIAL_FILES if not (folder / name).exists()]
    if missing:
        folder.mkdir(parents=True, exist_ok=True)
        for name in missing:
            url = OFFICIAL_URL.format(commit=OFFICIAL_COMMIT, path=OFFICIAL_FILES[name])
            with urllib.request.urlopen(url, timeout=30) as answer:
                (folder / name).write_bytes(answer.read())
    return folder


def task_cases(task_yml: Path) -> dict:
    """{"tests": [spec line], "benchmarks": [spec line]} from task.yml, as the runner writes them."""
    cases, section = {"tests": [], "benchmarks": []}, None
    for line in task_yml.read_text().splitlines():
        header = re.match(r"^(\w+):", line)
        if header:
            section = header.group(1)
            continue
        if section in cases and line.strip().startswith("- {"):
            entry = json.loads(line.strip()[2:])
            cases[section].append("; ".join(f"{key}: {value}" for key, value in entry.items()))
    return cases


def make_pod(root: Path, submission: Path, official: Path) -> Path:
    """root/pod with the files the runner puts there; root/home, empty."""
    pod = root / "pod"
    pod.mkdir(parents=True)
    (root / "home").mkdir()
    for name in OFFICIAL_FILES:
        shutil.copy(official / name, pod / name)
    shutil.copy(REPO / "reference.py", pod / "reference.py")
    shutil.copy(submission, pod / "submission.py")
    cases = task_cases(REPO / "task.yml")
    (pod / "test.txt").write_text("\n".join(cases["tests"]) + "\n")
    (pod / "benchmark.txt").write_text("\n".join(cases["benchmarks"]) + "\n")
    return pod


def pod_env(root: Path) -> dict:
    """A fresh machine's environment: empty HOME (so cold kernel, Triton and tuning caches), none of
    our settings; the Python packages stay where they are installed."""
    keep = ("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCM_PATH",
            "CUDA_HOME", "LANG", "TERM")
    env = {key: os.environ[key] for key in keep if key in os.environ}
    env["HOME"] = str(root / "home")
    env["PYTHONUSERBASE"] = site.getuserbase()  # user-installed packages, not user caches
    return env


def cpu_prefix(cores: int) -> list:
    """`taskset -c 0-(cores-1)` where the machine has that many cores and taskset exists."""
    available = len(os.sched_getaffinity(0))
    if cores and shutil.which("taskset") and available >= cores:
        return ["taskset", "-c", f"0-{cores - 1}"]
    return []


def processes_from(pod: Path) -> list:
    """PIDs of processes whose command line names the pod (what the compile step left running)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(pod) in cmdline:
            found.append(int(entry.name))
    return found


# ---- one mode -------------------------------------------------------------------------------------

def compile_step(pod, env, prefix):
    """The runner's `python3 submission.py`: (seconds, exit status or "timeout", output)."""
    started = time.perf_counter()
    try:
        done = subprocess.run(prefix + [sys.executable, "submission.py"], cwd=pod, env=env, capture_output=True,
                              text=True, timeout=COMPILE_TIMEOUT_S)
        status, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:  # subprocess.run kills the direct child only, as the runner
        status = "timeout"
        output = "".join(part.decode(errors="replace") if isinstance(part, bytes) else (part or "")
                         for part in (exc.stdout, exc.stderr))
    return time.perf_counter() - started, status, output


def parse_popcorn(text: str) -> dict:
    """{key: value} of the `key: value` lines eval.py writes to POPCORN_FD."""
    result = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            result[key.strip()] = value.strip()
    return result


def run_eval(pod, env, prefix, mode):
    """`python3 eval.py MODE cases` with POPCORN_FD: (seconds, exit status, {key: value}, output)."""
    cases = "test.txt" if mode == "test" else "benchmark.txt"
    log_path = pod / f"popcorn-{mode}.log"
    with open(log_path, "w") as log:
        env = {**env, "POPCORN_FD": str(log.fileno())}
        started = time.perf_counter()
        try:
            done = subprocess.run(prefix + [sys.executable, "eval.py", mode, cases], cwd=pod, env=env,
                                  pass_fds=[log.fileno()], capture_output=True, text=True,
                                  timeout=MODE_TIMEOUT_S[mode])
            status, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            status, output = "timeout", ""
    return time.perf_counter() - started, status, parse_popcorn(log_path.read_text()), output


def spec_shape(spec: str) -> str:
    values = dict(part.strip().split(": ") for part in spec.split(";"))
    return f"{values['m']}x{values['n']}x{values['k']}"


def served_plans(path: Path) -> dict:
    """{MxNxK: ("backend:label", how)} from the submission's MXFP4_MM_SERVED_LOG (its first line per
    shape: every case runs in one worker, which serves a shape from its first call on)."""
    plans = {}
    if path.exists():
        for line in path.read_text().splitlines():
            shape, plan, how = (line.split() + ["", ""])[:3]
            plans.setdefault(shape, (plan, how))
    return plans


def mode_result(mode, compiled, evaluated, plans, left_running):
    compile_s, compile_status, compile_output = compiled
    eval_s, eval_status, keys, _ = evaluated
    shapes = {}
    if mode == "test":
        for i in range(int(keys.get("test-count", 0))):
            shape = spec_shape(keys[f"test.{i}.spec"])
            plan, how = plans.get(shape, (None, None))
            shapes[shape] = {"status": keys.get(f"test.{i}.status"), "plan": plan, "served_from": how}
    else:
        for i in range(int(keys.get("benchmark-count", 0))):
            if f"benchmark.{i}.spec" not in keys:
                continue
            shape = spec_shape(keys[f"benchmark.{i}.spec"])
            mean = keys.get(f"benchmark.{i}.mean")
            plan, how = plans.get(shape, (None, None))
            shapes[shape] = {"mean_us": float(mean) / 1e3 if mean else None, "runs": keys.get(f"benchmark.{i}.runs"),
                             "error": keys.get(f"benchmark.{i}.error"), "plan": plan, "served_from": how}
    means = [row["mean_us"] for row in shapes.values() if row.get("mean_us")]
    summary = [line for line in compile_output.splitlines() if line.startswith("mxfp4_mm prepare:")]
    return {"compile_s": round(compile_s, 1), "compile_status": compile_status, "compile_summary": summary,
            "left_running_after_compile": left_running, "eval_s": round(eval_s, 1), "eval_status": eval_status,
            "check": keys.get("check"), "shapes": shapes,
            "geomean_us": math.exp(sum(map(math.log, means)) / len(means)) if means else None}


def first_compile_tuned(summary_lines) -> list:
    """Shapes the compile step's summary names with a choice."""
    tuned = []
    for line in summary_lines:
        match = re.match(r"mxfp4_mm prepare: (\d+x\d+x\d+): (\S+) ", line)
        if match and match.group(2) != "nothing":
            tuned.append(match.group(1))
    return tuned


def verdict(modes: dict) -> dict:
    bench, board = modes.get("benchmark"), modes.get("leaderboard")
    found = {"all_pass": all(m["check"] == "pass" for m in modes.values())}
    if bench and board:
        same = {s: bench["shapes"][s]["plan"] == board["shapes"].get(s, {}).get("plan") for s in bench["shapes"]}
        found["same_plans_benchmark_leaderboard"] = all(same.values())
        if bench["geomean_us"] and board["geomean_us"]:
            found["leaderboard_over_benchmark"] = round(board["geomean_us"] / bench["geomean_us"], 4)
    first = next(iter(modes.values()))
    found["tuned_in_first_compile_step"] = first_compile_tuned(first["compile_summary"])
    return found


def replay(submission, modes, cores, official, keep=False):
    root = Path(tempfile.mkdtemp(prefix="mxfp4_mm_pod_"))
    pod = make_pod(root, Path(submission).resolve(), official_files(official))
    env, prefix = pod_env(root), cpu_prefix(cores)
    results = {}
    try:
        for mode in modes:
            served_log = pod / f"served-{mode}.log"
            mode_env = {**env, "MXFP4_MM_SERVED_LOG": str(served_log)}
            compiled = compile_step(pod, mode_env, prefix)
            time.sleep(0.5)
            left = processes_from(pod)
            evaluated = run_eval(pod, mode_env, prefix, mode)
            results[mode] = mode_result(mode, compiled, evaluated, served_plans(served_log), len(left))
            if evaluated[1] != 0:
                results[mode]["eval_output_tail"] = evaluated[3][-3000:]
            print_mode(mode, results[mode], compiled[2])
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cores": cores if prefix else len(os.sched_getaffinity(0)), "official_commit": OFFICIAL_COMMIT,
            "modes": results, **verdict(results)}


def print_mode(mode, result, compile_output):
    print(f"== {mode}: compile step {result['compile_s']} s (status {result['compile_status']}, "
          f"{result['left_running_after_compile']} left running); eval {result['eval_s']} s, "
          f"check {result['check']}")
    for line in result["compile_summary"]:
        print(f"   {line}")
    if not result["compile_summary"] and compile_output.strip():
        print("   " + "\n   ".join(compile_output.strip().splitlines()[-10:]))
    for shape, row in result["shapes"].items():
        shown = f"{row['mean_us']:.2f} us" if row.get("mean_us") else row.get("status") or row.get("error")
        print(f"   {shape:>14}  {shown:>12}  {row['plan']}")
    if result["geomean_us"]:
        print(f"   geomean {result['geomean_us']:.2f} us")
    sys.stdout.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submission", default=str(REPO / "submission.py"))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--cores", type=int, default=14)
    parser.add_argument("--official", help="folder with the official eval.py, utils.py, task.py")
    parser.add_argument("--json", help="merge the result as 'runner_flow' into this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the pod folder")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: a comma-separated subset of {', '.join(MODES)}")
    found = replay(args.submission, modes, args.cores, args.official, args.keep)
    print(json.dumps({key: value for key, value in found.items() if key != "modes"}, indent=1))
    if args.json:
        path = Path(args.json)
        report = json.loads(path.read_text()) if path.exists() else {}
        report["runner_flow"] = found
        path.write_text(json.dumps(report, indent=1))
        print(f"wrote runner_flow into {path}")
    return 0 if found["all_pass"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Compare the SASS of the cuda kernels' builds between a git revision and the working tree (CPU).

A refactor of a kernel source that is meant to change nothing can be checked without a GPU: every
build of the plans below is compiled from both sources with nvcc and its instructions compared
(addresses and encodings left out). Builds whose SASS is identical keep whatever was measured or
sanitized on the GPU for the revision; the others need the GPU again.

    python3 tools/sass_diff.py --before HEAD~3                  # the pipe plans offered for the shapes
    python3 tools/sass_diff.py --before HEAD --kernel table     # the mma.sync kernel's table plans
    python3 tools/sass_diff.py --before HEAD --shapes "64,7168,2048;17,48,576"
    python3 tools/sass_diff.py --before HEAD~1 --kernel candidates --shapes "16,2112,7168;64,3072,1536"
        # every plan cuda.candidates offers on an H200 (the table's, the ranked ones, the pipe ones)

Needs nvcc (sm_90a) and cuobjdump (on the PATH, or the one Triton's wheel carries). Prints one line
per build and a summary; exit status 1 with --fail-on-diff when any build differs.
"""

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mxfp4_mm.backends import cuda  # noqa: E402
from mxfp4_mm.backends.cuda import plans as cuda_plans  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "mxfp4_mm"
KERNEL_SUFFIXES = (".cu", ".h")
H200_UNITS = 132
BENCH_SHAPES = "4,2880,512;16,2112,7168;32,4096,512;32,2880,512;64,7168,2048;256,3072,1536"
_ADDRESS = re.compile(r"/\*[0-9a-f]+\*/")
_ENCODING = re.compile(r"/\* 0x[0-9a-f]+ \*/")


def cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import triton
    except ImportError:
        triton = None
    if triton is not None:
        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if bundled.exists():
            return str(bundled)
    raise SystemExit("sass_diff: no cuobjdump (neither on the PATH nor in Triton's wheel)")


def instructions(sass: str) -> list:
    """The instruction lines of a cuobjdump -sass listing, without addresses and encodings."""
    lines = []
    for line in sass.splitlines():
        line = _ENCODING.sub("", _ADDRESS.sub("", line)).strip()
        if line.endswith(";"):
            lines.append(" ".join(line.split()))
    return lines


def build_sass(source: Path, options: tuple, arch: str, work: Path, tool: str) -> list:
    cubin = work / f"{abs(hash((str(source), options)))}.cubin"
    built = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "-std=c++17", *options, "-o", str(cubin), str(source)],
                           capture_output=True, text=True)
    if built.returncode:
        raise RuntimeError(f"nvcc failed for {source} {' '.join(options)}:\n{built.stderr[-1500:]}")
    listing = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    return instructions(listing)


def compare_builds(before_dir: Path, after_dir: Path, builds, jobs: int = 4) -> list:
    """[(source name, options, arch, before instructions, after instructions)] for each build
    (source name, options, arch) of the kernel sources in the two directories; before is None where the
    source is new."""
    tool = cuobjdump()
    with tempfile.TemporaryDirectory(prefix="sass_diff_") as tmp, \
            concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        work = Path(tmp)

        def one(build):
            name, options, arch = build
            old = build_sass(before_dir / name, options, arch, work, tool) if (before_dir / name).exists() else None
            return (name, options, arch, old, build_sass(after_dir / name, options, arch, work, tool))

        return list(pool.map(one, builds))


def plan_builds(kernel: str, shapes: str) -> list:
    """Distinct (source name, -D options, arch) of the plans the backend offers for the shapes."""
    builds = {}
    for item in shapes.replace(" ", "").split(";"):
        m, n, k = (int(v) for v in item.split(","))
        if kernel == "pipe":
            plans = cuda_plans.pipe_plans(m, n, k)
        elif kernel == "candidates":  # what the tuner is offered on an H200 (132 SMs, pipe and fp8 plans too)
            plans = cuda.candidates_for_units(m, n, k, H200_UNITS, True)
        elif kernel == "fp8":
            plans = cuda_plans.fp8_plans(m, n, k, H200_UNITS)
        else:  # the table's plan and the cost model's first candidates
            plans = [cuda_plans.plan_for_shape(m, n, k)] + cuda_plans.ranked_plans(m, n, k, limit=8)
        for plan in plans:
            source = cuda._source(plan)
            arch = "sm_90a" if isinstance(plan, (cuda_plans.PipePlan, cuda_plans.Fp8Plan)) else "sm_90"
            builds[(source, cuda_plans.compile_options(n, k, plan), arch)] = None
    return list(builds)


def export_revision(rev: str, target: Path) -> None:
    """The kernel sources and headers of `rev`, wherever in the package they live, into `target` by
    file name (names are unique across the package; the folders moved between revisions)."""
    listing = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "--", PACKAGE], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    for path in listing:
        if path.endswith(KERNEL_SUFFIXES):
            text = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, check=True).stdout
            (target / Path(path).name).write_bytes(text)


def export_working_tree(target: Path) -> None:
    """The working tree's kernel sources and headers into `target` by file name."""
    from mxfp4_mm.kernels import source_paths
    for name, path in source_paths().items():
        if name.endswith(KERNEL_SUFFIXES):
            shutil.copyfile(path, target / name)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="git revision of the sources to compare against")
    parser.add_argument("--kernel", choices=("pipe", "table", "candidates", "fp8"), default="pipe")
    parser.add_argument("--shapes", default=BENCH_SHAPES, help="'m,n,k;m,n,k' (default: the benchmark shapes)")
    parser.add_argument("--fail-on-diff", action="store_true")
    args = parser.parse_args(argv)
    if shutil.which("nvcc") is None:
        print("sass_diff: needs nvcc")
        return 2
    builds = plan_builds(args.kernel, args.shapes)
    with tempfile.TemporaryDirectory(prefix="sass_diff_rev_") as before, \
            tempfile.TemporaryDirectory(prefix="sass_diff_tree_") as after:
        export_revision(args.before, Path(before))
        export_working_tree(Path(after))
        results = compare_builds(Path(before), Path(after), builds, jobs=min(8, os.cpu_count() or 1))
    differ = new_builds = 0
    for name, options, arch, old, new in results:
        same = old == new
        new_builds += old is None
        differ += not same and old is not None
        verdict = ("new (no such source before)" if old is None else "identical" if same
                   else f"differs ({len(old)} -> {len(new)} instructions)")
        print(f"{name} {arch} {' '.join(options)}: {verdict}")
    print(f"sass_diff: {len(results) - differ - new_builds} identical, {differ} differ, {new_builds} new, "
          f"of {len(results)} builds")
    return 1 if differ and args.fail_on_diff else 0


if __name__ == "__main__":
    sys.exit(main())

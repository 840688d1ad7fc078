"""Compile the HIP kernels for gfx950 on a CPU machine (clang from the ziglang wheel), check their
ISA statically and record it in mxfp4_mm/backends/hip/gfx950_resources.md.

    python tools/gfx950_build.py                # rewrite the table
    python tools/gfx950_build.py --check        # exit 1 if the table is stale (what CI runs)
    python tools/gfx950_build.py --grid-report  # per benchmark shape: the prior-first candidate over the grid

The generic variants live in one translation unit (one compile); a shape-specialized plan is one
compile of the same source with -D options (backends/hip.compile_options). Builds are cached on disk
by (source texts, options, compiler) and run in parallel. -Werror: a warning fails a build.

Static figures per kernel (whole kernel, every instruction counted once; called functions such as
the exact fallback `exact_partial` are separate symbols and not counted): VALU = `v_*` instructions
other than MFMAs (the hardware converts included), scaled MFMAs, hardware converts. Over a grid:
`kloop_valu` = (VALU per scaled MFMA in the basic blocks that issue MFMAs, i.e. the chunk code)
x (scaled MFMAs the grid issues); `grid_mfma` = scaled MFMAs the grid issues (every tile's work once).
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from mxfp4_mm import bench  # noqa: E402
from mxfp4_mm.backends import hip  # noqa: E402
from mxfp4_mm.backends.hip import plans as hip_plans  # noqa: E402
from mxfp4_mm.kernels import source_paths  # noqa: E402

HIP_ROOM = REPO / "mxfp4_mm" / "backends" / "hip"  # the hip backend's kernels and this table
SHARED_HEADERS = REPO / "mxfp4_mm" / "kernels"  # headers the backends share (mxfp4_exact.h)
SOURCE = "mxfp4_gemm.hip"
HEADERS = ("hip_prelude.h", "arch_gfx950.h", "arch_gfx950_emulated.h", "mxfp4_exact.h")
TABLE = HIP_ROOM / "gfx950_resources.md"
GEMM_PREFIX = "mxfp4_gemm_"
CONVERT = "v_cvt_scalef32_pk_fp4_bf16"
SCALED_MFMA = "v_mfma_scale_f32_"
VALU_PER_MFMA_BUDGET = 40
FLAGS = ("-x", "hip", "--cuda-device-only", "-nogpuinc", "-nogpulib", "--offload-arch=gfx950", "-O3",
         "-std=c++17", "-Wall", "-Wextra", "-Werror", "-Rpass-analysis=kernel-resource-usage")
CACHE_ENV = "MXFP4_MM_GFX950_CACHE"
# remark key -> table column
COLUMNS = {"VGPRs": "VGPRs", "AGPRs": "AGPRs", "TotalSGPRs": "SGPRs", "VGPRs Spill": "VGPR spill",
           "SGPRs Spill": "SGPR spill", "ScratchSize [bytes/lane]": "scratch B/lane",
           "LDS Size [bytes/block]": "LDS B/block", "Occupancy [waves/SIMD]": "waves/SIMD"}
_REMARK = re.compile(r"remark: +(.+?): (.+?) \[-Rpass-analysis=kernel-resource-usage\]")
_LABEL = re.compile(r"^(\.LBB\w+|[A-Za-z_]\w*):")


def clang(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ziglang", "clang", *args], capture_output=True, text=True)


def clang_version() -> str:
    return clang("--version").stdout.splitlines()[0].strip()


def parse_resources(stderr_or_remarks: str) -> dict:
    """{kernel: {remark key: value}} from -Rpass-analysis=kernel-resource-usage output."""
    kernels, current = {}, None
    for key, value in _REMARK.findall(stderr_or_remarks):
        if key == "Function Name":
            current = kernels.setdefault(value, {})
        elif current is not None and key in COLUMNS:
            current[key] = value
    return kernels


def kernel_isa(asm: str) -> dict:
    """{kernel: its instructions} from the assembly (symbol label to .Lfunc_end)."""
    bodies = re.findall(r"^([A-Za-z_]\w*):[^\n]*\n(.*?)^\.Lfunc_end", asm, re.M | re.S)
    return {name: body for name, body in bodies}


def _instructions(block: str):
    for line in block.splitlines():
        text = line.strip()
        if text and not text.startswith((";", ".")) and not _LABEL.match(text):
            yield text.split()[0]


def _is_valu(op: str) -> bool:
    return op.startswith("v_") and not op.startswith("v_mfma")


def isa_counts(body: str) -> dict:
    """Static counts of one kernel: VALU, scaled MFMAs, converts, and VALU per MFMA in the chunk
    code (basic blocks that issue scaled MFMAs)."""
    ops = list(_instructions(body))
    blocks, current = [], []
    for line in body.splitlines():
        text = line.strip()
        if _LABEL.match(text) or text.startswith("; %bb."):
            blocks.append(current)
            current = []
        elif text and not text.startswith((";", ".")):
            current.append(text.split()[0])
    blocks.append(current)
    chunk_blocks = [b for b in blocks if any(op.startswith(SCALED_MFMA) for op in b)]
    chunk_valu = sum(_is_valu(op) for b in chunk_blocks for op in b)
    chunk_mfma = sum(op.startswith(SCALED_MFMA) for b in chunk_blocks for op in b)
    valu, mfma = sum(map(_is_valu, ops)), sum(op.startswith(SCALED_MFMA) for op in ops)
    return dict(valu=valu, mfma=mfma, converts=sum(op == CONVERT for op in ops),
                valu_per_mfma=valu / mfma if mfma else None,
                chunk_valu_per_mfma=chunk_valu / chunk_mfma if chunk_mfma else None)


# ---- builds -----------------------------------------------------------------------------------

def _cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "mxfp4_mm" / "gfx950")


def _build_key(options: tuple, version: str) -> str:
    digest = hashlib.sha256()
    for name in (SOURCE,) + HEADERS:
        digest.update(source_paths()[name].read_bytes())
    digest.update(repr((FLAGS, options, version)).encode())
    return digest.hexdigest()[:32]


def compile_build(options: tuple = (), version: str = None) -> dict:
    """One build: {"resources": {kernel: remarks}, "isa": {kernel: body}, "diagnostics": [lines]}.
    Cached on disk; a failed compile raises RuntimeError with clang's output."""
    version = version or clang_version()
    path = _cache_dir() / f"{_build_key(options, version)}.json"
    if path.exists():
        return json.loads(path.read_text())
    result = clang(*FLAGS, *options, "-I", str(SHARED_HEADERS), "-S", str(HIP_ROOM / SOURCE), "-o", "-")
    if result.returncode != 0:
        raise RuntimeError(f"gfx950 compile of {SOURCE} {' '.join(options)} failed:\n{result.stderr}")
    build = dict(resources=parse_resources(result.stderr), isa=kernel_isa(result.stdout),
                 diagnostics=[line for line in result.stderr.splitlines() if "warning:" in line or "error:" in line])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(build))
        os.replace(tmp, path)
    except OSError:
        pass  # no writable cache: only costs a recompile
    return build


def compile_many(option_sets, workers: int = None) -> list:
    """compile_build for each option tuple, in parallel (clang runs as separate processes)."""
    version = clang_version()
    with concurrent.futures.ThreadPoolExecutor(workers or os.cpu_count() or 2) as pool:
        return list(pool.map(lambda options: compile_build(tuple(options), version), option_sets))


def build(out_dir: Path = None):
    """The generic module: {kernel: resources}, {kernel: isa}, [diagnostics] (out_dir: unused, kept
    for callers that pass a scratch folder)."""
    generic = compile_build()
    return generic["resources"], generic["isa"], generic["diagnostics"]


def specialized_kernel(build_result: dict):
    """(resources, isa body) of the one kernel of a specialized build."""
    name = hip.kernel_name(hip_plans.Plan("", 1, True))
    return build_result["resources"][name], build_result["isa"][name]


# ---- per-shape figures over the grid ------------------------------------------------------------

def grid_mfma(m: int, n: int, k: int, variant) -> int:
    """Scaled MFMAs the whole grid issues (the K tail chunk issues only the steps it has)."""
    groups = 64 // variant.mfma
    slices = k // 32
    steps = (slices // 8) * (8 // groups) + -(-(slices % 8) // groups)
    per_tile = (variant.tile_m // variant.mfma) * (variant.tile_n // variant.mfma) * steps
    return hip_plans.grid_blocks(m, n, variant) * per_tile


def grid_numbers(m: int, n: int, k: int, plan=None) -> dict:
    """Static figures of a HIP plan (default: the prior-first candidate) on one shape: plan label,
    K-loop VALU and scaled MFMAs over the whole grid, spills, VGPRs, AGPRs, occupancy, and the
    kernel's whole-body VALU per MFMA. Compiles (cached) the plan's build."""
    plan = plan or hip.candidates(m, n, k)[0]
    variant = hip.variant_of(plan)
    result = compile_build(hip.compile_options(m, n, k, plan))
    if plan.specialized:
        resources, body = specialized_kernel(result)
    else:
        resources, body = result["resources"][plan.variant], result["isa"][plan.variant]
    counts = isa_counts(body)
    mfma = grid_mfma(m, n, k, variant)
    return dict(shape=(m, n, k), plan=hip.plan_label(plan), grid_mfma=mfma,
                kloop_valu=round(counts["chunk_valu_per_mfma"] * mfma),
                vgpr_spill=int(resources["VGPRs Spill"]), sgpr_spill=int(resources["SGPRs Spill"]),
                vgprs=int(resources["VGPRs"]), agprs=int(resources["AGPRs"]),
                occupancy=int(resources["Occupancy [waves/SIMD]"]), valu_per_mfma=counts["valu_per_mfma"],
                converts=counts["converts"])


# ---- the table ----------------------------------------------------------------------------------

def _ratio(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def render_table(resources: dict, version: str, isa: dict = None, shape_rows: list = None) -> str:
    header = ["kernel"] + list(COLUMNS.values())
    static = ["converts", "VALU", "scaled MFMA", "VALU/MFMA", "chunk VALU/MFMA"]
    lines = ["# gfx950 resource usage of the HIP kernels", "",
             f"Generated by `python tools/gfx950_build.py` with {version} (ziglang wheel),",
             "flags: `" + " ".join(FLAGS) + "`.",
             "tests/test_gfx950_compile.py regenerates this table and fails when it differs.",
             "Static counts over the whole kernel body (each instruction once; the exact fallback `exact_partial`,",
             "taken only by blocks with values past the fp32 range, is a function of its own and not counted):",
             f"`converts` = {CONVERT},",
             "`VALU` = v_* other than MFMAs, `VALU/MFMA` per scaled MFMA (budget "
             f"<= {VALU_PER_MFMA_BUDGET}), `chunk VALU/MFMA` in the blocks that issue MFMAs.", "",
             "## Generic variants (one module)", "",
             "| " + " | ".join(header + static) + " |", "|" + "---|" * (len(header) + len(static))]
    for kernel in sorted(resources):
        row = [kernel] + [resources[kernel].get(k, "?") for k in COLUMNS]
        if isa is not None and kernel in isa:
            c = isa_counts(isa[kernel])
            row += [str(c["converts"]), str(c["valu"]), str(c["mfma"]), _ratio(c["valu_per_mfma"]),
                    _ratio(c["chunk_valu_per_mfma"])]
        else:
            row += ["?"] * len(static)
        lines.append("| " + " | ".join(row) + " |")
    if shape_rows:
        lines += ["", "## Prior-first candidate per task shape (specialized build), over the whole grid", "",
                  "| shape | plan | VGPRs | AGPRs | spills | waves/SIMD | converts | VALU/MFMA | grid MFMA | K-loop VALU |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in shape_rows:
            lines.append(f"| {'x'.join(map(str, r['shape']))} | {r['plan']} | {r['vgprs']} | {r['agprs']} | "
                         f"{r['vgpr_spill'] + r['sgpr_spill']} | {r['occupancy']} | {r['converts']} | "
                         f"{_ratio(r['valu_per_mfma'])} | {r['grid_mfma']} | {r['kloop_valu']} |")
    return "\n".join(lines) + "\n"


def task_shapes():
    return list(bench.BENCHMARK_SHAPES) + list(bench.TEST_SHAPES)


def current_table() -> str:
    """The table as the sources compile today (generic module + each task shape's first candidate)."""
    shapes = task_shapes()
    first = [hip.candidates(*s)[0] for s in shapes]
    compile_many([()] + [hip.compile_options(*s, p) for s, p in zip(shapes, first)])
    resources, isa, _ = build()
    rows = [grid_numbers(*s, p) for s, p in zip(shapes, first)]
    return render_table(resources, clang_version(), isa, rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed table instead of writing")
    parser.add_argument("--grid-report", action="store_true", help="print the benchmark shapes' grid figures")
    args = parser.parse_args()
    if args.grid_report:
        for shape in bench.BENCHMARK_SHAPES:
            print(grid_numbers(*shape))
        return 0
    _, _, diagnostics = build()
    for line in diagnostics:
        print(line, file=sys.stderr)
    table = current_table()
    if args.check:
        stale = not TABLE.exists() or TABLE.read_text() != table
        print(f"{TABLE.relative_to(REPO)}: {'STALE' if stale else 'up to date'}")
        return 1 if stale or diagnostics else 0
    TABLE.write_text(table)
    print(table)
    return 1 if diagnostics else 0


if __name__ == "__main__":
    sys.exit(main())

"""Every command in tools/ still starts, documents itself and is listed in the README (CPU only)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = sorted(p for p in (ROOT / "tools").iterdir() if p.is_file() and not p.name.startswith("."))
CUDA_LAB_COMMANDS = ("ab", "host", "plans", "once", "clusters")


def _help(*args):
    return subprocess.run([sys.executable, *args, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_tools_are_python_commands():
    assert TOOLS, "tools/ is empty"
    assert [p.name for p in TOOLS if p.suffix != ".py"] == []


@pytest.mark.parametrize("tool", TOOLS, ids=lambda p: p.name)
def test_help_works(tool):
    done = _help(str(tool.relative_to(ROOT)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout


@pytest.mark.parametrize("tool", TOOLS, ids=lambda p: p.name)
def test_module_docstring_shows_usage(tool):
    docstring = ast.get_docstring(ast.parse(tool.read_text()))
    assert docstring and f"tools/{tool.name}" in docstring, "the docstring should show how to run it"


@pytest.mark.parametrize("command", CUDA_LAB_COMMANDS)
def test_cuda_lab_subcommand_help_works(command):
    done = _help("tools/cuda_lab.py", command)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"cuda_lab.py {command}" in done.stdout


def _cuda_lab():
    sys.path.insert(0, str(ROOT / "tools"))
    import cuda_lab
    return cuda_lab


@pytest.mark.parametrize("plan", [None, ("f8", 16, 10, 3, 2), ("pipe", 64, 16, 1), (16, 2, 2, 4, 1, 2, 0)],
                         ids=["table-fp8", "fp8", "pipe", "mma"])
def test_cuda_lab_ab_builds_the_variant_from_the_file_the_plan_reads(monkeypatch, plan):
    # `ab` without --plans once replaced the mma.sync file whatever the table's plan was, so an fp8
    # variant was timed as the shipped kernel against itself
    lab = _cuda_lab()
    cuda, plans = lab.cuda, lab.cuda_plans
    table = plans.plan_from_fields(["f8", 16, 10, 3, 2])
    monkeypatch.setattr(cuda, "plan_for", lambda m, n, k, device: table)

    def make_runner(m, n, k, device, plan):  # as the backend's: the table's plan when none is named
        return cuda.read_source(cuda._source(plan or cuda.plan_for(m, n, k, device)))
    monkeypatch.setattr(cuda, "make_runner", make_runner)
    chosen = plans.plan_from_fields(list(plan)) if plan else None
    assert lab.runner_from_source("// the variant", 16, 2112, 7168, "cpu", chosen) == "// the variant"
    assert cuda.read_source(cuda._source(chosen or table)) != "// the variant"  # restored


def test_cuda_lab_ab_stops_when_the_variant_was_not_read(monkeypatch):
    lab = _cuda_lab()
    cuda = lab.cuda
    monkeypatch.setattr(cuda, "make_runner", lambda m, n, k, device, plan: cuda.read_source(cuda.SOURCE))
    fp8 = lab.cuda_plans.plan_from_fields(["f8", 16, 10, 3, 2])
    with pytest.raises(SystemExit, match="without reading"):
        lab.runner_from_source("// the variant", 16, 2112, 7168, "cpu", fp8)


def test_readme_lists_every_tool():
    readme = (ROOT / "README.md").read_text()
    tools_section = re.search(r"^## Tools\n(.*?)(?=^## )", readme, re.S | re.M)
    assert tools_section, "README.md has no '## Tools' section"
    missing = [p.name for p in TOOLS if f"tools/{p.name}" not in tools_section.group(1)]
    assert missing == []


def _sass_diff():
    sys.path.insert(0, str(ROOT / "tools"))
    import sass_diff
    return sass_diff


def test_sass_diff_keeps_every_instruction_and_drops_addresses_and_encodings():
    listing = """
        code for sm_90a
                Function : mxfp4_gemm_pipe
        .headerflags    @"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                          /* 0x00000a00ff017b82 */
                                                                                   /* 0x000fe20000000800 */
        /*0010*/              @!P0 BRA 0x1a20 ;                                    /* 0x0000001400388947 */
                                                                                   /* 0x000fea0003800000 */
"""
    assert _sass_diff().instructions(listing) == ["LDC R1, c[0x0][0x28] ;", "@!P0 BRA 0x1a20 ;"]


def test_sass_diff_tells_identical_builds_from_changed_ones(tmp_path):
    import shutil as _shutil
    if _shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    sass_diff = _sass_diff()
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    sass_diff.export_working_tree(before)
    sass_diff.export_working_tree(after)
    changed = after / "mxfp4_gemm_sm90_pipe.cu"
    text = changed.read_text()
    assert "constexpr int P_STRIDE = BN + 4;" in text
    changed.write_text(text.replace("constexpr int P_STRIDE = BN + 4;", "constexpr int P_STRIDE = BN + 8;"))
    options = ("-DGN=192", "-DGK=128", "-DBN=64", "-DBM=16", "-DSPLITK=1", "-DKC=64", "-DSTAGES=3")
    (_, _, _, old, new), = sass_diff.compare_builds(before, before, [("mxfp4_gemm_sm90_pipe.cu", options, "sm_90a")], jobs=1)
    assert old == new and len(old) > 200
    (_, _, _, old, new), = sass_diff.compare_builds(before, after, [("mxfp4_gemm_sm90_pipe.cu", options, "sm_90a")], jobs=1)
    assert old != new


def _tool_module(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"tool_{name}", ROOT / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_verify_gpu_memchecks_the_fp8_plans_on_their_own_shapes(tmp_path):
    """The fp8 plans' fields (multicast, M tiles, splits up to 8) need shapes the odd shapes do not
    reach: a phase of their own, on NVIDIA only, under memcheck."""
    verify = _tool_module("verify_gpu")
    sanitize = _tool_module("sanitize_kernels")
    commands = verify.phase_commands(tmp_path, Path("compute-sanitizer"), "nvidia")
    command, env = commands["memcheck-fp8"]
    assert command[:3] == ["compute-sanitizer", "--tool", "memcheck"] and "--shapes" in command
    assert command[command.index("--shapes") + 1] == "fp8" and env["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"
    assert set(commands) == set(verify.PHASES) == set(verify.LIMITS_S)
    assert verify.phase_commands(tmp_path, Path("compute-sanitizer"), "rocm")["memcheck-fp8"].startswith("skipped")
    from mxfp4_mm.backends.cuda import plans as cuda_plans
    offered = [p for shape in sanitize.FP8_SHAPES for p in cuda_plans.fp8_plans(*shape)]
    assert {p.mc for p in offered} == {1, 2, 4} and {p.cg for p in offered} == {1, 2, 4}
    assert max(p.split_k for p in offered) == 8 and any(cuda_plans.fp8_m_tiles(130, p) == 2 for p in offered)
    assert cuda_plans.fp8_paired_plan(5, 48, 2560) in offered
    ahead = [p for p in offered if p.ahead]  # B's first chunks ahead: M classes 32 and 64, split and not
    assert {p.mp for p in ahead} == {32, 64} and {p.split_k for p in ahead} >= {1, 3, 4, 5}


def test_fp8_timeline_marks_find_their_anchors_in_the_kernel():
    """The timeline's marks are inserted at anchor lines of the shipped fp8 kernel: each must still be
    there exactly once, so that the instrumented build measures the kernel the package runs."""
    sys.path.insert(0, str(ROOT / "tools"))
    import fp8_timeline
    from mxfp4_mm.backends import cuda
    source = cuda.read_source(cuda.FP8_SOURCE)
    marked = fp8_timeline.instrumented_source(source)
    assert all(f"tl_row[{slot}] = clock64() - tl_t0;" in marked for slot in fp8_timeline.MARKS)
    assert marked.count("atomicMin(tlq, g)") == 1 and marked.count("atomicMax(tlq + 1, g)") == 1
    with pytest.raises(ValueError, match="anchor"):
        fp8_timeline.instrumented_source(source.replace("griddep_wait();\n", "griddep_wait(); \n"))
    # --gq marks lines only a grid-quantizing lab version has: on the shipped kernel it must refuse
    with pytest.raises(ValueError, match="anchor"):
        fp8_timeline.instrumented_source(source, gq=True)

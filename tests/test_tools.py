"""Every command in tools/ still starts, documents itself and is listed in the README (CPU only)."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = sorted(p for p in (ROOT / "tools").iterdir() if p.is_file() and not p.name.startswith("."))
CUDA_LAB_COMMANDS = ("timeline", "ablate", "ab", "options", "host", "once")


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


def test_readme_lists_every_tool():
    readme = (ROOT / "README.md").read_text()
    tools_section = re.search(r"^## Tools\n(.*?)(?=^## )", readme, re.S | re.M)
    assert tools_section, "README.md has no '## Tools' section"
    missing = [p.name for p in TOOLS if f"tools/{p.name}" not in tools_section.group(1)]
    assert missing == []

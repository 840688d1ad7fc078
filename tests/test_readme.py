"""The README's library example ("Using it as a library"), run as written on CPU tensors, so the
example cannot drift from the API again."""

import ast
import re
from pathlib import Path

import pytest
import torch

from conftest import assert_harness_close, make_inputs, reference_output

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "Using it as a library"


def section_python_blocks(text, title):
    """The ```python blocks between `## title` and the next `## ` heading."""
    parts = re.split(r"^## ", text, flags=re.M)
    matches = [p for p in parts if p.startswith(title + "\n")]
    assert len(matches) == 1, f"README must have exactly one section '## {title}'"
    return re.findall(r"^```python\n(.*?)^```", matches[0], flags=re.M | re.S)


def test_the_section_has_python_examples():
    blocks = section_python_blocks(README.read_text(), SECTION)
    assert blocks and all(b.strip() for b in blocks)


@pytest.mark.parametrize("m,n,k", [(4, 32, 128), (3, 48, 256)])
def test_library_example_runs_as_written(m, n, k):
    seed = int(torch.randint(0, 2 ** 31, ()))  # fresh data on every run; the seed is in any failure
    data = make_inputs(m, n, k, seed=seed)
    a, b, b_q, b_shuffle, b_scale_sh = data
    names = {"A": a, "B": b, "B_q": b_q, "B_shuffle": b_shuffle, "B_scale_sh": b_scale_sh, "data": data}
    expected = reference_output(data)
    results = 0
    for block in section_python_blocks(README.read_text(), SECTION):
        # One statement at a time, so every `C = ...` line of the example is checked, not only the last.
        for statement in ast.parse(block).body:
            names.pop("C", None)
            exec(compile(ast.Module([statement], []), str(README), "exec"), names)
            if "C" in names:
                try:
                    assert_harness_close(names["C"], expected)
                except AssertionError as exc:
                    raise AssertionError(f"seed {seed}: {ast.unparse(statement)}: {exc}") from None
                results += 1
    assert results >= 1, "the example computes no C"

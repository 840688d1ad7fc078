"""CPU: every HIP kernel compiles for gfx950 with the ziglang wheel's clang, with no warnings; each GEMM
uses the scaled MFMA, spills nothing and needs no scratch; the committed resource table is current.
Skipped (not passed) where ziglang is missing."""

import importlib.util
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("ziglang") is None:
    pytest.skip("ziglang (the gfx950 clang) is not installed", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import gfx950_build  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return gfx950_build.build(tmp_path_factory.mktemp("gfx950"))


@pytest.fixture(scope="module")
def gemm_kernels(built):
    resources, _, _ = built
    names = [k for k in resources if k.startswith(gfx950_build.GEMM_PREFIX)]
    assert len(names) >= 2
    return names


def test_compiles_without_warnings(built):
    _, _, diagnostics = built
    assert diagnostics == []


def test_every_variant_in_the_source_was_built(built):
    resources, isa, _ = built
    source = (gfx950_build.KERNELS / "mxfp4_gemm.hip").read_text()
    declared = {line.split("(")[1].split(",")[0] for line in source.splitlines()
                if line.startswith("MXFP4_GEMM_VARIANT(")}
    assert declared and declared <= set(resources) and declared <= set(isa)


def test_gemms_use_the_scaled_mfma(built, gemm_kernels):
    _, isa, _ = built
    for name in gemm_kernels:
        assert "v_mfma_scale_f32_" in isa[name], name


def test_no_spills_no_scratch(built):
    resources, _, _ = built
    for name, usage in resources.items():
        assert usage["VGPRs Spill"] == "0" and usage["SGPRs Spill"] == "0", name
        assert usage["ScratchSize [bytes/lane]"] == "0", name


def test_committed_resource_table_is_current(built):
    resources, _, _ = built
    table = gfx950_build.render_table(resources, gfx950_build.clang_version())
    assert gfx950_build.TABLE.read_text() == table, "run: python tools/gfx950_build.py"

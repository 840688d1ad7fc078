"""tools/floor_ladder.py: the timing ladder's kernels build on the CPU (nvcc), its geometry rule
refuses what the kernel cannot read, and on an H100/H200 every rung runs, writes a fresh C,
leaves its split-K counters at zero and (the published-A rung) never gives up its wait."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import make_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import floor_ladder  # noqa: E402

CUDA_ROOM = Path(__file__).resolve().parent.parent / "mxfp4_mm" / "backends" / "cuda"


def _build(tmp_path, source, options, name, arch="sm_90"):
    """nvcc -cubin of `source` (the package's CUDA headers on the include path) -> ptxas's log;
    asserts the build passed."""
    built = subprocess.run(["nvcc", f"-arch={arch}", "-cubin", "-Xptxas", "-v", f"-I{CUDA_ROOM}", *options, "-o",
                            str(tmp_path / "ladder.cubin"), str(source)], capture_output=True, text=True)
    assert built.returncode == 0, (name, built.stderr[-2000:])
    return built.stdout + built.stderr


@pytest.mark.parametrize("shape", [(4, 2880, 512), (256, 3072, 1536)])
def test_every_rung_compiles_without_spills(tmp_path, shape):
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    source = tmp_path / "ladder.cu"
    source.write_text(floor_ladder.SOURCE)
    bn, split = floor_ladder.GEOMETRY[shape]
    for name, a_mode, reduce, loads in floor_ladder.RUNGS:
        options = floor_ladder.compile_options(shape[1], shape[2], bn, split, a_mode, reduce, loads)
        assert "0 bytes spill stores" in _build(tmp_path, source, options, name), name


@pytest.mark.parametrize("shape", [(4, 2880, 512), (64, 7168, 2048), (256, 3072, 1536)])
def test_every_tma_rung_compiles_without_spills_and_fits_shared_memory(tmp_path, shape):
    bn, split = floor_ladder.GEOMETRY[shape]
    for name, a_mode in floor_ladder.TMA_RUNGS:
        assert floor_ladder.tma_shared_bytes(*shape, bn, split, a_mode) <= 227 * 1024, name
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    source = tmp_path / "ladder_tma.cu"
    source.write_text(floor_ladder.TMA_SOURCE)
    for name, a_mode in floor_ladder.TMA_RUNGS:
        options = floor_ladder.tma_compile_options(*shape, bn, split, a_mode)
        assert "0 bytes spill stores" in _build(tmp_path, source, options, name), name


@pytest.mark.parametrize("shape", [(4, 2880, 512), (64, 7168, 2048), (256, 3072, 1536)])
def test_every_mma_rung_compiles_for_sm90a_without_spills_and_fits_shared_memory(tmp_path, shape):
    bn, split = floor_ladder.GEOMETRY[shape]
    for name, mma in floor_ladder.MMA_RUNGS:
        assert floor_ladder.mma_shared_bytes(*shape, bn, split, mma) <= 227 * 1024, name
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    source = tmp_path / "ladder_mma.cu"
    source.write_text(floor_ladder.mma_source(shape[0]))
    for name, mma in floor_ladder.MMA_RUNGS:
        options = floor_ladder.mma_compile_options(*shape, bn, split, mma)
        log = _build(tmp_path, source, options, name, "sm_90a")
        assert "0 bytes spill stores" in log and "serialized" not in log, (name, log[-2000:])
        ptx = subprocess.run(["nvcc", "-arch=sm_90a", "-ptx", f"-I{CUDA_ROOM}", *options, "-o", "-", str(source)],
                             capture_output=True, text=True).stdout
        kind = "bf16.bf16" if mma == 1 else "e4m3.e4m3"
        assert f"k{16 if mma == 1 else 32}.f32.{kind}" in ptx, name


def test_mma_rungs_refuse_what_no_wgmma_holds():
    assert [floor_ladder.mma_n(m) for m in (1, 4, 16, 17, 64, 65, 256, 257)] == [16, 16, 16, 32, 64, 128, 256, 0]
    with pytest.raises(ValueError, match="multiple of 64"):
        floor_ladder.check_mma_geometry(4, 2880, 512, 32, 2)


def test_tma_chunks_are_whole_and_fill_the_ring():
    for (m, n, k), (bn, split) in floor_ladder.GEOMETRY.items():
        for name, a_mode in floor_ladder.TMA_RUNGS:
            kc, stages = floor_ladder.tma_chunking(m, n, k, bn, split, a_mode)
            chunks = k // split // kc
            assert (k // split) % kc == 0 and 1 <= stages <= min(chunks, floor_ladder.TMA_MAX_STAGES), name
    with pytest.raises(ValueError, match="256 rows"):
        floor_ladder.check_tma_geometry(512, 3072, 1536, 128, 6)


def test_a_shape_may_be_measured_at_several_geometries():
    assert floor_ladder.parse_geometry("64,7168,2048:128,2 64,7168,2048:64,1") == [
        ((64, 7168, 2048), (128, 2)), ((64, 7168, 2048), (64, 1))]


def test_default_geometries_fit_their_shapes():
    for (m, n, k), (bn, split) in floor_ladder.GEOMETRY.items():
        floor_ladder.check_geometry(m, n, k, bn, split)


@pytest.mark.parametrize("bn,split", [(48, 2), (64, 3), (64, 4)])
def test_geometries_the_kernel_cannot_read_are_refused(bn, split):
    with pytest.raises(ValueError, match="geometry"):
        floor_ladder.check_geometry(4, 2880, 512, bn, split)  # 2880 % 48 == 0 but 48 % 32 != 0; 512 / 3; 128 K


@pytest.mark.gpu
def test_every_rung_runs_and_resets_its_counters():
    if not torch.cuda.is_available() or torch.version.hip or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")
    m, n, k, bn, split = 17, 256, 1024, 64, 4
    data = make_inputs(m, n, k, seed=5, device="cuda")
    for name, a_mode, reduce, loads in floor_ladder.RUNGS:
        run = floor_ladder.make_runner(m, n, k, torch.device("cuda"), bn, split, a_mode, reduce, loads)
        first, second = run(data[0], data[2], data[3], data[4]), run(data[0], data[2], data[3], data[4])
        torch.cuda.synchronize()
        assert first.shape == (m, n) and first.dtype == torch.bfloat16 and first.data_ptr() != second.data_ptr()
        assert int(run.counters.abs().sum()) == 0, name
        assert not run.gave_up(), name  # the published-A rung's CTAs were all resident
    for name, a_mode in floor_ladder.TMA_RUNGS:  # a wrong transaction count would hang here
        run = floor_ladder.make_tma_runner(m, n, k, torch.device("cuda"), bn, split, a_mode)
        first, second = run(data[0], data[2], data[3], data[4]), run(data[0], data[2], data[3], data[4])
        torch.cuda.synchronize()
        assert first.shape == (m, n) and first.dtype == torch.bfloat16 and first.data_ptr() != second.data_ptr()
        assert not run.gave_up(), name
    for name, mma in floor_ladder.MMA_RUNGS:  # likewise; and an illegal wgmma operand would fault here
        run = floor_ladder.make_mma_runner(m, n, k, torch.device("cuda"), bn, split, mma)
        first, second = run(data[0], data[2], data[3], data[4]), run(data[0], data[2], data[3], data[4])
        torch.cuda.synchronize()
        assert first.shape == (m, n) and first.dtype == torch.bfloat16 and first.data_ptr() != second.data_ptr()

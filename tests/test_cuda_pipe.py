"""The pipe kernel of the cuda backend (backends/cuda/mxfp4_gemm_sm90_pipe.cu, PipePlan).

CPU: plan geometry and validity, labels, table entries of either plan type, where the candidates
put pipe plans, the kernel's scale-byte addressing modelled against spec.shuffled_scale_index, and
an nvcc build of every offered pipe plan of the benchmark shapes without spills (skipped without
nvcc). GPU (@pytest.mark.gpu, sm_90): every offered pipe plan on the task shapes and on odd
shapes, fresh outputs and data, M at run time, and the operands outside the folded range (the
exact fallback); the tensor-map twins (`tma`) of the copy-warp plans alike, though not offered yet.
"""

import concurrent.futures
import re
import shutil
import subprocess

import pytest
import torch

from mxfp4_mm import bench, spec
from mxfp4_mm.backends import cuda
from mxfp4_mm.backends.cuda import plans as cuda_plans
from mxfp4_mm.backends.cuda.plans import PIPE, PipePlan
from mxfp4_mm.kernels import read_source, source_paths
from conftest import (assert_fresh_outputs_and_fresh_data, assert_harness_close, build_concurrently, make_inputs,
                      reference_output)

TASK_SHAPES = [(8, 2112, 7168), (16, 3072, 1536), (64, 3072, 1536), (256, 2880, 512),
               (4, 2880, 512), (16, 2112, 7168), (32, 4096, 512), (32, 2880, 512),
               (64, 7168, 2048), (256, 3072, 1536)]
BENCH_SHAPES = TASK_SHAPES[4:]


def pipe(bn, bm, split_k, kc=64, stages=4, cw=0, tma=0):
    return PipePlan(PIPE, bn, bm, split_k, kc, stages, cw, tma)


def tma_twins(m, n, k, limit=4):
    """The tensor-map twins of the copy-warp pipe plans offered for a shape (not offered yet)."""
    return [p for p in cuda_plans.pipe_plans(m, n, k, limit=2 * limit, tma=True) if p.tma][:limit]


# ---- CPU ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", TASK_SHAPES)
def test_offered_pipe_plans_are_valid_and_cover_the_shape(shape):
    m, n, k = shape
    plans = cuda_plans.pipe_plans(*shape)
    assert 1 <= len(plans) <= 8 and len(set(plans)) == len(plans)
    for plan in plans:
        assert cuda_plans.is_valid(*shape, plan), plan
        n_tiles, splits, m_tiles = cuda_plans.grid(m, n, plan)
        assert n_tiles * plan.bn >= n > (n_tiles - 1) * plan.bn and m_tiles * plan.bm >= m > (m_tiles - 1) * plan.bm
        assert splits == plan.split_k <= min(8, -(-k // plan.kc))
        assert cuda_plans.smem_bytes(*shape, plan) <= cuda_plans.MAX_SMEM
        assert plan.bm >= min(m, 256) or plan.bm * 2 >= min(m, 256)  # M covered by one or two tiles


def test_pipe_validity_rules():
    shape = (256, 3072, 1536)
    assert cuda_plans.is_valid(*shape, pipe(128, 256, 4))
    assert not cuda_plans.is_valid(*shape, pipe(256, 128, 4))  # 512 threads leave 128 registers: 64 + ~96 do not fit
    assert not cuda_plans.is_valid(*shape, pipe(96, 64, 2))    # not whole warpgroups
    assert not cuda_plans.is_valid(*shape, pipe(128, 48, 2))   # no wgmma wrapper for n = 48
    assert not cuda_plans.is_valid(*shape, pipe(128, 64, 2, kc=96))
    assert not cuda_plans.is_valid(*shape, pipe(128, 64, 2, stages=2))  # a stage is refilled two chunks later
    assert not cuda_plans.is_valid(*shape, pipe(128, 64, 9))
    assert cuda_plans.is_valid(*shape, pipe(128, 32, 2, stages=cuda_plans.PIPE_MAX_STAGES, cw=2))
    assert not cuda_plans.is_valid(*shape, pipe(128, 32, 2, stages=cuda_plans.PIPE_MAX_STAGES + 1))
    assert not cuda_plans.is_valid(*shape, pipe(128, 64, 2, cw=3))
    assert not cuda_plans.is_valid(64, 512, 128, pipe(128, 64, 3))  # 2 chunks of 64: at most split 2
    assert not cuda_plans.is_valid(*shape, pipe(256, 64, 2, kc=128, stages=8))  # shared memory
    assert not cuda_plans.pipe_is_valid(*shape, tuple(pipe(128, 64, 2)))  # a plain tuple is not a plan


def test_pipe_shared_memory_is_the_larger_of_the_ring_and_the_partial_tile():
    # ring: 4 x (A 256*64*2 + codes 128*32 + scales 4*2*64) + 2 B operand buffers of 128*64*2
    assert cuda_plans.pipe_smem_bytes(pipe(128, 256, 4)) == 4 * (32768 + 4096 + 512) + 2 * 16384
    # partial tile: 256 x (64 + 4) floats beats a ring of 3 small stages
    assert cuda_plans.pipe_smem_bytes(pipe(64, 256, 1, stages=3)) == max(3 * (32768 + 2048 + 256) + 2 * 8192,
                                                                        256 * 68 * 4)


def test_pipe_compile_options_name_every_field():
    assert cuda_plans.compile_options(3072, 1536, pipe(128, 256, 4, 128, 3)) == (
        "-DGN=3072", "-DGK=1536", "-DBN=128", "-DBM=256", "-DSPLITK=4", "-DKC=128", "-DSTAGES=3")
    assert cuda_plans.compile_options(3072, 1536, pipe(128, 64, 2, 64, 9, cw=1))[-1] == "-DCOPY_WARPS=1"


def test_deep_stages_copy_the_whole_range_up_front_where_it_fits():
    # 64x7168x2048 on 128 x 64 tiles, split 2: 16 chunks of 64 per CTA; a stage is 8 + 4 + 0.25 KB
    # next to 32 KB of B operand buffers: 15 stages fit in 227 KB, not the 18 of all up front
    plan = pipe(128, 64, 2)
    assert cuda_plans.pipe_deep_stages(2048, plan) == 15
    assert cuda_plans.pipe_smem_bytes(plan._replace(stages=15)) <= cuda_plans.MAX_SMEM
    assert cuda_plans.pipe_smem_bytes(plan._replace(stages=16)) > cuda_plans.MAX_SMEM
    # 4x2880x512 on 64 x 16 tiles, split 2: 4 chunks per CTA, all up front = 6 stages
    assert cuda_plans.pipe_deep_stages(512, pipe(64, 16, 2)) == 6


@pytest.mark.parametrize("shape", BENCH_SHAPES)
def test_offered_pipe_plans_run_ahead_and_lead_with_a_copy_warp(shape):
    """The first version's 2-chunk lookahead measured ~2 us per chunk on the H200 (2026-12-03):
    the offers copy as far ahead as shared memory allows, the copy-warp variant first."""
    m, n, k = shape
    plans = cuda_plans.pipe_plans(*shape)
    assert plans[0].cw == 1 and plans[1] == plans[0]._replace(cw=0)
    for plan in plans:
        assert plan.stages == cuda_plans.pipe_deep_stages(k, plan)


def test_table_entries_of_either_plan_type_round_trip(monkeypatch):
    """The tuner writes table entries as plain tuples; a pipe entry's first field names its type."""
    entry = tuple(pipe(128, 256, 4))
    assert entry == ("pipe", 128, 256, 4, 64, 4, 0, 0)
    assert cuda_plans.PipePlan(*entry[:6]) == pipe(128, 256, 4)  # entries written before the cw field
    assert cuda_plans.PipePlan(*entry[:7]) == pipe(128, 256, 4)  # and before the tma field
    monkeypatch.setitem(cuda_plans.PLANS, (256, 3072, 1536), entry)
    assert cuda_plans.table_plan(256, 3072, 1536) == pipe(128, 256, 4)
    assert cuda_plans.table_plan(200, 3072, 1536) == pipe(128, 256, 4)  # same M class
    listed = cuda_plans.PLANS[(64, 7168, 2048)]
    assert cuda_plans.table_plan(64, 7168, 2048) == cuda_plans.plan_from_fields(listed)


def test_pipe_labels_are_unique_and_distinct_from_mma_sync_labels():
    plans = {p for shape in TASK_SHAPES for p in cuda_plans.pipe_plans(*shape, limit=40, tma=True)}
    labels = {cuda.plan_label(p) for p in plans}
    assert len(labels) == len(plans) and all(label.startswith("p.") and " " not in label for label in labels)
    assert cuda.plan_label(pipe(128, 256, 4)) == "p.n128.m256.s4.k64.q4"
    mma_sync = {cuda.plan_label(p) for shape in TASK_SHAPES for p in cuda_plans.ranked_plans(*shape, limit=50)}
    assert not labels & mma_sync


@pytest.fixture
def h200(monkeypatch):
    monkeypatch.setattr(cuda, "compute_units", lambda device: 132)


@pytest.mark.parametrize("shape", TASK_SHAPES)
def test_candidates_put_pipe_plans_last_once_memchecked(shape, h200, monkeypatch):
    device = torch.device("cuda")
    monkeypatch.setattr(cuda, "offers_pipe", lambda device: False)
    without = cuda.candidates(*shape, device)
    assert not any(isinstance(p, PipePlan) for p in without)
    monkeypatch.setattr(cuda, "offers_pipe", lambda device: True)
    plans = cuda.candidates(*shape, device)
    pipes = [p for p in plans if isinstance(p, PipePlan)]
    assert plans[0] == cuda_plans.plan_for_shape(*shape)
    assert pipes == cuda_plans.pipe_plans(*shape, 132, cuda.PIPE_CANDIDATES, cuda.PIPE_TMA_MEMCHECKED) == plans[len(plans) - len(pipes):]
    # the fp8 plans offered (sm_90 only too, before the pipe plans), after the table's plan, which may be one
    fp8 = [p for p in plans[1:] if isinstance(p, cuda_plans.Fp8Plan)]
    fields = cuda.FP8_FIELDS_MEMCHECKED  # else one warpgroup, no multicast, one M tile
    assert fp8 == [p for p in cuda_plans.fp8_plans(*shape, 132) if p != plans[0] and cuda.FP8_MEMCHECKED
                   and (fields or (p.cg == 1 and p.mc == 1 and shape[0] <= p.mp))
                   and p.split_k <= cuda.FP8_MEMCHECKED_MAX_SPLIT and (cuda.FP8_AHEAD_CHECKED or not p.ahead)
                   and (cuda.FP8_CV_CHECKED or not p.cv)]
    assert without[0] == plans[0]
    assert [p for p in plans[1:] if not isinstance(p, (PipePlan, cuda_plans.Fp8Plan))] == without[1:]
    assert len({cuda.plan_label(p) for p in plans}) == len(plans)


@pytest.mark.parametrize("memchecked", [False, True])
@pytest.mark.parametrize("capability", [(9, 0), (10, 0)])
def test_pipe_plans_are_offered_on_sm90_once_memchecked(memchecked, capability, h200, monkeypatch):
    monkeypatch.setattr(cuda, "PIPE_MEMCHECKED", memchecked)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    plans = cuda.candidates(256, 3072, 1536, torch.device("cuda"))
    offered = memchecked and capability == (9, 0)
    assert cuda.offers_pipe(torch.device("cuda")) == offered
    assert any(isinstance(p, PipePlan) for p in plans) == offered


def test_scale_bytes_are_found_inside_the_copied_64_byte_pieces():
    """The kernel copies, per (32-row group, block), the 64 bytes at group + (block >> 3) * 256 +
    (block & 3) * 64 of the shuffled tensor and reads row n's byte at (n & 15) * 4 +
    ((block & 7) >> 2) * 2 + ((n & 31) >> 4) inside them: that is spec.shuffled_scale_index."""
    n_rows, blocks = 96, 40
    scols = -(-blocks // 8) * 8
    for n in range(n_rows):
        for block in range(blocks):
            piece = (n >> 5) * scols * 32 + (block >> 3) * 256 + (block & 3) * 64
            inside = (n & 15) * 4 + ((block & 7) >> 2) * 2 + ((n & 31) >> 4)
            assert 0 <= inside < 64
            assert piece + inside == spec.shuffled_scale_index(n, block, scols), (n, block)


def test_fold_header_keeps_the_old_kernel_and_is_shared():
    for source in (cuda.SOURCE, cuda.PIPE_SOURCE):
        assert '#include "mxfp4_fold_sm90.h"' in read_source(source)


def _ptxas_report(n, k, plan, out_dir):
    source = source_paths()[cuda.PIPE_SOURCE]
    includes = sorted({f"-I{path.parent}" for path in source_paths().values()})  # headers resolve by name
    built = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-Xptxas", "-v", "-std=c++17", *includes,
                            *cuda_plans.compile_options(n, k, plan), "-o", str(out_dir / f"{n}_{k}_{cuda.plan_label(plan)}.cubin"),
                            str(source)], capture_output=True, text=True)
    return plan, built.returncode, built.stdout + built.stderr


def test_tensor_map_copies_need_one_copy_warp_and_are_named():
    plan = pipe(128, 64, 2, stages=9, cw=1, tma=1)
    assert cuda_plans.is_valid(64, 7168, 2048, plan)
    assert not cuda_plans.is_valid(64, 7168, 2048, plan._replace(cw=0))
    assert not cuda_plans.is_valid(64, 7168, 2048, plan._replace(cw=2))
    assert cuda.plan_label(plan) == "p.n128.m64.s2.k64.q9.w1.t" and cuda.plan_family(plan) == "pipe.tma.sk"
    assert "-DCOPY_TMA=1" in cuda_plans.compile_options(7168, 2048, plan)
    assert not any("COPY_TMA" in o for o in cuda_plans.compile_options(7168, 2048, plan._replace(tma=0)))
    assert cuda_plans.smem_bytes(64, 7168, 2048, plan) == cuda_plans.smem_bytes(64, 7168, 2048, plan._replace(tma=0))


@pytest.mark.parametrize("shape", BENCH_SHAPES)
def test_tensor_map_twins_are_offered_only_once_memchecked(shape, h200, monkeypatch):
    assert cuda.PIPE_TMA_MEMCHECKED
    monkeypatch.setattr(cuda, "offers_pipe", lambda device: True)
    offered = [p for p in cuda.candidates(*shape, torch.device("cuda")) if getattr(p, "tma", 0)]
    assert offered and all(p._replace(tma=0) in cuda_plans.pipe_plans(*shape, limit=8) for p in offered)
    monkeypatch.setattr(cuda, "PIPE_TMA_MEMCHECKED", False)
    assert not any(getattr(p, "tma", 0) for p in cuda.candidates(*shape, torch.device("cuda")))


def test_tensor_map_boxes_tile_the_stage_as_the_copies_do():
    """The kernel's boxes (issue_chunk_tma) against its cp.async pieces (issue_chunk), modelled on the
    stage's byte offsets: each destination 16-byte unit gets the same source unit, and every
    scale-byte read (convert_b_block) lands inside the chunk's scale box."""
    k, bm, bn = 640, 32, 128
    for kc in (64, 128):
        nb = kc // 32
        for chunk in range(-(-k // kc)):
            k0, block0 = chunk * kc, chunk * kc // 32
            boxes = {}  # A: per k8 group a [bm rows x 16 B] box; unit (g, row) from (row, k0 + 8 g)
            for g in range(kc // 8):
                for row in range(bm):
                    boxes[("a", g * bm + row)] = (row, k0 + 8 * g)
            pieces = {}
            for p in range(bm * kc // 8):
                kg = ((p >> 5) // (bm // 8)) * 4 + ((p >> 3) & 3)
                row = ((p >> 5) % (bm // 8)) * 8 + (p & 7)
                pieces[("a", kg * bm + row)] = (row, k0 + kg * 8)
            for p in range(bn * nb):
                b, row = (p >> 3) % nb, (p // (8 * nb)) * 8 + (p & 7)
                pieces[("b", b * bn + row)] = (row, (block0 + b) * 16)
            for b in range(nb):
                for row in range(bn):
                    boxes[("b", b * bn + row)] = (row, (block0 + b) * 16)
            assert boxes == pieces, (kc, chunk)
            x0 = (block0 >> 3) * 256 + (block0 & 3) * 64  # the scale box: nb * 64 bytes of each group
            for b in range(nb):
                block = block0 + b
                piece = (block >> 3) * 256 + (block & 3) * 64  # the cp.async path's 64-byte piece
                assert x0 + b * 64 == piece and piece + 64 <= x0 + nb * 64 <= (block >> 3) * 256 + 256


def test_every_offered_pipe_plan_builds_without_spills(tmp_path):
    """nvcc -arch=sm_90a of each pipe plan offered for the benchmark shapes, and of their tensor-map
    twins: no spills, no local memory in the kernel, registers within the budget `pipe_is_valid`
    assumes."""
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    work = [(n, k, plan) for m, n, k in BENCH_SHAPES
            for plan in cuda_plans.pipe_plans(m, n, k) + tma_twins(m, n, k, limit=2)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        reports = list(pool.map(lambda w: _ptxas_report(*w, tmp_path), work))
    for plan, code, report in reports:
        assert code == 0, report[-2000:]
        assert report.count("0 bytes spill stores") == report.count("spill stores"), report
        assert "C7518" not in report, (plan, report)  # wgmmas serialized by a divergent path
        assert "C7515" not in report, (plan, report)  # wgmmas serialized by accumulator writes between them
        registers = int(re.search(r"Used (\d+) registers", report.split("function 'mxfp4_gemm_pipe'")[-1]).group(1))
        assert registers <= min(255, 65536 // cuda_plans.pipe_threads(plan)), (plan, registers)


# ---- GPU ----------------------------------------------------------------------------------------

def _sm90():
    return torch.cuda.is_available() and cuda.is_available(torch.device("cuda")) \
        and torch.cuda.get_device_capability() == (9, 0)


def _check(m, n, k, plan, seed=0):
    data = make_inputs(m, n, k, seed=seed, device="cuda")
    run = cuda.make_runner(m, n, k, torch.device("cuda"), plan)
    assert run.plan == plan
    assert_harness_close(run(data[0], data[2], data[3], data[4]), reference_output(data))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", TASK_SHAPES)
def test_every_offered_pipe_plan_on_the_task_shapes(shape):
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    plans = cuda_plans.pipe_plans(*shape) + tma_twins(*shape)
    build_concurrently(*shape, torch.device("cuda"), plans)
    for plan in plans:
        _check(*shape, plan, seed=21)


# Partial M tiles (1, 17, 33, 100), a whole one (256); N = 64 (one tile), 192 (three of 64, or a
# partial one of 128 or 256), 2880; K = 128 (2 chunks of 64, one of 128), 640 (5 chunks: an
# uneven split), 2048.
ODD_PLANS = [pipe(64, 16, 1), pipe(128, 32, 2), pipe(128, 64, 2, kc=128, stages=3), pipe(192, 128, 3),
             pipe(64, 256, 2, stages=3), pipe(128, 256, 2, stages=5), pipe(256, 64, 3, kc=128, stages=3),
             pipe(64, 16, 1, stages=16, cw=1), pipe(128, 32, 2, stages=7, cw=2), pipe(256, 64, 3, stages=9, cw=1),
             pipe(128, 128, 2, kc=128, stages=4, cw=1),
             pipe(64, 16, 1, stages=16, cw=1, tma=1), pipe(192, 64, 3, stages=9, cw=1, tma=1),
             pipe(128, 256, 2, stages=4, cw=1, tma=1), pipe(128, 64, 2, kc=128, stages=5, cw=1, tma=1)]


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 17, 33, 100, 256])
@pytest.mark.parametrize("n", [64, 192, 2880])
@pytest.mark.parametrize("k", [128, 640, 2048])
def test_odd_shapes(m, n, k):
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    plans = [p for p in ODD_PLANS if cuda_plans.is_valid(m, n, k, p)] + cuda_plans.pipe_plans(m, n, k)[:2]
    assert plans
    for plan in dict.fromkeys(plans):
        _check(m, n, k, plan, seed=m + n + k)


@pytest.mark.gpu
def test_fresh_outputs_and_fresh_data():
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    m, n, k = 64, 7168, 2048
    run = cuda.make_runner(m, n, k, torch.device("cuda"), cuda_plans.pipe_plans(m, n, k)[0])
    assert_fresh_outputs_and_fresh_data(run, m, n, k)


@pytest.mark.gpu
def test_one_build_serves_every_m():
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    from mxfp4_mm import runtime
    n, k, plan = 1024, 1536, pipe(128, 64, 2)
    loaded = runtime.stats["loaded"]
    for m in (1, 5, 17, 40, 64):
        _check(m, n, k, plan, seed=m)
    assert runtime.stats["loaded"] - loaded <= 1


EXTREME_PLANS = [((256, 3072, 1536), pipe(128, 256, 4)), ((64, 7168, 2048), pipe(128, 64, 2, kc=128, stages=3)),
                 ((33, 480, 1600), pipe(192, 64, 3)), ((16, 2112, 7168), pipe(64, 16, 4)),
                 ((64, 7168, 2048), pipe(256, 64, 4, stages=9, cw=1)), ((256, 3072, 1536), pipe(128, 128, 2, stages=9, cw=1)),
                 ((64, 7168, 2048), pipe(128, 64, 2, stages=9, cw=1, tma=1)),
                 ((16, 2112, 7168), pipe(64, 16, 4, kc=128, stages=8, cw=1, tma=1))]


@pytest.mark.gpu
@pytest.mark.parametrize("shape, plan", EXTREME_PLANS)
def test_out_of_range_operands_match_the_reference(shape, plan):
    from test_cuda_backend import assert_out_of_range_cases_match
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    assert cuda_plans.is_valid(*shape, plan)
    assert_out_of_range_cases_match(cuda.make_runner(*shape, torch.device("cuda"), plan), shape)


# One A block near 2^70 at 5x2112x7168 (tools/sanitize_kernels.py's input): on 7 columns the huge
# block's dot product cancels to exactly 0, and a single fp32 matmul (the harness-style reference)
# loses the rest of the row there, while any kernel that sums that block exactly first does not.
HUGE_BLOCK_SHAPE = (5, 2112, 7168)


def _huge_block_inputs(device):
    m, n, k = HUGE_BLOCK_SHAPE
    return bench.with_huge_a_block(bench.generate_input(m, n, k, seed=m * 131 + n * 7 + k, device=device))


def test_the_fp32_reference_is_order_dependent_on_the_huge_block_input():
    data = _huge_block_inputs("cpu")
    m, n, k = HUGE_BLOCK_SHAPE
    exact = bench.blockwise_exact_reference(data)
    a_dq = spec.dequantize_mxfp4(*spec.quantize_mxfp4(data[0])).double()
    b_dq = spec.dequantize_mxfp4(data[2], spec.e8m0_unshuffle(data[4], n, k // 32)).double()
    huge = a_dq[m - 1, :32] @ b_dq[:, :32].T
    cancelled = (huge == 0).nonzero().flatten()
    assert len(cancelled) > 0
    rest = a_dq[m - 1, 32:] @ b_dq[:, 32:].T  # no huge term: float64 is exact enough
    assert torch.equal(exact[m - 1, cancelled], rest[cancelled].to(torch.bfloat16))
    assert rest[cancelled].abs().min() > 1
    assert not bench.harness_close(bench.reference(data), exact)  # the trap this input sets
    assert bench.harness_close(bench.reference(data)[: m - 1], exact[: m - 1])


@pytest.mark.gpu
@pytest.mark.parametrize("plan", [None, pipe(64, 16, 4, stages=16, cw=1), pipe(128, 16, 6, stages=16), pipe(128, 16, 6)])
def test_huge_block_input_matches_the_exact_sum(plan):
    """The exact fallback sums each CTA's K range in order, so the cancelling block gives exactly 0
    and the rest of the row survives (None: the table's mma.sync plan)."""
    if plan is not None and not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    if plan is None and not (torch.cuda.is_available() and cuda.is_available(torch.device("cuda"))):
        pytest.skip("needs an NVIDIA GPU")
    data = _huge_block_inputs("cuda")
    run = cuda.make_runner(*HUGE_BLOCK_SHAPE, torch.device("cuda"), plan)
    out = run(data[0], data[2], data[3], data[4])
    assert_harness_close(out.cpu(), bench.blockwise_exact_reference(data))

"""The CUDA backend (backends/cuda/mxfp4_gemm_sm90.cu).

CPU: the plan table covers the task shapes with valid plans; the general rule gives a valid plan
for random valid shapes. GPU (@pytest.mark.gpu, Hopper): task and odd shapes against the spec's
reference GEMM, split-K variants, fresh outputs and fresh data, and the fused A quantization
bit-exact against the golden vectors, and operands outside the folded-scale range.
"""

import ast
import random
from pathlib import Path

import pytest
import torch

from mxfp4_mm.backends import cuda
from mxfp4_mm.backends.cuda import plans as cuda_plans
from mxfp4_mm.backends.cuda.plans import PLANS, general_plan
from conftest import (assert_fresh_outputs_and_fresh_data, assert_harness_close, assert_replays_in_a_captured_graph,
                      build_concurrently, make_inputs, reference_output)

GOLDEN = Path(__file__).parent / "data" / "mxfp4_quant.pt"
TASK_SHAPES = [(8, 2112, 7168), (16, 3072, 1536), (64, 3072, 1536), (256, 2880, 512),
               (4, 2880, 512), (16, 2112, 7168), (32, 4096, 512), (32, 2880, 512),
               (64, 7168, 2048), (256, 3072, 1536)]


def test_table_covers_task_shapes_with_valid_plans():
    for shape in TASK_SHAPES:
        assert shape in PLANS, shape
        assert cuda_plans.is_valid(*shape, cuda_plans.plan_from_fields(PLANS[shape])), (shape, PLANS[shape])


def test_v5_grid_pads_n_tiles_to_whole_clusters():
    plan = cuda_plans.Plan(16, 2, 1, 2, 2, 4)  # BN 32: 15 tiles -> 16, times split 2
    assert cuda_plans.grid(16, 480, plan) == (32, 1, 1)
    assert cuda_plans.grid(16, 480, plan._replace(cn=1)) == (15, 2, 1)
    assert not cuda_plans.is_valid(16, 480, 1600, plan._replace(cn=8))  # cluster of 16


def test_general_plan_is_valid_for_random_shapes():
    rng = random.Random(0)
    for _ in range(200):
        m, n, k = rng.randint(1, 300), 16 * rng.randint(1, 600), 64 * rng.randint(1, 160)
        plan = general_plan(m, n, k)
        assert plan is not None and cuda_plans.is_valid(m, n, k, plan), (m, n, k, plan)
        picked = cuda_plans.plan_for_shape(m, n, k)
        assert picked is not None and cuda_plans.is_valid(m, n, k, picked), (m, n, k, picked)


def test_tables_module_imports_no_backend():
    """Plans are data: the table module stands alone (the backend imports it, never the reverse)."""
    tree = ast.parse(Path(cuda_plans.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names} | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported == {"collections"}


def test_builds_do_not_depend_on_m_and_plans_are_picked_per_m_class():
    n, k = 1024, 1536  # not in the table: the cost model's plan per class
    options = {cuda_plans.compile_options(n, k, cuda_plans.plan_for_shape(m, n, k)) for m in range(1, 65)}
    assert 1 < len(options) <= len({cuda_plans.m_class(m) for m in range(1, 65)}) == 4
    assert all("GM" not in flag for flags in options for flag in flags)
    # a listed shape lends its plan to its whole M class
    assert all(cuda_plans.plan_for_shape(m, 2880, 512) == cuda_plans.Plan(*PLANS[(4, 2880, 512)]) for m in range(1, 9))
    assert cuda_plans.plan_for_shape(17, 2880, 512) == cuda_plans.Plan(*PLANS[(32, 2880, 512)])
    # large M outside the table: dequantize and cuBLAS; listed large-M shapes keep their plans
    assert cuda_plans.plan_for_shape(4096, 7168, 2048) == cuda_plans.plan_for_shape(128, n, k) == cuda_plans.DequantPlan()
    assert cuda_plans.plan_for_shape(256, 3072, 1536) == cuda_plans.plan_from_fields(PLANS[(256, 3072, 1536)])
    assert isinstance(cuda_plans.plan_for_shape(64, n, k), cuda_plans.Plan)


@pytest.fixture
def h200_units(monkeypatch):
    monkeypatch.setattr(cuda, "compute_units", lambda device: 132)


@pytest.mark.parametrize("shape", TASK_SHAPES + [(1, 16, 64), (17, 480, 1600), (300, 96, 7168)])
def test_candidates_start_with_the_table_plan_and_are_valid_distinct_mma_sync_plans(shape, h200_units):
    everything = cuda.candidates(*shape, torch.device("cuda"))
    assert everything[0] == cuda_plans.plan_for_shape(*shape) and len(set(everything)) == len(everything)
    plans = [p for p in everything if isinstance(p, cuda_plans.Plan)]  # pipe plans: tests/test_cuda_pipe.py
    assert 1 <= len(plans) <= cuda.MAX_CANDIDATES
    assert everything.count(cuda_plans.DequantPlan()) == 1
    assert all(cuda_plans.is_valid(*shape, p) for p in plans), plans
    assert all(hash(p) is not None for p in plans)
    if shape[0] >= 16 and shape[1] >= 480:
        assert len(plans) >= 12, shape  # enough for the tuner to choose from


def test_plan_labels_are_short_and_unique():
    plans = {p for shape in TASK_SHAPES for p in cuda_plans.ranked_plans(*shape, limit=200)}
    plans |= {cuda_plans.Plan(64, 8, 1, 1, 2, 4, 0)}
    labels = {cuda.plan_label(p) for p in plans}
    assert len(labels) == len(plans)
    assert all(" " not in label and len(label) <= 20 for label in labels)
    assert cuda.plan_label(cuda_plans.Plan(32, 6, 2, 2, 1, 2, 2)) == "m32w6t2k2s1c2r2"
    assert cuda.plan_label(cuda_plans.DequantPlan()) == "dq.cublas" and cuda.plan_family(cuda_plans.DequantPlan()) == "dq"
    # a thread per 8 values of B and A, capped at 16 CTAs per SM (the kernel strides over the rest)
    assert cuda_plans.dequant_grid(16, 2112, 512) == (-(-(16 + 2112) * 64 // 256), 1, 1) == (532, 1, 1)
    assert cuda_plans.dequant_grid(256, 3072, 1536, compute_units=132) == (16 * 132, 1, 1)
    assert cuda_plans.dequant_grid(4096, 7168, 2048, compute_units=132) == (16 * 132, 1, 1)


# ---- GPU ---------------------------------------------------------------------------------------

def _hopper():
    return torch.cuda.is_available() and cuda.is_available(torch.device("cuda"))


def _check(m, n, k, plan=None, seed=0):
    data = make_inputs(m, n, k, seed=seed, device="cuda")
    run = cuda.make_runner(m, n, k, torch.device("cuda"), plan)
    out = run(data[0], data[2], data[3], data[4])
    assert_harness_close(out, reference_output(data))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", TASK_SHAPES)
def test_task_shapes(shape):
    if not _hopper():
        pytest.skip("needs sm_90")
    _check(*shape)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 3, 4, 17, 33, 256])
@pytest.mark.parametrize("n", [16, 48, 2880])
@pytest.mark.parametrize("k", [64, 192, 576, 7168])
def test_odd_shapes(m, n, k):
    if not _hopper():
        pytest.skip("needs sm_90")
    _check(m, n, k)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 17, 256, 1000])
@pytest.mark.parametrize("n", [16, 48, 2880])
@pytest.mark.parametrize("k", [64, 576, 7168])
def test_dequant_plan_odd_shapes(m, n, k):
    """Both operands to bf16 in one launch (grid-stride past 2112 CTAs at M 1000), then cuBLAS."""
    if not _hopper():
        pytest.skip("needs sm_90")
    _check(m, n, k, plan=cuda_plans.DequantPlan(), seed=m + n + k)


@pytest.mark.gpu
def test_dequant_plan_in_a_captured_graph():
    if not _hopper():
        pytest.skip("needs sm_90")
    shape = (256, 3072, 1536)
    assert_replays_in_a_captured_graph(cuda.make_runner(*shape, torch.device("cuda"), cuda_plans.DequantPlan()), *shape)


@pytest.mark.gpu
@pytest.mark.parametrize("plan", [(8, 1, 1, 1, 1), (8, 2, 2, 2, 2), (16, 3, 1, 4, 8), (24, 1, 3, 2, 3),
                                  (64, 4, 2, 1, 4), (128, 2, 1, 1, 2),
                                  # v5: N tiles sharing A through the cluster (incl. padded tiles)
                                  (8, 1, 1, 1, 1, 2), (8, 2, 2, 2, 2, 4), (24, 1, 3, 2, 3, 2),
                                  (64, 4, 2, 1, 4, 2), (16, 1, 1, 2, 1, 8),
                                  # v5: a ring of B chunk slots per thread (with and without cn)
                                  (8, 1, 1, 1, 1, 1, 2), (8, 2, 2, 2, 2, 1, 3), (24, 1, 3, 2, 3, 2, 2),
                                  (64, 2, 3, 1, 2, 2, 2)])
def test_plans_and_split_k(plan):
    if not _hopper():
        pytest.skip("needs sm_90")
    for shape in [(17, 480, 1600), (4, 64, 576)]:
        if cuda_plans.is_valid(*shape, cuda_plans.Plan(*plan)):
            _check(*shape, plan=cuda_plans.Plan(*plan), seed=3)


def _sm90():
    return _hopper() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("plan", [None, ("dq",)], ids=["table", "dq"])
def test_fresh_outputs_and_fresh_data(plan):
    if not _hopper():
        pytest.skip("needs sm_90")
    m, n, k = 16, 2112, 7168
    run = cuda.make_runner(m, n, k, torch.device("cuda"), cuda_plans.plan_from_fields(plan) if plan else None)
    assert_fresh_outputs_and_fresh_data(run, m, n, k)


@pytest.mark.gpu
def test_quantization_matches_golden():
    if not _hopper():
        pytest.skip("needs sm_90")
    golden = torch.load(GOLDEN)
    for case in golden["cases"]:
        codes, scales = cuda.quantize(case["x"].cuda())
        keep = ~case["extreme_block"]
        assert torch.equal(scales.cpu()[keep], case["scale"][keep]), case["kind"]
        keep_bytes = keep.repeat_interleave(16, dim=1)
        assert torch.equal(codes.cpu()[keep_bytes], case["fp4"][keep_bytes]), case["kind"]


# ---- operands outside the folded-scale range: the exact per-CTA fallback (exact_partial) --------

def _extreme(m, n, k, case, seed=7, device="cuda"):
    """Harness-style inputs pushed outside the range the folded bf16 operands cover."""
    from mxfp4_mm import spec
    a, b, b_q, b_shuffle, b_scale_sh = make_inputs(m, n, k, seed=seed, device=device)
    scales = spec.e8m0_unshuffle(b_scale_sh, n, k // 32).clone()
    a = a.clone()
    if case == "b_scale_high":  # |B| ~ 2^80 on a few rows: products stay finite in fp32
        scales[::7] = (scales[::7].int() + 80).to(torch.uint8)
    elif case == "b_scale_low":  # B scales 2^-66..2^-63 on a few whole rows, A scaled up to match
        scales[::5] = torch.randint(61, 65, scales[::5].shape, dtype=torch.uint8, device=device)
        a = (a.float() * 2.0 ** 58).to(torch.bfloat16)
    elif case == "a_huge":  # |A| ~ 2^70 on every third row: block exponents above 64
        a[::3] = (a[::3].float() * 2.0 ** 70).to(torch.bfloat16)
    elif case == "a_nan":  # a NaN quantizes to code 0 (the reference's rows stay finite)
        a[::3, 5] = float("nan")
    elif case == "a_nan_payload":  # a NaN whose payload would carry out of the exponent rounding
        a.view(torch.int16)[::3, 5] = 0x7FE3
    elif case == "b_scale_nan":  # e8m0 255 = NaN: those outputs are NaN in the reference too
        scales[3, 0] = 255
    elif case == "b_zero_rows":  # all-zero blocks quantize to scale byte 0 (the fast path's)
        b_q = b_q.clone()
        b_q[::9], scales[::9] = 0, 0
    elif case == "b_bytes_tiny":  # B scale bytes 1, 2, 64 on whole rows, A ~2^118 to match
        for row, byte in enumerate((1, 2, 64)):
            scales[row::5] = byte
        a = (a.float() * 2.0 ** 118).to(torch.bfloat16)
    elif case == "b_bytes_huge":  # B scale bytes 200, 230, 252 on whole rows, A ~2^-100 to match
        for row, byte in enumerate((200, 230, 252)):
            scales[row::5] = byte
        a = (a.float() * 2.0 ** -100).to(torch.bfloat16)
    elif case == "b_byte_254":  # 2^127: B values >= 2 dequantize to inf, so row 1's outputs are inf/NaN
        scales[1] = 254
        a = (a.float() * 2.0 ** -120).to(torch.bfloat16)
    elif case == "a_block_exponents":  # block exponents -127 (2^-140 blocks) .. 40, varying along K
        shifts = (torch.arange(k // 32, device=device)[None, :] * 7 + torch.arange(m, device=device)[:, None] * 3) % 81 - 40
        shifts[:, ::5] = -140
        a = (a.float().reshape(m, -1, 32) * torch.exp2(shifts.float())[..., None]).reshape(m, k).to(torch.bfloat16)
    return a, b, b_q, spec.shuffle_weight(b_q), spec.e8m0_shuffle(scales)


# Cases whose rows mix blocks 2^80 apart: their sums cancel, so two fp32 summation orders (the
# reference's and the tensor cores') legitimately differ by more than the harness's tolerance at a
# few near-zero outputs. They are checked against the exact sum with fp32's summation-order bound.
ILL_CONDITIONED_CASES = {"a_block_exponents"}


def assert_matches_spec(out, data, case):
    """The harness's check, plus, for ILL_CONDITIONED_CASES, the slack any fp32 summation order may
    need: |error| <= 2 K 2^-23 sum|a_k b_k| against the exact (float64) sum of the dequantized
    products. A wrong scale or code moves an output by about a whole term, far above that slack."""
    ref = reference_output(data)
    if case not in ILL_CONDITIONED_CASES:
        assert_harness_close(out, ref)
        return
    from mxfp4_mm import spec
    a, _, b_q, _, b_scale_sh = data
    n, k = b_q.shape[0], a.shape[1]
    a_dq = spec.dequantize_mxfp4(*spec.quantize_mxfp4(a)).double()
    b_dq = spec.dequantize_mxfp4(b_q, spec.e8m0_unshuffle(b_scale_sh, n, k // 32)).double()
    exact, magnitude = a_dq @ b_dq.T, a_dq.abs() @ b_dq.abs().T
    slack = 1e-2 + 1e-2 * exact.abs() + 2 * k * 2.0 ** -23 * magnitude
    assert bool(((out.double() - exact).abs() <= slack).all()), case


def test_the_summation_order_slack_accepts_the_reference_and_rejects_a_wrong_block():
    """CPU: the fp32 reference passes assert_matches_spec, a doubled dominant block (exponent 37) does not."""
    data = _extreme(4, 2880, 512, "a_block_exponents", device="cpu")
    assert_matches_spec(reference_output(data), data, "a_block_exponents")
    a = data[0].clone()
    a[0, 11 * 32:12 * 32] *= 2
    with pytest.raises(AssertionError):
        assert_matches_spec(reference_output((a,) + tuple(data[1:])), data, "a_block_exponents")


EXTREME_CASES = ["b_scale_high", "b_scale_low", "a_huge", "a_nan", "a_nan_payload", "b_scale_nan", "b_zero_rows",
                 "b_bytes_tiny", "b_bytes_huge", "b_byte_254", "a_block_exponents"]
NON_FINITE_CASES = {"b_scale_nan", "b_byte_254"}
# One plan per code path: split-K with a cluster of N tiles, plain split-K, WK > 1.
_MMA_SYNC_EXTREME_PLANS = [((4, 2880, 512), PLANS[(4, 2880, 512)]), ((16, 2112, 7168), PLANS[(16, 2112, 7168)]),
                           ((64, 7168, 2048), PLANS[(64, 7168, 2048)]), ((256, 3072, 1536), PLANS[(256, 3072, 1536)]),
                           ((33, 480, 1600), (16, 2, 1, 2, 2, 2, 0))]
EXTREME_PLANS = ([(shape, None) for shape, _ in _MMA_SYNC_EXTREME_PLANS[:4]] + _MMA_SYNC_EXTREME_PLANS[4:]
                 + [((33, 480, 1600), ("dq",)), ((256, 3072, 1536), ("dq",))])


@pytest.mark.gpu
@pytest.mark.parametrize("shape, plan", EXTREME_PLANS)
def test_out_of_range_operands_match_the_reference(shape, plan):
    if not _sm90():
        pytest.skip("needs sm_90")
    plan = cuda_plans.plan_from_fields(plan) if plan else None
    assert plan is None or cuda_plans.is_valid(*shape, plan)
    assert_out_of_range_cases_match(cuda.make_runner(*shape, torch.device("cuda"), plan), shape)


def assert_out_of_range_cases_match(run, shape):
    """Every EXTREME_CASES input through `run`, judged by assert_matches_spec."""
    for case in EXTREME_CASES:
        data = _extreme(*shape, case)
        out = run(data[0], data[2], data[3], data[4])
        ref = reference_output(data)
        assert bool(ref.isfinite().all()) == (case not in NON_FINITE_CASES), case  # the case means what it says
        assert_matches_spec(out, data, case)


# ---- M at run time; the autotuner's interface ----------------------------------------------------

@pytest.mark.gpu
def test_varying_m_builds_once_per_m_class():
    """An eager caller whose batch size varies: M = 1..64 for one (N, K) loads at most one kernel
    per M class, and a second pass over the same M loads none."""
    if not _hopper():
        pytest.skip("needs sm_90")
    from mxfp4_mm import runtime
    n, k = 1024, 1536
    device = torch.device("cuda")
    loaded = runtime.stats["loaded"]
    for m in range(1, 65):
        _check(m, n, k, seed=m)
    assert runtime.stats["loaded"] - loaded <= len({cuda_plans.m_class(m) for m in range(1, 65)})
    loaded = runtime.stats["loaded"]
    for m in range(1, 65):
        cuda.make_runner(m, n, k, device)
    assert runtime.stats["loaded"] == loaded


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4, 2880, 512), (33, 480, 1600), (256, 3072, 1536)])
def test_every_candidate_builds_concurrently_and_is_correct(shape):
    if not _hopper():
        pytest.skip("needs sm_90")
    device = torch.device("cuda")
    plans = cuda.candidates(*shape, device)
    build_concurrently(*shape, device, plans)
    data = make_inputs(*shape, seed=8, device="cuda")
    ref = reference_output(data)
    for plan in plans:
        run = cuda.make_runner(*shape, device, plan)
        assert run.plan == plan
        assert_harness_close(run(data[0], data[2], data[3], data[4]), ref)
    assert cuda.make_runner(*shape, device).plan == plans[0]


# ---- the memory-floor bench path (mxfp4_mm/floor_kernels.py, not bundled) -------------------------

def test_floor_kernel_compiles_for_sm90(tmp_path):
    import shutil
    import subprocess
    from mxfp4_mm import floor_kernels
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    source = tmp_path / "floor.cu"
    source.write_text(floor_kernels.SOURCE)
    built = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", str(tmp_path / "floor.cubin"),
                            str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert "0 bytes spill stores" in built.stdout + built.stderr


def _expected_floor_output(m, n, k, a, b_q, b_scale_sh, blocks):
    """What the floor kernel writes: thread t folds (xor) every 16-byte unit u = t (mod step) of
    A | B codes | B scales and fills its C units with (acc, acc^1, acc^2, acc^3)."""
    import numpy as np
    from mxfp4_mm import floor_kernels
    a_units, b_units, s_units, c_units = floor_kernels.units(m, n, k)
    raw = np.concatenate([a.reshape(-1).view(torch.uint8).cpu().numpy(), b_q.reshape(-1).view(torch.uint8).cpu().numpy(),
                          b_scale_sh.reshape(-1).view(torch.uint8)[:s_units * 16].cpu().numpy()])
    words = np.bitwise_xor.reduce(raw.view(np.uint32).reshape(-1, 4), axis=1)
    step = blocks * floor_kernels.THREADS
    padded = np.zeros(-(-len(words) // step) * step, dtype=np.uint32)
    padded[:len(words)] = words
    acc = np.bitwise_xor.reduce(padded.reshape(-1, step), axis=0)
    owner = acc[np.arange(c_units) % step]
    expected = np.stack([owner, owner ^ 1, owner ^ 2, owner ^ 3], axis=1)
    return torch.from_numpy(expected.view(np.int16).reshape(m, n))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4, 2880, 512), (16, 2112, 7168), (256, 3072, 1536), (1, 16, 64)])
def test_floor_kernel_reads_every_input_byte_once_and_writes_c(shape):
    if not _hopper():
        pytest.skip("needs sm_90")
    from mxfp4_mm import floor_kernels
    m, n, k = shape
    data = make_inputs(m, n, k, seed=9, device="cuda")
    run = floor_kernels.make_runner(m, n, k, torch.device("cuda"))
    out = run(data[0], data[2], data[3], data[4])
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    blocks = floor_kernels.blocks_for(m, n, k, torch.cuda.get_device_properties(0).multi_processor_count)
    expected = _expected_floor_output(m, n, k, data[0], data[2], data[4], blocks)
    assert torch.equal(out.view(torch.int16).cpu(), expected)


def test_bench_takes_every_ratio_to_the_memory_floor(tmp_path, monkeypatch):
    """The floor path is registered with the bench, its output is not checked, and every path's
    ratio (per shape, geomean, printed table) is taken to it. On the CPU it does not run, so a
    stand-in with its name (torch.empty of C) takes its place here."""
    import json
    from mxfp4_mm import bench, floor_kernels
    assert bench.EXTRA_PATHS[floor_kernels.PATH][1] is floor_kernels.make_path
    assert bench.RATIO_TO == floor_kernels.PATH and floor_kernels.PATH in bench.UNCHECKED
    monkeypatch.setitem(bench.EXTRA_PATHS, floor_kernels.PATH, (floor_kernels.NOTE, lambda case: lambda i: torch.empty(
        case.shape[:2], dtype=torch.bfloat16)))
    assert bench.main(["--shapes", "4,32,64", "--reps", "3", "--pool", "2", "--out", str(tmp_path),
                       "--device", "cpu", "--backends", "torch"]) == 0
    report = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert report["ratio_to"] == floor_kernels.PATH
    rows = report["results"]["4x32x64"]
    assert rows[floor_kernels.PATH]["correct"] is None and rows["torch"]["correct"] is True
    for row in list(rows.values()) + list(report["geomean_us"].values()):
        assert row["ratio_to_floor"] > 0
    assert rows[floor_kernels.PATH]["ratio_to_floor"] == 1.0
    torch_ratio = rows["torch"]["median_us"] / rows[floor_kernels.PATH]["median_us"]
    assert rows["torch"]["ratio_to_floor"] == pytest.approx(torch_ratio)


def test_a_tensor_map_is_encoded_again_only_when_its_address_changes():
    encoded = []
    lookup = cuda._map_of_last_address(lambda address: encoded.append(address) or f"map of {address}")
    assert [lookup(a) for a in (16, 16, 32, 32, 16)] == ["map of 16", "map of 16", "map of 32", "map of 32", "map of 16"]
    assert encoded == [16, 32, 16]

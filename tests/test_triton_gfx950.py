"""CPU: every gfx950 Triton candidate of the 6 benchmark and 4 test shapes, AOT-compiled for gfx950
(`triton.compile(ASTSource(...), target=GPUTarget("hip", "gfx950", 64))`, the launch-time
specializations included), uses the scaled MFMA, spills nothing to memory (nor in its K loop),
issues exactly its tile's work, and (its "hardware" plans) quantizes A with exactly one hardware fp4
convert per bf16 pair.

The MFMA check, defined:
- A tile's work per K step: the tile is BLOCK_M x BLOCK_N x BLOCK_K, and one
  v_mfma_scale_f32_16x16x128_f8f6f4 computes 16 x 16 x 128. Tiles of fewer than 16 rows still take
  a whole 16-row MFMA, so the work is ceil(BLOCK_M/16) * (BLOCK_N/16) * (BLOCK_K/128) instructions.
- The K loop: the one loop of the AMDGCN holding scaled MFMAs (from its label to the branch back).
  One iteration is one K step: Triton's pipeliner (num_stages 2) peels a step into a prologue /
  epilogue outside the loop but does not unroll it, so the body runs once per BLOCK_K.
- Every one of the program's num_warps waves runs that body; the count must therefore be
  waves x loop-body MFMAs == work. More means waves compute the same sub-tile (replicated waves);
  fewer would mean the loop is not the K loop we think it is.
Compiles are deduplicated by what reaches the compiler (plan, split-K or not, N and K divisibility,
K % BLOCK_K) and run once per pytest run, on two processes.
"""

import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
from triton.backends import backends  # noqa: E402

if "amd" not in backends:
    pytest.skip("the installed triton has no amd backend", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import gfx950_compare  # noqa: E402

from mxfp4_mm.backends import triton as triton_backend  # noqa: E402
from mxfp4_mm.backends.triton import plans as triton_plans  # noqa: E402

SHAPES = gfx950_compare.BENCHMARKS + gfx950_compare.TESTS
COMPUTE_UNITS = triton_plans.GFX950_COMPUTE_UNITS


def _compile_key(plan, n, k):
    split = triton_plans.split_k_steps(-(-k // plan.block_k), plan.split_k)[0] > 1
    return plan._replace(split_k=2 if split else 1), n % 16 == 0, k % 16 == 0, k % plan.block_k == 0


def _stats(job):
    from triton.backends.compiler import GPUTarget
    plan, n, k = job
    kernel = triton_backend.aot_compile(plan, n, k, GPUTarget("hip", "gfx950", 64))
    return gfx950_compare.isa_stats(kernel.asm["amdgcn"])


def _candidate_jobs():
    jobs = {}
    for m, n, k in SHAPES:
        for plan in triton_backend.candidates_for_arch(m, n, k, "gfx950", COMPUTE_UNITS):
            jobs.setdefault(_compile_key(plan, n, k), (plan, n, k))
    return jobs


@pytest.fixture(scope="module")
def compiled():
    jobs = _candidate_jobs()
    with ProcessPoolExecutor(2) as pool:
        return dict(zip(jobs, pool.map(_stats, jobs.values())))


def _label(key):
    return triton_backend.plan_label(key[0])


def tile_work_per_step(plan) -> int:
    return -(-plan.block_m // 16) * (plan.block_n // 16) * (plan.block_k // 128)


def test_every_shape_has_candidates_with_the_prior_first():
    for shape in SHAPES:
        plans = triton_backend.candidates_for_arch(*shape, "gfx950", COMPUTE_UNITS)
        assert plans and plans[0] == triton_plans.Plan(*triton_plans.PLANS["gfx950"][shape]), shape
        assert len({triton_backend.plan_label(p) for p in plans}) == len(plans), shape


def test_every_candidate_uses_the_scaled_mfma(compiled):
    for key, stats in compiled.items():
        assert stats["kernel_mfma"] > 0, _label(key)


def test_no_candidate_spills(compiled):
    """No VGPR spill, no scratch; an SGPR spill (into a VGPR lane, no memory) only outside the K loop:
    the exact fallback after the loop keeps a few kernel arguments live across it."""
    for key, stats in compiled.items():
        assert (stats["vgpr_spills"], stats["scratch"]) == (0, 0), (_label(key), stats)
        assert stats["sgpr_spills"] == 0 or stats["loop_lane_moves"] == 0, (_label(key), stats)


def test_mfma_count_per_tile_equals_the_tiles_work(compiled):
    for key, stats in compiled.items():
        plan = key[0]
        assert stats["loops_with_mfma"] == 1 and stats["loop_other_mfma"] == 0, (_label(key), stats)
        assert stats["loop_mfma"] * plan.num_warps == tile_work_per_step(plan), (_label(key), stats)


def test_hardware_convert_plans_convert_each_a_pair_once(compiled):
    """A "hardware" plan's K loop quantizes A with v_cvt_scalef32_pk_fp4_bf16, one per bf16 pair of
    the A tile and no wave repeating another's (BLOCK_M x BLOCK_K/2 pairs over num_warps x 64 lanes);
    an "arithmetic" plan issues none. The prior of every shape converts in hardware."""
    assert any(key[0].a_convert == "hardware" for key in compiled)
    for key, stats in compiled.items():
        plan = key[0]
        pairs_per_lane = plan.block_m * plan.block_k // 2 // (64 * plan.num_warps)
        want = pairs_per_lane if plan.a_convert == "hardware" else 0
        assert stats["loop_fp4_converts"] == want, (_label(key), stats)


def test_the_check_sees_replicated_waves():
    """Negative control: AMD's N=7168 K=2048 config (a 16x128 tile on 8 waves) with chunked B scale
    loads replicates under Triton 3.6 (each wave computes 16x32), and the check above must say so."""
    plan = triton_plans.aiter_plan((64, 7168, 2048))._replace(b_layout="vector")
    stats = _stats((plan, 7168, 2048))
    assert stats["loop_mfma"] * plan.num_warps == 2 * tile_work_per_step(plan)

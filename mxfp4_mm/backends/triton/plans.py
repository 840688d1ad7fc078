"""Plans of the Triton backend: the Plan type, the rules, and the tables by kernel arch, then (M, N, K).

A plan: (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages, waves_per_eu, GROUP_SIZE_M,
B cache modifier, B layout, A convert). Tuples of the first six fields are still plans (defaults fill
the rest).
- sm_90: measured (NVIDIA H200, torch 2.11 cu130, Triton 3.6, 2026-12-02; median µs in notes/triton.md)
  by a plan-sweep script since replaced by `python -m mxfp4_mm.tune`, which rewrites this table.
- gfx950: not measured; AMD's tuned configs of aiter's `gemm_a16wfp4` (AITER_CONFIGS below) as the
  prior, with the changes that tests/test_triton_gfx950.py enforces on the AOT-compiled AMDGCN:
  warps never exceed what gives every wave its own MFMAs (BLOCK_N/32 warps for tiles of 16+ rows,
  BLOCK_N/16 below: Triton 3.6 replicates the tile over the surplus waves), no spills (waves_per_eu
  capped, see `fitted`), B read with chunked scale loads ("vector") or from B_shuffle
  ("shuffled"), and A quantized with the hardware fp4 convert ("hardware").
"""

import collections

Plan = collections.namedtuple(
    "Plan", "block_m block_n block_k split_k num_warps num_stages waves_per_eu group_size_m cache_modifier b_layout "
            "a_convert", defaults=(0, 1, "", "gather", "arithmetic"))
# a_convert: how A's codes are made (kernels.A_*): "arithmetic" (any GPU), "hardware" (gfx950's
# v_cvt_scalef32_pk_fp4_bf16), "emulated" (that instruction in plain arithmetic: tests only),
# "folded" (no codes: A and B as exact bf16 values into a plain bf16 dot, wgmma on Hopper; offered
# on NVIDIA only, where dot_scaled is emulated with mma.sync).
A_CONVERTS = {"arithmetic": 0, "hardware": 1, "emulated": 2, "folded": 3}
# An MI355X's CUs: the gfx950 candidates are listed for it where checks run on another GPU or none
# (their narrower column tiles depend on the CU count).
GFX950_COMPUTE_UNITS = 256

# AMD's gfx950 configs (aiter/ops/triton/configs/gemm/gfx950-GEMM-A16WFP4*.json), per task shape:
# (BLOCK_M, BLOCK_N, BLOCK_K, NUM_KSPLIT, num_warps, num_stages, waves_per_eu, GROUP_SIZE_M,
# cache_modifier, preshuffled file?). Generic file unless N=7168 K=2048 or (preshuffled) N=2112 K=7168.
AITER_CONFIGS = {
    (4, 2880, 512): (4, 128, 512, 1, 4, 1, 2, 1, ".cg", False),         # M_LEQ_8
    (16, 2112, 7168): (16, 128, 512, 14, 4, 1, 1, 1, ".cg", True),      # PRESHUFFLED N=2112 K=7168, M_LEQ_16
    (32, 4096, 512): (8, 128, 512, 1, 8, 1, 2, 1, ".cg", False),        # M_LEQ_32
    (32, 2880, 512): (8, 128, 512, 1, 8, 1, 2, 1, ".cg", False),        # M_LEQ_32
    (64, 7168, 2048): (16, 128, 512, 1, 8, 2, 4, 1, ".cg", False),      # N=7168 K=2048, M_LEQ_64
    (256, 3072, 1536): (8, 128, 512, 1, 8, 1, 2, 1, ".cg", False),      # M_LEQ_256
    (8, 2112, 7168): (8, 128, 512, 14, 4, 1, 1, 1, ".cg", True),        # PRESHUFFLED N=2112 K=7168, M_LEQ_8
    (16, 3072, 1536): (4, 128, 512, 1, 4, 1, 2, 1, ".cg", False),       # M_LEQ_16
    (64, 3072, 1536): (8, 128, 512, 1, 8, 1, 2, 1, ".cg", False),       # M_LEQ_64
    (256, 2880, 512): (8, 128, 512, 1, 8, 1, 2, 1, ".cg", False),       # M_LEQ_256
}


def aiter_plan(shape) -> Plan:
    """AMD's config for a task shape as our plan, unchanged (B_q with gathered scales unless the
    config is from the preshuffled file)."""
    *fields, shuffled = AITER_CONFIGS[shape]
    return Plan(*fields, b_layout="shuffled" if shuffled else "gather")


def max_warps(block_m: int, block_n: int) -> int:
    """Most warps Triton 3.6 spreads over a dot_scaled tile on gfx950 without replicating it."""
    return block_n // (32 if block_m >= 16 else 16)


def a_elements_per_lane(plan: Plan) -> int:
    """bf16 A elements each lane quantizes per K step (wave64)."""
    return plan.block_m * plan.block_k // (64 * plan.num_warps)


def fitted(plan: Plan) -> Plan:
    """The plan with warps capped against replication, and waves_per_eu set to 2 where a lane
    quantizes 32+ A elements per step: at 3-4 (170-128 VGPRs) or unset those tiles spill."""
    plan = plan._replace(num_warps=min(plan.num_warps, max_warps(plan.block_m, plan.block_n)))
    if a_elements_per_lane(plan) >= 32 and plan.waves_per_eu != 2:
        plan = plan._replace(waves_per_eu=2)
    return plan


def _gfx950_prior(shape) -> Plan:
    plan = fitted(aiter_plan(shape))._replace(a_convert="hardware")
    return plan if plan.b_layout == "shuffled" else plan._replace(b_layout="vector")


# measured by python -m mxfp4_mm.tune on NVIDIA H200, torch 2.11.0+cu130, 2026-12-05
PLANS = {
    'sm_90': {
        (4, 2880, 512): (16, 64, 128, 4, 8, 2, 0, 1, '', 'gather', 'folded'),  # 8.10 us
        (8, 2112, 7168): (16, 128, 128, 14, 4, 2),
        (16, 2112, 7168): (16, 128, 128, 14, 4, 2, 0, 1, '', 'gather', 'folded'),  # 19.22 us
        (16, 3072, 1536): (16, 128, 128, 6, 4, 2),
        (32, 2880, 512): (16, 64, 128, 4, 4, 2, 0, 1, '', 'gather', 'folded'),  # 9.02 us
        (32, 4096, 512): (16, 64, 128, 4, 4, 2, 0, 1, '', 'gather', 'folded'),  # 9.82 us
        (64, 3072, 1536): (32, 128, 256, 3, 4, 2),
        (64, 7168, 2048): (64, 128, 128, 2, 8, 3, 0, 1, '', 'gather', 'folded'),  # 31.86 us
        (256, 2880, 512): (64, 128, 256, 1, 4, 3),
        (256, 3072, 1536): (64, 128, 128, 1, 8, 3, 0, 1, '', 'gather', 'folded'),  # 37.15 us
    },
    'gfx950': {shape: tuple(_gfx950_prior(shape)) for shape in AITER_CONFIGS},
}


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def split_k_steps(k_steps: int, split_k: int):
    """(split_k, steps per split) with no empty split: every split gets ceil(k_steps/split_k) steps but the last."""
    split_k = max(1, min(split_k, k_steps))
    steps = -(-k_steps // split_k)
    return -(-k_steps // steps), steps


def programs(m: int, n: int, k: int, plan: Plan) -> int:
    """Programs of the plan's launch: output tiles times the splits `split_k_steps` keeps."""
    tiles = -(-m // plan.block_m) * -(-n // plan.block_n)
    return tiles * split_k_steps(-(-k // plan.block_k), plan.split_k)[0]


def general_plan(m: int, n: int, k: int, compute_units: int) -> Plan:
    """Small-M GEMMs are bandwidth-bound: tiles of 16..64 rows by 64 columns, and split K until
    the launch has about one program per compute unit."""
    block_m = min(64, max(16, _next_pow2(m)))
    block_n = 64
    block_k = 256 if k >= 256 else 128
    tiles = -(-m // block_m) * -(-n // block_n)
    split_k = split_k_steps(-(-k // block_k), round(compute_units / tiles))[0]
    return Plan(block_m, block_n, block_k, split_k, 4, 2)


def _gfx950_variations(m, n, k, first: Plan, compute_units: int):
    """Neighbours of the prior worth timing on gfx950: its arithmetic-quantizing twin, the three B
    layouts, split-K halved and doubled, row tiles fitted to M, wider column tiles, and where the
    prior's grid leaves CUs idle narrower ones; each `fitted`, and at most 32 quantized A elements
    per lane (more spill)."""
    k_steps = -(-k // first.block_k)
    # The arithmetic twin first: it does not depend on the hardware convert behaving as documented.
    out = [first._replace(a_convert="arithmetic")]
    out += [first._replace(b_layout=layout) for layout in ("shuffled", "vector", "gather")]
    for split in {max(1, first.split_k // 2), min(k_steps, first.split_k * 2)}:
        out += [first._replace(split_k=split), first._replace(split_k=split, b_layout="vector")]
    for block_m in (16, 32):
        if block_m <= max(16, _next_pow2(m)) and block_m != first.block_m:
            out.append(first._replace(block_m=block_m))
    if n >= 4096:
        out.append(first._replace(block_n=256, num_warps=8))
    # AMD's configs for M <= 32 and K = 512 are their generic files' 128 columns: 23 to 128 programs
    # on 256 CUs at the task's K = 512 shapes, a latency-bound load each. Halving the columns (or
    # quartering them) while the grid still fits the CUs doubles the loads in flight; N = 2880 then
    # also has no half-empty last column.
    for narrower in (first._replace(block_n=first.block_n // 2), first._replace(block_n=first.block_n // 4)):
        if narrower.block_n >= 32 and programs(m, n, k, narrower) <= compute_units:
            out.append(narrower)
    out.append(first._replace(waves_per_eu=0))
    return [plan for plan in map(fitted, out) if a_elements_per_lane(plan) <= 32]


def _generic_variations(m, n, k, arch, first: Plan, compute_units: int):
    """Elsewhere: the B layouts and split-K halved / doubled around the measured plan; on NVIDIA
    ("sm_*") then the folded plans. A folded prior (a table the tuner wrote) keeps its gather layout
    (its folded twins in other layouts have never been memchecked) and offers its dot_scaled twin."""
    k_steps = -(-k // first.block_k)
    if first.a_convert == "folded":
        out = [first._replace(a_convert="arithmetic")]
    else:
        out = [first._replace(b_layout="vector"), first._replace(b_layout="shuffled")]
    out += [first._replace(split_k=max(1, first.split_k // 2)), first._replace(split_k=min(k_steps, first.split_k * 2))]
    out.append(first._replace(block_n=first.block_n * 2 if first.block_n < 128 else 64))
    return out + (folded_plans(m, n, k, first, compute_units) if arch.startswith("sm_") else [])


# The folded plans' wgmma tiles (BLOCK_M, BLOCK_N, BLOCK_K, num_warps), from M 64 and M 128 up: the
# tiles of fewest SASS instructions per K step without spills in an sm_90 AOT compile (notes/triton.md,
# "Folded operands"); 8 warps are two warpgroups (over N at 64 rows, over M at 128).
FOLDED_TILES = ((64, (64, 128, 128, 8)), (128, (128, 128, 64, 8)))


def folded_plans(m: int, n: int, k: int, first: Plan, compute_units: int):
    """The plain-bf16-dot plans (a_convert "folded"): the prior's own tile where it is an mma.sync
    one (below 64 rows; the larger priors spill when folded), then the wgmma tiles that M fills,
    each split along K into as many programs as fit one wave (these tiles hold one program per SM:
    a second wave costs more than the split saves)."""
    out = [first._replace(a_convert="folded")] if first.block_m < 64 and first.b_layout == "gather" else []
    for min_m, (block_m, block_n, block_k, warps) in FOLDED_TILES:
        if m >= min_m:
            tiles = -(-m // block_m) * -(-n // block_n)
            split_k = split_k_steps(-(-k // block_k), max(1, compute_units // tiles))[0]
            out.append(Plan(block_m, block_n, block_k, split_k, warps, 3, a_convert="folded"))
    return out


def variations(m: int, n: int, k: int, arch: str, first: Plan, compute_units: int):
    """Candidate plans beside `first` (the prior), most promising first; may not fit every N, K."""
    if arch == "gfx950":
        return _gfx950_variations(m, n, k, first, compute_units)
    return _generic_variations(m, n, k, arch, first, compute_units)

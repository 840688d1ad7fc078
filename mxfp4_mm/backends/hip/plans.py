"""Plans of the HIP backend on gfx950 (MI355X): kernel variant and split-K per (M, N, K).

Regenerate:
    python -m mxfp4_mm.tune --backends hip --write   # on an MI355X: time every candidate, rewrite PLANS
    python -m mxfp4_mm.tune --static                 # anywhere: PLANS = general_plan + the static model below

A variant (see mxfp4_gemm.hip, beside this file) fixes the tile (tile_m x tile_n), the MFMA shape
and the waves per block; its waves take the split's 256-K chunks round-robin. Grid:
(ceil(N / tile_n), ceil(M / tile_m), split_k). Split s of S covers chunks [s*C/S, (s+1)*C/S).
A plan with `specialized` runs a build of that tile for one shape and split (M, N, K, split-K as
compile-time constants); PLANS lists generic plans, `candidate_plans` adds the specialized ones.

Static model per shape, MI355X (256 CUs, ~8 TB/s HBM): `hbm` = bytes that must come from memory
(B codes + scales, A, C, fp32 partials written and read back when split), `l2` = bytes the blocks
read through the caches (every N tile re-reads A, every M tile re-reads B), `mfma` = scaled MFMA
instructions, `blocks` vs the 256 CUs, `chain` = chunks one wave walks in sequence. At these sizes
the kernels are latency-bound: few µs of launch and memory latency against < 1 µs of bandwidth.
"""

import collections

Plan = collections.namedtuple("Plan", "variant split_k specialized", defaults=(False,))

CHUNK_K = 256            # K per chunk: one shuffled-scale dword group
COMPUTE_UNITS = 256      # MI355X
TARGET_BLOCKS = 192      # a grid this large keeps 3/4 of the CUs loading without split-K
MAX_SPLIT = 16
MAX_PARTIAL_SHARE = 0.25  # split-K partial traffic (written + read) at most this share of B's bytes
MAX_SPECIALIZED = 6      # specialized candidates per shape: each is a compile at first use

# BEGIN PLANS (written by python -m mxfp4_mm.tune)
# static model (python -m mxfp4_mm.tune --static); not measured
PLANS = {
    # tests
    (8, 2112, 7168): Plan('mxfp4_gemm_m16n64w4', 7),
    (16, 3072, 1536): Plan('mxfp4_gemm_m16n64w4', 1),
    (64, 3072, 1536): Plan('mxfp4_gemm_m16n64w4', 1),
    (256, 2880, 512): Plan('mxfp4_gemm_m32n64w4', 1),
    # benchmarks
    # hbm 0.81 MB, l2 1.0 MB, 720 mfma16, 45 blocks / 256 CUs, chain 1
    #   no tile reaches 192 blocks: the most blocks; no split (chain 1 <= 2)
    (4, 2880, 512): Plan('mxfp4_gemm_m16n64w4', 1),
    # hbm 10.23 MB, l2 15.6 MB, 7392 mfma16, 231 blocks / 256 CUs, chain 1
    #   no tile reaches 192 blocks: the most blocks; split 7: chain 7 -> 1
    (16, 2112, 7168): Plan('mxfp4_gemm_m16n64w4', 7),
    # hbm 1.41 MB, l2 4.3 MB, 2048 mfma16, 128 blocks / 256 CUs, chain 1
    #   no tile reaches 192 blocks: the most blocks; no split (chain 1 <= 2)
    (32, 4096, 512): Plan('mxfp4_gemm_m16n64w4', 1),
    # hbm 1.00 MB, l2 3.0 MB, 1440 mfma16, 90 blocks / 256 CUs, chain 1
    #   no tile reaches 192 blocks: the most blocks; no split (chain 1 <= 2)
    (32, 2880, 512): Plan('mxfp4_gemm_m16n64w4', 1),
    # hbm 8.98 MB, l2 45.0 MB, 28672 mfma16, 224 blocks / 256 CUs, chain 2
    #   least L2 traffic of the tiles with >= 192 blocks; no split (chain 2 <= 2)
    (64, 7168, 2048): Plan('mxfp4_gemm_m32n64w4', 1),
    # hbm 4.87 MB, l2 38.9 MB, 36864 mfma16, 192 blocks / 256 CUs, chain 2
    #   least L2 traffic of the tiles with >= 192 blocks; no split (chain 2 <= 2)
    (256, 3072, 1536): Plan('mxfp4_gemm_m32n128w4', 1),
}
# END PLANS


def chunks_of(k: int) -> int:
    return -(-k // CHUNK_K)


def grid_blocks(m: int, n: int, variant) -> int:
    """Blocks of one split: the number of output tiles."""
    return -(-m // variant.tile_m) * -(-n // variant.tile_n)


def chain(k: int, variant, split_k: int) -> int:
    """Chunks the busiest wave of a block walks in sequence."""
    per_split = -(-chunks_of(k) // split_k)
    return -(-per_split // variant.waves)


def cache_read_bytes(m: int, n: int, k: int, variant) -> int:
    """Bytes blocks read through L2: A (bf16) once per N tile, B (fp4 + scales) once per M tile."""
    a_bytes, b_bytes = m * k * 2, n * k // 2 + n * k // 32
    return -(-n // variant.tile_n) * a_bytes + -(-m // variant.tile_m) * b_bytes


def partial_bytes(m: int, n: int, split_k: int) -> int:
    """fp32 partials written and read back by the in-launch split-K reduction."""
    return 0 if split_k == 1 else 2 * split_k * m * n * 4


def choose_variant(m: int, n: int, k: int, variants):
    """Tiles no taller than M needs; of those whose grid reaches TARGET_BLOCKS, the one reading the
    fewest bytes through L2 (ties: fewer M tiles, as B is the operand that comes from HBM);
    if no grid is that large, the one with the most blocks (latency-bound: more loads in flight)."""
    rows = -(-m // 16) * 16
    fitting = [v for v in variants if v.tile_m <= rows] or [min(variants, key=lambda v: v.tile_m)]
    large = [v for v in fitting if grid_blocks(m, n, v) >= TARGET_BLOCKS]
    if large:
        return min(large, key=lambda v: (cache_read_bytes(m, n, k, v), -(-m // v.tile_m)))
    return min(fitting, key=lambda v: (-grid_blocks(m, n, v), cache_read_bytes(m, n, k, v)))


def choose_split(m: int, n: int, k: int, variant) -> int:
    """Split K only when a wave would walk 3+ chunks (the kernel prefetches one chunk of B ahead,
    so a chain of 2 costs about one memory latency, less than the split's write-fence-reduce),
    then to the shortest chain whose grid still fits the CUs and whose partials stay small."""
    if chain(k, variant, 1) <= 2:
        return 1
    blocks, b_bytes = grid_blocks(m, n, variant), n * k // 2
    fits = [1] + [s for s in range(2, min(chunks_of(k), MAX_SPLIT) + 1)
                  if blocks * s <= COMPUTE_UNITS and partial_bytes(m, n, s) <= MAX_PARTIAL_SHARE * b_bytes]
    return min(fits, key=lambda s: (chain(k, variant, s), s))


def general_plan(m: int, n: int, k: int, variants) -> Plan:
    """The plan for any valid shape, from the variants on offer (objects with name, tile_m,
    tile_n, waves)."""
    variant = choose_variant(m, n, k, list(variants))
    return Plan(variant.name, choose_split(m, n, k, variant))


def split_choices(m: int, n: int, k: int, variant) -> list:
    """Split-K values worth timing for a tile: none, the rule's, and (when a wave walks several chunks)
    the smallest split giving every wave one chunk, if its grid stays within two blocks per CU."""
    choices = {1, choose_split(m, n, k, variant)}
    blocks = grid_blocks(m, n, variant)
    for s in range(2 if chain(k, variant, 1) > 1 else 1, min(chunks_of(k), MAX_SPLIT) + 1):
        if chain(k, variant, s) == 1:
            if blocks * s <= 2 * COMPUTE_UNITS:
                choices.add(s)
            break
    return sorted(choices)


def prior(m: int, n: int, k: int, variant, split_k: int) -> tuple:
    """Static ordering key (smaller: more likely fast): rounds of blocks over the CUs, the chunk chain
    a wave walks, bytes read through L2, then the split."""
    rounds = -(-grid_blocks(m, n, variant) * split_k // COMPUTE_UNITS)
    return rounds, chain(k, variant, split_k), cache_read_bytes(m, n, k, variant), split_k


def candidate_plans(m: int, n: int, k: int, tiles, table_plan: Plan) -> list:
    """Specialized builds of the table plan's tile and split first, then the fitting tiles (tile_m no
    taller than M rounded up to 16) x their split choices by `prior`, MAX_SPECIALIZED in all, then
    the generic table plan."""
    rows = -(-m // 16) * 16
    tiles = list(tiles)
    fitting = [v for v in tiles if v.tile_m <= rows] or [min(tiles, key=lambda v: v.tile_m)]
    ranked = sorted(((prior(m, n, k, v, s), Plan(v.name, s, True)) for v in fitting for s in split_choices(m, n, k, v)),
                    key=lambda entry: entry[0])
    first = Plan(table_plan.variant, table_plan.split_k, True)
    specialized = list(dict.fromkeys([first] + [plan for _, plan in ranked]))[:MAX_SPECIALIZED]
    return specialized + [table_plan._replace(specialized=False)]

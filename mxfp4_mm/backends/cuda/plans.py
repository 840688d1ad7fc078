"""Plans for the CUDA backend: the Plan type of mxfp4_gemm_sm90.cu, the PipePlan type of
mxfp4_gemm_sm90_pipe.cu, the Fp8Plan of mxfp4_gemm_sm90_fp8.cu and the DequantPlan of
mxfp4_dequant_sm90.cu + cuBLAS (all beside this file),
their geometry rules (they mirror the constexprs at the top of
the kernels), the cost models, and the table by (M, N, K), whose entries may be of any of these types.

Pure data and arithmetic: nothing here imports a backend (the backend, `__init__.py`, imports this module).
A kernel build serves every M (M is a launch argument), and plans are picked per M class
(`m_class`): the listed plan of the shape, else the listed plan of its M class, else `general_plan`
for the class, so a caller whose batch size varies builds one kernel per class.

Regenerate on an H200 or H100 (rewrites PLANS below):  python3 -m mxfp4_mm.tune --write
"""

import collections

MAX_SMEM = 227 * 1024
SM_SMEM = 228 * 1024  # shared memory of an SM (sm_90), for CTAs that share one
SMEM_RESERVED_PER_CTA = 1024  # shared memory the driver keeps for each resident CTA

# bm: rows of M per CTA; wn: warps along N; nt: 16-row N tiles per warp; wk: warps along K;
# split_k: CTAs along K (one cluster); cn: neighbouring N tiles quantizing A together (when > 1;
# cluster size cn * split_k, at most 8); ring: B chunks in flight per thread (when > 0; 0 = all).
Plan = collections.namedtuple("Plan", "bm wn nt wk split_k cn ring", defaults=(1, 0))

# The pipe kernel (mxfp4_gemm_sm90_pipe.cu, sm_90a only). kind: always "pipe" (a table entry is a plain
# tuple; its first field tells the two plan types apart); bn: rows of N per CTA (64 per warpgroup);
# bm: rows of M per CTA (the wgmma n); split_k: CTAs along K (one cluster); kc: K per pipeline
# chunk; stages: slots of the copy ring (chunks are copied stages - 2 ahead, or stages ahead with
# copy warps; enough stages copy a CTA's whole K range up front); cw: warps after the warpgroups that
# only issue the copies (0: every thread does); tma: 1 = the copy warp issues tensor-map copies
# (one thread keeps the ring in flight; needs cw = 1).
PipePlan = collections.namedtuple("PipePlan", "kind bn bm split_k kc stages cw tma", defaults=(64, 4, 0, 0))
PIPE = "pipe"
# Both operands dequantized to bf16 by mxfp4_dequant_sm90.cu, then one cuBLAS bf16 GEMM (torch.mm):
# two launches and N*K*2 bytes of bf16 B per call, for shapes where the MMAs dominate. kind: "dq".
DequantPlan = collections.namedtuple("DequantPlan", "kind", defaults=("dq",))
DEQUANT = "dq"
DEQUANT_THREADS = 256
# The fp8 kernel (mxfp4_gemm_sm90_fp8.cu, sm_90a): A quantized once per call to e4m3 with per-row
# exponents by a first kernel, then its programmatic dependent: one CTA per 64 rows of B and mp rows
# of A over all of its K range, B codes converted to e4m3 in shared memory, e4m3 wgmma. kind: "f8";
# mp: rows of A per CTA (the wgmma n: M's class up to 128; larger M takes several tiles of 128);
# stages: slots of its copy ring (`fp8_plan` fills as many as fit); split_k: CTAs along K (one
# cluster, partial tiles summed in rank order); cg: consumer warpgroups sharing each chunk's blocks;
# mc: neighbouring B tiles sharing A's copies by multicast (a cluster along N; N's tiles a multiple of it);
# ahead: a CTA's first chunks of B converted into shared memory before A is waited for (0: none);
# cv: converter warpgroups (cg of them) store B's e4m3 chunks to a ring of cv slots that one more
# warpgroup multiplies with A's (a ring of as many slots) from shared memory (0: the cg warpgroups
# convert into registers and multiply themselves); stages is then the depth of B's code ring.
Fp8Plan = collections.namedtuple("Fp8Plan", "kind mp stages split_k cg mc ahead cv", defaults=(1, 1, 1, 0, 0))
FP8 = "f8"
FP8_KC = 256  # K per chunk (the kernel's KC)
FP8_BN = 64   # rows of B per CTA
FP8_MPS = (8, 16, 32, 64, 128)  # the wgmma n sizes of the e4m3 wrappers in wgmma_sm90a.h
FP8_CGS = (1, 2, 4)  # consumer warpgroups: each takes 8 / cg of a chunk's 32-value blocks
FP8_MCS = (1, 2, 4)  # B tiles sharing A's copies (1/mc of each A chunk per CTA: whole 16-byte units)
FP8_MAX_M_TILES = 64  # tiles of mp rows along the grid's z
FP8_STATIC_SMEM = 2048  # barriers and per-row exponents (ptxas -v: 1024-2048 bytes)
PIPE_BNS = (64, 128, 192, 256)
PIPE_BMS = (16, 32, 64, 128, 256)  # the wgmma n sizes of the "SS" wrappers in wgmma_sm90a.h
PIPE_KCS = (64, 128)
PIPE_MAX_STAGES = 16

# measured by python -m mxfp4_mm.tune on NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, 2026-12-07 (or as an entry notes)
PLANS = {
    (4, 2880, 512): (8, 3, 1, 4, 1, 4, 0),  # NVIDIA H200, 2026-12-05
    (8, 2112, 7168): ('f8', 8, 10, 3, 2),  # 12.74 us, NVIDIA H100 80GB HBM3, 2026-12-07
    (16, 2112, 7168): ('f8', 16, 10, 3, 2),  # 13.12 us, NVIDIA H100 80GB HBM3, 2026-12-07
    (16, 3072, 1536): (16, 4, 2, 2, 4),  # NVIDIA H200, 2026-12-05
    (32, 2880, 512): (16, 3, 1, 4, 1, 4, 0),  # NVIDIA H200, 2026-12-05
    (32, 4096, 512): (16, 2, 2, 4, 1, 2, 0),  # NVIDIA H200, 2026-12-05
    (64, 3072, 1536): (64, 4, 1, 2, 4),  # NVIDIA H200, 2026-12-05
    (64, 7168, 2048): ('f8', 64, 4, 1, 2),  # 12.18 us, NVIDIA H100 80GB HBM3, 2026-12-07
    (256, 2880, 512): (64, 3, 2, 2, 2),  # NVIDIA H200, 2026-12-05
    (256, 3072, 1536): ('f8', 128, 5),  # 12.26 us, NVIDIA H100 80GB HBM3, 2026-12-07
}


# ---- plan geometry (mirrors the constexprs at the top of the kernel) ----------------------

def chunks(k: int) -> int:
    return -(-k // 128)


def chunks_per_warp(k: int, plan: Plan) -> int:
    return -(-(-(-chunks(k) // plan.split_k)) // plan.wk)


def fp8_stage_bytes(mp: int) -> int:
    """A chunk in the fp8 kernel's ring: 64 rows of B codes and mp rows of A's e4m3 bytes."""
    return FP8_BN * FP8_KC // 2 + mp * FP8_KC


def fp8_threads(plan) -> int:
    """The consumer warpgroups and the copy warp; with cv, the MMA warpgroup and a second copy warp."""
    return 128 * plan.cg + 32 + (160 if plan.cv else 0)


def fp8_m_tiles(m: int, plan) -> int:
    return -(-m // plan.mp)


FP8_QUANT_MAX_THREADS = 512  # a quantization CTA's threads; past 512 words a thread takes several


def fp8_quant_threads(k: int) -> int:
    """Threads of a quantization CTA (a row of A): one per 8 values, in whole warps; past
    FP8_QUANT_MAX_THREADS words each thread takes ceil(words / FP8_QUANT_MAX_THREADS) of them. At
    K = 7168, 448 threads of 2 words were 0.2-0.36 us faster a call than 896 of one (16x2112x7168;
    8x2112x7168 0.1-0.2; H100, two rounds), while at K = 1536 and 2048 halving the threads cost 0.1
    (notes/results/2026-12-07/h100-quant-threads/). The kernel is built for it (QUANT_THREADS)."""
    words = k // 8
    words_per_thread = -(-words // FP8_QUANT_MAX_THREADS)
    threads = -(-words // words_per_thread)
    return -(-threads // 32) * 32


def fp8_tiles(m: int, n: int) -> int:
    """CTAs of one K range at M's mp: B tiles x M tiles."""
    return -(-n // FP8_BN) * -(-m // fp8_mp(m))


def fp8_mp(m: int) -> int:
    """Rows of A per CTA for M: its class, up to the widest e4m3 wgmma (128; larger M takes tiles)."""
    return min(m_class(m), FP8_MPS[-1])


def fp8_ahead_chunk_bytes(mp: int) -> int:
    """A chunk converted ahead: 64 rows of B as e4m3 and mp rows of A's e4m3 bytes."""
    return (FP8_BN + mp) * FP8_KC


def fp8_smem_bytes(k: int, plan) -> int:
    """The fp8 kernel's dynamic shared memory: the ring, the chunks converted ahead, the CTA's B
    scales (two 32-row groups over all of K) and 1 KB of slack for the ring's 1024-byte alignment."""
    scale_cols = (k // 32 + 7) // 8 * 8
    return fp8_ring_bytes(plan) + 2 * scale_cols * 32 + 1024


def fp8_ring_bytes(plan) -> int:
    """The ring (B's codes and A, or with cv B's codes only), the chunks converted ahead, and with cv
    the converted ring and A's."""
    b_slot = FP8_BN * FP8_KC // 2 if plan.cv else fp8_stage_bytes(plan.mp)
    return plan.stages * b_slot + (plan.ahead + plan.cv) * fp8_ahead_chunk_bytes(plan.mp)


def fp8_plan(m: int, k: int, split_k: int = 1, cg: int = 1):
    """The fp8 plan for M's class (tiles of 128 rows above it), split_k and cg with as many ring
    stages as fit (at most a CTA's chunks, at most 16); None where the kernel does not serve the shape."""
    mp = fp8_mp(m)
    if k % FP8_KC or not 1 <= split_k <= min(8, k // FP8_KC):
        return None
    room = MAX_SMEM - FP8_STATIC_SMEM - fp8_smem_bytes(k, Fp8Plan(FP8, mp, 0))
    stages = max(2, min(-(-(k // FP8_KC) // split_k), 16, room // fp8_stage_bytes(mp)))
    plan = Fp8Plan(FP8, mp, stages, split_k, cg)
    return plan if fp8_is_valid(m, FP8_BN, k, plan) else None


def fp8_plans(m: int, n: int, k: int, compute_units: int = 132, limit: int = 12) -> list:
    """The fp8 plans offered for a shape: no split, then the three largest splits that keep every
    CTA on its own SM (tiles x split <= compute_units; clusters of 4 at 33 tiles already spill into a
    second wave on an H100, so the tuner measures a few). Each with 2, 4 and 1 consumer warpgroups
    at the deepest ring that fits, 2 and 1 at 4 stages (fewer A copies in flight at once: 15.4 vs 17.0 us
    at 64x7168x2048 with one warpgroup, H100), then A's copies shared by 4 and 2 B tiles (multicast);
    the unsplit plans last where the tiles fill less than half the SMs. After the unsplit plans, one
    plan with two CTAs an SM (`fp8_paired_plan`). Past the limit, the
    plans that convert B's first chunks ahead of A (`fp8_ahead_plans`) and those with converter
    warpgroups (`fp8_cv_plans`)."""
    if k % FP8_KC:
        return []
    tiles = fp8_tiles(m, n)
    splits = [s for s in range(2, min(8, k // FP8_KC) + 1) if tiles * s <= compute_units][-3:]
    # Where the tiles alone fill less than half the SMs the unsplit plans come last, so the limit cuts
    # them rather than splits: at 16x2112x7168 (33 tiles) they were 17.4-19.0 us against 12.9-13.9 for
    # splits 3 and 4, and split 3 with one warpgroup had not been measured (H100, 2026-12-07,
    # notes/results/2026-12-07/h100-bench-humming/tune.json).
    order = splits[::-1] + [1] if 2 * tiles < compute_units else [1] + splits[::-1]
    plans = []
    for split in order:
        two, four, one = (fp8_plan(m, k, split, cg) for cg in (2, 4, 1))
        shallow = [plan._replace(stages=min(plan.stages, 4)) for plan in (two, one) if plan]
        shared = [plan._replace(mc=mc) for mc in (4, 2) for plan in (two, four) if plan]
        plans += [two, four, one] + shallow + shared
        if split == 1:
            plans.append(fp8_paired_plan(m, n, k, compute_units))
    offered = list(dict.fromkeys(plan for plan in plans if plan is not None and fp8_is_valid(m, n, k, plan)))[:limit]
    return offered + fp8_ahead_plans(m, n, k, compute_units) + fp8_cv_plans(m, n, k, compute_units)


def fp8_ahead_plans(m: int, n: int, k: int, compute_units: int = 132) -> list:
    """Plans that convert a CTA's first chunks of B into shared memory while A is on its way (`ahead`),
    for M up to 64 and K of 8 chunks or more, where A lands microseconds after B's first chunks
    (notes/cuda.md): the splits of `fp8_plans` (no split where the tiles alone fill the GPU), two
    warpgroups and one, a 4-stage ring, and as many chunks ahead as the shared memory holds, at least
    one chunk of every CTA left to the ring."""
    if k % FP8_KC or fp8_mp(m) > 64 or k // FP8_KC < 8:
        return []
    mp, tiles = fp8_mp(m), fp8_tiles(m, n)
    splits = [s for s in range(1, min(8, k // FP8_KC) + 1) if tiles * s <= compute_units][-3:]
    plans = []
    for split in splits[::-1]:
        for cg in (2, 1):
            ring = Fp8Plan(FP8, mp, 4, split, cg)
            room = MAX_SMEM - FP8_STATIC_SMEM - fp8_smem_bytes(k, ring)
            ahead = min(room // fp8_ahead_chunk_bytes(mp), k // FP8_KC // split - 1)
            if ahead >= 1:
                plans.append(ring._replace(ahead=ahead))
    return [plan for plan in plans if fp8_is_valid(m, n, k, plan)]


def fp8_cv_plans(m: int, n: int, k: int, compute_units: int = 132) -> list:
    """Plans whose converter warpgroups (cg) store B's e4m3 chunks for one MMA warpgroup (`cv`): the
    converters need no accumulators, so two of them fit beside it, and they run ahead of A by the
    converted ring. No split and the two largest splits of `fp8_plans`; converters 2 and 1; a
    converted ring of 4 with B's code ring as deep as fits, and the deepest converted ring with 4."""
    if k % FP8_KC or k // FP8_KC < 2:
        return []
    mp, tiles = fp8_mp(m), fp8_tiles(m, n)
    splits = [s for s in range(2, min(8, k // FP8_KC) + 1) if tiles * s <= compute_units][-2:]
    plans = []
    for split in [1] + splits[::-1]:
        per_cta = -(-(k // FP8_KC) // split)
        for cg in (2, 1):
            base = Fp8Plan(FP8, mp, 2, split, cg, 1, 0, 2)
            room = MAX_SMEM - FP8_STATIC_SMEM - fp8_smem_bytes(k, base._replace(stages=0, cv=0))
            b_slot, x_slot = FP8_BN * FP8_KC // 2, fp8_ahead_chunk_bytes(mp)
            for cv in (min(4, per_cta), (room - 4 * b_slot) // x_slot):
                cv = max(2, min(cv, per_cta, 16))
                stages = max(2, min(per_cta, 16, (room - cv * x_slot) // b_slot))
                plans.append(base._replace(stages=stages, cv=cv))
    return list(dict.fromkeys(plan for plan in plans if fp8_is_valid(m, n, k, plan)))


def fp8_paired_plan(m: int, n: int, k: int, compute_units: int = 132):
    """The largest split whose CTAs fit two an SM (a 2-stage ring, one warpgroup): twice the warps a
    scheduler to hide the chunk loop's latencies. 14.70 against 15.47 us for the best one-CTA-an-SM
    plan at 16x2112x7168 (split 8, H100, 2026-12-06); None where two do not fit."""
    tiles = fp8_tiles(m, n)
    splits = [s for s in range(1, min(8, k // FP8_KC) + 1) if tiles * s <= 2 * compute_units]
    deepest = fp8_plan(m, k, splits[-1], 1) if splits else None
    if deepest is None:
        return None
    plan = deepest._replace(stages=2)
    fits_two = (2 * (fp8_smem_bytes(k, plan) + FP8_STATIC_SMEM + SMEM_RESERVED_PER_CTA) <= SM_SMEM
                and fp8_registers(plan) <= fp8_register_limit(plan, ctas=2))
    return plan if fits_two else None


def fp8_registers(plan) -> int:
    """A consumer thread's registers, estimated: two fp32 tiles of mp / 2 (the partial sum and its fp32
    promotion), two sets of B fragments (4 a k32 step: the chunk converted and the one multiplied) and
    ~40 for addresses and the conversion (nvcc 13.0 gave up to 20 more: the limit has the room)."""
    if plan.cv:  # the MMA warpgroup's two tiles, or a converter's one set of fragments
        return max(plan.mp + 40, 4 * (FP8_KC // 32 // plan.cg) + 48)
    return plan.mp + 2 * 4 * (FP8_KC // 32 // plan.cg) + 40


def fp8_register_limit(plan, ctas: int = 1) -> int:
    """What ptxas can give a thread without spilling, with `ctas` CTAs an SM: a scheduler's quarter of
    the register file over its warps (the CTAs' warps dealt round the 4 schedulers), in steps of 8, at
    most 255."""
    warps_a_scheduler = -(-ctas * fp8_threads(plan) // 32 // 4)
    return min(255, 65536 // 4 // (32 * warps_a_scheduler) // 8 * 8)


def fp8_is_valid(m: int, n: int, k: int, plan) -> bool:
    return (isinstance(plan, Fp8Plan) and plan.kind == FP8 and plan.mp in FP8_MPS
            and m >= 1 and fp8_m_tiles(m, plan) <= FP8_MAX_M_TILES
            and plan.cg in FP8_CGS and fp8_registers(plan) <= fp8_register_limit(plan)
            and plan.mc in FP8_MCS and -(-n // FP8_BN) % plan.mc == 0 and plan.mc * plan.split_k <= 8
            and k % FP8_KC == 0 and k // 32 <= 1024 and 2 <= plan.stages <= 16
            and 1 <= plan.split_k <= min(8, k // FP8_KC)
            and 0 <= plan.ahead < k // FP8_KC // plan.split_k and not (plan.ahead and plan.mc > 1)
            and (plan.cv == 0 or (2 <= plan.cv <= 16 and plan.mc == 1 and plan.ahead == 0))
            and plan.mp * (FP8_BN + 4) * 4 <= fp8_ring_bytes(plan)
            and fp8_smem_bytes(k, plan) + FP8_STATIC_SMEM <= MAX_SMEM)


def smem_bytes(m: int, n: int, k: int, plan) -> int:
    if isinstance(plan, DequantPlan):
        return 0
    if isinstance(plan, Fp8Plan):
        return fp8_smem_bytes(k, plan)
    if isinstance(plan, PipePlan):
        return pipe_smem_bytes(plan)
    threads = plan.wn * plan.wk * 32
    ch_max = -(-chunks(k) // plan.split_k)
    chw = chunks_per_warp(k, plan)
    bn = plan.wn * plan.nt * 16
    b_slots = min(chw, plan.ring) if plan.ring else chw
    b = b_slots * plan.nt * 2 * threads * 16
    a = plan.bm // 8 * ch_max * 2048
    s = -(-chw * plan.nt * 2 * threads // 16) * 16
    partial = plan.wk * plan.bm * (bn + 4) * 4
    return max(b + a + s, partial)


def grid(m: int, n: int, plan):
    if isinstance(plan, Fp8Plan):
        return (-(-n // FP8_BN), plan.split_k, fp8_m_tiles(m, plan))
    if isinstance(plan, PipePlan):
        return (-(-n // plan.bn), plan.split_k, -(-m // plan.bm))
    n_tiles, m_tiles = -(-n // (plan.wn * plan.nt * 16)), -(-m // plan.bm)
    if plan.cn > 1:  # 1-D clusters of cn N tiles x split_k along x (tiles padded to cn)
        return (-(-n_tiles // plan.cn) * plan.cn * plan.split_k, 1, m_tiles)
    return (n_tiles, plan.split_k, m_tiles)


def dequant_grid(m: int, n: int, k: int, compute_units: int = 132):
    """The DequantPlan kernel's grid: a thread per 8 values of B and of A, at most 16 CTAs per SM
    (the kernel strides over the rest)."""
    return (max(1, min(-(-(m + n) * (k // 8) // DEQUANT_THREADS), 16 * compute_units)), 1, 1)


def is_valid(m: int, n: int, k: int, plan) -> bool:
    if isinstance(plan, DequantPlan):
        return plan.kind == DEQUANT
    if isinstance(plan, Fp8Plan):
        return fp8_is_valid(m, n, k, plan)
    if isinstance(plan, PipePlan):
        return pipe_is_valid(m, n, k, plan)
    threads = plan.wn * plan.wk * 32
    ch_max = -(-chunks(k) // plan.split_k)
    return (plan.bm % 8 == 0 and 8 <= plan.bm <= 256 and 1 <= plan.split_k <= min(8, chunks(k))
            and plan.cn >= 1 and plan.cn * plan.split_k <= 8 and plan.ring >= 0
            and 32 <= threads <= 1024 and plan.nt * plan.bm // 8 * 4 <= 128
            and -(-ch_max // plan.wk) <= 32 and -(-ch_max // plan.wk) * plan.nt * 2 <= 64
            and smem_bytes(m, n, k, plan) <= MAX_SMEM)


def compile_options(n: int, k: int, plan) -> tuple:
    """The kernel's -D flags: N, K and the plan (not M, which the launch passes)."""
    if isinstance(plan, DequantPlan):
        return (f"-DGK={k}",)
    if isinstance(plan, Fp8Plan):
        split = (f"-DSPLITK={plan.split_k}",) if plan.split_k > 1 else ()
        groups = (f"-DCG={plan.cg}",) if plan.cg > 1 else ()
        multicast = (f"-DMC={plan.mc}",) if plan.mc > 1 else ()
        ahead = (f"-DAHEAD={plan.ahead}",) if plan.ahead else ()
        converted = (f"-DCV={plan.cv}",) if plan.cv else ()
        return (f"-DGN={n}", f"-DGK={k}", f"-DMP={plan.mp}", f"-DSTAGES={plan.stages}",
                f"-DQUANT_THREADS={fp8_quant_threads(k)}") + split + groups + multicast + ahead + converted
    if isinstance(plan, PipePlan):
        values = dict(GN=n, GK=k, BN=plan.bn, BM=plan.bm, SPLITK=plan.split_k, KC=plan.kc, STAGES=plan.stages)
        if plan.cw:
            values["COPY_WARPS"] = plan.cw
        if plan.tma:
            values["COPY_TMA"] = 1
        return tuple(f"-D{key}={value}" for key, value in values.items())
    values = dict(GN=n, GK=k, BM=plan.bm, WN=plan.wn, NT=plan.nt, WK=plan.wk, SPLITK=plan.split_k)
    if plan.cn > 1:
        values["CN"] = plan.cn
    if plan.ring > 0:
        values["RING"] = plan.ring
    return tuple(f"-D{key}={value}" for key, value in values.items())


def plan_cost(m: int, n: int, k: int, plan, compute_units: int = 132) -> float:
    """Rough cost of a valid plan: per-CTA bytes, A quantization and MMA work, times the number
    of waves of CTAs, plus split-K reduction traffic."""
    ctas = 1
    for d in grid(m, n, plan):
        ctas *= d
    bm, bn, split_k = plan.bm, plan.wn * plan.nt * 16, plan.split_k
    ks = -(-(-(-k // 128)) // split_k) * 128
    per_cta = (bn * ks / 2) / 33e3 + (bm * ks * 10 + bn * ks * 2.4) / 5e5 \
        + (bn * bm * ks / 2048) * 6 / 4 / 1900 + split_k * plan.wk * bm * bn * 4 / 2e5
    threads = plan.wn * plan.wk * 32
    return -(-ctas // compute_units) * per_cta + (0.3 if threads < 128 else 0.0)


def general_plan(m: int, n: int, k: int, compute_units: int = 132):
    """The valid plan with the lowest `plan_cost`."""
    bm = min(64, -(-m // 8) * 8)
    best, best_cost = None, None
    for wn in (1, 2, 3, 4, 6, 8):
        for nt in (1, 2, 3, 4):
            for wk in (1, 2, 4):
                for split_k in (1, 2, 4, 8):
                    plan = Plan(bm, wn, nt, wk, split_k)
                    if not is_valid(m, n, k, plan):
                        continue
                    cost = plan_cost(m, n, k, plan, compute_units)
                    if best_cost is None or cost < best_cost:
                        best, best_cost = plan, cost
    return best


# ---- which plan for a shape ------------------------------------------------------------------

def m_class(m: int) -> int:
    """The top of M's class (8, 16, 32, 64, 128, ...): plans are picked per class."""
    return max(8, 1 << (m - 1).bit_length())


def table_plan(m: int, n: int, k: int):
    """The listed plan of (m, n, k), else that of the largest listed M of m's class with this
    (n, k), else None."""
    listed = PLANS.get((m, n, k))
    if listed is None:
        same_class = [lm for lm, ln, lk in PLANS if (ln, lk) == (n, k) and m_class(lm) == m_class(m)]
        listed = PLANS[(max(same_class), n, k)] if same_class else None
    if listed is None:
        return None
    return plan_from_fields(listed)


def plan_from_fields(fields):
    """A plan from its fields as a table lists them: the first field tells the plan types apart."""
    if fields[0] == DEQUANT:
        return DequantPlan(*fields)
    if fields[0] == FP8:
        return Fp8Plan(*fields)
    return PipePlan(*fields) if fields[0] == PIPE else Plan(*fields)


# From this M class up, a shape the table does not list takes the DequantPlan: the cost model's
# mma.sync plans there were 1.1-11x slower than it on the H200 (11 shapes, M 128-4096, notes/cuda.md).
DEQUANT_FROM_M = 128


def plan_for_shape(m: int, n: int, k: int, compute_units: int = 132):
    """The table's plan for m's class; else, from M class DEQUANT_FROM_M, the DequantPlan; else the
    cost model's mma.sync plan for the top of the class."""
    listed = table_plan(m, n, k)
    if listed is not None:
        return listed
    return DequantPlan() if m_class(m) >= DEQUANT_FROM_M else general_plan(m_class(m), n, k, compute_units)


# Base plans of the wide grid (the cost model ranks them), then their (cn, ring) variants in the
# order the measured winners favour (notes/cuda.md: cluster-shared A, a B ring at long K).
GRID_BMS = (16, 32, 64, 128)
GRID_VARIANTS = ((2, 0), (4, 0), (2, 2), (1, 2), (1, 0), (4, 2))
VARIANTS_PER_BASE = 3


def _is_useful(m: int, n: int, k: int, plan: Plan) -> bool:
    """Valid, no more N tiles sharing A than there are, and a ring shorter than the warp's chunk
    count (else it is the ring-less layout)."""
    n_tiles = -(-n // (plan.wn * plan.nt * 16))
    return (is_valid(m, n, k, plan) and plan.cn <= n_tiles
            and (not plan.ring or plan.ring < chunks_per_warp(k, plan)))


def ranked_plans(m: int, n: int, k: int, compute_units: int = 132, limit: int = 24) -> list:
    """Up to `limit` mma.sync plans, most promising first: base plans (rows of M per CTA up to M's,
    warps, tiles, split-K) by `plan_cost`, those filling 0.5-2 waves of CTAs first, each followed
    by its first VARIANTS_PER_BASE useful (cn, ring) variants."""
    m_pad = -(-m // 8) * 8
    bases = set()
    for bm in GRID_BMS:
        for wn in (1, 2, 3, 4, 6, 8):
            for nt in (1, 2, 3, 4):
                for wk in (1, 2, 4):
                    for split_k in (1, 2, 4, 8):
                        plan = Plan(min(bm, m_pad), wn, nt, wk, split_k)
                        if is_valid(m, n, k, plan):
                            bases.add(plan)

    def rank(plan):
        ctas = 1
        for d in grid(m, n, plan):
            ctas *= d
        fills = compute_units // 2 <= ctas <= 2 * compute_units
        return (not fills, plan_cost(m, n, k, plan, compute_units), tuple(plan))

    ranked = []
    for base in sorted(bases, key=rank):
        variants = [base._replace(cn=cn, ring=ring) for cn, ring in GRID_VARIANTS]
        ranked += [p for p in variants if _is_useful(m, n, k, p)][:VARIANTS_PER_BASE]
        if len(ranked) >= limit:
            break
    return ranked[:limit]


# ---- pipe plans (mxfp4_gemm_sm90_pipe.cu) ------------------------------------------

def pipe_threads(plan: PipePlan) -> int:
    """One warpgroup per 64 rows of N, then the copy warps."""
    return plan.bn // 64 * 128 + plan.cw * 32


def pipe_chunks(k: int, plan: PipePlan) -> int:
    return -(-k // plan.kc)


def pipe_smem_bytes(plan: PipePlan) -> int:
    """max(copy ring + two B operand buffers, the fp32 partial tile): the kernel's layout."""
    blocks = plan.kc // 32
    stage = plan.bm * plan.kc * 2 + plan.bn * plan.kc // 2 + plan.bn // 32 * blocks * 64  # A, B codes, B scales
    return max(plan.stages * stage + 2 * plan.bn * plan.kc * 2, plan.bm * (plan.bn + 4) * 4)


# Registers per thread besides the bm/2 fp32 accumulators (nvcc 13 -Xptxas -v: 60-110 across the
# offered plans); a plan must leave them under the per-thread share of the 64K register file.
# `test_every_offered_pipe_plan_builds_without_spills` checks the offered plans against ptxas.
PIPE_OTHER_REGISTERS = 88


def pipe_static_smem_bytes(plan: PipePlan) -> int:
    """Static shared memory of the warp-specialized mode: two mbarriers per stage and a 64-byte
    margin, in the 128-byte granules ptxas reports (-Xptxas -v: 256 for 4-12 stages)."""
    return -(-8 * (2 * plan.stages + 8) // 128) * 128 if plan.cw else 0


def pipe_is_valid(m: int, n: int, k: int, plan) -> bool:
    if not isinstance(plan, PipePlan) or plan.kind != PIPE:
        return False
    threads = pipe_threads(plan) if plan.bn in PIPE_BNS else 0
    return (plan.bn in PIPE_BNS and plan.bm in PIPE_BMS and plan.kc in PIPE_KCS
            and 3 <= plan.stages <= PIPE_MAX_STAGES and plan.cw in (0, 1, 2)
            and plan.tma in (0, 1) and (not plan.tma or plan.cw == 1)
            and 1 <= plan.split_k <= min(8, pipe_chunks(k, plan))
            and plan.bm // 2 + PIPE_OTHER_REGISTERS <= min(255, 65536 // threads)
            and pipe_smem_bytes(plan) + pipe_static_smem_bytes(plan) <= MAX_SMEM)


def pipe_cost(m: int, n: int, k: int, plan: PipePlan, compute_units: int = 132) -> float:
    """Rough cycles: waves of CTAs times a CTA's time, the larger of its conversion issue (A
    quantization ~6 thread instructions per element, B conversion ~3 per
    element, over 4 schedulers) and its MMAs (~2048 MAC per cycle), plus a first-copy latency and
    the split-K reduction."""
    ctas = 1
    for d in grid(m, n, plan):
        ctas *= d
    ks = -(-pipe_chunks(k, plan) // plan.split_k) * plan.kc
    issue = (plan.bm * ks * 6.25 + plan.bn * ks * 3.1) / 32 / 4
    mma = plan.bn * plan.bm * ks / 2048
    per_cta = max(issue, mma) + 0.25 * min(issue, mma) + 2000 + plan.split_k * plan.bm * plan.bn / 16
    return -(-ctas // compute_units) * per_cta


def pipe_deep_stages(k: int, plan: PipePlan) -> int:
    """The most stages that fit shared memory, but no more than copying the CTA's whole K range up
    front needs (chunks + 2). Deeper rings measured 4-6 us faster than 4 stages on the two large
    bench shapes (notes/cuda.md)."""
    chunks_per_cta = -(-pipe_chunks(k, plan) // plan.split_k)
    stages = min(PIPE_MAX_STAGES, max(3, chunks_per_cta + 2))
    while stages > 3 and pipe_smem_bytes(plan._replace(stages=stages)) > MAX_SMEM:
        stages -= 1
    return stages


# Per base plan (rows of N and M, split-K), its (kc, cw) variants in this order, each with
# `pipe_deep_stages`; the first base gets all of them, the others the first PIPE_VARIANTS_PER_BASE.
PIPE_VARIANTS = ((64, 1), (64, 0), (128, 1))
PIPE_VARIANTS_PER_BASE = 2


def pipe_plans(m: int, n: int, k: int, compute_units: int = 132, limit: int = 8, tma: bool = False) -> list:
    """Up to `limit` valid pipe plans: base plans (bm the smallest wgmma n covering M, and half of it
    for M > 64; every bn and split-K) by `pipe_cost`, each followed by its PIPE_VARIANTS (a copy
    warp or not, chunks of 64 or 128) with the deepest copy ring that fits; with `tma`, each
    copy-warp variant's tensor-map twin first."""
    covering = next((bm for bm in PIPE_BMS if bm >= m), PIPE_BMS[-1])
    bms = {covering} | ({covering // 2} if m > 64 else set())
    bases = [PipePlan(PIPE, bn, bm, split_k) for bn in PIPE_BNS for bm in sorted(bms) for split_k in range(1, 9)]
    bases = sorted((p for p in bases if pipe_is_valid(m, n, k, p)),
                   key=lambda p: (pipe_cost(m, n, k, p, compute_units), tuple(p)))
    plans = []
    for index, base in enumerate(bases):
        variants = [base._replace(kc=kc, cw=cw) for kc, cw in PIPE_VARIANTS]
        if tma:
            variants = [twin for v in variants for twin in ([v._replace(tma=1), v] if v.cw == 1 else [v])]
        variants = [v._replace(stages=pipe_deep_stages(k, v)) for v in variants]
        variants = [v for v in variants if pipe_is_valid(m, n, k, v)]
        plans += variants if index == 0 else variants[:PIPE_VARIANTS_PER_BASE]
        if len(plans) >= limit:
            break
    return plans[:limit]

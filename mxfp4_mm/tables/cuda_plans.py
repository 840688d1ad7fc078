"""Plans for the CUDA backend (kernels/mxfp4_gemm_sm90.cu), by (M, N, K).

Each plan: (bm, wn, nt, wk, split_k) = rows of M per CTA, warps along N, 16-row N tiles per warp,
warps along K, CTAs along K (one cluster). Shapes not listed use `general_plan`.

Regenerate on an H200 (rewrites PLANS below):  python3 tools/tune_cuda.py --write
"""

PLANS = {
    # measured by tools/tune_cuda.py on NVIDIA H200 2026-12-02
    (256, 3072, 1536): (32, 6, 2, 2, 1, 2, 2),  # 19.71 us
    (64, 7168, 2048): (64, 8, 1, 1, 2, 4, 0),  # 18.27 us
    (16, 2112, 7168): (16, 6, 2, 2, 8, 1, 2),  # 15.36 us (sweep 2); 14.42 in the final bench with B_LATE
    (4, 2880, 512): (8, 3, 1, 4, 1, 4, 0),  # 5.34 us (sweep 2)
    (32, 4096, 512): (16, 2, 2, 4, 1, 2, 0),  # 6.98 us (sweep 2)
    (32, 2880, 512): (16, 3, 1, 4, 1, 4, 0),  # 6.02 us (sweep 2)
    (8, 2112, 7168): (8, 3, 3, 4, 8),  # test shape, v1-era plan (not re-tuned)
    (16, 3072, 1536): (16, 4, 2, 2, 4),  # test shape, v1-era plan (not re-tuned)
    (64, 3072, 1536): (64, 4, 1, 2, 4),  # test shape, v1-era plan (not re-tuned)
    (256, 2880, 512): (64, 3, 2, 2, 2),  # test shape, v1-era plan (not re-tuned)
}


def plan_cost(m: int, n: int, k: int, plan, compute_units: int = 132) -> float:
    """Rough cost of a valid plan: per-CTA bytes, A quantization and MMA work, times the number
    of waves of CTAs, plus split-K reduction traffic."""
    from ..backends.cuda import grid
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
    from ..backends.cuda import Plan, is_valid

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

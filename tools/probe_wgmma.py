"""Layout probe for the cuda backend's wgmma plans (GPU): where does each activation value land?

For each option set (default descriptor strides, then LBO/SBO swapped) it prints the error on
random data, then drives one-hot activations (A[m0, k0] = 1) through the kernel and reports, per
k0, the output row that lit up and the weight column k' it reproduced (k' == k0 when correct).

    python3 tools/probe_wgmma.py [--plan 16,4,1,1,1,1,0,1] [--k 128]
"""

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from mxfp4_mm import spec  # noqa: E402
from mxfp4_mm.backends import cuda  # noqa: E402
from conftest import make_inputs, reference_output  # noqa: E402


def one_hot_map(run, data, m, k, bdeq, rows):
    lines = []
    for m0 in rows:
        hits = []
        for k0 in range(k):
            a = torch.zeros((m, k), dtype=torch.bfloat16, device="cuda")
            a[m0, k0] = 1.0
            out = run(a, data[2], data[3], data[4]).float()
            lit = (out.abs().sum(dim=1) > 0).nonzero().flatten().tolist()
            if not lit:
                hits.append(f"{k0}:-")
                continue
            row = out[lit[0]]
            match = [kk for kk in range(k) if torch.allclose(row, bdeq[:, kk].to(torch.bfloat16).float(), atol=1e-2, rtol=1e-2)]
            tag = "" if lit == [m0] and match == [k0] else "!"
            hits.append(f"{k0}:m{lit}k{match[:2]}{tag}")
        bad = sum(h.endswith("!") or h.endswith(":-") for h in hits)
        lines.append(f"  m0={m0}: {bad}/{k} misplaced  " + " ".join(h for h in hits if h.endswith("!") or h.endswith(":-"))[:1500])
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--plan", default="16,4,1,1,1,1,0,1")
    parser.add_argument("--k", type=int, default=128)
    args = parser.parse_args()
    plan = cuda.Plan(*[int(x) for x in args.plan.split(",")])
    m, n, k = plan.bm, plan.wn * plan.nt * 16, args.k
    data = make_inputs(m, n, k, seed=3, device="cuda")
    ref = reference_output(data).float()
    b_scales = spec.e8m0_unshuffle(data[4], n, k // 32)
    bdeq = spec.dequantize_mxfp4(data[2], b_scales).float()
    lbo, sbo = plan.bm * 16, 128
    for opts in [(), (f"-DWG_LBO={sbo}", f"-DWG_SBO={lbo}")]:
        run = cuda.make_runner(m, n, k, torch.device("cuda"), plan, opts)
        out = run(*[data[0]] + list(data[2:])).float()
        err = (out - ref).abs()
        bad = (err > 1e-2 + 1e-2 * ref.abs()).float().mean().item()
        print(f"plan {tuple(plan)} M={m} N={n} K={k} options {opts or 'default'}: "
              f"max err {err.max().item():.3g}, {bad:.1%} of outputs outside tolerance", flush=True)
        for line in one_hot_map(run, data, m, k, bdeq, rows=[0, 1, min(9, m - 1)]):
            print(line, flush=True)


if __name__ == "__main__":
    main()

"""Run every GPU kernel of the package on odd shapes and check each result (NVIDIA GPU).

Meant to run under compute-sanitizer (tools/verify_gpu.py does that), so every kernel's memory
accesses and shared-memory hazards are checked where the edges are: M = 1, 3, 17 (partial M
tiles), N = 16, 48 (partial N tiles), K % 128 == 64 (a partial K chunk).

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 1 \\
        python3 tools/sanitize_kernels.py [--backends cuda,hip,triton] [--shapes "1,16,192;17,48,576"]
    python3 tools/sanitize_kernels.py --list      # the plans it would run, without running them
    ... tools/sanitize_kernels.py --backends cuda --label-prefix f8 --shapes fp8   # the fp8 plans' fields

Per backend and shape it runs every plan of `backend.candidates(m, n, k, device)` when the
backend has that function (else the default runner), the cuda table's plans that fit the shape,
and the HIP kernels through their NVIDIA emulation (`hip.make_emulated_runner`). Each plan runs
on random data and on data with one A block near 2^70 (the cuda kernel's exact fallback path).
Prints one line per run; exit status 1 if any result is wrong or any run raised.
"""

import argparse
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mxfp4_mm import bench  # noqa: E402

# Partial M and N tiles and a partial K chunk; the last two have K % 512 == 0 and N % 32 == 0, where
# the Triton kernel's chunked B layouts ("vector", "shuffled") apply.
ODD_SHAPES = [(1, 16, 192), (3, 48, 64), (17, 16, 320), (17, 48, 576), (3, 96, 512), (17, 160, 1024)]
# The cuda fp8 plans want K % 256 == 0 and reach their fields only on wider shapes: 4 B tiles (multicast
# groups of 2 and 4), two M tiles of 128 (a partial one), splits 2-4, and one B tile over 10 chunks
# (splits 6-8, the two-CTAs-an-SM plan); B's first chunks converted ahead of A over 11 chunks split
# unevenly 3, 4 and 5 ways, and with 64-row M tiles over 9 chunks unsplit (68 B tiles, a partial one).
FP8_SHAPES = [(17, 256, 768), (130, 128, 512), (5, 2112, 1024), (5, 48, 2560), (130, 256, 768), (20, 1600, 2816),
              (40, 4304, 2304)]
BACKENDS = ("cuda", "hip", "triton")


def parse_shapes(text):
    return [tuple(int(v) for v in item.split(",")) for item in text.replace(" ", "").split(";") if item]


def inputs(m, n, k, device, extreme):
    data = bench.generate_input(m, n, k, seed=m * 131 + n * 7 + k, device=device)
    return bench.with_huge_a_block(data) if extreme else data


def _cuda_table_plans(m, n, k):
    """The distinct plans of the cuda table that fit (m, n, k), then the pipe plans and the fp8 plan
    of the shape (offered to the tuner only once they pass here)."""
    from mxfp4_mm.backends.cuda import plans as cuda_plans
    plans = []
    for fields in cuda_plans.PLANS.values():
        if fields[0] == cuda_plans.PIPE:
            continue  # a pipe entry: covered by pipe_plans below
        plan = cuda_plans.plan_from_fields(fields)
        if plan not in plans and cuda_plans.is_valid(m, n, k, plan):
            plans.append(plan)
    if torch.cuda.get_device_capability() == (9, 0):
        # with the tensor-map twins of the copy-warp plans (offered once they pass here too)
        plans += [plan for plan in cuda_plans.pipe_plans(m, n, k, tma=True) if plan not in plans]
        units = torch.cuda.get_device_properties(0).multi_processor_count
        plans += [plan for plan in cuda_plans.fp8_plans(m, n, k, units) if plan not in plans]
    return plans


def _hip_plans(hip):
    """Every kernel variant, unsplit and split 3 ways (uneven over the odd shapes' K chunks)."""
    from mxfp4_mm.backends.hip import plans as hip_plans
    return [hip_plans.Plan(variant, split_k) for variant in hip.kernel_variants() for split_k in (1, 3)]


def _triton_plans(triton_backend, m, n, k, device):
    """Every Triton plan of both arches' tables and rules that fits (m, n, k), memchecked or not
    (the AMD-only compile options of the gfx950 plans are left out on NVIDIA and their fp4 convert
    is emulated; tiles, layouts and split-K are what the sanitizer checks)."""
    from mxfp4_mm.backends.triton import plans as triton_plans
    units = {"sm_90": torch.cuda.get_device_properties(device).multi_processor_count,
             "gfx950": triton_plans.GFX950_COMPUTE_UNITS}  # the gfx950 plans as an MI355X lists them
    plans = [triton_backend.with_convert_emulated(plan)
             for arch in ("sm_90", "gfx950") for plan in triton_backend.candidates_for_arch(m, n, k, arch, units[arch])]
    return list(dict.fromkeys(plans))


def plans_for(name, module, m, n, k, device):
    """(plans, make_runner) of one backend for one shape; plan None = the backend's default."""
    candidates = getattr(module, "candidates", None)
    plans = (list(candidates(m, n, k, device)) if candidates else []) or [None]
    extra = {"cuda": lambda: _cuda_table_plans(m, n, k), "hip": lambda: _hip_plans(module),
             "triton": lambda: _triton_plans(module, m, n, k, device)}.get(name, list)()
    plans += [p for p in extra if p not in plans]
    make = module.make_emulated_runner if name == "hip" else module.make_runner
    return plans, make


def label(module, plan):
    if plan is None:
        return "default"
    to_label = getattr(module, "plan_label", None)
    return to_label(plan) if to_label else ",".join(str(v) for v in plan)


def run_one(make, m, n, k, device, plan, extreme):
    runner = make(m, n, k, device) if plan is None else make(m, n, k, device, plan)
    data = inputs(m, n, k, device, extreme)
    a, _, b_q, b_shuffle, b_scale_sh = data
    out = runner(a, b_q, b_shuffle, b_scale_sh)
    torch.cuda.synchronize(device)
    # The 2^70 block makes the fp32 reference order-dependent (its block dot products cancel to
    # exactly 0 on some columns): judge those inputs against the order-free exact sum.
    judge = bench.blockwise_exact_reference if extreme else bench.reference
    return bench.harness_close(out.cpu(), judge(tuple(t.cpu() for t in data)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated, from cuda,hip,triton")
    parser.add_argument("--shapes", default=";".join(",".join(map(str, s)) for s in ODD_SHAPES),
                        help="'m,n,k;m,n,k', or 'fp8' for the fp8 plans' shapes (default: the odd shapes)")
    parser.add_argument("--max-plans", type=int, default=0, help="at most this many plans per backend and shape (0: all)")
    parser.add_argument("--label-prefix", default="", help="only plans whose label starts with this (e.g. 'p.': cuda's pipe plans)")
    parser.add_argument("--label-suffix", default="", help="only plans whose label ends with this (e.g. '.emu')")
    parser.add_argument("--list", action="store_true", help="print the plans, run nothing")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or torch.version.hip:
        print("sanitize_kernels: needs an NVIDIA GPU (the HIP kernels run through their emulation)")
        return 2
    from mxfp4_mm import dispatch
    device = torch.device("cuda")
    failures = 0
    for name in args.backends.split(","):
        module = dispatch.load_backend(name)
        for m, n, k in FP8_SHAPES if args.shapes == "fp8" else parse_shapes(args.shapes):
            plans, make = plans_for(name, module, m, n, k, device)
            plans = [plan for plan in plans if label(module, plan).startswith(args.label_prefix)
                     and label(module, plan).endswith(args.label_suffix)]
            plans = plans[: args.max_plans] if args.max_plans else plans
            for plan in plans:
                for extreme in (False, True):
                    tag = f"{name:6s} {m}x{n}x{k} {label(module, plan):24s} {'2^70 block' if extreme else 'random':10s}"
                    if args.list:
                        print(tag, flush=True)
                        continue
                    try:
                        verdict = "ok" if run_one(make, m, n, k, device, plan, extreme) else "WRONG"
                    except Exception:  # report and go on: one broken plan must not hide the others
                        verdict = "ERROR " + traceback.format_exc(limit=2).strip().splitlines()[-1]
                    failures += verdict != "ok"
                    print(f"{tag} {verdict}", flush=True)
    print(f"sanitize_kernels: {failures} failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

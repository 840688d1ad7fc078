"""Static comparison on gfx950 (no GPU needed): per benchmark shape, our prior-first Triton
candidate (A through the hardware fp4 convert) and its arithmetic twin vs aiter's `gemm_a16wfp4`
design at AMD's tuned config, all AOT-compiled with Triton.

"aiter's design at AMD's config" is our own kernel set up as aiter's: A quantized in the kernel,
B_q with byte-gathered B scales (aiter's row-major path reads them unshuffled; the gather is our
equivalent), AMD's block sizes, warps, stages, waves_per_eu, cache modifier and split-K from aiter's
gfx950-GEMM-A16WFP4*.json (AITER_CONFIGS in mxfp4_mm/backends/triton/plans.py).

Per kernel: K-loop VALU and scaled MFMAs over the whole grid (per-wave loop-body counts x waves
per program x K steps per program x programs), VGPRs, spills, occupancy (waves per SIMD).
HIP numbers come from tools/gfx950_build.py (`grid_numbers`).

    python3 tools/gfx950_compare.py            # Triton and HIP rows
    python3 tools/gfx950_compare.py --no-hip   # Triton rows only
"""

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BENCHMARKS = [(4, 2880, 512), (16, 2112, 7168), (32, 4096, 512), (32, 2880, 512), (64, 7168, 2048),
              (256, 3072, 1536)]
TESTS = [(8, 2112, 7168), (16, 3072, 1536), (64, 3072, 1536), (256, 2880, 512)]
MFMA = "v_mfma_scale_f32_16x16x128_f8f6f4"
_LABEL = re.compile(r"^(\.LBB\d+_\d+):")
_BRANCH = re.compile(r"^\s+s_cbranch_\w+\s+(\.LBB\d+_\d+)")
_INSTRUCTION = re.compile(r"^\s+([a-z][a-z0-9_]*)")


def _meta(asm: str, key: str) -> int:
    return int(re.search(r"^[\s-]+\." + key + r":\s+(\d+)", asm, re.M).group(1))


def loop_bodies(asm: str):
    """Instruction mnemonics of each loop: from a label to the conditional branch back to it."""
    lines = asm.splitlines()
    labels, loops = {}, []
    for index, line in enumerate(lines):
        label = _LABEL.match(line)
        if label:
            labels[label.group(1)] = index
        branch = _BRANCH.match(line)
        if branch and branch.group(1) in labels:
            body = lines[labels[branch.group(1)]:index + 1]
            loops.append([m.group(1) for m in map(_INSTRUCTION.match, body) if m])
    return loops


def isa_stats(asm: str) -> dict:
    """The K loop (the one loop holding scaled MFMAs) and the kernel's resources, per wave. (The
    exact fallback after the K loop has a loop of fp32 MFMAs of its own: not the K loop.)"""
    with_mfma = [body for body in loop_bodies(asm) if MFMA in body]
    body = with_mfma[0] if len(with_mfma) == 1 else []
    return dict(
        loops_with_mfma=len(with_mfma),
        loop_mfma=sum(op == MFMA for op in body),
        loop_other_mfma=sum(op.startswith("v_mfma") and op != MFMA for op in body),
        loop_valu=sum(op.startswith("v_") and not op.startswith("v_mfma") for op in body),
        loop_fp4_converts=sum(op == "v_cvt_scalef32_pk_fp4_bf16" for op in body),
        loop_lane_moves=sum(op in ("v_writelane_b32", "v_readlane_b32") for op in body),  # SGPR spills land there
        kernel_mfma=sum(line.strip().startswith(MFMA) for line in asm.splitlines()),
        vgprs=_meta(asm, "vgpr_count"), agprs=_meta(asm, "agpr_count"), sgprs=_meta(asm, "sgpr_count"),
        vgpr_spills=_meta(asm, "vgpr_spill_count"), sgpr_spills=_meta(asm, "sgpr_spill_count"),
        scratch=_meta(asm, "private_segment_fixed_size"),
        occupancy=int(re.search(r"^; Occupancy: (\d+)", asm, re.M).group(1)),
    )


def triton_numbers(m: int, n: int, k: int, plan) -> dict:
    """Static figures of one Triton plan on one shape, over the whole grid."""
    from triton.backends.compiler import GPUTarget

    from mxfp4_mm.backends import triton as triton_backend
    from mxfp4_mm.backends.triton import plans as triton_plans

    stats = isa_stats(triton_backend.aot_compile(plan, n, k, GPUTarget("hip", "gfx950", 64)).asm["amdgcn"])
    k_steps = -(-k // plan.block_k)
    tiles = -(-m // plan.block_m) * -(-n // plan.block_n)
    wave_steps = tiles * k_steps * plan.num_warps  # every wave of every program runs the body once per step
    return dict(plan=triton_backend.plan_label(plan), programs=triton_plans.programs(m, n, k, plan),
                grid_mfma=stats["loop_mfma"] * wave_steps, kloop_valu=stats["loop_valu"] * wave_steps,
                vgpr_spill=stats["vgpr_spills"], sgpr_spill=stats["sgpr_spills"], vgprs=stats["vgprs"],
                occupancy=stats["occupancy"])


def hip_numbers(m: int, n: int, k: int):
    """The HIP backend's prior-first plan from tools/gfx950_build.py, or None where it is unavailable."""
    try:
        import gfx950_build
        return gfx950_build.grid_numbers(m, n, k)
    except Exception as exc:  # ziglang missing, or the builder's interface changed: skip the column
        print(f"hip {m}x{n}x{k}: not available ({type(exc).__name__}: {exc})", file=sys.stderr)
        return None


def _cells(numbers: dict, reference: dict = None) -> list:
    if numbers is None:
        return ["-"] * 5
    ratio = lambda key: f" ({numbers[key] / reference[key]:.2f}x)" if reference and reference[key] else ""  # noqa: E731
    return [f"`{numbers['plan']}`", f"{numbers['kloop_valu']:,}{ratio('kloop_valu')}",
            f"{numbers['grid_mfma']:,}{ratio('grid_mfma')}", f"{numbers['vgpr_spill']}/{numbers['sgpr_spill']}",
            f"{numbers['occupancy']} ({numbers['vgprs']} VGPRs)"]


def main(argv=None) -> int:
    from mxfp4_mm.backends import triton as triton_backend
    from mxfp4_mm.backends.triton import plans as triton_plans

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-hip", action="store_true", help="leave out the HIP rows")
    with_hip = not parser.parse_args(argv).no_hip
    header = ["shape", "design", "plan", "K-loop VALU over the grid (x aiter)", "scaled MFMAs over the grid (x aiter)",
              "spills V/S", "occupancy (waves/SIMD)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for shape in BENCHMARKS:
        aiter = triton_numbers(*shape, triton_plans.aiter_plan(shape))
        prior = triton_backend.candidates_for_arch(*shape, "gfx950", 256)[0]
        ours = triton_numbers(*shape, prior)
        rows = [("aiter's design, AMD's config", aiter, None), ("our Triton, prior first", ours, aiter)]
        if prior.a_convert != "arithmetic":
            twin = triton_numbers(*shape, prior._replace(a_convert="arithmetic"))
            rows.append(("our Triton, its arithmetic twin", twin, aiter))
        if with_hip:
            rows.append(("our HIP, prior first", hip_numbers(*shape), aiter))
        for design, numbers, reference in rows:
            lines.append("| " + " | ".join(["x".join(map(str, shape)), design] + _cells(numbers, reference)) + " |")
    print("\n".join(lines))
    print("\nStatic, AOT-compiled for gfx950 (Triton "
          f"{__import__('triton').__version__}); K-loop = the loop holding the scaled MFMAs, counted per wave and "
          "multiplied by waves x K steps x tiles. aiter's design = our kernel at AMD's exact config "
          "(B_q with byte-gathered scales, or B_shuffle where AMD's config is the preshuffled one).")
    return 0


if __name__ == "__main__":
    sys.exit(main())

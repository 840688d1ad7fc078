"""Static comparison on gfx950 (no GPU needed): per benchmark shape, our prior-first Triton
candidate vs aiter's `gemm_a16wfp4` design at AMD's tuned config, both AOT-compiled with Triton.

"aiter's design at AMD's config" is our own kernel set up as aiter's: A quantized in the kernel,
B_q with byte-gathered B scales (aiter's row-major path reads them unshuffled; the gather is our
equivalent), AMD's block sizes, warps, stages, waves_per_eu, cache modifier and split-K from aiter's
gfx950-GEMM-A16WFP4*.json (AITER_CONFIGS in mxfp4_mm/tables/triton_plans.py).

Per kernel: K-loop VALU and scaled MFMAs over the whole grid (per-wave loop-body counts x waves
per program x K steps per program x programs), VGPRs, spills, occupancy (waves per SIMD).
HIP numbers come from tools/gfx950_build.py when it provides `static_per_shape()`.

    python3 tools/gfx950_compare.py
"""

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
    """The K loop (the one loop holding scaled MFMAs) and the kernel's resources, per wave."""
    with_mfma = [body for body in loop_bodies(asm) if any(op.startswith("v_mfma") for op in body)]
    body = with_mfma[0] if len(with_mfma) == 1 else []
    return dict(
        loops_with_mfma=len(with_mfma),
        loop_mfma=sum(op == MFMA for op in body),
        loop_other_mfma=sum(op.startswith("v_mfma") and op != MFMA for op in body),
        loop_valu=sum(op.startswith("v_") and not op.startswith("v_mfma") for op in body),
        kernel_mfma=sum(line.strip().startswith(MFMA) for line in asm.splitlines()),
        vgprs=_meta(asm, "vgpr_count"), agprs=_meta(asm, "agpr_count"), sgprs=_meta(asm, "sgpr_count"),
        vgpr_spills=_meta(asm, "vgpr_spill_count"), sgpr_spills=_meta(asm, "sgpr_spill_count"),
        scratch=_meta(asm, "private_segment_fixed_size"),
        occupancy=int(re.search(r"^; Occupancy: (\d+)", asm, re.M).group(1)),
    )

"""Lab: the fp8 quantization with a thread per 8 values (the working tree) against a thread per 32-value
block (BEFORE.cu, e.g. `git show a38b659:mxfp4_mm/backends/cuda/mxfp4_gemm_sm90_fp8.cu`): A's e4m3 bytes
and row exponents compared byte for byte, then interleaved harness-method timings of the whole call.
    python3 quant_words_lab.py BEFORE.cu [REPS] [OUT.json]"""
import sys, json
from pathlib import Path
sys.path.insert(0, "tools"); sys.path.insert(0, ".")
import torch
import cuda_lab
from mxfp4_mm import bench
from mxfp4_mm.backends import cuda
from mxfp4_mm.backends.cuda import plans as P

before = Path(sys.argv[1]).read_text()
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
out = sys.argv[3] if len(sys.argv) > 3 else None
device = torch.device("cuda"); timer = bench.Timer(device)
work = [((256, 3072, 1536), ('f8', 128, 5)), ((64, 7168, 2048), ('f8', 64, 4)),
        ((16, 2112, 7168), ('f8', 16, 10, 3, 2)), ((8, 2112, 7168), ('f8', 8, 10, 3, 2)),
        ((32, 4096, 512), ('f8', 32, 2, 1, 2)), ((5, 2048, 16384), ('f8', 8, 4)), ((130, 256, 768), ('f8', 128, 3))]


def block_threads(k):
    return -(-(k // 32) // 32) * 32


def as_before(build):
    """build() with the kernel source and the quantization's block size of BEFORE.cu."""
    read, threads = cuda.read_source, cuda.fp8_quant_threads
    cuda.read_source = lambda name: before if name == cuda.FP8_SOURCE else read(name)
    cuda.fp8_quant_threads = block_threads
    try:
        return build()
    finally:
        cuda.read_source, cuda.fp8_quant_threads = read, threads


rows_all = []
for (m, n, k), fields in work:
    plan = P.plan_from_fields(list(fields))
    modules = {"before": (as_before(lambda: cuda._module(n, k, device, plan)), block_threads(k)),
               "now": (cuda._module(n, k, device, plan), P.fp8_quant_threads(k))}
    rows = P.fp8_m_tiles(m, plan) * plan.mp
    same = True
    for seed in range(3):
        data = bench.generate_input(m, n, k, 7 + seed, device)
        a = (bench.with_huge_a_block(data) if seed == 2 else data)[0]
        outs = []
        for module, threads in modules.values():
            scratch = torch.full((rows * k + 4 * rows,), 0x5A, dtype=torch.uint8, device=device)
            module.function("mxfp4_quant_a_e4m3").launcher("pppi")((rows, 1, 1), (threads, 1, 1), 0, a, scratch,
                                                                   scratch.data_ptr() + rows * k, m)
            torch.cuda.synchronize()
            outs.append(scratch.cpu())
        same &= bool(torch.equal(outs[0], outs[1]))
    runs = {"before": as_before(lambda: cuda.make_runner(m, n, k, device, plan)),
            "now": cuda.make_runner(m, n, k, device, plan)}
    med, ok = cuda_lab.checked_medians(runs, m, n, k, device, reps, timer)
    print(cuda_lab.variant_line(m, n, k, f"{cuda.plan_label(plan)} bytes equal {same}", med, ok), flush=True)
    rows_all.append({"shape": [m, n, k], "plan": list(fields), "equal": same, "us": med, "ok": ok})
if out:
    Path(out).write_text(json.dumps(rows_all, indent=1))

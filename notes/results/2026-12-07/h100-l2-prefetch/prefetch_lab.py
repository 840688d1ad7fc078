"""Lab (with l2-prefetch.diff applied; run from the repository root): L2 prefetch of B by the fp8 quantization
kernel (none, its scales, all of B and its scales), interleaved harness-method timings, each variant checked."""
import sys, json
from pathlib import Path
sys.path.insert(0, "tools"); sys.path.insert(0, ".")
import torch
import cuda_lab
from mxfp4_mm import bench
from mxfp4_mm.backends import cuda
from mxfp4_mm.backends.cuda import plans as P

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
out = sys.argv[2] if len(sys.argv) > 2 else None
device = torch.device("cuda"); timer = bench.Timer(device)
work = [((256, 3072, 1536), ('f8', 128, 5)), ((64, 7168, 2048), ('f8', 64, 4)),
        ((16, 2112, 7168), ('f8', 16, 10, 3, 2)), ((8, 2112, 7168), ('f8', 8, 10, 3, 2)),
        ((256, 3072, 1536), ('f8', 128, 4)), ((64, 7168, 2048), ('f8', 64, 4, 1, 2)),
        ((32, 4096, 512), ('f8', 32, 2, 1, 2)), ((128, 3072, 1536), ('f8', 128, 3, 2))]
original = cuda.fp8_l2_prefetch
rows_all = []
for (m, n, k), fields in work:
    plan = P.plan_from_fields(list(fields))
    rule = original(m, n, k, plan, cuda.compute_units(device))
    runs = {}
    for name, choice in (("none", (0, 0)), ("scales", (0, 1)), ("all", (n * k // 2, 1))):
        cuda.fp8_l2_prefetch = lambda *a, c=choice: c
        try:
            runs[name] = cuda.make_runner(m, n, k, device, plan)
        finally:
            cuda.fp8_l2_prefetch = original
    med, ok = cuda_lab.checked_medians(runs, m, n, k, device, reps, timer)
    print(cuda_lab.variant_line(m, n, k, f"{cuda.plan_label(plan)} rule {rule}", med, ok), flush=True)
    rows_all.append({"shape": [m, n, k], "plan": list(fields), "rule": list(rule), "us": med, "ok": ok})
if out:
    Path(out).write_text(json.dumps(rows_all, indent=1))

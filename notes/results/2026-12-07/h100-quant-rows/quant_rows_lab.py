"""Lab (with quant-rows.diff applied; run from the repository root): rows per quantization CTA of the fp8 plans,
interleaved harness-method timings, each variant checked against the reference."""
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
work = [((16, 2112, 7168), ('f8', 16, 10, 3, 2)), ((8, 2112, 7168), ('f8', 8, 10, 3, 2)),
        ((64, 7168, 2048), ('f8', 64, 4)), ((256, 3072, 1536), ('f8', 128, 5)),
        ((64, 7168, 2048), ('f8', 64, 4, 1, 2)), ((256, 3072, 1536), ('f8', 128, 4)),
        ((32, 4096, 512), ('f8', 32, 2, 1, 2))]
original = cuda.fp8_quant_block
rows_all = []
for (m, n, k), fields in work:
    plan = P.plan_from_fields(list(fields))
    threads, rule = original(m, n, k, plan, cuda.compute_units(device))
    runs = {}
    for r in (1, 2, 4, 8, 16, 32):
        if r > plan.mp or threads * r > 1024:
            continue
        cuda.fp8_quant_block = lambda *a, r=r: (threads, r)
        try:
            runs[f"r{r}"] = cuda.make_runner(m, n, k, device, plan)
        finally:
            cuda.fp8_quant_block = original
    med, ok = cuda_lab.checked_medians(runs, m, n, k, device, reps, timer)
    print(cuda_lab.variant_line(m, n, k, f"{P.plan_from_fields(list(fields))} rule r{rule}", med, ok), flush=True)
    rows_all.append({"shape": [m, n, k], "plan": list(fields), "rule": rule, "us": med, "ok": ok})
if out:
    Path(out).write_text(json.dumps(rows_all, indent=1))

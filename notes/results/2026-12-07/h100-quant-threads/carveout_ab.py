"""Lab: the fp8 call with the quantization kernel given the GEMM's shared-memory split (carveout 100,
so a GEMM CTA may start on an SM beside quantization blocks) against the driver's default, interleaved
harness-method timings of the whole call, each variant checked once against the reference.
(Measured 2026-12-06 before B's first two chunks went ahead of the grid dependency: no faster; the
early starters then copied their whole ring at once.)
    python3 carveout_ab.py REPS      (from the repository root; OUT=DIR writes carveout.json there)"""
import ctypes, json, os, sys
from pathlib import Path
sys.path.insert(0, "tools"); sys.path.insert(0, ".")
import torch
import cuda_lab
from mxfp4_mm import bench, runtime
from mxfp4_mm.backends import cuda
from mxfp4_mm.backends.cuda import plans as P

CARVEOUT_ATTR = 9  # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
device = torch.device("cuda"); timer = bench.Timer(device)
work = [((256, 3072, 1536), ('f8', 128, 5)), ((64, 7168, 2048), ('f8', 64, 4)),
        ((16, 2112, 7168), ('f8', 16, 10, 3, 2)), ((8, 2112, 7168), ('f8', 8, 10, 3, 2))]
options = P.compile_options


def with_carveout(m, n, k, plan):
    """A runner whose module is its own (an extra -D nobody reads), its quantization kernel set to 100."""
    P.compile_options = cuda.compile_options = lambda *a: options(*a) + ("-DLAB_CARVEOUT=100",)
    try:
        run = cuda.make_runner(m, n, k, device, plan)
        quant = cuda._module(n, k, device, plan).function("mxfp4_quant_a_e4m3")
    finally:
        P.compile_options = cuda.compile_options = options
    api = runtime.api_for(device)
    api.check(api.drv.cuFuncSetAttribute(quant.handle, CARVEOUT_ATTR, ctypes.c_int(100)), "cuFuncSetAttribute")
    return run


rows = []
for (m, n, k), fields in work:
    plan = P.plan_from_fields(list(fields))
    runs = {"default": cuda.make_runner(m, n, k, device, plan), "c100": with_carveout(m, n, k, plan)}
    med, ok = cuda_lab.checked_medians(runs, m, n, k, device, reps, timer)
    print(cuda_lab.variant_line(m, n, k, cuda.plan_label(plan), med, ok), flush=True)
    rows.append({"shape": [m, n, k], "plan": list(fields), "us": med, "ok": ok})
Path(os.environ.get("OUT", "."), "carveout.json").write_text(json.dumps(rows, indent=1))

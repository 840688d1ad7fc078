"""Lab: the fp8 quantization kernel with W words a thread (W in argv) against the shipped thread count:
A's bytes compared, then interleaved harness-method timings of the whole call.
    python3 .lab/qthreads.py REPS W [W ...]"""
import sys, json, os
sys.path.insert(0, "tools"); sys.path.insert(0, ".")
import torch
import cuda_lab
from mxfp4_mm import bench
from mxfp4_mm.backends import cuda
from mxfp4_mm.backends.cuda import plans as P

reps = int(sys.argv[1]); wpts = [int(v) for v in sys.argv[2:]]
device = torch.device("cuda"); timer = bench.Timer(device)
work = [((256, 3072, 1536), ('f8', 128, 5)), ((64, 7168, 2048), ('f8', 64, 4)),
        ((16, 2112, 7168), ('f8', 16, 10, 3, 2)), ((8, 2112, 7168), ('f8', 8, 10, 3, 2))]
shipped = P.fp8_quant_threads


def threads_for(wpt):
    def threads(k):
        words = k // 8
        t = -(-words // max(wpt, -(-words // 1024)))
        return -(-t // 32) * 32
    return threads


def built_with(threads, build):
    P.fp8_quant_threads = cuda.fp8_quant_threads = threads
    try:
        return build()
    finally:
        P.fp8_quant_threads = cuda.fp8_quant_threads = shipped


rows_all = []
for (m, n, k), fields in work:
    plan = P.plan_from_fields(list(fields))
    variants = {"now": shipped, **{f"w{w}": threads_for(w) for w in wpts}}
    rows = P.fp8_m_tiles(m, plan) * plan.mp
    same = True
    for seed in range(3):
        data = bench.generate_input(m, n, k, 7 + seed, device)
        a = (bench.with_huge_a_block(data) if seed == 2 else data)[0]
        outs = [cuda_lab.quantized_a(built_with(threads, lambda: cuda._module(n, k, device, plan)), threads(k), a, rows, k, m)
                for threads in variants.values()]
        same &= all(torch.equal(outs[0], o) for o in outs[1:])
    runs = {name: built_with(threads, lambda: cuda.make_runner(m, n, k, device, plan)) for name, threads in variants.items()}
    med, ok = cuda_lab.checked_medians(runs, m, n, k, device, reps, timer)
    label = f"{cuda.plan_label(plan)} threads " + "/".join(str(t(k)) for t in variants.values())
    print(cuda_lab.variant_line(m, n, k, f"{label} bytes equal {same}", med, ok), flush=True)
    rows_all.append({"shape": [m, n, k], "plan": list(fields), "equal": same, "us": med, "ok": ok,
                     "threads": {name: t(k) for name, t in variants.items()}})
Path = __import__("pathlib").Path
Path(os.environ.get("OUT", "."), "qthreads.json").write_text(json.dumps(rows_all, indent=1))

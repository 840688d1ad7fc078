"""Where the time of a qa plan (A quantized by a first kernel, the GEMM its programmatic dependent)
goes, per benchmark shape, harness method: the table's plan; the qa twin of it (cn 1, qa 1) and any
extra qa plans; the twin without the dependent launch; the quantization kernel alone; the twin's GEMM
alone on codes made beforehand; an empty launch (the timer's floor).

    python3 tools/cuda_qa_breakdown.py [M,N,K:PLAN ...]      (REPS=40 by default)
"""
import statistics, sys, json, os
sys.path.insert(0, ".")
import torch
from mxfp4_mm import bench
from mxfp4_mm.backends import cuda
from mxfp4_mm.backends.cuda import plans as P

device = torch.device("cuda")
timer = bench.Timer(device)
POOL = 4
rows = []
extra = {s: [] for s in bench.BENCHMARK_SHAPES}
for item in sys.argv[1:]:
    shape, plan = item.split(":")
    s_, p_ = tuple(map(int, shape.split(","))), P.Plan(*map(int, plan.split(",")))
    if P.is_valid(*s_, p_): extra[s_].append(p_)
    else: print("invalid", s_, p_)
for (m, n, k) in bench.BENCHMARK_SHAPES:
    sets = [bench.generate_input(m, n, k, 100 + s, device) for s in range(POOL)]
    table = cuda.plan_for(m, n, k, device)
    twin = table._replace(cn=1, qa=1)
    if not P.is_valid(m, n, k, twin):
        twin = P.quantized_a_plans(m, n, k, 132, 1)[0]
    plans = [twin] + [p for p in extra[(m, n, k)] if p != twin]
    runs = {"table " + cuda.plan_label(table): cuda.make_runner(m, n, k, device, table)}
    for p in plans:
        runs[cuda.plan_label(p)] = cuda.make_runner(m, n, k, device, p)
    # the twin's pieces
    gemm = cuda._module(n, k, device, twin).function("mxfp4_gemm")
    cuda.make_launcher(m, n, k, device, twin)  # sets the smem attribute
    quant = gemm.module.function("mxfp4_quantize_a").launcher("pppii")
    plain = gemm.launcher("ppppip")
    dims, block, shared = P.grid(m, n, twin), (twin.wn * twin.wk * 32, 1, 1), P.smem_bytes(m, n, k, twin)
    qd = (-(-(m * k // 32) // 32), 1, 1)
    cb, sc = m * k // 2, P.quantized_a_scale_cols(k)
    bufs = [torch.empty(P.quantized_a_bytes(m, k), dtype=torch.uint8, device=device) for _ in range(POOL)]
    for i in range(POOL):
        quant(qd, (128, 1, 1), 0, sets[i][0], bufs[i].data_ptr(), bufs[i].data_ptr() + cb, m, sc)
    outs = [torch.empty((m, n), dtype=torch.bfloat16, device=device) for _ in range(POOL)]

    def nopdl(a, b_q, b_shuffle, b_scale_sh):
        out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
        buf = torch.empty(P.quantized_a_bytes(m, k), dtype=torch.uint8, device=device)
        quant(qd, (128, 1, 1), 0, a, buf.data_ptr(), buf.data_ptr() + cb, m, sc)
        plain(dims, block, shared, a, b_q, b_scale_sh, out, m, buf.data_ptr())
        return out
    runs["twin no-pdl"] = nopdl
    calls = {name: (lambda run: lambda i: run(sets[i][0], sets[i][2], sets[i][3], sets[i][4]))(run) for name, run in runs.items()}
    calls["quant only"] = lambda i: quant(qd, (128, 1, 1), 0, sets[i][0], bufs[i].data_ptr(), bufs[i].data_ptr() + cb, m, sc)
    calls["twin gemm only"] = lambda i: plain(dims, block, shared, sets[i][0], sets[i][2], sets[i][4], outs[i], m, bufs[i].data_ptr())
    calls["empty launch"] = lambda i: quant((1, 1, 1), (32, 1, 1), 0, sets[i][0], bufs[i].data_ptr(), bufs[i].data_ptr() + cb, 0, sc)
    ok = {name: bench.harness_close(run(sets[0][0], sets[0][2], sets[0][3], sets[0][4]), bench.reference(sets[0])) for name, run in runs.items()}
    torch.cuda.synchronize()
    gemm_only_ok = bench.harness_close((calls["twin gemm only"](0), outs[0])[1], bench.reference(sets[0]))
    samples = {name: [] for name in calls}
    for rep in range(int(os.environ.get("REPS", "40"))):
        for name, call in calls.items():
            samples[name].append(timer.time_us(lambda: call(rep % POOL))[1])
    med = {name: statistics.median(v) for name, v in samples.items()}
    print(f"{m}x{n}x{k}", flush=True)
    for name, us in med.items():
        print(f"    {name:26s} {us:8.2f} {'' if name not in ok else 'ok' if ok[name] else 'WRONG'}", flush=True)
    print(f"    (gemm only correct: {gemm_only_ok})")
    rows.append({"shape": [m, n, k], "us": med})
json.dump(rows, open(os.path.join(os.environ.get("OUT", "."), "qa2.json"), "w"), indent=1)

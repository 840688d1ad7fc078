"""Lab (run from the repository root): the fp8 kernel with A quantized inside the GEMM's launch (gq.cu,
-DGQ=rows: the consumer warpgroups quantize at most GQ rows a CTA, a grid-wide barrier in global memory,
one cooperative launch) against the shipped two launches. Per plan: A's bytes compared with the
quantization kernel's byte for byte (random, tiny blocks, huge rows), the result checked against the
reference, then interleaved harness-method timings.

usage: python3 gq_lab.py GQ_SOURCE[,GQ_SOURCE...] REPS [OUT.json] [--check-only] [--no-cooperative]
(several sources: variants named by their file stems, each checked and timed beside the shipped path)"""
import ctypes
import json
import sys
from pathlib import Path

sys.path.insert(0, "tools")
sys.path.insert(0, ".")
import torch  # noqa: E402
import cuda_lab  # noqa: E402
from mxfp4_mm import bench, runtime  # noqa: E402
from mxfp4_mm.backends import cuda  # noqa: E402
from mxfp4_mm.backends.cuda import plans as P  # noqa: E402

COOPERATIVE = 2  # CUlaunchAttributeID


def cooperative_launcher(api, function, cooperative):
    launch_ex = api.drv.cuLaunchKernelEx
    launch_ex.argtypes = [ctypes.POINTER(runtime._LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    attribute = runtime._LaunchAttribute(id=COOPERATIVE)
    attribute.value[0] = 1
    config = runtime._LaunchConfig(attrs=ctypes.pointer(attribute), num_attrs=1 if cooperative else 0)
    types = "Tppppppip"
    values = [runtime._ARG_TYPES[t]() for t in types]
    params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])

    def launch(grid, block, shared, *args):
        for slot, arg in zip(values, args):
            slot.value = arg.data_ptr() if isinstance(arg, torch.Tensor) else arg
        config.grid[:] = grid
        config.block[:] = block
        config.shared_bytes, config.queue = shared, runtime.current_queue_handle(function.module.device)
        code = launch_ex(ctypes.byref(config), function.handle, params, None)
        if code != 0 and config.num_attrs:  # cooperative refused (clusters?): say so, launch plainly
            print(f"  cooperative launch refused (CUresult {code}); plain launch", flush=True)
            config.num_attrs = 0
            code = launch_ex(ctypes.byref(config), function.handle, params, None)
        api.check(code, "gq launch")

    return launch


def gq_runner(source, m, n, k, device, plan, cooperative=True):
    ctas_rows = P.fp8_m_tiles(m, plan) * plan.mp
    dims = P.grid(m, n, plan)
    ctas = dims[0] * dims[1] * dims[2]
    gq = -(-ctas_rows // ctas)
    options = P.compile_options(n, k, plan) + (f"-DGQ={gq}",)
    module = runtime.load_module(source, device, options, cuda.compile_target(device, plan))
    gemm = module.function("mxfp4_gemm_fp8")
    shared = P.smem_bytes(m, n, k, plan)
    api = runtime.api_for(device)
    api.check(api.drv.cuFuncSetAttribute(gemm.handle, 8, ctypes.c_int(shared)), "cuFuncSetAttribute")
    launch = cooperative_launcher(api, gemm, cooperative)
    grid_bar = torch.zeros(2, dtype=torch.int32, device=device)
    a_bytes = ctas_rows * k
    b_map_of = cuda._map_of_last_address(
        lambda address: runtime.tensor_map_2d(device, address, 1, n, k // 2, k // 2, P.FP8_BN, 128,
                                              swizzle=runtime.SWIZZLE_128B))
    block = (P.fp8_threads(plan), 1, 1)
    state = {}

    def run(a, b_q, b_shuffle, b_scale_sh):
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
        # checks pre-fill A's buffer (bytes the kernel leaves alone show); timed calls must not (a fill is a kernel)
        if state.get("fill"):
            scratch = torch.full((a_bytes + 4 * ctas_rows,), 0x5A, dtype=torch.uint8, device=a.device)
        else:
            scratch = torch.empty(a_bytes + 4 * ctas_rows, dtype=torch.uint8, device=a.device)
        launch(dims, block, shared, b_map_of(b_q.data_ptr()), b_scale_sh, scratch, scratch.data_ptr() + a_bytes, a, b_q, out, m, grid_bar)
        state["scratch"] = scratch
        return out

    run.plan, run.gq, run.state, run.ctas_rows = plan, gq, state, ctas_rows
    return run


def inputs(m, n, k, device, kind, seed):
    data = list(bench.generate_input(m, n, k, seed, device))
    a = data[0]
    if kind == "tiny":  # a block 2^-30 below the row's others: the row does not fold (exact fallback)
        a[:: max(1, m // 3), 32:64] *= 2.0 ** -30
    elif kind == "huge":  # row exponents past 64
        a[m // 2] *= 2.0 ** 70
    data[0] = a.contiguous()
    return tuple(data)


def main():
    sources = {Path(path).stem: Path(path).read_text() for path in sys.argv[1].split(",")}
    reps = int(sys.argv[2])
    out = sys.argv[3] if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else None
    check_only = "--check-only" in sys.argv
    cooperative = "--no-cooperative" not in sys.argv
    device = torch.device("cuda")
    timer = bench.Timer(device)
    work = [((16, 2112, 7168), None), ((8, 2112, 7168), None), ((64, 7168, 2048), None), ((256, 3072, 1536), None),
            ((64, 7168, 2048), ("f8", 64, 4)), ((256, 3072, 1536), ("f8", 128, 4)),
            ((17, 160, 7168), ("f8", 16, 4, 3, 2)), ((5, 48, 2560), ("f8", 8, 3)), ((130, 1600, 2816), ("f8", 64, 4, 1, 2)),
            ((33, 2880, 512), ("f8", 32, 2, 1, 2)),
            # K = 512, where humming is ahead of the table's mma.sync plan (timed beside them as "table")
            ((32, 4096, 512), ("f8", 32, 2, 1, 2)), ((32, 4096, 512), ("f8", 32, 2, 1, 1))]
    rows = []
    for (m, n, k), fields in work:
        plan = P.plan_from_fields(list(fields)) if fields else cuda.plan_for(m, n, k, device)
        if not isinstance(plan, P.Fp8Plan):
            continue
        cuda._check_plan(m, n, k, plan)
        variants = {name: gq_runner(text, m, n, k, device, plan, cooperative) for name, text in sources.items()}
        shipped = cuda.make_runner(m, n, k, device, plan)
        module = runtime.load_module(cuda.read_source(cuda.FP8_SOURCE), device, P.compile_options(n, k, plan),
                                     cuda.compile_target(device, plan))
        label = cuda.plan_label(plan)
        row = {"shape": [m, n, k], "plan": list(plan), "verdict": {}}
        for name, gq in variants.items():
            verdict = {}
            gq.state["fill"] = True
            for kind, seed in (("random", 7), ("tiny", 8), ("huge", 9)):
                data = inputs(m, n, k, device, kind, seed)
                c = gq(*cuda_lab.runner_args(data))
                torch.cuda.synchronize(device)
                mine = gq.state["scratch"].cpu()
                theirs = cuda_lab.quantized_a(module, P.fp8_quant_threads(k), data[0], gq.ctas_rows, k, m)
                same = bool(torch.equal(mine, theirs))
                close = bench.harness_close(c, bench.reference(data))
                same_c = bool(torch.equal(c, shipped(*cuda_lab.runner_args(data))))
                verdict[kind] = (same, close, same_c)
            gq.state["fill"] = False
            print(f"{m}x{n}x{k} {label} {name} gq={gq.gq}: A bytes equal / close to reference / C equal to shipped: "
                  f"{verdict}", flush=True)
            row["gq"] = gq.gq
            row["verdict"][name] = verdict
        if not check_only:
            timed = {"shipped": shipped, **variants}
            table = cuda.plan_for(m, n, k, device)
            if table != plan and (m, n, k) in P.PLANS:  # a table shape served by another plan: time it too
                timed["table"] = cuda.make_runner(m, n, k, device, table)
            med, ok = cuda_lab.checked_medians(timed, m, n, k, device, reps, timer)
            print(cuda_lab.variant_line(m, n, k, label, med, ok), flush=True)
            row.update(us=med, ok=ok)
        rows.append(row)
    if out:
        Path(out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

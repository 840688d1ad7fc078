"""Where an fp8 plan's time goes: a timeline of every GEMM CTA (NVIDIA GPU, sm_90).

    python3 tools/fp8_timeline.py 16,2112,7168 f8,16,10,3,2 [--reps 30] [--gemm-only] [--carveout -1] [--no-flush]
                                  [--source FILE [--gq]]

Builds an instrumented copy of mxfp4_gemm_sm90_fp8.cu (the package's kernel is not changed: marks are
inserted into its text at fixed anchor lines, and the build fails loudly when an anchor moves) and
calls it the harness's way (L2 flushed, events around the call). Each GEMM CTA records clock64 at its
marks, relative to its own start, and %globaltimer at its start and end; the quantization kernel
records its first block's start and its last block's end. Printed per mark: the minimum, median and
maximum over the CTAs (medians over the calls), in µs from the CTA's start. `--gemm-only` times the
GEMM alone on A quantized by an earlier call; `--carveout` sets the quantization kernel's preferred
shared-memory carveout (100: the GEMM's split, so that both may share an SM; the package leaves the
driver's default, -1). `--no-flush` leaves the L2 as the previous call left it (operands and the
kernel's code stay there): against the flushed timeline it shows which phases wait on DRAM.
A mark taken by a consumer thread at a wait ("A chunk0 landed") is when the thread got past the wait:
the data may have landed earlier.
`--source FILE` instruments another version of the kernel file (a lab variant). `--gq`: FILE quantizes
A inside the GEMM's launch (-DGQ, `notes/results/2026-12-08/fp8-grid-quant/`): one launch, the rows a
CTA worked out from the grid, a zeroed barrier word pair as the GEMM's last argument before the
timeline's; "quantization" is then from the first CTA's start to the grid barrier's opening, and the
"grid dependency released" mark is the copy warp past that barrier. (A plain launch: every CTA of an
fp8 plan is resident at once, one an SM, when nothing else runs.)
"""

import argparse
import ctypes
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cuda_lab import parse_plan, parse_shape  # noqa: E402  (tools/, this script's folder)
from mxfp4_mm import bench, runtime  # noqa: E402
from mxfp4_mm.backends import cuda  # noqa: E402
from mxfp4_mm.backends.cuda import plans as cuda_plans  # noqa: E402
from mxfp4_mm.tuning import timing  # noqa: E402

_CARVEOUT_ATTR = 9  # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT

SLOTS = 16  # int64 per CTA: [0] start (globaltimer), [1..9] marks (cycles), [10] end (globaltimer), [11] end (cycles)
HEADER = 64  # int64 before the CTAs' rows: [0] first quantization start, [1] last quantization end
MARKS = {1: "B scales landed", 2: "B chunk 0 landed", 3: "grid dependency released (copy warp)",
         4: "A chunk 0 landed", 5: "last B chunk landed", 6: "chunk loop done", 7: "verdicts in",
         8: "before the split-K sum", 9: "end"}
_NOW = 'unsigned long long g; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g));'


def _mark(slot):
    return f"tl_row[{slot}] = clock64() - tl_t0;"


_END = _mark(9) + " " + _NOW + " tl_row[10] = g; tl_row[11] = clock64() - tl_t0;"

# (anchor in the kernel source, its replacement): each anchor must occur exactly once.
_B_WAIT = "mbar_wait(&full_b[s], (lc / STAGES) & 1);\n"
_RING_B = "            " + _B_WAIT + "            convert_b_fragments(frags, smem + s * STAGE, scales, lc, cur);\n"
_CV_B = "                " + _B_WAIT + "                convert_b_fragments(frags, smem + s * B_BOX, scales, lc, frag);\n"
_AHEAD_B = "                " + _B_WAIT + "                convert_b_fragments(frags, smem + s * STAGE, scales, lc, frag);\n"
EDITS = (
    ("u16* __restrict__ c, const int m_size) {",
     "u16* __restrict__ c, const int m_size, unsigned long long* __restrict__ tl) {\n"
     "    const long long tl_t0 = clock64();\n"
     f"    unsigned long long* tl_row = tl + {HEADER} + {SLOTS} * (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));\n"
     f"    if (threadIdx.x == 0) {{ {_NOW} tl_row[0] = g; }}\n"),
    ("int* __restrict__ a_exp, int m_size) {",
     "int* __restrict__ a_exp, int m_size, unsigned long long* __restrict__ tlq) {\n"
     f"    if (threadIdx.x == 0) {{ {_NOW} atomicMin(tlq, g); }}\n"),
    ("        a_exp[m] = m >= m_size ? 0 : !folds ? ROW_INEXACT : emax == -127 ? 0 : emax;\n",
     "        a_exp[m] = m >= m_size ? 0 : !folds ? ROW_INEXACT : emax == -127 ? 0 : emax;\n"
     f"        {{ {_NOW} atomicMax(tlq + 1, g); }}\n"),
    ("        mbar_wait(&scales_landed, 0);\n", f"        mbar_wait(&scales_landed, 0);\n        if (t == 0) {_mark(1)}\n"),
    (_RING_B, _RING_B.replace(_B_WAIT, _B_WAIT + f"            if (t == 0 && lc == 0) {_mark(2)}\n"
                                                  f"            if (t == 0 && lc == chunks - 1) {_mark(5)}\n")),
    # the plans that convert B's first chunks ahead of A: chunk 0 and A's first chunks land here
    (_AHEAD_B, _AHEAD_B.replace(_B_WAIT, _B_WAIT + f"                if (t == 0 && lc == 0) {_mark(2)}\n")),
    ("            mbar_wait(&a_ahead_landed, 0);\n", f"            mbar_wait(&a_ahead_landed, 0);\n            if (t == 0) {_mark(4)}\n"),
    ("            griddep_wait();\n", f"            griddep_wait();\n            {_mark(3)}\n"),
    # the plans with converter warpgroups (cv): B in the converters, A in the MMA warpgroup
    (_CV_B, _CV_B.replace(_B_WAIT, _B_WAIT + f"                if (t == 0 && lc == 0) {_mark(2)}\n"
                                             f"                if (t == 0 && lc == chunks - 1) {_mark(5)}\n")),
    ("griddep_wait();  // only this warp waits for the quantization grid\n",
     f"griddep_wait();  // only this warp waits for the quantization grid\n            {_mark(3)}\n"),
    ("                mbar_wait(&full_a[xs], (lc / CV) & 1);\n",
     f"                mbar_wait(&full_a[xs], (lc / CV) & 1);\n                if (wt == 0 && lc == 0) {_mark(4)}\n"),
    ("            mbar_wait(&full_a[s], ((lc - AHEAD) / STAGES) & 1);\n",
     f"            mbar_wait(&full_a[s], ((lc - AHEAD) / STAGES) & 1);\n            if (t == 0 && lc == 0) {_mark(4)}\n"),
    ("#endif\n        mbar_wait(&a_exp_landed, 0);",
     f"#endif\n        if (t == (CV ? CONSUMERS : 0)) {_mark(6)}\n        mbar_wait(&a_exp_landed, 0);"),
    ("        if (inexact) {\n", f"        if (t == 0) {_mark(7)}\n        if (inexact) {{\n"),
    ("    store_split_sum<", f"    if (tid == 0) {_mark(8)}\n    store_split_sum<"),
)


# A GQ source's own lines (its other signature, the barrier's wait and its opening)
_GQ_WAIT = "            while (ld_acquire_gpu(grid_bar + 1) == gq_generation) __nanosleep(20);\n"
_GQ_OPEN = "                    st_release_gpu(grid_bar + 1, gq_generation + 1);\n"
GQ_EDITS = (
    ("const int m_size, u32* __restrict__ grid_bar) {",
     "const int m_size, u32* __restrict__ grid_bar, unsigned long long* __restrict__ tl) {\n"
     "    const long long tl_t0 = clock64();\n"
     f"    unsigned long long* tl_row = tl + {HEADER} + {SLOTS} * (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));\n"
     f"    if (threadIdx.x == 0) {{ {_NOW} tl_row[0] = g; atomicMin(tl, g); }}\n"),
    (_GQ_WAIT, _GQ_WAIT + f"            {_mark(3)}\n"),
    (_GQ_OPEN, _GQ_OPEN + f"                    {{ {_NOW} atomicMax(tl + 1, g); }}\n"),
)


def instrumented_source(source: str, gq: bool = False) -> str:
    """The fp8 kernel's source with the timeline's marks; the GEMM's last statement gets the end mark."""
    for anchor, replacement in EDITS + (GQ_EDITS if gq else ()):
        if source.count(anchor) != 1:
            raise ValueError(f"fp8_timeline: anchor found {source.count(anchor)} times, not once: {anchor!r}")
        source = source.replace(anchor, replacement)
    body = source.rstrip()
    if not body.endswith("}"):
        raise ValueError("fp8_timeline: the GEMM kernel is no longer the source's last function")
    return body[:-1] + f"    if (tid == 0) {{ {_END} }}\n}}\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shape", help="M,N,K")
    parser.add_argument("plan", help="an Fp8Plan's fields, e.g. f8,16,10,3,2")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--gemm-only", action="store_true", help="time the GEMM alone (A quantized beforehand)")
    parser.add_argument("--no-flush", action="store_true", help="do not flush the L2 before each call")
    parser.add_argument("--carveout", type=int, default=-1,
                        help="the quantization kernel's preferred shared-memory carveout in percent (-1: the driver's default)")
    parser.add_argument("--source", help="instrument this version of the fp8 kernel file instead of the package's")
    parser.add_argument("--gq", action="store_true", help="--source quantizes A inside the GEMM's launch (-DGQ)")
    args = parser.parse_args(argv)
    if args.gq and (not args.source or args.gemm_only):
        sys.exit("fp8_timeline: --gq needs --source and times the whole call (no --gemm-only)")
    m, n, k = parse_shape(args.shape)
    plan = parse_plan(args.plan)
    if not isinstance(plan, cuda_plans.Fp8Plan) or not torch.cuda.is_available() or torch.version.hip:
        sys.exit("fp8_timeline: needs an Fp8Plan and an NVIDIA GPU")
    device = torch.device("cuda")
    source = Path(args.source).read_text() if args.source else cuda.read_source(cuda.FP8_SOURCE)
    rows = cuda_plans.fp8_m_tiles(m, plan) * plan.mp
    dims = cuda_plans.grid(m, n, plan)
    ctas = dims[0] * dims[1] * dims[2]
    gq_rows = (f"-DGQ={-(-rows // ctas)}",) if args.gq else ()
    module = runtime.load_module(instrumented_source(source, args.gq), device,
                                 cuda_plans.compile_options(n, k, plan) + gq_rows, "sm_90a")
    api = runtime.api_for(device)
    quant_fn, gemm_fn = module.function("mxfp4_quant_a_e4m3"), module.function("mxfp4_gemm_fp8")
    shared = cuda_plans.smem_bytes(m, n, k, plan)
    api.check(api.drv.cuFuncSetAttribute(gemm_fn.handle, cuda._MAX_DYNAMIC_SHARED_ATTR, ctypes.c_int(shared)),
              "cuFuncSetAttribute")
    api.check(api.drv.cuFuncSetAttribute(quant_fn.handle, _CARVEOUT_ATTR, ctypes.c_int(args.carveout)),
              "cuFuncSetAttribute")
    quantize = quant_fn.launcher("pppip")
    gemm = gemm_fn.launcher("Tppppppipp") if args.gq else gemm_fn.launcher("Tppppppip", dependent=True)
    grid_bar = torch.zeros(2, dtype=torch.int32, device=device) if args.gq else None  # the barrier's counter and generation
    block = (cuda_plans.fp8_threads(plan), 1, 1)
    # The launches as `cuda._fp8_launcher` makes them, with the timeline's buffer as a last argument.
    data = bench.generate_input(m, n, k, 0, device)
    a, _, b_q, _, b_scale_sh = data
    b_map = runtime.tensor_map_2d(device, b_q.data_ptr(), 1, n, k // 2, k // 2, cuda_plans.FP8_BN, 128,
                                  swizzle=runtime.SWIZZLE_128B)
    # the harness's way: synchronize, flush the L2 (unless --no-flush), events around the call
    timer = timing.EventTimer(device, flush=not args.no_flush)
    out = torch.empty((m, n), dtype=torch.bfloat16, device=device)
    scratch = torch.empty(rows * k + 4 * rows, dtype=torch.uint8, device=device)
    marks, spans, events = {i: [] for i in MARKS}, [], []
    for rep in range(args.reps + args.gemm_only):
        tl = torch.zeros(HEADER + SLOTS * ctas, dtype=torch.int64, device=device)
        tl[0] = 2 ** 62  # the quantization's first start: an atomic minimum

        def call(quantizes=rep == 0 or not args.gemm_only):
            if args.gq:
                gemm(dims, block, shared, b_map, b_scale_sh, scratch, scratch.data_ptr() + rows * k, a, b_q, out, m,
                     grid_bar, tl.data_ptr())
                return
            if quantizes:
                quantize((rows, 1, 1), (cuda_plans.fp8_quant_threads(k), 1, 1), 0, a, scratch,
                         scratch.data_ptr() + rows * k, m, tl.data_ptr())
            gemm(dims, block, shared, b_map, b_scale_sh, scratch,
                 scratch.data_ptr() + rows * k, a, b_q, out, m, tl.data_ptr())

        us = timer.time_us(call)[1]
        if args.gemm_only and rep == 0:
            continue
        events.append(us)
        t = tl.cpu()
        per_cta = t[HEADER:].view(ctas, SLOTS).double()
        first = per_cta[:, 0].min() if args.gemm_only else float(t[0])
        quant_span = 0.0 if args.gemm_only else float(t[1] - t[0])
        ns_per_cycle = float(((per_cta[:, 10] - per_cta[:, 0]) / per_cta[:, 11]).median())
        spans.append((quant_span, float(per_cta[:, 0].min() - first), float(per_cta[:, 0].max() - first),
                      float(per_cta[:, 10].max() - first)))
        for i in MARKS:
            column = per_cta[:, i] * ns_per_cycle
            marks[i].append((float(column.min()), float(column.median()), float(column.max())))
    median = statistics.median
    correct = bench.harness_close(out, bench.reference(data))
    print(f"{m}x{n}x{k} {cuda.plan_label(plan)}{' (GEMM alone)' if args.gemm_only else ''}, {ctas} CTAs, "
          f"carveout {args.carveout}{', no flush' if args.no_flush else ''}: {median(events):.2f} us (events, median of {len(events)}), correct {correct}")
    print(f"  quantization, first start to last end {median([s[0] for s in spans]) / 1e3:.2f} us; GEMM CTAs start "
          f"{median([s[1] for s in spans]) / 1e3:.2f}..{median([s[2] for s in spans]) / 1e3:.2f}, the last ends at "
          f"{median([s[3] for s in spans]) / 1e3:.2f} (us from the first quantization block's start)")
    for i, name in MARKS.items():
        lo, mid, hi = (median([x[j] for x in marks[i]]) / 1e3 for j in range(3))
        print(f"  {name:38s} min {lo:6.2f}  median {mid:6.2f}  max {hi:6.2f} us")


if __name__ == "__main__":
    main()

"""Where one call's time goes, per CTA: build the table plan with -DTIMELINE=1 (thread 0 of each
CTA records %globaltimer at phase boundaries into C; results are not written), run it with the
harness method (L2 flushed before the call), and print per-phase medians/maxima over CTAs.

    python3 tools/timeline_cuda.py [--reps 5] [--out timeline.json]

Phases (thread 0 of each CTA): start (CTA start after the kernel's first CTA, timer), a_issue (A
copies issued), s_issue (B-scale loads issued), a_wait (A landed), quant (B copies issued if
late, A quantized, barrier), main (B chunks: convert + MMA), partial (tile to smem + barrier),
reduce (split-K sum, C store, last barrier), end (CTA end after the first CTA's start, timer).
Phase lengths come from clock64 at the SM clock (--clock-ghz).
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mxfp4_mm.backends import cuda  # noqa: E402
from bench_cuda import BENCH_SHAPES, input_sets_for  # noqa: E402

PHASES = ["start", "a_issue", "s_issue", "a_wait", "quant", "main", "partial", "reduce", "end"]
WORDS = 24  # u64 per CTA written by the kernel


def one_call(launch, inputs, m, n, ctas, flush, flush_mode="zero"):
    a, _, b_q, _, b_scale_sh = inputs
    out = torch.zeros((m, n), dtype=torch.bfloat16, device=a.device)
    torch.cuda.synchronize()
    if flush_mode != "none":
        flush.zero_()  # the harness's flush: L2 left full of dirty lines
    if flush_mode == "zero+read":
        flush.view(torch.int64).sum()  # then a read pass: L2 clean (experiment)
    if flush_mode == "zero+touch":  # then one byte per 64 KB of each input: page translations warm
        for t in (a, b_q, b_scale_sh):
            t.view(torch.uint8).flatten()[::65536].sum()
    if flush_mode != "zero":
        torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    launch(a, b_q, b_scale_sh, out)
    end.record()
    torch.cuda.synchronize()
    marks = out.view(torch.int64).flatten()[: ctas * WORDS].view(ctas, WORDS).cpu()
    return start.elapsed_time(end) * 1e3, marks


def summarize(marks, clock_ghz):
    timer, clock = marks[:, :8].double() / 1e3, marks[:, 8:16].double() / (clock_ghz * 1e3)
    t0 = timer[:, 0].min()
    rows = {"start": timer[:, 0] - t0, "end": timer[:, 7] - t0}
    for i, name in enumerate(PHASES[1:8]):
        rows[name] = clock[:, i + 1] - clock[:, i]
    return {k: (statistics.median(v.tolist()), max(v.tolist())) for k, v in rows.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out")
    parser.add_argument("--options", default="", help="more -D flags, e.g. -DB_LATE=1")
    parser.add_argument("--flush", default="zero", choices=("zero", "zero+read", "zero+touch", "none"),
                        help="zero = the harness's flush; the others are experiments")
    parser.add_argument("--clock-ghz", type=float, default=1.98, help="SM clock for clock64 deltas")
    parser.add_argument("--shapes", default="", help="'M,N,K ...' (default: the benchmark shapes)")
    parser.add_argument("--plans", default="", help="'M,N,K:plan ...' (shape and plan, e.g. 256,3072,1536:64,8,2,1,2,4,0,1)")
    args = parser.parse_args()
    device = torch.device("cuda")
    flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device=device)
    report = []
    print("µs, median/max over CTAs (last rep)", flush=True)
    print("shape".ljust(16) + "event".rjust(8) + "".join(p.rjust(12) for p in PHASES), flush=True)
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes.split()] or BENCH_SHAPES
    work = [(shape, cuda.plan_for(*shape, device)) for shape in shapes]
    if args.plans:
        work = [(tuple(int(v) for v in item.split(":")[0].split(",")),
                 cuda.Plan(*[int(v) for v in item.split(":")[1].split(",")])) for item in args.plans.split()]
    for (m, n, k), plan in work:
        sets = input_sets_for(m, n, k)
        launch = cuda.make_launcher(m, n, k, device, plan, ("-DTIMELINE=1",) + tuple(args.options.split()))
        ctas = 1
        for d in cuda.grid(m, n, plan):
            ctas *= d
        runs = [one_call(launch, sets[i % len(sets)], m, n, ctas, flush, args.flush) for i in range(args.reps)]
        event_us = statistics.median(r[0] for r in runs)
        summary = summarize(runs[-1][1], args.clock_ghz)
        sms = len(set((runs[-1][1][:, 16] & 0xFFFFFFFF).tolist()))
        report.append({"shape": [m, n, k], "plan": list(plan), "ctas": ctas, "sms": sms, "event_us": event_us,
                       "phases_us": summary})
        print((f"{m}x{n}x{k} {tuple(plan)}\n".ljust(16) if args.plans else f"{m}x{n}x{k}".ljust(16)) + f"{event_us:8.2f}" +
              "".join(f"{summary[p][0]:6.2f}/{summary[p][1]:<5.2f}" for p in PHASES) + f"  {ctas} CTAs on {sms} SMs",
              flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

"""The leaderboard loop, runnable from the submission itself (opt-in: MXFP4_MM_SELFBENCH=1).

`run()` times `mxfp4_mm.custom_kernel` on the 6 benchmark shapes the way the harness's
leaderboard mode does: every repetition draws fresh data (seed += 13), flushes the L2, times one
call between events, and re-checks the result against the spec's reference GEMM; at least 3 runs,
then stop when err/mean < 0.001, when mean * runs exceeds the time budget, or after 120 s of wall
time (at most 100 runs). Prints one line per shape and the geometric mean of the means.

On a CPU the whole run is capped (default 20 s, env MXFP4_MM_SELFBENCH_CPU_S; "inf" for no cap):
without a cap the 6 shapes take minutes there (146 s measured), and CPU times say nothing about the
leaderboard. The shapes share the cap; once it is spent, the shape being timed stops after its
current run (so it may have fewer than 3) and the shapes not yet started are skipped.
"""

import math
import time

import torch

from . import bench, custom_kernel, dispatch, settings

MAX_REPEATS = 100
TIME_BUDGET_NS = 30e9
MAX_WALL_NS = 120e9
CPU_CAP_ENV = "MXFP4_MM_SELFBENCH_CPU_S"
DEFAULT_CPU_CAP_S = 20.0


def cpu_cap_s():
    """Seconds the whole run may take on a CPU: env MXFP4_MM_SELFBENCH_CPU_S, else 20 (inf: no cap)."""
    return settings.seconds(CPU_CAP_ENV, DEFAULT_CPU_CAP_S, positive=True)


def _should_stop(row, wall_ns, max_wall_ns=MAX_WALL_NS):
    mean_ns = row["mean_us"] * 1e3
    return (row["err_us"] < 0.001 * row["mean_us"] or mean_ns * row["runs"] > TIME_BUDGET_NS
            or wall_ns > max_wall_ns)


def bench_one(shape, seed, timer, device, max_wall_ns=MAX_WALL_NS, deadline_ns=None):
    """Harness stats (µs) for one shape; raises AssertionError on a wrong result. Past `deadline_ns`
    (perf_counter_ns; the CPU cap) no further run starts, even below 3 runs."""
    data = bench.generate_input(*shape, seed, device)
    if not bench.harness_close(custom_kernel(data), bench.reference(data)):
        raise AssertionError(f"{shape}: wrong result on the first call")
    durations = []
    started = time.perf_counter_ns()
    for _ in range(MAX_REPEATS):
        if deadline_ns is not None and durations and time.perf_counter_ns() >= deadline_ns:
            break
        seed += 13
        data = bench.generate_input(*shape, seed, device)
        out, micros = timer.time_us(lambda: custom_kernel(data))
        if not bench.harness_close(out, bench.reference(data)):
            raise AssertionError(f"{shape}: wrong result for seed {seed}")
        durations.append(micros)
        if len(durations) >= 3 and _should_stop(bench.stats(durations), time.perf_counter_ns() - started,
                                                max_wall_ns):
            break
    return bench.stats(durations)


def run(shapes=None, device=None):
    """Run the leaderboard loop and print the table; returns {shape key: stats} of the shapes timed
    (on a CPU, those the cap left time for)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    shapes = shapes or bench.BENCHMARK_SHAPES
    cap_s = cpu_cap_s() if device.type == "cpu" else math.inf
    deadline_ns = None if math.isinf(cap_s) else time.perf_counter_ns() + cap_s * 1e9
    timer = bench.Timer(device)
    print(f"mxfp4_mm self-benchmark on {bench.device_description(device)} (leaderboard loop)", flush=True)
    if deadline_ns is not None:
        print(f"CPU: the whole run is capped at {cap_s:g} s ({CPU_CAP_ENV} to change, inf for none); "
              "past it the timed shape stops after its current run and the rest are skipped", flush=True)
    print(f"{'shape':>16} {'runs':>5} {'mean µs':>9} {'err µs':>8} {'best µs':>8}  backend:plan", flush=True)
    results = {}
    for index, shape in enumerate(shapes):
        seed = bench.BENCHMARK_SEEDS[index] if shapes is bench.BENCHMARK_SHAPES else 1000 + index
        max_wall_ns = MAX_WALL_NS
        if deadline_ns is not None:
            left_ns = deadline_ns - time.perf_counter_ns()
            if left_ns <= 0:
                print(f"{bench.shape_key(shape):>16}  skipped: the {cap_s:g} s CPU cap is spent", flush=True)
                continue
            max_wall_ns = min(MAX_WALL_NS, left_ns / (len(shapes) - index))  # an equal share of what is left
        row = bench_one(shape, seed, timer, device, max_wall_ns, deadline_ns)
        results[bench.shape_key(shape)] = row
        print(f"{bench.shape_key(shape):>16} {row['runs']:>5} {row['mean_us']:>9.2f} "
              f"{row['err_us']:>8.3f} {row['best_us']:>8.2f}  {dispatch.last_choice()}", flush=True)
    timed = "" if len(results) == len(shapes) else f"  ({len(results)} of {len(shapes)} shapes timed)"
    print(f"{'geomean':>16} {'':>5} {bench.geomean([r['mean_us'] for r in results.values()]):>9.2f}{timed}",
          flush=True)
    return results

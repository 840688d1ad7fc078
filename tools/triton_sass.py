"""Static cost of the Triton backend's NVIDIA plans on a CPU: each candidate is compiled ahead of time
for the arch (Triton's own ptxas), and its main loop's SASS is counted.

    python3 tools/triton_sass.py                        # every sm_90 candidate of the 6 benchmark shapes
    python3 tools/triton_sass.py --shapes "64,7168,2048" --folded-only
    python3 tools/triton_sass.py --arch sm_80 --units 108 --shapes "16,2112,7168;64,7168,2048"
    python3 tools/triton_sass.py --out static.json --histogram 12

Per plan: programs (CTAs), K steps per program, the loop body's SASS instructions (per thread and
step), its MMA instructions (HGMMA: wgmma, HMMA: mma.sync), registers and spill bytes (ptxas -v),
and `loop µs`: waves x body x warps x steps / (4 schedulers x 1.98 GHz; waves over --units SMs), the
loop's time if every scheduler issued one instruction per cycle (the H200's clock, whatever --arch). It is a floor for comparing plans, not a prediction: on
the H200 the measured plans took 2-4x their floor (latency, memory, spills). The main loop is the
backward branch whose body holds the most MMA instructions (the exact fallback's loop has none).
"""

import argparse
import collections
import concurrent.futures
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sass_diff import BENCH_SHAPES, H200_UNITS, cuobjdump  # noqa: E402  (H200_UNITS: the default --units)

SCHEDULERS = 4
CLOCK_GHZ = 1.98
_LINE = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);")
_BRANCH_TARGET = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)")


def sass_lines(cubin: bytes, work: Path):
    """[(address, instruction text)] of a cubin's SASS."""
    path = work / f"{abs(hash(cubin))}.cubin"
    path.write_bytes(cubin)
    listing = subprocess.run([cuobjdump(), "-sass", str(path)], capture_output=True, text=True, check=True).stdout
    return [(int(m.group(1), 16), m.group(2)) for m in map(_LINE.match, listing.splitlines()) if m]


def is_mma(text: str) -> bool:
    return "HGMMA" in text or "HMMA" in text


def main_loop(lines):
    """The instructions of the backward branch's body holding the most MMA instructions (ties: the longest)."""
    best_key, best = None, []
    for address, text in lines:
        target = _BRANCH_TARGET.search(text)
        if target and int(target.group(1), 16) < address:
            body = [t for a, t in lines if int(target.group(1), 16) <= a <= address]
            key = (sum(map(is_mma, body)), len(body))
            if best_key is None or key > best_key:
                best_key, best = key, body
    return best


def registers_and_spills(ptx: str, arch: str, work: Path):
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    source = work / f"{abs(hash(ptx))}.ptx"
    source.write_text(ptx)
    target = arch + "a" if arch == "sm_90" else arch  # Triton's sm_90 PTX uses the sm_90a features
    done = subprocess.run([str(ptxas), f"-arch={target}", "-v", str(source), "-o", str(source.with_suffix(".o"))],
                          capture_output=True, text=True, check=True)
    registers = re.search(r"Used (\d+) registers", done.stderr)
    return (int(registers.group(1)) if registers else None,
            sum(int(v) for v in re.findall(r"(\d+) bytes spill stores", done.stderr)))


def opcode(text: str) -> str:
    words = text.split()
    return words[1] if words[0].startswith("@") else words[0]


def measure(shape, plan, arch="sm_90", units=H200_UNITS, histogram=0):
    """One plan's static row."""
    from triton.backends.compiler import GPUTarget

    from mxfp4_mm.backends import triton as triton_backend
    from mxfp4_mm.backends.triton.plans import split_k_steps

    m, n, k = shape
    kernel = triton_backend.aot_compile(plan, n, k, GPUTarget("cuda", int(arch.split("_")[1]), 32))
    with tempfile.TemporaryDirectory(prefix="triton_sass_") as tmp:
        body = main_loop(sass_lines(kernel.asm["cubin"], Path(tmp)))
        registers, spills = registers_and_spills(kernel.asm["ptx"], arch, Path(tmp))
    split_k, steps = split_k_steps(-(-k // plan.block_k), plan.split_k)
    programs = -(-m // plan.block_m) * -(-n // plan.block_n) * split_k
    waves = -(-programs // units)
    row = {"shape": list(shape), "plan": triton_backend.plan_label(plan), "programs": programs, "steps": steps,
           "body": len(body), "mma": sum(map(is_mma, body)), "registers": registers, "spill_bytes": spills,
           "loop_us": waves * len(body) * plan.num_warps * steps / (SCHEDULERS * CLOCK_GHZ * 1e3)}
    if histogram:
        row["opcodes"] = collections.Counter(map(opcode, body)).most_common(histogram)
    return row


def plans_of(shape, arch, units, folded_only):
    from mxfp4_mm.backends import triton as triton_backend

    plans = triton_backend.candidates_for_arch(*shape, arch, units)
    return [p for p in plans if p.a_convert == "folded"] if folded_only else plans


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=BENCH_SHAPES, help='"M,N,K;M,N,K" (default: the benchmark shapes)')
    parser.add_argument("--arch", default="sm_90", help="an NVIDIA arch, sm_XY (default sm_90)")
    parser.add_argument("--units", type=int, default=H200_UNITS, help="SMs, for the candidates' split-K and the waves")
    parser.add_argument("--folded-only", action="store_true", help="only the folded (plain bf16 dot) plans")
    parser.add_argument("--histogram", type=int, default=0, help="also list the loop's N most frequent opcodes")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", help="write the rows as JSON")
    args = parser.parse_args(argv)
    shapes = [tuple(int(v) for v in item.split(",")) for item in args.shapes.replace(" ", "").split(";")]
    if not re.fullmatch(r"sm_\d+", args.arch):
        parser.error(f"--arch must be sm_XY, got {args.arch!r}")
    work = [(shape, plan) for shape in shapes for plan in plans_of(shape, args.arch, args.units, args.folded_only)]
    print(f"{'shape':15} {'plan':46} {'progs':>5} {'steps':>5} {'body':>5} {'mma':>4} {'regs':>4} {'spill':>6} "
          f"{'loop µs':>7}")
    rows = []
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        for row in pool.map(measure, *zip(*work), [args.arch] * len(work), [args.units] * len(work),
                            [args.histogram] * len(work)):
            rows.append(row)
            print(f"{'x'.join(map(str, row['shape'])):15} {row['plan']:46} {row['programs']:5d} {row['steps']:5d} "
                  f"{row['body']:5d} {row['mma']:4d} {row['registers']:4d} {row['spill_bytes']:6d} "
                  f"{row['loop_us']:7.2f}", flush=True)
            if args.histogram:
                print("    " + ", ".join(f"{name} {count}" for name, count in row["opcodes"]))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

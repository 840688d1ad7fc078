"""Model of the fp8 kernel's barrier protocol with converter warpgroups (CV > 0): a copy warp for B's
code ring (S slots), one for A's ring (X slots, after the grid dependency), the converters (B codes
-> the converted ring of X slots) and the MMA warpgroup (converted B and A -> wgmmas), as coroutines
over the barriers' phases, scheduled in random orders. Checked: no deadlock, every wait is served by
its own chunk's completion and never sees a phase ahead, and no slot is written while its reader
still holds it. `--fault` injects a mistake the model must catch."""
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from barrier_model import Barriers, copy_ring, run, sweep  # noqa: E402

FAULT = sys.argv[1] if len(sys.argv) > 1 else ""


def simulate(chunks, S, X, rng):
    bars = Barriers()

    def copy_a():  # the other copy warp
        yield  # griddep_wait
        for lc in range(chunks):
            s = lc % X
            if lc >= X:
                yield from bars.wait("empty_a", s, lc // X - 1, lc - X)
            bars.write("a", s, lc)
            yield
            bars.complete("full_a", s, lc)

    def converters():
        for lc in range(chunks):
            s, xs = lc % S, lc % X
            yield from bars.wait("full_b", s, lc // S, lc)
            yield  # convert_b_fragments
            bars.release("b", s)
            bars.complete("empty", s, lc)
            if lc >= X and FAULT != "no-empty-x-wait":
                yield from bars.wait("empty_x", xs, lc // X - 1, lc - X)
            bars.write("x", xs, lc)
            yield  # store_fragments, fence.proxy.async
            bars.complete("full_x", xs, lc)

    def mma():
        for lc in range(chunks):
            xs = lc % X
            yield from bars.wait("full_x", xs, lc // X, lc)
            yield from bars.wait("full_a", xs, (lc + (1 if FAULT == "a-phase" else 0)) // X, lc)
            yield  # wgmmas, wgmma_wait<0>
            bars.release("x", xs)
            bars.complete("empty_x", xs, lc)
            bars.release("a", xs)
            bars.complete("empty_a", xs, lc)

    return run([copy_ring(bars, chunks, S), copy_a(), converters(), mma()], bars, rng)


rng = random.Random(0)
sweep(((chunks, S, X, rng) for chunks in range(1, 30) for S in range(2, 17) for X in range(2, 17)
       for trial in range(4)), simulate, FAULT)

"""Model of the barrier protocol in split_copy_warps.diff (AHEAD > 0, B's and A's copies in two
warps): B's copy warp, A's copy warp (after the grid dependency) and the consumers as coroutines over
the barriers' phases, scheduled in random orders. A wait is a parity wait, as mbarrier try_wait.parity
is: it is right only if, when it starts, the barrier has completed the phase before the one waited for
(else the parity matches an older phase and it passes at once) and not the one after (else it waits
for a later phase). Checked: no deadlock, every wait starts in that window and is served by its own
chunk's completion, and no part of a stage is written while a chunk still holds it. `--fault
no-ahead-released` drops A's warp's wait on `ahead_released`, which the model must catch."""
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from barrier_model import Barriers, copy_ring, run, sweep  # noqa: E402

FAULT = sys.argv[1] if len(sys.argv) > 1 else ""


def simulate(chunks, S, ahead, rng):
    bars = Barriers()

    def copy_a():  # the other copy warp
        yield  # griddep_wait
        yield  # the ahead chunks' A and the row exponents (areas of their own)
        bars.complete("a_ahead_landed", 0, -1)
        for lc in range(ahead, chunks):
            s = lc % S
            if lc == ahead + S and FAULT != "no-ahead-released":
                yield from bars.wait("ahead_released", 0, 0, -1)
            if lc - S >= ahead:
                yield from bars.wait("empty", s, lc // S - 1, lc - S)
            bars.write("a", s, lc)
            yield
            bars.complete("full_a", s, lc)

    def consumers():
        for lc in range(ahead):  # converted into shared memory, the stage released at once
            s = lc % S
            yield from bars.wait("full_b", s, lc // S, lc)
            yield  # convert_b_fragments, store_fragments
            bars.release("b", s)
            bars.complete("empty", s, lc)
        bars.complete("ahead_released", 0, -1)
        yield from bars.wait("a_ahead_landed", 0, 0, -1)
        yield  # the ahead chunks' SS wgmmas
        for lc in range(ahead, chunks):
            s = lc % S
            yield from bars.wait("full_b", s, lc // S, lc)
            yield  # convert chunk lc
            if lc > ahead:  # chunk lc-1's wgmmas done: its stage released
                p = (lc - 1) % S
                bars.release("b", p)
                bars.release("a", p)
                bars.complete("empty", p, lc - 1)
            yield from bars.wait("full_a", s, (lc - ahead) // S, lc)
            yield  # chunk lc's wgmmas issued (they read A's part, and B's fragments in registers)

    return run([copy_ring(bars, chunks, S), copy_a(), consumers()], bars, rng)


rng = random.Random(0)
sweep(((chunks, S, ahead, rng) for chunks in range(2, 30) for S in range(2, 17) for ahead in range(1, chunks)
       for trial in range(3)), simulate, FAULT)

"""Model of the fp8 kernel's barrier protocol with converter warpgroups (CV > 0): a copy warp for B's
code ring (S slots), one for A's ring (X slots, after the grid dependency), the converters (B codes
-> the converted ring of X slots) and the MMA warpgroup (converted B and A -> wgmmas), as coroutines
over the barriers' phases, scheduled in random orders. Checked: no deadlock, every wait is served by
its own chunk's completion and never sees a phase ahead, and no slot is written while its reader
still holds it. `--fault` injects a mistake the model must catch."""
import random
import sys

FAULT = sys.argv[1] if len(sys.argv) > 1 else ""


def simulate(chunks, S, X, rng):
    completions = {}  # (barrier, slot) -> chunks of its completed phases, in order
    holder = {}       # (ring, slot) -> chunk whose data is in it and not yet released
    errors = []

    def complete(bar, slot, chunk):
        completions.setdefault((bar, slot), []).append(chunk)

    def write(ring, slot, chunk):
        if holder.get((ring, slot)) is not None:
            errors.append(f"{ring}[{slot}] written with chunk {chunk} while chunk {holder[(ring, slot)]} holds it")
        holder[(ring, slot)] = chunk

    def release(ring, slot):
        holder[(ring, slot)] = None

    def wait(bar, slot, phase, chunk):
        while len(completions.get((bar, slot), [])) <= phase:
            yield
        seen = completions[(bar, slot)]
        if len(seen) > phase + 1:
            errors.append(f"{bar}[{slot}] {len(seen) - 1 - phase} phase(s) ahead at chunk {chunk}")
        if seen[phase] != chunk:
            errors.append(f"{bar}[{slot}] phase {phase} is chunk {seen[phase]}, wanted {chunk}")

    def copy_b():  # the kernel's `warp == WORKERS / 32` branch
        for lc in range(chunks):
            s = lc % S
            if lc >= S:
                yield from wait("empty", s, lc // S - 1, lc - S)
            write("b", s, lc)
            yield  # the tensor map's bytes land later
            complete("full_b", s, lc)

    def copy_a():  # the other copy warp
        yield  # griddep_wait
        for lc in range(chunks):
            s = lc % X
            if lc >= X:
                yield from wait("empty_a", s, lc // X - 1, lc - X)
            write("a", s, lc)
            yield
            complete("full_a", s, lc)

    def converters():
        for lc in range(chunks):
            s, xs = lc % S, lc % X
            yield from wait("full_b", s, lc // S, lc)
            yield  # convert_b_fragments
            release("b", s)
            complete("empty", s, lc)
            if lc >= X and FAULT != "no-empty-x-wait":
                yield from wait("empty_x", xs, lc // X - 1, lc - X)
            write("x", xs, lc)
            yield  # store_fragments, fence.proxy.async
            complete("full_x", xs, lc)

    def mma():
        for lc in range(chunks):
            xs = lc % X
            yield from wait("full_x", xs, lc // X, lc)
            yield from wait("full_a", xs, (lc + (1 if FAULT == "a-phase" else 0)) // X, lc)
            yield  # wgmmas, wgmma_wait<0>
            release("x", xs)
            complete("empty_x", xs, lc)
            release("a", xs)
            complete("empty_a", xs, lc)

    procs = [copy_b(), copy_a(), converters(), mma()]
    alive = set(range(len(procs)))
    idle = 0
    while alive:
        i = rng.choice(sorted(alive))
        try:
            next(procs[i])
        except StopIteration:
            alive.discard(i)
            idle = 0
            continue
        idle += 1
        if idle > 20000:
            return ["deadlock"]
        if errors:
            return errors
    return errors


bad = cases = 0
rng = random.Random(0)
for chunks in range(1, 30):
    for S in range(2, 17):
        for X in range(2, 17):
            for trial in range(4):
                cases += 1
                errors = simulate(chunks, S, X, rng)
                if errors:
                    bad += 1
                    if bad <= 3:
                        print(chunks, S, X, errors[:2])
print(f"fault {FAULT or 'none'}: {bad} bad of {cases} cases")

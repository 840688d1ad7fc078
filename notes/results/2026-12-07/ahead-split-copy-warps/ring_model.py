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

FAULT = sys.argv[1] if len(sys.argv) > 1 else ""


def simulate(chunks, S, ahead, rng):
    completions = {}  # (barrier, slot) -> chunks of its completed phases, in order
    holder = {}       # (part, slot) -> chunk whose data is in it and not yet released
    errors = []

    def complete(bar, slot, chunk):
        completions.setdefault((bar, slot), []).append(chunk)

    def write(part, slot, chunk):
        if holder.get((part, slot)) is not None:
            errors.append(f"{part}[{slot}] written with chunk {chunk} while chunk {holder[(part, slot)]} holds it")
        holder[(part, slot)] = chunk

    def release(part, slot):
        holder[(part, slot)] = None

    def wait(bar, slot, phase, chunk):
        done = len(completions.get((bar, slot), []))
        if done < phase:
            errors.append(f"{bar}[{slot}] wait for phase {phase} (chunk {chunk}) began with {done} done: passes by parity")
            return
        while len(completions.get((bar, slot), [])) <= phase:
            yield
        seen = completions[(bar, slot)]
        if len(seen) > phase + 1:
            errors.append(f"{bar}[{slot}] {len(seen) - 1 - phase} phase(s) ahead at chunk {chunk}")
        if seen[phase] != chunk:
            errors.append(f"{bar}[{slot}] phase {phase} is chunk {seen[phase]}, wanted {chunk}")

    def copy_b():  # `warp == WORKERS / 32`
        for lc in range(chunks):
            s = lc % S
            if lc >= S:
                yield from wait("empty", s, lc // S - 1, lc - S)
            write("b", s, lc)
            yield  # the tensor map's bytes land later
            complete("full_b", s, lc)

    def copy_a():  # the other copy warp
        yield  # griddep_wait
        yield  # the ahead chunks' A and the row exponents (areas of their own)
        complete("a_ahead_landed", 0, -1)
        for lc in range(ahead, chunks):
            s = lc % S
            if lc == ahead + S and FAULT != "no-ahead-released":
                yield from wait("ahead_released", 0, 0, -1)
            if lc - S >= ahead:
                yield from wait("empty", s, lc // S - 1, lc - S)
            write("a", s, lc)
            yield
            complete("full_a", s, lc)

    def consumers():
        for lc in range(ahead):  # converted into shared memory, the stage released at once
            s = lc % S
            yield from wait("full_b", s, lc // S, lc)
            yield  # convert_b_fragments, store_fragments
            release("b", s)
            complete("empty", s, lc)
        complete("ahead_released", 0, -1)
        yield from wait("a_ahead_landed", 0, 0, -1)
        yield  # the ahead chunks' SS wgmmas
        for lc in range(ahead, chunks):
            s = lc % S
            yield from wait("full_b", s, lc // S, lc)
            yield  # convert chunk lc
            if lc > ahead:  # chunk lc-1's wgmmas done: its stage released
                p = (lc - 1) % S
                release("b", p)
                release("a", p)
                complete("empty", p, lc - 1)
            yield from wait("full_a", s, (lc - ahead) // S, lc)
            yield  # chunk lc's wgmmas issued (they read A's part, and B's fragments in registers)

    procs = [copy_b(), copy_a(), consumers()]
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
for chunks in range(2, 30):
    for S in range(2, 17):
        for ahead in range(1, chunks):
            for trial in range(3):
                cases += 1
                errors = simulate(chunks, S, ahead, rng)
                if errors:
                    bad += 1
                    if bad <= 3:
                        print(chunks, S, ahead, errors[:2])
print(f"fault {FAULT or 'none'}: {bad} bad of {cases} cases")

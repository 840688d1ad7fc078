"""The machinery the fp8 kernel's barrier models share (cv-ring-model/, ahead-split-copy-warps/):
barriers as lists of completed phases, parts of shared memory with the chunk that holds them, parity
waits checked as the hardware serves them, and a random scheduler of the roles as coroutines."""


class Barriers:
    def __init__(self):
        self.completions = {}  # (barrier, slot) -> chunks of its completed phases, in order
        self.holder = {}       # (part, slot) -> chunk whose data is in it and not yet released
        self.errors = []

    def complete(self, bar, slot, chunk):
        self.completions.setdefault((bar, slot), []).append(chunk)

    def write(self, part, slot, chunk):
        if self.holder.get((part, slot)) is not None:
            self.errors.append(f"{part}[{slot}] written with chunk {chunk} while chunk {self.holder[(part, slot)]} holds it")
        self.holder[(part, slot)] = chunk

    def release(self, part, slot):
        self.holder[(part, slot)] = None

    def wait(self, bar, slot, phase, chunk):
        """A parity wait (mbarrier try_wait.parity) for `phase`: right only if, when it starts, the
        phase before is complete (else the parity matches an older phase and it passes at once) and
        it is served by `phase` itself (not a later one, not another chunk's)."""
        done = len(self.completions.get((bar, slot), []))
        if done < phase:
            self.errors.append(f"{bar}[{slot}] wait for phase {phase} (chunk {chunk}) began with {done} done: passes by parity")
            return
        while len(self.completions.get((bar, slot), [])) <= phase:
            yield
        seen = self.completions[(bar, slot)]
        if len(seen) > phase + 1:
            self.errors.append(f"{bar}[{slot}] {len(seen) - 1 - phase} phase(s) ahead at chunk {chunk}")
        if seen[phase] != chunk:
            self.errors.append(f"{bar}[{slot}] phase {phase} is chunk {seen[phase]}, wanted {chunk}")


def copy_ring(bars, chunks, S):
    """B's copy warp (the kernel's `warp == WORKERS / 32` branch, with CV or AHEAD): chunk lc into
    slot lc % S once the chunk S before it released the slot."""
    for lc in range(chunks):
        s = lc % S
        if lc >= S:
            yield from bars.wait("empty", s, lc // S - 1, lc - S)
        bars.write("b", s, lc)
        yield  # the tensor map's bytes land later
        bars.complete("full_b", s, lc)


def run(procs, barriers, rng, patience=20000):
    """Step the coroutines in a random order until all end; the errors, or ["deadlock"] when none
    has ended after `patience` steps."""
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
        if idle > patience:
            return ["deadlock"]
        if barriers.errors:
            return barriers.errors
    return barriers.errors


def sweep(cases, simulate, fault, shown=3):
    """simulate(*case) for every case; print the first few bad ones and the count."""
    bad = total = 0
    for case in cases:
        total += 1
        errors = simulate(*case)
        if errors:
            bad += 1
            if bad <= shown:
                print(*case[:-1], errors[:2])
    print(f"fault {fault or 'none'}: {bad} bad of {total} cases")

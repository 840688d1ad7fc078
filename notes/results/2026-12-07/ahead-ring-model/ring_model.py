"""Model of the fp8 kernel's ring protocol with AHEAD (commit 77da465): barrier phases, no deadlock,
every wait sees the copy of its own chunk, no stage overwritten before its reader released it."""
import itertools

def simulate(C, S, X):
    comp = {}  # (bar, stage) -> list of completions (payload chunk)
    def complete(bar, s, chunk): comp.setdefault((bar, s), []).append(chunk)
    def done(bar, s, j):
        lst = comp.get((bar, s), [])
        return len(lst) > j
    stage_reader = {}  # stage -> chunk still reading it (not released)
    errors = []
    def copy_warp():
        first = min(S, C)
        def copy_b(lc):
            s = lc % S
            if s in stage_reader and stage_reader[s] != lc and stage_reader[s] is not None:
                errors.append(f"B of {lc} overwrites stage {s} still read by {stage_reader[s]}")
            stage_reader[s] = lc
            complete('full_b', s, lc)
        def copy_a(lc):
            s = lc % S
            if stage_reader.get(s) != lc:
                errors.append(f"A of {lc} into stage {s} held by {stage_reader.get(s)}")
            complete('full_a', s, lc)
        def refill_b(lc):
            while not done('empty', lc % S, lc // S - 1):
                yield
            copy_b(lc)
        for lc in range(first): copy_b(lc)
        b_copied = min(X + S, C) if X else first
        for lc in range(first, b_copied):
            yield from refill_b(lc)
        # griddep: A ready
        if X: complete('a_ahead', 0, -1)
        for lc in range(X, b_copied): copy_a(lc)
        for lc in range(b_copied, C):
            yield from refill_b(lc)
            copy_a(lc)
    def consumer():
        def wait(bar, s, j, chunk):
            while not done(bar, s, j):
                yield
            lst = comp[(bar, s)]
            if len(lst) > j + 1:
                errors.append(f"{bar}[{s}] two phases ahead at chunk {chunk}")
            if bar != 'a_ahead' and lst[j] != chunk:
                errors.append(f"{bar}[{s}] completion {j} is chunk {lst[j]}, wanted {chunk}")
        def release(lc):
            s = lc % S
            stage_reader[s] = None
            complete('empty', s, lc)
        for lc in range(X):
            yield from wait('full_b', lc % S, lc // S, lc)
            release(lc)
        if X:
            yield from wait('a_ahead', 0, 0, -1)
        for lc in range(X, C):
            yield from wait('full_b', lc % S, lc // S, lc)
            if lc > X: release(lc - 1)
            yield from wait('full_a', lc % S, (lc - X) // S, lc)
    procs = [copy_warp(), consumer()]
    alive = [True, True]
    order = itertools.cycle([0, 1])
    stalls = 0
    while any(alive):
        i = next(order)
        if not alive[i]: continue
        try:
            next(procs[i]); stalls += 1
        except StopIteration:
            alive[i] = False; stalls = 0
        if stalls > 10000: return ["deadlock"]
    return errors

bad = 0
for C in range(1, 30):
    for S in range(2, 17):
        for X in range(0, C):
            e = simulate(C, S, X)
            if e:
                bad += 1
                if bad < 5: print(C, S, X, e[:2])
print("bad", bad)

"""Choosing a plan per shape on the machine itself, safely.

    verify    is a result right: the harness's check, the spec's reference, the inputs a candidate is
              proven on (fresh inputs and one with an out-of-range block)
    timing    the harness's timer: flush the caches, events around one call
    records   what this machine knows, on disk: the ledger (which candidates ran here and returned,
              which families faulted or hung) and the memo (timings and the choice per shape)
    procs     child processes that end with their parent
    buildpool compiles candidates in worker processes, in prior order, with a deadline that holds
    tuner     the loop: build, prove, verify, time, choose; runs in a child process
    supervise runs the tuner in a child, restarts it past a fault, kills it on a hang
    child     the entry point of those children (the tuner, the build workers)

A kernel's first run happens only in a tuner process (a child): a GPU fault there kills the child,
never the process the caller needs (on AMD a fault aborts the process).
"""

"""Runs the tuner (`child.main(["tune", ...])`) in a child process and keeps it honest: a child that dies in a
first run (a GPU fault) is restarted without that family; one whose first run outlasts its limit
(a hang) is killed, its family marked, and restarted; at the deadline it is killed. The caller's
process never runs an unproven kernel, and nothing of ours runs once `run_tuner` returns."""

import time

from . import procs, records

POLL_S = 0.1
MAX_RESTARTS = 8
EXIT_GRACE_S = 5.0  # past the deadline the child is given this long to save and exit


def _hung_run(ledger, pid, now):
    """The child's open first run that outlasted its limit, or None."""
    for run in ledger.state()[2]:
        if run["pid"] == pid and now - run["t"] > run["limit_s"]:
            return run
    return None


def _watch(proc, ledger, hard_deadline, clock):
    """Wait for the child; kill it on a hang or past the hard deadline. Returns the hung run or None."""
    while proc.poll() is None:
        time.sleep(POLL_S)
        hung = _hung_run(ledger, proc.pid, time.time())
        if hung is not None:
            procs.kill(proc)
            return hung
        if clock() > hard_deadline:
            procs.kill(proc)
            for run in ledger.open_runs_of(proc.pid):  # cut by our deadline: no verdict on them
                ledger.abandon(run["id"])
            return None
    procs.kill(proc)  # the child is gone; its build workers go too
    return None


def run_tuner(device, shapes, deadline, only=(), workers=0, clock=time.time):
    """Tune (or, with `only`, just prove those "backend:label"s on) `shapes` on `device` in a child
    until `deadline` (epoch seconds). Returns [(family, "fault" | "hang", label)] met on the way."""
    ledger = records.ledger_for(device)
    args = ["--device", str(device), "--shapes", ";".join(",".join(map(str, s)) for s in shapes),
            "--deadline", f"{deadline:.3f}"]
    if only:
        args += ["--only", ",".join(only)]
    if workers:
        args += ["--workers", str(workers)]
    events = []
    for _ in range(MAX_RESTARTS + 1):
        if clock() >= deadline:
            break
        proc = procs.start(procs.CHILD_MODULE, ["tune", *args])
        hung = _watch(proc, ledger, deadline + EXIT_GRACE_S, clock)
        if hung is not None:
            ledger.mark(hung["family"], "hang", hung["label"], tuple(map(int, hung["shape"].split("x"))))
            events.append((hung["family"], "hang", hung["label"]))
            continue
        if proc.returncode == 0:
            break
        faulted = ledger.settle()  # runs the dead child left open
        events += [(family, "fault", None) for family in faulted]
        if not faulted:  # died outside a first run (out of memory, a bug of ours): no point retrying
            break
    return events

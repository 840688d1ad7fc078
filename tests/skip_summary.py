"""pytest plugin (registered as `-p skip_summary` in pyproject.toml's addopts): the skipped tests
summed up one line per reason, with a count. `-ra` printed a line per skip location (~55 on a CPU
run, nearly all "needs a CUDA/ROCm GPU"), which buried the failures' summary."""

from collections import Counter


def skip_reason(report):
    """The reason a skip report carries, without pytest's "Skipped: " prefix."""
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ").strip()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    counts = Counter(skip_reason(report) for report in skipped)
    terminalreporter.write_sep("=", f"{len(skipped)} skipped, by reason")
    for reason, count in counts.most_common():
        terminalreporter.write_line(f"SKIPPED {count:>4} x {reason}")

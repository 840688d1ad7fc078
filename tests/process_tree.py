"""The processes this test process started, directly or not (Linux /proc)."""

import os
from pathlib import Path


def descendants(root=None):
    """pids of the living descendants of `root` (default: this process)."""
    root = root or os.getpid()
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":  # zombies are gone already, only not reaped
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found

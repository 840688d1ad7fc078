"""Kernel sources (.hip, .cu, .h) by file name: the headers shared by backends live beside this file,
each backend's own kernels in its room (`mxfp4_mm/backends/<name>/`). The bundler inlines them all
into submission.py, which fills BUNDLED so that read_source works without the files. File names are
unique across the package: a quoted `#include "x.h"` resolves by name."""

import functools
from pathlib import Path

BUNDLED: dict = {}  # kernel file name -> text, filled by submission.py
BUNDLED_MODULES: dict = {}  # module name -> source, filled by submission.py (the tuning records' key)
BUNDLED_FROM: list = []  # the submission file's path, filled by submission.py (child processes load it)
KERNEL_SUFFIXES = (".hip", ".cu", ".h", ".cuh")


@functools.lru_cache(maxsize=1)
def source_paths() -> dict:
    """{file name: path} of every kernel source of the package, shared headers and backend rooms
    (a checkout or an install; the bundled submission has no files and reads BUNDLED)."""
    here = Path(__file__).resolve().parent
    folders = [here] + sorted(p for p in (here.parent / "backends").iterdir() if p.is_dir())
    found = {}
    for folder in folders:
        for path in sorted(folder.iterdir()):
            if path.suffix in KERNEL_SUFFIXES:
                if path.name in found:
                    raise RuntimeError(f"kernel source {path.name} in both {found[path.name]} and {path}")
                found[path.name] = path
    return found


def read_source(name: str) -> str:
    if name in BUNDLED:
        return BUNDLED[name]
    return source_paths()[name].read_text()


def source_names() -> list:
    """Kernel source files shipped with the package (what the bundler inlines)."""
    return sorted(BUNDLED) if BUNDLED else sorted(source_paths())

"""Kernel sources (.hip, .cu, .h) live beside this file; the bundler inlines them into
submission.py, which fills BUNDLED so that read_source works without the files."""

from pathlib import Path

BUNDLED: dict = {}  # kernel file name -> text, filled by submission.py
BUNDLED_MODULES: dict = {}  # module name -> source, filled by submission.py (the tuning records' key)
BUNDLED_FROM: list = []  # the submission file's path, filled by submission.py (child processes load it)
KERNEL_SUFFIXES = (".hip", ".cu", ".h", ".cuh")


def read_source(name: str) -> str:
    if name in BUNDLED:
        return BUNDLED[name]
    return (Path(__file__).parent / name).read_text()


def source_names() -> list:
    """Kernel source files shipped with the package (what the bundler inlines)."""
    here = Path(__file__).parent
    return sorted(p.name for p in here.iterdir() if p.suffix in KERNEL_SUFFIXES)

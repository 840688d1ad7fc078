"""Data modules: per-shape kernel plans, rewritten by `python -m mxfp4_mm.tune --write` (and, for hip, `--static`)."""

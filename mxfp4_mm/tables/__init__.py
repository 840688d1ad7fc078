"""Data modules: per-shape kernel plans written by the tuner scripts in tools/."""

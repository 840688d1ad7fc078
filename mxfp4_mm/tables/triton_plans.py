"""Tile / split-K plans for the Triton backend, by kernel arch, then by (M, N, K).

Each plan: (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages). Shapes not listed use the
general rule in `backends/triton_backend.py`. Written by tools/tune_triton.py (its output is pasted
here, with the device and date it was measured on).
"""

PLANS = {
    "sm_90": {},
    "gfx950": {},
}

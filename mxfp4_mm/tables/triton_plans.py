"""Tile / split-K plans for the Triton backend, by kernel arch, then by (M, N, K).

Each plan: (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages). Shapes not listed use the
general rule in `backends/triton_backend.py`. Written by tools/tune_triton.py on the device
(sm_90: NVIDIA H200, torch 2.11 cu130, Triton 3.6, 2026-12-02; median µs in notes/triton.md).
gfx950 has no measured plans yet: it uses the rule.
"""

PLANS = {
    'sm_90': {
        (4, 2880, 512): (16, 64, 128, 4, 8, 2),
        (8, 2112, 7168): (16, 128, 128, 14, 4, 2),
        (16, 2112, 7168): (16, 128, 128, 14, 4, 2),
        (16, 3072, 1536): (16, 128, 128, 6, 4, 2),
        (32, 2880, 512): (16, 64, 128, 4, 4, 2),
        (32, 4096, 512): (16, 64, 128, 4, 4, 2),
        (64, 3072, 1536): (32, 128, 256, 3, 4, 2),
        (64, 7168, 2048): (64, 128, 128, 2, 4, 2),
        (256, 2880, 512): (64, 128, 256, 1, 4, 3),
        (256, 3072, 1536): (64, 128, 256, 1, 4, 3),
    },
    'gfx950': {
    },
}

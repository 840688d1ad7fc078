"""Split-K workspaces: fp32 partials plus one counter per output tile.

Counters are zeroed once, at allocation; the kernels reset them after each reduction, so a call
launches nothing but the GEMM. A workspace belongs to one (device, current queue, owner key):
calls on two queues never share a mutable buffer, and calls on one queue are ordered by it.
Nothing here depends on input data.
"""

import torch

from . import runtime

_workspaces = {}


def split_k_workspace(device: torch.device, key, partials_shape: tuple, tiles: int):
    """(partials fp32 of partials_shape, counters int32 [tiles]) for the current queue on `device`."""
    full_key = (device, runtime.current_queue_handle(device), key)
    entry = _workspaces.get(full_key)
    if entry is None:
        entry = _workspaces[full_key] = (
            torch.empty(partials_shape, dtype=torch.float32, device=device),
            torch.zeros(max(tiles, 1), dtype=torch.int32, device=device))
    return entry

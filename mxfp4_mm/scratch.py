"""Split-K workspaces: fp32 partials plus one counter per output tile.

Counters are zeroed once, at allocation; the kernels reset them after each reduction, so a call
launches nothing but the GEMM. A workspace belongs to one (device, current queue, owner key):
calls on two queues never share a mutable buffer, and calls on one queue are ordered by it.
Workspaces are allocated outside any CUDA graph's memory pool (on a worker thread, see `_allocate`);
inside a capture (torch.compile's reduce-overhead captures on a queue of its own) the workspace made
by the eager warm-up call is reused. Nothing here depends on input data.
"""

import concurrent.futures

import torch

from . import runtime
from .devices import capturing

_workspaces = {}


def split_k_workspace(device: torch.device, key, partials_shape: tuple, tiles: int):
    """(partials fp32 of partials_shape, counters int32 [tiles]) for the current queue on `device`."""
    full_key = (device, runtime.current_queue_handle(device), key)
    entry = _workspaces.get(full_key)
    if entry is None and capturing():
        entry = _warmed_up_workspace(device, key)
    if entry is None:
        entry = _workspaces[full_key] = _allocate(device, partials_shape, tiles)
    return entry


def _allocate(device, partials_shape, tiles):
    """Made on a worker thread: torch.compile's graph trees route the calling thread's allocations
    into their graph pool (even during their eager warm-up), and a workspace that outlives the
    call must not live there. Waits for the counters' zero fill (first call of a shape only)."""
    def make():
        return (torch.empty(partials_shape, dtype=torch.float32, device=device),
                torch.zeros(max(tiles, 1), dtype=torch.int32, device=device))

    def make_and_wait():
        workspace = make()
        torch.cuda.synchronize(device)
        return workspace

    if torch.device(device).type != "cuda":
        return make()
    with concurrent.futures.ThreadPoolExecutor(1) as worker:
        return worker.submit(make_and_wait).result()


def _warmed_up_workspace(device, key):
    """The workspace an eager call of this owner made on any queue of `device`."""
    for (ws_device, _, ws_key), entry in _workspaces.items():
        if ws_device == device and ws_key == key:
            return entry
    raise RuntimeError("mxfp4_mm: split-K workspace first needed inside a CUDA graph capture; "
                       "call this shape once before capturing")

"""The harness's timer: synchronize, flush the caches, event, one call, event, synchronize."""

import time

import torch

MIN_FLUSH_BYTES = 512 * 1024 * 1024  # twice the MI355X's 256 MB MALL


def flush_bytes(device) -> int:
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    return max(2 * l2, MIN_FLUSH_BYTES)


class EventTimer:
    """µs of one call the harness's way. The flush buffer lives as long as the timer; `flush=False`
    (experiments only) leaves the L2 as the previous call left it."""

    def __init__(self, device, flush: bool = True):
        self.device = device
        self.flush = torch.empty(flush_bytes(device) // 4, dtype=torch.int32, device=device) if flush else None
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def __call__(self, runner, args) -> float:
        return self.time_us(lambda: runner(*args))[1]

    def time_us(self, call):
        """(output, µs) of one call."""
        torch.cuda.synchronize(self.device)
        if self.flush is not None:
            self.flush.fill_(1)
        self.start.record()
        out = call()
        self.end.record()
        torch.cuda.synchronize(self.device)
        return out, self.start.elapsed_time(self.end) * 1e3


class HostTimer:
    """µs of one call by the host clock (CPU devices: no events, no flush)."""

    def __init__(self, device=None):
        self.device = device

    def __call__(self, runner, args) -> float:
        return self.time_us(lambda: runner(*args))[1]

    def time_us(self, call):
        begin = time.perf_counter()
        out = call()
        return out, (time.perf_counter() - begin) * 1e6


def timer_for(device):
    return EventTimer(device) if device.type == "cuda" else HostTimer(device)


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else 0.5 * (ordered[middle - 1] + ordered[middle])


def interleaved_medians(runners, timer, args, reps):
    """Median µs of each runner, repetitions interleaved so drift hits them alike."""
    samples = [[] for _ in runners]
    for _ in range(reps):
        for i, runner in enumerate(runners):
            samples[i].append(timer(runner, args))
    return [median(s) for s in samples]

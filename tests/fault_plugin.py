"""A backend that misbehaves on purpose, for the tests of the tuner's fault and hang handling.
Loaded by name: MXFP4_MM_EXTRA_BACKENDS="fault=fault_plugin" with tests/ on PYTHONPATH.

Plans, each its own family:
  crash  the process dies in the first run (CPU: os._exit; GPU: a kernel writes far out of bounds,
         which aborts the process on AMD and leaves a sticky illegal-address error on NVIDIA)
  spin   the first run never returns (CPU: sleeps; GPU: a kernel spins on a flag nobody sets)
  good   the spec's reference (CPU only: on a GPU the real backends serve)
"""

import collections
import os
import time

import torch

from mxfp4_mm import spec

NAME = "fault"
Plan = collections.namedtuple("Plan", "name")
FIRST_RUN_LIMIT_S = float(os.environ.get("FAULT_PLUGIN_LIMIT_S", "3"))
_KERNELS = r'''
extern "C" __global__ void write_far(float* out) { out[1ull << 38] = 1.0f; }
extern "C" __global__ void spin(volatile int* flag, float* out) { while (flag[0] == 0) { } out[0] = 1.0f; }
'''


def is_available(device):
    return True


def candidates(m, n, k, device):
    plans = [Plan("crash"), Plan("spin")]
    return plans + ([Plan("good")] if device.type != "cuda" else [])


def plan_label(plan):
    return plan.name


def plan_family(plan):
    return plan.name


def _reference(m, n, k, a, b_q, b_scale_sh):
    return spec.reference_gemm(a, b_q, spec.e8m0_unshuffle(b_scale_sh, n, k // 32))


def _gpu_kernels(device):
    from mxfp4_mm import runtime
    return runtime.load_module(_KERNELS, device)


def make_runner(m, n, k, device, plan=None):
    plan = plan or Plan("crash")

    def run(a, b_q, b_shuffle, b_scale_sh):
        out = _reference(m, n, k, a, b_q, b_scale_sh)
        if plan.name == "good":
            return out
        if a.device.type != "cuda":
            if plan.name == "crash":
                os._exit(3)
            while True:
                time.sleep(1)
        module = _gpu_kernels(a.device)
        if plan.name == "crash":
            module.function("write_far").launcher("p")((1, 1, 1), (1, 1, 1), 0, out)
        else:
            flag = torch.zeros(1, dtype=torch.int32, device=a.device)
            module.function("spin").launcher("pp")((1, 1, 1), (1, 1, 1), 0, flag, out)
        torch.cuda.synchronize(a.device)
        return out

    run.plan = plan
    return run

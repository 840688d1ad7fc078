"""Stand-in backends for the tuner's and the dispatcher's tests: plans with a cost and a behaviour,
runners that compute the spec's reference (or a wrong result), and a timer that reads the cost."""

import collections
import types

import torch

from mxfp4_mm.tuning import verify

# family: the group a wrong result or a fault rules out (default: the plan alone)
FakePlan = collections.namedtuple("FakePlan", "name cost_us behaviour family", defaults=(None,))
GOOD, WRONG, BUILD_FAILS, FLAKY = "good", "wrong", "build fails", "flaky"
FLAKY_RIGHT_RUNS = 2  # a flaky plan is right on its first runs (the proof's two inputs), wrong after


def fake_backend(name, plans):
    """A backend module offering `plans`; `.built` lists the plans it built, in order."""
    built = []

    def make_runner(m, n, k, device, plan=None):
        plan = plan or plans[0]
        built.append(plan.name)
        if plan.behaviour == BUILD_FAILS:
            raise RuntimeError(f"{plan.name}: compile failed (stand-in)")
        runs = [0]

        def run(a, b_q, b_shuffle, b_scale_sh):
            runs[0] += 1
            out = verify.reference_output(m, n, k, (a, b_q, b_shuffle, b_scale_sh))
            if plan.behaviour == WRONG or (plan.behaviour == FLAKY and runs[0] > FLAKY_RIGHT_RUNS):
                out = torch.zeros_like(out)
            return out

        run.plan = plan
        return run

    return types.SimpleNamespace(NAME=name, built=built, is_available=lambda device: True, make_runner=make_runner,
                                 candidates=lambda m, n, k, device: list(plans), plan_label=lambda plan: plan.name,
                                 plan_family=lambda plan: plan.family or plan.name)


class FakeTimer:
    """A runner's plan cost as its time (1 ms for a runner without a plan: a real backend's)."""

    def __init__(self):
        self.timed = []

    def __call__(self, runner, args):
        plan = getattr(runner, "plan", None) or FakePlan("real", 1e3, GOOD)
        self.timed.append(plan.name)
        return plan.cost_us

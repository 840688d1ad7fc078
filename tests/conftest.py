"""Shared test helpers. GPU-only tests carry @pytest.mark.gpu and are skipped (never passed) without one."""

import concurrent.futures
import os

import pytest
import torch

# Tests pick their backends and plans themselves; first-use tuning (seconds per new shape) would
# slow every GPU test and could serve a shape from another backend. Tests of the tuner turn it on.
os.environ.setdefault("MXFP4_MM_TUNE_BUDGET_S", "0")
# A candidate's first run happens here, not in a child process: in a test a fault is a failure anyway,
# and a child per shape would multiply the GPU suite's time. Tests of the child path set "child".
os.environ.setdefault("MXFP4_MM_PROVE", "inline")

from mxfp4_mm import bench, dispatch, spec  # noqa: E402

HAS_GPU = torch.cuda.is_available()
RTOL = ATOL = 1e-2  # the harness's tolerance


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA/ROCm GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)


def build_concurrently(m, n, k, device, plans):
    """Compile the cuda backend's builds of `plans` into the disk cache, a few at once (NVRTC runs
    outside the GIL), so the runners the test makes next only load them."""
    from mxfp4_mm.backends import cuda
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda plan: cuda.build(m, n, k, device, plan), plans))


def make_inputs(m, n, k, seed=0, device="cpu"):
    """(A, B, B_q, B_shuffle, B_scale_sh) as generate_input makes them, with the spec's quantizer."""
    return bench.generate_input(m, n, k, seed, device)


def reference_output(data):
    a, _, b_q, _, b_scale_sh = data
    n, k = b_q.shape[0], a.shape[1]
    return spec.reference_gemm(a, b_q, spec.e8m0_unshuffle(b_scale_sh, n, k // 32))


def assert_harness_close(out, ref):
    """|out - ref| <= atol + rtol*|ref| elementwise, NaN/inf matching: the harness's check."""
    assert out.shape == ref.shape and out.dtype == ref.dtype
    out, ref = out.float().cpu(), ref.float().cpu()
    torch.testing.assert_close(out, ref, rtol=RTOL, atol=ATOL, equal_nan=True)


def assert_fresh_outputs_and_fresh_data(run, m, n, k):
    """A second call with new values at the same input addresses returns a new buffer holding the
    new inputs' result: nothing derived from input data is kept between calls."""
    first = make_inputs(m, n, k, seed=1, device="cuda")
    out1 = run(first[0], first[2], first[3], first[4])
    second = make_inputs(m, n, k, seed=2, device="cuda")
    for dst, src in zip(first, second):  # same addresses, new values
        dst.copy_(src)
    out2 = run(first[0], first[2], first[3], first[4])
    assert out1.data_ptr() != out2.data_ptr()
    assert_harness_close(out2, reference_output(second))


def assert_replays_in_a_captured_graph(run, m, n, k):
    """`run` captured in a graph after two eager calls; three replays, each on new values written into
    the captured inputs, match the reference (the kernels read the inputs, not values cached)."""
    data = make_inputs(m, n, k, seed=21, device="cuda")
    for _ in range(2):
        run(data[0], data[2], data[3], data[4])
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run(data[0], data[2], data[3], data[4])
    for replay in range(3):
        fresh = make_inputs(m, n, k, seed=40 + replay, device="cuda")
        for captured, new in zip(data, fresh):
            captured.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        assert_harness_close(out, reference_output(fresh))


# ---- backends by name, for tests that run each one directly -------------------------------------

GPU_BACKENDS = tuple(dispatch.BACKEND_MODULES) + ("hip-emulated",)  # the HIP kernels on NVIDIA


def gpu_runner_factory(name, device):
    """make_runner(m, n, k) of backend `name` (a GPU_BACKENDS entry) on `device`; skips the test
    when the backend cannot run there."""
    try:
        module = dispatch.load_backend("hip" if name == "hip-emulated" else name)
    except ImportError as exc:
        pytest.skip(f"backend {name} not importable here: {exc}")
    if name == "hip-emulated":
        if dispatch.device_kind(device) != "nvidia":
            pytest.skip("the HIP emulation runs on NVIDIA only")
        return lambda m, n, k: module.make_emulated_runner(m, n, k, device)
    if not module.is_available(device):
        pytest.skip(f"backend {name} not available on {device}")
    return lambda m, n, k: module.make_runner(m, n, k, device)


class TinyModel(torch.nn.Module):
    """A layer with an MXFP4 weight: y = relu(x) @ W^T + bias, through the custom op."""

    def __init__(self, b_q, b_scale_sh, b_shuffle):
        super().__init__()
        self.register_buffer("b_q", b_q)
        self.register_buffer("b_scale_sh", b_scale_sh)
        self.register_buffer("b_shuffle", b_shuffle)
        self.bias = torch.nn.Parameter(torch.linspace(-1, 1, b_q.shape[0], dtype=torch.bfloat16,
                                                      device=b_q.device))

    def forward(self, x):
        return torch.ops.mxfp4_mm.gemm(torch.relu(x), self.b_q, self.b_scale_sh, self.b_shuffle) + self.bias

    def reference(self, x):
        """The same layer through the spec's GEMM."""
        n, k = self.b_q.shape[0], x.shape[1]
        c = spec.reference_gemm(torch.relu(x), self.b_q, spec.e8m0_unshuffle(self.b_scale_sh, n, k // 32))
        return c + self.bias.detach()

"""Shared test helpers. GPU-only tests carry @pytest.mark.gpu and are skipped (never passed) without one."""

import pytest
import torch

from mxfp4_mm import bench, spec

HAS_GPU = torch.cuda.is_available()
RTOL = ATOL = 1e-2  # the harness's tolerance


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA/ROCm GPU")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)


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

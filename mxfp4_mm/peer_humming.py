"""vLLM's `humming` (PyPI `humming-kernels`) as a bench path, where it imports: the MXFP4 GEMM vLLM
prefers on Hopper. It is W4A16: A stays bf16 (no quantization of A), B is our MXFP4 B, so it does
less work than an a4w4 GEMM and answers a different question. Its output is checked against its
own W4A16 reference (bf16 A times dequantized B in fp32, rounded to bf16) with the harness's
tolerance, and flagged in the table where it fails.

Weights are prepared per input set outside the timing (load, transform); a timed call is
`layer(A)` on the current queue, plus a view of the first N columns where humming pads N.
Bench-only: left out of submission.py (records.NOT_SHIPPED).
"""

import torch

from . import spec

PATH = "humming_w4a16"
NOTE = "vLLM's humming (humming-kernels), W4A16: bf16 A, MXFP4 B; checked against its own W4A16 reference"
N_PAD = 128  # humming's tiles want N % 128 == 0 (2880 -> 2944)


def available() -> bool:
    try:
        import humming  # noqa: F401
    except Exception:  # not installed, or it fails to import without its GPU toolchain
        return False
    return True


def w4a16_reference(data) -> torch.Tensor:
    """bf16 A times dequantized B, fp32 products and sums, rounded to bf16 (what humming computes)."""
    a, _, b_q, _, b_scale_sh = data
    n, k = b_q.shape[0], a.shape[1]
    b = spec.dequantize_mxfp4(b_q, spec.e8m0_unshuffle(b_scale_sh, n, k // 32))
    return (a.float() @ b.float().t()).to(torch.bfloat16)


def make_layer(data):
    from humming.layer import HummingLayer
    a, _, b_q, _, b_scale_sh = data
    n, k = b_q.shape[0], a.shape[1]
    layer = HummingLayer(shape_n=n, shape_k=k, weight_config={"quant_method": "mxfp4"},
                         pad_n_to_multiple=N_PAD if n % N_PAD else 1, torch_dtype=torch.bfloat16)
    scales = spec.e8m0_unshuffle(b_scale_sh, n, k // 32).contiguous()
    layer.load_from_tensors({"weight": b_q.view(torch.uint8).cpu(), "weight_scale": scales.view(torch.uint8).cpu()})
    layer.to(a.device)
    layer.transform()
    return layer


def make_path(case):
    """The bench's call(i) (bench.EXTRA_PATHS), with call.reference(i) its own reference; None where
    humming does not import or the device is no NVIDIA GPU."""
    if case.device.type != "cuda" or torch.version.hip or not available():
        return None
    layers = case.extra(PATH, make_layer)
    references = case.extra(PATH + ".reference", w4a16_reference)
    n = case.shape[1]

    def call(i):
        return layers[i](case.inputs[i][0])[:, :n]

    call.reference = lambda i: references[i]
    return call

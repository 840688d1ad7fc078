"""Reference of the `amd-mxfp4-mm` task: bf16 A, MXFP4 B -> MXFP4 per-1x32 quant of A
-> gemm_a4w4 -> bf16 C [M, N].

With aiter importable (the MI355X runner) this is the official reference: aiter's Triton
quant and `gemm_a4w4`. Elsewhere it runs the project's pure-torch model of the same
arithmetic (`mxfp4_mm.spec`, bit-exact to aiter's quantization), on cuda when torch sees a
GPU, else on the CPU. Then B_q / B_shuffle / B_scale_sh are plain torch.uint8 tensors
instead of aiter's fp4x2 / e8m0 dtypes (same bytes).
"""

import torch

from task import input_t, output_t
from utils import make_match_reference

try:
    import aiter
    from aiter import QuantType, dtypes
    from aiter.ops.shuffle import shuffle_weight
    HAVE_AITER = True
except Exception:  # not installed, or installed without a usable ROCm runtime
    HAVE_AITER = False

SCALE_GROUP_SIZE = 32  # K elements per e8m0 scale


def _spec():
    """The pure-torch MXFP4 model. A bare directory holding only submission.py gets the
    package from the submission, which registers its bundled copy of `mxfp4_mm` on import."""
    try:
        from mxfp4_mm import spec
    except ImportError:
        import submission  # noqa: F401
        from mxfp4_mm import spec
    return spec


def _device() -> str:
    # ROCm builds of torch report their GPU as "cuda" too.
    return "cuda" if torch.cuda.is_available() else "cpu"


def _check_shape(m: int, n: int, k: int) -> None:
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m}")
    if k < 64 or k % 64:
        raise ValueError(f"k must be a positive multiple of 64 (32-element scale blocks, "
                         f"two fp4 codes per byte), got {k}")
    if n < 16 or n % 16:
        raise ValueError(f"n must be a positive multiple of 16 (shuffle_weight's 16-row tiles), got {n}")


def generate_input(m: int, n: int, k: int, seed: int) -> input_t:
    """(A [m,k] bf16, B [n,k] bf16, B_q [n,k/2], B_shuffle [n,k/2], B_scale_sh [pad(n),pad(k/32)])."""
    _check_shape(m, n, k)
    device = _device()
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    A = torch.randn((m, k), dtype=torch.bfloat16, device=device, generator=gen)
    B = torch.randn((n, k), dtype=torch.bfloat16, device=device, generator=gen)
    if HAVE_AITER:
        B_q, B_scale_sh = aiter.get_triton_quant(QuantType.per_1x32)(B, shuffle=True)
        B_shuffle = shuffle_weight(B_q, layout=(16, 16))
    else:
        spec = _spec()
        B_q, B_scale = spec.quantize_mxfp4(B)
        B_scale_sh = spec.e8m0_shuffle(B_scale)
        B_shuffle = spec.shuffle_weight(B_q)
    return (A, B, B_q, B_shuffle, B_scale_sh)


def aiter_ref_kernel(data: input_t) -> output_t:
    """The official reference: aiter's quant of A, then aiter.gemm_a4w4 on the preshuffled B."""
    A, _B, _B_q, B_shuffle, B_scale_sh = data
    A_q, A_scale_sh = aiter.get_triton_quant(QuantType.per_1x32)(A.contiguous(), shuffle=True)
    return aiter.gemm_a4w4(A_q, B_shuffle, A_scale_sh, B_scale_sh,
                           dtype=dtypes.bf16, bpreshuffle=True)


def torch_ref_kernel(data: input_t) -> output_t:
    """The same product from B_q and the (unshuffled) B scales, in pure torch."""
    A, _B, B_q, _B_shuffle, B_scale_sh = data
    spec = _spec()
    n, half_k = B_q.shape
    b_scale = spec.e8m0_unshuffle(B_scale_sh.view(torch.uint8), n, 2 * half_k // SCALE_GROUP_SIZE)
    return spec.reference_gemm(A.contiguous(), B_q.view(torch.uint8), b_scale)


def ref_kernel(data: input_t) -> output_t:
    return aiter_ref_kernel(data) if HAVE_AITER else torch_ref_kernel(data)


check_implementation = make_match_reference(ref_kernel, rtol=1e-02, atol=1e-02)

"""Is a result right: the harness's check against the spec's reference, and the inputs every
candidate is proven on before it may serve."""

import torch

from .. import spec

RTOL = ATOL = 1e-2  # the harness's tolerance
OUT_OF_RANGE_FACTOR = 2.0 ** 70  # a block exponent the folded-scale paths cannot hold: the exact fallback runs


class WrongResult(RuntimeError):
    pass


def harness_close(out, ref) -> bool:
    """The harness's check: |out - ref| <= 1e-2 + 1e-2*|ref|, NaN/inf matching."""
    out, ref = out.float(), ref.float()
    close = (out - ref).abs() <= ATOL + RTOL * ref.abs()
    same_special = (out.isnan() & ref.isnan()) | (out.isinf() & (out == ref))
    return bool((close | same_special).all())


def check(out, ref, what):
    """Raises WrongResult unless out matches ref within the harness's tolerance (NaN/inf matching)."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != ref.dtype:
        raise WrongResult(f"{what} returned {getattr(out, 'dtype', type(out).__name__)} "
                          f"{tuple(getattr(out, 'shape', ()))}, expected {ref.dtype} {tuple(ref.shape)}")
    if out.device != ref.device:
        out = out.to(ref.device)
    if not harness_close(out, ref):
        worst = (out.float() - ref.float()).abs().nan_to_num(float("inf")).max().item()
        raise WrongResult(f"{what}: disagrees with the reference (max abs error {worst:.3g})")


def reference_output(m, n, k, args):
    """The spec's GEMM for runner arguments (A, B_q, B_shuffle, B_scale_sh)."""
    a, b_q, _, b_scale_sh = args
    return spec.reference_gemm(a, b_q, spec.e8m0_unshuffle(b_scale_sh, n, k // spec.SCALE_BLOCK))


def generate_input(m, n, k, seed, device):
    """(A, B, B_q, B_shuffle, B_scale_sh) the way the harness makes them, without aiter."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    a = torch.randn((m, k), dtype=torch.bfloat16, device=device, generator=gen)
    b = torch.randn((n, k), dtype=torch.bfloat16, device=device, generator=gen)
    b_q, b_scale = spec.quantize_mxfp4(b)
    return a, b, b_q, spec.shuffle_weight(b_q), spec.e8m0_shuffle(b_scale)


def runner_args(data):
    """The harness's 5-tuple as a runner's arguments (A, B_q, B_shuffle, B_scale_sh)."""
    a, _, b_q, b_shuffle, b_scale_sh = data
    return a, b_q, b_shuffle, b_scale_sh


def with_out_of_range_block(data):
    """The inputs with A's last row's first 32-block scaled by 2^70: the kernels' exact fallback runs.
    Judge the result with `blockwise_exact_reference` (the fp32 reference depends on the summation
    order on such data)."""
    a = data[0].clone()
    a[a.shape[0] - 1, :32] *= OUT_OF_RANGE_FACTOR
    return (a,) + tuple(data[1:])


def blockwise_exact_reference(data, n_chunk=512):
    """bf16 C from the exact sum of the dequantized products: each 32-block's dot product in float64
    (exact: its terms are e2m1 x e2m1 x one power of two), then the block sums in float64, on the
    inputs' device. Unlike one fp32 matmul it does not depend on the summation order when one block
    is huge and its dot product cancels to exactly 0."""
    a, _, b_q, _, b_scale_sh = data
    m, k = a.shape
    n = b_q.shape[0]
    a_dq = spec.dequantize_mxfp4(*spec.quantize_mxfp4(a)).double().view(m, k // 32, 32)
    b_dq = spec.dequantize_mxfp4(b_q, spec.e8m0_unshuffle(b_scale_sh, n, k // 32)).double()
    out = torch.empty((m, n), dtype=torch.float64, device=a.device)
    for n0 in range(0, n, n_chunk):
        b_part = b_dq[n0:n0 + n_chunk].view(-1, k // 32, 32)
        out[:, n0:n0 + n_chunk] = torch.einsum("mbi,nbi->mnb", a_dq, b_part).sum(-1)
    return out.to(torch.bfloat16)


class ProofInputs:
    """One shape's proof: `fresh` input sets (harness-like, new seeds) plus one with an out-of-range
    block, each with its reference, made once per shape and process."""

    def __init__(self, m, n, k, device, seed=0x5EED, fresh=1):
        self.shape = (m, n, k)
        self.cases = []
        for i in range(fresh):
            data = generate_input(m, n, k, seed + 7919 * i, device)
            self.cases.append((runner_args(data), reference_output(m, n, k, runner_args(data))))
        extreme = with_out_of_range_block(generate_input(m, n, k, seed + 104729, device))
        self.cases.append((runner_args(extreme), blockwise_exact_reference(extreme)))

    def check(self, runner, what):
        """Run `runner` on every case; WrongResult on the first disagreement."""
        for i, (args, ref) in enumerate(self.cases):
            check(runner(*args), ref, f"{what} (proof input {i})")

    def timing_args(self):
        return self.cases[0][0]


def fresh_checks(runner, m, n, k, device, count, what, seed):
    """The runner on `count` new input sets, each checked (a split-K winner's last test)."""
    for i in range(count):
        data = generate_input(m, n, k, seed + 31 * i, device)
        args = runner_args(data)
        check(runner(*args), reference_output(m, n, k, args), f"{what} (fresh input {i})")

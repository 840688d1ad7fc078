"""The MXFP4 format, in one place: quantization (bit-exact to aiter's
`dynamic_mxfp4_quant`), dequantization, the two aiter layouts (`e8m0_shuffle`,
`shuffle_weight`) with their inverses, and the reference GEMM.

Pure torch, any device. Every backend is tested against this module, and this
module is tested against the golden vectors in `tests/data/mxfp4_quant.pt` (format: `notes/format.md`).
The public functions check their arguments first: a `TypeError` / `ValueError` names the argument and
the rule. Zero rows (M = 0) give empty results of the right shape.
"""

import operator

import torch

SCALE_BLOCK = 32  # elements of K sharing one e8m0 scale
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

# |q| thresholds of the e2m1 code; ">" where the tie goes down, ">=" where it goes up
# (round-to-nearest-even: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4).
_CODE_STEPS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True),
               (2.5, False), (3.5, True), (5.0, False))

# dtypes whose bytes are read as packed fp4 codes / e8m0 scale bytes (torch's own fp4 and e8m0 types
# where this torch has them; aiter hands out uint8 views).
CODE_DTYPES = frozenset({torch.uint8, torch.int8} | {
    getattr(torch, name) for name in ("float4_e2m1fn_x2",) if hasattr(torch, name)})
SCALE_DTYPES = frozenset({torch.uint8, torch.int8} | {
    getattr(torch, name) for name in ("float8_e8m0fnu",) if hasattr(torch, name)})
CODE_RULE = "packed fp4 (uint8 or float4_e2m1fn_x2)"
SCALE_RULE = "e8m0 bytes (uint8 or float8_e8m0fnu)"


# ---- argument checks (shared with validate.py) -----------------------------------------

def _require_tensor(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def _require_dtype(name, t, allowed, rule):
    if t.dtype not in allowed:
        raise TypeError(f"{name} must be {rule}, got dtype {t.dtype}")


def _require_codes(name, t):
    _require_tensor(name, t)
    _require_dtype(name, t, CODE_DTYPES, CODE_RULE)


def _require_scales(name, t):
    _require_tensor(name, t)
    _require_dtype(name, t, SCALE_DTYPES, SCALE_RULE)


def _require_float(name, t):
    _require_tensor(name, t)
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor (bf16, fp16 or fp32), got dtype {t.dtype}")


def _require_2d(name, t, layout):
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D {layout}, got shape {list(t.shape)}")


def _require_same_device(name, t, other_name, other):
    if t.device != other.device:
        raise ValueError(f"{name} is on {t.device} but {other_name} is on {other.device}: "
                         "both must share a device")


def _require_count(name, value):
    """A non-negative int (Python or numpy int, 0-d integer tensor; not bool) -> int."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def _pow2_from_exponent(e: torch.Tensor) -> torch.Tensor:
    """2**e as float32 built from bits (exact down to 2**-127; exp2 may flush denormals)."""
    e = e.to(torch.int32)
    normal = ((e + 127).clamp(min=1) << 23).view(torch.float32)
    denormal = (torch.ones_like(e) << (e + 149).clamp(0, 22)).view(torch.float32)
    return torch.where(e >= -126, normal, denormal)


def scale_exponents(x: torch.Tensor) -> torch.Tensor:
    """Per-block unbiased scale exponent e (int32, [..., K/32]) of x [..., K]."""
    blocks = x.float().reshape(*x.shape[:-1], x.shape[-1] // SCALE_BLOCK, SCALE_BLOCK)
    return exponent_of_amax(blocks.abs().amax(dim=-1))


def exponent_of_amax(amax: torch.Tensor) -> torch.Tensor:
    """Unbiased scale exponent (int32) of block maxima |x| (float32)."""
    # Round amax's bit pattern up to a power of two (carry into the exponent at >= 0.75).
    rounded = ((amax.view(torch.int32) + 0x200000) & 0x7F800000)
    field = rounded >> 23
    e = (field - 127 - 2).clamp(-127, 127)
    # inf/nan amax: log2 is inf there, so aiter's clamp gives the top exponent. NaN is tested by
    # value: which NaN bits amax returns differs by device (a payload >= 0x7FE0 would carry out).
    return torch.where((field == 255) | amax.isnan(), torch.full_like(e, 127), e)


def encode_e2m1(q: torch.Tensor) -> torch.Tensor:
    """Magnitude code 0..7 of |q| (float32), round-to-nearest-even, saturating at 6."""
    mag = q.abs()
    code = torch.zeros(q.shape, dtype=torch.uint8, device=q.device)
    for threshold, tie_goes_up in _CODE_STEPS:
        code += (mag >= threshold) if tie_goes_up else (mag > threshold)
    return code


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] codes 0..15 -> [..., K/2] bytes; element 2j in the low nibble."""
    pairs = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)  # no -1: 0 rows are fine
    return pairs[..., 0] | (pairs[..., 1] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] bytes -> [..., K] codes 0..15."""
    packed = packed.view(torch.uint8)
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])


def quantize_mxfp4(x: torch.Tensor):
    """x [..., K] (K % 32 == 0) -> (codes uint8 [..., K/2], scales uint8 [..., K/32])."""
    _require_float("x", x)
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension [..., K], got a 0-d tensor")
    if x.shape[-1] % SCALE_BLOCK:
        raise ValueError(f"x: the last dim K must be a multiple of {SCALE_BLOCK} (one scale per "
                         f"{SCALE_BLOCK} elements), got shape {list(x.shape)}")
    xf = x.float()
    e = scale_exponents(xf)
    inv_scale = _pow2_from_exponent(-e)
    blocks = xf.reshape(*xf.shape[:-1], xf.shape[-1] // SCALE_BLOCK, SCALE_BLOCK)
    q = blocks * inv_scale.unsqueeze(-1)
    sign = ((blocks.view(torch.int32) >> 31) & 1).to(torch.uint8) << 3
    codes = (encode_e2m1(q) | sign).reshape(xf.shape)
    return pack_nibbles(codes), (e + 127).to(torch.uint8)


def e8m0_to_float(scales: torch.Tensor) -> torch.Tensor:
    """e8m0 bytes -> float32 2**(byte-127); byte 0 -> 2**-127, byte 255 -> NaN."""
    b = scales.view(torch.uint8).to(torch.int32)
    value = _pow2_from_exponent(b - 127)
    return torch.where(b == 255, torch.full_like(value, float("nan")), value)


def e2m1_lut(device) -> torch.Tensor:
    """float32 value of each 4-bit code (E2M1_VALUES, then their negatives), computed on `device`:
    no host-to-device copy, so the reference GEMM can run inside CUDA-graph capture."""
    code = torch.arange(8, dtype=torch.float32, device=device)
    normal = torch.exp2(torch.floor(code / 2) - 1) * (1 + (code % 2) / 2)  # 2^(e-1) * 1.m
    magnitudes = torch.where(code < 2, code / 2, normal)  # codes 0, 1 are the subnormals 0, 0.5
    return torch.cat((magnitudes, -magnitudes))


def e2m1_byte_lut(device) -> torch.Tensor:
    """float32 [256, 2]: the values of a packed byte's two codes, element 2j (low nibble) first.
    Built on `device` from views of e2m1_lut (no host copy or sync: CUDA-graph capture stays legal)."""
    lut = e2m1_lut(device)
    low, high = lut.unsqueeze(0).expand(16, 16), lut.unsqueeze(1).expand(16, 16)  # [high][low]
    return torch.stack((low, high), dim=-1).reshape(256, 2)


def dequantize_mxfp4(codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(codes [..., K/2], scales [..., K/32]) -> float32 [..., K]."""
    _require_codes("codes", codes)
    _require_scales("scales", scales)
    if (codes.dim() < 1 or scales.dim() != codes.dim() or codes.shape[:-1] != scales.shape[:-1]
            or codes.shape[-1] != 16 * scales.shape[-1]):
        raise ValueError(f"codes [..., K/2] and scales [..., K/32] must agree (same leading dims, "
                         f"codes.shape[-1] == 16 * scales.shape[-1]), got codes {list(codes.shape)} "
                         f"and scales {list(scales.shape)}")
    _require_same_device("scales", scales, "codes", codes)
    # e2m1_lut(device)[unpack_nibbles(codes)] times the scale, looked up a byte (two codes) at a time
    # with 32-bit indices: the same values, about 3x faster on a CPU (notes/performance.md).
    pairs = e2m1_byte_lut(codes.device).index_select(0, codes.view(torch.uint8).reshape(-1).int())
    values = pairs.view(*codes.shape[:-1], 2 * codes.shape[-1])
    blocks = values.view(*values.shape[:-1], values.shape[-1] // SCALE_BLOCK, SCALE_BLOCK)
    return blocks.mul_(e8m0_to_float(scales).unsqueeze(-1)).view(values.shape)


# ---- aiter layouts -------------------------------------------------------------------

_SCALE_VIEW = lambda rows, cols: (rows // 32, 2, 16, cols // 8, 2, 4)  # noqa: E731
_SCALE_PERM = (0, 3, 5, 2, 4, 1)
_SCALE_INVERSE_PERM = (0, 5, 3, 1, 4, 2)


def padded_scale_shape(rows: int, cols: int):
    """Shape aiter gives a shuffled scale tensor of logical shape [rows, cols]."""
    return (-(-rows // 256) * 256, -(-cols // 8) * 8)


def e8m0_shuffle(scales: torch.Tensor) -> torch.Tensor:
    """[rows, cols] -> padded, shuffled [ceil(rows/256)*256, ceil(cols/8)*8] (padding = 0)."""
    _require_scales("scales", scales)
    _require_2d("scales", scales, "[rows, cols]")
    rows, cols = scales.shape
    prow, pcol = padded_scale_shape(rows, cols)
    padded = torch.zeros((prow, pcol), dtype=torch.uint8, device=scales.device)
    padded[:rows, :cols] = scales.view(torch.uint8)
    return padded.view(_SCALE_VIEW(prow, pcol)).permute(_SCALE_PERM).contiguous().view(prow, pcol)


def e8m0_unshuffle(shuffled: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of e8m0_shuffle, cut back to [rows, cols]; padding is never read."""
    _require_scales("shuffled", shuffled)
    _require_2d("shuffled", shuffled, "[R, C] (e8m0_shuffle output)")
    prow, pcol = shuffled.shape
    if prow % 32 or pcol % 8:  # the shuffle's tiles: 32 rows x 8 columns
        raise ValueError(f"shuffled must be e8m0_shuffle output [R, C] with R % 32 == 0 and C % 8 == 0, "
                         f"got shape {list(shuffled.shape)}")
    rows, cols = _require_count("rows", rows), _require_count("cols", cols)
    if rows > prow or cols > pcol:
        raise ValueError(f"rows, cols must fit inside shuffled {list(shuffled.shape)}, got rows={rows}, cols={cols}")
    permuted_shape = tuple(_SCALE_VIEW(prow, pcol)[i] for i in _SCALE_PERM)
    flat = shuffled.view(torch.uint8).reshape(permuted_shape).permute(_SCALE_INVERSE_PERM)
    return flat.reshape(prow, pcol)[:rows, :cols].contiguous()


def shuffled_scale_index(r: int, c: int, padded_cols: int) -> int:
    """Flat index of unshuffled scale (r, c) inside the shuffled tensor (format.md §3)."""
    return (((((r // 32) * (padded_cols // 8) + c // 8) * 4 + c % 4) * 16 + r % 16) * 2
            + (c % 8) // 4) * 2 + (r % 32) // 16


def _check_weight_tiles(name, t):
    """shuffle_weight's 16-row x 32-byte tiles must cover t [N, K/2] exactly."""
    _require_codes(name, t)
    _require_2d(name, t, "[N, K/2]")
    n, half_k = t.shape
    if n % 16:
        raise ValueError(f"N ({name}.shape[0]) must be a multiple of 16, got {n}")
    if half_k % 32:
        raise ValueError(f"K/2 ({name}.shape[1]) must be a multiple of 32 (K % 64 == 0), got {half_k}")


def shuffle_weight(codes: torch.Tensor) -> torch.Tensor:
    """aiter shuffle_weight(layout=(16,16)) of packed codes [N, K/2] (N % 16, K % 64 == 0)."""
    _check_weight_tiles("codes", codes)
    n, half_k = codes.shape
    tiles = codes.view(torch.uint8).reshape(n // 16, 16, half_k // 32, 2, 16)
    return tiles.permute(0, 2, 3, 1, 4).contiguous().view(n, half_k)


def unshuffle_weight(shuffled: torch.Tensor) -> torch.Tensor:
    """Inverse of shuffle_weight."""
    _check_weight_tiles("shuffled", shuffled)
    n, half_k = shuffled.shape
    tiles = shuffled.view(torch.uint8).reshape(n // 16, half_k // 32, 2, 16, 16)
    return tiles.permute(0, 3, 1, 2, 4).contiguous().view(n, half_k)


# ---- the GEMM ------------------------------------------------------------------------

def reference_gemm(a: torch.Tensor, b_codes: torch.Tensor, b_scales: torch.Tensor) -> torch.Tensor:
    """bf16 C [M, N] = dequant(quant(a)) @ dequant(b)^T in float32.

    a: bf16 [M, K] (K % 32 == 0; any M >= 0); b_codes: [N, K/2]; b_scales: unshuffled [N, K/32].
    """
    _require_float("a", a)
    _require_2d("a", a, "[M, K]")
    m, k = a.shape
    if k % SCALE_BLOCK:
        raise ValueError(f"K (a.shape[1]) must be a multiple of {SCALE_BLOCK}, got {k}")
    _require_codes("b_codes", b_codes)
    _require_scales("b_scales", b_scales)
    n = b_codes.shape[0] if b_codes.dim() == 2 else -1
    if b_codes.dim() != 2 or b_codes.shape[1] != k // 2:
        raise ValueError(f"b_codes must have shape [N, K/2] = [N, {k // 2}], got {list(b_codes.shape)}")
    if tuple(b_scales.shape) != (n, k // SCALE_BLOCK):
        raise ValueError(f"b_scales must be the unshuffled scales [N, K/32] = {[n, k // SCALE_BLOCK]} "
                         f"(e8m0_unshuffle output), got {list(b_scales.shape)}")
    _require_same_device("b_codes", b_codes, "a", a)
    _require_same_device("b_scales", b_scales, "a", a)
    a_codes, a_scales = quantize_mxfp4(a)
    a_values = dequantize_mxfp4(a_codes, a_scales)
    b_values = dequantize_mxfp4(b_codes, b_scales)
    return (a_values @ b_values.T).to(torch.bfloat16)

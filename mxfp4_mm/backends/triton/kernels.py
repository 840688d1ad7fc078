"""Triton kernels: MXFP4 GEMM via `tl.dot_scaled` with A's quantization fused, plus a quant-only kernel.

`mxfp4_gemm_kernel` computes one [BLOCK_M, BLOCK_N] tile of C over one K range (split-K index
`program_id(1)`). Each K step quantizes a bf16 tile of A to e2m1 codes + e8m0 scales (bit-exact to
format.md §2, the same device functions as `quantize_kernel`; arithmetically, or on gfx950 with its
hardware fp4 convert: A_CONVERT below), loads B's packed codes and scales, and accumulates with
`tl.dot_scaled` (native `v_mfma_scale_f32_16x16x128_f8f6f4` on gfx950, emulated through bf16 on Hopper).
With A_CONVERT == A_FOLDED it makes no codes: both operands become their exact values in bf16
(`_fold_a`, `_fold_b`; A times 2^63, B times 2^-63, so every product is the spec's) and meet in one
plain bf16 `tl.dot`, which Triton lowers to wgmma on Hopper from 64 rows up.

B comes in one of three layouts (constexpr B_LAYOUT):
- GATHER: codes from B_q, scales gathered byte by byte from the shuffled tensor with the format.md §3
  index formula (masked to the logical [N, K/32]: any N % 16, any K % 64).
- VECTOR: codes from B_q; scales read as whole 256-byte chunks of the shuffled tensor (one 32-row
  group x 256 K) and permuted in registers (N % 32 == 0, BLOCK_K % 256 == 0).
- SHUFFLED: codes from B_shuffle (shuffle_weight's 16-row x 32-byte tiles) permuted in registers,
  scales as VECTOR.
With EVEN_K (K % BLOCK_K == 0) no K masks are needed; rows of A and B past M / N are wrapped onto
valid rows (never read out of bounds, never stored), so the loop's loads carry no masks.

Scales at the top of the e8m0 range: the spec dequantizes to fp32 (code x 2^(byte-127)) and
multiplies in fp32, so values >= 2^128 are inf there (inf x 0 = NaN, inf - inf = NaN) and products
or sums reaching 2^128 overflow; `dot_scaled` scales in its own way (bf16 operands on Hopper, the
MFMA's wider internal range on gfx950) and gives other inf/NaN patterns or finite values there. The
K loop keeps the elementwise maxima of A's and B's scale bytes; a tile whose maxima can reach that
range (`_beyond_fast_range`: A NaN blocks have byte 254), or that holds a block scaled by 2^65 or
more (byte 192 up: the fast dot would mix its terms with the next blocks' and lose theirs where its
own sum cancels), recomputes its partial exactly as the spec does (`_exact_partial`: fp32 operands,
an IEEE fp32 dot), like the cuda kernels' fallback. Ordinary data never takes that branch.

Split-K stays one launch: every split writes its fp32 partial tile to a workspace, then bumps a
per-tile counter (acq_rel); the program that arrives last sums the partials in split order (so the
result is deterministic), writes bf16 C and resets the counter to 0 for the next call.
"""

import triton
import triton.language as tl

SCALE_BLOCK = 32
B_GATHER = tl.constexpr(0)
B_VECTOR = tl.constexpr(1)
B_SHUFFLED = tl.constexpr(2)


@triton.jit
def _pow2_of_negated(e):
    """2^-e as float32 for int32 e in [-127, 127], built from bits (exp2 flushes 2^-127 on NVIDIA)."""
    normal_bits = (127 - e) << 23
    bits = tl.where(e >= 127, 0x400000, normal_bits)  # 2^-127 is the denormal 0x00400000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _exponent_of_amax(amax):
    """format.md §2 scale exponent of a block from its largest magnitude as fp32 bits, NaN already
    taken as inf (its payload could carry out of the rounding add): e = 127 there, as spec.py does."""
    # Round amax's bit pattern up to a power of two (carry into the exponent at >= 0.75).
    field = ((amax + 0x200000) & 0x7F800000) >> 23
    e = tl.minimum(tl.maximum(field - 129, -127), 127)
    return tl.where(field == 255, 127, e)  # inf after rounding: aiter's clamp of log2(inf)


@triton.jit
def _block_exponent(blocks):
    """The scale exponent per block of 32 float32 values, from the magnitudes' bit patterns (integer
    max: a NaN cannot vanish the way it can in a float max; NaN sorts above inf)."""
    magnitude = blocks.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    return _exponent_of_amax(tl.minimum(tl.max(magnitude, axis=2), 0x7F800000))


@triton.jit
def _e2m1_magnitude_codes(mag):
    """e2m1 magnitude codes (int32 0..7) of float32 |q|: round to nearest even onto
    {0, .5, 1, 1.5, 2, 3, 4, 6}, saturating at 6 (">" where ties go down, ">=" where up)."""
    return ((mag > 0.25).to(tl.int32) + (mag >= 0.75).to(tl.int32) + (mag > 1.25).to(tl.int32)
            + (mag >= 1.75).to(tl.int32) + (mag > 2.5).to(tl.int32) + (mag >= 3.5).to(tl.int32)
            + (mag > 5.0).to(tl.int32))


@triton.jit
def quantize_mxfp4_tile(x, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """float32 [BLOCK_M, BLOCK_K] -> (packed codes uint8 [BLOCK_M, BLOCK_K/2], scales uint8 [BLOCK_M, BLOCK_K/32])."""
    blocks = tl.reshape(x, (BLOCK_M, BLOCK_K // 32, 32))
    e = _block_exponent(blocks)
    code = _e2m1_magnitude_codes(tl.abs(blocks * _pow2_of_negated(e)[:, :, None]))
    code = code | (((blocks.to(tl.int32, bitcast=True) >> 31) & 1) << 3)
    low, high = tl.split(tl.reshape(code, (BLOCK_M, BLOCK_K // 2, 2)))
    # int32 -> uint8 truncates; values are 0..255, never a float->uint8 conversion (it saturates on NVIDIA).
    return (low | (high << 4)).to(tl.uint8), (e + 127).to(tl.uint8)


# ---- A through gfx950's hardware convert -------------------------------------------------------
# v_cvt_scalef32_pk_fp4_bf16 turns a bf16 pair (low half = element 2j) into the byte of their two
# codes of x / scale, rounded to nearest even and saturated at 6 (format.md §3): with scale = 2^e it
# gives §2's codes in one instruction per pair, where the arithmetic path above spends ~30 VALU per
# element. A_CONVERT (a kernel constexpr) picks the path: A_ARITHMETIC, A_HARDWARE (gfx950 only), or
# A_EMULATED (the instruction as specified, in plain arithmetic, so the hardware path's packing,
# scale and byte handling are tested on any machine, the interpreter included).
A_ARITHMETIC = tl.constexpr(0)
A_HARDWARE = tl.constexpr(1)
A_EMULATED = tl.constexpr(2)
# A_FOLDED: no codes at all. Both operands become their exact dequantized values in bf16 (A as
# dequant(quant(A)), _fold_a; B as code x scale) and meet in a plain bf16 tl.dot with fp32
# accumulation, which Triton lowers to wgmma on Hopper (dot_scaled there goes to mma.sync).
A_FOLDED = tl.constexpr(3)


@triton.jit
def _conversion_scale(e, amax_is_zero):
    """The convert's scale 2^e as float32, from bits. e = -127 is the denormal 2^-127 (its exponent
    field, 0, read as e8m0 is 2^-127 too); an all-zero block gets 2^-126, so its codes are 0 under
    any reading of a field-0 scale (the HIP kernel's conversion_scale)."""
    bits = tl.where(e > -127, (e + 127) << 23, tl.where(amax_is_zero, 0x00800000, 0x00400000))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _cvt_scalef32_pk_fp4_bf16_emulated(pairs, scale):
    """The instruction for power-of-two scales: (low code | high code << 4) of each bf16 pair / scale."""
    bits = scale.to(tl.int32, bitcast=True)
    field = bits >> 23
    # 1 / scale, exact: 2^-127 <-> 2^127, else 2^-(field - 127)
    inverse = tl.where(bits == 0x00400000, 254 << 23, tl.where(field == 254, 0x00400000, (254 - field) << 23))
    inverse = inverse.to(tl.float32, bitcast=True)
    low = _e2m1_magnitude_codes(((pairs & 0x7FFF) << 16).to(tl.float32, bitcast=True) * inverse)
    high = _e2m1_magnitude_codes((pairs & 0x7FFF0000).to(tl.float32, bitcast=True) * inverse)
    return low | ((pairs >> 12) & 8) | (high << 4) | ((pairs >> 24) & 0x80)  # signs: bits 15 and 31


@triton.jit
def _cvt_scalef32_pk_fp4_bf16(pairs, scale, A_CONVERT: tl.constexpr):
    """int32 [.., P] bf16 pairs, float32 scales of the same shape -> int32 code bytes (0..255)."""
    if A_CONVERT == A_HARDWARE:
        # The instruction writes byte 0 of its destination (op_sel 0) and keeps the other three.
        out = tl.inline_asm_elementwise("v_cvt_scalef32_pk_fp4_bf16 $0, $1, $2", "=v,v,v", [pairs, scale],
                                        dtype=tl.int32, is_pure=True, pack=1) & 0xFF
    else:
        out = _cvt_scalef32_pk_fp4_bf16_emulated(pairs, scale)
    return out


@triton.jit
def quantize_mxfp4_pairs(pairs, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, A_CONVERT: tl.constexpr):
    """A tile as int32 bf16 pairs [BLOCK_M, BLOCK_K/2] (element 2j in the low half) -> (packed codes
    uint8 [BLOCK_M, BLOCK_K/2], scales uint8 [BLOCK_M, BLOCK_K/32]), through the convert."""
    magnitude = tl.maximum(pairs & 0x7FFF, (pairs >> 16) & 0x7FFF)  # bf16 patterns: NaN above inf
    amax = tl.minimum(tl.max(tl.reshape(magnitude, (BLOCK_M, BLOCK_K // 32, 16)), axis=2), 0x7F80)
    e = _exponent_of_amax(amax << 16)
    scale = _conversion_scale(e, amax == 0)
    per_pair = tl.reshape(tl.broadcast_to(scale[:, :, None], (BLOCK_M, BLOCK_K // 32, 16)), (BLOCK_M, BLOCK_K // 2))
    codes = _cvt_scalef32_pk_fp4_bf16(pairs, per_pair, A_CONVERT)
    return codes.to(tl.uint8), (e + 127).to(tl.uint8)


@triton.jit
def _round_folded_half(bits, exponent_field, limit):
    """One half of A's bf16 pairs ([BLOCK_M, BLOCK_K/32, 16] bf16 bits moved to the top of an int32)
    -> dequant(quant(x)) x 2^63 as float32, rounded at x's own scale: the e2m1 grid scaled by 2^e
    steps by 2^(b-1) in x's binade b, and by 2^(e-1) below 2^e. (x + magic) - magic with
    magic = 1.5 x 2^(max(b, e) + 22), whose fp32 ulp is that step, rounds to nearest even as
    format.md §2 asks (symmetric in the sign: magic is an even number of steps); then clamped to
    +-6 x 2^e (`limit`) and times 2^63 (exact: the values have two significant bits; from e = 63 up,
    6 x 2^e x 2^63 overflows). exponent_field is (e + 127) << 23."""
    x = bits.to(tl.float32, bitcast=True)
    magic = (tl.maximum(bits & 0x7F800000, exponent_field) + 0x0B400000).to(tl.float32, bitcast=True)
    rounded = (x + magic) - magic
    return tl.minimum(tl.maximum(rounded, -limit), limit) * 9.223372036854775808e18  # 2^63


@triton.jit
def _fold_a(pairs, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """A as int32 bf16 pairs [BLOCK_M, BLOCK_K/2] (element 2j in the low half) -> (even, odd):
    bf16 [BLOCK_M, BLOCK_K/2] each, the values of elements 2j and 2j+1 as
    dequant(quant(A)) x 2^63 (exact up to block exponent 62, scale byte 189; the kernel takes its
    exact fallback above), and the scale bytes uint8 [BLOCK_M, BLOCK_K/32]. No codes are made
    (A_FOLDED)."""
    magnitude = tl.maximum(pairs & 0x7FFF, (pairs >> 16) & 0x7FFF)  # bf16 patterns: NaN above inf
    amax = tl.minimum(tl.max(tl.reshape(magnitude, (BLOCK_M, BLOCK_K // 32, 16)), axis=2), 0x7F80)
    e = _exponent_of_amax(amax << 16)
    exponent_field = ((e + 127) << 23)[:, :, None]
    limit = (((tl.minimum(e, 125) + 129) << 23) | 0x400000).to(tl.float32, bitcast=True)[:, :, None]  # 6 x 2^e
    blocks = tl.reshape(pairs, (BLOCK_M, BLOCK_K // 32, 16))
    even = _round_folded_half(blocks << 16, exponent_field, limit)
    odd = _round_folded_half(blocks & -65536, exponent_field, limit)
    return (tl.reshape(even, (BLOCK_M, BLOCK_K // 2)).to(tl.bfloat16),
            tl.reshape(odd, (BLOCK_M, BLOCK_K // 2)).to(tl.bfloat16), (e + 127).to(tl.uint8))


@triton.jit
def _folded_nibbles(nibbles, multiplier):
    """4-bit codes (int32 [ROWS, COLS/32, 16]) -> bf16 e2m1 x 2^(s-190): the nibble placed as fp32
    bits (sign << 31 | code << 22 is e2m1 x 2^-126, code 1 a subnormal) times the block's
    multiplier 2^(s-64), exact in fp32, then exact in bf16 for scale bytes 65..191 (and 0: values
    below any tolerance)."""
    bits = ((nibbles & 7) << 22) | ((nibbles & 8) << 28)
    return (bits.to(tl.float32, bitcast=True) * multiplier).to(tl.bfloat16)


@triton.jit
def _fold_b(codes, scales, ROWS: tl.constexpr, COLS: tl.constexpr):
    """B's packed codes uint8 [ROWS, COLS/2] and scale bytes [ROWS, COLS/32] -> (low, high): bf16
    [ROWS, COLS/2] each, elements 2j and 2j+1 (low and high nibbles) as e2m1 x 2^(s-127) x 2^-63,
    so that A's 2^63 cancels in every product; the multiplier is inf from byte 192 up."""
    blocks = tl.reshape(codes.to(tl.int32), (ROWS, COLS // 32, 16))
    multiplier = ((tl.minimum(scales.to(tl.int32), 192) + 63) << 23).to(tl.float32, bitcast=True)[:, :, None]
    low = _folded_nibbles(blocks & 15, multiplier)
    high = _folded_nibbles(blocks >> 4, multiplier)
    return tl.reshape(low, (ROWS, COLS // 2)), tl.reshape(high, (ROWS, COLS // 2))


@triton.jit
def folded_k_order(first, second, ROWS: tl.constexpr, COLS: tl.constexpr):
    """[ROWS, COLS/2] halves -> [ROWS, COLS] with all of `first` then all of `second` along K: A's
    even and odd elements, B's low and high nibbles. A dot does not depend on K's order as long as
    both operands share it; one dot (not one per half) keeps one accumulator layout, where two
    dots made Triton convert the accumulator between two wgmma layouts every step."""
    return tl.reshape(tl.permute(tl.join(first, second), (0, 2, 1)), (ROWS, COLS))


@triton.jit
def _e2m1_values(codes):
    """float32 value of 4-bit e2m1 codes (int32 0..15): 0, .5, 1, 1.5, 2, 3, 4, 6, then negated
    (code 8 is -0.0), built from bits."""
    magnitude = codes & 7
    normal_bits = (((magnitude >> 1) + 126) << 23) | ((magnitude & 1) << 22)  # 2^(m/2-1) x 1.(m%2)
    bits = tl.where(magnitude >= 2, normal_bits, tl.where(magnitude == 1, 126 << 23, 0))  # code 1: 0.5
    return (bits | ((codes >> 3) << 31)).to(tl.float32, bitcast=True)


@triton.jit
def _e8m0_values(scales):
    """float32 2^(byte-127) of uint8 e8m0 bytes, built from bits: byte 0 is the denormal 2^-127,
    byte 255 is NaN (spec.e8m0_to_float)."""
    byte = scales.to(tl.int32)
    bits = tl.where(byte == 0, 0x400000, byte << 23)
    return tl.where(byte == 255, 0x7FC00000, bits).to(tl.float32, bitcast=True)


@triton.jit
def dequantize_mxfp4_tile(codes, scales, ROWS: tl.constexpr, COLS: tl.constexpr):
    """(packed codes uint8 [ROWS, COLS/2], scales uint8 [ROWS, COLS/32]) -> float32 [ROWS, COLS],
    as spec.dequantize_mxfp4: an fp32 product, so a value >= 2^128 is inf and byte 255 gives NaN."""
    packed = codes.to(tl.int32)
    values = tl.join(_e2m1_values(packed & 15), _e2m1_values(packed >> 4))  # element 2j: the low nibble
    blocks = tl.reshape(values, (ROWS, COLS // 32, 32)) * _e8m0_values(scales)[:, :, None]
    return tl.reshape(blocks, (ROWS, COLS))


@triton.jit
def _shuffled_scale_row_offsets(rows, padded_cols):
    """format.md §3's flat index of scale (row, col) in e8m0_shuffle's output is a sum of a row part and
    a column part; this is the row part."""
    return (rows // 32) * (padded_cols // 8) * 256 + (rows % 16) * 4 + (rows % 32) // 16


@triton.jit
def _shuffled_scale_col_offsets(cols):
    """The column part of format.md §3's flat scale index (see _shuffled_scale_row_offsets)."""
    return (cols // 8) * 256 + (cols % 4) * 64 + ((cols % 8) // 4) * 2


@triton.jit
def quantize_kernel(x_ptr, codes_ptr, scales_ptr, M, K,
                    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, A_CONVERT: tl.constexpr = 0):
    """Quant-only debug kernel: bf16 x [M, K] -> codes [M, K/2], scales [M, K/32] (K % BLOCK_K == 0)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    k0 = tl.program_id(1) * BLOCK_K
    row_ok = rows[:, None] < M
    if A_CONVERT == A_ARITHMETIC:
        x = tl.load(x_ptr + rows[:, None].to(tl.int64) * K + k0 + tl.arange(0, BLOCK_K)[None, :], mask=row_ok)
        codes, scales = quantize_mxfp4_tile(x.to(tl.float32), BLOCK_M, BLOCK_K)
    else:
        pair_ptrs = (x_ptr.to(tl.pointer_type(tl.int32)) + rows[:, None].to(tl.int64) * (K // 2) + k0 // 2
                     + tl.arange(0, BLOCK_K // 2)[None, :])
        codes, scales = quantize_mxfp4_pairs(tl.load(pair_ptrs, mask=row_ok), BLOCK_M, BLOCK_K, A_CONVERT)
    half = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    tl.store(codes_ptr + rows[:, None].to(tl.int64) * (K // 2) + half[None, :], codes, mask=row_ok)
    cols = k0 // 32 + tl.arange(0, BLOCK_K // 32)
    tl.store(scales_ptr + rows[:, None].to(tl.int64) * (K // 32) + cols[None, :], scales, mask=row_ok)


@triton.jit
def _tile_coordinates(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_SIZE_M: tl.constexpr):
    """(tile_m, tile_n) of program_id(0); GROUP_SIZE_M > 1 walks GROUP_SIZE_M row tiles per column
    tile before moving on, so neighbouring programs share B tiles in L2."""
    tile = tl.program_id(0)
    n_tiles = tl.cdiv(N, BLOCK_N)
    if GROUP_SIZE_M == 1:
        tile_m = tile // n_tiles
        tile_n = tile % n_tiles
    else:
        tiles_per_group = GROUP_SIZE_M * n_tiles
        first_m = (tile // tiles_per_group) * GROUP_SIZE_M
        group_rows = tl.minimum(tl.cdiv(M, BLOCK_M) - first_m, GROUP_SIZE_M)
        tile_m = first_m + (tile % tiles_per_group) % group_rows
        tile_n = (tile % tiles_per_group) // group_rows
    return tile_m, tile_n


@triton.jit
def _a_operand(a_ptrs, k_left, EVEN_K: tl.constexpr, A_CONVERT: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_K: tl.constexpr):
    """A's codes and scales for one K step, quantized here from bf16 (a_ptrs: bf16 elements, or
    int32 bf16 pairs for the convert). k_left = K elements left from this step's start (only read
    without EVEN_K)."""
    if A_CONVERT == A_HARDWARE or A_CONVERT == A_EMULATED:  # rows of BLOCK_K/2 bf16 pairs
        codes, scales = quantize_mxfp4_pairs(_a_pairs(a_ptrs, k_left, EVEN_K, BLOCK_K), BLOCK_M, BLOCK_K, A_CONVERT)
    else:
        codes, scales = quantize_mxfp4_tile(_a_tile(a_ptrs, k_left, EVEN_K, BLOCK_K), BLOCK_M, BLOCK_K)
    return codes, scales


@triton.jit
def _a_pairs(a_ptrs, k_left, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """One K step of A as int32 bf16 pairs (a_ptrs: int32 pairs)."""
    if EVEN_K:
        pairs = tl.load(a_ptrs)
    else:
        pairs = tl.load(a_ptrs, mask=tl.arange(0, BLOCK_K // 2)[None, :] < k_left // 2, other=0)
    return pairs


@triton.jit
def _a_tile(a_ptrs, k_left, EVEN_K: tl.constexpr, BLOCK_K: tl.constexpr):
    """One K step of A as float32 (a_ptrs: bf16 elements)."""
    if EVEN_K:
        x = tl.load(a_ptrs)
    else:
        x = tl.load(a_ptrs, mask=tl.arange(0, BLOCK_K)[None, :] < k_left, other=0.0)
    return x.to(tl.float32)


@triton.jit
def _b_codes(b_ptrs, k_left, EVEN_K: tl.constexpr, B_LAYOUT: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, CACHE_MODIFIER: tl.constexpr):
    """B's packed codes [BLOCK_N, BLOCK_K/2] for one K step."""
    # One return per function: Triton compiles the code after a constexpr-if's return too.
    if B_LAYOUT == B_SHUFFLED:
        # Loaded as [BLOCK_N/16, BLOCK_K*8]: per 16-row group, (K/64, 2, row, 16 bytes) -> rows first.
        raw = tl.load(b_ptrs, cache_modifier=CACHE_MODIFIER)
        tiles = tl.reshape(raw, (BLOCK_N // 16, BLOCK_K // 64, 2, 16, 16))
        codes = tl.reshape(tl.permute(tiles, (0, 3, 1, 2, 4)), (BLOCK_N, BLOCK_K // 2))
    elif EVEN_K:
        codes = tl.load(b_ptrs, cache_modifier=CACHE_MODIFIER)
    else:
        codes = tl.load(b_ptrs, mask=tl.arange(0, BLOCK_K // 2)[None, :] < k_left // 2, other=0,
                        cache_modifier=CACHE_MODIFIER)
    return codes


@triton.jit
def _b_scales(bs_ptrs, scale_col0, k_left, EVEN_K: tl.constexpr, B_LAYOUT: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, CACHE_MODIFIER: tl.constexpr):
    """B's scales [BLOCK_N, BLOCK_K/32] for one K step (GATHER: bs_ptrs point at the rows' parts,
    the step's columns start at scale_col0)."""
    if B_LAYOUT == B_GATHER:
        cols = tl.arange(0, BLOCK_K // 32)
        ptrs = bs_ptrs + _shuffled_scale_col_offsets(scale_col0 + cols)[None, :]
        if EVEN_K:
            scales = tl.load(ptrs)
        else:
            scales = tl.load(ptrs, mask=cols[None, :] < k_left // 32, other=0)
    else:
        # [BLOCK_N/32, BLOCK_K]: per 32-row group and 256 K, (c%4, r%16, (c%8)/4, (r%32)/16) -> [n, c].
        raw = tl.load(bs_ptrs, cache_modifier=CACHE_MODIFIER)
        chunks = tl.reshape(raw, (BLOCK_N // 32, BLOCK_K // 256, 4, 16, 2, 2))
        scales = tl.reshape(tl.permute(chunks, (0, 5, 3, 1, 4, 2)), (BLOCK_N, BLOCK_K // 32))
    return scales


@triton.jit
def _b_pointers(b_ptr, bs_ptr, tile_n, k_begin, N, K, scale_cols_padded, B_LAYOUT: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Pointers of B's codes and scales at K = k_begin (GATHER: scales' row parts only).
    Rows past N wrap onto valid rows."""
    if B_LAYOUT == B_SHUFFLED:
        groups16 = (tile_n * (BLOCK_N // 16) + tl.arange(0, BLOCK_N // 16)) % (N // 16)
        b_ptrs = (b_ptr + groups16[:, None].to(tl.int64) * (K * 8) + k_begin * 8
                  + tl.arange(0, BLOCK_K * 8)[None, :])
    else:
        cols_n = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        b_ptrs = b_ptr + cols_n[:, None].to(tl.int64) * (K // 2) + k_begin // 2 + tl.arange(0, BLOCK_K // 2)[None, :]
    if B_LAYOUT == B_GATHER:
        cols_n = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        bs_ptrs = bs_ptr + _shuffled_scale_row_offsets(cols_n, scale_cols_padded)[:, None]
    else:
        groups32 = (tile_n * (BLOCK_N // 32) + tl.arange(0, BLOCK_N // 32)) % (N // 32)
        bs_ptrs = (bs_ptr + groups32[:, None] * (scale_cols_padded * 32) + k_begin
                   + tl.arange(0, BLOCK_K)[None, :])  # 256 bytes per 32 rows x 256 K: one byte per K
    return b_ptrs, bs_ptrs


@triton.jit
def _beyond_fast_range(a_top, b_top, K):
    """Whether a tile whose A / B scale bytes reach a_top / b_top can meet fp32 overflow in the
    spec's GEMM: a dequantized value >= 2^128 (6 x 2^(byte-127): byte 253 up; A's NaN blocks are
    byte 254, B's byte 255 is NaN), or a product or a sum of K products reaching 2^128
    (|a b| < 2^(ea+eb+6), sums < 2^(ea+eb+6+log2 K)); or holds a block scaled by 2^65 or more
    (byte 192 up), whose terms the fast dot mixes with the neighbouring blocks' (the cuda kernels
    take their exact fallback from the same byte)."""
    a_top = a_top.to(tl.int32)
    b_top = b_top.to(tl.int32)
    k_bits = (K.to(tl.float32).to(tl.int32, bitcast=True) >> 23) - 126  # floor(log2 K) + 1
    return ((a_top >= 192) | (b_top >= 192)
            | ((a_top - 127) + (b_top - 127) + 6 + k_bits >= 128))


@triton.jit
def _beyond_folded_range(a_top, b_top, b_bottom, K):
    """`_beyond_fast_range`, or outside the folds' exact range (A_FOLDED): an A block exponent above
    62 (byte 190 up: 6 x 2^(e+63) overflows), or a B scale byte in 1..64 (its values times 2^-63 are
    bf16 subnormals); b_bottom is the smallest nonzero B byte (255 where none)."""
    return _beyond_fast_range(a_top, b_top, K) | (a_top.to(tl.int32) >= 190) | (b_bottom.to(tl.int32) <= 64)


@triton.jit
def _b_code_offsets(cols_n, byte_cols, K, B_LAYOUT: tl.constexpr):
    """Offsets [len(cols_n), len(byte_cols)] of B's packed code bytes (row, byte column) in B_q, or
    in B_shuffle (shuffle_weight: per 16 rows and 32 bytes, two 16-row x 16-byte chunks)."""
    n = cols_n[:, None].to(tl.int64)
    c = byte_cols[None, :]
    if B_LAYOUT == B_SHUFFLED:
        offsets = (n // 16) * (K * 8) + (c // 32) * 512 + ((c % 32) // 16) * 256 + (n % 16) * 16 + c % 16
    else:
        offsets = n * (K // 2) + c
    return offsets


@triton.jit
def _exact_partial(a_ptr, b_ptr, bs_ptr, rows, cols_n, k_begin, k_end, K, scale_cols_padded,
                   B_LAYOUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The tile's fp32 partial over K in [k_begin, k_end) exactly as the spec computes it: A
    quantized as in the fast path, both operands dequantized to fp32, an IEEE fp32 dot (tf32 would
    round the operands), one 32-element scale block per step. Rows / columns as the fast path's."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    bytes16 = tl.arange(0, 16)
    b_scale_rows = _shuffled_scale_row_offsets(cols_n, scale_cols_padded)
    for k0 in range(k_begin, k_end, 32):
        x = tl.load(a_ptr + rows[:, None].to(tl.int64) * K + k0 + tl.arange(0, 32)[None, :])
        a_codes, a_scales = quantize_mxfp4_tile(x.to(tl.float32), BLOCK_M, 32)
        b_codes = tl.load(b_ptr + _b_code_offsets(cols_n, k0 // 2 + bytes16, K, B_LAYOUT))
        b_scales = tl.load(bs_ptr + b_scale_rows[:, None] + _shuffled_scale_col_offsets(k0 // 32))
        a = dequantize_mxfp4_tile(a_codes, a_scales, BLOCK_M, 32)
        b = dequantize_mxfp4_tile(b_codes, b_scales, BLOCK_N, 32)
        acc = tl.dot(a, tl.trans(b), acc, input_precision="ieee")
    return acc


@triton.jit
def _reduce_split_k(acc, partial_ptr, counter_ptr, tile, c_ptrs, c_mask, split_k, num_tiles,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Publish this split's partial; the last program to arrive for the tile sums all of them into C."""
    tile_elems: tl.constexpr = BLOCK_M * BLOCK_N
    inner = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(partial_ptr + (tl.program_id(1) * num_tiles + tile) * tile_elems + inner, acc)
    tl.debug_barrier()  # every thread's partial is written before the (single-thread) release below
    arrived = tl.atomic_add(counter_ptr + tile, 1, sem="acq_rel", scope="gpu")
    if arrived == split_k - 1:
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for split in range(split_k):  # fixed order: the same bits whichever split came last
            total += tl.load(partial_ptr + (split * num_tiles + tile) * tile_elems + inner, cache_modifier=".cg")
        tl.store(c_ptrs, total.to(tl.bfloat16), mask=c_mask)
        tl.atomic_xchg(counter_ptr + tile, 0, sem="relaxed", scope="gpu")  # ready for the next call


# Sizes are runtime values (not specialized) so that one compiled kernel serves every M and split.
@triton.jit(do_not_specialize=["M", "scale_cols_padded", "split_k", "steps_per_split", "num_tiles"])
def mxfp4_gemm_kernel(a_ptr, b_ptr, bs_ptr, c_ptr, partial_ptr, counter_ptr,
                      M, N, K, scale_cols_padded, split_k, steps_per_split, num_tiles,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_SIZE_M: tl.constexpr, USE_SPLIT_K: tl.constexpr, B_LAYOUT: tl.constexpr, EVEN_K: tl.constexpr, CACHE_MODIFIER: tl.constexpr,
                      A_CONVERT: tl.constexpr = 0):
    """C [M, N] bf16 = A @ B^T over MXFP4 operands; grid (num_tiles, split_k).

    A: bf16 [M, K];
    b_ptr: B_q uint8 [N, K/2] or, with B_LAYOUT == B_SHUFFLED, B_shuffle; B scales shuffled,
    scale_cols_padded columns.
    """
    tile_m, tile_n = _tile_coordinates(M, N, BLOCK_M, BLOCK_N, GROUP_SIZE_M)
    k_begin = tl.program_id(1) * steps_per_split * BLOCK_K
    steps = tl.minimum(steps_per_split, tl.cdiv(K - k_begin, BLOCK_K))
    rows = (tile_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M  # rows past M wrap; never stored
    if A_CONVERT != A_ARITHMETIC:  # rows of K/2 units: bf16 pairs as int32
        a_pairs = a_ptr.to(tl.pointer_type(tl.int32))
        a_ptrs = a_pairs + rows[:, None].to(tl.int64) * (K // 2) + k_begin // 2 + tl.arange(0, BLOCK_K // 2)[None, :]
    else:
        a_ptrs = a_ptr + rows[:, None].to(tl.int64) * K + k_begin + tl.arange(0, BLOCK_K)[None, :]
    b_ptrs, bs_ptrs = _b_pointers(b_ptr, bs_ptr, tile_n, k_begin, N, K, scale_cols_padded, B_LAYOUT,
                                  BLOCK_N, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    a_top = tl.zeros((BLOCK_M, BLOCK_K // 32), dtype=tl.uint8)  # elementwise maxima of the scale bytes
    b_top = tl.zeros((BLOCK_N, BLOCK_K // 32), dtype=tl.uint8)
    b_bottom = tl.full((BLOCK_N, BLOCK_K // 32), 255, dtype=tl.uint8)  # A_FOLDED: smallest nonzero byte
    for step in range(steps):
        k_left = K - k_begin - step * BLOCK_K
        if A_CONVERT == A_FOLDED:
            a_even, a_odd, a_scales = _fold_a(_a_pairs(a_ptrs, k_left, EVEN_K, BLOCK_K), BLOCK_M, BLOCK_K)
        else:
            a_codes, a_scales = _a_operand(a_ptrs, k_left, EVEN_K, A_CONVERT, BLOCK_M, BLOCK_K)
        b_codes = _b_codes(b_ptrs, k_left, EVEN_K, B_LAYOUT, BLOCK_N, BLOCK_K, CACHE_MODIFIER)
        b_scales = _b_scales(bs_ptrs, (K - k_left) // 32, k_left, EVEN_K, B_LAYOUT, BLOCK_N, BLOCK_K, CACHE_MODIFIER)
        if A_CONVERT == A_FOLDED:
            b_low, b_high = _fold_b(b_codes, b_scales, BLOCK_N, BLOCK_K)
            acc = tl.dot(folded_k_order(a_even, a_odd, BLOCK_M, BLOCK_K),
                         tl.trans(folded_k_order(b_low, b_high, BLOCK_N, BLOCK_K)), acc)
            b_bottom = tl.minimum(b_bottom, tl.where(b_scales == 0, 255, b_scales))
        else:
            acc = tl.dot_scaled(a_codes, a_scales, "e2m1", b_codes.T, b_scales, "e2m1", acc)
        a_top = tl.maximum(a_top, a_scales)
        b_top = tl.maximum(b_top, b_scales)
        if A_CONVERT != A_ARITHMETIC:
            a_ptrs += BLOCK_K // 2
        else:
            a_ptrs += BLOCK_K
        if B_LAYOUT == B_SHUFFLED:
            b_ptrs += BLOCK_K * 8
        else:
            b_ptrs += BLOCK_K // 2
        if B_LAYOUT != B_GATHER:
            bs_ptrs += BLOCK_K
    a_top = tl.max(tl.max(a_top, axis=1), axis=0)
    b_top = tl.max(tl.max(b_top, axis=1), axis=0)
    if A_CONVERT == A_FOLDED:
        beyond = _beyond_folded_range(a_top, b_top, tl.min(tl.min(b_bottom, axis=1), axis=0), K)
    else:
        beyond = _beyond_fast_range(a_top, b_top, K)
    if beyond:
        cols_n = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        acc = _exact_partial(a_ptr, b_ptr, bs_ptr, rows, cols_n, k_begin,
                             tl.minimum(k_begin + steps * BLOCK_K, K), K, scale_cols_padded,
                             B_LAYOUT, BLOCK_M, BLOCK_N)
    out_rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + out_rows[:, None].to(tl.int64) * N + out_cols[None, :]
    c_mask = (out_rows[:, None] < M) & (out_cols[None, :] < N)
    if USE_SPLIT_K:
        _reduce_split_k(acc, partial_ptr, counter_ptr, tl.program_id(0), c_ptrs, c_mask, split_k, num_tiles,
                        BLOCK_M, BLOCK_N)
    else:
        tl.store(c_ptrs, acc.to(tl.bfloat16), mask=c_mask)

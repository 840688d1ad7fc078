"""Triton kernels: MXFP4 GEMM via `tl.dot_scaled` with A's quantization fused, plus a quant-only kernel.

`mxfp4_gemm_kernel` computes one [BLOCK_M, BLOCK_N] tile of C over one K range (split-K index
`program_id(1)`). Each K step quantizes a bf16 tile of A to e2m1 codes + e8m0 scales (bit-exact to
SPEC §2, the same device function as `quantize_kernel`), loads B's packed codes from B_q and its
scales from the shuffled tensor (SPEC §3 index formula; masks keep every read inside the logical
[N, K/32] scales, never the padding), and accumulates with `tl.dot_scaled` (native
`v_mfma_scale_f32_*_f8f6f4` on gfx950, emulated through bf16 on Hopper).

Split-K stays one launch: every split writes its fp32 partial tile to a workspace, then bumps a
per-tile counter (acq_rel); the program that arrives last sums the partials in split order (so the
result is deterministic), writes bf16 C and resets the counter to 0 for the next call.
"""

import triton
import triton.language as tl

SCALE_BLOCK = 32


@triton.jit
def _pow2_of_negated(e):
    """2^-e as float32 for int32 e in [-127, 127], built from bits (exp2 flushes 2^-127 on NVIDIA)."""
    normal_bits = (127 - e) << 23
    bits = tl.where(e >= 127, 0x400000, normal_bits)  # 2^-127 is the denormal 0x00400000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def quantize_mxfp4_tile(x, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """float32 [BLOCK_M, BLOCK_K] -> (packed codes uint8 [BLOCK_M, BLOCK_K/2], scales uint8 [BLOCK_M, BLOCK_K/32])."""
    blocks = tl.reshape(x, (BLOCK_M, BLOCK_K // 32, 32))
    amax = tl.max(tl.abs(blocks), axis=2)
    # Round amax's bit pattern up to a power of two (carry into the exponent at >= 0.75).
    field = ((amax.to(tl.int32, bitcast=True) + 0x200000) & 0x7F800000) >> 23
    e = tl.minimum(tl.maximum(field - 129, -127), 127)
    e = tl.where(field == 255, 127, e)  # inf after rounding: aiter's clamp of log2(inf)
    q = blocks * _pow2_of_negated(e)[:, :, None]
    mag = tl.abs(q)
    # Round-to-nearest-even onto {0, .5, 1, 1.5, 2, 3, 4, 6}: ">" where ties go down, ">=" where up.
    code = ((mag > 0.25).to(tl.int32) + (mag >= 0.75).to(tl.int32) + (mag > 1.25).to(tl.int32)
            + (mag >= 1.75).to(tl.int32) + (mag > 2.5).to(tl.int32) + (mag >= 3.5).to(tl.int32)
            + (mag > 5.0).to(tl.int32))
    sign = (blocks.to(tl.int32, bitcast=True) >> 31) & 1
    code = code | (sign << 3)
    low, high = tl.split(tl.reshape(code, (BLOCK_M, BLOCK_K // 2, 2)))
    # int32 -> uint8 truncates; values are 0..255, never a float->uint8 conversion (it saturates on NVIDIA).
    return (low | (high << 4)).to(tl.uint8), (e + 127).to(tl.uint8)


@triton.jit
def _shuffled_scale_offsets(rows, cols, padded_cols):
    """SPEC §3: flat index of unshuffled scale (row, col) inside e8m0_shuffle's output."""
    group = (rows // 32) * (padded_cols // 8) + cols // 8
    return ((((group * 4 + cols % 4) * 16 + rows % 16) * 2 + (cols % 8) // 4) * 2 + (rows % 32) // 16)


@triton.jit
def quantize_kernel(x_ptr, codes_ptr, scales_ptr, M, K,
                    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """Quant-only debug kernel: bf16 x [M, K] -> codes [M, K/2], scales [M, K/32] (K % BLOCK_K == 0)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    k0 = tl.program_id(1) * BLOCK_K
    row_ok = rows[:, None] < M
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * K + k0 + tl.arange(0, BLOCK_K)[None, :], mask=row_ok)
    codes, scales = quantize_mxfp4_tile(x.to(tl.float32), BLOCK_M, BLOCK_K)
    half = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    tl.store(codes_ptr + rows[:, None].to(tl.int64) * (K // 2) + half[None, :], codes, mask=row_ok)
    cols = k0 // 32 + tl.arange(0, BLOCK_K // 32)
    tl.store(scales_ptr + rows[:, None].to(tl.int64) * (K // 32) + cols[None, :], scales, mask=row_ok)


@triton.jit
def _load_a_operand(a_ptr, a_scale_ptr, rows, k0, M, K,
                    A_PREQUANTIZED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """A's codes and scales for K step k0: quantized here from bf16, or read (the pre-quantized baseline)."""
    row_ok = rows[:, None] < M
    row_base = rows[:, None].to(tl.int64)
    if A_PREQUANTIZED:
        half = k0 // 2 + tl.arange(0, BLOCK_K // 2)
        cols = k0 // 32 + tl.arange(0, BLOCK_K // 32)
        codes = tl.load(a_ptr + row_base * (K // 2) + half[None, :], mask=row_ok & (half[None, :] < K // 2), other=0)
        scales = tl.load(a_scale_ptr + row_base * (K // 32) + cols[None, :],
                         mask=row_ok & (cols[None, :] < K // 32), other=0)
    else:
        ks = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(a_ptr + row_base * K + ks[None, :], mask=row_ok & (ks[None, :] < K), other=0.0)
        codes, scales = quantize_mxfp4_tile(x.to(tl.float32), BLOCK_M, BLOCK_K)
    return codes, scales


@triton.jit
def _load_b_operand(bq_ptr, bs_ptr, cols_n, k0, N, K, scale_cols_padded, BLOCK_K: tl.constexpr):
    """B's packed codes [BLOCK_N, BLOCK_K/2] from B_q and scales [BLOCK_N, BLOCK_K/32] from the shuffled tensor."""
    n_ok = cols_n[:, None] < N
    half = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    codes = tl.load(bq_ptr + cols_n[:, None].to(tl.int64) * (K // 2) + half[None, :],
                    mask=n_ok & (half[None, :] < K // 2), other=0)
    scale_cols = k0 // 32 + tl.arange(0, BLOCK_K // 32)
    offsets = _shuffled_scale_offsets(cols_n[:, None], scale_cols[None, :], scale_cols_padded)
    scales = tl.load(bs_ptr + offsets, mask=n_ok & (scale_cols[None, :] < K // 32), other=0)
    return codes, scales


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
def mxfp4_gemm_kernel(a_ptr, a_scale_ptr, bq_ptr, bs_ptr, c_ptr, partial_ptr, counter_ptr,
                      M, N, K, scale_cols_padded, split_k, steps_per_split, num_tiles,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      USE_SPLIT_K: tl.constexpr, A_PREQUANTIZED: tl.constexpr):
    """C [M, N] bf16 = A @ B^T over MXFP4 operands; grid (num_tiles, split_k).

    A: bf16 [M, K] (or, with A_PREQUANTIZED, codes [M, K/2] + unshuffled scales at a_scale_ptr);
    B_q uint8 [N, K/2]; B scales shuffled, scale_cols_padded columns.
    """
    n_tiles = tl.cdiv(N, BLOCK_N)
    tile = tl.program_id(0)
    rows = (tile // n_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols_n = (tile % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    k_begin = tl.program_id(1) * steps_per_split * BLOCK_K
    steps = tl.minimum(steps_per_split, tl.cdiv(K - k_begin, BLOCK_K))
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(steps):
        k0 = k_begin + step * BLOCK_K
        a_codes, a_scales = _load_a_operand(a_ptr, a_scale_ptr, rows, k0, M, K, A_PREQUANTIZED, BLOCK_M, BLOCK_K)
        b_codes, b_scales = _load_b_operand(bq_ptr, bs_ptr, cols_n, k0, N, K, scale_cols_padded, BLOCK_K)
        acc = tl.dot_scaled(a_codes, a_scales, "e2m1", b_codes.T, b_scales, "e2m1", acc)
    c_ptrs = c_ptr + rows[:, None].to(tl.int64) * N + cols_n[None, :]
    c_mask = (rows[:, None] < M) & (cols_n[None, :] < N)
    if USE_SPLIT_K:
        _reduce_split_k(acc, partial_ptr, counter_ptr, tile, c_ptrs, c_mask, split_k, num_tiles, BLOCK_M, BLOCK_N)
    else:
        tl.store(c_ptrs, acc.to(tl.bfloat16), mask=c_mask)

"""The Triton dot_scaled backend.

CPU: ahead-of-time compiles for gfx950 (the AMDGCN must use the scaled MFMA) and for sm_90 (PTX),
the chunked B layouts' index math replayed in torch, plans and candidates, the fused
quantization bit-exact in Triton's interpreter (golden vectors; NaN/inf blocks against spec.py),
and the exact fallback for scales at the top of the range in the interpreter (dequantization bit
for bit on extreme scale bytes, the range test, the fallback's tile against the spec's fp32 GEMM).
GPU (@pytest.mark.gpu): task and odd shapes against the spec's reference GEMM, split-K plans,
poisoned scale padding, every gfx950 and sm_90 candidate of the task shapes, NaN/inf/denormal
blocks (quantization bit for bit, GEMM NaN positions), inf operands and huge blocks next to NaN
blocks (the exact fallback), B scale bytes 253..255, and the golden vectors.
(tests/test_triton_gfx950.py checks every gfx950 candidate's AMDGCN.)
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mxfp4_mm import spec
from mxfp4_mm.devices import kernel_arch
from mxfp4_mm.backends import triton as triton_backend
from mxfp4_mm.backends.triton import plans as triton_plans
from conftest import assert_harness_close, make_inputs, reference_output

triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402

GOLDEN = Path(__file__).parent / "data" / "mxfp4_quant.pt"
REPO = Path(__file__).resolve().parent.parent


def _compile_gemm(target, block_m=16, block_n=64, block_k=256, split_k=4, b_layout="gather", n=2112, k=7168):
    plan = triton_plans.Plan(block_m, block_n, block_k, split_k, 4, 2, b_layout=b_layout)
    return triton_backend.aot_compile(plan, n, k, target)


def _require_backend(name):
    from triton.backends import backends
    if name not in backends:
        pytest.skip(f"the installed triton has no {name!r} backend")


@pytest.mark.parametrize("block_m,block_n,split_k", [(16, 64, 1), (16, 64, 4), (32, 128, 2), (64, 64, 1)])
def test_gfx950_aot_uses_scaled_mfma(block_m, block_n, split_k):
    _require_backend("amd")
    kernel = _compile_gemm(GPUTarget("hip", "gfx950", 64), block_m, block_n, 256, split_k)
    assert "v_mfma_scale_f32" in kernel.asm["amdgcn"]


def test_sm90_aot_gives_ptx():
    _require_backend("nvidia")
    for layout in ("gather", "vector", "shuffled"):
        ptx = _compile_gemm(GPUTarget("cuda", 90, 32), b_layout=layout).asm["ptx"]
        assert ".entry mxfp4_gemm_kernel" in ptx and "mma" in ptx, layout


def test_chunked_b_layouts_index_math_matches_the_spec():
    """The kernel's VECTOR / SHUFFLED reads, replayed in torch (Triton's reshape and permute keep
    torch's row-major semantics): the chunk loads of one tile and K step give B_q and the unshuffled
    scales exactly."""
    n, k, block_n, block_k = 96, 1024, 64, 512
    codes = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8)
    scales = torch.randint(0, 256, (n, k // 32), dtype=torch.uint8)
    shuffled_codes, shuffled_scales = spec.shuffle_weight(codes), spec.e8m0_shuffle(scales)
    padded_cols = shuffled_scales.shape[1]
    for tile_n in range(2):
        for k0 in range(0, k, block_k):
            groups32 = (tile_n * (block_n // 32) + torch.arange(block_n // 32)) % (n // 32)
            flat = groups32[:, None] * (padded_cols * 32) + k0 + torch.arange(block_k)[None, :]
            chunks = shuffled_scales.flatten()[flat].reshape(block_n // 32, block_k // 256, 4, 16, 2, 2)
            got = chunks.permute(0, 5, 3, 1, 4, 2).reshape(block_n, block_k // 32)
            rows = (tile_n * block_n + torch.arange(block_n)) % n
            assert torch.equal(got, scales[rows][:, k0 // 32:(k0 + block_k) // 32])
            groups16 = (tile_n * (block_n // 16) + torch.arange(block_n // 16)) % (n // 16)
            flat = groups16[:, None] * (k * 8) + k0 * 8 + torch.arange(block_k * 8)[None, :]
            tiles = shuffled_codes.flatten()[flat].reshape(block_n // 16, block_k // 64, 2, 16, 16)
            got = tiles.permute(0, 3, 1, 2, 4).reshape(block_n, block_k // 2)
            assert torch.equal(got, codes[rows][:, k0 // 2:(k0 + block_k) // 2])


def test_gather_scale_offsets_split_into_row_and_column_parts():
    """The GATHER path adds a per-row and a per-column part; their sum is format.md §3's index."""
    padded_cols = 24
    for r in range(0, 300, 7):
        for c in range(padded_cols):
            row = (r // 32) * (padded_cols // 8) * 256 + (r % 16) * 4 + (r % 32) // 16
            col = (c // 8) * 256 + (c % 4) * 64 + ((c % 8) // 4) * 2
            assert row + col == spec.shuffled_scale_index(r, c, padded_cols)


def test_old_six_field_plans_still_work():
    plan = triton_plans.Plan(16, 64, 128, 4, 8, 2)
    assert (plan.waves_per_eu, plan.group_size_m, plan.cache_modifier, plan.b_layout) == (0, 1, "", "gather")
    assert triton_backend.plan_label(plan) == "m16n64k128w8s2.sk4.e0.g1.ca.gather"


def test_sm90_candidates_put_the_measured_plan_first():
    for shape, listed in triton_plans.PLANS["sm_90"].items():
        plans = triton_backend.candidates_for_arch(*shape, "sm_90", 132)
        assert plans[0] == triton_plans.Plan(*listed)
        assert all(triton_backend.fits(p, shape[1], shape[2]) for p in plans)
        assert len({triton_backend.plan_label(p) for p in plans}) == len(plans) > 1


def test_chunked_layouts_refuse_shapes_they_cannot_read():
    plan = triton_plans.Plan(16, 64, 512, 1, 4, 1, b_layout="shuffled")
    assert triton_backend.fits(plan, 2112, 7168)
    assert not triton_backend.fits(plan, 48, 7168)      # N % 32 != 0
    assert not triton_backend.fits(plan, 2112, 1536 + 256)  # K % BLOCK_K != 0
    assert triton_backend.candidates(16, 2112, 7168, torch.device("cpu")) == []


def test_the_tuner_is_offered_only_memchecked_layouts(monkeypatch):
    """gfx950's table plans read B in chunks ("vector"/"shuffled"); until those layouts pass
    compute-sanitizer memcheck the tuner does not see them, the other plans it does."""
    class Props:
        multi_processor_count = 256
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: Props())
    monkeypatch.setattr(triton_backend, "kernel_arch", lambda device: "gfx950")
    every = triton_backend.candidates_for_arch(16, 2112, 7168, "gfx950", 256)
    offered = triton_backend.candidates(16, 2112, 7168, torch.device("cuda", 0))
    assert {p.b_layout for p in every} > {"gather"}
    assert offered == [p for p in every if p.b_layout in triton_backend.MEMCHECKED_LAYOUTS] and offered


def test_gfx950_offers_narrower_column_tiles_only_where_the_grid_leaves_cus_idle():
    """AMD's 128-column tiles give 23-128 programs at the K = 512 task shapes on 256 CUs: the
    candidates add 64 (and 32) columns while the grid still fits the CUs, fitted to their warps;
    a shape whose prior already fills the CUs gets none."""
    def narrow(shape):
        prior = triton_backend.candidates_for_arch(*shape, "gfx950", 256)[0]
        return prior, [p for p in triton_backend.candidates_for_arch(*shape, "gfx950", 256)
                       if p.block_n < prior.block_n]
    prior, extra = narrow((32, 4096, 512))
    assert prior.block_n == 128 and [(p.block_m, p.block_n, p.num_warps) for p in extra] == [(8, 64, 4)]
    assert extra[0] == triton_plans.fitted(prior._replace(block_n=64))
    assert [p.block_n for p in narrow((4, 2880, 512))[1]] == [64, 32]  # 23, 45 and 90 programs
    assert narrow((16, 2112, 7168))[1] == [] and narrow((256, 3072, 1536))[1] == []


def test_split_k_steps_leave_no_empty_split():
    for k_steps in range(1, 40):
        for wanted in range(1, 20):
            split_k, steps = triton_plans.split_k_steps(k_steps, wanted)
            assert (split_k - 1) * steps < k_steps <= split_k * steps


_INTERPRETER_CHECK = r"""
import sys, torch
from mxfp4_mm import spec
from mxfp4_mm.backends import triton as triton_backend
golden, a_convert = torch.load(sys.argv[1]), sys.argv[2]
for case in golden["cases"]:
    x = case["x"]
    k = x.shape[1]
    block_k = next(b for b in (256, 128, 64) if k % b == 0)
    codes, scales = triton_backend.quantize(x, 16, block_k, a_convert)
    # The interpreter widens bf16 denormals wrongly (its own bug; the GPU test covers them),
    # so blocks holding one are left out here along with the extreme blocks.
    blocks = x.float().reshape(x.shape[0], -1, 32)
    has_denormal = ((blocks != 0) & (blocks.abs() < 2.0 ** -126)).any(-1)
    keep = ~case["extreme_block"] & ~has_denormal
    assert keep.float().mean() > 0.5, case["kind"]
    assert torch.equal(scales[keep], case["scale"][keep]), case["kind"]
    keep_bytes = keep.repeat_interleave(16, dim=1)
    assert torch.equal(codes[keep_bytes], case["fp4"][keep_bytes]), case["kind"]
# NaN, +-inf, bf16 max, zeros: the block amax is taken on the bits (spec.py's results exactly).
special = torch.randn(4, 256).bfloat16()
special[0, 3] = float("nan")
special[0, 40] = float("inf")
special[1, 70] = -float("inf")
special[1, 100] = torch.tensor(0x7FFF, dtype=torch.int16).view(torch.bfloat16)  # NaN, largest payload
special[2, :32] = torch.finfo(torch.bfloat16).max
special[3, 32:64] = 0
codes, scales = triton_backend.quantize(special, 16, 256, a_convert)
want_codes, want_scales = spec.quantize_mxfp4(special)
assert scales[0, 0] == scales[0, 1] == scales[1, 2] == scales[1, 3] == 254, scales
assert torch.equal(scales, want_scales) and torch.equal(codes, want_codes)
print("ok")
"""


@pytest.mark.parametrize("a_convert", ["arithmetic", "emulated"])
def test_fused_quantization_is_bit_exact_in_the_interpreter(a_convert):
    """Both of A's paths on the golden vectors: the arithmetic one, and the hardware convert's
    (bf16 pairs, the scale operand, the code byte) with the instruction emulated."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", _INTERPRETER_CHECK, str(GOLDEN), a_convert], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


_EXACT_FALLBACK_CHECK = r"""
import torch, triton, triton.language as tl
from mxfp4_mm import spec
from mxfp4_mm.backends.triton import kernels as tk

EXTREME_BYTES = (0, 1, 126, 127, 128, 252, 253, 254, 255)


@triton.jit
def dequantize_kernel(codes_ptr, scales_ptr, out_ptr, ROWS: tl.constexpr, COLS: tl.constexpr):
    r = tl.arange(0, ROWS)[:, None]
    codes = tl.load(codes_ptr + r * (COLS // 2) + tl.arange(0, COLS // 2)[None, :])
    scales = tl.load(scales_ptr + r * (COLS // 32) + tl.arange(0, COLS // 32)[None, :])
    tl.store(out_ptr + r * COLS + tl.arange(0, COLS)[None, :], tk.dequantize_mxfp4_tile(codes, scales, ROWS, COLS))


@triton.jit
def range_kernel(a_ptr, b_ptr, k_ptr, out_ptr, SIZE: tl.constexpr):
    i = tl.arange(0, SIZE)
    flag = tk._beyond_fast_range(tl.load(a_ptr + i), tl.load(b_ptr + i), tl.load(k_ptr + i))
    tl.store(out_ptr + i, flag.to(tl.int32))


@triton.jit
def exact_partial_kernel(a_ptr, b_ptr, bs_ptr, out_ptr, M, N, K, scale_cols_padded,
                      k_begin: tl.constexpr, k_end: tl.constexpr,  # the interpreter ranges over Python ints only
                      B_LAYOUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.arange(0, BLOCK_M) % M
    cols = tl.arange(0, BLOCK_N) % N
    acc = tk._exact_partial(a_ptr, b_ptr, bs_ptr, rows, cols, k_begin, k_end, K, scale_cols_padded,
                            B_LAYOUT, BLOCK_M, BLOCK_N)
    tl.store(out_ptr + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :], acc)


def check_dequantize():
    # All 16 codes under each extreme scale byte (and a few others), bit for bit, NaN where the spec has NaN.
    rows = 16
    scale_bytes = torch.tensor(EXTREME_BYTES + (2, 64, 125, 129, 200, 250, 251), dtype=torch.uint8)
    packed = spec.pack_nibbles(torch.arange(16, dtype=torch.uint8).repeat(rows, 2))
    scales = scale_bytes[:, None].contiguous()
    out = torch.empty(rows, 32)
    dequantize_kernel[(1,)](packed, scales, out, ROWS=rows, COLS=32)
    want = spec.dequantize_mxfp4(packed, scales)
    assert torch.equal(out.isnan(), want.isnan())
    keep = ~want.isnan()
    assert torch.equal(out[keep].view(torch.int32), want[keep].view(torch.int32))
    # 4 x 2^126 and up is inf; at byte 254, 2 x 2^127 and up.
    assert out[scale_bytes == 253].isinf().sum() == 8 and out[scale_bytes == 254].isinf().sum() == 16


def check_fast_range():
    # Flagged: bytes 192..255 and any pair whose K-long sums of products can reach 2^128;
    # never flagged: ordinary data.
    a, b = torch.meshgrid(torch.arange(256, dtype=torch.int32), torch.arange(256, dtype=torch.int32), indexing="ij")
    size = 256 * 256
    for k in (64, 128, 1000, 7168, 2 ** 20):
        out = torch.empty(size, dtype=torch.int32)
        range_kernel[(1,)](a.flatten().to(torch.uint8), b.flatten().to(torch.uint8),
                           torch.full((size,), k, dtype=torch.int32), out, SIZE=size)
        flagged = out.view(256, 256).bool()
        largest_sum = 36.0 * 2.0 ** ((a - 127) + (b - 127)).double() * k
        assert flagged[a >= 253].all() and flagged[b >= 253].all()
        assert flagged[largest_sum >= 2.0 ** 128].all()
        assert not flagged[(a <= 140) & (b <= 140)].any()
        assert flagged[(a == 250) & (b == 127)].all()  # a huge A block against ordinary B
        assert flagged[a >= 192].all() and flagged[b >= 192].all()  # a block scaled by 2^65 or more


def extreme_operands(m, n, k, gen):
    # inf operands after dequantization (A: inf, bf16 max; B: bytes 253..254), NaN blocks, a B
    # NaN scale, huge and tiny blocks -- but no finite product reaching 2^128: its fp32 result
    # depends on FMA contraction and order (the spec's GEMM leaves that to the device's matmul).
    a = torch.randn((m, k), generator=gen).bfloat16()
    a[0, 34] = float("nan")
    a[0, 37] = float("inf")                                        # block 1: byte 254, inf at 37
    a[1, 64:96] = (a[1, 64:96].float() * 2.0 ** 112).bfloat16()    # a huge finite block
    a[1, 100] = float("nan")
    a[2, 70] = -torch.finfo(torch.bfloat16).max                     # -inf after dequantization
    a[:, 224:288] = (a[:, 224:288].float() * 2.0 ** -8).bfloat16()  # small where B is huge
    b_codes = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=gen)
    b_scales = torch.randint(118, 130, (n, k // 32), dtype=torch.uint8, generator=gen)
    for row, (col, byte) in enumerate(((3, 0), (4, 1), (5, 126), (3, 127), (4, 128), (7, 252), (8, 253),
                                       (7, 254), (8, 255))):
        b_scales[row + 3, col] = byte
    return a, b_codes, b_scales


def check_exact_partial():
    # The fallback's tile against the spec's fp32 GEMM on its K range: every B layout, rows and
    # columns past M / N wrapped.
    gen = torch.Generator().manual_seed(7)
    m, n, k, k_begin, k_end = 3, 48, 320, 32, 288
    a, b_codes, b_scales = extreme_operands(m, n, k, gen)
    a_codes, a_scales = spec.quantize_mxfp4(a)
    want = (spec.dequantize_mxfp4(a_codes, a_scales)[:, k_begin:k_end]
            @ spec.dequantize_mxfp4(b_codes, b_scales)[:, k_begin:k_end].T)
    assert want.isnan().any() and want.isinf().any() and want.isfinite().any()
    b_scale_sh = spec.e8m0_shuffle(b_scales)
    for b_layout, b in ((0, b_codes), (1, b_codes), (2, spec.shuffle_weight(b_codes))):
        out = torch.empty(4, 64)
        exact_partial_kernel[(1,)](a, b, b_scale_sh, out, m, n, k, b_scale_sh.shape[1], k_begin, k_end,
                                B_LAYOUT=b_layout, BLOCK_M=4, BLOCK_N=64)
        bits = out.view(torch.int32)
        assert torch.equal(bits[m], bits[0]) and torch.equal(bits[:m, n:], bits[:m, :16]), b_layout
        got = out[:m, :n]
        assert torch.equal(got.isnan(), want.isnan()), b_layout
        torch.testing.assert_close(got, want, rtol=1e-5, atol=0, equal_nan=True)


check_dequantize()
check_fast_range()
check_exact_partial()
print("ok")
"""


def test_exact_fallback_in_the_interpreter(tmp_path):
    script = tmp_path / "exact_fallback_check.py"  # a file: @triton.jit reads its functions' source
    script.write_text(_EXACT_FALLBACK_CHECK)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-W", "ignore", str(script)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


_FOLDED_CHECK = r"""
import sys, torch, triton, triton.language as tl
from mxfp4_mm import spec
from mxfp4_mm.backends.triton import kernels as tk


@triton.jit
def fold_a_kernel(pairs_ptr, even_ptr, odd_ptr, scales_ptr, ROWS: tl.constexpr, COLS: tl.constexpr):
    r = tl.arange(0, ROWS)[:, None]
    half = r * (COLS // 2) + tl.arange(0, COLS // 2)[None, :]
    even, odd, scales = tk._fold_a(tl.load(pairs_ptr + half), ROWS, COLS)
    tl.store(even_ptr + half, even)
    tl.store(odd_ptr + half, odd)
    tl.store(scales_ptr + r * (COLS // 32) + tl.arange(0, COLS // 32)[None, :], scales)


@triton.jit
def fold_b_kernel(codes_ptr, scales_ptr, low_ptr, high_ptr, ROWS: tl.constexpr, COLS: tl.constexpr):
    r = tl.arange(0, ROWS)[:, None]
    half = r * (COLS // 2) + tl.arange(0, COLS // 2)[None, :]
    scales = tl.load(scales_ptr + r * (COLS // 32) + tl.arange(0, COLS // 32)[None, :])
    low, high = tk._fold_b(tl.load(codes_ptr + half), scales, ROWS, COLS)
    tl.store(low_ptr + half, low)
    tl.store(high_ptr + half, high)


@triton.jit
def folded_dot_kernel(a_ptr, b_ptr, bs_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    # One K step of the kernel's folded path, its own loads: A pairs, B codes and scales.
    rows = tl.arange(0, M)[:, None]
    cols = tl.arange(0, N)[:, None]
    pairs = tl.load(a_ptr + rows * (K // 2) + tl.arange(0, K // 2)[None, :])
    codes = tl.load(b_ptr + cols * (K // 2) + tl.arange(0, K // 2)[None, :])
    scales = tl.load(bs_ptr + cols * (K // 32) + tl.arange(0, K // 32)[None, :])
    a_even, a_odd, _ = tk._fold_a(pairs, M, K)
    b_low, b_high = tk._fold_b(codes, scales, N, K)
    a = tk.folded_k_order(a_even, a_odd, M, K)
    b = tk.folded_k_order(b_low, b_high, N, K)
    # fp32 operands: the interpreter's bf16 dot is wrong (2^36 off on unit values, Triton 3.6);
    # the bf16 values themselves are exact, so this is the kernel's sum up to rounding.
    acc = tl.dot(a.to(tl.float32), tl.trans(b.to(tl.float32)), input_precision="ieee")
    tl.store(out_ptr + rows * N + tl.arange(0, N)[None, :], acc)


@triton.jit
def range_kernel(a_ptr, b_ptr, low_ptr, out_ptr, K, SIZE: tl.constexpr):
    i = tl.arange(0, SIZE)
    flag = tk._beyond_folded_range(tl.load(a_ptr + i), tl.load(b_ptr + i), tl.load(low_ptr + i), K)
    tl.store(out_ptr + i, flag.to(tl.int32))


def fold_a(x):
    rows, cols = x.shape
    even = torch.empty(rows, cols // 2, dtype=torch.bfloat16)
    odd, scales = torch.empty_like(even), torch.empty(rows, cols // 32, dtype=torch.uint8)
    fold_a_kernel[(1,)](x.contiguous().view(torch.int32), even, odd, scales, ROWS=rows, COLS=cols)
    return torch.stack((even, odd), -1).reshape(rows, cols), scales


def check_fold_a(golden):
    # dequant(quant(x)) x 2^63 bit for bit wherever the block's byte is at most 189; the
    # interpreter widens bf16 denormals wrongly (its own bug), so blocks holding one are left out.
    gen = torch.Generator().manual_seed(11)
    wide = torch.randn(16, 512, generator=gen) * torch.exp2(torch.randint(-110, 62, (16, 16), generator=gen).float()
                                                             ).repeat_interleave(32, 1)
    inputs = [(case["x"], ~case["extreme_block"]) for case in golden["cases"]]
    inputs.append((wide.bfloat16(), torch.ones(16, 16, dtype=torch.bool)))
    for x, keep in inputs:
        rows = max(16, 1 << (x.shape[0] - 1).bit_length())  # the interpreter: powers of two
        cols = 1 << (x.shape[1] - 1).bit_length()
        padded = torch.zeros(rows, cols, dtype=torch.bfloat16)
        padded[: x.shape[0], : x.shape[1]] = x
        values, scales = fold_a(padded)
        values, scales = values[: x.shape[0], : x.shape[1]], scales[: x.shape[0], : x.shape[1] // 32]
        codes, want_scales = spec.quantize_mxfp4(x)
        blocks = x.float().reshape(x.shape[0], -1, 32)
        keep = keep & ~((blocks != 0) & (blocks.abs() < 2.0 ** -126)).any(-1) & (want_scales <= 189)
        assert keep.float().mean() > 0.3  # the adversarial cases: 40 % of their blocks
        assert torch.equal(scales[keep], want_scales[keep])
        want = spec.dequantize_mxfp4(codes, want_scales).double() * 2.0 ** 63
        kept = keep.repeat_interleave(32, 1)
        assert torch.equal(values.double()[kept], want[kept])


def check_fold_b():
    # Every code under every byte: exact (times 2^-63) for 65..191, below 2^-120 for 0, not finite from 192.
    codes = spec.pack_nibbles(torch.arange(16, dtype=torch.uint8).repeat(256, 2))
    scales = torch.arange(256, dtype=torch.uint8)[:, None].contiguous()
    low = torch.empty(256, 16, dtype=torch.bfloat16)
    high = torch.empty_like(low)
    fold_b_kernel[(1,)](codes, scales, low, high, ROWS=256, COLS=32)
    got = torch.stack((low, high), -1).reshape(256, 32).double() * 2.0 ** 63
    want = spec.dequantize_mxfp4(codes, scales).double()
    assert torch.equal(got[65:192], want[65:192])
    assert (got[0] - want[0]).abs().max() < 2.0 ** -120
    nonzero = spec.unpack_nibbles(codes[192:]) % 8 != 0
    assert got[192:][nonzero].isinf().all() and got[192:][~nonzero].isnan().all()  # 0 x inf: the fallback's tiles


def check_folded_dot():
    gen = torch.Generator().manual_seed(12)
    m, n, k = 16, 32, 128
    a = torch.randn((m, k), generator=gen).bfloat16()
    b_codes = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=gen)
    b_scales = torch.randint(110, 140, (n, k // 32), dtype=torch.uint8, generator=gen)
    out = torch.empty(m, n)
    folded_dot_kernel[(1,)](a.view(torch.int32), b_codes, b_scales, out, M=m, N=n, K=k)
    a_codes, a_scales = spec.quantize_mxfp4(a)
    want = spec.dequantize_mxfp4(a_codes, a_scales) @ spec.dequantize_mxfp4(b_codes, b_scales).T
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)


def check_range():
    size = 256 * 256
    a, b = torch.meshgrid(torch.arange(256, dtype=torch.int32), torch.arange(256, dtype=torch.int32), indexing="ij")
    a, b = a.flatten().to(torch.uint8), b.flatten().to(torch.uint8)
    for k in (64, 7168):
        for low in (1, 64, 65, 128, 255):  # the smallest nonzero B byte; 255 where every byte is 0
            out = torch.empty(size, dtype=torch.int32)
            range_kernel[(1,)](a, b, torch.full((size,), low, dtype=torch.uint8), out, k, SIZE=size)
            flagged = out.bool()
            ordinary = (a <= 140) & (b <= 140)
            assert flagged[a >= 190].all() and flagged[b >= 192].all()
            assert flagged[ordinary].all() if low <= 64 else not flagged[ordinary].any()


check_fold_a(torch.load(sys.argv[1]))
check_fold_b()
check_folded_dot()
check_range()
print("ok")
"""


def test_folded_operands_are_exact_in_the_interpreter(tmp_path):
    """A_FOLDED's pieces: A's fold bit for bit with the spec (golden vectors, wide exponents), B's
    for every code and byte, one K step's two dots against the spec's fp32 product, and the
    folds' range test."""
    script = tmp_path / "folded_check.py"
    script.write_text(_FOLDED_CHECK)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-W", "ignore", str(script), str(GOLDEN)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def _ptxas_spill_bytes(ptx: str, tmp_path) -> int:
    """Spill stores of the PTX's kernel under Triton's own ptxas (sm_90a), as tools/triton_sass.py counts them."""
    sys.path.insert(0, str(REPO / "tools"))
    import triton_sass
    return triton_sass.registers_and_spills(ptx, "sm_90", tmp_path)[1]


@pytest.mark.parametrize("shape", [(64, 7168, 2048), (256, 3072, 1536)])
def test_sm90_folded_plans_use_wgmma_without_spills(shape, tmp_path):
    """The folded plans offered from M 64 up are warpgroup MMAs (dot_scaled on sm_90 is mma.sync)
    and fit the registers."""
    _require_backend("nvidia")
    m, n, k = shape
    folded = [p for p in triton_backend.candidates_for_arch(m, n, k, "sm_90", 132)
              if p.a_convert == "folded" and p.block_m >= 64]
    assert folded
    for plan in folded:
        ptx = triton_backend.aot_compile(plan, n, k, GPUTarget("cuda", 90, 32)).asm["ptx"]
        assert "wgmma.mma_async" in ptx, triton_backend.plan_label(plan)
        assert _ptxas_spill_bytes(ptx, tmp_path) == 0, triton_backend.plan_label(plan)


def test_folded_plans_are_offered_on_nvidia_only():
    for shape in triton_plans.PLANS["sm_90"]:
        plans = triton_backend.candidates_for_arch(*shape, "sm_90", 132)
        folded = [p for p in plans if p.a_convert == "folded"]
        prior = triton_plans.Plan(*triton_plans.PLANS["sm_90"][shape])  # the table's plan comes first
        assert folded and plans[0] == prior
        if prior.a_convert == "folded":  # a tuned folded entry keeps its dot_scaled twin on offer
            assert prior._replace(a_convert="arithmetic") in plans
        assert all(p.block_m < 64 for p in folded) == (shape[0] < 64)
        assert ".fold" in triton_backend.plan_label(folded[0])
        assert all(p.b_layout == "gather" for p in folded)  # the layout their memcheck covered
    for shape in triton_plans.PLANS["gfx950"]:
        for arch in ("gfx950", "gfx942"):
            assert all(p.a_convert != "folded" for p in triton_backend.candidates_for_arch(*shape, arch, 256))


@pytest.mark.parametrize("shape", [(16, 2112, 7168), (64, 7168, 2048), (256, 3072, 1536)])
def test_a_folded_prior_varies_without_new_layouts_and_keeps_its_dot_scaled_twin(shape, monkeypatch):
    """A table the tuner writes may hold a folded plan: around it the candidates stay folded plans in
    the gather layout (memchecked) plus the prior's dot_scaled twin."""
    prior = triton_plans.Plan(*triton_plans.PLANS["sm_90"][shape])._replace(a_convert="folded")
    monkeypatch.setitem(triton_plans.PLANS, "sm_90", {**triton_plans.PLANS["sm_90"], shape: tuple(prior)})
    plans = triton_backend.candidates_for_arch(*shape, "sm_90", 132)
    assert plans[0] == prior and prior._replace(a_convert="arithmetic") in plans
    assert all(p.b_layout == "gather" for p in plans if p.a_convert == "folded")
    assert len(plans) == len(set(plans))


# ---- on the GPU -----------------------------------------------------------------------------

TASK_SHAPES = [(8, 2112, 7168), (16, 3072, 1536), (64, 3072, 1536), (256, 2880, 512),
               (4, 2880, 512), (16, 2112, 7168), (32, 4096, 512), (32, 2880, 512),
               (64, 7168, 2048), (256, 3072, 1536)]
ODD_SHAPES = [(1, 16, 64), (3, 48, 192), (17, 48, 576), (5, 80, 320), (33, 272, 1088), (130, 144, 2624)]


def _run(data, plan=None):
    a, _, b_q, b_shuffle, b_scale_sh = data
    (m, k), n = a.shape, b_q.shape[0]
    if plan is None:
        return triton_backend.make_runner(m, n, k, a.device)(a, b_q, b_shuffle, b_scale_sh)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=a.device)
    triton_backend.make_launcher(m, n, k, a.device, plan)(a, b_q, b_scale_sh, out)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", TASK_SHAPES + ODD_SHAPES)
def test_matches_reference(m, n, k):
    data = make_inputs(m, n, k, seed=m + n + k, device="cuda")
    assert_harness_close(_run(data), reference_output(data))


@pytest.mark.gpu
@pytest.mark.parametrize("plan", [
    triton_plans.Plan(16, 64, 256, 3, 4, 2), triton_plans.Plan(16, 32, 128, 5, 4, 3),
    triton_plans.Plan(32, 128, 256, 8, 8, 2), triton_plans.Plan(64, 64, 256, 1, 4, 2),
    triton_plans.Plan(16, 32, 128, 5, 4, 3, a_convert="folded"), triton_plans.Plan(64, 128, 128, 4, 8, 3, a_convert="folded"),
])
def test_split_k_plans_write_every_element_and_reset_their_counters(plan):
    for seed in (1, 2):  # the second call relies on the counters the first left at 0
        data = make_inputs(19, 208, 1856, seed=seed, device="cuda")
        assert_harness_close(_run(data, plan), reference_output(data))


@pytest.mark.gpu
def test_scale_padding_is_never_read():
    data = list(make_inputs(5, 48, 320, seed=9, device="cuda"))  # scales [48, 10] padded to [256, 16]
    n, cols = 48, 320 // 32
    poisoned = torch.full_like(data[4], 255)  # 255 decodes as NaN
    flat = poisoned.view(-1)
    rows, columns = torch.meshgrid(torch.arange(n), torch.arange(cols), indexing="ij")
    index = torch.tensor([spec.shuffled_scale_index(r, c, data[4].shape[1])
                          for r, c in zip(rows.flatten().tolist(), columns.flatten().tolist())])
    flat[index.to(flat.device)] = data[4].view(-1)[index.to(flat.device)]
    data[4] = poisoned
    assert_harness_close(_run(tuple(data)), reference_output(tuple(data)))


@pytest.mark.gpu
@pytest.mark.parametrize("a_convert", ["arithmetic", "emulated", "hardware"])
def test_fused_quantization_is_bit_exact_on_the_gpu(a_convert):
    """"hardware" (gfx950's fp4 convert) runs on an MI355X only: its first run there checks the
    instruction itself against the golden vectors."""
    if a_convert == "hardware" and kernel_arch(torch.device("cuda")) != "gfx950":
        pytest.skip("the hardware fp4 convert needs gfx950")
    golden = torch.load(GOLDEN)
    for case in golden["cases"]:
        x = case["x"].cuda()
        block_k = next(b for b in (256, 128, 64) if x.shape[1] % b == 0)
        codes, scales = triton_backend.quantize(x, 16, block_k, a_convert)
        keep = ~case["extreme_block"]
        assert torch.equal(scales.cpu()[keep], case["scale"][keep]), case["kind"]
        keep_bytes = keep.repeat_interleave(16, dim=1)
        assert torch.equal(codes.cpu()[keep_bytes], case["fp4"][keep_bytes]), case["kind"]


def _candidate_cases():
    """(shape, plan) for every gfx950 and sm_90 candidate of the task shapes: the kernel logic of each
    (layouts, split-K, tiles) is the same on any GPU, so the H200 checks the gfx950 ones too."""
    cases = []
    for shape in TASK_SHAPES:
        for arch in ("gfx950", "sm_90"):
            units = triton_plans.GFX950_COMPUTE_UNITS if arch == "gfx950" else 132
            for plan in triton_backend.candidates_for_arch(*shape, arch, units):
                cases.append(pytest.param(shape, plan, id=f"{arch}-{'x'.join(map(str, shape))}-"
                                                          f"{triton_backend.plan_label(plan)}"))
    assert triton_plans.PLANS["gfx950"]
    return cases


@pytest.mark.gpu
@pytest.mark.parametrize("shape,plan", _candidate_cases())
def test_every_candidate_matches_reference(shape, plan):
    data = make_inputs(*shape, seed=sum(shape), device="cuda")
    a, _, b_q, b_shuffle, b_scale_sh = data
    if kernel_arch(a.device) != "gfx950":
        plan = triton_backend.with_convert_emulated(plan)
    runner = triton_backend.make_runner(*shape, a.device, plan)
    assert runner.plan == plan
    assert_harness_close(runner(a, b_q, b_shuffle, b_scale_sh), reference_output(data))
    if plan.b_layout == "shuffled":  # without B_shuffle it runs the B_q twin
        assert_harness_close(runner(a, b_q, None, b_scale_sh), reference_output(data))


def _special_blocks(m, k, seed):
    """bf16 [m, k] with blocks holding NaN, +-inf, bf16 max, denormals and all-zero rows."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((m, k), generator=gen).bfloat16()
    x[0, 3] = float("nan")
    x[1, 40] = float("inf")
    x[2, 70] = -float("inf")
    x[3, 100] = torch.tensor(0x7FFF, dtype=torch.int16).view(torch.bfloat16)  # NaN, largest payload
    x[4, :32] = torch.finfo(torch.bfloat16).max
    x[5, 32:64] = torch.randn(32, generator=gen) * 2.0 ** -130  # denormal bf16
    x[6, :64] = torch.tensor(1, dtype=torch.int16).view(torch.bfloat16)  # the smallest denormal
    x[7] = 0
    return x


@pytest.mark.gpu
def test_special_blocks_quantize_exactly_as_the_spec():
    x = _special_blocks(16, 512, 3)
    codes, scales = triton_backend.quantize(x.cuda(), 16, 256)
    want_codes, want_scales = spec.quantize_mxfp4(x)
    assert scales[0, 0] == scales[1, 1] == scales[2, 2] == scales[3, 3] == 254
    assert torch.equal(scales.cpu(), want_scales)
    assert torch.equal(codes.cpu(), want_codes)


@pytest.mark.gpu
@pytest.mark.parametrize("plan", [
    triton_plans.Plan(16, 64, 256, 1, 4, 2), triton_plans.Plan(16, 128, 512, 2, 4, 1, b_layout="shuffled"),
    triton_plans.Plan(8, 128, 512, 1, 8, 1, 2, 1, ".cg", "vector"),
    triton_plans.Plan(16, 64, 256, 1, 4, 2, a_convert="folded"), triton_plans.Plan(64, 128, 128, 2, 8, 3, a_convert="folded"),
])
def test_nan_and_inf_rows_match_the_reference(plan):
    a = _special_blocks(16, 1024, 5).cuda()
    data = list(make_inputs(16, 256, 1024, seed=4, device="cuda"))
    data[0] = a
    out = triton_backend.make_runner(16, 256, 1024, a.device, plan)(a, data[2], data[3], data[4])
    ref = reference_output(tuple(data))
    assert torch.equal(out.isnan().cpu(), ref.isnan().cpu())
    assert_harness_close(out, ref)


# ---- scales at the top of the range: the exact fallback -----------------------------------------

_FOLDED_WGMMA = triton_plans.Plan(64, 64, 128, 1, 4, 3, a_convert="folded")  # a wgmma tile, one warpgroup

def _assert_matches_the_spec(out, ref, label):
    """NaN for NaN, inf for inf (with its sign), the rest within the harness tolerance."""
    nan_differs = (out.isnan() != ref.isnan()).cpu()
    assert not nan_differs.any(), (label, nan_differs.nonzero()[:8].tolist(), out.cpu()[nan_differs][:8].tolist())
    assert_harness_close(out, ref)


def _spec_output(a, b_q, b_scales):
    """C from operands given directly, and the (A, B_q, B_shuffle, B_scale_sh) a runner takes."""
    return spec.reference_gemm(a, b_q, b_scales), (a, b_q, spec.shuffle_weight(b_q), spec.e8m0_shuffle(b_scales))


def _outputs(plans, operands):
    a, b_q, b_shuffle, b_scale_sh = (t.cuda() for t in operands)
    (m, k), n = a.shape, b_q.shape[0]
    for plan in plans:
        runner = triton_backend.make_runner(m, n, k, a.device, plan)
        yield triton_backend.plan_label(runner.plan), runner(a, b_q, b_shuffle, b_scale_sh)


@pytest.mark.gpu
def test_an_inf_in_a_nan_block_gives_the_specs_nan_where_b_is_zero():
    """Found by the extremes property test (1, 256, 1024): A's block holds NaNs (scale byte 254),
    an inf (code 6: 6 x 2^127 = inf in fp32) and huge elements that quantize to 0. The spec gives
    inf x 0 = NaN where B's code at the inf is 0, +-inf elsewhere; dot_scaled gave inf there."""
    gen = torch.Generator().manual_seed(1)
    m, n, k = 1, 256, 1024
    a = torch.randn((m, k), generator=gen).bfloat16()
    block = a[0, :32].float().clamp(-1.9, 1.9) * 2.0 ** 124  # |q| < 0.25: code 0 under byte 254
    block[[4, 11, 30]] = float("nan")
    block[17] = float("inf")
    a[0, :32] = block.bfloat16()
    b_q, b_scales = spec.quantize_mxfp4(torch.randn((n, k), generator=gen).bfloat16())
    ref, operands = _spec_output(a, b_q, b_scales)
    assert ref.isnan().any() and ref.isinf().any()
    plans = [None, triton_plans.Plan(16, 64, 256, 1, 4, 2), triton_plans.Plan(16, 64, 128, 4, 4, 2),
             triton_plans.Plan(16, 128, 512, 2, 4, 1, b_layout="shuffled"),
             triton_plans.Plan(8, 128, 512, 1, 8, 1, 2, 1, ".cg", "vector"), _FOLDED_WGMMA]
    for label, out in _outputs(plans, operands):
        _assert_matches_the_spec(out, ref.cuda(), label)


@pytest.mark.gpu
def test_a_huge_block_next_to_a_nan_block_matches_the_spec():
    """Found by the extremes property test (1, 32, 128): block 0 huge (scale byte 250, values up
    to 2^126), block 1 NaN (byte 254, codes 0). B is small enough that no product reaches 2^128
    (beyond that the spec's fp32 result depends on the device's FMA use and summation order)."""
    gen = torch.Generator().manual_seed(2)
    m, n, k = 1, 32, 128
    a = torch.randn((m, k), generator=gen).bfloat16()
    a[0, :32] = (a[0, :32].float() * 2.0 ** 124).bfloat16()
    a[0, 45] = float("nan")
    b_q, b_scales = spec.quantize_mxfp4((torch.randn((n, k), generator=gen) * 2.0 ** -4).bfloat16())
    ref, operands = _spec_output(a, b_q, b_scales)
    assert spec.quantize_mxfp4(a)[1][0, :2].tolist() == [250, 254]
    assert ref.isfinite().all() and ref.float().abs().max() > 2.0 ** 120
    plans = [None, triton_plans.Plan(16, 32, 128, 1, 4, 2), triton_plans.Plan(16, 64, 128, 1, 4, 2),
             triton_plans.Plan(16, 32, 128, 1, 4, 2, a_convert="folded")]
    for label, out in _outputs(plans, operands):
        _assert_matches_the_spec(out, ref.cuda(), label)


@pytest.mark.gpu
def test_b_scale_bytes_253_to_255_match_the_spec():
    """B blocks with scale bytes 253 and 254 (inf values) and 255 (NaN), against small A there."""
    gen = torch.Generator().manual_seed(3)
    m, n, k = 3, 64, 512
    a = torch.randn((m, k), generator=gen).bfloat16()
    a[:, 256:] = (a[:, 256:].float() * 2.0 ** -8).bfloat16()
    b_q, b_scales = spec.quantize_mxfp4(torch.randn((n, k), generator=gen).bfloat16())
    b_scales[5, 9], b_scales[6, 10], b_scales[7, 11], b_scales[8, 12] = 252, 253, 254, 255
    ref, operands = _spec_output(a, b_q, b_scales)
    assert ref[:, 8].isnan().all() and (ref[:, 6].isinf() | ref[:, 6].isnan()).all()
    plans = [None, triton_plans.Plan(16, 64, 256, 2, 4, 2),
             triton_plans.Plan(16, 64, 512, 1, 4, 1, b_layout="shuffled"), _FOLDED_WGMMA]
    for label, out in _outputs(plans, operands):
        _assert_matches_the_spec(out, ref.cuda(), label)


@pytest.mark.gpu
def test_the_folds_range_edges_match_the_spec():
    """The folded plans' own fallback edges: B scale bytes 1..64 (bf16 subnormals once folded)
    next to 65 and 0, and A blocks at bytes 189..191 (6 x 2^(e+63) overflows from 190)."""
    gen = torch.Generator().manual_seed(4)
    m, n, k = 4, 64, 512
    a = torch.randn((m, k), generator=gen).bfloat16()
    b_q, b_scales = spec.quantize_mxfp4(torch.randn((n, k), generator=gen).bfloat16())
    plans = [triton_plans.Plan(16, 64, 128, 1, 4, 2, a_convert="folded"), _FOLDED_WGMMA]
    for row, byte in enumerate((1, 30, 64, 65, 0)):
        b_scales[row, 3] = byte
    ref, operands = _spec_output(a, b_q, b_scales)
    for label, out in _outputs(plans, operands):
        _assert_matches_the_spec(out, ref.cuda(), label)
    for target in (189, 190, 191):  # one A block scaled to that byte, B small enough to stay finite
        a_big = a.clone()
        a_big[1, 64:96] = (a[1, 64:96].float() * 2.0 ** (target - int(spec.quantize_mxfp4(a)[1][1, 2]))).bfloat16()
        b_small_q, b_small = spec.quantize_mxfp4((torch.randn((n, k), generator=gen) * 2.0 ** -58).bfloat16())
        assert spec.quantize_mxfp4(a_big)[1][1, 2] == target and b_small.min() >= 65  # only A at its edge
        ref, operands = _spec_output(a_big, b_small_q, b_small)
        assert ref.isfinite().all()
        for label, out in _outputs(plans, operands):
            _assert_matches_the_spec(out, ref.cuda(), f"{label} A byte {target}")

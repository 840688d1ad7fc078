"""The fp8 kernel of the cuda backend (backends/cuda/mxfp4_gemm_sm90_fp8.cu, Fp8Plan).

CPU: the e2m1 -> e4m3 byte lookup the kernel uses (modelled bit for bit, every code and every
exponent offset it allows), plan geometry and validity, labels, table round trip, the tensor map's
swizzle rules, and an nvcc build of the benchmark shapes' plans without spills or serialized wgmmas
(skipped without nvcc). GPU (@pytest.mark.gpu, sm_90): the benchmark shapes and odd shapes against
the reference, operands outside the folded range (the exact fallback), the huge-block input, fresh
outputs and data, one build per M class, and a captured graph (the dependent launch inside it).
"""

import concurrent.futures
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mxfp4_mm import bench, runtime
from mxfp4_mm.backends import cuda
from mxfp4_mm.backends.cuda import plans as cuda_plans
from mxfp4_mm.backends.cuda.plans import FP8, Fp8Plan
from mxfp4_mm.kernels import source_paths
from conftest import (assert_fresh_outputs_and_fresh_data, assert_harness_close, assert_replays_in_a_captured_graph,
                      make_inputs, reference_output)

BENCH_SHAPES = [(4, 2880, 512), (16, 2112, 7168), (32, 4096, 512), (32, 2880, 512), (64, 7168, 2048)]
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


# ---- CPU: the byte lookup ----------------------------------------------------------------------

def _prmt(a, b, selector):
    """PTX prmt.b32 (default mode): byte i of the result is byte (nibble i of selector) of b:a,
    replicated sign when the nibble's bit 3 is set."""
    pool = struct.pack("<II", a & 0xFFFFFFFF, b & 0xFFFFFFFF)
    out = 0
    for i in range(4):
        nibble = (selector >> (4 * i)) & 0xF
        byte = pool[nibble & 7]
        if nibble & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


def _e4m3_value(byte):
    sign = -1.0 if byte & 0x80 else 1.0
    exponent, mantissa = (byte >> 3) & 0xF, byte & 7
    if exponent == 0:
        return sign * mantissa * 2.0 ** -9
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def _kernel_source():
    return source_paths()[cuda.FP8_SOURCE].read_text()


def _lut(d):
    """e4m3_lut_lo / e4m3_lut_hi of the kernel, in u32 arithmetic."""
    return (0x3C383000 + ((8 * d) & 0xFFFFFFFF) * 0x01010100) & 0xFFFFFFFF, \
           (0x4C484440 + ((8 * d) & 0xFFFFFFFF) * 0x01010101) & 0xFFFFFFFF


def _assert_kernel_states(*lines):
    """The kernel's source holds each line a model here mirrors (a change there must change the model)."""
    source = _kernel_source()
    missing = [line for line in lines if line not in source]
    assert not missing, missing


def test_the_kernel_states_the_lookup_modelled_here():
    _assert_kernel_states(
        "0x3C383000u + (u32)(8 * d) * 0x01010100u",
        "0x4C484440u + (u32)(8 * d) * 0x01010101u",
        "const u32 magnitude = w & 0x77777777u, sign = (w >> 3) & 0x11111111u;",
        "return make_uint2(prmt(lo, hi, magnitude) | prmt(0x8000u, 0u, sign),\n",
        "prmt(lo, hi, magnitude >> 16) | prmt(0x8000u, 0u, sign >> 16));")


def _e2m1x8_to_e4m3(w, lo, hi):
    """e2m1x8_to_e4m3 of the kernel: the 8 e4m3 bytes of a word's 8 codes, first value lowest."""
    magnitude, sign = w & 0x77777777, (w >> 3) & 0x11111111
    low = _prmt(lo, hi, magnitude) | _prmt(0x8000, 0, sign)
    high = _prmt(lo, hi, magnitude >> 16) | _prmt(0x8000, 0, sign >> 16)
    return low | high << 32


@pytest.mark.parametrize("d", range(-5, 7))
def test_every_code_becomes_its_exact_e4m3_value(d):
    """All 16 codes in each of the 8 positions of a word, among neighbours of every other code:
    e2m1 * 2^d exactly (signed zero too), each byte from its own code only."""
    lo, hi = _lut(d)
    for code in range(16):
        for position in range(8):
            for other in (0, 0xF, 0x8, 0x7):  # the neighbours' codes must not leak into this byte
                w = sum(other << (4 * p) for p in range(8) if p != position) | code << (4 * position)
                byte = (_e2m1x8_to_e4m3(w, lo, hi) >> (8 * position)) & 0xFF
                want = (-1.0 if code & 8 else 1.0) * E2M1[code & 7] * 2.0 ** d
                assert _e4m3_value(byte) == want, (d, code, position, other)
                assert (byte & 0x80) == (0x80 if code & 8 else 0)


def test_the_lookup_leaves_the_normal_range_outside_the_offsets_the_kernel_allows():
    """d = -6 would make 0.5 * 2^d an e4m3 subnormal, d = 7 would reach 768 > 448: the kernel clamps
    to -5 and marks such rows inexact, and the largest exponent sets d = 6."""
    assert 0.5 * 2.0 ** -6 < 2.0 ** -6 and 6 * 2.0 ** 7 > 448


# ---- CPU: A's layout ---------------------------------------------------------------------------

def _a_offset(m, g, mp, chunks, kc=256):
    """a_offset of the kernel: byte of (row m, k16 group g) in [M tile][chunk][k16 group][mp rows] x 16 B."""
    return (((m // mp * chunks + g // (kc // 16)) * (kc // 16) + g % (kc // 16)) * mp + m % mp) * 16


def test_the_kernel_states_the_a_layout_modelled_here():
    _assert_kernel_states("(((m / MP * CHUNKS + g / (KC / 16)) * (KC / 16) + g % (KC / 16)) * MP + m % MP) * 16",
                          "a_e4m3 + (size_t)blockIdx.z * CHUNKS * A_CHUNK")


@pytest.mark.parametrize("mp, tiles, k", [(8, 1, 256), (64, 3, 2048), (128, 2, 1536)])
def test_a_layout_gives_each_m_tile_and_chunk_one_contiguous_copy(mp, tiles, k):
    """Every (row, k16 group) has its own 16 bytes; an (M tile, chunk) is the contiguous A_CHUNK bytes
    the GEMM copies from a_tile + chunk * A_CHUNK, inside it the wgmma operand's k16-group-major order,
    and a multicast group's 1/mc slices are whole 16-byte units."""
    chunks, a_chunk = k // 256, mp * 256
    seen = set()
    for m in range(mp * tiles):
        for g in range(k // 16):
            offset = _a_offset(m, g, mp, chunks)
            seen.add(offset)
            tile, chunk = m // mp, g // 16
            base = (tile * chunks + chunk) * a_chunk
            assert base <= offset < base + a_chunk
            assert offset - base == ((g % 16) * mp + m % mp) * 16  # [k16 group][mp rows] x 16 B
    assert seen == set(range(0, mp * tiles * k, 16))
    for mc in cuda_plans.FP8_MCS:
        assert a_chunk % (16 * mc) == 0


# The kernel's K order inside a chunk, modelled: where A's quantization writes each value
# (a_permuted_offset) and which B codes a thread converts into each fragment register (b_fragments,
# convert_b_fragments, and the wgmma's register layout, CUTLASS's ALayout_64x32).

def _a_logical_k(block, word, half, j):
    """a_permuted_offset: value j of half `half` of code word `word` of the chunk's block `block`
    lands at k16 group 2s + half, byte 4 (block % 4) + j of the wgmma's (logical) K."""
    s = 4 * (block // 4) + word
    return 16 * (2 * s + half) + 4 * (block % 4) + j


def _b_fragment_sources(cg, wg, wt):
    """(logical k, row, physical k, code byte in the stage) of every byte of a thread's fragments."""
    wg_blocks = 8 // cg
    units, words = (wg_blocks + 3) // 4, min(4, wg_blocks)
    b0, t, g, warp_rows = wg * wg_blocks, wt % 4, (wt % 32) // 4, 16 * (wt // 32)
    out = []
    for h in range(2):
        r = warp_rows + g + 8 * h
        for u in range(units):
            b = 4 * (b0 // 4 + u) + t
            unit = r * 128 + ((b ^ (r & 7)) * 16) + 4 * (b0 % 4)  # b_fragments' codes[h][u]
            for jw in range(words):
                step = b0 + words * u + jw
                for reg_half in range(2):  # frag[step][h] = e.x (codes 0-3), frag[step][2 + h] = e.y (4-7)
                    for j in range(4):
                        logical = 32 * step + 16 * reg_half + 4 * t + j  # ALayout_64x32: reg 2 * half + h
                        physical = 32 * b + 8 * (b0 % 4 + jw) + 4 * reg_half + j
                        out.append((logical, r, physical, unit + 4 * jw))
    return out


def test_the_kernel_states_the_k_order_modelled_here():
    _assert_kernel_states(
        "const int chunk = block / NB, b = block % NB, s = 4 * (b / 4) + word;",
        "return a_offset(m, chunk * (KC / 16) + 2 * s + half) + 4 * (b % 4);",
        "const int b = 4 * (b0 / 4 + u) + t;",
        "f.codes[h][u] = r * 128 + ((b ^ (r & 7)) * 16) + 4 * (b0 % 4);",
        "frag[WORDS * u + j][h] = e.x;", "frag[WORDS * u + j][2 + h] = e.y;")


@pytest.mark.parametrize("cg", [1, 2, 4])
def test_a_and_b_take_k_in_the_same_order(cg):
    """Every (B row, logical k) of a chunk is fed once, from the B code of the same physical k that
    A's quantization put at that logical k; each thread's words are whole words of one 16-byte unit."""
    a_physical = {}
    for block in range(8):
        for word in range(4):
            for half in range(2):
                for j in range(4):
                    a_physical[_a_logical_k(block, word, half, j)] = 32 * block + 8 * word + 4 * half + j
    assert sorted(a_physical) == list(range(256)) and sorted(a_physical.values()) == list(range(256))
    fed = {}
    for wg in range(cg):
        for wt in range(128):
            for logical, r, physical, word_address in _b_fragment_sources(cg, wg, wt):
                assert (r, logical) not in fed
                fed[(r, logical)] = physical
                assert a_physical[logical] == physical
                block = physical // 32  # the swizzled unit holds this block's codes, word by word
                assert word_address == r * 128 + ((block ^ (r & 7)) * 16) + 4 * (physical % 32 // 8)
    assert len(fed) == 64 * 256


def test_a_chunk_further_on_moves_the_scale_index_by_256():
    """The conversion works each thread's scale index out once and adds 256 a chunk (b_fragments)."""
    _assert_kernel_states("(r >> 5) * GROUP_SCALES + (c >> 3) * 256 + (c & 3) * 64 + (r & 15) * 4 + ((c & 7) >> 2) * 2"
                          " + ((r & 31) >> 4)", "f.scale[h][u] + lc * 256")

    def scale_index(r, c, group_scales=1 << 16):
        return ((r >> 5) * group_scales + (c >> 3) * 256 + (c & 3) * 64 + (r & 15) * 4 + ((c & 7) >> 2) * 2
                + ((r & 31) >> 4))

    assert all(scale_index(r, c + 8) == scale_index(r, c) + 256 for r in range(64) for c in range(1024))


# ---- CPU: plans --------------------------------------------------------------------------------

def test_fp8_plans_of_the_benchmark_shapes_fit():
    for m, n, k in BENCH_SHAPES:
        plan = cuda_plans.fp8_plan(m, k)
        assert plan is not None and plan.mp == cuda_plans.m_class(m) >= m
        assert cuda_plans.is_valid(m, n, k, plan)
        assert 2 <= plan.stages <= min(16, k // 256)
        assert cuda_plans.smem_bytes(m, n, k, plan) + cuda_plans.FP8_STATIC_SMEM <= cuda_plans.MAX_SMEM
        assert cuda_plans.grid(m, n, plan) == (-(-n // 64), 1, 1)
        for split in cuda_plans.fp8_plans(m, n, k):
            assert cuda_plans.is_valid(m, n, k, split)
            ctas = cuda_plans.grid(m, n, split)[0] * split.split_k
            assert ctas <= 132 or split.split_k == 1 or (ctas <= 2 * 132 and split == cuda_plans.fp8_paired_plan(m, n, k))


def test_fp8_plans_put_the_splits_first_where_the_tiles_leave_most_sms_idle():
    """33 tiles on 132 SMs (16x2112x7168): the limit keeps every split-3 plan of one and two
    warpgroups (the measured winner's split) and cuts the unsplit plans, which were 4-6 us slower;
    112 tiles (64x7168x2048): the unsplit plans stay first."""
    def base(plans):
        return [p for p in plans if not p.ahead and not p.cv]
    long_k = base(cuda_plans.fp8_plans(16, 2112, 7168))
    assert len(long_k) == 12 and all(p.split_k > 1 for p in long_k)
    assert {(p.cg, p.stages) for p in long_k if p.split_k == 3} >= {(1, 10), (2, 10), (1, 4), (2, 4)}
    assert [p.split_k for p in long_k] == sorted((p.split_k for p in long_k), reverse=True)
    wide = base(cuda_plans.fp8_plans(64, 7168, 2048))
    assert wide[0].split_k == 1 and cuda_plans.fp8_tiles(64, 7168) * 2 >= 132


def test_the_quantization_block_is_the_kernels():
    """A thread per 8 values of a row, whole warps, ceil(words / 512) words a thread past 512 words;
    the kernel is built for the launcher's block (its word stride assumes it)."""
    source = source_paths()["mxfp4_gemm_sm90_fp8.cu"].read_text()
    assert "constexpr int QW = (QUANT_WORDS + QUANT_THREADS - 1) / QUANT_THREADS;" in source
    assert "#define QUANT_THREADS" not in source and "int QUANT_THREADS" not in source
    plan = cuda_plans.fp8_plan(64, 2048)
    for k in range(256, 65536 + 1, 256):
        words, threads = k // 8, cuda_plans.fp8_quant_threads(k)
        per_thread = (words + 511) // 512
        assert threads == ((words + per_thread - 1) // per_thread + 31) // 32 * 32
        assert threads % 32 == 0 and threads <= 512 and threads * per_thread >= words
        assert f"-DQUANT_THREADS={threads}" in cuda_plans.compile_options(2048, k, plan)
    assert [cuda_plans.fp8_quant_threads(k) for k in (1536, 2048, 4096, 7168, 16384)] == [192, 256, 512, 448, 512]


def test_fp8_validity_rules():
    wide = cuda_plans.fp8_plan(256, 1536)  # the widest e4m3 wrapper is n = 128: two tiles along M
    assert wide.mp == 128 and cuda_plans.grid(256, 3072, wide) == (48, 1, 2)
    assert cuda_plans.grid(129, 3072, wide) == (48, 1, 2) and cuda_plans.grid(128, 3072, wide) == (48, 1, 1)
    assert cuda_plans.fp8_plan(64, 640) is None  # K in whole chunks of 256
    plan = Fp8Plan(FP8, 64, 4)
    assert cuda_plans.is_valid(64, 7168, 2048, plan) and cuda_plans.is_valid(33, 7168, 2048, plan)
    assert cuda_plans.is_valid(65, 7168, 2048, plan) and cuda_plans.grid(65, 7168, plan)[2] == 2
    assert not cuda_plans.is_valid(64 * 64 + 1, 7168, 2048, plan)  # more tiles along M than the grid takes
    assert not cuda_plans.is_valid(0, 7168, 2048, plan)
    assert cuda_plans.is_valid(64, 7168, 2048, plan._replace(cg=2))
    assert cuda_plans.is_valid(32, 7168, 2048, plan._replace(mp=32, cg=4))
    assert not cuda_plans.is_valid(64, 7168, 2048, plan._replace(cg=3))  # a chunk's 8 blocks split evenly
    # registers (ptxas spilled both): 5 warps on a scheduler leave 96 a thread, 3 leave 168
    assert not cuda_plans.is_valid(64, 7168, 2048, plan._replace(cg=4))
    assert not cuda_plans.is_valid(128, 3072, 1536, plan._replace(mp=128, stages=3, cg=2))
    assert cuda_plans.fp8_register_limit(plan._replace(cg=4)) == 96 and cuda_plans.fp8_register_limit(plan) == 255
    assert cuda_plans.is_valid(64, 7168, 2048, plan._replace(mc=4))
    assert cuda_plans.is_valid(64, 7168, 2048, plan._replace(mc=2))
    assert not cuda_plans.is_valid(16, 2112, 7168, plan._replace(mc=2))  # 33 B tiles: groups of 2 do not tile them
    assert not cuda_plans.is_valid(64, 7168, 2048, plan._replace(mc=3))
    assert not cuda_plans.is_valid(64, 7168, 2048, plan._replace(mc=4, split_k=4))  # a cluster of 16
    assert cuda_plans.is_valid(64, 7168, 2048, plan._replace(mc=4, split_k=2))
    assert not cuda_plans.is_valid(64, 7168, 2048, plan._replace(stages=1))
    assert not cuda_plans.is_valid(64, 7168, 2048, plan._replace(stages=40))  # over the shared memory
    assert not cuda_plans.is_valid(64, 7168, 2048, plan._replace(mp=48))
    assert cuda_plans.is_valid(64, 7168, 2048, plan._replace(split_k=8))
    assert not cuda_plans.is_valid(64, 7168, 2048, plan._replace(split_k=9))
    assert not cuda_plans.is_valid(64, 7168, 512, plan._replace(split_k=3))  # more splits than chunks
    assert cuda_plans.fp8_plan(16, 7168, 4).stages == 7  # a CTA's 7 chunks


def test_fp8_labels_options_and_table_round_trip():
    plan = cuda_plans.fp8_plan(64, 2048)
    assert cuda.plan_label(plan) == f"f8.m64.q{plan.stages}"
    assert cuda.plan_family(plan) == "f8"
    assert cuda_plans.plan_from_fields(tuple(plan)) == plan
    assert cuda_plans.compile_options(7168, 2048, plan) == ("-DGN=7168", "-DGK=2048", "-DMP=64", f"-DSTAGES={plan.stages}",
                                                             "-DQUANT_THREADS=256")
    split = cuda_plans.fp8_plan(16, 7168, 4)
    assert cuda.plan_label(split) == "f8.m16.q7.s4" and cuda_plans.compile_options(2112, 7168, split)[-1] == "-DSPLITK=4"
    assert cuda_plans.grid(16, 2112, split) == (33, 4, 1)
    groups = split._replace(cg=2)
    assert cuda.plan_label(groups) == "f8.m16.q7.s4.g2"
    assert cuda_plans.compile_options(2112, 7168, groups)[-1] == "-DCG=2"
    assert cuda_plans.plan_from_fields(tuple(groups)) == groups and cuda_plans.fp8_threads(groups) == 288
    shared = cuda_plans.fp8_plan(32, 2048, 2, 4)._replace(mc=4)
    assert cuda.plan_label(shared) == f"f8.m32.q{shared.stages}.s2.g4.x4"
    assert cuda_plans.compile_options(7168, 2048, shared)[-3:] == ("-DSPLITK=2", "-DCG=4", "-DMC=4")


def _assert_offered_once_checked(monkeypatch, flag, field, shape, expected):
    """The fp8 plans with `field` set reach the tuner's candidates exactly when `flag` is set (the
    table's own plan, which always leads, left out)."""
    monkeypatch.setattr(cuda, "offers_pipe", lambda device: True)
    monkeypatch.setattr(cuda, "compute_units", lambda device: 132)
    monkeypatch.setattr(cuda_plans, "PLANS", {key: fields for key, fields in cuda_plans.PLANS.items()
                                              if fields[0] != FP8})
    offered = lambda: [p for p in cuda.candidates(*shape, "cuda") if isinstance(p, Fp8Plan) and getattr(p, field)]
    try:
        for checked in (False, True):
            monkeypatch.setattr(cuda, flag, checked)
            cuda._candidates.cache_clear()
            assert offered() == (expected if checked else [])
    finally:
        cuda._candidates.cache_clear()


def test_fp8_ahead_plans_rules_and_offer(monkeypatch):
    """B's first chunks converted ahead of A: M up to 64, K of 8 chunks or more, as many chunks as the
    shared memory holds beside a 4-stage ring, at least one chunk of every CTA left to the ring, no
    multicast; offered to the tuner only once checked on a GPU."""
    ahead = cuda_plans.fp8_ahead_plans(16, 2112, 7168)
    assert [(p.split_k, p.cg, p.ahead) for p in ahead] == [(4, 2, 6), (4, 1, 6), (3, 2, 8), (3, 1, 8), (2, 2, 8), (2, 1, 8)]
    assert all(p.mp == 16 and p.stages == 4 and p.mc == 1 for p in ahead)
    plan = ahead[2]
    assert cuda.plan_label(plan) == "f8.m16.q4.s3.g2.a8" and cuda_plans.compile_options(2112, 7168, plan)[-1] == "-DAHEAD=8"
    assert cuda_plans.plan_from_fields(tuple(plan)) == plan
    scale_bytes = 2 * 224 * 32
    assert cuda_plans.fp8_smem_bytes(7168, plan) == 4 * (8192 + 16 * 256) + 8 * (64 + 16) * 256 + scale_bytes + 1024
    assert not cuda_plans.is_valid(16, 2112, 7168, plan._replace(ahead=9))  # split 3: CTAs of 9 chunks keep one
    assert not cuda_plans.is_valid(16, 2112, 7168, plan._replace(stages=5))  # over the shared memory
    assert not cuda_plans.is_valid(16, 2112, 7168, plan._replace(mc=2))
    assert cuda_plans.is_valid(16, 2112, 7168, plan._replace(ahead=0))
    # M class 64: 112 tiles fill the GPU unsplit; 3 chunks of 32 KB (B converted, A) beside the ring
    assert [(p.mp, p.split_k, p.cg, p.ahead) for p in cuda_plans.fp8_ahead_plans(64, 7168, 2048)] == [(64, 1, 2, 3), (64, 1, 1, 3)]
    assert cuda_plans.fp8_ahead_plans(128, 3072, 1536) == []  # M class 128: A lands with B's first chunk
    assert cuda_plans.fp8_ahead_plans(32, 4096, 512) == []  # 2 chunks: A is not late there
    assert [p for p in cuda_plans.fp8_plans(16, 2112, 7168) if p.ahead] == ahead
    _assert_offered_once_checked(monkeypatch, "FP8_AHEAD_CHECKED", "ahead", (16, 2112, 7168), ahead)


def test_fp8_cv_plans_rules_and_offer(monkeypatch):
    """Converter warpgroups feeding one MMA warpgroup through shared memory (`cv`): the converted ring
    and A's ring of cv slots beside B's code ring, one more warpgroup and copy warp, no multicast or
    chunks ahead; offered to the tuner only once checked on a GPU."""
    plans = cuda_plans.fp8_cv_plans(16, 2112, 7168)
    assert plans and all(p.cv >= 2 and p.mc == 1 and p.ahead == 0 and p.mp == 16 for p in plans)
    assert {p.split_k for p in plans} == {1, 3, 4} and {p.cg for p in plans} == {1, 2}
    plan = Fp8Plan(FP8, 16, 10, 3, 2, 1, 0, 4)
    assert plan in plans and cuda.plan_label(plan) == "f8.m16.q10.s3.g2.v4"
    assert cuda_plans.compile_options(2112, 7168, plan)[-1] == "-DCV=4"
    assert cuda_plans.plan_from_fields(tuple(plan)) == plan
    assert cuda_plans.fp8_threads(plan) == 2 * 128 + 128 + 64
    scale_bytes = 2 * 224 * 32
    assert cuda_plans.fp8_smem_bytes(7168, plan) == 10 * 8192 + 4 * (64 + 16) * 256 + scale_bytes + 1024
    assert not cuda_plans.is_valid(16, 2112, 7168, plan._replace(cv=1))
    assert not cuda_plans.is_valid(16, 2112, 7168, plan._replace(mc=2))  # multicast
    assert not cuda_plans.is_valid(16, 2112, 7168, plan._replace(ahead=2))
    assert not cuda_plans.is_valid(16, 2112, 7168, plan._replace(stages=16, cv=8))  # over the shared memory
    # M class 128: one converter warpgroup only (two leave the MMA warpgroup too few registers)
    wide = cuda_plans.fp8_cv_plans(256, 3072, 1536)
    assert wide and all(p.mp == 128 and p.cg == 1 for p in wide)
    assert not cuda_plans.is_valid(256, 3072, 1536, wide[0]._replace(cg=2))
    assert [p for p in cuda_plans.fp8_plans(16, 2112, 7168) if p.cv] == plans
    _assert_offered_once_checked(monkeypatch, "FP8_CV_CHECKED", "cv", (16, 2112, 7168), plans)


def test_fp8_plans_are_offered_only_once_memchecked(monkeypatch):
    monkeypatch.setattr(cuda, "offers_pipe", lambda device: True)
    monkeypatch.setattr(cuda, "compute_units", lambda device: 132)
    # the table's own plan always leads the candidates: leave its fp8 entries out, so what is checked
    # is what the flags offer beyond it
    monkeypatch.setattr(cuda_plans, "PLANS", {shape: fields for shape, fields in cuda_plans.PLANS.items()
                                              if fields[0] != FP8})
    for later in ("FP8_AHEAD_CHECKED", "FP8_CV_CHECKED"):  # their own tests above
        monkeypatch.setattr(cuda, later, False)
    cuda._candidates.cache_clear()
    try:
        monkeypatch.setattr(cuda, "FP8_MEMCHECKED", False)
        assert not any(isinstance(p, Fp8Plan) for p in cuda.candidates(64, 7168, 2048, "cuda"))
        cuda._candidates.cache_clear()
        monkeypatch.setattr(cuda, "FP8_MEMCHECKED", True)
        monkeypatch.setattr(cuda, "FP8_FIELDS_MEMCHECKED", False)  # one warpgroup, no multicast, one M tile
        offered = [p for p in cuda.candidates(64, 7168, 2048, "cuda") if isinstance(p, Fp8Plan)]
        paired = Fp8Plan(FP8, 64, 2, 2)  # two CTAs an SM: split 2 of 112 tiles, 2 stages, one warpgroup
        assert offered == [cuda_plans.fp8_plan(64, 2048), cuda_plans.fp8_plan(64, 2048)._replace(stages=4), paired]
        assert not any(isinstance(p, Fp8Plan) for p in cuda.candidates(256, 3072, 1536, "cuda"))
        monkeypatch.setattr(cuda, "FP8_FIELDS_MEMCHECKED", True)
        monkeypatch.setattr(cuda, "FP8_MEMCHECKED_MAX_SPLIT", 4)  # clusters of 5-8 along K: not yet
        cuda._candidates.cache_clear()
        assert max(p.split_k for p in cuda.candidates(16, 2112, 7168, "cuda") if isinstance(p, Fp8Plan)) == 4
        monkeypatch.setattr(cuda, "FP8_MEMCHECKED_MAX_SPLIT", 8)
        cuda._candidates.cache_clear()
        offered = [p for p in cuda.candidates(64, 7168, 2048, "cuda") if isinstance(p, Fp8Plan)]
        deepest = cuda_plans.fp8_plan(64, 2048, 1, 2)
        # 112 tiles: no split keeps a CTA per SM; four warpgroups of 64 rows would spill
        variants = [dict(cg=1), dict(stages=4), dict(cg=1, stages=4), dict(mc=4), dict(mc=2)]
        assert offered == [deepest] + [deepest._replace(**fields) for fields in variants] + [paired]
        offered = [p for p in cuda.candidates(16, 2112, 7168, "cuda") if isinstance(p, Fp8Plan)]
        # 33 tiles x 4 <= 132; 33 tiles leave most SMs idle: splits 4, 3, 2 first, then the limit cuts
        # the unsplit plans and the one with two CTAs an SM (33 x 8 <= 264)
        assert [p.split_k for p in offered] == [4] * 5 + [3] * 5 + [2] * 2
        assert [p.cg for p in offered] == [2, 4, 1, 2, 1] * 2 + [2, 4]
        assert [p.stages == 4 for p in offered[:5]] == [False, False, False, True, True]
        assert Fp8Plan(FP8, 16, 2, 8) in cuda_plans.fp8_plans(16, 2112, 7168, limit=99)
        offered = [p for p in cuda.candidates(256, 3072, 1536, "cuda") if isinstance(p, Fp8Plan)]
        # 96 tiles; cg 2 and 4: registers; two 128-row CTAs do not fit an SM's registers
        assert [(p.mp, p.split_k, p.cg, p.mc, p.stages) for p in offered] == [(128, 1, 1, 1, 5), (128, 1, 1, 1, 4)]
    finally:
        cuda._candidates.cache_clear()


def test_swizzled_tensor_maps_take_rows_of_at_most_128_bytes():
    runtime.check_tensor_map_2d(0, 1, 7168, 1024, 1024, 64, 128, runtime.SWIZZLE_128B)
    with pytest.raises(ValueError, match="128-byte swizzled"):
        runtime.check_tensor_map_2d(0, 1, 7168, 1024, 1024, 64, 256, runtime.SWIZZLE_128B)
    with pytest.raises(ValueError, match="swizzle"):
        runtime.check_tensor_map_2d(0, 1, 7168, 1024, 1024, 64, 128, 2)


def _ptxas_report(n, k, plan, tmp_path):
    kernels = source_paths()[cuda.FP8_SOURCE].parent
    command = ["nvcc", "-arch=sm_90a", "-std=c++17", "-cubin", "-Xptxas", "-v", f"-I{kernels}",
               f"-I{source_paths()['mxfp4_exact.h'].parent}", *cuda_plans.compile_options(n, k, plan),
               "-o", str(tmp_path / f"{cuda.plan_label(plan)}_{n}_{k}.cubin"), str(kernels / cuda.FP8_SOURCE)]
    done = subprocess.run(command, capture_output=True, text=True)
    return plan, done.returncode, done.stdout + done.stderr, command[command.index("-o") + 1]


def _cuobjdump():
    """tools/sass_diff.py's lookup (PATH, else Triton's wheel), or None."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    import sass_diff
    try:
        return sass_diff.cuobjdump()
    except SystemExit:
        return None


def _expected_gpu_fences(plan):
    """MEMBAR.GPU in the GEMM's SASS: the release of the cluster barriers at its start (multicast
    groups) and end (any cluster), none per chunk."""
    return int(plan.mc > 1) + int(plan.mc > 1 or plan.split_k > 1)


def test_fp8_plans_build_without_spills(tmp_path):
    """nvcc -arch=sm_90a of the benchmark shapes' fp8 plans (and M class 128): no spills, no wgmma
    serialized by ptxas (C7515/C7518), registers within fp8_register_limit, and
    (where cuobjdump is found) no GPU-scope fence but the cluster barriers' own."""
    if shutil.which("nvcc") is None:
        pytest.skip("no nvcc")
    work = [(n, k, plan) for m, n, k in BENCH_SHAPES + [(256, 3072, 1536)] for plan in cuda_plans.fp8_plans(m, n, k)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        reports = list(pool.map(lambda w: _ptxas_report(*w, tmp_path), work))
    dump = _cuobjdump()
    for plan, code, report, cubin in reports:
        assert code == 0, report[-2000:]
        if dump:  # a release at cluster scope per stage release would put a MEMBAR.GPU in the chunk loop
            sass = subprocess.run([dump, "-sass", "-fun", "mxfp4_gemm_fp8", cubin], capture_output=True,
                                  text=True).stdout
            assert sass.count("MEMBAR.ALL.GPU") == _expected_gpu_fences(plan), (plan, sass.count("MEMBAR.ALL.GPU"))
        assert report.count("0 bytes spill stores") == report.count("spill stores"), report
        assert "C7518" not in report and "C7515" not in report, (plan, report)
        registers = int(re.search(r"Used (\d+) registers", report.split("function 'mxfp4_gemm_fp8'")[-1]).group(1))
        assert registers <= cuda_plans.fp8_register_limit(plan), (plan, registers)



# ---- GPU ----------------------------------------------------------------------------------------

def _sm90():
    return torch.cuda.is_available() and cuda.is_available(torch.device("cuda")) \
        and torch.cuda.get_device_capability() == (9, 0)


def _check(m, n, k, plan=None, seed=0):
    """Every offered fp8 plan of the shape (no split, and the split that fills the SMs), or `plan`."""
    data = make_inputs(m, n, k, seed=seed, device="cuda")
    for plan in [plan] if plan else cuda_plans.fp8_plans(m, n, k):
        run = cuda.make_runner(m, n, k, torch.device("cuda"), plan)
        assert run.plan == plan
        assert_harness_close(run(data[0], data[2], data[3], data[4]), reference_output(data))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", BENCH_SHAPES + [(8, 2112, 7168), (128, 3072, 1536), (64, 3072, 1536),
                                   (256, 3072, 1536), (200, 2880, 512)])
def test_fp8_plan_on_the_task_shapes(shape):
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    _check(*shape, seed=21)


# Partial M classes (1, 5, 17, 33, 100), whole ones (8, 128), two tiles of 128 (a partial one: 130);
# N = 16, 48 (a partial 64-row tile, one 32-row scale group), 80, 2880; K = 256 (one chunk), 768,
# 7168 (28 chunks, more than the ring).
@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 5, 8, 17, 33, 100, 128, 130])
@pytest.mark.parametrize("n", [16, 48, 80, 2880])
@pytest.mark.parametrize("k", [256, 768, 7168])
def test_odd_shapes(m, n, k):
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    _check(m, n, k, seed=m + n + k)


@pytest.mark.gpu
def test_one_runner_follows_b_from_call_to_call():
    """B's tensor map is kept for the last address: a runner given other weights, then the first
    ones again, multiplies by the B of each call."""
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    m, n, k = 16, 2112, 7168
    run = cuda.make_runner(m, n, k, torch.device("cuda"), cuda_plans.fp8_plans(m, n, k)[0])
    sets = [make_inputs(m, n, k, seed=seed, device="cuda") for seed in (3, 4)]
    for data in sets + sets[:1]:
        assert_harness_close(run(data[0], data[2], data[3], data[4]), reference_output(data))


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [2, 3])
def test_short_rings(stages):
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    for cg in (1, 2, 4):
        mp = 64 if cg < 4 else 32  # four warpgroups of 64 rows would not fit the registers
        _check(mp - 24, 320, 2048, Fp8Plan(FP8, mp, stages, 1, cg), seed=stages)
        _check(mp - 24, 320, 2048, Fp8Plan(FP8, mp, stages, 3, cg), seed=stages)  # split 3 of 8 chunks: 2, 3, 3
    _check(150, 320, 2048, Fp8Plan(FP8, 64, stages, 3, 2), seed=stages)  # 3 tiles along M, a partial one
    # A's copies shared by 2 and 4 B tiles (multicast), with and without split-K, several M tiles
    _check(40, 512, 2048, Fp8Plan(FP8, 64, stages, 1, 2, 4), seed=stages)
    _check(70, 512, 2048, Fp8Plan(FP8, 32, stages, 2, 4, 4), seed=stages)
    _check(5, 384, 2048, Fp8Plan(FP8, 8, stages, 3, 1, 2), seed=stages)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(16, 2112, 7168), (8, 2112, 7168), (5, 48, 2560), (64, 3072, 1536), (17, 256, 768)])
def test_two_ctas_an_sm(shape):
    """The paired plan: a 2-stage ring, one warpgroup, splits up to 8 (clusters of 8 along K)."""
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    plan = cuda_plans.fp8_paired_plan(*shape)
    assert plan is not None and plan.stages == 2 and plan.cg == 1
    _check(*shape, plan, seed=sum(shape))


@pytest.mark.gpu
def test_fresh_outputs_and_fresh_data():
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    m, n, k = 64, 7168, 2048
    run = cuda.make_runner(m, n, k, torch.device("cuda"), cuda_plans.fp8_plan(m, k))
    assert_fresh_outputs_and_fresh_data(run, m, n, k)


@pytest.mark.gpu
def test_one_build_serves_its_m_class():
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    n, k, plan = 1024, 1536, Fp8Plan(FP8, 64, 4)
    loaded = runtime.stats["loaded"]
    for m in (33, 40, 64):
        _check(m, n, k, plan, seed=m)
    assert runtime.stats["loaded"] - loaded <= 1
    plan, loaded = Fp8Plan(FP8, 128, 3), runtime.stats["loaded"]
    for m in (129, 200, 256):  # tiles of 128 rows along M
        _check(m, n, k, plan, seed=m)
    assert runtime.stats["loaded"] - loaded <= 1


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(64, 7168, 2048), (5, 2112, 7168), (33, 480, 1536)])
def test_out_of_range_operands_match_the_reference(shape):
    from test_cuda_backend import assert_out_of_range_cases_match
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    for plan in cuda_plans.fp8_plans(*shape):
        assert_out_of_range_cases_match(cuda.make_runner(*shape, torch.device("cuda"), plan), shape)


@pytest.mark.gpu
def test_huge_block_input_matches_the_exact_sum():
    """A row with one block near 2^70 does not fold: the tile's exact fallback sums it in order."""
    from test_cuda_pipe import HUGE_BLOCK_SHAPE, _huge_block_inputs
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    m, n, k = HUGE_BLOCK_SHAPE
    data = _huge_block_inputs("cuda")
    for plan in cuda_plans.fp8_plans(m, n, k):
        run = cuda.make_runner(m, n, k, torch.device("cuda"), plan)
        assert_harness_close(run(data[0], data[2], data[3], data[4]).cpu(), bench.blockwise_exact_reference(data))


@pytest.mark.gpu
def test_in_a_captured_graph():
    """Both launches (the GEMM a programmatic dependent of the quantization) replay from a graph."""
    if not _sm90():
        pytest.skip("needs sm_90 (wgmma)")
    shape = (64, 7168, 2048)
    run = cuda.make_runner(*shape, torch.device("cuda"), cuda_plans.fp8_plan(shape[0], shape[2]))
    assert_replays_in_a_captured_graph(run, *shape)

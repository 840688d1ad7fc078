// a4w4 MXFP4 GEMM for gfx950: C[M, N] (bf16) = dequant(quant(A)) @ dequant(B)^T, fp32 accumulation.
// A (bf16) is quantized inside the kernel with the hardware fp4 convert (v_cvt_scalef32_pk_fp4_bf16,
// which gives format.md §2's codes for a scale 2^e), and fed to the scaled MFMA with its e8m0 scales;
// B comes pre-quantized with shuffled scales.
//
// Work split: grid (tiles_n, tiles_m, split_k), WAVES waves per block. All waves of a block compute the
// same BLOCK_M x BLOCK_N tile, each over its own 256-K chunks (no A re-quantization inside a block and
// no barrier in the main loop); the waves' tiles are summed in LDS in wave order. With split_k > 1 each
// block writes an fp32 partial, and the last block to arrive at the tile counter sums the partials in
// split order (deterministic), writes C and resets the counter.
//
// Exact fallback: the spec's reference dequantizes to fp32 and multiplies there, so a dequantized value
// or a product past the fp32 range is +-inf (inf * 0 and inf - inf: NaN), while the scaled MFMA scales
// a block's exact dot product with a wider range. Each lane tracks the largest scale byte its MFMAs use
// (one packed max per A or B scale dword, plus a shift for some); a block where a value or product could
// leave the fp32 range (or A holds NaN/inf) recomputes its tile or split-K partial in scalar fp32 as the
// spec does (exact_partial: a cold function of its own, so the fast path's code stays as it was).
//
// The hardware is reached only through the arch layer: arch_gfx950.h, or arch_gfx950_emulated.h, which emulates
// wave64 and the scaled MFMA so this same source runs on NVIDIA for verification.
#include "hip_prelude.h"
#if defined(__AMDGCN__)
#include "arch_gfx950.h"
#else
#include "arch_gfx950_emulated.h"
#endif
#include "mxfp4_exact.h"

namespace mxfp4 {

constexpr int SLICE_K = 32;              // K elements under one e8m0 scale, and one lane's share of an MFMA
constexpr int CHUNK_SLICES = 8;          // a chunk = 256 K: the K extent of one shuffled-scale dword group

template <int V>
struct Int {
  static constexpr int value = V;
};

// f(Int<I>) for I in [BEGIN, END): the MFMA's byte selects must be compile-time constants.
template <int BEGIN, int END, class F>
__device__ __forceinline__ void static_for(F&& f) {
  if constexpr (BEGIN < END) {
    f(Int<BEGIN>{});
    static_for<BEGIN + 1, END>(f);
  }
}

__device__ __forceinline__ int min_int(int a, int b) { return a < b ? a : b; }

// ---- A quantization (format.md §2), one lane = one 32-element block ------------------------

// e8m0 scale byte (e + 127, format.md §2) from the largest |x| bf16 bit pattern: round the fp32
// pattern up (+0x200000, carry into the exponent at 0.75); e = floor(log2) - 2 = field - 129, clamped
// at -127; a field of 255 (inf/NaN, or rounded past the top binade) gives e = 127, byte 254.
__device__ __forceinline__ u32 scale_byte(u32 amax_bf16_bits) {
  const u32 amax = amax_bf16_bits < 0x7F80u ? amax_bf16_bits : 0x7F80u;
  const u32 field = ((amax << 16) + 0x200000u) >> 23;
  const u32 byte = (field > 2 ? field : 2u) - 2;  // a max and a subtract (a saturating subtract on gfx950)
  return byte == 253 ? 254u : byte;  // 253 only comes from field 255
}

// The convert's scale 2^(byte - 127) as fp32 bits; byte 0 is the denormal 2^-127 (its exponent field,
// 0, read as e8m0 is 2^-127 too). An all-zero block gets 2^-126 instead: its codes are 0 under any
// reading of the scale, where a field-0 scale taken as zero would make 0/0.
__device__ __forceinline__ float conversion_scale(u32 byte, u32 amax_bf16_bits) {
  const u32 low = amax_bf16_bits ? 0x00400000u : 0x00800000u, bits = byte << 23;
  return arch_as_float(bits > low ? bits : low);  // byte >= 1 gives bits >= 2^23 > low
}

// Largest |x| bf16 pattern of 2 * WORDS bf16 (x[i] holds two): per-half unsigned max of the patterns
// without their sign bits (NaN patterns sort above inf; scale_byte clamps them to inf).
template <int WORDS>
__device__ __forceinline__ u32 amax_bits(const u32* x) {
  u32 m = x[0] & 0x7FFF7FFFu;
#pragma unroll
  for (int i = 1; i < WORDS; ++i) m = arch_max_u16x2(m, x[i] & 0x7FFF7FFFu);
  return m;
}

__device__ __forceinline__ u32 max_of_halves(u32 m) {
  const u32 low = m & 0xFFFFu, high = m >> 16;
  return low > high ? low : high;
}

// 8 bf16 (4 dwords, element 2j in the low half of x[j]) -> one dword of 8 codes, element t at bits 4t.
// The converts overwrite all 4 bytes, so x[0] serves as the initial value (no register to zero).
__device__ __forceinline__ u32 convert_word(const u32* x, float scale) {
  u32 word = arch_cvt_scalef32_pk_fp4_bf16<0>(x[0], x[0], scale);
  word = arch_cvt_scalef32_pk_fp4_bf16<1>(word, x[1], scale);
  word = arch_cvt_scalef32_pk_fp4_bf16<2>(word, x[2], scale);
  return arch_cvt_scalef32_pk_fp4_bf16<3>(word, x[3], scale);
}

// The lane's 2 * WORDS bf16 of a 32-element block (x[i] holds elements 2i, 2i+1) -> their codes
// (element t at bits 4*(t%8) of dword t/8) and the block's scale byte. WORDS = 16: the whole block;
// WORDS = 8: half of it, the other half in the lane across row_half_mirror, which exchanges the max.
// Per block: 31 VALU for the max, a few for the scale, 16 hardware converts.
template <int WORDS>
__device__ __forceinline__ u32 quantize_words(const u32* x, u32* codes) {
  u32 amax = max_of_halves(amax_bits<WORDS>(x));
  if constexpr (WORDS == 8) {
    const u32 other = arch_row_half_mirror(amax);
    amax = amax > other ? amax : other;
  }
  const u32 byte = scale_byte(amax);
  const float scale = conversion_scale(byte, amax);
#pragma unroll
  for (int w = 0; w < WORDS / 4; ++w) codes[w] = convert_word(x + 4 * w, scale);
  return byte;
}

__device__ __forceinline__ u32 quantize_block(const u32 (&x)[16], u32x4& codes) {
  u32 words[4];
  const u32 byte = quantize_words<16>(x, words);
#pragma unroll
  for (int w = 0; w < 4; ++w) codes[w] = words[w];
  return byte;
}

// ---- the kernel --------------------------------------------------------------------------------

// The MFMA: 16x16x128 (2 steps per chunk). Tiles of 32 rows are two M subtiles of it (the 32x32x64
// MFMA does the same work per instruction as two of these, with the same A quantization per lane).
template <int MFMA>
struct Shape {
  static_assert(MFMA == 16, "16x16x128 MFMA tiles only");
  static constexpr int ROWS = MFMA;                       // rows (and cols) of one MFMA tile
  static constexpr int GROUPS = 64 / MFMA;                // lane groups = K slices per MFMA step
  static constexpr int STEPS = CHUNK_SLICES / GROUPS;     // MFMA steps per chunk
  static constexpr int ACC = MFMA * MFMA / 64;            // accumulator floats per lane
  // Step u reads chunk column c = u * GROUPS + group: byte 2 * (c / 4) (+ (n%32)/16) of the row's
  // one shuffled-scale dword of the chunk.
  template <int U> static constexpr int SCALE_BYTE = 2 * U;
  // Byte of the A scale dword holding step u's scale: bytes 1 and 3 (the high bytes of the 16-bit
  // halves, ready for the range check's packed max).
  template <int U> static constexpr int A_SCALE_BYTE = 2 * U + 1;
};

template <int MFMA, int SEL_A, int SEL_B>
__device__ __forceinline__ f32x4 mfma(u32x4 a, u32x4 b, f32x4 c, u32 scale_a, u32 scale_b) {
  return arch_mfma_scale_16x16x128_fp4<SEL_A, SEL_B>(a, b, c, scale_a, scale_b);
}

// Row (within the MFMA tile) of accumulator element i of this lane (the column is lane % ROWS).
__device__ __forceinline__ int acc_row(int lane, int i) { return 4 * (lane / 16) + i; }

struct Problem {
  const u16* A;
  const u8* B;
  const u8* B_scale_sh;
  u16* C;
  float* partials;
  u32* counters;
  int M, N, K, scale_cols, split_k;
};

// Which A elements a lane loads and quantizes per chunk and M subtile. A_ROWS = ROWS: the ones it feeds
// to the MFMAs (row r = lane % ROWS, one block per step). A_ROWS = 8 or 4 (16x16x128, one M subtile;
// the tile's rows past A_ROWS only feed unwritten rows, so no lane quantizes them): the 16 lanes of a
// row group (one K slice group) split that group's A_ROWS x 2 blocks between them and exchange the
// codes through DPP row moves (quantize_a). 8: lane r holds row r % 8 of step r / 8 (a whole block).
// 4: lane r with h = r % 8 holds half h / 4 of row (h < 4 ? h : 7 - h) of step r / 8, so a block's
// two halves sit in lanes h and 7 - h (row_half_mirror) and a row's four pieces in lanes r, 7 - r,
// r + 8 and 15 - r (own, row_half_mirror, row_ror:8, row_mirror).
template <int MFMA, int A_ROWS>
struct ALayout {
  typedef Shape<MFMA> S;
  static_assert(A_ROWS == S::ROWS || A_ROWS == 8 || A_ROWS == 4, "A_ROWS: 16, 8 or 4");
  static constexpr int LOADS = A_ROWS == S::ROWS ? 4 * S::STEPS : A_ROWS == 8 ? 4 : 2;  // 16-byte loads
  static constexpr int WORDS = 4 * LOADS;                                                 // raw dwords
  static constexpr int ROWS = A_ROWS;

  // (row within the subtile, step, element offset within the block) of the lane's first load; load i
  // adds i / 4 steps and (i % 4) * 8 elements.
  __device__ static __forceinline__ void first_element(int r, int& row, int& step, int& element) {
    const int h = r % 8;
    row = A_ROWS == S::ROWS ? r : A_ROWS == 8 ? h : (h < 4 ? h : 7 - h);
    step = A_ROWS == S::ROWS ? 0 : r / 8;
    element = A_ROWS == 4 ? 16 * (h / 4) : 0;
  }
};

// Rows of the block's tile that exist (the last M tile may have fewer): a compile-time constant when
// M is one (specialized builds with a single M tile or M % BLOCK_M == 0), else one scalar select.
template <int BLOCK_M>
__device__ __forceinline__ int tile_rows(int M, int tile_y) {
  const int tiles_m = (M + BLOCK_M - 1) / BLOCK_M, last_rows = M - (tiles_m - 1) * BLOCK_M;
  return tiles_m == 1 || tile_y == tiles_m - 1 ? last_rows : BLOCK_M;
}

// This lane's operand byte offsets at chunk 0 (chunk c adds c * *_CHUNK, step u adds u * *_STEP).
// Rows past M / N are clamped to the last row: they only feed accumulators of rows / columns that
// are never written, and the main loop needs no per-lane predicate.
template <int MFMA, int SUB_M, int SUB_N, bool B_SHUFFLED, int A_ROWS>
struct LaneOffsets {
  typedef Shape<MFMA> S;
  // Even: a tile starts on a multiple of 32 rows, so subtile sn's rows read scale byte (n%32)/16 = sn%2.
  static_assert(SUB_N % 2 == 0, "an even number of N subtiles");
  typedef ALayout<MFMA, A_ROWS> A;
  static constexpr u32 A_CHUNK = CHUNK_SLICES * SLICE_K * 2, A_STEP = S::GROUPS * SLICE_K * 2;
  // Slice s of B row n: shuffled (16x16 panels, format.md §3) at (n/16)*8K + (n%16)*16 + s*256;
  // row-major B_q at n*K/2 + s*16.
  static constexpr u32 B_SLICE = B_SHUFFLED ? 256 : 16;
  static constexpr u32 B_CHUNK = CHUNK_SLICES * B_SLICE, B_STEP = S::GROUPS * B_SLICE;
  // Shuffled scale (r, c): ((r/32)*(cols/8) + c/8)*256 + (c%4)*64 + (r%16)*4 + ((c%8)/4)*2 + (r%32)/16.
  static constexpr u32 SCALE_CHUNK = 256;

  u32 a[SUB_M], b[SUB_N], scale[SUB_N];
  int a_slice;  // the chunk slice of the lane's first A load
  int n_rows_left;  // N - n0, block-uniform
  bool whole_tiles_n;  // N % BLOCK_N == 0 (a compile-time constant in a specialized build)

  // Whether N subtile sn holds real rows (N % 16 == 0: a 16-row subtile is all real or all past N).
  // Lanes past N read the byte of their own row's parity from row N-1's dword, which may be padding.
  __device__ __forceinline__ bool real_subtile_n(int sn) const {
    return whole_tiles_n || sn * S::ROWS < n_rows_left;
  }

  __device__ __forceinline__ LaneOffsets(const Problem& p, int m0, int n0)
      : n_rows_left(p.N - n0), whole_tiles_n(p.N % (SUB_N * S::ROWS) == 0) {
    const int lane = arch_lane_id(), r = lane % S::ROWS, group = lane / S::ROWS;
    int a_row, a_step, a_element;
    A::first_element(r, a_row, a_step, a_element);
    a_slice = a_step * S::GROUPS + group;
#pragma unroll
    for (int sm = 0; sm < SUB_M; ++sm) {
      const u32 m = (u32)min_int(m0 + sm * S::ROWS + a_row, p.M - 1);
      a[sm] = (m * (u32)p.K + a_slice * SLICE_K + a_element) * 2;
    }
#pragma unroll
    for (int sn = 0; sn < SUB_N; ++sn) {
      const u32 n = (u32)min_int(n0 + sn * S::ROWS + r, p.N - 1);
      b[sn] = B_SHUFFLED ? (n / 16) * (8 * (u32)p.K) + (n % 16) * 16 + group * B_SLICE : n * ((u32)p.K / 2) + group * B_SLICE;
      scale[sn] = (n / 32) * ((u32)p.scale_cols / 8) * 256 + (n % 16) * 4 + group * 64;
    }
  }
};

// One lane's B data for one chunk: codes per (N subtile, step); per N subtile the shuffled-scale dword
// holding this row's columns q = group and q + 4 (bytes (n%32)/16 and 2 + (n%32)/16).
template <int MFMA, int SUB_N>
struct BChunk {
  u32x4 codes[SUB_N][Shape<MFMA>::STEPS];
  u32 scales[SUB_N];
};

// Scale dwords are read whole: e8m0_shuffle's padding (rows up to a multiple of 256, columns up to
// a multiple of 8) is part of B_scale_sh, and a lane's MFMA selects only its own row's bytes, so a
// padding byte read beside real ones is never used (rows clamped at N only feed unwritten columns).
// TAIL: the last, partial chunk (chunk_slices < 8): slices past K read no codes and get zero codes,
// and their scale bytes become 127, since 0 times a padding byte of 255 (NaN) would still be NaN.
template <bool TAIL, int MFMA, int SUB_N, class L>
__device__ __forceinline__ void load_b_chunk(const Problem& p, const L& at, int chunk, int chunk_slices,
                                             BChunk<MFMA, SUB_N>& out) {
  typedef Shape<MFMA> S;
  const int group = arch_lane_id() / S::ROWS;
#pragma unroll
  for (int sn = 0; sn < SUB_N; ++sn) {
    // Wave-uniform chunk base + the lane's loop-invariant offset: scalar base, no per-load VALU.
    const u8* codes = p.B + (u32)chunk * L::B_CHUNK + at.b[sn];
#pragma unroll
    for (int u = 0; u < S::STEPS; ++u) {
      out.codes[sn][u] = u32x4{};
      if (!TAIL || u * S::GROUPS + group < chunk_slices) out.codes[sn][u] = *(const u32x4*)(codes + u * L::B_STEP);
    }
    u32 word = *(const u32*)(p.B_scale_sh + (u32)chunk * L::SCALE_CHUNK + at.scale[sn]);
    if (TAIL) {  // bytes 0, 1: column group; bytes 2, 3: column group + 4
      if (group >= chunk_slices) word = (word & 0xFFFF0000u) | 0x7F7Fu;
      if (group + 4 >= chunk_slices) word = (word & 0xFFFFu) | 0x7F7F0000u;
    }
    out.scales[sn] = word;
  }
}

// This lane's raw A elements of one chunk (ALayout), per M subtile as dwords of two bf16.
template <bool TAIL, int SUB_M, int WORDS, class L>
__device__ __forceinline__ void load_a_chunk(const Problem& p, const L& at, int chunk, int chunk_slices, u32 (&raw)[SUB_M][WORDS]) {
  typedef typename L::S S;
#pragma unroll
  for (int sm = 0; sm < SUB_M; ++sm)
#pragma unroll
    for (int i = 0; i < L::A::LOADS; ++i) {
      const u8* src = (const u8*)p.A + (u32)chunk * L::A_CHUNK + at.a[sm] + (i / 4) * L::A_STEP + (i % 4) * 16;
      u32x4 v = u32x4{};
      if (!TAIL || at.a_slice + (i / 4) * S::GROUPS < chunk_slices) v = *(const u32x4*)src;
#pragma unroll
      for (int j = 0; j < 4; ++j) raw[sm][4 * i + j] = v[j];
    }
}

template <int MFMA, int SUB_M, int SUB_N>
struct Accumulators {
  f32x4 tile[SUB_M][SUB_N];
  // High byte of each 16-bit half: the largest A and B scale byte this lane's MFMAs used (a packed
  // 16-bit max keeps the max of the high bytes there, whatever the low bytes hold).
  u32 scale_bytes;
};

// The B scale bytes the MFMAs of N subtile SN read from its scale dword (`word`, as loaded), bytes SN % 2
// and SN % 2 + 2, moved to bytes 1 and 3 (the other bytes do not matter).
template <int SN>
__device__ __forceinline__ u32 used_scale_bytes_high(u32 word) { return SN % 2 ? word : word << 8; }

// Whether a dequantized value or a product of two could leave the fp32 range in the spec's GEMM: a scale
// byte >= 253 (A: also NaN/inf, byte 254; B: 255 is NaN), or A and B bytes a + b >= 377
// (6 * 2^(a-127) * 6 * 2^(b-127) >= 2^128). Checked as any byte >= 189 (a + b >= 377 needs one):
// values of 2^62 and more, far from real data.
__device__ __forceinline__ bool leaves_fp32_range(u32 scale_bytes) {
  const u32 low = (scale_bytes >> 8) & 255u, high = scale_bytes >> 24;
  return (low > high ? low : high) >= 189;
}

__device__ __forceinline__ u32x4 words4(u32 w0, u32 w1, u32 w2, u32 w3) {
  u32x4 v;
  v[0] = w0, v[1] = w1, v[2] = w2, v[3] = w3;
  return v;
}

// One M subtile's MFMA operands of a chunk from the lane's raw A (ALayout): the codes per step and
// the scale bytes (step u's in byte A_SCALE_BYTE<u>).
template <int MFMA, int A_ROWS, int WORDS>
__device__ __forceinline__ u32 quantize_a(const u32 (&raw)[WORDS], u32x4 (&codes)[Shape<MFMA>::STEPS]) {
  typedef Shape<MFMA> S;
  constexpr int BYTE0 = 8 * S::template A_SCALE_BYTE<0>, BYTE1 = 8 * S::template A_SCALE_BYTE<1>;
  if constexpr (A_ROWS == S::ROWS) {
    u32 scales = 0;
    static_for<0, S::STEPS>([&](auto step) {
      constexpr int u = decltype(step)::value;
      u32 words[4];
      scales |= quantize_words<16>(raw + 16 * u, words) << (8 * S::template A_SCALE_BYTE<u>);
      codes[u] = words4(words[0], words[1], words[2], words[3]);
    });
    return scales;
  } else if constexpr (A_ROWS == 8) {
    u32 w[4];
    const u32 byte = quantize_words<16>(raw, w);
    codes[0] = words4(w[0], w[1], w[2], w[3]);
    codes[1] = words4(arch_row_ror8(w[0]), arch_row_ror8(w[1]), arch_row_ror8(w[2]), arch_row_ror8(w[3]));
    return byte << BYTE0 | arch_row_ror8(byte) << BYTE1;
  } else {
    u32 w[2];
    const u32 byte = quantize_words<8>(raw, w);
    codes[0] = words4(w[0], w[1], arch_row_half_mirror(w[0]), arch_row_half_mirror(w[1]));
    codes[1] = words4(arch_row_ror8(w[0]), arch_row_ror8(w[1]), arch_row_mirror(w[0]), arch_row_mirror(w[1]));
    return byte << BYTE0 | arch_row_ror8(byte) << BYTE1;
  }
}

// Quantize the chunk's A and issue its MFMAs (steps with no slice left are skipped: K tail).
// Also tracks the largest scale byte the chunk's MFMAs use (acc.scale_bytes).
template <int MFMA, int SUB_M, int SUB_N, int WORDS, class Offsets>
__device__ __forceinline__ void mfma_chunk(const Offsets& at, int chunk_slices, const u32 (&raw)[SUB_M][WORDS],
                                           const BChunk<MFMA, SUB_N>& b, Accumulators<MFMA, SUB_M, SUB_N>& acc) {
  typedef Shape<MFMA> S;
  static_for<0, SUB_N>([&](auto subtile) {
    constexpr int sn = decltype(subtile)::value;
    if (!at.real_subtile_n(sn)) return;
    acc.scale_bytes = arch_max_u16x2(acc.scale_bytes, used_scale_bytes_high<sn>(b.scales[sn]));
  });
#pragma unroll
  for (int sm = 0; sm < SUB_M; ++sm) {
    u32x4 a_codes[S::STEPS];
    const u32 a_scales = quantize_a<MFMA, Offsets::A::ROWS>(raw[sm], a_codes);
    acc.scale_bytes = arch_max_u16x2(acc.scale_bytes, a_scales);
    static_for<0, S::STEPS>([&](auto step) {
      constexpr int u = decltype(step)::value;
      if (u * S::GROUPS >= chunk_slices) return;
      static_for<0, SUB_N>([&](auto subtile) {
        constexpr int sn = decltype(subtile)::value;
        // The row's byte, (n%32)/16, is sn%2 (rows clamped at N may pick another byte: their columns
        // are never written).
        constexpr int a_byte = S::template A_SCALE_BYTE<u>, b_byte = S::template SCALE_BYTE<u> + sn % 2;
        acc.tile[sm][sn] = mfma<MFMA, a_byte, b_byte>(a_codes[u], b.codes[sn][u], acc.tile[sm][sn], a_scales, b.scales[sn]);
      });
    });
  }
}

// One full chunk: load its A, then the B of this wave's next chunk into `next`,
// then quantize and multiply with `current`, loaded one chunk earlier.
template <int WAVES, int MFMA, int SUB_M, int SUB_N, class L>
__device__ __forceinline__ void full_chunk(const Problem& p, const L& at, int chunk, int end, const BChunk<MFMA, SUB_N>& current,
                                           BChunk<MFMA, SUB_N>& next, Accumulators<MFMA, SUB_M, SUB_N>& acc) {
  u32 raw[SUB_M][L::A::WORDS];
  load_a_chunk<false>(p, at, chunk, CHUNK_SLICES, raw);
  // Loads complete in issue order: A must go out before the prefetch, or waiting for A waits for it.
  arch_schedule_barrier();
  // Unconditional (the last one re-reads this chunk, still in cache): a branch here would make the
  // compiler wait for every load before the MFMAs.
  const int next_chunk = chunk + WAVES < end ? chunk + WAVES : chunk;
  load_b_chunk<false>(p, at, next_chunk, CHUNK_SLICES, next);
  arch_schedule_barrier();
  mfma_chunk(at, CHUNK_SLICES, raw, current, acc);
}

// Registers per lane of two B buffers, the raw A of a chunk and the accumulators: at most this many
// keeps a tile at 2 waves per SIMD (256 VGPRs + AGPRs) with room for addresses and temporaries.
constexpr int DOUBLE_BUFFER_REGISTERS = 224;

template <int MFMA, int SUB_M, int SUB_N, int A_WORDS>
struct DoubleBuffered {
  typedef Shape<MFMA> S;
  static constexpr bool value =
      2 * SUB_N * (S::STEPS * 4 + 1) + SUB_M * A_WORDS + SUB_M * SUB_N * S::ACC <= DOUBLE_BUFFER_REGISTERS;
};

// This wave's full chunks begin, begin + WAVES, ... < end (begin < end: loops that test at the bottom,
// so a caller's check of the first chunk is the only one). With room for a second B buffer, the two B
// buffers alternate (unrolled by two) so a prefetched chunk is never copied nor waited for before its
// use. Otherwise (large tiles) B is loaded right after A and its latency hides behind the A
// quantization, which is long there.
template <int WAVES, int MFMA, int SUB_M, int SUB_N, class L>
__device__ __forceinline__ void full_chunks(const Problem& p, const L& at, int begin, int end, Accumulators<MFMA, SUB_M, SUB_N>& acc) {
  BChunk<MFMA, SUB_N> even, odd;
  if constexpr (DoubleBuffered<MFMA, SUB_M, SUB_N, L::A::WORDS>::value) {
    load_b_chunk<false>(p, at, begin, CHUNK_SLICES, even);
    for (int chunk = begin;; chunk += 2 * WAVES) {
      full_chunk<WAVES>(p, at, chunk, end, even, odd, acc);
      if (chunk + WAVES >= end) break;
      full_chunk<WAVES>(p, at, chunk + WAVES, end, odd, even, acc);
      if (chunk + 2 * WAVES >= end) break;
    }
  } else {
    for (int chunk = begin;; chunk += WAVES) {
      u32 raw[SUB_M][L::A::WORDS];
      load_a_chunk<false>(p, at, chunk, CHUNK_SLICES, raw);
      arch_schedule_barrier();
      load_b_chunk<false>(p, at, chunk, CHUNK_SLICES, even);
      arch_schedule_barrier();
      mfma_chunk(at, CHUNK_SLICES, raw, even, acc);
      if (chunk + WAVES >= end) break;
    }
  }
}

// This wave's chunks of the split: full ones, then the partial last chunk (K % 256 != 0) if it is
// this wave's, done once with per-slice predicates. A_ROWS: ALayout.
template <int A_ROWS, int WAVES, bool B_SHUFFLED, int MFMA, int SUB_M, int SUB_N>
__device__ __forceinline__ void accumulate(const Problem& p, int m0, int n0, int begin, int full_end, int end,
                                           Accumulators<MFMA, SUB_M, SUB_N>& acc) {
  const LaneOffsets<MFMA, SUB_M, SUB_N, B_SHUFFLED, A_ROWS> at(p, m0, n0);
  const int wave = arch_wave_id();
  if (begin + wave < full_end) full_chunks<WAVES>(p, at, begin + wave, full_end, acc);
  if (full_end < end && (full_end - begin) % WAVES == wave) {
    u32 raw[SUB_M][ALayout<MFMA, A_ROWS>::WORDS];
    BChunk<MFMA, SUB_N> b;
    const int tail_slices = p.K / SLICE_K % CHUNK_SLICES;
    load_a_chunk<true>(p, at, full_end, tail_slices, raw);
    load_b_chunk<true>(p, at, full_end, tail_slices, b);
    mfma_chunk(at, tail_slices, raw, b, acc);
  }
}

// This wave's tile into (ADD: onto) an LDS slice (row-major BLOCK_M x BLOCK_N).
template <bool ADD, int MFMA, int SUB_M, int SUB_N>
__device__ __forceinline__ void store_wave_tile(const Accumulators<MFMA, SUB_M, SUB_N>& acc, float* slice) {
  typedef Shape<MFMA> S;
  constexpr int BLOCK_N = S::ROWS * SUB_N;
  const int lane = arch_lane_id();
#pragma unroll
  for (int sm = 0; sm < SUB_M; ++sm)
#pragma unroll
    for (int sn = 0; sn < SUB_N; ++sn)
#pragma unroll
      for (int i = 0; i < S::ACC; ++i) {
        float& slot = slice[(sm * S::ROWS + acc_row(lane, i)) * BLOCK_N + sn * S::ROWS + lane % S::ROWS];
        slot = ADD ? slot + acc.tile[sm][sn][i] : acc.tile[sm][sn][i];
      }
}

// The busy waves' tiles (waves [0, busy) ran chunks) summed pairwise into SLICES = ceil(WAVES / 2)
// LDS slices: wave w >= SLICES stores into slice w - SLICES, then wave w < SLICES adds its tile
// there (or stores it, if wave w + SLICES was idle). Slice s = tile s + tile s + SLICES, a fixed
// order. Returns the slices holding data. Half the LDS of a slice per wave, one add per element.
template <int WAVES, int MFMA, int SUB_M, int SUB_N>
__device__ __forceinline__ int pair_wave_tiles(const Accumulators<MFMA, SUB_M, SUB_N>& acc, int busy, float* slices) {
  constexpr int SLICES = (WAVES + 1) / 2, SLICE = SUB_M * SUB_N * MFMA * MFMA;
  const int wave = arch_wave_id();
  if (wave >= SLICES && wave < busy) store_wave_tile<false>(acc, slices + (wave - SLICES) * SLICE);
  arch_block_barrier();
  if (wave < SLICES && wave < busy) {
    if (wave + SLICES < busy)
      store_wave_tile<true>(acc, slices + wave * SLICE);
    else
      store_wave_tile<false>(acc, slices + wave * SLICE);
  }
  return min_int(SLICES, busy);
}

// ---- exact fallback (values past the fp32 range; never taken on real data) --------------------

// The spec's dequantized B value at (n, k): its code in B_shuffle (16x16 panels, format.md §3) or
// row-major B_q, its scale byte in B_scale_sh.
template <bool B_SHUFFLED>
__device__ __forceinline__ float exact_b_value(const u8* B, const u8* B_scale_sh, int K, int scale_cols, int n, int k) {
  const int slice = k / SLICE_K;
  const long long at = B_SHUFFLED ? (long long)(n / 16) * 8 * K + (n % 16) * 16 + slice * 256 + (k % SLICE_K) / 2
                                  : (long long)n * (K / 2) + k / 2;
  const u32 byte = B[at];
  const long long scale_at = ((((long long)(n / 32) * (scale_cols / 8) + slice / 8) * 4 + slice % 4) * 16 + n % 16) * 4 +
                             ((slice % 8) / 4) * 2 + (n % 32) / 16;
  return e2m1_e8m0_value(k & 1 ? byte >> 4 : byte & 15u, B_scale_sh[scale_at]);  // mxfp4_exact.h
}

// The tile's sums over K slices [slice_begin, slice_end) into `tile`, in plain fp32 as the spec's
// reference GEMM computes them (dequantized A and B, fp32 products and sums; rows past M are 0).
template <int BLOCK_M, int BLOCK_N, int THREADS, bool B_SHUFFLED>
__device__ __attribute__((noinline, cold)) void exact_partial(const u16* A, const u8* B, const u8* B_scale_sh, int N, int K,
                                                           int scale_cols, int rows, int m0, int n0, int slice_begin,
                                                           int slice_end, float* tile) {
  for (int i = arch_thread_id(); i < BLOCK_M * BLOCK_N; i += THREADS) {
    const int r = i / BLOCK_N, n = n0 + i % BLOCK_N;
    float sum = 0.0f;
    for (int slice = slice_begin; slice < slice_end && r < rows && n < N; ++slice) {
      const u16* block = A + (long long)(m0 + r) * K + slice * SLICE_K;
      u32 amax = 0;
      for (int j = 0; j < SLICE_K; ++j) {
        const u32 magnitude = block[j] & 0x7FFFu;  // NaN patterns sort above inf
        amax = amax > magnitude ? amax : magnitude;
      }
      const int e = block_exponent(amax);  // mxfp4_exact.h
      for (int j = 0; j < SLICE_K; ++j)
        sum += quant_dequant(block[j], e) *
               exact_b_value<B_SHUFFLED>(B, B_scale_sh, K, scale_cols, n, slice * SLICE_K + j);
    }
    tile[i] = sum;
  }
  arch_block_barrier();
}

// Write the tile, the sum of its first `slices` LDS slices in slice order (deterministic): to C when
// split_k == 1, else as this split's fp32 partial, and then, in the last block to arrive, the sum of
// all partials (split order) to C. Each thread owns 4 adjacent columns (N % 16 == 0, so 4 columns are
// all in range or all out).
template <int BLOCK_M, int BLOCK_N, int THREADS>
__device__ __forceinline__ void write_tile(const Problem& p, int m0, int n0, const float* tile, int slices) {
  constexpr int GROUPS_PER_ROW = BLOCK_N / 4;
  const int split = arch_block_id_z();
  const long long MN = (long long)p.M * p.N;
  for (int g = arch_thread_id(); g < BLOCK_M * GROUPS_PER_ROW; g += THREADS) {
    const int r = g / GROUPS_PER_ROW, c = (g % GROUPS_PER_ROW) * 4, m = m0 + r, n = n0 + c;
    if (m >= p.M || n >= p.N) continue;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s = 0; s < slices; ++s)
#pragma unroll
      for (int j = 0; j < 4; ++j) v[j] += tile[s * BLOCK_M * BLOCK_N + r * BLOCK_N + c + j];
    const long long at = (long long)m * p.N + n;
    if (p.split_k == 1) {
      u32* out = (u32*)(p.C + at);
      out[0] = arch_bf16x2_rne(v[0], v[1]);
      out[1] = arch_bf16x2_rne(v[2], v[3]);
    } else {
      float* out = p.partials + split * MN + at;
      for (int j = 0; j < 4; ++j) out[j] = v[j];
    }
  }
  if (p.split_k == 1) return;

  __shared__ u32 arrived_last;
  const int tile_id = arch_block_id_y() * ((p.N + BLOCK_N - 1) / BLOCK_N) + arch_block_id_x();
  arch_fence_release_device();
  arch_block_barrier();
  if (arch_thread_id() == 0)
    arrived_last = arch_atomic_add_device(p.counters + tile_id, 1u) == (u32)(p.split_k - 1);
  arch_block_barrier();
  if (!arrived_last) return;
  arch_fence_acquire_device();
  for (int g = arch_thread_id(); g < BLOCK_M * GROUPS_PER_ROW; g += THREADS) {
    const int r = g / GROUPS_PER_ROW, c = (g % GROUPS_PER_ROW) * 4, m = m0 + r, n = n0 + c;
    if (m >= p.M || n >= p.N) continue;
    const long long at = (long long)m * p.N + n;
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s = 0; s < p.split_k; ++s)
      for (int j = 0; j < 4; ++j) sum[j] += p.partials[s * MN + at + j];
    u32* out = (u32*)(p.C + at);
    out[0] = arch_bf16x2_rne(sum[0], sum[1]);
    out[1] = arch_bf16x2_rne(sum[2], sum[3]);
  }
  if (arch_thread_id() == 0) p.counters[tile_id] = 0;
}

template <int MFMA, int SUB_M, int SUB_N, int WAVES, bool B_SHUFFLED>
__device__ __forceinline__ void gemm(const Problem& p) {
  typedef Shape<MFMA> S;
  constexpr int BLOCK_M = S::ROWS * SUB_M, BLOCK_N = S::ROWS * SUB_N;
  __shared__ __attribute__((aligned(16))) float tiles[(WAVES + 1) / 2 * BLOCK_M * BLOCK_N];  // pair_wave_tiles

  const int m0 = arch_block_id_y() * BLOCK_M, n0 = arch_block_id_x() * BLOCK_N;
  const int k_slices = p.K / SLICE_K, chunks = (k_slices + CHUNK_SLICES - 1) / CHUNK_SLICES;
  const int split = arch_block_id_z(), wave = arch_wave_id();
  const int begin = (int)((long long)split * chunks / p.split_k), end = (int)((long long)(split + 1) * chunks / p.split_k);
  const int full_end = end == chunks && k_slices % CHUNK_SLICES ? end - 1 : end;  // the partial chunk is the last one
  const int busy_waves = min_int(WAVES, end - begin);  // waves [0, busy_waves) have at least one chunk

  // Waves with no chunk skip the K loop and add no tile.
  Accumulators<MFMA, SUB_M, SUB_N> acc;
  acc.scale_bytes = 0;
  if (begin + wave < end) {  // the condition of its first chunk, so that check folds into this one
#pragma unroll
    for (int sm = 0; sm < SUB_M; ++sm)
#pragma unroll
      for (int sn = 0; sn < SUB_N; ++sn) acc.tile[sm][sn] = f32x4{};
    if constexpr (SUB_M == 1) {
      // Quantize only the A rows that exist, in 4 or 8 (ALayout): one wave-uniform branch.
      const int rows = tile_rows<BLOCK_M>(p.M, arch_block_id_y());
      if (rows <= 4)
        accumulate<4, WAVES, B_SHUFFLED>(p, m0, n0, begin, full_end, end, acc);
      else if (rows <= 8)
        accumulate<8, WAVES, B_SHUFFLED>(p, m0, n0, begin, full_end, end, acc);
      else
        accumulate<S::ROWS, WAVES, B_SHUFFLED>(p, m0, n0, begin, full_end, end, acc);
    } else {
      accumulate<S::ROWS, WAVES, B_SHUFFLED>(p, m0, n0, begin, full_end, end, acc);
    }
  }
  const int slices = pair_wave_tiles<WAVES>(acc, busy_waves, tiles);

  const bool exact = arch_block_any<WAVES>(leaves_fp32_range(acc.scale_bytes));  // also publishes the slices
  if (exact)
    exact_partial<BLOCK_M, BLOCK_N, 64 * WAVES, B_SHUFFLED>(p.A, p.B, p.B_scale_sh, p.N, p.K, p.scale_cols,
                                                         min_int(BLOCK_M, p.M - m0), m0, n0, begin * CHUNK_SLICES,
                                                         min_int(end * CHUNK_SLICES, k_slices), tiles);
  write_tile<BLOCK_M, BLOCK_N, 64 * WAVES>(p, m0, n0, tiles, exact ? 1 : slices);
}

}  // namespace mxfp4

// Kernel arguments of every GEMM entry point; M, N, K, scale_cols and split_k are ignored by a
// shape-specialized build, which has them as compile-time constants.
#define MXFP4_GEMM_PARAMS                                                                                  \
  const u16 *A, const u8 *B, const u8 *B_scale_sh, u16 *C, float *partials, u32 *counters, int M, int N, int K, \
      int scale_cols, int split_k

#if defined(MXFP4_SPECIALIZED)
// One kernel for one shape and plan (hiprtc -D options): MXFP4_M, MXFP4_N, MXFP4_K, MXFP4_SPLIT_K and the
// tile MXFP4_MFMA, MXFP4_SUB_M, MXFP4_SUB_N, MXFP4_WAVES, MXFP4_B_SHUFFLED. The constants fold into the
// kernel: no tail code when K % 256 == 0, no split-K code when MXFP4_SPLIT_K == 1, fixed addressing.
extern "C" __global__ void __launch_bounds__(64 * MXFP4_WAVES) mxfp4_gemm_specialized(MXFP4_GEMM_PARAMS) {
  (void)M, (void)N, (void)K, (void)scale_cols, (void)split_k;
  constexpr int SCALE_COLS = (MXFP4_K / mxfp4::SLICE_K + 7) / 8 * 8;  // e8m0_shuffle pads columns to 8
  const mxfp4::Problem p = {A, B, B_scale_sh, C, partials, counters, MXFP4_M, MXFP4_N, MXFP4_K, SCALE_COLS,
                            MXFP4_SPLIT_K};
  mxfp4::gemm<MXFP4_MFMA, MXFP4_SUB_M, MXFP4_SUB_N, MXFP4_WAVES, MXFP4_B_SHUFFLED>(p);
}
#else
// Variants: name, MFMA (16: 16x16x128), M subtiles, N subtiles, waves, B layout (true: B_shuffle, false: B_q).
// Tile = (MFMA * M subtiles) x (MFMA * N subtiles). Grid (ceil(N / tile_n), ceil(M / tile_m), split_k),
// block 64 * waves threads, no dynamic LDS.
#define MXFP4_GEMM_VARIANT(NAME, MFMA, SUB_M, SUB_N, WAVES, B_SHUFFLED)                                      \
  extern "C" __global__ void __launch_bounds__(64 * WAVES)                                                 \
      NAME(MXFP4_GEMM_PARAMS) {                                                                            \
    const mxfp4::Problem p = {A, B, B_scale_sh, C, partials, counters, M, N, K, scale_cols, split_k};     \
    mxfp4::gemm<MFMA, SUB_M, SUB_N, WAVES, B_SHUFFLED>(p);                                                  \
  }

MXFP4_GEMM_VARIANT(mxfp4_gemm_m16n64w4, 16, 1, 4, 4, true)
MXFP4_GEMM_VARIANT(mxfp4_gemm_m16n128w4, 16, 1, 8, 4, true)
MXFP4_GEMM_VARIANT(mxfp4_gemm_m32n64w4, 16, 2, 4, 4, true)
MXFP4_GEMM_VARIANT(mxfp4_gemm_m32n128w4, 16, 2, 8, 4, true)
MXFP4_GEMM_VARIANT(mxfp4_gemm_m16n64w4_bq, 16, 1, 4, 4, false)
MXFP4_GEMM_VARIANT(mxfp4_gemm_m32n64w4_bq, 16, 2, 4, 4, false)

// Test entry (not used by the backend): A's codes [M, K/2] and scales [M, K/32] as the GEMM computes them,
// one thread per 32-element block, 256 threads per block.
extern "C" __global__ void __launch_bounds__(256)
    mxfp4_quantize_a(const u16* A, u8* codes, u8* scales, int M, int K) {
  const int block = arch_block_id_x() * 256 + arch_thread_id();
  if (block >= M * (K / mxfp4::SLICE_K)) return;
  const u32x4* src = (const u32x4*)(A + (long long)block * mxfp4::SLICE_K);
  u32 x[16];
  for (int i = 0; i < 4; ++i) {
    const u32x4 v = src[i];
    for (int j = 0; j < 4; ++j) x[4 * i + j] = v[j];
  }
  u32x4 packed;
  scales[block] = (u8)mxfp4::quantize_block(x, packed);
  *(u32x4*)(codes + (long long)block * 16) = packed;
}

// Test entry: the arch layer's fp4 convert alone, out[i] = convert of the bf16 pair pairs[i] by
// scales[i] into byte i % 4 of old[i].
extern "C" __global__ void __launch_bounds__(256)
    mxfp4_convert_pairs(const u32* pairs, const float* scales, const u32* old, u32* out, int count) {
  const int i = arch_block_id_x() * 256 + arch_thread_id();
  if (i >= count) return;
  switch (i % 4) {
    case 0: out[i] = arch_cvt_scalef32_pk_fp4_bf16<0>(old[i], pairs[i], scales[i]); break;
    case 1: out[i] = arch_cvt_scalef32_pk_fp4_bf16<1>(old[i], pairs[i], scales[i]); break;
    case 2: out[i] = arch_cvt_scalef32_pk_fp4_bf16<2>(old[i], pairs[i], scales[i]); break;
    default: out[i] = arch_cvt_scalef32_pk_fp4_bf16<3>(old[i], pairs[i], scales[i]); break;
  }
}
#endif

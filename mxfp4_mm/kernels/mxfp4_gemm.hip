// a4w4 MXFP4 GEMM for gfx950: C[M, N] (bf16) = dequant(quant(A)) @ dequant(B)^T, fp32 accumulation.
// A (bf16) is quantized inside the kernel, bit-exact to aiter's dynamic_mxfp4_quant (SPEC section 2),
// and fed to the scaled MFMA with its e8m0 scales; B comes pre-quantized with shuffled scales.
//
// Work split: grid (tiles_n, tiles_m, split_k), WAVES waves per block. All waves of a block compute the
// same BLOCK_M x BLOCK_N tile, each over its own 256-K chunks (no A re-quantization inside a block and
// no barrier in the main loop); the waves' tiles are summed in LDS in wave order. With split_k > 1 each
// block writes an fp32 partial, and the last block to arrive at the tile counter sums the partials in
// split order (deterministic), writes C and resets the counter.
//
// The hardware is reached only through the arch layer: arch_gfx950.h, or arch_nvidia.h, which emulates
// wave64 and the scaled MFMA so this same source runs on NVIDIA for verification.
#include "hip_prelude.h"
#if defined(__AMDGCN__)
#include "arch_gfx950.h"
#else
#include "arch_nvidia.h"
#endif

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

// ---- A quantization (SPEC section 2), one lane = one 32-element block ------------------------

// Unbiased scale exponent from the largest |x| bf16 bit pattern: round the fp32 pattern up
// (+0x200000, carry into the exponent at 0.75), e = floor(log2) - 2 clamped to [-127, 127];
// inf/NaN (and anything rounding past the top binade) give 127.
__device__ __forceinline__ int scale_exponent(u32 amax_bf16_bits) {
  const u32 amax = (amax_bf16_bits < 0x7F80u ? amax_bf16_bits : 0x7F80u) << 16;
  const int field = (int)(((amax + 0x200000u) & 0x7F800000u) >> 23);
  if (field == 255) return 127;
  const int e = field - 129;
  return e < -127 ? -127 : e;
}

// 2^-e as fp32 bits; e = 127 needs the denormal 2^-127.
__device__ __forceinline__ float inverse_scale(int e) {
  return arch_as_float(e == 127 ? 0x00400000u : (u32)(127 - e) << 23);
}

// e2m1 code (sign in bit 3) of one bf16 scaled by the exact power of two inv.
// |q| < 1: q + 1 is exact (q has at most 8 significant bits), so rounding 1 + q to one mantissa bit
// rounds q to the 0.5 grid; |q| >= 1: round q itself to one mantissa bit. Both are round-to-nearest-even
// via "+ (half - 1) + lsb" on the fp32 pattern; 7 saturates (|q| >= 5 -> 6).
__device__ __forceinline__ u32 encode_e2m1(u32 bf16_bits, float inv) {
  const float q = arch_as_float((bf16_bits & 0x7FFFu) << 16) * inv;
  const bool below_one = q < 1.0f;
  u32 u = arch_as_u32(below_one ? q + 1.0f : q);
  u += 0x1FFFFFu + ((u >> 22) & 1u);
  const int code = (int)(u >> 22) - (below_one ? 254 : 252);
  return (u32)min_int(code, 7) | ((bf16_bits >> 12) & 8u);
}

// 32 bf16 (x[i] holds elements 2i, 2i+1) -> 32 codes (element t at bits 4*(t%8) of dword t/8) and the
// scale byte.
__device__ __forceinline__ u32 quantize_block(const u32 (&x)[16], u32x4& codes) {
  u32 low_max = 0, high_max = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const u32 low = x[i] & 0x7FFFu, high = x[i] & 0x7FFF0000u;
    low_max = low > low_max ? low : low_max;
    high_max = high > high_max ? high : high_max;
  }
  high_max >>= 16;
  const int e = scale_exponent(low_max > high_max ? low_max : high_max);
  const float inv = inverse_scale(e);
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    u32 packed = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const u32 pair = x[4 * w + j];
      packed |= (encode_e2m1(pair & 0xFFFFu, inv) | encode_e2m1(pair >> 16, inv) << 4) << (8 * j);
    }
    codes[w] = packed;
  }
  return (u32)(e + 127);
}

// ---- operand addressing ----------------------------------------------------------------------

// Byte offset of the 16 codes of B row n, K slice s. Shuffled (aiter shuffle_weight 16x16): per 16 rows,
// per 64 K, two 16-row x 16-byte panels; row-major: B_q [N, K/2].
template <bool B_SHUFFLED>
__device__ __forceinline__ long long b_slice_offset(int n, int s, int K) {
  if (B_SHUFFLED)
    return (long long)(n / 16) * (8 * K) + (s / 2) * 512 + (s % 2) * 256 + (n % 16) * 16;
  return (long long)n * (K / 2) + s * 16;
}

// Word whose byte 0 / byte 2 are the e8m0 scales of row n at columns 8*chunk + q and + q + 4.
// In the shuffled layout (SPEC section 3) those sit in one dword with row n ^ 16's; the dword is read
// whole only when every byte is real data, otherwise byte by byte: padding is never read.
__device__ __forceinline__ u32 load_b_scale_pair(const u8* scales, int scale_cols, int n, int N, int chunk, int q,
                                                 int chunk_slices) {
  const int row_half = (n % 32) / 16;
  const long long base = ((((long long)(n / 32) * (scale_cols / 8) + chunk) * 4 + q) * 16 + n % 16) * 4;
  if (chunk_slices == CHUNK_SLICES && (n ^ 16) < N)
    return *(const u32*)(scales + base) >> (8 * row_half);
  const u32 low = q < chunk_slices ? scales[base + row_half] : 127u;
  const u32 high = q + 4 < chunk_slices ? scales[base + 2 + row_half] : 127u;
  return low | high << 16;
}

// ---- the kernel --------------------------------------------------------------------------------

// MFMA shape: 16 -> 16x16x128 (2 steps per chunk), 32 -> 32x32x64 (4 steps per chunk).
template <int MFMA>
struct Shape {
  static constexpr int ROWS = MFMA;                       // rows (and cols) of one MFMA tile
  static constexpr int GROUPS = 64 / MFMA;                // lane groups = K slices per MFMA step
  static constexpr int STEPS = CHUNK_SLICES / GROUPS;     // MFMA steps per chunk
  static constexpr int SCALE_WORDS = 4 / GROUPS;          // shuffled-scale dwords per row per chunk
  static constexpr int ACC = MFMA * MFMA / 64;            // accumulator floats per lane
  // Step u reads chunk column c = u * GROUPS + group: scale dword (c % 4) / GROUPS, byte 2 * (c / 4).
  template <int U> static constexpr int SCALE_WORD = (U * GROUPS % 4) / GROUPS;
  template <int U> static constexpr int SCALE_BYTE = 2 * (U * GROUPS / 4);
};

template <int MFMA> struct AccOf;
template <> struct AccOf<16> { typedef f32x4 type; };
template <> struct AccOf<32> { typedef f32x16 type; };

template <int MFMA, int SEL_A, int SEL_B, class AccT>
__device__ __forceinline__ AccT mfma(u32x4 a, u32x4 b, AccT c, u32 scale_a, u32 scale_b) {
  if constexpr (MFMA == 16)
    return arch_mfma_scale_16x16x128_fp4<SEL_A, SEL_B>(a, b, c, scale_a, scale_b);
  else
    return arch_mfma_scale_32x32x64_fp4<SEL_A, SEL_B>(a, b, c, scale_a, scale_b);
}

// Row (within the MFMA tile) of accumulator element i of this lane (the column is lane % ROWS).
template <int MFMA>
__device__ __forceinline__ int acc_row(int lane, int i) {
  return MFMA == 16 ? 4 * (lane / 16) + i : 8 * (i / 4) + 4 * (lane / 32) + i % 4;
}

__device__ __forceinline__ u32 bf16_bits_rne(float value) {
  const u32 u = arch_as_u32(value);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

__device__ __forceinline__ u32 bf16_pair(float low, float high) { return bf16_bits_rne(low) | bf16_bits_rne(high) << 16; }

struct Problem {
  const u16* A;
  const u8* B;
  const u8* B_scale_sh;
  u16* C;
  float* partials;
  u32* counters;
  int M, N, K, scale_cols, split_k;
};

// One lane's B data for one chunk: codes per (N subtile, step) and scale words per (N subtile, word).
template <int MFMA, int SUB_N>
struct BChunk {
  u32x4 codes[SUB_N][Shape<MFMA>::STEPS];
  u32 scales[SUB_N][Shape<MFMA>::SCALE_WORDS];
};

template <int MFMA, int SUB_N, bool B_SHUFFLED>
__device__ __forceinline__ void load_b_chunk(const Problem& p, int n0, int chunk, int chunk_slices,
                                             BChunk<MFMA, SUB_N>& out) {
  typedef Shape<MFMA> S;
  const int lane = arch_lane_id(), group = lane / S::ROWS;
#pragma unroll
  for (int sn = 0; sn < SUB_N; ++sn) {
    const int n = n0 + sn * S::ROWS + lane % S::ROWS;
#pragma unroll
    for (int u = 0; u < S::STEPS; ++u) {
      const int c = u * S::GROUPS + group;
      out.codes[sn][u] = u32x4{};
      if (n < p.N && c < chunk_slices)
        out.codes[sn][u] = *(const u32x4*)(p.B + b_slice_offset<B_SHUFFLED>(n, chunk * CHUNK_SLICES + c, p.K));
    }
#pragma unroll
    for (int w = 0; w < S::SCALE_WORDS; ++w)
      out.scales[sn][w] = n < p.N ? load_b_scale_pair(p.B_scale_sh, p.scale_cols, n, p.N, chunk,
                                                      w * S::GROUPS + group, chunk_slices)
                                  : 0x7F007Fu;
  }
}

// Quantize this lane's A blocks of one chunk for M subtile sm: codes per step, scale bytes packed
// (byte u = step u) into one word.
template <int MFMA>
__device__ __forceinline__ u32 quantize_a_chunk(const Problem& p, int m, int chunk, int chunk_slices,
                                                u32x4 (&codes)[Shape<MFMA>::STEPS]) {
  typedef Shape<MFMA> S;
  const int group = arch_lane_id() / S::ROWS;
  u32 scales = 0;
#pragma unroll
  for (int u = 0; u < S::STEPS; ++u) {
    const int c = u * S::GROUPS + group;
    codes[u] = u32x4{};
    u32 scale = 127;
    if (m < p.M && c < chunk_slices) {
      const u32x4* src = (const u32x4*)(p.A + (long long)m * p.K + (chunk * CHUNK_SLICES + c) * SLICE_K);
      u32 x[16];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const u32x4 v = src[i];
#pragma unroll
        for (int j = 0; j < 4; ++j) x[4 * i + j] = v[j];
      }
      scale = quantize_block(x, codes[u]);
    }
    scales |= scale << (8 * u);
  }
  return scales;
}

template <int MFMA, int SUB_M, int SUB_N>
struct Accumulators {
  typename AccOf<MFMA>::type tile[SUB_M][SUB_N];
};

template <int MFMA, int SUB_M, int SUB_N>
__device__ __forceinline__ void mfma_chunk(const Problem& p, int m0, int chunk, int chunk_slices,
                                           const BChunk<MFMA, SUB_N>& b, Accumulators<MFMA, SUB_M, SUB_N>& acc) {
  typedef Shape<MFMA> S;
  const int lane = arch_lane_id();
#pragma unroll
  for (int sm = 0; sm < SUB_M; ++sm) {
    u32x4 a_codes[S::STEPS];
    const u32 a_scales = quantize_a_chunk<MFMA>(p, m0 + sm * S::ROWS + lane % S::ROWS, chunk, chunk_slices, a_codes);
    static_for<0, S::STEPS>([&](auto step) {
      constexpr int u = decltype(step)::value;
      if (u * S::GROUPS >= chunk_slices) return;  // the K tail: a step with no slice left
#pragma unroll
      for (int sn = 0; sn < SUB_N; ++sn)
        acc.tile[sm][sn] = mfma<MFMA, u, S::template SCALE_BYTE<u>>(a_codes[u], b.codes[sn][u], acc.tile[sm][sn], a_scales,
                                                         b.scales[sn][S::template SCALE_WORD<u>]);
    });
  }
}

// Sum the waves' tiles into LDS in wave order (deterministic), leaving the block's tile in `tile`.
template <int MFMA, int SUB_M, int SUB_N, int WAVES>
__device__ __forceinline__ void reduce_waves(const Accumulators<MFMA, SUB_M, SUB_N>& acc, float* tile) {
  typedef Shape<MFMA> S;
  constexpr int BLOCK_N = S::ROWS * SUB_N;
  const int lane = arch_lane_id(), wave = arch_wave_id();
  for (int w = 0; w < WAVES; ++w) {
    if (wave == w) {
#pragma unroll
      for (int sm = 0; sm < SUB_M; ++sm)
#pragma unroll
        for (int sn = 0; sn < SUB_N; ++sn)
#pragma unroll
          for (int i = 0; i < S::ACC; ++i) {
            const int r = sm * S::ROWS + acc_row<MFMA>(lane, i), c = sn * S::ROWS + lane % S::ROWS;
            float& slot = tile[r * BLOCK_N + c];
            slot = (w == 0 ? 0.0f : slot) + acc.tile[sm][sn][i];
          }
    }
    arch_block_barrier();
  }
}

// Write the tile: to C when split_k == 1, else as this split's fp32 partial, and then, in the last
// block to arrive, the sum of all partials (split order) to C. Each thread owns 4 adjacent columns
// (N % 16 == 0, so 4 columns are all in range or all out).
template <int BLOCK_M, int BLOCK_N, int THREADS>
__device__ __forceinline__ void write_tile(const Problem& p, int m0, int n0, const float* tile) {
  constexpr int GROUPS_PER_ROW = BLOCK_N / 4;
  const int split = arch_block_id_z();
  const long long MN = (long long)p.M * p.N;
  for (int g = arch_thread_id(); g < BLOCK_M * GROUPS_PER_ROW; g += THREADS) {
    const int r = g / GROUPS_PER_ROW, c = (g % GROUPS_PER_ROW) * 4, m = m0 + r, n = n0 + c;
    if (m >= p.M || n >= p.N) continue;
    const float* v = tile + r * BLOCK_N + c;
    const long long at = (long long)m * p.N + n;
    if (p.split_k == 1) {
      u32* out = (u32*)(p.C + at);
      out[0] = bf16_pair(v[0], v[1]);
      out[1] = bf16_pair(v[2], v[3]);
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
    out[0] = bf16_pair(sum[0], sum[1]);
    out[1] = bf16_pair(sum[2], sum[3]);
  }
  if (arch_thread_id() == 0) p.counters[tile_id] = 0;
}

template <int MFMA, int SUB_M, int SUB_N, int WAVES, bool B_SHUFFLED>
__device__ __forceinline__ void gemm(const Problem& p) {
  typedef Shape<MFMA> S;
  constexpr int BLOCK_M = S::ROWS * SUB_M, BLOCK_N = S::ROWS * SUB_N;
  __shared__ float tile[BLOCK_M * BLOCK_N];

  const int m0 = arch_block_id_y() * BLOCK_M, n0 = arch_block_id_x() * BLOCK_N;
  const int k_slices = p.K / SLICE_K, chunks = (k_slices + CHUNK_SLICES - 1) / CHUNK_SLICES;
  const int split = arch_block_id_z();
  const int chunk_end = (int)((long long)(split + 1) * chunks / p.split_k);

  Accumulators<MFMA, SUB_M, SUB_N> acc = {};
  // B for the next chunk is loaded before this chunk's A quantization and MFMAs.
  int chunk = (int)((long long)split * chunks / p.split_k) + arch_wave_id();
  BChunk<MFMA, SUB_N> b;
  if (chunk < chunk_end) load_b_chunk<MFMA, SUB_N, B_SHUFFLED>(p, n0, chunk, min_int(CHUNK_SLICES, k_slices - chunk * CHUNK_SLICES), b);
  for (; chunk < chunk_end; chunk += WAVES) {
    const int chunk_slices = min_int(CHUNK_SLICES, k_slices - chunk * CHUNK_SLICES);
    BChunk<MFMA, SUB_N> next = b;
    const int next_chunk = chunk + WAVES;
    if (next_chunk < chunk_end)
      load_b_chunk<MFMA, SUB_N, B_SHUFFLED>(p, n0, next_chunk, min_int(CHUNK_SLICES, k_slices - next_chunk * CHUNK_SLICES), next);
    mfma_chunk<MFMA, SUB_M, SUB_N>(p, m0, chunk, chunk_slices, b, acc);
    b = next;
  }

  reduce_waves<MFMA, SUB_M, SUB_N, WAVES>(acc, tile);
  write_tile<BLOCK_M, BLOCK_N, 64 * WAVES>(p, m0, n0, tile);
}

}  // namespace mxfp4

// Variants: name, MFMA (16 | 32), M subtiles, N subtiles, waves, B layout (true: B_shuffle, false: B_q).
// Tile = (MFMA * M subtiles) x (MFMA * N subtiles). Grid (ceil(N / tile_n), ceil(M / tile_m), split_k),
// block 64 * waves threads, no dynamic LDS.
#define MXFP4_GEMM_VARIANT(NAME, MFMA, SUB_M, SUB_N, WAVES, B_SHUFFLED)                                      \
  extern "C" __global__ void __launch_bounds__(64 * WAVES)                                                 \
      NAME(const u16* A, const u8* B, const u8* B_scale_sh, u16* C, float* partials, u32* counters, int M, \
           int N, int K, int scale_cols, int split_k) {                                                    \
    const mxfp4::Problem p = {A, B, B_scale_sh, C, partials, counters, M, N, K, scale_cols, split_k};     \
    mxfp4::gemm<MFMA, SUB_M, SUB_N, WAVES, B_SHUFFLED>(p);                                                  \
  }

MXFP4_GEMM_VARIANT(mxfp4_gemm_m16n64w4, 16, 1, 4, 4, true)
MXFP4_GEMM_VARIANT(mxfp4_gemm_m16n128w4, 16, 1, 8, 4, true)
MXFP4_GEMM_VARIANT(mxfp4_gemm_m32n64w4, 32, 1, 2, 4, true)
MXFP4_GEMM_VARIANT(mxfp4_gemm_m64n64w4, 32, 2, 2, 4, true)
MXFP4_GEMM_VARIANT(mxfp4_gemm_m16n64w4_bq, 16, 1, 4, 4, false)
MXFP4_GEMM_VARIANT(mxfp4_gemm_m32n64w4_bq, 32, 1, 2, 4, false)

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

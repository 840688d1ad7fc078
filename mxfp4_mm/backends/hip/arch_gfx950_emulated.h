// The NVIDIA side of the arch layer: the gfx950 names of arch_gfx950.h with wave64 semantics.
// A wave is 64 consecutive threads (two warps); the scaled MFMA is computed through a per-wave
// shared-memory scratch guarded by a named barrier of that wave's 64 threads.
#pragma once

#ifndef ARCH_MAX_WAVES
// Named barriers 1..4, one per wave (0 is __syncthreads); 4 waves, the most a kernel uses, keep the
// emulation's shared scratch (2 KiB per wave) beside the kernels' own within the 48 KiB static limit.
#define ARCH_MAX_WAVES 4
#endif

struct alignas(16) u32x4 {
  u32 v[4];
  __device__ __forceinline__ u32& operator[](int i) { return v[i]; }
  __device__ __forceinline__ u32 operator[](int i) const { return v[i]; }
};

template <int N>
struct f32xN {
  float v[N];
  __device__ __forceinline__ float& operator[](int i) { return v[i]; }
  __device__ __forceinline__ float operator[](int i) const { return v[i]; }
};
typedef f32xN<4> f32x4;

__device__ __forceinline__ int arch_thread_id() { return threadIdx.x; }
__device__ __forceinline__ int arch_lane_id() { return threadIdx.x % 64; }
__device__ __forceinline__ int arch_wave_id() { return threadIdx.x / 64; }
__device__ __forceinline__ int arch_block_id_x() { return blockIdx.x; }
__device__ __forceinline__ int arch_block_id_y() { return blockIdx.y; }
__device__ __forceinline__ int arch_block_id_z() { return blockIdx.z; }

__device__ __forceinline__ float arch_as_float(u32 bits) { return __uint_as_float(bits); }
__device__ __forceinline__ u32 arch_as_u32(float value) { return __float_as_uint(value); }

__device__ __forceinline__ u32 arch_max_u16x2(u32 a, u32 b) { return __vmaxu2(a, b); }

// Cross-lane moves within each row of 16 lanes, as gfx950's DPP row controls (a row never spans two warps).
__device__ __forceinline__ u32 lane_in_row(u32 v, int source) {
  return __shfl_sync(0xFFFFFFFFu, v, (threadIdx.x % 32 & ~15) | source);
}
__device__ __forceinline__ u32 arch_row_ror8(u32 v) { return lane_in_row(v, (threadIdx.x + 8) % 16); }
__device__ __forceinline__ u32 arch_row_mirror(u32 v) { return lane_in_row(v, 15 - threadIdx.x % 16); }
__device__ __forceinline__ u32 arch_row_half_mirror(u32 v) { return lane_in_row(v, (threadIdx.x & 8) | (7 - threadIdx.x % 8)); }

// Two fp32 -> bf16 bits, rounded to nearest even (NaN -> a quiet NaN), `low` in bits 0-15.
__device__ __forceinline__ u32 bf16_bits_rne(float value) {
  const u32 u = __float_as_uint(value);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u | ((u >> 16) & 0x8000u);
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
__device__ __forceinline__ u32 arch_bf16x2_rne(float low, float high) { return bf16_bits_rne(low) | bf16_bits_rne(high) << 16; }

// ---- v_cvt_scalef32_pk_fp4_bf16 as format.md §3 states it ------------------------------------

// 1 / scale, exact for a power of two (normal or the denormal 2^-127) from the bits; the reciprocal
// of 2^-127 is 2^127, of 2^127 the denormal 2^-127. Any other scale: the IEEE reciprocal.
__device__ __forceinline__ float exact_reciprocal(float scale) {
  const u32 bits = __float_as_uint(scale);
  const u32 field = (bits >> 23) & 255;
  if (bits == 0x00400000u) return __uint_as_float(254u << 23);
  if (field == 254 && (bits & 0x7FFFFFu) == 0) return __uint_as_float(0x00400000u);
  if (field >= 1 && field < 254 && (bits & 0x7FFFFFu) == 0) return __uint_as_float((254u - field) << 23);
  return 1.0f / scale;
}

// e2m1 code (sign in bit 3) of the bf16 `bits` times `inv`, rounded to nearest even, saturated at 6.
// |q| < 1: q + 1 is exact (q has at most 8 significant bits), so rounding 1 + q to one mantissa bit
// rounds q to the 0.5 grid; |q| >= 1: round q itself to one mantissa bit. Both via "+ (half - 1) + lsb"
// on the fp32 pattern; code 7 saturates (|q| >= 5 -> 6).
__device__ __forceinline__ u32 e2m1_code(u32 bits, float inv) {
  const float q = __uint_as_float((bits & 0x7FFFu) << 16) * inv;
  const bool below_one = q < 1.0f;
  u32 u = __float_as_uint(below_one ? q + 1.0f : q);
  u += 0x1FFFFFu + ((u >> 22) & 1u);
  const int code = (int)(u >> 22) - (below_one ? 254 : 252);
  return (u32)(code < 7 ? code : 7) | ((bits >> 12) & 8u);
}

template <int SEL>
__device__ __forceinline__ u32 arch_cvt_scalef32_pk_fp4_bf16(u32 old, u32 bf16_pair, float scale) {
  const float inv = exact_reciprocal(scale);
  const u32 pair = e2m1_code(bf16_pair & 0xFFFFu, inv) | e2m1_code(bf16_pair >> 16, inv) << 4;
  return (old & ~(255u << (8 * SEL))) | pair << (8 * SEL);
}

__device__ __forceinline__ void arch_block_barrier() { __syncthreads(); }
template <int WAVES>
__device__ __forceinline__ bool arch_block_any(bool value) {
  static_assert(WAVES <= ARCH_MAX_WAVES, "more waves than the emulation's scratch and named barriers");
  return __syncthreads_or(value) != 0;
}
__device__ __forceinline__ void arch_schedule_barrier() {}
__device__ __forceinline__ void arch_fence_release_device() { __threadfence(); }
__device__ __forceinline__ void arch_fence_acquire_device() { __threadfence(); }
__device__ __forceinline__ u32 arch_atomic_add_device(u32* address, u32 value) { return atomicAdd(address, value); }

// ---- scaled MFMA emulation ------------------------------------------------------------------

struct WaveScratch {
  u32x4 a[64], b[64];
  u8 scale_a[64], scale_b[64];
};

__device__ __forceinline__ WaveScratch& wave_scratch() {
  __shared__ WaveScratch scratch[ARCH_MAX_WAVES];
  return scratch[threadIdx.x / 64];
}

__device__ __forceinline__ void wave_barrier() {
  asm volatile("bar.sync %0, 64;" ::"r"(1 + (int)(threadIdx.x / 64)) : "memory");
}

// Twice the e2m1 value of a 4-bit code (an integer: 0, 1, 2, 3, 4, 6, 8, 12, sign in bit 3).
__device__ __forceinline__ int e2m1_times_two(u32 code) {
  const int magnitude = (0xC8643210u >> (4 * (code & 7))) & 15;
  return (code & 8) ? -magnitude : magnitude;
}

// 2^(byte - 127) from bits (exact down to 2^-127); byte 255 is NaN.
__device__ __forceinline__ float e8m0_value(u32 byte) {
  if (byte == 255) return __uint_as_float(0x7FC00000u);
  return byte == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(byte << 23);
}

// One 32-element block: the integer dot of the codes is exact, then scaled by both e8m0 scales.
__device__ __forceinline__ float scaled_block_dot(const WaveScratch& s, int lane_a, int lane_b) {
  int dot = 0;
  for (int w = 0; w < 4; ++w)
    for (int j = 0; j < 8; ++j)
      dot += e2m1_times_two((s.a[lane_a][w] >> (4 * j)) & 15) * e2m1_times_two((s.b[lane_b][w] >> (4 * j)) & 15);
  return (float)dot * 0.25f * e8m0_value(s.scale_a[lane_a]) * e8m0_value(s.scale_b[lane_b]);
}

__device__ __forceinline__ void publish_operands(u32x4 a, u32x4 b, u32 scale_a, int sel_a, u32 scale_b, int sel_b) {
  WaveScratch& s = wave_scratch();
  const int lane = arch_lane_id();
  wave_barrier();  // the previous MFMA of this wave has finished reading
  s.a[lane] = a;
  s.b[lane] = b;
  s.scale_a[lane] = (scale_a >> (8 * sel_a)) & 255;
  s.scale_b[lane] = (scale_b >> (8 * sel_b)) & 255;
  wave_barrier();
}

// Block sums accumulate onto c in fp32 in K order, as the hardware's fp32 accumulation. Not inlined:
// one copy per kernel instead of one per MFMA call site keeps NVRTC's compile time short.
__device__ __noinline__ f32x4 mfma_16x16x128_from_scratch(f32x4 c) {
  const WaveScratch& s = wave_scratch();
  const int lane = arch_lane_id();
  for (int i = 0; i < 4; ++i) {
    const int row = 4 * (lane / 16) + i, col = lane % 16;
    for (int slice = 0; slice < 4; ++slice) c[i] += scaled_block_dot(s, row + 16 * slice, col + 16 * slice);
  }
  return c;
}

template <int SEL_A, int SEL_B>
__device__ __forceinline__ f32x4 arch_mfma_scale_16x16x128_fp4(u32x4 a, u32x4 b, f32x4 c, u32 scale_a, u32 scale_b) {
  publish_operands(a, b, scale_a, SEL_A, scale_b, SEL_B);
  return mfma_16x16x128_from_scratch(c);
}

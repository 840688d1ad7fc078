// The gfx950 side of the arch layer: the only place the kernels touch the hardware.
// arch_gfx950_emulated.h implements the same names on NVIDIA (wave64 emulated exactly).
#pragma once

typedef u32 u32x4 __attribute__((ext_vector_type(4)));  // 16 bytes: 32 fp4 codes of one lane
typedef float f32x4 __attribute__((ext_vector_type(4)));
typedef int i32x8_ __attribute__((ext_vector_type(8)));
typedef __bf16 bf16x2_ __attribute__((ext_vector_type(2)));
typedef u16 u16x2_ __attribute__((ext_vector_type(2)));
typedef float f32x2_ __attribute__((ext_vector_type(2)));

__device__ __forceinline__ int arch_thread_id() { return __builtin_amdgcn_workitem_id_x(); }
__device__ __forceinline__ int arch_lane_id() { return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }
__device__ __forceinline__ int arch_wave_id() { return __builtin_amdgcn_readfirstlane(arch_thread_id() / 64); }
__device__ __forceinline__ int arch_block_id_x() { return __builtin_amdgcn_workgroup_id_x(); }
__device__ __forceinline__ int arch_block_id_y() { return __builtin_amdgcn_workgroup_id_y(); }
__device__ __forceinline__ int arch_block_id_z() { return __builtin_amdgcn_workgroup_id_z(); }

__device__ __forceinline__ float arch_as_float(u32 bits) { return __builtin_bit_cast(float, bits); }
__device__ __forceinline__ u32 arch_as_u32(float value) { return __builtin_bit_cast(u32, value); }

// __syncthreads(): LDS and global writes of the block visible to the whole block.
__device__ __forceinline__ void arch_block_barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

// Whether `value` holds in any thread of the block (every thread must call it, once per kernel): a
// ballot per wave into one LDS word per wave, then a block barrier.
template <int WAVES>
__device__ __forceinline__ bool arch_block_any(bool value) {
  __shared__ u32 wave_votes[WAVES];
  const bool wave_any = __builtin_amdgcn_ballot_w64(value) != 0;
  if (arch_lane_id() == 0) wave_votes[arch_wave_id()] = wave_any;
  arch_block_barrier();
  u32 any = 0;
#pragma unroll
  for (int w = 0; w < WAVES; ++w) any |= wave_votes[w];
  return any != 0;
}

// Per 16-bit half, the unsigned max (v_pk_max_u16).
__device__ __forceinline__ u32 arch_max_u16x2(u32 a, u32 b) {
  return __builtin_bit_cast(u32, __builtin_elementwise_max(__builtin_bit_cast(u16x2_, a), __builtin_bit_cast(u16x2_, b)));
}

// Cross-lane moves within each row of 16 lanes (DPP; every lane of the row reads another's value):
// row_ror:8 (lane i reads i ^ 8), row_mirror (15 - i), row_half_mirror (7 - i within each 8).
__device__ __forceinline__ u32 arch_row_ror8(u32 v) { return __builtin_amdgcn_mov_dpp((int)v, 0x128, 0xF, 0xF, true); }
__device__ __forceinline__ u32 arch_row_mirror(u32 v) { return __builtin_amdgcn_mov_dpp((int)v, 0x140, 0xF, 0xF, true); }
__device__ __forceinline__ u32 arch_row_half_mirror(u32 v) { return __builtin_amdgcn_mov_dpp((int)v, 0x141, 0xF, 0xF, true); }

// Two fp32 -> bf16, rounded to nearest even (v_cvt_pk_bf16_f32): `low` in bits 0-15.
__device__ __forceinline__ u32 arch_bf16x2_rne(float low, float high) {
  return __builtin_bit_cast(u32, __builtin_convertvector((f32x2_){low, high}, bf16x2_));
}

// v_cvt_scalef32_pk_fp4_bf16: the bf16 pair (low half, high half) divided by `scale` (a power of two;
// the instruction uses its exponent), rounded to nearest even onto e2m1 and saturated at +-6, as two
// codes (low nibble from the low bf16) written into byte SEL of `old`.
template <int SEL>
__device__ __forceinline__ u32 arch_cvt_scalef32_pk_fp4_bf16(u32 old, u32 bf16_pair, float scale) {
  return __builtin_amdgcn_cvt_scalef32_pk_fp4_bf16(old, __builtin_bit_cast(bf16x2_, bf16_pair), scale, SEL);
}

// Keeps the compiler's scheduler from moving instructions across (memory issue order matters).
__device__ __forceinline__ void arch_schedule_barrier() { __builtin_amdgcn_sched_barrier(0); }

// Device ("agent") scope: the 8 XCDs have separate L2s, so these write back / invalidate them.
__device__ __forceinline__ void arch_fence_release_device() { __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent"); }
__device__ __forceinline__ void arch_fence_acquire_device() { __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent"); }
__device__ __forceinline__ u32 arch_atomic_add_device(u32* address, u32 value) {
  return __hip_atomic_fetch_add(address, value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}

// v_mfma_scale_f32_16x16x128_f8f6f4 with fp4 A and B (cbsz = blgp = 4). Lane l gives row (col) l%16,
// K slice [32*(l/16), +32) as 32 codes; its e8m0 scale is byte SEL_A (SEL_B) of scale_a (scale_b).
// Result lane l, c[i] = C[4*(l/16) + i][l%16].
template <int SEL_A, int SEL_B>
__device__ __forceinline__ f32x4 arch_mfma_scale_16x16x128_fp4(u32x4 a, u32x4 b, f32x4 c, u32 scale_a, u32 scale_b) {
  i32x8_ a8 = {(int)a[0], (int)a[1], (int)a[2], (int)a[3], 0, 0, 0, 0};
  i32x8_ b8 = {(int)b[0], (int)b[1], (int)b[2], (int)b[3], 0, 0, 0, 0};
  return __builtin_amdgcn_mfma_scale_f32_16x16x128_f8f6f4(a8, b8, c, 4, 4, SEL_A, (int)scale_a, SEL_B, (int)scale_b);
}

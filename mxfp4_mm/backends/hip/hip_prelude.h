// Keywords and integer types the kernels need, for every compiler that builds them:
// hiprtc and NVRTC predefine the HIP/CUDA keywords; bare clang (-nogpuinc, the CPU-side gfx950
// build) does not, so they are defined here only for that case.
#pragma once

#if defined(__HIP__) && !defined(__HIPCC_RTC__)
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(threads) __attribute__((amdgpu_flat_work_group_size(1, threads)))
#define __noinline__ __attribute__((noinline))
#endif

// Own names: the runtimes' <stdint.h> stand-ins disagree on the 64-bit ones.
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;

// mxfp4_exact.h's bit cast on gfx950, as a macro: bare clang lacks the runtime's __uint_as_float, and
// a macro cannot collide with the declaration hiprtc's built-in header may already have made.
#if defined(__AMDGCN__)
#define __uint_as_float(bits) __builtin_bit_cast(float, (u32)(bits))
#endif

// The MXFP4 format in plain fp32 scalar code (format.md §2 quantization, e2m1/e8m0 dequantization),
// exactly as mxfp4_mm/spec.py computes it. Used by mxfp4_gemm_sm90.cu's exact fallback; compiled
// for the host too (tests/test_exact_header.py checks it against spec.py bit for bit), hence the
// MXFP4_HD qualifier and the bit-cast helpers.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__CUDACC_RTC__)
#define MXFP4_HD __device__
__device__ __forceinline__ float mxfp4_bits_to_float(unsigned int u) { return __uint_as_float(u); }
#else
#include <cstring>
#define MXFP4_HD
inline float mxfp4_bits_to_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
#endif

// 2^p for p in [-149, 127], subnormals included (exp2 may flush them).
MXFP4_HD inline float pow2_exact(int p) {
    return mxfp4_bits_to_float(p >= -126 ? (unsigned int)(p + 127) << 23 : 1u << (p + 149));
}

// e2m1 magnitude code 0..7 -> 0, 0.5, 1, 1.5, 2, 3, 4, 6.
MXFP4_HD inline float e2m1_magnitude(unsigned int c) {
    return c < 2 ? 0.5f * (float)c : mxfp4_bits_to_float((((c >> 1) + 126) << 23) | ((c & 1) << 22));
}

// Scale exponent of a block from the largest magnitude bits (bf16, sign cleared; NaN sorts last):
// amax rounded up to a power of two at >= 0.75 of the binade, minus 2, clamped; inf/NaN -> 127
// (NaN taken as inf first: a NaN payload >= 0x7FE0 would carry out of the rounding add).
MXFP4_HD inline int block_exponent(unsigned int amax_bits16) {
    const unsigned int amax = amax_bits16 < 0x7F80u ? amax_bits16 : 0x7F80u;
    const int field = (int)((((amax << 16) + 0x200000u) & 0x7F800000u) >> 23);
    return field == 255 ? 127 : (field - 129 < -127 ? -127 : field - 129);
}

// The e2m1 magnitude code 0..7 of a bf16 value of a block with exponent e: round to nearest even on
// the e2m1 grid, saturating at 6; NaN -> 0.
MXFP4_HD inline unsigned int e2m1_code(unsigned int bits16, int e) {
    const float q = mxfp4_bits_to_float(bits16 << 16) * pow2_exact(-e);
    const float m = q < 0.f ? -q : q;  // NaN stays NaN, and every comparison below is false
    return (m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) + (m >= 3.5f) + (m > 5.0f);
}

// The same rounding as e2m1_magnitude(e2m1_code(bits16, e)), from m = |bf16 value * 2^-e| and in two
// fp32 adds: adding and subtracting 2^22 (m < 2), 2^23 (m < 4) or 2^24 rounds to nearest even on
// the grid's step in that binade (0.5, 1, 2); then saturate at 6; NaN -> 0. The adds must stay
// apart (no fast-math reassociation). For the fp8 quantization kernel: built with it, that kernel
// has 704 SASS instructions against 1,224 with e2m1_code (nvcc 13.0; notes/cuda.md, "Row flags").
MXFP4_HD inline float e2m1_round(float m) {
    const float magic = m < 2.f ? 4194304.f : m < 4.f ? 8388608.f : 16777216.f;
    const float r = (m + magic) - magic;
    return r <= 6.f ? r : m > 6.f ? 6.f : 0.f;
}

// One bf16 value of a block with exponent e, quantized and dequantized:
// spec.dequantize_mxfp4(spec.quantize_mxfp4(x)).
MXFP4_HD inline float quant_dequant(unsigned int bits16, int e) {
    const float v = e2m1_magnitude(e2m1_code(bits16, e)) * pow2_exact(e);
    return bits16 & 0x8000u ? -v : v;
}

// A B value from its 4-bit code and e8m0 scale byte (255 = NaN).
MXFP4_HD inline float e2m1_e8m0_value(unsigned int code, unsigned int scale_byte) {
    const float s = scale_byte == 255u ? mxfp4_bits_to_float(0x7FC00000u) : pow2_exact((int)scale_byte - 127);
    const float v = e2m1_magnitude(code & 7u) * s;
    return code & 8u ? -v : v;
}

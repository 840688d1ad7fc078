// wgmma (sm_90a) wrappers used by mxfp4_gemm_sm90_pipe.cu and mxfp4_gemm_sm90_fp8.cu: D[64 x N] += A[64 x 16] * B[16 x N],
// both operands from shared memory through matrix descriptors (wgmma "SS"): A the weights, B the
// activations; fp32 accumulators in the m16n8 C layout per 8 columns (d[j][0..3] = rows g, g, g+8,
// g+8 and columns 8j+2t, 8j+2t+1). One function per N: the instruction takes N/2 accumulator registers
// by name, so each wrapper lists them (the WGMMA_ACC and WGMMA_REGS macros below).
#pragma once

// The accumulator operands of a wgmma of N columns (N / 8 groups of the C layout's 4 registers) and
// their names in the instruction: written once here, not per wrapper.
#define WGMMA_ACC_AT(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define WGMMA_ACC1 WGMMA_ACC_AT(0)
#define WGMMA_ACC2 WGMMA_ACC_AT(0), WGMMA_ACC_AT(1)
#define WGMMA_ACC4 WGMMA_ACC2, WGMMA_ACC_AT(2), WGMMA_ACC_AT(3)
#define WGMMA_ACC8 WGMMA_ACC4, WGMMA_ACC_AT(4), WGMMA_ACC_AT(5), WGMMA_ACC_AT(6), WGMMA_ACC_AT(7)
#define WGMMA_ACC16 WGMMA_ACC8, WGMMA_ACC_AT(8), WGMMA_ACC_AT(9), WGMMA_ACC_AT(10), WGMMA_ACC_AT(11), \
    WGMMA_ACC_AT(12), WGMMA_ACC_AT(13), WGMMA_ACC_AT(14), WGMMA_ACC_AT(15)
#define WGMMA_ACC32 WGMMA_ACC16, WGMMA_ACC_AT(16), WGMMA_ACC_AT(17), WGMMA_ACC_AT(18), WGMMA_ACC_AT(19), \
    WGMMA_ACC_AT(20), WGMMA_ACC_AT(21), WGMMA_ACC_AT(22), WGMMA_ACC_AT(23), WGMMA_ACC_AT(24), WGMMA_ACC_AT(25), \
    WGMMA_ACC_AT(26), WGMMA_ACC_AT(27), WGMMA_ACC_AT(28), WGMMA_ACC_AT(29), WGMMA_ACC_AT(30), WGMMA_ACC_AT(31)
#define WGMMA_REGS4 "{%0, %1, %2, %3}"
#define WGMMA_REGS8 "{%0, %1, %2, %3, %4, %5, %6, %7}"
#define WGMMA_REGS16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define WGMMA_REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define WGMMA_REGS128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// Shared-memory matrix descriptor, no swizzle: start address, LBO = bytes between the two core
// matrices along K, SBO = bytes between core matrices 8 rows apart (PTX ISA, wgmma descriptors).
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned int smem_byte_addr, unsigned int lbo, unsigned int sbo) {
    return (unsigned long long)((smem_byte_addr >> 4) & 0x3FFF) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
           ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }

// Register operands of a running wgmma must keep their values until its group is waited for;
// an empty asm that "rewrites" them after the wait keeps the compiler from reusing them earlier.
__device__ __forceinline__ void wgmma_keep(float& r) { asm volatile("" : "+f"(r)::"memory"); }
template <typename T, int N>
__device__ __forceinline__ void wgmma_keep(T (&regs)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) wgmma_keep(regs[i]);
}

// A (64 x 16) and B (16 x N), each through a no-swizzle K-major descriptor.
template <int N>
__device__ __forceinline__ void wgmma_ss_bf16(float (&d)[N / 8][4], unsigned long long desc_a, unsigned long long desc_b);

template <>
__device__ __forceinline__ void wgmma_ss_bf16<16>(float (&d)[2][4], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                 WGMMA_REGS8 ", "
                 "%8, %9, accumulate, 1, 1, 0, 0;\n}\n"
                 : WGMMA_ACC2
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_ss_bf16<32>(float (&d)[4][4], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 WGMMA_REGS16 ", "
                 "%16, %17, accumulate, 1, 1, 0, 0;\n}\n"
                 : WGMMA_ACC4
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_ss_bf16<64>(float (&d)[8][4], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 WGMMA_REGS32 ", "
                 "%32, %33, accumulate, 1, 1, 0, 0;\n}\n"
                 : WGMMA_ACC8
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_ss_bf16<128>(float (&d)[16][4], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 WGMMA_REGS64 ", "
                 "%64, %65, accumulate, 1, 1, 0, 0;\n}\n"
                 : WGMMA_ACC16
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}

template <>
__device__ __forceinline__ void wgmma_ss_bf16<256>(float (&d)[32][4], unsigned long long desc_a, unsigned long long desc_b) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
                 WGMMA_REGS128 ", "
                 "%128, %129, accumulate, 1, 1, 0, 0;\n}\n"
                 : WGMMA_ACC32
                 : "l"(desc_a), "l"(desc_b), "r"(1));
}

// e4m3 x e4m3 (k32): A (64 x 32 bytes) and B (32 bytes x N), each through a no-swizzle K-major
// descriptor; `accumulate` = 0 overwrites d (a fresh partial sum), 1 adds to it.
template <int N>
__device__ __forceinline__ void wgmma_ss_e4m3(float (&d)[N / 8][4], unsigned long long desc_a, unsigned long long desc_b, int accumulate);

template <>
__device__ __forceinline__ void wgmma_ss_e4m3<8>(float (&d)[1][4], unsigned long long desc_a, unsigned long long desc_b, int accumulate) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
                 WGMMA_REGS4 ", "
                 "%4, %5, accumulate, 1, 1;\n}\n"
                 : WGMMA_ACC1
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

template <>
__device__ __forceinline__ void wgmma_ss_e4m3<16>(float (&d)[2][4], unsigned long long desc_a, unsigned long long desc_b, int accumulate) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
                 WGMMA_REGS8 ", "
                 "%8, %9, accumulate, 1, 1;\n}\n"
                 : WGMMA_ACC2
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

template <>
__device__ __forceinline__ void wgmma_ss_e4m3<32>(float (&d)[4][4], unsigned long long desc_a, unsigned long long desc_b, int accumulate) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
                 WGMMA_REGS16 ", "
                 "%16, %17, accumulate, 1, 1;\n}\n"
                 : WGMMA_ACC4
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

template <>
__device__ __forceinline__ void wgmma_ss_e4m3<64>(float (&d)[8][4], unsigned long long desc_a, unsigned long long desc_b, int accumulate) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
                 WGMMA_REGS32 ", "
                 "%32, %33, accumulate, 1, 1;\n}\n"
                 : WGMMA_ACC8
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

template <>
__device__ __forceinline__ void wgmma_ss_e4m3<128>(float (&d)[16][4], unsigned long long desc_a, unsigned long long desc_b, int accumulate) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
                 WGMMA_REGS64 ", "
                 "%64, %65, accumulate, 1, 1;\n}\n"
                 : WGMMA_ACC16
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// e4m3 x e4m3 (k32), A (64 x 32 bytes) from registers (wgmma "RS"): a[0..3] = rows g and g + 8 of
// the warp's 16 (warp w of the warpgroup: rows 16w..), bytes 4t..4t+3 (a[0], a[1]) and 16 + 4t.. (a[2],
// a[3]) of K, t = lane % 4, g = lane / 4 (CUTLASS's ALayout_64x32); B (32 bytes x N) through a no-swizzle
// K-major descriptor. The registers must keep their values until the wgmma's group is waited for.
template <int N>
__device__ __forceinline__ void wgmma_rs_e4m3(float (&d)[N / 8][4], const unsigned int (&a)[4], unsigned long long desc_b, int accumulate);

template <>
__device__ __forceinline__ void wgmma_rs_e4m3<8>(float (&d)[1][4], const unsigned int (&a)[4], unsigned long long desc_b, int accumulate) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %9, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
                 WGMMA_REGS4 ", "
                 "{%4, %5, %6, %7}, %8, accumulate, 1, 1;\n}\n"
                 : WGMMA_ACC1
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

template <>
__device__ __forceinline__ void wgmma_rs_e4m3<16>(float (&d)[2][4], const unsigned int (&a)[4], unsigned long long desc_b, int accumulate) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 "
                 WGMMA_REGS8 ", "
                 "{%8, %9, %10, %11}, %12, accumulate, 1, 1;\n}\n"
                 : WGMMA_ACC2
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

template <>
__device__ __forceinline__ void wgmma_rs_e4m3<32>(float (&d)[4][4], const unsigned int (&a)[4], unsigned long long desc_b, int accumulate) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
                 WGMMA_REGS16 ", "
                 "{%16, %17, %18, %19}, %20, accumulate, 1, 1;\n}\n"
                 : WGMMA_ACC4
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

template <>
__device__ __forceinline__ void wgmma_rs_e4m3<64>(float (&d)[8][4], const unsigned int (&a)[4], unsigned long long desc_b, int accumulate) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
                 WGMMA_REGS32 ", "
                 "{%32, %33, %34, %35}, %36, accumulate, 1, 1;\n}\n"
                 : WGMMA_ACC8
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

template <>
__device__ __forceinline__ void wgmma_rs_e4m3<128>(float (&d)[16][4], const unsigned int (&a)[4], unsigned long long desc_b, int accumulate) {
    asm volatile("{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
                 WGMMA_REGS64 ", "
                 "{%64, %65, %66, %67}, %68, accumulate, 1, 1;\n}\n"
                 : WGMMA_ACC16
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

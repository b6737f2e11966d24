// Shared by every fateplan CUDA source (prepended at build time, so that
// NVRTC compiles each source as one translation unit without includes).
//
// Conventions: tensors are f32, row-major; element indices are 64-bit;
// every kernel walks its index space with a grid-stride loop, so any grid
// covers it. No kernel uses atomics on floating-point values: every sum
// is formed in a fixed order, so results do not depend on the launch.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned char u8;

#define GRID_STRIDE(i, n)                                                    \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (u64)(n);  \
         i += (u64)blockDim.x * gridDim.x)

// NVRTC has no math.h: -inf as bits.
#define NEG_INFINITY_F (-__int_as_float(0x7f800000))

// How a kernel starts its output: from zero, from `init`, or from what the
// output already holds (accumulate).
#define INIT_ZERO 0
#define INIT_FROM 1
#define INIT_OUT 2

__device__ __forceinline__ float init_value(int mode, const float* init, const float* out, u64 i) {
    return mode == INIT_ZERO ? 0.0f : (mode == INIT_FROM ? init[i] : out[i]);
}

// The dropout mask of kernels/src/dropout.rs, bit for bit: element `i`
// takes the 16 bits `16 * (i % 4)` of SplitMix64's output function applied
// to `key + (i / 4) * GOLDEN`, and is kept when they are at least
// `threshold`. `threshold == 0` means no dropout (factor 1, not applied).
#define GOLDEN 0x9E3779B97F4A7C15ULL

__device__ __forceinline__ u64 mix64(u64 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

__device__ __forceinline__ bool mask_keep(u64 key, u32 threshold, u64 index) {
    u64 bits = mix64(key + (index >> 2) * GOLDEN);
    u32 u = (u32)(bits >> (16 * (index & 3))) & 0xFFFFu;
    return u >= threshold;
}

// `x * factor` where the factor is 0 or `scale`; `x` itself without dropout.
__device__ __forceinline__ float masked(float x, u64 key, u32 threshold, float scale, u64 index) {
    if (threshold == 0) return x;
    return x * (mask_keep(key, threshold, index) ? scale : 0.0f);
}

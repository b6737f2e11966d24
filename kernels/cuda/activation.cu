// Activations fused with dropout, as kernels/src/activation.rs computes
// them: the mask of element i is that of global element base + i, where
// base = row0 * width.

__device__ __forceinline__ float elu(float z) { return z > 0.0f ? z : expm1f(z); }
__device__ __forceinline__ float elu_grad(float z) { return z > 0.0f ? 1.0f : expf(z); }

// out = dropout(relu(z)).
extern "C" __global__ void relu_dropout_f32(
    const float* z, u64 n, float* out, u64 key, u32 threshold, float scale, u64 base)
{
    GRID_STRIDE(i, n) {
        float v = z[i] > 0.0f ? z[i] : 0.0f;
        out[i] = masked(v, key, threshold, scale, base + i);
    }
}

// grad_z = (grad_out * [z > 0]) * mask.
extern "C" __global__ void relu_dropout_bwd_f32(
    const float* grad_out, const float* z, u64 n, float* grad_z,
    u64 key, u32 threshold, float scale, u64 base)
{
    GRID_STRIDE(i, n) {
        float v = grad_out[i] * (z[i] > 0.0f ? 1.0f : 0.0f);
        grad_z[i] = masked(v, key, threshold, scale, base + i);
    }
}

// ReLU's mask, as kernels/src/activation.rs's positive_bits: bit i % 64 of
// 64-bit word i / 64 is [z[i] > 0]. One thread an element; a warp's ballot
// is one 32-bit half of a word (the low half first: little-endian). The
// threads run over whole words, so every half is written and the bits past
// n are clear. A warp's threads take 32 consecutive elements (blocks are
// whole warps), so they leave the loop together.
extern "C" __global__ void positive_bits_f32(const float* z, u64 n, u32* halves)
{
    u64 padded = (n + 63) / 64 * 64;
    GRID_STRIDE(i, padded) {
        bool on = i < n && z[i] > 0.0f;
        u32 half = __ballot_sync(0xffffffffu, on);
        if ((threadIdx.x & 31) == 0) halves[i >> 5] = half;
    }
}

// grad_z = (grad_out * bit) * mask, the bit of element i in ReLU's mask
// (positive_bits_f32): the same values as relu_dropout_bwd_f32 of z.
extern "C" __global__ void relu_dropout_bwd_bits_f32(
    const float* grad_out, const u32* halves, u64 n, float* grad_z,
    u64 key, u32 threshold, float scale, u64 base)
{
    GRID_STRIDE(i, n) {
        float v = grad_out[i] * (((halves[i >> 5] >> (i & 31)) & 1u) ? 1.0f : 0.0f);
        grad_z[i] = masked(v, key, threshold, scale, base + i);
    }
}

// out = dropout(elu(z)), alpha = 1.
extern "C" __global__ void elu_dropout_f32(
    const float* z, u64 n, float* out, u64 key, u32 threshold, float scale, u64 base)
{
    GRID_STRIDE(i, n) { out[i] = masked(elu(z[i]), key, threshold, scale, base + i); }
}

// grad_z = (grad_out * elu'(z)) * mask.
extern "C" __global__ void elu_dropout_bwd_f32(
    const float* grad_out, const float* z, u64 n, float* grad_z,
    u64 key, u32 threshold, float scale, u64 base)
{
    GRID_STRIDE(i, n) {
        grad_z[i] = masked(grad_out[i] * elu_grad(z[i]), key, threshold, scale, base + i);
    }
}

// The dense pieces around cuBLAS's GEMM, as kernels/src/dense.rs computes
// them: bias, column sums in fixed row chunks, ordered sums, dropout.

// out[r, f] = x[r, f] + bias[f].
extern "C" __global__ void add_bias_f32(const float* x, u64 rows, u64 width, const float* bias, float* out)
{
    GRID_STRIDE(i, rows * width) { out[i] = x[i] + bias[i % width]; }
}

// x[r, f] += bias[f].
extern "C" __global__ void add_bias_inplace_f32(float* x, u64 rows, u64 width, const float* bias)
{
    GRID_STRIDE(i, rows * width) { x[i] = x[i] + bias[i % width]; }
}

// x[i] = value.
extern "C" __global__ void fill_f32(float* x, u64 n, float value)
{
    GRID_STRIDE(i, n) { x[i] = value; }
}

// One partial per `chunk_rows` rows: partials[k, f] = sum over the chunk's
// rows, in row order, of x[r, f].
extern "C" __global__ void column_sums_partial_f32(
    const float* x, u64 rows, u64 width, u64 chunk_rows, float* partials)
{
    u64 chunks = (rows + chunk_rows - 1) / chunk_rows;
    GRID_STRIDE(i, chunks * width) {
        u64 k = i / width, f = i % width;
        u64 hi = (k + 1) * chunk_rows < rows ? (k + 1) * chunk_rows : rows;
        float s = 0.0f;
        for (u64 r = k * chunk_rows; r < hi; ++r) s = s + x[r * width + f];
        partials[i] = s;
    }
}

// out[f] = partials[0, f] + partials[1, f] + ... in order; with
// `accumulate`, added to what out holds.
extern "C" __global__ void sum_partials_f32(
    const float* partials, u64 chunks, u64 width, float* out, int accumulate)
{
    GRID_STRIDE(f, width) {
        float s;
        u64 k = 0;
        if (accumulate) { s = out[f]; } else { s = chunks > 0 ? partials[f] : 0.0f; k = 1; }
        for (; k < chunks; ++k) s = s + partials[k * width + f];
        out[f] = s;
    }
}

// out (= or +=) part, element by element.
extern "C" __global__ void sum_into_f32(const float* part, u64 n, float* out, int accumulate)
{
    GRID_STRIDE(i, n) { out[i] = accumulate ? out[i] + part[i] : part[i]; }
}

// out[i] = x[i] * mask(base + i): dropout, or the backward of a dropout.
extern "C" __global__ void dropout_f32(
    const float* x, u64 n, float* out, u64 key, u32 threshold, float scale, u64 base)
{
    GRID_STRIDE(i, n) { out[i] = masked(x[i], key, threshold, scale, base + i); }
}

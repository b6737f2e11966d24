// Graph attention (GAT) block by block, as kernels/src/gat.rs computes it:
// H heads of width C (d = H * C); edge-wise arrays are nnz x H, edge-major.

#define NEGATIVE_SLOPE 0.2f

__device__ __forceinline__ float leaky_relu(float u) { return u > 0.0f ? u : NEGATIVE_SLOPE * u; }
__device__ __forceinline__ float leaky_relu_grad(float u) { return u > 0.0f ? 1.0f : NEGATIVE_SLOPE; }

// a_src[v, h] = <att_src_h, z[v]_h>, a_dst[v, h] = <att_dst_h, z[v]_h>.
extern "C" __global__ void gat_node_scores_f32(
    const float* z, u64 rows, u32 heads, u32 head_width,
    const float* att_src, const float* att_dst, float* a_src, float* a_dst)
{
    u64 d = (u64)heads * head_width;
    GRID_STRIDE(i, rows * heads) {
        u64 v = i / heads, h = i % heads;
        const float* zh = z + v * d + h * head_width;
        float s = 0.0f, t = 0.0f;
        for (u32 k = 0; k < head_width; ++k) {
            s = s + zh[k] * att_src[h * head_width + k];
            t = t + zh[k] * att_dst[h * head_width + k];
        }
        a_src[i] = s;
        a_dst[i] = t;
    }
}

// Attention dropout on one block's edges (gat::dropout_edges): head h of
// the edge from source row c to destination row r takes the mask of element
// ((dst_first + r) * nodes + src_first + c) * heads + h (wrapping u64), its
// endpoints' rows in the whole graph. out = alpha * mask (alpha itself when
// threshold is 0).
extern "C" __global__ void gat_dropout_edges_f32(
    const u64* row_start, const u32* columns, u64 rows, u32 heads,
    const float* alpha, float* out, u64 key, u32 threshold, float scale,
    u64 dst_first, u64 src_first, u64 nodes)
{
    GRID_STRIDE(i, rows * heads) {
        u64 r = i / heads, h = i % heads;
        u64 row_key = (dst_first + r) * nodes;
        for (u64 e = row_start[r]; e < row_start[r + 1]; ++e) {
            u64 edge = row_key + src_first + columns[e];
            u64 at = e * heads + h;
            out[at] = masked(alpha[at], key, threshold, scale, edge * heads + h);
        }
    }
}

// scores[e, h] = LeakyReLU(a_dst[r, h] + a_src[c, h]).
extern "C" __global__ void gat_edge_scores_f32(
    const u64* row_start, const u32* columns, u64 rows, u32 heads,
    const float* a_dst, const float* a_src, float* scores)
{
    GRID_STRIDE(i, rows * heads) {
        u64 r = i / heads, h = i % heads;
        float ad = a_dst[i];
        for (u64 e = row_start[r]; e < row_start[r + 1]; ++e) {
            scores[e * heads + h] = leaky_relu(ad + a_src[(u64)columns[e] * heads + h]);
        }
    }
}

// The edge softmax of a destination partition runs over its source blocks
// in order, one launch per block and pass: `max` (row_max starts at
// -inf), `exp` (x = exp(x - max), row_sum += x; row_sum starts at 0),
// then `div` (x /= row_sum). `alpha` is the block's slice.
extern "C" __global__ void gat_softmax_max_f32(
    const u64* row_start, u64 rows, u32 heads, const float* alpha, float* row_max)
{
    GRID_STRIDE(i, rows * heads) {
        u64 r = i / heads, h = i % heads;
        float m = row_max[i];
        for (u64 e = row_start[r]; e < row_start[r + 1]; ++e) m = fmaxf(m, alpha[e * heads + h]);
        row_max[i] = m;
    }
}

extern "C" __global__ void gat_softmax_exp_f32(
    const u64* row_start, u64 rows, u32 heads, float* alpha, const float* row_max, float* row_sum)
{
    GRID_STRIDE(i, rows * heads) {
        u64 r = i / heads, h = i % heads;
        float m = row_max[i], s = row_sum[i];
        for (u64 e = row_start[r]; e < row_start[r + 1]; ++e) {
            float x = expf(alpha[e * heads + h] - m);
            alpha[e * heads + h] = x;
            s = s + x;
        }
        row_sum[i] = s;
    }
}

extern "C" __global__ void gat_softmax_div_f32(
    const u64* row_start, u64 rows, u32 heads, float* alpha, const float* row_sum)
{
    GRID_STRIDE(i, rows * heads) {
        u64 r = i / heads, h = i % heads;
        float s = row_sum[i];
        for (u64 e = row_start[r]; e < row_start[r + 1]; ++e) alpha[e * heads + h] /= s;
    }
}

// out[r]_h = init + sum over the block's edges of alpha[e, h] * z_src[c]_h.
extern "C" __global__ void gat_aggregate_f32(
    const u64* row_start, const u32* columns, u64 rows, const float* alpha,
    const float* z_src, u32 heads, u32 head_width, const float* init, int init_mode, float* out)
{
    u64 d = (u64)heads * head_width;
    GRID_STRIDE(i, rows * d) {
        u64 r = i / d, f = i % d, h = f / head_width;
        float acc = init_value(init_mode, init, out, i);
        for (u64 e = row_start[r]; e < row_start[r + 1]; ++e) {
            acc = acc + alpha[e * heads + h] * z_src[(u64)columns[e] * d + f];
        }
        out[i] = acc;
    }
}

// The destination side of one block's attention backward: per edge,
// du[e, h] = ds * LeakyReLU'(a_dst + a_src), with
// ds = alpha * (dalpha - <dout_h, out_h>), or with attention dropout
// ds = dropped * dalpha - alpha * <dout_h, out_h>; and
// grad_a_dst[r, h] (= or +=) the sum of du over the row's edges.
extern "C" __global__ void gat_attention_bwd_dst_f32(
    const u64* row_start, const u32* columns, u64 rows, u32 heads, u32 head_width,
    const float* alpha, const float* alpha_dropped, int has_dropped,
    const float* a_dst, const float* a_src, const float* z_src,
    const float* grad_out, const float* out, float* du, float* grad_a_dst, int init_mode)
{
    u64 d = (u64)heads * head_width;
    GRID_STRIDE(i, rows * heads) {
        u64 r = i / heads, h = i % heads;
        const float* g = grad_out + r * d + h * head_width;
        const float* o = out + r * d + h * head_width;
        float row_dot = 0.0f;
        for (u32 k = 0; k < head_width; ++k) row_dot = row_dot + g[k] * o[k];
        float ga = init_value(init_mode == INIT_OUT ? INIT_OUT : INIT_ZERO, 0, grad_a_dst, i);
        for (u64 e = row_start[r]; e < row_start[r + 1]; ++e) {
            u64 c = columns[e];
            const float* s = z_src + c * d + h * head_width;
            float dalpha = 0.0f;
            for (u32 k = 0; k < head_width; ++k) dalpha = dalpha + g[k] * s[k];
            float a = alpha[e * heads + h];
            float ds = has_dropped ? alpha_dropped[e * heads + h] * dalpha - a * row_dot
                                   : a * (dalpha - row_dot);
            float u = a_dst[i] + a_src[c * heads + h];
            float v = ds * leaky_relu_grad(u);
            du[e * heads + h] = v;
            ga = ga + v;
        }
        grad_a_dst[i] = ga;
    }
}

// The source side, through the block's transpose (see sparse.cu):
// grad_z_src[c, f] (= or +=) sum over the edges into c, in edge order, of
// value_alpha[e, h] * grad_out[r, f].
extern "C" __global__ void gat_scatter_value_f32(
    const u64* start, const u32* perm, const u32* perm_row, u64 src_rows, u32 heads, u32 head_width,
    const float* value_alpha, const float* grad_out, float* grad_z_src, int init_mode)
{
    u64 d = (u64)heads * head_width;
    GRID_STRIDE(i, src_rows * d) {
        u64 c = i / d, f = i % d, h = f / head_width;
        float acc = init_value(init_mode == INIT_OUT ? INIT_OUT : INIT_ZERO, 0, grad_z_src, i);
        for (u64 p = start[c]; p < start[c + 1]; ++p) {
            acc = acc + value_alpha[(u64)perm[p] * heads + h] * grad_out[(u64)perm_row[p] * d + f];
        }
        grad_z_src[i] = acc;
    }
}

// grad_a_src[c, h] (= or +=) sum over the edges into c of du[e, h].
extern "C" __global__ void gat_scatter_score_f32(
    const u64* start, const u32* perm, u64 src_rows, u32 heads,
    const float* du, float* grad_a_src, int init_mode)
{
    GRID_STRIDE(i, src_rows * heads) {
        u64 c = i / heads, h = i % heads;
        float acc = init_value(init_mode == INIT_OUT ? INIT_OUT : INIT_ZERO, 0, grad_a_src, i);
        for (u64 p = start[c]; p < start[c + 1]; ++p) acc = acc + du[(u64)perm[p] * heads + h];
        grad_a_src[i] = acc;
    }
}

// grad_z[v, f] += grad_a_src[v, h] * att_src[f] + grad_a_dst[v, h] * att_dst[f].
extern "C" __global__ void gat_node_scores_bwd_z_f32(
    u64 rows, u32 heads, u32 head_width, const float* att_src, const float* att_dst,
    const float* grad_a_src, const float* grad_a_dst, float* grad_z)
{
    u64 d = (u64)heads * head_width;
    GRID_STRIDE(i, rows * d) {
        u64 v = i / d, f = i % d, h = f / head_width;
        float gs = grad_a_src[v * heads + h], gd = grad_a_dst[v * heads + h];
        grad_z[i] = grad_z[i] + (gs * att_src[f] + gd * att_dst[f]);
    }
}

// One partial of [grad_att_src | grad_att_dst] per `chunk_rows` rows:
// partials[k, f] = sum over v in chunk k of grad_a_src[v, h] * z[v, f] (and
// with grad_a_dst at f + d).
extern "C" __global__ void gat_node_scores_bwd_att_f32(
    const float* z, u64 rows, u32 heads, u32 head_width,
    const float* grad_a_src, const float* grad_a_dst, u64 chunk_rows, float* partials)
{
    u64 d = (u64)heads * head_width;
    u64 chunks = (rows + chunk_rows - 1) / chunk_rows;
    GRID_STRIDE(i, chunks * d) {
        u64 k = i / d, f = i % d, h = f / head_width;
        u64 hi = (k + 1) * chunk_rows < rows ? (k + 1) * chunk_rows : rows;
        float s = 0.0f, t = 0.0f;
        for (u64 v = k * chunk_rows; v < hi; ++v) {
            float x = z[v * d + f];
            s = s + grad_a_src[v * heads + h] * x;
            t = t + grad_a_dst[v * heads + h] * x;
        }
        partials[k * 2 * d + f] = s;
        partials[k * 2 * d + d + f] = t;
    }
}

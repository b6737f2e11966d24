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

// Every kernel that walks a block's rows (or its transpose's columns)
// walks a row only up to its first segment boundary (prelude.cuh), and a
// `_rest` or `_carry` kernel walks the rows' parts past it, one thread per
// segment and head (or feature). A `_carry` kernel sums each part from
// zero into `carry` (segments x heads, or x d), which `segment_fixup_f32`
// (sparse.cu) adds to the row's sum in segment order, or folds into the
// row's maximum (`gat_segment_max_f32`). The host launches the second
// kernel and the fix-up only where the block has more than one segment.

// Attention dropout on one block's edges (gat::dropout_edges): head h of
// the edge from source row c to destination row r takes the mask of element
// ((dst_first + r) * nodes + src_first + c) * heads + h (wrapping u64), its
// endpoints' rows in the whole graph. out = alpha * mask (alpha itself when
// threshold is 0).
__device__ __forceinline__ void dropout_span(
    const u32* columns, u64 r, u64 begin, u64 end, u64 h, u32 heads, const float* alpha,
    float* out, u64 key, u32 threshold, float scale, u64 dst_first, u64 src_first, u64 nodes)
{
    u64 row_key = (dst_first + r) * nodes;
    for (u64 e = begin; e < end; ++e) {
        u64 edge = row_key + src_first + columns[e];
        u64 at = e * heads + h;
        out[at] = masked(alpha[at], key, threshold, scale, edge * heads + h);
    }
}

extern "C" __global__ void gat_dropout_edges_f32(
    const u64* row_start, const u32* columns, u64 rows, u64 seg, u32 heads,
    const float* alpha, float* out, u64 key, u32 threshold, float scale,
    u64 dst_first, u64 src_first, u64 nodes)
{
    GRID_STRIDE(i, rows * heads) {
        u64 r = i / heads, h = i % heads;
        u64 begin = row_start[r], end = first_cut(begin, row_start[r + 1], seg);
        dropout_span(columns, r, begin, end, h, heads, alpha, out, key, threshold, scale,
                     dst_first, src_first, nodes);
    }
}

extern "C" __global__ void gat_dropout_edges_rest_f32(
    const u64* row_start, const u32* columns, u64 rows, u64 seg, u64 segments, u32 heads,
    const float* alpha, float* out, u64 key, u32 threshold, float scale,
    u64 dst_first, u64 src_first, u64 nodes)
{
    GRID_STRIDE(i, segments * heads) {
        u64 s = i / heads, h = i % heads, r, begin, end;
        if (!carried_span(row_start, rows, s, seg, &r, &begin, &end)) continue;
        dropout_span(columns, r, begin, end, h, heads, alpha, out, key, threshold, scale,
                     dst_first, src_first, nodes);
    }
}

// scores[e, h] = LeakyReLU(a_dst[r, h] + a_src[c, h]).
__device__ __forceinline__ void scores_span(
    const u32* columns, u64 begin, u64 end, u64 h, u32 heads, float ad, const float* a_src,
    float* scores)
{
    for (u64 e = begin; e < end; ++e) {
        scores[e * heads + h] = leaky_relu(ad + a_src[(u64)columns[e] * heads + h]);
    }
}

extern "C" __global__ void gat_edge_scores_f32(
    const u64* row_start, const u32* columns, u64 rows, u64 seg, u32 heads,
    const float* a_dst, const float* a_src, float* scores)
{
    GRID_STRIDE(i, rows * heads) {
        u64 r = i / heads, h = i % heads;
        u64 begin = row_start[r], end = first_cut(begin, row_start[r + 1], seg);
        scores_span(columns, begin, end, h, heads, a_dst[i], a_src, scores);
    }
}

extern "C" __global__ void gat_edge_scores_rest_f32(
    const u64* row_start, const u32* columns, u64 rows, u64 seg, u64 segments, u32 heads,
    const float* a_dst, const float* a_src, float* scores)
{
    GRID_STRIDE(i, segments * heads) {
        u64 s = i / heads, h = i % heads, r, begin, end;
        if (!carried_span(row_start, rows, s, seg, &r, &begin, &end)) continue;
        scores_span(columns, begin, end, h, heads, a_dst[r * heads + h], a_src, scores);
    }
}

// The edge softmax of a destination partition runs over its source blocks
// in order, one launch per block and pass (each with its `_carry` or
// `_rest` kernel and fix-up): `max` (row_max starts at -inf), `exp`
// (x = exp(x - max), row_sum += x; row_sum starts at 0), then `div`
// (x /= row_sum). `alpha` is the block's slice. A maximum is exact in any
// order; a row's sum of exponentials is formed in segment order.
__device__ __forceinline__ float max_span(
    u64 begin, u64 end, u64 h, u32 heads, const float* alpha, float m)
{
    for (u64 e = begin; e < end; ++e) m = fmaxf(m, alpha[e * heads + h]);
    return m;
}

extern "C" __global__ void gat_softmax_max_f32(
    const u64* row_start, u64 rows, u64 seg, u32 heads, const float* alpha, float* row_max)
{
    GRID_STRIDE(i, rows * heads) {
        u64 r = i / heads, h = i % heads;
        u64 begin = row_start[r], end = first_cut(begin, row_start[r + 1], seg);
        row_max[i] = max_span(begin, end, h, heads, alpha, row_max[i]);
    }
}

extern "C" __global__ void gat_softmax_max_carry_f32(
    const u64* row_start, u64 rows, u64 seg, u64 segments, u32 heads, const float* alpha,
    float* carry)
{
    GRID_STRIDE(i, segments * heads) {
        u64 s = i / heads, h = i % heads, r, begin, end;
        if (!carried_span(row_start, rows, s, seg, &r, &begin, &end)) continue;
        carry[i] = max_span(begin, end, h, heads, alpha, NEG_INFINITY_F);
    }
}

// row_max[r, h] = max(row_max[r, h], carry[t, h]) over the segments t the
// row reaches past its first, as segment_fixup_f32 adds.
extern "C" __global__ void gat_segment_max_f32(
    const u64* start, u64 rows, u64 seg, u64 segments, const float* carry, u64 heads,
    float* row_max)
{
    GRID_STRIDE(i, segments * heads) {
        u64 s = i / heads, h = i % heads, r;
        if (!fixes_row(start, rows, s, seg, &r)) continue;
        u64 end = start[r + 1];
        float m = row_max[r * heads + h];
        for (u64 t = s; t * seg < end; ++t) m = fmaxf(m, carry[t * heads + h]);
        row_max[r * heads + h] = m;
    }
}

__device__ __forceinline__ float exp_span(
    u64 begin, u64 end, u64 h, u32 heads, float* alpha, float m, float sum)
{
    for (u64 e = begin; e < end; ++e) {
        float x = expf(alpha[e * heads + h] - m);
        alpha[e * heads + h] = x;
        sum = sum + x;
    }
    return sum;
}

extern "C" __global__ void gat_softmax_exp_f32(
    const u64* row_start, u64 rows, u64 seg, u32 heads, float* alpha, const float* row_max,
    float* row_sum)
{
    GRID_STRIDE(i, rows * heads) {
        u64 r = i / heads, h = i % heads;
        u64 begin = row_start[r], end = first_cut(begin, row_start[r + 1], seg);
        row_sum[i] = exp_span(begin, end, h, heads, alpha, row_max[i], row_sum[i]);
    }
}

extern "C" __global__ void gat_softmax_exp_carry_f32(
    const u64* row_start, u64 rows, u64 seg, u64 segments, u32 heads, float* alpha,
    const float* row_max, float* carry)
{
    GRID_STRIDE(i, segments * heads) {
        u64 s = i / heads, h = i % heads, r, begin, end;
        if (!carried_span(row_start, rows, s, seg, &r, &begin, &end)) continue;
        carry[i] = exp_span(begin, end, h, heads, alpha, row_max[r * heads + h], 0.0f);
    }
}

extern "C" __global__ void gat_softmax_div_f32(
    const u64* row_start, u64 rows, u64 seg, u32 heads, float* alpha, const float* row_sum)
{
    GRID_STRIDE(i, rows * heads) {
        u64 r = i / heads, h = i % heads;
        u64 begin = row_start[r], end = first_cut(begin, row_start[r + 1], seg);
        float sum = row_sum[i];
        for (u64 e = begin; e < end; ++e) alpha[e * heads + h] /= sum;
    }
}

extern "C" __global__ void gat_softmax_div_rest_f32(
    const u64* row_start, u64 rows, u64 seg, u64 segments, u32 heads, float* alpha,
    const float* row_sum)
{
    GRID_STRIDE(i, segments * heads) {
        u64 s = i / heads, h = i % heads, r, begin, end;
        if (!carried_span(row_start, rows, s, seg, &r, &begin, &end)) continue;
        float sum = row_sum[r * heads + h];
        for (u64 e = begin; e < end; ++e) alpha[e * heads + h] /= sum;
    }
}

// out[r]_h = init + sum over the block's edges of alpha[e, h] * z_src[c]_h.
__device__ __forceinline__ float aggregate_span(
    const u32* columns, u64 begin, u64 end, const float* alpha, u32 heads, u64 h,
    const float* z_src, u64 d, u64 f, float acc)
{
    for (u64 e = begin; e < end; ++e) {
        acc = acc + alpha[e * heads + h] * z_src[(u64)columns[e] * d + f];
    }
    return acc;
}

extern "C" __global__ void gat_aggregate_f32(
    const u64* row_start, const u32* columns, u64 rows, u64 seg, const float* alpha,
    const float* z_src, u32 heads, u32 head_width, const float* init, int init_mode, float* out)
{
    u64 d = (u64)heads * head_width;
    GRID_STRIDE(i, rows * d) {
        u64 r = i / d, f = i % d, h = f / head_width;
        u64 begin = row_start[r], end = first_cut(begin, row_start[r + 1], seg);
        float acc = init_value(init_mode, init, out, i);
        out[i] = aggregate_span(columns, begin, end, alpha, heads, h, z_src, d, f, acc);
    }
}

extern "C" __global__ void gat_aggregate_carry_f32(
    const u64* row_start, const u32* columns, u64 rows, u64 seg, u64 segments,
    const float* alpha, const float* z_src, u32 heads, u32 head_width, float* carry)
{
    u64 d = (u64)heads * head_width;
    GRID_STRIDE(i, segments * d) {
        u64 s = i / d, f = i % d, h = f / head_width, r, begin, end;
        if (!carried_span(row_start, rows, s, seg, &r, &begin, &end)) continue;
        carry[i] = aggregate_span(columns, begin, end, alpha, heads, h, z_src, d, f, 0.0f);
    }
}

// The destination side of one block's attention backward: per edge,
// du[e, h] = ds * LeakyReLU'(a_dst + a_src), with
// ds = alpha * (dalpha - <dout_h, out_h>), or with attention dropout
// ds = dropped * dalpha - alpha * <dout_h, out_h>; and
// grad_a_dst[r, h] (= or +=) the sum of du over the row's edges.
struct AttentionBwd {
    const u32* columns;
    u32 heads, head_width;
    const float *alpha, *alpha_dropped;
    int has_dropped;
    const float *a_dst, *a_src, *z_src, *grad_out, *out;
    float* du;
};

// Row r's edges [begin, end) for head h: du written, their sum onto `ga`.
__device__ __forceinline__ float attention_span(
    const AttentionBwd& a, u64 r, u64 h, u64 begin, u64 end, float ga)
{
    u64 d = (u64)a.heads * a.head_width;
    const float* g = a.grad_out + r * d + h * a.head_width;
    const float* o = a.out + r * d + h * a.head_width;
    float row_dot = 0.0f;
    for (u32 k = 0; k < a.head_width; ++k) row_dot = row_dot + g[k] * o[k];
    float ad = a.a_dst[r * a.heads + h];
    for (u64 e = begin; e < end; ++e) {
        u64 c = a.columns[e];
        const float* s = a.z_src + c * d + h * a.head_width;
        float dalpha = 0.0f;
        for (u32 k = 0; k < a.head_width; ++k) dalpha = dalpha + g[k] * s[k];
        float al = a.alpha[e * a.heads + h];
        float ds = a.has_dropped ? a.alpha_dropped[e * a.heads + h] * dalpha - al * row_dot
                                 : al * (dalpha - row_dot);
        float u = ad + a.a_src[c * a.heads + h];
        float v = ds * leaky_relu_grad(u);
        a.du[e * a.heads + h] = v;
        ga = ga + v;
    }
    return ga;
}

extern "C" __global__ void gat_attention_bwd_dst_f32(
    const u64* row_start, const u32* columns, u64 rows, u64 seg, u32 heads, u32 head_width,
    const float* alpha, const float* alpha_dropped, int has_dropped,
    const float* a_dst, const float* a_src, const float* z_src,
    const float* grad_out, const float* out, float* du, float* grad_a_dst, int init_mode)
{
    AttentionBwd a = {columns, heads, head_width, alpha, alpha_dropped, has_dropped,
                      a_dst, a_src, z_src, grad_out, out, du};
    GRID_STRIDE(i, rows * heads) {
        u64 r = i / heads, h = i % heads;
        u64 begin = row_start[r], end = first_cut(begin, row_start[r + 1], seg);
        float ga = init_value(init_mode == INIT_OUT ? INIT_OUT : INIT_ZERO, 0, grad_a_dst, i);
        grad_a_dst[i] = attention_span(a, r, h, begin, end, ga);
    }
}

extern "C" __global__ void gat_attention_bwd_dst_carry_f32(
    const u64* row_start, const u32* columns, u64 rows, u64 seg, u64 segments, u32 heads,
    u32 head_width, const float* alpha, const float* alpha_dropped, int has_dropped,
    const float* a_dst, const float* a_src, const float* z_src,
    const float* grad_out, const float* out, float* du, float* carry)
{
    AttentionBwd a = {columns, heads, head_width, alpha, alpha_dropped, has_dropped,
                      a_dst, a_src, z_src, grad_out, out, du};
    GRID_STRIDE(i, segments * heads) {
        u64 s = i / heads, h = i % heads, r, begin, end;
        if (!carried_span(row_start, rows, s, seg, &r, &begin, &end)) continue;
        carry[i] = attention_span(a, r, h, begin, end, 0.0f);
    }
}

// The source side, through the block's transpose (see sparse.cu):
// grad_z_src[c, f] (= or +=) sum over the edges into c, in edge order, of
// value_alpha[e, h] * grad_out[r, f].
__device__ __forceinline__ float scatter_value_span(
    const u32* perm, const u32* perm_row, u64 begin, u64 end, u32 heads, u64 h,
    const float* value_alpha, const float* grad_out, u64 d, u64 f, float acc)
{
    for (u64 p = begin; p < end; ++p) {
        acc = acc + value_alpha[(u64)perm[p] * heads + h] * grad_out[(u64)perm_row[p] * d + f];
    }
    return acc;
}

extern "C" __global__ void gat_scatter_value_f32(
    const u64* start, const u32* perm, const u32* perm_row, u64 src_rows, u64 seg, u32 heads,
    u32 head_width, const float* value_alpha, const float* grad_out, float* grad_z_src,
    int init_mode)
{
    u64 d = (u64)heads * head_width;
    GRID_STRIDE(i, src_rows * d) {
        u64 c = i / d, f = i % d, h = f / head_width;
        u64 begin = start[c], end = first_cut(begin, start[c + 1], seg);
        float acc = init_value(init_mode == INIT_OUT ? INIT_OUT : INIT_ZERO, 0, grad_z_src, i);
        grad_z_src[i] = scatter_value_span(perm, perm_row, begin, end, heads, h, value_alpha,
                                           grad_out, d, f, acc);
    }
}

extern "C" __global__ void gat_scatter_value_carry_f32(
    const u64* start, const u32* perm, const u32* perm_row, u64 src_rows, u64 seg,
    u64 segments, u32 heads, u32 head_width, const float* value_alpha, const float* grad_out,
    float* carry)
{
    u64 d = (u64)heads * head_width;
    GRID_STRIDE(i, segments * d) {
        u64 s = i / d, f = i % d, h = f / head_width, c, begin, end;
        if (!carried_span(start, src_rows, s, seg, &c, &begin, &end)) continue;
        carry[i] = scatter_value_span(perm, perm_row, begin, end, heads, h, value_alpha,
                                      grad_out, d, f, 0.0f);
    }
}

// grad_a_src[c, h] (= or +=) sum over the edges into c of du[e, h].
__device__ __forceinline__ float scatter_score_span(
    const u32* perm, u64 begin, u64 end, u32 heads, u64 h, const float* du, float acc)
{
    for (u64 p = begin; p < end; ++p) acc = acc + du[(u64)perm[p] * heads + h];
    return acc;
}

extern "C" __global__ void gat_scatter_score_f32(
    const u64* start, const u32* perm, u64 src_rows, u64 seg, u32 heads,
    const float* du, float* grad_a_src, int init_mode)
{
    GRID_STRIDE(i, src_rows * heads) {
        u64 c = i / heads, h = i % heads;
        u64 begin = start[c], end = first_cut(begin, start[c + 1], seg);
        float acc = init_value(init_mode == INIT_OUT ? INIT_OUT : INIT_ZERO, 0, grad_a_src, i);
        grad_a_src[i] = scatter_score_span(perm, begin, end, heads, h, du, acc);
    }
}

extern "C" __global__ void gat_scatter_score_carry_f32(
    const u64* start, const u32* perm, u64 src_rows, u64 seg, u64 segments, u32 heads,
    const float* du, float* carry)
{
    GRID_STRIDE(i, segments * heads) {
        u64 s = i / heads, h = i % heads, c, begin, end;
        if (!carried_span(start, src_rows, s, seg, &c, &begin, &end)) continue;
        carry[i] = scatter_score_span(perm, begin, end, heads, h, du, 0.0f);
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

// Aggregation over one block (a CSR over destination rows whose columns
// index rows of one source partition, its edges weighted as `weighting`
// says) and its transpose, as kernels/src/sparse.rs computes them, but
// for the rows that cross a segment boundary (below).

// The weight of edge e = (r, c) of a block of `rows` destination rows, as
// kernels/src/lib.rs's `Weighting` (its `code`) lays out `weights`.
#define WEIGHT_PER_EDGE 0
#define WEIGHT_ROW 1
#define WEIGHT_ROW_COLUMN 2

// The weight of edge e = (r, c) for the weighting W, `row` being
// weights[r] where W has row scales (read once per row, not per edge).
template <int W>
__device__ __forceinline__ float edge_weight(const float* weights, u64 rows, float row, u64 c, u64 e)
{
    if (W == WEIGHT_PER_EDGE) return weights[e];
    if (W == WEIGHT_ROW) return row;
    // A rounded product, as the CPU's: never fused into the sum.
    if (W == WEIGHT_ROW_COLUMN) return __fmul_rn(row, weights[rows + c]);
    return 1.0f;
}

// weights[r] where the weighting W has row scales and row r has edges,
// else 0 (unread: a row without edges reads no weight, as before).
template <int W>
__device__ __forceinline__ float row_scale(const float* weights, u64 r, bool has_edges)
{
    return ((W == WEIGHT_ROW || W == WEIGHT_ROW_COLUMN) && has_edges) ? weights[r] : 0.0f;
}

// Segments (prelude.cuh): a row's sum in the one-thread-per-output-element
// kernels stops at its first segment boundary; `spmm_carry_f32` and
// `spmm_t_carry_f32` sum the rest one segment at a time, from zero, and
// `segment_fixup_f32` adds those sums to the row's in segment order.

// Input dropout's keep bits of a source partition's elements, laid out
// as kernels/src/dropout.rs's `fill_bits` lays out a row: element f of
// source row c is bit f % 64 of keep[c * words + f / 64], words =
// ceil(width / 64), and its mask is that of its index in the whole graph,
// (src_row0 + c) * width + f (`mask_keep`). The aggregation then reads a
// bit per gathered value where it hashed each one: the first layer's
// aggregation of products' 100 features took 38.9 ms on an H200 hashing
// per edge, against 35.6 ms for the second layer's 256 (docs/gpu.md).
// One thread per word; a group of 4 elements shares one hash.
extern "C" __global__ void dropout_bits_u64(
    u64 rows, u64 width, u64 words, u64 key, u32 threshold, u64 src_row0, u64* keep)
{
    GRID_STRIDE(i, rows * words) {
        u64 c = i / words, f0 = (i % words) * 64;
        u64 end = width < f0 + 64 ? width : f0 + 64;
        u64 base = (src_row0 + c) * width;
        u64 word = 0, group = ~0ULL, bits = 0;
        for (u64 f = f0; f < end; ++f) {
            u64 index = base + f;
            if ((index >> 2) != group) {
                group = index >> 2;
                bits = mix64(key + group * GOLDEN);
            }
            u32 u = (u32)(bits >> (16 * (index & 3))) & 0xFFFFu;
            if (u >= threshold) word |= 1ULL << (f - f0);
        }
        keep[i] = word;
    }
}

// Row r's edges [begin, end) summed onto `acc` for one feature f, its
// weighting W and whether a mask applies fixed at compile time: the loop
// then holds no branch and unrolls, keeping several gathers in flight
// (with the weighting read in the loop, the row-scaled blocks'
// aggregations took 1.9 times as long on an H100: docs/gpu.md, "This
// build, measured again"). `row` is the row's scale where W has one.
// Masked, a gathered value is multiplied by `scale` or 0 as its keep bit
// (`dropout_bits_u64`, `words` a source row) says: `masked` of
// prelude.cuh, the bits hashed once per element instead of once per edge.
template <int W, bool MASKED>
__device__ __forceinline__ float gather_edges(
    const u32* columns, const float* weights, u64 rows, u64 begin, u64 end, float row, u64 f,
    const float* src, u64 width, float acc, const u64* keep, u64 words, float scale)
{
    u64 word = f >> 6, bit = f & 63;
#pragma unroll 4
    for (u64 e = begin; e < end; ++e) {
        u64 c = columns[e];
        float x = src[c * width + f];
        if (MASKED) x = x * (((keep[c * words + word] >> bit) & 1) ? scale : 0.0f);
        acc = acc + edge_weight<W>(weights, rows, row, c, e) * x;
    }
    return acc;
}

// `words == 0`: no mask.
template <int W>
__device__ __forceinline__ float gather_edges_weighted(
    const u32* columns, const float* weights, u64 rows, u64 r, u64 begin, u64 end, u64 f,
    const float* src, u64 width, float acc, const u64* keep, u64 words, float scale)
{
    float row = row_scale<W>(weights, r, begin < end);
    if (words == 0)
        return gather_edges<W, false>(columns, weights, rows, begin, end, row, f, src, width, acc,
                                      keep, words, scale);
    return gather_edges<W, true>(columns, weights, rows, begin, end, row, f, src, width, acc, keep,
                                 words, scale);
}

// Edges [begin, end) of row r onto `acc`, the weighting dispatched once.
__device__ __forceinline__ float gather_span(
    const u32* columns, const float* weights, int weighting, u64 rows, u64 r, u64 begin,
    u64 end, u64 f, const float* src, u64 width, float acc, const u64* keep, u64 words,
    float scale)
{
    switch (weighting) {
    case WEIGHT_PER_EDGE:
        return gather_edges_weighted<WEIGHT_PER_EDGE>(columns, weights, rows, r, begin, end, f,
                                                      src, width, acc, keep, words, scale);
    case WEIGHT_ROW:
        return gather_edges_weighted<WEIGHT_ROW>(columns, weights, rows, r, begin, end, f, src,
                                                 width, acc, keep, words, scale);
    case WEIGHT_ROW_COLUMN:
        return gather_edges_weighted<WEIGHT_ROW_COLUMN>(columns, weights, rows, r, begin, end, f,
                                                        src, width, acc, keep, words, scale);
    default:
        return gather_edges_weighted<-1>(columns, weights, rows, r, begin, end, f, src, width,
                                         acc, keep, words, scale);
    }
}

// out[r, f] = init + the sum over the edges e of row r, in edge order up
// to the row's first segment boundary, of w_e * (src[c_e, f] *
// mask(c_e, f)); `segment_fixup_f32` adds the rest. The mask, where
// `words` is not 0, is `keep`'s bits (`dropout_bits_u64`) times `scale`.
// One thread per output element; a warp reads consecutive features.
extern "C" __global__ void spmm_f32(
    const u64* row_start, const u32* columns, const float* weights, int weighting, u64 rows,
    u64 seg, const float* src, u64 width, const float* init, int init_mode, float* out,
    const u64* keep, u64 words, float scale)
{
    GRID_STRIDE(i, rows * width) {
        u64 r = i / width, f = i % width;
        u64 begin = row_start[r], end = first_cut(begin, row_start[r + 1], seg);
        // Accumulating, a row without edges here keeps its sum untouched.
        if (init_mode == INIT_OUT && begin == end) continue;
        float acc = init_value(init_mode, init, out, i);
        out[i] = gather_span(columns, weights, weighting, rows, r, begin, end, f, src, width, acc,
                             keep, words, scale);
    }
}

// carry[s, f] = the sum from zero, in edge order, of the terms of
// spmm_f32 over the edges of segment s (s of `segments`) that belong to a
// row started before it; unwritten where no row is carried.
extern "C" __global__ void spmm_carry_f32(
    const u64* row_start, const u32* columns, const float* weights, int weighting, u64 rows,
    u64 seg, u64 segments, const float* src, u64 width, float* carry, const u64* keep, u64 words,
    float scale)
{
    GRID_STRIDE(i, segments * width) {
        u64 s = i / width, f = i % width, r, begin, end;
        if (!carried_span(row_start, rows, s, seg, &r, &begin, &end)) continue;
        carry[i] = gather_span(columns, weights, weighting, rows, r, begin, end, f, src, width,
                               0.0f, keep, words, scale);
    }
}

// For each row that crosses a segment boundary: out[r, f] += carry[t, f]
// for every segment t the row reaches past its first, in order. One
// thread per (segment, feature): the segment that starts at the row's
// first boundary adds them all. `start` is the rows' (or, transposed,
// the columns') start positions, `rows` their count.
extern "C" __global__ void segment_fixup_f32(
    const u64* start, u64 rows, u64 seg, u64 segments, const float* carry, u64 width, float* out)
{
    GRID_STRIDE(i, segments * width) {
        u64 s = i / width, f = i % width;
        u64 r;
        if (!fixes_row(start, rows, s, seg, &r)) continue;
        u64 end = start[r + 1];
        float acc = out[r * width + f];
        for (u64 t = s; t * seg < end; ++t) acc = acc + carry[t * width + f];
        out[r * width + f] = acc;
    }
}

// The transpose of a block as a permutation of its edges grouped by
// source column, edge order kept within a column (a stable counting
// sort): `count`, then `scan_u64`, then `place`, then `order` sorts each
// column's edges by id, and `rows` finds each placed edge's row.

// counts[c] += 1 for every edge (integer atomics: the counts are exact).
extern "C" __global__ void csc_count_u32(const u32* columns, u64 nnz, u32* counts)
{
    GRID_STRIDE(e, nnz) { atomicAdd(&counts[columns[e]], 1u); }
}

// start[k] = counts[0] + ... + counts[k - 1] for k in 0..=n. One block:
// each thread sums a contiguous range, thread 0 scans the range sums.
extern "C" __global__ void scan_u64(const u32* counts, u64 n, u64* start)
{
    __shared__ u64 sums[1024];
    u32 t = threadIdx.x, threads = blockDim.x;
    u64 per = (n + threads - 1) / threads;
    u64 lo = per * t < n ? per * t : n;
    u64 hi = lo + per < n ? lo + per : n;
    u64 s = 0;
    for (u64 k = lo; k < hi; ++k) s += counts[k];
    sums[t] = s;
    __syncthreads();
    if (t == 0) {
        u64 run = 0;
        for (u32 k = 0; k < threads; ++k) { u64 v = sums[k]; sums[k] = run; run += v; }
        start[n] = run;
    }
    __syncthreads();
    u64 run = sums[t];
    for (u64 k = lo; k < hi; ++k) { start[k] = run; run += counts[k]; }
}

// perm[start[c] + slot] = e, each column's slots taken in any order
// (`order` restores edge order). `cursor` starts at zero.
extern "C" __global__ void csc_place_u32(
    const u32* columns, u64 nnz, const u64* start, u32* cursor, u32* perm)
{
    GRID_STRIDE(e, nnz) {
        u32 c = columns[e];
        u32 slot = atomicAdd(&cursor[c], 1u);
        perm[start[c] + slot] = (u32)e;
    }
}

// Sorts each column's edge ids ascending, in place: the order of the
// terms of every transposed sum is then edge order. A column of at most
// ONE_THREAD_SORT edges is heap-sorted by one thread (`csc_order_u32`);
// a longer one, a hub's, by a whole block (`csc_order_wide_u32`), so that
// no thread sorts a hub's hundred thousand edges alone.
#define ONE_THREAD_SORT 256
__device__ void sift_down(u32* a, u64 root, u64 n) {
    for (;;) {
        u64 child = 2 * root + 1;
        if (child >= n) return;
        if (child + 1 < n && a[child + 1] > a[child]) child += 1;
        if (a[root] >= a[child]) return;
        u32 t = a[root]; a[root] = a[child]; a[child] = t;
        root = child;
    }
}

extern "C" __global__ void csc_order_u32(const u64* start, u64 src_rows, u32* perm)
{
    GRID_STRIDE(c, src_rows) {
        u32* a = perm + start[c];
        u64 n = start[c + 1] - start[c];
        if (n > ONE_THREAD_SORT) continue;
        for (u64 k = n / 2; k-- > 0;) sift_down(a, k, n);
        for (u64 end = n; end > 1; --end) {
            u32 t = a[0]; a[0] = a[end - 1]; a[end - 1] = t;
            sift_down(a, 0, end - 1);
        }
    }
}

// One block per column longer than ONE_THREAD_SORT (blocks stride over
// the columns): a bitonic network whose comparators all put the smaller
// value first, over the column's length rounded up to a power of two; a
// comparator that reaches past the end meets a virtual maximum and never
// swaps, so the padding costs nothing. The ids are distinct, so the order
// is the one sorted order whatever the launch.
extern "C" __global__ void csc_order_wide_u32(const u64* start, u64 src_rows, u32* perm)
{
    for (u64 c = blockIdx.x; c < src_rows; c += gridDim.x) {
        u64 n = start[c + 1] - start[c];
        if (n <= ONE_THREAD_SORT) continue;  // the same for the whole block
        u32* a = perm + start[c];
        u64 padded = 1;
        while (padded < n) padded <<= 1;
        u64 pairs = padded / 2;
        for (u64 k = 2; k <= padded; k <<= 1) {
            u64 h = k / 2;
            for (u64 i = threadIdx.x; i < pairs; i += blockDim.x) {
                u64 lo = (i / h) * k + i % h, hi = (i / h) * k + k - 1 - i % h;
                if (hi < n && a[lo] > a[hi]) { u32 t = a[lo]; a[lo] = a[hi]; a[hi] = t; }
            }
            __syncthreads();
            for (u64 j = k / 4; j > 0; j >>= 1) {
                for (u64 i = threadIdx.x; i < pairs; i += blockDim.x) {
                    u64 lo = (i / j) * 2 * j + i % j, hi = lo + j;
                    if (hi < n && a[lo] > a[hi]) { u32 t = a[lo]; a[lo] = a[hi]; a[hi] = t; }
                }
                __syncthreads();
            }
        }
    }
}

// perm_row[p] = the destination row of edge perm[p] (binary search).
extern "C" __global__ void csc_rows_u32(
    const u64* row_start, u64 rows, const u32* perm, u64 nnz, u32* perm_row)
{
    GRID_STRIDE(p, nnz) { perm_row[p] = (u32)row_holding(row_start, rows, perm[p]); }
}

// Column c's positions [begin, end) of the permutation summed onto `acc`
// for one feature f, its weighting W fixed at compile time, as
// gather_edges.
template <int W>
__device__ __forceinline__ float gather_column(
    const u32* perm, const u32* perm_row, const float* weights, u64 dst_rows, u64 c,
    u64 begin, u64 end, u64 f, const float* grad, u64 width, float acc)
{
    // The column's scale where W has one and the column has edges here:
    // weights[dst_rows + c].
    float column = (W == WEIGHT_ROW_COLUMN && begin < end) ? weights[dst_rows + c] : 0.0f;
#pragma unroll 4
    for (u64 p = begin; p < end; ++p) {
        u64 r = perm_row[p];
        float w = W == WEIGHT_PER_EDGE ? weights[perm[p]]
                  : W == WEIGHT_ROW ? weights[r]
                  : W == WEIGHT_ROW_COLUMN ? __fmul_rn(weights[r], column)
                  : 1.0f;
        acc = acc + w * grad[r * width + f];
    }
    return acc;
}

// Positions [begin, end) of column c onto `acc`, the weighting
// dispatched once.
__device__ __forceinline__ float gather_column_span(
    const u32* perm, const u32* perm_row, const float* weights, int weighting, u64 dst_rows,
    u64 c, u64 begin, u64 end, u64 f, const float* grad, u64 width, float acc)
{
    switch (weighting) {
    case WEIGHT_PER_EDGE:
        return gather_column<WEIGHT_PER_EDGE>(perm, perm_row, weights, dst_rows, c, begin, end,
                                              f, grad, width, acc);
    case WEIGHT_ROW:
        return gather_column<WEIGHT_ROW>(perm, perm_row, weights, dst_rows, c, begin, end, f,
                                         grad, width, acc);
    case WEIGHT_ROW_COLUMN:
        return gather_column<WEIGHT_ROW_COLUMN>(perm, perm_row, weights, dst_rows, c, begin, end,
                                                f, grad, width, acc);
    default:
        return gather_column<-1>(perm, perm_row, weights, dst_rows, c, begin, end, f, grad,
                                 width, acc);
    }
}

// out[c, f] = init + the sum over the edges e = (r, c), in edge order up
// to the column's first segment boundary (in permutation positions), of
// w_e * grad[r, f]: the transposed aggregation through the permutation;
// `segment_fixup_f32` adds the rest.
extern "C" __global__ void spmm_t_f32(
    const u64* start, const u32* perm, const u32* perm_row, const float* weights,
    int weighting, u64 dst_rows, u64 src_rows, u64 seg, const float* grad, u64 width,
    const float* init, int init_mode, float* out)
{
    GRID_STRIDE(i, src_rows * width) {
        u64 c = i / width, f = i % width;
        u64 begin = start[c], end = first_cut(begin, start[c + 1], seg);
        // Accumulating, a column without edges keeps its sum untouched.
        if (init_mode == INIT_OUT && begin == end) continue;
        float acc = init_value(init_mode, init, out, i);
        out[i] = gather_column_span(perm, perm_row, weights, weighting, dst_rows, c, begin, end,
                                    f, grad, width, acc);
    }
}

// carry[s, f] = the sum from zero, in edge order, of the terms of
// spmm_t_f32 over the positions of segment s that belong to a column
// started before it, as spmm_carry_f32.
extern "C" __global__ void spmm_t_carry_f32(
    const u64* start, const u32* perm, const u32* perm_row, const float* weights,
    int weighting, u64 dst_rows, u64 src_rows, u64 seg, u64 segments, const float* grad,
    u64 width, float* carry)
{
    GRID_STRIDE(i, segments * width) {
        u64 s = i / width, f = i % width, c, begin, end;
        if (!carried_span(start, src_rows, s, seg, &c, &begin, &end)) continue;
        carry[i] = gather_column_span(perm, perm_row, weights, weighting, dst_rows, c, begin,
                                      end, f, grad, width, 0.0f);
    }
}

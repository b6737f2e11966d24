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

// Segments. Every multiple of `seg` in a block's edge order (or a
// transpose's positions) is a segment boundary. A kernel with one thread
// per row (and feature or head) walks the row's edges only up to the
// first boundary after the row's first edge, so that no thread walks more
// than `seg` edges: a hub's row of a hundred thousand edges would
// otherwise keep one thread, and so the whole kernel, busy that long (on
// an H100, most of the products-sized GCN's aggregation time:
// docs/gpu.md). A second kernel walks the rows' edges past that boundary,
// one thread per segment (and feature or head): its `carried_span`. Where
// the row is summed, that kernel sums each segment's part from zero (its
// carry: sparse.cu's `spmm_carry_f32`, gat.cu's `_carry` kernels), and a
// fix-up adds the carries to the row's sum in segment order
// (`segment_fixup_f32`; a maximum, `gat_segment_max_f32`). A row that
// crosses no boundary is summed in the CPU's order: init, then every
// edge in edge order. The order of every sum is fixed by `seg` alone,
// never by the launch.

// The end of the part of [begin, end) a row's own thread sums: the first
// boundary after `begin`, or `end`.
__device__ __forceinline__ u64 first_cut(u64 begin, u64 end, u64 seg)
{
    u64 boundary = (begin / seg + 1) * seg;
    return end < boundary ? end : boundary;
}

// The row holding position e of `start` (ascending, start[0] <= e <
// start[rows]): the last r with start[r] <= e.
__device__ __forceinline__ u64 row_holding(const u64* start, u64 rows, u64 e)
{
    u64 lo = 0, hi = rows;  // start[lo] <= e < start[hi]
    while (hi - lo > 1) {
        u64 mid = lo + (hi - lo) / 2;
        if (start[mid] <= e) lo = mid; else hi = mid;
    }
    return lo;
}

// The row that segment s (s > 0, its first position s * seg < nnz)
// carries: the row holding its first position when that row started
// before it, else `rows` (none).
__device__ __forceinline__ u64 carried_row(const u64* start, u64 rows, u64 s, u64 seg)
{
    u64 lo = s * seg;
    u64 r = row_holding(start, rows, lo);
    return start[r] < lo ? r : rows;
}

// The edges [*begin, *end) of segment s (of `segments`) that belong to a
// row `*r` started before it, the part the second kernel walks; false
// where the segment carries no row.
__device__ __forceinline__ bool carried_span(
    const u64* start, u64 rows, u64 s, u64 seg, u64* r, u64* begin, u64* end)
{
    if (s == 0) return false;
    *r = carried_row(start, rows, s, seg);
    if (*r == rows) return false;
    *begin = s * seg;
    *end = start[*r + 1] < *begin + seg ? start[*r + 1] : *begin + seg;
    return true;
}

// Whether segment s is the one that adds the carries of the row `*r` it
// carries: the row reaches past its first boundary into s, and started
// in s - 1. The fix-ups run one thread per segment (and feature).
__device__ __forceinline__ bool fixes_row(const u64* start, u64 rows, u64 s, u64 seg, u64* r)
{
    if (s == 0) return false;
    *r = carried_row(start, rows, s, seg);
    return *r != rows && start[*r] >= (s - 1) * seg;
}

//! What the runtime's backends allocate on the device beside the plan's
//! tensors, counted so that a plan's device budget holds them too.
//!
//! An operator's kernels take temporaries while it runs (segment sums, a
//! dropout slab, attention's per-edge values, a transpose being built):
//! its [`crate::workload::Op::scratch_bytes`], held at its step and at each
//! recomputation of it. Some things stay for the whole run (the label
//! masks, the last transpose built): the workload's
//! [`crate::workload::Workload::resident_bytes`], held at every step.
//!
//! Each figure is the larger of the CUDA backend's and the CPU backend's,
//! an upper bound of what they allocate (the CPU backend's per-task
//! buffers counted for [`TASKS`] tasks at once). The constants below are
//! the backends' own; the runtime's tests check that they agree.

/// Edges a CUDA aggregation sums per segment before it fixes the
/// segments up (`SEGMENT_EDGES` of the CUDA backend).
pub const SEGMENT_EDGES: u64 = 256;
/// Most bytes of one kernel's segment sums (`CARRY_BYTES`).
pub const CARRY_BYTES: u64 = 64 << 20;
/// Most bytes of the first layer's dropped input in one slab
/// (`PROJECT_SLAB_BYTES`).
pub const PROJECT_SLAB_BYTES: u64 = 64 << 20;
/// Rows per partial sum of a column reduction (`kernels::REDUCE_ROWS`).
pub const REDUCE_ROWS: u64 = 4096;
/// Chunks of [`REDUCE_ROWS`] rows whose partials a CPU reduction holds at
/// once (`kernels::REDUCE_GROUP`).
pub const REDUCE_GROUP: u64 = 64;
/// Rows of a task of the CPU's row-wise products: `ROW_TASK_ELEMENTS / d_in`
/// within `ROW_TASK_MIN..=ROW_TASK_MAX` (`kernels::dense::rows_per_task`).
pub const ROW_TASK_ELEMENTS: u64 = 32768;
pub const ROW_TASK_MIN: u64 = 16;
pub const ROW_TASK_MAX: u64 = 256;
/// Lanes of partial weight gradients per [`REDUCE_ROWS`] rows where the
/// CPU projects a dropped input.
pub const DROPPED_LANES: u64 = 8;
/// A CPU weight gradient of fewer [`REDUCE_ROWS`] chunks than this, of at
/// most [`GRAD_LANE_MAX_BYTES`] (weights and bias), sums each chunk in
/// [`GRAD_LANES`] partials (`kernels::dense::FEW_CHUNKS`).
pub const FEW_CHUNKS: u64 = 4;
pub const GRAD_LANES: u64 = 4;
pub const GRAD_LANE_MAX_BYTES: u64 = 128 << 10;
/// A CPU aggregation of a dropped input makes the keep bits of its source
/// rows at once where its block has at least an edge per this many source
/// rows (`kernels::sparse::MASK_WORKSPACE_ROWS_PER_EDGE`), and of only
/// the rows its edges read, marked in a byte a row, where it has at most
/// [`USED_ROWS_EDGES_PER_ROW`] edges a source row (the kernels' own).
pub const MASK_WORKSPACE_ROWS_PER_EDGE: u64 = 8;
pub const USED_ROWS_EDGES_PER_ROW: u64 = 2;
/// CPU tasks counted as running at once, each with its own buffers.
pub const TASKS: u64 = 64;
/// Packing buffer of one CPU GEMM task over inputs a multiple of 1024 wide.
pub const PACK_BYTES: u64 = 128 << 10;

const F32: u64 = 4;

/// What one operator's temporaries depend on.
#[derive(Debug, Clone, Copy)]
pub struct OpShape {
    /// Rows the operator computes (its destination partition's).
    pub rows: u64,
    /// Rows of the block's source partition (edge operators).
    pub src_rows: u64,
    /// Edges of the block, self loops included (edge operators).
    pub edges: u64,
    /// Width of the rows it aggregates or writes.
    pub width: u64,
    /// The layer's input and output widths.
    pub d_in: u64,
    pub d_out: u64,
    /// Attention heads (1 but in GAT's hidden layers).
    pub heads: u64,
    /// The layer's weight bytes (bias included).
    pub weight_bytes: u64,
    /// Whether the first layer's input is dropped here (training with
    /// dropout, layer 1).
    pub drops_input: bool,
    /// Whether attention weights are dropped (GAT with dropout).
    pub drops_attention: bool,
    /// Whether the operator builds a block's transpose first
    /// ([`crate::workload::Cost::transpose_edges`] positive).
    pub builds_transpose: bool,
    /// Whether the block is off the diagonal (destination and source
    /// partitions differ).
    pub halo: bool,
}

/// A CUDA kernel's segment sums over `edges` edges `width` wide.
pub fn carry(edges: u64, width: u64) -> u64 {
    if edges <= SEGMENT_EDGES {
        return 0;
    }
    (edges * width * F32 / SEGMENT_EDGES).min(CARRY_BYTES) + width * F32
}

/// A transpose of a block over `src_rows` rows and `edges` edges, as the
/// CUDA backend builds and keeps it.
pub fn transpose(src_rows: u64, edges: u64) -> u64 {
    (src_rows + 1) * 8 + 8 * edges
}

/// Partial sums of a column reduction over `rows` rows.
fn chunks(rows: u64) -> u64 {
    rows.div_ceil(REDUCE_ROWS)
}

fn rows_per_task(d_in: u64) -> u64 {
    (ROW_TASK_ELEMENTS / d_in.max(1)).clamp(ROW_TASK_MIN, ROW_TASK_MAX)
}

/// Slabs of the first layer's dropped input: the CUDA backend's one slab,
/// the CPU's one per task.
fn dropped_slabs(rows: u64, d_in: u64) -> u64 {
    let cuda_rows = (PROJECT_SLAB_BYTES / (d_in.max(1) * F32)).max(1);
    let cpu_rows = TASKS * rows_per_task(d_in).max(64);
    rows.min(cuda_rows.max(cpu_rows)) * d_in * F32
}

/// Partials a CPU reduction over `rows` rows holds at once.
fn held_chunks(rows: u64) -> u64 {
    chunks(rows).min(REDUCE_GROUP)
}

/// Partials a CPU weight gradient over `rows` rows of a layer whose
/// weights take `bytes`, `d_out` wide, holds at once: a group of chunks',
/// or where the chunks are few and the gradient small, each lane's that
/// has rows (`REDUCE_ROWS / GRAD_LANES` a lane). The kernel's gradient
/// may leave out the bias and GAT's attention vectors, up to three
/// `d_out`: a layer within that of the bound is counted in lanes.
fn held_partials(rows: u64, bytes: u64, d_out: u64) -> u64 {
    let small = bytes <= GRAD_LANE_MAX_BYTES + 3 * d_out * F32;
    match chunks(rows) < FEW_CHUNKS && small {
        true => rows.div_ceil(REDUCE_ROWS / GRAD_LANES),
        false => held_chunks(rows),
    }
}

/// CPU tasks at once over `rows` rows: no more than the rows.
fn tasks(rows: u64) -> u64 {
    TASKS.min(rows.max(1))
}

/// Device bytes operator `base` (its name before `[`) takes while it runs,
/// beyond its inputs and outputs. `projects_first`: a GCN or GraphSAGE
/// layer that projects before it aggregates.
pub fn op_bytes(base: &str, gat: bool, projects_first: bool, s: &OpShape) -> u64 {
    let dropped_alpha = if s.drops_attention {
        s.edges * s.heads * F32
    } else {
        0
    };
    let packing = if s.d_in.is_multiple_of(1024) {
        tasks(s.rows) * PACK_BYTES
    } else {
        0
    };
    match base {
        "agg" if gat => dropped_alpha + carry(s.edges, s.width).max(tasks(s.rows) * s.heads * F32),
        "agg" => {
            // The first aggregation of a dropped input: the keep bits of
            // the source rows, which the CUDA backend always computes and
            // holds beside its segment sums, and the CPU's where the block
            // has at least an edge per 8 source rows, with a byte a source
            // row marking those read where it has few edges a row (else
            // per-task buffers).
            let dropped = s.drops_input && !projects_first;
            let bits = match dropped {
                true => s.src_rows * s.d_in.div_ceil(64) * 8,
                false => 0,
            };
            let cpu = match dropped {
                false => 0,
                true if s.edges * MASK_WORKSPACE_ROWS_PER_EDGE >= s.src_rows => {
                    match s.edges <= USED_ROWS_EDGES_PER_ROW * s.src_rows {
                        true => bits + s.src_rows,
                        false => bits,
                    }
                }
                true => tasks(s.rows) * (s.d_in + s.edges.min(s.src_rows)) * F32,
            };
            (carry(s.edges, s.width) + bits).max(cpu)
        }
        "linear" if (gat || projects_first) && s.drops_input => dropped_slabs(s.rows, s.d_in),
        // The CUDA backend's bias-added copy of the rows (the CPU adds
        // the bias in the activation's own pass).
        "relu" | "relu_mask" if projects_first => s.rows * s.d_out * F32,
        "elu" | "elu_bwd" => s.rows * s.d_out * F32,
        "node_scores" => 2 * s.d_out * F32,
        // Each row's maximum and sum, and one block's segment sums at a
        // time (at most a segment's worth per SEGMENT_EDGES edges).
        "edge_softmax" => {
            2 * s.rows * s.heads * F32
                + ((s.edges / SEGMENT_EDGES + 1) * s.heads * F32).max(tasks(s.rows) * s.heads * F32)
        }
        "attention_bwd" => {
            let per_edge = s.edges * s.heads * F32 + dropped_alpha;
            // The CPU holds a halo block's per-edge values twice.
            let cpu = if s.halo { 2 * per_edge } else { per_edge };
            let after = match s.builds_transpose {
                true => {
                    transpose(s.src_rows, s.edges) + (8 * s.src_rows).max(carry(s.edges, s.d_out))
                }
                false => carry(s.edges, s.d_out),
            };
            cpu.max(per_edge + after)
        }
        "node_scores_bwd" => 3 * chunks(s.rows) * s.d_out * F32,
        "linear_bwd" => {
            // The CPU's weight-gradient partials: a group of chunks at a
            // time, each chunk's lanes where the input is dropped or, for
            // a small gradient, where the chunks are few.
            let partials = held_partials(s.rows, s.weight_bytes, s.d_out) * s.weight_bytes;
            let cpu = match (gat || projects_first, s.drops_input) {
                (true, true) => {
                    let held = chunks(s.rows).min(REDUCE_GROUP / DROPPED_LANES);
                    DROPPED_LANES * held * s.weight_bytes + dropped_slabs(s.rows, s.d_in)
                }
                (true, false) => partials + held_chunks(s.rows) * s.d_out * F32 + packing,
                (false, _) => partials + packing,
            };
            let cuda = match (gat || projects_first, s.drops_input) {
                (true, true) => dropped_slabs(s.rows, s.d_in).max(chunks(s.rows) * s.d_out * F32),
                _ => chunks(s.rows) * s.d_out * F32,
            };
            cpu.max(cuda)
        }
        "agg_bwd" => match s.builds_transpose {
            true => transpose(s.src_rows, s.edges) + (8 * s.src_rows).max(carry(s.edges, s.width)),
            false => carry(s.edges, s.width),
        },
        // The CUDA loss's per-row values and partial sums; the CPU's.
        "loss" => (s.rows * 9 + chunks(s.rows) * 56 + F32)
            .max(chunks(s.rows) * 8 + tasks(s.rows) * s.width * F32),
        _ => 0,
    }
}

/// Bytes held for the whole run: the three label masks (a byte a node),
/// and the largest transpose a backend keeps between operators where any
/// is built (`largest_transpose`, 0 if none).
pub fn resident_bytes(nodes: u64, largest_transpose: u64) -> u64 {
    3 * nodes + largest_transpose
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> OpShape {
        OpShape {
            rows: 10_000,
            src_rows: 10_000,
            edges: 100_000,
            width: 64,
            d_in: 64,
            d_out: 64,
            heads: 1,
            weight_bytes: (64 * 64 + 64) * 4,
            drops_input: false,
            drops_attention: false,
            builds_transpose: false,
            halo: false,
        }
    }

    /// Segment sums start past one segment and stop growing at their cap.
    #[test]
    fn segment_sums_start_past_a_segment_and_are_capped() {
        assert_eq!(carry(SEGMENT_EDGES, 64), 0);
        assert_eq!(carry(SEGMENT_EDGES + 1, 64), 257 * 64 * 4 / 256 + 256);
        assert_eq!(carry(1 << 40, 1024), CARRY_BYTES + 4096);
    }

    /// A transposed aggregation that builds its transpose holds it beside
    /// its segment sums; one that finds it kept holds the sums alone.
    #[test]
    fn a_transpose_is_counted_where_it_is_built() {
        let kept = op_bytes("agg_bwd", false, false, &shape());
        let built = op_bytes(
            "agg_bwd",
            false,
            false,
            &OpShape {
                builds_transpose: true,
                ..shape()
            },
        );
        assert_eq!(kept, carry(100_000, 64));
        assert_eq!(built, transpose(10_000, 100_000) + kept.max(80_000));
    }

    /// An aggregation of the dropped input holds its source rows' keep
    /// bits beside its segment sums (the CUDA backend's), or the CPU's
    /// per-task buffers where the block has fewer edges than a byte per
    /// source row and those are more; a projecting-first layer's
    /// aggregation reads rows dropped already.
    #[test]
    fn a_dropped_aggregation_holds_its_keep_bits_beside_its_segment_sums() {
        let plain = op_bytes("agg", false, false, &shape());
        assert_eq!(plain, carry(100_000, 64));
        let dropped = OpShape {
            drops_input: true,
            ..shape()
        };
        let bits = 10_000 * 8;
        assert_eq!(op_bytes("agg", false, false, &dropped), plain + bits);
        assert_eq!(op_bytes("agg", false, true, &dropped), plain);
        // Few edges a source row: the CPU marks the rows read, a byte
        // each, beside its bits, which passes the segment sums' bytes.
        let few = OpShape {
            edges: 1_000,
            src_rows: 2_000,
            ..dropped
        };
        let marked = 2_000 * 8 + 2_000;
        assert!(carry(1_000, 64) < 2_000);
        assert_eq!(op_bytes("agg", false, false, &few), marked);
        let sparse = OpShape {
            edges: 100,
            src_rows: 1_000_000,
            ..dropped
        };
        let cpu = TASKS.min(sparse.rows) * (64 + 100) * 4;
        assert_eq!(
            op_bytes("agg", false, false, &sparse),
            (1_000_000 * 8u64).max(cpu)
        );
    }

    /// The first layer's dropped input takes slabs; without dropout, none.
    #[test]
    fn dropped_input_slabs_are_bounded_by_the_rows() {
        let plain = op_bytes("linear", true, false, &shape());
        assert_eq!(plain, 0);
        let dropped = OpShape {
            drops_input: true,
            ..shape()
        };
        // Fewer rows than the slabs hold: all of them, once.
        assert_eq!(op_bytes("linear", true, false, &dropped), 10_000 * 64 * 4);
        let wide = OpShape {
            rows: 10_000_000,
            d_in: 128,
            ..dropped
        };
        assert_eq!(op_bytes("linear", true, false, &wide), PROJECT_SLAB_BYTES);
    }

    /// A weight gradient's partials stop growing with the rows past a
    /// group of chunks, dropped input or not.
    #[test]
    fn weight_gradient_partials_are_bounded_by_a_group() {
        let w = (64 * 64 + 64) * 4;
        let at = |rows: u64, drops_input: bool| {
            let s = OpShape {
                rows,
                drops_input,
                ..shape()
            };
            op_bytes("linear_bwd", false, false, &s)
        };
        // 10,000 rows: three chunks in lanes of 1,024 rows, a partial
        // each; 1,000 rows: one lane; 20,000 rows: five chunks, a partial
        // each.
        assert_eq!(at(10_000, false), 10 * w);
        assert_eq!(at(1_000, false), w);
        assert_eq!(at(20_000, false), 5 * w);
        // A gradient over 128 KiB takes no lanes: 128 -> 300 and its bias.
        let wide = OpShape {
            rows: 10_000,
            d_out: 300,
            weight_bytes: (128 * 300 + 300) * 4,
            ..shape()
        };
        assert_eq!(
            op_bytes("linear_bwd", false, false, &wide),
            3 * wide.weight_bytes
        );
        // A hundred million rows: a group's partials, or the CUDA
        // backend's bias partials, whichever is more.
        let big = 100_000_000u64;
        let cuda = big.div_ceil(REDUCE_ROWS) * 64 * 4;
        assert_eq!(at(big, false), (REDUCE_GROUP * w).max(cuda));
        // A projected, dropped input: eight chunks of eight lanes each,
        // beside the slabs.
        let s = OpShape {
            rows: big,
            drops_input: true,
            ..shape()
        };
        let lanes = DROPPED_LANES * (REDUCE_GROUP / DROPPED_LANES) * w;
        assert_eq!(
            op_bytes("linear_bwd", true, false, &s),
            (lanes + dropped_slabs(big, 64)).max(dropped_slabs(big, 64).max(cuda))
        );
    }

    /// Operators that allocate nothing beyond their tensors count nothing.
    #[test]
    fn operators_without_temporaries_count_none() {
        for base in [
            "bias",
            "sddmm",
            "loss_bwd",
            "grad_accumulate",
            "adam",
            "unknown",
        ] {
            assert_eq!(op_bytes(base, true, false, &shape()), 0, "{base}");
        }
    }
}

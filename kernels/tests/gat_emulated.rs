//! GAT's kernels of `kernels/cuda/gat.cu` (with `segment_fixup_f32` of
//! `sparse.cu`), compiled as C++ for the CPU and run one thread after
//! another (`emulated`): a check that needs no GPU of how they split a
//! hub's row into segments. Each operation runs its kernels in the order
//! the CUDA backend launches them (`runtime/src/cuda/gnn.rs`): the row
//! kernel, then its `_rest` or `_carry` kernel and fix-up. The backend's
//! own argument lists are not exercised here (the GPU test
//! `hub_columns_are_transposed_in_edge_order` runs them). The results
//! are checked bit for bit:
//! - the edge-wise operations (attention dropout, edge scores) against the
//!   CPU backend's, at every segment length;
//! - the sums against the order `gat.cu` documents (a row's terms up to
//!   its first boundary onto its start, then each later segment's summed
//!   from zero and added in order; a maximum in any order), and where no
//!   row crosses a boundary also against the CPU backend's aggregation
//!   and, at heads of at most 2 features (where the CPU's dot products
//!   add in the kernels' order), its attention backward.

mod emulated;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use emulated::{bits, segmented, Case, Input, Rng};
use fateplan_kernels::cuda::Source;
use fateplan_kernels::dropout::{Dropout, RowKeys};
use fateplan_kernels::gat::{self, BlockGrads, BlockInputs, Heads, NEGATIVE_SLOPE};
use fateplan_kernels::{Init, Weighting, Write};

/// Reads a case, runs the kernels of one operation (`op`, below) on a
/// grid of `grid` blocks of `block` threads, writes its outputs one after
/// another.
const MAIN: &str = r#"
int main(int argc, char** argv) {
    in = fopen(argv[1], "rb"); if (!in) return 2;
    u64 op = word(), rows = word(), src_rows = word(), nnz = word();
    u32 heads = (u32)word(), head_width = (u32)word();
    u64 seg = word(); int init_mode = (int)word();
    u64 key = word(); u32 threshold = (u32)word(); u32 scale_bits = (u32)word();
    u64 dst_first = word(), src_first = word(), nodes = word();
    int has_dropped = (int)word();
    unsigned grid = (unsigned)word(), block = (unsigned)word();
    float scale; std::memcpy(&scale, &scale_bits, 4);
    auto row_start = array<u64>(); auto columns = array<u32>();
    auto start = array<u64>(); auto perm = array<u32>(); auto perm_row = array<u32>();
    std::vector<float> f[8];
    for (auto& v : f) v = array<float>();
    u64 d = (u64)heads * head_width, segments = (nnz + seg - 1) / seg;
    std::vector<float> carry(segments * d + 1, NOT_WRITTEN);
    const u64* R = row_start.data(); const u32* C = columns.data();
    const u64* S = start.data(); const u32* P = perm.data(); const u32* PR = perm_row.data();
    std::vector<float> out;
    auto go = [&](auto kernel) { launch(grid, block, kernel); };
    switch (op) {
    case 0:  // attention dropout: f0 alpha
        out.assign(nnz * heads + 1, NOT_WRITTEN);
        go([&] { gat_dropout_edges_f32(R, C, rows, seg, heads, f[0].data(), out.data(), key,
            threshold, scale, dst_first, src_first, nodes); });
        go([&] { gat_dropout_edges_rest_f32(R, C, rows, seg, segments, heads, f[0].data(),
            out.data(), key, threshold, scale, dst_first, src_first, nodes); });
        out.resize(nnz * heads);
        break;
    case 1:  // edge scores: f0 a_dst, f1 a_src
        out.assign(nnz * heads + 1, NOT_WRITTEN);
        go([&] { gat_edge_scores_f32(R, C, rows, seg, heads, f[0].data(), f[1].data(),
            out.data()); });
        go([&] { gat_edge_scores_rest_f32(R, C, rows, seg, segments, heads, f[0].data(),
            f[1].data(), out.data()); });
        out.resize(nnz * heads);
        break;
    case 2: {  // edge softmax of one block: f0 scores, f1 row maxima, f2 row sums
        out = f[0];
        float* a = out.data(); float* row_max = f[1].data(); float* row_sum = f[2].data();
        go([&] { gat_softmax_max_f32(R, rows, seg, heads, a, row_max); });
        // +inf where nothing was written: a fold of an unwritten maximum
        // shows (a NaN would not: fmaxf drops it).
        std::fill(carry.begin(), carry.end(), INFINITY);
        go([&] { gat_softmax_max_carry_f32(R, rows, seg, segments, heads, a, carry.data()); });
        go([&] { gat_segment_max_f32(R, rows, seg, segments, carry.data(), heads, row_max); });
        std::fill(carry.begin(), carry.end(), NOT_WRITTEN);
        go([&] { gat_softmax_exp_f32(R, rows, seg, heads, a, row_max, row_sum); });
        go([&] { gat_softmax_exp_carry_f32(R, rows, seg, segments, heads, a, row_max,
            carry.data()); });
        go([&] { segment_fixup_f32(R, rows, seg, segments, carry.data(), heads, row_sum); });
        go([&] { gat_softmax_div_f32(R, rows, seg, heads, a, row_sum); });
        go([&] { gat_softmax_div_rest_f32(R, rows, seg, segments, heads, a, row_sum); });
        out.resize(nnz * heads);
        out.insert(out.end(), row_max, row_max + rows * heads);
        out.insert(out.end(), row_sum, row_sum + rows * heads);
        break;
    }
    case 3:  // aggregation: f0 alpha, f1 z_src, f2 init
        out.assign(rows * d + 1, NOT_WRITTEN);
        go([&] { gat_aggregate_f32(R, C, rows, seg, f[0].data(), f[1].data(), heads, head_width,
            f[2].data(), init_mode, out.data()); });
        go([&] { gat_aggregate_carry_f32(R, C, rows, seg, segments, f[0].data(), f[1].data(),
            heads, head_width, carry.data()); });
        go([&] { segment_fixup_f32(R, rows, seg, segments, carry.data(), d, out.data()); });
        out.resize(rows * d);
        break;
    case 4: {  // attention backward, destination side: f0 alpha, f1 dropped, f2 a_dst,
               // f3 a_src, f4 z_src, f5 grad_out, f6 out, f7 grad_a_dst as it starts
        std::vector<float> du(nnz * heads + 1, NOT_WRITTEN);
        float* ga = f[7].data();
        go([&] { gat_attention_bwd_dst_f32(R, C, rows, seg, heads, head_width, f[0].data(),
            f[1].data(), has_dropped, f[2].data(), f[3].data(), f[4].data(), f[5].data(),
            f[6].data(), du.data(), ga, init_mode); });
        go([&] { gat_attention_bwd_dst_carry_f32(R, C, rows, seg, segments, heads, head_width,
            f[0].data(), f[1].data(), has_dropped, f[2].data(), f[3].data(), f[4].data(),
            f[5].data(), f[6].data(), du.data(), carry.data()); });
        go([&] { segment_fixup_f32(R, rows, seg, segments, carry.data(), heads, ga); });
        out.assign(du.begin(), du.begin() + nnz * heads);
        out.insert(out.end(), ga, ga + rows * heads);
        break;
    }
    case 5:  // the value path into source rows: f0 value alpha, f1 grad_out, f2 the output
        out = f[2];
        go([&] { gat_scatter_value_f32(S, P, PR, src_rows, seg, heads, head_width, f[0].data(),
            f[1].data(), out.data(), init_mode); });
        go([&] { gat_scatter_value_carry_f32(S, P, PR, src_rows, seg, segments, heads,
            head_width, f[0].data(), f[1].data(), carry.data()); });
        go([&] { segment_fixup_f32(S, src_rows, seg, segments, carry.data(), d, out.data()); });
        out.resize(src_rows * d);
        break;
    case 6:  // the score path into source rows: f0 du, f1 the output
        out = f[1];
        go([&] { gat_scatter_score_f32(S, P, src_rows, seg, heads, f[0].data(), out.data(),
            init_mode); });
        go([&] { gat_scatter_score_carry_f32(S, P, src_rows, seg, segments, heads, f[0].data(),
            carry.data()); });
        go([&] { segment_fixup_f32(S, src_rows, seg, segments, carry.data(), heads,
            out.data()); });
        out.resize(src_rows * heads);
        break;
    default:
        return 2;
    }
    FILE* o = fopen(argv[2], "wb"); if (!o) return 2;
    fwrite(out.data(), 4, out.size(), o); fclose(o);
    return 0;
}
"#;

/// The compiled harness, built once (`emulated::harness`).
fn harness(test: &str) -> Option<&'static Path> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let code = format!(
        "{}\n#line 1 \"{}\"\n{}",
        Source::Sparse.code(),
        Source::Gat.file_name(),
        Source::Gat.body()
    );
    emulated::harness(&BUILT, "gat", &code, MAIN, test)
}

/// Float arrays the harness reads (its `f[8]`): an operation's inputs,
/// the rest empty.
const ARRAYS: usize = 8;
const INIT_ZERO: u64 = 0;
const INIT_FROM: u64 = 1;
const INIT_OUT: u64 = 2;

/// The first rows, in the whole graph, of the block's destination and
/// source partitions, and the graph's vertices: attention dropout's keys.
const DST_FIRST: u64 = 5;
const SRC_FIRST: u64 = 17;
const NODES: u64 = 40;

/// One operation's launch.
#[derive(Clone, Copy)]
struct Launch {
    seg: u64,
    grid: u64,
    block: u64,
}

/// A block with GAT's heads.
struct Block<'a> {
    case: &'a Case,
    heads: Heads,
    binary: &'a Path,
}

impl Block<'_> {
    /// Runs operation `op` on `arrays` (f0, f1, ...); its outputs,
    /// `values` floats.
    fn run(
        &self,
        op: u64,
        how: Launch,
        (init_mode, dropout): (u64, Option<Dropout>),
        arrays: &[&[f32]],
        values: usize,
    ) -> Vec<f32> {
        let case = self.case;
        let (key, threshold, scale) = dropout.map_or((0, 0, 1.0), |d| d.device_params());
        let (start, perm, perm_row) = case.transpose();
        let mut input = Input::default();
        input
            .words(&[
                op,
                case.rows as u64,
                case.src_rows as u64,
                case.nnz() as u64,
                self.heads.heads as u64,
                self.heads.head_width as u64,
                how.seg,
                init_mode,
                key,
                u64::from(threshold),
                u64::from(scale.to_bits()),
                DST_FIRST,
                SRC_FIRST,
                NODES,
                u64::from(dropout.is_some()),
                how.grid,
                how.block,
            ])
            .u64s(&case.row_start)
            .u32s(&case.columns)
            .u64s(&start)
            .u32s(&perm)
            .u32s(&perm_row);
        for k in 0..ARRAYS {
            input.f32s(arrays.get(k).copied().unwrap_or(&[]));
        }
        input.run(self.binary, values)
    }

    fn edges(&self, r: usize) -> std::ops::Range<usize> {
        self.case.row_start[r] as usize..self.case.row_start[r + 1] as usize
    }
}

fn leaky_relu(u: f32) -> f32 {
    if u > 0.0 {
        u
    } else {
        NEGATIVE_SLOPE * u
    }
}

fn leaky_relu_grad(u: f32) -> f32 {
    if u > 0.0 {
        1.0
    } else {
        NEGATIVE_SLOPE
    }
}

/// Where an output starts: its values, or NaN where the kernel must
/// overwrite it (an unwritten value then shows).
fn start_of(values: &[f32], accumulate: bool) -> Vec<f32> {
    match accumulate {
        true => values.to_vec(),
        false => vec![f32::NAN; values.len()],
    }
}

/// Every operation of one block at one launch, against the documented
/// order and, where it applies, the CPU backend.
fn check(b: &Block, what: &str, how: Launch, rng: &mut Rng) {
    let case = b.case;
    let (h_n, c_n, d) = (b.heads.heads, b.heads.head_width, b.heads.width());
    let (rows, src_rows, nnz) = (case.rows, case.src_rows, case.nnz());
    let seg = how.seg as usize;
    let whole = seg >= nnz;
    let at = format!(
        "{what}, heads {h_n}x{c_n}, seg {seg}, grid {}x{}",
        how.grid, how.block
    );
    let mask = Dropout {
        p: 0.5,
        seed: 9,
        stream: 4,
    };

    // Attention dropout and edge scores: one value per edge and head.
    let alpha = rng.values(nnz * h_n);
    let got = b.run(0, how, (INIT_ZERO, Some(mask)), &[&alpha], nnz * h_n);
    let mut cpu = alpha.clone();
    gat::dropout_edges(
        case.block(),
        h_n,
        RowKeys::Contiguous(DST_FIRST),
        RowKeys::Contiguous(SRC_FIRST),
        src_rows,
        NODES,
        &mask,
        &mut cpu,
    )
    .expect("the CPU's dropout");
    assert_eq!(bits(&got), bits(&cpu), "{at}: attention dropout");
    let (a_dst, a_src) = (rng.values(rows * h_n), rng.values(src_rows * h_n));
    let got = b.run(1, how, (INIT_ZERO, None), &[&a_dst, &a_src], nnz * h_n);
    let mut cpu = vec![0.0f32; nnz * h_n];
    gat::edge_scores(case.block(), &a_dst, &a_src, h_n, &mut cpu).expect("the CPU's scores");
    assert_eq!(bits(&got), bits(&cpu), "{at}: edge scores");
    for r in 0..rows {
        for e in b.edges(r) {
            for h in 0..h_n {
                let c = case.columns[e] as usize;
                let want = leaky_relu(a_dst[r * h_n + h] + a_src[c * h_n + h]);
                assert_eq!(
                    got[e * h_n + h].to_bits(),
                    want.to_bits(),
                    "{at}: score {e}"
                );
            }
        }
    }

    // The edge softmax of one block after earlier ones (their maxima and
    // sums), or the first (-inf and 0).
    let scores = rng.values(nnz * h_n);
    for earlier in [false, true] {
        let (max0, sum0) = match earlier {
            true => (
                rng.values(rows * h_n),
                (0..rows * h_n).map(|_| rng.value().abs()).collect(),
            ),
            false => (
                vec![f32::NEG_INFINITY; rows * h_n],
                vec![0.0f32; rows * h_n],
            ),
        };
        let got = b.run(
            2,
            how,
            (INIT_ZERO, None),
            &[&scores, &max0, &sum0],
            (nnz + 2 * rows) * h_n,
        );
        let mut want = vec![0.0f32; (nnz + 2 * rows) * h_n];
        let (alpha, rest) = want.split_at_mut(nnz * h_n);
        let (row_max, row_sum) = rest.split_at_mut(rows * h_n);
        for r in 0..rows {
            for h in 0..h_n {
                let i = r * h_n + h;
                let m = b.edges(r).fold(max0[i], |m, e| m.max(scores[e * h_n + h]));
                let x = |e: usize| (scores[e * h_n + h] - m).exp();
                let sum = segmented(b.edges(r), seg, sum0[i], x);
                for e in b.edges(r) {
                    alpha[e * h_n + h] = x(e) / sum;
                }
                (row_max[i], row_sum[i]) = (m, sum);
            }
        }
        assert_eq!(
            bits(&got),
            bits(&want),
            "{at}: edge softmax, after earlier blocks {earlier}"
        );
    }

    // The aggregation.
    let alpha = rng.values(nnz * h_n);
    let z_src = rng.values(src_rows * d);
    let init = rng.values(rows * d);
    for with_init in [false, true] {
        let mode = if with_init { INIT_FROM } else { INIT_ZERO };
        let got = b.run(3, how, (mode, None), &[&alpha, &z_src, &init], rows * d);
        let mut want = vec![0.0f32; rows * d];
        for r in 0..rows {
            for f in 0..d {
                let start = if with_init { init[r * d + f] } else { 0.0 };
                let term =
                    |e: usize| alpha[e * h_n + f / c_n] * z_src[case.columns[e] as usize * d + f];
                want[r * d + f] = segmented(b.edges(r), seg, start, term);
            }
        }
        let at = format!("{at}: aggregation, init {with_init}");
        assert_eq!(bits(&got), bits(&want), "{at}");
        if whole {
            let mut cpu = vec![0.0f32; rows * d];
            let init = Init::from(with_init.then_some(init.as_slice()));
            gat::aggregate(case.block(), &alpha, &z_src, b.heads, init, &mut cpu)
                .expect("the CPU's aggregation");
            assert_eq!(bits(&got), bits(&cpu), "{at}: against the CPU");
        }
    }

    // The attention backward: destination side, then the value and score
    // paths into source rows.
    let dropped = rng.values(nnz * h_n);
    let grad_out = rng.values(rows * d);
    let out = rng.values(rows * d);
    let (ga0, gz0, gs0) = (
        rng.values(rows * h_n),
        rng.values(src_rows * d),
        rng.values(src_rows * h_n),
    );
    let (start_t, perm, perm_row) = case.transpose();
    for with_dropout in [false, true] {
        for accumulate in [false, true] {
            let at = format!(
                "{at}: attention backward, dropout {with_dropout}, accumulate {accumulate}"
            );
            let mode = if accumulate { INIT_OUT } else { INIT_ZERO };
            let dropout = with_dropout.then_some(mask);
            let dropped_or = if with_dropout { &dropped } else { &alpha };
            let got = b.run(
                4,
                how,
                (mode, dropout),
                &[
                    &alpha,
                    dropped_or,
                    &a_dst,
                    &a_src,
                    &z_src,
                    &grad_out,
                    &out,
                    &start_of(&ga0, accumulate),
                ],
                (nnz + rows) * h_n,
            );
            let (du, ga) = got.split_at(nnz * h_n);
            let mut want_du = vec![0.0f32; nnz * h_n];
            let mut want_ga = vec![0.0f32; rows * h_n];
            for r in 0..rows {
                for h in 0..h_n {
                    let head = |v: &[f32], row: usize| {
                        v[row * d + h * c_n..row * d + (h + 1) * c_n].to_vec()
                    };
                    let dot =
                        |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0.0f32, |s, (x, y)| s + x * y);
                    let g = head(&grad_out, r);
                    let row_dot = dot(&g, &head(&out, r));
                    for e in b.edges(r) {
                        let c = case.columns[e] as usize;
                        let dalpha = dot(&g, &head(&z_src, c));
                        let a = alpha[e * h_n + h];
                        let ds = match with_dropout {
                            true => dropped[e * h_n + h] * dalpha - a * row_dot,
                            false => a * (dalpha - row_dot),
                        };
                        let u = a_dst[r * h_n + h] + a_src[c * h_n + h];
                        want_du[e * h_n + h] = ds * leaky_relu_grad(u);
                    }
                    let i = r * h_n + h;
                    let start = if accumulate { ga0[i] } else { 0.0 };
                    want_ga[i] = segmented(b.edges(r), seg, start, |e| want_du[e * h_n + h]);
                }
            }
            assert_eq!(bits(du), bits(&want_du), "{at}: du");
            assert_eq!(bits(ga), bits(&want_ga), "{at}: into a_dst");

            let value_alpha = dropped_or;
            let gz = b.run(
                5,
                how,
                (mode, None),
                &[value_alpha, &grad_out, &start_of(&gz0, accumulate)],
                src_rows * d,
            );
            let gs = b.run(
                6,
                how,
                (mode, None),
                &[du, &start_of(&gs0, accumulate)],
                src_rows * h_n,
            );
            let mut want_gz = vec![0.0f32; src_rows * d];
            let mut want_gs = vec![0.0f32; src_rows * h_n];
            for c in 0..src_rows {
                let column = start_t[c] as usize..start_t[c + 1] as usize;
                for f in 0..d {
                    let start = if accumulate { gz0[c * d + f] } else { 0.0 };
                    let term = |p: usize| {
                        value_alpha[perm[p] as usize * h_n + f / c_n]
                            * grad_out[perm_row[p] as usize * d + f]
                    };
                    want_gz[c * d + f] = segmented(column.clone(), seg, start, term);
                }
                for h in 0..h_n {
                    let start = if accumulate { gs0[c * h_n + h] } else { 0.0 };
                    let term = |p: usize| du[perm[p] as usize * h_n + h];
                    want_gs[c * h_n + h] = segmented(column.clone(), seg, start, term);
                }
            }
            assert_eq!(bits(&gz), bits(&want_gz), "{at}: into z_src");
            assert_eq!(bits(&gs), bits(&want_gs), "{at}: into a_src");

            if whole && c_n <= 2 {
                let (mut cpu_gz, mut cpu_gs, mut cpu_ga) = (gz0.clone(), gs0.clone(), ga0.clone());
                let inputs = BlockInputs {
                    block: case.block(),
                    alpha: &alpha,
                    alpha_dropped: with_dropout.then_some(dropped.as_slice()),
                    a_dst: &a_dst,
                    a_src: &a_src,
                    z_src: &z_src,
                    grad_out: &grad_out,
                    out: &out,
                };
                let grads = BlockGrads {
                    grad_z_src: &mut cpu_gz,
                    grad_a_src: &mut cpu_gs,
                    grad_a_dst: &mut cpu_ga,
                };
                let write = if accumulate {
                    Write::Accumulate
                } else {
                    Write::Overwrite
                };
                gat::aggregate_bwd(inputs, b.heads, grads, write).expect("the CPU's backward");
                assert_eq!(bits(ga), bits(&cpu_ga), "{at}: into a_dst, against the CPU");
                assert_eq!(
                    bits(&gz),
                    bits(&cpu_gz),
                    "{at}: into z_src, against the CPU"
                );
                assert_eq!(
                    bits(&gs),
                    bits(&cpu_gs),
                    "{at}: into a_src, against the CPU"
                );
            }
        }
    }
}

/// Every operation of `case` at several segment lengths, grids and
/// shapes of heads.
fn check_block(binary: &Path, what: &str, case: &Case, rng: &mut Rng) {
    for (heads, head_width) in [(1, 1), (1, 2), (3, 1), (2, 3)] {
        let b = Block {
            case,
            heads: Heads { heads, head_width },
            binary,
        };
        // The cases must cross boundaries, or the segments go untested.
        let (row, column) = case.longest();
        assert!(row > 1 || column > 1 || case.nnz() <= 1, "{what}");
        let nnz = case.nnz() as u64;
        for seg in [1, 2, 3, 7, 16, nnz.max(1), nnz + 5] {
            for (grid, block) in [(1, 1), (3, 5)] {
                check(&b, what, Launch { seg, grid, block }, rng);
            }
        }
    }
}

#[test]
fn gat_hubs_empty_rows_and_boundaries_match_the_documented_order() {
    let Some(binary) = harness("gat_hubs_empty_rows_and_boundaries_match_the_documented_order")
    else {
        return;
    };
    let mut rng = Rng(3);
    for (what, lengths, src_rows) in emulated::shapes() {
        let case = Case::new(&lengths, src_rows, Weighting::Unit, &mut rng);
        check_block(binary, what, &case, &mut rng);
    }
}

#[test]
fn gat_random_blocks_match_the_documented_order() {
    let Some(binary) = harness("gat_random_blocks_match_the_documented_order") else {
        return;
    };
    let mut rng = Rng(4);
    for round in 0..6 {
        let (lengths, src_rows) = emulated::random_shape(&mut rng);
        let case = Case::new(&lengths, src_rows, Weighting::Unit, &mut rng);
        check_block(
            binary,
            &format!("random block {round} ({lengths:?})"),
            &case,
            &mut rng,
        );
    }
}

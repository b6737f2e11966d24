//! The aggregation kernels of `kernels/cuda/sparse.cu`, compiled as C++
//! for the CPU and run one thread after another (`emulated`): a check of
//! their index arithmetic (segments, carried rows, the fix-up) that needs
//! no GPU. Each case is checked two ways: bit for bit against the CPU
//! backend's kernel where no row crosses a segment boundary (the order of
//! each sum is then the same), and bit for bit against the order
//! `sparse.cu` documents (a row's terms up to its first boundary onto
//! `init`, then each later segment's terms summed from zero and added in
//! order) for every segment length.

mod emulated;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use emulated::{bits, segmented, Case, Input, Rng};
use fateplan_kernels::cuda::Source;
use fateplan_kernels::dropout::Dropout;
use fateplan_kernels::sparse::{spmm, spmm_dropout, spmm_t};
use fateplan_kernels::{Init, Weighting};

/// Reads a case, runs the three kernels of a forward (`mode` 0) or
/// transposed (1) aggregation on a grid of `grid` blocks of `block`
/// threads, writes the output.
const HARNESS: &str = r#"
int main(int argc, char** argv) {
    in = fopen(argv[1], "rb"); if (!in) return 2;
    u64 mode = word(), rows = word(), src_rows = word(), nnz = word(), width = word();
    u64 seg = word(); int weighting = (int)word(); int init_mode = (int)word();
    u64 key = word(); u32 threshold = (u32)word(); u32 scale_bits = (u32)word();
    u64 src_row0 = word(); unsigned grid = (unsigned)word(), block = (unsigned)word();
    float scale; std::memcpy(&scale, &scale_bits, 4);
    auto start = array<u64>(); auto columns = array<u32>(); auto weights = array<float>();
    auto src = array<float>(); auto init = array<float>(); auto perm = array<u32>();
    auto perm_row = array<u32>();
    u64 out_rows = mode == 0 ? rows : src_rows;
    // NaN where nothing was written: a read of an unwritten output or
    // segment sum shows.
    std::vector<float> out(out_rows * width + 1, NOT_WRITTEN);
    // Accumulating (INIT_OUT): the output holds the partial sum already,
    // as a buffer the executor handed over.
    // The init is then not read: NaN shows if it is.
    if (init_mode == 2) {
        std::memcpy(out.data(), init.data(), out_rows * width * sizeof(float));
        for (auto& v : init) v = NOT_WRITTEN;
    }
    u64 segments = (nnz + seg - 1) / seg;
    std::vector<float> carry(segments * width + 1, NOT_WRITTEN);
    if (mode == 0) {
        // The source's keep bits first, as the CUDA backend computes them.
        u64 words = threshold == 0 ? 0 : (width + 63) / 64;
        // Every bit set where dropout_bits_u64 writes no word: a read
        // of one keeps a value the mask drops.
        std::vector<u64> keep(src_rows * words + 1, ~0ULL);
        launch(grid, block, [&] { dropout_bits_u64(src_rows, width, words, key, threshold,
            src_row0, keep.data()); });
        launch(grid, block, [&] { spmm_f32(start.data(), columns.data(), weights.data(), weighting,
            rows, seg, src.data(), width, init.data(), init_mode, out.data(), keep.data(), words,
            scale); });
        launch(grid, block, [&] { spmm_carry_f32(start.data(), columns.data(), weights.data(),
            weighting, rows, seg, segments, src.data(), width, carry.data(), keep.data(), words,
            scale); });
    } else {
        launch(grid, block, [&] { spmm_t_f32(start.data(), perm.data(), perm_row.data(),
            weights.data(), weighting, rows, src_rows, seg, src.data(), width, init.data(),
            init_mode, out.data()); });
        launch(grid, block, [&] { spmm_t_carry_f32(start.data(), perm.data(), perm_row.data(),
            weights.data(), weighting, rows, src_rows, seg, segments, src.data(), width,
            carry.data()); });
    }
    launch(grid, block, [&] { segment_fixup_f32(start.data(), out_rows, seg, segments,
        carry.data(), width, out.data()); });
    FILE* o = fopen(argv[2], "wb"); if (!o) return 2;
    fwrite(out.data(), 4, out_rows * width, o); fclose(o);
    return 0;
}
"#;

/// The compiled harness, built once (`emulated::harness`).
fn harness(test: &str) -> Option<&'static Path> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    emulated::harness(&BUILT, "sparse", &Source::Sparse.code(), HARNESS, test)
}

impl Case {
    /// Edge e's weight, as `Weighting` lays it out.
    fn weight(&self, e: usize) -> f32 {
        let (r, c) = (self.row_of(e), self.columns[e] as usize);
        match self.weighting {
            Weighting::PerEdge => self.weights[e],
            Weighting::Row => self.weights[r],
            Weighting::RowColumn => self.weights[r] * self.weights[self.rows + c],
            Weighting::Unit => 1.0,
        }
    }
}

/// How the kernels run: a grid, a dropout mask on the forward's source.
#[derive(Clone, Copy)]
struct Launch {
    seg: u64,
    grid: u64,
    block: u64,
    dropout: Option<Dropout>,
    src_row0: u64,
    /// With an init: the output holds it already and the kernels add
    /// into it (`INIT_OUT`), rather than reading it (`INIT_FROM`).
    into: bool,
}

/// The kernels' output for `case` (`transposed`: the transposed
/// aggregation of `src`, the destination rows' gradient), computed by
/// the harness `binary`.
fn run(
    binary: &Path,
    case: &Case,
    transposed: bool,
    src: &[f32],
    init: Option<&[f32]>,
    width: usize,
    how: Launch,
) -> Vec<f32> {
    let (key, threshold, scale) = how.dropout.map_or((0, 0, 1.0), |d| d.device_params());
    let out_rows = if transposed { case.src_rows } else { case.rows };
    let (start, perm, perm_row) = case.transpose();
    let zeros = vec![0.0f32; out_rows * width];
    let mut input = Input::default();
    input
        .words(&[
            u64::from(transposed),
            case.rows as u64,
            case.src_rows as u64,
            case.nnz() as u64,
            width as u64,
            how.seg,
            case.weighting.code() as u64,
            match (init.is_some(), how.into) {
                (false, _) => 0,
                (true, false) => 1,
                (true, true) => 2,
            },
            key,
            u64::from(threshold),
            u64::from(scale.to_bits()),
            how.src_row0,
            how.grid,
            how.block,
        ])
        .u64s(if transposed { &start } else { &case.row_start })
        .u32s(&case.columns)
        .f32s(&case.weights)
        .f32s(src)
        .f32s(init.unwrap_or(&zeros))
        .u32s(&perm)
        .u32s(&perm_row);
    input.run(binary, out_rows * width)
}

/// The forward aggregation, each row's sum in the order `sparse.cu`
/// documents ([`segmented`]).
fn documented(
    case: &Case,
    src: &[f32],
    init: Option<&[f32]>,
    width: usize,
    how: Launch,
) -> Vec<f32> {
    let seg = how.seg as usize;
    let mut out = vec![0.0f32; case.rows * width];
    for r in 0..case.rows {
        let (begin, end) = (case.row_start[r] as usize, case.row_start[r + 1] as usize);
        for f in 0..width {
            let term = |e: usize| {
                let c = case.columns[e] as usize;
                let mut x = src[c * width + f];
                if let Some(d) = how.dropout {
                    x *= d.value((how.src_row0 + c as u64) * width as u64 + f as u64);
                }
                case.weight(e) * x
            };
            let init = init.map_or(0.0, |i| i[r * width + f]);
            out[r * width + f] = segmented(begin..end, seg, init, term);
        }
    }
    out
}

/// [`documented`] for the transposed aggregation: column c's edges in
/// edge order, cut at the boundaries of their positions in the transpose.
fn documented_t(
    case: &Case,
    grad: &[f32],
    init: Option<&[f32]>,
    width: usize,
    seg: u64,
) -> Vec<f32> {
    let seg = seg as usize;
    let (start, perm, perm_row) = case.transpose();
    let mut out = vec![0.0f32; case.src_rows * width];
    for c in 0..case.src_rows {
        let (begin, end) = (start[c] as usize, start[c + 1] as usize);
        for f in 0..width {
            let term =
                |p: usize| case.weight(perm[p] as usize) * grad[perm_row[p] as usize * width + f];
            let init = init.map_or(0.0, |i| i[c * width + f]);
            out[c * width + f] = segmented(begin..end, seg, init, term);
        }
    }
    out
}

/// Runs one case forward and transposed at several segment lengths and
/// grids, checking each against the documented order and, where no row
/// (or column) crosses a boundary, against the CPU backend.
fn check(binary: &Path, what: &str, case: &Case, width: usize, rng: &mut Rng) {
    let src = rng.values(case.src_rows * width);
    let init = rng.values(case.rows * width);
    let grad = rng.values(case.rows * width);
    let init_t = rng.values(case.src_rows * width);
    for seg in [1u64, 2, 3, 7, 16, (case.nnz() as u64).max(1)] {
        for (grid, block) in [(1, 1), (3, 5)] {
            for dropout in [
                None,
                Some(Dropout {
                    p: 0.5,
                    seed: 7,
                    stream: 3,
                }),
            ] {
                for (with_init, into) in [(false, false), (true, false), (true, true)] {
                    let how = Launch {
                        seg,
                        grid,
                        block,
                        dropout,
                        src_row0: 11,
                        into,
                    };
                    let init = with_init.then_some(init.as_slice());
                    let got = run(binary, case, false, &src, init, width, how);
                    let at = format!("{what}: forward, seg {seg}, grid {grid}x{block}, dropout {}, init {with_init}, into {into}", dropout.is_some());
                    assert_eq!(
                        bits(&got),
                        bits(&documented(case, &src, init, width, how)),
                        "{at}"
                    );
                    // Where every row ends by its first boundary (a row
                    // of `seg` edges or fewer may still cross one).
                    if seg >= case.nnz() as u64 {
                        let mut cpu = vec![0.0f32; case.rows * width];
                        let init = Init::from(init);
                        match dropout {
                            None => spmm(case.block(), &src, width, init, &mut cpu),
                            Some(d) => spmm_dropout(
                                case.block(),
                                &src,
                                width,
                                init,
                                &mut cpu,
                                &d,
                                how.src_row0,
                            ),
                        }
                        .expect("the CPU kernel");
                        assert_eq!(bits(&got), bits(&cpu), "{at}: against the CPU's spmm");
                    }
                }
            }
            for (with_init, into) in [(false, false), (true, false), (true, true)] {
                let how = Launch {
                    seg,
                    grid,
                    block,
                    dropout: None,
                    src_row0: 0,
                    into,
                };
                let init = with_init.then_some(init_t.as_slice());
                let got = run(binary, case, true, &grad, init, width, how);
                let at = format!(
                    "{what}: transposed, seg {seg}, grid {grid}x{block}, init {with_init}, into {into}"
                );
                assert_eq!(
                    bits(&got),
                    bits(&documented_t(case, &grad, init, width, seg)),
                    "{at}"
                );
                if seg >= case.nnz() as u64 {
                    let mut cpu = vec![0.0f32; case.src_rows * width];
                    spmm_t(case.block(), &grad, width, Init::from(init), &mut cpu)
                        .expect("the CPU kernel");
                    assert_eq!(bits(&got), bits(&cpu), "{at}: against the CPU's spmm_t");
                }
            }
        }
    }
    // The cases must cross boundaries, or the segments go untested.
    assert!(
        case.longest().0 > 1 || case.longest().1 > 1 || case.nnz() <= 1,
        "{what}"
    );
}

const WEIGHTINGS: [Weighting; 4] = [
    Weighting::PerEdge,
    Weighting::Row,
    Weighting::RowColumn,
    Weighting::Unit,
];

#[test]
fn hubs_empty_rows_and_boundaries_match_the_documented_order() {
    let Some(binary) = harness("hubs_empty_rows_and_boundaries_match_the_documented_order") else {
        return;
    };
    let mut rng = Rng(1);
    for (what, lengths, src_rows) in emulated::shapes() {
        for weighting in WEIGHTINGS {
            let case = Case::new(&lengths, src_rows, weighting, &mut rng);
            for width in [1, 3] {
                check(
                    binary,
                    &format!("{what}, {weighting:?}, width {width}"),
                    &case,
                    width,
                    &mut rng,
                );
            }
        }
    }
}

#[test]
fn random_blocks_match_the_documented_order() {
    let Some(binary) = harness("random_blocks_match_the_documented_order") else {
        return;
    };
    let mut rng = Rng(2);
    for round in 0..12 {
        let (lengths, src_rows) = emulated::random_shape(&mut rng);
        let weighting = WEIGHTINGS[round % WEIGHTINGS.len()];
        let case = Case::new(&lengths, src_rows, weighting, &mut rng);
        check(
            binary,
            &format!("random block {round} ({lengths:?}, {weighting:?})"),
            &case,
            2,
            &mut rng,
        );
    }
}

/// Rows of more than one word of keep bits (`dropout_bits_u64`: 64 an
/// element's word), 67 wide so that groups of 4 hashed elements straddle
/// rows: the dropped forward, bit for bit the documented order and the
/// CPU's `spmm_dropout`.
#[test]
fn rows_wider_than_a_word_of_keep_bits_match() {
    let Some(binary) = harness("rows_wider_than_a_word_of_keep_bits_match") else {
        return;
    };
    let mut rng = Rng(3);
    for round in 0..2 {
        let (lengths, src_rows) = emulated::random_shape(&mut rng);
        let weighting = WEIGHTINGS[round % WEIGHTINGS.len()];
        let case = Case::new(&lengths, src_rows, weighting, &mut rng);
        check(
            binary,
            &format!("random block {round} ({lengths:?}, {weighting:?}), width 67"),
            &case,
            67,
            &mut rng,
        );
    }
}

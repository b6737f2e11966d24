//! The aggregation kernels of `kernels/cuda/sparse.cu`, compiled as C++
//! for the CPU with a shim for CUDA's built-ins and run one thread after
//! another: a check of their index arithmetic (segments, carried rows,
//! the fix-up) that needs no GPU. The kernels these tests launch share no
//! memory between threads and use no barriers, so running the threads in
//! turn computes what the GPU computes, but for rounding: built without
//! fused multiply-adds, where NVRTC may fuse them. So this checks which
//! terms each sum takes and in what order, not the GPU's bits. Each case
//! is checked two ways: bit for bit against the CPU backend's kernel where
//! no row crosses a segment boundary (the order of each sum is then the
//! same), and bit for bit against the order `sparse.cu` documents (a row's
//! terms up to its first boundary onto `init`, then each later segment's
//! terms summed from zero and added in order) for every segment length.
//!
//! Needs a C++ compiler (`$CXX`, else `c++`); without one each test says
//! that it skipped, and with `FATEPLAN_REQUIRE_CXX=1` (as `.ci/run` sets)
//! fails instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use fateplan_kernels::cuda::Source;
use fateplan_kernels::dropout::Dropout;
use fateplan_kernels::sparse::{spmm, spmm_dropout, spmm_t};
use fateplan_kernels::{BlockRef, Init, Weighting};

/// CUDA's built-ins for a serial run (`launch` sets the indices).
const SHIM: &str = r#"
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
struct Dim { unsigned x; };
static Dim blockIdx, blockDim, gridDim, threadIdx;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
static inline void __syncthreads() {}
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline unsigned atomicAdd(unsigned* p, unsigned v) { unsigned o = *p; *p += v; return o; }
"#;

/// Reads a case, runs the three kernels of a forward (`mode` 0) or
/// transposed (1) aggregation on a grid of `grid` blocks of `block`
/// threads, writes the output.
const HARNESS: &str = r#"
template <class F> static void launch(unsigned grid, unsigned block, F f) {
    gridDim.x = grid; blockDim.x = block;
    for (unsigned b = 0; b < grid; ++b)
        for (unsigned t = 0; t < block; ++t) { blockIdx.x = b; threadIdx.x = t; f(); }
}
static FILE* in;
static u64 word() { u64 v; if (fread(&v, 8, 1, in) != 1) exit(2); return v; }
template <class T> static std::vector<T> array() {
    u64 n = word(); std::vector<T> v(n + 1);
    if (n && fread(v.data(), sizeof(T), n, in) != n) exit(2);
    return v;
}
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
    std::vector<float> out(out_rows * width + 1, __int_as_float(0x7fc00000));
    u64 segments = (nnz + seg - 1) / seg;
    std::vector<float> carry(segments * width + 1, __int_as_float(0x7fc00000));
    if (mode == 0) {
        launch(grid, block, [&] { spmm_f32(start.data(), columns.data(), weights.data(), weighting,
            rows, seg, src.data(), width, init.data(), init_mode, out.data(), key, threshold, scale,
            src_row0); });
        launch(grid, block, [&] { spmm_carry_f32(start.data(), columns.data(), weights.data(),
            weighting, rows, seg, segments, src.data(), width, carry.data(), key, threshold, scale,
            src_row0); });
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

/// The compiled harness, built once; `None` where no C++ compiler is
/// found (`test` then says that it skipped, or with
/// `FATEPLAN_REQUIRE_CXX=1` fails).
fn harness(test: &str) -> Option<&'static Path> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("fateplan-emulated-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let source = dir.join("sparse.cpp");
        // The `#line` directive of `code` names the .cu file in errors.
        let code = format!("{SHIM}\n{}\n{HARNESS}", Source::Sparse.code());
        std::fs::write(&source, code).expect("the harness source");
        let binary = dir.join("sparse");
        let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let built = Command::new(&compiler)
            .args(["-std=c++17", "-O1", "-ffp-contract=off", "-w", "-o"])
            .arg(&binary)
            .arg(&source)
            .output();
        match built {
            Ok(out) if out.status.success() => Ok(binary),
            Ok(out) => panic!(
                "sparse.cu does not compile as C++ with {compiler}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => Err(format!("no C++ compiler ({compiler}: {e}); set CXX to one")),
        }
    });
    match built {
        Ok(binary) => Some(binary),
        Err(why) => {
            assert!(
                std::env::var("FATEPLAN_REQUIRE_CXX").as_deref() != Ok("1"),
                "{test}: FATEPLAN_REQUIRE_CXX=1 but {why}"
            );
            eprintln!("skipped {test}: {why}");
            None
        }
    }
}

/// A block, its transpose by stable counting sort, and its weights.
struct Case {
    rows: usize,
    src_rows: usize,
    row_start: Vec<u64>,
    columns: Vec<u32>,
    weights: Vec<f32>,
    weighting: Weighting,
}

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn value(&mut self) -> f32 {
        (self.below(2001) as f32 - 1000.0) / 37.0
    }

    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.value()).collect()
    }
}

impl Case {
    /// Rows of the given lengths over `src_rows` source rows.
    fn new(lengths: &[usize], src_rows: usize, weighting: Weighting, rng: &mut Rng) -> Case {
        let mut row_start = vec![0u64];
        let mut columns = Vec::new();
        for &len in lengths {
            columns.extend((0..len).map(|_| rng.below(src_rows as u64) as u32));
            row_start.push(columns.len() as u64);
        }
        let rows = lengths.len();
        let weights = match weighting {
            Weighting::PerEdge => rng.values(columns.len()),
            Weighting::Row => rng.values(rows),
            Weighting::RowColumn => rng.values(rows + src_rows),
            Weighting::Unit => Vec::new(),
        };
        Case {
            rows,
            src_rows,
            row_start,
            columns,
            weights,
            weighting,
        }
    }

    fn block(&self) -> BlockRef<'_> {
        BlockRef {
            row_start: &self.row_start,
            columns: &self.columns,
            weights: &self.weights,
            weighting: self.weighting,
        }
    }

    fn nnz(&self) -> usize {
        self.columns.len()
    }

    fn row_of(&self, e: usize) -> usize {
        self.row_start.partition_point(|&s| s as usize <= e) - 1
    }

    /// The transpose: each source row's edges in edge order (`start`,
    /// `perm`), and each placed edge's destination row.
    fn transpose(&self) -> (Vec<u64>, Vec<u32>, Vec<u32>) {
        let mut start = vec![0u64; self.src_rows + 1];
        for &c in &self.columns {
            start[c as usize + 1] += 1;
        }
        for k in 0..self.src_rows {
            start[k + 1] += start[k];
        }
        let mut cursor = start.clone();
        let mut perm = vec![0u32; self.nnz()];
        for (e, &c) in self.columns.iter().enumerate() {
            perm[cursor[c as usize] as usize] = e as u32;
            cursor[c as usize] += 1;
        }
        let perm_row = perm
            .iter()
            .map(|&e| self.row_of(e as usize) as u32)
            .collect();
        (start, perm, perm_row)
    }

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
    let mut bytes = Vec::new();
    let mut word = |v: u64| bytes.extend_from_slice(&v.to_le_bytes());
    for v in [
        u64::from(transposed),
        case.rows as u64,
        case.src_rows as u64,
        case.nnz() as u64,
        width as u64,
        how.seg,
        case.weighting.code() as u64,
        u64::from(init.is_some()),
        key,
        u64::from(threshold),
        u64::from(scale.to_bits()),
        how.src_row0,
        how.grid,
        how.block,
    ] {
        word(v);
    }
    fn array<T: Copy>(bytes: &mut Vec<u8>, values: &[T], to: impl Fn(T) -> Vec<u8>) {
        bytes.extend_from_slice(&(values.len() as u64).to_le_bytes());
        for &v in values {
            bytes.extend(to(v));
        }
    }
    let u64s = |v: u64| v.to_le_bytes().to_vec();
    let u32s = |v: u32| v.to_le_bytes().to_vec();
    let f32s = |v: f32| v.to_le_bytes().to_vec();
    let zeros = vec![0.0f32; out_rows * width];
    array(
        &mut bytes,
        if transposed { &start } else { &case.row_start },
        u64s,
    );
    array(&mut bytes, &case.columns, u32s);
    array(&mut bytes, &case.weights, f32s);
    array(&mut bytes, src, f32s);
    array(&mut bytes, init.unwrap_or(&zeros), f32s);
    array(&mut bytes, &perm, u32s);
    array(&mut bytes, &perm_row, u32s);
    let dir = binary.parent().expect("the harness's folder");
    let name =
        format!("{:?}", std::thread::current().id()).replace(|c: char| !c.is_alphanumeric(), "");
    let (input, output) = (
        dir.join(format!("in-{name}")),
        dir.join(format!("out-{name}")),
    );
    std::fs::write(&input, bytes).expect("the case's file");
    let status = Command::new(binary)
        .arg(&input)
        .arg(&output)
        .status()
        .expect("the harness runs");
    assert!(status.success(), "the harness failed: {status}");
    let out = std::fs::read(&output).expect("the harness's output");
    for file in [&input, &output] {
        std::fs::remove_file(file).expect("the case's files");
    }
    assert_eq!(out.len(), out_rows * width * 4, "output length");
    out.chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect()
}

/// One sum in the order `sparse.cu` documents: the terms of `positions`
/// up to the first multiple of `seg` after its start onto `init`, then
/// each later segment's terms summed from zero, added in segment order.
fn segmented(
    positions: std::ops::Range<usize>,
    seg: usize,
    init: f32,
    term: impl Fn(usize) -> f32,
) -> f32 {
    let (begin, end) = (positions.start, positions.end);
    let cut = end.min((begin / seg + 1) * seg);
    let mut acc = (begin..cut).fold(init, |acc, e| acc + term(e));
    for at in (cut..end).step_by(seg) {
        acc += (at..end.min(at + seg)).fold(0.0f32, |part, e| part + term(e));
    }
    acc
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

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Runs one case forward and transposed at several segment lengths and
/// grids, checking each against the documented order and, where no row
/// (or column) crosses a boundary, against the CPU backend.
fn check(binary: &Path, what: &str, case: &Case, width: usize, rng: &mut Rng) {
    let src = rng.values(case.src_rows * width);
    let init = rng.values(case.rows * width);
    let grad = rng.values(case.rows * width);
    let init_t = rng.values(case.src_rows * width);
    let longest = |start: &[u64]| start.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let (start_t, _, _) = case.transpose();
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
                for with_init in [false, true] {
                    let how = Launch {
                        seg,
                        grid,
                        block,
                        dropout,
                        src_row0: 11,
                    };
                    let init = with_init.then_some(init.as_slice());
                    let got = run(binary, case, false, &src, init, width, how);
                    let at = format!("{what}: forward, seg {seg}, grid {grid}x{block}, dropout {}, init {with_init}", dropout.is_some());
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
            for with_init in [false, true] {
                let how = Launch {
                    seg,
                    grid,
                    block,
                    dropout: None,
                    src_row0: 0,
                };
                let init = with_init.then_some(init_t.as_slice());
                let got = run(binary, case, true, &grad, init, width, how);
                let at =
                    format!("{what}: transposed, seg {seg}, grid {grid}x{block}, init {with_init}");
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
        longest(&case.row_start) > 1 || longest(&start_t) > 1 || case.nnz() <= 1,
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
    // A hub among short rows, runs of empty rows (inside, at the start
    // and at the end), rows that start on a boundary.
    let shapes: [(&str, Vec<usize>, usize); 5] = [
        (
            "a hub among short rows",
            vec![1, 2, 0, 40, 3, 0, 0, 5, 1],
            9,
        ),
        (
            "empty rows around",
            vec![0, 0, 0, 7, 0, 0, 0, 0, 9, 0, 0],
            5,
        ),
        ("every row one edge", vec![1; 12], 4),
        ("one long row", vec![33], 6),
        ("no edges", vec![0, 0, 0], 3),
    ];
    for (what, lengths, src_rows) in shapes {
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
        let rows = 1 + rng.below(12) as usize;
        let src_rows = 1 + rng.below(10) as usize;
        // Mostly short rows, some empty, now and then a long one.
        let lengths: Vec<usize> = (0..rows)
            .map(|_| match rng.below(8) {
                0 => 20 + rng.below(30) as usize,
                1 | 2 => 0,
                _ => rng.below(5) as usize,
            })
            .collect();
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

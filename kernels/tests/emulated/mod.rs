//! What the emulated kernel tests share: CUDA's built-ins for a serial
//! run, the harness's reading of a case, its build with a C++ compiler,
//! blocks and their transposes, and the documented order of a segmented
//! sum. The kernels these tests launch share no memory between threads
//! and use no barriers, so running the threads one after another computes
//! what the GPU computes, but for rounding: built without fused
//! multiply-adds, where NVRTC may fuse them. So the tests check which
//! terms each sum takes and in what order, not the GPU's bits.
//!
//! Needs a C++ compiler (`$CXX`, else `c++`); without one each test says
//! that it skipped, and with `FATEPLAN_REQUIRE_CXX=1` (as `.ci/run` sets)
//! fails instead.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use fateplan_kernels::{BlockRef, Weighting};

/// CUDA's built-ins for a serial run (`launch` sets the indices), then
/// what every harness uses: `launch`, and `word` and `array` to read a
/// case.
const SHIM: &str = r#"
#include <cmath>
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

const READ: &str = r#"
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
static const float NOT_WRITTEN = __int_as_float(0x7fc00000);
"#;

/// How the harness is compiled.
const FLAGS: [&str; 4] = ["-std=c++17", "-O1", "-ffp-contract=off", "-w"];

/// Builds `code` (CUDA sources, after the shim) followed by `main` once
/// per `cell`; `None` where no C++ compiler is found (`test` then says
/// that it skipped, or with `FATEPLAN_REQUIRE_CXX=1` fails).
pub fn harness(
    cell: &'static OnceLock<Result<PathBuf, String>>,
    name: &str,
    code: &str,
    main: &str,
    test: &str,
) -> Option<&'static Path> {
    let built = cell.get_or_init(|| {
        // The build's own temporary folder (cargo's, for tests), one binary
        // per source and compiler: a run reuses what an earlier one built,
        // and the system's temporary folder gathers nothing.
        let text = format!("{SHIM}\n{code}\n{READ}\n{main}");
        let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (&text, &compiler, FLAGS).hash(&mut hasher);
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("emulated");
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let binary = dir.join(format!("{name}-{:016x}", hasher.finish()));
        if binary.exists() {
            return Ok(binary);
        }
        // Built under this process's name, then renamed: another run
        // never sees half a binary.
        let mine = binary.with_extension(std::process::id().to_string());
        let source = mine.with_extension(format!("{}.cpp", std::process::id()));
        // The `#line` directives of the code name the .cu files in errors.
        std::fs::write(&source, text).expect("the harness source");
        let built = Command::new(&compiler)
            .args(FLAGS)
            .arg("-o")
            .arg(&mine)
            .arg(&source)
            .output();
        let _ = std::fs::remove_file(&source);
        match built {
            Ok(out) if out.status.success() => {
                std::fs::rename(&mine, &binary).expect("the harness binary");
                Ok(binary)
            }
            Ok(out) => panic!(
                "{name}: the CUDA code does not compile as C++ with {compiler}:\n{}",
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

/// A case's input file, as the harness's `word()` and `array<T>()` read it.
#[derive(Default)]
pub struct Input(Vec<u8>);

impl Input {
    pub fn words(&mut self, values: &[u64]) -> &mut Self {
        for v in values {
            self.0.extend_from_slice(&v.to_le_bytes());
        }
        self
    }

    pub fn u64s(&mut self, values: &[u64]) -> &mut Self {
        self.words(&[values.len() as u64]).words(values)
    }

    pub fn u32s(&mut self, values: &[u32]) -> &mut Self {
        self.words(&[values.len() as u64]);
        for v in values {
            self.0.extend_from_slice(&v.to_le_bytes());
        }
        self
    }

    pub fn f32s(&mut self, values: &[f32]) -> &mut Self {
        self.words(&[values.len() as u64]);
        for v in values {
            self.0.extend_from_slice(&v.to_le_bytes());
        }
        self
    }

    /// Runs the harness `binary` on this input; its output, `values`
    /// floats.
    pub fn run(&self, binary: &Path, values: usize) -> Vec<f32> {
        let dir = binary.parent().expect("the harness's folder");
        let name = format!("{:?}", std::thread::current().id())
            .replace(|c: char| !c.is_alphanumeric(), "");
        let (input, output) = (
            dir.join(format!("in-{name}")),
            dir.join(format!("out-{name}")),
        );
        std::fs::write(&input, &self.0).expect("the case's file");
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
        assert_eq!(out.len(), values * 4, "output length");
        out.chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect()
    }
}

/// A block, and its weights.
pub struct Case {
    pub rows: usize,
    pub src_rows: usize,
    pub row_start: Vec<u64>,
    pub columns: Vec<u32>,
    pub weights: Vec<f32>,
    pub weighting: Weighting,
}

/// A small deterministic generator (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn value(&mut self) -> f32 {
        (self.below(2001) as f32 - 1000.0) / 37.0
    }

    pub fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.value()).collect()
    }
}

impl Case {
    /// Rows of the given lengths over `src_rows` source rows.
    pub fn new(lengths: &[usize], src_rows: usize, weighting: Weighting, rng: &mut Rng) -> Case {
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

    pub fn block(&self) -> BlockRef<'_> {
        BlockRef {
            row_start: &self.row_start,
            columns: &self.columns,
            weights: &self.weights,
            weighting: self.weighting,
        }
    }

    pub fn nnz(&self) -> usize {
        self.columns.len()
    }

    pub fn row_of(&self, e: usize) -> usize {
        self.row_start.partition_point(|&s| s as usize <= e) - 1
    }

    /// The transpose: each source row's edges in edge order (`start`,
    /// `perm`), and each placed edge's destination row.
    pub fn transpose(&self) -> (Vec<u64>, Vec<u32>, Vec<u32>) {
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

    /// The longest row's edges, and the longest column's.
    pub fn longest(&self) -> (u64, u64) {
        let longest = |start: &[u64]| start.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        (longest(&self.row_start), longest(&self.transpose().0))
    }
}

/// Blocks' row lengths and source rows: a hub among short rows, runs of
/// empty rows (inside, at the start and at the end), rows that start on
/// a boundary, one long row, no edges.
pub fn shapes() -> [(&'static str, Vec<usize>, usize); 5] {
    [
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
    ]
}

/// A random block's row lengths and source rows: mostly short rows, some
/// empty, now and then a long one.
pub fn random_shape(rng: &mut Rng) -> (Vec<usize>, usize) {
    let rows = 1 + rng.below(12) as usize;
    let src_rows = 1 + rng.below(10) as usize;
    let lengths = (0..rows)
        .map(|_| match rng.below(8) {
            0 => 20 + rng.below(30) as usize,
            1 | 2 => 0,
            _ => rng.below(5) as usize,
        })
        .collect();
    (lengths, src_rows)
}

/// One sum in the order the kernels document: the terms of `positions`
/// up to the first multiple of `seg` after its start onto `init`, then
/// each later segment's terms summed from zero, added in segment order.
pub fn segmented(
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

pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

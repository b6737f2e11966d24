//! A node-classification dataset: features, labels, split masks and edges.
//!
//! On disk it is a folder of `.npy` files named after PyTorch Geometric's
//! `Data` attributes, read through memory maps:
//!
//! | file | dtype | shape |
//! |---|---|---|
//! | `x.npy` | `<f4` or `<f8` | `[N, F]` |
//! | `y.npy` | `<i8` or `<i4` | `[N]` or `[N, 1]` |
//! | `edge_index.npy` | `<i8` or `<i4` | `[2, E]`: sources, then destinations |
//! | `train_mask.npy`, `val_mask.npy`, `test_mask.npy` | `\|b1` or `\|u1` | `[N]` |
//!
//! Edge `k` runs from `edge_index[0, k]` to `edge_index[1, k]`, and row `v`
//! of an aggregation sums over the edges that end at `v`, as in PyG.

use std::path::{Path, PathBuf};

use fateplan_planner::blocks::BlockCounts;
use rayon::prelude::*;

use crate::edges::EdgeSource;
use crate::generate::GeneratorSpec;
use crate::npy::{Dtype, Npy};
use crate::{Error, Result};

/// Most classes a dataset may have (the planner's limit).
pub const MAX_CLASSES: u32 = 1 << 20;

/// The output width over which labels that leave most classes empty are
/// refused ([`stray_label`]).
pub const SPARSE_LABELS_WIDTH: u64 = 1024;
/// How many times the labels that occur the output width may be, over
/// [`SPARSE_LABELS_WIDTH`].
pub const SPARSE_LABELS_FACTOR: u64 = 16;

/// Where some classes no node has: the class count is one more than the
/// largest label, so one stray label makes a wide output layer. Where the
/// layer would be over [`SPARSE_LABELS_WIDTH`] wide and more than
/// [`SPARSE_LABELS_FACTOR`] times the labels that occur, the refusal
/// (`fateplan train` and `plan` alike) names the largest label, at `y[at]`
/// of `labels` (those of `path`): a stray label, not classes, most likely
/// (a label of a million in Cora's seven made a layer of a million
/// outputs, 14 s an iteration where Cora's takes 6 ms). Labels past
/// [`MAX_CLASSES`] are refused where they are read, before this.
pub fn stray_label(path: &Path, labels: impl Iterator<Item = u64> + Clone) -> Result<()> {
    let Some(largest) = labels.clone().max() else {
        return Ok(());
    };
    let classes = largest.saturating_add(1);
    if classes <= SPARSE_LABELS_WIDTH {
        return Ok(());
    }
    let mut seen = vec![false; usize::try_from(classes).unwrap_or(usize::MAX).min(1 << 20)];
    let mut at = None;
    for (k, label) in labels.enumerate() {
        if let Some(slot) = usize::try_from(label).ok().and_then(|l| seen.get_mut(l)) {
            *slot = true;
        }
        if label == largest {
            at.get_or_insert(k);
        }
    }
    let at = at.unwrap_or(0);
    let occur = seen.iter().filter(|&&s| s).count() as u64;
    if classes > SPARSE_LABELS_FACTOR * occur {
        return Err(Error::invalid(
            path,
            format!("y[{at}]"),
            format!(
                "{largest}, the largest label, would make the output layer {classes} wide, \
                 while {occur} labels occur: relabel the classes 0 to C-1 (a stray label is \
                 likely)"
            ),
        ));
    }
    Ok(())
}
/// Most features per node (the planner's limit).
pub const MAX_FEATURES: u32 = 1 << 20;

/// The refusal of a folder's `y.npy`, whose `shape` is not `expected`
/// (`x.npy`'s `x_shape` gives N): where `y.npy`'s rows are
/// `train_mask.npy`'s, it is `x.npy` that has too few or too many rows,
/// and the refusal names it.
pub(crate) fn y_shape_refused(
    dir: &Path,
    (x_path, x_shape): (&Path, &[u64]),
    (y_path, y_shape): (&Path, &[u64]),
    expected: String,
) -> Error {
    let mask = Npy::open(&dir.join("train_mask.npy")).ok();
    match (y_shape.first(), mask) {
        (Some(&rows), Some(mask)) if mask.shape == [rows] && x_shape.first() != Some(&rows) => {
            Error::invalid(
                x_path,
                "shape",
                format!(
                    "{x_shape:?}: {} rows, but y.npy and train_mask.npy have {rows} (a row \
                     for each vertex)",
                    x_shape[0]
                ),
            )
        }
        _ => Error::invalid(y_path, "shape", expected),
    }
}

/// The vertices and features of a folder's `x.npy` (`[N, F]`, `<f4` or
/// `<f8`, in either order), checked as every reader of a folder checks
/// them; the values are not read.
pub(crate) fn x_sizes(x: &Npy, x_path: &Path) -> Result<(u64, u32)> {
    if x.shape.len() != 2 {
        return Err(Error::invalid(
            x_path,
            "shape",
            format!("{:?}; expected [N, F]", x.shape),
        ));
    }
    let nodes = x.shape[0];
    if nodes == 0 {
        return Err(Error::invalid(x_path, "shape", "N is 0: no nodes"));
    }
    let features = u32::try_from(x.shape[1])
        .ok()
        .filter(|&f| (1..=MAX_FEATURES).contains(&f))
        .ok_or_else(|| {
            Error::invalid(
                x_path,
                "shape",
                format!("F = {} is outside 1..={MAX_FEATURES}", x.shape[1]),
            )
        })?;
    if !matches!(x.dtype, Dtype::F32 | Dtype::F64) {
        return Err(Error::invalid(
            x_path,
            "descr",
            format!(
                "{} is not a float type; expected <f4 or <f8",
                x.dtype.descr()
            ),
        ));
    }
    Ok((nodes, features))
}

/// The files a dataset folder must hold.
pub const DATASET_FILES: [&str; 6] = [
    "x.npy",
    "y.npy",
    "edge_index.npy",
    "train_mask.npy",
    "val_mask.npy",
    "test_mask.npy",
];

/// The `.npy` files in dataset folder `dir` that are not among
/// [`DATASET_FILES`] (an `edge_attr.npy`, say), which nothing reads:
/// sorted by name; none where the folder cannot be listed.
pub fn unread_arrays(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut unread: Vec<String> = entries
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".npy") && !DATASET_FILES.contains(&name.as_str()))
        .collect();
    unread.sort();
    unread
}

/// Where dataset folder `dir`'s `x.npy` is `<f8` and some of its values
/// are not 0 but round to 0 as f32, which features are trained in: a
/// line saying how many and naming the first. None where none does, and
/// where the file cannot be read (loading it says why).
pub fn flushed_features(dir: &Path) -> Option<String> {
    let npy = Npy::open(&dir.join("x.npy")).ok()?;
    if npy.shape.len() != 2 {
        return None;
    }
    let (count, first, value) = npy.flushed_to_zero()?;
    let (row, column) = npy.position2(first);
    let values = match count {
        1 => "1 value is".to_string(),
        n => format!("{n} values are"),
    };
    Some(format!(
        "x.npy: {values} not 0 but under float32's least magnitude (about 1.4e-45), and read \
         as 0 (the first: x[{row}, {column}] = {value:e}); scale the features, or write them \
         as float32, where they matter"
    ))
}

/// What [`Dataset::row_normalize_features`] did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FeatureScaling {
    /// Every row with a positive sum now sums to 1; `zero_rows` of the
    /// `rows` are all zero, and stay so (a generated graph's are not
    /// counted: 0).
    RowsSumToOne { zero_rows: u64, rows: u64 },
    /// Kept as they were: `x[row, column] = value` is negative.
    KeptSigned { row: u64, column: u32, value: f32 },
}

impl FeatureScaling {
    /// One line for a report.
    pub fn describe(&self) -> String {
        match self {
            FeatureScaling::RowsSumToOne { zero_rows: 0, .. } => {
                "rows normalised to sum 1".to_string()
            }
            FeatureScaling::RowsSumToOne { zero_rows, rows } if zero_rows == rows => format!(
                "every one of the {rows} rows is all zero: the model sees no features (is x.npy \
                 the file meant?)"
            ),
            FeatureScaling::RowsSumToOne { zero_rows, rows } => format!(
                "rows normalised to sum 1, but for {zero_rows} of the {rows}, all zero, kept \
                 as they are"
            ),
            FeatureScaling::KeptSigned { row, column, value } => format!(
                "kept as they are: x[{row}, {column}] = {value} is negative, and rows are \
                 normalised to sum 1 only when no feature of any row is (a signed row can \
                 sum to nearly 0)"
            ),
        }
    }
}

/// Everything full-graph training reads: features, labels, masks and edges.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    pub name: String,
    pub nodes: u64,
    /// Features per node, `F`.
    pub features: u32,
    /// Classes, `C`: one more than the largest label.
    pub classes: u32,
    /// `N × F` features, row-major.
    pub x: Vec<f32>,
    /// Label of each node, in `0..C`.
    pub y: Vec<i64>,
    pub train_mask: Vec<bool>,
    pub val_mask: Vec<bool>,
    pub test_mask: Vec<bool>,
    /// Edge `k` runs from `src[k]` to `dst[k]`.
    pub src: Vec<u64>,
    pub dst: Vec<u64>,
}

impl Dataset {
    /// Checks that the arrays agree with the counts, as [`Dataset::load`]
    /// does for a folder: `x` is `nodes × features` of finite values, `y`
    /// and the masks have a value a node, every label is below `classes`,
    /// and the edge lists are as long as each other and name only the
    /// graph's nodes. A dataset built in code is checked this way before
    /// it is trained ([`crate::train::prepare`]), naming the field and its
    /// length, or the first value out of range (`y[3]`, `dst[7]`), as an
    /// [`Error::InvalidInput`] whose path is the dataset's name.
    pub fn check(&self) -> Result<()> {
        let at = Path::new(&self.name);
        let nodes = self.nodes;
        let wrong = |field: &str, len: usize, expected: String| {
            Error::invalid(at, field, format!("{len} values, expected {expected}"))
        };
        let cells = nodes.checked_mul(u64::from(self.features));
        if cells != Some(self.x.len() as u64) {
            return Err(wrong(
                "x",
                self.x.len(),
                format!("nodes × features = {nodes} × {}", self.features),
            ));
        }
        check_finite(at, &self.x, |r| r as u64, self.features)?;
        for (field, len) in [
            ("y", self.y.len()),
            ("train_mask", self.train_mask.len()),
            ("val_mask", self.val_mask.len()),
            ("test_mask", self.test_mask.len()),
        ] {
            if len as u64 != nodes {
                return Err(wrong(field, len, format!("one a node ({nodes})")));
            }
        }
        if let Some((v, &label)) = self
            .y
            .iter()
            .enumerate()
            .find(|(_, &l)| l < 0 || l >= i64::from(self.classes))
        {
            return Err(Error::invalid(
                at,
                format!("y[{v}]"),
                format!(
                    "{label} is outside 0..{} (classes {})",
                    self.classes, self.classes
                ),
            ));
        }
        if self.src.len() != self.dst.len() {
            return Err(wrong(
                "dst",
                self.dst.len(),
                format!("as many as src ({})", self.src.len()),
            ));
        }
        check_edge_nodes(at, nodes, &self.src, &self.dst)
    }

    /// Reads a folder of PyG-named `.npy` files (see the module docs) and
    /// checks that every array agrees on `N`, labels are in range, features
    /// are finite and edges name existing nodes.
    pub fn load(dir: &Path) -> Result<Dataset> {
        Self::load_parts(dir, true, true).map(|(dataset, _, _)| dataset)
    }

    /// [`Dataset::load`] without the features: `x` is empty, and the rows
    /// are read from the mapped `x.npy` as they are wanted
    /// ([`FeatureRows::rows`]), checked then.
    pub fn load_without_features(dir: &Path) -> Result<(Dataset, FeatureRows)> {
        let (dataset, rows, _) = Self::load_parts(dir, false, true)?;
        Ok((dataset, rows))
    }

    /// [`Dataset::load_without_features`] without the edges either: `src`
    /// and `dst` are empty, and the edges are read from the mapped
    /// `edge_index.npy` as they are wanted ([`EdgeSource::for_each_batch`]),
    /// checked then.
    pub fn open(dir: &Path) -> Result<(Dataset, FeatureRows, EdgeSource<'static>)> {
        Self::load_parts(dir, false, false)
    }

    /// Every array checked and read, `x` too where `read_x` and the edges
    /// where `read_edges` (else their shape and type only); the sources
    /// of the features and of the edges.
    fn load_parts(
        dir: &Path,
        read_x: bool,
        read_edges: bool,
    ) -> Result<(Dataset, FeatureRows, EdgeSource<'static>)> {
        let name = path_name(dir).unwrap_or_else(|| "dataset".into());
        // A folder that is not there is said to be, not each file in it.
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(Error::invalid(
                    dir,
                    "folder",
                    "is a file, where a dataset folder of PyG-named .npy files was expected",
                ))
            }
            Err(e) => return Err(Error::io(dir, e)),
        }

        let (x_path, x) = open(dir, "x.npy")?;
        let (nodes, features) = x_sizes(&x, &x_path)?;
        let x_values = if read_x {
            let values = x.to_f32(&x_path)?;
            check_finite(&x_path, &values, |r| r as u64, features)?;
            values
        } else {
            Vec::new()
        };

        let (y_path, y) = open(dir, "y.npy")?;
        if !(y.shape == [nodes] || y.shape == [nodes, 1]) {
            // [N, C] is C targets a vertex, which `plan` sizes the output
            // layer by; training reads one label a vertex.
            let targets = match y.shape[..] {
                [n, c] if n == nodes && c > 1 => {
                    ": training reads one label a vertex, not C targets (plan sizes the output \
                     layer by them)"
                }
                _ => "",
            };
            let expected = format!(
                "{:?}; expected [{nodes}] or [{nodes}, 1] (N from x.npy){targets}",
                y.shape
            );
            return Err(y_shape_refused(
                dir,
                (&x_path, &x.shape),
                (&y_path, &y.shape),
                expected,
            ));
        }
        let labels = y.to_i64(&y_path)?;
        let mut largest = 0i64;
        for (v, &label) in labels.iter().enumerate() {
            if label < 0 {
                return Err(Error::invalid(
                    &y_path,
                    format!("y[{v}]"),
                    format!(
                        "{label}: a label is a class from 0; a node without one (PyG's -1) \
                         is left out of the masks and given any class, such as 0"
                    ),
                ));
            }
            if label >= MAX_CLASSES as i64 {
                return Err(Error::invalid(
                    &y_path,
                    format!("y[{v}]"),
                    format!("{label} is over the most classes read, {MAX_CLASSES}"),
                ));
            }
            largest = largest.max(label);
        }
        let classes = largest as u32 + 1;

        let mut masks = Vec::with_capacity(3);
        for file in ["train_mask.npy", "val_mask.npy", "test_mask.npy"] {
            let (path, mask) = open(dir, file)?;
            if mask.shape != [nodes] {
                return Err(Error::invalid(
                    &path,
                    "shape",
                    format!("{:?}; expected [{nodes}] (N from x.npy)", mask.shape),
                ));
            }
            masks.push(mask.to_bool(&path)?);
        }
        let [train_mask, val_mask, test_mask]: [Vec<bool>; 3] =
            masks.try_into().expect("three masks");

        let (edge_path, edge_index) = open(dir, "edge_index.npy")?;
        let mut edges = EdgeSource::npy(edge_path, edge_index, nodes)?;
        let (src, dst) = if read_edges {
            let lists = edges.lists()?;
            let lists = (lists.0.into_owned(), lists.1.into_owned());
            edges = EdgeSource::owned(Vec::new(), Vec::new());
            lists
        } else {
            (Vec::new(), Vec::new())
        };

        let dataset = Dataset {
            name,
            nodes,
            features,
            classes,
            x: x_values,
            y: labels,
            train_mask,
            val_mask,
            test_mask,
            src,
            dst,
        };
        Ok((
            dataset,
            FeatureRows::Npy {
                path: x_path,
                npy: x,
            },
            edges,
        ))
    }

    /// Divides each feature row by its sum where the sum is positive (Kipf and
    /// Welling's GCN preprocessing; [`Dataset::row_normalize_features`]).
    pub fn normalize_rows(x: &mut [f32], features: u32) {
        x.par_chunks_mut(features.max(1) as usize).for_each(|row| {
            let sum: f64 = row.iter().map(|&v| v as f64).sum();
            if sum > 0.0 {
                for v in row {
                    *v = (*v as f64 / sum) as f32;
                }
            }
        });
    }

    /// Divides each feature row by its sum where the sum is positive (Kipf and
    /// Welling's GCN preprocessing of bag-of-words features); rows summing to
    /// zero stay as they are. Only features with no negative value are
    /// normalised: a row of signed features (embeddings, standard-normal
    /// features) can sum to nearly zero, and dividing by that sum would blow
    /// the row up by orders of magnitude. Such features are kept as they are,
    /// and the first negative value is returned to say why.
    pub fn row_normalize_features(&mut self) -> FeatureScaling {
        let f = self.features as usize;
        if let Some(at) = self.x.par_iter().position_first(|&v| v < 0.0) {
            return FeatureScaling::KeptSigned {
                row: (at / f) as u64,
                column: (at % f) as u32,
                value: self.x[at],
            };
        }
        Self::normalize_rows(&mut self.x, self.features);
        FeatureScaling::RowsSumToOne {
            zero_rows: zero_rows(&self.x, self.features),
            rows: self.nodes,
        }
    }

    pub fn edges(&self) -> u64 {
        self.src.len() as u64
    }

    /// Nodes in each split: train, validation, test.
    pub fn split_sizes(&self) -> (u64, u64, u64) {
        let count = |mask: &[bool]| mask.iter().filter(|&&m| m).count() as u64;
        (
            count(&self.train_mask),
            count(&self.val_mask),
            count(&self.test_mask),
        )
    }

    /// Feature row of node `v`.
    pub fn row(&self, v: u64) -> &[f32] {
        let f = self.features as usize;
        &self.x[v as usize * f..(v as usize + 1) * f]
    }

    /// Writes the dataset as a folder of PyG-named `.npy` files that
    /// [`Dataset::load`] (and numpy) read back.
    pub fn save(&self, dir: &Path) -> Result<()> {
        // Removed again (where empty) if the save fails or is
        // interrupted: a failed `generate` leaves no empty folder.
        let created = crate::cleanup::CreatedDirs::create(dir).map_err(|e| Error::io(dir, e))?;
        // Every file is written under a temporary name first, and only
        // then are they renamed into place: a write that fails (a full
        // disk) leaves the folder's dataset as it was, not half replaced.
        let mut staged: Vec<(std::path::PathBuf, std::path::PathBuf)> = Vec::new();
        let written = self.stage_files(dir, &mut staged);
        let renamed = written.and_then(|()| {
            // Whole or not at all: an interruption waits for the renames.
            let _hold = crate::cleanup::hold();
            staged.iter().try_for_each(|(temporary, path)| {
                std::fs::rename(temporary, path).map_err(|e| Error::io(path, e))
            })
        });
        for (temporary, _) in &staged {
            if renamed.is_err() {
                let _ = std::fs::remove_file(temporary);
            }
            crate::cleanup::unregister(temporary);
        }
        // Failed, the folders made for it go again (`created` dropped).
        if renamed.is_ok() {
            created.keep();
        }
        renamed
    }

    /// [`Dataset::save`]'s files under temporary names, each pushed onto
    /// `staged` with its own name as it is written.
    fn stage_files(
        &self,
        dir: &Path,
        staged: &mut Vec<(std::path::PathBuf, std::path::PathBuf)>,
    ) -> Result<()> {
        let mut stage = |name: &str, descr: &str, shape: &[u64], data: &[u8]| -> Result<()> {
            let path = dir.join(name);
            let temporary = crate::npy::write_temporary(&path, descr, shape, data)?;
            staged.push((temporary, path));
            Ok(())
        };
        let n = self.nodes;
        let f32s: Vec<u8> = self.x.iter().flat_map(|v| v.to_le_bytes()).collect();
        stage("x.npy", "<f4", &[n, self.features as u64], &f32s)?;
        drop(f32s);
        let labels: Vec<u8> = self.y.iter().flat_map(|v| v.to_le_bytes()).collect();
        stage("y.npy", "<i8", &[n], &labels)?;
        let edges: Vec<u8> = self
            .src
            .iter()
            .chain(&self.dst)
            .flat_map(|&v| (v as i64).to_le_bytes())
            .collect();
        stage("edge_index.npy", "<i8", &[2, self.edges()], &edges)?;
        drop(edges);
        for (name, mask) in [
            ("train_mask.npy", &self.train_mask),
            ("val_mask.npy", &self.val_mask),
            ("test_mask.npy", &self.test_mask),
        ] {
            let bytes: Vec<u8> = mask.iter().map(|&m| m as u8).collect();
            stage(name, "|b1", &[n], &bytes)?;
        }
        Ok(())
    }

    /// Edge counts per block of a `partitions`-way vertex-range partition,
    /// as the planner sees them. An edge naming no node is said as
    /// [`Dataset::check`] says it.
    pub fn blocks(&self, partitions: u32) -> Result<BlockCounts> {
        BlockCounts::from_edges(self.nodes, &self.src, &self.dst, partitions)
            .map_err(|error| edge_error_named(self, &self.src, &self.dst, error.into()))
    }
}

/// Rows read from a file at a time by [`FeatureRows`].
const SCAN_ROWS: u64 = 1 << 14;

/// A graph's feature rows, read by the row rather than held whole: a
/// process that trains one share of a graph reads its own rows only.
#[derive(Debug)]
pub enum FeatureRows {
    /// A dataset folder's `x.npy`, mapped.
    Npy { path: PathBuf, npy: Npy },
    /// A generator spec's, drawn as [`GeneratorSpec::generate`] draws them.
    Generated(GeneratorSpec),
}

impl FeatureRows {
    /// Rows `ids`, in that order, row-major. A value that is not finite is
    /// an error naming it (`x[row, column]`), as [`Dataset::load`] gives.
    pub fn rows(&self, ids: &[u64]) -> Result<Vec<f32>> {
        match self {
            FeatureRows::Npy { path, npy } => {
                let features = npy.shape[1] as u32;
                let mut values = Vec::with_capacity(ids.len() * features as usize);
                for batch in ids.chunks(SCAN_ROWS as usize) {
                    let rows = npy.rows_f32(batch, path)?;
                    // The file's pages read are let go batch by batch.
                    npy.release();
                    check_finite(path, &rows, |r| batch[r], features)?;
                    values.extend_from_slice(&rows);
                }
                Ok(values)
            }
            FeatureRows::Generated(spec) => spec.rows(ids),
        }
    }

    /// What [`Dataset::row_normalize_features`] does to these rows,
    /// found by reading them in turn without holding them all. A file's
    /// value that is not finite is an error, as [`Dataset::load`] gives it.
    pub fn scaling(&self) -> Result<FeatureScaling> {
        // Rows all zero, of the rows: a file's (a generated graph's are
        // not counted).
        let mut zeros: Option<(u64, u64)> = None;
        let negative = match self {
            FeatureRows::Npy { path, npy } => {
                let mut negative = None;
                let rows = npy.shape[0];
                zeros = Some((0, rows));
                let features = npy.shape[1] as usize;
                for first in (0..rows).step_by(SCAN_ROWS as usize) {
                    let ids: Vec<u64> = (first..(first + SCAN_ROWS).min(rows)).collect();
                    let values = npy.rows_f32(&ids, path)?;
                    npy.release();
                    check_finite(path, &values, |r| first + r as u64, features as u32)?;
                    if let Some((zero, _)) = &mut zeros {
                        *zero += zero_rows(&values, features as u32);
                    }
                    if negative.is_none() {
                        negative = values.par_iter().position_first(|&v| v < 0.0).map(|at| {
                            (
                                first + (at / features) as u64,
                                (at % features) as u32,
                                values[at],
                            )
                        });
                    }
                }
                negative
            }
            FeatureRows::Generated(spec) => spec.first_negative(),
        };
        Ok(match negative {
            Some((row, column, value)) => FeatureScaling::KeptSigned { row, column, value },
            None => {
                let (zero_rows, rows) = zeros.unwrap_or((0, 0));
                FeatureScaling::RowsSumToOne { zero_rows, rows }
            }
        })
    }
}

/// How many of `values`' rows (of `features` each) are all zero.
fn zero_rows(values: &[f32], features: u32) -> u64 {
    values
        .par_chunks(features.max(1) as usize)
        .filter(|row| row.iter().all(|&v| v == 0.0))
        .count() as u64
}

/// Whether every value of `src` and `dst` (a dataset's edge lists, as
/// long as each other) names one of `nodes` nodes; else the first that
/// does not, as [`Dataset::check`] says it, `at` being the dataset's name.
pub(crate) fn check_edge_nodes(at: &Path, nodes: u64, src: &[u64], dst: &[u64]) -> Result<()> {
    // The largest value first (a loop the compiler vectorises), and the
    // edge to name only where one is out of range.
    let largest = src.iter().chain(dst).fold(0u64, |a, &b| a.max(b));
    if largest < nodes {
        return Ok(());
    }
    let outside = src
        .iter()
        .zip(dst)
        .enumerate()
        .find(|(_, (&s, &d))| s >= nodes || d >= nodes);
    let Some((k, (&s, &d))) = outside else {
        return Ok(());
    };
    let (field, value) = if s >= nodes { ("src", s) } else { ("dst", d) };
    Err(Error::invalid(
        at,
        format!("{field}[{k}]"),
        format!("{value} is not a node in 0..{nodes} (edge {k}: {s} -> {d})"),
    ))
}

/// `error`, from building something of `dataset`'s edges `src` and
/// `dst`, as [`Dataset::check`] says it where an edge names no node (the
/// lists are walked again only then); else as it is.
pub(crate) fn edge_error_named(dataset: &Dataset, src: &[u64], dst: &[u64], error: Error) -> Error {
    if src.len() != dst.len() {
        return error;
    }
    match check_edge_nodes(Path::new(&dataset.name), dataset.nodes, src, dst) {
        Err(named) => named,
        Ok(()) => error,
    }
}

/// Fails on the first value of `values` (rows of `features` values; its
/// `r`th row is the graph's row `row(r)`) that is not finite.
fn check_finite(
    path: &Path,
    values: &[f32],
    row: impl Fn(usize) -> u64,
    features: u32,
) -> Result<()> {
    let f = features as usize;
    match values.par_iter().position_first(|v| !v.is_finite()) {
        Some(at) => Err(Error::invalid(
            path,
            format!("x[{}, {}]", row(at / f), at % f),
            match values[at] {
                v if v.is_nan() => "NaN is not a finite number".to_string(),
                v => format!(
                    "{v} is not a finite number as float32, which features are trained in (an \
                     infinity in the file, or a <f8 value beyond ±3.4e38)"
                ),
            },
        )),
        None => Ok(()),
    }
}

/// The name a dataset or graph at `path` is known by: its last part, of
/// the path as given or, where that ends in `..` or is `.` (`--graph .`
/// inside the folder), of the path resolved. So a plan made from a folder
/// and one made from inside it name the same graph. A control character
/// (a tab, a newline) is written `_`: the name heads the summaries, and a
/// workload's name holds none.
pub(crate) fn path_name(path: &Path) -> Option<String> {
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    let name = name(path).or_else(|| name(&std::fs::canonicalize(path).ok()?))?;
    Some(
        name.chars()
            .map(|c| if c.is_control() { '_' } else { c })
            .collect(),
    )
}

/// Whether `path` is there: `false` where nothing has its name, an error
/// where a symbolic link has it but leads nowhere (to nothing, or round
/// a loop), naming the link and why, so that a broken link is not taken
/// for a file never given (`Path::exists` is `false` for both).
pub fn present(path: &Path) -> Result<bool> {
    match std::fs::symlink_metadata(path) {
        // Nothing there, or no name a file could have (a generator spec
        // too long for one): not given, as `Path::exists` says.
        Err(_) => Ok(false),
        Ok(meta) if !meta.file_type().is_symlink() => Ok(true),
        Ok(_) => match std::fs::metadata(path) {
            Ok(_) => Ok(true),
            Err(e) => {
                let target = std::fs::read_link(path)
                    .map(|t| format!(" to {}", t.display()))
                    .unwrap_or_default();
                let why = match e.kind() {
                    std::io::ErrorKind::NotFound => "which leads to nothing".to_string(),
                    _ => format!("which cannot be followed ({e})"),
                };
                Err(Error::invalid(
                    path,
                    "file",
                    format!("a symbolic link{target}, {why}"),
                ))
            }
        },
    }
}

/// Opens `dir/file`, saying which file is missing when it is.
fn open(dir: &Path, file: &str) -> Result<(std::path::PathBuf, Npy)> {
    let path = dir.join(file);
    if !present(&path)? {
        return Err(Error::invalid(
            &path,
            "file",
            format!(
                "{file} is missing; a dataset folder holds {}",
                DATASET_FILES.join(", ")
            ),
        ));
    }
    let npy = Npy::open(&path)?;
    Ok((path, npy))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::npy::tests::write_npy;
    use std::path::PathBuf;

    fn bytes<T: Copy, const W: usize>(values: &[T], to: fn(T) -> [u8; W]) -> Vec<u8> {
        values.iter().flat_map(|&v| to(v)).collect()
    }

    /// A valid 4-node dataset: 3 features, 2 classes, 5 edges.
    fn write_tiny(dir: &Path) {
        let x = [
            1.0f32, 1.0, 2.0, 0.0, 0.0, 0.0, 3.0, 0.0, 1.0, 0.5, 0.5, 0.0,
        ];
        write_npy(
            &dir.join("x.npy"),
            "<f4",
            &[4, 3],
            &bytes(&x, f32::to_le_bytes),
        );
        write_npy(
            &dir.join("y.npy"),
            "<i8",
            &[4],
            &bytes(&[0i64, 1, 1, 0], i64::to_le_bytes),
        );
        let edges = [0i64, 1, 2, 3, 3, 1, 0, 3, 2, 0];
        write_npy(
            &dir.join("edge_index.npy"),
            "<i8",
            &[2, 5],
            &bytes(&edges, i64::to_le_bytes),
        );
        write_npy(&dir.join("train_mask.npy"), "|b1", &[4], &[1, 1, 0, 0]);
        write_npy(&dir.join("val_mask.npy"), "|b1", &[4], &[0, 0, 1, 0]);
        write_npy(&dir.join("test_mask.npy"), "|u1", &[4], &[0, 0, 0, 1]);
    }

    fn load_error(dir: &Path) -> String {
        Dataset::load(dir).unwrap_err().to_string()
    }

    fn has_all(message: &str, parts: &[&str]) {
        for part in parts {
            assert!(message.contains(part), "{part:?} not in {message:?}");
        }
    }

    /// A folder given from inside it (`.`, `..`) is named as the folder;
    /// a control character in the name is written `_`.
    #[test]
    fn a_folder_given_as_dot_is_named_by_its_own_name() {
        let dir = tempfile::tempdir().unwrap();
        let graph = dir.path().join("mygraph");
        std::fs::create_dir_all(graph.join("sub")).unwrap();
        assert_eq!(path_name(&graph).as_deref(), Some("mygraph"));
        assert_eq!(
            path_name(&graph.join("sub").join("..")).as_deref(),
            Some("mygraph")
        );
        // A path that resolves to nothing has no name here.
        assert_eq!(path_name(&graph.join("missing").join("..")), None);
        let tabbed = dir.path().join("my\tgraph");
        std::fs::create_dir_all(&tabbed).unwrap();
        assert_eq!(path_name(&tabbed).as_deref(), Some("my_graph"));
    }

    #[test]
    fn signed_features_are_kept_as_they_are() {
        let dir = tempfile::tempdir().unwrap();
        write_tiny(dir.path());
        let mut d = Dataset::load(dir.path()).unwrap();
        // Row 2 sums to 0.001: dividing by it would scale the row by 1,000.
        d.x[6..9].copy_from_slice(&[0.5, -0.5, 0.001]);
        let before = d.x.clone();
        let kept = d.row_normalize_features();
        assert_eq!(
            kept,
            FeatureScaling::KeptSigned {
                row: 2,
                column: 1,
                value: -0.5
            }
        );
        assert_eq!(d.x, before);
        assert!(kept.describe().contains("x[2, 1] = -0.5 is negative"));
    }

    #[test]
    fn rows_all_zero_are_counted_and_said() {
        let dir = tempfile::tempdir().unwrap();
        write_tiny(dir.path());
        let mut d = Dataset::load(dir.path()).unwrap();
        // Row 1 is all zero, and now row 2.
        d.x[6..9].fill(0.0);
        let scaling = d.row_normalize_features();
        assert_eq!(
            scaling,
            FeatureScaling::RowsSumToOne {
                zero_rows: 2,
                rows: 4
            }
        );
        assert!(scaling.describe().contains("but for 2 of the 4, all zero"));
        d.x.fill(0.0);
        let scaling = d.row_normalize_features();
        assert!(
            scaling
                .describe()
                .contains("every one of the 4 rows is all zero"),
            "{}",
            scaling.describe()
        );
        // The scan of a file's rows counts them too.
        write_npy(&dir.path().join("x.npy"), "<f4", &[4, 3], &[0u8; 48]);
        let (_, rows, _) = Dataset::open(dir.path()).unwrap();
        assert_eq!(
            rows.scaling().unwrap(),
            FeatureScaling::RowsSumToOne {
                zero_rows: 4,
                rows: 4
            }
        );
    }

    #[test]
    fn loads_a_tiny_folder_and_row_normalises() {
        let dir = tempfile::tempdir().unwrap();
        write_tiny(dir.path());
        let mut d = Dataset::load(dir.path()).unwrap();
        assert_eq!((d.nodes, d.features, d.classes, d.edges()), (4, 3, 2, 5));
        assert_eq!(d.src, vec![0, 1, 2, 3, 3]);
        assert_eq!(d.dst, vec![1, 0, 3, 2, 0]);
        assert_eq!(d.split_sizes(), (2, 1, 1));
        assert_eq!(
            d.row_normalize_features(),
            FeatureScaling::RowsSumToOne {
                zero_rows: 1,
                rows: 4
            }
        );
        assert_eq!(d.row(0), &[0.25, 0.25, 0.5]);
        assert_eq!(d.row(1), &[0.0, 0.0, 0.0]);
        assert_eq!(d.row(2), &[0.75, 0.0, 0.25]);
        assert_eq!(d.blocks(2).unwrap().total_edges(), 5);
    }

    #[test]
    fn accepts_f64_features_i32_column_labels_and_u8_masks() {
        let dir = tempfile::tempdir().unwrap();
        write_tiny(dir.path());
        let x: Vec<f64> = (0..12).map(f64::from).collect();
        write_npy(
            &dir.path().join("x.npy"),
            "<f8",
            &[4, 3],
            &bytes(&x, f64::to_le_bytes),
        );
        write_npy(
            &dir.path().join("y.npy"),
            "<i4",
            &[4, 1],
            &bytes(&[2i32, 0, 1, 0], i32::to_le_bytes),
        );
        write_npy(
            &dir.path().join("train_mask.npy"),
            "|u1",
            &[4],
            &[1, 0, 0, 1],
        );
        let d = Dataset::load(dir.path()).unwrap();
        assert_eq!((d.classes, d.y.clone()), (3, vec![2, 0, 1, 0]));
        assert_eq!(d.row(3), &[9.0, 10.0, 11.0]);
        assert_eq!(d.train_mask, vec![true, false, false, true]);
    }

    #[test]
    fn a_stray_label_is_named_at_its_first_place() {
        let path = Path::new("y.npy");
        let refused = |labels: &[u64]| {
            stray_label(path, labels.iter().copied())
                .unwrap_err()
                .to_string()
        };
        assert!(
            refused(&[5000, 1, 2, 5000]).starts_with("y.npy: y[0]: 5000, the largest label"),
            "{}",
            refused(&[5000, 1, 2, 5000])
        );
        assert!(refused(&[1, 5000, 5000]).contains("y[1]: 5000"));
        assert!(refused(&[1, 5000]).contains("while 2 labels occur"));
        // Within the width, or with most classes present, nothing is said.
        assert!(stray_label(path, [0, 1023].into_iter()).is_ok());
        assert!(stray_label(path, 0..2000).is_ok());
        assert!(stray_label(path, std::iter::empty()).is_ok());
    }

    /// A folder that is not there is an I/O error of kind `NotFound`,
    /// naming the folder (not its first file); a file is not a folder.
    #[test]
    fn a_missing_folder_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("cora");
        match Dataset::load(&missing).unwrap_err() {
            Error::Io { path, source } => {
                assert_eq!(path, missing);
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
            }
            other => panic!("{other}"),
        }
        let file = dir.path().join("x.npy");
        std::fs::write(&file, b"").unwrap();
        let message = Dataset::open(&file).map(|_| ()).unwrap_err().to_string();
        has_all(&message, &["x.npy: folder: is a file"]);
    }

    /// Float64 features under float32's least magnitude are read as 0,
    /// and said to be: counted, the first named by row and column in
    /// either order. Zeros, subnormal float32s and other types are not.
    #[test]
    fn float64_features_read_as_0_are_said() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write_tiny(d);
        assert_eq!(flushed_features(d), None, "float32 features");
        let mut x = vec![0.0f64; 12];
        x[1] = 1e-39; // a subnormal float32, not 0
        write_npy(
            &d.join("x.npy"),
            "<f8",
            &[4, 3],
            &bytes(&x, f64::to_le_bytes),
        );
        assert_eq!(flushed_features(d), None, "zeros and a subnormal float32");
        x[5] = -1e-50;
        x[10] = 1e-300;
        write_npy(
            &d.join("x.npy"),
            "<f8",
            &[4, 3],
            &bytes(&x, f64::to_le_bytes),
        );
        let line = flushed_features(d).expect("two values read as 0");
        has_all(
            &line,
            &["x.npy: 2 values are", "read as 0", "x[1, 2] = -1e-50"],
        );
        assert_eq!(Dataset::load(d).unwrap().x[5], 0.0);
        // Column-major: flat index 5 of a [4, 3] array is row 1, column 1.
        let mut x = vec![0.0f64; 12];
        x[5] = 2e-320;
        crate::npy::tests::write_fortran_npy(
            &d.join("x.npy"),
            "<f8",
            &[4, 3],
            &bytes(&x, f64::to_le_bytes),
        );
        let line = flushed_features(d).expect("one value read as 0");
        has_all(&line, &["1 value is", "x[1, 1] = 2e-320"]);
    }

    #[test]
    fn names_the_file_field_and_value_of_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let reset = || write_tiny(d);

        reset();
        std::fs::remove_file(d.join("val_mask.npy")).unwrap();
        has_all(&load_error(d), &["val_mask.npy", "missing"]);

        // A link that leads nowhere, or round a loop, is said as such:
        // not a file never given.
        std::os::unix::fs::symlink("gone.npy", d.join("val_mask.npy")).unwrap();
        has_all(
            &load_error(d),
            &[
                "val_mask.npy",
                "symbolic link to gone.npy",
                "leads to nothing",
            ],
        );
        std::fs::remove_file(d.join("val_mask.npy")).unwrap();
        std::os::unix::fs::symlink("val_mask.npy", d.join("val_mask.npy")).unwrap();
        has_all(&load_error(d), &["val_mask.npy", "cannot be followed"]);
        std::fs::remove_file(d.join("val_mask.npy")).unwrap();
        std::os::unix::fs::symlink("train_mask.npy", d.join("val_mask.npy")).unwrap();
        assert!(
            Dataset::load(d).is_ok(),
            "a link that leads to a file is that file"
        );
        std::fs::remove_file(d.join("val_mask.npy")).unwrap();

        reset();
        let mut x = vec![0.0f32; 12];
        x[7] = f32::NAN;
        write_npy(
            &d.join("x.npy"),
            "<f4",
            &[4, 3],
            &bytes(&x, f32::to_le_bytes),
        );
        has_all(&load_error(d), &["x.npy", "x[2, 1]", "NaN"]);

        // A float64 beyond float32's range is said to be.
        reset();
        let mut x = vec![0.0f64; 12];
        x[4] = 1e300;
        write_npy(
            &d.join("x.npy"),
            "<f8",
            &[4, 3],
            &bytes(&x, f64::to_le_bytes),
        );
        has_all(
            &load_error(d),
            &[
                "x.npy",
                "x[1, 1]",
                "inf is not a finite number as float32",
                "±3.4e38",
            ],
        );

        reset();
        write_npy(&d.join("x.npy"), "<i8", &[4, 3], &[0u8; 96]);
        has_all(
            &load_error(d),
            &["x.npy", "descr", "<i8 is not a float type"],
        );

        reset();
        write_npy(
            &d.join("y.npy"),
            "<i8",
            &[3],
            &bytes(&[0i64, 1, 1], i64::to_le_bytes),
        );
        has_all(&load_error(d), &["y.npy", "shape", "[3]", "[4]"]);

        // Where y's rows are the masks', x.npy is the one refused.
        reset();
        write_npy(&d.join("x.npy"), "<f4", &[3, 3], &[0u8; 36]);
        has_all(
            &load_error(d),
            &["x.npy: shape: [3, 3]: 3 rows, but y.npy and train_mask.npy have 4"],
        );

        // C targets a vertex are plan's, not training's.
        reset();
        write_npy(&d.join("y.npy"), "<i8", &[4, 2], &[0u8; 64]);
        has_all(
            &load_error(d),
            &["y.npy", "[4, 2]", "training reads one label a vertex"],
        );

        reset();
        write_npy(
            &d.join("y.npy"),
            "<i8",
            &[4],
            &bytes(&[0i64, 1, -1, 0], i64::to_le_bytes),
        );
        has_all(
            &load_error(d),
            &["y.npy", "y[2]", "-1", "left out of the masks"],
        );

        reset();
        write_npy(&d.join("y.npy"), "<f4", &[4], &[0u8; 16]);
        has_all(
            &load_error(d),
            &["y.npy", "descr", "<f4 is not a type labels are read from"],
        );

        reset();
        write_npy(&d.join("test_mask.npy"), "|b1", &[5], &[0u8; 5]);
        has_all(&load_error(d), &["test_mask.npy", "shape", "[5]"]);

        reset();
        write_npy(&d.join("train_mask.npy"), "|u1", &[4], &[0, 3, 0, 0]);
        has_all(&load_error(d), &["train_mask.npy", "element 1", "3"]);

        reset();
        let edges = [0i64, 1, 4, 0];
        write_npy(
            &d.join("edge_index.npy"),
            "<i8",
            &[2, 2],
            &bytes(&edges, i64::to_le_bytes),
        );
        has_all(
            &load_error(d),
            &["edge_index.npy", "edge_index[1, 0]", "4 is not a node"],
        );

        reset();
        write_npy(&d.join("edge_index.npy"), "<i8", &[3, 2], &[0u8; 48]);
        has_all(&load_error(d), &["edge_index.npy", "shape", "[3, 2]"]);

        // Edges that are not integers: refused when the folder is opened,
        // before any is read.
        reset();
        write_npy(&d.join("edge_index.npy"), "<f8", &[2, 2], &[0u8; 32]);
        has_all(
            &load_error(d),
            &["edge_index.npy", "descr", "not an integer type"],
        );
        let Err(error) = Dataset::open(d) else {
            panic!("float edges opened");
        };
        has_all(
            &error.to_string(),
            &["edge_index.npy", "descr", "not an integer type"],
        );

        reset();
        write_npy(&d.join("x.npy"), "<f4", &[12], &[0u8; 48]);
        has_all(&load_error(d), &["x.npy", "shape", "[12]"]);
    }

    #[test]
    fn rows_are_read_by_the_row_and_checked_as_they_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        write_tiny(d);
        let full = Dataset::load(d).unwrap();
        let (without, rows) = Dataset::load_without_features(d).unwrap();
        assert!(without.x.is_empty());
        assert_eq!(
            Dataset {
                x: full.x.clone(),
                ..without
            },
            full
        );
        assert_eq!(
            rows.rows(&[3, 0, 3]).unwrap(),
            [full.row(3), full.row(0), full.row(3)].concat()
        );
        assert_eq!(
            rows.scaling().unwrap(),
            FeatureScaling::RowsSumToOne {
                zero_rows: 1,
                rows: 4
            }
        );
        // Without the edges either: they are read from the file.
        let (topology, _, edges) = Dataset::open(d).unwrap();
        assert!(topology.src.is_empty() && topology.dst.is_empty());
        assert_eq!(
            Dataset {
                x: full.x.clone(),
                src: full.src.clone(),
                dst: full.dst.clone(),
                ..topology
            },
            full
        );
        let (src, dst) = edges.lists().unwrap();
        assert_eq!((&*src, &*dst), (&full.src[..], &full.dst[..]));
        let mut rows_x = rows.rows(&[0, 1, 2, 3]).unwrap();
        let mut normalised = full.clone();
        normalised.row_normalize_features();
        Dataset::normalize_rows(&mut rows_x, 3);
        assert_eq!(rows_x, normalised.x);

        // Signed features, more rows than one scan reads: the scan finds
        // the first negative value, as the pass over the whole does.
        let n = SCAN_ROWS as usize + 5;
        let mut x = vec![1.0f32; n * 3];
        x[(SCAN_ROWS as usize + 2) * 3 + 1] = -2.0;
        x[(SCAN_ROWS as usize + 4) * 3] = -3.0;
        let write_x = |x: &[f32]| {
            write_npy(
                &d.join("x.npy"),
                "<f4",
                &[n as u64, 3],
                &bytes(x, f32::to_le_bytes),
            );
            for file in ["train_mask.npy", "val_mask.npy", "test_mask.npy"] {
                write_npy(&d.join(file), "|u1", &[n as u64], &vec![0; n]);
            }
            write_npy(
                &d.join("y.npy"),
                "<i8",
                &[n as u64],
                &bytes(&vec![0i64; n], i64::to_le_bytes),
            );
        };
        write_x(&x);
        let mut whole = Dataset::load(d).unwrap();
        let (_, rows) = Dataset::load_without_features(d).unwrap();
        let expected = FeatureScaling::KeptSigned {
            row: SCAN_ROWS + 2,
            column: 1,
            value: -2.0,
        };
        assert_eq!(rows.scaling().unwrap(), expected);
        assert_eq!(whole.row_normalize_features(), expected);

        // A value that is not finite, past the first negative one: named by
        // the scan and by a read of its row, not by reads of other rows.
        x[(n - 1) * 3 + 2] = f32::INFINITY;
        write_x(&x);
        let (_, rows) = Dataset::load_without_features(d).unwrap();
        let last = (n - 1) as u64;
        for message in [
            rows.scaling().unwrap_err().to_string(),
            rows.rows(&[0, last]).unwrap_err().to_string(),
            load_error(d),
        ] {
            has_all(&message, &["x.npy", &format!("x[{last}, 2]"), "inf"]);
        }
        assert_eq!(rows.rows(&[0, 1]).unwrap(), vec![1.0; 6]);
    }

    /// The folder holding `cora/`: `FATEPLAN_DATA`, else the repository's
    /// shared data beside the checkout.
    pub fn data_root() -> Option<PathBuf> {
        let root = std::env::var_os("FATEPLAN_DATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data"))
            });
        root.join("cora").is_dir().then_some(root)
    }

    #[test]
    fn save_then_load_round_trips() {
        let graph =
            crate::generate::GeneratorSpec::parse("planted:nodes=300,val=50,test=100,seed=4")
                .unwrap()
                .generate()
                .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join(&graph.name);
        graph.save(&folder).unwrap();
        let back = Dataset::load(&folder).unwrap();
        assert_eq!(back, graph);
    }

    #[test]
    fn loads_cora() {
        let Some(root) = data_root() else {
            eprintln!("skipped: Cora not found (set FATEPLAN_DATA)");
            return;
        };
        let mut cora = Dataset::load(&root.join("cora")).unwrap();
        assert_eq!(
            (cora.name.as_str(), cora.nodes, cora.features, cora.classes),
            ("cora", 2708, 1433, 7)
        );
        assert_eq!(cora.edges(), 10556);
        assert_eq!(cora.split_sizes(), (140, 500, 1000));
        // edge_index is stored in Fortran order: the first edges are 0 -> 633, 0 -> 1862.
        assert_eq!((cora.src[0], cora.dst[0]), (0, 633));
        assert_eq!((cora.src[1], cora.dst[1]), (0, 1862));
        assert!(cora.x.iter().all(|&v| v == 0.0 || v == 1.0));
        cora.row_normalize_features();
        for v in 0..cora.nodes {
            let sum: f32 = cora.row(v).iter().sum();
            assert!(
                (sum - 1.0).abs() < 1e-5 || sum == 0.0,
                "row {v} sums to {sum}"
            );
        }
    }
}

//! Graphs for planning: a folder of PyG-named `.npy` files, an edge-list
//! text file, or the edges of a generator spec.

use std::path::{Path, PathBuf};

use fateplan_planner::blocks::BlockCounts;

use crate::dataset::{x_sizes, y_shape_refused, MAX_CLASSES};
use crate::edges::EdgeSource;
use crate::generate::GeneratorSpec;
use crate::memory::Available;
use crate::npy::Npy;
use crate::{Error, Result};

/// Most edges an edge-list text file may hold.
pub const MAX_TEXT_EDGES: usize = 1 << 32;

/// A graph's topology and, when known, its feature and class counts.
///
/// The edges are read from where they are, a batch at a time, each time
/// they are wanted: a folder's mapped `edge_index.npy` and an R-MAT spec's
/// draws are never held whole (a text file's edges and a planted spec's
/// are).
#[derive(Debug)]
pub struct GraphData {
    pub name: String,
    pub nodes: u64,
    pub edges: EdgeSource<'static>,
    pub features: Option<u32>,
    pub classes: Option<u32>,
    /// Whether `classes` counts `y.npy`'s columns (shape `[N, C]`: C
    /// targets a vertex, as ogbn-proteins' 112) rather than one more than
    /// its largest label. `plan` sizes the output layer by them; `train`
    /// reads one label a vertex.
    pub targets: bool,
    /// Where more than half of a file's vertices have no edge (ids with
    /// gaps: numbered from 10^9, or hashes), what says so, naming where
    /// the count comes from: a command warns of it.
    pub gaps: Option<String>,
}

/// Where `nodes` vertices with `edges` edges leave more than half of
/// them without one (an edge touches two at most), how many at least.
fn without_edges(nodes: u64, edges: u64) -> Option<u64> {
    let without = nodes.saturating_sub(edges.saturating_mul(2));
    (without > nodes / 2).then_some(without)
}

/// The warning [`GraphData::gaps`] holds, from where the count comes.
fn gaps_note(nodes: u64, edges: u64, from: &NodesFrom) -> Option<String> {
    let without = without_edges(nodes, edges)?;
    Some(format!(
        "{}: {}: {} makes {nodes} vertices; at least {without} of them have no edge (the graph \
         has {edges}): number the vertices from 0 without gaps",
        from.path.display(),
        from.field,
        from.value
    ))
}

/// Where a graph's vertex count comes from, as a refusal of the count
/// names it: the file (or spec), the line, element or field there, and
/// what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodesFrom {
    path: PathBuf,
    field: String,
    value: String,
}

impl GraphData {
    /// `source` as the `--graph` of `plan`, `compare` and `partition` reads
    /// it (`train`, which needs the features, reads it with
    /// `train::load_graph`): a file or folder ([`GraphData::load`]), or else a generator spec (`rmat:...`,
    /// `planted:...`, see [`GeneratorSpec::parse`]), whose edges are the
    /// ones `fateplan train --graph SPEC` trains on, with the spec's
    /// feature and class counts (the features themselves are not drawn).
    pub fn open(source: &str) -> Result<GraphData> {
        Self::open_holding(source, 0, "")
    }

    /// [`GraphData::open`] for a command that then holds
    /// `bytes_per_vertex` bytes for each vertex (`what` says what holds
    /// them, as in "min-cut partitioning onto 2 GPUs"): a graph whose
    /// vertices take more than the memory available
    /// ([`crate::memory::available`]) is refused before they are taken,
    /// naming where its vertex count comes from: a text file's line and
    /// the vertex id on it, an `edge_index.npy` element, `x.npy`'s shape
    /// or a spec's size (a spec is checked before its edges are drawn).
    pub fn open_holding(source: &str, bytes_per_vertex: u64, what: &str) -> Result<GraphData> {
        Self::open_within(source, bytes_per_vertex, what, crate::memory::available)
    }

    /// [`GraphData::open_holding`] within the memory `available` says.
    fn open_within(
        source: &str,
        bytes_per_vertex: u64,
        what: &str,
        available: impl FnOnce() -> Option<Available>,
    ) -> Result<GraphData> {
        let holding = Holding {
            bytes_per_vertex,
            what,
        };
        let path = Path::new(source);
        if crate::dataset::present(path)? {
            let (mut graph, from) = Self::load_counted(path)?;
            holding.check(graph.nodes, graph.edge_count(), &from, available)?;
            graph.gaps = gaps_note(graph.nodes, graph.edge_count(), &from);
            return Ok(graph);
        }
        if !source.contains(':') {
            return Err(Error::invalid(
                path,
                "graph",
                "no such file or folder, nor a generator spec (rmat:... or planted:...)",
            ));
        }
        let spec = GeneratorSpec::parse(source)?;
        let (nodes, _, edges) = spec.sizes();
        let (field, value) = match &spec {
            GeneratorSpec::Rmat(s) => ("scale", format!("scale={}", s.scale)),
            GeneratorSpec::Planted(s) => ("nodes", format!("nodes={}", s.nodes)),
        };
        let from = NodesFrom {
            path: PathBuf::from(spec.to_string()),
            field: field.into(),
            value,
        };
        // Drawing the edges holds bytes of its own (labels, and a planted
        // graph's edges) before the command holds anything, and an R-MAT
        // spec's relabelling while the command reads them.
        let available = available();
        let relabelling = spec.relabelling_bytes_per_vertex();
        let what = format!("{what} (with the spec's relabelling of its vertices)");
        let holding = match bytes_per_vertex {
            0 => holding,
            _ if relabelling > 0 => Holding {
                bytes_per_vertex: bytes_per_vertex + relabelling,
                what: &what,
            },
            _ => holding,
        };
        holding.check(nodes, edges, &from, || available.clone())?;
        if let Some(available) = &available {
            spec.check_opens_in(available)?;
        }
        let (features, classes) = spec.features_and_classes();
        let (graph, edges) = spec.with_features(1).open()?;
        Ok(GraphData {
            name: graph.name,
            nodes: graph.nodes,
            edges,
            features: Some(features),
            classes: Some(classes),
            targets: false,
            gaps: None,
        })
    }

    /// Reads a folder with `edge_index.npy` (shape `[2, E]`: sources then
    /// destinations) and optionally `x.npy` (`[N, F]`) and `y.npy` (`[N]`), or
    /// an edge-list text file (`src dst` per line, `#` comments; a line with
    /// more fields, such as a weight, is refused).
    pub fn load(path: &Path) -> Result<GraphData> {
        Ok(Self::load_counted(path)?.0)
    }

    /// [`GraphData::load`], and where its vertex count comes from.
    fn load_counted(path: &Path) -> Result<(GraphData, NodesFrom)> {
        let name = crate::dataset::path_name(path)
            .map(|n| n.trim_end_matches(".txt").to_string())
            .unwrap_or_else(|| "graph".into());
        if path.is_dir() {
            Self::load_npy_folder(path, name)
        } else {
            Self::load_edge_list(path, name)
        }
    }

    fn load_npy_folder(dir: &Path, name: String) -> Result<(GraphData, NodesFrom)> {
        let edge_path = dir.join("edge_index.npy");
        if !crate::dataset::present(&edge_path)? {
            return Err(Error::invalid(
                &edge_path,
                "file",
                "edge_index.npy is missing; a graph folder holds at least edge_index.npy, and \
                 x.npy and y.npy where it has them (a dataset to train, all of x, y, \
                 edge_index, train_mask, val_mask and test_mask)",
            ));
        }
        let edge_index = Npy::open(&edge_path)?;
        let mut features = None;
        let mut x_shape = None;
        let y_path = dir.join("y.npy");
        let y = if crate::dataset::present(&y_path)? {
            Some(Npy::open(&y_path)?)
        } else {
            None
        };
        let x_path = dir.join("x.npy");
        let (edges, nodes, from) = if crate::dataset::present(&x_path)? {
            // Only x's shape and type are read (in either order): the
            // sizes are what planning needs.
            let x = Npy::open(&x_path)?;
            let (nodes, f) = x_sizes(&x, &x_path)?;
            features = Some(f);
            x_shape = Some(x.shape.clone());
            // An end past x's rows is an error when the edges are read.
            let from = NodesFrom {
                path: x_path.clone(),
                field: "shape".into(),
                value: format!("{:?}", x.shape),
            };
            (
                EdgeSource::npy(edge_path.clone(), edge_index, nodes)?,
                nodes,
                from,
            )
        } else {
            let (mut edges, mut nodes, [row, column]) =
                EdgeSource::npy_counting_nodes(edge_path.clone(), edge_index)?;
            let mut from = NodesFrom {
                path: edge_path.clone(),
                field: format!("edge_index[{row}, {column}]"),
                value: format!("vertex id {}", nodes - 1),
            };
            // Labelled vertices past the largest end have no edges, but
            // are vertices: y's rows, where more, are N.
            if let Some(y) = &y {
                if let [rows, ..] = y.shape[..] {
                    if y.shape.len() <= 2 && rows > nodes {
                        nodes = rows;
                        edges.widen_nodes(rows, "N from y.npy");
                        from = NodesFrom {
                            path: y_path.clone(),
                            field: "shape".into(),
                            value: format!("{:?}", y.shape),
                        };
                    }
                }
            }
            (edges, nodes, from)
        };
        let mut classes = None;
        let mut targets = false;
        if let Some(y) = y {
            // A label per vertex, as `train` reads them, or a target per
            // vertex and task ([N, C]: C outputs, as ogbn-proteins' 112).
            let n_from = if features.is_some() {
                "x.npy"
            } else {
                "edge_index.npy's largest vertex id, or y's rows"
            };
            let tasks = match y.shape[..] {
                [n] | [n, 1] if n == nodes => None,
                [n, c] if n == nodes && c > 1 => Some(c),
                _ => {
                    let expected = format!(
                        "{:?}; expected [{nodes}] or [{nodes}, 1], or [{nodes}, C] for C targets \
                         a vertex (N from {n_from})",
                        y.shape
                    );
                    return Err(match &x_shape {
                        Some(x_shape) => {
                            y_shape_refused(dir, (&x_path, x_shape), (&y_path, &y.shape), expected)
                        }
                        None => Error::invalid(&y_path, "shape", expected),
                    });
                }
            };
            targets = tasks.is_some();
            classes = Some(match tasks {
                Some(tasks) => u32::try_from(tasks)
                    .ok()
                    .filter(|&c| c <= MAX_CLASSES)
                    .ok_or_else(|| {
                        Error::invalid(
                            &y_path,
                            "shape",
                            format!("C = {tasks} targets is over {MAX_CLASSES}"),
                        )
                    })?,
                None => {
                    let mut most = 0u64;
                    for k in 0..y.len() as usize {
                        let label = y.int(k, &y_path)?;
                        if label >= MAX_CLASSES as u64 {
                            return Err(Error::invalid(
                                &y_path,
                                format!("y[{k}]"),
                                format!("{label} is outside 0..{MAX_CLASSES}"),
                            ));
                        }
                        most = most.max(label);
                    }
                    // Refused as `train` refuses it: a stray label, not
                    // thousands of classes.
                    if most >= crate::dataset::SPARSE_LABELS_WIDTH {
                        let labels = (0..y.len() as usize).map(|k| y.int(k, &y_path).unwrap_or(0));
                        crate::dataset::stray_label(&y_path, labels)?;
                    }
                    most as u32 + 1
                }
            });
        }
        let graph = GraphData {
            name,
            nodes,
            edges,
            features,
            classes,
            targets,
            gaps: None,
        };
        Ok((graph, from))
    }

    fn load_edge_list(path: &Path, name: String) -> Result<(GraphData, NodesFrom)> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        if bytes.starts_with(b"\x93NUMPY") {
            return Err(Error::invalid(
                path,
                "graph",
                "a .npy file; --graph takes the folder holding edge_index.npy (and x.npy, \
                 y.npy and the masks), or an edge-list text file",
            ));
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let line = e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            Error::invalid(
                path,
                "graph",
                format!(
                    "line {line}: not text (byte {at} is not UTF-8); an edge list is text, \
                     `src dst` per line"
                ),
            )
        })?;
        let mut src = Vec::new();
        let mut dst = Vec::new();
        // The largest id, and the line that first names it.
        let mut largest: Option<(u64, usize)> = None;
        for (number, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut fields = line
                .split(|c: char| c.is_whitespace() || c == ',')
                .filter(|f| !f.is_empty());
            let mut vertex = |what: &str| -> Result<u64> {
                let field = fields.next().ok_or_else(|| {
                    Error::invalid(
                        path,
                        format!("line {}", number + 1),
                        format!("{line:?} has no {what}"),
                    )
                })?;
                field.parse().map_err(|_| {
                    Error::invalid(
                        path,
                        format!("line {}", number + 1),
                        format!("{what} {field:?} is not a vertex id"),
                    )
                })
            };
            let (source, destination) = (vertex("source")?, vertex("destination")?);
            let most = source.max(destination);
            if largest.is_none_or(|(before, _)| most > before) {
                largest = Some((most, number + 1));
            }
            src.push(source);
            dst.push(destination);
            if let Some(extra) = fields.next() {
                return Err(Error::invalid(
                    path,
                    format!("line {}", number + 1),
                    format!(
                        "{line:?} has a third field {extra:?}: a line is one edge, `source \
                         destination` (edge weights are not read; keep the first two columns)"
                    ),
                ));
            }
            if src.len() > MAX_TEXT_EDGES {
                return Err(Error::invalid(
                    path,
                    "edges",
                    format!("more than {MAX_TEXT_EDGES}"),
                ));
            }
        }
        let Some((most, line)) = largest else {
            return Err(Error::invalid(path, "edges", "the file has no edges"));
        };
        let nodes = most.checked_add(1).ok_or_else(|| {
            Error::invalid(
                path,
                format!("line {line}"),
                format!("vertex id {most} is past the last vertex fateplan counts"),
            )
        })?;
        let graph = GraphData {
            name,
            nodes,
            edges: EdgeSource::owned(src, dst),
            features: None,
            classes: None,
            targets: false,
            gaps: None,
        };
        let from = NodesFrom {
            path: path.to_path_buf(),
            field: format!("line {line}"),
            value: format!("vertex id {most}"),
        };
        Ok((graph, from))
    }

    /// Edges in all.
    pub fn edge_count(&self) -> u64 {
        self.edges.len()
    }

    /// Edge counts per block of a `partitions`-way vertex-range
    /// partition, from one reading of the edges.
    pub fn blocks(&self, partitions: u32) -> Result<BlockCounts> {
        let mut counts = self.blocks_of(&[partitions])?;
        Ok(counts.pop().expect("one count asked for"))
    }

    /// [`GraphData::blocks`] for each of the partition counts `each`, in
    /// that order, from one reading of the edges.
    pub fn blocks_of(&self, each: &[u32]) -> Result<Vec<BlockCounts>> {
        let mut counts = each
            .iter()
            .map(|&partitions| BlockCounts::empty(self.nodes, partitions))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let mut first = 0u64;
        self.edges.for_each_batch(&mut |src, dst| {
            BlockCounts::count_each(&mut counts, first, src, dst)?;
            first += src.len() as u64;
            Ok(())
        })?;
        Ok(counts)
    }
}

/// What a command holds for each vertex of the graph it reads.
struct Holding<'a> {
    bytes_per_vertex: u64,
    /// What holds them, as an error says it.
    what: &'a str,
}

impl Holding<'_> {
    /// Refuses a graph of `nodes` vertices and `edges` edges whose bytes
    /// held are more than the memory `available` says (read only where
    /// anything is held; no check where it says nothing), naming where
    /// the count comes from; where most of the vertices have no edge,
    /// says so (ids with gaps: numbered from 10^9, or hashes).
    fn check(
        &self,
        nodes: u64,
        edges: u64,
        from: &NodesFrom,
        available: impl FnOnce() -> Option<Available>,
    ) -> Result<()> {
        if self.bytes_per_vertex == 0 {
            return Ok(());
        }
        let Some(available) = available() else {
            return Ok(());
        };
        let needed = nodes.saturating_mul(self.bytes_per_vertex);
        let each = format!("{} bytes a vertex", self.bytes_per_vertex);
        let Some(shortfall) = available.shortfall(needed, &each) else {
            return Ok(());
        };
        let gaps = match without_edges(nodes, edges) {
            Some(without) => format!(
                "; at least {without} of them have no edge (the graph has {edges}): number the \
                 vertices from 0 without gaps"
            ),
            None => String::new(),
        };
        Err(Error::TooLarge {
            path: from.path.clone(),
            field: from.field.clone(),
            refusal: shortfall.refusal(format!(
                "{} makes {nodes} vertices: {} takes {shortfall}{gaps}",
                from.value, self.what
            )),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::npy::tests::write_npy;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("fateplan-graph-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn x_and_y_are_checked_as_train_checks_them() {
        use crate::npy::tests::write_fortran_npy;
        let dir = scratch("xy");
        let ints =
            |values: &[i64]| -> Vec<u8> { values.iter().flat_map(|v| v.to_le_bytes()).collect() };
        write_npy(
            &dir.join("edge_index.npy"),
            "<i8",
            &[2, 3],
            &ints(&[0, 1, 2, 1, 2, 3]),
        );
        let (x, y) = (dir.join("x.npy"), dir.join("y.npy"));
        let refused = |expected: &str| {
            let message = GraphData::load(&dir).unwrap_err().to_string();
            assert!(
                message.contains(expected),
                "{message}\nexpected: {expected}"
            );
        };
        // Fortran order is read (only the shape is), as `train` reads it.
        write_fortran_npy(&x, "<f4", &[4, 5], &[0u8; 80]);
        write_npy(&y, "<i8", &[4, 1], &ints(&[0, 2, 1, 0]));
        let g = GraphData::load(&dir).unwrap();
        assert_eq!((g.nodes, g.features, g.classes), (4, Some(5), Some(3)));
        write_npy(&x, "<i8", &[4, 5], &[0u8; 160]);
        refused(&format!("{}: descr: <i8 is not a float type", x.display()));
        write_npy(&x, "<f4", &[4, 0], &[]);
        refused(&format!("{}: shape: F = 0 is outside 1..=", x.display()));
        write_npy(&x, "<f4", &[4, 5], &[0u8; 80]);
        // A label per vertex, no more and no fewer.
        for (shape, labels) in [(vec![3], vec![0, 1, 2]), (vec![2, 2], vec![0, 1, 2, 3])] {
            write_npy(&y, "<i8", &shape, &ints(&labels));
            refused(&format!(
                "{}: shape: {shape:?}; expected [4] or [4, 1], or [4, C] for C targets a vertex \
                 (N from x.npy)",
                y.display()
            ));
        }
        write_npy(&y, "<i8", &[], &ints(&[1]));
        refused("shape: []; expected [4] or [4, 1]");
        write_npy(&y, "<i8", &[4], &ints(&[0, 1 << 21, 1, 0]));
        refused(&format!("{}: y[1]: 2097152 is outside 0..", y.display()));
        // A target per vertex and task: as many outputs as tasks.
        write_npy(&y, "<i8", &[4, 3], &ints(&[0; 12]));
        let g = GraphData::load(&dir).unwrap();
        assert_eq!((g.classes, g.targets), (Some(3), true));
        // Where y's rows are the masks', x.npy is the one refused.
        write_npy(&y, "<i8", &[4], &ints(&[0, 1, 1, 0]));
        assert!(!GraphData::load(&dir).unwrap().targets);
        write_npy(&dir.join("train_mask.npy"), "|b1", &[4], &[1, 1, 0, 0]);
        write_npy(&x, "<f4", &[3, 5], &[0u8; 60]);
        refused(&format!(
            "{}: shape: [3, 5]: 3 rows, but y.npy and train_mask.npy have 4",
            x.display()
        ));
        std::fs::remove_file(dir.join("train_mask.npy")).unwrap();
        refused(&format!("{}: shape: [4]; expected [3]", y.display()));
        write_npy(&x, "<f4", &[4, 5], &[0u8; 80]);
        // Without x, N is the largest end's, or y's rows where more (the
        // last vertices have no edge).
        std::fs::remove_file(&x).unwrap();
        write_npy(&y, "<i8", &[3], &ints(&[0, 1, 2]));
        refused("expected [4] or [4, 1], or [4, C] for C targets a vertex (N from edge_index.npy's largest vertex id, or y's rows)");
        write_npy(&y, "<i8", &[6], &ints(&[0, 1, 2, 0, 1, 4]));
        let g = GraphData::load(&dir).unwrap();
        assert_eq!((g.nodes, g.classes), (6, Some(5)));
        assert_eq!(g.blocks(3).unwrap().total_edges(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ids_with_gaps_are_told_where_their_count_comes_from() {
        let dir = scratch("gaps");
        let path = dir.join("edges.txt");
        std::fs::write(&path, "0 1\n1 4000000000\n").unwrap();
        let graph = GraphData::open(path.to_str().unwrap()).unwrap();
        let gaps = graph.gaps.expect("most vertices have no edge");
        assert_eq!(
            gaps,
            format!(
                "{}: line 2: vertex id 4000000000 makes 4000000001 vertices; at least \
                 3999999997 of them have no edge (the graph has 2): number the vertices from 0 \
                 without gaps",
                path.display()
            )
        );
        // Half without an edge is no sign of gaps: 8 vertices, 2 edges.
        std::fs::write(&path, "0 1\n2 7\n").unwrap();
        assert_eq!(GraphData::open(path.to_str().unwrap()).unwrap().gaps, None);
        std::fs::write(&path, "0 1\n2 8\n").unwrap();
        assert!(GraphData::open(path.to_str().unwrap())
            .unwrap()
            .gaps
            .is_some());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_a_pyg_folder() {
        let dir = scratch("pyg");
        let edges: Vec<u8> = [0i64, 1, 2, 1, 2, 0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        write_npy(&dir.join("edge_index.npy"), "<i8", &[2, 3], &edges);
        write_npy(&dir.join("x.npy"), "<f4", &[4, 5], &[0u8; 80]);
        let labels: Vec<u8> = [0i64, 2, 1, 0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        write_npy(&dir.join("y.npy"), "<i8", &[4], &labels);
        let g = GraphData::load(&dir).unwrap();
        assert_eq!((g.nodes, g.features, g.classes), (4, Some(5), Some(3)));
        let (src, dst) = g.edges.lists().unwrap();
        assert_eq!((&*src, &*dst), (&[0, 1, 2][..], &[1, 2, 0][..]));
        assert_eq!(g.blocks(2).unwrap().total_edges(), 3);
        // Fewer rows in x than an end names: the reading says which end.
        write_npy(&dir.join("x.npy"), "<f4", &[2, 5], &[0u8; 40]);
        write_npy(&dir.join("y.npy"), "<i8", &[2], &labels[..16]);
        let g = GraphData::load(&dir).unwrap();
        let error = g.blocks(1).unwrap_err().to_string();
        assert!(
            error.contains("edge_index.npy")
                && error.contains("edge_index[0, 2]")
                && error.contains("2 is not a node in 0..2 (N from x.npy)"),
            "{error}"
        );
        // No x: the vertices run to the largest end; a negative end is
        // named.
        std::fs::remove_file(dir.join("x.npy")).unwrap();
        std::fs::remove_file(dir.join("y.npy")).unwrap();
        let ends: Vec<u8> = [0i64, 6, 2, 1, 2, 0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        write_npy(&dir.join("edge_index.npy"), "<i8", &[2, 3], &ends);
        let g = GraphData::load(&dir).unwrap();
        assert_eq!((g.nodes, g.features, g.classes), (7, None, None));
        assert_eq!(g.blocks(7).unwrap().block_edges(2, 6), 1);
        let negative: Vec<u8> = [0i64, 6, 2, 1, -3, 0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        write_npy(&dir.join("edge_index.npy"), "<i8", &[2, 3], &negative);
        let error = GraphData::load(&dir).unwrap_err().to_string();
        assert!(
            error.contains("edge_index[1, 1]") && error.contains("-3 is negative"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn opens_generator_specs_with_the_edges_train_uses() {
        for spec in [
            "rmat:scale=8,features=24,classes=5,seed=3",
            "planted:nodes=300,classes=4,features=12,degree=6,val=50,test=100,seed=2",
        ] {
            let g = GraphData::open(spec).unwrap();
            let full = GeneratorSpec::parse(spec).unwrap().generate().unwrap();
            let (src, dst) = g.edges.lists().unwrap();
            assert_eq!((&*src, &*dst), (&full.src[..], &full.dst[..]), "{spec}");
            let each = g.blocks_of(&[3, 1, 5]).unwrap();
            for (counts, p) in each.into_iter().zip([3, 1, 5]) {
                assert_eq!(
                    counts,
                    BlockCounts::from_edges(full.nodes, &full.src, &full.dst, p).unwrap(),
                    "{spec} {p}"
                );
            }
            assert_eq!(g.blocks(3).unwrap().partitions, 3);
            assert_eq!(g.nodes, full.nodes, "{spec}");
            assert_eq!(
                (g.features, g.classes),
                (Some(full.features), Some(full.classes)),
                "{spec}"
            );
            assert_eq!(g.name, full.name, "{spec}");
        }
        let missing = GraphData::open("no-such-graph").unwrap_err().to_string();
        assert!(
            missing.contains("no-such-graph") && missing.contains("generator spec"),
            "{missing}"
        );
        let bad = GraphData::open("rmat:scale=0").unwrap_err().to_string();
        assert!(bad.contains("scale"), "{bad}");
    }

    /// A vertex count that takes more memory than is available, for what
    /// holds its vertices, is refused naming where it comes from.
    #[test]
    fn a_vertex_count_over_the_memory_available_is_refused_naming_its_source() {
        let dir = scratch("count");
        let figure = |bytes: u64| {
            move || {
                Some(Available {
                    bytes,
                    source: "a test's figure".into(),
                })
            }
        };
        let open = |source: &std::path::Path, bytes: u64| {
            GraphData::open_within(source.to_str().unwrap(), 24, "partitioning", figure(bytes))
        };
        // One large id in a text file: its line (the first naming it).
        let text = dir.join("e.txt");
        std::fs::write(&text, "0 1\n# ids\n4000000000 1\n2 4000000000\n").unwrap();
        let message = open(&text, 1 << 30).unwrap_err().to_string();
        assert_eq!(
            message,
            format!(
                "{}: line 3: vertex id 4000000000 makes 4000000001 vertices: partitioning takes \
                 at least 89.4 GiB in memory (24 bytes a vertex), more than the 1.0 GiB \
                 available (a test's figure); at least 3999999995 of them have no edge (the \
                 graph has 3): number the vertices from 0 without gaps",
                text.display()
            )
        );
        // Read without holding its vertices, the graph is as given.
        let g = GraphData::open(text.to_str().unwrap()).unwrap();
        assert_eq!((g.nodes, g.edge_count()), (4_000_000_001, 3));
        // Where the vertices fit, nothing is said.
        std::fs::write(&text, "0 1\n1 2\n").unwrap();
        assert_eq!(open(&text, 72).unwrap().nodes, 3);
        let message = open(&text, 71).unwrap_err().to_string();
        assert!(
            message.contains("line 2: vertex id 2 makes 3 vertices") && !message.contains("gaps"),
            "{message}"
        );
        // A folder without x.npy: the element of the largest end.
        let folder = dir.join("pyg");
        std::fs::create_dir_all(&folder).unwrap();
        let ends: Vec<u8> = [0i64, 1, 2, 1, 2, 4_000_000_000]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        write_npy(&folder.join("edge_index.npy"), "<i8", &[2, 3], &ends);
        let message = open(&folder, 1 << 30).unwrap_err().to_string();
        assert!(
            message.contains(
                "edge_index.npy: edge_index[1, 2]: vertex id 4000000000 makes \
                 4000000001 vertices: partitioning takes at least 89.4 GiB"
            ),
            "{message}"
        );
        // With x.npy: its shape (a sparse file: only its header is written).
        let x = folder.join("x.npy");
        write_npy(&x, "<f4", &[4_000_000_001, 1], &[]);
        let file = std::fs::OpenOptions::new().write(true).open(&x).unwrap();
        let header = file.metadata().unwrap().len();
        file.set_len(header + 4_000_000_001 * 4).unwrap();
        let message = open(&folder, 1 << 30).unwrap_err().to_string();
        assert!(
            message.contains("x.npy: shape: [4000000001, 1] makes 4000000001 vertices"),
            "{message}"
        );
        // A spec, before its edges are drawn.
        let spec = "planted:nodes=300,features=4,degree=4,val=50,test=100";
        let message = GraphData::open_within(spec, 24, "partitioning", figure(7199))
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("nodes: nodes=300 makes 300 vertices: partitioning"),
            "{message}"
        );
        // Drawn, its 300 nodes and 1,200 edges take 43,200 bytes at most.
        let message = GraphData::open_within(spec, 24, "partitioning", figure(43_199))
            .unwrap_err()
            .to_string();
        assert!(
            message.starts_with("planted:nodes=300,")
                && message.contains(": size: the graph takes at least")
                && message.contains("300 nodes and 1200 edges, without the features"),
            "{message}"
        );
        assert!(GraphData::open_within(spec, 24, "partitioning", figure(43_200)).is_ok());
        // Planned (nothing held per vertex after), an R-MAT spec too large
        // to draw is refused, not ended by a failed allocation.
        let message = GraphData::open_within("rmat:scale=29,features=1", 0, "", figure(3 << 30))
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("rmat:") && message.contains("size: the graph takes at least 6.0 GiB"),
            "{message}"
        );
        // Held per vertex while its edges are drawn, a scrambled R-MAT
        // spec's relabelling (8 bytes a vertex) counts too: 1,024 vertices
        // at 24 + 8 bytes.
        let rmat = "rmat:scale=10,features=1";
        let message = GraphData::open_within(rmat, 24, "partitioning", figure(32_767))
            .unwrap_err()
            .to_string();
        assert!(
            message.contains(
                "makes 1024 vertices: partitioning (with the spec's relabelling of its vertices) \
                 takes"
            ) && message.contains("(32 bytes a vertex)"),
            "{message}"
        );
        assert!(GraphData::open_within(rmat, 24, "partitioning", figure(32_768)).is_ok());
        let unscrambled = "rmat:scale=10,features=1,scramble=false";
        assert!(GraphData::open_within(unscrambled, 24, "partitioning", figure(24_576)).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn reads_an_edge_list_and_names_bad_lines() {
        let dir = scratch("text");
        let path = dir.join("g.txt");
        // Binary files: a .npy is pointed to its folder, others named.
        write_npy(&path, "<i8", &[2, 1], &[0u8; 16]);
        let message = GraphData::load(&path).unwrap_err().to_string();
        assert!(
            message.contains("a .npy file; --graph takes the folder"),
            "{message}"
        );
        std::fs::write(&path, b"0 1\n1 2\n\xff\xfe\n").unwrap();
        let message = GraphData::load(&path).unwrap_err().to_string();
        assert!(message.contains("line 3: not text (byte 8"), "{message}");
        std::fs::write(&path, "# comment\n0 1\n1,2\n\n2\t0 # tail\n").unwrap();
        let g = GraphData::load(&path).unwrap();
        assert_eq!((g.nodes, g.edge_count()), (3, 3));
        std::fs::write(&path, "0 1\n1 x\n").unwrap();
        let message = GraphData::load(&path).unwrap_err().to_string();
        assert!(
            message.contains("line 2") && message.contains("\"x\""),
            "{message}"
        );
        // A weighted edge list: the weight is not dropped unsaid.
        std::fs::write(&path, "0 1\n1 2 0.5\n").unwrap();
        let message = GraphData::load(&path).unwrap_err().to_string();
        assert!(
            message.contains("line 2") && message.contains("third field \"0.5\""),
            "{message}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

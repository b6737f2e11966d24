//! Graphs for planning: a folder of PyG-named `.npy` files, an edge-list
//! text file, or the edges of a generator spec.

use std::path::Path;

use fateplan_planner::blocks::BlockCounts;

use crate::edges::EdgeSource;
use crate::generate::GeneratorSpec;
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
}

impl GraphData {
    /// `source` as the `--graph` of `plan`, `compare` and `partition` reads
    /// it (`train`, which needs the features, reads it with
    /// `train::load_graph`): a file or folder ([`GraphData::load`]), or else a generator spec (`rmat:...`,
    /// `planted:...`, see [`GeneratorSpec::parse`]), whose edges are the
    /// ones `fateplan train --graph SPEC` trains on, with the spec's
    /// feature and class counts (the features themselves are not drawn).
    pub fn open(source: &str) -> Result<GraphData> {
        let path = Path::new(source);
        if path.exists() {
            return Self::load(path);
        }
        if !source.contains(':') {
            return Err(Error::invalid(
                path,
                "graph",
                "no such file or folder, nor a generator spec (rmat:... or planted:...)",
            ));
        }
        let spec = GeneratorSpec::parse(source)?;
        let (features, classes) = spec.features_and_classes();
        let (graph, edges) = spec.with_features(1).open()?;
        Ok(GraphData {
            name: graph.name,
            nodes: graph.nodes,
            edges,
            features: Some(features),
            classes: Some(classes),
        })
    }

    /// Reads a folder with `edge_index.npy` (shape `[2, E]`: sources then
    /// destinations) and optionally `x.npy` (`[N, F]`) and `y.npy` (`[N]`), or
    /// an edge-list text file (`src dst` per line, `#` comments; a line with
    /// more fields, such as a weight, is refused).
    pub fn load(path: &Path) -> Result<GraphData> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().trim_end_matches(".txt").to_string())
            .unwrap_or_else(|| "graph".into());
        if path.is_dir() {
            Self::load_npy_folder(path, name)
        } else {
            Self::load_edge_list(path, name)
        }
    }

    fn load_npy_folder(dir: &Path, name: String) -> Result<GraphData> {
        let edge_path = dir.join("edge_index.npy");
        let edge_index = Npy::open(&edge_path)?;
        let mut features = None;
        let x_path = dir.join("x.npy");
        let (edges, nodes) = if x_path.exists() {
            let x = Npy::open(&x_path)?;
            if x.shape.len() != 2 || x.fortran_order {
                return Err(Error::invalid(
                    &x_path,
                    "shape",
                    format!(
                        "{:?} (fortran order: {}); expected [N, F] in C order",
                        x.shape, x.fortran_order
                    ),
                ));
            }
            features = Some(
                u32::try_from(x.shape[1])
                    .map_err(|_| Error::invalid(&x_path, "shape", "too many features"))?,
            );
            // An end past x's rows is an error when the edges are read.
            let nodes = x.shape[0];
            if nodes == 0 {
                return Err(Error::invalid(&x_path, "shape", "N is 0: no vertices"));
            }
            (
                EdgeSource::npy(edge_path.clone(), edge_index, nodes)?,
                nodes,
            )
        } else {
            EdgeSource::npy_counting_nodes(edge_path.clone(), edge_index)?
        };
        let mut classes = None;
        let y_path = dir.join("y.npy");
        if y_path.exists() {
            let y = Npy::open(&y_path)?;
            let mut most = 0u64;
            for k in 0..y.len() as usize {
                most = most.max(y.int(k, &y_path)?);
            }
            classes = Some(
                u32::try_from(most + 1)
                    .map_err(|_| Error::invalid(&y_path, "values", "too many classes"))?,
            );
        }
        Ok(GraphData {
            name,
            nodes,
            edges,
            features,
            classes,
        })
    }

    fn load_edge_list(path: &Path, name: String) -> Result<GraphData> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let mut src = Vec::new();
        let mut dst = Vec::new();
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
            src.push(vertex("source")?);
            dst.push(vertex("destination")?);
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
        let nodes = src.iter().chain(&dst).max().map_or(0, |&m| m + 1);
        if nodes == 0 {
            return Err(Error::invalid(path, "edges", "the file has no edges"));
        }
        Ok(GraphData {
            name,
            nodes,
            edges: EdgeSource::owned(src, dst),
            features: None,
            classes: None,
        })
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

    #[test]
    fn reads_an_edge_list_and_names_bad_lines() {
        let dir = scratch("text");
        let path = dir.join("g.txt");
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

//! Graphs for planning: a folder of PyG-named `.npy` files, an edge-list
//! text file, or the edges of a generator spec.

use std::path::Path;

use fateplan_planner::blocks::BlockCounts;

use crate::generate::GeneratorSpec;
use crate::npy::Npy;
use crate::{Error, Result};

/// Most edges an edge-list text file may hold.
pub const MAX_TEXT_EDGES: usize = 1 << 32;

/// A graph's topology and, when known, its feature and class counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphData {
    pub name: String,
    pub nodes: u64,
    pub src: Vec<u64>,
    pub dst: Vec<u64>,
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
        let graph = spec.with_features(1).generate()?;
        Ok(GraphData {
            name: graph.name,
            nodes: graph.nodes,
            src: graph.src,
            dst: graph.dst,
            features: Some(features),
            classes: Some(classes),
        })
    }

    /// Reads a folder with `edge_index.npy` (shape `[2, E]`: sources then
    /// destinations) and optionally `x.npy` (`[N, F]`) and `y.npy` (`[N]`), or
    /// an edge-list text file (`src dst` per line, `#` comments).
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
        let edges = Npy::open(&edge_path)?;
        if edges.shape.len() != 2 || edges.shape[0] != 2 {
            return Err(Error::invalid(
                &edge_path,
                "shape",
                format!("{:?}; expected [2, E]", edges.shape),
            ));
        }
        let ends = edges.to_i64(&edge_path)?;
        let count = edges.shape[1] as usize;
        let vertex = |row: usize, k: usize| -> Result<u64> {
            let value = ends[row * count + k];
            u64::try_from(value).map_err(|_| {
                Error::invalid(
                    &edge_path,
                    format!("edge_index[{row}, {k}]"),
                    format!("{value} is negative"),
                )
            })
        };
        let src = (0..count)
            .map(|k| vertex(0, k))
            .collect::<Result<Vec<u64>>>()?;
        let dst = (0..count)
            .map(|k| vertex(1, k))
            .collect::<Result<Vec<u64>>>()?;
        let mut nodes = src.iter().chain(&dst).max().map_or(0, |&m| m + 1);
        let mut features = None;
        let x_path = dir.join("x.npy");
        if x_path.exists() {
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
            if x.shape[0] < nodes {
                return Err(Error::invalid(
                    &x_path,
                    "shape",
                    format!(
                        "{} rows but edge_index.npy names vertex {}",
                        x.shape[0],
                        nodes - 1
                    ),
                ));
            }
            nodes = x.shape[0];
            features = Some(
                u32::try_from(x.shape[1])
                    .map_err(|_| Error::invalid(&x_path, "shape", "too many features"))?,
            );
        }
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
        if nodes == 0 {
            return Err(Error::invalid(
                &edge_path,
                "shape",
                "the graph has no vertices",
            ));
        }
        Ok(GraphData {
            name,
            nodes,
            src,
            dst,
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
            src,
            dst,
            features: None,
            classes: None,
        })
    }

    /// Edge counts per block of a `partitions`-way vertex-range partition.
    pub fn blocks(&self, partitions: u32) -> Result<BlockCounts> {
        Ok(BlockCounts::from_edges(
            self.nodes, &self.src, &self.dst, partitions,
        )?)
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
        assert_eq!(
            (g.src.clone(), g.dst.clone()),
            (vec![0, 1, 2], vec![1, 2, 0])
        );
        assert_eq!(g.blocks(2).unwrap().total_edges(), 3);
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
            assert_eq!((g.src, g.dst), (full.src, full.dst), "{spec}");
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
        assert_eq!((g.nodes, g.src.len()), (3, 3));
        std::fs::write(&path, "0 1\n1 x\n").unwrap();
        let message = GraphData::load(&path).unwrap_err().to_string();
        assert!(
            message.contains("line 2") && message.contains("\"x\""),
            "{message}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

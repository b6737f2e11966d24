//! The executor's normalised blocks must be the blocks the planner sized:
//! the same blocks exist, with the same edge counts, partition ranges and
//! bytes as the planner's `adj[i,j]` tensors.

use std::collections::HashMap;
use std::path::PathBuf;

use fateplan_planner::gnn::{build_gnn, GnnModel, GnnSpec};
use fateplan_runtime::blockcsr::{BlockCsr, Normalization};
use fateplan_runtime::csr::Csr;
use fateplan_runtime::dataset::Dataset;
use fateplan_runtime::generate::GeneratorSpec;

/// The folder holding `cora/`: `FATEPLAN_DATA`, else the repository's shared
/// data beside the checkout.
fn cora() -> Option<Dataset> {
    let root = std::env::var_os("FATEPLAN_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/data"))
        });
    let dir = root.join("cora");
    if !dir.is_dir() {
        eprintln!("skipped: Cora not found (set FATEPLAN_DATA)");
        return None;
    }
    Some(Dataset::load(&dir).unwrap())
}

fn check(dataset: &Dataset, partitions: u32) {
    let csr = Csr::from_edges(dataset.nodes, &dataset.src, &dataset.dst).unwrap();
    let counts = dataset.blocks(partitions).unwrap();
    assert_eq!(csr.block_counts(partitions).unwrap(), counts);
    for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
        let spec = GnnSpec {
            model,
            layers: 2,
            hidden: 16,
            heads: 4,
            features: dataset.features,
            classes: dataset.classes,
            graph_name: dataset.name.clone(),
            order: Default::default(),
            transposes: Default::default(),
            sweeps: Default::default(),
            dropout: 0.0,
        };
        let workload = build_gnn(&spec, &counts).unwrap();
        let planned: HashMap<&str, u64> = workload
            .tensors
            .iter()
            .filter(|t| t.name.starts_with("adj["))
            .map(|t| (t.name.as_str(), t.bytes))
            .collect();
        let transposes: HashMap<&str, u64> = workload
            .tensors
            .iter()
            .filter(|t| t.name.starts_with("adj_t["))
            .map(|t| (t.name.as_str(), t.bytes))
            .collect();
        let normalization = Normalization::for_model(model);
        let blocks = BlockCsr::build(&csr, partitions, normalization).unwrap();
        let context = format!("{} {} P={partitions}", dataset.name, model.name());
        assert_eq!(blocks.blocks().count(), planned.len(), "{context}");
        for i in 0..partitions {
            assert_eq!(blocks.range(i), counts.range(i), "{context}");
            for j in 0..partitions {
                let name = format!("adj[{i},{j}]");
                let block = blocks.block(i, j);
                assert_eq!(
                    block.is_some(),
                    planned.contains_key(name.as_str()),
                    "{context} {name}"
                );
                let Some(block) = block else { continue };
                let loops = if i == j && normalization.self_loops() {
                    counts.partition_nodes(i)
                } else {
                    0
                };
                assert_eq!(
                    block.edges(),
                    counts.block_edges(i, j) + loops,
                    "{context} {name}"
                );
                assert_eq!(block.rows(), counts.partition_nodes(i), "{context} {name}");
                assert!(
                    block.byte_size() <= planned[name.as_str()],
                    "{context} {name}"
                );
                assert_eq!(
                    block.byte_size(),
                    planned[name.as_str()],
                    "{context} {name}"
                );
                // Its stored transpose, where the model reads one, as
                // `Model::external` builds it: the bytes the planner gives
                // `adj_t[i,j]`.
                let t_name = format!("adj_t[{i},{j}]");
                let transpose = block
                    .view()
                    .transpose(counts.partition_nodes(j) as usize)
                    .unwrap();
                let t_bytes = transpose.row_start.len() * 8
                    + transpose.columns.len() * 4
                    + transpose.weights.len() * 4;
                match transposes.get(t_name.as_str()) {
                    Some(&bytes) => assert_eq!(t_bytes as u64, bytes, "{context} {t_name}"),
                    None => assert_eq!(model, GnnModel::Gat, "{context} {t_name}"),
                }
            }
        }
    }
}

#[test]
fn cora_blocks_match_the_planner() {
    let Some(cora) = cora() else { return };
    for partitions in [1, 4, 7] {
        check(&cora, partitions);
    }
}

#[test]
fn rmat_blocks_with_duplicates_and_self_loops_match_the_planner() {
    // Unscrambled R-MAT is skewed and has duplicate edges and self loops.
    let rmat = GeneratorSpec::parse("rmat:scale=10,features=4,classes=3,scramble=false,seed=5")
        .unwrap()
        .generate()
        .unwrap();
    assert!(rmat.src.iter().zip(&rmat.dst).any(|(s, d)| s == d));
    for partitions in [1, 3, 8] {
        check(&rmat, partitions);
    }
}

#[test]
fn planted_blocks_match_the_planner() {
    let planted =
        GeneratorSpec::parse("planted:nodes=500,classes=4,train_per_class=5,val=100,test=200")
            .unwrap()
            .generate()
            .unwrap();
    for partitions in [2, 5] {
        check(&planted, partitions);
    }
}

#[test]
fn cora_through_the_cache_gives_the_same_blocks() {
    let Some(cora) = cora() else { return };
    let csr = Csr::from_edges(cora.nodes, &cora.src, &cora.dst).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cora.csr");
    csr.write_cache(&path).unwrap();
    let cached = Csr::read_cache(&path).unwrap();
    assert_eq!(cached, csr);
    assert_eq!(cached.edges(), 10556);
    assert_eq!(
        BlockCsr::build(&cached, 4, Normalization::GcnSym).unwrap(),
        BlockCsr::build(&csr, 4, Normalization::GcnSym).unwrap()
    );
    // Cora is symmetric without self loops: every GCN row's weights sum to
    // sum_u 1/sqrt(d_u d_v) over the neighbourhood, and the self loop's
    // weight is 1/d_v.
    let blocks = BlockCsr::build(&csr, 1, Normalization::GcnSym).unwrap();
    let block = blocks.block(0, 0).unwrap();
    for v in 0..cora.nodes as usize {
        let d = (csr.in_degree(v as u64) + 1) as f32;
        let (start, end) = (block.row_start[v] as usize, block.row_start[v + 1] as usize);
        let at = start
            + block.columns[start..end]
                .iter()
                .position(|&u| u as usize == v)
                .unwrap();
        assert!((block.view().weight(v, at) - 1.0 / d).abs() < 1e-6);
    }
}

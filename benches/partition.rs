//! Min-cut against random partitioning: halo rows (the boundary rows
//! exchanged between GPUs each layer), their ratio, and the time to
//! partition, on Cora and on generated graphs, for 2, 4 and 8 GPUs.
//!
//! Run: `cargo bench --bench partition` (Cora from `FATEPLAN_DATA`, the
//! folder holding `cora/`, else `../shared/data` beside the workspace;
//! skipped with a line when absent). A word as argument keeps only the
//! graphs whose name contains it: `cargo bench --bench partition -- cora`.

use std::path::PathBuf;
use std::time::Instant;

use fateplan::runtime::generate::GeneratorSpec;
use fateplan::runtime::graph::GraphData;
use fateplan::runtime::partition::{Method, PartitionOptions, PartitionStats, Partitioning};

const GPUS: [u32; 3] = [2, 4, 8];

const GENERATED: [&str; 5] = [
    "planted:nodes=20000,classes=8,degree=10,homophily=0.9,features=1,seed=1",
    "rmat:scale=16,features=1,classes=2,seed=1",
    "rmat:scale=16,features=1,classes=2,symmetric=true,seed=1",
    "rmat:scale=18,features=1,classes=2,seed=1",
    "rmat:scale=20,features=1,classes=2,seed=1",
];

struct Graph {
    name: String,
    nodes: u64,
    src: Vec<u64>,
    dst: Vec<u64>,
}

fn cora() -> Option<Graph> {
    let root = std::env::var_os("FATEPLAN_DATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data"));
    let dir = root.join("cora");
    if !dir.join("edge_index.npy").exists() {
        println!("cora: skipped (not found; set FATEPLAN_DATA to the folder holding cora/)");
        return None;
    }
    let graph = GraphData::load(&dir).expect("Cora loads");
    let (src, dst) = graph.edges.lists().expect("Cora's edges read");
    Some(Graph {
        name: "cora".into(),
        nodes: graph.nodes,
        src: src.into_owned(),
        dst: dst.into_owned(),
    })
}

fn generated(spec: &str) -> Graph {
    let dataset = GeneratorSpec::parse(spec)
        .expect("spec parses")
        .generate()
        .expect("graph generates");
    Graph {
        name: spec.to_string(),
        nodes: dataset.nodes,
        src: dataset.src,
        dst: dataset.dst,
    }
}

fn run(graph: &Graph, method: Method, gpus: u32) -> (PartitionStats, f64) {
    let options = PartitionOptions::default();
    let started = Instant::now();
    let partitioning =
        Partitioning::new(method, graph.nodes, &graph.src, &graph.dst, gpus, &options)
            .expect("partitions");
    let seconds = started.elapsed().as_secs_f64();
    let stats = partitioning.stats(&graph.src, &graph.dst).expect("stats");
    (stats, seconds)
}

fn main() {
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    println!(
        "{:<58} {:>3} {:>10} {:>10} {:>6} {:>9} {:>9} {:>6} {:>6} {:>9} {:>9}",
        "graph",
        "k",
        "halo rand",
        "halo mcut",
        "ratio",
        "max rand",
        "max mcut",
        "ratio",
        "imbal",
        "t rand",
        "t mcut"
    );
    let mut graphs: Vec<Box<dyn Fn() -> Option<Graph>>> = vec![Box::new(cora)];
    for spec in GENERATED {
        graphs.push(Box::new(move || Some(generated(spec))));
    }
    let names = std::iter::once("cora").chain(GENERATED);
    for (make, name) in graphs.iter().zip(names) {
        if !name.contains(&filter) {
            continue;
        }
        let Some(graph) = make() else { continue };
        for gpus in GPUS {
            let (random, random_s) = run(&graph, Method::Random, gpus);
            let (mincut, mincut_s) = run(&graph, Method::Mincut, gpus);
            let ratio = |a: u64, b: u64| a as f64 / b.max(1) as f64;
            println!(
                "{:<58} {:>3} {:>10} {:>10} {:>5.2}x {:>9} {:>9} {:>5.2}x {:>6.3} {:>8.3}s {:>8.3}s",
                format!("{} ({} v, {} e)", graph.name, graph.nodes, graph.src.len()),
                gpus,
                random.halo_rows_total,
                mincut.halo_rows_total,
                ratio(random.halo_rows_total, mincut.halo_rows_total),
                random.halo_rows_max,
                mincut.halo_rows_max,
                ratio(random.halo_rows_max, mincut.halo_rows_max),
                mincut.edge_imbalance,
                random_s,
                mincut_s
            );
        }
    }
}

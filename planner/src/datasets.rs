//! Published statistics of the datasets fateplan knows by name.

/// Size of a graph dataset: enough to build a workload without the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatasetStats {
    pub name: &'static str,
    pub nodes: u64,
    /// Edges as stored (directed; undirected graphs count both directions).
    pub edges: u64,
    pub features: u32,
    pub classes: u32,
    pub note: &'static str,
}

const fn stats(
    name: &'static str,
    nodes: u64,
    edges: u64,
    features: u32,
    classes: u32,
    note: &'static str,
) -> DatasetStats {
    DatasetStats {
        name,
        nodes,
        edges,
        features,
        classes,
        note,
    }
}

/// The built-in datasets, smallest first within each family.
pub const DATASETS: &[DatasetStats] = &[
    stats(
        "ogbn-arxiv",
        169_343,
        1_166_243,
        128,
        40,
        "OGB node property prediction",
    ),
    stats(
        "reddit",
        232_965,
        114_615_892,
        602,
        41,
        "Hamilton et al. 2017, as in PyG",
    ),
    stats(
        "ogbn-products",
        2_449_029,
        123_718_280,
        100,
        47,
        "OGB node property prediction",
    ),
    stats(
        "ogbn-papers100M",
        111_059_956,
        1_615_685_872,
        128,
        172,
        "OGB node property prediction",
    ),
    stats(
        "it-2004",
        41_291_594,
        1_150_725_436,
        256,
        64,
        "web graph; synthetic features",
    ),
    stats(
        "friendster",
        65_608_366,
        3_612_134_270,
        256,
        64,
        "social graph; synthetic features",
    ),
    stats("igb-tiny", 100_000, 547_416, 1024, 19, "IGB homogeneous"),
    stats(
        "igb-small",
        1_000_000,
        12_070_502,
        1024,
        19,
        "IGB homogeneous",
    ),
    stats(
        "igb-medium",
        10_000_000,
        120_077_694,
        1024,
        19,
        "IGB homogeneous",
    ),
    stats(
        "igb-large",
        100_000_000,
        1_223_571_364,
        1024,
        19,
        "IGB homogeneous",
    ),
    stats(
        "igb-full",
        269_346_174,
        3_995_777_033,
        1024,
        19,
        "IGB homogeneous",
    ),
];

/// Looks a dataset up by name, ignoring case.
pub fn dataset(name: &str) -> Option<&'static DatasetStats> {
    DATASETS.iter().find(|d| d.name.eq_ignore_ascii_case(name))
}

/// What an unknown dataset name `name` is told: the known names, the
/// nearest of them where one is near, and that a graph of one's own is
/// `--graph` (`flag`: `--dataset`, or `study`'s `--datasets`).
pub fn unknown_dataset(flag: &str, name: &str) -> String {
    let known: Vec<&str> = DATASETS.iter().map(|d| d.name).collect();
    format!(
        "{flag} {name}: unknown dataset; known datasets (statistics to plan, not data to \
         train): {}; a graph of your own (a folder of .npy files, an edge list or a generator \
         spec) is --graph{}",
        dataset_names(),
        crate::units::did_you_mean(name, &known)
    )
}

/// The known names, comma-separated, for error messages.
pub fn dataset_names() -> String {
    DATASETS
        .iter()
        .map(|d| d.name)
        .collect::<Vec<_>>()
        .join(", ")
}

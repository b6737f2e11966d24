//! What the runtime's training tests share.
#![allow(dead_code)]

use fateplan_planner::plan::Budgets;
use fateplan_planner::Profile;
use fateplan_runtime::dataset::Dataset;
use fateplan_runtime::train;

pub fn profile() -> Profile {
    Profile::from_json(
        include_str!("../../../profiles/cpu-small.json"),
        "cpu-small.json",
    )
    .unwrap()
}

/// A planted-partition graph of four classes, 40 validation and 60 test
/// nodes, its features prepared as `fateplan train` prepares them (signed,
/// so kept as they are).
pub fn planted(nodes: u32, seed: u64) -> Dataset {
    let spec = format!(
        "planted:nodes={nodes},classes=4,features=12,degree=6,homophily=0.8,val=40,test=60,seed={seed}"
    );
    let mut d = train::load_graph(&spec).unwrap();
    d.row_normalize_features();
    d
}

/// Budgets no plan reaches.
pub fn roomy() -> Budgets {
    Budgets {
        hbm_bytes: 1 << 40,
        host_bytes: 1 << 40,
        ssd_bytes: 1 << 40,
    }
}

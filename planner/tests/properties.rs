//! Invariants of planning, over random GNN workloads and budgets.

use fateplan_planner::blocks::BlockCounts;
use fateplan_planner::gnn::{build_gnn, GnnModel, GnnSpec, Transposes};
use fateplan_planner::plan::{Action, Budgets, Fate, Plan, PlanModel};
use fateplan_planner::{plan, Error, PlanOptions, Policy, Profile, Workload};
use proptest::prelude::*;

fn profile() -> Profile {
    let text = include_str!("../../profiles/a100-80g.json");
    Profile::from_json(text, "a100-80g.json").unwrap()
}

fn workload(model: u8, layers: u32, hidden: u32, parts: u32, nodes: u64, edges: u64) -> Workload {
    let model = [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat][model as usize % 3];
    let spec = GnnSpec {
        model,
        layers,
        hidden: hidden * 2,
        heads: 2,
        features: 12,
        classes: 5,
        graph_name: "random".into(),
        order: Default::default(),
        transposes: Default::default(),
        sweeps: Default::default(),
        dropout: 0.0,
    };
    build_gnn(&spec, &BlockCounts::skewed(nodes, edges, parts).unwrap()).unwrap()
}

fn retain_all_peak(w: &Workload, profile: &Profile) -> u64 {
    let options = PlanOptions {
        budgets: Budgets::UNLIMITED,
        ..PlanOptions::new(Policy::RetainAll, profile)
    };
    plan(w, profile, &options).unwrap().predicted.peak_bytes.hbm
}

fn workloads() -> impl Strategy<Value = Workload> {
    (0u8..3, 1u32..4, 2u32..12, 1u32..5, 20u64..200, 0u64..1500)
        .prop_map(|(m, l, h, p, n, e)| workload(m, l, h, p, n, e))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Every policy either makes a plan that passes the sanity pass and
    /// round-trips through JSON, or says which tier cannot fit.
    #[test]
    fn every_plan_is_sane_or_infeasible(w in workloads(), hbm in 0.05f64..1.3, host in 0.0f64..1.5, ssd in 0.0f64..2.0) {
        let profile = profile();
        let peak = retain_all_peak(&w, &profile) as f64;
        let total: u64 = w.tensors.iter().map(|t| t.bytes).sum();
        let budgets = Budgets {
            hbm_bytes: (peak * hbm) as u64,
            host_bytes: (total as f64 * host) as u64 + (host * 4.0 * (64u64 << 20) as f64) as u64,
            ssd_bytes: (total as f64 * ssd) as u64,
        };
        let mut fitted = Vec::new();
        let mut times = Vec::new();
        for policy in Policy::ALL.into_iter().filter(|&p| p != Policy::Milp) {
            let options = PlanOptions { budgets, ..PlanOptions::new(policy, &profile) };
            match plan(&w, &profile, &options) {
                Ok(p) => {
                    prop_assert!(p.predicted.peak_bytes.hbm <= budgets.hbm_bytes);
                    prop_assert!(p.predicted.peak_bytes.host <= budgets.host_bytes);
                    prop_assert!(p.predicted.peak_bytes.ssd <= budgets.ssd_bytes);
                    let back = Plan::from_json(&p.to_json(), "plan.json").unwrap();
                    prop_assert_eq!(&back, &p);
                    fitted.push(policy);
                    times.push((policy, p.predicted.iteration_s));
                }
                Err(Error::Infeasible { bytes_over, needed_bytes, budget_bytes, .. }) => {
                    prop_assert_eq!(needed_bytes - budget_bytes, bytes_over);
                    prop_assert!(bytes_over > 0);
                }
                Err(other) => prop_assert!(false, "{} failed: {}", policy.name(), other),
            }
        }
        // dp fits wherever any policy fits, and is never slower.
        if !fitted.is_empty() {
            prop_assert!(fitted.contains(&Policy::Dp), "dp failed where {:?} fit", fitted);
            let dp = times.iter().find(|t| t.0 == Policy::Dp).unwrap().1;
            for &(policy, time) in &times {
                prop_assert!(dp <= time * (1.0 + 1e-12), "dp {} s slower than {} {} s", dp, policy.name(), time);
            }
        }
        // Greedy fits whenever an offload-everything plan does.
        let any_offload = fitted.contains(&Policy::OffloadHostAll) || fitted.contains(&Policy::OffloadSsdAll) || fitted.contains(&Policy::RetainAll);
        if any_offload {
            prop_assert!(fitted.contains(&Policy::Greedy), "greedy failed where {:?} fit", fitted);
        }
    }

    /// The same inputs give byte-identical plans.
    #[test]
    fn planning_is_deterministic(w in workloads(), hbm in 0.2f64..1.0) {
        let profile = profile();
        let peak = retain_all_peak(&w, &profile) as f64;
        let mut options = PlanOptions::new(Policy::Greedy, &profile);
        options.budgets.hbm_bytes = (peak * hbm) as u64;
        let first = plan(&w, &profile, &options).map(|p| p.to_json());
        let second = plan(&w.clone(), &profile, &options).map(|p| p.to_json());
        prop_assert_eq!(first, second);
    }

    /// Workloads round-trip through their JSON format.
    #[test]
    fn workloads_round_trip(w in workloads()) {
        let back = Workload::from_json(&w.to_json(), "w.json").unwrap();
        prop_assert_eq!(back, w);
    }

    /// Random bytes and random JSON never panic a loader.
    #[test]
    fn loaders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = Workload::from_json(&text, "fuzz.json");
        let _ = Plan::from_json(&text, "fuzz.json");
        let _ = Profile::from_json(&text, "fuzz.json");
        let _ = fateplan_planner::dag::from_node_link(&text, "fuzz.json");
    }

    /// Mutated valid JSON never panics a loader either.
    #[test]
    fn mutated_json_never_panics(w in workloads(), cut in 0usize..10_000, byte in any::<u8>()) {
        let profile = profile();
        let p = plan(&w, &profile, &PlanOptions::new(Policy::OffloadHostAll, &profile)).unwrap();
        for text in [w.to_json(), p.to_json(), profile.to_json_pretty()] {
            let mut bytes = text.into_bytes();
            let at = cut % bytes.len();
            bytes[at] = byte;
            let text = String::from_utf8_lossy(&bytes);
            let _ = Workload::from_json(&text, "m.json");
            let _ = Plan::from_json(&text, "m.json");
            let _ = Profile::from_json(&text, "m.json");
            let _ = fateplan_planner::dag::from_node_link(&text, "m.json");
        }
    }
}

#[test]
fn recompute_all_recomputes_and_checkpoints_layer_outputs() {
    let profile = profile();
    let w = workload(0, 3, 8, 2, 100, 600);
    let p = plan(
        &w,
        &profile,
        &PlanOptions::new(Policy::RecomputeAll, &profile),
    )
    .unwrap();
    let count = |fate| p.tensors.iter().filter(|t| t.fate == fate).count();
    assert!(count(Fate::Recompute) > 0);
    assert!(p.predicted.recompute_s > 0.0);
    for t in &p.tensors {
        if t.name.starts_with("h[") {
            assert_eq!(t.fate, Fate::Retain, "{} is a checkpoint", t.name);
        }
    }
}

#[test]
fn a_tampered_plan_is_rejected_on_load() {
    let profile = profile();
    let w = workload(0, 2, 8, 2, 100, 600);
    let p = plan(
        &w,
        &profile,
        &PlanOptions::new(Policy::OffloadHostAll, &profile),
    )
    .unwrap();
    // Drop the first copy back after an offload: an operator finds its input missing.
    let mut broken = p.clone();
    let offload = broken
        .schedule
        .iter()
        .position(|e| e.action == Action::Offload)
        .unwrap();
    let tensor = broken.schedule[offload].tensor;
    let back = broken
        .schedule
        .iter()
        .position(|e| e.tensor == tensor && matches!(e.action, Action::Load | Action::Reload))
        .unwrap();
    broken.schedule.remove(back);
    let message = Plan::from_json(&broken.to_json(), "broken.json")
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("broken.json") || message.contains("not on the device"),
        "{message}"
    );
    assert!(message.contains("not on the device"), "{message}");
    // Shrink the device budget below the peak.
    let mut tight = p.clone();
    tight.budgets.hbm_bytes = p.predicted.peak_bytes.hbm - 1;
    let message = Plan::from_json(&tight.to_json(), "tight.json")
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("hbm") && message.contains("by 1 byte"),
        "{message}"
    );
    // An unknown policy is named with its field.
    let mut unknown = p.clone();
    unknown.policy = "nope".into();
    let message = Plan::from_json(&unknown.to_json(), "unknown.json")
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("unknown.json")
            && message.contains("plan field policy")
            && message.contains("\"nope\"")
            && message.contains("offload-host-all"),
        "{message}"
    );
    // The model a plan records: read back as written; a bad one is named
    // with its field and value.
    let mut modelled = p.clone();
    modelled.workload.model = Some(PlanModel {
        model: "gat".into(),
        layers: 2,
        hidden: 64,
        heads: 8,
        layer_order: "narrower".into(),
        transposes: "stored".into(),
        sweep: "f1,b2".into(),
        partitions: 4,
        devices: 2,
        shares: Some("ranges".into()),
        dropout: Some(0.6),
    });
    // The definition named as `build_gnn` names that model's workloads
    // (a plan's model must be its definition's).
    let named = |plan: &mut Plan, model: &str| {
        let m = plan.workload.model.as_mut().unwrap();
        m.model = model.into();
        let heads = if model == "gat" {
            format!("h{}", m.heads)
        } else {
            String::new()
        };
        let name = format!(
            "{model}-{}x{}{heads}-random-p{}{}",
            m.layers,
            m.hidden,
            m.partitions,
            fateplan_planner::gnn::sweep_suffix(&m.sweep)
        );
        plan.workload.definition.name = name.clone();
        plan.workload.name = name;
        plan.workload.digest = plan.workload.definition.digest();
    };
    named(&mut modelled, "gat");
    let back = Plan::from_json(&modelled.to_json(), "modelled.json").unwrap();
    assert_eq!(back.workload.model, modelled.workload.model);
    // A model apart from its definition is refused, naming both.
    let mut apart = modelled.clone();
    apart.workload.model.as_mut().unwrap().layers = 3;
    let message = Plan::from_json(&apart.to_json(), "apart.json")
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("plan field workload.model") && message.contains("gat-2x64h8-random-p4"),
        "{message}"
    );
    // A model spelled otherwise than `build_gnn` names it is still its
    // definition's.
    let mut spelled = modelled.clone();
    spelled.workload.model.as_mut().unwrap().model = "GAT".into();
    Plan::from_json(&spelled.to_json(), "spelled.json").unwrap();
    // A dropout that is not a probability is refused, naming the field.
    let mut wrong = modelled.clone();
    wrong.workload.model.as_mut().unwrap().dropout = Some(1.5);
    let error = Plan::from_json(&wrong.to_json(), "wrong.json")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("workload.model.dropout") && error.contains("1.5"),
        "{error}"
    );
    // A plan from before stored transposes has no `transposes`: a GCN's
    // transposed aggregations read the blocks; GAT's workload is the
    // same either way, and its plans say `stored`.
    // Such a GCN's workload stores no transposes (no `adj_t` tensors).
    let built = {
        let spec = GnnSpec {
            model: GnnModel::Gcn,
            layers: 2,
            hidden: 16,
            heads: 1,
            features: 12,
            classes: 5,
            graph_name: "random".into(),
            order: Default::default(),
            transposes: Transposes::Built,
            sweeps: Default::default(),
            dropout: 0.0,
        };
        let w = build_gnn(&spec, &BlockCounts::skewed(100, 600, 2).unwrap()).unwrap();
        let mut made = plan(
            &w,
            &profile,
            &PlanOptions::new(Policy::OffloadHostAll, &profile),
        )
        .unwrap();
        made.workload.model = modelled.workload.model.clone();
        made
    };
    for (model, expected) in [("gcn", "built"), ("gat", "stored")] {
        let mut renamed = match model {
            "gcn" => built.clone(),
            _ => modelled.clone(),
        };
        // Older plans ran every aggregation by outputs (no name suffix);
        // a GCN's records 1 head, as every plan of one has.
        let fields = renamed.workload.model.as_mut().unwrap();
        fields.sweep = "outputs".into();
        if model == "gcn" {
            fields.heads = 1;
            fields.hidden = 16;
            fields.partitions = 2;
        }
        named(&mut renamed, model);
        let mut older: serde_json::Value = serde_json::from_str(&renamed.to_json()).unwrap();
        let fields = older["workload"]["model"].as_object_mut().unwrap();
        fields.remove("transposes");
        fields.remove("sweep");
        let older = Plan::from_json(&older.to_string(), "older.json").unwrap();
        let older = older.workload.model.unwrap();
        assert_eq!(older.transposes, expected, "{model}");
        // Nor a `sweep`: every aggregation ran by outputs.
        assert_eq!(older.sweep, "outputs", "{model}");
    }
    for (field, bad, expected) in [
        ("model", "mlp", "\"mlp\": expected gcn, sage or gat"),
        (
            "layer_order",
            "last",
            "\"last\": expected narrower or aggregate-first",
        ),
        ("shares", "halves", "\"halves\": expected mincut or ranges"),
        (
            "transposes",
            "cached",
            "\"cached\": expected stored, built or mirrored",
        ),
        (
            "sweep",
            "f0",
            "\"f0\": expected outputs, inputs or a list such as f1,b2",
        ),
        ("layers", "0", "0: expected at least 1"),
    ] {
        let mut json: serde_json::Value = serde_json::from_str(&modelled.to_json()).unwrap();
        json["workload"]["model"][field] = match bad.parse::<u32>() {
            Ok(n) => n.into(),
            Err(_) => bad.into(),
        };
        let message = Plan::from_json(&json.to_string(), "modelled.json")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("modelled.json")
                && message.contains(&format!("plan field workload.model.{field}"))
                && message.contains(expected),
            "{message}"
        );
    }
    // A tensor's bytes changed: the field and both values.
    let mut resized = p.clone();
    resized.tensors[1].bytes += 4;
    let (planned, actual) = (resized.tensors[1].bytes, p.tensors[1].bytes);
    let message = Plan::from_json(&resized.to_json(), "resized.json")
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("plan field tensors[1].bytes")
            && message.contains(&format!("{planned} differs from the workload's {actual}")),
        "{message}"
    );
}

#[test]
fn shipped_profiles_are_valid_and_every_figure_has_a_source() {
    for (name, text) in [
        ("a100-80g", include_str!("../../profiles/a100-80g.json")),
        ("h100-sxm", include_str!("../../profiles/h100-sxm.json")),
        ("h200", include_str!("../../profiles/h200.json")),
        ("cpu-small", include_str!("../../profiles/cpu-small.json")),
    ] {
        let profile = Profile::from_json(text, name).unwrap();
        assert_eq!(profile.name, name);
        for (field, _) in profile.figures() {
            let source = profile.sources.get(field).map(String::as_str).unwrap_or("");
            assert!(source.len() > 10, "{name}: {field} has no source");
        }
    }
}

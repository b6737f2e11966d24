//! The cost model's memory accounting agrees with the memory pass.

use fateplan_planner::blocks::BlockCounts;
use fateplan_planner::datasets::dataset;
use fateplan_planner::gnn::{build_gnn, GnnModel, GnnSpec};
use fateplan_planner::passes::cost::{boundary, item, Choices, FateSet};
use fateplan_planner::passes::dp;
use fateplan_planner::passes::lifetimes::Lifetimes;
use fateplan_planner::passes::memory::{boundary_slot, Occupancy};
use fateplan_planner::passes::schedule;
use fateplan_planner::passes::timeline::Timeline;
use fateplan_planner::plan::Budgets;
use fateplan_planner::{Profile, Tier, Workload};

fn profile() -> Profile {
    let text = include_str!("../../profiles/a100-80g.json");
    Profile::from_json(text, "a100-80g.json").unwrap()
}

fn gnn(model: GnnModel, name: &str, parts: u32) -> Workload {
    let stats = dataset(name).unwrap();
    let spec = GnnSpec {
        model,
        layers: 3,
        hidden: 256,
        heads: 4,
        features: stats.features,
        classes: stats.classes,
        graph_name: name.into(),
        order: Default::default(),
        transposes: Default::default(),
        sweeps: Default::default(),
        dropout: 0.0,
    };
    build_gnn(
        &spec,
        &BlockCounts::skewed(stats.nodes, stats.edges, parts).unwrap(),
    )
    .unwrap()
}

fn check(workload: &Workload, fates: FateSet, hbm_share: f64) {
    let profile = profile();
    let lives = Lifetimes::compute(workload);
    let choices = Choices::build(workload, &lives, &profile, fates);
    let peak = *choices.base_hbm.iter().max().unwrap();
    let budgets = Budgets {
        hbm_bytes: (peak as f64 * hbm_share) as u64,
        host_bytes: u64::MAX / 8,
        ssd_bytes: u64::MAX / 8,
    };
    let Ok(outcome) = dp::solve(workload, &choices, &budgets, 0, &dp::Held::default()) else {
        return;
    };
    let (fates, shifts) = outcome.assignment.fates_and_shifts(&choices);
    let sched = schedule::build(workload, &lives, fates.clone(), &shifts).unwrap();
    let timeline = Timeline::new(workload.ops.len(), &sched.entries);
    let occupancy = Occupancy::compute(workload, &sched.fates, &sched.entries, &timeline, 0);
    let bytes: Vec<u64> = workload.tensors.iter().map(|t| t.bytes).collect();
    let model: Vec<i128> = outcome
        .assignment
        .device_bytes(&choices, &bytes, &[])
        .into_iter()
        .map(i128::from)
        .collect();
    if timeline.len() == workload.ops.len() {
        // No recomputation: positions are steps, and the two count the
        // same slots; the model may only count more.
        for (slot, &real) in occupancy.bytes.hbm.iter().enumerate() {
            assert!(
                real as i128 <= model[slot],
                "slot {slot} (step {}): model {} real {real}",
                slot / 2,
                model[slot]
            );
        }
    }
    for step in 0..workload.ops.len() {
        // The model's slots are per step, the memory pass's per position.
        let modelled = model[boundary(step as u32) as usize].max(model[item(step as u32) as usize]);
        let slots =
            boundary_slot(timeline.step_start[step])..boundary_slot(timeline.step_start[step + 1]);
        let real = occupancy.max_over(Tier::Hbm, slots) as i128;
        if real > modelled && sched.fates == fates {
            let changed: Vec<String> = (0..fates.len())
                .filter(|&t| fates[t] != choices.baseline[t])
                .filter(|&t| {
                    let life = &lives.tensors[t];
                    life.producer.is_none_or(|p| p as usize <= step)
                        && life.uses.last().is_some_and(|&u| u as usize >= step)
                })
                .map(|t| {
                    format!(
                        "{}:{:?}:{:?}",
                        workload.tensors[t].name, fates[t], shifts[t]
                    )
                })
                .collect();
            panic!(
                "step {step} ({}): model {} real {}; diff {}; changed live: {:?}",
                workload.ops[step].name,
                modelled,
                real,
                real - modelled,
                &changed[..changed.len().min(12)]
            );
        }
    }
}

#[test]
fn model_matches_memory_pass_without_recompute() {
    let offload = FateSet {
        offload_host: true,
        offload_ssd: false,
        recompute: false,
    };
    for model in [GnnModel::Gcn, GnnModel::Sage, GnnModel::Gat] {
        for share in [0.3, 0.6, 0.9] {
            check(&gnn(model, "reddit", 4), offload, share);
        }
    }
}

/// `time_fates` gives no verdict on fit (says it fits) when a fate has no
/// choice of its own: an input no operator reads, given a stream fate,
/// which the model would keep resident where the memory pass holds
/// nothing. A fate it can place is judged.
#[test]
fn time_fates_gives_no_verdict_on_a_fate_without_a_choice() {
    use fateplan_planner::plan::Fate;
    use fateplan_planner::workload::{Cost, OpKind, Phase, TensorKind};
    let mut w = Workload::new("unread-input");
    let x = w.add_tensor("x", 1 << 20, TensorKind::Input, Some(Tier::Host));
    let unread = w.add_tensor("unread", 1 << 30, TensorKind::Input, Some(Tier::Host));
    let y = w.add_tensor("y", 1 << 20, TensorKind::Activation, None);
    let cost = Cost::seconds(1e-3);
    w.add_op(
        "f",
        OpKind::Activation,
        Phase::Forward,
        vec![x],
        vec![y],
        cost,
    );
    w.add_op(
        "g",
        OpKind::Activation,
        Phase::Forward,
        vec![y],
        vec![],
        cost,
    );
    let profile = profile();
    let lives = Lifetimes::compute(&w);
    let choices = Choices::build(&w, &lives, &profile, FateSet::ALL);
    assert!(choices.options[unread.index()].is_empty());
    // A device budget below the unread input's bytes.
    let budgets = Budgets {
        hbm_bytes: 64 << 20,
        host_bytes: 16 << 30,
        ssd_bytes: 16 << 30,
    };
    let resident = vec![Fate::Resident, Fate::Resident, Fate::Retain];
    let (_, fits) = dp::time_fates(&w, &choices, &resident, &budgets, 0);
    assert!(!fits, "the unread input resident does not fit 64 MiB");
    let streamed = vec![Fate::StreamHost, Fate::StreamHost, Fate::Retain];
    let (_, fits) = dp::time_fates(&w, &choices, &streamed, &budgets, 0);
    assert!(
        fits,
        "no verdict where the unread input's stream fate has no choice"
    );
}

/// Host bytes held at some steps (an exchange's buffers) keep dp's host
/// copies out of those steps, and only those: the search counts them step
/// by step, not as their peak set aside for the whole iteration.
#[test]
fn host_bytes_held_at_some_steps_keep_host_copies_out_of_those_steps_only() {
    let workload = gnn(GnnModel::Gcn, "ogbn-products", 4);
    let lives = Lifetimes::compute(&workload);
    let choices = Choices::build(&workload, &lives, &profile(), FateSet::ALL);
    let peak = *choices.base_hbm.iter().max().unwrap();
    let budgets = Budgets {
        hbm_bytes: peak / 2,
        host_bytes: 64 << 30,
        ssd_bytes: u64::MAX / 8,
    };
    let host_slots = |held: &dp::Held| -> Vec<(u32, u32)> {
        let outcome =
            dp::solve(&workload, &choices, &budgets, 0, held).expect("the SSD takes the rest");
        (0..workload.tensors.len())
            .filter_map(|t| outcome.assignment.choice(&choices, t))
            .filter_map(|c| match c.away {
                Some((Tier::Host, start, end)) => Some((start, end)),
                _ => None,
            })
            .collect()
    };
    let free = host_slots(&dp::Held::default());
    // The whole host budget held during the first half of the steps.
    let half = workload.ops.len() / 2;
    assert!(
        free.iter().any(|&(start, _)| (start as usize) < 2 * half),
        "no host copy in the first half: the test shows nothing"
    );
    let held = dp::Held {
        host: vec![budgets.host_bytes; half],
        ..Default::default()
    };
    let later = host_slots(&held);
    assert!(
        !later.is_empty(),
        "the second half's host memory went unused"
    );
    for (start, _) in later {
        assert!(
            start as usize >= 2 * half,
            "a host copy from slot {start}, where the held bytes fill the host until slot {}",
            2 * half
        );
    }
}

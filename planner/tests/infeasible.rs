//! A workload with one operator too big for the device: every policy
//! reports that step at once, with the bytes it needs, and the hint the
//! budget that fits.

mod common;

use fateplan_planner::blocks::BlockCounts;
use fateplan_planner::gnn::{build_gnn, GnnModel};
use fateplan_planner::planner::{
    add_hint, dp_and_milp_hints, fits, model_hint, plan_or_infeasible,
};
use fateplan_planner::units::parse_bytes;
use fateplan_planner::workload::{Cost, OpKind, Phase, TensorKind};
use fateplan_planner::{plan, Error, PlanOptions, Policy, Tier, Workload};

const MIB: u64 = 1 << 20;

/// Three steps; the middle one reads 8 MiB and writes 8 MiB.
fn workload() -> Workload {
    let mut w = Workload::new("one big step");
    let x = w.add_tensor("x", MIB, TensorKind::Input, Some(Tier::Host));
    let a = w.add_tensor("a", 8 * MIB, TensorKind::Activation, None);
    let b = w.add_tensor("b", 8 * MIB, TensorKind::Activation, None);
    let c = w.add_tensor("c", MIB, TensorKind::Activation, None);
    let op = |w: &mut Workload, name: &str, i, o| {
        w.add_op(
            name,
            OpKind::Generic,
            Phase::Forward,
            vec![i],
            vec![o],
            Cost::seconds(1e-3),
        )
    };
    op(&mut w, "small", x, a);
    op(&mut w, "big", a, b);
    op(&mut w, "last", b, c);
    w
}

#[test]
fn a_step_bigger_than_the_device_is_reported_with_its_bytes() {
    let profile = common::a100();
    let w = workload();
    for policy in [
        Policy::Dp,
        Policy::Milp,
        Policy::RetainAll,
        Policy::OffloadHostAll,
    ] {
        let mut options = PlanOptions::new(policy, &profile);
        options.budgets.hbm_bytes = 12 * MIB;
        assert!(!fits(&w, &profile, &options).unwrap());
        match plan(&w, &profile, &options) {
            Err(Error::Infeasible {
                tier,
                step,
                op,
                needed_bytes,
                hint,
                fits_with,
                ..
            }) => {
                assert_eq!(
                    (tier, step, op.as_str()),
                    (Tier::Hbm, 1, "big"),
                    "{policy:?}"
                );
                assert_eq!(needed_bytes, 16 * MIB, "{policy:?}");
                assert!(hint.contains("hbm"), "{policy:?}: {hint}");
                // The hint's device budget as a number: it fits, and is
                // what the text says, rounded up.
                let fit = fits_with.iter().find(|f| f.tier == Tier::Hbm).unwrap();
                assert!(!fit.over_capacity, "{policy:?}");
                let text = hinted(&hint, "hbm").unwrap();
                assert!(
                    fit.bytes <= text && text - fit.bytes <= text / 100,
                    "{policy:?}"
                );
                let mut retry = options.clone();
                retry.budgets.hbm_bytes = fit.bytes;
                assert!(plan(&w, &profile, &retry).is_ok(), "{policy:?}: {fit:?}");
            }
            other => panic!("{policy:?}: {other:?}"),
        }
        // With room for the step, dp and the peers plan it.
        options.budgets.hbm_bytes = 32 * MIB;
        assert!(fits(&w, &profile, &options).unwrap(), "{policy:?}");
        assert!(plan(&w, &profile, &options).is_ok(), "{policy:?}");
    }
}

/// `tier N unit` from a hint, in bytes.
fn hinted(hint: &str, tier: &str) -> Option<u64> {
    let (_, list) = hint.split_once("within about 2%): ")?;
    list.split(", ").find_map(|part| {
        let (name, bytes) = part.split_once(' ')?;
        (name == tier).then(|| parse_bytes(bytes).unwrap())
    })
}

#[test]
fn the_hint_gives_budgets_that_fit_and_about_three_percent_less_does_not() {
    // A 3-layer GCN over 8 partitions with too little of every tier for
    // it: each tier alone can make room.
    let profile = common::a100();
    let blocks = BlockCounts::skewed(2_000_000, 30_000_000, 8).unwrap();
    let w = build_gnn(&common::gnn_spec(GnnModel::Gcn), &blocks).unwrap();
    let mut options = PlanOptions::new(Policy::Dp, &profile);
    options.budgets.hbm_bytes = 4 << 30;
    options.budgets.host_bytes = 1 << 30;
    options.budgets.ssd_bytes = 1 << 30;
    let Err(Error::Infeasible { hint, .. }) = plan(&w, &profile, &options) else {
        panic!(
            "expected no fit: {:?}",
            plan(&w, &profile, &options).map(|p| p.predicted.peak_bytes)
        );
    };
    let mut found = 0;
    for (tier, name) in [(Tier::Hbm, "hbm"), (Tier::Host, "host"), (Tier::Ssd, "ssd")] {
        let Some(bytes) = hinted(&hint, name) else {
            continue;
        };
        found += 1;
        let with = |bytes: u64| {
            let mut trial = options.clone();
            match tier {
                Tier::Hbm => trial.budgets.hbm_bytes = bytes,
                Tier::Host => trial.budgets.host_bytes = bytes,
                Tier::Ssd => trial.budgets.ssd_bytes = bytes,
            }
            fits(&w, &profile, &trial).unwrap()
        };
        // The budget as printed fits: it is rounded up.
        assert!(with(bytes), "{name}: {hint}");
        // Less by the bisection's 2% and the printing's rounding up (at
        // most 1%).
        let less = bytes - (bytes / 32).max(2 * MIB);
        assert!(!with(less), "{name} fits with {less} bytes: {hint}");
    }
    assert!(found >= 2, "{hint}");
}

#[test]
fn the_hint_plan_adds_is_what_model_hint_gives() {
    let profile = common::a100();
    let blocks = BlockCounts::skewed(2_000_000, 30_000_000, 8).unwrap();
    let gcn = build_gnn(&common::gnn_spec(GnnModel::Gcn), &blocks).unwrap();
    // The big step for both policies (the MILP refuses it at once); the
    // GCN, short of every tier, for dp alone (the MILP would search it).
    let cases = [
        (
            workload(),
            12 * MIB,
            [1u64 << 40; 2],
            vec![Policy::Dp, Policy::Milp],
        ),
        (gcn, 4 << 30, [1 << 30; 2], vec![Policy::Dp]),
    ];
    for (w, hbm, [host, ssd], policies) in cases {
        let mut hints = Vec::new();
        for policy in policies {
            let mut options = PlanOptions::new(policy, &profile);
            options.budgets.hbm_bytes = hbm;
            options.budgets.host_bytes = host;
            options.budgets.ssd_bytes = ssd;
            let hinted = plan(&w, &profile, &options).unwrap_err();
            let bare = plan_or_infeasible(&w, &profile, &options).unwrap_err();
            let Error::Infeasible { hint, .. } = &bare else {
                panic!("{policy:?}: {bare:?}");
            };
            assert!(!hint.contains("it fits with"), "{policy:?}: {hint}");
            let hint = model_hint(&w, &profile, &options).unwrap().unwrap();
            assert!(hint.text.contains("hbm"), "{policy:?}: {hint:?}");
            assert!(
                hint.fits_with.iter().any(|f| f.tier == Tier::Hbm),
                "{policy:?}: {hint:?}"
            );
            assert_eq!(add_hint(bare, &hint), hinted, "{policy:?}");
            // Both at once, as `compare` asks them: the same.
            let (dp, milp) = dp_and_milp_hints(&w, &profile, &options).unwrap().unwrap();
            let both = if policy == Policy::Milp { milp } else { dp };
            assert_eq!(both, hint, "{policy:?}");
            hints.push(hint);
        }
        // Where a step alone is over the device, no peer's plan fits
        // either: dp's hint and milp's are the same.
        assert!(hints.windows(2).all(|h| h[0] == h[1]), "{hints:?}");
    }
    // A peer's hint, and one on several GPUs, depend on the plan tried.
    let mut options = PlanOptions::new(Policy::Greedy, &profile);
    options.budgets.hbm_bytes = 12 * MIB;
    assert_eq!(model_hint(&workload(), &profile, &options).unwrap(), None);
    options.policy = Policy::Dp;
    options.gpus = 2;
    assert_eq!(model_hint(&workload(), &profile, &options).unwrap(), None);
}

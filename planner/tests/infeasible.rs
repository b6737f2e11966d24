//! A workload with one operator too big for the device: every policy
//! reports that step at once, with the bytes it needs, and the hint the
//! budget that fits.

mod common;

use fateplan_planner::planner::fits;
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
                ..
            }) => {
                assert_eq!(
                    (tier, step, op.as_str()),
                    (Tier::Hbm, 1, "big"),
                    "{policy:?}"
                );
                assert_eq!(needed_bytes, 16 * MIB, "{policy:?}");
                assert!(hint.contains("hbm"), "{policy:?}: {hint}");
            }
            other => panic!("{policy:?}: {other:?}"),
        }
        // With room for the step, dp and the peers plan it.
        options.budgets.hbm_bytes = 32 * MIB;
        assert!(fits(&w, &profile, &options).unwrap(), "{policy:?}");
        assert!(plan(&w, &profile, &options).is_ok(), "{policy:?}");
    }
}

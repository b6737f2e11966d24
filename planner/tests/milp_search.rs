//! A milp plan says how the MILP's search ended, and a plan file that
//! says so wrongly is refused by name.

mod common;

use common::{a100, chain};
use fateplan_planner::plan::MilpSearch;
use fateplan_planner::{plan, Budgets, Fate, Plan, PlanOptions, Policy};

const MIB: u64 = 1 << 20;

/// A chain of 6 activations of 1 MiB under a 5 MiB device: some must
/// leave it, and the MILP proves its choice at once.
fn planned(policy: Policy) -> Plan {
    let profile = a100();
    let options = PlanOptions {
        budgets: Budgets {
            hbm_bytes: 5 * MIB,
            ..Budgets::from_profile(&profile)
        },
        milp_time_limit_s: 30.0,
        ..PlanOptions::new(policy, &profile)
    };
    plan(&chain(6, MIB, 1e-3), &profile, &options).unwrap()
}

#[test]
fn a_milp_plan_says_it_was_proven_and_other_plans_say_nothing() {
    let milp = planned(Policy::Milp);
    assert!(milp.tensors.iter().any(|t| t.fate != Fate::Retain));
    assert_eq!(
        milp.milp,
        Some(MilpSearch {
            proven_optimal: true,
            time_limit_s: 30.0,
            rounds: 1,
        })
    );
    assert!(!milp.to_json().is_empty());
    let read = Plan::from_json(&milp.to_json(), "milp.json").unwrap();
    assert_eq!(read.milp, milp.milp);
    assert_eq!(planned(Policy::Dp).milp, None);
    assert!(!planned(Policy::Dp).to_json().contains("\"milp\""));
    // What a summary prints, proven or not.
    assert!(milp
        .milp
        .unwrap()
        .describe()
        .starts_with("the MILP proved it optimal in the linear model of time it shares with dp"));
    let unproven = MilpSearch {
        proven_optimal: false,
        time_limit_s: 2.5,
        rounds: 1,
    };
    let text = unproven.describe();
    assert!(
        text.contains("time limit of 2.5 s ran out") && text.contains("not proven optimal"),
        "{text}"
    );
}

#[test]
fn a_plan_file_s_milp_field_is_checked() {
    let milp = planned(Policy::Milp);
    // On a dp plan.
    let mut dp = planned(Policy::Dp);
    dp.milp = milp.milp;
    let error = Plan::from_json(&dp.to_json(), "dp.json")
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("plan field milp") && error.contains("\"dp\""),
        "{error}"
    );
    // A time limit that is not a positive number of seconds.
    for bad in [0.0, -1.0] {
        let mut plan = milp.clone();
        plan.milp = Some(MilpSearch {
            proven_optimal: false,
            time_limit_s: bad,
            rounds: 1,
        });
        let error = Plan::from_json(&plan.to_json(), "milp.json")
            .unwrap_err()
            .to_string();
        assert!(error.contains("plan field milp.time_limit_s"), "{error}");
    }
    // An unknown field inside it.
    let text = milp
        .to_json()
        .replace("\"proven_optimal\"", "\"proven\": true, \"proven_optimal\"");
    let error = Plan::from_json(&text, "milp.json").unwrap_err().to_string();
    assert!(error.contains("proven"), "{error}");
    // Rounds: at least one, at most as many as the planner runs.
    for bad in [0, 9] {
        let mut plan = milp.clone();
        plan.milp = Some(MilpSearch {
            rounds: bad,
            ..milp.milp.unwrap()
        });
        let error = Plan::from_json(&plan.to_json(), "milp.json")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("plan field milp.rounds") && error.contains(&format!("{bad}:")),
            "{error}"
        );
    }
    // A first round is not written, and read back as one.
    assert!(!milp.to_json().contains("\"rounds\""));
    assert_eq!(
        Plan::from_json(&milp.to_json(), "milp.json")
            .unwrap()
            .milp
            .unwrap()
            .rounds,
        1
    );
}

/// Device bytes held at every step are the same to the MILP as a device
/// that much smaller; with the whole device held, no fates fit.
#[test]
fn bytes_held_at_each_step_shrink_the_device_the_milp_fills() {
    use fateplan_planner::passes::cost::{Choices, FateSet};
    use fateplan_planner::passes::lifetimes::Lifetimes;
    use fateplan_planner::passes::milp::{solve, solve_held, Solved};

    let profile = a100();
    let w = chain(6, MIB, 1e-3);
    let lives = Lifetimes::compute(&w);
    let choices = Choices::build(&w, &lives, &profile, FateSet::ALL);
    let bytes: Vec<u64> = w.tensors.iter().map(|t| t.bytes).collect();
    let budgets = |hbm_bytes| Budgets {
        hbm_bytes,
        ..Budgets::from_profile(&profile)
    };
    let steps = w.ops.len();
    let objective = |outcome: Option<fateplan_planner::passes::milp::MilpOutcome>| {
        let outcome = outcome.expect("fates that fit");
        assert!(outcome.optimal);
        outcome.objective_s
    };
    let free = objective(solve(&choices, &bytes, &budgets(6 * MIB), 0, 30.0).unwrap());
    let mut tighter = Vec::new();
    for held in [MIB / 2, MIB] {
        let smaller = solve(&choices, &bytes, &budgets(6 * MIB - held), 0, 30.0).unwrap();
        let held = solve_held(
            &choices,
            &bytes,
            &budgets(6 * MIB),
            0,
            &vec![held; steps],
            30.0,
        );
        let held = match held.unwrap() {
            Solved::Plan(outcome) => Some(outcome),
            other => panic!("{other:?}"),
        };
        let (smaller, held) = (objective(smaller), objective(held));
        assert!(
            (held - smaller).abs() <= 1e-9 * smaller,
            "{held} s vs {smaller} s"
        );
        tighter.push(held);
    }
    // The chain is slower as the device shrinks, so the held bytes count.
    assert!(free < tighter[1], "{free} s, then {tighter:?}");
    let none = solve_held(
        &choices,
        &bytes,
        &budgets(6 * MIB),
        0,
        &vec![6 * MIB; steps],
        30.0,
    );
    assert!(matches!(none.unwrap(), Solved::NoFit));
}

//! `dp` against the exact MILP on a fixed set of 200 small instances the
//! MILP solves (`fateplan_planner::optimality`): within 1% of the optimum
//! everywhere, and never without a plan where the MILP has one. `cargo
//! bench --bench optimality` prints the distribution of gaps and times.

use fateplan_planner::optimality::compare;
use fateplan_planner::Profile;

/// Instances in the set.
const COUNT: usize = 200;

#[test]
fn dp_is_within_one_percent_of_the_milp() {
    let text = include_str!("../../profiles/a100-80g.json");
    let profile = Profile::from_json(text, "a100-80g.json").unwrap();
    let result = compare(&profile, COUNT, 2_000).unwrap();
    assert!(result.mismatches.is_empty(), "{:?}", result.mismatches);
    assert_eq!(
        result.solved.len(),
        COUNT,
        "fewer than {COUNT} instances with a MILP plan among the candidates"
    );
    let mut failures = Vec::new();
    let mut gaps = Vec::new();
    for s in &result.solved {
        if !s.proven {
            failures.push(format!(
                "candidate {} ({}): the MILP did not prove its optimum",
                s.index, s.name
            ));
            continue;
        }
        match s.gap() {
            None => failures.push(format!(
                "candidate {} ({}, share {}, {}): dp finds no plan where the MILP finds {} s",
                s.index,
                s.name,
                s.share,
                s.fates.names(),
                s.milp_s
            )),
            Some(gap) => {
                if gap > 0.01 {
                    failures.push(format!(
                        "candidate {} ({}, share {}, {}): dp {} s vs optimum {} s ({:.2}% over)",
                        s.index,
                        s.name,
                        s.share,
                        s.fates.names(),
                        s.dp_s.unwrap_or(f64::NAN),
                        s.milp_s,
                        gap * 100.0
                    ));
                }
                // dp's plans obey the MILP's constraints: below the optimum
                // would mean a constraint the MILP has and dp ignores.
                assert!(gap > -1e-9, "candidate {}: dp below the optimum", s.index);
                gaps.push(gap);
            }
        }
    }
    gaps.sort_by(f64::total_cmp);
    let exact = gaps.iter().filter(|&&g| g <= 1e-9).count();
    eprintln!(
                "dp vs MILP on {} instances ({} infeasible candidates and {} MILP solver failures skipped: {:?}): \
         exact on {exact}, largest gap {:.3}%",
        result.solved.len(),
        result.infeasible,
        result.solver_errors.len(),
        result.solver_errors,
        gaps.last().copied().unwrap_or(0.0) * 100.0
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

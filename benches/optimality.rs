//! dp against the exact MILP on the 200-instance optimality set
//! (`fateplan_planner::optimality`): the distribution of gaps, and the
//! time each solver takes, side by side on the same instances.
//!
//! Run: `cargo bench --bench optimality`.

use fateplan::planner::optimality::compare;

fn main() {
    let profile = fateplan::profiles::builtin("a100-80g").expect("built-in profile");
    let result = compare(&profile, 200, 2_000).expect("instances build");
    let mut gaps: Vec<f64> = result.solved.iter().filter_map(|s| s.gap()).collect();
    gaps.sort_by(f64::total_cmp);
    let without = result.solved.iter().filter(|s| s.dp_s.is_none()).count();
    let unproven = result.solved.iter().filter(|s| !s.proven).count();
    let at = |q: f64| {
        if gaps.is_empty() {
            f64::NAN
        } else {
            gaps[((gaps.len() - 1) as f64 * q).round() as usize] * 100.0
        }
    };
    println!(
                "instances {} (MILP plans; {} infeasible candidates and {} MILP solver failures skipped), MILP unproven {unproven}, dp without a plan {without}",
        result.solved.len(),
        result.infeasible,
        result.solver_errors.len()
    );
    println!(
        "gap over the optimum: exact {} of {}; median {:.3}%, p90 {:.3}%, p99 {:.3}%, max {:.3}%; over 1%: {}",
        gaps.iter().filter(|&&g| g <= 1e-9).count(),
        gaps.len(),
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0),
        gaps.iter().filter(|&&g| g > 0.01).count()
    );
    let mut dp: Vec<f64> = result.solved.iter().map(|s| s.dp_seconds).collect();
    let mut milp: Vec<f64> = result.solved.iter().map(|s| s.milp_seconds).collect();
    dp.sort_by(f64::total_cmp);
    milp.sort_by(f64::total_cmp);
    let median = |v: &[f64]| v.get(v.len() / 2).copied().unwrap_or(f64::NAN) * 1e3;
    println!(
        "time per instance: dp median {:.3} ms (total {:.1} ms), MILP median {:.3} ms (total {:.1} ms)",
        median(&dp),
        dp.iter().sum::<f64>() * 1e3,
        median(&milp),
        milp.iter().sum::<f64>() * 1e3
    );
}

//! Pass 3, the exact reference: a mixed-integer program over the cost
//! model's choices (fates and issue steps), solved with good_lp's pure-Rust
//! microlp backend. It is exact over the same choices the `dp` planner
//! searches, so on small instances it measures how far `dp` is from the
//! optimum. It is meant for tens of tensors.
//!
//! Variables: `x[t][i]` = 1 when tensor `t` takes its `i`-th choice (none
//! set: its baseline); `u` = 1 when anything uses the SSD (staging buffers
//! are then held in host memory); `T`, the iteration time.
//!
//! Constraints: at most one choice per tensor; at every step, the device
//! bytes left after the freed ones, and the host and SSD bytes of away
//! copies (plus staging), within budget; `T` at least compute plus added
//! seconds, and at least each link's busy time. Objective: minimise `T`.

use good_lp::{
    constraint, microlp, variable, Expression, ProblemVariables, Solution, SolutionStatus,
    SolverModel, Variable, WithTimeLimit,
};

use super::cost::Choices;
use super::dp::Assignment;
use crate::plan::Budgets;
use crate::{Error, Result, Tier};

/// Most binary variables the MILP accepts.
pub const MAX_VARIABLES: usize = 6_000;

/// The solver's answer.
#[derive(Debug, Clone)]
pub struct MilpOutcome {
    pub assignment: Assignment,
    pub objective_s: f64,
    /// Whether optimality was proven (false: the time limit ran out first).
    pub optimal: bool,
    pub variables: usize,
    pub constraints: usize,
}

/// Steps where the set of choices touching a tier can change: the tier's
/// usage is constant between consecutive boundaries.
fn segments(points: &mut Vec<u32>, steps: u32) -> Vec<(u32, u32)> {
    points.push(0);
    points.push(steps);
    points.sort_unstable();
    points.dedup();
    points
        .windows(2)
        .map(|w| (w[0], w[1]))
        .filter(|&(s, e)| s < e && e <= steps)
        .collect()
}

/// How a search of [`solve_held`] ended.
#[derive(Debug)]
pub enum Solved {
    Plan(MilpOutcome),
    /// No choice of fates fits the budgets.
    NoFit,
    /// The time limit ran out before any plan was found.
    OutOfTime,
}

/// Solves the MILP; `Ok(None)` when no choice of fates fits the budgets.
pub fn solve(
    choices: &Choices,
    bytes: &[u64],
    budgets: &Budgets,
    ssd_staging_bytes: u64,
    time_limit_s: f64,
) -> Result<Option<MilpOutcome>> {
    match solve_held(
        choices,
        bytes,
        budgets,
        ssd_staging_bytes,
        &[],
        time_limit_s,
    )? {
        Solved::Plan(outcome) => Ok(Some(outcome)),
        Solved::NoFit => Ok(None),
        Solved::OutOfTime => Err(no_plan_in_time(time_limit_s)),
    }
}

/// The error when the time limit ran out before the MILP found any plan.
pub fn no_plan_in_time(time_limit_s: f64) -> Error {
    Error::MilpOutOfTime {
        time_limit_s,
        note: String::new(),
    }
}

/// [`solve`] with `held_hbm[step]` more device bytes at each step than
/// the choices count: what the memory pass found the model missed in a
/// plan before ([`crate::passes::dp::Held`], as dp is planned again).
pub fn solve_held(
    choices: &Choices,
    bytes: &[u64],
    budgets: &Budgets,
    ssd_staging_bytes: u64,
    held_hbm: &[u64],
    time_limit_s: f64,
) -> Result<Solved> {
    let mut vars = ProblemVariables::new();
    let mut x: Vec<Vec<Variable>> = Vec::with_capacity(choices.options.len());
    let mut count = 0usize;
    for options in &choices.options {
        let row: Vec<Variable> = options
            .iter()
            .map(|_| vars.add(variable().binary()))
            .collect();
        count += row.len();
        x.push(row);
    }
    if count > MAX_VARIABLES {
        return Err(Error::invalid(
            "policy milp",
            format!(
                "the workload has {count} choices; the exact MILP is for small instances \
                 (at most {MAX_VARIABLES}); use the dp policy (--policy dp)"
            ),
        ));
    }
    let any_ssd = choices
        .options
        .iter()
        .flat_map(|o| o.iter())
        .any(|c| c.uses_ssd());
    let u = vars.add(variable().binary());
    let time = vars.add(variable().min(0.0));
    // Seconds are scaled to the compute time, bytes to each budget, to keep
    // the coefficients near one.
    let second = choices.compute_s().max(1e-9);
    let mut cost = Expression::from(choices.compute_s() / second);
    let mut links: [Expression; 4] = Default::default();
    for (t, options) in choices.options.iter().enumerate() {
        for (i, c) in options.iter().enumerate() {
            cost += (c.cost_s / second) * x[t][i];
            for (link, s) in links.iter_mut().zip(c.link_s) {
                *link += (s / second) * x[t][i];
            }
        }
    }
    let mut problem = vars
        .minimise(time)
        .using(microlp)
        .with_time_limit(time_limit_s);
    let mut constraints = 0usize;
    problem.add_constraint(constraint!(time >= cost));
    for link in links {
        problem.add_constraint(constraint!(time >= link));
        constraints += 1;
    }
    for (t, row) in x.iter().enumerate() {
        if row.is_empty() {
            continue;
        }
        let sum: Expression = row.iter().copied().sum();
        problem.add_constraint(constraint!(sum.clone() <= 1));
        let ssd: Expression = row
            .iter()
            .zip(choices.options[t].iter())
            .filter(|(_, c)| c.uses_ssd())
            .map(|(v, _)| *v)
            .sum();
        if any_ssd {
            problem.add_constraint(constraint!(ssd <= u));
            constraints += 1;
        }
        constraints += 1;
    }
    if !any_ssd {
        problem.add_constraint(constraint!(u <= 0));
    }
    // The device: wherever the baseline is over budget.
    let hbm = budgets.hbm_bytes as f64;
    let mut points: Vec<u32> = choices
        .options
        .iter()
        .flat_map(|o| o.iter())
        .flat_map(|c| {
            c.hbm_free
                .iter()
                .flat_map(|&(s, e)| [s, e])
                .chain(c.hbm_add.iter().flat_map(|&(s, e, _)| [s, e]))
                .collect::<Vec<_>>()
        })
        .collect();
    for (start, end) in segments(&mut points, choices.slots) {
        // `held_hbm` is per step: both of a step's slots carry it.
        let worst = (start as usize..end as usize)
            .map(|slot| choices.base_hbm[slot] + held_hbm.get(slot / 2).copied().unwrap_or(0))
            .max()
            .unwrap_or(0);
        let mut freed = Expression::default();
        let mut most_added = 0.0;
        for (t, options) in choices.options.iter().enumerate() {
            for (i, c) in options.iter().enumerate() {
                let mut net = if c.frees(start) { bytes[t] as f64 } else { 0.0 };
                for &(s, e, added) in &c.hbm_add {
                    if s <= start && start < e {
                        net -= added as f64;
                        most_added += added as f64;
                    }
                }
                if net != 0.0 {
                    freed += (net / hbm) * x[t][i];
                }
            }
        }
        if worst as f64 + most_added <= hbm {
            continue;
        }
        let need = (worst as f64 - hbm) / hbm;
        problem.add_constraint(constraint!(freed >= need));
        constraints += 1;
    }
    // Host and SSD: the away copies.
    for tier in [Tier::Host, Tier::Ssd] {
        let budget = budgets.of(tier) as f64;
        let mut points: Vec<u32> = choices
            .options
            .iter()
            .flat_map(|o| o.iter())
            .filter_map(|c| c.away.filter(|a| a.0 == tier))
            .flat_map(|(_, s, e)| [s, e])
            .collect();
        for (start, _) in segments(&mut points, choices.slots) {
            let mut held = Expression::default();
            let mut most = 0.0;
            for (t, options) in choices.options.iter().enumerate() {
                let mut widest = 0.0f64;
                for (i, c) in options.iter().enumerate() {
                    if let Some((a, s, e)) = c.away {
                        if a == tier && s <= start && start < e {
                            held += (bytes[t] as f64 / budget.max(1.0)) * x[t][i];
                            widest = bytes[t] as f64;
                        }
                    }
                }
                most += widest;
            }
            let staging = if tier == Tier::Host {
                ssd_staging_bytes as f64
            } else {
                0.0
            };
            if most + staging <= budget {
                continue;
            }
            if tier == Tier::Host && any_ssd {
                held += (staging / budget.max(1.0)) * u;
            }
            problem.add_constraint(constraint!(held <= 1.0));
            constraints += 1;
        }
    }
    let started = std::time::Instant::now();
    let solution = match problem.solve() {
        Ok(solution) => solution,
        Err(good_lp::ResolutionError::Infeasible) => return Ok(Solved::NoFit),
        // microlp says "Time limit reached before finding a feasible
        // solution"; the clock where it words it otherwise.
        Err(other)
            if other.to_string().contains("Time limit")
                || started.elapsed().as_secs_f64() >= time_limit_s =>
        {
            return Ok(Solved::OutOfTime)
        }
        Err(other) => {
            return Err(Error::SolverFailed {
                solver: "microlp".into(),
                message: other.to_string(),
            })
        }
    };
    let optimal = matches!(solution.status(), SolutionStatus::Optimal);
    let mut assignment = Assignment::baseline(choices);
    for (t, row) in x.iter().enumerate() {
        for (i, v) in row.iter().enumerate() {
            if solution.value(*v) > 0.5 {
                assignment.picks[t] = Some(i as u16);
            }
        }
    }
    let objective_s = assignment.objective_s(choices);
    Ok(Solved::Plan(MilpOutcome {
        assignment,
        objective_s,
        optimal,
        variables: count + 2,
        constraints,
    }))
}

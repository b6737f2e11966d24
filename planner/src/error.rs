//! The planner's one error type.

use crate::Tier;

/// [`crate::units::bytes_exact`], for the error's fields.
fn bytes(n: &u64) -> String {
    crate::units::bytes_exact(*n)
}

/// One tier's budget with which a plan fits, the other budgets as given,
/// as an infeasible error's hint names it ([`Error::Infeasible`]'s
/// `fits_with`): a caller may plan again with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FitsWith {
    pub tier: Tier,
    /// The budget found: it fits, and one about 2% smaller does not.
    pub bytes: u64,
    /// Whether it is more than the profile has (it could not be given).
    pub over_capacity: bool,
}

/// Everything that can go wrong while building a workload, reading a profile
/// or plan, or planning. More variants may come: a `match` on it needs a
/// wildcard arm.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No plan fits: `tier` is over its budget at `step` by `bytes_over`.
    #[error(
        "infeasible: {tier} needs {} at step {step} ({op}) but its budget is {}: {} over{hint}",
        bytes(.needed_bytes),
        bytes(.budget_bytes),
        bytes(.bytes_over)
    )]
    Infeasible {
        tier: Tier,
        step: u32,
        op: String,
        needed_bytes: u64,
        budget_bytes: u64,
        bytes_over: u64,
        /// What would fit, when the planner could work it out ("; ..."), or empty.
        hint: String,
        /// The budgets the hint names, as numbers: per tier, the smallest
        /// found (within about 2%) with which a plan fits, the others as
        /// given. Empty where none was worked out or none fits.
        fits_with: Vec<FitsWith>,
    },
    /// Input that cannot be used, with where it came from (a file, a field,
    /// an operator or tensor name) and the offending value.
    #[error("invalid input: {context}: {message}")]
    InvalidInput { context: String, message: String },
    /// A plan failed the sanity pass.
    #[error("plan rejected at step {step} ({op}): {message}")]
    PlanRejected {
        step: u32,
        op: String,
        message: String,
    },
    /// The MILP's time limit ran out before it found any plan that fits
    /// (`note`: how the limit was shared, or what the last plan it found
    /// broke; or empty).
    #[error("policy milp: no plan found within its time limit of {} s (--milp-time-limit; `PlanOptions::milp_time_limit_s` in the library){note}", crate::units::figure(*.time_limit_s))]
    MilpOutOfTime { time_limit_s: f64, note: String },
    /// The MILP's solver stopped without a plan for a reason of its own
    /// (a numerical failure, such as a singular matrix): not a sign that
    /// no plan fits, nor of bad input. `message` is the solver's.
    #[error(
        "policy milp: the solver ({solver}) stopped without a plan: {message}; a numerical \
         failure of the solver, not a sign that no plan fits (the dp policy plans it)"
    )]
    SolverFailed { solver: String, message: String },
    /// A bound that keeps planning finite was reached.
    #[error("resources exhausted: {0}")]
    ResourcesExhausted(String),
    /// A bug in fateplan.
    #[error("internal error (a bug in fateplan): {0}")]
    Internal(String),
}

impl Error {
    pub(crate) fn invalid(context: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidInput {
            context: context.into(),
            message: message.into(),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The MILP's time limit is said as given, not in hundreds of digits.
    #[test]
    fn a_time_limit_is_said_as_a_person_reads_it() {
        let said = |time_limit_s: f64| {
            Error::MilpOutOfTime {
                time_limit_s,
                note: String::new(),
            }
            .to_string()
        };
        assert!(said(60.0).contains("time limit of 60 s"), "{}", said(60.0));
        assert!(
            said(1e-300).contains("time limit of 1e-300 s"),
            "{}",
            said(1e-300)
        );
        assert!(
            said(0.25).contains("time limit of 0.25 s"),
            "{}",
            said(0.25)
        );
    }
}

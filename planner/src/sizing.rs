//! Sizing a GNN workload's vertex partitions for a device: the fewest
//! partitions at which dp finds fates that fit.
//!
//! Fewer partitions are faster. Each destination partition's aggregation
//! reads every source partition's rows, so a layer streams its input about
//! once per partition that does not stay on the device, and every block
//! carries its own overheads; a P-partition workload also has about P²
//! blocks per layer to plan. The fewest partitions that fit are where the
//! prediction is best or close to it (docs/planner.md has the sweep).
//!
//! The search: the fewest partitions whose largest step (inputs and
//! outputs at once) fits the device budget is a lower bound, found by
//! doubling and bisection over the step sizes alone. From there the count
//! doubles until dp's memory model fits it ([`crate::planner::fits`]), and
//! a bisection between the last count that did not fit and the first that
//! did finds the boundary. Fit is not strictly monotone in the count near
//! the boundary (GAT's attention tensors shift with the block shapes), so
//! the result is a count that fits with one fewer not fitting, not always
//! the very fewest.

use crate::planner::{fits, PlanOptions};
use crate::profile::Profile;
use crate::workload::{TensorKind, Workload};
use crate::Error;

/// The chosen partition count and the counts tried on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizing {
    pub partitions: u32,
    /// Every count dp's memory model was asked about, in order, and
    /// whether it fit.
    pub tried: Vec<(u32, bool)>,
    /// Whether no count up to the most allowed fits: `partitions` is then
    /// the most allowed, for the planner to report why it does not fit.
    pub none_fit: bool,
}

/// Bytes a step needs at once: its inputs and outputs, parameters excluded.
pub fn largest_step_bytes(workload: &Workload) -> u64 {
    workload
        .ops
        .iter()
        .map(|op| {
            op.inputs
                .iter()
                .chain(&op.outputs)
                .map(|&t| workload.tensor(t))
                .filter(|t| t.kind != TensorKind::Parameter)
                .map(|t| t.bytes)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

/// The fewest partitions, from 1 to `most`, at which dp fits the workload
/// `build` makes, and that workload. Errors from `build` and from the
/// planner's validation pass through.
pub fn fewest_partitions<E: From<Error>>(
    build: &dyn Fn(u32) -> Result<Workload, E>,
    most: u32,
    profile: &Profile,
    options: &PlanOptions,
) -> Result<(Workload, Sizing), E> {
    let most = most.max(1);
    let budget = options.budgets.hbm_bytes;
    let step_fits = |p: u32| -> Result<bool, E> { Ok(largest_step_bytes(&build(p)?) <= budget) };
    // The lower bound: doubling, then bisection between the last count
    // whose largest step is too big and the first whose step fits.
    let (mut low, mut high) = (0u32, 1u32);
    while !step_fits(high)? {
        if high == most {
            let workload = build(most)?;
            return Ok((
                workload,
                Sizing {
                    partitions: most,
                    tried: Vec::new(),
                    none_fit: true,
                },
            ));
        }
        low = high;
        high = high.saturating_mul(2).min(most);
    }
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if step_fits(mid)? {
            high = mid;
        } else {
            low = mid;
        }
    }
    // dp's model from the lower bound on: doubling, then bisection.
    let mut tried = Vec::new();
    let mut fit = |p: u32| -> Result<(bool, Workload), E> {
        let workload = build(p)?;
        let ok = fits(&workload, profile, options)?;
        tried.push((p, ok));
        Ok((ok, workload))
    };
    let mut low = high - 1; // does not fit (its step alone is too big), or 0
    let (mut ok, mut found) = fit(high)?;
    while !ok {
        if high == most {
            return Ok((
                found,
                Sizing {
                    partitions: most,
                    tried,
                    none_fit: true,
                },
            ));
        }
        low = high;
        high = high.saturating_mul(2).min(most);
        (ok, found) = fit(high)?;
    }
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        let (ok, workload) = fit(mid)?;
        if ok {
            high = mid;
            found = workload;
        } else {
            low = mid;
        }
    }
    Ok((
        found,
        Sizing {
            partitions: high,
            tried,
            none_fit: false,
        },
    ))
}

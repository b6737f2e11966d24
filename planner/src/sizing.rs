//! Sizing a GNN workload's vertex partitions for a device: the fewest
//! partitions at which the policy finds fates that fit (dp and milp: dp's
//! memory model, and under dp the peer policies' plans it takes beside
//! the model's; a peer policy: its own plan), then the fastest near them
//! by the policy's prediction. Where no count fits, the count reported is
//! the nearest: under dp and milp on one GPU, the one that fits with the
//! least device budget ([`least_device_count`]).
//!
//! Fewer partitions are mostly faster. Each destination partition's
//! aggregation reads every source partition's rows, so a layer streams its
//! input about once per partition that does not stay on the device, and
//! every block carries its own overheads; a P-partition workload also has
//! about P² blocks per layer to plan. The fewest partitions that fit are
//! where the prediction is best or close to it, but not always at it
//! (docs/planner.md has the sweep): there the device is so full that more
//! must move, and one or two partitions more can be faster.
//!
//! The search: the fewest partitions whose largest step (inputs and
//! outputs at once) fits the device budget is a lower bound, found by
//! doubling and bisection over the step sizes alone. From there the count
//! doubles until it fits, and a bisection between the last count that did
//! not fit and the first that did finds the boundary. Under dp and milp a
//! count fits where dp's memory model finds fates that fit
//! ([`crate::planner::fits`]); under a peer policy, where the policy's own
//! plan fits (made without the infeasible plan's hint): its fates are not
//! dp's, and may need more partitions or fit none (a GCN of 4 million
//! nodes under 8 GiB: dp fits 2 partitions, hongtu 3, recompute-all none).
//! The plan of the count found is kept, not made again.
//!
//! Fit is not strictly monotone in the count near the boundary (GAT's
//! attention tensors shift with the block shapes), so the result is a
//! count that fits with one fewer not fitting, not always the very fewest.
//!
//! On several GPUs with the exchange chosen per layer,
//! [`size_partitions`] searches twice. With the options as given, a count
//! fits where some strategy vector fits ([`crate::planner::fits`] tries
//! every halo through host memory first, which holds the least on the
//! device, then the planner's other vectors). Sending halos GPU to GPU is
//! faster but needs room for them, which more partitions make: the fewest
//! partitions at which every layer's halo fits GPU to GPU are a candidate
//! too, and the policy's prediction picks (dp's under milp). That second
//! search goes up to [`PEER_SEARCH_FACTOR`] times the first count: every
//! partition more streams each layer once more (papers100M's GAT on 4 GPUs
//! fits GPU to GPU at 121 partitions, predicted 3.5 times slower than at
//! 5, and planning it took 38 s). Where the first search finds no count,
//! the second is not run: every halo GPU to GPU is one of the vectors the
//! first tried.
//!
//! Then [`size_partitions`] walks from the count found (not under milp,
//! whose plan of a larger count may have more choices than it accepts): it
//! plans the next count up with the policy, and the next, until
//! [`WALK_PATIENCE`] counts in a row are not predicted faster than the
//! best so far (at most [`WALK_STEPS`]); where no count up is faster, it
//! walks down the same way. [`size_partitions_choosing`] makes a choice at
//! each count it walks to (`--sweep auto`: the sweeps) and compares those
//! counts by the plans of those choices; on several GPUs the two
//! searches' counts, where the walk starts, are still compared by their
//! plans as built.
//! Under dp the counts below can fit: dp's memory model, which the search
//! asks, does not weigh the fates of the blocks beside a step as its plan
//! does (ogbn-products' GAT under 8 GiB: the model fits 3 partitions at the
//! fewest, the plan 2). Under a peer policy the search planned them
//! already, and the walk down stops at one found not to fit. The fastest
//! planned is taken, with its plan. The walk usually plans three or four
//! counts (docs/planner.md has its times).

use std::time::Instant;

use rayon::prelude::*;

use crate::exchange::MultiGpu;
use crate::gnn::Sweeps;
use crate::plan::{Plan, Strategy};
use crate::planner::{fits, least_device_budget, plan_or_infeasible, with_strategies, PlanOptions};
use crate::policy::Policy;
use crate::profile::Profile;
use crate::workload::{OpKind, TensorKind, Workload};
use crate::{Error, Tier};

/// How far beyond the first count the search with every halo GPU to GPU
/// goes: up to this many times that count.
pub const PEER_SEARCH_FACTOR: u32 = 4;

/// The most counts the walk from the fewest that fit goes in either
/// direction ([`size_partitions`]): a bound on the planning time. The
/// walk stops after [`WALK_PATIENCE`] counts in a row not faster, well
/// before it on the datasets' workloads (nine counts at most,
/// docs/planner.md and docs/scaling.md).
pub const WALK_STEPS: u32 = 32;

/// How many counts in a row not faster than the best so far end the walk
/// in one direction ([`size_partitions`]): one count slower does not, as
/// the prediction is not unimodal in the count (the products-sized GCN
/// by outputs under 3.13 GiB on the `h100-measured` profile: 639 ms at 4
/// partitions, 715 at 5, 633 at 6; docs/planner.md).
pub const WALK_PATIENCE: u32 = 2;

/// Whether `options` leave the exchange strategy to the planner, per
/// layer, on several GPUs: where [`size_partitions`] searches twice.
pub fn per_layer(options: &PlanOptions) -> bool {
    options.gpus > 1 && options.multi.as_ref().is_some_and(|m| m.forced.is_none())
}

/// The chosen partition count and the counts tried on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Sizing {
    pub partitions: u32,
    /// Every count asked about (dp's memory model, or a peer policy's
    /// plan), in order, and whether it fit.
    pub tried: Vec<(u32, bool)>,
    /// Whether no count up to the most allowed fits: `partitions` is then
    /// the count that comes nearest, for the planner to report why it
    /// does not fit: under dp and milp on one GPU, the count that fits
    /// with the least device budget ([`least_device_count`]); under a
    /// peer policy, the count tried whose plan needed the fewest device
    /// bytes; else the most allowed.
    pub none_fit: bool,
    /// Where none fit and `partitions` is [`least_device_count`]'s: the
    /// device budget with which it fits, and the counts asked.
    pub least_device: Option<LeastDevice>,
}

/// What [`least_device_count`] found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeastDevice {
    /// The count that fits with the least device budget of those asked.
    pub partitions: u32,
    /// That budget, the other budgets as given (within about 2%).
    pub bytes: u64,
    /// The last count asked: the counts asked were 1 to it, a quarter
    /// apart.
    pub last_asked: u32,
    /// Whether the walk stopped short of the most allowed at
    /// [`LEAST_OPERATORS`] with the budget still falling (the least at
    /// the last count asked): more partitions may need less.
    pub still_falling: bool,
}

/// Bytes a step needs at once: its inputs and outputs, parameters
/// excluded, and an input its output takes over
/// ([`Workload::inputs_taken_over`]) counted once, as the output.
pub fn largest_step_bytes(workload: &Workload) -> u64 {
    let taken = workload.inputs_taken_over();
    workload
        .ops
        .iter()
        .zip(taken)
        .map(|(op, taken)| {
            op.inputs
                .iter()
                .filter(|&&t| Some(t) != taken)
                .chain(&op.outputs)
                .map(|&t| workload.tensor(t))
                .filter(|t| t.kind != TensorKind::Parameter)
                .map(|t| t.bytes)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

/// The fewest partitions, from 1 to `most`, at which `options`' policy
/// fits the workload `build` makes (the module documentation says how a
/// count fits), and that workload. Errors from `build` and from the
/// planner's validation pass through.
pub fn fewest_partitions<E: From<Error>>(
    build: &dyn Fn(u32) -> Result<Workload, E>,
    most: u32,
    profile: &Profile,
    options: &PlanOptions,
) -> Result<(Workload, Sizing), E> {
    let (workload, sizing, _) = search(build, 1, most, profile, options)?;
    Ok((workload, sizing))
}

/// Whether `options`' policy fits `workload`: [`fits`] under dp and milp
/// (dp's memory model, and under dp the peers' plans it would take); a
/// peer policy's own plan, handed back where it fits, and where it does
/// not, the device bytes it needed (`Err`'s `needed_bytes`).
fn policy_fits(
    workload: &Workload,
    profile: &Profile,
    options: &PlanOptions,
) -> Result<(bool, Option<MadePlan>, Option<u64>), Error> {
    if !options.policy.is_peer() {
        return Ok((fits(workload, profile, options)?, None, None));
    }
    let started = Instant::now();
    match plan_or_infeasible(workload, profile, options) {
        Ok(plan) => Ok((
            true,
            Some(MadePlan {
                plan,
                seconds: started.elapsed().as_secs_f64(),
            }),
            None,
        )),
        Err(Error::Infeasible {
            tier, needed_bytes, ..
        }) => Ok((false, None, (tier == Tier::Hbm).then_some(needed_bytes))),
        Err(other) => Err(other),
    }
}

/// How many counts in a row that need no smaller device budget than the
/// least so far end [`least_device_count`]'s walk: the budgets are found
/// to within about 2%, so neighbours that need the same differ by that
/// much either way.
pub const LEAST_PATIENCE: u32 = 3;

/// The most operators of a workload [`least_device_count`] asks about
/// (beyond 1 partition, which it always asks):
/// each count asked bisects the device budget, which takes seconds at
/// hundreds of partitions (ogbn-arxiv's GCN: 75,026 operators in 121
/// partitions, 331,526 in 256). A bound on the work, not on the time, so
/// that the count reported does not depend on the machine.
pub const LEAST_OPERATORS: usize = 100_000;

/// Where no count fits: of the counts asked, the one that fits with the
/// smallest device budget (the other budgets as given), and that budget
/// ([`least_device_budget`], within about 2%). The counts asked go up
/// from 1 a quarter apart (1, 2, ..., 8, 10, 12, 15, ..., and `most`)
/// until [`LEAST_PATIENCE`] in a row need no less than the least so far,
/// or the next has more than [`LEAST_OPERATORS`] operators (1 partition
/// is always asked); where the bound stops it with the budget still
/// falling, more partitions may need less ([`LeastDevice`]): fewer
/// partitions hold larger steps, more hold more blocks and partial weight
/// gradients at once, and the least is between (ogbn-arxiv's GCN with no
/// host memory: 664 MiB at 1 partition, about 500 MiB at 4 to 8, 1.17
/// GiB at 128).
/// `None` under a peer policy, on several GPUs, and where no device
/// budget fits any count asked.
pub fn least_device_count<E: From<Error>>(
    build: &dyn Fn(u32) -> Result<Workload, E>,
    most: u32,
    profile: &Profile,
    options: &PlanOptions,
) -> Result<Option<LeastDevice>, E> {
    if options.policy.is_peer() || options.gpus > 1 {
        return Ok(None);
    }
    let mut least: Option<(u32, u64)> = None;
    let most = most.max(1);
    let (mut p, mut misses, mut last_asked) = (1u32, 0u32, 1u32);
    let mut cut = false;
    loop {
        let workload = build(p)?;
        if p > 1 && workload.ops.len() > LEAST_OPERATORS {
            cut = true;
            break;
        }
        last_asked = p;
        let need = least_device_budget(&workload, profile, options)?;
        match (need, least) {
            (Some(bytes), Some((_, best))) if bytes >= best => misses += 1,
            (Some(bytes), _) => (least, misses) = (Some((p, bytes)), 0),
            // No device budget fits this count: not nearer, once some
            // count is found.
            (None, Some(_)) => misses += 1,
            (None, None) => {}
        }
        if p == most || misses >= LEAST_PATIENCE {
            break;
        }
        // The last step lands on the most allowed.
        p = (p + 1).max(p.saturating_add(p / 4)).min(most);
    }
    Ok(least.map(|(partitions, bytes)| LeastDevice {
        partitions,
        bytes,
        last_asked,
        still_falling: cut && partitions == last_asked,
    }))
}

/// [`fewest_partitions`] from `least` partitions on (fewer are known not
/// to fit), with the plan of the count found where the fit made one (a
/// peer policy).
fn search<E: From<Error>>(
    build: &dyn Fn(u32) -> Result<Workload, E>,
    least: u32,
    most: u32,
    profile: &Profile,
    options: &PlanOptions,
) -> Result<(Workload, Sizing, Option<MadePlan>), E> {
    let most = most.max(1);
    let budget = options.budgets.hbm_bytes;
    let step_fits = |p: u32| -> Result<bool, E> { Ok(largest_step_bytes(&build(p)?) <= budget) };
    // The lower bound: doubling from `least`, then bisection between the
    // last count that cannot fit (its largest step is too big, or it is
    // below `least`; 0 at first) and the first whose step fits.
    let least = least.clamp(1, most);
    let (mut low, mut high) = (least - 1, least);
    while !step_fits(high)? {
        if high == most {
            let (partitions, workload, least_device) =
                nearest(build, most, profile, options, None)?;
            return Ok((
                workload,
                Sizing {
                    partitions,
                    tried: Vec::new(),
                    none_fit: true,
                    least_device,
                },
                None,
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
    // The policy's fit from the lower bound on: doubling, then bisection.
    let mut tried = Vec::new();
    // A peer's count whose plan needed the fewest device bytes, and them.
    let mut closest: Option<(u64, u32)> = None;
    let mut fit = |p: u32| -> Result<(bool, Workload, Option<MadePlan>), E> {
        let workload = build(p)?;
        let (ok, made, needed) = policy_fits(&workload, profile, options)?;
        tried.push((p, ok));
        if let Some(needed) = needed.filter(|&n| closest.is_none_or(|(c, _)| n < c)) {
            closest = Some((needed, p));
        }
        Ok((ok, workload, made))
    };
    let mut low = high - 1; // cannot fit, or 0
    let start = high;
    let (mut ok, mut found, mut made) = fit(high)?;
    while !ok {
        if high == most {
            // Whether a count fits is not monotone in the count: more
            // partitions make each step smaller but hold more partial
            // weight gradients and blocks at once, so a count between
            // two the doubling tried can fit where neither does. Before
            // saying none fits, counts a quarter apart are tried.
            let mut p = start;
            loop {
                p = (p + 1).max(p.saturating_add(p / 4));
                if p >= most {
                    break;
                }
                // The doubling's counts are known not to fit.
                if p.is_multiple_of(start) && (p / start).is_power_of_two() {
                    continue;
                }
                let (ok, workload, plan) = fit(p)?;
                if ok {
                    return Ok((
                        workload,
                        Sizing {
                            partitions: p,
                            tried,
                            none_fit: false,
                            least_device: None,
                        },
                        plan,
                    ));
                }
            }
            // The count to report: the one a peer's plan came closest
            // at, where it said (its hint's budgets are then that
            // count's), else the nearest by the device budget.
            let (partitions, found, least_device) = match closest {
                Some((_, p)) if p != most => (p, build(p)?, None),
                _ => nearest(build, most, profile, options, Some(found))?,
            };
            // A count the search did not try can fit the budget given
            // (fit is not monotone in the count): then it is taken. The
            // least budget is found above the budget given, which is
            // taken not to fit: within the bisection's window of it, the
            // count is asked at the budget given.
            let near =
                |least: &LeastDevice| least.bytes.saturating_sub((least.bytes >> 6) + 1) <= budget;
            let untried = !tried.iter().any(|&(p, _)| p == partitions);
            if untried && least_device.as_ref().is_some_and(near) {
                let (ok, plan, _) = policy_fits(&found, profile, options)?;
                tried.push((partitions, ok));
                if ok {
                    return Ok((
                        found,
                        Sizing {
                            partitions,
                            tried,
                            none_fit: false,
                            least_device: None,
                        },
                        plan,
                    ));
                }
            }
            return Ok((
                found,
                Sizing {
                    partitions,
                    tried,
                    none_fit: true,
                    least_device,
                },
                None,
            ));
        }
        low = high;
        high = high.saturating_mul(2).min(most);
        (ok, found, made) = fit(high)?;
    }
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        let (ok, workload, plan) = fit(mid)?;
        if ok {
            high = mid;
            found = workload;
            made = plan;
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
            least_device: None,
        },
        made,
    ))
}

/// Where no count fits: the count to report, its workload, and what
/// [`least_device_count`] found, where it finds a count; else the most
/// allowed (its workload `at_most`, where already built).
fn nearest<E: From<Error>>(
    build: &dyn Fn(u32) -> Result<Workload, E>,
    most: u32,
    profile: &Profile,
    options: &PlanOptions,
    at_most: Option<Workload>,
) -> Result<(u32, Workload, Option<LeastDevice>), E> {
    if let Some(least) = least_device_count(build, most, profile, options)? {
        return Ok((least.partitions, build(least.partitions)?, Some(least)));
    }
    let workload = match at_most {
        Some(workload) => workload,
        None => build(most)?,
    };
    Ok((most, workload, None))
}

/// The partition count [`size_partitions`] took, the searches that found
/// it, and the policy's plan of it where sizing made one.
#[derive(Debug)]
pub struct Sized {
    /// The workload at the count taken.
    pub workload: Workload,
    pub partitions: u32,
    /// The search with the options as given (on several GPUs with the
    /// exchange chosen per layer: some strategy vector fits).
    pub sizing: Sizing,
    /// On several GPUs with the exchange chosen per layer, where the first
    /// search found a count: the search with every halo GPU to GPU.
    pub peer: Option<PeerSizing>,
    /// The plan of `workload` with the options as given, and the seconds
    /// it took: the walk's plan of the count taken, or, where the search's
    /// count has no plan (dp's memory model fit, its plan does not), none.
    /// A caller planning with these options can take it instead of
    /// planning again. Under milp, none (it does not walk; the two
    /// searches' counts are compared by dp's plans, not kept).
    pub plan: Option<MadePlan>,
    /// The walk from the count the searches found: each count asked, in
    /// order (that count first), with the policy's predicted iteration
    /// (`None`: no plan, or a largest step over the device budget, which
    /// is not planned). Empty where no count fits, and under milp, which
    /// does not walk.
    pub walked: Vec<(u32, Option<f64>)>,
}

/// A plan and the seconds the planner took to make it.
#[derive(Debug)]
pub struct MadePlan {
    pub plan: Plan,
    pub seconds: f64,
}

/// The search with every halo GPU to GPU, and how it compared.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerSizing {
    pub sizing: Sizing,
    /// The most partitions it was allowed.
    pub most: u32,
    /// The predicted iteration at this search's count and at the first
    /// search's (the policy's plans; dp's under milp), where they were
    /// compared and the plan was made.
    pub predicted_s: Option<f64>,
    pub host_predicted_s: Option<f64>,
    /// Whether the counts were compared: this search found one, not the
    /// first search's.
    pub compared: bool,
    /// Whether this search's count was taken.
    pub taken: bool,
}

/// The partition count for `options`, from 1 to `most`: the fewest at
/// which the policy fits ([`fewest_partitions`]), and on several GPUs with
/// the exchange chosen per layer, the faster by the policy's prediction
/// (dp's under milp) of that and the fewest at which every halo fits GPU to
/// GPU; then, except under milp, the fastest by the policy's prediction of
/// the counts walked to from there (the module documentation says why and
/// how). Errors from `build` and from the planner's validation pass
/// through; a plan that fails while comparing counts counts as no plan.
pub fn size_partitions<E: From<Error>>(
    build: &dyn Fn(u32) -> Result<Workload, E>,
    most: u32,
    profile: &Profile,
    options: &PlanOptions,
) -> Result<Sized, E> {
    size_partitions_choosing(build, most, profile, options, &|_, workload, made| {
        Ok((workload, made))
    })
}

/// What the walk of [`size_partitions_choosing`] makes of each count it
/// plans: from the count, the workload `build` made and the policy's plan
/// of it (where one fits), another workload of that count and its plan
/// (`--sweep auto`: the sweeps chosen there, [`choose_sweeps`]).
pub type AtCount<'a, E> =
    dyn Fn(u32, Workload, Option<MadePlan>) -> Result<(Workload, Option<MadePlan>), E> + 'a;

/// [`size_partitions`], with each count the walk plans (the searches'
/// count included) handed to `at` and compared by the plan it hands back:
/// so that a choice made per count, such as the sweeps, is made at every
/// count rather than only at the count taken by outputs. Under milp there
/// is no walk and `at` is not called.
pub fn size_partitions_choosing<E: From<Error>>(
    build: &dyn Fn(u32) -> Result<Workload, E>,
    most: u32,
    profile: &Profile,
    options: &PlanOptions,
    at: &AtCount<'_, E>,
) -> Result<Sized, E> {
    let most = most.max(1);
    let mut sized = fewest(build, most, profile, options)?;
    walk(build, at, most, profile, options, &mut sized)?;
    Ok(sized)
}

/// [`size_partitions`] before the walk: the fewest that fit, and on
/// several GPUs with the exchange chosen per layer the faster of the two
/// searches' counts.
fn fewest<E: From<Error>>(
    build: &dyn Fn(u32) -> Result<Workload, E>,
    most: u32,
    profile: &Profile,
    options: &PlanOptions,
) -> Result<Sized, E> {
    let (workload, sizing, made) = search(build, 1, most, profile, options)?;
    let mut sized = Sized {
        partitions: sizing.partitions,
        workload,
        sizing,
        peer: None,
        plan: made,
        walked: Vec::new(),
    };
    // Where no count fits, none fits GPU to GPU either (the module
    // documentation).
    let Some(multi) = options
        .multi
        .as_ref()
        .filter(|_| per_layer(options) && !sized.sizing.none_fit)
    else {
        return Ok(sized);
    };
    let peer_options = PlanOptions {
        multi: Some(MultiGpu {
            forced: Some(Strategy::Peer),
            ..multi.clone()
        }),
        ..options.clone()
    };
    let most_peer = most.min(sized.sizing.partitions.saturating_mul(PEER_SEARCH_FACTOR));
    // Fewer partitions than the first search's are not searched: one fewer
    // did not fit with any strategy vector, and every halo GPU to GPU is
    // one of them (fit is not strictly monotone in the count, so a count
    // further below might, as it might in the first search). A peer
    // policy's plan here has every halo forced GPU to GPU, not the options
    // as given: it is not kept.
    let least = sized.sizing.partitions;
    let (peer_workload, peer, _) = search(build, least, most_peer, profile, &peer_options)?;
    let compared = !peer.none_fit && peer.partitions != sized.sizing.partitions;
    let mut found = PeerSizing {
        sizing: peer,
        most: most_peer,
        predicted_s: None,
        host_predicted_s: None,
        compared,
        taken: false,
    };
    if compared {
        // Under milp, dp's plans (milp is for small instances).
        let policy = match options.policy {
            Policy::Milp => Policy::Dp,
            other => other,
        };
        let planning = PlanOptions {
            policy,
            ..options.clone()
        };
        let planned = |w: &Workload, made: Option<MadePlan>| {
            made.or_else(|| plan_if_fits(w, profile, &planning))
        };
        // A peer policy's plan of the first count was made by its search.
        let host = planned(&sized.workload, sized.plan.take());
        found.host_predicted_s = host.as_ref().map(|m| m.plan.predicted.iteration_s);
        // Both plans are held until one is taken (a large workload's
        // plan takes gigabytes).
        let peer_plan = planned(&peer_workload, None);
        found.predicted_s = peer_plan.as_ref().map(|m| m.plan.predicted.iteration_s);
        found.taken = match (found.host_predicted_s, found.predicted_s) {
            (Some(h), Some(p)) => p < h,
            (None, Some(_)) => true,
            _ => false,
        };
        // Under milp the plans are dp's, not the options' own.
        let keep = |made: Option<MadePlan>| made.filter(|_| options.policy == policy);
        if found.taken {
            sized.workload = peer_workload;
            sized.partitions = found.sizing.partitions;
            sized.plan = keep(peer_plan);
        } else {
            sized.plan = keep(host);
        }
    }
    sized.peer = Some(found);
    Ok(sized)
}

/// How [`choose_sweeps`] (then [`choose_groups`]) chose.
#[derive(Debug)]
pub struct Swept {
    pub sweeps: Sweeps,
    pub workload: Workload,
    /// The plan of `workload` with the options as given, where one fits
    /// (none under milp: dp's plans compare the sweeps).
    pub plan: Option<MadePlan>,
    /// The predicted iteration of the sweeps taken and of every
    /// aggregation by outputs, where each has a plan.
    pub predicted_s: Option<f64>,
    pub outputs_s: Option<f64>,
    /// Sweeps planned here in full (the plan by outputs counted where it
    /// was made here; the screening plans not counted).
    pub tried: u32,
    /// On several GPUs ([`SWEEP_FINALISTS`]), each combination's
    /// predicted iteration with the exchanges of the plan by outputs only
    /// (`None`: nothing fits, or it could not be screened); empty
    /// elsewhere.
    pub screened: Vec<(Sweeps, Option<f64>)>,
    /// The sweeps in groups of outputs [`choose_groups`] tried and their
    /// predicted iteration (`None`: nothing fits). Empty before it.
    pub grouped: Vec<(Sweeps, Option<f64>)>,
    /// Whether [`choose_groups`] screened them: planned with the
    /// exchanges of the sweeps chosen before it only (on several GPUs
    /// with the exchange chosen per layer, where those had a plan), those
    /// it could not screen planned in full.
    pub grouped_screened: bool,
}

/// What the caller of [`choose_sweeps`] knows of the plan of the workload
/// by outputs it hands in.
/// (Handed in once, by value: the plan is not boxed.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum ByOutputs {
    /// Not planned yet: [`choose_sweeps`] plans it.
    Unplanned,
    /// Planned with the options given: its plan, or `None` where none
    /// fits (the walk over counts plans each count by outputs first). Not
    /// planned again, except under milp.
    Planned(Option<MadePlan>),
}

/// The most passes of [`choose_sweeps`]' walk, where it walks.
pub const SWEEP_PASSES: u32 = 4;

/// The most aggregations [`choose_sweeps`] tries every combination of
/// (2⁶ = 64 plans; a 3-layer GCN has 5 or 6): beyond it, it walks.
pub const EVERY_SWEEP_BITS: u32 = 6;

/// How many sweeps [`choose_sweeps`] plans at once: each holds its
/// workload and plan while it is made (as many as the thread pool runs
/// at once, up to this).
pub const SWEEPS_AT_ONCE: usize = 4;

/// How much faster, as a share of the best so far, sweeps must be
/// predicted for [`choose_sweeps`] to take them: plans that differ by
/// rounding alone (a few nanoseconds an iteration) are not another
/// choice.
pub const SWEEP_GAIN: f64 = 1e-6;

/// The sweeps ([`Sweeps`]) under which the policy's plan (dp's under
/// milp) of the workloads `build` makes is predicted fastest, among those
/// `can` allows. Where `can` holds at most [`EVERY_SWEEP_BITS`]
/// aggregations, every combination is planned, fewest by inputs first,
/// and of those within [`SWEEP_GAIN`] of the fastest the first is taken
/// (where it is that much faster than by outputs). A walk of single flips
/// misses the best: the products-sized GCN in 8 partitions on the
/// `h100-measured` profile is predicted 589.8 ms by `f1`, slower by
/// every flip from there, and 540.9 ms by `f1,f2,f3,b2`
/// (docs/planner.md). On several GPUs with the exchanges chosen per
/// layer, where each plan tries every strategy vector, the combinations
/// are screened first: each planned with the vector of the plan by
/// outputs only, and the [`SWEEP_FINALISTS`] fastest of those planned
/// with every vector (where fewer fit, as many of those that did not; and
/// any whose exchanges that plan does not cover); the fastest is taken
/// from those. Screening is not exact, the vector can change with the
/// sweeps; on the datasets' workloads it took what planning every
/// combination in full takes (docs/planner.md, "Sweeps screened on
/// several GPUs"). Beyond that bound it walks: from every aggregation
/// by outputs, each aggregation is flipped in turn and kept flipped where
/// the prediction falls (or where only the flipped one fits); where a
/// pass keeps none, every pair is flipped the same way; pass after pass
/// until neither keeps one (at most [`SWEEP_PASSES`]). `outputs`: the
/// workload by outputs and what the caller knows of its plan, where it
/// has them ([`ByOutputs`]). Where nothing fits, the workload by outputs,
/// without a plan. Errors from `build` pass through; a plan that fails
/// counts as no plan.
pub fn choose_sweeps<E: From<Error> + Send>(
    build: &(dyn Fn(Sweeps) -> Result<Workload, E> + Sync),
    can: Sweeps,
    profile: &Profile,
    options: &PlanOptions,
    outputs: Option<(Workload, ByOutputs)>,
) -> Result<Swept, E> {
    let comparing = compared_by_dp_under_milp(options);
    let (workload, made, tried) = match outputs {
        // Under milp the sweeps are compared by dp's plans, not the
        // caller's.
        Some((workload, ByOutputs::Planned(made))) if options.policy != Policy::Milp => {
            (workload, made, 0)
        }
        Some((workload, _)) => {
            let made = plan_if_fits(&workload, profile, &comparing);
            (workload, made, 1)
        }
        None => {
            let workload = build(Sweeps::default())?;
            let made = plan_if_fits(&workload, profile, &comparing);
            (workload, made, 1)
        }
    };
    let outputs_s = made.as_ref().map(|m| m.plan.predicted.iteration_s);
    let mut search = SweepSearch {
        build,
        profile,
        options: &comparing,
        tried: std::collections::HashSet::from([Sweeps::default()]),
        best: Swept {
            sweeps: Sweeps::default(),
            workload,
            plan: made,
            predicted_s: outputs_s,
            outputs_s,
            tried,
            screened: Vec::new(),
            grouped: Vec::new(),
            grouped_screened: false,
        },
    };
    let flips = can.bits();
    if flips.len() <= EVERY_SWEEP_BITS as usize {
        let mut subsets: Vec<u64> = (1..1u64 << flips.len()).collect();
        subsets.sort_by_key(|m| (m.count_ones(), *m));
        let every: Vec<Sweeps> = subsets
            .iter()
            .map(|subset| {
                flips
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| subset & (1 << k) != 0)
                    .fold(Sweeps::default(), |all, (_, flip)| all.flipped(*flip))
            })
            .collect();
        // Planned [`SWEEPS_AT_ONCE`] at a time side by side (dp's own
        // search is mostly one thread), keeping only the predictions: a
        // large workload's plan takes gigabytes. The one taken is planned
        // again, below. The first error in order is returned, whichever
        // thread met it first.
        //
        // On several GPUs with the exchanges chosen per layer, each plan
        // tries every strategy vector (8 for 3 layers). There the
        // combinations are first planned with the exchanges of the plan
        // by outputs (`screen`), and only the [`SWEEP_FINALISTS`] fastest
        // of those are planned with every vector.
        let screen = per_layer(options)
            .then(|| search.best.plan.as_ref().map(|m| m.plan.layer_strategies()))
            .flatten()
            .filter(|strategies| !strategies.is_empty());
        let predicted = match &screen {
            None => predict_each(build, &every, profile, &comparing, |_| true)?,
            Some(strategies) => {
                let screened = screen_each(build, &every, profile, &comparing, strategies)?;
                let finalists = finalists(&screened);
                search.best.screened = every
                    .iter()
                    .zip(&screened)
                    .map(|(&sweeps, s)| match s {
                        Screened::Predicted(seconds) => (sweeps, *seconds),
                        Screened::Unscreened => (sweeps, None),
                    })
                    .collect();
                predict_each(build, &every, profile, &comparing, |k| {
                    finalists.contains(&k)
                })?
            }
        };
        search.best.tried += predicted.iter().filter(|p| p.is_some()).count() as u32;
        let predicted: Vec<Option<f64>> = predicted.into_iter().map(Option::flatten).collect();
        // The fastest, then the first (fewest by inputs) within
        // [`SWEEP_GAIN`] of it, where that is faster than by outputs.
        let fastest = predicted.iter().flatten().copied().reduce(f64::min);
        let taken = fastest.and_then(|fastest| {
            predicted.iter().position(|s| {
                s.is_some_and(|s| s <= fastest * (1.0 + SWEEP_GAIN))
                    && SweepSearch::<E>::faster(*s, search.best.predicted_s)
            })
        });
        if let Some(k) = taken {
            // The same plan again (dp is deterministic), kept this time.
            let workload = build(every[k])?;
            let made = plan_if_fits(&workload, profile, &comparing);
            search.best.predicted_s = made.as_ref().map(|m| m.plan.predicted.iteration_s);
            search.best.sweeps = every[k];
            search.best.workload = workload;
            search.best.plan = made;
        }
    } else {
        let pairs: Vec<Sweeps> = flips
            .iter()
            .enumerate()
            .flat_map(|(k, a)| flips[k + 1..].iter().map(|b| a.flipped(*b)))
            .collect();
        for _ in 0..SWEEP_PASSES {
            let mut kept = false;
            for group in [&flips, &pairs] {
                for flip in group.iter() {
                    kept |= search.try_sweeps(search.best.sweeps.flipped(*flip))?;
                }
                if kept {
                    break;
                }
            }
            if !kept {
                break;
            }
        }
    }
    let mut best = search.best;
    if options.policy == Policy::Milp {
        best.plan = None;
    }
    Ok(best)
}

/// How many combinations [`choose_sweeps`] plans with every strategy
/// vector after screening them with one (several GPUs, exchanges chosen
/// per layer).
pub const SWEEP_FINALISTS: usize = 4;

/// `options` with dp for milp: the sweeps are compared by dp's plans
/// under milp, by the policy's own otherwise.
fn compared_by_dp_under_milp(options: &PlanOptions) -> PlanOptions {
    PlanOptions {
        policy: match options.policy {
            Policy::Milp => Policy::Dp,
            other => other,
        },
        ..options.clone()
    }
}

/// The groups of outputs [`choose_groups`] tries.
pub const SWEEP_GROUPS: [u32; 3] = [2, 3, 4];

/// `swept` ([`choose_sweeps`]' choice among `can`), or where one is
/// predicted faster, the aggregations by inputs in groups of outputs
/// ([`Sweeps::groups`]): [`SWEEP_GROUPS`] tried on every aggregation in
/// `can` by inputs and on those `swept` runs by inputs. By inputs, every
/// output's partial sum is live until the last input; by outputs, each
/// input is read once per output. In groups, an input is read once per
/// group and only a group's partial sums are live: papers100M's GCN in
/// 12 partitions on an A100, every aggregation by inputs in 2 groups, is
/// predicted 113.4 s, where the best of the combinations (`f1`, in 6
/// partitions) is 146.0 s (docs/planner.md). Each is planned side by
/// side as the combinations are (on several GPUs with the exchanges
/// chosen per layer, with the exchanges of `swept`'s plan only), and the
/// fastest, where faster than `swept`, is planned again in full and
/// taken if it is still faster.
pub fn choose_groups<E: From<Error> + Send>(
    build: &(dyn Fn(Sweeps) -> Result<Workload, E> + Sync),
    can: Sweeps,
    profile: &Profile,
    options: &PlanOptions,
    mut swept: Swept,
) -> Result<Swept, E> {
    let comparing = compared_by_dp_under_milp(options);
    // As many groups as output partitions (one loss each) or more is by
    // outputs.
    let outputs = swept
        .workload
        .ops
        .iter()
        .filter(|op| op.kind == OpKind::Loss)
        .count();
    let mut candidates: Vec<Sweeps> = Vec::new();
    for base in [can, swept.sweeps] {
        if base.forward | base.backward == 0 {
            continue;
        }
        for groups in SWEEP_GROUPS.into_iter().filter(|&g| (g as usize) < outputs) {
            let grouped = base.in_groups(groups);
            if !candidates.contains(&grouped) && grouped != swept.sweeps {
                candidates.push(grouped);
            }
        }
    }
    if candidates.is_empty() {
        return Ok(swept);
    }
    // Under milp, `swept` holds no plan: dp's prediction compares them.
    let strategies = per_layer(options)
        .then(|| swept.plan.as_ref().map(|m| m.plan.layer_strategies()))
        .flatten()
        .filter(|strategies| !strategies.is_empty());
    let screened = match &strategies {
        Some(strategies) => screen_each(build, &candidates, profile, &comparing, strategies)?,
        None => vec![Screened::Unscreened; candidates.len()],
    };
    // Those not screened are planned in full.
    let full = predict_each(build, &candidates, profile, &comparing, |k| {
        screened[k] == Screened::Unscreened
    })?;
    swept.tried += full.iter().filter(|p| p.is_some()).count() as u32;
    swept.grouped_screened = strategies.is_some();
    let predicted: Vec<Option<f64>> = screened
        .iter()
        .zip(full)
        .map(|(screened, full)| match screened {
            Screened::Predicted(seconds) => *seconds,
            Screened::Unscreened => full.flatten(),
        })
        .collect();
    swept.grouped = candidates
        .iter()
        .copied()
        .zip(predicted.iter().copied())
        .collect();
    let fastest = predicted
        .iter()
        .enumerate()
        .filter_map(|(k, s)| s.map(|s| (k, s)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let Some((k, seconds)) = fastest else {
        return Ok(swept);
    };
    if !SweepSearch::<E>::faster(Some(seconds), swept.predicted_s) {
        return Ok(swept);
    }
    // Planned again (with every exchange vector, where screened).
    let workload = build(candidates[k])?;
    let made = plan_if_fits(&workload, profile, &comparing);
    if screened[k] != Screened::Unscreened {
        swept.tried += 1;
    }
    let full = made.as_ref().map(|m| m.plan.predicted.iteration_s);
    if SweepSearch::<E>::faster(full, swept.predicted_s) {
        swept.sweeps = candidates[k];
        swept.workload = workload;
        swept.predicted_s = full;
        swept.plan = made.filter(|_| options.policy != Policy::Milp);
    }
    Ok(swept)
}

/// The predicted iteration of the plan of each of `every` for which
/// `planned(k)` holds (`Some(None)`: none fits), `None` for the others;
/// planned [`SWEEPS_AT_ONCE`] at a time, the first error in order
/// returned.
fn predict_each<E: From<Error> + Send>(
    build: &(dyn Fn(Sweeps) -> Result<Workload, E> + Sync),
    every: &[Sweeps],
    profile: &Profile,
    options: &PlanOptions,
    planned: impl Fn(usize) -> bool + Sync,
) -> Result<Vec<Option<Option<f64>>>, E> {
    let chosen: Vec<usize> = (0..every.len()).filter(|&k| planned(k)).collect();
    let mut predicted = vec![None; every.len()];
    for chunk in chosen.chunks(SWEEPS_AT_ONCE) {
        let results: Vec<Result<Option<f64>, E>> = chunk
            .par_iter()
            .map(|&k| {
                let workload = build(every[k])?;
                let made = plan_if_fits(&workload, profile, options);
                Ok(made.map(|m| m.plan.predicted.iteration_s))
            })
            .collect();
        for (&k, result) in chunk.iter().zip(results) {
            predicted[k] = Some(result?);
        }
    }
    Ok(predicted)
}

/// How a combination fared with the exchanges of the plan by outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Screened {
    /// Not planned with one vector: its workload has an exchange in a
    /// layer that plan has none in, or its exchange sites were not found.
    Unscreened,
    /// The predicted iteration; `None` where nothing fits.
    Predicted(Option<f64>),
}

/// Each of `every` planned with every layer's exchange strategy taken
/// from `strategies` (by layer) rather than chosen: one strategy vector
/// a plan where [`choose_sweeps`] would try them all. Side by side as in
/// [`predict_each`].
fn screen_each<E: From<Error> + Send>(
    build: &(dyn Fn(Sweeps) -> Result<Workload, E> + Sync),
    every: &[Sweeps],
    profile: &Profile,
    options: &PlanOptions,
    strategies: &[(u32, Strategy)],
) -> Result<Vec<Screened>, E> {
    let (Some(multi), true) = (options.multi.as_ref(), options.gpus > 1) else {
        return Ok(vec![Screened::Unscreened; every.len()]);
    };
    let share = profile.share(options.gpus);
    let mut screened = Vec::with_capacity(every.len());
    for chunk in every.chunks(SWEEPS_AT_ONCE) {
        let results: Vec<Result<Screened, E>> = chunk
            .par_iter()
            .map(|&sweeps| {
                let workload = build(sweeps)?;
                // Sites that cannot be found are left to the full plan,
                // where a failure counts as no plan.
                let Ok(sites) = crate::exchange::sites(&workload) else {
                    return Ok(Screened::Unscreened);
                };
                let vector: Option<Vec<Strategy>> = sites
                    .iter()
                    .map(|site| {
                        strategies
                            .iter()
                            .find(|(layer, _)| *layer == site.layer)
                            .map(|&(_, s)| s)
                    })
                    .collect();
                let Some(vector) = vector else {
                    return Ok(Screened::Unscreened);
                };
                let fixed = with_strategies(options, multi, &sites, &share, &vector);
                let made = plan_if_fits(&workload, profile, &fixed);
                Ok(Screened::Predicted(
                    made.map(|m| m.plan.predicted.iteration_s),
                ))
            })
            .collect();
        for result in results {
            screened.push(result?);
        }
    }
    Ok(screened)
}

/// The combinations to plan with every strategy vector: the
/// [`SWEEP_FINALISTS`] fastest screened (the first among equals); where
/// fewer fit, the first that did not, up to that many (another vector
/// may fit them); and every one that could not be screened.
fn finalists(screened: &[Screened]) -> Vec<usize> {
    let mut fitted: Vec<(usize, f64)> = screened
        .iter()
        .enumerate()
        .filter_map(|(k, s)| match s {
            Screened::Predicted(Some(seconds)) => Some((k, *seconds)),
            _ => None,
        })
        .collect();
    fitted.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut out: Vec<usize> = fitted
        .iter()
        .take(SWEEP_FINALISTS)
        .map(|&(k, _)| k)
        .collect();
    let short = SWEEP_FINALISTS.saturating_sub(out.len());
    out.extend(
        screened
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == Screened::Predicted(None))
            .map(|(k, _)| k)
            .take(short),
    );
    out.extend(
        screened
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == Screened::Unscreened)
            .map(|(k, _)| k),
    );
    out.sort_unstable();
    out
}

/// [`choose_sweeps`]' state: the sweeps planned so far and the fastest.
struct SweepSearch<'a, E> {
    build: &'a (dyn Fn(Sweeps) -> Result<Workload, E> + Sync),
    profile: &'a Profile,
    options: &'a PlanOptions,
    tried: std::collections::HashSet<Sweeps>,
    best: Swept,
}

impl<E: From<Error>> SweepSearch<'_, E> {
    /// Whether a plan predicted at `seconds` (`None`: none fits) is
    /// taken over the best so far, at `best`.
    fn faster(seconds: Option<f64>, best: Option<f64>) -> bool {
        match (seconds, best) {
            (Some(s), Some(b)) => s < b * (1.0 - SWEEP_GAIN),
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// Plans `sweeps` unless they were planned before, and keeps them
    /// where they are predicted faster than the best so far (or where only
    /// they fit); whether they were kept.
    fn try_sweeps(&mut self, sweeps: Sweeps) -> Result<bool, E> {
        if !self.tried.insert(sweeps) {
            return Ok(false);
        }
        let workload = (self.build)(sweeps)?;
        let made = plan_if_fits(&workload, self.profile, self.options);
        self.best.tried += 1;
        let seconds = made.as_ref().map(|m| m.plan.predicted.iteration_s);
        let faster = Self::faster(seconds, self.best.predicted_s);
        if faster {
            self.best.predicted_s = seconds;
            self.best.sweeps = sweeps;
            self.best.workload = workload;
            self.best.plan = made;
        }
        Ok(faster)
    }
}

/// The policy's plan of `workload`, made without the infeasible plan's
/// hint; `None` where none is made (infeasible, or any other planner
/// error: the walk only compares, and the caller planning the count taken
/// reports its own errors).
fn plan_if_fits(workload: &Workload, profile: &Profile, options: &PlanOptions) -> Option<MadePlan> {
    let started = Instant::now();
    plan_or_infeasible(workload, profile, options)
        .ok()
        .map(|plan| MadePlan {
            plan,
            seconds: started.elapsed().as_secs_f64(),
        })
}

/// The walk from the count the searches found (the module documentation
/// says why): the policy's plans of the counts above it, one at a time
/// until [`WALK_PATIENCE`] in a row are not faster than the best so far;
/// where none above is, those below it the same way, unless the policy's
/// own plan already failed there or the largest step does not fit. At
/// most [`WALK_STEPS`] each way. Each count's workload and plan go
/// through `at` first. The fastest is taken, with its plan. Not under
/// milp: its plan of a larger count has more choices than it may accept,
/// and dp's prediction is not its own.
fn walk<E: From<Error>>(
    build: &dyn Fn(u32) -> Result<Workload, E>,
    at: &AtCount<'_, E>,
    most: u32,
    profile: &Profile,
    options: &PlanOptions,
    sized: &mut Sized,
) -> Result<(), E> {
    if sized.sizing.none_fit || options.policy == Policy::Milp {
        return Ok(());
    }
    let found = sized.partitions;
    let made = match sized.plan.take() {
        Some(made) => Some(made),
        None => plan_if_fits(&sized.workload, profile, options),
    };
    if made.is_none() {
        // dp's memory model fit where its plan does not: nothing to walk
        // from.
        sized.walked.push((found, None));
        return Ok(());
    }
    let workload = std::mem::replace(&mut sized.workload, Workload::new(""));
    let (workload, made) = at(found, workload, made)?;
    sized.workload = workload;
    let Some(made) = made else {
        sized.walked.push((found, None));
        return Ok(());
    };
    sized
        .walked
        .push((found, Some(made.plan.predicted.iteration_s)));
    // The fastest so far: its count, workload and plan. At most two plans
    // are held at once here (a large workload's plan takes gigabytes),
    // and those `at` makes (`choose_sweeps`: up to `SWEEPS_AT_ONCE` more).
    let mut best = (found, None::<Workload>, made);
    // Whether `p` is planned faster than the best so far; `None` where its
    // largest step does not fit.
    let mut step = |p: u32,
                    best: &mut (u32, Option<Workload>, MadePlan)|
     -> Result<Option<bool>, E> {
        let workload = build(p)?;
        if largest_step_bytes(&workload) > options.budgets.hbm_bytes {
            sized.walked.push((p, None));
            return Ok(None);
        }
        let made = plan_if_fits(&workload, profile, options);
        let (workload, made) = at(p, workload, made)?;
        let predicted = made.as_ref().map(|m| m.plan.predicted.iteration_s);
        sized.walked.push((p, predicted));
        match made {
            Some(made) if made.plan.predicted.iteration_s < best.2.plan.predicted.iteration_s => {
                *best = (p, Some(workload), made);
                Ok(Some(true))
            }
            _ => Ok(Some(false)),
        }
    };
    let top = most.min(found.saturating_add(WALK_STEPS));
    let mut slower = 0;
    for p in found + 1..=top {
        match step(p, &mut best)? {
            Some(true) => slower = 0,
            _ => slower += 1,
        }
        if slower == WALK_PATIENCE {
            break;
        }
    }
    if best.0 == found {
        // A peer policy's search planned the counts below with these
        // options; dp's searched its memory model, which does not weigh
        // the fates of the blocks beside a step as its plan does. Fewer
        // partitions have larger steps: one that does not fit ends it.
        let bottom = found.saturating_sub(WALK_STEPS).max(1);
        let mut slower = 0;
        for p in (bottom..found).rev() {
            if options.policy.is_peer() && sized.sizing.tried.contains(&(p, false)) {
                break;
            }
            match step(p, &mut best)? {
                None => break,
                Some(true) => slower = 0,
                Some(false) => slower += 1,
            }
            if slower == WALK_PATIENCE {
                break;
            }
        }
    }
    let (partitions, workload, made) = best;
    if let Some(workload) = workload {
        sized.partitions = partitions;
        sized.workload = workload;
    }
    sized.plan = Some(made);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fastest screened go on (the first among equals); where fewer
    /// than [`SWEEP_FINALISTS`] fit, those that did not fill the rest;
    /// those not screened always go on.
    #[test]
    fn finalists_are_the_fastest_screened_then_those_that_did_not_fit() {
        use Screened::{Predicted, Unscreened};
        assert_eq!(SWEEP_FINALISTS, 4);
        let few = [
            Predicted(Some(3.0)),
            Predicted(None),
            Unscreened,
            Predicted(Some(1.0)),
            Predicted(None),
            Predicted(None),
            Predicted(None),
        ];
        assert_eq!(finalists(&few), vec![0, 1, 2, 3, 4]);
        let many = [
            Predicted(Some(5.0)),
            Predicted(Some(2.0)),
            Predicted(None),
            Predicted(Some(2.0)),
            Predicted(Some(9.0)),
            Predicted(Some(1.0)),
            Predicted(Some(2.0)),
            Unscreened,
        ];
        assert_eq!(finalists(&many), vec![1, 3, 5, 6, 7]);
        assert_eq!(finalists(&[Predicted(None); 2]), vec![0, 1]);
    }
}

//! Pass 2, the cost model: seconds for every operator and every transfer on
//! the profiled machine.
//!
//! It comes before the policies because they weigh fates by what they cost.
//! The simulator must not call this module: it is the independent judge.

use super::lifetimes::{use_runs, Lifetimes, TensorLife};
use super::memory::SLOTS_PER_POSITION;
use super::schedule::MAX_CASCADE_OPS;
use crate::plan::{Action, Exchange, Fate, Leg, ScheduleEntry};
use crate::profile::{DeviceKind, PeerVia, Profile};
use crate::workload::{Op, Tensor, TensorId, TensorKind, Workload};
use crate::{Result, Tier};
use std::sync::Arc;

/// Seconds to run `op` on the profiled device.
pub fn op_seconds(op: &Op, profile: &Profile) -> f64 {
    if let Some(seconds) = op.cost.seconds {
        return seconds;
    }
    let device = &profile.device;
    device.op_overhead_s
        + device.work_seconds(&op.cost)
        + device.transpose_seconds(op.cost.transpose_edges)
        + device.mask_seconds(op.cost.masked)
}

/// Seconds a transfer occupies each link it crosses: `(pcie_s, ssd_s)`.
/// SSD transfers cross PCIe too; with chunked staging the two overlap.
pub fn transfer_seconds(entry: &ScheduleEntry, profile: &Profile) -> (f64, f64) {
    let bytes = entry.bytes as f64;
    let pcie = &profile.pcie;
    let ssd = &profile.ssd;
    match entry.action {
        Action::Recompute => (0.0, 0.0),
        Action::Offload => {
            let pcie_s = pcie.latency_s + bytes / pcie.d2h_bytes_per_s;
            let ssd_s = if entry.to == Tier::Ssd {
                ssd.write_latency_s + bytes / ssd.write_bytes_per_s
            } else {
                0.0
            };
            (pcie_s, ssd_s)
        }
        Action::Reload | Action::Load => {
            let pcie_s = pcie.latency_s + bytes / pcie.h2d_bytes_per_s;
            let ssd_s = if entry.from == Tier::Ssd {
                ssd.read_latency_s + bytes / ssd.read_bytes_per_s
            } else {
                0.0
            };
            (pcie_s, ssd_s)
        }
    }
}

/// Link seconds of a transfer of `bytes` over PCIe and, for `ssd`, the SSD:
/// `(pcie_s, ssd_s)`, for a copy to the device (`inward`) or away from it.
pub fn link_seconds(bytes: u64, inward: bool, ssd: bool, profile: &Profile) -> (f64, f64) {
    let action = if inward {
        Action::Reload
    } else {
        Action::Offload
    };
    let tier = if ssd { Tier::Ssd } else { Tier::Host };
    let entry = ScheduleEntry {
        action,
        tensor: crate::TensorId(0),
        bytes,
        from: if inward { tier } else { Tier::Hbm },
        to: if inward { Tier::Hbm } else { tier },
        stream: crate::plan::Stream::Compute,
        issue_after_step: -1,
        done_before_step: 0,
        op: None,
    };
    transfer_seconds(&entry, profile)
}

/// `[start, end)` steps and the device bytes a choice adds over them.
pub type HbmAdd = (u32, u32, u64);

/// A tensor's index and the slot at which a recomputation reads it
/// ([`Choice::copies_in`]).
pub type CopyIn = (u32, u32);

/// Busy seconds per link: h2d, d2h, SSD read, SSD write.
pub type LinkSeconds = [f64; 4];

/// The slot of step `step`'s boundary in the memory model. Memory is
/// counted at two slots per step, as the memory pass counts it
/// ([`super::memory`]): the boundary before the step, where the transfers
/// issued after the previous step have started while those due before this
/// step still hold their copies, then the step itself (its recomputations
/// and operator), once they are done.
pub fn boundary(step: u32) -> u32 {
    SLOTS_PER_POSITION as u32 * step
}

/// The slot of step `step`'s recomputations and operator.
pub fn item(step: u32) -> u32 {
    boundary(step) + 1
}

/// Memory slots of `steps` steps: a boundary and an item per step, and the
/// boundary after the last.
pub fn slot_count(steps: u32) -> u32 {
    boundary(steps) + 1
}

/// What the runtime holds on the device beside the tensors, as `[start,
/// end)` slots and bytes: the workload's resident bytes throughout, and
/// each operator's scratch at its item.
pub fn held_beside_tensors(workload: &Workload) -> impl Iterator<Item = (usize, usize, u64)> + '_ {
    let slots = slot_count(workload.ops.len() as u32) as usize;
    let scratch = workload.ops.iter().enumerate().map(|(step, op)| {
        let at = item(step as u32) as usize;
        (at, at + 1, op.scratch_bytes)
    });
    std::iter::once((0, slots, workload.resident_bytes)).chain(scratch)
}

/// Per tensor, whether its last reader adds into it in place
/// ([`crate::workload::Op::adds_into`]): retained, its buffer becomes that
/// operator's output there ([`super::memory::copy_lives`]).
pub fn handed_at_last_use(workload: &Workload) -> Vec<bool> {
    let mut handed = vec![false; workload.tensors.len()];
    for input in workload.inputs_taken_over().into_iter().flatten() {
        handed[input.index()] = true;
    }
    handed
}

/// One way to treat a tensor, with what it costs and what it frees.
///
/// Steps are the workload's operator indices; memory intervals are in
/// slots ([`boundary`], [`item`]). Compared with the tensor's baseline
/// (retained or resident), a choice frees the device over `hbm_free` and
/// holds a copy on `away` over its interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub fate: Fate,
    /// Steps an offload may take before its device copy must be gone
    /// (compute it hides behind); 0 means done before the next step.
    pub lag: u32,
    /// Per gap (offloads) or per run of uses (streamed inputs): how many
    /// steps before the use the copy back is issued; 0 means right before.
    pub leads: Box<[u32]>,
    /// Seconds added to the iteration: transfer time not hidden behind the
    /// compute of the steps it overlaps, or the recomputation's own time.
    pub cost_s: f64,
    pub link_s: LinkSeconds,
    /// Bytes the choice moves over PCIe per iteration (both directions):
    /// what breaks ties between choices of equal price.
    pub moved_bytes: u64,
    /// `[start, end)` slots without a device copy.
    pub hbm_free: Box<[(u32, u32)]>,
    /// `[start, end)` slots and bytes added on the device: what a
    /// recomputation re-creates or keeps alive for its inputs.
    pub hbm_add: Box<[(u32, u32, u64)]>,
    /// The tier and `[start, end)` slots holding the away copy.
    pub away: Option<(Tier, u32, u32)>,
    /// Tensors a recomputation reads that its baseline keeps on the
    /// device but other choices may not, with the slot at which it reads
    /// them: where a tensor's own choice is away at that slot, it is
    /// copied in for the recomputation, on links this choice's `link_s`
    /// does not count (see `dp::copies_charged`).
    pub copies_in: Box<[CopyIn]>,
}

impl Choice {
    /// Device bytes freed at `slot`.
    pub fn frees(&self, slot: u32) -> bool {
        self.hbm_free.iter().any(|&(s, e)| s <= slot && slot < e)
    }

    pub fn uses_ssd(&self) -> bool {
        matches!(self.away, Some((Tier::Ssd, _, _)))
    }

    /// Bytes the choice holds apart from itself: its lists.
    fn held_apart(&self) -> usize {
        std::mem::size_of_val(&*self.leads)
            + std::mem::size_of_val(&*self.hbm_free)
            + std::mem::size_of_val(&*self.hbm_add)
            + std::mem::size_of_val(&*self.copies_in)
    }
}

/// Bytes a tensor's list of choices holds: the choices, what each holds
/// apart, and the list's two counts (none where it is the empty list all
/// tensors without a choice share).
fn held_list(options: &[Choice]) -> usize {
    match options.is_empty() {
        true => 0,
        false => {
            2 * std::mem::size_of::<usize>()
                + std::mem::size_of_val(options)
                + options.iter().map(Choice::held_apart).sum::<usize>()
        }
    }
}

/// Which fates a planner may give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FateSet {
    pub offload_host: bool,
    pub offload_ssd: bool,
    pub recompute: bool,
}

impl FateSet {
    pub const ALL: FateSet = FateSet {
        offload_host: true,
        offload_ssd: true,
        recompute: true,
    };

    /// Parses a comma-separated list such as `retain,recompute`. Retain is
    /// always allowed (a tensor with no idle stretch can have no other fate).
    pub fn parse(text: &str) -> Result<FateSet> {
        let mut set = FateSet {
            offload_host: false,
            offload_ssd: false,
            recompute: false,
        };
        let words: Vec<&str> = text.split(',').map(str::trim).collect();
        if words == [""] {
            return Err(crate::Error::invalid(
                format!("fates {text:?}"),
                "no fate given; name one or more of retain, offload_host, offload_ssd, recompute",
            ));
        }
        if let Some(at) = words.iter().position(|w| w.is_empty()) {
            return Err(crate::Error::invalid(
                format!("fates {text:?}"),
                format!(
                    "entry {} of {} is empty; name fates such as retain,recompute, \
                     comma-separated",
                    at + 1,
                    words.len()
                ),
            ));
        }
        for word in words {
            match word.replace('-', "_").as_str() {
                "retain" => {}
                "offload_host" | "host" => set.offload_host = true,
                "offload_ssd" | "ssd" => set.offload_ssd = true,
                "recompute" => set.recompute = true,
                _ => {
                    return Err(crate::Error::invalid(
                        format!("fate {word:?}"),
                        "unknown fate; known fates: retain, offload_host, offload_ssd, recompute",
                    ))
                }
            }
        }
        Ok(set)
    }

    pub fn allows(&self, fate: Fate) -> bool {
        match fate {
            Fate::Retain | Fate::Resident => true,
            Fate::OffloadHost | Fate::StreamHost => self.offload_host,
            Fate::OffloadSsd | Fate::StreamSsd => self.offload_ssd,
            Fate::Recompute => self.recompute,
        }
    }

    pub fn names(&self) -> String {
        let mut names = vec!["retain"];
        if self.offload_host {
            names.push("offload_host");
        }
        if self.offload_ssd {
            names.push("offload_ssd");
        }
        if self.recompute {
            names.push("recompute");
        }
        names.join(",")
    }
}

/// Fractions of the fully hiding lead (or lag) offered as choices.
const LEAD_LEVELS: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];
const LAG_LEVELS: [f64; 3] = [0.0, 0.5, 1.0];

/// Every tensor's baseline fate and its other choices.
#[derive(Debug, Clone)]
pub struct Choices {
    pub steps: u32,
    /// Memory slots: a boundary and an item per step, and the boundary
    /// after the last step.
    pub slots: u32,
    /// Seconds of each operator, and prefix sums (`before[s]`: compute
    /// before step `s`).
    pub op_s: Vec<f64>,
    pub before: Vec<f64>,
    /// Prefix sums of the compute seconds each direction's transfers may
    /// hide behind (copies to the device, then away from it): `before`,
    /// unless built [`Choices::build_hiding`] with a [`Hiding`].
    pub hide: [Vec<f64>; 2],
    /// Retain for intermediates, resident for inputs and parameters.
    pub baseline: Vec<Fate>,
    /// Per tensor, choices other than the baseline (empty: no choice).
    /// Shared: choices charged more for one search
    /// ([`Choices::cascades_charged`], `dp`'s copies in) copy the
    /// tensors they change and share the others' with these.
    pub options: Vec<Arc<[Choice]>>,
    /// Device bytes per slot with every tensor at its baseline, with the
    /// workload's resident bytes and each operator's scratch at its item.
    pub base_hbm: Vec<u64>,
    /// Per tensor, whether its last read adds into it in place, so that
    /// at its baseline it ends at that read's item
    /// ([`handed_at_last_use`]).
    pub handed: Vec<bool>,
    /// Whether copies between the device and host are made by the cores
    /// that compute (a CPU device, [`copies_use_compute`]).
    pub cores_copy: bool,
    /// Per tensor, the link seconds of one copy to the device from host
    /// memory: PCIe, then the SSD's read where it comes from there.
    pub load_s: Vec<(f64, f64)>,
}

/// Compute seconds of each step that transfers may hide behind, per
/// direction (copies to the device, copies away from it). Each choice's
/// price counts the compute of its transfers' windows as if no other
/// transfer used it; where a plan's transfers together need more than a
/// step's compute to hide, a step with `k` times its compute's worth of
/// hidden transfer seconds over it gives each of them `1/k` of it
/// ([`Choices::congestion`]), so that the choices priced again with it
/// ([`Choices::build_hiding`]) see that transfers there queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Hiding {
    pub(crate) inward: Vec<f64>,
    pub(crate) outward: Vec<f64>,
}

impl Hiding {
    /// Each step's lesser share in each direction: what neither leaves.
    pub fn least(&mut self, other: &Hiding) {
        for (mine, theirs) in [
            (&mut self.inward, &other.inward),
            (&mut self.outward, &other.outward),
        ] {
            for (a, &b) in mine.iter_mut().zip(theirs) {
                *a = a.min(b);
            }
        }
    }
}

/// How far past 1 the hidden seconds per compute second over a step must
/// sum for the step to count as over-subscribed (the difference array
/// leaves rounding behind).
const OVER_TOLERANCE: f64 = 1e-9;

/// Least share of the iteration's compute that a plan's transfers must
/// over-subscribe before [`Choices::congestion`] reports it.
pub const CONGESTION_SHARE: f64 = 0.01;

/// Most times compute and recomputation together a link's busy seconds
/// may be for [`Choices::congestion`] to report where its transfers queue.
/// (On `ogbn-products`' GAT in 8 partitions, plans with PCIe busy for up
/// to about 2.2 times compute planned faster with the shares: at 40.74%
/// of the retain-all peak, 4.978 s at a ratio of 2, 3.512 s at 3. On
/// IGB-full's GCN and GAT, with PCIe busy for about 9 times compute, no
/// plan priced on them was faster; at 4, papers100M on 4 GPUs, with PCIe
/// busy 2.9 to 4.1 times compute, planned the same in twice the time.)
pub const CONGESTION_LINK_RATIO: f64 = 3.0;

/// Whether the profile's device copies with the cores that compute: on a
/// CPU device there is no copy engine, and with every core computing, a
/// copy's seconds are taken from compute rather than hidden behind it.
pub fn copies_use_compute(profile: &Profile) -> bool {
    profile.device.kind == DeviceKind::Cpu
}

impl Choices {
    pub fn compute_s(&self) -> f64 {
        *self.before.last().unwrap_or(&0.0)
    }

    /// Compute seconds of steps `[start, end)` that transfers to the
    /// device (`inward`) or away from it may hide behind.
    fn window(&self, inward: bool, start: u32, end: u32) -> f64 {
        let hide = &self.hide[usize::from(!inward)];
        hide[end as usize] - hide[start as usize]
    }

    /// Where `entries`' transfers over-subscribe the compute they are
    /// timed to hide behind, by more than [`CONGESTION_SHARE`] of the
    /// iteration's compute in all: each step's share of compute for its
    /// transfers in each direction. A transfer issued after step `a` and
    /// due before step `b` hides what it can (at most its hideable
    /// seconds: the slower leg, or the SSD's where the cores copy) behind
    /// steps `(a, b)`, spread over them by their compute; where those
    /// hidden seconds add up to `k` times a step's compute, `k > 1`, the
    /// step's compute counts `1/k`. The `exchanges`' legs over PCIe
    /// (a multi-GPU plan's halos through host memory, and peer copies
    /// that cross PCIe) count the same way.
    ///
    /// Transfers from the SSD count against the PCIe direction they
    /// cross, though the drive may be what limits them; recomputations
    /// count in the link's bound below but not as compute to hide
    /// behind: both make the shares err on the side of less hiding.
    ///
    /// `None` where no direction is over-subscribed by that much, or
    /// where a link is busy for more than [`CONGESTION_LINK_RATIO`] times
    /// compute and recomputation together: the link then bounds the
    /// iteration by far however its transfers are timed against compute,
    /// and dp's later rounds price its seconds in full.
    pub fn congestion(
        &self,
        entries: &[ScheduleEntry],
        exchanges: &[Exchange],
        profile: &Profile,
    ) -> Option<Hiding> {
        let steps = self.steps as usize;
        // Per direction, a difference array of the hidden seconds per
        // compute second of the transfers over each step.
        let mut rate = [vec![0.0f64; steps + 1], vec![0.0f64; steps + 1]];
        let mut link: LinkSeconds = [0.0; 4];
        let mut recompute_s = 0.0;
        let mut spread =
            |way: usize, seconds: f64, issue_after_step: i64, done_before_step: u32| {
                let start = (issue_after_step + 1).clamp(0, steps as i64) as usize;
                let end = (done_before_step as usize).min(steps);
                if start >= end {
                    return;
                }
                let window = self.before[end] - self.before[start];
                let hidden = seconds.min(window);
                if hidden > 0.0 {
                    rate[way][start] += hidden / window;
                    rate[way][end] -= hidden / window;
                }
            };
        for e in exchanges {
            // PCIe seconds each way.
            let pcie = &profile.pcie;
            let local = (e.bytes - e.network_bytes.min(e.bytes)) as f64;
            let ways = match e.leg {
                Leg::ToHost => [0.0, pcie.latency_s + e.bytes as f64 / pcie.d2h_bytes_per_s],
                Leg::FromHost => [pcie.latency_s + e.bytes as f64 / pcie.h2d_bytes_per_s, 0.0],
                Leg::Peer => match &profile.peer {
                    Some(peer) if peer.via == PeerVia::Pcie => {
                        [local / pcie.h2d_bytes_per_s, local / pcie.d2h_bytes_per_s]
                    }
                    _ => [0.0; 2],
                },
            };
            for (way, seconds) in ways.into_iter().enumerate() {
                if seconds > 0.0 {
                    link[way] += seconds;
                    spread(way, seconds, e.issue_after_step, e.done_before_step);
                }
            }
        }
        for entry in entries {
            let inward = match entry.action {
                Action::Load | Action::Reload => true,
                Action::Offload => false,
                Action::Recompute => {
                    recompute_s += entry.op.map_or(0.0, |op| self.op_s[op.index()]);
                    continue;
                }
            };
            let (pcie_s, ssd_s) = transfer_seconds(entry, profile);
            let way = usize::from(!inward);
            link[way] += pcie_s;
            link[2 + way] += ssd_s;
            spread(
                way,
                self.hideable_s(pcie_s, ssd_s),
                entry.issue_after_step,
                entry.done_before_step,
            );
        }
        let busiest = link.iter().copied().fold(0.0, f64::max);
        if busiest > CONGESTION_LINK_RATIO * (self.compute_s() + recompute_s) {
            return None;
        }
        let mut excess = 0.0;
        let mut shares = [Vec::with_capacity(steps), Vec::with_capacity(steps)];
        for (share, rate) in shares.iter_mut().zip(&rate) {
            let mut running = 0.0;
            for (&op_s, &change) in self.op_s.iter().zip(rate) {
                running += change;
                // Past rounding: a transfer that fills its window exactly,
                // beside the remainders of others, sums to 1 within an ulp.
                if running > 1.0 + OVER_TOLERANCE {
                    excess += op_s * (running - 1.0);
                    share.push(op_s / running);
                } else {
                    share.push(op_s);
                }
            }
        }
        let [inward, outward] = shares;
        (excess > CONGESTION_SHARE * self.compute_s()).then_some(Hiding { inward, outward })
    }

    /// The part of a transfer that compute can hide: the slower leg, or
    /// only the SSD's where the cores make the copy.
    fn hideable_s(&self, pcie_s: f64, ssd_s: f64) -> f64 {
        if self.cores_copy {
            ssd_s
        } else {
            pcie_s.max(ssd_s)
        }
    }

    /// Seconds a transfer adds with `window_s` of compute to hide behind:
    /// what the window does not hide, plus the copy itself where the
    /// cores make it.
    fn transfer_cost_s(&self, pcie_s: f64, ssd_s: f64, window_s: f64) -> f64 {
        let copy_s = if self.cores_copy { pcie_s } else { 0.0 };
        copy_s + (self.hideable_s(pcie_s, ssd_s) - window_s).max(0.0)
    }

    /// The fewest steps before `end` (no further back than `limit` steps)
    /// whose compute covers a copy in of `seconds`; `limit` if none does.
    fn hiding_lead(&self, end: u32, seconds: f64, limit: u32) -> u32 {
        let (mut lo, mut hi) = (0u32, limit);
        if self.window(true, end - limit, end) < seconds {
            return limit;
        }
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.window(true, end - mid, end) >= seconds {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// The fewest steps from `start` (at most `limit`) whose compute
    /// covers an offload of `seconds`.
    fn hiding_lag(&self, start: u32, seconds: f64, limit: u32) -> u32 {
        let (mut lo, mut hi) = (0u32, limit);
        if self.window(false, start, start + limit) < seconds {
            return limit;
        }
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.window(false, start, start + mid) >= seconds {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// Builds the choices of every tensor under `allowed`.
    pub fn build(
        workload: &Workload,
        lives: &Lifetimes,
        profile: &Profile,
        allowed: FateSet,
    ) -> Choices {
        Self::build_hiding(workload, lives, profile, allowed, None)
    }

    /// [`Self::build`], with each transfer's hiding priced on `hiding`'s
    /// compute where given (see [`Hiding`]); the iteration's compute is
    /// the operators' either way.
    ///
    /// # Panics
    ///
    /// Where `hiding` is not of this workload's steps ([`Self::congestion`]
    /// of choices of another workload).
    pub fn build_hiding(
        workload: &Workload,
        lives: &Lifetimes,
        profile: &Profile,
        allowed: FateSet,
        hiding: Option<&Hiding>,
    ) -> Choices {
        let mut choices = Self::frame(workload, profile, hiding);
        let none: Arc<[Choice]> = Arc::new([]);
        choices.baseline.reserve_exact(workload.tensors.len());
        choices.options.reserve_exact(workload.tensors.len());
        let slots = choices.slots;
        let mut delta = vec![0i128; slots as usize + 1];
        for tensor in &workload.tensors {
            let life = &lives.tensors[tensor.id.index()];
            // A retained tensor lives from its operator to its last read;
            // through that read's item unless the item takes its buffer
            // over for its output.
            let (baseline, interval) = match tensor.kind {
                TensorKind::Input | TensorKind::Parameter => (Fate::Resident, Some((0, slots))),
                _ => (
                    Fate::Retain,
                    life.producer.map(|p| {
                        let last = life.last_use().expect("produced").max(p);
                        let end = match choices.handed[tensor.id.index()] {
                            true => item(last),
                            false => boundary(last + 1),
                        };
                        (item(p), end)
                    }),
                ),
            };
            if let Some((start, end)) = interval {
                delta[start as usize] += tensor.bytes as i128;
                delta[end as usize] -= tensor.bytes as i128;
            }
            choices.baseline.push(baseline);
            let options = choices.options_of(workload, lives, tensor, profile, allowed, &none);
            choices.options.push(options);
        }
        for (start, end, bytes) in held_beside_tensors(workload) {
            delta[start] += bytes as i128;
            delta[end] -= bytes as i128;
        }
        let mut running = 0i128;
        choices.base_hbm = delta[..slots as usize]
            .iter()
            .map(|d| {
                running += d;
                running as u64
            })
            .collect();
        choices
    }

    /// The bytes [`Self::build`] would hold in the tensors' choices
    /// (their lists and what each choice holds apart), counted a
    /// tensor's choices at a time, so without holding them: most of
    /// what planning a workload whose tensors are kept for the backward
    /// pass holds (a GAT's), and known only once its choices are made.
    pub fn held_bytes(
        workload: &Workload,
        lives: &Lifetimes,
        profile: &Profile,
        allowed: FateSet,
    ) -> u64 {
        let frame = Self::frame(workload, profile, None);
        let none: Arc<[Choice]> = Arc::new([]);
        workload
            .tensors
            .iter()
            .map(|tensor| {
                let options = frame.options_of(workload, lives, tensor, profile, allowed, &none);
                held_list(&options) as u64
            })
            .sum()
    }

    /// `tensor`'s choices other than its baseline, held without room to
    /// grow (up to 31, grown by doubling: a third of them was room, see
    /// `docs/planner.md`, "Planning memory"); a tensor with none shares
    /// `none`.
    fn options_of(
        &self,
        workload: &Workload,
        lives: &Lifetimes,
        tensor: &Tensor,
        profile: &Profile,
        allowed: FateSet,
        none: &Arc<[Choice]>,
    ) -> Arc<[Choice]> {
        let life = &lives.tensors[tensor.id.index()];
        let options = match tensor.kind {
            TensorKind::Parameter => Vec::new(),
            TensorKind::Input => self.stream_choices(tensor.bytes, life, profile, allowed),
            _ => self.intermediate_choices(workload, lives, tensor, life, profile, allowed),
        };
        match options.is_empty() {
            true => Arc::clone(none),
            false => options.into(),
        }
    }

    /// The choices' frame: the steps' seconds and what each tensor's
    /// choices are priced from, with no tensor's choices yet.
    fn frame(workload: &Workload, profile: &Profile, hiding: Option<&Hiding>) -> Choices {
        let steps = workload.ops.len() as u32;
        let op_s: Vec<f64> = workload
            .ops
            .iter()
            .map(|op| op_seconds(op, profile))
            .collect();
        let prefix = |seconds: &[f64]| {
            let mut sum = 0.0;
            std::iter::once(0.0)
                .chain(seconds.iter().map(|&s| {
                    sum += s;
                    sum
                }))
                .collect::<Vec<f64>>()
        };
        let before = prefix(&op_s);
        let slots = slot_count(steps);
        let hide = match hiding {
            Some(h) => {
                assert!(
                    h.inward.len() == op_s.len() && h.outward.len() == op_s.len(),
                    "a hiding has a step's seconds per operator"
                );
                [prefix(&h.inward), prefix(&h.outward)]
            }
            None => [before.clone(), before.clone()],
        };
        Choices {
            steps,
            slots,
            op_s,
            before,
            hide,
            baseline: Vec::new(),
            options: Vec::new(),
            base_hbm: Vec::new(),
            handed: handed_at_last_use(workload),
            cores_copy: copies_use_compute(profile),
            load_s: workload
                .tensors
                .iter()
                .map(|t| {
                    let (pcie_s, _) = link_seconds(t.bytes, true, false, profile);
                    let (_, ssd_s) = link_seconds(t.bytes, true, true, profile);
                    (pcie_s, ssd_s)
                })
                .collect(),
        }
    }

    /// These choices with every recomputation charged what `fates` add
    /// to it: where a tensor it reads ([`Choice::copies_in`]) is one that
    /// `fates` recompute there, the schedule re-runs that tensor's producer
    /// for it too, and in turn those of its inputs that `fates` recompute
    /// there (a cascade). The seconds of those operators and the device
    /// bytes of their inputs, which the choice alone does not count, are
    /// added to it (each tensor once per recomputation; the schedule makes
    /// one present once a step for all of that step's recomputations, and
    /// the copies in a cascade reads are counted in bytes, not in link
    /// seconds). With them, the seconds added to the recomputations
    /// `fates` choose, each cascade as often as one reads it. `None` where
    /// `fates` make no cascade.
    pub fn cascades_charged(
        &self,
        workload: &Workload,
        lives: &Lifetimes,
        fates: &[Fate],
    ) -> Option<(Choices, f64)> {
        let rerun = |(u, slot): CopyIn| {
            fates[u as usize] == Fate::Recompute
                && self.options[u as usize]
                    .iter()
                    .any(|c| c.fate == Fate::Recompute && c.frees(slot))
        };
        let mut charged: Option<Choices> = None;
        let mut chosen_s = 0.0;
        for (t, options) in self.options.iter().enumerate() {
            for (i, choice) in options.iter().enumerate() {
                if choice.fate != Fate::Recompute || !choice.copies_in.iter().any(|&c| rerun(c)) {
                    continue;
                }
                // (A recompute choice has a gap and a recomputation within
                // the bound: both are there.)
                let tensor = TensorId(t as u32);
                let Some(step) = lives.tensors[t].gap.map(|g| g.before) else {
                    continue;
                };
                // The recomputation again, as the choice counts it, for
                // the tensors it counted and the operators it took; then
                // the cascades within the same bound. `done` is shared,
                // so each tensor is counted once for this recomputation.
                let mut ops_left = MAX_CASCADE_OPS;
                let mut done = vec![tensor];
                let Some((_, _, mut reads)) =
                    self.recomputation(workload, lives, tensor, step, &mut done, &mut ops_left)
                else {
                    continue;
                };
                let (mut seconds, mut adds) = (0.0, Vec::new());
                while let Some((u, slot)) = reads.pop() {
                    if !rerun((u, slot)) {
                        continue;
                    }
                    // Past the bound the schedule cannot build it and
                    // keeps the tensor instead: left uncharged.
                    let id = TensorId(u);
                    if let Some((more_s, more_adds, more_reads)) =
                        self.recomputation(workload, lives, id, step, &mut done, &mut ops_left)
                    {
                        seconds += more_s;
                        adds.extend(more_adds);
                        reads.extend(more_reads);
                    }
                }
                let charged = charged.get_or_insert_with(|| self.clone());
                let mut changed = charged.options[t].to_vec();
                let choice = &mut changed[i];
                choice.cost_s += seconds;
                choice.hbm_add = choice.hbm_add.iter().copied().chain(adds).collect();
                charged.options[t] = changed.into();
                if fates[t] == Fate::Recompute {
                    chosen_s += seconds;
                }
            }
        }
        charged.map(|charged| (charged, chosen_s))
    }

    fn stream_choices(
        &self,
        bytes: u64,
        life: &TensorLife,
        profile: &Profile,
        allowed: FateSet,
    ) -> Vec<Choice> {
        let runs = use_runs(&life.uses);
        if runs.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (fate, ssd) in [(Fate::StreamHost, false), (Fate::StreamSsd, true)] {
            if !allowed.allows(fate) {
                continue;
            }
            let (pcie_s, ssd_s) = link_seconds(bytes, true, ssd, profile);
            let transfer_s = self.hideable_s(pcie_s, ssd_s);
            // Room before each run: back to the previous run's last use.
            let rooms: Vec<u32> = runs
                .iter()
                .enumerate()
                .map(|(k, &(first, _))| {
                    if k == 0 {
                        first
                    } else {
                        first - runs[k - 1].1 - 1
                    }
                })
                .collect();
            let full: Vec<u32> = runs
                .iter()
                .zip(&rooms)
                .map(|(&(first, _), &room)| self.hiding_lead(first, transfer_s, room))
                .collect();
            let mut seen: Vec<Vec<u32>> = Vec::new();
            for level in LEAD_LEVELS {
                let leads: Vec<u32> = full
                    .iter()
                    .map(|&f| (f as f64 * level).ceil() as u32)
                    .collect();
                if seen.contains(&leads) {
                    continue;
                }
                seen.push(leads.clone());
                let mut cost_s = 0.0;
                let mut hbm_free = Vec::new();
                let mut next = 0u32;
                for (&(first, last), &lead) in runs.iter().zip(&leads) {
                    // Loaded from the boundary `lead` steps before the
                    // run; freed after the run's last read.
                    let start = first - lead;
                    cost_s += self.transfer_cost_s(pcie_s, ssd_s, self.window(true, start, first));
                    if next < start {
                        hbm_free.push((boundary(next), boundary(start)));
                    }
                    next = last + 1;
                }
                if next < self.steps {
                    hbm_free.push((boundary(next), self.slots));
                }
                let loads = runs.len() as f64;
                let link_s = [pcie_s * loads, 0.0, ssd_s * loads, 0.0];
                out.push(Choice {
                    fate,
                    lag: 0,
                    leads: leads.into(),
                    cost_s,
                    link_s,
                    moved_bytes: bytes * runs.len() as u64,
                    hbm_free: hbm_free.into(),
                    hbm_add: Box::default(),
                    away: Some((if ssd { Tier::Ssd } else { Tier::Host }, 0, self.slots)),
                    copies_in: Box::default(),
                });
            }
        }
        out
    }

    /// What re-running `tensor`'s producer before step `step` costs with
    /// every other tensor at its baseline: the seconds of the operators
    /// re-run (inputs that died after their last use are re-run too, as
    /// the schedule does), and the device bytes it adds: the re-created
    /// inputs during that step, and inputs that cannot be re-run kept alive
    /// until it; and the tensors it reads that are on the device there at
    /// their baseline but need a copy in if their own choice is away then
    /// ([`Choice::copies_in`]). `done` are the tensors already counted
    /// (`tensor` among them), to which it adds those it counts; `None`
    /// where it takes more than `ops_left` operators (the schedule's bound
    /// is [`MAX_CASCADE_OPS`]).
    fn recomputation(
        &self,
        workload: &Workload,
        lives: &Lifetimes,
        tensor: TensorId,
        step: u32,
        done: &mut Vec<TensorId>,
        ops_left: &mut usize,
    ) -> Option<(f64, Vec<HbmAdd>, Vec<CopyIn>)> {
        let mut seconds = 0.0;
        let mut transient = 0u64;
        // The re-run operators' scratch, one at a time.
        let mut scratch = 0u64;
        let mut adds = Vec::new();
        let mut copies_in = Vec::new();
        let mut stack = vec![tensor];
        while let Some(t) = stack.pop() {
            let producer = lives.tensors[t.index()].producer? as usize;
            *ops_left = ops_left.checked_sub(1)?;
            seconds += self.op_s[producer];
            scratch = scratch.max(workload.ops[producer].scratch_bytes);
            for &input in &workload.ops[producer].inputs {
                if done.contains(&input) {
                    continue;
                }
                done.push(input);
                let kind = workload.tensor(input).kind;
                let life = &lives.tensors[input.index()];
                let bytes = workload.tensor(input).bytes;
                if kind == TensorKind::Parameter {
                    continue;
                }
                if kind == TensorKind::Input {
                    // Streamed inputs are copied in for this step if not
                    // already there: count the copy.
                    if !life.uses.contains(&step) {
                        transient += bytes;
                        copies_in.push((input.0, item(step)));
                    }
                    continue;
                }
                let alive = life.producer.is_some_and(|p| p < step)
                    && life.last_use().is_some_and(|last| step <= last);
                if alive {
                    // If it is off the device in a gap here, it is copied
                    // in for this step: count the copy.
                    if life.gaps.iter().any(|g| g.contains(step)) {
                        transient += bytes;
                        copies_in.push((input.0, item(step)));
                    }
                    continue;
                }
                if life.recomputable && life.producer.is_some_and(|p| p < step) {
                    transient += bytes;
                    stack.push(input);
                } else if let Some(last) = life.last_use() {
                    // From where its baseline ends.
                    let end = match self.handed[input.index()] {
                        true => item(last),
                        false => boundary(last + 1),
                    };
                    adds.push((end, boundary(step + 1), bytes));
                }
            }
        }
        if transient + scratch > 0 {
            adds.push((item(step), boundary(step + 1), transient + scratch));
        }
        Some((seconds, adds, copies_in))
    }

    fn intermediate_choices(
        &self,
        workload: &Workload,
        lives: &Lifetimes,
        tensor: &Tensor,
        life: &TensorLife,
        profile: &Profile,
        allowed: FateSet,
    ) -> Vec<Choice> {
        let (Some(first), Some(last)) = (life.gaps.first(), life.gaps.last()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (fate, ssd) in [(Fate::OffloadHost, false), (Fate::OffloadSsd, true)] {
            if !allowed.allows(fate) {
                continue;
            }
            let (in_pcie, in_ssd) = link_seconds(tensor.bytes, true, ssd, profile);
            let (out_pcie, out_ssd) = link_seconds(tensor.bytes, false, ssd, profile);
            let (in_s, out_s) = (
                self.hideable_s(in_pcie, in_ssd),
                self.hideable_s(out_pcie, out_ssd),
            );
            // The offload and the first copy back share the first gap's idle
            // steps and must leave at least one of them free.
            let room0 = first.idle_steps() - 1;
            let full_lag = self.hiding_lag(first.after + 1, out_s, room0);
            let mut seen: Vec<(u32, Vec<u32>)> = Vec::new();
            for lag_level in LAG_LEVELS {
                let lag = (full_lag as f64 * lag_level).ceil() as u32;
                let full: Vec<u32> = life
                    .gaps
                    .iter()
                    .enumerate()
                    .map(|(k, gap)| {
                        let room = if k == 0 {
                            room0 - lag
                        } else {
                            gap.idle_steps() - 1
                        };
                        self.hiding_lead(gap.before, in_s, room)
                    })
                    .collect();
                for level in LEAD_LEVELS {
                    let leads: Vec<u32> = full
                        .iter()
                        .map(|&f| (f as f64 * level).ceil() as u32)
                        .collect();
                    let key = (lag, leads.clone());
                    if seen.contains(&key) {
                        continue;
                    }
                    seen.push(key);
                    let mut cost_s = self.transfer_cost_s(
                        out_pcie,
                        out_ssd,
                        self.window(false, first.after + 1, first.after + 1 + lag),
                    );
                    let mut hbm_free = Vec::with_capacity(life.gaps.len());
                    for (k, (gap, &lead)) in life.gaps.iter().zip(&leads).enumerate() {
                        cost_s += self.transfer_cost_s(
                            in_pcie,
                            in_ssd,
                            self.window(true, gap.before - lead, gap.before),
                        );
                        // The first gap's copy leaves with the offload, due
                        // `lag` steps after the last forward read: it holds
                        // the device through that step's boundary. Later
                        // gaps' copies go after their last read. The copy
                        // back is issued at the boundary `lead` steps
                        // before the next read.
                        let start = if k == 0 {
                            item(gap.after + 1 + lag)
                        } else {
                            boundary(gap.after + 1)
                        };
                        hbm_free.push((start, boundary(gap.before - lead)));
                    }
                    let loads = life.gaps.len() as f64;
                    let link_s = [in_pcie * loads, out_pcie, in_ssd * loads, out_ssd];
                    out.push(Choice {
                        fate,
                        lag,
                        leads: leads.into(),
                        cost_s,
                        link_s,
                        moved_bytes: tensor.bytes * (life.gaps.len() as u64 + 1),
                        hbm_free: hbm_free.into(),
                        hbm_add: Box::default(),
                        // From the offload's issue to the end of the last
                        // reload, due before the last gap's next read.
                        away: Some((
                            if ssd { Tier::Ssd } else { Tier::Host },
                            boundary(first.after + 1),
                            item(last.before),
                        )),
                        copies_in: Box::default(),
                    });
                }
            }
        }
        if allowed.recompute && life.recomputable {
            if let Some(gap) = life.gap {
                let mut ops_left = MAX_CASCADE_OPS;
                let mut done = vec![tensor.id];
                if let Some((cost_s, hbm_add, copies_in)) = self.recomputation(
                    workload,
                    lives,
                    tensor.id,
                    gap.before,
                    &mut done,
                    &mut ops_left,
                ) {
                    out.push(Choice {
                        fate: Fate::Recompute,
                        lag: 0,
                        leads: Box::default(),
                        cost_s,
                        link_s: [0.0; 4],
                        moved_bytes: 0,
                        // Freed after the last forward read; re-created
                        // among the items of step `gap.before`.
                        hbm_free: Box::new([(boundary(gap.after + 1), item(gap.before))]),
                        hbm_add: hbm_add.into(),
                        away: None,
                        copies_in: copies_in.into(),
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Stream;
    use crate::workload::{Cost, OpKind, Phase};

    /// Adds an operator of 1 ms, named by its step, reading `inputs` into
    /// `output`.
    fn op_1ms(w: &mut Workload, inputs: Vec<TensorId>, output: TensorId) {
        let step = w.ops.len();
        w.add_op(
            format!("op{step}"),
            OpKind::Generic,
            Phase::Forward,
            inputs,
            vec![output],
            Cost::seconds(1e-3),
        );
    }

    /// `steps` steps of 1 ms in a chain: step 0 makes `first`, each later
    /// step reads the one before it, and step `at` reads `reads` too. With
    /// the workload's lifetimes and the a100-80g profile.
    fn chain(
        mut w: Workload,
        first: TensorId,
        steps: u32,
        at: u32,
        reads: &[TensorId],
    ) -> (Workload, Lifetimes, Profile) {
        op_1ms(&mut w, Vec::new(), first);
        let mut last = first;
        for step in 1..steps {
            let next = w.add_tensor(format!("c{step}"), 1 << 20, TensorKind::Activation, None);
            let mut inputs = vec![last];
            if step == at {
                inputs.extend(reads);
            }
            op_1ms(&mut w, inputs, next);
            last = next;
        }
        let profile = Profile::from_json(
            include_str!("../../../profiles/a100-80g.json"),
            "a100-80g.json",
        )
        .unwrap();
        let lives = Lifetimes::compute(&w);
        (w, lives, profile)
    }

    /// Four steps of 1 ms; inputs `x0..x{inputs}` of `bytes` each, all
    /// read by step 2.
    fn four_steps(inputs: usize, bytes: u64) -> (Workload, Lifetimes, Profile) {
        let mut w = Workload::new("congested");
        let xs: Vec<TensorId> = (0..inputs)
            .map(|i| w.add_tensor(format!("x{i}"), bytes, TensorKind::Input, Some(Tier::Host)))
            .collect();
        let first = w.add_tensor("c0", 1 << 20, TensorKind::Activation, None);
        chain(w, first, 4, 2, &xs)
    }

    /// A load of `tensor` issued after step 0 and due before step 2: it
    /// hides behind step 1 alone.
    fn load(workload: &Workload, tensor: usize) -> ScheduleEntry {
        ScheduleEntry {
            action: Action::Load,
            tensor: TensorId(tensor as u32),
            bytes: workload.tensors[tensor].bytes,
            from: Tier::Host,
            to: Tier::Hbm,
            stream: Stream::H2d,
            issue_after_step: 0,
            done_before_step: 2,
            op: None,
        }
    }

    #[test]
    fn transfers_timed_over_the_same_compute_share_it() {
        // Each load takes a little over 1 ms on PCIe (25 GB/s): alone,
        // step 1 hides all but its latency.
        let (w, lives, profile) = four_steps(2, 25_000_000);
        let choices = Choices::build(&w, &lives, &profile, FateSet::ALL);
        let entries = [load(&w, 0), load(&w, 1)];
        let hiding = choices
            .congestion(&entries, &[], &profile)
            .expect("step 1 is over-subscribed");
        // Two transfers hide 1 ms each behind step 1's 1 ms: each has half.
        assert_eq!(hiding.inward, [1e-3, 0.5e-3, 1e-3, 1e-3]);
        assert_eq!(hiding.outward, [1e-3; 4]);
        // One load alone over-subscribes nothing.
        assert_eq!(choices.congestion(&entries[..1], &[], &profile), None);
        // Priced on the shares, streaming `x0` one step ahead leaves half
        // a millisecond more exposed; the iteration's compute is the same.
        let congested = Choices::build_hiding(&w, &lives, &profile, FateSet::ALL, Some(&hiding));
        assert_eq!(congested.compute_s(), choices.compute_s());
        let one_ahead = |c: &Choices| {
            c.options[0]
                .iter()
                .find(|o| o.fate == Fate::StreamHost && *o.leads == [1])
                .map(|o| o.cost_s)
                .expect("a stream one step ahead")
        };
        let (pcie_s, _) = link_seconds(25_000_000, true, false, &profile);
        assert!((one_ahead(&choices) - (pcie_s - 1e-3)).abs() < 1e-12);
        assert!((one_ahead(&congested) - (pcie_s - 0.5e-3)).abs() < 1e-12);
        // Streamed two steps ahead, it hides whole on the shares too.
        let whole = congested.options[0]
            .iter()
            .filter(|o| o.fate == Fate::StreamHost)
            .map(|o| o.cost_s)
            .fold(f64::INFINITY, f64::min);
        assert_eq!(whole, 0.0);
    }

    #[test]
    fn offloads_timed_over_the_same_compute_share_it() {
        // `a` (25 MB, a little over 1 ms each way on PCIe) is made by step
        // 0 and read by steps 1 and 5: its offload may hide behind steps
        // 2 and 3.
        let mut w = Workload::new("offloads");
        let a = w.add_tensor("a", 25_000_000, TensorKind::Activation, None);
        let (w, lives, profile) = chain(w, a, 6, 5, &[a]);
        let choices = Choices::build(&w, &lives, &profile, FateSet::ALL);
        // Two offloads issued after step 1, due before step 3: both hide
        // behind step 2 alone.
        let offload = ScheduleEntry {
            action: Action::Offload,
            tensor: a,
            bytes: 25_000_000,
            from: Tier::Hbm,
            to: Tier::Host,
            stream: Stream::D2h,
            issue_after_step: 1,
            done_before_step: 3,
            op: None,
        };
        let hiding = choices
            .congestion(&[offload.clone(), offload], &[], &profile)
            .expect("step 2 is over-subscribed");
        assert_eq!(hiding.outward, [1e-3, 1e-3, 0.5e-3, 1e-3, 1e-3, 1e-3]);
        assert_eq!(hiding.inward, [1e-3; 6]);
        // Offloading `a` over step 2 (a lag of one step) and copying it
        // back right before step 5 leaves half a millisecond more exposed
        // on the shares; the copy back is priced as before.
        let congested = Choices::build_hiding(&w, &lives, &profile, FateSet::ALL, Some(&hiding));
        let lag_one = |c: &Choices| {
            c.options[a.index()]
                .iter()
                .find(|o| o.fate == Fate::OffloadHost && o.lag == 1 && *o.leads == [0])
                .map(|o| o.cost_s)
                .expect("an offload over one step")
        };
        assert!((lag_one(&congested) - lag_one(&choices) - 0.5e-3).abs() < 1e-12);
    }

    #[test]
    fn each_round_keeps_the_least_share_of_a_step() {
        let mut shares = Hiding {
            inward: vec![1.0, 2.0],
            outward: vec![3.0, 1.0],
        };
        shares.least(&Hiding {
            inward: vec![2.0, 1.0],
            outward: vec![1.0, 1.0],
        });
        assert_eq!(shares.inward, [1.0, 1.0]);
        assert_eq!(shares.outward, [1.0, 1.0]);
    }

    #[test]
    fn a_link_busy_for_far_longer_than_compute_reports_no_congestion() {
        // Ten loads of 3 ms each over 4 ms of compute: PCIe bounds the
        // iteration whatever the timing.
        let (w, lives, profile) = four_steps(10, 75_000_000);
        let choices = Choices::build(&w, &lives, &profile, FateSet::ALL);
        let entries: Vec<ScheduleEntry> = (0..10).map(|t| load(&w, t)).collect();
        assert_eq!(choices.congestion(&entries, &[], &profile), None);
        // Two of them, 6 ms over 4 ms of compute, are within the ratio.
        let hiding = choices
            .congestion(&entries[..2], &[], &profile)
            .expect("within the ratio");
        assert_eq!(hiding.inward[1], 0.5e-3);
        // With a halo through host memory beside them: 3 ms more, 9 ms,
        // is within three times compute; 9 ms more, 15 ms, is past it.
        let halo = |bytes: u64| Exchange {
            kind: crate::plan::ExchangeKind::Halo,
            layer: 1,
            strategy: crate::plan::Strategy::Host,
            leg: Leg::FromHost,
            bytes,
            network_bytes: 0,
            issue_after_step: 0,
            done_before_step: 3,
            device_bytes: 0,
            host_bytes: 0,
            held_from_step: 1,
            held_until_step: 2,
            host_held_until_step: 2,
        };
        assert!(choices
            .congestion(&entries[..2], &[halo(75_000_000)], &profile)
            .is_some());
        assert_eq!(
            choices.congestion(&entries[..2], &[halo(225_000_000)], &profile),
            None
        );
    }

    /// Step 0 makes `a` from the input `x`, step 1 `b` from `a`, steps
    /// 2-5 a chain from `b`; step 6 reads `b` again and step 7 `a`. So a
    /// recomputation of `b` before step 6 reads `a` there, in its gap.
    fn cascading() -> (Workload, Lifetimes, Profile, [TensorId; 2]) {
        let mut w = Workload::new("cascading");
        let x = w.add_tensor("x", 1 << 20, TensorKind::Input, Some(Tier::Host));
        let a = w.add_tensor("a", 2 << 20, TensorKind::Activation, None);
        let b = w.add_tensor("b", 4 << 20, TensorKind::Activation, None);
        // An operator of 1 ms reading `inputs` into `output`, or into a
        // new 1 MiB tensor.
        let op = |w: &mut Workload, inputs: Vec<TensorId>, output: Option<TensorId>| {
            let step = w.ops.len();
            let output = output.unwrap_or_else(|| {
                w.add_tensor(format!("c{step}"), 1 << 20, TensorKind::Activation, None)
            });
            op_1ms(w, inputs, output);
            output
        };
        op(&mut w, vec![x], Some(a));
        let mut last = op(&mut w, vec![a], Some(b));
        for _ in 2..6 {
            last = op(&mut w, vec![last], None);
        }
        last = op(&mut w, vec![last, b], None);
        op(&mut w, vec![last, a], None);
        let profile = Profile::from_json(
            include_str!("../../../profiles/a100-80g.json"),
            "a100-80g.json",
        )
        .unwrap();
        let lives = Lifetimes::compute(&w);
        (w, lives, profile, [a, b])
    }

    #[test]
    fn a_recomputation_is_charged_the_cascade_of_an_input_recomputed_there() {
        let (workload, lives, profile, [a, b]) = cascading();
        let choices = Choices::build(&workload, &lives, &profile, FateSet::ALL);
        let recompute = |choices: &Choices, t: TensorId| {
            choices.options[t.index()]
                .iter()
                .find(|c| c.fate == Fate::Recompute)
                .cloned()
                .expect("a recompute choice")
        };
        let alone = recompute(&choices, b);
        // `b` re-run before step 6 reads `a`, which its baseline keeps:
        // copied in where away, re-run (from `x`) where recomputed.
        assert_eq!(*alone.copies_in, [(a.0, item(6))]);
        let mut fates = choices.baseline.clone();
        fates[b.index()] = Fate::Recompute;
        for (fate, why) in [(Fate::Retain, "kept"), (Fate::OffloadHost, "copied in")] {
            fates[a.index()] = fate;
            let charged = choices.cascades_charged(&workload, &lives, &fates);
            assert!(charged.is_none(), "`a` is {why}");
        }
        fates[a.index()] = Fate::Recompute;
        let (charged, chosen_s) = choices
            .cascades_charged(&workload, &lives, &fates)
            .expect("`a` is re-run for `b`");
        // `a`'s producer, step 0, re-run for `b`.
        assert_eq!(chosen_s, choices.op_s[0]);
        let with = recompute(&charged, b);
        assert_eq!(with.cost_s, alone.cost_s + chosen_s);
        // What the schedule re-runs before step 6 is what is charged.
        let shifts = vec![super::super::schedule::Shift::default(); fates.len()];
        let schedule = super::super::schedule::build(&workload, &lives, fates, &shifts).unwrap();
        let rerun: f64 = schedule
            .entries
            .iter()
            .filter(|e| e.action == Action::Recompute && e.done_before_step == 6)
            .map(|e| choices.op_s[e.op.unwrap().index()])
            .sum();
        assert_eq!(rerun, with.cost_s);
        // And the device holds what the charged choice adds there: `b`'s
        // re-run reads `a`, whose re-run reads `x`.
        let added = |c: &Choice| -> u64 {
            c.hbm_add
                .iter()
                .filter(|&&(s, e, _)| s <= item(6) && item(6) < e)
                .map(|&(_, _, bytes)| bytes)
                .sum()
        };
        assert_eq!(added(&alone), workload.tensor(a).bytes);
        assert_eq!(added(&with), added(&alone) + (1 << 20));
        // `a`'s own recomputation, before step 7, is its own choice's.
        assert_eq!(recompute(&charged, a), recompute(&choices, a));
    }

    #[test]
    fn fate_lists_parse_and_an_empty_or_unknown_one_is_refused() {
        let set = FateSet::parse("retain, recompute").unwrap();
        assert!(set.allows(Fate::Recompute) && !set.allows(Fate::OffloadHost));
        let set = FateSet::parse("offload-host,ssd").unwrap();
        assert!(set.allows(Fate::OffloadHost) && set.allows(Fate::OffloadSsd));
        for (text, says) in [
            ("", "no fate given"),
            ("  ", "no fate given"),
            (" , ", "entry 1 of 2 is empty"),
            (",retain", "entry 1 of 2 is empty"),
            ("retain,,recompute", "entry 2 of 3 is empty"),
        ] {
            let message = FateSet::parse(text).unwrap_err().to_string();
            assert!(message.contains(says), "{text:?}: {message}");
        }
        let message = FateSet::parse("retain,keep").unwrap_err().to_string();
        assert!(
            message.contains("\"keep\"") && message.contains("offload_ssd"),
            "{message}"
        );
    }

    /// `held_bytes` counts, without holding them, the bytes the choices
    /// `build` makes hold: their lists and what each holds apart, the
    /// lists held without room to grow. A GAT's are most of its
    /// planning's memory.
    #[test]
    fn the_choices_bytes_are_counted_as_build_holds_them() {
        use crate::blocks::BlockCounts;
        use crate::gnn::{build_gnn, GnnModel, GnnSpec};
        let spec = GnnSpec::new(GnnModel::Gat, 8, 4, "tiny");
        let w = build_gnn(&spec, &BlockCounts::skewed(1000, 8000, 4).unwrap()).unwrap();
        let profile = Profile::from_json(
            include_str!("../../../profiles/a100-80g.json"),
            "a100-80g.json",
        )
        .unwrap();
        let lives = Lifetimes::compute(&w);
        for allowed in [FateSet::ALL, FateSet::parse("retain,recompute").unwrap()] {
            let built = Choices::build(&w, &lives, &profile, allowed);
            let mut held = 0;
            for options in &built.options {
                held += held_list(options);
            }
            assert!(held > 0);
            // The tensors with no choice share one empty list.
            let empty: Vec<_> = built.options.iter().filter(|o| o.is_empty()).collect();
            assert!(empty.len() > 1);
            assert!(empty.iter().all(|o| Arc::ptr_eq(o, empty[0])));
            assert_eq!(
                Choices::held_bytes(&w, &lives, &profile, allowed),
                held as u64
            );
        }
        // Fewer fates, fewer choices.
        assert!(
            Choices::held_bytes(
                &w,
                &lives,
                &profile,
                FateSet::parse("retain,recompute").unwrap()
            ) < Choices::held_bytes(&w, &lives, &profile, FateSet::ALL)
        );
    }
}

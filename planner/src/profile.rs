//! Hardware profiles: capacity and speed of every tier and link.
//!
//! The schema is documented in `profiles/README.md`; units are in the field
//! names. Every figure of a shipped profile has an entry in `sources`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::workload::{ComputeClass, Cost};
use crate::{Error, Result};

/// Version of the profile JSON format.
pub const PROFILE_FORMAT_VERSION: u32 = 1;

/// Most devices a plan is for.
pub const MAX_GPUS: u32 = 1024;

/// What executes the operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    Gpu,
    /// The CPU backend: the device tier is an arena in host memory.
    Cpu,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    pub kind: DeviceKind,
    pub model: String,
    /// Devices per node.
    pub count_max: u32,
    pub hbm_bytes: u64,
    pub hbm_bytes_per_s: f64,
    pub dense_flops_per_s: f64,
    /// GEMM rates measured at several arithmetic intensities, in
    /// increasing order of intensity; when given, a dense operator's rate
    /// is read from them ([`DeviceProfile::dense_rate`]) instead of
    /// `dense_flops_per_s`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dense_shapes: Vec<DenseShape>,
    /// Effective bandwidth of the irregular gathers of SpMM and SDDMM.
    pub sparse_bytes_per_s: f64,
    /// Effective bandwidth of the irregular scatters of the transposed
    /// SpMM (an aggregation's backward); `sparse_bytes_per_s` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scatter_bytes_per_s: Option<f64>,
    /// Seconds per edge to build a block's transpose before a transposed
    /// aggregation, on a backend that builds one (the CUDA backend's),
    /// charged on an operator's `cost.transpose_edges`; none (nothing
    /// charged) where the backend builds none (the CPU's scatter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transpose_seconds_per_edge: Option<f64>,
    /// Seconds an operator takes per element it masks with dropout
    /// (`cost.masked`: its keep bit hashed and applied), beyond its time
    /// without dropout; none (nothing charged) in profiles that do not
    /// measure it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask_seconds_per_element: Option<f64>,
    /// Rate of the math of softmax operators (a loss's softmax
    /// cross-entropy), whose exponentials run far below a GEMM's rate;
    /// `dense_flops_per_s` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub softmax_flops_per_s: Option<f64>,
    /// Effective bandwidth of GAT's attention operators (edge scores,
    /// attention-weighted aggregation, and their backward where
    /// `attention_backward_bytes_per_s` is absent); `sparse_bytes_per_s`
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_bytes_per_s: Option<f64>,
    /// Effective bandwidth of the backward of GAT's attention; the
    /// attention rate (above) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_backward_bytes_per_s: Option<f64>,
    /// Effective bandwidth of GAT's edge softmax; the attention rate
    /// (above) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edge_softmax_bytes_per_s: Option<f64>,
    /// Rates fitted to classes of operators in training: where a class
    /// has one, its memory time is `bytes / bytes_per_s + edges ×
    /// seconds_per_edge + edge_heads × seconds_per_edge_head + rows ×
    /// seconds_per_row` (with a time per row, `bytes` less `row_bytes`)
    /// instead of bytes at the class's field above.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub class_rates: Vec<ClassRate>,
    /// The plain gather's time per edge timed alone at several widths and
    /// working sets (the bytes of the rows it gathers from), in
    /// increasing order of bytes, then width. Where given, and a sparse
    /// class's fit is `on_curve`, an aggregation's time per
    /// edge is read from them at its own width and working set
    /// ([`DeviceProfile::memory_seconds`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gather_curve: Vec<GatherPoint>,
    /// Fixed cost of launching one operator.
    pub op_overhead_s: f64,
    /// The CPU backend's threads the figures were measured at (`fateplan
    /// profile --threads`): a run at another count computes at other
    /// rates. None for a GPU, or a profile that does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
}

/// A class's memory time fitted to its operators: a bandwidth, a time
/// per edge walked (an edge's index, its row's cache lines and the
/// work per edge that does not grow with the row's width), a time per
/// head of an edge (an attention score's arithmetic: [`Cost::edge_heads`])
/// and a time per row walked in a block (the row's bounds, its loop and
/// what is read and written for it whatever its edges: [`Cost::rows`]).
///
/// [`Cost::edge_heads`]: crate::workload::Cost::edge_heads
/// [`Cost::rows`]: crate::workload::Cost::rows
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassRate {
    pub class: ComputeClass,
    pub bytes_per_s: f64,
    #[serde(default)]
    pub seconds_per_edge: f64,
    /// Zero (and not written) where the profile did not tell heads apart.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub seconds_per_edge_head: f64,
    /// Zero (and not written) where the profile did not tell rows apart.
    #[serde(default, skip_serializing_if = "is_zero_f64")]
    pub seconds_per_row: f64,
    /// Whether the bandwidth and the time per edge were fitted with each
    /// gather's share of the profile's `gather_curve` ([`curve_share`])
    /// taken out: they are then a gather's at the curve's largest working
    /// set, and an operator that records its working set is charged its
    /// own share of them ([`DeviceProfile::memory_seconds`]). False (and
    /// not written) otherwise.
    #[serde(default, skip_serializing_if = "is_false")]
    pub on_curve: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero_f64(x: &f64) -> bool {
    *x == 0.0
}

/// The plain gather's time per edge at one width and working set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatherPoint {
    /// Floats a row.
    pub width: u32,
    /// Bytes of the rows gathered from (`rows × width × 4`).
    pub set_bytes: u64,
    pub seconds_per_edge: f64,
}

/// The share of its time per edge a gather of rows of `width` floats
/// from a working set of `set_bytes` takes, beside one of the same width
/// at the largest working set `curve` has at that width: the time per
/// edge `curve` gives at `set_bytes` (interpolated in the logarithm of
/// the bytes between the points of that width, held at the first and
/// last) over the time at that width's last point. Between the widths
/// `curve` has, the shares of the two nearest are interpolated in the
/// logarithm of the width; outside them, the nearest width's share is
/// taken. At most 1; 1 where `curve` is empty or `width` or `set_bytes`
/// is zero.
pub fn curve_share(curve: &[GatherPoint], width: u32, set_bytes: u64) -> f64 {
    if width == 0 || set_bytes == 0 || curve.is_empty() {
        return 1.0;
    }
    // The nearest widths the curve has at or below `width` and at or
    // above it.
    let below = curve.iter().map(|p| p.width).filter(|&w| w <= width).max();
    let above = curve.iter().map(|p| p.width).filter(|&w| w >= width).min();
    // A width's points come in increasing order of bytes (as a profile
    // lists them: `DeviceProfile` is validated so).
    let share_at = |w: u32| -> f64 {
        let mut points = curve.iter().filter(|p| p.width == w);
        // `w` is a width of the curve, so it has a point.
        let Some(first) = points.next() else {
            return 1.0;
        };
        let (mut last, mut between) = (first, None);
        for p in points {
            if between.is_none() && last.set_bytes < set_bytes && p.set_bytes >= set_bytes {
                between = Some((last, p));
            }
            last = p;
        }
        let seconds = match between {
            _ if set_bytes <= first.set_bytes => first.seconds_per_edge,
            Some((a, b)) => {
                let (xa, xb) = ((a.set_bytes as f64).log2(), (b.set_bytes as f64).log2());
                // Sets 2^53 and more apart by less than a float's step.
                let t = match xb > xa {
                    true => ((set_bytes as f64).log2() - xa) / (xb - xa),
                    false => 1.0,
                };
                a.seconds_per_edge + t * (b.seconds_per_edge - a.seconds_per_edge)
            }
            None => last.seconds_per_edge,
        };
        (seconds / last.seconds_per_edge).min(1.0)
    };
    match (below, above) {
        (Some(a), Some(b)) if a != b => {
            let t = (f64::from(width).log2() - f64::from(a).log2())
                / (f64::from(b).log2() - f64::from(a).log2());
            share_at(a) + t * (share_at(b) - share_at(a))
        }
        (Some(w), _) | (None, Some(w)) => share_at(w),
        (None, None) => 1.0,
    }
}

/// A GEMM rate at one arithmetic intensity.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenseShape {
    /// Flops per byte the operators read and write (the workload's
    /// `flops / bytes`).
    pub flops_per_byte: f64,
    pub flops_per_s: f64,
}

impl DeviceProfile {
    /// Bytes per second of the memory traffic of an operator of `class`,
    /// from the class's field (a fit in `class_rates` is not looked at:
    /// [`DeviceProfile::memory_seconds`] does).
    pub fn memory_bytes_per_s(&self, class: ComputeClass) -> f64 {
        match class {
            ComputeClass::Sparse | ComputeClass::SparseMasked => self.sparse_bytes_per_s,
            ComputeClass::Scatter => self.scatter_bytes_per_s.unwrap_or(self.sparse_bytes_per_s),
            ComputeClass::Attention => self
                .attention_bytes_per_s
                .unwrap_or(self.sparse_bytes_per_s),
            ComputeClass::EdgeScores => self.memory_bytes_per_s(ComputeClass::Attention),
            ComputeClass::AttentionBackward => self
                .attention_backward_bytes_per_s
                .unwrap_or_else(|| self.memory_bytes_per_s(ComputeClass::Attention)),
            ComputeClass::EdgeSoftmax => self
                .edge_softmax_bytes_per_s
                .unwrap_or_else(|| self.memory_bytes_per_s(ComputeClass::Attention)),
            ComputeClass::Dense
            | ComputeClass::Elementwise
            | ComputeClass::Softmax
            | ComputeClass::NodeScores
            | ComputeClass::NodeScoresBackward
            | ComputeClass::Elu => self.hbm_bytes_per_s,
        }
    }

    /// Flops per second of a GEMM doing `flops_per_byte` flops per byte
    /// it touches. Without `dense_shapes`, `dense_flops_per_s`. With them:
    /// between two shapes, the rate is interpolated on a log-log scale
    /// (a power law of the intensity); above the most intense, its rate;
    /// below the least intense, its bytes per second (a narrower GEMM
    /// streams its operands no faster).
    pub fn dense_rate(&self, flops_per_byte: f64) -> f64 {
        let shapes = &self.dense_shapes;
        let (Some(first), Some(last)) = (shapes.first(), shapes.last()) else {
            return self.dense_flops_per_s;
        };
        if !(flops_per_byte.is_finite() && flops_per_byte > 0.0)
            || flops_per_byte >= last.flops_per_byte
        {
            return last.flops_per_s;
        }
        if flops_per_byte <= first.flops_per_byte {
            return first.flops_per_s * flops_per_byte / first.flops_per_byte;
        }
        let upper = shapes
            .iter()
            .position(|s| s.flops_per_byte >= flops_per_byte)
            .unwrap_or(shapes.len() - 1);
        let (a, b) = (shapes[upper - 1], shapes[upper]);
        let t =
            (flops_per_byte / a.flops_per_byte).ln() / (b.flops_per_byte / a.flops_per_byte).ln();
        (a.flops_per_s.ln() + t * (b.flops_per_s / a.flops_per_s).ln()).exp()
    }

    /// Seconds of the memory traffic of an operator of `cost.class`
    /// moving `cost.bytes` and walking `cost.edges` edges, of
    /// `cost.edge_heads` heads in all, and `cost.rows` rows: by the
    /// class's fit in `class_rates` where it has one, otherwise bytes at
    /// [`DeviceProfile::memory_bytes_per_s`]. A fit with a time per edge
    /// prices only operators that record the edges they walk: one that
    /// records none (a workload written before `cost.edges`) is priced by
    /// the class's field, as it was then; so is one that records no heads
    /// or rows where the fit has a time for them (a workload written
    /// before `cost.edge_heads` and `cost.rows`), since the fit's other
    /// terms were fitted beside those. With a time per row, the bytes
    /// moved once a row (`cost.row_bytes`) are charged that time instead.
    /// A masked gather without a fit of its own takes the sparse class's.
    pub fn memory_seconds(&self, cost: &Cost) -> f64 {
        match self.fit_applied(cost) {
            Some(fit) => {
                // The gathers' share at their working set, where the fit
                // was made at the curve's largest.
                let share = match fit.on_curve {
                    true => {
                        curve_share(&self.gather_curve, cost.gather_width, cost.gather_set_bytes)
                    }
                    false => 1.0,
                };
                let edge_bytes = cost.bytes.saturating_sub(cost.row_bytes) as f64;
                // A time per row stands for the bytes moved once a row.
                let row_bytes = match fit.seconds_per_row > 0.0 {
                    true => 0.0,
                    false => cost.row_bytes.min(cost.bytes) as f64,
                };
                (share * edge_bytes + row_bytes) / fit.bytes_per_s
                    + share * cost.edges as f64 * fit.seconds_per_edge
                    + cost.edge_heads as f64 * fit.seconds_per_edge_head
                    + cost.rows as f64 * fit.seconds_per_row
            }
            None => cost.bytes as f64 / self.memory_bytes_per_s(cost.class),
        }
    }

    /// The fit that prices `cost` ([`DeviceProfile::memory_seconds`]): its
    /// class's, where the operator records what the fit has a time for.
    fn fit_applied(&self, cost: &Cost) -> Option<&ClassRate> {
        self.fit_for(cost.class).filter(|fit| {
            (cost.edges > 0 || fit.seconds_per_edge == 0.0)
                && (cost.edge_heads > 0 || fit.seconds_per_edge_head == 0.0)
                && (cost.rows > 0 || fit.seconds_per_row == 0.0)
        })
    }

    /// The first of `ops` that walks edges (or is a loss) of a class whose
    /// fit has a time per edge head or per row but records none of them
    /// (a workload written before `cost.edge_heads` and `cost.rows`, or
    /// before the loss recorded its rows): such operators
    /// are priced by their class's field, not its fit
    /// ([`DeviceProfile::memory_seconds`]), the fit found as there.
    pub fn priced_by_field<'o>(
        &self,
        ops: &'o [crate::workload::Op],
    ) -> Option<&'o crate::workload::Op> {
        ops.iter().find(|op| {
            let c = &op.cost;
            c.seconds.is_none()
                && (c.edges > 0 || c.class == ComputeClass::Softmax)
                && self.fit_for(c.class).is_some_and(|r| {
                    c.edge_heads == 0 && r.seconds_per_edge_head > 0.0
                        || c.rows == 0 && r.seconds_per_row > 0.0
                })
        })
    }

    /// The first of `ops` a gather fit on the curve prices at the curve's
    /// largest working set because it records none (a workload written
    /// before `cost.gather_width`): a gather of a small graph is then
    /// priced as one of a large graph's.
    pub fn priced_at_curve_top<'o>(
        &self,
        ops: &'o [crate::workload::Op],
    ) -> Option<&'o crate::workload::Op> {
        ops.iter().find(|op| {
            let c = &op.cost;
            c.seconds.is_none()
                && c.edges > 0
                && c.gather_width == 0
                && !self.gather_curve.is_empty()
                && self.fit_applied(c).is_some_and(|fit| fit.on_curve)
        })
    }

    /// The fit in `class_rates` that prices `class`: its own, or for a
    /// masked gather without one, the sparse class's.
    fn fit_for(&self, class: ComputeClass) -> Option<&ClassRate> {
        let fit_of = |class| self.class_rates.iter().find(|r| r.class == class);
        match class {
            ComputeClass::SparseMasked => fit_of(class).or_else(|| fit_of(ComputeClass::Sparse)),
            _ => fit_of(class),
        }
    }

    /// Seconds to build the transposes of `edges` edges
    /// ([`DeviceProfile::transpose_seconds_per_edge`]).
    pub fn transpose_seconds(&self, edges: u64) -> f64 {
        edges as f64 * self.transpose_seconds_per_edge.unwrap_or(0.0)
    }

    /// Seconds to mask `elements` elements with dropout
    /// ([`DeviceProfile::mask_seconds_per_element`]).
    pub fn mask_seconds(&self, elements: u64) -> f64 {
        elements as f64 * self.mask_seconds_per_element.unwrap_or(0.0)
    }

    /// Seconds an operator's work takes, launch overhead left out: the
    /// larger of its math time and its memory time (a roofline;
    /// [`DeviceProfile::memory_seconds`]). Dense math runs at
    /// [`DeviceProfile::dense_rate`] for its intensity, softmax math at
    /// `softmax_flops_per_s`, other math at `dense_flops_per_s`.
    pub fn work_seconds(&self, cost: &Cost) -> f64 {
        let (flops, bytes, class) = (cost.flops, cost.bytes, cost.class);
        let rate = match class {
            // No bytes: an infinite intensity, the most intense shape.
            ComputeClass::Dense => self.dense_rate(flops / bytes as f64),
            ComputeClass::Softmax => self.softmax_flops_per_s.unwrap_or(self.dense_flops_per_s),
            _ => self.dense_flops_per_s,
        };
        // A loss fitted by its rows and bytes: the fit is all its time,
        // its math included.
        if class == ComputeClass::Softmax && cost.rows > 0 && self.fit_applied(cost).is_some() {
            return self.memory_seconds(cost);
        }
        let math_s = flops / rate;
        math_s.max(self.memory_seconds(cost))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostProfile {
    pub memory_bytes: u64,
    pub memory_bytes_per_s: f64,
    pub cores: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieProfile {
    pub h2d_bytes_per_s: f64,
    pub d2h_bytes_per_s: f64,
    pub latency_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerProfile {
    /// Device-to-device bandwidth, each direction.
    pub bytes_per_s: f64,
    pub latency_s: f64,
    /// What carries device-to-device copies: NVLink (their own link), or
    /// PCIe (they cross each device's PCIe link, beside host copies).
    #[serde(default, skip_serializing_if = "PeerVia::is_nvlink")]
    pub via: PeerVia,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerVia {
    #[default]
    Nvlink,
    Pcie,
}

impl PeerVia {
    fn is_nvlink(&self) -> bool {
        *self == PeerVia::Nvlink
    }
}

/// The link between nodes (one network interface per device, as on
/// DGX-class machines): what devices on different nodes exchange over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkProfile {
    /// Bandwidth per device, each direction.
    pub bytes_per_s: f64,
    pub latency_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SsdProfile {
    pub capacity_bytes: u64,
    pub read_bytes_per_s: f64,
    pub write_bytes_per_s: f64,
    pub read_latency_s: f64,
    pub write_latency_s: f64,
}

/// A machine as the planner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub format_version: u32,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub device: DeviceProfile,
    pub host: HostProfile,
    pub pcie: PcieProfile,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerProfile>,
    /// Between nodes; needed for more devices than `device.count_max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkProfile>,
    pub ssd: SsdProfile,
    /// Where each figure comes from, keyed by dotted field path.
    #[serde(default)]
    pub sources: BTreeMap<String, String>,
    /// How steady the machine was while a measurement took the figures
    /// (`fateplan profile` records it; a hand-written profile has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steadiness: Option<Steadiness>,
}

/// A fixed piece of work, the probe, timed at several points of a
/// measurement (before each of its stages and after the last): how far
/// the machine's speed moved while the profile's figures were taken. A
/// figure measured while another program took the cores is off by about
/// as much as the probe shows. Timed again just before training
/// (`fateplan train --compare-simulated`), it tells the part of a
/// prediction's miss that comes from the machine running at another
/// speed than when it was profiled from the part that comes from the
/// model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Steadiness {
    /// The probe's name and version: its times compare only with the
    /// same probe's.
    pub probe: String,
    /// Threads it ran on.
    pub threads: u32,
    /// The points it was timed at, in order.
    pub points: Vec<ProbePoint>,
    /// Cores' worth of CPU time other programs (and the hypervisor, on
    /// a virtual machine) took on average while the measurement ran,
    /// where the system says (Linux's `/proc/stat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_cores: Option<f64>,
}

/// One point of a [`Steadiness`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbePoint {
    /// What the measurement did next (a stage's name, or `the end`).
    pub before: String,
    /// The median seconds of the probe's runs there.
    pub seconds: f64,
}

/// Most cores' worth of other programs' time a profile's [`Steadiness`]
/// may record (a machine of that many CPUs, all busy).
pub const MAX_OTHER_CORES: f64 = 65_536.0;

/// Most points a profile's [`Steadiness`] may list.
pub const MAX_STEADINESS_POINTS: usize = 1000;

/// A steadiness spread above which a profile's figures are said to be
/// unsteady: the probe's slowest point more than half its median slower
/// than its fastest. (On a shared 2-core virtual machine with nothing
/// else running, the probe's points of one profile spread 20-40%: the
/// host's other tenants move it.)
pub const UNSTEADY_SPREAD: f64 = 0.5;

/// The share of the host's cores other programs may have taken while a
/// profile was measured (its [`Steadiness::other_cores`] over
/// `host.cores`) above which its figures are said to be unsteady.
pub const UNSTEADY_OTHER_SHARE: f64 = 0.1;

impl Steadiness {
    /// The median of the points' seconds (the mean of the middle two of
    /// an even count); 0 without points.
    pub fn median_s(&self) -> f64 {
        let mut points: Vec<f64> = self.points.iter().map(|p| p.seconds).collect();
        crate::units::median(&mut points)
    }

    /// The slowest point's seconds less the fastest's, over their
    /// median: 0 where the machine ran the probe at one speed throughout.
    pub fn spread(&self) -> f64 {
        let median = self.median_s();
        if median <= 0.0 {
            return 0.0;
        }
        let (fastest, slowest) = self.range();
        match (fastest, slowest) {
            (Some(fastest), Some(slowest)) => (slowest.seconds - fastest.seconds) / median,
            _ => 0.0,
        }
    }

    /// The fastest point and the slowest (the first of equals); `None`
    /// without points.
    pub fn range(&self) -> (Option<&ProbePoint>, Option<&ProbePoint>) {
        let by = |a: &&ProbePoint, b: &&ProbePoint| a.seconds.total_cmp(&b.seconds);
        (
            self.points.iter().min_by(by),
            self.points.iter().rev().max_by(by),
        )
    }

    fn validate(&self, context: &str) -> Result<()> {
        let field = |name: &str| format!("{context} field steadiness.{name}");
        if self.probe.trim().is_empty() {
            return Err(Error::invalid(field("probe"), "is empty: name the probe"));
        }
        if self.threads == 0 {
            return Err(Error::invalid(field("threads"), "0 must be positive"));
        }
        let n = self.points.len();
        if n == 0 || n > MAX_STEADINESS_POINTS {
            return Err(Error::invalid(
                field("points"),
                format!("{n} points: give 1 to {MAX_STEADINESS_POINTS}"),
            ));
        }
        if let Some((k, p)) = self.points.iter().enumerate().find(|(_, p)| {
            !(p.seconds.is_finite() && p.seconds > 0.0 && p.seconds <= MAX_FIGURE_SECONDS)
        }) {
            return Err(Error::invalid(
                field(&format!("points[{k}].seconds")),
                format!(
                    "{} must be positive and at most {MAX_FIGURE_SECONDS:e}",
                    figure(p.seconds)
                ),
            ));
        }
        if let Some(cores) = self
            .other_cores
            .filter(|c| !(c.is_finite() && (0.0..=MAX_OTHER_CORES).contains(c)))
        {
            return Err(Error::invalid(
                field("other_cores"),
                format!("{} must be 0 to {MAX_OTHER_CORES} cores", figure(cores)),
            ));
        }
        Ok(())
    }
}

/// The lists of figures a `sources` key may name besides
/// [`Profile::figures`]' own paths.
pub const SOURCED_LISTS: [&str; 3] = [
    "device.dense_shapes",
    "device.class_rates",
    "device.gather_curve",
];

/// The least a profile's rate (`..._per_s`) may be: with operators of at
/// most `MAX_OP_FLOPS`, an iteration's sums stay finite.
pub const MIN_FIGURE_RATE: f64 = 1e-3;

/// The most a profile's latency, overhead or per-item seconds may be.
pub const MAX_FIGURE_SECONDS: f64 = 1e6;

impl Profile {
    /// Bytes per second host memory serves to a device's DMA (both PCIe
    /// directions and the network, together; the SSD tier's bytes, which
    /// the runtime copies on the cores, are charged at the copy rate).
    /// `host.memory_bytes_per_s` is a copy rate: a copy reads and writes
    /// each byte. A GPU's (or a NIC's) DMA reads or writes each byte of
    /// host memory once, half a copy, so host memory serves it at twice
    /// the copy rate: on an H100 host, 91 GB/s of DMA with both PCIe
    /// directions busy against a copy rate of 42.7-44.6 GB/s
    /// (docs/gpu.md). The CPU backend's transfers are copies on the cores:
    /// the copy rate.
    pub fn host_transfer_bytes_per_s(&self) -> f64 {
        match self.device.kind {
            DeviceKind::Gpu => 2.0 * self.host.memory_bytes_per_s,
            DeviceKind::Cpu => self.host.memory_bytes_per_s,
        }
    }

    /// Reads and validates a profile; `source` names the file in errors.
    pub fn from_json(text: &str, source: &str) -> Result<Profile> {
        let profile: Profile = crate::json::parse(text, source)?;
        profile
            .validate()
            .map_err(|error| crate::json::within(source, error))?;
        Ok(profile)
    }

    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile always serializes")
    }

    /// Whether `other` prices everything as this profile does: equal but
    /// for what is words, not figures (the names, the description, the
    /// sources and the device's model name) and the steadiness, which
    /// prices nothing.
    pub fn same_figures(&self, other: &Profile) -> bool {
        let figures = |profile: &Profile| {
            let mut figures = profile.clone();
            figures.name.clear();
            figures.description.clear();
            figures.sources.clear();
            figures.device.model.clear();
            figures.steadiness = None;
            figures
        };
        figures(self) == figures(other)
    }

    /// Every numeric field by dotted path, for validation and for checking sources.
    pub fn figures(&self) -> Vec<(&'static str, f64)> {
        let d = &self.device;
        let mut figures = vec![
            ("device.count_max", d.count_max as f64),
            ("device.hbm_bytes", d.hbm_bytes as f64),
            ("device.hbm_bytes_per_s", d.hbm_bytes_per_s),
            ("device.dense_flops_per_s", d.dense_flops_per_s),
            ("device.sparse_bytes_per_s", d.sparse_bytes_per_s),
            ("device.op_overhead_s", d.op_overhead_s),
            ("host.memory_bytes", self.host.memory_bytes as f64),
            ("host.memory_bytes_per_s", self.host.memory_bytes_per_s),
            ("host.cores", self.host.cores as f64),
            ("pcie.h2d_bytes_per_s", self.pcie.h2d_bytes_per_s),
            ("pcie.d2h_bytes_per_s", self.pcie.d2h_bytes_per_s),
            ("pcie.latency_s", self.pcie.latency_s),
            ("ssd.capacity_bytes", self.ssd.capacity_bytes as f64),
            ("ssd.read_bytes_per_s", self.ssd.read_bytes_per_s),
            ("ssd.write_bytes_per_s", self.ssd.write_bytes_per_s),
            ("ssd.read_latency_s", self.ssd.read_latency_s),
            ("ssd.write_latency_s", self.ssd.write_latency_s),
        ];
        if let Some(threads) = d.threads {
            figures.push(("device.threads", f64::from(threads)));
        }
        if let Some(scatter) = d.scatter_bytes_per_s {
            figures.push(("device.scatter_bytes_per_s", scatter));
        }
        if let Some(transpose) = d.transpose_seconds_per_edge {
            figures.push(("device.transpose_seconds_per_edge", transpose));
        }
        if let Some(mask) = d.mask_seconds_per_element {
            figures.push(("device.mask_seconds_per_element", mask));
        }
        if let Some(softmax) = d.softmax_flops_per_s {
            figures.push(("device.softmax_flops_per_s", softmax));
        }
        if let Some(attention) = d.attention_bytes_per_s {
            figures.push(("device.attention_bytes_per_s", attention));
        }
        if let Some(backward) = d.attention_backward_bytes_per_s {
            figures.push(("device.attention_backward_bytes_per_s", backward));
        }
        if let Some(softmax) = d.edge_softmax_bytes_per_s {
            figures.push(("device.edge_softmax_bytes_per_s", softmax));
        }
        if let Some(peer) = &self.peer {
            figures.push(("peer.bytes_per_s", peer.bytes_per_s));
            figures.push(("peer.latency_s", peer.latency_s));
        }
        if let Some(network) = &self.network {
            figures.push(("network.bytes_per_s", network.bytes_per_s));
            figures.push(("network.latency_s", network.latency_s));
        }
        figures
    }

    /// Figures that pass [`Profile::validate`] but are far from any
    /// machine's, as a figure written in the wrong unit is (a bandwidth
    /// in GB/s where bytes per second are meant, a latency in
    /// milliseconds where seconds are): each a field and what is doubtful
    /// about its value, for a warning. Bandwidths and compute rates under
    /// 1e6 a second, capacities under 1 MiB, latencies and overheads over
    /// a second, and per-edge or per-element seconds over a millisecond.
    pub fn doubtful_figures(&self) -> Vec<(&'static str, String)> {
        self.figures()
            .into_iter()
            .filter_map(|(field, value)| {
                let why = if field.ends_with("_per_s") && value < 1e6 {
                    format!("{value} a second is under 1e6 (rates are per second: 8 GB/s is 8e9)")
                } else if field.ends_with("_bytes") && value < (1u64 << 20) as f64 {
                    format!("{value} bytes is under 1 MiB (capacities are in bytes)")
                } else if (field.ends_with("latency_s") || field.ends_with("overhead_s"))
                    && value > 1.0
                {
                    format!("{value} s is over a second (times are in seconds: 3 ms is 0.003)")
                } else if (field.ends_with("seconds_per_edge")
                    || field.ends_with("seconds_per_element"))
                    && value > 1e-3
                {
                    format!("{value} s is over a millisecond (times are in seconds: 5 ns is 5e-9)")
                } else {
                    return None;
                };
                Some((field, why))
            })
            .collect()
    }

    /// Where the profile's measurement says the machine's speed moved by
    /// more than [`UNSTEADY_SPREAD`] while its figures were taken (its
    /// [`Steadiness::spread`]), or other programs took more than
    /// [`UNSTEADY_OTHER_SHARE`] of its cores, what to say of it.
    pub fn unsteady(&self) -> Option<String> {
        let steadiness = self.steadiness.as_ref()?;
        let spread = steadiness.spread();
        let cores = f64::from(self.host.cores.max(1));
        let others = steadiness
            .other_cores
            .filter(|&c| c > UNSTEADY_OTHER_SHARE * cores);
        let (Some(fastest), Some(slowest)) = steadiness.range() else {
            return None;
        };
        let moved = (spread > UNSTEADY_SPREAD).then(|| {
            format!(
                "the machine's speed moved while it was measured: its probe took {:.1} to {:.1} \
                 ms at {} points ({:.0}% apart; the slowest before {})",
                fastest.seconds * 1e3,
                slowest.seconds * 1e3,
                steadiness.points.len(),
                spread * 100.0,
                slowest.before
            )
        });
        let shared = others.map(|others| {
            format!(
                "other programs took {others:.2} cores' worth of CPU time while it was \
                 measured, of the {} it may run on",
                self.host.cores
            )
        });
        let why = match (moved, shared) {
            (Some(moved), Some(shared)) => format!("{moved}; {shared}"),
            (Some(why), None) | (None, Some(why)) => why,
            (None, None) => return None,
        };
        let figures = match self.device.kind {
            DeviceKind::Gpu => "its figures measured on the CPU (the host's copies and memory)",
            DeviceKind::Cpu => "its figures",
        };
        Some(format!(
            "{why}: {figures} may be off by as much, and so may a prediction made on it; \
             measure again on a quieter machine"
        ))
    }

    /// Devices per node when `gpus` devices train together.
    pub fn gpus_per_node(&self, gpus: u32) -> u32 {
        gpus.clamp(1, self.device.count_max.max(1))
    }

    /// Checks that `gpus` devices can train together on this machine: at
    /// most `device.count_max` on one node, more only with a `network`
    /// section (whole nodes) and a `peer` link.
    pub fn check_gpus(&self, gpus: u32) -> Result<()> {
        let per_node = self.device.count_max.max(1);
        let field = || format!("gpus {gpus} on profile {:?}", self.name);
        if gpus == 0 || gpus > MAX_GPUS {
            return Err(Error::invalid(
                field(),
                format!("must be in 1..={MAX_GPUS}"),
            ));
        }
        if gpus > 1 && self.peer.is_none() {
            return Err(Error::invalid(
                field(),
                "the profile has no peer section (device-to-device link) to price the exchanges \
                 by: plan on a profile with one (such as h100-sxm); `train --devices` on the CPU \
                 backend plans the largest share alone, with no exchange",
            ));
        }
        if gpus > per_node {
            if self.network.is_none() {
                return Err(Error::invalid(
                    field(),
                    format!(
                        "more than device.count_max ({per_node}) needs a network section between nodes"
                    ),
                ));
            }
            if !gpus.is_multiple_of(per_node) {
                return Err(Error::invalid(
                    field(),
                    format!("more than one node must be whole nodes of {per_node} devices"),
                ));
            }
        }
        Ok(())
    }

    /// One device's share of its node when `gpus` devices train together:
    /// host memory, its bandwidth and cores, and the SSD (capacity and
    /// rates) are divided between the node's devices, which use them at
    /// the same time. Device, PCIe, peer and network figures are per
    /// device already.
    pub fn share(&self, gpus: u32) -> Profile {
        let per_node = self.gpus_per_node(gpus);
        if per_node == 1 {
            return self.clone();
        }
        let n = per_node as f64;
        let mut out = self.clone();
        out.host.memory_bytes /= per_node as u64;
        out.host.memory_bytes_per_s /= n;
        out.host.cores = (out.host.cores / per_node).max(1);
        out.ssd.capacity_bytes /= per_node as u64;
        out.ssd.read_bytes_per_s /= n;
        out.ssd.write_bytes_per_s /= n;
        out
    }

    /// Checks every figure: counts positive, rates at least [`MIN_FIGURE_RATE`] per second,
    /// latencies and per-item seconds at most [`MAX_FIGURE_SECONDS`], so
    /// that no operator or transfer of a valid workload takes infinite
    /// time.
    pub fn validate(&self) -> Result<()> {
        let context = || format!("profile {:?}", self.name);
        if self.format_version != PROFILE_FORMAT_VERSION {
            return Err(Error::invalid(
                format!("{} field format_version", context()),
                format!(
                    "{} is not supported; this build reads version {PROFILE_FORMAT_VERSION}",
                    self.format_version
                ),
            ));
        }
        // The name heads every report a plan on it prints.
        if self.name.trim().is_empty() || self.name.chars().any(char::is_control) {
            return Err(Error::invalid(
                "profile field name",
                format!(
                    "{:?}: expected a name of printable characters, not empty",
                    self.name
                ),
            ));
        }
        for (field, value) in self.figures() {
            let may_be_zero = field.ends_with("latency_s")
                || field.ends_with("overhead_s")
                || field.ends_with("seconds_per_edge")
                || field.ends_with("seconds_per_element");
            let rate = field.ends_with("_per_s");
            let ok = value.is_finite()
                && if may_be_zero {
                    (0.0..=MAX_FIGURE_SECONDS).contains(&value)
                } else if rate {
                    value >= MIN_FIGURE_RATE
                } else {
                    value > 0.0
                };
            if !ok {
                let rule = if may_be_zero {
                    format!("finite, not negative and at most {MAX_FIGURE_SECONDS:e} seconds")
                } else if rate {
                    format!("finite and at least {MIN_FIGURE_RATE:e} per second")
                } else {
                    "positive".to_string()
                };
                return Err(Error::invalid(
                    format!("{} field {field}", context()),
                    format!("{} must be {rule}", figure(value)),
                ));
            }
        }
        // A source is of a figure the profile has: a key that names none
        // (a misspelt path, or a section or list the profile lacks)
        // sources nothing.
        let mut figures: Vec<&str> = self.figures().into_iter().map(|(f, _)| f).collect();
        let lists = [
            !self.device.dense_shapes.is_empty(),
            !self.device.class_rates.is_empty(),
            !self.device.gather_curve.is_empty(),
        ];
        figures.extend(
            SOURCED_LISTS
                .iter()
                .zip(lists)
                .filter(|(_, has)| *has)
                .map(|(l, _)| *l),
        );
        if self.steadiness.is_some() {
            figures.push("steadiness");
        }
        if let Some(key) = self.sources.keys().find(|k| !figures.contains(&k.as_str())) {
            if key == "steadiness" {
                return Err(Error::invalid(
                    format!("{} field sources.{key:?}", context()),
                    "sources the steadiness section, which is absent: give it, or leave out its \
                     source",
                ));
            }
            if SOURCED_LISTS.contains(&key.as_str()) {
                return Err(Error::invalid(
                    format!("{} field sources.{key:?}", context()),
                    format!(
                        "sources the list {key}, which is empty or absent: give its points, or \
                         leave out its source"
                    ),
                ));
            }
            return Err(Error::invalid(
                format!("{} field sources.{key:?}", context()),
                format!(
                    "names no figure of the profile; its figures are {}",
                    figures.join(", ")
                ),
            ));
        }
        if let Some(steadiness) = &self.steadiness {
            steadiness.validate(&context())?;
        }
        let mut previous = 0.0;
        for (k, shape) in self.device.dense_shapes.iter().enumerate() {
            let field = |name: &str| format!("{} field device.dense_shapes[{k}].{name}", context());
            for (name, value) in [
                ("flops_per_byte", shape.flops_per_byte),
                ("flops_per_s", shape.flops_per_s),
            ] {
                if !(value.is_finite() && value > 0.0) {
                    return Err(Error::invalid(
                        field(name),
                        format!("{value} must be positive"),
                    ));
                }
            }
            if shape.flops_per_byte <= previous {
                return Err(Error::invalid(
                    field("flops_per_byte"),
                    format!(
                        "{} must be larger than the shape before it ({previous})",
                        shape.flops_per_byte
                    ),
                ));
            }
            previous = shape.flops_per_byte;
        }
        for (k, point) in self.device.gather_curve.iter().enumerate() {
            let field = |name: &str| format!("{} field device.gather_curve[{k}].{name}", context());
            if point.width == 0 {
                return Err(Error::invalid(field("width"), "0 must be positive"));
            }
            if point.set_bytes == 0 {
                return Err(Error::invalid(field("set_bytes"), "0 must be positive"));
            }
            let seconds = point.seconds_per_edge;
            if !(seconds.is_finite() && seconds > 0.0 && seconds <= MAX_FIGURE_SECONDS) {
                return Err(Error::invalid(
                    field("seconds_per_edge"),
                    format!(
                        "{} must be finite, positive and at most {MAX_FIGURE_SECONDS:e} seconds",
                        figure(seconds)
                    ),
                ));
            }
            if let Some(before) = k.checked_sub(1).map(|b| &self.device.gather_curve[b]) {
                if (point.set_bytes, point.width) <= (before.set_bytes, before.width) {
                    return Err(Error::invalid(
                        field("set_bytes"),
                        format!(
                            "{} (width {}) must come after the point before it ({} bytes, \
                             width {}): points go in increasing order of bytes, then width",
                            point.set_bytes, point.width, before.set_bytes, before.width
                        ),
                    ));
                }
            }
        }
        // (A count of 0 threads is refused with the other figures.)
        match (self.device.threads, self.device.kind) {
            (Some(threads), DeviceKind::Cpu) if threads > self.host.cores => {
                return Err(Error::invalid(
                    format!("{} field device.threads", context()),
                    format!(
                        "{threads} is more than the machine's {} cores (host.cores): a profile \
                         measures at most one thread a core",
                        self.host.cores
                    ),
                ))
            }
            (Some(threads), DeviceKind::Gpu) => {
                return Err(Error::invalid(
                    format!("{} field device.threads", context()),
                    format!(
                        "{threads}, but the device is a GPU: the field gives the CPU backend's \
                         threads; leave it out"
                    ),
                ))
            }
            _ => {}
        }
        for (k, fit) in self.device.class_rates.iter().enumerate() {
            let field = |name: &str| format!("{} field device.class_rates[{k}].{name}", context());
            if fit.on_curve && self.device.gather_curve.is_empty() {
                return Err(Error::invalid(
                    field("on_curve"),
                    "true, but the profile has no device.gather_curve to read a gather's \
                     share from: give false, or leave it out",
                ));
            }
            // The same bounds as the device's own rates and seconds.
            if !(fit.bytes_per_s.is_finite() && fit.bytes_per_s >= MIN_FIGURE_RATE) {
                return Err(Error::invalid(
                    field("bytes_per_s"),
                    format!(
                        "{} must be finite and at least {MIN_FIGURE_RATE:e} per second",
                        figure(fit.bytes_per_s)
                    ),
                ));
            }
            for (name, value) in [
                ("seconds_per_edge", fit.seconds_per_edge),
                ("seconds_per_edge_head", fit.seconds_per_edge_head),
                ("seconds_per_row", fit.seconds_per_row),
            ] {
                if !(value.is_finite() && (0.0..=MAX_FIGURE_SECONDS).contains(&value)) {
                    return Err(Error::invalid(
                        field(name),
                        format!(
                            "{} must be finite, not negative and at most {MAX_FIGURE_SECONDS:e} seconds",
                            figure(value)
                        ),
                    ));
                }
            }
            // Only the edge operators record edges, only GAT's heads,
            // and only they and the loss rows: a time for them on another
            // class would price nothing, or (as the operators record none)
            // price the class by its field.
            for (name, value, what, classes) in [
                (
                    "seconds_per_edge",
                    fit.seconds_per_edge,
                    "edges",
                    &ComputeClass::WALKS_EDGES[..],
                ),
                (
                    "seconds_per_edge_head",
                    fit.seconds_per_edge_head,
                    "edge heads",
                    &ComputeClass::WALKS_HEADS[..],
                ),
                (
                    "seconds_per_row",
                    fit.seconds_per_row,
                    "rows",
                    &ComputeClass::WALKS_ROWS[..],
                ),
            ] {
                if value != 0.0 && !classes.contains(&fit.class) {
                    let named: Vec<String> = classes.iter().map(|c| c.to_string()).collect();
                    return Err(Error::invalid(
                        field(name),
                        format!(
                            "{} on class {}, whose operators record no {what} (only {} do): \
                             give 0, or leave it out",
                            figure(value),
                            fit.class,
                            named.join(", ")
                        ),
                    ));
                }
            }
            // Only the gathers record their working set.
            let gathers = [ComputeClass::Sparse, ComputeClass::SparseMasked];
            if fit.on_curve && !gathers.contains(&fit.class) {
                return Err(Error::invalid(
                    field("on_curve"),
                    format!(
                        "true on class {}, whose operators record no working set (only \
                         sparse and sparse_masked do): give false, or leave it out",
                        fit.class
                    ),
                ));
            }
            if self.device.class_rates[..k]
                .iter()
                .any(|r| r.class == fit.class)
            {
                return Err(Error::invalid(
                    field("class"),
                    format!("{} has a rate earlier in the list", fit.class),
                ));
            }
        }
        Ok(())
    }
}

/// A figure as an error shows it: whole numbers as they are written
/// (`0`, `-1`, `80000000000`), others in exponent form (`1e-9`, `1e308`).
fn figure(value: f64) -> String {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 1e16 {
        format!("{value}")
    } else {
        format!("{value:e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        Profile::from_json(
            include_str!("../../profiles/cpu-small.json"),
            "cpu-small.json",
        )
        .unwrap()
    }

    /// The shipped profiles' figures are all plausible; one written in
    /// the wrong unit (GB/s as bytes a second, milliseconds as seconds,
    /// GiB as bytes, nanoseconds as seconds) is doubted, naming its field.
    #[test]
    fn figures_in_the_wrong_unit_are_doubted() {
        for text in [
            include_str!("../../profiles/cpu-small.json"),
            include_str!("../../profiles/a100-80g.json"),
            include_str!("../../profiles/h100-sxm.json"),
            include_str!("../../profiles/h200.json"),
            include_str!("../../profiles/h100-measured.json"),
            include_str!("../../profiles/h200-measured.json"),
        ] {
            let shipped = Profile::from_json(text, "shipped.json").unwrap();
            assert_eq!(shipped.doubtful_figures(), vec![], "{}", shipped.name);
        }
        let mut p = profile();
        p.pcie.h2d_bytes_per_s = 8.16;
        p.pcie.latency_s = 3.0;
        p.host.memory_bytes = 24;
        p.device.mask_seconds_per_element = Some(0.2);
        p.validate().unwrap();
        let fields: Vec<&str> = p.doubtful_figures().iter().map(|(f, _)| *f).collect();
        assert_eq!(
            fields,
            [
                "host.memory_bytes",
                "pcie.h2d_bytes_per_s",
                "pcie.latency_s",
                "device.mask_seconds_per_element"
            ]
        );
    }

    /// A measured profile's steadiness: the probe's points summed up,
    /// said to be unsteady where they spread or other programs took the
    /// cores, read back from JSON, and refused where a figure is not one.
    #[test]
    fn steadiness_is_summed_up_checked_and_warned_of() {
        let point = |before: &str, ms: f64| ProbePoint {
            before: before.into(),
            seconds: ms / 1e3,
        };
        let mut p = profile();
        assert_eq!(p.unsteady(), None);
        p.steadiness = Some(Steadiness {
            probe: "probe/1".into(),
            threads: 2,
            points: vec![point("a", 20.0), point("b", 22.0), point("c", 21.0)],
            other_cores: Some(0.05),
        });
        p.sources.insert("steadiness".into(), "measured".into());
        p.validate().unwrap();
        let steadiness = p.steadiness.clone().unwrap();
        assert!((steadiness.median_s() - 0.021).abs() < 1e-12);
        assert!((steadiness.spread() - 2.0 / 21.0).abs() < 1e-9);
        assert_eq!(p.unsteady(), None);
        let back = Profile::from_json(&p.to_json_pretty(), "p.json").unwrap();
        assert_eq!(back.steadiness, p.steadiness);

        let mut slow = p.clone();
        slow.steadiness.as_mut().unwrap().points[1].seconds = 0.035;
        let why = slow.unsteady().unwrap();
        assert!(
            why.contains("20.0 to 35.0 ms at 3 points (71% apart; the slowest before b)"),
            "{why}"
        );
        assert!(!why.contains("other programs"), "{why}");
        // Other programs' share is of the host's cores.
        let mut busy = p.clone();
        busy.host.cores = 8;
        busy.steadiness.as_mut().unwrap().other_cores = Some(0.7);
        assert_eq!(busy.unsteady(), None);
        busy.steadiness.as_mut().unwrap().other_cores = Some(0.9);
        let why = busy.unsteady().unwrap();
        assert!(
            why.starts_with(
                "other programs took 0.90 cores' worth of CPU time while it was measured, of the 8"
            ),
            "{why}"
        );

        for (edit, field) in [
            (
                (|s: &mut Steadiness| s.points[2].seconds = f64::NAN) as fn(&mut Steadiness),
                "steadiness.points[2].seconds",
            ),
            (|s| s.points.clear(), "steadiness.points"),
            (|s| s.threads = 0, "steadiness.threads"),
            (|s| s.probe = " ".into(), "steadiness.probe"),
            (|s| s.other_cores = Some(-1.0), "steadiness.other_cores"),
            (|s| s.other_cores = Some(1e300), "steadiness.other_cores"),
        ] {
            let mut bad = p.clone();
            edit(bad.steadiness.as_mut().unwrap());
            let error = bad.validate().unwrap_err().to_string();
            assert!(error.contains(&format!("field {field}")), "{error}");
        }
        // A source of it without it says so.
        let mut sourced = p.clone();
        sourced.steadiness = None;
        let error = sourced.validate().unwrap_err().to_string();
        assert!(
            error.contains(
                "sources.\"steadiness\": sources the steadiness section, which is absent"
            ),
            "{error}"
        );
    }

    /// Masked elements are charged at the profile's time per element,
    /// in the planner's cost model and in the simulator's alike; none
    /// where the profile has no figure. A negative or infinite one is
    /// refused, naming the field.
    #[test]
    fn masked_elements_are_charged_at_the_profile_s_price() {
        use crate::workload::{Cost, Op, OpId, OpKind, Phase};
        let mut p = profile();
        let op = |masked| Op {
            id: OpId(0),
            name: "relu[l1,p0]".into(),
            kind: OpKind::Activation,
            phase: Phase::Forward,
            inputs: vec![],
            outputs: vec![],
            cost: Cost::work(1e3, 4096, ComputeClass::Elementwise).masking(masked),
            scratch_bytes: 0,
            adds_into: None,
        };
        assert_eq!(p.device.mask_seconds_per_element, None);
        let plain = crate::passes::cost::op_seconds(&op(0), &p);
        assert_eq!(crate::passes::cost::op_seconds(&op(1000), &p), plain);
        p.device.mask_seconds_per_element = Some(2e-9);
        p.validate().unwrap();
        let masked = crate::passes::cost::op_seconds(&op(1000), &p);
        assert!((masked - plain - 2e-6).abs() < 1e-15, "{masked} {plain}");
        assert_eq!(crate::passes::cost::op_seconds(&op(0), &p), plain);
        let json = p.to_json_pretty();
        assert!(
            json.contains("\"mask_seconds_per_element\": 2e-9"),
            "{json}"
        );
        assert_eq!(Profile::from_json(&json, "p.json").unwrap(), p);
        for bad in [-1e-9, f64::INFINITY] {
            p.device.mask_seconds_per_element = Some(bad);
            let error = p.validate().unwrap_err().to_string();
            assert!(error.contains("device.mask_seconds_per_element"), "{error}");
        }
    }

    fn class_rate(class: ComputeClass, bytes_per_s: f64, seconds_per_edge: f64) -> ClassRate {
        ClassRate {
            class,
            bytes_per_s,
            seconds_per_edge,
            seconds_per_edge_head: 0.0,
            seconds_per_row: 0.0,
            on_curve: false,
        }
    }

    /// [`DeviceProfile::work_seconds`] of work walking `edges` edges.
    fn work(d: &DeviceProfile, flops: f64, bytes: u64, edges: u64, class: ComputeClass) -> f64 {
        d.work_seconds(&Cost::work(flops, bytes, class).over_edges(edges))
    }

    /// [`DeviceProfile::memory_seconds`] of `bytes` walking `edges` edges.
    fn memory(d: &DeviceProfile, bytes: u64, edges: u64, class: ComputeClass) -> f64 {
        d.memory_seconds(&Cost::work(0.0, bytes, class).over_edges(edges))
    }

    fn shape(flops_per_byte: f64, flops_per_s: f64) -> DenseShape {
        DenseShape {
            flops_per_byte,
            flops_per_s,
        }
    }

    #[test]
    fn the_gemm_rate_follows_the_measured_shapes() {
        let mut d = profile().device;
        d.dense_flops_per_s = 300e9;
        assert_eq!(d.dense_rate(1.0), 300e9, "no shapes: the one rate");
        d.dense_shapes = vec![shape(8.0, 100e9), shape(32.0, 300e9)];
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-12;
        assert!(close(d.dense_rate(8.0), 100e9) && close(d.dense_rate(32.0), 300e9));
        // Halfway on a log scale: the geometric mean.
        assert!(close(d.dense_rate(16.0), (100e9f64 * 300e9).sqrt()));
        assert!(close(d.dense_rate(64.0), 300e9), "above: the most intense");
        assert!(
            close(d.dense_rate(4.0), 50e9),
            "below: the same bytes per second"
        );
        assert!(close(d.dense_rate(f64::NAN), 300e9));
        // A dense operator's time uses it; others keep the one rate.
        let s = work(&d, 8e9, 1_000_000_000, 0, ComputeClass::Dense);
        assert!(close(s, 0.08_f64.max(1e9 / d.hbm_bytes_per_s)), "{s}");
        let s = work(&d, 8e9, 1, 0, ComputeClass::Elementwise);
        assert!(close(s, 8e9 / 300e9), "{s}");
        d.softmax_flops_per_s = Some(4e9);
        let s = work(&d, 8e9, 1, 0, ComputeClass::Softmax);
        assert!(close(s, 2.0), "softmax math at its own rate: {s}");
        for class in [ComputeClass::Elementwise, ComputeClass::Sparse] {
            let s = work(&d, 8e9, 1, 0, class);
            assert!(close(s, 8e9 / 300e9), "{class:?}: {s}");
        }
        // A dense operator with no bytes runs at the most intense shape.
        assert!(close(work(&d, 3e11, 0, 0, ComputeClass::Dense), 1.0));
    }

    /// A rate near zero or a latency near f64's largest gave iterations
    /// of infinite seconds, written as null in a plan no reader took back.
    /// The profile's first class fit (one added where it has none).
    fn fit(p: &mut Profile) -> &mut ClassRate {
        if p.device.class_rates.is_empty() {
            p.device
                .class_rates
                .push(class_rate(ComputeClass::EdgeSoftmax, 1e10, 0.0));
        }
        &mut p.device.class_rates[0]
    }

    #[test]
    fn figures_that_make_infinite_seconds_are_refused_by_field() {
        let mut p = profile();
        p.device.dense_flops_per_s = 1e-300;
        let message = p.validate().unwrap_err().to_string();
        assert!(
            message.contains("device.dense_flops_per_s: 1e-300 must be finite and at least 1e-3"),
            "{message}"
        );
        let mut p = profile();
        p.device.op_overhead_s = 1e308;
        let message = p.validate().unwrap_err().to_string();
        assert!(
            message.contains(
                "device.op_overhead_s: 1e308 must be finite, not negative and at most 1e6"
            ),
            "{message}"
        );
        let mut p = profile();
        p.device.dense_flops_per_s = MIN_FIGURE_RATE;
        p.device.op_overhead_s = MAX_FIGURE_SECONDS;
        p.validate().unwrap();
        // A class's fit is bounded as the device's own figures are.
        let mut p = profile();
        fit(&mut p).seconds_per_edge = 1.7e308;
        let message = p.validate().unwrap_err().to_string();
        assert!(
            message.contains(
                "device.class_rates[0].seconds_per_edge: 1.7e308 must be finite, not negative \
                 and at most 1e6 seconds"
            ),
            "{message}"
        );
        // A time per head or row on a class whose operators record none
        // is refused, naming the classes that do.
        let mut p = profile();
        p.device
            .class_rates
            .push(class_rate(ComputeClass::Elu, 1e10, 0.0));
        p.device
            .class_rates
            .last_mut()
            .unwrap()
            .seconds_per_edge_head = 1e-3;
        let message = p.validate().unwrap_err().to_string();
        assert!(
            message.contains("device.class_rates[0].seconds_per_edge_head: 1e-3 on class elu")
                && message.contains("edge_scores, attention, edge_softmax, attention_backward"),
            "{message}"
        );
        let mut p = profile();
        fit(&mut p).seconds_per_row = 2e-8;
        p.validate().unwrap();
        for (field, spoil) in [
            (
                "seconds_per_edge_head",
                (|f| f.seconds_per_edge_head = -1e-9) as fn(&mut ClassRate),
            ),
            ("seconds_per_row", |f| f.seconds_per_row = f64::NAN),
        ] {
            let mut p = profile();
            spoil(fit(&mut p));
            let message = p.validate().unwrap_err().to_string();
            assert!(
                message.contains(&format!("device.class_rates[0].{field}: ")),
                "{message}"
            );
        }
        let mut p = profile();
        fit(&mut p).bytes_per_s = 1e-300;
        let message = p.validate().unwrap_err().to_string();
        assert!(
            message
                .contains("device.class_rates[0].bytes_per_s: 1e-300 must be finite and at least"),
            "{message}"
        );
        let mut p = profile();
        let at_bounds = fit(&mut p);
        (at_bounds.bytes_per_s, at_bounds.seconds_per_edge) = (MIN_FIGURE_RATE, MAX_FIGURE_SECONDS);
        p.validate().unwrap();
        // Whole numbers read as written, not as 0e0.
        let mut p = profile();
        p.host.cores = 0;
        let message = p.validate().unwrap_err().to_string();
        assert!(
            message.contains("host.cores: 0 must be positive"),
            "{message}"
        );
    }

    /// A source is of a figure the profile has: a misspelt path, or one
    /// in a section the profile lacks, is refused by name.
    #[test]
    fn every_source_names_a_figure_of_the_profile() {
        let mut p = profile();
        p.device.dense_shapes = vec![shape(8.0, 100e9)];
        fit(&mut p);
        for key in ["device.dense_shapes", "device.class_rates", "host.cores"] {
            p.sources.insert(key.into(), "measured".into());
        }
        p.validate().unwrap();
        for key in ["device.hbm_byte", "peer.bytes_per_s", "name", ""] {
            let mut p = profile();
            p.sources.insert(key.into(), "assumption: a guess".into());
            let message = p.validate().unwrap_err().to_string();
            assert!(
                message.contains(&format!(
                    "profile \"cpu-small\" field sources.{key:?}: names no figure of the \
                     profile; its figures are device.count_max, device.hbm_bytes, "
                )),
                "{message}"
            );
            assert!(message.ends_with("ssd.write_latency_s"), "{message}");
        }
        // A list the profile lacks is told as such.
        let mut p = profile();
        p.sources
            .insert("device.dense_shapes".into(), "assumption: a guess".into());
        let message = p.validate().unwrap_err().to_string();
        assert!(
            message.contains(
                "field sources.\"device.dense_shapes\": sources the list device.dense_shapes, \
                 which is empty or absent"
            ),
            "{message}"
        );
        // With a peer section, its figures take sources.
        let mut p = profile();
        p.peer = Some(PeerProfile {
            bytes_per_s: 1e11,
            latency_s: 1e-5,
            via: PeerVia::default(),
        });
        p.sources
            .insert("peer.bytes_per_s".into(), "datasheet".into());
        p.validate().unwrap();
    }

    /// A GPU's transfers are DMA, one pass over host memory per byte;
    /// the CPU backend's are copies, two.
    #[test]
    fn host_memory_serves_dma_at_twice_its_copy_rate() {
        let mut p = profile();
        assert_eq!(p.device.kind, DeviceKind::Cpu);
        assert_eq!(p.host_transfer_bytes_per_s(), 1e10);
        p.device.kind = DeviceKind::Gpu;
        assert_eq!(p.host_transfer_bytes_per_s(), 2e10);
    }

    /// Transposes cost nothing unless the profile times them; then their
    /// edges are charged at its rate. A negative rate is refused, naming
    /// the field.

    #[test]
    fn transposes_are_charged_where_the_profile_times_them() {
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-12;
        let mut p = profile();
        assert_eq!(p.device.transpose_seconds(1_000_000), 0.0);
        p.device.transpose_seconds_per_edge = Some(2e-9);
        assert!(close(p.device.transpose_seconds(1_000_000), 2e-3));
        assert_eq!(p.device.transpose_seconds(0), 0.0);
        p.validate().unwrap();
        p.device.transpose_seconds_per_edge = Some(0.0);
        p.validate().unwrap();
        p.device.transpose_seconds_per_edge = Some(-1e-9);
        let error = p.validate().unwrap_err().to_string();
        assert!(
            error.contains("device.transpose_seconds_per_edge") && error.contains("-1e-9"),
            "{error}"
        );
    }

    #[test]
    fn scatters_fall_back_to_the_gather_rate() {
        let mut d = profile().device;
        assert_eq!(
            d.memory_bytes_per_s(ComputeClass::Scatter),
            d.sparse_bytes_per_s
        );
        d.scatter_bytes_per_s = Some(d.sparse_bytes_per_s / 2.0);
        assert_eq!(
            d.memory_bytes_per_s(ComputeClass::Scatter),
            d.sparse_bytes_per_s / 2.0
        );
        assert_eq!(
            d.memory_bytes_per_s(ComputeClass::Sparse),
            d.sparse_bytes_per_s
        );
        assert_eq!(
            d.memory_bytes_per_s(ComputeClass::Attention),
            d.sparse_bytes_per_s
        );
        assert_eq!(
            d.memory_bytes_per_s(ComputeClass::EdgeSoftmax),
            d.sparse_bytes_per_s
        );
        assert_eq!(
            d.memory_bytes_per_s(ComputeClass::AttentionBackward),
            d.sparse_bytes_per_s
        );
        d.attention_bytes_per_s = Some(1e9);
        assert_eq!(d.memory_bytes_per_s(ComputeClass::Attention), 1e9);
        assert_eq!(d.memory_bytes_per_s(ComputeClass::EdgeSoftmax), 1e9);
        assert_eq!(d.memory_bytes_per_s(ComputeClass::AttentionBackward), 1e9);
        d.attention_backward_bytes_per_s = Some(7e8);
        assert_eq!(d.memory_bytes_per_s(ComputeClass::AttentionBackward), 7e8);
        d.edge_softmax_bytes_per_s = Some(5e8);
        assert_eq!(d.memory_bytes_per_s(ComputeClass::EdgeSoftmax), 5e8);
        assert_eq!(d.memory_bytes_per_s(ComputeClass::Attention), 1e9);
        assert_eq!(d.memory_bytes_per_s(ComputeClass::AttentionBackward), 7e8);
        assert_eq!(d.memory_bytes_per_s(ComputeClass::Dense), d.hbm_bytes_per_s);
        // The classes older profiles do not know: the edge scores at the
        // attention rate, GAT's row-wise operators at memory bandwidth.
        assert_eq!(d.memory_bytes_per_s(ComputeClass::EdgeScores), 1e9);
        for class in [
            ComputeClass::NodeScores,
            ComputeClass::NodeScoresBackward,
            ComputeClass::Elu,
        ] {
            assert_eq!(d.memory_bytes_per_s(class), d.hbm_bytes_per_s, "{class:?}");
        }
        // Named as profiles spell them.
        assert_eq!(
            ComputeClass::NodeScoresBackward.to_string(),
            "node_scores_backward"
        );
        assert_eq!(ComputeClass::EdgeScores.to_string(), "edge_scores");
    }

    /// A masked gather is priced by its own fit where the profile has
    /// one, else by the sparse class's fit, else by the sparse rate.
    #[test]
    fn a_masked_gather_falls_back_to_the_sparse_class() {
        let mut d = profile().device;
        let (bytes, edges) = (1_000_000u64, 1000u64);
        let plain = memory(&d, bytes, edges, ComputeClass::Sparse);
        assert_eq!(plain, bytes as f64 / d.sparse_bytes_per_s);
        assert_eq!(memory(&d, bytes, edges, ComputeClass::SparseMasked), plain);
        d.class_rates = vec![class_rate(ComputeClass::Sparse, 2e9, 1e-9)];
        let fitted = bytes as f64 / 2e9 + edges as f64 * 1e-9;
        assert_eq!(memory(&d, bytes, edges, ComputeClass::Sparse), fitted);
        assert_eq!(memory(&d, bytes, edges, ComputeClass::SparseMasked), fitted);
        d.class_rates
            .push(class_rate(ComputeClass::SparseMasked, 1e9, 2e-9));
        let own = bytes as f64 / 1e9 + edges as f64 * 2e-9;
        assert_eq!(memory(&d, bytes, edges, ComputeClass::SparseMasked), own);
        assert_eq!(memory(&d, bytes, edges, ComputeClass::Sparse), fitted);
        assert_eq!(ComputeClass::SparseMasked.to_string(), "sparse_masked");
    }

    /// A class's fit prices its bytes and its edges; the classes without
    /// one keep their field's rate, and a fit stays out of the math side
    /// of the roofline.
    #[test]
    fn a_fitted_class_is_charged_its_bytes_and_its_edges() {
        let mut d = profile().device;
        d.attention_bytes_per_s = Some(1e9);
        d.class_rates = vec![class_rate(ComputeClass::EdgeSoftmax, 2e9, 1e-9)];
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-12;
        let s = memory(&d, 4_000_000_000, 500_000_000, ComputeClass::EdgeSoftmax);
        assert!(close(s, 2.0 + 0.5), "{s}");
        let s = memory(&d, 4_000_000_000, 500_000_000, ComputeClass::Attention);
        assert!(
            close(s, 4.0),
            "no fit: bytes at the field's rate, edges free: {s}"
        );
        // An operator that records no edges (an older workload) is priced
        // as before fits; a fit without a time per edge still applies.
        let s = memory(&d, 4_000_000_000, 0, ComputeClass::EdgeSoftmax);
        assert!(close(s, 4.0), "{s}");
        d.class_rates[0].seconds_per_edge = 0.0;
        let s = memory(&d, 4_000_000_000, 0, ComputeClass::EdgeSoftmax);
        assert!(close(s, 2.0), "{s}");
        d.class_rates[0].seconds_per_edge = 1e-9;
        let s = work(
            &d,
            1.0,
            4_000_000_000,
            500_000_000,
            ComputeClass::EdgeSoftmax,
        );
        assert!(close(s, 2.5), "{s}");
        // The math bound still holds above the fit.
        let s = work(
            &d,
            10.0 * d.dense_flops_per_s,
            1,
            1,
            ComputeClass::EdgeSoftmax,
        );
        assert!(close(s, 10.0), "{s}");
        // Heads and rows at their times, where the operator records them
        // and the fit has them; an operator recording none is charged
        // none.
        d.class_rates[0].seconds_per_edge_head = 2e-10;
        d.class_rates[0].seconds_per_row = 3e-8;
        let walked = Cost::work(0.0, 4_000_000_000, ComputeClass::EdgeSoftmax)
            .over_edges(500_000_000)
            .over_edge_heads(4_000_000_000)
            .over_rows(10_000_000);
        let s = d.memory_seconds(&walked);
        assert!(close(s, 2.0 + 0.5 + 0.8 + 0.3), "{s}");
        // One that records no heads or rows (written before they were)
        // is priced by the class's field, as then: the fit's bandwidth
        // and time per edge were fitted beside its heads and rows.
        let s = memory(&d, 4_000_000_000, 500_000_000, ComputeClass::EdgeSoftmax);
        assert!(close(s, 4.0), "{s}");
        for unwalked in [
            Cost { rows: 0, ..walked },
            Cost {
                edge_heads: 0,
                ..walked
            },
        ] {
            assert!(close(d.memory_seconds(&unwalked), 4.0));
        }
        d.class_rates[0].seconds_per_edge_head = 0.0;
        let s = d.memory_seconds(&Cost {
            edge_heads: 0,
            ..walked
        });
        assert!(close(s, 2.0 + 0.5 + 0.3), "{s}");
        // A class without the fit prices its bytes alone, as before.
        let other = Cost {
            class: ComputeClass::Attention,
            ..walked
        };
        assert!(close(d.memory_seconds(&other), 4.0));
        // `priced_by_field` names the first operator priced so.
        let op = |name: &str, cost: Cost| crate::workload::Op {
            id: crate::workload::OpId(0),
            name: name.into(),
            kind: crate::workload::OpKind::Generic,
            phase: crate::workload::Phase::Forward,
            inputs: vec![],
            outputs: vec![],
            cost,
            scratch_bytes: 0,
            adds_into: None,
        };
        d.class_rates[0].seconds_per_edge_head = 2e-10;
        let ops = [
            op("walked", walked),
            op("no_edges", Cost::work(1.0, 8, ComputeClass::EdgeSoftmax)),
            op(
                "older",
                Cost {
                    edge_heads: 0,
                    rows: 0,
                    ..walked
                },
            ),
        ];
        assert_eq!(
            d.priced_by_field(&ops).map(|o| o.name.as_str()),
            Some("older")
        );
        assert!(d.priced_by_field(&ops[..2]).is_none());
        // An aggregation's fit with a time per row leaves it the bytes its
        // rows move; without one those bytes are charged as the others.
        let mut fit = class_rate(ComputeClass::Sparse, 1e9, 1e-9);
        d.class_rates = vec![fit];
        let gather = Cost::work(0.0, 3_000_000_000, ComputeClass::Sparse)
            .over_edges(100_000_000)
            .over_rows(20_000_000)
            .with_row_bytes(1_000_000_000);
        assert!(close(d.memory_seconds(&gather), 3.0 + 0.1));
        fit.seconds_per_row = 1e-8;
        d.class_rates = vec![fit];
        assert!(close(d.memory_seconds(&gather), 2.0 + 0.1 + 0.2));
        let mut p = profile();
        p.device.class_rates = vec![fit];
        p.validate().unwrap();
        // A masked gather from before the rows, priced by the sparse fit
        // (it has none of its own), is named as priced by the field.
        let older = Cost {
            class: ComputeClass::SparseMasked,
            rows: 0,
            row_bytes: 0,
            ..gather
        };
        assert!(close(d.memory_seconds(&older), 3e9 / d.sparse_bytes_per_s));
        let masked = [op("masked", older)];
        assert_eq!(
            d.priced_by_field(&masked).map(|o| o.name.as_str()),
            Some("masked")
        );
    }

    fn point(width: u32, set_bytes: u64, ns: f64) -> GatherPoint {
        GatherPoint {
            width,
            set_bytes,
            seconds_per_edge: ns * 1e-9,
        }
    }

    /// Two widths, each on two working sets: shares against each width's
    /// largest, interpolated in the logarithms of bytes and width.
    fn curve() -> Vec<GatherPoint> {
        vec![
            point(8, 1 << 20, 2.0),
            point(32, 4 << 20, 3.0),
            point(8, 16 << 20, 4.0),
            point(32, 64 << 20, 6.0),
        ]
    }

    #[test]
    fn a_gathers_share_is_read_from_the_curve() {
        let c = curve();
        let near = |a: f64, b: f64| (a - b).abs() < 1e-12;
        // At a point, between two (a quarter of the way in log bytes), and
        // held at either end.
        assert!(near(curve_share(&c, 8, 1 << 20), 0.5));
        assert!(near(curve_share(&c, 8, 2 << 20), (2.0 + 0.25 * 2.0) / 4.0));
        assert!(near(curve_share(&c, 8, 1 << 10), 0.5));
        assert!(near(curve_share(&c, 8, 1 << 30), 1.0));
        assert!(near(curve_share(&c, 32, 4 << 20), 0.5));
        // A width between: halfway in log width between 8 and 32.
        let at8 = curve_share(&c, 8, 4 << 20);
        let at32 = curve_share(&c, 32, 4 << 20);
        assert!(near(curve_share(&c, 16, 4 << 20), (at8 + at32) / 2.0));
        // Outside the widths, the nearest width's.
        assert!(near(curve_share(&c, 4, 4 << 20), at8));
        assert!(near(curve_share(&c, 256, 4 << 20), at32));
        // No curve, or an operator that records no working set: all of it.
        assert_eq!(curve_share(&[], 16, 1 << 20), 1.0);
        assert_eq!(curve_share(&c, 0, 0), 1.0);
        // Never above 1, where a point below the last took longer.
        let bumpy = vec![point(8, 1 << 20, 5.0), point(8, 4 << 20, 4.0)];
        assert_eq!(curve_share(&bumpy, 8, 1 << 20), 1.0);
    }

    #[test]
    fn a_fit_on_the_curve_charges_a_gathers_share() {
        let mut d = profile().device;
        d.gather_curve = curve();
        let mut fit = class_rate(ComputeClass::Sparse, 1e9, 1e-9);
        fit.seconds_per_row = 1e-8;
        fit.on_curve = true;
        d.class_rates = vec![fit];
        // 2 s of edge bytes and 0.1 s of edges, halved at a working set
        // whose share is 0.5; the rows (0.2 s) whole.
        let gather = Cost::work(0.0, 3_000_000_000, ComputeClass::Sparse)
            .over_edges(100_000_000)
            .over_rows(20_000_000)
            .with_row_bytes(1_000_000_000)
            .gathering(8, 1 << 20);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(close(d.memory_seconds(&gather), 0.5 * 2.1 + 0.2));
        // The largest working set, or none recorded: the whole fit.
        let large = gather.gathering(8, 16 << 20);
        assert!(close(d.memory_seconds(&large), 2.1 + 0.2));
        let older = Cost {
            gather_width: 0,
            gather_set_bytes: 0,
            ..gather
        };
        assert!(close(d.memory_seconds(&older), 2.1 + 0.2));
        let op = |name: &str, cost: Cost| crate::workload::Op {
            id: crate::workload::OpId(0),
            name: name.into(),
            kind: crate::workload::OpKind::Aggregate,
            phase: crate::workload::Phase::Forward,
            inputs: vec![],
            outputs: vec![],
            cost,
            scratch_bytes: 0,
            adds_into: None,
        };
        let ops = [op("new", gather), op("older", older)];
        let named = |d: &DeviceProfile, ops| d.priced_at_curve_top(ops).map(|o| o.name.clone());
        assert_eq!(named(&d, &ops[..]), Some("older".to_string()));
        assert_eq!(named(&d, &ops[..1]), None);
        // A masked gather without a fit of its own takes the sparse one's.
        let masked = Cost {
            class: ComputeClass::SparseMasked,
            ..gather
        };
        assert!(close(d.memory_seconds(&masked), 0.5 * 2.1 + 0.2));
        // Without a time per row, the rows' bytes are charged whole.
        d.class_rates[0].seconds_per_row = 0.0;
        assert!(close(d.memory_seconds(&gather), 0.5 * 2.1 + 1.0));
        // A fit not made on the curve charges all of it, and names none.
        d.class_rates[0].on_curve = false;
        assert!(close(d.memory_seconds(&gather), 3.1));
        assert_eq!(named(&d, &ops[..]), None);
    }

    /// A loss fitted by its rows and bytes is priced by the fit alone,
    /// its math included; one that records no rows (a plan from before)
    /// by its math, and is named as priced by the class's field.
    #[test]
    fn a_loss_fitted_by_rows_is_priced_by_the_fit() {
        let mut d = profile().device;
        d.softmax_flops_per_s = Some(1e9);
        let mut fit = class_rate(ComputeClass::Softmax, 1e9, 0.0);
        fit.seconds_per_row = 1e-7;
        d.class_rates = vec![fit];
        let mut p = profile();
        p.device = d.clone();
        p.validate().unwrap();
        // 1e9 flops would take 1 s at the math rate; the fit gives 0.5 s
        // of bytes and 0.2 s of rows.
        let loss = Cost::work(1e9, 500_000_000, ComputeClass::Softmax).over_rows(2_000_000);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(
            close(d.work_seconds(&loss), 0.7),
            "{}",
            d.work_seconds(&loss)
        );
        let older = Cost { rows: 0, ..loss };
        assert!(close(d.work_seconds(&older), 1.0));
        let op = crate::workload::Op {
            id: crate::workload::OpId(0),
            name: "loss[p0]".into(),
            kind: crate::workload::OpKind::Loss,
            phase: crate::workload::Phase::Forward,
            inputs: vec![],
            outputs: vec![],
            cost: older,
            scratch_bytes: 0,
            adds_into: None,
        };
        assert_eq!(
            d.priced_by_field(std::slice::from_ref(&op))
                .map(|o| o.name.as_str()),
            Some("loss[p0]")
        );
        let fitted = crate::workload::Op { cost: loss, ..op };
        assert!(d.priced_by_field(&[fitted]).is_none());
    }

    #[test]
    fn a_bad_curve_is_named_by_point_and_field() {
        type Spoil = fn(&mut Profile);
        let cases: [(Spoil, &str); 5] = [
            (
                |p| p.device.gather_curve[1].width = 0,
                "device.gather_curve[1].width: 0 must be positive",
            ),
            (
                |p| p.device.gather_curve[0].set_bytes = 0,
                "device.gather_curve[0].set_bytes: 0 must be positive",
            ),
            (
                |p| p.device.gather_curve[2].seconds_per_edge = f64::NAN,
                "device.gather_curve[2].seconds_per_edge: NaN must be finite, positive",
            ),
            (
                |p| p.device.gather_curve.swap(1, 2),
                "device.gather_curve[2].set_bytes: 4194304 (width 32) must come after the \
                 point before it (16777216 bytes, width 8)",
            ),
            (
                |p| {
                    p.device.gather_curve.clear();
                    let mut fit = class_rate(ComputeClass::Sparse, 1e9, 1e-9);
                    fit.on_curve = true;
                    p.device.class_rates = vec![fit];
                },
                "device.class_rates[0].on_curve: true, but the profile has no \
                 device.gather_curve",
            ),
        ];
        let fit_on = |class: ComputeClass, on_curve: bool, edge: f64| {
            let mut p = profile();
            p.device.gather_curve = curve();
            let mut fit = class_rate(class, 1e9, edge);
            fit.on_curve = on_curve;
            p.device.class_rates = vec![fit];
            p.validate()
        };
        let message = fit_on(ComputeClass::Scatter, true, 0.0)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("device.class_rates[0].on_curve: true on class scatter"),
            "{message}"
        );
        fit_on(ComputeClass::SparseMasked, true, 1e-9).unwrap();
        // A time per edge on a class whose operators walk none.
        let message = fit_on(ComputeClass::Softmax, false, 1e-9)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("device.class_rates[0].seconds_per_edge: 1e-9 on class softmax")
                && message.contains("record no edges"),
            "{message}"
        );
        for (spoil, expected) in cases {
            let mut p = profile();
            p.device.gather_curve = curve();
            p.validate().unwrap();
            spoil(&mut p);
            let message = p.validate().unwrap_err().to_string();
            assert!(message.contains(expected), "{message}");
        }
        // A source for the curve is taken where the profile has one.
        let mut p = profile();
        p.sources
            .insert("device.gather_curve".into(), "measured: ...".into());
        let message = p.validate().unwrap_err().to_string();
        assert!(
            message.contains("sources.\"device.gather_curve\""),
            "{message}"
        );
        p.device.gather_curve = curve();
        p.validate().unwrap();
    }

    #[test]
    fn bad_shapes_and_scatter_rates_are_named() {
        type Spoil = fn(&mut DeviceProfile);
        let cases: [(Spoil, &str); 12] = [
            (
                |d| d.dense_shapes = vec![shape(8.0, 1e9), shape(8.0, 2e9)],
                "device.dense_shapes[1].flops_per_byte",
            ),
            (
                |d| d.dense_shapes = vec![shape(8.0, 0.0)],
                "device.dense_shapes[0].flops_per_s",
            ),
            (
                |d| d.dense_shapes = vec![shape(-1.0, 1e9)],
                "device.dense_shapes[0].flops_per_byte",
            ),
            (
                |d| d.scatter_bytes_per_s = Some(-1.0),
                "device.scatter_bytes_per_s",
            ),
            (
                |d| d.softmax_flops_per_s = Some(0.0),
                "device.softmax_flops_per_s",
            ),
            (
                |d| d.attention_bytes_per_s = Some(-2.0),
                "device.attention_bytes_per_s",
            ),
            (
                |d| d.edge_softmax_bytes_per_s = Some(0.0),
                "device.edge_softmax_bytes_per_s",
            ),
            (
                |d| d.attention_backward_bytes_per_s = Some(-3.0),
                "device.attention_backward_bytes_per_s",
            ),
            (
                |d| d.class_rates = vec![class_rate(ComputeClass::Elu, 0.0, 0.0)],
                "device.class_rates[0].bytes_per_s",
            ),
            (
                |d| d.class_rates = vec![class_rate(ComputeClass::Elu, -5.0, 0.0)],
                "device.class_rates[0].bytes_per_s",
            ),
            (
                |d| {
                    d.class_rates = vec![
                        class_rate(ComputeClass::Elu, 1e9, 0.0),
                        class_rate(ComputeClass::Attention, 1e9, -1e-9),
                    ]
                },
                "device.class_rates[1].seconds_per_edge",
            ),
            (
                |d| {
                    d.class_rates = vec![
                        class_rate(ComputeClass::Elu, 1e9, 0.0),
                        class_rate(ComputeClass::Elu, 2e9, 0.0),
                    ]
                },
                "device.class_rates[1].class",
            ),
        ];
        for (spoil, field) in cases {
            let mut p = profile();
            spoil(&mut p.device);
            let error = Profile::from_json(&p.to_json_pretty(), "p.json")
                .unwrap_err()
                .to_string();
            assert!(error.contains(field) && error.contains("p.json"), "{error}");
        }
        // A repeated class is named as the file spells it.
        let mut p = profile();
        p.device.class_rates = vec![
            class_rate(ComputeClass::Elu, 1e9, 0.0),
            class_rate(ComputeClass::Elu, 2e9, 0.0),
        ];
        let error = p.validate().unwrap_err().to_string();
        assert!(error.contains("elu has a rate earlier"), "{error}");
        // Both round-trip when valid.
        let mut p = profile();
        p.device.dense_shapes = vec![shape(7.1, 1e11), shape(32.0, 3e11)];
        p.device.scatter_bytes_per_s = Some(2e10);
        p.device.class_rates = vec![
            class_rate(ComputeClass::EdgeScores, 1.5e10, 1.7e-9),
            class_rate(ComputeClass::Elu, 1.5e10, 0.0),
        ];
        assert_eq!(
            Profile::from_json(&p.to_json_pretty(), "p.json").unwrap(),
            p
        );
    }

    /// The threads a CPU profile was measured at are positive, and given
    /// for the CPU backend only; a source of an empty list says so.
    #[test]
    fn a_name_not_printable_is_refused() {
        for name in ["", "   ", "a\u{1b}[2Jb", "a\nb"] {
            let p = Profile {
                name: name.into(),
                ..profile()
            };
            let message = p.validate().unwrap_err().to_string();
            assert!(
                message.contains("profile field name")
                    && message.contains("expected a name of printable characters"),
                "{message}"
            );
        }
        let p = Profile {
            name: "h100 (rented)".into(),
            ..profile()
        };
        p.validate().unwrap();
    }

    #[test]
    fn threads_and_empty_lists_are_refused_by_field() {
        let mut p = profile();
        assert_eq!(p.device.kind, DeviceKind::Cpu);
        p.device.threads = Some(2);
        p.validate().unwrap();
        let text = p.to_json_pretty();
        assert!(text.contains("\"threads\": 2"), "{text}");
        p.device.threads = Some(0);
        let message = p.validate().unwrap_err().to_string();
        assert!(
            message.contains("device.threads: 0 must be positive"),
            "{message}"
        );
        p.device.threads = Some(p.host.cores + 1);
        let message = p.validate().unwrap_err().to_string();
        assert!(
            message.contains(&format!(
                "device.threads: {} is more than the machine's {} cores",
                p.host.cores + 1,
                p.host.cores
            )),
            "{message}"
        );
        p.device.threads = Some(4);
        p.device.kind = DeviceKind::Gpu;
        let message = p.validate().unwrap_err().to_string();
        assert!(
            message.contains("device.threads: 4, but the device is a GPU"),
            "{message}"
        );
        let mut p = profile();
        p.device.gather_curve.clear();
        p.sources
            .insert("device.gather_curve".into(), "measured: nothing".into());
        let message = p.validate().unwrap_err().to_string();
        assert!(
            message.contains("sources.\"device.gather_curve\": sources the list device.gather_curve, which is empty or absent"),
            "{message}"
        );
    }
}

//! Prediction against reality: a measured training iteration beside the
//! simulator's replay of the same plan on the same profile, in total and
//! per link and stream.
//!
//! Measured busy time of a stream is the union of its lane's copies in
//! one traced iteration; of a link, the union over the streams whose
//! transfers cross it, as the simulator routes them (`sim::model::Path`):
//! host-to-device PCIe carries the h2d and ssd_read streams, device-to-host
//! the d2h and ssd_write streams, and the SSD both SSD streams.

use serde::Serialize;

use fateplan_planner::plan::{LinkBytes, Stream};
use fateplan_planner::profile::DeviceProfile;
use fateplan_planner::workload::Op;

use crate::exec::TraceSpan;
use crate::measure::probe::Drift;
use crate::sim::model::op_seconds;
use crate::sim::SimReport;

/// What the executor measured.
#[derive(Debug, Clone)]
pub struct MeasuredIteration<'a> {
    /// Seconds of the iteration (`fateplan train --compare-simulated`
    /// gives the median iteration's, `TrainReport::median`).
    pub iteration_s: f64,
    /// Its seconds in operators (recomputations included).
    pub compute_s: f64,
    /// Of those, its seconds in recomputations.
    pub recompute_s: f64,
    /// Its seconds the compute thread waited for copies.
    pub wait_s: f64,
    /// Bytes per iteration (every iteration moves the same).
    pub bytes_moved: LinkBytes,
    /// The operators and copies of one iteration.
    pub spans: &'a [TraceSpan],
}

/// A measured figure, the simulated one, and their ratio (`None` when the
/// simulated figure is zero, and on a link whose measured time spans SSD
/// copies whole where the simulated one is a part of them: see
/// [`compare`]'s links).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pair {
    pub measured: f64,
    pub simulated: f64,
    pub ratio: Option<f64>,
}

impl Pair {
    pub fn new(measured: f64, simulated: f64) -> Pair {
        Pair {
            measured,
            simulated,
            ratio: (simulated > 0.0).then(|| measured / simulated),
        }
    }
}

/// One link or stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Traffic {
    pub name: &'static str,
    pub bytes: BytesPair,
    pub busy_s: Pair,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BytesPair {
    pub measured: u64,
    pub simulated: u64,
}

/// The comparison `fateplan train --compare-simulated` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The profile the plan was simulated on (the plan's own).
    pub profile: String,
    pub seed: u64,
    pub iteration_s: Pair,
    /// Seconds in operators, recomputations included on both sides (the
    /// simulator's `compute_s` and `recompute_s` together).
    pub compute_s: Pair,
    /// Of those, seconds in recomputations.
    pub recompute_s: Pair,
    /// Measured waiting of the compute thread against the simulated
    /// exposed transfer time.
    pub wait_s: Pair,
    pub links: Vec<Traffic>,
    pub streams: Vec<Traffic>,
    /// Violations the simulator found in the plan.
    pub simulated_violations: u64,
    /// The operators of the traced iteration by family, in the order
    /// they first ran.
    pub operators: Vec<OperatorTime>,
    /// The machine's speed around the run against when the profile was
    /// measured: the probe ([`crate::measure::probe`]) timed before and
    /// after training against its time in the profile, where the caller
    /// timed it (`compare` leaves it out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<Drift>,
    /// Why `machine` is absent, where the caller compared the machine's
    /// speed on the CPU backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_note: Option<String>,
    /// Cores' worth of CPU time other programs took on average while the
    /// run trained, of the CPUs it may run on, where the caller counted
    /// it ([`crate::measure::host::CpuTimes`]; half a second or more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_cores: Option<f64>,
}

/// One family of operators (the name before `[`: `agg`, `edge_softmax`,
/// `linear_bwd`, ...): their measured seconds in one traced iteration,
/// recomputations included, against the seconds the profile gives the
/// same operators alone ([`op_seconds`]: no sharing of cores with copies,
/// which the simulated iteration adds).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OperatorTime {
    pub name: String,
    /// Operators run.
    pub count: u32,
    pub seconds: Pair,
}

/// The compute spans of `spans` that name an operator of `ops` (plain or
/// `recompute NAME`), summed by family, beside the model's seconds on
/// `device` for each run.
pub fn operator_times(
    spans: &[TraceSpan],
    ops: &[Op],
    device: &DeviceProfile,
) -> Vec<OperatorTime> {
    let by_name: std::collections::HashMap<&str, &Op> =
        ops.iter().map(|op| (op.name.as_str(), op)).collect();
    let mut families: Vec<(String, u32, f64, f64)> = Vec::new();
    for span in spans.iter().filter(|s| s.stream == Stream::Compute) {
        let name = span.name.strip_prefix("recompute ").unwrap_or(&span.name);
        let Some(op) = by_name.get(name) else {
            continue;
        };
        let family = name.split('[').next().unwrap_or(name);
        let k = match families.iter().position(|f| f.0 == family) {
            Some(k) => k,
            None => {
                families.push((family.to_string(), 0, 0.0, 0.0));
                families.len() - 1
            }
        };
        let f = &mut families[k];
        f.1 += 1;
        f.2 += (span.span.end_s - span.span.start_s).max(0.0);
        f.3 += op_seconds(op, device);
    }
    families
        .into_iter()
        .map(|(name, count, measured, model)| OperatorTime {
            name,
            count,
            seconds: Pair::new(measured, model),
        })
        .collect()
}

/// Seconds covered by the union of `spans` on `streams`.
pub fn busy_s(spans: &[TraceSpan], streams: &[Stream]) -> f64 {
    let mut intervals: Vec<(f64, f64)> = spans
        .iter()
        .filter(|s| streams.contains(&s.stream))
        .map(|s| (s.span.start_s, s.span.end_s.max(s.span.start_s)))
        .collect();
    intervals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut current: Option<(f64, f64)> = None;
    for (start, end) in intervals {
        current = match current {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                total += e - s;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    total + current.map_or(0.0, |(s, e)| e - s)
}

/// Lays `measured` beside `simulated`, and the traced operators beside
/// their model on `device` ([`operator_times`]).
pub fn compare(
    measured: &MeasuredIteration,
    simulated: &SimReport,
    ops: &[Op],
    device: &DeviceProfile,
) -> Comparison {
    let m = measured.bytes_moved;
    let spans = measured.spans;
    // A link that SSD copies crossed: its measured spans hold those
    // copies whole (the drive's part and the PCIe part), the simulated
    // time the link's part alone, so the two are not a ratio (the SSD
    // streams' rows, whole copies on both sides, compare them).
    let link = |name, bytes, streams: &[Stream], sim: &crate::sim::LinkReport, whole_ssd| {
        let mut busy = Pair::new(busy_s(spans, streams), sim.busy_s);
        if whole_ssd {
            busy.ratio = None;
        }
        Traffic {
            name,
            bytes: BytesPair {
                measured: bytes,
                simulated: sim.bytes,
            },
            busy_s: busy,
        }
    };
    let l = &simulated.links;
    let links = vec![
        link(
            "pcie_h2d",
            m.h2d,
            &[Stream::H2d, Stream::SsdRead],
            &l.pcie_h2d,
            m.ssd_read > 0,
        ),
        link(
            "pcie_d2h",
            m.d2h,
            &[Stream::D2h, Stream::SsdWrite],
            &l.pcie_d2h,
            m.ssd_write > 0,
        ),
        link(
            "ssd",
            m.ssd_read + m.ssd_write,
            &[Stream::SsdRead, Stream::SsdWrite],
            &l.ssd,
            m.ssd_read + m.ssd_write > 0,
        ),
    ];
    let stream = |name, bytes, stream: Stream, sim: &crate::sim::StreamReport| Traffic {
        name,
        bytes: BytesPair {
            measured: bytes,
            simulated: sim.bytes,
        },
        busy_s: Pair::new(busy_s(spans, &[stream]), sim.busy_s),
    };
    let s = &simulated.streams;
    // An SSD copy counts on its own stream and on the PCIe direction it
    // also crosses (`LinkBytes`); the h2d and d2h streams are the rest.
    let streams = vec![
        stream("h2d", m.h2d.saturating_sub(m.ssd_read), Stream::H2d, &s.h2d),
        stream(
            "d2h",
            m.d2h.saturating_sub(m.ssd_write),
            Stream::D2h,
            &s.d2h,
        ),
        stream("ssd_read", m.ssd_read, Stream::SsdRead, &s.ssd_read),
        stream("ssd_write", m.ssd_write, Stream::SsdWrite, &s.ssd_write),
    ];
    Comparison {
        profile: simulated.profile.clone(),
        seed: simulated.seed,
        iteration_s: Pair::new(measured.iteration_s, simulated.iteration_s),
        compute_s: Pair::new(
            measured.compute_s,
            simulated.compute_s + simulated.recompute_s,
        ),
        recompute_s: Pair::new(measured.recompute_s, simulated.recompute_s),
        wait_s: Pair::new(measured.wait_s, simulated.exposed_transfer_s),
        links,
        streams,
        simulated_violations: simulated.violations_total,
        operators: operator_times(spans, ops, device),
        machine: None,
        machine_note: None,
        other_cores: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::lanes::Span;

    fn span(stream: Stream, start_s: f64, end_s: f64) -> TraceSpan {
        TraceSpan {
            name: String::new(),
            stream,
            span: Span { start_s, end_s },
        }
    }

    #[test]
    fn busy_time_is_the_union_of_the_streams_spans() {
        let spans = [
            span(Stream::H2d, 0.0, 1.0),
            span(Stream::H2d, 0.5, 1.5),
            span(Stream::SsdRead, 1.4, 2.0),
            span(Stream::SsdRead, 3.0, 3.25),
            span(Stream::Compute, 0.0, 10.0),
            span(Stream::D2h, 5.0, 6.0),
        ];
        assert_eq!(busy_s(&spans, &[Stream::H2d]), 1.5);
        assert_eq!(busy_s(&spans, &[Stream::H2d, Stream::SsdRead]), 2.25);
        assert_eq!(busy_s(&spans, &[Stream::SsdWrite]), 0.0);
        assert_eq!(busy_s(&spans, &[Stream::D2h]), 1.0);
    }

    #[test]
    fn operators_are_summed_by_family_beside_their_model() {
        use fateplan_planner::workload::{ComputeClass, Cost, OpId, OpKind, Phase};
        use fateplan_planner::Profile;
        let device = Profile::from_json(
            include_str!("../../profiles/cpu-small.json"),
            "cpu-small.json",
        )
        .unwrap()
        .device;
        let op = |id, name: &str, bytes| Op {
            id: OpId(id),
            name: name.into(),
            kind: OpKind::Aggregate,
            phase: Phase::Forward,
            inputs: vec![],
            outputs: vec![],
            cost: Cost::work(0.0, bytes, ComputeClass::Sparse),
            scratch_bytes: 0,
            adds_into: None,
        };
        let ops = [
            op(0, "agg[l1,p0]", 1 << 30),
            op(1, "agg[l1,p1]", 1 << 20),
            op(2, "elu[l1,p0]", 1 << 10),
        ];
        let named = |name: &str, stream, start_s, end_s| TraceSpan {
            name: name.into(),
            ..span(stream, start_s, end_s)
        };
        let spans = [
            named("agg[l1,p0]", Stream::Compute, 0.0, 1.0),
            named("elu[l1,p0]", Stream::Compute, 1.0, 1.5),
            named("agg[l1,p1]", Stream::Compute, 1.5, 1.75),
            named("recompute agg[l1,p1]", Stream::Compute, 2.0, 2.5),
            // Copies and spans of no operator are left out.
            named("agg[l1,p0]", Stream::H2d, 0.0, 9.0),
            named("update[w1]", Stream::Compute, 3.0, 9.0),
        ];
        let times = operator_times(&spans, &ops, &device);
        let names: Vec<(&str, u32)> = times.iter().map(|t| (t.name.as_str(), t.count)).collect();
        assert_eq!(names, [("agg", 3), ("elu", 1)]);
        assert_eq!(times[0].seconds.measured, 1.75);
        let model = op_seconds(&ops[0], &device) + 2.0 * op_seconds(&ops[1], &device);
        assert!((times[0].seconds.simulated - model).abs() <= 1e-12 * model);
        assert!(model > 0.0);
        assert_eq!(times[1].seconds.measured, 0.5);
        assert_eq!(times[1].seconds.simulated, op_seconds(&ops[2], &device));
    }

    #[test]
    fn ratios_are_measured_over_simulated() {
        assert_eq!(Pair::new(1.1, 1.0).ratio, Some(1.1));
        assert_eq!(Pair::new(1.0, 0.0).ratio, None);
    }
}

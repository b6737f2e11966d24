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

use crate::exec::TraceSpan;
use crate::sim::SimReport;

/// What the executor measured.
#[derive(Debug, Clone)]
pub struct MeasuredIteration<'a> {
    /// Mean seconds per iteration.
    pub iteration_s: f64,
    /// Mean seconds per iteration in operators (recomputations included).
    pub compute_s: f64,
    /// Mean seconds per iteration the compute thread waited for copies.
    pub wait_s: f64,
    /// Bytes per iteration (every iteration moves the same).
    pub bytes_moved: LinkBytes,
    /// The operators and copies of one iteration.
    pub spans: &'a [TraceSpan],
}

/// A measured figure, the simulated one, and their ratio (`None` when the
/// simulated figure is zero).
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
    pub compute_s: Pair,
    /// Measured waiting of the compute thread against the simulated
    /// exposed transfer time.
    pub wait_s: Pair,
    pub links: Vec<Traffic>,
    pub streams: Vec<Traffic>,
    /// Violations the simulator found in the plan.
    pub simulated_violations: u64,
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

/// Lays `measured` beside `simulated`.
pub fn compare(measured: &MeasuredIteration, simulated: &SimReport) -> Comparison {
    let m = measured.bytes_moved;
    let spans = measured.spans;
    let link = |name, bytes, streams: &[Stream], sim: &crate::sim::LinkReport| Traffic {
        name,
        bytes: BytesPair {
            measured: bytes,
            simulated: sim.bytes,
        },
        busy_s: Pair::new(busy_s(spans, streams), sim.busy_s),
    };
    let l = &simulated.links;
    let links = vec![
        link(
            "pcie_h2d",
            m.h2d,
            &[Stream::H2d, Stream::SsdRead],
            &l.pcie_h2d,
        ),
        link(
            "pcie_d2h",
            m.d2h,
            &[Stream::D2h, Stream::SsdWrite],
            &l.pcie_d2h,
        ),
        link(
            "ssd",
            m.ssd_read + m.ssd_write,
            &[Stream::SsdRead, Stream::SsdWrite],
            &l.ssd,
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
        compute_s: Pair::new(measured.compute_s, simulated.compute_s),
        wait_s: Pair::new(measured.wait_s, simulated.exposed_transfer_s),
        links,
        streams,
        simulated_violations: simulated.violations_total,
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
    fn ratios_are_measured_over_simulated() {
        assert_eq!(Pair::new(1.1, 1.0).ratio, Some(1.1));
        assert_eq!(Pair::new(1.0, 0.0).ratio, None);
    }
}

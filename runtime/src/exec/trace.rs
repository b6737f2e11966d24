//! A measured iteration in the simulator's trace format (Chrome trace
//! events: process 1 "device", thread 1 the compute stream, threads 2 to 5
//! the h2d, d2h, ssd_read and ssd_write lanes), so that a simulated and a
//! measured trace open side by side in Perfetto.

use std::io::{self, Write};

use fateplan_planner::plan::Stream;

use super::TraceSpan;

fn tid(stream: Stream) -> u32 {
    match stream {
        Stream::Compute => 1,
        Stream::H2d => 2,
        Stream::D2h => 3,
        Stream::SsdRead => 4,
        Stream::SsdWrite => 5,
    }
}

/// Writes `spans` (times in seconds from any origin; the first span's
/// start becomes 0).
pub fn write_trace(
    out: &mut dyn Write,
    workload: &str,
    policy: &str,
    spans: &[TraceSpan],
) -> io::Result<()> {
    let origin = spans
        .iter()
        .map(|s| s.span.start_s)
        .fold(f64::INFINITY, f64::min);
    let origin = if origin.is_finite() { origin } else { 0.0 };
    let text = |s: &str| serde_json::to_string(s).expect("a string serializes");
    writeln!(out, "{{\"displayTimeUnit\":\"ms\",")?;
    writeln!(
        out,
        "\"otherData\":{{\"workload\":{},\"policy\":{},\"measured\":true}},",
        text(workload),
        text(policy)
    )?;
    writeln!(out, "\"traceEvents\":[")?;
    writeln!(
        out,
        "{{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{{\"name\":\"device\"}}}},"
    )?;
    for (name, stream) in [
        ("compute", Stream::Compute),
        ("h2d", Stream::H2d),
        ("d2h", Stream::D2h),
        ("ssd_read", Stream::SsdRead),
        ("ssd_write", Stream::SsdWrite),
    ] {
        let tid = tid(stream);
        writeln!(
            out,
            "{{\"ph\":\"M\",\"pid\":1,\"tid\":{tid},\"name\":\"thread_name\",\"args\":{{\"name\":\"{name}\"}}}},"
        )?;
        writeln!(
            out,
            "{{\"ph\":\"M\",\"pid\":1,\"tid\":{tid},\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{tid}}}}},"
        )?;
    }
    for span in spans {
        let category = match span.stream {
            Stream::Compute if span.name.starts_with("recompute ") => "recompute",
            Stream::Compute => "op",
            _ => span.name.split(' ').next().unwrap_or("transfer"),
        };
        writeln!(
            out,
            "{{\"ph\":\"X\",\"pid\":1,\"tid\":{},\"ts\":{:.3},\"dur\":{:.3},\"cat\":{},\"name\":{}}},",
            tid(span.stream),
            (span.span.start_s - origin) * 1e6,
            (span.span.end_s - span.span.start_s) * 1e6,
            text(category),
            text(&span.name)
        )?;
    }
    let end = spans.iter().map(|s| s.span.end_s).fold(origin, f64::max);
    writeln!(
        out,
        "{{\"ph\":\"i\",\"s\":\"g\",\"pid\":1,\"tid\":1,\"name\":\"end of iteration\",\"ts\":{:.3}}}",
        (end - origin) * 1e6
    )?;
    writeln!(out, "]}}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::lanes::Span;

    #[test]
    fn writes_valid_json_with_one_event_per_span() {
        let spans = vec![
            TraceSpan {
                name: "agg[l1,p0,s0]".into(),
                stream: Stream::Compute,
                span: Span {
                    start_s: 1.0,
                    end_s: 1.5,
                },
            },
            TraceSpan {
                name: "offload \"z\"".into(),
                stream: Stream::D2h,
                span: Span {
                    start_s: 1.2,
                    end_s: 1.3,
                },
            },
        ];
        let mut bytes = Vec::new();
        write_trace(&mut bytes, "w", "dp", &spans).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let events = doc["traceEvents"].as_array().unwrap();
        let slices: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), 2);
        assert_eq!(slices[0]["ts"], 0.0);
        assert_eq!(slices[1]["tid"], 3);
        assert_eq!(slices[1]["cat"], "offload");
    }
}

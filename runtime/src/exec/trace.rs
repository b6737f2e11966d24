//! A measured iteration in the simulator's trace format (Chrome trace
//! events: process 1 "device", thread 1 the compute stream, threads 2 to 5
//! the h2d, d2h, ssd_read and ssd_write lanes), so that a simulated and a
//! measured trace open side by side in Perfetto. With several devices,
//! device `r` is process `r + 1`, "device r", each on its own clock from
//! its first operator or copy (members in other processes share no
//! clock).

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

/// Writes each device's `spans` (times in seconds from any origin, one
/// origin a device; a device's first span's start becomes 0), device `r`
/// the `r`th list.
pub fn write_trace(
    out: &mut dyn Write,
    workload: &str,
    policy: &str,
    devices: &[Vec<TraceSpan>],
) -> io::Result<()> {
    writeln!(out, "{{\"displayTimeUnit\":\"ms\",")?;
    writeln!(
        out,
        "\"otherData\":{{\"workload\":{},\"policy\":{},\"measured\":true,\"devices\":{}}},",
        text(workload),
        text(policy),
        devices.len()
    )?;
    let mut events = Vec::new();
    for (rank, spans) in devices.iter().enumerate() {
        let process = match devices.len() {
            1 => "device".to_string(),
            _ => format!("device {rank}"),
        };
        device_events(&mut events, rank + 1, &process, devices.len() == 1, spans);
    }
    writeln!(out, "\"traceEvents\":[")?;
    writeln!(out, "{}", events.join(",\n"))?;
    writeln!(out, "]}}")
}

fn text(s: &str) -> String {
    serde_json::to_string(s).expect("a string serializes")
}

/// One device's tracks, spans and "end of iteration" instant as process
/// `pid` named `process` (the instant global where the trace has one
/// device, as the simulator's, else the device's own).
fn device_events(
    events: &mut Vec<String>,
    pid: usize,
    process: &str,
    global_end: bool,
    spans: &[TraceSpan],
) {
    let origin = spans
        .iter()
        .map(|s| s.span.start_s)
        .fold(f64::INFINITY, f64::min);
    let origin = if origin.is_finite() { origin } else { 0.0 };
    events.push(format!(
        "{{\"ph\":\"M\",\"pid\":{pid},\"name\":\"process_name\",\"args\":{{\"name\":{}}}}}",
        text(process)
    ));
    events.push(format!(
        "{{\"ph\":\"M\",\"pid\":{pid},\"name\":\"process_sort_index\",\"args\":{{\"sort_index\":{pid}}}}}"
    ));
    for (name, stream) in [
        ("compute", Stream::Compute),
        ("h2d", Stream::H2d),
        ("d2h", Stream::D2h),
        ("ssd_read", Stream::SsdRead),
        ("ssd_write", Stream::SsdWrite),
    ] {
        let tid = tid(stream);
        events.push(format!(
            "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"name\":\"thread_name\",\"args\":{{\"name\":\"{name}\"}}}}"
        ));
        events.push(format!(
            "{{\"ph\":\"M\",\"pid\":{pid},\"tid\":{tid},\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{tid}}}}}"
        ));
    }
    for span in spans {
        let category = match span.stream {
            Stream::Compute if span.name.starts_with("recompute ") => "recompute",
            Stream::Compute => "op",
            _ => span.name.split(' ').next().unwrap_or("transfer"),
        };
        events.push(format!(
            "{{\"ph\":\"X\",\"pid\":{pid},\"tid\":{},\"ts\":{:.3},\"dur\":{:.3},\"cat\":{},\"name\":{}}}",
            tid(span.stream),
            (span.span.start_s - origin) * 1e6,
            (span.span.end_s - span.span.start_s) * 1e6,
            text(category),
            text(&span.name)
        ));
    }
    let end = spans.iter().map(|s| s.span.end_s).fold(origin, f64::max);
    let scope = if global_end { "g" } else { "p" };
    events.push(format!(
        "{{\"ph\":\"i\",\"s\":\"{scope}\",\"pid\":{pid},\"tid\":1,\"name\":\"end of iteration\",\"ts\":{:.3}}}",
        (end - origin) * 1e6
    ));
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
        write_trace(&mut bytes, "w", "dp", std::slice::from_ref(&spans)).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let events = doc["traceEvents"].as_array().unwrap();
        let slices: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), 2);
        assert_eq!(slices[0]["ts"], 0.0);
        assert_eq!(slices[1]["tid"], 3);
        assert_eq!(slices[1]["cat"], "offload");
        let named = |doc: &serde_json::Value, pid: u64| {
            doc["traceEvents"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == "process_name" && e["pid"] == pid)
                .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        };
        assert_eq!(named(&doc, 1).as_deref(), Some("device"));
        assert_eq!(doc["otherData"]["devices"], 1);

        // Two devices: a process each, each from its own clock's start.
        let mut later = spans.clone();
        for span in &mut later {
            span.span.start_s += 100.0;
            span.span.end_s += 100.25;
        }
        let mut bytes = Vec::new();
        write_trace(&mut bytes, "w", "dp", &[spans, later]).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(named(&doc, 1).as_deref(), Some("device 0"));
        assert_eq!(named(&doc, 2).as_deref(), Some("device 1"));
        let events = doc["traceEvents"].as_array().unwrap();
        let of = |pid: u64| -> Vec<f64> {
            let ph = |e: &&serde_json::Value| e["ph"] == "X" || e["ph"] == "i";
            let on = events.iter().filter(ph).filter(|e| e["pid"] == pid);
            on.map(|e| e["ts"].as_f64().unwrap()).collect()
        };
        assert_eq!(of(1), [0.0, 200_000.0, 500_000.0]);
        assert_eq!(of(2), [0.0, 200_000.0, 750_000.0]);
        assert!(events
            .iter()
            .filter(|e| e["ph"] == "i")
            .all(|e| e["s"] == "p"));
    }
}

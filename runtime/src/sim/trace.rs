//! The simulated timeline in Chrome's trace-event format (JSON object form),
//! which Perfetto (ui.perfetto.dev) and chrome://tracing open.
//!
//! Process 1, "device": one thread track for the compute stream (operators,
//! recomputations, and waits for transfers) and one per transfer stream
//! (each transfer from its start to its end). Process 2, "links": one
//! counter track per link, in bytes per second. Process 3, "memory": one
//! counter track per tier, bytes held and the budget. Times are in
//! microseconds.

use std::io::{self, Write};

use fateplan_planner::plan::{Action, Plan};

use super::flows::Link;
use super::memory::TIERS;
use super::{Recording, SimReport, Track, What};

const DEVICE_PID: u32 = 1;
const LINKS_PID: u32 = 2;
const MEMORY_PID: u32 = 3;
const COMPUTE_TID: u32 = 1;
/// Thread names of the transfer streams, in `PerStream` order; tids 2..=6.
const STREAM_NAMES: [&str; 5] = ["h2d", "d2h", "ssd_read", "ssd_write", "exchange"];

/// Writes a JSON string literal.
fn string(out: &mut dyn Write, text: &str) -> io::Result<()> {
    out.write_all(b"\"")?;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        let escape = match c {
            '"' => Some("\\\"".to_string()),
            '\\' => Some("\\\\".to_string()),
            c if (c as u32) < 0x20 => Some(format!("\\u{:04x}", c as u32)),
            _ => None,
        };
        if let Some(escape) = escape {
            out.write_all(&text.as_bytes()[start..i])?;
            out.write_all(escape.as_bytes())?;
            start = i + c.len_utf8();
        }
    }
    out.write_all(&text.as_bytes()[start..])?;
    out.write_all(b"\"")
}

fn micros(seconds: f64) -> f64 {
    seconds * 1e6
}

/// `seconds` in whole nanoseconds, rounded to the nearest.
fn nanos(seconds: f64) -> u64 {
    (seconds * 1e9).round().max(0.0) as u64
}

/// Whole nanoseconds as microseconds with three decimals, exactly.
fn as_micros(nanos: u64) -> String {
    format!("{}.{:03}", nanos / 1000, nanos % 1000)
}

fn metadata(
    out: &mut dyn Write,
    pid: u32,
    tid: Option<u32>,
    kind: &str,
    key: &str,
    value: &str,
) -> io::Result<()> {
    write!(out, "{{\"ph\":\"M\",\"pid\":{pid},")?;
    if let Some(tid) = tid {
        write!(out, "\"tid\":{tid},")?;
    }
    write!(out, "\"name\":\"{kind}\",\"args\":{{\"{key}\":")?;
    if key == "sort_index" {
        write!(out, "{value}")?;
    } else {
        string(out, value)?;
    }
    writeln!(out, "}}}},")
}

/// Writes the trace of `recording`, a simulation of `plan` summed up in `report`.
pub fn write_trace(
    out: &mut dyn Write,
    plan: &Plan,
    report: &SimReport,
    recording: &Recording,
) -> io::Result<()> {
    let workload = &plan.workload.definition;
    writeln!(out, "{{\"displayTimeUnit\":\"ms\",")?;
    write!(out, "\"otherData\":{{\"workload\":")?;
    string(out, &report.workload)?;
    write!(out, ",\"profile\":")?;
    string(out, &report.profile)?;
    writeln!(
        out,
        ",\"seed\":{},\"iteration_s\":{},\"events\":{}}},",
        report.seed, report.iteration_s, report.events
    )?;
    writeln!(out, "\"traceEvents\":[")?;
    metadata(out, DEVICE_PID, None, "process_name", "name", "device")?;
    metadata(
        out,
        DEVICE_PID,
        None,
        "process_sort_index",
        "sort_index",
        "1",
    )?;
    metadata(out, LINKS_PID, None, "process_name", "name", "links")?;
    metadata(
        out,
        LINKS_PID,
        None,
        "process_sort_index",
        "sort_index",
        "2",
    )?;
    metadata(out, MEMORY_PID, None, "process_name", "name", "memory")?;
    metadata(
        out,
        MEMORY_PID,
        None,
        "process_sort_index",
        "sort_index",
        "3",
    )?;
    metadata(
        out,
        DEVICE_PID,
        Some(COMPUTE_TID),
        "thread_name",
        "name",
        "compute",
    )?;
    metadata(
        out,
        DEVICE_PID,
        Some(COMPUTE_TID),
        "thread_sort_index",
        "sort_index",
        "1",
    )?;
    for (k, name) in STREAM_NAMES.iter().enumerate() {
        let tid = k as u32 + 2;
        metadata(out, DEVICE_PID, Some(tid), "thread_name", "name", name)?;
        let index = tid.to_string();
        metadata(
            out,
            DEVICE_PID,
            Some(tid),
            "thread_sort_index",
            "sort_index",
            &index,
        )?;
    }
    for slice in &recording.slices {
        let tid = match slice.track {
            Track::Compute => COMPUTE_TID,
            Track::Stream(s) => s as u32 + 2,
        };
        // Whole nanoseconds, the end rounded as the start is: a slice
        // that ends where the next starts does not overlap it.
        let (start, end) = (nanos(slice.start), nanos(slice.end));
        write!(
            out,
            "{{\"ph\":\"X\",\"pid\":{DEVICE_PID},\"tid\":{tid},\"ts\":{},\"dur\":{},",
            as_micros(start),
            as_micros(end.saturating_sub(start))
        )?;
        match slice.what {
            What::Op(step) => {
                let op = &workload.ops[step as usize];
                write!(out, "\"cat\":\"op\",\"name\":")?;
                string(out, &op.name)?;
                write!(out, ",\"args\":{{\"step\":{step}}}")?;
            }
            What::Recompute(index) => {
                let entry = &plan.schedule[index as usize];
                let tensor = &workload.tensor(entry.tensor).name;
                write!(out, "\"cat\":\"recompute\",\"name\":")?;
                string(out, &format!("recompute {tensor}"))?;
                write!(
                    out,
                    ",\"args\":{{\"before_step\":{},\"bytes\":{}}}",
                    entry.done_before_step, entry.bytes
                )?;
            }
            What::Wait(step) => {
                write!(
                    out,
                    "\"cat\":\"wait\",\"name\":\"wait for transfers\",\"args\":{{\"before_step\":{step}}}"
                )?;
            }
            What::Transfer(index) => {
                let entry = &plan.schedule[index as usize];
                let tensor = &workload.tensor(entry.tensor).name;
                let action = match entry.action {
                    Action::Offload => "offload",
                    Action::Load => "load",
                    Action::Reload => "reload",
                    Action::Recompute => "recompute",
                };
                write!(out, "\"cat\":\"{action}\",\"name\":")?;
                string(out, &format!("{action} {tensor}"))?;
                write!(
                    out,
                    ",\"args\":{{\"bytes\":{},\"from\":\"{}\",\"to\":\"{}\",\"issue_after_step\":{},\"done_before_step\":{}}}",
                                        entry.bytes, entry.from, entry.to, entry.issue_after_step, entry.done_before_step
                )?;
            }
            What::Exchange(index) => {
                let e = &plan.exchanges[index as usize];
                write!(out, "\"cat\":\"exchange\",\"name\":")?;
                string(
                    out,
                    &format!("{:?} l{} {:?}", e.kind, e.layer, e.leg).to_lowercase(),
                )?;
                write!(
                    out,
                    ",\"args\":{{\"bytes\":{},\"network_bytes\":{},\"issue_after_step\":{},\"done_before_step\":{}}}",
                    e.bytes, e.network_bytes, e.issue_after_step, e.done_before_step
                )?;
            }
        }
        writeln!(out, "}},")?;
    }
    let mut last_rates = [f64::NAN; super::flows::LINKS];
    for &(t, rates) in &recording.links {
        for link in Link::ALL {
            let i = link as usize;
            if rates[i] != last_rates[i] {
                writeln!(
                    out,
                    "{{\"ph\":\"C\",\"pid\":{LINKS_PID},\"name\":\"{}\",\"ts\":{:.3},\"args\":{{\"bytes_per_s\":{:.0}}}}},",
                    link.name(),
                    micros(t),
                    rates[i]
                )?;
            }
        }
        last_rates = rates;
    }
    let mut last_bytes = [u64::MAX; 3];
    for &(t, bytes) in &recording.memory {
        for (i, tier) in TIERS.iter().enumerate() {
            if bytes[i] != last_bytes[i] {
                writeln!(
                    out,
                    "{{\"ph\":\"C\",\"pid\":{MEMORY_PID},\"name\":\"{tier}\",\"ts\":{:.3},\"args\":{{\"bytes\":{},\"budget\":{}}}}},",
                    micros(t),
                    bytes[i],
                    recording.budgets.of(*tier)
                )?;
            }
        }
        last_bytes = bytes;
    }
    // A last instant closes every counter at the end of the iteration.
    writeln!(
        out,
        "{{\"ph\":\"i\",\"s\":\"g\",\"pid\":{DEVICE_PID},\"tid\":{COMPUTE_TID},\"name\":\"end of iteration\",\"ts\":{:.3}}}",
        micros(recording.iteration_s)
    )?;
    writeln!(out, "]}}")
}

//! Pass 5, prediction: the iteration's time, replaying the schedule on one
//! compute stream and one queue per link with the cost model's durations.
//!
//! It runs after memory because a plan that does not fit has no time worth
//! predicting. Transfers on a link run one at a time in schedule order,
//! starting when issued and when the link is free; an SSD transfer holds the
//! PCIe link and the SSD together (chunked staging overlaps them). A step
//! starts when the compute stream is free and every transfer due before it
//! has finished.

use super::cost::{op_seconds, transfer_seconds};
use super::timeline::{Item, Timeline};
use crate::plan::{Action, LinkBytes, ScheduleEntry, Stream};
use crate::profile::Profile;
use crate::workload::Workload;
use crate::Tier;

#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    pub iteration_s: f64,
    pub compute_s: f64,
    pub recompute_s: f64,
    pub exposed_transfer_s: f64,
    pub bytes_moved: LinkBytes,
}

#[derive(Default, Clone, Copy)]
struct Links {
    h2d: f64,
    d2h: f64,
    ssd_read: f64,
    ssd_write: f64,
}

pub fn predict(
    workload: &Workload,
    profile: &Profile,
    schedule: &[ScheduleEntry],
    timeline: &Timeline,
) -> Timing {
    let ops = workload.ops.len();
    let mut issued_at: Vec<Vec<usize>> = vec![Vec::new(); ops + 1];
    let mut due_at: Vec<Vec<usize>> = vec![Vec::new(); ops + 1];
    let mut bytes_moved = LinkBytes::default();
    for (index, entry) in schedule.iter().enumerate() {
        if entry.action == Action::Recompute {
            continue;
        }
        issued_at[(entry.issue_after_step + 1) as usize].push(index);
        due_at[entry.done_before_step as usize].push(index);
        let (pcie, ssd) = match entry.action {
            Action::Offload => (&mut bytes_moved.d2h, &mut bytes_moved.ssd_write),
            _ => (&mut bytes_moved.h2d, &mut bytes_moved.ssd_read),
        };
        *pcie += entry.bytes;
        if entry.from == Tier::Ssd || entry.to == Tier::Ssd {
            *ssd += entry.bytes;
        }
    }
    let mut finish = vec![0.0f64; schedule.len()];
    // When each tensor's latest away copy is complete (a reload waits for it).
    let mut away_ready: Vec<f64> = vec![0.0; workload.tensors.len()];
    let mut links = Links::default();
    let mut clock = 0.0f64;
    let (mut compute_s, mut recompute_s) = (0.0f64, 0.0f64);
    let mut position = 0usize;
    for step in 0..=ops {
        for &index in &issued_at[step] {
            let entry = &schedule[index];
            let (pcie_s, ssd_s) = transfer_seconds(entry, profile);
            let (pcie_free, ssd_free) = match entry.stream {
                Stream::D2h | Stream::SsdWrite => (&mut links.d2h, &mut links.ssd_write),
                _ => (&mut links.h2d, &mut links.ssd_read),
            };
            let mut start = clock.max(*pcie_free);
            if entry.action != Action::Offload {
                // A copy back cannot start before the copy away has finished.
                start = start.max(away_ready[entry.tensor.index()]);
            }
            let uses_ssd = ssd_s > 0.0;
            if uses_ssd {
                start = start.max(*ssd_free);
            }
            let end = start + pcie_s.max(ssd_s);
            *pcie_free = start + pcie_s;
            if uses_ssd {
                *ssd_free = start + ssd_s;
            }
            finish[index] = end;
            if entry.action == Action::Offload {
                away_ready[entry.tensor.index()] = end;
            }
        }
        for &index in &due_at[step] {
            clock = clock.max(finish[index]);
        }
        if step == ops {
            break;
        }
        while position < timeline.len() && timeline.step_of[position] as usize == step {
            match timeline.items[position] {
                Item::Op(s) => {
                    let seconds = op_seconds(&workload.ops[s as usize], profile);
                    compute_s += seconds;
                    clock += seconds;
                }
                Item::Recompute(index) => {
                    let op = schedule[index].op.expect("recompute names its op");
                    let seconds = op_seconds(workload.op(op), profile);
                    recompute_s += seconds;
                    clock += seconds;
                }
            }
            position += 1;
        }
    }
    let iteration_s = finish.iter().copied().fold(clock, f64::max);
    Timing {
        iteration_s,
        compute_s,
        recompute_s,
        exposed_transfer_s: (iteration_s - compute_s - recompute_s).max(0.0),
        bytes_moved,
    }
}

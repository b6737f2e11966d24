//! Pass 5, prediction: the iteration's time, replaying the schedule on one
//! compute stream and one queue per link with the cost model's durations.
//!
//! It runs after memory because a plan that does not fit has no time worth
//! predicting. Each transfer stream (host to device, device to host, SSD
//! read, SSD write) runs its transfers one at a time in schedule order, as
//! the runtime's lanes do, starting when issued and when the stream is
//! free. Each direction of PCIe, and the SSD, is a calendar of busy time:
//! a transfer's seconds on it fill its first free time from when the
//! transfer can use it, so a host copy is not held up by an SSD read that
//! is waiting for the drive, and no link moves more than it can. SSD reads
//! and writes share the drive's time.
//!
//! An SSD transfer pays both requests' latencies, then moves through the
//! host staging buffers in chunks of `ssd_chunk_bytes`: a read's PCIe leg
//! starts one chunk after its SSD leg and ends one chunk after it at the
//! earliest (a write the other way round), so a transfer of one chunk or
//! less costs both legs in turn.
//!
//! A step starts when the compute stream is free and every transfer due
//! before it has finished.
//!
//! On a CPU device the cores that compute make the copies (there is no
//! copy engine): each copy's seconds are taken from the compute stream
//! when it is issued, and only the SSD's own time can overlap.
//!
//! On a GPU, host memory is a calendar too: a transfer through host memory
//! books its bytes there at the host's memory bandwidth (an SSD transfer
//! twice: the drive writes the staging buffers and PCIe reads them, or
//! the other way) from when it starts on PCIe, and ends when both are
//! done. Host memory binds when a node's GPUs share it (`Profile::share`).
//!
//! A multi-device plan's exchanges run in issue order on their own stream
//! (as NCCL's): device-to-device bytes on the peer link (or on both PCIe
//! directions where peer copies cross PCIe), then bytes between nodes on
//! the network; host legs on the PCIe direction they take, beside the
//! fates' copies (from the host: the network part first). A step also waits for the exchanges due before it.

use std::collections::BTreeMap;

use super::cost::{copies_use_compute, op_seconds};
use super::grouped::Grouped;
use super::timeline::{Item, Timeline};
use crate::plan::{Action, Exchange, Leg, LinkBytes, ScheduleEntry, Stream};
use crate::profile::PeerVia;
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

/// A link's free time: disjoint closed `[start, end)` gaps keyed by
/// start, then all time from `tail` on.
struct Calendar {
    gaps: BTreeMap<Key, f64>,
    tail: f64,
}

/// An `f64` time ordered by `total_cmp`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Key(f64);

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl Calendar {
    fn new() -> Calendar {
        Calendar {
            gaps: BTreeMap::new(),
            tail: 0.0,
        }
    }

    /// Books `seconds` of the link's time in its first free time from
    /// `start`; returns when the last of it ends.
    fn book(&mut self, start: f64, seconds: f64) -> f64 {
        if seconds <= 0.0 {
            return start;
        }
        let mut remaining = seconds;
        let mut from = start;
        loop {
            if from >= self.tail || self.gaps.is_empty() {
                // In the open-ended time (usually: links are booked
                // roughly in order): what it skips becomes a gap.
                let begin = from.max(self.tail);
                if begin > self.tail {
                    self.gaps.insert(Key(self.tail), begin);
                }
                self.tail = begin + remaining;
                return self.tail;
            }
            // The gap holding `from`, or the first one after it, or the
            // open-ended time.
            let holding = self
                .gaps
                .range(..=Key(from))
                .next_back()
                .filter(|(_, &end)| end > from)
                .map(|(&k, &end)| (k, end))
                .or_else(|| {
                    self.gaps
                        .range(Key(from)..)
                        .next()
                        .map(|(&k, &end)| (k, end))
                });
            let Some((key, end)) = holding else {
                from = from.max(self.tail);
                continue;
            };
            self.gaps.remove(&key);
            let begin = key.0.max(from);
            if key.0 < begin {
                self.gaps.insert(key, begin);
            }
            if end - begin >= remaining {
                if end - begin > remaining {
                    self.gaps.insert(Key(begin + remaining), end);
                }
                return begin + remaining;
            }
            remaining -= end - begin;
            from = end;
        }
    }
}

pub fn predict(
    workload: &Workload,
    profile: &Profile,
    schedule: &[ScheduleEntry],
    timeline: &Timeline,
    ssd_chunk_bytes: u64,
    exchanges: &[Exchange],
) -> Timing {
    let ops = workload.ops.len();
    let transfers =
        || (schedule.iter().enumerate()).filter(|(_, entry)| entry.action != Action::Recompute);
    let issued_at = Grouped::new(
        ops + 1,
        transfers().map(|(index, entry)| ((entry.issue_after_step + 1) as usize, index)),
    );
    let due_at = Grouped::new(
        ops + 1,
        transfers().map(|(index, entry)| (entry.done_before_step as usize, index)),
    );
    let mut bytes_moved = LinkBytes::default();
    for (_, entry) in transfers() {
        let (pcie, ssd) = match entry.action {
            Action::Offload => (&mut bytes_moved.d2h, &mut bytes_moved.ssd_write),
            _ => (&mut bytes_moved.h2d, &mut bytes_moved.ssd_read),
        };
        *pcie += entry.bytes;
        if entry.from == Tier::Ssd || entry.to == Tier::Ssd {
            *ssd += entry.bytes;
        }
    }
    let exchange_issued = Grouped::new(
        ops + 1,
        (exchanges.iter().enumerate()).map(|(index, e)| ((e.issue_after_step + 1) as usize, index)),
    );
    let exchange_due = Grouped::new(
        ops + 1,
        (exchanges.iter().enumerate()).map(|(index, e)| (e.done_before_step as usize, index)),
    );
    let mut exchange_finish = vec![0.0f64; exchanges.len()];
    let mut exchange_free = 0.0f64;
    let (mut peer_link, mut network) = (Calendar::new(), Calendar::new());
    let mut finish = vec![0.0f64; schedule.len()];
    // When each tensor's latest away copy is complete (a reload waits for it).
    let mut away_ready: Vec<f64> = vec![0.0; workload.tensors.len()];
    // Per stream (h2d, d2h, SSD read, SSD write): when it is free.
    let mut stream_free = [0.0f64; 4];
    let (mut h2d, mut d2h, mut drive) = (Calendar::new(), Calendar::new(), Calendar::new());
    let mut host_memory = Calendar::new();
    let (pcie, ssd) = (&profile.pcie, &profile.ssd);
    let host_s = |bytes: f64| bytes / profile.host_transfer_bytes_per_s();
    // The SSD tier's bytes cross host memory by copies, at the copy rate
    // (as the simulator's `phase`).
    let host_copy_s = |bytes: f64| bytes / profile.host.memory_bytes_per_s;
    let cores_copy = copies_use_compute(profile);
    let mut clock = 0.0f64;
    let (mut compute_s, mut recompute_s) = (0.0f64, 0.0f64);
    let mut position = 0usize;
    for step in 0..=ops {
        for &index in issued_at.of(step) {
            let entry = &schedule[index];
            let outward = entry.action == Action::Offload;
            let (lane, link) = match entry.stream {
                Stream::D2h => (1, &mut d2h),
                Stream::SsdWrite => (3, &mut d2h),
                Stream::SsdRead => (2, &mut h2d),
                _ => (0, &mut h2d),
            };
            let mut start = clock.max(stream_free[lane]);
            if !outward {
                // A copy back cannot start before the copy away has finished.
                start = start.max(away_ready[entry.tensor.index()]);
            }
            let bytes = entry.bytes as f64;
            let (pcie_rate, ssd_rate, ssd_latency) = if outward {
                (
                    pcie.d2h_bytes_per_s,
                    ssd.write_bytes_per_s,
                    ssd.write_latency_s,
                )
            } else {
                (
                    pcie.h2d_bytes_per_s,
                    ssd.read_bytes_per_s,
                    ssd.read_latency_s,
                )
            };
            let on_ssd = entry.from == Tier::Ssd || entry.to == Tier::Ssd;
            let end = if cores_copy {
                // The copy runs on the cores that compute: the compute
                // stream gives up its seconds, and the drive's leg (DMA)
                // is the only part that overlaps.
                let copy_s = pcie.latency_s + bytes / pcie_rate;
                clock += copy_s;
                if !on_ssd {
                    start + copy_s
                } else if outward {
                    drive.book(start + copy_s + ssd_latency, bytes / ssd_rate)
                } else {
                    drive.book(start + ssd_latency, bytes / ssd_rate) + copy_s
                }
            } else if on_ssd {
                let chunk = entry.bytes.min(ssd_chunk_bytes.max(1)) as f64;
                let begin = start + pcie.latency_s + ssd_latency;
                let (pcie_s, ssd_s) = (bytes / pcie_rate, bytes / ssd_rate);
                let host_end = host_memory.book(begin, host_copy_s(2.0 * bytes));
                let end = if outward {
                    let pcie_end = link.book(begin, pcie_s);
                    let ssd_end = drive.book(begin + chunk / pcie_rate, ssd_s);
                    ssd_end.max(pcie_end + chunk / ssd_rate)
                } else {
                    let ssd_end = drive.book(begin, ssd_s);
                    let pcie_end = link.book(begin + chunk / ssd_rate, pcie_s);
                    pcie_end.max(ssd_end + chunk / pcie_rate)
                };
                end.max(host_end)
            } else {
                let begin = start + pcie.latency_s;
                link.book(begin, bytes / pcie_rate)
                    .max(host_memory.book(begin, host_s(bytes)))
            };
            stream_free[lane] = end;
            finish[index] = end;
            if entry.action == Action::Offload {
                away_ready[entry.tensor.index()] = end;
            }
        }
        for &index in exchange_issued.of(step) {
            let e = &exchanges[index];
            let start = clock.max(exchange_free);
            let end = exchange_end(
                e,
                start,
                profile,
                [
                    &mut h2d,
                    &mut d2h,
                    &mut peer_link,
                    &mut network,
                    &mut host_memory,
                ],
            );
            exchange_free = end;
            exchange_finish[index] = end;
        }
        for &index in due_at.of(step) {
            clock = clock.max(finish[index]);
        }
        for &index in exchange_due.of(step) {
            clock = clock.max(exchange_finish[index]);
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
    let iteration_s = finish
        .iter()
        .chain(&exchange_finish)
        .copied()
        .fold(clock, f64::max);
    Timing {
        iteration_s,
        compute_s,
        recompute_s,
        exposed_transfer_s: (iteration_s - compute_s - recompute_s).max(0.0),
        bytes_moved,
    }
}

/// When an exchange started at `start` ends, booking its links
/// (`[h2d, d2h, peer, network, host memory]`).
fn exchange_end(e: &Exchange, start: f64, profile: &Profile, links: [&mut Calendar; 5]) -> f64 {
    let [h2d, d2h, peer_link, network, host_memory] = links;
    let host_s = |bytes: f64| bytes / profile.host_transfer_bytes_per_s();
    let local = (e.bytes - e.network_bytes) as f64;
    let remote = e.network_bytes as f64;
    let (net_rate, net_latency) = profile
        .network
        .as_ref()
        .map_or((f64::INFINITY, 0.0), |n| (n.bytes_per_s, n.latency_s));
    let pcie = &profile.pcie;
    match e.leg {
        Leg::Peer => {
            let Some(peer) = &profile.peer else {
                return start;
            };
            let begin = start + peer.latency_s;
            let local_end = match peer.via {
                PeerVia::Nvlink => peer_link.book(begin, local / peer.bytes_per_s),
                // Sent over one PCIe direction, received over the other.
                PeerVia::Pcie => d2h
                    .book(begin, local / pcie.d2h_bytes_per_s)
                    .max(h2d.book(begin, local / pcie.h2d_bytes_per_s)),
            };
            // Then the part between nodes.
            if remote > 0.0 {
                network.book(local_end + net_latency, remote / net_rate)
            } else {
                local_end
            }
        }
        Leg::ToHost => {
            let begin = start + pcie.latency_s;
            d2h.book(begin, e.bytes as f64 / pcie.d2h_bytes_per_s)
                .max(host_memory.book(begin, host_s(e.bytes as f64)))
        }
        Leg::FromHost => {
            // What comes from other nodes lands in host memory first.
            let landed = network
                .book(start + net_latency, remote / net_rate)
                .max(host_memory.book(start + net_latency, host_s(remote)));
            let from = if remote > 0.0 { landed } else { start };
            let begin = from + pcie.latency_s;
            h2d.book(begin, e.bytes as f64 / pcie.h2d_bytes_per_s)
                .max(host_memory.book(begin, host_s(e.bytes as f64)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calendar_fills_the_first_free_time_from_the_start() {
        let mut link = Calendar::new();
        // Booked late first: [10, 12).
        assert_eq!(link.book(10.0, 2.0), 12.0);
        // Booked from 0: fits before it, [0, 3).
        assert_eq!(link.book(0.0, 3.0), 3.0);
        // 8 s from 1: [3, 10) then [12, 13).
        assert_eq!(link.book(1.0, 8.0), 13.0);
        // Nothing free before 13 any more.
        assert_eq!(link.book(0.0, 1.0), 14.0);
        // Zero seconds take no time.
        assert_eq!(link.book(5.0, 0.0), 5.0);
        assert!(link.gaps.is_empty());
        assert_eq!(link.tail, 14.0);
        // A gap filled exactly ends the booking there.
        assert_eq!(link.book(20.0, 1.0), 21.0);
        assert_eq!(link.book(14.0, 6.0), 20.0);
        assert!(link.gaps.is_empty());
    }
}

//! The simulator's duration model, written from the profile's figures alone.
//!
//! The planner's cost model (`planner/src/passes/cost.rs`) is not used: the
//! simulator is the independent judge of the plans that model produced.
//!
//! - An operator runs for its explicit `seconds` if it has them, otherwise
//!   for a launch overhead plus the larger of its math time (flops at the
//!   GEMM rate for its intensity) and its memory time (bytes at the
//!   sparse gather or scatter rate for sparse operators, at HBM bandwidth
//!   otherwise; softmax math at its own rate): a roofline, as the profile
//!   defines its figures ([`DeviceProfile::work_seconds`]).
//! - A transfer is a short list of [`Phase`]s: a latency, then bytes flowing
//!   through links whose bandwidth it shares with the other transfers in
//!   flight (see [`super::flows`]). Host transfers cross PCIe and host
//!   memory. SSD transfers go through a host staging buffer in chunks of
//!   `ssd_staging_bytes / 4` (two buffers per direction): the first chunk
//!   crosses the first leg alone, the middle streams through both legs at
//!   once, the last chunk crosses the second leg alone, as a two-stage
//!   pipeline of chunks does. Every byte of an SSD transfer crosses host
//!   memory twice (DMA into the staging buffer and out of it).
//!   Dropout's masks add their elements at the profile's time per
//!   element (`cost.masked`, `device.mask_seconds_per_element`), as
//!   building transposes adds their edges.
//! - On a CPU-backend profile (`device.kind = cpu`) there is no DMA engine:
//!   operators run on every one of the host's `cores`, and each transfer
//!   that crosses a "PCIe" link or the SSD runs on a transfer lane's own
//!   thread (a memcpy; for the SSD also the io_uring requests, the
//!   checksum and the copy into place). The threads share the cores
//!   evenly ([`core_share`]), so while transfers run, operators and
//!   transfers are slowed alike.

use fateplan_planner::plan::{Action, Leg, ScheduleEntry};
use fateplan_planner::profile::{DeviceProfile, PeerVia, Profile};
use fateplan_planner::workload::Op;
use fateplan_planner::Tier;

use super::flows::{Link, LINKS};

/// Half-width of the jitter band: durations are multiplied by a factor
/// uniform in `[1 - JITTER, 1 + JITTER]` when a seed is given.
pub const JITTER: f64 = 0.05;

/// Staging buffers the plan's `ssd_staging_bytes` holds: two per direction.
pub const STAGING_BUFFERS: u64 = 4;

const _: () = assert!(JITTER > 0.0 && JITTER < 1.0);
const _: () = assert!(STAGING_BUFFERS.is_multiple_of(2));

/// Seconds `op` runs on `device`.
pub fn op_seconds(op: &Op, device: &DeviceProfile) -> f64 {
    if let Some(seconds) = op.cost.seconds {
        return seconds;
    }
    device.op_overhead_s
        + device.work_seconds(&op.cost)
        + device.transpose_seconds(op.cost.transpose_edges)
        + device.mask_seconds(op.cost.masked)
}

/// The speed of each running thread on a CPU backend with `cores` cores,
/// as a share of its speed alone: the operators take `cores` threads
/// while `computing`, each of `copies` copies one. More threads than
/// cores share them evenly (the scheduler's fair share); fewer run at
/// full speed.
pub fn core_share(cores: f64, computing: bool, copies: usize) -> f64 {
    let threads = if computing { cores } else { 0.0 } + copies as f64;
    if threads > cores && threads > 0.0 {
        cores / threads
    } else {
        1.0
    }
}

/// Which way a transfer goes, and so which links it crosses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// Host memory to the device over PCIe.
    HostToDevice,
    /// The device to host memory over PCIe.
    DeviceToHost,
    /// SSD to a staging buffer, then over PCIe to the device.
    SsdToDevice,
    /// The device over PCIe to a staging buffer, then to the SSD.
    DeviceToSsd,
}

impl Path {
    /// The path of a transfer entry; `None` for a recomputation or a
    /// transfer between tiers that no path joins.
    pub fn of(entry: &ScheduleEntry) -> Option<Path> {
        match (entry.action, entry.from, entry.to) {
            (Action::Recompute, _, _) => None,
            (Action::Offload, Tier::Hbm, Tier::Host) => Some(Path::DeviceToHost),
            (Action::Offload, Tier::Hbm, Tier::Ssd) => Some(Path::DeviceToSsd),
            (Action::Load | Action::Reload, Tier::Host, Tier::Hbm) => Some(Path::HostToDevice),
            (Action::Load | Action::Reload, Tier::Ssd, Tier::Hbm) => Some(Path::SsdToDevice),
            _ => None,
        }
    }
}

/// Bytes through links: what each byte of the flow costs each link's
/// capacity, and how many bytes it puts on each link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Capacity used per byte: 1 on byte-rate links; on the SSD, device
    /// seconds per byte (reads and writes share the device's time).
    pub cost: [f64; LINKS],
    /// Bytes carried per byte of the flow (2 on host memory when a byte
    /// goes into and out of a staging buffer).
    pub traffic: [f64; LINKS],
}

impl Usage {
    fn new() -> Usage {
        Usage {
            cost: [0.0; LINKS],
            traffic: [0.0; LINKS],
        }
    }

    fn with(mut self, link: Link, cost: f64, traffic: f64) -> Usage {
        self.cost[link as usize] += cost;
        self.traffic[link as usize] += traffic;
        self
    }

    /// The usage of a flow stretched `factor` times ([`stretched_flow`]):
    /// each of its `factor` times as many bytes carries `1 / factor` of a
    /// byte.
    fn stretched(mut self, factor: f64) -> Usage {
        for traffic in &mut self.traffic {
            *traffic /= factor;
        }
        self
    }
}

/// A flow of `bytes` with its duration stretched `factor` times (the
/// jitter): `factor` times the bytes go through the links, so that the flow
/// takes that much longer alone and its share of a shared link is its own,
/// each carrying `1 / factor` of a byte, so that the links carry the flow's
/// own bytes whatever the factor.
fn stretched_flow(bytes: f64, usage: Usage, factor: f64) -> Phase {
    Phase::Flow {
        bytes: bytes * factor,
        usage: usage.stretched(factor),
    }
}

/// One phase of a transfer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phase {
    /// Waiting out a latency: no bandwidth used.
    Delay(f64),
    /// Bytes through links.
    Flow { bytes: f64, usage: Usage },
}

/// Most phases a transfer has.
pub const MAX_PHASES: u8 = 4;

/// Phase `k` of a transfer of `bytes` on `path` (`None` past the last),
/// with its durations and work stretched by `factor` (the jitter).
/// Phases of zero length are returned too; the engine skips them.
pub fn phase(
    path: Path,
    k: u8,
    bytes: u64,
    chunk_bytes: u64,
    profile: &Profile,
    factor: f64,
) -> Option<Phase> {
    let pcie = &profile.pcie;
    let ssd = &profile.ssd;
    let total = bytes as f64;
    // The first and last chunk; the middle streams through both legs.
    let chunk = bytes.min(chunk_bytes.max(1)) as f64;
    let middle = (total - chunk).max(0.0);
    // Host memory's capacity is `Profile::host_transfer_bytes_per_s`:
    // on a GPU, DMA at twice the copy rate. The SSD tier's bytes cross
    // host memory by copies (the runtime copies them between its pinned
    // buffers, its own and the store's), at the copy rate: each of their
    // passes costs `copy` times a DMA's.
    let copy = profile.host_transfer_bytes_per_s() / profile.host.memory_bytes_per_s;
    let host = |u: Usage, passes: f64, cost: f64| u.with(Link::HostMemory, passes * cost, passes);
    let h2d =
        |u: Usage, passes: f64, cost: f64| host(u.with(Link::PcieH2d, 1.0, 1.0), passes, cost);
    let d2h =
        |u: Usage, passes: f64, cost: f64| host(u.with(Link::PcieD2h, 1.0, 1.0), passes, cost);
    let read = |u: Usage| u.with(Link::Ssd, 1.0 / ssd.read_bytes_per_s, 1.0);
    let write = |u: Usage| u.with(Link::Ssd, 1.0 / ssd.write_bytes_per_s, 1.0);
    let flow = |bytes: f64, usage: Usage| Some(stretched_flow(bytes, usage, factor));
    match (path, k) {
        (Path::HostToDevice, 0) => Some(Phase::Delay(pcie.latency_s * factor)),
        (Path::HostToDevice, 1) => flow(total, h2d(Usage::new(), 1.0, 1.0)),
        (Path::DeviceToHost, 0) => Some(Phase::Delay(pcie.latency_s * factor)),
        (Path::DeviceToHost, 1) => flow(total, d2h(Usage::new(), 1.0, 1.0)),
        (Path::SsdToDevice, 0) => {
            Some(Phase::Delay((ssd.read_latency_s + pcie.latency_s) * factor))
        }
        (Path::SsdToDevice, 1) => flow(chunk, host(read(Usage::new()), 1.0, copy)),
        (Path::SsdToDevice, 2) => flow(middle, h2d(read(Usage::new()), 2.0, copy)),
        (Path::SsdToDevice, 3) => flow(chunk, h2d(Usage::new(), 1.0, copy)),
        (Path::DeviceToSsd, 0) => Some(Phase::Delay(
            (pcie.latency_s + ssd.write_latency_s) * factor,
        )),
        (Path::DeviceToSsd, 1) => flow(chunk, d2h(Usage::new(), 1.0, copy)),
        (Path::DeviceToSsd, 2) => flow(middle, d2h(write(Usage::new()), 2.0, copy)),
        (Path::DeviceToSsd, 3) => flow(chunk, host(write(Usage::new()), 1.0, copy)),
        _ => None,
    }
}

/// Phase `k` of an exchange leg of `bytes`, `network_bytes` of them
/// between nodes: peer copies (NVLink, or both PCIe directions) then the
/// network; to the host over PCIe; from the host, the network part first.
pub fn exchange_phase(
    leg: Leg,
    k: u8,
    bytes: u64,
    network_bytes: u64,
    profile: &Profile,
    factor: f64,
) -> Option<Phase> {
    let pcie = &profile.pcie;
    let local = (bytes - network_bytes.min(bytes)) as f64;
    let remote = network_bytes.min(bytes) as f64;
    let net_latency = profile.network.as_ref().map_or(0.0, |n| n.latency_s) * factor;
    let flow = |bytes: f64, usage: Usage| Some(stretched_flow(bytes, usage, factor));
    let network = Usage::new().with(Link::Network, 1.0, 1.0);
    match (leg, k) {
        (Leg::Peer, 0) => Some(Phase::Delay(
            profile.peer.as_ref().map_or(0.0, |p| p.latency_s) * factor,
        )),
        (Leg::Peer, 1) => {
            let via = profile.peer.as_ref().map_or(PeerVia::Nvlink, |p| p.via);
            let usage = match via {
                PeerVia::Nvlink => Usage::new().with(Link::Peer, 1.0, 1.0),
                PeerVia::Pcie => {
                    Usage::new()
                        .with(Link::PcieD2h, 1.0, 1.0)
                        .with(Link::PcieH2d, 1.0, 1.0)
                }
            };
            flow(local, usage)
        }
        (Leg::Peer, 2) => Some(Phase::Delay(if remote > 0.0 { net_latency } else { 0.0 })),
        (Leg::Peer, 3) => flow(remote, network),
        (Leg::ToHost, 0) => Some(Phase::Delay(pcie.latency_s * factor)),
        (Leg::ToHost, 1) => flow(
            bytes as f64,
            Usage::new()
                .with(Link::PcieD2h, 1.0, 1.0)
                .with(Link::HostMemory, 1.0, 1.0),
        ),
        (Leg::FromHost, 0) => Some(Phase::Delay(if remote > 0.0 { net_latency } else { 0.0 })),
        (Leg::FromHost, 1) => flow(remote, network.with(Link::HostMemory, 1.0, 1.0)),
        (Leg::FromHost, 2) => Some(Phase::Delay(pcie.latency_s * factor)),
        (Leg::FromHost, 3) => flow(
            bytes as f64,
            Usage::new()
                .with(Link::PcieH2d, 1.0, 1.0)
                .with(Link::HostMemory, 1.0, 1.0),
        ),
        _ => None,
    }
}

/// A tiny deterministic generator of jitter factors (splitmix64). Seed 0
/// means no jitter: every factor is exactly 1.
#[derive(Debug, Clone)]
pub struct Jitter {
    state: u64,
    enabled: bool,
}

impl Jitter {
    pub fn new(seed: u64) -> Jitter {
        Jitter {
            state: seed,
            enabled: seed != 0,
        }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next duration factor, uniform in `[1 - JITTER, 1 + JITTER)`.
    pub fn factor(&mut self) -> f64 {
        if !self.enabled {
            return 1.0;
        }
        // 53 random bits into [0, 1).
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        1.0 + JITTER * (2.0 * unit - 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_are_shared_evenly_by_operators_and_copies() {
        assert_eq!(core_share(2.0, true, 0), 1.0);
        assert_eq!(core_share(2.0, true, 1), 2.0 / 3.0);
        assert_eq!(core_share(2.0, true, 2), 0.5);
        assert_eq!(core_share(2.0, false, 2), 1.0);
        assert_eq!(core_share(2.0, false, 4), 0.5);
        assert_eq!(core_share(1.0, false, 0), 1.0);
    }

    #[test]
    fn jitter_is_deterministic_bounded_and_off_at_seed_zero() {
        let draw = |seed| {
            let mut j = Jitter::new(seed);
            (0..1000).map(|_| j.factor()).collect::<Vec<f64>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert!(draw(0).iter().all(|&f| f == 1.0));
        let spread = draw(42);
        assert!(spread
            .iter()
            .all(|&f| (1.0 - JITTER..1.0 + JITTER).contains(&f)));
        let mean = spread.iter().sum::<f64>() / spread.len() as f64;
        assert!((mean - 1.0).abs() < 0.01, "{mean}");
    }
}

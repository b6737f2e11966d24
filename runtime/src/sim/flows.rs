//! Links with shared bandwidth: flows of bytes through links, with rates
//! set by max-min fairness (progressive filling) every time a flow starts
//! or ends.
//!
//! At most one flow per stream is in flight, so the set is tiny and a full
//! reallocation on every change is cheaper than anything cleverer. The
//! next completion is cached, so the engine asks for it in O(1).

use super::model::Usage;

/// Links, and the shared resources that behave like links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Link {
    /// PCIe, host to device.
    PcieH2d = 0,
    /// PCIe, device to host (full duplex: independent of `PcieH2d`).
    PcieD2h = 1,
    /// The SSD: reads and writes share its time.
    Ssd = 2,
    /// Host-memory bandwidth, shared by PCIe DMA and SSD DMA.
    HostMemory = 3,
    /// Device to device (a multi-GPU plan's exchanges).
    Peer = 4,
    /// Between nodes.
    Network = 5,
}

pub const LINKS: usize = 6;

impl Link {
    pub const ALL: [Link; LINKS] = [
        Link::PcieH2d,
        Link::PcieD2h,
        Link::Ssd,
        Link::HostMemory,
        Link::Peer,
        Link::Network,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Link::PcieH2d => "pcie_h2d",
            Link::PcieD2h => "pcie_d2h",
            Link::Ssd => "ssd",
            Link::HostMemory => "host_memory",
            Link::Peer => "peer",
            Link::Network => "network",
        }
    }
}

/// Most flows in flight at once: one per transfer stream.
pub const MAX_FLOWS: usize = 8;

#[derive(Debug, Clone, Copy)]
struct Flow {
    owner: usize,
    remaining: f64,
    usage: Usage,
    rate: f64,
}

/// The flows in flight and what they have used so far.
#[derive(Debug, Clone)]
pub struct Fluid {
    /// Capacity of each link: bytes per second, or for the SSD 1 (device
    /// seconds per second). Zero for a link the profile lacks.
    capacity: [f64; LINKS],
    /// Share of each link's capacity available now (1 unless the CPU
    /// backend's copies are slowed by sharing cores: `set_share`).
    share: [f64; LINKS],
    flows: Vec<Flow>,
    now: f64,
    next: Option<(f64, usize)>,
    /// Capacity used, integrated over time.
    pub cost_integral: [f64; LINKS],
    /// Bytes carried.
    pub bytes: [f64; LINKS],
    /// Seconds with at least one flow on the link.
    pub busy_s: [f64; LINKS],
}

impl Fluid {
    pub fn new(capacity: [f64; LINKS]) -> Fluid {
        Fluid {
            capacity,
            share: [1.0; LINKS],
            flows: Vec::with_capacity(MAX_FLOWS),
            now: 0.0,
            next: None,
            cost_integral: [0.0; LINKS],
            bytes: [0.0; LINKS],
            busy_s: [0.0; LINKS],
        }
    }

    /// The links' full capacities.
    pub fn capacity(&self) -> [f64; LINKS] {
        self.capacity
    }

    /// From time `t`, `link` carries at most `share` of its capacity;
    /// the flows on it are given new rates. Returns whether it changed.
    pub fn set_share(&mut self, t: f64, link: Link, share: f64) -> bool {
        debug_assert!(share > 0.0 && share <= 1.0, "share {share}");
        if self.share[link as usize] == share {
            return false;
        }
        self.advance(t);
        self.share[link as usize] = share;
        self.allocate();
        true
    }

    /// When the next flow finishes, and its owner.
    pub fn next_completion(&self) -> Option<(f64, usize)> {
        self.next
    }

    /// Starts a flow of `bytes` for `owner` at time `t`.
    pub fn start(&mut self, t: f64, owner: usize, bytes: f64, usage: Usage) {
        assert!(self.flows.len() < MAX_FLOWS, "more flows than streams");
        debug_assert!(usage
            .cost
            .iter()
            .zip(&self.capacity)
            .any(|(&c, &cap)| c > 0.0 && cap > 0.0));
        self.advance(t);
        self.flows.push(Flow {
            owner,
            remaining: bytes,
            usage,
            rate: 0.0,
        });
        self.allocate();
    }

    /// Ends the flow that finishes next, at its finish time; returns its owner.
    pub fn finish_next(&mut self) -> Option<usize> {
        let (t, owner) = self.next?;
        self.advance(t);
        let index = self.flows.iter().position(|f| f.owner == owner)?;
        self.flows.swap_remove(index);
        self.allocate();
        Some(owner)
    }

    /// Bytes per second each link carries now.
    pub fn link_bytes_per_s(&self) -> [f64; LINKS] {
        let mut out = [0.0; LINKS];
        for flow in &self.flows {
            for (o, &traffic) in out.iter_mut().zip(&flow.usage.traffic) {
                *o += flow.rate * traffic;
            }
        }
        out
    }

    fn advance(&mut self, t: f64) {
        let dt = t - self.now;
        if dt <= 0.0 {
            return;
        }
        let mut used = [0.0f64; LINKS];
        for flow in &mut self.flows {
            let moved = flow.rate * dt;
            flow.remaining -= moved;
            for ((u, bytes), (&cost, &traffic)) in used
                .iter_mut()
                .zip(&mut self.bytes)
                .zip(flow.usage.cost.iter().zip(&flow.usage.traffic))
            {
                *u += cost * moved;
                *bytes += traffic * moved;
            }
        }
        for ((&u, integral), busy) in used
            .iter()
            .zip(&mut self.cost_integral)
            .zip(&mut self.busy_s)
        {
            *integral += u;
            if u > 0.0 {
                *busy += dt;
            }
        }
        self.now = t;
    }

    /// Max-min fair rates by progressive filling: raise every unfrozen
    /// flow's rate together until a link is full, freeze the flows on it,
    /// repeat. Each round fills at least one link, so it ends within
    /// `LINKS` rounds.
    fn allocate(&mut self) {
        let n = self.flows.len();
        let mut frozen = [false; MAX_FLOWS];
        let mut used = [0.0f64; LINKS];
        for flow in &mut self.flows {
            flow.rate = 0.0;
        }
        let capacity: [f64; LINKS] = std::array::from_fn(|i| self.capacity[i] * self.share[i]);
        for _round in 0..LINKS {
            let mut load = [0.0f64; LINKS];
            for (k, flow) in self.flows.iter().enumerate() {
                if !frozen[k] {
                    for (l, &cost) in load.iter_mut().zip(&flow.usage.cost) {
                        *l += cost;
                    }
                }
            }
            let mut step = f64::INFINITY;
            for ((&l, &u), &capacity) in load.iter().zip(&used).zip(&capacity) {
                if l > 0.0 {
                    step = step.min((capacity - u).max(0.0) / l);
                }
            }
            if !step.is_finite() {
                break;
            }
            for (k, flow) in self.flows.iter_mut().enumerate() {
                if !frozen[k] {
                    flow.rate += step;
                }
            }
            for (u, &l) in used.iter_mut().zip(&load) {
                *u += step * l;
            }
            let mut any_left = false;
            for (k, flow) in self.flows.iter().enumerate() {
                if frozen[k] {
                    continue;
                }
                let saturated = (0..LINKS).any(|link| {
                    flow.usage.cost[link] > 0.0 && used[link] >= capacity[link] * (1.0 - 1e-12)
                });
                if saturated {
                    frozen[k] = true;
                } else {
                    any_left = true;
                }
            }
            if !any_left {
                break;
            }
        }
        self.next = None;
        for flow in &self.flows[..n] {
            let end = if flow.remaining <= 0.0 {
                self.now
            } else if flow.rate > 0.0 {
                self.now + flow.remaining / flow.rate
            } else {
                f64::INFINITY
            };
            let earlier = match self.next {
                None => true,
                Some((t, owner)) => (end, flow.owner) < (t, owner),
            };
            if earlier {
                self.next = Some((end, flow.owner));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(links: &[(Link, f64)]) -> Usage {
        let mut u = Usage {
            cost: [0.0; LINKS],
            traffic: [0.0; LINKS],
        };
        for &(link, cost) in links {
            u.cost[link as usize] = cost;
            u.traffic[link as usize] = 1.0;
        }
        u
    }

    #[test]
    fn two_flows_share_a_link_then_one_speeds_up() {
        // 10 B/s link; flows of 10 and 20 bytes start together: both run at
        // 5 B/s until t = 2, then the second alone at 10 B/s until t = 3.
        let mut fluid = Fluid::new([10.0, 10.0, 1.0, 100.0, 0.0, 0.0]);
        fluid.start(0.0, 0, 10.0, usage(&[(Link::PcieH2d, 1.0)]));
        fluid.start(0.0, 1, 20.0, usage(&[(Link::PcieH2d, 1.0)]));
        let (t, owner) = fluid.next_completion().unwrap();
        assert_eq!((t, owner), (2.0, 0));
        assert_eq!(fluid.finish_next(), Some(0));
        let (t, owner) = fluid.next_completion().unwrap();
        assert!((t - 3.0).abs() < 1e-12 && owner == 1);
        fluid.finish_next();
        assert!(fluid.next_completion().is_none());
        assert!((fluid.bytes[Link::PcieH2d as usize] - 30.0).abs() < 1e-9);
        assert!((fluid.busy_s[Link::PcieH2d as usize] - 3.0).abs() < 1e-12);
    }

    #[test]
    fn a_link_given_a_share_slows_its_flows_from_then_on() {
        // 10 bytes at 10 B/s; at t = 0.5 the link gets half its capacity:
        // the other 5 bytes take 1 s more.
        let mut fluid = Fluid::new([10.0, 10.0, 1.0, 100.0, 0.0, 0.0]);
        fluid.start(0.0, 0, 10.0, usage(&[(Link::PcieH2d, 1.0)]));
        assert!(fluid.set_share(0.5, Link::PcieH2d, 0.5));
        assert!(!fluid.set_share(0.5, Link::PcieH2d, 0.5));
        let (t, _) = fluid.next_completion().unwrap();
        assert!((t - 1.5).abs() < 1e-12, "{t}");
        assert_eq!(fluid.capacity()[Link::PcieH2d as usize], 10.0);
    }

    #[test]
    fn the_ssd_is_shared_by_time_and_a_bottleneck_elsewhere_frees_capacity() {
        // SSD: reads at 4 B/s cost 0.25 s/B, writes at 2 B/s cost 0.5 s/B.
        // A read limited to 1 B/s by PCIe uses a quarter of the SSD; the
        // write gets the rest: 1.5 B/s.
        let mut fluid = Fluid::new([1.0, 10.0, 1.0, 100.0, 0.0, 0.0]);
        fluid.start(
            0.0,
            0,
            1.0,
            usage(&[(Link::Ssd, 0.25), (Link::PcieH2d, 1.0)]),
        );
        fluid.start(0.0, 1, 3.0, usage(&[(Link::Ssd, 0.5)]));
        let (t, owner) = fluid.next_completion().unwrap();
        assert!((t - 1.0).abs() < 1e-12, "{t}");
        assert!(owner == 0);
        let rates = fluid.link_bytes_per_s();
        assert!((rates[Link::Ssd as usize] - 2.5).abs() < 1e-9, "{rates:?}");
    }
}

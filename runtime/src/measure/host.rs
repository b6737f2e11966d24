//! Host figures: RAM from `/proc/meminfo`'s text, the CPU's model from
//! `/proc/cpuinfo`'s, memory copy bandwidth, and the executor's transfer
//! lanes (on the CPU backend, a "host-device" copy is a copy between two
//! arenas in RAM, made on a lane's thread).

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use crate::exec::data::Data;
use crate::exec::lanes::Lane;
use crate::{Error, Result};

use super::{fill_pattern, median_of_rounds, Rounds};

/// RAM as `/proc/meminfo` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemInfo {
    pub total_bytes: u64,
    /// Estimate of memory available without swapping (`MemAvailable`).
    pub available_bytes: u64,
}

/// Parses the text of `/proc/meminfo` (`source` names it in errors).
pub fn parse_meminfo(text: &str, source: &Path) -> Result<MemInfo> {
    let total_bytes = size_field(text, "MemTotal", source)?;
    let available_bytes = size_field(text, "MemAvailable", source)?;
    Ok(MemInfo {
        total_bytes,
        available_bytes,
    })
}

/// The size on the line `name: N kB` of a `/proc` file's text (such as
/// `/proc/meminfo` or `/proc/self/status`), in bytes; `source` names the
/// file in errors.
pub fn size_field(text: &str, name: &str, source: &Path) -> Result<u64> {
    let line = text
        .lines()
        .find(|line| line.split(':').next() == Some(name))
        .ok_or_else(|| Error::invalid(source, name, "is missing"))?;
    let value = line[name.len() + 1..].trim();
    let (number, unit) = value.split_once(' ').unwrap_or((value, ""));
    let multiplier = match unit.trim() {
        "kB" => 1024,
        "" => 1,
        other => {
            return Err(Error::invalid(
                source,
                name,
                format!("{value:?}: unknown unit {other:?} (expected kB)"),
            ))
        }
    };
    let number: u64 = number
        .parse()
        .map_err(|_| Error::invalid(source, name, format!("{value:?} is not a whole number")))?;
    number
        .checked_mul(multiplier)
        .filter(|&bytes| bytes > 0)
        .ok_or_else(|| Error::invalid(source, name, format!("{value:?} is not a size")))
}

/// CPU time spent so far on the CPUs this process may run on and by
/// this process (`/proc/stat`, `/proc/self/stat`), and when it was read:
/// two readings tell how much of those CPUs other programs took in
/// between.
#[derive(Debug, Clone, Copy)]
pub struct CpuTimes {
    /// The allowed CPUs' time in user, nice and system work.
    busy_s: f64,
    /// Time the hypervisor ran something else on the allowed CPUs.
    steal_s: f64,
    /// This process's user and system time.
    own_s: f64,
    at: Instant,
}

impl CpuTimes {
    /// The times now; `None` where the `/proc` files are not there or
    /// not as Linux writes them.
    pub fn now() -> Option<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        Self::parse(&stat, &own, &allowed_cpus(), Instant::now())
    }

    /// From the files' text, over the CPUs `allowed` (all of them where
    /// it is empty: the affinity could not be read).
    fn parse(stat: &str, own: &str, allowed: &[usize], at: Instant) -> Option<CpuTimes> {
        // SAFETY: sysconf reads a constant of the system.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let hz = if hz > 0 { hz as f64 } else { 100.0 };
        // `cpuN user nice system idle iowait irq softirq steal ...`, a
        // line a CPU after the machine's sum. Interrupt time is left out:
        // it is not in a process's own, and the process's I/O causes it.
        let (mut busy, mut steal, mut found) = (0.0, 0.0, false);
        for line in stat.lines() {
            let Some(rest) = line.strip_prefix("cpu") else {
                continue;
            };
            let Some((cpu, ticks)) = rest.split_once(' ') else {
                continue;
            };
            let Ok(cpu) = cpu.parse::<usize>() else {
                continue;
            };
            if !(allowed.is_empty() || allowed.contains(&cpu)) {
                continue;
            }
            let ticks: Vec<f64> = ticks
                .split_whitespace()
                .map(|t| t.parse().ok())
                .collect::<Option<_>>()?;
            let tick = |k: usize| ticks.get(k).copied();
            busy += tick(0)? + tick(1)? + tick(2)?;
            steal += tick(7).unwrap_or(0.0);
            found = true;
        }
        if !found {
            return None;
        }
        // After the command's closing parenthesis: state (field 3) ...
        // utime (14), stime (15).
        let fields: Vec<&str> = own.rsplit_once(')')?.1.split_whitespace().collect();
        let own: f64 =
            fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        Some(CpuTimes {
            busy_s: busy / hz,
            steal_s: steal / hz,
            own_s: own / hz,
            at,
        })
    }

    /// Cores' worth of CPU time other programs took between `self` and
    /// `later` on the CPUs this process may run on (their busy time less
    /// this process's, and the hypervisor's steal), on average over the
    /// time between; `None` where less than half a second passed (the
    /// counts tick in hundredths).
    pub fn others_until(&self, later: &CpuTimes) -> Option<f64> {
        let wall = later.at.duration_since(self.at).as_secs_f64();
        if wall < 0.5 {
            return None;
        }
        let others = (later.busy_s - self.busy_s) - (later.own_s - self.own_s);
        let steal = later.steal_s - self.steal_s;
        Some((others.max(0.0) + steal.max(0.0)) / wall)
    }
}

/// The CPUs this process may run on (`sched_getaffinity`); empty where
/// they cannot be read.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is an empty set, and sched_getaffinity
    // writes at most its size into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// The CPU's model name from the text of `/proc/cpuinfo`, if it has one.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|line| line.split(':').next().map(str::trim) == Some("model name"))
        .and_then(|line| line.split_once(':'))
        .map(|(_, name)| name.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|name| !name.is_empty())
}

/// Bytes per second copied by `threads` threads at once, each copying its
/// own buffer of `bytes` into another (both touched first, so that no
/// page faults are timed). A byte counts once (read and written).
pub fn copy_bandwidth(threads: usize, bytes: usize, rounds: &Rounds) -> Result<(f64, u32)> {
    let threads = threads.max(1);
    let len = (bytes / 8).max(1);
    let mut buffers: Vec<(Vec<u64>, Vec<u64>)> = (0..threads)
        .map(|t| {
            let mut src = vec![0u64; len];
            fill_pattern(&mut src, t as u64);
            (src, vec![1u64; len])
        })
        .collect();
    median_of_rounds(rounds, || {
        let barrier = Barrier::new(threads);
        let seconds = std::thread::scope(|scope| {
            let handles: Vec<_> = buffers
                .iter_mut()
                .map(|(src, dst)| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        let start = Instant::now();
                        dst.copy_from_slice(src);
                        std::hint::black_box(&dst);
                        start.elapsed().as_secs_f64()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(f64::NAN))
                .fold(0.0f64, f64::max)
        });
        Ok((threads * len * 8) as f64 / seconds)
    })
}

/// A transfer lane's copy as the executor makes it on the CPU backend:
/// a job on the lane's thread that clones a tensor of `bytes` (a new
/// buffer from the allocator, then the copy), waited for by the caller,
/// which then drops the copy. The tensors copied take turns from a set
/// of `set_bytes` in all, so that with a set larger than the caches the
/// source comes from memory, as a tensor written long before its copy
/// does. Returns bytes per second, median of rounds.
pub fn lane_copy_bandwidth(
    lane: &Lane,
    bytes: usize,
    set_bytes: usize,
    rounds: &Rounds,
) -> Result<(f64, u32)> {
    let len = (bytes / 4).max(1);
    let sources: Vec<Arc<Data>> = (0..(set_bytes / bytes.max(1)).max(1))
        .map(|k| {
            let mut values = vec![0f32; len];
            super::fill_pattern_f32(&mut values, 100 + k as u64);
            Arc::new(Data::F32(values))
        })
        .collect();
    let mut turn = 0;
    median_of_rounds(rounds, || {
        let source = sources[turn % sources.len()].clone();
        turn += 1;
        let start = Instant::now();
        let pending = lane
            .issue(move || Ok(Some(source.as_ref().clone())))
            .map_err(|e| Error::Internal(e.to_string()))?;
        let (copy, _) = pending.wait().map_err(|e| Error::Internal(e.to_string()))?;
        let seconds = start.elapsed().as_secs_f64();
        drop(copy);
        Ok((len * 4) as f64 / seconds)
    })
}

/// The fixed cost of one lane copy as training meets it, where copies
/// queue on their lane behind each other: one-value copies issued back
/// to back, each round's time per copy from the lane's own clock, from
/// the end of its first copy to the end of its last (so without the
/// lane's wake-up for the first); the median over the rounds of
/// [`latency_rounds`]. Timed one at a time instead, each copy waits for
/// the lane's thread to wake, which on an idle virtual machine took
/// 60-80 µs against about 2 µs queued (`docs/profile.md`).
pub fn lane_latency(lane: &Lane, requests: u32) -> Result<f64> {
    let source = Arc::new(Data::F32(vec![1.0]));
    let (rounds, batch) = latency_rounds(requests);
    let mut seconds = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        let pending = (0..batch)
            .map(|_| {
                let source = source.clone();
                lane.issue(move || Ok(Some(source.as_ref().clone())))
                    .map_err(|e| Error::Internal(e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut ends = Vec::with_capacity(batch);
        for copy in pending {
            let (_, span) = copy.wait().map_err(|e| Error::Internal(e.to_string()))?;
            ends.push(span.end_s);
        }
        seconds.push(match ends.as_slice() {
            [first, .., last] => (last - first) / (batch - 1) as f64,
            // One copy a round: its whole round trip.
            _ => start.elapsed().as_secs_f64(),
        });
    }
    Ok(super::median(&mut seconds))
}

/// The rounds [`lane_latency`] times for `requests` copies, and the
/// copies of each: at least [`MIN_LATENCY_ROUNDS`] rounds where there
/// are copies enough, at most [`LATENCY_BATCH`] copies a round, and
/// `requests` rounded up to whole rounds.
pub fn latency_rounds(requests: u32) -> (usize, usize) {
    let requests = requests.max(1) as usize;
    let batch = (requests / MIN_LATENCY_ROUNDS).clamp(1, LATENCY_BATCH);
    (requests.div_ceil(batch), batch)
}

/// The most copies a round of [`lane_latency`] queues at once.
pub const LATENCY_BATCH: usize = 50;

/// The fewest rounds [`lane_latency`] takes its median over, where it
/// has copies enough.
pub const MIN_LATENCY_ROUNDS: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_programs_time_is_the_allowed_cpus_less_this_process() {
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        let at = Instant::now();
        let own = |utime: u64, stime: u64| {
            format!("4242 (a (b) c) R 1 1 1 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0")
        };
        // Two CPUs, the process allowed on cpu1 alone; interrupt time
        // (the sixth and seventh counts) is not counted.
        let stat = |user: u64, steal: u64| {
            format!(
                "cpu  9999 0 100 5000 0 7 7 {steal} 0 0\ncpu0 {} 0 0 0 0 0 0 0 0 0\n\
                 cpu1 {user} 0 100 5000 0 70 70 {steal} 0 0\nintr 1 2\n",
                user * 3
            )
        };
        let before = CpuTimes::parse(&stat(1000, 10), &own(50, 10), &[1], at).unwrap();
        let later = CpuTimes::parse(
            &stat(1000 + 3 * hz, 10 + hz / 2),
            &own(50 + 2 * hz, 10),
            &[1],
            at + std::time::Duration::from_secs(2),
        )
        .unwrap();
        // 3 s of busy time on cpu1, 2 of them this process's, and 0.5 s
        // stolen, over 2 s: 0.75 of a core.
        let others = before.others_until(&later).unwrap();
        assert!((others - 0.75).abs() < 1e-9, "{others}");
        // Over both CPUs (the affinity unknown): cpu0's 9 s more.
        let all = |text: &str, own: &str, at| CpuTimes::parse(text, own, &[], at).unwrap();
        let both = all(&stat(1000, 10), &own(50, 10), at).others_until(&all(
            &stat(1000 + 3 * hz, 10 + hz / 2),
            &own(50 + 2 * hz, 10),
            at + std::time::Duration::from_secs(2),
        ));
        assert!((both.unwrap() - 5.25).abs() < 1e-9, "{both:?}");
        // Under half a second apart the ticks say too little.
        assert!(before.others_until(&before).is_none());
        assert!(CpuTimes::parse("intr 1 2\n", &own(1, 1), &[], at).is_none());
        assert!(CpuTimes::parse(&stat(1, 1), "4242 (x) R 1", &[], at).is_none());
        assert!(!allowed_cpus().is_empty());
        assert!(CpuTimes::now().is_some(), "this test runs on Linux");
    }

    const MEMINFO: &str = "MemTotal:       24684108 kB\nMemFree:         5520000 kB\n\
                           MemAvailable:   23595000 kB\nBuffers:          100 kB\n";

    #[test]
    fn meminfo_is_read_in_bytes() {
        let info = parse_meminfo(MEMINFO, Path::new("/proc/meminfo")).unwrap();
        assert_eq!(info.total_bytes, 24684108 * 1024);
        assert_eq!(info.available_bytes, 23595000 * 1024);
    }

    #[test]
    fn bad_meminfo_names_the_file_field_and_value() {
        let path = Path::new("meminfo.txt");
        let missing = parse_meminfo("MemFree: 1 kB\n", path).unwrap_err();
        assert_eq!(missing.to_string(), "meminfo.txt: MemTotal: is missing");
        let text = "MemTotal: lots kB\nMemAvailable: 1 kB\n";
        let garbled = parse_meminfo(text, path).unwrap_err().to_string();
        assert!(garbled.contains("MemTotal") && garbled.contains("\"lots kB\""));
        let text = "MemTotal: 10 MB\nMemAvailable: 1 kB\n";
        let unit = parse_meminfo(text, path).unwrap_err().to_string();
        assert!(unit.contains("unknown unit \"MB\""), "{unit}");
        let text = "MemTotal: 0 kB\nMemAvailable: 1 kB\n";
        assert!(parse_meminfo(text, path).is_err());
    }

    #[test]
    fn cpu_model_is_the_first_model_name() {
        let text = "processor\t: 0\nmodel name\t: AMD  EPYC 7B13\nflags\t: fpu\n\
                    processor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(cpu_model(text).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(cpu_model("processor : 0\n"), None);
        assert_eq!(cpu_model("model name :   \n"), None);
    }

    #[test]
    fn latency_rounds_cover_the_requests() {
        assert_eq!(latency_rounds(200), (4, 50));
        assert_eq!(latency_rounds(50), (4, 16));
        assert_eq!(latency_rounds(2), (2, 1));
        assert_eq!(latency_rounds(0), (1, 1));
        for requests in 1..500 {
            let (rounds, batch) = latency_rounds(requests);
            assert!(
                rounds * batch >= requests as usize && (rounds - 1) * batch < requests as usize
            );
            assert!(batch <= LATENCY_BATCH);
        }
    }

    #[test]
    fn copies_and_lanes_give_positive_rates() {
        let rounds = Rounds::tiny();
        let (rate, n) = copy_bandwidth(2, 1 << 16, &rounds).unwrap();
        assert!(rate > 0.0 && rate.is_finite() && n >= 1);
        let lane = Lane::start("measure-test", Instant::now()).unwrap();
        let (rate, _) = lane_copy_bandwidth(&lane, 1 << 16, 1 << 18, &rounds).unwrap();
        assert!(rate > 0.0 && rate.is_finite());
        let latency = lane_latency(&lane, 3).unwrap();
        assert!(latency > 0.0 && latency.is_finite());
    }
}

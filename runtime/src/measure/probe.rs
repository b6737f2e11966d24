//! The probe: a fixed piece of CPU work, timed at several points of a
//! measurement and again around a training run compared with its
//! prediction (`Profile::steadiness`).
//!
//! A shared machine does not run at one speed: on a 2-core VM with
//! nothing else running in it, this probe timed back to back took 21.4
//! to 29.4 ms. A profile measured while another program took the cores
//! carries that program's share in every figure, and a prediction
//! compared with a run made at another speed misses by the
//! difference. The probe tells both apart: its spread over a
//! measurement says how steady the machine was while the figures were
//! taken, and its time around a run against its time in the profile says
//! how much faster or slower the machine is now than when it was
//! profiled.
//!
//! Each run of it does what training does most, at sizes that take a
//! few milliseconds each: a forward SpMM over an R-MAT graph's block
//! ([`PROBE_SCALE`], [`PROBE_WIDTH`] floats a row), a GEMM of
//! [`GEMM_ROWS`] rows at 128 by 128, and a copy of [`COPY_BYTES`]
//! between two buffers, on the rayon pool's threads.

use std::time::Instant;

use fateplan_kernels::{dense, sparse, Block, Init};
use fateplan_planner::profile::{ProbePoint, Steadiness};
use fateplan_planner::units::count;
use rayon::prelude::*;

use super::{fill_pattern, fill_pattern_f32, gather, median};
use crate::{Error, Result};

/// The probe's name and version, recorded with its times: change it
/// with any change to the work a run does.
pub const PROBE: &str = "spmm-gemm-copy/1";

/// R-MAT scale of the SpMM's graph (65,536 rows, 16 edges a node and a
/// self-loop).
pub const PROBE_SCALE: u32 = 16;
/// Floats a row of the SpMM.
pub const PROBE_WIDTH: usize = 64;
/// Rows of the GEMM (`GEMM_ROWS x 128` times `128 x 128`).
pub const GEMM_ROWS: usize = 16_384;
const GEMM_WIDTH: usize = 128;
/// Bytes the copy moves.
pub const COPY_BYTES: usize = 32 << 20;
/// Runs timed at a point; the point's time is their median.
pub const RUNS_A_POINT: usize = 3;

/// The probe's data, and its points' times so far.
pub struct Probe {
    block: Block,
    src: Vec<f32>,
    out: Vec<f32>,
    x: Vec<f32>,
    w: Vec<f32>,
    z: Vec<f32>,
    from: Vec<u64>,
    to: Vec<u64>,
    points: Vec<ProbePoint>,
}

impl Probe {
    /// Builds the probe's data (a fraction of a second) and runs it once
    /// to warm up.
    pub fn new() -> Result<Probe> {
        let block = gather::rmat_block(PROBE_SCALE)?;
        let rows = block.row_start.len() - 1;
        let mut src = vec![0.0f32; rows * PROBE_WIDTH];
        fill_pattern_f32(&mut src, 0x9_0be);
        let mut x = vec![0.0f32; GEMM_ROWS * GEMM_WIDTH];
        fill_pattern_f32(&mut x, 0x9_0bf);
        let mut w = vec![0.0f32; GEMM_WIDTH * GEMM_WIDTH];
        fill_pattern_f32(&mut w, 0x9_0c0);
        let mut from = vec![0u64; COPY_BYTES / 8];
        fill_pattern(&mut from, 0x9_0c1);
        let mut probe = Probe {
            out: vec![0.0f32; rows * PROBE_WIDTH],
            z: vec![0.0f32; GEMM_ROWS * GEMM_WIDTH],
            to: vec![0u64; from.len()],
            block,
            src,
            x,
            w,
            from,
            points: Vec::new(),
        };
        probe.run()?;
        Ok(probe)
    }

    /// One run: the SpMM, the GEMM and the copy, in turn.
    fn run(&mut self) -> Result<()> {
        let failed = |e: fateplan_kernels::Error| Error::Internal(format!("the probe: {e}"));
        sparse::spmm(
            self.block.as_ref(),
            &self.src,
            PROBE_WIDTH,
            Init::Zero,
            &mut self.out,
        )
        .map_err(failed)?;
        dense::matmul_rows(
            &self.x,
            GEMM_ROWS,
            GEMM_WIDTH,
            &self.w,
            GEMM_WIDTH,
            &mut self.z,
        )
        .map_err(failed)?;
        let chunk = (1 << 20) / 8;
        self.to
            .par_chunks_mut(chunk)
            .zip(self.from.par_chunks(chunk))
            .for_each(|(to, from)| to.copy_from_slice(from));
        Ok(())
    }

    /// Times [`RUNS_A_POINT`] runs and returns their median seconds,
    /// which it records as a point before `before` (what comes next).
    pub fn point(&mut self, before: &str) -> Result<f64> {
        let mut times = Vec::with_capacity(RUNS_A_POINT);
        for _ in 0..RUNS_A_POINT {
            let started = Instant::now();
            self.run()?;
            times.push(started.elapsed().as_secs_f64());
        }
        let seconds = median(&mut times);
        if !(seconds.is_finite() && seconds > 0.0) {
            return Err(Error::Internal(format!(
                "the probe took {seconds} s: the timer did not advance"
            )));
        }
        self.points.push(ProbePoint {
            before: before.to_string(),
            seconds,
        });
        Ok(seconds)
    }

    /// The points timed so far, as a profile records them (at the rayon
    /// pool's thread count).
    pub fn steadiness(&self) -> Steadiness {
        Steadiness {
            probe: PROBE.to_string(),
            threads: rayon::current_num_threads() as u32,
            points: self.points.clone(),
            other_cores: None,
        }
    }
}

/// Whether the probe of this build, at the rayon pool's threads, times
/// what `profiled` timed: `Err` with the reason where it does not (the
/// profile's probe is another, or ran on other threads).
pub fn comparable(profiled: &Steadiness) -> std::result::Result<(), String> {
    let threads = rayon::current_num_threads() as u32;
    if profiled.probe != PROBE {
        return Err(format!(
            "the profile's probe is {:?}, this build's {PROBE:?}",
            profiled.probe
        ));
    }
    if profiled.threads != threads {
        return Err(format!(
            "the profile's probe ran on {}, this run has {}",
            count(u64::from(profiled.threads), "thread"),
            count(u64::from(threads), "thread")
        ));
    }
    Ok(())
}

/// `points` timed now against `profiled`'s ([`comparable`] first);
/// `None` without points.
pub fn drift(profiled: &Steadiness, points: &[ProbePoint]) -> Option<Drift> {
    if points.is_empty() {
        return None;
    }
    let mut now: Vec<f64> = points.iter().map(|p| p.seconds).collect();
    let (profiled_s, now_s) = (profiled.median_s(), median(&mut now));
    Some(Drift {
        profiled_s,
        now_s,
        ratio: now_s / profiled_s,
    })
}

/// The probe built, timed at `points` points labelled `before`, and
/// dropped (its data are about 120 MiB): their times.
pub fn time_points(points: usize, before: &str) -> Result<Vec<ProbePoint>> {
    let mut probe = Probe::new()?;
    for _ in 0..points {
        probe.point(before)?;
    }
    Ok(probe.points)
}

/// The probe's time now against its time when the profile was measured.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Drift {
    /// The median of the profile's points.
    pub profiled_s: f64,
    /// The median of the points timed now.
    pub now_s: f64,
    /// `now_s / profiled_s`: above 1, the machine runs the probe slower
    /// than when it was profiled.
    pub ratio: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_recorded_in_order_and_compare_with_the_same_probe_alone() {
        let mut probe = Probe::new().unwrap();
        let first = probe.point("a").unwrap();
        let second = probe.point("b").unwrap();
        let steadiness = probe.steadiness();
        let points: Vec<(&str, f64)> = steadiness
            .points
            .iter()
            .map(|p| (p.before.as_str(), p.seconds))
            .collect();
        assert_eq!(points, [("a", first), ("b", second)]);
        assert_eq!(steadiness.probe, PROBE);
        assert!(first > 0.0 && first < 10.0, "{first}");
        comparable(&steadiness).unwrap();

        let now = time_points(3, "c").unwrap();
        assert_eq!(now.len(), 3);
        assert!(now.iter().all(|p| p.before == "c" && p.seconds > 0.0));
        assert_eq!(drift(&steadiness, &[]), None);
        // The median of the points now over the profile's.
        let at = |ms: f64| ProbePoint {
            before: "d".into(),
            seconds: ms / 1e3,
        };
        let profiled = Steadiness {
            points: vec![at(10.0), at(20.0)],
            ..steadiness.clone()
        };
        let d = drift(&profiled, &[at(30.0), at(6.0), at(45.0)]).unwrap();
        assert_eq!((d.profiled_s, d.now_s), (0.015, 0.03));
        assert!((d.ratio - 2.0).abs() < 1e-12, "{d:?}");
        let other = Steadiness {
            probe: "other/1".into(),
            ..steadiness.clone()
        };
        let why = comparable(&other).unwrap_err();
        assert!(why.contains("\"other/1\""), "{why}");
        let threads = Steadiness {
            threads: steadiness.threads + 1,
            ..steadiness
        };
        let why = comparable(&threads).unwrap_err();
        assert!(why.contains("threads"), "{why}");
    }
}

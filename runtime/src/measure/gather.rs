//! The plain gather's time per edge against the bytes its rows span.
//!
//! An aggregation gathers one source row per edge. Where all the rows it
//! gathers from stay in the caches, an edge costs a fraction of what it
//! costs where they do not: on the development machine the aggregations
//! of a GCN of 16 hidden (16 and 8 wide) took 3.2 ns an edge on a graph
//! of 4,096 rows and 5.9 ns on one of 262,144 (`docs/profile.md`, "The
//! gathers' working set, and the loss's time a row"). A profile's fits
//! of the aggregations are made on one graph, so they carried that
//! graph's share of misses to every graph.
//!
//! [`gather_curve`] times the forward SpMM alone (as the GCN's
//! aggregations run it: rows by destination, a weight per destination
//! and per source row, every row a self-loop) over R-MAT graphs whose
//! rows of `width` floats span a range of bytes, at a few widths. The
//! planner reads an operator's time per edge from those points at the
//! bytes and width it gathers from (`DeviceProfile::gather_curve`).

use std::time::Instant;

use fateplan_kernels::{sparse, Block, Csr, Init, Weighting};
use fateplan_planner::profile::GatherPoint;

use super::{fill_pattern_f32, median, median_of_rounds, Rounds};
use crate::generate::RmatSpec;
use crate::{Error, Result};

/// Sweeps over the points ([`gather_curve`]).
pub const SWEEPS: u32 = 3;

/// The least time a round takes: small graphs repeat their product.
const ROUND_S: f64 = 2e-3;

/// Edges drawn a node, as the profile's own R-MAT graph.
pub const EDGE_FACTOR: u32 = 16;

/// The points to time: each width on each graph.
#[derive(Debug, Clone, PartialEq)]
pub struct GatherSizes {
    /// Floats a row.
    pub widths: Vec<u32>,
    /// R-MAT scales of the graphs, increasing: the last is the profile's
    /// own R-MAT graph's, whose largest working sets the curve's shares
    /// are taken against.
    pub scales: Vec<u32>,
}

/// The smallest graph timed: 4,096 rows, 16 tasks of the gather's rows
/// (a graph of 1,024 rows is 4, which two threads share unevenly: at 8
/// wide its edges took 1.5-1.6 times as long as at 4,096 rows).
pub const FIRST_SCALE: u32 = 12;

/// Widths of a profile's curve: a GCN's narrowest layers (its classes),
/// hidden widths, and the wide layers of the profile's own GCN. Wider
/// rows take the widest's shares.
pub const CURVE_WIDTHS: [u32; 3] = [8, 32, 128];

impl GatherSizes {
    /// [`CURVE_WIDTHS`] on R-MAT graphs of every second scale from
    /// [`FIRST_SCALE`] up to `top` (the profile's own graph), `top`
    /// included.
    pub fn up_to(top: u32) -> GatherSizes {
        let mut scales: Vec<u32> = (FIRST_SCALE..top).step_by(2).collect();
        scales.push(top);
        GatherSizes {
            widths: CURVE_WIDTHS.to_vec(),
            scales,
        }
    }
}

/// Times [`sparse::spmm`] at every width on every graph of `sizes`, each
/// graph R-MAT of `EDGE_FACTOR` edges a node and a self-loop a node: in
/// `SWEEPS` sweeps over all the points, each point the median of
/// `rounds` in a sweep, and its figure the median over the sweeps (a
/// burst of other work on a shared machine then moves one sweep's figure,
/// not the point's). `progress` is called after each sweep of a point.
/// Points come in increasing order of bytes, then width, as a profile
/// lists them.
pub fn gather_curve(
    sizes: &GatherSizes,
    rounds: &Rounds,
    mut progress: impl FnMut(&GatherPoint),
) -> Result<Vec<GatherPoint>> {
    let blocks = sizes
        .scales
        .iter()
        .map(|&scale| Ok((scale, rmat_block(scale)?)))
        .collect::<Result<Vec<_>>>()?;
    let mut sweeps: Vec<Vec<GatherPoint>> = Vec::new();
    for _ in 0..SWEEPS {
        let mut sweep = Vec::new();
        for (scale, block) in &blocks {
            for &width in &sizes.widths {
                let point = time_point(block, *scale, width, rounds)?;
                progress(&point);
                sweep.push(point);
            }
        }
        sweeps.push(sweep);
    }
    let mut points: Vec<GatherPoint> = (0..sweeps[0].len())
        .map(|k| {
            let mut seconds: Vec<f64> = sweeps.iter().map(|s| s[k].seconds_per_edge).collect();
            GatherPoint {
                seconds_per_edge: median(&mut seconds),
                ..sweeps[0][k]
            }
        })
        .collect();
    points.sort_by_key(|p| (p.set_bytes, p.width));
    Ok(points)
}

/// One point: the median seconds an edge of the SpMM over `block` (of
/// scale `scale`) at `width`.
fn time_point(block: &Block, scale: u32, width: u32, rounds: &Rounds) -> Result<GatherPoint> {
    let rows = block.row_start.len() - 1;
    let w = width as usize;
    let mut src = vec![0.0f32; rows * w];
    fill_pattern_f32(&mut src, u64::from(scale) << 8 | u64::from(width));
    let mut out = vec![0.0f32; rows * w];
    let edges = block.columns.len();
    let mut spmm = || {
        sparse::spmm(block.as_ref(), &src, w, Init::Zero, &mut out)
            .map_err(|e| Error::Internal(format!("gather curve: {e}")))
    };
    // A round of small graphs repeats the product, so that the pool's
    // start and the clock's grain stay small beside it.
    let started = Instant::now();
    spmm()?;
    let once = started.elapsed().as_secs_f64();
    let repeats = (ROUND_S / once.max(1e-9)).ceil().clamp(1.0, 1e4) as u32;
    let (seconds, _) = median_of_rounds(rounds, || {
        let started = Instant::now();
        for _ in 0..repeats {
            spmm()?;
        }
        Ok(started.elapsed().as_secs_f64() / (f64::from(repeats) * edges as f64))
    })?;
    Ok(GatherPoint {
        width,
        set_bytes: (rows * w * 4) as u64,
        seconds_per_edge: seconds,
    })
}

/// The R-MAT graph of `scale` with a self-loop a node, rows by
/// destination, weighted as the GCN's (`1 / sqrt(d_r · d_c)`).
pub(crate) fn rmat_block(scale: u32) -> Result<Block> {
    let spec = RmatSpec {
        edge_factor: EDGE_FACTOR,
        ..RmatSpec::new(scale)
    };
    let nodes = spec.nodes();
    let (mut src, mut dst) = spec.edge_lists()?;
    src.extend(0..nodes);
    dst.extend(0..nodes);
    let csr = Csr::from_edges(nodes as usize, &src, &dst);
    let degrees: Vec<f32> = (0..csr.rows()).map(|r| csr.row(r).len() as f32).collect();
    let scales: Vec<f32> = degrees.iter().map(|d| 1.0 / d.max(1.0).sqrt()).collect();
    let mut weights = scales.clone();
    weights.extend_from_slice(&scales);
    Ok(Block {
        row_start: csr.row_start,
        columns: csr.columns,
        weights,
        weighting: Weighting::RowColumn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scales_end_at_the_profiles_graph() {
        assert_eq!(GatherSizes::up_to(18).scales, [12, 14, 16, 18]);
        assert_eq!(GatherSizes::up_to(15).scales, [12, 14, 15]);
        assert_eq!(GatherSizes::up_to(12).scales, [12]);
        assert_eq!(GatherSizes::up_to(10).scales, [10]);
    }

    #[test]
    fn points_are_timed_per_edge_in_order_of_bytes() {
        let sizes = GatherSizes {
            widths: vec![32, 8],
            scales: vec![10, 11],
        };
        let mut seen = 0;
        let points = gather_curve(&sizes, &Rounds::tiny(), |_| seen += 1).unwrap();
        assert_eq!(seen, 4 * SWEEPS);
        // 2^10 and 2^11 rows of 8 and 32 floats.
        let at: Vec<(u64, u32)> = points.iter().map(|p| (p.set_bytes, p.width)).collect();
        assert_eq!(
            at,
            [(1 << 15, 8), (1 << 16, 8), (1 << 17, 32), (1 << 18, 32)]
        );
        for p in &points {
            assert!(
                p.seconds_per_edge > 0.0 && p.seconds_per_edge < 1e-3,
                "{p:?}"
            );
        }
    }
}

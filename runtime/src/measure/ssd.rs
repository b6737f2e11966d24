//! The SSD tier's figures, measured through the spill store as the
//! executor's SSD lanes use it: [`SsdTier::put_data`] and
//! [`SsdTier::get_data`] of one f32 tensor at a time through the
//! planner's default staging share ([`STAGING_SHARE_BYTES`]: a tensor
//! larger than it moves in chunks of it, two in flight), each chunk cut
//! into requests that the spill store's io_uring thread keeps in flight
//! (O_DIRECT, crc32c per MiB), in the directory given. The latencies
//! are [`SsdTier::put`] and [`SsdTier::get`] of one aligned block.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Instant;

use crate::exec::{Data, SsdTier};
use crate::spill::{SpillOptions, SpillStore, ALIGN_BYTES};
use crate::{Error, Result};

use super::{fill_pattern, median, median_of_rounds, Rounds};

/// Bytes per latency request: one aligned block.
pub const LATENCY_REQUEST_BYTES: usize = ALIGN_BYTES;

/// The staging share the bandwidths move tensors through: one of the
/// planner's default staging buffers, as a plan's SSD transfers use
/// them (`Executor::ssd_chunk_bytes`).
pub const STAGING_SHARE_BYTES: usize = (fateplan_planner::planner::SSD_STAGING_BYTES
    / fateplan_planner::planner::SSD_STAGING_BUFFERS)
    as usize;

/// What the SSD tier measured.
#[derive(Debug, Clone, PartialEq)]
pub struct SsdFigures {
    /// Free space in the directory before the measurement.
    pub capacity_bytes: u64,
    pub write_bytes_per_s: f64,
    pub read_bytes_per_s: f64,
    pub write_latency_s: f64,
    pub read_latency_s: f64,
    /// Rounds behind each bandwidth's median.
    pub rounds: u32,
    /// The spill store's I/O mode (io_uring or pread/pwrite, O_DIRECT or
    /// buffered, and why).
    pub mode: String,
    /// Whether the store got io_uring and O_DIRECT.
    pub direct: bool,
}

/// How much to move.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SsdSizes {
    /// Bytes of each block (a tensor's size).
    pub block_bytes: usize,
    /// Bytes written and then read per round.
    pub round_bytes: u64,
    /// Small blocks written and read, one at a time, for the latencies.
    pub latency_requests: u32,
}

/// Bytes the file system lets this user write in `dir` (`statvfs`'s
/// available blocks times the fragment size).
pub fn free_bytes(dir: &Path) -> Result<u64> {
    let path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| Error::invalid(dir, "ssd dir", "the path holds a NUL byte"))?;
    // SAFETY: statvfs writes into the zeroed struct we own; `path` is a
    // valid NUL-terminated string for the duration of the call.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stats) } != 0 {
        return Err(Error::io(dir, std::io::Error::last_os_error()));
    }
    Ok((stats.f_bavail as u64).saturating_mul(stats.f_frsize as u64))
}

/// Measures the SSD tier in `dir`, which must exist and be writable. The
/// spill file is deleted afterwards (also on error).
pub fn measure_ssd(dir: &Path, sizes: &SsdSizes, rounds: &Rounds) -> Result<SsdFigures> {
    if !dir.is_dir() {
        return Err(Error::invalid(
            dir,
            "ssd dir",
            "is not a directory (give an existing directory on the SSD to measure)",
        ));
    }
    let capacity_bytes = free_bytes(dir)?;
    // Tensors of whole aligned blocks: only their forms' headers pad.
    let block_bytes = sizes
        .block_bytes
        .max(LATENCY_REQUEST_BYTES)
        .next_multiple_of(ALIGN_BYTES);
    let blocks = sizes.round_bytes.div_ceil(block_bytes as u64).max(1);
    // Each tensor's byte form (its header beside the values) takes its
    // chunks' extents, rounded to ALIGN_BYTES; leave room for the
    // latency blocks and the file's growth steps.
    let header = Data::F32(Vec::new()).byte_form_len();
    let stored = (block_bytes + header).next_multiple_of(ALIGN_BYTES) as u64;
    let needed = blocks * stored + crate::spill::GROW_STEP_BYTES + ALIGN_BYTES as u64;
    if capacity_bytes < needed {
        // `--quick` writes less, unless these are its sizes already.
        let quicker = sizes.round_bytes > super::Sizes::quick().ssd.round_bytes;
        return Err(Error::invalid(
            dir,
            "free space",
            format!(
                "{capacity_bytes} bytes free; the measurement writes {needed} bytes{}",
                if quicker {
                    " (use --quick to write less)"
                } else {
                    ""
                }
            ),
        ));
    }
    let store = SpillStore::open(dir, SpillOptions::with_budget(needed))?;
    let mode = store.mode().clone();
    let result = run(&store, blocks, block_bytes, sizes, rounds);
    let closed = store.close();
    let (write, read, write_latency_s, read_latency_s) = result?;
    closed?;
    Ok(SsdFigures {
        capacity_bytes,
        write_bytes_per_s: write.0,
        read_bytes_per_s: read.0,
        write_latency_s,
        read_latency_s,
        rounds: write.1.min(read.1),
        mode: mode.to_string(),
        direct: mode.uring && mode.direct,
    })
}

type Rate = (f64, u32);

fn run(
    store: &SpillStore,
    blocks: u64,
    block_bytes: usize,
    sizes: &SsdSizes,
    rounds: &Rounds,
) -> Result<(Rate, Rate, f64, f64)> {
    let ssd: &dyn SsdTier = store;
    let tier = |e: crate::exec::ExecError| Error::of_run("ssd tier", e);
    // Not zeros: a virtual disk may compress or deduplicate them.
    let mut words = vec![0u64; block_bytes / 8];
    fill_pattern(&mut words, 0x55d);
    let block: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let tensor = Data::F32(
        block
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    );
    // Rates of the tensor's bytes, as a plan's transfers are priced on
    // them (its form's header and padding are the store's cost).
    let round_bytes = (blocks * tensor.byte_len()) as f64;
    // Each round writes every tensor, then reads every tensor back, then
    // frees them; the write and read times are kept apart.
    let mut read_rates = Vec::new();
    let write = median_of_rounds(rounds, || {
        let start = Instant::now();
        for key in 0..blocks {
            ssd.put_data(key, &tensor, STAGING_SHARE_BYTES)
                .map_err(tier)?;
        }
        let write_s = start.elapsed().as_secs_f64();
        let start = Instant::now();
        for key in 0..blocks {
            let back = ssd.get_data(key, STAGING_SHARE_BYTES).map_err(tier)?;
            if back.byte_len() != tensor.byte_len() {
                return Err(Error::Internal(format!(
                    "ssd tier: key {key} read back {} of {} bytes",
                    back.byte_len(),
                    tensor.byte_len()
                )));
            }
        }
        read_rates.push(round_bytes / start.elapsed().as_secs_f64());
        for key in 0..blocks {
            ssd.remove(key).map_err(tier)?;
        }
        Ok(round_bytes / write_s)
    })?;
    // The first round warmed up (the spill file grew); median_of_rounds
    // dropped its write rate, so drop its read rate too.
    let mut counted = read_rates.split_off(1);
    let read = (median(&mut counted), counted.len() as u32);
    let small = &block[..LATENCY_REQUEST_BYTES];
    let key = blocks;
    let (mut writes, mut reads) = (Vec::new(), Vec::new());
    for _ in 0..sizes.latency_requests.max(1) {
        let start = Instant::now();
        ssd.put(key, small).map_err(tier)?;
        writes.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        ssd.get(key).map_err(tier)?;
        reads.push(start.elapsed().as_secs_f64());
        ssd.remove(key).map_err(tier)?;
    }
    Ok((write, read, median(&mut writes), median(&mut reads)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_measurement_gives_positive_figures_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = SsdSizes {
            block_bytes: 64 << 10,
            round_bytes: 256 << 10,
            latency_requests: 3,
        };
        let figures = measure_ssd(dir.path(), &sizes, &Rounds::tiny()).unwrap();
        for value in [
            figures.write_bytes_per_s,
            figures.read_bytes_per_s,
            figures.write_latency_s,
            figures.read_latency_s,
        ] {
            assert!(value > 0.0 && value.is_finite(), "{figures:?}");
        }
        assert!(figures.capacity_bytes > 0 && figures.rounds >= 1);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere");
        let sizes = SsdSizes {
            block_bytes: 4096,
            round_bytes: 4096,
            latency_requests: 1,
        };
        let error = measure_ssd(&missing, &sizes, &Rounds::tiny()).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("nowhere") && text.contains("not a directory"),
            "{text}"
        );
    }
}

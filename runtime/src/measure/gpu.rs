//! The GPU: found, described, and its pinned copies timed.
//!
//! [`measure_gpu`] probes device 0 (`crate::cuda::probe`, which never
//! panics). Without one it reports [`GpuOutcome::Skipped`] with the probe's
//! reason, and the profile describes the CPU backend. With one it reads
//! the device's memory and name from the driver and times pinned copies
//! each way (`crate::cuda::copy_rates`); the compute figures are then
//! measured as on the CPU, by training on the CUDA backend
//! (`super::compute`), and the profile describes the GPU (`device.kind =
//! gpu`), the host tier getting all of the host's RAM.

use crate::cuda;

/// What [`measure_gpu`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuOutcome {
    /// No GPU was measured, and why (one line).
    Skipped(String),
    Measured(GpuFigures),
}

/// A GPU's figures, in the profile's units.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuFigures {
    pub model: String,
    /// Devices found.
    pub count: u32,
    pub hbm_bytes: u64,
    /// Pinned host memory to the device.
    pub h2d_bytes_per_s: f64,
    pub d2h_bytes_per_s: f64,
    pub pcie_latency_s: f64,
    /// How each figure was measured, keyed by the profile's dotted field.
    pub sources: Vec<(&'static str, String)>,
}

/// What every skipped GPU's reason ends with.
pub const CPU_FIGURES: &str = "the device figures are the CPU backend's";

/// Describes device 0 and times its pinned copies of `copy_bytes`, or
/// says why no GPU was measured.
pub fn measure_gpu(copy_bytes: usize, rounds: u32) -> GpuOutcome {
    let info = match cuda::probe(0) {
        Ok(info) => info,
        Err(e) => return GpuOutcome::Skipped(format!("no GPU: skipped ({e}); {CPU_FIGURES}")),
    };
    let copies = match cuda::copy_rates(0, copy_bytes, rounds) {
        Ok(copies) => copies,
        Err(e) => {
            return GpuOutcome::Skipped(format!(
                "GPU {} found, but its copies could not be timed ({e}): skipped; {CPU_FIGURES}",
                info.name
            ))
        }
    };
    let copy = |way: &str, buffer: &str| {
        format!(
            "{way} copies of {} MiB {buffer} a pinned host buffer on a stream of their own \
             (cudarc, cuMemcpy*Async), issue to the end of the stream's wait, median of {} after \
             one left out",
            copies.bytes >> 20,
            copies.rounds
        )
    };
    GpuOutcome::Measured(GpuFigures {
        model: info.name.clone(),
        count: info.devices.max(1) as u32,
        hbm_bytes: info.total_bytes,
        h2d_bytes_per_s: copies.h2d_bytes_per_s,
        d2h_bytes_per_s: copies.d2h_bytes_per_s,
        pcie_latency_s: copies.latency_s,
        sources: vec![
            (
                "device.hbm_bytes",
                format!(
                    "the driver's total memory of {} (cuDeviceTotalMem)",
                    info.name
                ),
            ),
            (
                "device.count_max",
                "the devices the CUDA driver lists (cuDeviceGetCount)".into(),
            ),
            ("pcie.h2d_bytes_per_s", copy("host-to-device", "from")),
            ("pcie.d2h_bytes_per_s", copy("device-to-host", "into")),
            (
                "pcie.latency_s",
                format!(
                    "half the median time of a one-value copy to the device and back (pinned, \
                     each way waited for), of {}",
                    copies.rounds
                ),
            ),
        ],
    })
}

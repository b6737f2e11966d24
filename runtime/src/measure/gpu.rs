//! The GPU's figures: the hook where the CUDA backend's measurements go.
//!
//! The CUDA backend (`crate::cuda`) trains, but `fateplan profile` does
//! not measure a GPU yet: [`measure_gpu`] probes for one and says why it
//! skipped (no driver, no device, ..., or a GPU found but not measured).
//! It is where `fateplan profile` will measure, per device: HBM capacity (free and total from the
//! driver), device-memory bandwidth (a copy kernel), pinned host-to-device
//! and device-to-host copy rates and their per-copy latency (one stream
//! each way, pinned buffers of tensor size), the f32 GEMM rate (cuBLAS on
//! the GNN's tall-skinny shapes) and the SpMM gather rate (the CUDA
//! kernels on the same R-MAT graph as the CPU backend's figure), and the
//! launch overhead of an empty kernel. With [`GpuOutcome::Measured`] the
//! profile describes the GPU (`device.kind = gpu`) and the host tier gets
//! all of the host's RAM; until then it reports [`GpuOutcome::Skipped`]
//! and the profile describes the CPU backend.

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
    pub hbm_bytes_per_s: f64,
    pub dense_flops_per_s: f64,
    pub sparse_bytes_per_s: f64,
    pub op_overhead_s: f64,
    /// Pinned host memory to the device.
    pub h2d_bytes_per_s: f64,
    pub d2h_bytes_per_s: f64,
    pub pcie_latency_s: f64,
    /// How each figure was measured, keyed by the profile's dotted field.
    pub sources: Vec<(&'static str, String)>,
}

/// What every skipped GPU's reason ends with.
pub const CPU_FIGURES: &str = "the device figures are the CPU backend's";

/// Measures the GPU: the hook for the CUDA backend (see the module docs).
/// It probes for device 0 (`crate::cuda::probe`, which never panics) and
/// skips with the probe's reason; a GPU found is not measured yet, and
/// the line says so.
pub fn measure_gpu() -> GpuOutcome {
    let why = match crate::cuda::probe(0) {
        Err(e) => format!("no GPU: skipped ({e}); {CPU_FIGURES}"),
        Ok(info) => format!(
            "GPU {} found, but `fateplan profile` does not measure GPUs yet: skipped; \
             {CPU_FIGURES}",
            info.name
        ),
    };
    GpuOutcome::Skipped(why)
}

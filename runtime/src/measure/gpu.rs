//! The GPU's figures: the hook where a CUDA backend's measurements go.
//!
//! Once a CUDA backend exists, [`measure_gpu`] is where `fateplan
//! profile` measures, per device: HBM capacity (free and total from the
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

/// Why the GPU figures are absent from this build's profiles.
pub const NO_GPU: &str = "no GPU: skipped (this build has no CUDA backend; \
                          the device figures are the CPU backend's)";

/// Measures the GPU: the hook for the CUDA backend (see the module docs).
/// This build has no CUDA backend, so it reports [`NO_GPU`].
pub fn measure_gpu() -> GpuOutcome {
    GpuOutcome::Skipped(NO_GPU.to_string())
}

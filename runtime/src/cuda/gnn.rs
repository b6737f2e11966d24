//! The CUDA backend's operators: the same operators, names, weights and
//! dropout masks as the CPU backend ([`crate::cpu`], through
//! [`crate::gnn`]), computed by the kernels of `kernels/cuda/` and cuBLAS
//! on the compute stream. Every sum runs in a fixed order (no
//! floating-point atomics), so a run is deterministic on one GPU and every
//! plan gives the same bits there; against the CPU the results differ by
//! rounding (cuBLAS's GEMM order, fused multiply-adds, `expf`).

use std::sync::{Arc, Mutex};

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{Gemm, GemmConfig};
use cudarc::driver::{CudaView, CudaViewMut, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};

use fateplan_kernels::dropout::Dropout;
use fateplan_kernels::gat::Heads;
use fateplan_kernels::REDUCE_ROWS;
use fateplan_planner::gnn::GnnModel;
use fateplan_planner::workload::{Op, Tensor};

use crate::exec::data::Data;
use crate::exec::{Backend, ExecError, Mover};
use crate::gnn::{
    arity, running_sum, GnnBackend, GraphInput, Hyper, Metrics, Mode, Model, Name, SITE_ATTENTION,
    SITE_HIDDEN, SITE_INPUT,
};

use super::device::{
    cuda_error, device_data, CudaMover, CudaOptions, DeviceBuf, Gpu, GpuBlock, GpuTensor,
};

const INIT_ZERO: i32 = 0;
const INIT_FROM: i32 = 1;
const INIT_OUT: i32 = 2;
/// Blocks of the hub-column sort (`csc_order_wide_u32`), each striding
/// over the columns.
const WIDE_SORT_BLOCKS: usize = 4096;

/// Fewest edges of an aggregation's segment (`kernels/cuda/sparse.cu`):
/// no thread sums more of a row's edges than a segment holds.
const SEGMENT_EDGES: u64 = 256;
/// Most bytes of an aggregation's segment sums (`carry`): a block of more
/// edges gets longer segments.
const CARRY_BYTES: u64 = 64 << 20;

/// How many edges a segment of an aggregation over `nnz` edges of rows
/// `width` wide holds, and how many segments there are: segments of
/// [`SEGMENT_EDGES`], or longer where their sums would pass
/// [`CARRY_BYTES`].
fn segments(nnz: u64, width: u64) -> (u64, u64) {
    let seg = SEGMENT_EDGES.max((nnz * width * 4).div_ceil(CARRY_BYTES));
    (seg, nnz.div_ceil(seg))
}

/// Launches kernel `$name` over `$n` elements on the compute stream.
/// Every argument must outlive the statement (bind scalars and views to
/// variables first): the launch reads them through pointers.
macro_rules! launch {
    ($gpu:expr, $name:literal, $n:expr, [$($arg:expr),* $(,)?]) => {{
        let n: u64 = $n;
        if n > 0 {
            let function = $gpu.function($name)?;
            let mut builder = $gpu.compute.launch_builder(&function);
            $( builder.arg($arg); )*
            if $gpu.timing() {
                builder.record_kernel_launch(Gpu::TIMING_EVENTS);
            }
            // SAFETY: the arguments match the kernel's parameters in
            // kernels/cuda (count, order and types), and every buffer
            // holds the elements the kernel indexes for `n`.
            let events =
                unsafe { builder.launch(Gpu::grid(n)) }.map_err(|e| cuda_error($name, e))?;
            $gpu.kernel_time($name, events)?;
        }
    }};
}

/// A device tensor of an operator's input.
fn tensor<'a>(op: &Op, data: &'a Data) -> Result<&'a GpuTensor, ExecError> {
    match data {
        Data::Held(held) => held.get::<GpuTensor>(),
        _ => None,
    }
    .ok_or_else(|| ExecError::Internal(format!("{}: an input is not in device memory", op.name)))
}

fn f32s<'a>(op: &Op, data: &'a Data) -> Result<&'a DeviceBuf<f32>, ExecError> {
    match tensor(op, data)? {
        GpuTensor::F32(buf) => Ok(buf),
        _ => Err(ExecError::Internal(format!(
            "{}: expected f32 data",
            op.name
        ))),
    }
}

fn i64s<'a>(op: &Op, data: &'a Data) -> Result<&'a DeviceBuf<i64>, ExecError> {
    match tensor(op, data)? {
        GpuTensor::I64(buf) => Ok(buf),
        _ => Err(ExecError::Internal(format!(
            "{}: expected i64 data",
            op.name
        ))),
    }
}

fn block<'a>(op: &Op, data: &'a Data) -> Result<&'a GpuBlock, ExecError> {
    match tensor(op, data)? {
        GpuTensor::Block(block) => Ok(block),
        _ => Err(ExecError::Internal(format!(
            "{}: expected a block",
            op.name
        ))),
    }
}

fn f32s_mut<'a>(op: &Op, data: &'a mut Data) -> Result<&'a mut DeviceBuf<f32>, ExecError> {
    let name = &op.name;
    match data {
        Data::Held(held) => match held.get_mut::<GpuTensor>() {
            Some(GpuTensor::F32(buf)) => Ok(buf),
            _ => Err(ExecError::Internal(format!(
                "{name}: a parameter is not f32 device data, or is shared while it is updated"
            ))),
        },
        _ => Err(ExecError::Internal(format!(
            "{name}: a parameter is not in device memory"
        ))),
    }
}

fn out(buf: DeviceBuf<f32>) -> Data {
    device_data(GpuTensor::F32(buf))
}

/// `op`'s first output is not the weight gradient a running sum needs.
fn not_a_gradient(op: &Op) -> ExecError {
    ExecError::Internal(format!(
        "{}: its first output is not an f32 weight gradient on the device",
        op.name
    ))
}

/// Checks that a device buffer holds `len` values.
fn expect_len(op: &Op, what: &str, actual: usize, len: usize) -> Result<(), ExecError> {
    if actual == len {
        Ok(())
    } else {
        Err(ExecError::Internal(format!(
            "{}: {what} holds {actual} values, expected {len}",
            op.name
        )))
    }
}

/// A dropout mask's kernel arguments; no mask is threshold 0.
fn mask_args(mask: Option<Dropout>) -> (u64, u32, f32) {
    mask.map_or((0, 0, 1.0), |d| d.device_params())
}

/// That a block of `nnz` edges can be transposed on the device, whose
/// permutation holds edge ids (and counts a column's edges) in 32 bits: a
/// larger block is refused, not truncated.
fn check_transpose_edges(nnz: usize) -> Result<(), ExecError> {
    if nnz as u64 > u64::from(u32::MAX) {
        return Err(ExecError::invalid(
            "partition block",
            format!(
                "{nnz} edges, more than the CUDA backend transposes (at most {} edges: 32-bit \
                 edge ids); more partitions make smaller blocks",
                u32::MAX
            ),
        ));
    }
    Ok(())
}

/// A block's edges grouped by source column, in edge order.
struct Transpose {
    start: DeviceBuf<u64>,
    perm: DeviceBuf<u32>,
    perm_row: DeviceBuf<u32>,
}

/// A block's transpose and the block's (destination, source) partitions.
type KeptTranspose = ((usize, usize), Arc<Transpose>);

/// The GNN's operators on a GPU.
pub struct CudaGnn {
    gpu: Arc<Gpu>,
    /// Features, labels and blocks until the executor holds them.
    graph: GraphInput,
    model: Model,
    metrics: Metrics,
    /// The train, val and test masks of every row, one byte each.
    masks: [DeviceBuf<u8>; 3],
    /// [`CudaOptions::synchronize_operators`].
    synchronize_operators: bool,
    /// [`CudaOptions::rebuild_transposes`].
    rebuild_transposes: bool,
    /// The last block transposed, by (destination, source) partition, kept
    /// for the next transposed aggregation over the same block: the
    /// workspace allows one transpose, and a different block's replaces
    /// it. With one block (one partition) the transpose is built once.
    kept_transpose: Mutex<Option<KeptTranspose>>,
    /// The partial sum a GCN or SAGE aggregation (forward or transposed)
    /// starts from, when the executor handed its buffer over
    /// ([`Backend::run_owned`]): the operator adds its block into it
    /// (`INIT_OUT`), and rows without edges in the block cost nothing,
    /// instead of every row's sum being copied into a fresh output.
    handed: Option<DeviceBuf<f32>>,
    /// How many aggregations added into a handed-over partial sum.
    added_in_place: u64,
}

/// Where an aggregation's sums start.
enum Start<'a> {
    /// From zero, into a fresh output.
    Zero,
    /// From a partial sum, into a fresh output.
    From(&'a DeviceBuf<f32>),
    /// From the partial sum already in this buffer, the output.
    Into(DeviceBuf<f32>),
}

/// An aggregation's output, its kernels' `init_mode`, and the partial sum
/// they read for `INIT_FROM` ([`CudaGnn::start_sums`]).
type Started<'a> = (DeviceBuf<f32>, i32, Option<&'a DeviceBuf<f32>>);

impl CudaGnn {
    /// Opens the GPU with a device pool capped at `hbm_budget_bytes` (the
    /// plan's device budget) plus the workspace the operators need beyond
    /// what the plan counts, and uploads the masks.
    pub fn new(
        mut graph: GraphInput,
        hyper: Hyper,
        hbm_budget_bytes: u64,
        options: &CudaOptions,
    ) -> Result<CudaGnn, ExecError> {
        let model = Model::new(&mut graph, hyper)?;
        if model.row_ids.is_some() && hyper.dropout > 0.0 {
            // The CUDA kernels key the dropout masks by contiguous rows.
            return Err(ExecError::Kernel(
                "the CUDA backend keys dropout by contiguous rows: a renumbered \
                 (min-cut) share needs dropout 0 there"
                    .into(),
            ));
        }
        let classes = model.classes as i64;
        for (r, (&label, _)) in graph
            .y
            .iter()
            .zip(&model.train_mask)
            .enumerate()
            .filter(|(r, (_, &train))| train || model.val_mask[*r] || model.test_mask[*r])
        {
            if !(0..classes).contains(&label) {
                return Err(ExecError::Kernel(format!(
                    "label {label} of row {r} is out of range for {classes} classes"
                )));
            }
        }
        let workspace = options
            .workspace_bytes
            .unwrap_or_else(|| workspace_bytes(&model));
        let gpu = Gpu::open(options, hbm_budget_bytes.saturating_add(workspace))?;
        let bytes = |mask: &[bool]| mask.iter().map(|&m| u8::from(m)).collect::<Vec<u8>>();
        let masks = [
            gpu.upload(&bytes(&model.train_mask), "the train mask")?,
            gpu.upload(&bytes(&model.val_mask), "the val mask")?,
            gpu.upload(&bytes(&model.test_mask), "the test mask")?,
        ];
        Ok(CudaGnn {
            gpu,
            graph,
            model,
            metrics: Metrics::default(),
            masks,
            synchronize_operators: options.synchronize_operators,
            rebuild_transposes: options.rebuild_transposes,
            kept_transpose: Mutex::new(None),
            handed: None,
            added_in_place: 0,
        })
    }

    /// How many aggregations so far added their block into the partial
    /// sum the executor handed over, rather than into a fresh output.
    pub fn sums_added_in_place(&self) -> u64 {
        self.added_in_place
    }

    /// The most device bytes the pool held so far (plan tensors and
    /// workspaces).
    pub fn device_peak_bytes(&self) -> u64 {
        self.gpu.peak_bytes()
    }

    fn zeros(&self, len: usize, what: &str) -> Result<DeviceBuf<f32>, ExecError> {
        self.gpu.zeros::<f32>(len, what)
    }

    /// `out = x · w (+ out)`: `x` is `rows × k`, `w` `k × n`, row-major.
    #[allow(clippy::too_many_arguments)]
    fn gemm<X: DevicePtr<f32>, W: DevicePtr<f32>, O: DevicePtrMut<f32>>(
        &self,
        x: &X,
        w: &W,
        out: &mut O,
        rows: usize,
        k: usize,
        n: usize,
        accumulate: bool,
    ) -> Result<(), ExecError> {
        self.blas_call(
            cublasOperation_t::CUBLAS_OP_N,
            cublasOperation_t::CUBLAS_OP_N,
            (n, rows, k),
            (w, n),
            (x, k),
            (out, n),
            accumulate,
        )
    }

    /// `dx = dz · wᵀ`: `dz` is `rows × n`, `w` `k × n`, `dx` `rows × k`.
    fn gemm_dx<Z: DevicePtr<f32>, W: DevicePtr<f32>, O: DevicePtrMut<f32>>(
        &self,
        dz: &Z,
        w: &W,
        dx: &mut O,
        rows: usize,
        k: usize,
        n: usize,
    ) -> Result<(), ExecError> {
        self.blas_call(
            cublasOperation_t::CUBLAS_OP_T,
            cublasOperation_t::CUBLAS_OP_N,
            (k, rows, n),
            (w, n),
            (dz, n),
            (dx, k),
            false,
        )
    }

    /// `dw = xᵀ · dz (+ dw)`: `x` is `rows × k`, `dz` `rows × n`.
    #[allow(clippy::too_many_arguments)]
    fn gemm_dw<X: DevicePtr<f32>, Z: DevicePtr<f32>, O: DevicePtrMut<f32>>(
        &self,
        x: &X,
        dz: &Z,
        dw: &mut O,
        rows: usize,
        k: usize,
        n: usize,
        accumulate: bool,
    ) -> Result<(), ExecError> {
        self.blas_call(
            cublasOperation_t::CUBLAS_OP_N,
            cublasOperation_t::CUBLAS_OP_T,
            (n, k, rows),
            (dz, n),
            (x, k),
            (dw, n),
            accumulate,
        )
    }

    /// cuBLAS's column-major GEMM `C = op(A) · op(B) (+ C)` with `(m, n, k)`.
    #[allow(clippy::too_many_arguments)]
    fn blas_call<A: DevicePtr<f32>, B: DevicePtr<f32>, C: DevicePtrMut<f32>>(
        &self,
        transa: cublasOperation_t,
        transb: cublasOperation_t,
        (m, n, k): (usize, usize, usize),
        (a, lda): (&A, usize),
        (b, ldb): (&B, usize),
        (c, ldc): (&mut C, usize),
        accumulate: bool,
    ) -> Result<(), ExecError> {
        if m == 0 || n == 0 {
            return Ok(());
        }
        let int = |v: usize| {
            i32::try_from(v).map_err(|_| {
                ExecError::Cuda(format!(
                    "a GEMM dimension of {v} exceeds cuBLAS's 32-bit range"
                ))
            })
        };
        let cfg = GemmConfig {
            transa,
            transb,
            m: int(m)?,
            n: int(n)?,
            k: int(k)?,
            alpha: 1.0f32,
            lda: int(lda.max(1))?,
            ldb: int(ldb.max(1))?,
            beta: if accumulate { 1.0 } else { 0.0 },
            ldc: int(ldc.max(1))?,
        };
        self.gpu.timed("cublas_sgemm", || {
            // SAFETY: the shapes above match the buffers' lengths (checked
            // by the callers' `expect_len`), so cuBLAS stays inside them.
            unsafe { self.gpu.blas.gemm(cfg, a, b, c) }.map_err(|e| cuda_error("cuBLAS sgemm", e))
        })
    }

    /// Column sums of `x` (`rows × width`) into `out`, one partial per
    /// [`REDUCE_ROWS`] rows added in order.
    fn column_sums(
        &self,
        x: &CudaView<'_, f32>,
        rows: usize,
        width: usize,
        out: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), ExecError> {
        let chunks = rows.div_ceil(REDUCE_ROWS);
        let mut partials = self.zeros(chunks * width, "column-sum partials")?;
        let (rows_u, width_u, chunk_rows, chunks_u) =
            (rows as u64, width as u64, REDUCE_ROWS as u64, chunks as u64);
        launch!(
            self.gpu,
            "column_sums_partial_f32",
            chunks_u * width_u,
            [x, &rows_u, &width_u, &chunk_rows, &mut partials.slice]
        );
        let accumulate = 0i32;
        launch!(
            self.gpu,
            "sum_partials_f32",
            width_u,
            [&partials.slice, &chunks_u, &width_u, out, &accumulate]
        );
        Ok(())
    }

    /// Block (`i`, `j`)'s transpose ([`CudaGnn::transpose`]): the kept one
    /// if it is this block's, else built (the kept one freed first, so
    /// that the workspace holds one at a time) and kept, unless
    /// [`CudaOptions::rebuild_transposes`]. The planner's workloads count
    /// the builds this makes (`Cost::transpose_edges`).
    fn transposed(
        &self,
        (i, j): (usize, usize),
        block: &GpuBlock,
        src_rows: usize,
    ) -> Result<Arc<Transpose>, ExecError> {
        let mut kept = self
            .kept_transpose
            .lock()
            .map_err(|_| ExecError::Internal("the kept transpose's lock is poisoned".into()))?;
        if let Some((key, t)) = kept.as_ref() {
            if *key == (i, j) && t.perm.len() == block.nnz() && t.start.len() == src_rows + 1 {
                return Ok(t.clone());
            }
        }
        *kept = None;
        let t = Arc::new(self.transpose(block, src_rows)?);
        if !self.rebuild_transposes {
            *kept = Some(((i, j), t.clone()));
        }
        Ok(t)
    }

    /// The edges of `block` grouped by source column in edge order (a
    /// workspace for the transposed aggregations).
    fn transpose(&self, block: &GpuBlock, src_rows: usize) -> Result<Transpose, ExecError> {
        let gpu = &self.gpu;
        let nnz = block.nnz();
        // Its edge ids and per-column counts are 32-bit on the device.
        check_transpose_edges(nnz)?;
        let mut counts = gpu.zeros::<u32>(src_rows, "transpose counts")?;
        let mut start = gpu.zeros::<u64>(src_rows + 1, "transpose starts")?;
        let mut perm = gpu.zeros::<u32>(nnz, "transpose permutation")?;
        let mut perm_row = gpu.zeros::<u32>(nnz, "transpose rows")?;
        let (nnz_u, src_u, rows_u) = (nnz as u64, src_rows as u64, block.rows() as u64);
        launch!(
            gpu,
            "csc_count_u32",
            nnz_u,
            [&block.columns.slice, &nnz_u, &mut counts.slice]
        );
        if src_rows > 0 {
            let function = gpu.function("scan_u64")?;
            let mut builder = gpu.compute.launch_builder(&function);
            builder.arg(&counts.slice).arg(&src_u).arg(&mut start.slice);
            let one_block = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1024, 1, 1),
                shared_mem_bytes: 0,
            };
            if gpu.timing() {
                builder.record_kernel_launch(Gpu::TIMING_EVENTS);
            }
            // SAFETY: (counts, n, start) as scan_u64 takes them; `start`
            // holds n + 1 values; one block of 1024 threads, the size of
            // its shared array.
            let events =
                unsafe { builder.launch(one_block) }.map_err(|e| cuda_error("scan_u64", e))?;
            gpu.kernel_time("scan_u64", events)?;
        }
        let mut cursor = gpu.zeros::<u32>(src_rows, "transpose cursors")?;
        launch!(
            gpu,
            "csc_place_u32",
            nnz_u,
            [
                &block.columns.slice,
                &nnz_u,
                &start.slice,
                &mut cursor.slice,
                &mut perm.slice
            ]
        );
        launch!(
            gpu,
            "csc_order_u32",
            src_u,
            [&start.slice, &src_u, &mut perm.slice]
        );
        if src_rows > 0 {
            // The hubs' columns, a block each (the kernel skips the rest).
            let function = gpu.function("csc_order_wide_u32")?;
            let mut builder = gpu.compute.launch_builder(&function);
            builder.arg(&start.slice).arg(&src_u).arg(&mut perm.slice);
            let blocks = LaunchConfig {
                grid_dim: (src_rows.min(WIDE_SORT_BLOCKS) as u32, 1, 1),
                block_dim: (1024, 1, 1),
                shared_mem_bytes: 0,
            };
            if gpu.timing() {
                builder.record_kernel_launch(Gpu::TIMING_EVENTS);
            }
            // SAFETY: (start, src_rows, perm) as csc_order_wide_u32 takes
            // them: `start` holds src_rows + 1 offsets into `perm`.
            let events = unsafe { builder.launch(blocks) }
                .map_err(|e| cuda_error("csc_order_wide_u32", e))?;
            gpu.kernel_time("csc_order_wide_u32", events)?;
        }
        launch!(
            gpu,
            "csc_rows_u32",
            nnz_u,
            [
                &block.row_start.slice,
                &rows_u,
                &perm.slice,
                &nnz_u,
                &mut perm_row.slice
            ]
        );
        Ok(Transpose {
            start,
            perm,
            perm_row,
        })
    }

    /// Rows `r0..r0 + n` of partition `part`'s first-layer input `x`,
    /// dropped (keyed by the whole graph's element index, as the CPU's)
    /// into the first `n · d_in` values of `out`.
    fn drop_rows(
        &self,
        x: &DeviceBuf<f32>,
        part: usize,
        (r0, n): (usize, usize),
        d_in: usize,
        mask: Dropout,
        out: &mut DeviceBuf<f32>,
    ) -> Result<(), ExecError> {
        let (key, threshold, scale) = mask.device_params();
        let base = (self.model.row0(part) + r0 as u64) * d_in as u64;
        let count = (n * d_in) as u64;
        let src = x.slice.slice(r0 * d_in..(r0 + n) * d_in);
        let mut dst = out.slice.slice_mut(0..n * d_in);
        launch!(
            self.gpu,
            "dropout_f32",
            count,
            [&src, &count, &mut dst, &key, &threshold, &scale, &base]
        );
        Ok(())
    }

    /// `init + b · src` over a block `b` (or a stored transpose) of rows
    /// `d` wide, `src` dropped by `mask` keyed from `src_row0` (the
    /// source's first row in the whole graph): the forward aggregation's
    /// gather, and the transposed one's over a stored transpose.
    fn gather(
        &self,
        op: &Op,
        b: &GpuBlock,
        src: &DeviceBuf<f32>,
        d: usize,
        start: Start<'_>,
        (mask, src_row0): (Option<Dropout>, u64),
    ) -> Result<DeviceBuf<f32>, ExecError> {
        let rows = b.rows();
        let (mut out, mode, init_buf) = self.start_sums(op, start, rows * d, "agg")?;
        let init_buf = init_buf.unwrap_or(&self.gpu.dummy);
        let (key, threshold, scale) = mask_args(mask);
        let (rows_u, width) = (rows as u64, d as u64);
        let weighting = b.weighting.code();
        let (seg, count) = segments(b.nnz() as u64, width);
        // Input dropout: the source's keep bits, hashed once an element
        // rather than once a gathered value.
        let words = match threshold {
            0 => 0,
            _ => width.div_ceil(64),
        };
        let keep = match words {
            0 => None,
            _ => {
                let src_rows = (src.len() / d.max(1)) as u64;
                let n = src_rows * words;
                // dropout_bits_u64 writes every word.
                let mut keep = self.gpu.unset::<u64>(n as usize, "agg keep bits")?;
                launch!(
                    self.gpu,
                    "dropout_bits_u64",
                    n,
                    [
                        &src_rows,
                        &width,
                        &words,
                        &key,
                        &threshold,
                        &src_row0,
                        &mut keep.slice
                    ]
                );
                Some(keep)
            }
        };
        let keep_buf = keep
            .as_ref()
            .map_or(&self.gpu.dummy_bits.slice, |k| &k.slice);
        launch!(
            self.gpu,
            "spmm_f32",
            rows_u * width,
            [
                &b.row_start.slice,
                &b.columns.slice,
                &b.weights.slice,
                &weighting,
                &rows_u,
                &seg,
                &src.slice,
                &width,
                &init_buf.slice,
                &mode,
                &mut out.slice,
                keep_buf,
                &words,
                &scale
            ]
        );
        if count > 1 {
            let mut carry = self.zeros((count * width) as usize, "agg segment sums")?;
            launch!(
                self.gpu,
                "spmm_carry_f32",
                count * width,
                [
                    &b.row_start.slice,
                    &b.columns.slice,
                    &b.weights.slice,
                    &weighting,
                    &rows_u,
                    &seg,
                    &count,
                    &src.slice,
                    &width,
                    &mut carry.slice,
                    keep_buf,
                    &words,
                    &scale
                ]
            );
            self.fix_segments(
                &b.row_start,
                rows_u,
                (seg, count),
                &carry,
                width,
                &mut out.view_mut(),
            )?;
        }
        Ok(out)
    }

    /// An aggregation's output of `len` values and how its kernels start
    /// each sum (`init_mode`, and the partial sum to read for
    /// `INIT_FROM`): a handed-over partial sum is the output itself.
    fn start_sums<'a>(
        &self,
        op: &Op,
        start: Start<'a>,
        len: usize,
        what: &str,
    ) -> Result<Started<'a>, ExecError> {
        Ok(match start {
            // The gather writes every value.
            Start::Zero => (self.gpu.unset::<f32>(len, what)?, INIT_ZERO, None),
            Start::From(init) => {
                expect_len(op, "init", init.len(), len)?;
                (self.gpu.unset::<f32>(len, what)?, INIT_FROM, Some(init))
            }
            Start::Into(sums) => {
                expect_len(op, "init", sums.len(), len)?;
                (sums, INIT_OUT, None)
            }
        })
    }

    /// Where the aggregation `op` starts its sums: the partial sum handed
    /// over, else its input `position` when it has one, else zero.
    fn start<'a>(
        &mut self,
        op: &Op,
        inputs: &[&'a Data],
        position: usize,
    ) -> Result<Start<'a>, ExecError> {
        if let Some(sums) = self.handed.take() {
            self.added_in_place += 1;
            return Ok(Start::Into(sums));
        }
        Ok(match inputs.get(position) {
            Some(init) => Start::From(f32s(op, init)?),
            None => Start::Zero,
        })
    }

    /// The segments of GAT's kernels over a block of `nnz` edges at layer
    /// `l`: one length for every kernel of the block, from the widest of
    /// their segment sums (the aggregation's, `heads × head_width`).
    fn gat_segments(&self, l: usize, nnz: usize) -> (u64, u64) {
        segments(nnz as u64, self.model.heads(l).width() as u64)
    }

    /// Adds the segment sums `carry` of an aggregation into `out`, rows
    /// `width` wide, whose rows (or columns) start at `start`
    /// (`segment_fixup_f32`).
    fn fix_segments(
        &self,
        start: &DeviceBuf<u64>,
        rows: u64,
        (seg, count): (u64, u64),
        carry: &DeviceBuf<f32>,
        width: u64,
        out: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), ExecError> {
        launch!(
            self.gpu,
            "segment_fixup_f32",
            count * width,
            [&start.slice, &rows, &seg, &count, &carry.slice, &width, out]
        );
        Ok(())
    }

    /// `agg + bias` (the bias is the last `d_out` values of `w`).
    fn plus_bias(
        &self,
        op: &Op,
        l: usize,
        agg: &DeviceBuf<f32>,
        w: &DeviceBuf<f32>,
    ) -> Result<DeviceBuf<f32>, ExecError> {
        let (_, d_out) = self.model.dims(l);
        expect_len(op, "weights", w.len(), self.model.weight_len(l))?;
        let rows = agg.len() / d_out;
        let mut y = self.zeros(agg.len(), "agg + bias")?;
        let bias = w.slice.slice(w.len() - d_out..w.len());
        let (rows_u, width) = (rows as u64, d_out as u64);
        launch!(
            self.gpu,
            "add_bias_f32",
            rows_u * width,
            [&agg.slice, &rows_u, &width, &bias, &mut y.slice]
        );
        Ok(y)
    }

    fn loss(
        &mut self,
        op: &Op,
        part: usize,
        logits: &DeviceBuf<f32>,
        labels: &DeviceBuf<i64>,
    ) -> Result<Data, ExecError> {
        let rows = self.model.rows(part);
        let n = rows.len();
        let classes = self.model.classes;
        expect_len(op, "logits", logits.len(), n * classes)?;
        expect_len(op, "labels", labels.len(), n)?;
        let gpu = self.gpu.clone();
        let mut loss = gpu.zeros::<f64>(n, "per-row loss")?;
        let mut correct = gpu.zeros::<u8>(n, "per-row correctness")?;
        let chunks = n.div_ceil(REDUCE_ROWS);
        let mut partials = gpu.zeros::<f64>(chunks * 7, "loss partials")?;
        if n > 0 {
            let [train, val, test] = &self.masks;
            let train = train.slice.slice(rows.clone());
            let val = val.slice.slice(rows.clone());
            let test = test.slice.slice(rows.clone());
            let (rows_u, classes_u, chunk_rows, chunks_u) =
                (n as u64, classes as u64, REDUCE_ROWS as u64, chunks as u64);
            launch!(
                gpu,
                "softmax_xent_rows_f32",
                rows_u,
                [
                    &logits.slice,
                    &rows_u,
                    &classes_u,
                    &labels.slice,
                    &train,
                    &mut loss.slice,
                    &mut correct.slice
                ]
            );
            launch!(
                gpu,
                "loss_partials_f64",
                chunks_u,
                [
                    &loss.slice,
                    &correct.slice,
                    &train,
                    &val,
                    &test,
                    &rows_u,
                    &chunk_rows,
                    &mut partials.slice
                ]
            );
        }
        let host = gpu.download(&partials, "loss partials")?;
        let normaliser = self.model.train_nodes.max(1) as f64;
        let value = host.chunks_exact(7).map(|p| p[0]).sum::<f64>() / normaliser;
        let count = |k: usize| host.chunks_exact(7).map(|p| p[k] as u64).sum::<u64>();
        let m = &mut self.metrics;
        m.loss += value;
        m.train_correct += count(1);
        m.train_total += count(2);
        m.val_correct += count(3);
        m.val_total += count(4);
        m.test_correct += count(5);
        m.test_total += count(6);
        Ok(out(gpu.upload(&[value as f32], "the loss")?))
    }

    fn loss_bwd(
        &self,
        op: &Op,
        part: usize,
        logits: &DeviceBuf<f32>,
        labels: &DeviceBuf<i64>,
    ) -> Result<Data, ExecError> {
        let rows = self.model.rows(part);
        let n = rows.len();
        let classes = self.model.classes;
        expect_len(op, "logits", logits.len(), n * classes)?;
        let mut grad = self.zeros(n * classes, "loss gradient")?;
        if n > 0 {
            let train = self.masks[0].slice.slice(rows);
            let (rows_u, classes_u) = (n as u64, classes as u64);
            let inv = 1.0 / self.model.train_nodes.max(1) as f64;
            launch!(
                self.gpu,
                "softmax_xent_bwd_f32",
                rows_u,
                [
                    &logits.slice,
                    &rows_u,
                    &classes_u,
                    &labels.slice,
                    &train,
                    &inv,
                    &mut grad.slice
                ]
            );
        }
        Ok(out(grad))
    }

    /// `block_alpha` of the CPU backend: block `(i, j)`'s slice of
    /// `alpha[i]` (as a range) and, with attention dropout, its dropped
    /// copy.
    fn block_alpha(
        &self,
        l: usize,
        (i, j): (usize, usize),
        b: &GpuBlock,
        alpha: &DeviceBuf<f32>,
        heads: usize,
    ) -> Result<(std::ops::Range<usize>, Option<DeviceBuf<f32>>), ExecError> {
        let nnz = self.model.block_nnz(i, j)? as usize;
        let start = self.model.edges_before(i, j) as usize;
        let range = start * heads..(start + nnz) * heads;
        if range.end > alpha.len() {
            return Err(ExecError::Internal(format!(
                "alpha of partition {i} has {} values, block ({i}, {j}) needs {range:?}",
                alpha.len()
            )));
        }
        let dropped = match self.model.dropout(SITE_ATTENTION, l) {
            Some(mask) => {
                if b.nnz() != nnz {
                    return Err(ExecError::Internal(format!(
                        "block ({i}, {j}) has {} edges, the model counts {nnz}",
                        b.nnz()
                    )));
                }
                let mut kept = self.zeros(range.len(), "dropped attention")?;
                let (key, threshold, scale) = mask.device_params();
                let slice = alpha.slice.slice(range.clone());
                let (rows, h_u) = (b.rows() as u64, heads as u32);
                let (dst_first, src_first) = (self.model.row0(i), self.model.row0(j));
                let nodes = self.model.nodes;
                let (seg, count) = self.gat_segments(l, nnz);
                launch!(
                    self.gpu,
                    "gat_dropout_edges_f32",
                    rows * heads as u64,
                    [
                        &b.row_start.slice,
                        &b.columns.slice,
                        &rows,
                        &seg,
                        &h_u,
                        &slice,
                        &mut kept.slice,
                        &key,
                        &threshold,
                        &scale,
                        &dst_first,
                        &src_first,
                        &nodes
                    ]
                );
                if count > 1 {
                    launch!(
                        self.gpu,
                        "gat_dropout_edges_rest_f32",
                        count * heads as u64,
                        [
                            &b.row_start.slice,
                            &b.columns.slice,
                            &rows,
                            &seg,
                            &count,
                            &h_u,
                            &slice,
                            &mut kept.slice,
                            &key,
                            &threshold,
                            &scale,
                            &dst_first,
                            &src_first,
                            &nodes
                        ]
                    );
                }
                Some(kept)
            }
            None => None,
        };
        Ok((range, dropped))
    }

    /// `f(first row, rows, input)` over the layer's input rows `x` of
    /// partition `part`: the whole of `x` in one call, or, with the first
    /// layer's input dropout, slabs of [`project_slab_rows`] rows dropped in
    /// turn into one workspace buffer (reused: the compute stream orders each
    /// slab's kernels after the last's).
    fn input_slabs(
        &self,
        l: usize,
        part: usize,
        x: &DeviceBuf<f32>,
        d_in: usize,
        mut f: impl FnMut(usize, usize, CudaView<'_, f32>) -> Result<(), ExecError>,
    ) -> Result<(), ExecError> {
        if d_in == 0 || !x.len().is_multiple_of(d_in) {
            return Err(ExecError::Internal(format!(
                "layer {l} partition {part}: input of {} values is not rows of {d_in}",
                x.len()
            )));
        }
        let rows = x.len() / d_in;
        let Some(mask) = self.model.dropout(SITE_INPUT, l).filter(|_| l == 1) else {
            return f(0, rows, x.slice.slice(0..rows * d_in));
        };
        if rows == 0 {
            return Ok(());
        }
        let slab = project_slab_rows(d_in).min(rows);
        let mut dropped = self.zeros(slab * d_in, "dropped input slab")?;
        for r0 in (0..rows).step_by(slab) {
            let n = slab.min(rows - r0);
            self.drop_rows(x, part, (r0, n), d_in, mask, &mut dropped)?;
            f(r0, n, dropped.slice.slice(0..n * d_in))?;
        }
        Ok(())
    }

    /// `dropout(x) · W` for the layer's input rows `x` of partition
    /// `part` (`w` the layer's weights; its `d_in × d_out` matrix alone is
    /// used): GAT's projection and a projecting-first GCN layer's.
    fn project(
        &self,
        l: usize,
        part: usize,
        x: &DeviceBuf<f32>,
        w: &DeviceBuf<f32>,
    ) -> Result<DeviceBuf<f32>, ExecError> {
        let (d_in, d_out) = self.model.dims(l);
        let rows = x.len() / d_in;
        let mut z = self.zeros(rows * d_out, "projection")?;
        let matrix = w.slice.slice(0..d_in * d_out);
        self.input_slabs(l, part, x, d_in, |r0, n, input| {
            let mut out = z.slice.slice_mut(r0 * d_out..(r0 + n) * d_out);
            self.gemm(&input, &matrix, &mut out, n, d_in, d_out, false)
        })?;
        Ok(z)
    }

    /// The backward of [`CudaGnn::project`]: `dW = dropout(x)ᵀ · dz` into
    /// the first `d_in × d_out` values of `dw` (each slab's product added to
    /// the last's), and above the first layer `dx = dz · Wᵀ`.
    fn project_bwd(
        &self,
        l: usize,
        part: usize,
        dz: &DeviceBuf<f32>,
        x: &DeviceBuf<f32>,
        w: &DeviceBuf<f32>,
        dw: &mut DeviceBuf<f32>,
    ) -> Result<Option<DeviceBuf<f32>>, ExecError> {
        let (d_in, d_out) = self.model.dims(l);
        let matrix = d_in * d_out;
        let rows = dz.len() / d_out;
        if x.len() != rows * d_in {
            return Err(ExecError::Internal(format!(
                "layer {l} partition {part}: input of {} values for {rows} gradient rows of \
                 {d_in}",
                x.len()
            )));
        }
        {
            let mut dw_matrix = dw.slice.slice_mut(0..matrix);
            self.input_slabs(l, part, x, d_in, |r0, n, input| {
                let grad = dz.slice.slice(r0 * d_out..(r0 + n) * d_out);
                self.gemm_dw(&input, &grad, &mut dw_matrix, n, d_in, d_out, r0 > 0)
            })?;
        }
        if l == 1 {
            return Ok(None);
        }
        let mut dx = self.zeros(rows * d_in, "grad_h")?;
        let w_matrix = w.slice.slice(0..matrix);
        self.gemm_dx(&dz.slice, &w_matrix, &mut dx.slice, rows, d_in, d_out)?;
        Ok(Some(dx))
    }

    fn run_gat(
        &mut self,
        op: &Op,
        name: &Name,
        inputs: &[&Data],
    ) -> Result<Option<Vec<Data>>, ExecError> {
        let l = match name.base {
            "loss" | "loss_bwd" | "grad_accumulate" => return Ok(None),
            _ => name.get('l')?,
        };
        let (d_in, d_out) = self.model.dims(l);
        let heads = self.model.heads(l);
        let (h_n, c_n) = (heads.heads, heads.head_width);
        let (h_u, c_u) = (h_n as u32, c_n as u32);
        let weight_len = self.model.weight_len(l);
        let weights = |k: usize| -> Result<&DeviceBuf<f32>, ExecError> {
            let w = f32s(op, inputs[k])?;
            expect_len(op, "weights", w.len(), weight_len)?;
            Ok(w)
        };
        let gpu = self.gpu.clone();
        let outputs = match name.base {
            "linear" => {
                arity(op, inputs, 2)?;
                let (x, w) = (f32s(op, inputs[0])?, weights(1)?);
                let part = name.get('p')?;
                vec![out(self.project(l, part, x, w)?)]
            }
            "node_scores" => {
                arity(op, inputs, 2)?;
                let (z, w) = (f32s(op, inputs[0])?, weights(1)?);
                let rows = z.len() / d_out;
                let mut scores = self.zeros(2 * rows * h_n, "node scores")?;
                let att_src = w.slice.slice(d_in * d_out..d_in * d_out + d_out);
                let att_dst = w
                    .slice
                    .slice(d_in * d_out + d_out..d_in * d_out + 2 * d_out);
                let rows_u = rows as u64;
                {
                    let (mut a_src, mut a_dst) = scores.slice.split_at_mut(rows * h_n);
                    launch!(
                        gpu,
                        "gat_node_scores_f32",
                        rows_u * h_n as u64,
                        [
                            &z.slice, &rows_u, &h_u, &c_u, &att_src, &att_dst, &mut a_src,
                            &mut a_dst
                        ]
                    );
                }
                vec![out(scores)]
            }
            "sddmm" => {
                let (i, j) = (name.get('p')?, name.get('s')?);
                arity(op, inputs, if i == j { 2 } else { 3 })?;
                let b = block(op, inputs[0])?;
                let own = f32s(op, inputs[1])?;
                let other = if i == j { own } else { f32s(op, inputs[2])? };
                let a_dst = own.slice.slice(own.len() / 2..own.len());
                let a_src = other.slice.slice(0..other.len() / 2);
                let mut scores = self.zeros(b.nnz() * h_n, "edge scores")?;
                let rows_u = b.rows() as u64;
                let (seg, count) = self.gat_segments(l, b.nnz());
                launch!(
                    gpu,
                    "gat_edge_scores_f32",
                    rows_u * h_n as u64,
                    [
                        &b.row_start.slice,
                        &b.columns.slice,
                        &rows_u,
                        &seg,
                        &h_u,
                        &a_dst,
                        &a_src,
                        &mut scores.slice
                    ]
                );
                if count > 1 {
                    launch!(
                        gpu,
                        "gat_edge_scores_rest_f32",
                        count * h_n as u64,
                        [
                            &b.row_start.slice,
                            &b.columns.slice,
                            &rows_u,
                            &seg,
                            &count,
                            &h_u,
                            &a_dst,
                            &a_src,
                            &mut scores.slice
                        ]
                    );
                }
                vec![out(scores)]
            }
            "edge_softmax" => {
                let k = inputs.len() / 2;
                arity(op, inputs, 2 * k)?;
                let blocks: Vec<&GpuBlock> = inputs[..k]
                    .iter()
                    .map(|d| block(op, d))
                    .collect::<Result<_, _>>()?;
                let scores: Vec<&DeviceBuf<f32>> = inputs[k..]
                    .iter()
                    .map(|d| f32s(op, d))
                    .collect::<Result<_, _>>()?;
                let total: usize = scores.iter().map(|s| s.len()).sum();
                let mut alpha = self.zeros(total, "alpha")?;
                let rows = blocks.first().map_or(0, |b| b.rows());
                let mut row_max = self.zeros(rows * h_n, "softmax row max")?;
                let mut row_sum = self.zeros(rows * h_n, "softmax row sum")?;
                let mut ranges = Vec::with_capacity(k);
                let mut at = 0;
                for (b, s) in blocks.iter().zip(&scores) {
                    expect_len(op, "scores", s.len(), b.nnz() * h_n)?;
                    if b.rows() != rows {
                        return Err(ExecError::Internal(format!(
                            "{}: blocks of different rows",
                            op.name
                        )));
                    }
                    let range = at..at + s.len();
                    if !range.is_empty() {
                        let src = s.slice.slice(0..s.len());
                        let mut dst = alpha.slice.slice_mut(range.clone());
                        gpu.compute
                            .memcpy_dtod(&src, &mut dst)
                            .map_err(|e| cuda_error("copying scores", e))?;
                    }
                    at = range.end;
                    ranges.push(range);
                }
                let (rows_u, n) = (rows as u64, (rows * h_n) as u64);
                let minus_infinity = f32::NEG_INFINITY;
                launch!(
                    gpu,
                    "fill_f32",
                    n,
                    [&mut row_max.slice, &n, &minus_infinity]
                );
                let heads_u = h_n as u64;
                for (b, range) in blocks.iter().zip(&ranges) {
                    if range.is_empty() {
                        continue;
                    }
                    let a = alpha.slice.slice(range.clone());
                    let (seg, count) = self.gat_segments(l, b.nnz());
                    launch!(
                        gpu,
                        "gat_softmax_max_f32",
                        n,
                        [
                            &b.row_start.slice,
                            &rows_u,
                            &seg,
                            &h_u,
                            &a,
                            &mut row_max.slice
                        ]
                    );
                    if count > 1 {
                        let mut carry =
                            self.zeros((count * heads_u) as usize, "softmax segment maxima")?;
                        launch!(
                            gpu,
                            "gat_softmax_max_carry_f32",
                            count * heads_u,
                            [
                                &b.row_start.slice,
                                &rows_u,
                                &seg,
                                &count,
                                &h_u,
                                &a,
                                &mut carry.slice
                            ]
                        );
                        launch!(
                            gpu,
                            "gat_segment_max_f32",
                            count * heads_u,
                            [
                                &b.row_start.slice,
                                &rows_u,
                                &seg,
                                &count,
                                &carry.slice,
                                &heads_u,
                                &mut row_max.slice
                            ]
                        );
                    }
                }
                for (b, range) in blocks.iter().zip(&ranges) {
                    if range.is_empty() {
                        continue;
                    }
                    let mut a = alpha.slice.slice_mut(range.clone());
                    let (seg, count) = self.gat_segments(l, b.nnz());
                    launch!(
                        gpu,
                        "gat_softmax_exp_f32",
                        n,
                        [
                            &b.row_start.slice,
                            &rows_u,
                            &seg,
                            &h_u,
                            &mut a,
                            &row_max.slice,
                            &mut row_sum.slice
                        ]
                    );
                    if count > 1 {
                        let mut carry =
                            self.zeros((count * heads_u) as usize, "softmax segment sums")?;
                        launch!(
                            gpu,
                            "gat_softmax_exp_carry_f32",
                            count * heads_u,
                            [
                                &b.row_start.slice,
                                &rows_u,
                                &seg,
                                &count,
                                &h_u,
                                &mut a,
                                &row_max.slice,
                                &mut carry.slice
                            ]
                        );
                        self.fix_segments(
                            &b.row_start,
                            rows_u,
                            (seg, count),
                            &carry,
                            heads_u,
                            &mut row_sum.view_mut(),
                        )?;
                    }
                }
                for (b, range) in blocks.iter().zip(&ranges) {
                    if range.is_empty() {
                        continue;
                    }
                    let mut a = alpha.slice.slice_mut(range.clone());
                    let (seg, count) = self.gat_segments(l, b.nnz());
                    launch!(
                        gpu,
                        "gat_softmax_div_f32",
                        n,
                        [
                            &b.row_start.slice,
                            &rows_u,
                            &seg,
                            &h_u,
                            &mut a,
                            &row_sum.slice
                        ]
                    );
                    if count > 1 {
                        launch!(
                            gpu,
                            "gat_softmax_div_rest_f32",
                            count * heads_u,
                            [
                                &b.row_start.slice,
                                &rows_u,
                                &seg,
                                &count,
                                &h_u,
                                &mut a,
                                &row_sum.slice
                            ]
                        );
                    }
                }
                vec![out(alpha)]
            }
            "agg" => {
                let (i, j) = (name.get('p')?, name.get('s')?);
                let first = (0..j).all(|s| !self.model.has_block(i, s));
                arity(op, inputs, if first { 3 } else { 4 })?;
                let b = block(op, inputs[0])?;
                let z_src = f32s(op, inputs[1])?;
                let alpha = f32s(op, inputs[2])?;
                let (range, dropped) = self.block_alpha(l, (i, j), b, alpha, h_n)?;
                let init = inputs.get(3).map(|d| f32s(op, d)).transpose()?;
                let rows = b.rows();
                let mut agg = self.zeros(rows * d_out, "agg")?;
                let alpha_view = match &dropped {
                    Some(kept) => kept.slice.slice(0..kept.len()),
                    None => alpha.slice.slice(range),
                };
                let (mode, init_buf) = match init {
                    Some(init) => {
                        expect_len(op, "init", init.len(), rows * d_out)?;
                        (INIT_FROM, &init.slice)
                    }
                    None => (INIT_ZERO, &gpu.dummy.slice),
                };
                let rows_u = rows as u64;
                let (seg, count) = self.gat_segments(l, b.nnz());
                launch!(
                    gpu,
                    "gat_aggregate_f32",
                    rows_u * d_out as u64,
                    [
                        &b.row_start.slice,
                        &b.columns.slice,
                        &rows_u,
                        &seg,
                        &alpha_view,
                        &z_src.slice,
                        &h_u,
                        &c_u,
                        init_buf,
                        &mode,
                        &mut agg.slice
                    ]
                );
                if count > 1 {
                    let width = heads.width() as u64;
                    let mut carry = self.zeros((count * width) as usize, "agg segment sums")?;
                    launch!(
                        gpu,
                        "gat_aggregate_carry_f32",
                        count * width,
                        [
                            &b.row_start.slice,
                            &b.columns.slice,
                            &rows_u,
                            &seg,
                            &count,
                            &alpha_view,
                            &z_src.slice,
                            &h_u,
                            &c_u,
                            &mut carry.slice
                        ]
                    );
                    self.fix_segments(
                        &b.row_start,
                        rows_u,
                        (seg, count),
                        &carry,
                        width,
                        &mut agg.view_mut(),
                    )?;
                }
                vec![out(agg)]
            }
            "elu" => {
                arity(op, inputs, 2)?;
                let i = name.get('p')?;
                let y = self.plus_bias(op, l, f32s(op, inputs[0])?, weights(1)?)?;
                let mut h = self.zeros(y.len(), "elu")?;
                let (key, threshold, scale) = mask_args(self.model.dropout(SITE_HIDDEN, l));
                let (n, base) = (y.len() as u64, self.model.row0(i) * d_out as u64);
                launch!(
                    gpu,
                    "elu_dropout_f32",
                    n,
                    [&y.slice, &n, &mut h.slice, &key, &threshold, &scale, &base]
                );
                vec![out(h)]
            }
            "bias" => {
                arity(op, inputs, 2)?;
                vec![out(self.plus_bias(
                    op,
                    l,
                    f32s(op, inputs[0])?,
                    weights(1)?,
                )?)]
            }
            "elu_bwd" => {
                arity(op, inputs, 3)?;
                let i = name.get('p')?;
                let grad = f32s(op, inputs[0])?;
                let y = self.plus_bias(op, l, f32s(op, inputs[1])?, weights(2)?)?;
                expect_len(op, "gradient", grad.len(), y.len())?;
                let mut dz = self.zeros(y.len(), "elu gradient")?;
                let (key, threshold, scale) = mask_args(self.model.dropout(SITE_HIDDEN, l));
                let (n, base) = (y.len() as u64, self.model.row0(i) * d_out as u64);
                launch!(
                    gpu,
                    "elu_dropout_bwd_f32",
                    n,
                    [
                        &grad.slice,
                        &y.slice,
                        &n,
                        &mut dz.slice,
                        &key,
                        &threshold,
                        &scale,
                        &base
                    ]
                );
                vec![out(dz)]
            }
            "attention_bwd" => self.attention_bwd(op, name, inputs, l, heads)?,
            "node_scores_bwd" => {
                arity(op, inputs, 5)?;
                let grad_src = f32s(op, inputs[0])?;
                let grad_dst = f32s(op, inputs[1])?;
                let z = f32s(op, inputs[2])?;
                let w = weights(3)?;
                let dout = f32s(op, inputs[4])?;
                let rows = z.len() / d_out;
                expect_len(op, "grad_src", grad_src.len(), rows * (d_out + h_n))?;
                expect_len(op, "grad_dst", grad_dst.len(), rows * h_n)?;
                expect_len(op, "the aggregation's gradient", dout.len(), rows * d_out)?;
                let mut grad_z = self.zeros(rows * d_out, "grad_z")?;
                if rows > 0 {
                    let value = grad_src.slice.slice(0..rows * d_out);
                    let mut dst = grad_z.slice.slice_mut(0..rows * d_out);
                    gpu.compute
                        .memcpy_dtod(&value, &mut dst)
                        .map_err(|e| cuda_error("copying grad_z", e))?;
                }
                let grad_a_src = grad_src.slice.slice(rows * d_out..grad_src.len());
                let att_src = w.slice.slice(d_in * d_out..d_in * d_out + d_out);
                let att_dst = w
                    .slice
                    .slice(d_in * d_out + d_out..d_in * d_out + 2 * d_out);
                let rows_u = rows as u64;
                launch!(
                    gpu,
                    "gat_node_scores_bwd_z_f32",
                    rows_u * d_out as u64,
                    [
                        &rows_u,
                        &h_u,
                        &c_u,
                        &att_src,
                        &att_dst,
                        &grad_a_src,
                        &grad_dst.slice,
                        &mut grad_z.slice
                    ]
                );
                let mut grad_att = self.zeros(3 * d_out, "grad_att")?;
                let chunks = rows.div_ceil(REDUCE_ROWS);
                let mut partials = self.zeros(chunks * 2 * d_out, "attention partials")?;
                let (chunk_rows, chunks_u, width) =
                    (REDUCE_ROWS as u64, chunks as u64, 2 * d_out as u64);
                launch!(
                    gpu,
                    "gat_node_scores_bwd_att_f32",
                    chunks_u * d_out as u64,
                    [
                        &z.slice,
                        &rows_u,
                        &h_u,
                        &c_u,
                        &grad_a_src,
                        &grad_dst.slice,
                        &chunk_rows,
                        &mut partials.slice
                    ]
                );
                let accumulate = 0i32;
                {
                    let mut att = grad_att.slice.slice_mut(0..2 * d_out);
                    launch!(
                        gpu,
                        "sum_partials_f32",
                        width,
                        [&partials.slice, &chunks_u, &width, &mut att, &accumulate]
                    );
                }
                {
                    let mut bias = grad_att.slice.slice_mut(2 * d_out..3 * d_out);
                    self.column_sums(&dout.slice.slice(0..dout.len()), rows, d_out, &mut bias)?;
                }
                vec![out(grad_z), out(grad_att)]
            }
            "linear_bwd" => {
                arity(op, inputs, 4)?;
                let part = name.get('p')?;
                let dz = f32s(op, inputs[0])?;
                let x = f32s(op, inputs[1])?;
                let w = weights(2)?;
                let grad_att = f32s(op, inputs[3])?;
                let matrix = d_in * d_out;
                let rows = dz.len() / d_out;
                expect_len(op, "input", x.len(), rows * d_in)?;
                expect_len(op, "grad_att", grad_att.len(), weight_len - matrix)?;
                let mut dw = self.zeros(weight_len, "grad_w")?;
                {
                    let src = grad_att.slice.slice(0..grad_att.len());
                    let mut dst = dw.slice.slice_mut(matrix..weight_len);
                    gpu.compute
                        .memcpy_dtod(&src, &mut dst)
                        .map_err(|e| cuda_error("copying grad_att", e))?;
                }
                let dx = self.project_bwd(l, part, dz, x, w, &mut dw)?;
                let mut outputs = vec![out(dw)];
                outputs.extend(dx.map(out));
                outputs
            }
            _ => {
                return Err(ExecError::Kernel(format!(
                    "the CUDA backend cannot run {} for GAT",
                    op.name
                )))
            }
        };
        Ok(Some(outputs))
    }

    /// Block `(i, j)`'s share of the attention backward (inputs as the
    /// CPU backend's `attention_bwd`).
    fn attention_bwd(
        &self,
        op: &Op,
        name: &Name,
        inputs: &[&Data],
        l: usize,
        heads: Heads,
    ) -> Result<Vec<Data>, ExecError> {
        let (j, i) = (name.get('p')?, name.get('d')?);
        let (h_n, d) = (heads.heads, heads.width());
        let (h_u, c_u) = (h_n as u32, heads.head_width as u32);
        let first_destination =
            self.model.gat_destination_ends(j).map(|(first, _)| first) == Some(i);
        let first_source = (0..j).all(|s| !self.model.has_block(i, s));
        let expected =
            6 + usize::from(i != j) + usize::from(!first_destination) + usize::from(!first_source);
        arity(op, inputs, expected)?;
        let b = block(op, inputs[0])?;
        let scores_i = f32s(op, inputs[2])?;
        let mut k = 3;
        let scores_j = if i != j {
            k += 1;
            f32s(op, inputs[3])?
        } else {
            scores_i
        };
        let z_src = f32s(op, inputs[k])?;
        let grad_out = f32s(op, inputs[k + 1])?;
        let agg_out = f32s(op, inputs[k + 2])?;
        k += 3;
        let (rows_i, rows_j) = (self.model.rows(i).len(), self.model.rows(j).len());
        expect_len(op, "z", z_src.len(), rows_j * d)?;
        expect_len(op, "the aggregation's gradient", grad_out.len(), rows_i * d)?;
        expect_len(op, "the aggregation", agg_out.len(), rows_i * d)?;
        let mut grad_src = if first_destination {
            self.zeros(rows_j * (d + h_n), "grad_src")?
        } else {
            k += 1;
            self.gpu.duplicate(f32s(op, inputs[k - 1])?, "grad_src")?
        };
        let mut grad_dst = if first_source {
            self.zeros(rows_i * h_n, "grad_dst")?
        } else {
            self.gpu.duplicate(f32s(op, inputs[k])?, "grad_dst")?
        };
        expect_len(op, "grad_src", grad_src.len(), rows_j * (d + h_n))?;
        expect_len(op, "grad_dst", grad_dst.len(), rows_i * h_n)?;
        let alpha = f32s(op, inputs[1])?;
        let (range, dropped) = self.block_alpha(l, (i, j), b, alpha, h_n)?;
        let alpha_view = alpha.slice.slice(range);
        let (has_dropped, dropped_view) = match &dropped {
            Some(kept) => (1i32, kept.slice.slice(0..kept.len())),
            None => (0i32, alpha_view.slice(0..alpha_view.len())),
        };
        let a_dst = scores_i.slice.slice(scores_i.len() / 2..scores_i.len());
        let a_src = scores_j.slice.slice(0..scores_j.len() / 2);
        let mut du = self.zeros(b.nnz() * h_n, "attention du")?;
        let (rows_u, init) = (b.rows() as u64, INIT_OUT);
        let (heads_u, width) = (h_n as u64, d as u64);
        let (seg, count) = self.gat_segments(l, b.nnz());
        let gpu = &self.gpu;
        launch!(
            gpu,
            "gat_attention_bwd_dst_f32",
            rows_u * heads_u,
            [
                &b.row_start.slice,
                &b.columns.slice,
                &rows_u,
                &seg,
                &h_u,
                &c_u,
                &alpha_view,
                &dropped_view,
                &has_dropped,
                &a_dst,
                &a_src,
                &z_src.slice,
                &grad_out.slice,
                &agg_out.slice,
                &mut du.slice,
                &mut grad_dst.slice,
                &init
            ]
        );
        if count > 1 {
            let mut carry = self.zeros((count * heads_u) as usize, "attention segment sums")?;
            launch!(
                gpu,
                "gat_attention_bwd_dst_carry_f32",
                count * heads_u,
                [
                    &b.row_start.slice,
                    &b.columns.slice,
                    &rows_u,
                    &seg,
                    &count,
                    &h_u,
                    &c_u,
                    &alpha_view,
                    &dropped_view,
                    &has_dropped,
                    &a_dst,
                    &a_src,
                    &z_src.slice,
                    &grad_out.slice,
                    &agg_out.slice,
                    &mut du.slice,
                    &mut carry.slice
                ]
            );
            let sums = (seg, count);
            self.fix_segments(
                &b.row_start,
                rows_u,
                sums,
                &carry,
                heads_u,
                &mut grad_dst.view_mut(),
            )?;
        }
        let t = self.transposed((i, j), b, rows_j)?;
        let src_u = rows_j as u64;
        {
            let (mut grad_z_src, mut grad_a_src) = grad_src.slice.split_at_mut(rows_j * d);
            launch!(
                gpu,
                "gat_scatter_value_f32",
                src_u * width,
                [
                    &t.start.slice,
                    &t.perm.slice,
                    &t.perm_row.slice,
                    &src_u,
                    &seg,
                    &h_u,
                    &c_u,
                    &dropped_view,
                    &grad_out.slice,
                    &mut grad_z_src,
                    &init
                ]
            );
            launch!(
                gpu,
                "gat_scatter_score_f32",
                src_u * heads_u,
                [
                    &t.start.slice,
                    &t.perm.slice,
                    &src_u,
                    &seg,
                    &h_u,
                    &du.slice,
                    &mut grad_a_src,
                    &init
                ]
            );
            if count > 1 {
                // The value path's sums, then the score path's, one
                // workspace at a time.
                let mut carry = self.zeros((count * width) as usize, "attention segment sums")?;
                launch!(
                    gpu,
                    "gat_scatter_value_carry_f32",
                    count * width,
                    [
                        &t.start.slice,
                        &t.perm.slice,
                        &t.perm_row.slice,
                        &src_u,
                        &seg,
                        &count,
                        &h_u,
                        &c_u,
                        &dropped_view,
                        &grad_out.slice,
                        &mut carry.slice
                    ]
                );
                self.fix_segments(
                    &t.start,
                    src_u,
                    (seg, count),
                    &carry,
                    width,
                    &mut grad_z_src,
                )?;
                drop(carry);
                let mut carry = self.zeros((count * heads_u) as usize, "attention segment sums")?;
                launch!(
                    gpu,
                    "gat_scatter_score_carry_f32",
                    count * heads_u,
                    [
                        &t.start.slice,
                        &t.perm.slice,
                        &src_u,
                        &seg,
                        &count,
                        &h_u,
                        &du.slice,
                        &mut carry.slice
                    ]
                );
                let sums = (seg, count);
                self.fix_segments(&t.start, src_u, sums, &carry, heads_u, &mut grad_a_src)?;
            }
        }
        Ok(vec![out(grad_src), out(grad_dst)])
    }
}

/// Most bytes of the first layer's input dropped at once before they are
/// projected: one slab's workspace.
const PROJECT_SLAB_BYTES: usize = 64 << 20;

/// Rows of a slab of `d_in`-wide input (at least one).
fn project_slab_rows(d_in: usize) -> usize {
    (PROJECT_SLAB_BYTES / (d_in.max(1) * 4)).max(1)
}

/// Device bytes the operators allocate beyond the plan's tensors, at most
/// (an upper bound: the largest of each kind of workspace, added): the
/// masks, a block's transpose, attention temporaries, a slab of the first
/// layer's dropped input, the first aggregation's keep bits, the loss's
/// per-row values, a bias-added copy, an aggregation's segment sums.
fn workspace_bytes(model: &Model) -> u64 {
    let p = model.partitions();
    let max_rows = (0..p)
        .map(|i| model.rows(i).len() as u64)
        .max()
        .unwrap_or(0);
    let max_nnz = model
        .block_edges
        .iter()
        .flatten()
        .copied()
        .max()
        .unwrap_or(0);
    let width = (model.features.max(model.classes) as u64).max(model.hyper.hidden as u64);
    let heads = model.hyper.heads.max(1) as u64;
    let nodes = model.offsets.last().copied().unwrap_or(0);
    let masks = 3 * nodes;
    // Built transposes only (GAT's, or with `Transposes::Built`).
    let transpose = match model.stored_transposes() {
        true => 0,
        false => (max_rows + 1) * 8 + 2 * max_rows * 4 + 2 * max_nnz * 4,
    };
    let attention = 2 * max_nnz * heads * 4 + 2 * max_rows * heads * 4;
    let dense = max_rows * width * 4;
    let loss = max_rows * 9 + max_rows.div_ceil(REDUCE_ROWS as u64) * 7 * 8;
    let partials = max_rows.div_ceil(REDUCE_ROWS as u64) * 2 * width * 4 + 3 * width * 4;
    let dropped_slab = dense.min(PROJECT_SLAB_BYTES as u64);
    // The first aggregation's keep bits of its dropped source rows.
    let keep_bits = max_rows * (model.features as u64).div_ceil(64) * 8;
    // One kernel's segment sums at a time (an aggregation's, or one of
    // GAT's: its widest are `heads × head_width`, a layer's output). At a
    // width w of at most `width`, ceil(nnz / seg) · w · 4 bytes is at most
    // the smaller of nnz · w · 4 / 256 and CARRY_BYTES, plus one
    // segment's w · 4.
    let carry = match max_nnz > SEGMENT_EDGES {
        false => 0,
        true => (max_nnz * width * 4 / SEGMENT_EDGES).min(CARRY_BYTES) + width * 4,
    };
    masks
        + transpose
        + attention
        + dense
        + dropped_slab
        + keep_bits
        + loss
        + partials
        + carry
        + (1 << 20)
}

impl GnnBackend for CudaGnn {
    fn set_mode(&mut self, mode: Mode) {
        self.model.mode = mode;
    }

    fn metrics(&self) -> Result<Metrics, ExecError> {
        Ok(self.metrics)
    }

    fn device_peak_bytes(&self) -> Option<u64> {
        Some(CudaGnn::device_peak_bytes(self))
    }
}

impl CudaGnn {
    /// One operator, queued on the compute stream.
    fn run_op(&mut self, op: &Op, inputs: &[&Data]) -> Result<Vec<Data>, ExecError> {
        let name = Name::parse(&op.name)?;
        if name.base == "linear_bwd" {
            // After the first partition, the weight gradient is added into
            // the running sum over the partitions before it (as the CPU
            // backend's, the same bits as summing them in order).
            let own = self.model.linear_bwd_inputs(name.get('l')?);
            if let (own, Some(before)) = running_sum(op, inputs, own)? {
                let mut outputs = self.run_op(op, own)?;
                let before = f32s(op, before)?;
                let gpu = self.gpu.clone();
                let dw = match outputs.first_mut() {
                    Some(Data::Held(held)) => held.get_mut::<GpuTensor>(),
                    _ => None,
                };
                let Some(GpuTensor::F32(dw)) = dw else {
                    return Err(not_a_gradient(op));
                };
                expect_len(op, "the running sum", before.len(), dw.len())?;
                let (n, accumulate) = (dw.len() as u64, 1i32);
                launch!(
                    gpu,
                    "sum_into_f32",
                    n,
                    [&before.slice, &n, &mut dw.slice, &accumulate]
                );
                return Ok(outputs);
            }
        }
        if self.model.hyper.model == GnnModel::Gat {
            if let Some(outputs) = self.run_gat(op, &name, inputs)? {
                return Ok(outputs);
            }
        }
        let terms = self.model.terms();
        let gpu = self.gpu.clone();
        match name.base {
            "agg" => {
                let (l, j) = (name.get('l')?, name.get('s')?);
                let (d_in, d_out) = self.model.dims(l);
                // A projecting-first layer aggregates its projected rows
                // (`linear` dropped its input before projecting them);
                // otherwise the aggregation reads the layer's input and
                // the first layer's input dropout applies here.
                let (d, mask) = if self.model.projects_first(l) {
                    (d_out, None)
                } else {
                    (d_in, self.model.dropout(SITE_INPUT, l).filter(|_| l == 1))
                };
                let b = block(op, inputs[0])?;
                let src = f32s(op, inputs[1])?;
                expect_len(op, "input", src.len(), self.model.rows(j).len() * d)?;
                let start = self.start(op, inputs, 2)?;
                let agg = self.gather(op, b, src, d, start, (mask, self.model.row0(j)))?;
                Ok(vec![out(agg)])
            }
            "linear" if self.model.projects_first(name.get('l')?) => {
                // `dropout(h_i) · W` without the bias: the layer's `relu`
                // (or `bias`) adds it after the aggregation. As GAT's
                // projection, the first layer's input dropout applies
                // here, keyed by partition i's rows.
                let (l, i) = (name.get('l')?, name.get('p')?);
                let (d_in, _) = self.model.dims(l);
                arity(op, inputs, 2)?;
                let (x, w) = (f32s(op, inputs[0])?, f32s(op, inputs[1])?);
                expect_len(op, "weights", w.len(), self.model.weight_len(l))?;
                expect_len(op, "input", x.len(), self.model.rows(i).len() * d_in)?;
                Ok(vec![out(self.project(l, i, x, w)?)])
            }
            "linear" => {
                let l = name.get('l')?;
                let (d_in, d_out) = self.model.dims(l);
                arity(op, inputs, terms + 1)?;
                let w = f32s(op, inputs[terms])?;
                expect_len(op, "weights", w.len(), self.model.weight_len(l))?;
                let rows = f32s(op, inputs[0])?.len() / d_in;
                let mut z = self.zeros(rows * d_out, "z")?;
                for (k, input) in inputs[..terms].iter().enumerate() {
                    let x = f32s(op, input)?;
                    expect_len(op, "input", x.len(), rows * d_in)?;
                    let wk = w.slice.slice(k * d_in * d_out..(k + 1) * d_in * d_out);
                    self.gemm(&x.slice, &wk, &mut z.slice, rows, d_in, d_out, k > 0)?;
                }
                let bias = w.slice.slice(terms * d_in * d_out..w.len());
                let (rows_u, width) = (rows as u64, d_out as u64);
                launch!(
                    gpu,
                    "add_bias_inplace_f32",
                    rows_u * width,
                    [&mut z.slice, &rows_u, &width, &bias]
                );
                Ok(vec![out(z)])
            }
            "relu" | "relu_bwd" | "relu_mask" => {
                let (l, i) = (name.get('l')?, name.get('p')?);
                let (_, d_out) = self.model.dims(l);
                let (key, threshold, scale) = mask_args(self.model.dropout(SITE_HIDDEN, l));
                let base = self.model.row0(i) * d_out as u64;
                // A projecting-first layer's relu and relu_mask read the
                // aggregation and the weights and evaluate at `agg + bias`
                // (the projection had no bias); otherwise they read the
                // linear layer's output `z`. The backward reads the mask,
                // or in a plan from before the masks what relu read.
                let projects_first = self.model.projects_first(l);
                let rows = self.model.rows(i).len();
                // The pre-activation: `inputs[at]`, or for a layer that
                // projects first `agg + bias` of `inputs[at]` and
                // `inputs[at + 1]` (the weights).
                let pre_activation = |at: usize| -> Result<Option<DeviceBuf<f32>>, ExecError> {
                    if !projects_first {
                        return Ok(None);
                    }
                    let agg = f32s(op, inputs[at])?;
                    expect_len(op, "the aggregation", agg.len(), rows * d_out)?;
                    Ok(Some(self.plus_bias(
                        op,
                        l,
                        agg,
                        f32s(op, inputs[at + 1])?,
                    )?))
                };
                if name.base == "relu" {
                    arity(op, inputs, if projects_first { 2 } else { 1 })?;
                    let biased = pre_activation(0)?;
                    let z = match &biased {
                        Some(b) => b,
                        None => f32s(op, inputs[0])?,
                    };
                    let mut h = self.zeros(z.len(), "relu")?;
                    let n = z.len() as u64;
                    launch!(
                        gpu,
                        "relu_dropout_f32",
                        n,
                        [&z.slice, &n, &mut h.slice, &key, &threshold, &scale, &base]
                    );
                    Ok(vec![out(h)])
                } else if name.base == "relu_mask" {
                    // One bit an element, in 64-bit words.
                    arity(op, inputs, if projects_first { 2 } else { 1 })?;
                    let biased = pre_activation(0)?;
                    let z = match &biased {
                        Some(b) => b,
                        None => f32s(op, inputs[0])?,
                    };
                    let mut bits = self.gpu.zeros::<i64>(z.len().div_ceil(64), "relu mask")?;
                    let n = z.len() as u64;
                    launch!(
                        gpu,
                        "positive_bits_f32",
                        n.div_ceil(64) * 64,
                        [&z.slice, &n, &mut bits.slice]
                    );
                    Ok(vec![device_data(GpuTensor::I64(bits))])
                } else if inputs.len() == 2 && matches!(tensor(op, inputs[1])?, GpuTensor::I64(_)) {
                    // From the mask (`relu_mask`).
                    let grad = f32s(op, inputs[0])?;
                    let bits = i64s(op, inputs[1])?;
                    expect_len(op, "mask words", bits.len(), grad.len().div_ceil(64))?;
                    let mut dz = self.zeros(grad.len(), "relu gradient")?;
                    let n = grad.len() as u64;
                    launch!(
                        gpu,
                        "relu_dropout_bwd_bits_f32",
                        n,
                        [
                            &grad.slice,
                            &bits.slice,
                            &n,
                            &mut dz.slice,
                            &key,
                            &threshold,
                            &scale,
                            &base
                        ]
                    );
                    Ok(vec![out(dz)])
                } else {
                    // From the pre-activation: a plan made before the masks.
                    arity(op, inputs, if projects_first { 3 } else { 2 })?;
                    let grad = f32s(op, inputs[0])?;
                    let biased = pre_activation(1)?;
                    let z = match &biased {
                        Some(b) => b,
                        None => f32s(op, inputs[1])?,
                    };
                    expect_len(op, "gradient", grad.len(), z.len())?;
                    let mut dz = self.zeros(z.len(), "relu gradient")?;
                    let n = z.len() as u64;
                    launch!(
                        gpu,
                        "relu_dropout_bwd_f32",
                        n,
                        [
                            &grad.slice,
                            &z.slice,
                            &n,
                            &mut dz.slice,
                            &key,
                            &threshold,
                            &scale,
                            &base
                        ]
                    );
                    Ok(vec![out(dz)])
                }
            }
            "bias" => {
                // The last layer of a projecting-first GCN: its projection
                // had no bias, so the logits are `agg + bias` (as GAT's).
                let (l, i) = (name.get('l')?, name.get('p')?);
                let (_, d_out) = self.model.dims(l);
                arity(op, inputs, 2)?;
                let (agg, w) = (f32s(op, inputs[0])?, f32s(op, inputs[1])?);
                let rows = self.model.rows(i).len();
                expect_len(op, "the aggregation", agg.len(), rows * d_out)?;
                Ok(vec![out(self.plus_bias(op, l, agg, w)?)])
            }
            "loss" => {
                let i = name.get('p')?;
                let value = self.loss(op, i, f32s(op, inputs[0])?, i64s(op, inputs[1])?)?;
                Ok(vec![value])
            }
            "loss_bwd" => {
                let i = name.get('p')?;
                Ok(vec![self.loss_bwd(
                    op,
                    i,
                    f32s(op, inputs[0])?,
                    i64s(op, inputs[1])?,
                )?])
            }
            "linear_bwd" if self.model.projects_first(name.get('l')?) => {
                // Inputs: the projection's gradient (from the transposed
                // aggregations), the layer's input, the weights, and the
                // gradient at `agg + bias` (relu_bwd's output, or the
                // logits' gradient), whose column sums are the bias's.
                let (l, j) = (name.get('l')?, name.get('p')?);
                let (d_in, d_out) = self.model.dims(l);
                arity(op, inputs, 4)?;
                let dxw = f32s(op, inputs[0])?;
                let x = f32s(op, inputs[1])?;
                let w = f32s(op, inputs[2])?;
                let dz = f32s(op, inputs[3])?;
                expect_len(op, "weights", w.len(), self.model.weight_len(l))?;
                let matrix = d_in * d_out;
                let rows = self.model.rows(j).len();
                expect_len(op, "the projection's gradient", dxw.len(), rows * d_out)?;
                expect_len(op, "input", x.len(), rows * d_in)?;
                expect_len(op, "gradient", dz.len(), rows * d_out)?;
                let mut dw = self.zeros(w.len(), "grad_w")?;
                // The forward projected the dropped input (first layer).
                let dx = self.project_bwd(l, j, dxw, x, w, &mut dw)?;
                {
                    let mut bias = dw.slice.slice_mut(matrix..w.len());
                    self.column_sums(&dz.slice.slice(0..dz.len()), rows, d_out, &mut bias)?;
                }
                let mut outputs = vec![out(dw)];
                outputs.extend(dx.map(out));
                Ok(outputs)
            }
            "linear_bwd" => {
                let l = name.get('l')?;
                let (d_in, d_out) = self.model.dims(l);
                arity(op, inputs, terms + 2)?;
                let dz = f32s(op, inputs[0])?;
                let w = f32s(op, inputs[1 + terms])?;
                expect_len(op, "weights", w.len(), self.model.weight_len(l))?;
                let rows = dz.len() / d_out;
                let mut dw = self.zeros(w.len(), "grad_w")?;
                for k in 0..terms {
                    let x = f32s(op, inputs[1 + k])?;
                    expect_len(op, "input", x.len(), rows * d_in)?;
                    let mut dwk = dw.slice.slice_mut(k * d_in * d_out..(k + 1) * d_in * d_out);
                    self.gemm_dw(&x.slice, &dz.slice, &mut dwk, rows, d_in, d_out, false)?;
                }
                {
                    let mut bias = dw.slice.slice_mut(terms * d_in * d_out..w.len());
                    self.column_sums(&dz.slice.slice(0..dz.len()), rows, d_out, &mut bias)?;
                }
                let mut outputs = vec![out(dw)];
                if l > 1 {
                    // Outputs: grad_w, grad_agg, then (SAGE) grad_self.
                    let mut grads = Vec::with_capacity(terms);
                    for k in 0..terms {
                        let mut dx = self.zeros(rows * d_in, "grad_h")?;
                        let wk = w.slice.slice(k * d_in * d_out..(k + 1) * d_in * d_out);
                        self.gemm_dx(&dz.slice, &wk, &mut dx.slice, rows, d_in, d_out)?;
                        grads.push(dx);
                    }
                    while let Some(dx) = grads.pop() {
                        outputs.push(out(dx));
                    }
                }
                Ok(outputs)
            }
            "grad_accumulate" => {
                let parts: Vec<&DeviceBuf<f32>> = inputs
                    .iter()
                    .map(|d| f32s(op, d))
                    .collect::<Result<_, _>>()?;
                let len = parts.first().map_or(0, |p| p.len());
                let mut sum = self.zeros(len, "accumulated gradient")?;
                let n = len as u64;
                for (k, part) in parts.iter().enumerate() {
                    expect_len(op, "a gradient", part.len(), len)?;
                    let accumulate = i32::from(k > 0);
                    launch!(
                        gpu,
                        "sum_into_f32",
                        n,
                        [&part.slice, &n, &mut sum.slice, &accumulate]
                    );
                }
                Ok(vec![out(sum)])
            }
            "agg_bwd" => {
                let l = name.get('l')?;
                // A projecting-first layer aggregated its projected rows.
                let d = self.model.width_aggregated(l);
                let b = block(op, inputs[0])?;
                let grad = f32s(op, inputs[1])?;
                let start = self.start(op, inputs, 2)?;
                let (j, i) = (name.get('p')?, name.get('d')?);
                let rows = self.model.rows(j).len();
                if self.model.stored_transposes() {
                    // A gather over the stored transpose: its rows are
                    // partition j's, its columns partition i's.
                    expect_len(op, "stored transpose's rows", b.rows(), rows)?;
                    let dst_rows = self.model.rows(i).len();
                    expect_len(op, "gradient", grad.len(), dst_rows * d)?;
                    let dsrc = self.gather(op, b, grad, d, start, (None, 0))?;
                    return Ok(vec![out(dsrc)]);
                }
                expect_len(op, "gradient", grad.len(), b.rows() * d)?;
                let (mut dsrc, mode, init_buf) =
                    self.start_sums(op, start, rows * d, "agg gradient")?;
                let init_buf = &init_buf.unwrap_or(&gpu.dummy).slice;
                let t = self.transposed((i, j), b, rows)?;
                let (src_u, width) = (rows as u64, d as u64);
                let (weighting, dst_rows) = (b.weighting.code(), b.rows() as u64);
                let (seg, count) = segments(b.nnz() as u64, width);
                launch!(
                    gpu,
                    "spmm_t_f32",
                    src_u * width,
                    [
                        &t.start.slice,
                        &t.perm.slice,
                        &t.perm_row.slice,
                        &b.weights.slice,
                        &weighting,
                        &dst_rows,
                        &src_u,
                        &seg,
                        &grad.slice,
                        &width,
                        init_buf,
                        &mode,
                        &mut dsrc.slice
                    ]
                );
                if count > 1 {
                    let mut carry = self.zeros((count * width) as usize, "agg_bwd segment sums")?;
                    launch!(
                        gpu,
                        "spmm_t_carry_f32",
                        count * width,
                        [
                            &t.start.slice,
                            &t.perm.slice,
                            &t.perm_row.slice,
                            &b.weights.slice,
                            &weighting,
                            &dst_rows,
                            &src_u,
                            &seg,
                            &count,
                            &grad.slice,
                            &width,
                            &mut carry.slice
                        ]
                    );
                    self.fix_segments(
                        &t.start,
                        src_u,
                        (seg, count),
                        &carry,
                        width,
                        &mut dsrc.view_mut(),
                    )?;
                }
                Ok(vec![out(dsrc)])
            }
            _ => Err(ExecError::Kernel(format!(
                "the CUDA backend cannot run {}",
                op.name
            ))),
        }
    }
}

impl Backend for CudaGnn {
    fn mover(&self) -> Arc<dyn Mover> {
        Arc::new(CudaMover {
            gpu: self.gpu.clone(),
        })
    }

    fn external(&mut self, tensor: &Tensor) -> Result<Data, ExecError> {
        self.model.external(&self.graph, tensor)
    }

    fn externals_placed(&mut self) {
        self.graph.x = Vec::new();
        self.graph.y = Vec::new();
        self.graph.blocks = Vec::new();
    }

    fn begin_iteration(&mut self, _iteration: u64) -> Result<(), ExecError> {
        self.metrics = Metrics::default();
        self.model.begin_iteration();
        self.gpu
            .ctx
            .bind_to_thread()
            .map_err(|e| cuda_error("binding the context", e))
    }

    /// A GCN or SAGE aggregation (forward or transposed) whose partial
    /// sum, its third input, is handed over adds its block into that
    /// buffer (`INIT_OUT`); any other operator runs as `run`.
    fn run_owned(&mut self, op: &Op, mut inputs: Vec<Arc<Data>>) -> Result<Vec<Data>, ExecError> {
        let name = Name::parse(&op.name)?;
        let accumulates = self.model.hyper.model != GnnModel::Gat
            && matches!(name.base, "agg" | "agg_bwd")
            && inputs.len() == 3;
        self.handed = None;
        if accumulates {
            let placeholder = Arc::new(Data::F32(Vec::new()));
            match Arc::try_unwrap(std::mem::replace(&mut inputs[2], placeholder)) {
                Ok(Data::Held(held)) => match held.take::<GpuTensor>() {
                    Ok(GpuTensor::F32(sums)) => self.handed = Some(sums),
                    Ok(other) => inputs[2] = Arc::new(device_data(other)),
                    Err(held) => inputs[2] = Arc::new(Data::Held(held)),
                },
                Ok(other) => inputs[2] = Arc::new(other),
                Err(shared) => inputs[2] = shared,
            }
        }
        let refs: Vec<&Data> = inputs.iter().map(|d| d.as_ref()).collect();
        let result = self.run(op, &refs);
        if self.handed.take().is_some() && result.is_ok() {
            return Err(ExecError::Internal(format!(
                "{} left a partial sum it was handed unused",
                op.name
            )));
        }
        result
    }

    fn run(&mut self, op: &Op, inputs: &[&Data]) -> Result<Vec<Data>, ExecError> {
        let outputs = self.run_op(op, inputs)?;
        if self.synchronize_operators {
            self.gpu
                .compute
                .synchronize()
                .map_err(|e| cuda_error(&op.name, e))?;
        }
        Ok(outputs)
    }

    fn update(
        &mut self,
        op: &Op,
        params: &mut [&mut Data],
        others: &[&Data],
    ) -> Result<(), ExecError> {
        if self.model.mode == Mode::Eval {
            return Ok(());
        }
        let name = Name::parse(&op.name)?;
        let adam = self.model.adam(name.get('l')?);
        let [w, m, v] = params else {
            return Err(ExecError::Internal(format!(
                "{} expects three parameters",
                op.name
            )));
        };
        let grad = f32s(
            op,
            others
                .first()
                .ok_or_else(|| ExecError::Internal(format!("{} has no gradient", op.name)))?,
        )?;
        let t = self.model.updates;
        if t == 0 {
            return Err(ExecError::Internal(format!(
                "{}: an update before the first training iteration",
                op.name
            )));
        }
        // As the CPU's Adam: the bias corrections in f64, rounded to f32.
        let bias_correction1 = 1.0 - (adam.beta1 as f64).powi(t as i32);
        let bias_correction2 = 1.0 - (adam.beta2 as f64).powi(t as i32);
        let step_size = (adam.lr as f64 / bias_correction1) as f32;
        let bias_correction2_sqrt = bias_correction2.sqrt() as f32;
        let (w, m, v) = (f32s_mut(op, w)?, f32s_mut(op, m)?, f32s_mut(op, v)?);
        let n = w.len();
        expect_len(op, "gradient", grad.len(), n)?;
        expect_len(op, "adam_m", m.len(), n)?;
        expect_len(op, "adam_v", v.len(), n)?;
        let n = n as u64;
        let (b1, b2, eps, wd) = (adam.beta1, adam.beta2, adam.eps, adam.weight_decay);
        launch!(
            self.gpu,
            "adam_f32",
            n,
            [
                &mut w.slice,
                &grad.slice,
                &mut m.slice,
                &mut v.slice,
                &n,
                &b1,
                &b2,
                &eps,
                &wd,
                &step_size,
                &bias_correction2_sqrt
            ]
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_too_large_for_32_bit_edge_ids_is_refused_not_truncated() {
        let most = u32::MAX as usize;
        assert!(check_transpose_edges(most).is_ok());
        let error = check_transpose_edges(most + 1).unwrap_err().to_string();
        assert!(
            error.contains(
                "partition block: 4294967296 edges, more than the CUDA backend transposes (at most 4294967295"
            ),
            "{error}"
        );
    }

    /// The planner counts each operator's scratch with these constants
    /// (`fateplan_planner::scratch`): they must be the kernels' own.
    #[test]
    fn the_planner_counts_scratch_with_the_kernels_constants() {
        use fateplan_planner::scratch;
        assert_eq!(SEGMENT_EDGES, scratch::SEGMENT_EDGES);
        assert_eq!(CARRY_BYTES, scratch::CARRY_BYTES);
        assert_eq!(PROJECT_SLAB_BYTES as u64, scratch::PROJECT_SLAB_BYTES);
        assert_eq!(fateplan_kernels::REDUCE_ROWS as u64, scratch::REDUCE_ROWS);
        assert_eq!(fateplan_kernels::REDUCE_GROUP as u64, scratch::REDUCE_GROUP);
        assert_eq!(
            fateplan_kernels::dense::DROPPED_LANES as u64,
            scratch::DROPPED_LANES
        );
        assert_eq!(
            fateplan_kernels::dense::FEW_CHUNKS as u64,
            scratch::FEW_CHUNKS
        );
        assert_eq!(
            fateplan_kernels::dense::GRAD_LANES as u64,
            scratch::GRAD_LANES
        );
        assert_eq!(
            fateplan_kernels::dense::GRAD_LANE_MAX_VALUES as u64 * 4,
            scratch::GRAD_LANE_MAX_BYTES
        );
        assert_eq!(
            fateplan_kernels::sparse::MASK_WORKSPACE_ROWS_PER_EDGE as u64,
            scratch::MASK_WORKSPACE_ROWS_PER_EDGE
        );
        assert_eq!(
            fateplan_kernels::sparse::USED_ROWS_EDGES_PER_ROW as u64,
            scratch::USED_ROWS_EDGES_PER_ROW
        );
    }

    #[test]
    fn segments_hold_256_edges_unless_their_sums_would_pass_the_carry_bytes() {
        assert_eq!(segments(0, 64), (256, 0));
        assert_eq!(segments(256, 64), (256, 1));
        assert_eq!(segments(257, 64), (256, 2));
        // 126 million edges of rows 256 wide: segments of 1,920 edges,
        // whose sums take at most the carry bytes.
        let (seg, count) = segments(125_829_120, 256);
        assert_eq!(seg, 1920);
        assert!(count * 256 * 4 <= CARRY_BYTES, "{count} segments");
        for (nnz, width) in [
            (1u64, 1u64),
            (10_000_000, 47),
            (1 << 30, 1024),
            (3, 1 << 20),
        ] {
            let (seg, count) = segments(nnz, width);
            assert!(seg >= SEGMENT_EDGES && count * seg >= nnz && (count - 1) * seg < nnz);
            assert!(
                count * width * 4 <= CARRY_BYTES + width * 4,
                "{nnz} x {width}"
            );
        }
    }
}

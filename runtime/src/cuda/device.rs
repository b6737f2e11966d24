//! One GPU as the backend uses it: a context with three streams (compute,
//! host-to-device, device-to-host), cuBLAS on the compute stream, the
//! kernels compiled once per context, a device memory pool with a hard
//! byte cap, and pinned host buffers for the host tier.
//!
//! Ordering between streams is cudarc's event tracking: every device
//! buffer records an event when a stream writes or reads it, and a stream
//! that uses it next waits for those events. So a copy to the host waits
//! for the kernel that wrote the tensor, a kernel waits for the copy that
//! brought its input, and a buffer is freed (stream-ordered) only after
//! its last use on any stream. A transfer lane waits for its own stream
//! before it reports the copy done.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::cublas::CudaBlas;
use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaViewMut,
    DeviceRepr, HostSlice, LaunchConfig, PinnedHostSlice, ValidAsZeroBits,
};
use cudarc::nvrtc::Ptx;

use fateplan_kernels::cuda::Source;
use fateplan_kernels::Weighting;

use crate::exec::data::{BlockData, Data, Held};
use crate::exec::{ExecError, Mover};

use super::keep::Keeper;
use super::nvrtc;

/// Threads per block of every launch.
pub(crate) const BLOCK_THREADS: u32 = 256;
/// Most blocks of a launch; kernels stride over the rest.
const MAX_BLOCKS: u64 = 1 << 20;

pub(crate) fn cuda_error(what: &str, error: impl std::fmt::Debug) -> ExecError {
    ExecError::Cuda(format!("{what}: {error:?}"))
}

/// How to use the GPU.
#[derive(Debug, Clone, Default)]
pub struct CudaOptions {
    /// The device's ordinal.
    pub device: usize,
    /// A folder for compiled kernels (keyed by source, architecture and
    /// NVRTC version); `None` compiles at every start.
    pub kernel_cache_dir: Option<PathBuf>,
    /// Device bytes allowed beyond the plan's device budget for kernel
    /// workspaces the planner does not count; `None`: what the model
    /// needs at most (see `CudaGnn::workspace_bytes`).
    pub workspace_bytes: Option<u64>,
    /// Wait for each operator's kernels before returning it to the
    /// executor, so that the executor's operator spans are the GPU's
    /// times (the profiler's rates). Training leaves it off: operators
    /// then queue on the compute stream while the host runs ahead.
    pub synchronize_operators: bool,
    /// Time every kernel between a pair of events and print each
    /// kernel's total when the device is dropped (`train` sets it where
    /// `FATEPLAN_KERNEL_TIMES` is set).
    pub kernel_times: bool,
    /// Build every transposed aggregation's transpose afresh instead of
    /// keeping the last block's for the next one over the same block
    /// (the profiler times the builds this way).
    pub rebuild_transposes: bool,
    /// Make the compute stream wait for each load's copy as soon as the
    /// copy is issued, as builds before did: every operator launched after
    /// that then waits for the copy on the GPU, those that do not read it
    /// too. Off (the default), nothing waits on the GPU: the executor is
    /// handed a load only once its copy finished (the copy stream
    /// synchronised), so the operators that read it are launched after
    /// it, and the copy overlaps whatever the compute stream runs
    /// meanwhile. `train` sets it where `FATEPLAN_LOADS_WAIT` is set, to
    /// time the two side by side.
    pub compute_waits_for_loads: bool,
    /// Host bytes for the host tier's pinned buffers (training sets the
    /// host budget less the SSD staging buffers charged to it): those in
    /// use and those kept for reuse stay within it (or within the most in
    /// use at once, if more). `None`: every buffer is kept for reuse, at
    /// most per size the most of that size in use at once.
    pub host_budget_bytes: Option<u64>,
}

/// What [`probe`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub total_bytes: u64,
    pub devices: i32,
}

/// Checks for the driver, a device, NVRTC and cuBLAS, in that order, and
/// describes device `ordinal`; the error says which is missing. Never
/// panics, whatever is installed.
pub fn probe(ordinal: usize) -> Result<DeviceInfo, ExecError> {
    if !nvrtc::driver_available() {
        return Err(ExecError::Cuda(
            "no CUDA driver: libcuda.so was not found (is an NVIDIA driver installed?)".into(),
        ));
    }
    let devices = CudaContext::device_count()
        .map_err(|e| ExecError::Cuda(format!("the CUDA driver found no usable device ({e:?})")))?;
    if devices <= ordinal as i32 {
        return Err(ExecError::Cuda(format!(
            "CUDA device {ordinal} does not exist ({devices} found)"
        )));
    }
    if !nvrtc::nvrtc_available() {
        return Err(ExecError::Cuda(nvrtc::missing_nvrtc()));
    }
    if !nvrtc::cublas_available() {
        return Err(ExecError::Cuda(
            "libcublas was not found: install cuBLAS (CUDA 13) and put its folder on \
             LD_LIBRARY_PATH"
                .into(),
        ));
    }
    let ctx = CudaContext::new(ordinal).map_err(|e| cuda_error("creating a context", e))?;
    Ok(DeviceInfo {
        name: ctx.name().map_err(|e| cuda_error("device name", e))?,
        compute_capability: ctx
            .compute_capability()
            .map_err(|e| cuda_error("compute capability", e))?,
        total_bytes: ctx
            .total_mem()
            .map_err(|e| cuda_error("device memory", e))? as u64,
        devices,
    })
}

/// Pinned host memory to and from device `ordinal`, as the host tier's
/// copies go: one stream each way, a copy of `bytes` from (or into) a
/// pinned buffer, timed from its issue to the end of the stream's wait.
#[derive(Debug, Clone, PartialEq)]
pub struct CopyRates {
    /// Medians over the rounds.
    pub h2d_bytes_per_s: f64,
    pub d2h_bytes_per_s: f64,
    /// The median time of a one-value copy to the device and back, halved.
    pub latency_s: f64,
    pub bytes: usize,
    pub rounds: u32,
}

/// Times pinned copies of `bytes` each way, `rounds` times after one
/// left out, and `rounds` one-value copies.
pub fn copy_rates(ordinal: usize, bytes: usize, rounds: u32) -> Result<CopyRates, ExecError> {
    probe(ordinal)?;
    let ctx = CudaContext::new(ordinal).map_err(|e| cuda_error("creating a context", e))?;
    let h2d = ctx.new_stream().map_err(|e| cuda_error("a stream", e))?;
    let d2h = ctx.new_stream().map_err(|e| cuda_error("a stream", e))?;
    let n = (bytes / 4).max(1);
    // SAFETY: written in full below before any copy reads it.
    let mut host = unsafe { ctx.alloc_pinned_with_flags::<f32>(n, 0) }
        .map_err(|e| cuda_error("allocating pinned host memory", e))?;
    for (i, v) in host
        .as_mut_slice()
        .map_err(|e| cuda_error("pinned host memory", e))?
        .iter_mut()
        .enumerate()
    {
        *v = (i % 1021) as f32;
    }
    let mut device = h2d
        .alloc_zeros::<f32>(n)
        .map_err(|e| cuda_error("device memory", e))?;
    // SAFETY: its one value is written on the next line.
    let mut one_host = unsafe { ctx.alloc_pinned_with_flags::<f32>(1, 0) }
        .map_err(|e| cuda_error("allocating pinned host memory", e))?;
    one_host
        .as_mut_slice()
        .map_err(|e| cuda_error("pinned host memory", e))?[0] = 1.0;
    let mut one_device = h2d
        .alloc_zeros::<f32>(1)
        .map_err(|e| cuda_error("device memory", e))?;
    h2d.synchronize().map_err(|e| cuda_error("a stream", e))?;
    let median_of = |mut seconds: Vec<f64>| {
        seconds.sort_by(f64::total_cmp);
        seconds[seconds.len() / 2]
    };
    let rounds = rounds.max(1);
    let timed = |f: &mut dyn FnMut() -> Result<(), ExecError>| -> Result<f64, ExecError> {
        f()?;
        let mut seconds = Vec::with_capacity(rounds as usize);
        for _ in 0..rounds {
            let start = std::time::Instant::now();
            f()?;
            seconds.push(start.elapsed().as_secs_f64());
        }
        Ok(median_of(seconds))
    };
    let copy_bytes = (n * 4) as f64;
    let up = timed(&mut || {
        h2d.memcpy_htod(&host, &mut device)
            .map_err(|e| cuda_error("host-to-device copy", e))?;
        h2d.synchronize()
            .map_err(|e| cuda_error("host-to-device copy", e))
    })?;
    let down = timed(&mut || {
        d2h.memcpy_dtoh(&device, &mut host)
            .map_err(|e| cuda_error("device-to-host copy", e))?;
        d2h.synchronize()
            .map_err(|e| cuda_error("device-to-host copy", e))
    })?;
    let round_trip = timed(&mut || {
        h2d.memcpy_htod(&one_host, &mut one_device)
            .map_err(|e| cuda_error("host-to-device copy", e))?;
        h2d.synchronize()
            .map_err(|e| cuda_error("host-to-device copy", e))?;
        d2h.memcpy_dtoh(&one_device, &mut one_host)
            .map_err(|e| cuda_error("device-to-host copy", e))?;
        d2h.synchronize()
            .map_err(|e| cuda_error("device-to-host copy", e))
    })?;
    Ok(CopyRates {
        h2d_bytes_per_s: copy_bytes / up,
        d2h_bytes_per_s: copy_bytes / down,
        latency_s: round_trip / 2.0,
        bytes: n * 4,
        rounds,
    })
}

/// Device bytes in use, against a hard cap.
#[derive(Debug)]
pub(crate) struct Pool {
    cap_bytes: u64,
    used_bytes: AtomicU64,
    peak_bytes: AtomicU64,
}

impl Pool {
    fn charge(&self, bytes: u64, what: &str) -> Result<(), ExecError> {
        let mut used = self.used_bytes.load(Ordering::Relaxed);
        loop {
            let needed = used + bytes;
            if needed > self.cap_bytes {
                return Err(ExecError::Cuda(format!(
                    "device pool over its cap: {what} needs {bytes} bytes with {used} in use; \
                     the cap (device budget plus workspace) is {}",
                    self.cap_bytes
                )));
            }
            match self.used_bytes.compare_exchange_weak(
                used,
                needed,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.peak_bytes.fetch_max(needed, Ordering::Relaxed);
                    return Ok(());
                }
                Err(now) => used = now,
            }
        }
    }

    fn release(&self, bytes: u64) {
        self.used_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// A device buffer charged to the pool while it lives.
#[derive(Debug)]
pub(crate) struct DeviceBuf<T> {
    pub(crate) slice: CudaSlice<T>,
    len: usize,
    pool: Arc<Pool>,
}

impl<T> DeviceBuf<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The buffer's `len` values, writable.
    pub(crate) fn view_mut(&mut self) -> CudaViewMut<'_, T> {
        self.slice.slice_mut(0..self.len)
    }

    fn bytes(&self) -> u64 {
        (self.len * std::mem::size_of::<T>()) as u64
    }
}

impl<T> Drop for DeviceBuf<T> {
    fn drop(&mut self) {
        self.pool.release(self.bytes());
    }
}

/// A block's CSR on the device.
#[derive(Debug)]
pub(crate) struct GpuBlock {
    pub(crate) row_start: DeviceBuf<u64>,
    pub(crate) columns: DeviceBuf<u32>,
    pub(crate) weights: DeviceBuf<f32>,
    /// How `weights` weigh the edges.
    pub(crate) weighting: Weighting,
}

impl GpuBlock {
    pub(crate) fn rows(&self) -> usize {
        self.row_start.len().saturating_sub(1)
    }

    pub(crate) fn nnz(&self) -> usize {
        self.columns.len()
    }
}

/// A tensor in device memory.
#[derive(Debug)]
pub(crate) enum GpuTensor {
    F32(DeviceBuf<f32>),
    I64(DeviceBuf<i64>),
    Block(GpuBlock),
}

/// A tensor in pinned host memory: the host tier's copy.
pub(crate) enum PinnedTensor {
    F32(PinnedHostSlice<f32>),
    I64(PinnedHostSlice<i64>),
    Block {
        row_start: PinnedHostSlice<u64>,
        columns: PinnedHostSlice<u32>,
        weights: PinnedHostSlice<f32>,
        weighting: Weighting,
    },
}

/// Each kernel's time on the GPU, summed by name, where
/// [`CudaOptions::kernel_times`] asks for it (`train` sets it where the
/// environment sets `FATEPLAN_KERNEL_TIMES`): a pair of timing events
/// around every
/// launch on the compute stream (recorded by cudarc after the launch's
/// waits for other streams, so a wait for a copy is not counted) and
/// around every cuBLAS call (whose waits, made inside the call, are),
/// read back as they complete and printed when the GPU is closed. A
/// diagnosis, not for runs to be timed: the events cost the host a
/// little at each launch, and where more than [`KERNEL_TIMES_PENDING`]
/// pairs await the GPU the host waits for the oldest.
#[derive(Default)]
struct KernelTimes {
    pending: std::collections::VecDeque<(&'static str, CudaEvent, CudaEvent)>,
    /// Launches and milliseconds by kernel.
    sums: HashMap<&'static str, (u64, f64)>,
}

/// The most pairs of timing events held before the host waits for the
/// oldest to complete.
const KERNEL_TIMES_PENDING: usize = 16_384;

impl KernelTimes {
    /// Adds the elapsed times of the oldest pairs: those complete, then,
    /// while more than `keep` are left, the next after waiting for it.
    fn fold(&mut self, keep: usize) -> Result<(), ExecError> {
        while let Some((_, _, end)) = self.pending.front() {
            let complete = end
                .try_is_complete()
                .map_err(|e| cuda_error("querying a timing event", e))?;
            if !complete {
                if self.pending.len() <= keep {
                    break;
                }
                end.synchronize()
                    .map_err(|e| cuda_error("waiting for a timing event", e))?;
            }
            let Some((name, start, end)) = self.pending.pop_front() else {
                break;
            };
            let ms = start
                .elapsed_ms(&end)
                .map_err(|e| cuda_error("a kernel's elapsed time", e))?;
            let sum = self.sums.entry(name).or_default();
            *sum = (sum.0 + 1, sum.1 + f64::from(ms));
        }
        Ok(())
    }

    /// The sums as lines, the longest total first.
    fn report(&self) -> String {
        let mut rows: Vec<_> = self.sums.iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1).then(a.0.cmp(b.0)));
        let total: f64 = rows.iter().map(|(_, (_, ms))| ms).sum();
        let mut out = format!("kernel times (FATEPLAN_KERNEL_TIMES): {total:.3} ms in all\n");
        for (name, (count, ms)) in rows {
            out.push_str(&format!("  {name:28} {count:8} launches {ms:12.3} ms\n"));
        }
        out
    }
}

/// The GPU: context, streams, cuBLAS, kernels and pool.
pub(crate) struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) compute: Arc<CudaStream>,
    h2d: Arc<CudaStream>,
    d2h: Arc<CudaStream>,
    pub(crate) blas: CudaBlas,
    arch: String,
    cache_dir: Option<PathBuf>,
    modules: Mutex<HashMap<Source, Arc<CudaModule>>>,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
    pub(crate) pool: Arc<Pool>,
    /// Pinned host buffers of the host tier's copies, kept for reuse.
    pinned: Arc<PinnedPool>,
    /// A one-element buffer passed where a kernel takes a pointer it does
    /// not read (an `init` without `INIT_FROM`).
    pub(crate) dummy: DeviceBuf<f32>,
    /// The same for a `u64` pointer (an aggregation's keep bits without
    /// dropout).
    pub(crate) dummy_bits: DeviceBuf<u64>,
    /// Kernel times, where the options ask for them.
    kernel_times: Option<Mutex<KernelTimes>>,
    /// [`CudaOptions::compute_waits_for_loads`].
    compute_waits_for_loads: bool,
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if let Some(times) = self.kernel_times.take() {
            let Ok(mut times) = times.into_inner() else {
                return;
            };
            match times.fold(0) {
                Ok(()) => eprint!("{}", times.report()),
                Err(e) => eprintln!("kernel times (FATEPLAN_KERNEL_TIMES): not read: {e}"),
            }
        }
    }
}

impl Gpu {
    /// Opens device `options.device` with a pool capped at `cap_bytes`.
    pub(crate) fn open(options: &CudaOptions, cap_bytes: u64) -> Result<Arc<Gpu>, ExecError> {
        probe(options.device)?;
        let ctx =
            CudaContext::new(options.device).map_err(|e| cuda_error("creating a context", e))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| cuda_error("compute capability", e))?;
        let stream = |what: &str| {
            ctx.new_stream()
                .map_err(|e| cuda_error(&format!("creating the {what} stream"), e))
        };
        let (compute, h2d, d2h) = (stream("compute")?, stream("h2d")?, stream("d2h")?);
        keep_freed_memory(&ctx)?;
        let blas = CudaBlas::new(compute.clone()).map_err(|e| cuda_error("cuBLAS", e))?;
        let pool = Arc::new(Pool {
            cap_bytes,
            used_bytes: AtomicU64::new(0),
            peak_bytes: AtomicU64::new(0),
        });
        let dummy = alloc_on::<f32>(&compute, &pool, 1, "a placeholder")?;
        let dummy_bits = alloc_on::<u64>(&compute, &pool, 1, "a placeholder")?;
        Ok(Arc::new(Gpu {
            ctx,
            compute,
            h2d,
            d2h,
            blas,
            arch: format!("sm_{major}{minor}"),
            cache_dir: options.kernel_cache_dir.clone(),
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            pool,
            pinned: Arc::new(PinnedPool::new(options.host_budget_bytes)),
            dummy,
            dummy_bits,
            kernel_times: options
                .kernel_times
                .then(|| Mutex::new(KernelTimes::default())),
            compute_waits_for_loads: options.compute_waits_for_loads,
        }))
    }

    /// Whether kernel times are kept ([`KernelTimes`]).
    pub(crate) fn timing(&self) -> bool {
        self.kernel_times.is_some()
    }

    /// Adds a launch's timing events (as `LaunchArgs::launch` returns them
    /// after `record_kernel_launch`) to kernel `name`'s time.
    pub(crate) fn kernel_time(
        &self,
        name: &'static str,
        events: Option<(CudaEvent, CudaEvent)>,
    ) -> Result<(), ExecError> {
        let (Some(times), Some((start, end))) = (&self.kernel_times, events) else {
            return Ok(());
        };
        let mut times = times
            .lock()
            .map_err(|_| ExecError::Internal("the kernel times' lock is poisoned".into()))?;
        times.pending.push_back((name, start, end));
        times.fold(KERNEL_TIMES_PENDING)
    }

    /// Runs `call` (work queued on the compute stream by a library, as
    /// cuBLAS), timing it as `name` where kernel times are kept.
    pub(crate) fn timed<T>(
        &self,
        name: &'static str,
        call: impl FnOnce() -> Result<T, ExecError>,
    ) -> Result<T, ExecError> {
        if !self.timing() {
            return call();
        }
        let event = || {
            self.compute
                .record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| cuda_error("recording a timing event", e))
        };
        let start = event()?;
        let out = call()?;
        let end = event()?;
        self.kernel_time(name, Some((start, end)))?;
        Ok(out)
    }

    /// The flags `record_kernel_launch` takes for kernel times.
    pub(crate) const TIMING_EVENTS: sys::CUevent_flags = sys::CUevent_flags::CU_EVENT_DEFAULT;

    pub(crate) fn peak_bytes(&self) -> u64 {
        self.pool.peak_bytes.load(Ordering::Relaxed)
    }

    /// Kernel `name`, compiling its source on first use (or reading it
    /// from the cache folder).
    pub(crate) fn function(&self, name: &'static str) -> Result<CudaFunction, ExecError> {
        let poisoned = || ExecError::Internal("the kernel cache lock is poisoned".into());
        if let Some(f) = self.functions.lock().map_err(|_| poisoned())?.get(name) {
            return Ok(f.clone());
        }
        let source = Source::of_kernel(name)
            .ok_or_else(|| ExecError::Internal(format!("no CUDA source defines {name}")))?;
        let module = {
            let mut modules = self.modules.lock().map_err(|_| poisoned())?;
            match modules.get(&source) {
                Some(module) => module.clone(),
                None => {
                    let image =
                        nvrtc::compile_cached(source, &self.arch, self.cache_dir.as_deref())
                            .map_err(ExecError::Cuda)?;
                    let module = self
                        .ctx
                        .load_module(Ptx::from_binary(image))
                        .map_err(|e| cuda_error(&format!("loading {}", source.file_name()), e))?;
                    modules.insert(source, module.clone());
                    module
                }
            }
        };
        let function = module
            .load_function(name)
            .map_err(|e| cuda_error(&format!("kernel {name}"), e))?;
        self.functions
            .lock()
            .map_err(|_| poisoned())?
            .insert(name, function.clone());
        Ok(function)
    }

    /// A launch over `n` elements (grid-stride kernels).
    pub(crate) fn grid(n: u64) -> LaunchConfig {
        let blocks = n.div_ceil(BLOCK_THREADS as u64).clamp(1, MAX_BLOCKS) as u32;
        LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (BLOCK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// A zeroed buffer on the compute stream.
    pub(crate) fn zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
        what: &str,
    ) -> Result<DeviceBuf<T>, ExecError> {
        alloc_on(&self.compute, &self.pool, len, what)
    }

    /// A buffer on the compute stream whose values are left as the pool
    /// had them: for an output whose every value the next kernel on the
    /// stream writes before anything reads it (an aggregation's), which
    /// then costs no pass to zero it.
    pub(crate) fn unset<T: AnyBits>(
        &self,
        len: usize,
        what: &str,
    ) -> Result<DeviceBuf<T>, ExecError> {
        alloc_unset_on(&self.compute, &self.pool, len, what)
    }

    /// A copy of host values on the compute stream (small arguments).
    pub(crate) fn upload<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        values: &[T],
        what: &str,
    ) -> Result<DeviceBuf<T>, ExecError> {
        let mut buf = alloc_on::<T>(&self.compute, &self.pool, values.len(), what)?;
        if !values.is_empty() {
            self.compute
                .memcpy_htod(values, &mut buf.slice)
                .map_err(|e| cuda_error(what, e))?;
        }
        Ok(buf)
    }

    /// Reads a device buffer back on the compute stream (waits for it).
    pub(crate) fn download<T: DeviceRepr + Clone + Default>(
        &self,
        buf: &DeviceBuf<T>,
        what: &str,
    ) -> Result<Vec<T>, ExecError> {
        if buf.len == 0 {
            return Ok(Vec::new());
        }
        let view = buf.slice.slice(0..buf.len);
        self.compute
            .clone_dtoh(&view)
            .map_err(|e| cuda_error(what, e))
    }

    /// A copy of a device buffer on the compute stream.
    pub(crate) fn duplicate(
        &self,
        buf: &DeviceBuf<f32>,
        what: &str,
    ) -> Result<DeviceBuf<f32>, ExecError> {
        let mut copy = self.zeros::<f32>(buf.len, what)?;
        if buf.len > 0 {
            let src = buf.slice.slice(0..buf.len);
            let mut dst = copy.slice.slice_mut(0..buf.len);
            self.compute
                .memcpy_dtod(&src, &mut dst)
                .map_err(|e| cuda_error(what, e))?;
        }
        Ok(copy)
    }
}

/// Stream-ordered frees return memory to the device's pool, not to the
/// driver: the next allocation of that size reuses it.
fn keep_freed_memory(ctx: &Arc<CudaContext>) -> Result<(), ExecError> {
    use cudarc::driver::sys;
    if !ctx.has_async_alloc() {
        return Ok(());
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut threshold: u64 = u64::MAX;
    // SAFETY: valid out-pointer and device; the attribute takes a u64.
    unsafe {
        sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device())
            .result()
            .map_err(|e| cuda_error("the device's memory pool", e))?;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .result()
        .map_err(|e| cuda_error("the memory pool's release threshold", e))?;
    }
    Ok(())
}

/// Plain numbers, valid for any bits: what [`Gpu::unset`] may leave as
/// the pool's memory held it.
pub(crate) trait AnyBits: DeviceRepr + ValidAsZeroBits {}

impl AnyBits for f32 {}
impl AnyBits for u64 {}

/// A zeroed device buffer of `len` values on `stream`, charged to `pool`
/// (zero-length buffers hold one value: the driver allocates no zero).
fn alloc_on<T: DeviceRepr + ValidAsZeroBits>(
    stream: &Arc<CudaStream>,
    pool: &Arc<Pool>,
    len: usize,
    what: &str,
) -> Result<DeviceBuf<T>, ExecError> {
    charged(pool, len, what, || stream.alloc_zeros::<T>(len.max(1)))
}

/// [`alloc_on`] without the zeros.
fn alloc_unset_on<T: AnyBits>(
    stream: &Arc<CudaStream>,
    pool: &Arc<Pool>,
    len: usize,
    what: &str,
) -> Result<DeviceBuf<T>, ExecError> {
    // SAFETY: any bits are a valid T (`AnyBits`), and the memory is read
    // only on the device.
    charged(pool, len, what, || unsafe { stream.alloc::<T>(len.max(1)) })
}

/// The buffer of `len` values `alloc` makes, charged to `pool` first.
fn charged<T: DeviceRepr>(
    pool: &Arc<Pool>,
    len: usize,
    what: &str,
    alloc: impl FnOnce() -> Result<CudaSlice<T>, cudarc::driver::DriverError>,
) -> Result<DeviceBuf<T>, ExecError> {
    let bytes = (len * std::mem::size_of::<T>()) as u64;
    pool.charge(bytes, what)?;
    let slice = match alloc() {
        Ok(slice) => slice,
        Err(e) => {
            pool.release(bytes);
            return Err(cuda_error(
                &format!("allocating {bytes} bytes for {what}"),
                e,
            ));
        }
    };
    Ok(DeviceBuf {
        slice,
        len,
        pool: pool.clone(),
    })
}

/// `values` (`len` of them; a zero-length buffer's one spare value is
/// not copied) copied into a new device buffer by the host-to-device
/// stream, the buffer then handed to the compute stream: its users are
/// the operators, and it is freed in the compute stream's order. Freed
/// on the copy stream, as a buffer allocated there would be, it would
/// make that stream wait for the compute stream's last read before any
/// later copy could start, so that no load would run ahead of the
/// operators. No zeroing: the copy writes every value.
///
/// The caller synchronises the copy stream before any operator reads
/// the buffer ([`CudaMover::to_device`]), so the compute stream waits
/// for nothing on the GPU (where `wait`,
/// [`CudaOptions::compute_waits_for_loads`], it waits for the copy, as
/// builds before did). On an error the copy stream is synchronised
/// before returning, so that the buffers of the same tensor made before
/// it, which the caller then drops on the compute stream, are not freed
/// while their copies run. cudarc's `upgrade_device_ptr` panics only if
/// the driver cannot create an event.
fn upload_to<T: DeviceRepr, Src: HostSlice<T> + ?Sized>(
    streams: (&Arc<CudaStream>, &Arc<CudaStream>),
    pool: &Arc<Pool>,
    (values, len): (&Src, usize),
    wait: bool,
) -> Result<DeviceBuf<T>, ExecError> {
    let (copy, compute) = streams;
    let failed = |error: ExecError| {
        // Best effort: a synchronisation fails only on a context an
        // earlier fault left broken, where nothing then orders the frees
        // after the copies (`compute_waits_for_loads` did), and nothing
        // runs on it again either.
        let _ = copy.synchronize();
        error
    };
    let bytes = (len * std::mem::size_of::<T>()) as u64;
    pool.charge(bytes, "a host-to-device copy")
        .map_err(failed)?;
    // SAFETY: the copy below overwrites all `len` values before the
    // buffer is read; the spare value of a zero-length one is never read.
    let mut slice = match unsafe { copy.alloc::<T>(len.max(1)) } {
        Ok(slice) => slice,
        Err(e) => {
            pool.release(bytes);
            return Err(failed(cuda_error(
                &format!("allocating {bytes} bytes for a copy"),
                e,
            )));
        }
    };
    let copied = (len > 0)
        .then(|| copy.memcpy_htod(values, &mut slice))
        .transpose()
        .and_then(|_| match wait {
            true => copy
                .record_event(Some(
                    cudarc::driver::sys::CUevent_flags::CU_EVENT_DISABLE_TIMING,
                ))
                .and_then(|done| compute.wait(&done)),
            false => Ok(()),
        });
    if let Err(e) = copied {
        drop(slice);
        pool.release(bytes);
        return Err(failed(cuda_error("host-to-device copy", e)));
    }
    let ptr = slice.leak();
    // SAFETY: `ptr` is the allocation of `len.max(1)` values just made,
    // no longer owned by any slice; the compute stream's slice frees it.
    let slice = unsafe { compute.upgrade_device_ptr::<T>(ptr, len.max(1)) };
    Ok(DeviceBuf {
        slice,
        len,
        pool: pool.clone(),
    })
}

/// A pinned buffer of `len` values (at least one): `reused` when the pool
/// had one of these lengths, else a new one. Its contents are whatever the
/// last user left: every caller overwrites the first `len` values.
fn pinned_buffer<T: DeviceRepr + ValidAsZeroBits>(
    ctx: &Arc<CudaContext>,
    reused: Option<PinnedHostSlice<T>>,
    len: usize,
) -> Result<PinnedHostSlice<T>, ExecError> {
    if let Some(pinned) = reused {
        if pinned.len() == len.max(1) {
            return Ok(pinned);
        }
    }
    // SAFETY: every caller writes the first `len` values before anyone
    // reads them, and no one reads past `len`.
    unsafe { ctx.alloc_pinned_with_flags::<T>(len.max(1), 0) }
        .map_err(|e| cuda_error("allocating pinned host memory", e))
}

fn pin<T: DeviceRepr + ValidAsZeroBits + Copy>(
    ctx: &Arc<CudaContext>,
    reused: Option<PinnedHostSlice<T>>,
    values: &[T],
) -> Result<PinnedHostSlice<T>, ExecError> {
    let mut pinned = pinned_buffer(ctx, reused, values.len())?;
    let slice = pinned
        .as_mut_slice()
        .map_err(|e| cuda_error("pinned host memory", e))?;
    slice[..values.len()].copy_from_slice(values);
    Ok(pinned)
}

fn download_pinned<T: DeviceRepr + ValidAsZeroBits>(
    ctx: &Arc<CudaContext>,
    reused: Option<PinnedHostSlice<T>>,
    stream: &Arc<CudaStream>,
    buf: &DeviceBuf<T>,
) -> Result<PinnedHostSlice<T>, ExecError> {
    let mut pinned = pinned_buffer(ctx, reused, buf.len)?;
    if buf.len > 0 {
        let view = buf.slice.slice(0..buf.len);
        stream
            .memcpy_dtoh(&view, &mut pinned)
            .map_err(|e| cuda_error("device-to-host copy", e))?;
    }
    Ok(pinned)
}

fn pinned_values<T: ValidAsZeroBits + Copy>(
    pinned: &PinnedHostSlice<T>,
    len: usize,
) -> Result<Vec<T>, ExecError> {
    Ok(pinned
        .as_slice()
        .map_err(|e| cuda_error("pinned host memory", e))?[..len]
        .to_vec())
}

/// The byte length the executor sees: that of the plain contents.
fn block_bytes(b: &GpuBlock) -> u64 {
    b.row_start.len as u64 * 8 + b.columns.len as u64 * 4 + b.weights.len as u64 * 4
}

/// The lengths of a pinned tensor's parts, kept beside it (pinned
/// buffers hold at least one value). Dropped, it gives its buffers back
/// to the pool.
pub(crate) struct PinnedCopy {
    tensor: Option<PinnedTensor>,
    lengths: [usize; 3],
    pool: Arc<PinnedPool>,
}

impl PinnedCopy {
    fn tensor(&self) -> Result<&PinnedTensor, ExecError> {
        self.tensor
            .as_ref()
            .ok_or_else(|| ExecError::Internal("a pinned copy without its buffers".into()))
    }
}

impl Drop for PinnedCopy {
    fn drop(&mut self) {
        if let Some(tensor) = self.tensor.take() {
            let key = (tensor.kind(), self.lengths);
            self.pool.give_back(key, pinned_bytes(key), tensor);
        }
    }
}

/// Which kind of tensor a pooled pinned buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum PinnedKind {
    F32,
    I64,
    Block,
}

impl PinnedTensor {
    fn kind(&self) -> PinnedKind {
        match self {
            PinnedTensor::F32(_) => PinnedKind::F32,
            PinnedTensor::I64(_) => PinnedKind::I64,
            PinnedTensor::Block { .. } => PinnedKind::Block,
        }
    }
}

/// A pooled buffer's kind and its parts' lengths.
type PinnedKey = (PinnedKind, [usize; 3]);

/// Pinned host buffers kept for reuse, by kind and lengths
/// ([`super::keep`]): the buffers in use are the host tier's copies, which
/// the executor charges to the host budget; the kept ones are not
/// charged, and with [`CudaOptions::host_budget_bytes`] those in use and
/// kept together stay within it (or within the most ever in use at once,
/// if more). Freed with the GPU.
type PinnedPool = Keeper<PinnedKey, PinnedTensor>;

/// The bytes a pinned tensor of `kind` and `lengths` holds.
fn pinned_bytes((kind, lengths): PinnedKey) -> u64 {
    let [a, b, c] = lengths.map(|n| n.max(1) as u64);
    match kind {
        PinnedKind::F32 => a * 4,
        PinnedKind::I64 => a * 8,
        PinnedKind::Block => a * 8 + b * 4 + c * 4,
    }
}

/// Moves tensors between the GPU and pinned host memory on the h2d and
/// d2h streams; each call waits for its own copy.
pub(crate) struct CudaMover {
    pub(crate) gpu: Arc<Gpu>,
}

impl CudaMover {
    fn bind(&self) -> Result<(), ExecError> {
        self.gpu
            .ctx
            .bind_to_thread()
            .map_err(|e| cuda_error("binding the context", e))
    }

    fn device_of(data: &Data) -> Option<&GpuTensor> {
        match data {
            Data::Held(held) => held.get::<GpuTensor>(),
            _ => None,
        }
    }

    fn to_pinned(&self, data: &Data) -> Result<PinnedCopy, ExecError> {
        let ctx = &self.gpu.ctx;
        let d2h = &self.gpu.d2h;
        let pool = &self.gpu.pinned;
        let device = match data {
            Data::Held(held) => Some(held.get::<GpuTensor>().ok_or_else(|| {
                ExecError::Internal("the CUDA mover was given data held by another backend".into())
            })?),
            _ => None,
        };
        let (kind, lengths) = match (data, device) {
            (Data::F32(v), _) => (PinnedKind::F32, [v.len(), 0, 0]),
            (Data::I64(v), _) => (PinnedKind::I64, [v.len(), 0, 0]),
            (Data::Block(b), _) => (
                PinnedKind::Block,
                [b.row_start.len(), b.columns.len(), b.weights.len()],
            ),
            (_, Some(GpuTensor::F32(buf))) => (PinnedKind::F32, [buf.len, 0, 0]),
            (_, Some(GpuTensor::I64(buf))) => (PinnedKind::I64, [buf.len, 0, 0]),
            (_, Some(GpuTensor::Block(b))) => (
                PinnedKind::Block,
                [b.row_start.len, b.columns.len, b.weights.len],
            ),
            (Data::Held(_), None) => {
                return Err(ExecError::Internal(
                    "held data without a device tensor".into(),
                ))
            }
        };
        let (mut f32s, mut i64s, mut rs, mut cs, mut ws) = (None, None, None, None, None);
        let kept = pool.take((kind, lengths));
        let allocated = kept.is_none();
        match kept {
            Some(PinnedTensor::F32(p)) => f32s = Some(p),
            Some(PinnedTensor::I64(p)) => i64s = Some(p),
            Some(PinnedTensor::Block {
                row_start,
                columns,
                weights,
                ..
            }) => (rs, cs, ws) = (Some(row_start), Some(columns), Some(weights)),
            None => {}
        }
        let tensor = match (data, device) {
            (Data::F32(v), _) => PinnedTensor::F32(pin(ctx, f32s, v)?),
            (Data::I64(v), _) => PinnedTensor::I64(pin(ctx, i64s, v)?),
            (Data::Block(b), _) => PinnedTensor::Block {
                row_start: pin(ctx, rs, &b.row_start)?,
                columns: pin(ctx, cs, &b.columns)?,
                weights: pin(ctx, ws, &b.weights)?,
                weighting: b.weighting,
            },
            (_, Some(GpuTensor::F32(buf))) => {
                PinnedTensor::F32(download_pinned(ctx, f32s, d2h, buf)?)
            }
            (_, Some(GpuTensor::I64(buf))) => {
                PinnedTensor::I64(download_pinned(ctx, i64s, d2h, buf)?)
            }
            (_, Some(GpuTensor::Block(b))) => PinnedTensor::Block {
                row_start: download_pinned(ctx, rs, d2h, &b.row_start)?,
                columns: download_pinned(ctx, cs, d2h, &b.columns)?,
                weights: download_pinned(ctx, ws, d2h, &b.weights)?,
                weighting: b.weighting,
            },
            (Data::Held(_), None) => {
                return Err(ExecError::Internal(
                    "held data without a device tensor".into(),
                ))
            }
        };
        d2h.synchronize()
            .map_err(|e| cuda_error("device-to-host copy", e))?;
        let key = (kind, lengths);
        drop(pool.lend(key, pinned_bytes(key), allocated));
        Ok(PinnedCopy {
            tensor: Some(tensor),
            lengths,
            pool: pool.clone(),
        })
    }
}

impl Mover for CudaMover {
    fn to_host(&self, data: &Data) -> Result<Data, ExecError> {
        self.bind()?;
        if let Data::Held(held) = data {
            if held.get::<PinnedCopy>().is_some() {
                return Ok(data.clone());
            }
        }
        let bytes = data.byte_len();
        Ok(Data::Held(Held::new(bytes, self.to_pinned(data)?)))
    }

    fn to_plain(&self, data: &Data) -> Result<Data, ExecError> {
        self.bind()?;
        let Data::Held(held) = data else {
            return Ok(data.clone());
        };
        if let Some(copy) = held.get::<PinnedCopy>() {
            let [a, b, c] = copy.lengths;
            return Ok(match copy.tensor()? {
                PinnedTensor::F32(p) => Data::F32(pinned_values(p, a)?),
                PinnedTensor::I64(p) => Data::I64(pinned_values(p, a)?),
                PinnedTensor::Block {
                    row_start,
                    columns,
                    weights,
                    weighting,
                } => Data::Block(BlockData {
                    row_start: pinned_values(row_start, a)?,
                    columns: pinned_values(columns, b)?,
                    weights: pinned_values(weights, c)?,
                    weighting: *weighting,
                }),
            });
        }
        let copy = self.to_pinned(data)?;
        self.to_plain(&Data::Held(Held::new(data.byte_len(), copy)))
    }

    fn to_device(&self, data: Cow<'_, Data>) -> Result<Data, ExecError> {
        self.bind()?;
        let (streams, pool) = ((&self.gpu.h2d, &self.gpu.compute), &self.gpu.pool);
        let wait = self.gpu.compute_waits_for_loads;
        let tensor = match data.as_ref() {
            Data::F32(v) => GpuTensor::F32(upload_to(streams, pool, (v, v.len()), wait)?),
            Data::I64(v) => GpuTensor::I64(upload_to(streams, pool, (v, v.len()), wait)?),
            Data::Block(b) => GpuTensor::Block(GpuBlock {
                row_start: upload_to(streams, pool, (&b.row_start, b.row_start.len()), wait)?,
                columns: upload_to(streams, pool, (&b.columns, b.columns.len()), wait)?,
                weights: upload_to(streams, pool, (&b.weights, b.weights.len()), wait)?,
                weighting: b.weighting,
            }),
            Data::Held(held) => {
                if Self::device_of(data.as_ref()).is_some() {
                    return Err(ExecError::Internal(
                        "a device tensor was loaded to the device again".into(),
                    ));
                }
                let copy = held.get::<PinnedCopy>().ok_or_else(|| {
                    ExecError::Internal(
                        "the CUDA mover was given data held by another backend".into(),
                    )
                })?;
                let [a, b, c] = copy.lengths;
                match copy.tensor()? {
                    PinnedTensor::F32(p) => GpuTensor::F32(upload_to(streams, pool, (p, a), wait)?),
                    PinnedTensor::I64(p) => GpuTensor::I64(upload_to(streams, pool, (p, a), wait)?),
                    PinnedTensor::Block {
                        row_start,
                        columns,
                        weights,
                        weighting,
                    } => GpuTensor::Block(GpuBlock {
                        row_start: upload_to(streams, pool, (row_start, a), wait)?,
                        columns: upload_to(streams, pool, (columns, b), wait)?,
                        weights: upload_to(streams, pool, (weights, c), wait)?,
                        weighting: *weighting,
                    }),
                }
            }
        };
        self.gpu
            .h2d
            .synchronize()
            .map_err(|e| cuda_error("host-to-device copy", e))?;
        Ok(device_data(tensor))
    }
}

/// A device tensor as the executor holds it, with its plain byte length.
pub(crate) fn device_data(tensor: GpuTensor) -> Data {
    let bytes = match &tensor {
        GpuTensor::F32(b) => b.len as u64 * 4,
        GpuTensor::I64(b) => b.len as u64 * 8,
        GpuTensor::Block(b) => block_bytes(b),
    };
    Data::Held(Held::new(bytes, tensor))
}

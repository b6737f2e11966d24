//! The CPU backend's heap while each operator runs, against the scratch the
//! planner counts for it (`Op::scratch_bytes`, `planner/src/scratch.rs`).
//!
//! A counting allocator records the process's live bytes and their peak.
//! Around each operator the backend runs, the peak above the bytes live
//! before it, less the outputs it returns in fresh buffers, is what its
//! kernels took beside their tensors. It must stay within the operator's
//! scratch: a plan at the full budget holds only that much beside its
//! tensors. (The plan holds the operator's inputs, outputs and scratch
//! at once, so what must hold is `peak - before <= scratch + outputs`;
//! scratch freed before an output is made may take more than the
//! operator's figure while that is so.)
//!
//! The runs are retain-all plans, so no transfer lane allocates while an
//! operator runs, and they run in a pool of `scratch::TASKS` threads, the
//! most the planner counts per-task buffers for. This binary holds one
//! test: the allocator counts every thread of the process.

mod common;
use common::{profile, roomy};

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use fateplan_planner::gnn::{GnnModel, LayerOrder, Transposes};
use fateplan_planner::workload::Op;
use fateplan_planner::{plan, scratch, PlanOptions, Policy};
use fateplan_runtime::cpu::{CpuGnn, Hyper};
use fateplan_runtime::exec::data::Data;
use fateplan_runtime::exec::{Backend, ExecError, ExecOptions, Executor, Mover};
use fateplan_runtime::train;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = LIVE.fetch_add(bytes, Ordering::SeqCst) + bytes;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

// SAFETY: every call is passed on to the system allocator unchanged; the
// counters only add and subtract the sizes it was asked for.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // The old and the new block may both be live while it copies.
            grew(new_size);
            LIVE.fetch_sub(layout.size(), Ordering::SeqCst);
        }
        p
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Bytes of small bookkeeping an operator's call may allocate beside its
/// kernels (the returned vector, names parsed): not scratch.
const SLACK: u64 = 64 << 10;

/// The heap an operator's kernels took, per operator name: (measured,
/// counted by the planner).
type Taken = BTreeMap<String, (u64, u64)>;

/// The CPU backend, its heap measured around every operator.
struct Measured {
    inner: CpuGnn,
    taken: Taken,
}

fn buffer(data: &Data) -> Option<(usize, u64)> {
    match data {
        Data::F32(v) => Some((v.as_ptr() as usize, 4 * v.capacity() as u64)),
        Data::I64(v) => Some((v.as_ptr() as usize, 8 * v.capacity() as u64)),
        _ => None,
    }
}

impl Measured {
    /// Runs `call` and records what it took beyond the outputs it returns
    /// in buffers none of `inputs` had.
    fn measure(
        &mut self,
        op: &Op,
        inputs: &[usize],
        call: impl FnOnce(&mut CpuGnn) -> Result<Vec<Data>, ExecError>,
    ) -> Result<Vec<Data>, ExecError> {
        let before = LIVE.load(Ordering::SeqCst);
        PEAK.store(before, Ordering::SeqCst);
        let outputs = call(&mut self.inner)?;
        let peak = PEAK.load(Ordering::SeqCst);
        let fresh: u64 = outputs
            .iter()
            .filter_map(buffer)
            .filter(|(ptr, _)| !inputs.contains(ptr))
            .map(|(_, bytes)| bytes)
            .sum();
        let took = (peak.saturating_sub(before) as u64).saturating_sub(fresh);
        let entry = self
            .taken
            .entry(op.name.clone())
            .or_insert((0, op.scratch_bytes));
        entry.0 = entry.0.max(took);
        Ok(outputs)
    }
}

impl Backend for Measured {
    fn mover(&self) -> Arc<dyn Mover> {
        self.inner.mover()
    }

    fn external(&mut self, tensor: &fateplan_planner::workload::Tensor) -> Result<Data, ExecError> {
        self.inner.external(tensor)
    }

    fn externals_placed(&mut self) {
        self.inner.externals_placed();
    }

    fn begin_iteration(&mut self, iteration: u64) -> Result<(), ExecError> {
        self.inner.begin_iteration(iteration)
    }

    fn run(&mut self, op: &Op, inputs: &[&Data]) -> Result<Vec<Data>, ExecError> {
        let ptrs: Vec<usize> = inputs
            .iter()
            .filter_map(|d| buffer(d))
            .map(|b| b.0)
            .collect();
        self.measure(op, &ptrs, |inner| inner.run(op, inputs))
    }

    fn run_owned(&mut self, op: &Op, inputs: Vec<Arc<Data>>) -> Result<Vec<Data>, ExecError> {
        let ptrs: Vec<usize> = inputs
            .iter()
            .filter_map(|d| buffer(d))
            .map(|b| b.0)
            .collect();
        self.measure(op, &ptrs, |inner| inner.run_owned(op, inputs))
    }

    fn update(
        &mut self,
        op: &Op,
        params: &mut [&mut Data],
        others: &[&Data],
    ) -> Result<(), ExecError> {
        self.measure(op, &[], |inner| {
            inner.update(op, params, others).map(|()| Vec::new())
        })
        .map(|_| ())
    }
}

/// A planted-partition graph `features` wide.
fn graph(nodes: u32, features: u32) -> fateplan_runtime::dataset::Dataset {
    let spec = format!(
        "planted:nodes={nodes},classes=4,features={features},degree=8,homophily=0.8,val=40,test=60,seed=3"
    );
    let mut d = train::load_graph(&spec).unwrap();
    d.row_normalize_features();
    d
}

/// Trains two iterations of `hyper` on `dataset` in `partitions` with a
/// retain-all plan, and returns what each operator took.
fn measure(dataset: &fateplan_runtime::dataset::Dataset, hyper: Hyper, partitions: u32) -> Taken {
    let prepared = train::prepare(dataset.clone(), &hyper, partitions).unwrap();
    let profile = profile();
    let options = PlanOptions {
        budgets: roomy(),
        ..PlanOptions::new(Policy::RetainAll, &profile)
    };
    let plan = plan(&prepared.workload, &profile, &options).unwrap();
    let backend = Measured {
        inner: CpuGnn::new(prepared.input, hyper).unwrap(),
        taken: Taken::new(),
    };
    let mut executor =
        Executor::new(Arc::new(plan), backend, None, ExecOptions::default()).unwrap();
    for _ in 0..2 {
        executor.run_iteration().unwrap();
    }
    std::mem::take(&mut executor.backend_mut().taken)
}

/// One GEMM on the calling thread, large enough that faer packs its
/// operands.
fn gemm_once() {
    let (rows, d_in, d_out) = (64, 512, 512);
    let x = vec![0.5f32; rows * d_in];
    let w = vec![0.25f32; d_in * d_out];
    let mut z = vec![0.0f32; rows * d_out];
    fateplan_kernels::dense::matmul_rows(&x, rows, d_in, &w, d_out, &mut z).unwrap();
}

#[test]
fn each_operator_takes_at_most_the_scratch_the_planner_counts() {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(scratch::TASKS as usize)
        .build()
        .unwrap();
    // 12,000 rows: partitions of several reduction chunks; 1,024 features:
    // the packed weight gradient; two partitions: halo blocks.
    let wide = graph(12_000, 1024);
    let narrow = graph(12_000, 48);
    let cases = [
        ("gcn", &wide, Hyper::new(GnnModel::Gcn)),
        (
            "gcn, aggregating first, transposes built",
            &narrow,
            Hyper {
                hidden: 64,
                order: LayerOrder::AggregateFirst,
                transposes: Transposes::Built,
                ..Hyper::new(GnnModel::Gcn)
            },
        ),
        (
            "sage",
            &narrow,
            Hyper {
                hidden: 32,
                ..Hyper::new(GnnModel::Sage)
            },
        ),
        (
            "gat, 4 heads",
            &narrow,
            Hyper {
                heads: 4,
                hidden: 8,
                ..Hyper::new(GnnModel::Gat)
            },
        ),
    ];
    // faer's GEMM keeps a packing buffer on each thread from its first
    // product on (sized by the caches): the process's, not an operator's.
    pool.broadcast(|_| gemm_once());
    let mut over = Vec::new();
    let mut measured_gcn_linear_bwd = 0;
    for (name, dataset, hyper) in cases {
        let taken = pool.install(|| measure(dataset, hyper, 2));
        if name == "gcn" {
            measured_gcn_linear_bwd = taken.get("linear_bwd[l1,p0]").map_or(0, |t| t.0);
        }
        let (measured, counted) = taken.values().fold((0, 0), |(m, c), &(took, scratch)| {
            (m.max(took), c.max(scratch))
        });
        println!(
            "{name}: {} operators; the most any took {measured} B, the most counted {counted} B",
            taken.len()
        );
        for (op, (took, scratch)) in &taken {
            if *took > SLACK {
                println!("  {op}: took {took} B, counted {scratch} B");
            }
            if *took > scratch + SLACK {
                over.push(format!("{name}: {op} took {took} B, counted {scratch} B"));
            }
        }
    }
    // The hook measures: the wide GCN's first weight gradient sums
    // 1,024-wide partials, far past the bookkeeping's slack.
    assert!(
        measured_gcn_linear_bwd > SLACK,
        "the wide GCN's linear_bwd took {measured_gcn_linear_bwd} B: nothing measured"
    );
    assert!(
        over.is_empty(),
        "operators took more than their scratch:\n{}",
        over.join("\n")
    );
}

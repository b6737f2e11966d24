//! A CPU device's part in a multi-device run: the halo exchange and the
//! sums, inside the operators that need them.
//!
//! Every device runs the same plan, so its operators (recomputations
//! included) run in the same order on every device, and each collective
//! below is made by every device at the same operator:
//!
//! - `agg[l,p,s]`: the first aggregation of layer `l` reading source
//!   partition `s` sends every other device the rows of `s` it reads
//!   (the first layer's input dropout applied, keyed by the whole graph's
//!   rows, when that layer aggregates first; a layer that projects first
//!   sends its projected rows, dropped before the projection) and receives its halo of `s`; every `agg[l,p,s]` then adds the
//!   halo block `(p, s)` times those rows. The halo is kept until the end
//!   of the iteration, so a recomputation finds it.
//! - `agg_bwd[l,p_j,d_i]`: adds the halo block `(i, j)`'s transpose times
//!   the gradient of `i` to the halo gradient of `j`; the last of the
//!   chain sends the halo gradients of `j` to their owners and adds what
//!   the others sent for its own rows of `j`. Plans recompute forward
//!   operators only, but should one run again, its halo part is not added
//!   twice and the last one adds what it received without exchanging
//!   again.
//! - GAT: `sddmm[l,p,s]`, the first reading `s`, exchanges the rows' source
//!   scores `a_src` of `s`, and `agg[l,p,s]`, the first reading `s`, their
//!   projected rows `z`; the halo block's edges then follow block
//!   `(p, s)`'s own in `score` and `alpha` (sized by the workload's
//!   largest block, own and halo edges together), so `edge_softmax` takes
//!   a row's halo edges with its own, and `agg` adds the halo block's
//!   share. `attention_bwd[l,p_j,d_i]` adds the halo block `(i, j)`'s
//!   share to `grad_dst` of `i` and to the halo's gradients (of `z` and
//!   `a_src`), which the last of the chain sends back to their owners as
//!   `agg_bwd` does.
//! - `grad_accumulate[l]`: the weight gradient is summed over devices.
//! - the metrics are summed over devices after each iteration.
//!
//! Sums run in rank order, so every device holds the same weights, bit for
//! bit.

use std::collections::{HashMap, HashSet};

use fateplan_kernels::activation::dropout_in_place;
use fateplan_kernels::dropout::{Dropout, RowKeys};
use fateplan_kernels::{sparse, BlockRef};

use crate::collective::Collective;
use crate::exec::data::BlockData;
use crate::exec::ExecError;
use crate::gnn::Metrics;
use crate::share::HaloInput;

/// What one device exchanged in the last iteration.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct ExchangeStats {
    /// Halo rows and gradients this device sent (bytes).
    pub sent_bytes: u64,
    /// Halo rows and gradients it received (bytes).
    pub received_bytes: u64,
    /// Weight-gradient bytes it summed with the others.
    pub reduced_bytes: u64,
    /// The most bytes of exchanged rows and gradients held at once. They
    /// are held by the backend, outside the plan's tiers.
    pub held_peak_bytes: u64,
    /// Seconds in collectives (waiting for the others included).
    pub seconds: f64,
}

pub struct Peers {
    halo: HaloInput,
    comm: Box<dyn Collective>,
    partitions: usize,
    /// Halo rows per (what, layer, source partition index).
    rows: HashMap<(Sent, usize, usize), Vec<f32>>,
    /// Halo gradients being summed, per (layer, source partition index).
    grads_out: HashMap<(usize, usize), Vec<f32>>,
    /// The `agg_bwd` and `attention_bwd` operators (layer, j, i) already
    /// in `grads_out`.
    added: HashSet<(usize, usize, usize)>,
    /// Gradients of own rows from the others, per (layer, j), per device.
    grads_in: HashMap<(usize, usize), Vec<Vec<f32>>>,
    held_bytes: u64,
    /// This iteration's figures, and whether it trains.
    stats: ExchangeStats,
    training: bool,
    /// The last finished training iteration's figures.
    trained: ExchangeStats,
}

/// What a device sends of its rows of a source partition, once per layer
/// and iteration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Sent {
    /// The rows an aggregation sums (GAT: the projected rows `z`).
    Rows,
    /// GAT's source scores `a_src` (one value per head).
    Scores,
}

/// The halo's blocks and this iteration's exchanged rows, to read while
/// its gradients are being added to ([`Peers::add_halo_grads`]).
pub(crate) struct HaloRead<'a> {
    halo: &'a HaloInput,
    rows: &'a HashMap<(Sent, usize, usize), Vec<f32>>,
    partitions: usize,
}

impl<'a> HaloRead<'a> {
    /// The halo block `(p, s)`, when it has edges.
    pub(crate) fn block(&self, p: usize, s: usize) -> Option<&'a BlockData> {
        self.halo.blocks[p * self.partitions + s].as_ref()
    }

    /// The halo's `what` of layer `l` and source partition `s`, exchanged
    /// earlier in this iteration.
    pub(crate) fn exchanged(&self, what: Sent, l: usize, s: usize) -> Result<&'a [f32], ExecError> {
        self.rows
            .get(&(what, l, s))
            .map(Vec::as_slice)
            .ok_or_else(|| {
                ExecError::Internal(format!(
                "layer {l}, partition {s}: the halo's {what:?} were not exchanged in this iteration"
            ))
            })
    }
}

fn view(block: &BlockData) -> BlockRef<'_> {
    block.view()
}

fn bytes(values: &[f32]) -> u64 {
    (values.len() * 4) as u64
}

impl Peers {
    pub fn new(halo: HaloInput, comm: Box<dyn Collective>) -> Result<Peers, ExecError> {
        let partitions = halo.recv.len();
        let shape_ok = halo.blocks.len() == partitions * partitions
            && halo.send.len() == partitions
            && halo.recv.iter().all(|r| r.len() == comm.size())
            && halo.send.iter().all(|s| s.len() == comm.size())
            && halo.ids.len() == partitions
            && (0..partitions).all(|s| halo.ids[s].len() == halo.rows(s));
        if !shape_ok {
            return Err(ExecError::Internal(format!(
                "a halo of {partitions} partitions does not fit a group of {}",
                comm.size()
            )));
        }
        Ok(Peers {
            halo,
            comm,
            partitions,
            rows: HashMap::new(),
            grads_out: HashMap::new(),
            added: HashSet::new(),
            grads_in: HashMap::new(),
            held_bytes: 0,
            stats: ExchangeStats::default(),
            training: false,
            trained: ExchangeStats::default(),
        })
    }

    /// The share's partitions.
    pub fn partitions(&self) -> usize {
        self.partitions
    }

    /// Forgets the last iteration's exchanges; `training`: whether the
    /// next one trains.
    pub(crate) fn begin_iteration(&mut self, training: bool) {
        if self.training {
            self.trained = self.stats;
        }
        self.training = training;
        self.rows.clear();
        self.grads_out.clear();
        self.added.clear();
        self.grads_in.clear();
        self.held_bytes = 0;
        self.stats = ExchangeStats::default();
    }

    /// The exchanges of the last training iteration that has finished
    /// (one has finished when the next iteration begins).
    pub fn last_training_stats(&self) -> ExchangeStats {
        self.trained
    }

    fn hold(&mut self, added: u64, released: u64) {
        self.held_bytes = (self.held_bytes + added).saturating_sub(released);
        self.stats.held_peak_bytes = self.stats.held_peak_bytes.max(self.held_bytes);
    }

    fn timed<T>(
        &mut self,
        call: impl FnOnce(&dyn Collective) -> Result<T, ExecError>,
    ) -> Result<T, ExecError> {
        let start = std::time::Instant::now();
        let result = call(self.comm.as_ref());
        self.stats.seconds += start.elapsed().as_secs_f64();
        result
    }

    fn read(&self) -> HaloRead<'_> {
        HaloRead {
            halo: &self.halo,
            rows: &self.rows,
            partitions: self.partitions,
        }
    }

    /// The halo block `(p, s)`, when it has edges.
    pub(crate) fn block(&self, p: usize, s: usize) -> Option<&BlockData> {
        self.read().block(p, s)
    }

    /// The halo rows of source partition index `s` as the whole graph
    /// numbers them as given.
    pub(crate) fn ids(&self, s: usize) -> &[u64] {
        &self.halo.ids[s]
    }

    /// Halo rows of source partition index `s`.
    pub(crate) fn halo_rows(&self, s: usize) -> usize {
        self.halo.rows(s)
    }

    /// The halo's `what` of layer `l` and source partition `s` (`width`
    /// values a row), exchanging them first when this iteration has not:
    /// `src` are this device's rows of `s` (`keys` their rows of the whole
    /// graph, which key their masks), `input_dropout` the first layer's
    /// mask on them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn exchange(
        &mut self,
        what: Sent,
        l: usize,
        s: usize,
        width: usize,
        src: &[f32],
        keys: RowKeys,
        input_dropout: Option<&Dropout>,
    ) -> Result<&[f32], ExecError> {
        let kernel = |e: fateplan_kernels::Error| ExecError::Kernel(e.to_string());
        if !self.rows.contains_key(&(what, l, s)) {
            let mut sends = Vec::with_capacity(self.comm.size());
            for rows in &self.halo.send[s] {
                let mut values = crate::exec::data::room_for(rows.len() * width)?;
                for &r in rows {
                    let r = r as usize;
                    let row = src.get(r * width..(r + 1) * width).ok_or_else(|| {
                        ExecError::Internal(format!(
                            "halo row {r} of partition {s} is past its {} rows",
                            src.len() / width.max(1)
                        ))
                    })?;
                    values.extend_from_slice(row);
                }
                if let Some(mask) = input_dropout {
                    // Once per run of consecutive rows (the list ascends).
                    let mut k = 0;
                    while k < rows.len() {
                        let mut end = k + 1;
                        while end < rows.len() && rows[end] == rows[end - 1] + 1 {
                            end += 1;
                        }
                        let run = &mut values[k * width..end * width];
                        dropout_in_place(run, width, keys.skip(rows[k] as usize), mask)
                            .map_err(kernel)?;
                        k = end;
                    }
                }
                self.stats.sent_bytes += bytes(&values);
                sends.push(values);
            }
            let received = self.timed(|c| c.all_to_all(sends))?;
            let parts: Vec<&[f32]> = received.iter().map(Vec::as_slice).collect();
            let halo: Vec<f32> = crate::exec::data::concatenated(&parts)?;
            if halo.len() != self.halo.rows(s) * width {
                return Err(ExecError::Exchange(format!(
                    "layer {l}, partition {s}: received {} values, expected {} rows of {width}",
                    halo.len(),
                    self.halo.rows(s)
                )));
            }
            self.stats.received_bytes += bytes(&halo);
            self.hold(bytes(&halo), 0);
            self.rows.insert((what, l, s), halo);
        }
        Ok(&self.rows[&(what, l, s)])
    }

    /// The halo's `what` of layer `l` and source partition `s`, exchanged
    /// earlier in this iteration.
    pub(crate) fn exchanged(&self, what: Sent, l: usize, s: usize) -> Result<&[f32], ExecError> {
        self.read().exchanged(what, l, s)
    }

    /// `out += halo block (p, s) × halo rows of (l, s)`, exchanging those
    /// rows first when this iteration has not ([`Peers::exchange`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn aggregate(
        &mut self,
        l: usize,
        p: usize,
        s: usize,
        width: usize,
        src: &[f32],
        keys: RowKeys,
        input_dropout: Option<&Dropout>,
        out: &mut [f32],
    ) -> Result<(), ExecError> {
        self.exchange(Sent::Rows, l, s, width, src, keys, input_dropout)?;
        if let Some(block) = self.block(p, s) {
            let halo = &self.rows[&(Sent::Rows, l, s)];
            sparse::spmm(view(block), halo, width, fateplan_kernels::Init::Out, out)
                .map_err(|e| ExecError::Kernel(e.to_string()))?;
        }
        Ok(())
    }

    /// Adds destination `i`'s part to the halo gradients of `(l, j)`, once
    /// per backward operator: `add` reads the halo and gets the running
    /// sums (`len` values), or a scratch buffer when the operator ran
    /// before (its part is in already).
    pub(crate) fn add_halo_grads(
        &mut self,
        l: usize,
        j: usize,
        i: usize,
        len: usize,
        add: impl FnOnce(HaloRead<'_>, &mut [f32]) -> Result<(), ExecError>,
    ) -> Result<(), ExecError> {
        let read = HaloRead {
            halo: &self.halo,
            rows: &self.rows,
            partitions: self.partitions,
        };
        if !self.added.insert((l, j, i)) {
            return add(read, &mut crate::exec::data::zeros(len)?);
        }
        let fresh = !self.grads_out.contains_key(&(l, j));
        let acc = match self.grads_out.entry((l, j)) {
            std::collections::hash_map::Entry::Occupied(held) => held.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(crate::exec::data::zeros(len)?)
            }
        };
        if acc.len() != len {
            return Err(ExecError::Internal(format!(
                "layer {l}, partition {j}: halo gradients of {} values, expected {len}",
                acc.len()
            )));
        }
        add(read, acc)?;
        if fresh {
            self.hold(len as u64 * 4, 0);
        }
        Ok(())
    }

    /// The last backward operator of source `j`: sends `j`'s halo
    /// gradients to their owners and adds what the others sent for this
    /// device's rows of `j` into `out`. The gradients are segments of rows,
    /// `widths[k]` values a row in segment `k`, one after another, both in
    /// the halo's sums and in `out`. A device that has no halo block over
    /// `j` sends zeros.
    pub(crate) fn return_halo_grads(
        &mut self,
        l: usize,
        j: usize,
        widths: &[usize],
        out: &mut [f32],
    ) -> Result<(), ExecError> {
        let width: usize = widths.iter().sum();
        if !self.grads_in.contains_key(&(l, j)) {
            let halo_rows = self.halo.rows(j);
            let acc = self.grads_out.remove(&(l, j));
            let acc_bytes = acc.as_ref().map_or(0, |a| bytes(a));
            if let Some(acc) = &acc {
                if acc.len() != halo_rows * width {
                    return Err(ExecError::Internal(format!(
                        "layer {l}, partition {j}: halo gradients of {} values, expected {} \
                         rows of {width}",
                        acc.len(),
                        halo_rows
                    )));
                }
            }
            let mut sends = Vec::with_capacity(self.comm.size());
            let mut at = 0;
            for &rows in &self.halo.recv[j] {
                let mut values = crate::exec::data::room_for(rows * width)?;
                let mut segment = 0;
                for &w in widths {
                    let from = segment + at * w;
                    match &acc {
                        Some(acc) => values.extend_from_slice(&acc[from..from + rows * w]),
                        None => values.resize(values.len() + rows * w, 0.0),
                    }
                    segment += halo_rows * w;
                }
                sends.push(values);
                at += rows;
            }
            self.stats.sent_bytes += sends.iter().map(|v| bytes(v)).sum::<u64>();
            let received = self.timed(|c| c.all_to_all(sends))?;
            for (e, values) in received.iter().enumerate() {
                if values.len() != self.halo.send[j][e].len() * width {
                    return Err(ExecError::Exchange(format!(
                        "layer {l}, partition {j}: device {e} sent {} gradient values, expected \
                         {} rows of {width}",
                        values.len(),
                        self.halo.send[j][e].len()
                    )));
                }
            }
            let got: u64 = received.iter().map(|v| bytes(v)).sum();
            self.stats.received_bytes += got;
            self.hold(got, acc_bytes);
            self.grads_in.insert((l, j), received);
        }
        let own_rows = out.len() / width.max(1);
        for (e, values) in self.grads_in[&(l, j)].iter().enumerate() {
            let rows = &self.halo.send[j][e];
            let (mut segment, mut sent) = (0, 0);
            for &w in widths {
                for (k, &r) in rows.iter().enumerate() {
                    let r = r as usize;
                    let row = out
                        .get_mut(segment + r * w..segment + (r + 1) * w)
                        .filter(|_| r < own_rows)
                        .ok_or_else(|| {
                            ExecError::Internal(format!(
                                "halo gradient row {r} of partition {j} is past its {own_rows} rows"
                            ))
                        })?;
                    let from = sent + k * w;
                    for (o, v) in row.iter_mut().zip(&values[from..from + w]) {
                        *o += v;
                    }
                }
                segment += own_rows * w;
                sent += rows.len() * w;
            }
        }
        Ok(())
    }

    /// The halo part of `agg_bwd[l,p_j,d_i]` (`grad` the gradient of
    /// destination partition `i`); when `last`, the exchange of `j`'s halo
    /// gradients and the addition of the others' into `out` (this
    /// device's gradient of its rows of `j`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn aggregate_bwd(
        &mut self,
        l: usize,
        j: usize,
        i: usize,
        width: usize,
        grad: &[f32],
        last: bool,
        out: &mut [f32],
    ) -> Result<(), ExecError> {
        if self.block(i, j).is_some() {
            let len = self.halo.rows(j) * width;
            self.add_halo_grads(l, j, i, len, |read, acc| {
                let Some(block) = read.block(i, j) else {
                    return Ok(());
                };
                sparse::spmm_t(view(block), grad, width, fateplan_kernels::Init::Out, acc)
                    .map_err(|e| ExecError::Kernel(e.to_string()))
            })?;
        }
        if last {
            self.return_halo_grads(l, j, &[width], out)?;
        }
        Ok(())
    }

    /// Sums a weight gradient over the devices.
    pub(crate) fn reduce(&mut self, values: &mut [f32]) -> Result<(), ExecError> {
        self.stats.reduced_bytes += bytes(values);
        self.timed(|c| c.all_reduce_sum(values))
    }

    /// The metrics of the whole graph from every device's.
    pub(crate) fn metrics(&self, own: Metrics) -> Result<Metrics, ExecError> {
        let mut values = [
            own.loss,
            own.train_correct as f64,
            own.train_total as f64,
            own.val_correct as f64,
            own.val_total as f64,
            own.test_correct as f64,
            own.test_total as f64,
        ];
        self.comm.all_reduce_sum_f64(&mut values)?;
        Ok(Metrics {
            loss: values[0],
            train_correct: values[1] as u64,
            train_total: values[2] as u64,
            val_correct: values[3] as u64,
            val_total: values[4] as u64,
            test_correct: values[5] as u64,
            test_total: values[6] as u64,
        })
    }

    /// This device made its last call.
    pub(crate) fn finish(&self) {
        self.comm.finish();
    }
}

//! Training on several devices: what each device exchanges with the others,
//! and when.
//!
//! Every device runs the same plan on its share of the graph (its own
//! vertices and the edges into them), in step with the others. A layer's
//! aggregation also reads the rows of **halo** vertices, owned by other
//! devices; those rows are exchanged before the layer reads them, their
//! gradients go back to their owners in the backward pass, and the weight
//! gradients are summed over all devices before the update. Per layer the
//! halo moves one of two ways ([`Strategy`]):
//!
//! - `peer`: each source partition's boundary rows go device to device as
//!   soon as they are computed (NVLink, or PCIe peer copies; the network
//!   between nodes). Fast, but the whole halo waits in an exchange buffer on
//!   the device until the layer has read it.
//! - `host`: the rows go to host memory; each destination partition's halo
//!   rows come back into staging buffers as it aggregates, one block's
//!   share at a time (the rows of one source partition of every other
//!   device), one block ahead. Device memory holds two shares, but every
//!   destination partition pays its own copy over PCIe.
//!
//! Exchange buffers are one pool on the device: each strategy's buffers are
//! counted while they are held, so the two share the memory over time.
//!
//! The sites come from the GNN builder's operator names
//! (`agg[l1,p0,s2]`, `agg_bwd[l2,p1,d0]`, `grad_accumulate[l1]`, ...): a
//! workload without them (a generic DAG) has nothing to exchange.

use serde::{Deserialize, Serialize};

use crate::plan::{Exchange, ExchangeKind, Leg, Strategy};
use crate::profile::Profile;
use crate::workload::{TensorKind, Workload};
use crate::{Error, Result, Tier};

/// Where the halo estimate comes from. Plans for several GPUs record it,
/// so that reading one can derive its exchanges again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Halo {
    /// Vertices of the whole graph.
    pub nodes: u64,
    /// Edges of the whole graph.
    pub edges: u64,
    /// Measured halo rows per device over the estimate for a random
    /// partitioning (1 for the estimate itself).
    pub scale: f64,
    /// How the halo was found, for the plan's reader.
    pub source: String,
}

impl Halo {
    /// Random partitioning, from the average degree: a vertex owned
    /// elsewhere is in a device's halo when one of its `d` edges (on
    /// average) leads into that device's `1/k` of the vertices. Degrees vary,
    /// and the count is concave in the degree, so this over-estimates.
    pub fn random(nodes: u64, edges: u64) -> Halo {
        Halo {
            nodes,
            edges,
            scale: 1.0,
            source: "estimated for a random partitioning from the average degree".into(),
        }
    }

    /// Boundary rows of one device among `gpus`: its own vertices with an
    /// edge into another device's, which it copies out once for the host
    /// strategy (the peer strategy sends each to every device that reads
    /// it: the halo, summed over devices).
    pub fn boundary_rows(&self, gpus: u32) -> f64 {
        if gpus <= 1 {
            return 0.0;
        }
        let (n, k) = (self.nodes as f64, gpus as f64);
        let degree = self.edges as f64 / n.max(1.0);
        self.scale * (n / k) * (1.0 - (-degree * (1.0 - 1.0 / k)).exp())
    }

    /// Halo rows of one device among `gpus`, and of one of its
    /// `partitions` destination partitions.
    pub fn rows(&self, gpus: u32, partitions: u32) -> (f64, f64) {
        if gpus <= 1 {
            return (0.0, 0.0);
        }
        let (n, k, p) = (self.nodes as f64, gpus as f64, partitions.max(1) as f64);
        let degree = self.edges as f64 / n.max(1.0);
        let remote = n * (1.0 - 1.0 / k);
        let reached = |share: f64| remote * (1.0 - (-degree * share).exp());
        (
            self.scale * reached(1.0 / k),
            self.scale * reached(1.0 / (k * p)),
        )
    }
}

/// A multi-device plan's setting (the device count is `PlanOptions::gpus`).
#[derive(Debug, Clone, PartialEq)]
pub struct MultiGpu {
    pub halo: Halo,
    /// One strategy for every layer, or `None`: the planner chooses per layer.
    pub forced: Option<Strategy>,
}

/// One layer's exchange sites in the workload's steps.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LayerSites {
    pub layer: u32,
    /// Bytes of the exchanged source rows, over all of the device's own
    /// rows (the sum of the source partitions' tensors).
    pub source_bytes: u64,
    /// The device's own rows, from its label tensors (`y[p*]`), where the
    /// workload has them: a row's bytes are `source_bytes` over these.
    /// (A share of a real graph is its own size, not the graph's over the
    /// devices.)
    pub own_rows: Option<u64>,
    /// Per source partition: the step that produces its rows (-1: an input).
    pub produced_after: Vec<i64>,
    /// Per destination partition: the first and last forward step reading
    /// source rows.
    pub forward: Vec<(u32, u32)>,
    /// Per destination partition, its blocks in step order: the first and
    /// last forward step aggregating one source partition's rows (`agg`;
    /// GAT's `sddmm` reads the source's attention scores, not its rows). The
    /// host strategy brings the halo back a block's share at a time.
    pub forward_blocks: Vec<Vec<(u32, u32)>>,
    /// Per source partition: the first and last backward step producing its
    /// rows' gradients (empty: the layer aggregates its input first and
    /// the input needs no gradient; a first layer that projects first
    /// sends its projection's gradients back all the same).
    pub backward: Vec<(u32, u32)>,
    /// Per source partition: the first step that reads its chain's
    /// gradient, by which the gradients of its rows from the other devices
    /// must have been added.
    pub backward_use: Vec<u32>,
    /// Whether the backward steps read the source rows again (GAT).
    pub backward_reads_rows: bool,
    /// The weight-gradient sum and the update.
    pub grad_accumulate: Option<u32>,
    pub update: Option<u32>,
    pub weight_grad_bytes: u64,
}

/// `name[a,b,c]` as the name and its fields (`l1`, `p0`, ...).
fn parse_name(name: &str) -> Option<(&str, Vec<(char, u32)>)> {
    let (head, rest) = name.split_once('[')?;
    let fields = rest.strip_suffix(']')?;
    let parsed = fields
        .split(',')
        .map(|f| {
            let mut chars = f.chars();
            let tag = chars.next()?;
            chars.as_str().parse().ok().map(|v| (tag, v))
        })
        .collect::<Option<Vec<_>>>()?;
    Some((head, parsed))
}

fn field(fields: &[(char, u32)], tag: char) -> Option<u32> {
    fields.iter().find(|(t, _)| *t == tag).map(|&(_, v)| v)
}

fn widen(range: &mut Option<(u32, u32)>, step: u32) {
    *range = Some(match *range {
        Some((a, b)) => (a.min(step), b.max(step)),
        None => (step, step),
    });
}

/// Finds every layer's sites from the GNN builder's operator names.
pub fn sites(workload: &Workload) -> Result<Vec<LayerSites>> {
    let mut producer: Vec<i64> = vec![-1; workload.tensors.len()];
    let mut readers: Vec<Vec<u32>> = vec![Vec::new(); workload.tensors.len()];
    for op in &workload.ops {
        for &t in &op.outputs {
            producer[t.index()] = op.id.0 as i64;
        }
        for &t in &op.inputs {
            readers[t.index()].push(op.id.0);
        }
    }
    // The device's own rows: its partitions' label tensors, a label (of
    // `gnn::LABEL` bytes) a row (an empty partition's tensor is 1 byte).
    let labels: Vec<u64> = workload
        .tensors
        .iter()
        .filter(|t| t.kind == TensorKind::Input && t.name.starts_with("y[p"))
        .map(|t| t.bytes / crate::gnn::LABEL)
        .collect();
    let own_rows = (!labels.is_empty()).then(|| labels.iter().sum());
    // The first step after `step` reading what `step` produces.
    let first_use = |step: u32| -> u32 {
        workload.ops[step as usize]
            .outputs
            .iter()
            .filter_map(|t| readers[t.index()].iter().copied().find(|&r| r > step))
            .min()
            .unwrap_or(step + 1)
    };
    #[derive(Default)]
    struct Raw {
        forward: Vec<Option<(u32, u32)>>,
        blocks: Vec<Vec<Option<(u32, u32)>>>,
        backward: Vec<Option<(u32, u32)>>,
        source: Vec<Option<usize>>,
        backward_reads_rows: bool,
        grad_accumulate: Option<u32>,
        update: Option<u32>,
        weight_grad_bytes: u64,
    }
    let mut layers: Vec<Raw> = Vec::new();
    fn layer(layers: &mut Vec<Raw>, l: u32) -> &mut Raw {
        let index = l as usize - 1;
        if layers.len() <= index {
            layers.resize_with(index + 1, Raw::default);
        }
        &mut layers[index]
    }
    let at = |v: &mut Vec<Option<(u32, u32)>>, i: u32| -> usize {
        if v.len() <= i as usize {
            v.resize(i as usize + 1, None);
        }
        i as usize
    };
    for op in &workload.ops {
        let Some((head, fields)) = parse_name(&op.name) else {
            continue;
        };
        let Some(l) = field(&fields, 'l').filter(|&l| l >= 1) else {
            continue;
        };
        let step = op.id.0;
        match head {
            "agg" | "sddmm" => {
                let (Some(i), Some(j)) = (field(&fields, 'p'), field(&fields, 's')) else {
                    continue;
                };
                let raw = layer(&mut layers, l);
                let d = at(&mut raw.forward, i);
                widen(&mut raw.forward[d], step);
                if head == "agg" {
                    if raw.blocks.len() <= d {
                        raw.blocks.resize_with(d + 1, Vec::new);
                    }
                    let b = at(&mut raw.blocks[d], j);
                    widen(&mut raw.blocks[d][b], step);
                    // The source rows: the input named x, h or z.
                    let source = op.inputs.iter().find(|t| {
                        let name = &workload.tensor(**t).name;
                        name.starts_with("x[") || name.starts_with("h[") || name.starts_with("z[")
                    });
                    if let Some(&t) = source {
                        if raw.source.len() <= j as usize {
                            raw.source.resize(j as usize + 1, None);
                        }
                        raw.source[j as usize] = Some(t.index());
                    }
                }
            }
            "agg_bwd" | "attention_bwd" => {
                let Some(j) = field(&fields, 'p') else {
                    continue;
                };
                let raw = layer(&mut layers, l);
                let s = at(&mut raw.backward, j);
                widen(&mut raw.backward[s], step);
                raw.backward_reads_rows |= head == "attention_bwd";
            }
            "grad_accumulate" => {
                let raw = layer(&mut layers, l);
                raw.grad_accumulate = Some(step);
                raw.weight_grad_bytes = op.outputs.iter().map(|&t| workload.tensor(t).bytes).sum();
            }
            "adam" => {
                let raw = layer(&mut layers, l);
                raw.update = Some(step);
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (index, raw) in layers.into_iter().enumerate() {
        let l = index as u32 + 1;
        let context = || format!("workload {:?} layer {l}", workload.name);
        let forward: Vec<(u32, u32)> = raw.forward.iter().flatten().copied().collect();
        if forward.len() != raw.forward.len() || raw.source.iter().any(Option::is_none) {
            return Err(Error::invalid(
                context(),
                "its aggregation operators do not cover every partition",
            ));
        }
        let sources: Vec<usize> = raw.source.iter().flatten().copied().collect();
        let forward_blocks: Vec<Vec<(u32, u32)>> = raw
            .blocks
            .iter()
            .map(|blocks| {
                let mut steps: Vec<(u32, u32)> = blocks.iter().flatten().copied().collect();
                steps.sort_unstable();
                steps
            })
            .collect();
        let backward: Vec<(u32, u32)> = raw.backward.iter().flatten().copied().collect();
        let backward_use = backward.iter().map(|&(_, end)| first_use(end)).collect();
        out.push(LayerSites {
            layer: l,
            source_bytes: sources.iter().map(|&t| workload.tensors[t].bytes).sum(),
            own_rows,
            produced_after: sources
                .iter()
                .map(|&t| {
                    if workload.tensors[t].kind == TensorKind::Input {
                        -1
                    } else {
                        producer[t]
                    }
                })
                .collect(),
            forward,
            forward_blocks,
            backward,
            backward_use,
            backward_reads_rows: raw.backward_reads_rows,
            grad_accumulate: raw.grad_accumulate,
            update: raw.update,
            weight_grad_bytes: raw.weight_grad_bytes,
        });
    }
    Ok(out)
}

/// An exchange before its network share is known: what [`exchanges`]
/// builds per leg.
struct Draft {
    kind: ExchangeKind,
    leg: Leg,
    bytes: u64,
    issue_after_step: i64,
    done_before_step: u32,
    device_bytes: u64,
    host_bytes: u64,
    held_from_step: u32,
    held_until_step: u32,
}

/// The exchanges of one device of `gpus` when each layer uses
/// `strategies[l - 1]`.
pub fn exchanges(
    sites: &[LayerSites],
    multi: &MultiGpu,
    profile: &Profile,
    gpus: u32,
    strategies: &[Strategy],
) -> Vec<Exchange> {
    if gpus <= 1 {
        return Vec::new();
    }
    let per_node = profile.gpus_per_node(gpus);
    // Of the other devices, the share on other nodes.
    let network_share = (gpus - per_node) as f64 / (gpus - 1) as f64;
    let mut out = Vec::new();
    for (site, &strategy) in sites.iter().zip(strategies) {
        let mut push = |d: Draft, host_held_until_step: u32| {
            // Copies out to the host stay on the node.
            let network = if d.leg == Leg::ToHost {
                0.0
            } else {
                network_share
            };
            out.push(Exchange {
                kind: d.kind,
                layer: site.layer,
                strategy,
                leg: d.leg,
                bytes: d.bytes,
                network_bytes: (d.bytes as f64 * network).round() as u64,
                issue_after_step: d.issue_after_step,
                done_before_step: d.done_before_step,
                device_bytes: d.device_bytes,
                host_bytes: d.host_bytes,
                held_from_step: d.held_from_step,
                held_until_step: d.held_until_step,
                host_held_until_step,
            });
        };
        // Each part (a block's share of the halo, or a source partition's
        // part of the backward), fetched from the host one part ahead:
        // issued once the part needed before it (by first step) has
        // started (the first part, just before it is needed). Aggregations
        // by inputs interleave the destinations' blocks and the sources'
        // chains, so the parts are ordered by their first steps, not by
        // partition.
        let ahead = |ranges: &[(u32, u32)]| -> Vec<i64> {
            let mut order: Vec<usize> = (0..ranges.len()).collect();
            order.sort_by_key(|&i| ranges[i]);
            let mut issues = vec![0i64; ranges.len()];
            for (k, &i) in order.iter().enumerate() {
                let start = ranges[i].0 as i64;
                issues[i] = match k {
                    0 => start - 1,
                    _ => (ranges[order[k - 1]].0 as i64).min(start - 1),
                };
            }
            issues
        };
        let partitions = site.forward.len() as u32;
        let (halo, halo_per_dst) = multi.halo.rows(gpus, partitions);
        let local_rows = site
            .own_rows
            .unwrap_or_else(|| multi.halo.nodes.div_ceil(gpus as u64));
        let per_row = site.source_bytes as f64 / local_rows.max(1) as f64;
        let halo_bytes = (halo * per_row).round() as u64;
        let dst_bytes = (halo_per_dst * per_row).round() as u64;
        let sources = site.produced_after.len().max(1) as u64;
        let chunk = halo_bytes.div_ceil(sources);
        // What the host strategy copies out: each boundary row once.
        let boundary_bytes = (multi.halo.boundary_rows(gpus) * per_row).round() as u64;
        let out_chunk = boundary_bytes.min(halo_bytes).div_ceil(sources);
        let first = site.forward.iter().map(|r| r.0).min().unwrap_or(0);
        let last_forward = site.forward.iter().map(|r| r.1).max().unwrap_or(0);
        let last_read = if site.backward_reads_rows {
            site.backward
                .iter()
                .map(|r| r.1)
                .max()
                .unwrap_or(last_forward)
        } else {
            last_forward
        };
        // Forward: each source partition's rows as they are produced (an
        // input's rows are in host memory already).
        for &produced in &site.produced_after {
            let from = (produced + 1) as u32;
            let (leg, device, host) = match strategy {
                Strategy::Peer => (Leg::Peer, chunk, 0),
                Strategy::Host if produced >= 0 => (Leg::ToHost, 0, out_chunk),
                Strategy::Host => continue,
            };
            let until = if strategy == Strategy::Peer {
                last_forward
            } else {
                last_read
            };
            let bytes = if strategy == Strategy::Peer {
                chunk
            } else {
                out_chunk
            };
            push(
                Draft {
                    kind: ExchangeKind::Halo,
                    leg,
                    bytes,
                    issue_after_step: produced,
                    done_before_step: first,
                    device_bytes: device,
                    host_bytes: host,
                    held_from_step: from,
                    held_until_step: until,
                },
                until,
            );
        }
        if strategy == Strategy::Host {
            // Each destination partition's halo comes back a block's share
            // at a time, each share one block ahead of the block that reads
            // it (the rows of one source partition of every other device,
            // read beside that block's own rows): the device holds two
            // shares, not two partitions' halos.
            let blocks: Vec<((u32, u32), u64)> = site
                .forward_blocks
                .iter()
                .flat_map(|steps| {
                    let n = steps.len().max(1) as u128;
                    steps.iter().enumerate().map(move |(k, &(start, end))| {
                        let k = k as u128;
                        let share =
                            (dst_bytes as u128 * (k + 1) / n - dst_bytes as u128 * k / n) as u64;
                        ((start, end), share)
                    })
                })
                .collect();
            let ranges: Vec<(u32, u32)> = blocks.iter().map(|b| b.0).collect();
            let issues = ahead(&ranges);
            for (i, &((start, end), bytes)) in blocks.iter().enumerate() {
                let issue = issues[i];
                push(
                    Draft {
                        kind: ExchangeKind::Halo,
                        leg: Leg::FromHost,
                        bytes,
                        issue_after_step: issue,
                        done_before_step: start,
                        device_bytes: bytes,
                        host_bytes: 0,
                        held_from_step: (issue + 1) as u32,
                        held_until_step: end,
                    },
                    end,
                );
            }
        }
        if site.backward.is_empty() {
            continue;
        }
        let bwd_first = site.backward.iter().map(|r| r.0).min().unwrap_or(0);
        let bwd_last = site.backward.iter().map(|r| r.1).max().unwrap_or(0);
        // GAT's backward reads the rows again.
        if site.backward_reads_rows {
            match strategy {
                Strategy::Peer => push(
                    Draft {
                        kind: ExchangeKind::Halo,
                        leg: Leg::Peer,
                        bytes: halo_bytes,
                        issue_after_step: bwd_first as i64 - 1,
                        done_before_step: bwd_first,
                        device_bytes: halo_bytes,
                        host_bytes: 0,
                        held_from_step: bwd_first,
                        held_until_step: bwd_last,
                    },
                    bwd_last,
                ),
                Strategy::Host => {
                    let issues = ahead(&site.backward);
                    for (j, &(start, end)) in site.backward.iter().enumerate() {
                        let issue = issues[j];
                        push(
                            Draft {
                                kind: ExchangeKind::Halo,
                                leg: Leg::FromHost,
                                bytes: chunk,
                                issue_after_step: issue,
                                done_before_step: start,
                                device_bytes: chunk,
                                host_bytes: 0,
                                held_from_step: (issue + 1) as u32,
                                held_until_step: end,
                            },
                            end,
                        );
                    }
                }
            }
        }
        // Gradients of the halo rows back to their owners, each source
        // partition's as its chain ends (symmetrically, the gradients of
        // this device's rows of that partition come back), added before
        // the step that reads the partition's gradient.
        for (&(start, end), &needed) in site.backward.iter().zip(&site.backward_use) {
            if strategy == Strategy::Peer {
                push(
                    Draft {
                        kind: ExchangeKind::HaloGrad,
                        leg: Leg::Peer,
                        bytes: chunk,
                        issue_after_step: end as i64,
                        done_before_step: needed,
                        device_bytes: chunk,
                        host_bytes: 0,
                        held_from_step: start,
                        held_until_step: needed,
                    },
                    needed,
                );
                continue;
            }
            // Out as the chain ends (its rows held meanwhile), summed on
            // the host until they are needed, back just before. All
            // devices end chain `j` together: its sums are complete once
            // this device's copy out is.
            push(
                Draft {
                    kind: ExchangeKind::HaloGrad,
                    leg: Leg::ToHost,
                    bytes: chunk,
                    issue_after_step: end as i64,
                    done_before_step: needed,
                    device_bytes: chunk,
                    host_bytes: out_chunk,
                    held_from_step: start,
                    held_until_step: end,
                },
                needed,
            );
            push(
                Draft {
                    kind: ExchangeKind::HaloGrad,
                    leg: Leg::FromHost,
                    bytes: out_chunk,
                    issue_after_step: needed as i64 - 1,
                    done_before_step: needed,
                    device_bytes: out_chunk,
                    host_bytes: 0,
                    held_from_step: needed,
                    held_until_step: needed,
                },
                needed,
            );
        }
    }
    // Weight gradients: a ring all-reduce moves 2 (k - 1) / k of them.
    for site in sites {
        if let (Some(sum), Some(update)) = (site.grad_accumulate, site.update) {
            let bytes = (site.weight_grad_bytes as f64 * 2.0 * (gpus - 1) as f64 / gpus as f64)
                .round() as u64;
            out.push(Exchange {
                kind: ExchangeKind::AllReduce,
                layer: site.layer,
                strategy: Strategy::Peer,
                leg: Leg::Peer,
                bytes,
                network_bytes: (bytes as f64 * network_share).round() as u64,
                issue_after_step: sum as i64,
                done_before_step: update,
                device_bytes: 0,
                host_bytes: 0,
                held_from_step: sum + 1,
                held_until_step: update,
                host_held_until_step: update,
            });
        }
    }
    // Issue order, as the exchange stream runs them.
    out.sort_by_key(|e| e.issue_after_step);
    out
}

/// Bytes the exchanges hold on `tier` (the device or the host) during each
/// step.
pub fn bytes_per_step(exchanges: &[Exchange], steps: usize, tier: Tier) -> Vec<u64> {
    let mut delta = vec![0i128; steps + 1];
    for e in exchanges {
        let (bytes, last) = match tier {
            Tier::Hbm => (e.device_bytes, e.held_until_step),
            _ => (e.host_bytes, e.host_held_until_step),
        };
        let from = (e.held_from_step as usize).min(steps);
        let until = (last as usize + 1).min(steps);
        if from < until {
            delta[from] += bytes as i128;
            delta[until] -= bytes as i128;
        }
    }
    let mut running = 0i128;
    delta[..steps]
        .iter()
        .map(|d| {
            running += d;
            running as u64
        })
        .collect()
}

/// Every strategy vector worth trying for `layers` layers: all of them up
/// to `MAX_ENUMERATED_LAYERS`, else the two uniform ones and each single
/// layer switched from them.
pub fn candidates(layers: usize, forced: Option<Strategy>) -> Vec<Vec<Strategy>> {
    if let Some(s) = forced {
        return vec![vec![s; layers]];
    }
    if layers <= MAX_ENUMERATED_LAYERS {
        return (0..1usize << layers)
            .map(|bits| {
                (0..layers)
                    .map(|l| {
                        if bits >> l & 1 == 0 {
                            Strategy::Peer
                        } else {
                            Strategy::Host
                        }
                    })
                    .collect()
            })
            .collect();
    }
    let mut out = Vec::new();
    for base in Strategy::ALL {
        let other = if base == Strategy::Peer {
            Strategy::Host
        } else {
            Strategy::Peer
        };
        out.push(vec![base; layers]);
        for l in 0..layers {
            let mut v = vec![base; layers];
            v[l] = other;
            out.push(v);
        }
    }
    out
}

/// Layers whose every strategy combination is tried.
pub const MAX_ENUMERATED_LAYERS: usize = 4;

//! The multilevel min-cut partitioner: coarsen, partition the coarsest
//! graph, refine on the way back up.
//!
//! The graph is the symmetrised one (an edge's weight is the number of
//! directed edges between its ends, either way), over the vertices that
//! have an edge to another vertex; a vertex weighs its in-edges. The
//! edge cut of this graph counts every directed edge crossing GPUs, and
//! the halo is at most that.

use std::collections::BinaryHeap;

use super::SplitMix;

const NONE: u32 = u32::MAX;

/// Coarsening stops at `max(COARSEST_PER_PART · k, COARSEST_MIN)` vertices.
const COARSEST_PER_PART: usize = 30;
const COARSEST_MIN: usize = 120;
/// ... or when a level keeps more than this share of its vertices.
const MIN_SHRINK: f64 = 0.95;
/// ... or after this many levels.
const MAX_LEVELS: usize = 64;
/// Greedy-growing attempts on the coarsest graph (the best is kept).
const INITIAL_TRIES: u64 = 6;
/// Refinement passes per level (a pass stops early once nothing moves).
const REFINE_PASSES: usize = 8;

/// An undirected weighted graph in CSR form.
pub(super) struct Graph {
    offsets: Vec<usize>,
    adjacency: Vec<u32>,
    edge_weight: Vec<u32>,
    vertex_weight: Vec<u64>,
}

impl Graph {
    fn vertices(&self) -> usize {
        self.vertex_weight.len()
    }

    fn neighbours(&self, v: usize) -> impl Iterator<Item = (usize, u64)> + '_ {
        let range = self.offsets[v]..self.offsets[v + 1];
        self.adjacency[range.clone()]
            .iter()
            .zip(&self.edge_weight[range])
            .map(|(&u, &w)| (u as usize, u64::from(w)))
    }

    fn total_weight(&self) -> u64 {
        self.vertex_weight.iter().sum()
    }

    /// The symmetrised graph of `src -> dst` over the vertices with an
    /// edge to another vertex (self-loops and duplicates merged), and
    /// those vertices' ids, in increasing order.
    pub(super) fn symmetric(
        n: usize,
        src: &[u64],
        dst: &[u64],
        weight: &[u64],
    ) -> (Graph, Vec<u32>) {
        let mut degree = vec![0usize; n];
        for (&s, &d) in src.iter().zip(dst) {
            if s != d {
                degree[s as usize] += 1;
                degree[d as usize] += 1;
            }
        }
        let active: Vec<u32> = (0..n as u32).filter(|&v| degree[v as usize] > 0).collect();
        let mut index = vec![NONE; n];
        for (i, &v) in active.iter().enumerate() {
            index[v as usize] = i as u32;
        }
        let m = active.len();
        let mut offsets = Vec::with_capacity(m + 1);
        let mut running = 0usize;
        offsets.push(running);
        for &v in &active {
            running += degree[v as usize];
            offsets.push(running);
        }
        drop(degree);
        let mut fill = offsets.clone();
        let mut raw = vec![0u32; offsets[m]];
        for (&s, &d) in src.iter().zip(dst) {
            if s != d {
                let (a, b) = (index[s as usize], index[d as usize]);
                raw[fill[a as usize]] = b;
                fill[a as usize] += 1;
                raw[fill[b as usize]] = a;
                fill[b as usize] += 1;
            }
        }
        drop(fill);
        drop(index);
        // Merge duplicates row by row, in first-seen order.
        let mut slot = vec![NONE; m];
        let mut merged = Graph {
            offsets: Vec::with_capacity(m + 1),
            adjacency: Vec::with_capacity(raw.len()),
            edge_weight: Vec::with_capacity(raw.len()),
            vertex_weight: active.iter().map(|&v| weight[v as usize]).collect(),
        };
        merged.offsets.push(0);
        for v in 0..m {
            let start = merged.adjacency.len();
            for &u in &raw[offsets[v]..offsets[v + 1]] {
                let at = slot[u as usize];
                if at != NONE && at as usize >= start {
                    merged.edge_weight[at as usize] =
                        merged.edge_weight[at as usize].saturating_add(1);
                } else {
                    slot[u as usize] = merged.adjacency.len() as u32;
                    merged.adjacency.push(u);
                    merged.edge_weight.push(1);
                }
            }
            merged.offsets.push(merged.adjacency.len());
        }
        (merged, active)
    }
}

/// Partitions `graph` into `parts` parts of at most `max_weight` each
/// where it can; returns each vertex's part.
pub(super) fn partition(graph: Graph, parts: u32, max_weight: u64, seed: u64) -> Vec<u32> {
    let k = parts as usize;
    if graph.vertices() == 0 {
        return Vec::new();
    }
    if k == 1 {
        return vec![0; graph.vertices()];
    }
    let mut rng = SplitMix::new(seed, 2);
    let coarsest_size = (COARSEST_PER_PART * k).max(COARSEST_MIN);
    let total = graph.total_weight();
    // A coarse vertex may weigh at most this much, so that the coarsest
    // graph can still be balanced.
    let max_vertex_weight = ((1.5 * total as f64 / coarsest_size as f64).ceil() as u64).max(1);
    let mut levels: Vec<Graph> = vec![graph];
    let mut maps: Vec<Vec<u32>> = Vec::new();
    while levels.len() < MAX_LEVELS {
        let fine = levels.last().expect("levels start with the input graph");
        if fine.vertices() <= coarsest_size {
            break;
        }
        let (map, members) = match_vertices(fine, max_vertex_weight, &mut rng);
        if members.len() as f64 > MIN_SHRINK * fine.vertices() as f64 {
            break;
        }
        let coarse = contract(fine, &map, &members);
        maps.push(map);
        levels.push(coarse);
    }
    let coarsest = levels.last().expect("levels start with the input graph");
    let mut part = initial(coarsest, k, max_weight, &mut rng);
    for level in (0..maps.len()).rev() {
        let fine = &levels[level];
        let map = &maps[level];
        part = map.iter().map(|&c| part[c as usize]).collect();
        let mut part_weight = weights(fine, &part, k);
        refine(
            fine,
            &mut part,
            &mut part_weight,
            max_weight,
            &mut rng,
            REFINE_PASSES,
        );
        rebalance(fine, &mut part, &mut part_weight, max_weight);
    }
    part
}

/// Heavy-edge matching: each unmatched vertex, in random order, pairs
/// with the unmatched neighbour joined by the heaviest edge (the lighter
/// one among equals). Vertices left unmatched then pair with another left
/// over that shares their heaviest neighbour (leaves of the same hub in
/// power-law graphs, which heavy-edge matching alone cannot shrink).
/// Returns the coarse vertex of each vertex and the members of each
/// coarse vertex.
fn match_vertices(
    g: &Graph,
    max_vertex_weight: u64,
    rng: &mut SplitMix,
) -> (Vec<u32>, Vec<[u32; 2]>) {
    let n = g.vertices();
    let mut order: Vec<u32> = (0..n as u32).collect();
    rng.shuffle(&mut order);
    let mut mate = vec![NONE; n];
    let vw = &g.vertex_weight;
    for &u in &order {
        let u = u as usize;
        if mate[u] != NONE {
            continue;
        }
        let mut best: Option<(u64, usize)> = None;
        for (v, w) in g.neighbours(u) {
            if mate[v] != NONE || v == u || vw[u] + vw[v] > max_vertex_weight {
                continue;
            }
            let better = match best {
                None => true,
                Some((bw, b)) => w > bw || (w == bw && vw[v] < vw[b]),
            };
            if better {
                best = Some((w, v));
            }
        }
        if let Some((_, v)) = best {
            mate[u] = v as u32;
            mate[v] = u as u32;
        }
    }
    let mut waiting = vec![NONE; n];
    for &u in &order {
        let u = u as usize;
        if mate[u] != NONE {
            continue;
        }
        let Some((hub, _)) = g
            .neighbours(u)
            .fold(None, |best: Option<(usize, u64)>, (v, w)| match best {
                Some((_, bw)) if bw >= w => best,
                _ => Some((v, w)),
            })
        else {
            continue;
        };
        let other = waiting[hub];
        if other != NONE && vw[u] + vw[other as usize] <= max_vertex_weight {
            mate[u] = other;
            mate[other as usize] = u as u32;
            waiting[hub] = NONE;
        } else {
            waiting[hub] = u as u32;
        }
    }
    let mut map = vec![NONE; n];
    let mut members = Vec::with_capacity(n / 2 + 1);
    for u in 0..n {
        if map[u] != NONE {
            continue;
        }
        let c = members.len() as u32;
        map[u] = c;
        let v = mate[u];
        if v != NONE && v as usize != u {
            map[v as usize] = c;
        }
        members.push([u as u32, v]);
    }
    (map, members)
}

/// The coarse graph: a vertex per matched pair (or single), its weight
/// the sum, its edges the sums of the members' edges to other pairs.
fn contract(g: &Graph, map: &[u32], members: &[[u32; 2]]) -> Graph {
    let nc = members.len();
    let mut slot = vec![NONE; nc];
    let mut coarse = Graph {
        offsets: Vec::with_capacity(nc + 1),
        adjacency: Vec::with_capacity(g.adjacency.len() / 2),
        edge_weight: Vec::with_capacity(g.adjacency.len() / 2),
        vertex_weight: Vec::with_capacity(nc),
    };
    coarse.offsets.push(0);
    for (c, pair) in members.iter().enumerate() {
        let start = coarse.adjacency.len();
        let mut weight = 0;
        for &u in pair.iter().filter(|&&u| u != NONE) {
            let u = u as usize;
            weight += g.vertex_weight[u];
            for (v, w) in g.neighbours(u) {
                let cv = map[v];
                if cv as usize == c {
                    continue;
                }
                let at = slot[cv as usize];
                if at != NONE && at as usize >= start {
                    let e = &mut coarse.edge_weight[at as usize];
                    *e = e.saturating_add(w as u32);
                } else {
                    slot[cv as usize] = coarse.adjacency.len() as u32;
                    coarse.adjacency.push(cv);
                    coarse.edge_weight.push(w as u32);
                }
            }
        }
        coarse.vertex_weight.push(weight);
        coarse.offsets.push(coarse.adjacency.len());
    }
    coarse
}

fn weights(g: &Graph, part: &[u32], k: usize) -> Vec<u64> {
    let mut part_weight = vec![0u64; k];
    for (v, &p) in part.iter().enumerate() {
        part_weight[p as usize] += g.vertex_weight[v];
    }
    part_weight
}

/// Total weight of edges whose ends are in different parts.
fn cut(g: &Graph, part: &[u32]) -> u64 {
    let mut cut = 0;
    for v in 0..g.vertices() {
        for (u, w) in g.neighbours(v) {
            if part[u] != part[v] {
                cut += w;
            }
        }
    }
    cut / 2
}

/// The coarsest graph's partition: the best of a few greedy growings
/// (the least weight over the budget, then the smallest cut), each
/// refined and rebalanced.
fn initial(g: &Graph, k: usize, max_weight: u64, rng: &mut SplitMix) -> Vec<u32> {
    let mut best: Option<((u64, u64), Vec<u32>)> = None;
    for _ in 0..INITIAL_TRIES {
        let mut part = grow(g, k, max_weight, rng);
        let mut part_weight = weights(g, &part, k);
        refine(
            g,
            &mut part,
            &mut part_weight,
            max_weight,
            rng,
            2 * REFINE_PASSES,
        );
        rebalance(g, &mut part, &mut part_weight, max_weight);
        let over: u64 = part_weight
            .iter()
            .map(|&w| w.saturating_sub(max_weight))
            .sum();
        let score = (over, cut(g, &part));
        if best.as_ref().is_none_or(|(b, _)| score < *b) {
            best = Some((score, part));
        }
    }
    best.expect("at least one try").1
}

/// Greedy graph growing: parts `0..k-1` in turn grow from a random seed,
/// always taking the unassigned vertex most strongly connected to the
/// part, until they reach their share of the weight left; the last part
/// takes the rest.
fn grow(g: &Graph, k: usize, max_weight: u64, rng: &mut SplitMix) -> Vec<u32> {
    let n = g.vertices();
    let mut part = vec![NONE; n];
    let mut seeds: Vec<u32> = (0..n as u32).collect();
    rng.shuffle(&mut seeds);
    let mut next_seed = 0;
    let mut left = g.total_weight();
    let mut gain = vec![0u64; n];
    let mut touched: Vec<usize> = Vec::new();
    for p in 0..k - 1 {
        let target = left.div_ceil((k - p) as u64);
        let mut weight = 0u64;
        let mut heap: BinaryHeap<(u64, u32)> = BinaryHeap::new();
        while weight < target {
            let (v, seeded) = match heap.pop() {
                Some((g_v, v)) => {
                    if part[v as usize] != NONE || g_v != gain[v as usize] {
                        continue;
                    }
                    (v as usize, false)
                }
                None => {
                    while next_seed < n && part[seeds[next_seed] as usize] != NONE {
                        next_seed += 1;
                    }
                    if next_seed == n {
                        break;
                    }
                    (seeds[next_seed] as usize, true)
                }
            };
            let w = g.vertex_weight[v];
            if weight > 0 && weight + w > max_weight {
                if seeded {
                    break; // the part is as full as it can get
                }
                // Too heavy for this part: left for a later one.
                gain[v] = u64::MAX;
                touched.push(v);
                continue;
            }
            part[v] = p as u32;
            weight += w;
            for (u, e) in g.neighbours(v) {
                if part[u] == NONE && gain[u] != u64::MAX {
                    gain[u] += e;
                    touched.push(u);
                    heap.push((gain[u], u as u32));
                }
            }
        }
        left -= weight;
        for &v in &touched {
            gain[v] = 0;
        }
        touched.clear();
    }
    for p in part.iter_mut().filter(|p| **p == NONE) {
        *p = (k - 1) as u32;
    }
    part
}

/// Each vertex's connection to each part: `conn[p]` for the parts in
/// `touched`. The caller clears them.
fn connect(g: &Graph, v: usize, part: &[u32], conn: &mut [u64], touched: &mut Vec<u32>) {
    for (u, w) in g.neighbours(v) {
        let p = part[u];
        if conn[p as usize] == 0 {
            touched.push(p);
        }
        conn[p as usize] += w;
    }
}

/// Greedy boundary refinement: in random order, each vertex with a
/// neighbour in another part moves to the part it is most connected to
/// when that lowers the cut, or keeps it and improves the balance, and
/// the part has room. Stops after `passes` passes or one without moves.
fn refine(
    g: &Graph,
    part: &mut [u32],
    part_weight: &mut [u64],
    max_weight: u64,
    rng: &mut SplitMix,
    passes: usize,
) {
    let n = g.vertices();
    let mut order: Vec<u32> = (0..n as u32).collect();
    rng.shuffle(&mut order);
    let mut conn = vec![0u64; part_weight.len()];
    let mut touched: Vec<u32> = Vec::new();
    for _ in 0..passes {
        let mut moves = 0usize;
        for &v in &order {
            let v = v as usize;
            let home = part[v];
            connect(g, v, part, &mut conn, &mut touched);
            let w = g.vertex_weight[v];
            let mut best: Option<u32> = None;
            for &p in &touched {
                if p == home || part_weight[p as usize] + w > max_weight {
                    continue;
                }
                let better = match best {
                    None => true,
                    Some(b) => {
                        let (cp, cb) = (conn[p as usize], conn[b as usize]);
                        cp > cb
                            || (cp == cb
                                && (part_weight[p as usize], p) < (part_weight[b as usize], b))
                    }
                };
                if better {
                    best = Some(p);
                }
            }
            if let Some(b) = best {
                let (to, from) = (conn[b as usize], conn[home as usize]);
                let balances = part_weight[home as usize] > part_weight[b as usize] + w;
                if to > from || (to == from && balances) {
                    part[v] = b;
                    part_weight[home as usize] -= w;
                    part_weight[b as usize] += w;
                    moves += 1;
                }
            }
            for &p in &touched {
                conn[p as usize] = 0;
            }
            touched.clear();
        }
        if moves == 0 {
            break;
        }
    }
}

/// Moves vertices out of parts over `max_weight`, the least costly first
/// (to the connected part with room that loses the least cut, else the
/// lightest part with room), until each fits or nothing can move.
fn rebalance(g: &Graph, part: &mut [u32], part_weight: &mut [u64], max_weight: u64) {
    let k = part_weight.len();
    let mut conn = vec![0u64; k];
    let mut touched: Vec<u32> = Vec::new();
    // The best target of `v` and the cut it adds (negative: it lowers it).
    let mut target = |v: usize, part: &[u32], part_weight: &[u64]| -> Option<(i64, u32)> {
        let home = part[v];
        let w = g.vertex_weight[v];
        connect(g, v, part, &mut conn, &mut touched);
        let mut best: Option<(u64, u32)> = None;
        for &p in &touched {
            if p != home
                && part_weight[p as usize] + w <= max_weight
                && best.is_none_or(|(c, _)| conn[p as usize] > c)
            {
                best = Some((conn[p as usize], p));
            }
        }
        if best.is_none() {
            let p = super::lightest(part_weight);
            if p as u32 != home && part_weight[p] + w <= max_weight {
                best = Some((0, p as u32));
            }
        }
        let internal = conn[home as usize];
        for &p in &touched {
            conn[p as usize] = 0;
        }
        touched.clear();
        best.map(|(c, p)| (internal as i64 - c as i64, p))
    };
    for heavy in 0..k {
        if part_weight[heavy] <= max_weight {
            continue;
        }
        let mut candidates: Vec<(i64, u32)> = (0..g.vertices())
            .filter(|&v| part[v] as usize == heavy && g.vertex_weight[v] > 0)
            .filter_map(|v| target(v, part, part_weight).map(|(cost, _)| (cost, v as u32)))
            .collect();
        candidates.sort_unstable();
        for (_, v) in candidates {
            if part_weight[heavy] <= max_weight {
                break;
            }
            let v = v as usize;
            if let Some((_, to)) = target(v, part, part_weight) {
                let w = g.vertex_weight[v];
                part[v] = to;
                part_weight[heavy] -= w;
                part_weight[to as usize] += w;
            }
        }
    }
}

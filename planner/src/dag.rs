//! Generic DAGs from networkx node-link JSON, the format of published
//! rematerialisation benchmarks.
//!
//! Each node is an operator that produces one tensor: `cost_cpu` is its
//! compute time in seconds, `cost_ram` the bytes of its output, and
//! `backward` says whether it belongs to the backward pass. A link
//! `source -> target` means that `target` reads `source`'s output. Nodes run
//! in file order when that order is topological, otherwise in the
//! topological order that keeps file order wherever it can.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use serde::Deserialize;

use crate::workload::{
    Cost, OpKind, Phase, TensorId, TensorKind, Workload, MAX_ITEMS, MAX_OP_SECONDS,
    MAX_TENSOR_BYTES,
};
use crate::{Error, Result};

#[derive(Deserialize)]
struct NodeLink {
    /// networkx writes it; an undirected graph gives no order to train in.
    #[serde(default)]
    directed: Option<bool>,
    nodes: Vec<Node>,
    #[serde(alias = "edges")]
    links: Vec<Link>,
}

#[derive(Deserialize)]
struct Node {
    id: serde_json::Value,
    cost_cpu: f64,
    cost_ram: f64,
    #[serde(default)]
    backward: bool,
}

#[derive(Deserialize)]
struct Link {
    source: serde_json::Value,
    target: serde_json::Value,
}

fn key(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::String(s) => Some(s.clone()),
        _ => None,
    }
}

/// Keys only node-link JSON has, and keys only a workload file has.
const NODE_LINK_KEYS: [&str; 4] = ["nodes", "links", "directed", "multigraph"];
const WORKLOAD_KEYS: [&str; 3] = ["ops", "tensors", "format_version"];

/// Tells the two DAG formats apart by their keys: node-link JSON has
/// `nodes`, `links`, `directed` or `multigraph` and no key of a workload
/// file; text that is not JSON (a file cut short) by whichever kind of key
/// it names first, so that its error is said in its own format's terms.
pub fn is_node_link(text: &str) -> bool {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => value.as_object().is_some_and(|o| {
            NODE_LINK_KEYS.iter().any(|k| o.contains_key(*k))
                && !WORKLOAD_KEYS.iter().any(|k| o.contains_key(*k))
        }),
        Err(_) => {
            let first = |keys: &[&str]| {
                keys.iter()
                    .filter_map(|k| text.find(&format!("\"{k}\"")))
                    .min()
                    .unwrap_or(usize::MAX)
            };
            let (node_link, workload) = (first(&NODE_LINK_KEYS), first(&WORKLOAD_KEYS));
            node_link < workload
        }
    }
}

/// Reads a node-link DAG; `source` names the file in errors.
pub fn from_node_link(text: &str, source: &str) -> Result<Workload> {
    let graph: NodeLink = crate::json::parse(text, source)?;
    if graph.directed == Some(false) {
        return Err(Error::invalid(
            format!("{source}: field directed"),
            "false: an undirected graph does not say which node reads which; a training \
             DAG's links run from the node that writes a tensor to the one that reads it",
        ));
    }
    let n = graph.nodes.len();
    if n == 0 || n > MAX_ITEMS {
        return Err(Error::invalid(
            format!("{source}: field nodes"),
            format!("{n} nodes; a DAG needs 1..={MAX_ITEMS}"),
        ));
    }
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for (position, node) in graph.nodes.iter().enumerate() {
        let context = || format!("{source}: nodes[{position}]");
        let id = key(&node.id).ok_or_else(|| {
            Error::invalid(
                context(),
                format!("id {} is not a number or string", node.id),
            )
        })?;
        if !(0.0..=MAX_OP_SECONDS).contains(&node.cost_cpu) {
            return Err(Error::invalid(
                context(),
                format!(
                    "cost_cpu {} must be finite, not negative and at most {MAX_OP_SECONDS:e} \
                     seconds",
                    as_written(node.cost_cpu)
                ),
            ));
        }
        if !(node.cost_ram.is_finite()
            && node.cost_ram > 0.0
            && node.cost_ram <= MAX_TENSOR_BYTES as f64)
        {
            return Err(Error::invalid(
                context(),
                format!(
                    "cost_ram {} must be a byte count above 0 and at most {MAX_TENSOR_BYTES} (1 PiB)",
                    as_written(node.cost_ram)
                ),
            ));
        }
        if node.cost_ram.fract() != 0.0 {
            return Err(Error::invalid(
                context(),
                format!(
                    "cost_ram {} is not a whole number of bytes",
                    as_written(node.cost_ram)
                ),
            ));
        }
        if id.trim().is_empty() || id.chars().any(char::is_control) {
            return Err(Error::invalid(
                context(),
                format!("id {id:?} names no node: it is blank or holds a control character"),
            ));
        }
        if index.insert(id.clone(), position).is_some() {
            return Err(Error::invalid(context(), format!("id {id} appears twice")));
        }
    }
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (position, link) in graph.links.iter().enumerate() {
        let lookup = |value: &serde_json::Value, field: &str| {
            key(value)
                .and_then(|k| index.get(&k).copied())
                .ok_or_else(|| {
                    Error::invalid(
                        format!("{source}: links[{position}].{field}"),
                        format!("{value} is not a node id"),
                    )
                })
        };
        let (s, t) = (
            lookup(&link.source, "source")?,
            lookup(&link.target, "target")?,
        );
        if s == t {
            return Err(Error::invalid(
                format!("{source}: links[{position}]"),
                format!("node {} links to itself", link.source),
            ));
        }
        if !preds[t].contains(&s) {
            preds[t].push(s);
            succs[s].push(t);
        }
    }
    let order = topological_order(&preds, &succs).map_err(|stuck| {
        let names: Vec<String> = one_cycle(&stuck, &preds)
            .iter()
            .take(8)
            .map(|&i| key(&graph.nodes[i].id).unwrap_or_default())
            .collect();
        Error::invalid(
            format!("{source}: links"),
            format!("the graph has a cycle: {}", names.join(" -> ")),
        )
    })?;

    let name = source
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(source)
        .trim_end_matches(".json");
    let mut w = Workload::new(name);
    let mut tensor_of = vec![TensorId(0); n];
    for &node in &order {
        let spec = &graph.nodes[node];
        let kind = if spec.backward {
            TensorKind::Gradient
        } else {
            TensorKind::Activation
        };
        let label = key(&spec.id).unwrap_or_default();
        tensor_of[node] = w.add_tensor(label, spec.cost_ram as u64, kind, None);
    }
    for &node in &order {
        let spec = &graph.nodes[node];
        let mut inputs: Vec<TensorId> = preds[node].iter().map(|&p| tensor_of[p]).collect();
        inputs.sort();
        let phase = if spec.backward {
            Phase::Backward
        } else {
            Phase::Forward
        };
        let label = key(&spec.id).unwrap_or_default();
        w.add_op(
            label,
            OpKind::Generic,
            phase,
            inputs,
            vec![tensor_of[node]],
            Cost::seconds(spec.cost_cpu),
        );
    }
    w.validate().map_err(|e| crate::json::within(source, e))?;
    Ok(w)
}

/// A random training DAG in node-link JSON, for tests and benchmarks, with
/// `forward` forward nodes and as many backward nodes (`2 * forward` in
/// all). Forward node `i` reads node `i - 1` and, now and then, one of the
/// eight before it (a skip connection); backward node `i` reads the
/// gradient from node `i + 1` and the forward outputs node `i` read, as
/// the gradient of a real layer does. Sizes are 1 to 64 MiB, times 0.1 to
/// 10 ms, drawn from `seed` (splitmix64): the same seed gives the same text.
pub fn random_node_link(forward: usize, seed: u64) -> String {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let forward = forward.max(1);
    let mut nodes = Vec::with_capacity(2 * forward);
    let mut links: Vec<(usize, usize)> = Vec::new();
    // Forward reads, kept for the backward node that mirrors each.
    let mut reads: Vec<Vec<usize>> = vec![Vec::new(); forward];
    for (i, read) in reads.iter_mut().enumerate() {
        if i > 0 {
            read.push(i - 1);
        }
        if i > 2 && next() % 4 == 0 {
            let back = 2 + (next() % 7) as usize;
            read.push(i.saturating_sub(back));
        }
        read.dedup();
        for &r in read.iter() {
            links.push((r, i));
        }
    }
    for i in 0..2 * forward {
        let ram = (1u64 << 20) * (1 + next() % 64);
        let cpu = 1e-4 * (1 + next() % 100) as f64;
        nodes.push(format!(
            r#"{{"id": {i}, "cost_cpu": {cpu:e}, "cost_ram": {ram}, "backward": {}}}"#,
            i >= forward
        ));
    }
    // Backward node for forward node i is 2 * forward - 1 - i.
    let grad = |i: usize| 2 * forward - 1 - i;
    for i in (0..forward).rev() {
        let g = grad(i);
        if i + 1 < forward {
            links.push((grad(i + 1), g));
        } else {
            links.push((i, g));
        }
        for &r in &reads[i] {
            links.push((r, g));
        }
    }
    let links: Vec<String> = links
        .iter()
        .map(|(s, t)| format!(r#"{{"source": {s}, "target": {t}}}"#))
        .collect();
    format!(
        r#"{{"directed": true, "multigraph": false, "graph": {{}}, "nodes": [{}], "links": [{}]}}"#,
        nodes.join(", "),
        links.join(", ")
    )
}

/// One cycle among `stuck`, the nodes a topological order could not
/// reach (each has a predecessor among them), in link order, its first
/// node again at the end.
fn one_cycle(stuck: &[usize], preds: &[Vec<usize>]) -> Vec<usize> {
    let Some(&first) = stuck.first() else {
        return Vec::new();
    };
    let mut marked = vec![false; preds.len()];
    for &v in stuck {
        marked[v] = true;
    }
    let is_stuck = |v: usize| marked[v];
    // Walk back along stuck predecessors until a node comes again.
    let mut path = vec![first];
    let mut at = first;
    loop {
        let Some(&back) = preds[at].iter().find(|&&p| is_stuck(p)) else {
            return stuck.to_vec();
        };
        if let Some(k) = path.iter().position(|&v| v == back) {
            let mut cycle: Vec<usize> = path[k..].to_vec();
            cycle.reverse();
            cycle.push(cycle[0]);
            return cycle;
        }
        path.push(back);
        at = back;
    }
}

/// Kahn's algorithm, taking the lowest file position among ready nodes, so
/// a file already in topological order keeps its order. On a cycle, returns
/// the nodes that could not be ordered.
fn topological_order(preds: &[Vec<usize>], succs: &[Vec<usize>]) -> Result<Vec<usize>, Vec<usize>> {
    let mut waiting: Vec<usize> = preds.iter().map(Vec::len).collect();
    let mut ready: BinaryHeap<Reverse<usize>> = (0..preds.len())
        .filter(|&i| waiting[i] == 0)
        .map(Reverse)
        .collect();
    let mut order = Vec::with_capacity(preds.len());
    while let Some(Reverse(node)) = ready.pop() {
        order.push(node);
        for &next in &succs[node] {
            waiting[next] -= 1;
            if waiting[next] == 0 {
                ready.push(Reverse(next));
            }
        }
    }
    if order.len() == preds.len() {
        Ok(order)
    } else {
        Err((0..preds.len()).filter(|&i| waiting[i] > 0).collect())
    }
}

/// A number of the file as it was likely written: whole numbers below
/// 2^53 as integers (`-1`, `0`), others in Rust's shortest form (`0.5`,
/// `1e300`).
fn as_written(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < (1u64 << 53) as f64 {
        format!("{}", value as i64)
    } else {
        format!("{value:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAIN: &str = r#"{"directed": true, "multigraph": false, "graph": {},
        "nodes": [{"id": 0, "cost_cpu": 1.0, "cost_ram": 10, "backward": false},
                  {"id": 1, "cost_cpu": 2.0, "cost_ram": 20, "backward": false},
                  {"id": 2, "cost_cpu": 3.0, "cost_ram": 30, "backward": true}],
        "links": [{"source": 0, "target": 1}, {"source": 1, "target": 2}, {"source": 0, "target": 2}]}"#;

    #[test]
    fn reads_node_link() {
        assert!(is_node_link(CHAIN));
        let w = from_node_link(CHAIN, "chain.json").unwrap();
        assert_eq!(w.name, "chain");
        assert_eq!(w.ops.len(), 3);
        assert_eq!(w.ops[2].inputs, vec![TensorId(0), TensorId(1)]);
        assert_eq!(w.ops[2].phase, Phase::Backward);
        assert_eq!(w.tensors[1].bytes, 20);
    }

    #[test]
    fn reorders_and_finds_cycles() {
        let reversed = CHAIN.replace(
            "\"source\": 1, \"target\": 2",
            "\"source\": 2, \"target\": 1",
        );
        let w = from_node_link(&reversed, "r.json").unwrap();
        assert_eq!(
            w.ops.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(),
            ["0", "2", "1"]
        );
        let cyclic = CHAIN.replace(
            "\"source\": 0, \"target\": 2",
            "\"source\": 2, \"target\": 0",
        );
        let message = from_node_link(&cyclic, "c.json").unwrap_err().to_string();
        assert!(message.contains("cycle"), "{message}");
    }

    #[test]
    fn a_cycle_is_named_without_the_nodes_it_only_feeds() {
        // 0 -> 1 -> 2, and 0 -> 3 -> 0: the cycle is 0, 3; 1 and 2 are
        // only stuck behind it.
        let preds = vec![vec![3], vec![0], vec![1], vec![0]];
        assert_eq!(one_cycle(&[2, 1, 0, 3], &preds), [3, 0, 3]);
        assert_eq!(one_cycle(&[0, 1, 2, 3], &preds), [3, 0, 3]);
    }

    #[test]
    fn random_dags_load_and_repeat() {
        let text = random_node_link(50, 7);
        assert_eq!(text, random_node_link(50, 7));
        assert_ne!(text, random_node_link(50, 8));
        let w = from_node_link(&text, "random.json").unwrap();
        assert_eq!(w.ops.len(), 100);
        let backward = w.ops.iter().filter(|o| o.phase == Phase::Backward).count();
        assert_eq!(backward, 50);
        // Every gradient but the first forward node's reads forward outputs.
        let is_forward = |t: &TensorId| w.tensors[t.index()].kind == TensorKind::Activation;
        let mirrored = w
            .ops
            .iter()
            .filter(|o| o.phase == Phase::Backward && o.inputs.iter().any(is_forward))
            .count();
        assert_eq!(mirrored, 49);
    }

    #[test]
    fn a_node_link_file_with_a_fault_is_read_as_node_link() {
        // No links, a file cut short, and the costs that would add up to
        // more seconds than can be counted.
        let no_links = CHAIN[..CHAIN.find(",\n        \"links\"").unwrap()].to_string() + "}";
        assert!(is_node_link(&no_links), "{no_links}");
        let message = from_node_link(&no_links, "n.json").unwrap_err().to_string();
        assert!(message.contains("missing field `links`"), "{message}");
        let cut = &CHAIN[..100];
        assert!(is_node_link(cut));
        let message = from_node_link(cut, "cut.json").unwrap_err().to_string();
        assert!(message.contains("cut.json"), "{message}");
        let huge = CHAIN.replace("\"cost_cpu\": 2.0", "\"cost_cpu\": 1.5e308");
        let message = from_node_link(&huge, "h.json").unwrap_err().to_string();
        assert!(
            message.contains("nodes[1]") && message.contains("at most 1e9 seconds"),
            "{message}"
        );
        // A workload file is not node-link, whole or cut short.
        assert!(!is_node_link(
            r#"{"format_version": 1, "name": "w", "nodes": 3"#
        ));
        assert!(!is_node_link(r#"{"name": "w", "tensors": [], "ops": []}"#));
    }

    #[test]
    fn bad_fields_are_named() {
        let bad = CHAIN.replace("\"cost_ram\": 20", "\"cost_ram\": -1");
        let message = from_node_link(&bad, "b.json").unwrap_err().to_string();
        assert!(
            message.contains("nodes[1]") && message.contains("cost_ram -1 must be"),
            "{message}"
        );
        // Numbers are said as they were likely written.
        for (from, to, says) in [
            ("\"cost_cpu\": 2.0", "\"cost_cpu\": -1", "cost_cpu -1 must"),
            (
                "\"cost_cpu\": 2.0",
                "\"cost_cpu\": -0.5",
                "cost_cpu -0.5 must",
            ),
            ("\"cost_ram\": 20", "\"cost_ram\": 0", "cost_ram 0 must"),
            (
                "\"cost_ram\": 20",
                "\"cost_ram\": 1e300",
                "cost_ram 1e300 must",
            ),
        ] {
            let message = from_node_link(&CHAIN.replace(from, to), "n.json")
                .unwrap_err()
                .to_string();
            assert!(message.contains(says), "{message}");
        }
        let fractional = CHAIN.replace("\"cost_ram\": 20", "\"cost_ram\": 20.5");
        let message = from_node_link(&fractional, "f.json")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("nodes[1]") && message.contains("cost_ram 20.5 is not a whole"),
            "{message}"
        );
        // A whole number written as a float is bytes all the same.
        let float = CHAIN.replace("\"cost_ram\": 20", "\"cost_ram\": 2.0e1");
        assert_eq!(
            from_node_link(&float, "f.json").unwrap().tensors[1].bytes,
            20
        );
        let undirected = CHAIN.replace("\"directed\": true", "\"directed\": false");
        let message = from_node_link(&undirected, "u.json")
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("u.json: field directed") && message.contains("false"),
            "{message}"
        );
        for blank in ["", "  ", "a\\nb"] {
            let named = CHAIN.replace("\"id\": 1,", &format!("\"id\": \"{blank}\","));
            let message = from_node_link(&named, "e.json").unwrap_err().to_string();
            assert!(
                message.contains("nodes[1]") && message.contains("names no node"),
                "{message}"
            );
        }
        let missing = CHAIN.replace("\"cost_cpu\": 2.0, ", "");
        let message = from_node_link(&missing, "m.json").unwrap_err().to_string();
        assert!(
            message.contains("m.json") && message.contains("cost_cpu"),
            "{message}"
        );
    }
}

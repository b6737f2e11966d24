"""How long the longest rows of a graph's blocks are, partition count by
partition count: the critical path of a gather that gives each output
element one thread, which then walks its row's edges one after another.

    fateplan generate --graph SPEC --out DIR
    python benches/hub_tails.py DIR [--partitions 1 2 4 8]
        [--times T1 T2 ... --kernels K]

For each partition count P it splits the vertices into P equal ranges as
`fateplan train --partitions P` does, and prints, as one JSON line, the
sum over the P x P blocks of each block's longest destination row (in
edges, self-loops left out): a forward aggregation's kernels one after
another last at least that many dependent gathers per thread. Also the
graph's largest in-degree, the edges per block row on average, the share
of rows without edges, and the share of (row, block) pairs that hold
edges, without self-loops and with one on every row (as GCN's and GAT's
blocks hold them): a kernel that starts a thread for every row of a
block idles on the rest.
With `--times` (a measured time per partition count, in seconds, of `K`
aggregations an iteration), it fits time = other + K x seconds per edge
x the longest rows summed by least squares and prints the fit and its
largest residual. Needs numpy.
"""
import argparse
import json
import os

import numpy as np


def ranges(nodes, partitions):
    """Partition p's first vertex for every p, then `nodes` (the split of
    planner/src/blocks.rs, `partition_range`)."""
    q, r = divmod(nodes, partitions)
    return np.array([p * q + min(p, r) for p in range(partitions)] + [nodes])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("graph", help="a folder of PyG-named .npy files")
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--times", type=float, nargs="+", help="seconds per partition count")
    parser.add_argument("--kernels", type=int, default=1, help="aggregations an iteration")
    args = parser.parse_args()
    if args.times and len(args.times) != len(args.partitions):
        parser.error(
            f"--times gives {len(args.times)} values for {len(args.partitions)} partition counts"
        )
    sums = []
    edge_index = np.load(os.path.join(args.graph, "edge_index.npy"), mmap_mode="r")
    src = np.asarray(edge_index[0], dtype=np.int64)
    dst = np.asarray(edge_index[1], dtype=np.int64)
    nodes = len(np.load(os.path.join(args.graph, "y.npy"), mmap_mode="r"))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    degree = np.bincount(dst, minlength=nodes)
    for partitions in args.partitions:
        starts = ranges(nodes, partitions)
        src_part = np.searchsorted(starts, src, side="right") - 1
        # Each destination row's edges from each source partition.
        counts = np.bincount(dst * partitions + src_part, minlength=nodes * partitions)
        counts = counts.reshape(nodes, partitions)
        # Each row's self-loop lands in its own partition's block.
        own = np.zeros_like(counts, dtype=bool)
        own[np.arange(nodes), np.searchsorted(starts, np.arange(nodes), side="right") - 1] = True
        longest = 0
        for p in range(partitions):
            rows = counts[starts[p] : starts[p + 1]]
            if len(rows):
                longest += int(rows.max(axis=0).sum())
        sums.append(longest)
        print(
            json.dumps(
                {
                    "partitions": partitions,
                    "blocks": partitions * partitions,
                    "longest_rows_summed": longest,
                    "largest_in_degree": int(degree.max()),
                    "edges_per_block_row": round(len(src) / (nodes * partitions), 2),
                    "rows_without_edges": round(float((degree == 0).mean()), 3),
                    "pairs_with_edges": round(float((counts > 0).mean()), 3),
                    "pairs_with_edges_and_self_loops": round(
                        float(((counts > 0) | own).mean()), 3
                    ),
                }
            ),
            flush=True,
        )
    if args.times:
        a = np.vstack([np.ones(len(sums)), args.kernels * np.array(sums, dtype=float)]).T
        (other, per_edge), *_ = np.linalg.lstsq(a, np.array(args.times), rcond=None)
        residual = float(np.abs(a @ [other, per_edge] - args.times).max())
        print(
            json.dumps(
                {
                    "other_s": round(float(other), 4),
                    "ns_per_edge": round(float(per_edge) * 1e9, 1),
                    "largest_residual_s": round(residual, 4),
                }
            )
        )


if __name__ == "__main__":
    main()

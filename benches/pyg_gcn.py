"""PyTorch Geometric's full-graph GCN on a folder of PyG-named .npy files,
timed the way `fateplan train` times its iterations, for a side-by-side
comparison on the same graph, machine and thread count.

    python benches/pyg_gcn.py --graph DIR --layers 2 --hidden 16 --epochs 200 --threads 2
    python benches/pyg_gcn.py --graph DIR --layers 3 --hidden 256 --epochs 10 --device cuda

On a GPU each epoch ends with a synchronisation, so the time is the GPU's.

Prints one JSON line: mean epoch seconds (the first epoch excluded), and
the final train/val/test accuracy.
"""
import argparse
import json
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
import torch_geometric
from torch_geometric.nn import GCNConv, SAGEConv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--model", default="gcn", choices=["gcn", "sage"])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--dropout", type=float, default=0.5)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--raw-features", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--sparse", action="store_true",
                    help="pass the adjacency as a sparse CSR matrix (SpMM) instead of edge_index "
                         "(a gather of every edge's message, E x width values)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    load = lambda name: np.load(f"{args.graph}/{name}.npy")
    x = torch.from_numpy(load("x").astype(np.float32))
    if not args.raw_features and bool((x >= 0).all()):
        # Rows normalised to sum 1, as fateplan train does; it keeps signed
        # features (and --raw-features) as they are.
        sums = x.sum(dim=1, keepdim=True)
        x = torch.where(sums > 0, x / sums.clamp(min=1e-30), x)
    y = torch.from_numpy(load("y").astype(np.int64)).reshape(-1)
    edge_index = torch.from_numpy(load("edge_index").astype(np.int64))
    masks = {k: torch.from_numpy(load(f"{k}_mask").astype(bool)) for k in ("train", "val", "test")}
    classes = int(y.max()) + 1
    device = torch.device(args.device)
    x, y, edge_index = x.to(device), y.to(device), edge_index.to(device)
    masks = {k: m.to(device) for k, m in masks.items()}
    edges = int(edge_index.shape[1])
    if args.sparse:
        from torch_geometric.utils import to_torch_csr_tensor
        # adj_t[i, j] = the number of edges j -> i: PyG's layout for SpMM.
        # Weights of one per edge, so that duplicate edges add up as they
        # do in edge_index's message passing (and in fateplan) instead of
        # being merged into one.
        ones = torch.ones(edges, device=device)
        edge_index = to_torch_csr_tensor(edge_index.flip(0), ones, size=(x.shape[0], x.shape[0]))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    conv = (lambda i, o: GCNConv(i, o, cached=True)) if args.model == "gcn" else SAGEConv
    dims = [x.shape[1]] + [args.hidden] * (args.layers - 1) + [classes]
    convs = torch.nn.ModuleList(conv(dims[k], dims[k + 1]) for k in range(args.layers)).to(device)

    def forward(training):
        h = F.dropout(x, args.dropout, training)
        for k, c in enumerate(convs):
            h = c(h, edge_index)
            if k + 1 < len(convs):
                h = F.dropout(F.relu(h), args.dropout, training)
        return h

    groups = [{"params": convs[0].parameters(), "weight_decay": args.weight_decay}]
    groups += [{"params": c.parameters(), "weight_decay": 0.0} for c in convs[1:]]
    opt = torch.optim.Adam(groups, lr=args.lr)
    seconds = []
    for _ in range(args.epochs):
        start = time.perf_counter()
        opt.zero_grad()
        out = forward(True)
        loss = F.cross_entropy(out[masks["train"]], y[masks["train"]])
        loss.backward()
        opt.step()
        sync()
        seconds.append(time.perf_counter() - start)
    with torch.no_grad():
        pred = forward(False).argmax(dim=1)
    acc = {k: float((pred[m] == y[m]).float().mean()) for k, m in masks.items()}
    timed = seconds[1:] if len(seconds) > 1 else seconds
    print(json.dumps({
        "system": "pyg", "torch": torch.__version__, "threads": args.threads, "device": args.device,
        "sparse": args.sparse, "edges": edges,
        "adjacency_nnz": int(edge_index._nnz()) if args.sparse else edges,
        "torch_geometric": torch_geometric.__version__,
        "peak_device_bytes": torch.cuda.max_memory_allocated() if device.type == "cuda" else None,
        "epoch_s": statistics.mean(timed), "final_loss": float(loss),
        "train_accuracy": acc["train"], "val_accuracy": acc["val"], "test_accuracy": acc["test"],
    }))


if __name__ == "__main__":
    main()

"""PyTorch Geometric's GAT (its Cora example's model) on a folder of
PyG-named .npy files, timed the way `fateplan train` times its
iterations, for a side-by-side comparison on the same graph, machine and
thread count.

    python benches/pyg_gat.py --graph DIR --hidden 64 --heads 8 --dropout 0.6 \
        --lr 0.005 --epochs 200 --threads 2

`--hidden` is the hidden layer's total width, as `fateplan train --hidden`
(each of the `--heads` heads has hidden / heads features). Weight decay
applies to the first layer only unless `--weight-decay-all-layers`, as in
`fateplan train` (PyG's example decays every layer).

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
from torch_geometric.nn import GATConv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--dropout", type=float, default=0.6)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--weight-decay-all-layers", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--raw-features", action="store_true")
    args = ap.parse_args()
    if args.hidden % args.heads != 0:
        ap.error(f"--hidden {args.hidden} is not divisible by --heads {args.heads}")
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

    p = args.dropout
    per_head = args.hidden // args.heads
    convs = torch.nn.ModuleList()
    width = x.shape[1]
    for _ in range(args.layers - 1):
        convs.append(GATConv(width, per_head, heads=args.heads, dropout=p))
        width = args.hidden
    convs.append(GATConv(width, classes, heads=1, concat=False, dropout=p))

    def forward(training):
        h = x
        for k, c in enumerate(convs):
            h = F.dropout(h, p, training)
            h = c(h, edge_index)
            if k + 1 < len(convs):
                h = F.elu(h)
        return h

    decay_rest = args.weight_decay if args.weight_decay_all_layers else 0.0
    groups = [{"params": convs[0].parameters(), "weight_decay": args.weight_decay}]
    groups += [{"params": c.parameters(), "weight_decay": decay_rest} for c in convs[1:]]
    opt = torch.optim.Adam(groups, lr=args.lr)
    seconds = []
    for c in convs:
        c.train()
    for _ in range(args.epochs):
        start = time.perf_counter()
        opt.zero_grad()
        out = forward(True)
        loss = F.cross_entropy(out[masks["train"]], y[masks["train"]])
        loss.backward()
        opt.step()
        seconds.append(time.perf_counter() - start)
    for c in convs:
        c.eval()
    with torch.no_grad():
        pred = forward(False).argmax(dim=1)
    acc = {k: float((pred[m] == y[m]).float().mean()) for k, m in masks.items()}
    timed = seconds[1:] if len(seconds) > 1 else seconds
    print(json.dumps({
        "system": "pyg", "model": "gat", "torch": torch.__version__, "threads": args.threads,
        "epoch_s": statistics.mean(timed), "final_loss": float(loss),
        "train_accuracy": acc["train"], "val_accuracy": acc["val"], "test_accuracy": acc["test"],
    }))


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Training benches of the CPU backend, printed as a table:
#   1. GCN epoch time on an R-MAT graph (Graph500 parameters, edge factor 16,
#      128 features) at 1 and 2 threads, everything retained;
#   2. the same under a device budget of 25% of the retain-all peak (dp);
#   3. PyTorch Geometric's GCN on the same graphs and threads, when
#      PYG_PYTHON names a Python with torch and torch_geometric (the script
#      benches/pyg_setup.sh makes one), and on Cora when it is found.
# SCALE (default 20: 1M nodes, 16M edges), EPOCHS (default 3), HIDDEN
# (default 128) and PARTITIONS (default 16) change the sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${SCALE:-20}
EPOCHS=${EPOCHS:-3}
HIDDEN=${HIDDEN:-128}
PARTITIONS=${PARTITIONS:-16}
SPEC="rmat:scale=$SCALE,features=128,classes=16,seed=1"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fateplan-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cargo build --release --quiet
BIN=target/release/fateplan
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }

run() { # threads, extra args...
    local threads=$1; shift
    "$BIN" train --graph "$SPEC" --hidden "$HIDDEN" --epochs "$EPOCHS" --partitions "$PARTITIONS" \
        --threads "$threads" --json "$@"
}
echo "graph $SPEC, GCN 2 layers, hidden $HIDDEN, $EPOCHS epochs (mean of all but the first)"
for threads in 1 2; do
    retain=$(run "$threads" --policy retain-all | field iteration_s)
    echo "fateplan retain-all      threads $threads  epoch ${retain} s"
done
budget=$(run 2 --policy dp --hbm-budget 25% --spill-dir "$WORK/spill" | field iteration_s)
echo "fateplan dp at 25% hbm   threads 2  epoch ${budget} s  (ratio to retain-all at 2 threads: $(python3 -c "print(round($budget/$retain, 3))"))"
if [ -n "${PYG_PYTHON:-}" ]; then
    "$BIN" generate --graph "$SPEC" --out "$WORK/rmat" > /dev/null
    for threads in 1 2; do
        pyg=$("$PYG_PYTHON" benches/pyg_gcn.py --graph "$WORK/rmat" --hidden "$HIDDEN" --epochs "$EPOCHS" --threads "$threads" | field epoch_s)
        echo "pyg GCNConv(cached)      threads $threads  epoch ${pyg} s"
    done
    CORA=${FATEPLAN_DATA:-../shared/data}/cora
    if [ -d "$CORA" ]; then
        for threads in 1 2; do
            ours=$("$BIN" train --graph "$CORA" --epochs 200 --threads "$threads" --partitions 1 --json --policy retain-all | field iteration_s)
            pyg=$("$PYG_PYTHON" benches/pyg_gcn.py --graph "$CORA" --epochs 200 --threads "$threads" | field epoch_s)
            echo "cora GCN 2x16 threads $threads: fateplan ${ours} s, pyg ${pyg} s per epoch"
        done
    fi
else
    echo "PyG comparison skipped: set PYG_PYTHON (benches/pyg_setup.sh prints how)"
fi

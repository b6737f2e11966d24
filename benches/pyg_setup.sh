#!/usr/bin/env bash
# Installs PyTorch and PyTorch Geometric into a virtual environment for
# benches/train.sh's comparison, and prints the PYG_PYTHON to use.
set -euo pipefail
VENV=${1:-.pyg-venv}
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet torch torch_geometric numpy
echo "export PYG_PYTHON=$VENV/bin/python"

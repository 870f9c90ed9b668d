#!/usr/bin/env bash
# The Python the benchmarks' exports use (packages/ort-ep/bench/export-models.py: BERT-base, GPT-2
# small, ResNet-50 with random weights): torch, torchvision (ResNet-50), transformers and onnx from PyPI, pinned, in a
# project-local virtual environment (.mlx/bench-venv), never system-wide. Prints the python path.
#   bash tools/install-bench-python.sh [--print-python]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.mlx/bench-venv"
PY="$VENV/bin/python"
if [[ ${1:-} == --print-python ]]; then echo "$PY"; exit 0; fi
STAMP="$VENV/.installed-3"
if [[ ! -f $STAMP ]]; then
  python3 -m venv "$VENV"
  "$PY" -m pip install --quiet --disable-pip-version-check torch==2.9.1 torchvision==0.24.1 transformers==4.46.3 onnx==1.19.1 numpy
  touch "$STAMP"
fi
echo "$PY"

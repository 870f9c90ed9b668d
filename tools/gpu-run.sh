#!/usr/bin/env bash
# Runs the GPU benchmark on a CUDA machine from the folder tools/gpu-bundle.sh made (copied there
# as DIR, with the parts of .gpu-parts/ in DIR/parts): unpacks Node and MLX's CUDA build, links the
# machine's NVIDIA libraries (those of its torch) where libmlx.so's RPATH looks, exports the large
# models with torch, times torch CUDA eager and onnxruntime CPU (gpu_baselines.py), then the mlx
# provider (bench.mjs: shared models, node cases, transfers, large models). Results go to OUT.
#   bash DIR/run.sh OUT [steps: baselines,mlx] [bench.mjs --only list]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:?usage: run.sh OUT [steps] [only]}"
STEPS="${2:-baselines,mlx}"
ONLY="${3:-models,transfers,speed}"
mkdir -p "$OUT"
cd "$HERE"
[[ -x node ]] || { xz -dc parts/node.xz > node && chmod +x node; }
if [[ ! -f mlxcuda/mlx/lib/libmlx.so ]]; then
  mkdir -p mlxcuda
  cat parts/mlx-cuda.tar.xz.* | xz -dc | tar -C mlxcuda -xf -
fi
NV="$(python3 -c 'import nvidia, os; print(os.path.realpath(list(nvidia.__path__)[0]))')"
ln -sfn "$NV" mlxcuda/nvidia
export MLX_LIBMLX="$HERE/mlxcuda/mlx/lib/libmlx.so" MLX_C_LIBRARY="$HERE/libmlxc.so"
export MLX_ORT_CACHE_DIR="$HERE/cache" MLX_PTX_CACHE_DIR="$HERE/cache/ptx"
if [[ $STEPS == *baselines* ]]; then
  python3 gpu_baselines.py "$HERE/exports" "$OUT/baselines.json" --only bert-base,bert-base-b8,gpt2-small,resnet50,matmul4096 2>&1 | grep -v -i warn | tee "$OUT/baselines.log"
fi
if [[ $STEPS == *mlx* ]]; then
  ./node bench.mjs --device gpu --models models --cases cases --exports exports --only "$ONLY" --out "$OUT/mlx-gpu-$(echo "$ONLY" | tr ',' '-').json" 2>&1 | tee "$OUT/mlx-gpu.log"
fi

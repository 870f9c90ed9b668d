#!/usr/bin/env bash
# Packs what the GPU benchmark (packages/ort-ep/bench/gpu.ts) needs on a CUDA machine that has
# python3 with torch and onnxruntime but no Node and no package registry:
#   .gpu/         the benchmark bundled into one file (esbuild), koffi's linux-x64 binary, the
#                 project's libmlxc, the Python references, the shared models, a sample of ONNX
#                 node cases, and run.sh, which sets it all up there and runs it;
#   .gpu-parts/   node.xz (the Node binary) and mlx-cuda.tar.xz.N (MLX's CUDA build, split in
#                 parts small enough to travel with separate commands).
# On the machine: cat the parts into .gpu/, then `bash .gpu/run.sh OUT_DIR` (see run.sh).
#   tools/gpu-bundle.sh [--cases N]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CASES=320
# Where the CUDA wheel is kept (downloaded once): MLX_WHEEL_DIR, else .mlx/wheels.
WHEELS="${MLX_WHEEL_DIR:-.mlx/wheels}"
[[ "${1:-}" == "--cases" ]] && CASES=$2
log() { printf '[gpu-bundle] %s\n' "$*" >&2; }

tools/dev setup >/dev/null
# The CUDA wheel alone (its NVIDIA libraries come from the machine's torch): no NVIDIA downloads.
CUDA_WHEEL=$(node -e "const c=require('./packages/sys/mlx-wheel.json').cuda; console.log(c.name.replace(/-/g,'_')+'-'+c.version)")
whl=$(ls "$WHEELS"/${CUDA_WHEEL}-*.whl 2>/dev/null | head -1 || true)
if [[ -z $whl ]]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$WHEELS" "$(node -p "const c=require('./packages/sys/mlx-wheel.json').cuda; c.name+'=='+c.version")"
  whl=$(ls "$WHEELS"/${CUDA_WHEEL}-*.whl | head -1)
fi

rm -rf .gpu && mkdir -p .gpu/node_modules .gpu-parts
log 'bundling bench/gpu.ts'
node_modules/.bin/esbuild packages/ort-ep/bench/gpu.ts --bundle --platform=node --target=node20 --format=esm --conditions=source \
  --external:koffi --external:onnxruntime-node --external:onnxruntime-web --outfile=.gpu/bench.mjs \
  --banner:js="import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" --log-level=warning
# The decode benchmark: its driver and its worker, with onnxruntime-node (JavaScript and binding
# here; its 45 MB libonnxruntime in a part of its own) to compare against on the machine's CPU.
for f in decode decode-worker; do
  node_modules/.bin/esbuild packages/ort-ep/bench/$f.ts --bundle --platform=node --target=node20 --format=esm --conditions=source \
    --external:koffi --external:onnxruntime-node --external:onnxruntime-common --external:onnxruntime-web --outfile=.gpu/$f.mjs \
    --banner:js="import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" --log-level=warning
done
# A package's folder: the nearest one above its entry point whose package.json names it.
pkgdir() { node -e "const p=require('path'),fs=require('fs');let d=p.dirname(require.resolve(process.argv[1],{paths:[process.argv[2]]}));const named=(x)=>{try{return JSON.parse(fs.readFileSync(p.join(x,'package.json'),'utf8')).name===process.argv[1]}catch{return false}};while(!named(d))d=p.dirname(d);console.log(d)" "$1" "$2"; }
ORTN=$(pkgdir onnxruntime-node packages/ort-ep)
ORTC=$(pkgdir onnxruntime-common "$ORTN")
mkdir -p .gpu/node_modules/onnxruntime-node/bin/napi-v6/linux/x64 .gpu/node_modules/onnxruntime-common
cp -r "$ORTN"/package.json "$ORTN"/dist .gpu/node_modules/onnxruntime-node/
cp "$ORTN"/bin/napi-v6/linux/x64/onnxruntime_binding.node .gpu/node_modules/onnxruntime-node/bin/napi-v6/linux/x64/
cp -r "$ORTC"/package.json "$ORTC"/dist .gpu/node_modules/onnxruntime-common/
if [[ ! -f .gpu-parts/ort.so.xz ]]; then xz -T2 -6 -c "$ORTN"/bin/napi-v6/linux/x64/libonnxruntime.so.1 > .gpu-parts/ort.so.xz; fi
KOFFI=$(node -p "require('path').dirname(require.resolve('koffi/package.json', { paths: ['packages/sys'] }))")
mkdir -p .gpu/node_modules/koffi/build/koffi
cp "$KOFFI"/package.json "$KOFFI"/index.js "$KOFFI"/indirect.js .gpu/node_modules/koffi/
cp -r "$KOFFI"/build/koffi/linux_x64 .gpu/node_modules/koffi/build/koffi/
cp packages/sys/native/build/libmlxc.so .gpu/
cp packages/ort-ep/bench/export-models.py packages/ort-ep/bench/gpu_baselines.py .gpu/
cp -r ../shared/models .gpu/models
mkdir -p .gpu/cases
# Every n-th case of the passing list, so the sample covers every op family.
total=$(grep -vc '^#' packages/ort-ep/test/conformance/passing.txt)
step=$(( total / CASES )); [[ $step -lt 1 ]] && step=1
grep -v '^#' packages/ort-ep/test/conformance/passing.txt | awk -v s="$step" 'NR % s == 0' | while read -r c; do
  cp -r "../shared/onnx-node-tests/v1.22.0/$c" .gpu/cases/
done
cp tools/gpu-run.sh .gpu/run.sh
log "cases: $(ls .gpu/cases | wc -l); bundle: $(du -sh .gpu | cut -f1)"

if [[ ! -f .gpu-parts/node.xz ]]; then xz -T2 -6 -c "$(command -v node)" > .gpu-parts/node.xz; fi
if [[ ! -f .gpu-parts/mlx-cuda.tar.xz.0 ]]; then
  tmp=$(mktemp -d)
  python3 -c "import zipfile,sys; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$whl" "$tmp"
  tar -C "$tmp" -cf - mlx mlx_cuda_13.libs | xz -T2 -6 | split -b 36M -d -a 1 - .gpu-parts/mlx-cuda.tar.xz.
  rm -rf "$tmp"
fi
ls -la .gpu-parts >&2

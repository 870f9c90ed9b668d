#!/usr/bin/env bash
# Runs the GPU benchmark (packages/ort-ep/bench/gpu.ts) on a CUDA machine from the folder that
# tools/gpu-bundle.sh made (copied there as DIR, with the parts of .gpu-parts/ in DIR/parts):
# unpacks Node and MLX's CUDA build, links the machine's NVIDIA libraries (those of its torch)
# where libmlx.so's RPATH looks, and runs the steps asked for. Results go to OUT.
#   bash DIR/run.sh OUT STEP...
# Steps:
#   transfers  MLX's cost per operation, then feeds and results over the bus, every MLXC_TRANSFER way, 1 MiB to 1 GiB
#   check      the shared models (compiled and eager) and the sample of ONNX node cases, in SHARDS
#              parallel processes (default 12; NVRTC compiling each case's kernels is the slow
#              part, and it runs on the CPU), each stopped after CASE_SECONDS (default 480)
#   decode     the decode benchmark (bench/decode.ts): a ~110M-parameter Llama-shaped model, mlx on the
#              GPU against onnxruntime-node on the machine's CPU (BENCH_THREADS, default all cores)
#   decode-profile  the mlx decode worker alone under V8's profiler
#   decode-env the mlx decode worker at context 1024 under each variant of MLX settings in DECODE_ENVS
#   speed      gpu_baselines.py (exports with the machine's torch, torch CUDA eager and onnxruntime
#              CPU), then the mlx provider on the same models; the table, JSON and SVG chart
# MLX's kernel cache (MLX_PTX_CACHE_DIR) and the driver's (CUDA_CACHE_PATH) live in DIR/cache, so
# later steps and later calls on the same machine reuse what earlier ones compiled.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:?usage: run.sh OUT STEP...}"
shift
mkdir -p "$OUT"
cd "$HERE"
[[ -x node ]] || { xz -dc parts/node.xz > node && chmod +x node; }
if [[ ! -f mlxcuda/mlx/lib/libmlx.so ]]; then
  mkdir -p mlxcuda
  cat parts/mlx-cuda.tar.xz.* | xz -dc | tar -C mlxcuda -xf - || exit 1
fi
NV="$(python3 -c 'import nvidia, os; print(os.path.realpath(list(nvidia.__path__)[0]))')"
ln -sfn "$NV" mlxcuda/nvidia
export MLX_LIBMLX="$HERE/mlxcuda/mlx/lib/libmlx.so" MLX_C_LIBRARY="$HERE/libmlxc.so"
export MLX_ORT_CACHE_DIR="$HERE/cache" MLX_PTX_CACHE_DIR="$HERE/cache/ptx" CUDA_CACHE_PATH="$HERE/cache/nv" CUDA_CACHE_MAXSIZE=4294967296
# The decode worker loads onnxruntime-node even for mlx alone: its library travels compressed.
ort_library() {
  local lib=node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1
  [[ -f $lib ]] || xz -dc parts/ort.so.xz > "$lib"
}
cache_size() { echo "kernel caches: MLX's PTX $(du -sh cache/ptx 2>/dev/null | cut -f1) in $(find cache/ptx -type f 2>/dev/null | wc -l) files; the driver's $(du -sh cache/nv 2>/dev/null | cut -f1)"; }

for step in "$@"; do
  case $step in
    transfers)
      ./node bench.mjs --device gpu --only overhead,transfers --out "$OUT/transfers.json" 2>&1 | tee "$OUT/transfers.log" ;;
    check)
      shards=${SHARDS:-12}
      mkdir -p shards && rm -f shards/*
      timeout "${CASE_SECONDS:-480}" ./node bench.mjs --device gpu --models models --only models --out "$OUT/models.json" >"$OUT/models.log" 2>&1 &
      for i in $(seq 0 $((shards - 1))); do
        timeout "${CASE_SECONDS:-480}" ./node bench.mjs --device gpu --cases cases --only cases --shard "$i/$shards" \
          --out "shards/cases-$i.json" >"shards/cases-$i.log" 2>&1 &
      done
      wait
      cat shards/cases-*.log >"$OUT/cases.log"
      ./node -e '
        const fs = require("fs");
        const all = { total: 0, pass: 0, results: {} };
        for (const f of fs.readdirSync("shards").filter((f) => f.endsWith(".json"))) {
          const r = JSON.parse(fs.readFileSync("shards/" + f, "utf8")).nodeCases;
          if (!r) continue;
          Object.assign(all.results, r.results);
        }
        const names = fs.readdirSync("cases");
        all.total = names.length;
        all.done = Object.keys(all.results).length;
        all.pass = Object.values(all.results).filter((v) => v === "pass").length;
        fs.writeFileSync(process.argv[1], JSON.stringify(all, null, 2));
        console.log(`node cases: ${all.pass} pass of ${all.done} run (${all.total} in the sample)`);
        for (const [k, v] of Object.entries(all.results)) if (v !== "pass") console.log(`  ${k}: ${v.slice(0, 240)}`);
      ' "$OUT/cases.json" | tee -a "$OUT/cases.log"
      grep -E "pass|fail|error" "$OUT/models.log" | head -20
      cache_size | tee -a "$OUT/cases.log" ;;
    decode)
      ort_library
      BENCH_THREADS=${BENCH_THREADS:-$(nproc)} ./node decode.mjs --device gpu --size "${DECODE_SIZE:-100m}" \
        --rounds "${DECODE_ROUNDS:-2}" --out "$OUT" 2>&1 | grep -v -i warn | tee "$OUT/decode.log" ;;
    decode-profile)
      # One mlx worker at context 1024 under V8's sampling profiler (the .cpuprofile comes back).
      mkdir -p "$OUT/prof"
      ort_library
      ./node --cpu-prof --cpu-prof-dir="$OUT/prof" decode-worker.mjs --engine mlx --device gpu --size "${DECODE_SIZE:-100m}" \
        --contexts 1024 --tokens 64 --prefill 128 2>&1 | tail -3 ;;
    decode-env)
      # mlx alone at context 1024 under each of MLX's CUDA settings in DECODE_ENVS (space-separated
      # NAME=VALUE lists, commas between settings of one variant; "-" is MLX's defaults).
      ort_library
      for v in ${DECODE_ENVS:--}; do
        env_args=(); [[ $v == - ]] || IFS=, read -ra env_args <<<"$v"
        echo "== $v" | tee -a "$OUT/decode-env.log"
        env "${env_args[@]}" ./node decode-worker.mjs --engine mlx --device gpu --size "${DECODE_SIZE:-100m}" \
          --contexts 1024 --tokens 48 --prefill 128 2>&1 | grep -v -i warn | tail -2 | tee -a "$OUT/decode-env.log"
      done ;;
    speed)
      ./node bench.mjs --device gpu --exports exports --only baselines,speed --out "$OUT/speed.json" --chart "$OUT/gpu.svg" 2>&1 |
        grep -v -i warn | tee "$OUT/speed.log"
      cache_size | tee -a "$OUT/speed.log" ;;
    *) echo "unknown step $step (transfers, check, decode, decode-profile, decode-env, speed)" >&2; exit 2 ;;
  esac
done

// The installed packages (@mlx/ort-ep + @mlx/sys-linux-x64-cuda13) on a CUDA machine: which
// libraries load, and models in the shared layout (models/<name>/model.onnx + test_data_set_0)
// through onnxruntime-common's ['mlx'] on the GPU against onnxruntime's reference outputs.
// Run from a folder where the tarballs and onnxruntime-common are installed, with a models/ folder:
//   MLX_BACKEND=cuda [MLX_CUDA_LIBRARY_PATH=<site-packages>/nvidia] node cuda-package-check.mjs
// DEVICE=cpu runs it on the CPU instead. Exits 1 when a model is outside the tolerance.
import * as ort from 'onnxruntime-common';
import * as ep from '@mlx/ort-ep';
import * as internal from '@mlx/ort-ep/internal';
import { readdirSync, readFileSync } from 'node:fs';

const results = [];
for (const m of readdirSync('models')) {
  const dir = `models/${m}`;
  const data = internal.readTestCase(dir).datasets[0];
  const s = await ort.InferenceSession.create(`${dir}/model.onnx`, {
    executionProviders: [ep.mlx({ device: process.env.DEVICE ?? 'gpu' })],
  });
  const feeds = {};
  data.inputs.forEach(
    (t, i) =>
      (feeds[s.inputNames[i]] = new ort.Tensor(
        { 1: 'float32', 6: 'int32', 7: 'int64', 9: 'bool', 10: 'float16' }[t.dtype],
        t.data,
        t.dims,
      )),
  );
  const times = [];
  let r;
  for (let k = 0; k < 20; k++) {
    const t0 = performance.now();
    r = await s.run(feeds);
    times.push(performance.now() - t0);
  }
  let worst = 0;
  data.outputs.forEach((want, i) => {
    const got = r[s.outputNames[i]].data;
    for (let j = 0; j < want.data.length; j++) {
      const w = Number(want.data[j]),
        g = Number(got[j]);
      worst = Math.max(worst, Math.abs(w - g) / (1e-4 + 1e-3 * Math.abs(w)));
    }
  });
  times.sort((a, b) => a - b);
  results.push({ model: m, worstRelToTolerance: worst, pass: worst <= 1, medianMs: times[10] });
  await s.release();
}
const maps = readFileSync('/proc/self/maps', 'utf8');
const libs = [
  ...new Set(
    maps
      .split('\n')
      .map((l) => l.split(/\s+/)[5])
      .filter((p) => p && /libmlx|libcudart|libcublas\.|libnvrtc/.test(p)),
  ),
];
console.log(JSON.stringify({ results, libs, env: { MLX_BACKEND: process.env.MLX_BACKEND } }, null, 1));
if (results.some((r) => !r.pass)) process.exit(1);

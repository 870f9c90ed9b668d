// The convolution forms ops/conv.ts chooses between, on the CPU, at mobilenet-like shapes: MLX's
// conv_general (channels-last, with the NCHW <-> NHWC transposes around it) against the native
// depthwise kernel (AVX-512/AVX2 where the CPU has them; alone and with a fused HardSwish) and,
// for 1x1, a matmul over the flattened spatial axes (its bias by addmm or by the native conv
// epilogue) against the native pointwise kernel that ops/conv.ts uses; and the 3x3 stem as
// conv_general against an im2col of strided slices and one matmul. Each form is timed alone,
// evaluated, median of N runs (after warm-up). Never a test.
//   tools/dev bench conv [--runs 50]
import { performance } from 'node:perf_hooks';
import * as mx from '@mlx/core';

const runs = Number(process.argv[process.argv.indexOf('--runs') + 1] || 50);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const rand = (shape: number[]) => mx.random.normal(shape, 'float32', 0, 1, null);

function time(f: () => mx.Array): number {
  const ts: number[] = [];
  for (let i = 0; i < runs + 5; i++) {
    const t = performance.now();
    mx.scope(() => mx.evaluate(f()));
    if (i >= 5) ts.push(performance.now() - t);
  }
  return median(ts);
}

const nhwc = (x: mx.Array) => mx.transpose(x, [0, 2, 3, 1]);
const nchw = (x: mx.Array) => mx.transpose(x, [0, 3, 1, 2]);
const mlxConv = (x: mx.Array, w: mx.Array, s: number, p: number, g: number) =>
  nchw(mx.convGeneral(nhwc(x), nhwc(w), [s, s], [p, p], [p, p], [1, 1], [1, 1], g, false));

function im2col(x: mx.Array, w: mx.Array, s: number, p: number): mx.Array {
  const [n, c, h, wd] = x.shape;
  const [o, , kh, kw] = w.shape;
  const oh = Math.floor((h + 2 * p - kh) / s) + 1;
  const ow = Math.floor((wd + 2 * p - kw) / s) + 1;
  const xp = mx.pad(x, [2, 3], [p, p], [p, p], 0, 'constant');
  const taps: mx.Array[] = [];
  for (let ky = 0; ky < kh; ky++)
    for (let kx = 0; kx < kw; kx++)
      taps.push(mx.slice(xp, [0, 0, ky, kx], [n, c, ky + (oh - 1) * s + 1, kx + (ow - 1) * s + 1], [1, 1, s, s]));
  const cols = mx.reshape(mx.stack(taps, 2), [n, c * kh * kw, oh * ow]);
  return mx.reshape(mx.matmul(mx.reshape(w, [o, -1]), cols), [n, o, oh, ow]);
}

const rows: [string, string, number][] = [];
for (const [c, hw, s] of [
  [48, 48, 1],
  [48, 48, 2],
  [72, 24, 1],
  [120, 12, 1],
]) {
  const x = rand([1, c, hw, hw]);
  const w = rand([c, 1, 3, 3]);
  mx.evaluate(x, w);
  const shape = `depthwise 3x3 s${s}, [1, ${c}, ${hw}, ${hw}]`;
  rows.push([shape, 'MLX conv_general, groups = C', time(() => mlxConv(x, w, s, 1, c))]);
  rows.push([shape, 'native depthwise kernel', time(() => mx.ext.depthwiseConv2d(x, w, null, s, s, 1, 1, 1, 1, 1, 1))]);
  rows.push([
    shape,
    'native depthwise kernel + HardSwish in its store',
    time(() => mx.ext.depthwiseConv2dAct(x, w, null, s, s, 1, 1, 1, 1, 1, 1, -Infinity, Infinity, 2, 1 / 6, 0.5)),
  ]);
}
for (const [c, o, hw] of [
  [16, 48, 48],
  [48, 16, 48],
  [72, 24, 24],
]) {
  const x = rand([1, c, hw, hw]);
  const w = rand([o, c, 1, 1]);
  mx.evaluate(x, w);
  const shape = `1x1 ${c} -> ${o}, ${hw}x${hw}`;
  rows.push([shape, 'MLX conv_general', time(() => mlxConv(x, w, 1, 0, 1))]);
  rows.push([
    shape,
    'matmul [O, C] x [C, HW]',
    time(() => mx.reshape(mx.matmul(mx.reshape(w, [o, c]), mx.reshape(x, [c, -1])), [1, o, hw, hw])),
  ]);
  // With a bias: MLX's addmm (it first copies the broadcast bias into its output) against the
  // plain product plus the native conv epilogue (ops/conv.ts's form).
  const b = rand([o]);
  const b2 = mx.reshape(b, [o, 1]);
  const wm = mx.reshape(w, [o, c]);
  mx.evaluate(b, b2, wm);
  rows.push([shape, 'addmm(bias [O, 1], w, x)', time(() => mx.reshape(mx.addmm(b2, wm, mx.reshape(x, [c, -1]), 1, 1), [1, o, hw, hw]))]);
  rows.push([
    shape,
    'matmul + conv epilogue (bias)',
    time(() => mx.ext.convEpilogue(mx.reshape(mx.matmul(wm, mx.reshape(x, [c, -1])), [1, o, hw, hw]), b, null, -Infinity, Infinity, false)),
  ]);
  rows.push([
    shape,
    'native pointwise conv (bias in the store)',
    time(() => mx.ext.pointwiseConv(x, wm, b, null, -Infinity, Infinity, 0, 1, 0)),
  ]);
  rows.push([
    shape,
    'native pointwise conv + HardSwish',
    time(() => mx.ext.pointwiseConv(x, wm, b, null, -Infinity, Infinity, 2, 1 / 6, 0.5)),
  ]);
}
{
  const x = rand([1, 3, 96, 96]);
  const w = rand([16, 3, 3, 3]);
  mx.evaluate(x, w);
  const shape = '3x3 s2 3 -> 16, 96x96';
  rows.push([shape, 'MLX conv_general', time(() => mlxConv(x, w, 2, 1, 1))]);
  rows.push([shape, 'im2col (9 strided slices) + matmul', time(() => im2col(x, w, 2, 1))]);
}
// The layout moves around a full convolution: NCHW data through the transposes against the same
// convolution on data already channels-last (what keeping activations NHWC would save).
for (const [c, o, hw, s] of [
  [3, 16, 96, 2],
  [1, 8, 28, 1],
  [8, 16, 14, 1],
]) {
  const x = rand([1, c, hw, hw]);
  const w = rand([o, c, 3, 3]);
  const xl = mx.contiguous(nhwc(x), false);
  const wl = mx.contiguous(nhwc(w), false);
  mx.evaluate(x, w, xl, wl);
  const shape = `3x3 s${s} ${c} -> ${o}, ${hw}x${hw}`;
  rows.push([shape, 'NCHW in and out (transposes)', time(() => mlxConv(x, w, s, 1, 1))]);
  rows.push([shape, 'NHWC in and out (none)', time(() => mx.convGeneral(xl, wl, [s, s], [1, 1], [1, 1], [1, 1], [1, 1], 1, false))]);
}
console.log(`median ms of ${runs} evaluated runs, CPU`);
console.log('| shape | form | ms |\n|---|---|---|');
for (const [shape, form, ms] of rows) console.log(`| ${shape} | ${form} | ${ms.toFixed(3)} |`);

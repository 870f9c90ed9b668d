// The main job: voice activity detection with Silero VAD v5 (the model @ricky0123/vad-web ships)
// on a synthesized 8-second recording, through onnxruntime's API with executionProviders ['mlx'],
// side by side with onnxruntime-node's CPU provider on the same frames.
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import * as mx from '@mlx/core';
import type { MlxExecutionProviderOption } from '../backend.js';
import '../backend.js';

const RATE = 16000;
const FRAME = 512; // 32 ms, the frame vad-web feeds Silero v5
const SPEECH: [number, number][] = [[0.8, 2.6], [3.6, 5.0], [6.0, 7.4]];

/** A deterministic recording: voiced, formant-shaped syllables in the SPEECH spans over room noise. */
export function synthesizeRecording(seconds = 8, seed = 7): Float32Array {
  const n = Math.round(seconds * RATE);
  const out = new Float32Array(n);
  let s = seed;
  const rnd = () => ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32) * 2 - 1;
  const formants = [[700, 130], [1220, 70], [2600, 160]];
  let phase = 0;
  for (let i = 0; i < n; i++) {
    const t = i / RATE;
    let x = 0.004 * rnd();
    const span = SPEECH.find(([a, b]) => t >= a && t < b);
    if (span) {
      const local = t - span[0];
      const f0 = 120 + 30 * Math.sin(2 * Math.PI * 0.7 * local) + 10 * Math.sin(2 * Math.PI * 3 * local);
      phase += (2 * Math.PI * f0) / RATE;
      const syllable = Math.max(0, Math.sin(Math.PI * 4.5 * local)) ** 0.6;
      const edge = Math.min(1, local / 0.05, (span[1] - t) / 0.05);
      let v = 0;
      for (let h = 1; h * f0 < 4000; h++) {
        const f = h * f0;
        const gain = formants.reduce((g, [fc, bw]) => g + 1 / (1 + ((f - fc) / bw) ** 2), 0) / h ** 0.5;
        v += gain * Math.sin(h * phase);
      }
      x += 0.08 * syllable * edge * v + 0.01 * syllable * rnd();
    }
    out[i] = x;
  }
  return out;
}

function modelPath(): string {
  const require = createRequire(import.meta.url);
  try {
    return require.resolve('@ricky0123/vad-web/dist/silero_vad_v5.onnx');
  } catch {
    const p = new URL('../../node_modules/@ricky0123/vad-web/dist/silero_vad_v5.onnx', import.meta.url).pathname;
    if (existsSync(p)) return p;
    throw new Error('the demo needs the Silero VAD model of @ricky0123/vad-web (a devDependency of @mlx/ort-ep): run `tools/dev setup`');
  }
}

type Ort = typeof import('onnxruntime-node');

async function detect(ort: Ort, bytes: Uint8Array, audio: Float32Array, options: import('onnxruntime-node').InferenceSession.SessionOptions) {
  const session = await ort.InferenceSession.create(bytes, options);
  let state = new ort.Tensor('float32', new Float32Array(2 * 128), [2, 1, 128]);
  const sr = new ort.Tensor('int64', BigInt64Array.of(BigInt(RATE)), []);
  const probs: number[] = [];
  const times: number[] = [];
  for (let off = 0; off + FRAME <= audio.length; off += FRAME) {
    const input = new ort.Tensor('float32', audio.slice(off, off + FRAME), [1, FRAME]);
    const t0 = performance.now();
    const r = await session.run({ input, state, sr });
    times.push(performance.now() - t0);
    probs.push((r.output.data as Float32Array)[0]);
    state = r.stateN as typeof state;
  }
  await session.release();
  const sorted = [...times].sort((a, b) => a - b);
  return { probs, totalMs: times.reduce((a, b) => a + b, 0), medianMs: sorted[sorted.length >> 1] };
}

/** Speech segments from frame probabilities, with the hysteresis vad-web uses (0.5 on, 0.35 off). */
export function segments(probs: number[]): [number, number][] {
  const out: [number, number][] = [];
  let start = -1;
  probs.forEach((p, i) => {
    if (start < 0 && p >= 0.5) start = i;
    else if (start >= 0 && p < 0.35) {
      out.push([(start * FRAME) / RATE, (i * FRAME) / RATE]);
      start = -1;
    }
  });
  if (start >= 0) out.push([(start * FRAME) / RATE, (probs.length * FRAME) / RATE]);
  return out;
}

function timeline(probs: number[]): string {
  let s = '';
  for (let i = 0; i < probs.length; i += 2) {
    const p = Math.max(probs[i], probs[i + 1] ?? 0);
    s += p >= 0.5 ? '█' : p >= 0.35 ? '▒' : '·';
  }
  return s;
}

export async function runDemo(options: { device?: 'cpu' | 'gpu' } = {}): Promise<void> {
  const require = createRequire(import.meta.url);
  const ort = require('onnxruntime-node') as Ort;
  const path = modelPath();
  const bytes = new Uint8Array(await readFile(path));
  const audio = synthesizeRecording();
  const device = options.device ?? mx.defaultDevice().type;
  console.log(`Silero VAD v5 (${path.split('/').slice(-3).join('/')}) on ${(audio.length / RATE).toFixed(1)} s of synthesized audio, ${FRAME}-sample frames`);
  console.log(`speech was synthesized at: ${SPEECH.map(([a, b]) => `${a.toFixed(2)}-${b.toFixed(2)} s`).join(', ')}\n`);
  const mlx = await detect(ort, bytes, audio, { executionProviders: [{ name: 'mlx', device } as MlxExecutionProviderOption] });
  const cpu = await detect(ort, bytes, audio, { executionProviders: ['cpu'] });
  const diff = mlx.probs.reduce((m, p, i) => Math.max(m, Math.abs(p - cpu.probs[i])), 0);
  const fmt = (segs: [number, number][]) => segs.map(([a, b]) => `${a.toFixed(2)}-${b.toFixed(2)} s`).join(', ') || 'none';
  console.log(`time axis: one character = 64 ms`);
  console.log(`MLX (${device})        |${timeline(mlx.probs)}|`);
  console.log(`onnxruntime-node CPU |${timeline(cpu.probs)}|\n`);
  console.log(`speech detected (MLX):              ${fmt(segments(mlx.probs))}`);
  console.log(`speech detected (onnxruntime-node): ${fmt(segments(cpu.probs))}`);
  console.log(`largest difference in speech probability: ${diff.toExponential(2)} over ${mlx.probs.length} frames`);
  console.log(`time: MLX ${mlx.totalMs.toFixed(0)} ms total (median ${mlx.medianMs.toFixed(2)} ms/frame), onnxruntime-node ${cpu.totalMs.toFixed(0)} ms total (median ${cpu.medianMs.toFixed(2)} ms/frame)`);
}

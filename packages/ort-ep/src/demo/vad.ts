// The main job: voice activity detection with Silero VAD v5 (the model @ricky0123/vad-web ships)
// on a synthesized 8-second recording, through onnxruntime's API with executionProviders ['mlx'],
// side by side with onnxruntime-node's CPU provider on the same frames.
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import * as mx from '@mlx/core';
import type { MlxExecutionProviderOption } from '../backend/options.js';
import '../backend/register.js';

const RATE = 16000;
const FRAME = 512; // 32 ms, the frame vad-web feeds Silero v5
const SPEECH: [number, number][] = [
  [0.8, 2.6],
  [3.6, 5.0],
  [6.0, 7.4],
];

/**
 * A deterministic recording: in the SPEECH spans, a source-filter voice (a glottal pulse train at a
 * wandering pitch through three formant resonators, one vowel per syllable, ~4 syllables/s);
 * elsewhere, quiet room noise.
 */
export function synthesizeRecording(seconds = 8, seed = 7): Float32Array {
  const n = Math.round(seconds * RATE);
  const out = new Float32Array(n);
  let s = seed;
  const rnd = () => ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32) * 2 - 1;
  const vowels = [
    [730, 1090, 2440],
    [270, 2290, 3010],
    [530, 1840, 2480],
    [570, 840, 2410],
    [300, 870, 2240],
    [660, 1720, 2410],
  ];
  const bandwidths = [90, 110, 170];
  const state = [
    [0, 0],
    [0, 0],
    [0, 0],
  ];
  let phase = 0;
  for (let i = 0; i < n; i++) {
    const t = i / RATE;
    let x = 0.003 * rnd();
    const span = SPEECH.find(([a, b]) => t >= a && t < b);
    if (span) {
      const local = t - span[0];
      const syllable = Math.floor(local * 4.2);
      const f0 = 115 + 25 * Math.sin(2 * Math.PI * 0.6 * local) + 8 * Math.sin(2 * Math.PI * 5 * local);
      phase += f0 / RATE;
      const pulse = phase >= 1 ? 1 : 0;
      if (pulse) phase -= 1;
      const envelope = Math.max(0, Math.sin(Math.PI * ((local * 4.2) % 1))) ** 0.5 * Math.min(1, local / 0.03, (span[1] - t) / 0.03);
      const formants = vowels[(syllable * 7 + 3) % vowels.length];
      let voiced = 0;
      formants.forEach((fc, k) => {
        const r = Math.exp((-Math.PI * bandwidths[k]) / RATE);
        const v = pulse * (1 - r) + 2 * r * Math.cos((2 * Math.PI * fc) / RATE) * state[k][0] - r * r * state[k][1];
        state[k][1] = state[k][0];
        state[k][0] = v;
        voiced += v / (k + 1);
      });
      x += 0.9 * envelope * voiced + 0.004 * envelope * rnd();
    }
    out[i] = x;
  }
  return out;
}

/** The demo's install line, for a folder that lacks what it needs. */
const INSTALL = 'npm install onnxruntime-node @ricky0123/vad-web@0.0.31';

/** `specifier` resolved from this package, then from the working directory (an app that installed it). */
function resolveFrom(specifier: string): string | undefined {
  for (const base of [import.meta.url, join(process.cwd(), 'package.json')]) {
    try {
      return createRequire(base).resolve(specifier);
    } catch (e) {
      if ((e as { code?: string }).code !== 'MODULE_NOT_FOUND') throw e;
    }
  }
  return undefined;
}

function modelPath(): string {
  const found = resolveFrom('@ricky0123/vad-web/dist/silero_vad_v5.onnx');
  if (found) return found;
  // The repository's own checkout (tools/dev setup installs the devDependency).
  const p = new URL('../../node_modules/@ricky0123/vad-web/dist/silero_vad_v5.onnx', import.meta.url).pathname;
  if (existsSync(p)) return p;
  throw new Error(
    `mlx-ort demo runs the Silero VAD model that @ricky0123/vad-web ships, which is not installed here: \`${INSTALL}\` (in a checkout of the repository, \`tools/dev setup\`)`,
  );
}

function onnxruntimeNode(): Ort {
  const found = resolveFrom('onnxruntime-node');
  if (!found) throw new Error(`mlx-ort demo runs onnxruntime-node beside mlx, which is not installed here: \`${INSTALL}\``);
  return createRequire(import.meta.url)(found) as Ort;
}

type Ort = typeof import('onnxruntime-node');

async function detect(
  ort: Ort,
  bytes: Uint8Array,
  audio: Float32Array,
  options: import('onnxruntime-node').InferenceSession.SessionOptions,
) {
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
  const ort = onnxruntimeNode();
  const path = modelPath();
  const bytes = new Uint8Array(await readFile(path));
  const audio = synthesizeRecording();
  const device = options.device ?? mx.defaultDevice().type;
  console.log(
    `Silero VAD v5 (${path.split('/').slice(-3).join('/')}) on ${(audio.length / RATE).toFixed(1)} s of synthesized audio, ${FRAME}-sample frames`,
  );
  console.log(`speech was synthesized at: ${SPEECH.map(([a, b]) => `${a.toFixed(2)}-${b.toFixed(2)} s`).join(', ')}\n`);
  const mlx = await detect(ort, bytes, audio, { executionProviders: [{ name: 'mlx', device } as MlxExecutionProviderOption] });
  const cpu = await detect(ort, bytes, audio, { executionProviders: ['cpu'] });
  const diff = mlx.probs.reduce((m, p, i) => Math.max(m, Math.abs(p - cpu.probs[i])), 0);
  const fmt = (segs: [number, number][]) => segs.map(([a, b]) => `${a.toFixed(2)}-${b.toFixed(2)} s`).join(', ') || 'none';
  console.log(`time axis: one character = 64 ms; █ speech probability ≥ 0.5, ▒ ≥ 0.35`);
  const labels = [`MLX (${device})`, 'onnxruntime-node CPU'];
  const width = Math.max(...labels.map((l) => l.length));
  console.log(`${labels[0].padEnd(width)} |${timeline(mlx.probs)}|`);
  console.log(`${labels[1].padEnd(width)} |${timeline(cpu.probs)}|\n`);
  console.log(`speech detected (MLX):              ${fmt(segments(mlx.probs))}`);
  console.log(`speech detected (onnxruntime-node): ${fmt(segments(cpu.probs))}`);
  console.log(`largest difference in speech probability: ${diff.toExponential(2)} over ${mlx.probs.length} frames`);
  console.log(
    `time: MLX ${mlx.totalMs.toFixed(0)} ms total (median ${mlx.medianMs.toFixed(2)} ms/frame), onnxruntime-node ${cpu.totalMs.toFixed(0)} ms total (median ${cpu.medianMs.toFixed(2)} ms/frame)`,
  );
}

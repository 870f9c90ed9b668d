// Silero VAD v5 frame by frame through onnxruntime's API, as the demo runs it (512-sample frames of
// its synthesized recording, the state fed back), one engine per process so that runs can be
// alternated (a profiling aid, never a test):
//   node --conditions=source --import tsx bench/vad-frames.ts mlx|ort [frames] [warm-up frames]
// Prints one JSON line: ms a frame (median, mean, tenth and ninetieth percentiles) over `frames`
// (default 3000) after the warm-up (default 50), and the largest output seen (a check that the
// frames did something). BENCH_THREADS: intraOpNumThreads (default 2, both engines).
//   ... bench/vad-frames.ts split [frames]
// Where mlx's frame goes, medians in microseconds: through onnxruntime's API, MlxSession.run,
// MlxSession.runSync, and the one native call inside those (feeds in, evaluation, outputs out).
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import '../src/backend/register.js';
import { type HostTensor, MlxSession } from '../src/index.js';
import { synthesizeRecording } from '../src/demo/vad.js';

const engine = process.argv[2] ?? 'mlx';
if (engine !== 'mlx' && engine !== 'ort' && engine !== 'split') throw new Error(`engine must be mlx, ort or split, got '${engine}'`);
const frames = Number(process.argv[3] ?? 3000);
const warm = Number(process.argv[4] ?? 50);
const threads = Number(process.env.BENCH_THREADS ?? 2);
const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
const FRAME = 512;

const path = require.resolve('@ricky0123/vad-web/dist/silero_vad_v5.onnx');
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

/** MlxSession.run (or runSync) frame by frame: the medians of the run and of its one native call (SignatureProgram.evalMs). */
async function sessionFrames(sync: boolean): Promise<[number, number]> {
  // biome-ignore lint/suspicious/noExplicitAny: the runner's programs are internals
  const s: any = await MlxSession.create(path, { device: 'cpu', intraOpNumThreads: threads });
  const audio = synthesizeRecording();
  const count = Math.floor(audio.length / FRAME);
  let state: HostTensor = { dtype: 1, dims: [2, 1, 128], data: new Float32Array(256) };
  const sr: HostTensor = { dtype: 7, dims: [], data: BigInt64Array.of(16000n) };
  const runs: number[] = [];
  const calls: number[] = [];
  for (let i = 0; i < warm + frames; i++) {
    const off = (i % count) * FRAME;
    const input: HostTensor = { dtype: 1, dims: [1, FRAME], data: audio.slice(off, off + FRAME) };
    const t0 = performance.now();
    const r = sync ? s.runSync({ input, state, sr }) : await s.run({ input, state, sr });
    if (i >= warm) {
      runs.push(performance.now() - t0);
      for (const p of s.runner.programs.values()) if (p.evalMs !== undefined) calls.push(p.evalMs);
    }
    state = r.stateN as HostTensor;
  }
  s.release();
  return [median(runs), median(calls)];
}

async function split(): Promise<void> {
  // The first stage of a process runs cold (JIT, first allocations): a round discarded first.
  await sessionFrames(true);
  const [sync, syncCall] = await sessionFrames(true);
  const [run, runCall] = await sessionFrames(false);
  const api = JSON.parse(await captured(() => frameLoop()));
  const us = (ms: number) => Math.round(ms * 10000) / 10;
  console.log(
    JSON.stringify({
      frames,
      apiUs: us(api.medianMs),
      runUs: us(run),
      runCallUs: us(runCall),
      runSyncUs: us(sync),
      runSyncCallUs: us(syncCall),
    }),
  );
}

/** What `f` prints (its one line), not printed. */
async function captured(f: () => Promise<void>): Promise<string> {
  const log = console.log;
  let line = '';
  console.log = (s: string) => {
    line = s;
  };
  try {
    await f();
  } finally {
    console.log = log;
  }
  return line;
}

async function main(): Promise<void> {
  if (engine === 'split') return split();
  return frameLoop();
}

async function frameLoop(): Promise<void> {
  const session = await ort.InferenceSession.create(path, {
    executionProviders: [engine === 'ort' ? 'cpu' : 'mlx'],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
  });
  const audio = synthesizeRecording();
  const count = Math.floor(audio.length / FRAME);
  let state = new ort.Tensor('float32', new Float32Array(2 * 128), [2, 1, 128]);
  const sr = new ort.Tensor('int64', BigInt64Array.of(16000n), []);
  const times: number[] = [];
  let top = 0;
  for (let i = 0; i < warm + frames; i++) {
    const off = (i % count) * FRAME;
    const input = new ort.Tensor('float32', audio.slice(off, off + FRAME), [1, FRAME]);
    const t0 = performance.now();
    const r = await session.run({ input, state, sr });
    const t = performance.now() - t0;
    if (i >= warm) times.push(t);
    top = Math.max(top, (r.output.data as Float32Array)[0]);
    state = r.stateN as typeof state;
  }
  await session.release();
  const s = [...times].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))];
  const round = (x: number) => Math.round(x * 10000) / 10000;
  console.log(
    JSON.stringify({
      engine: engine === 'ort' ? 'ort' : 'mlx',
      frames,
      medianMs: round(at(0.5)),
      meanMs: round(times.reduce((a, b) => a + b, 0) / times.length),
      p10Ms: round(at(0.1)),
      p90Ms: round(at(0.9)),
      top: round(top),
    }),
  );
}
main();

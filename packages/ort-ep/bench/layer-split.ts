// Does splitting a long graph into several MLX partitions at its residual boundaries (what the
// reference provider does with `onnxruntime_ep_mlx.layer_boundary_outputs`) lower what a run
// allocates or what compiling costs? One shared model run two ways, each in a fresh process with
// an empty CPU kernel cache (a fresh TMPDIR and MLX_ORT_CACHE_DIR), alternated over rounds:
//   - whole: one session;
//   - split: one session per piece between consecutive residual Adds (an Add whose output two or
//     more nodes read: the residual stream), chained with the pieces' outputs kept on the device.
// Per process: create(), each of the first three runs (analysed, traced and compiled, replayed),
// the median of the steady runs, and MLX's peak memory over a steady run (reset before it) and over
// the first three. Both ways' outputs are checked against the model's reference outputs.
// Never passes or fails.
//
//   tools/dev bench layer-split [--model gpt2-tiny] [--rounds 3] [--runs 20] [--dataset 0]
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as mx from '@mlx/core';
import { decodeModel, expandFunctions, readTestCase, validateGraph, type HostTensor, type NodeIR, type TypeIR } from '../src/onnx/index.js';
import { encodeGraphProto, encodeModel, encodeNode, encodeTensor, encodeValueInfo } from '../src/onnx/encode.js';
import { MlxSession } from '../src/session.js';
import { download } from '../src/runtime/convert.js';
import type { Value } from '../src/runtime/value.js';
import { compareTensor } from '../test/conformance/compare.js';
import { sharedPath } from '../test/helpers/shared.js';

const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
};
const modelName = arg('model', 'gpt2-tiny');
const rounds = Number(arg('rounds', '3'));
const runs = Number(arg('runs', '20'));
const dataset = Number(arg('dataset', '0'));
const dir = sharedPath(`models/${modelName}`);

interface Piece {
  nodes: NodeIR[];
  inputs: string[];
  outputs: string[];
}

/** The graph cut after each residual Add: pieces, each reading what earlier pieces (or the feeds) made. */
function pieces(bytes: Uint8Array): { pieces: Piece[]; model: ReturnType<typeof decodeModel> } {
  const model = decodeModel(bytes);
  expandFunctions(model);
  validateGraph(model.graph);
  const g = model.graph;
  const nodes = g.nodes;
  const readers = new Map<string, number>();
  for (const n of nodes) for (const i of n.inputs) if (i) readers.set(i, (readers.get(i) ?? 0) + 1);
  const cuts = nodes.flatMap((n, i) => (n.opType === 'Add' && (readers.get(n.outputs[0]) ?? 0) >= 2 ? [i + 1] : []));
  const bounds = [0, ...cuts.filter((c) => c < nodes.length), nodes.length];
  const outputs = new Set(g.outputs.map((o) => o.name));
  const out: Piece[] = [];
  for (let k = 0; k + 1 < bounds.length; k++) {
    const members = nodes.slice(bounds[k], bounds[k + 1]);
    const made = new Set(members.flatMap((n) => n.outputs.filter((o) => o)));
    const later = new Set(nodes.slice(bounds[k + 1]).flatMap((n) => n.inputs));
    const inputs = [...new Set(members.flatMap((n) => n.inputs))].filter((i) => i && !made.has(i) && !g.initializers.has(i));
    out.push({ nodes: members, inputs, outputs: [...made].filter((o) => later.has(o) || outputs.has(o)) });
  }
  return { pieces: out, model };
}

function subModel(model: ReturnType<typeof decodeModel>, p: Piece, k: number, types: Map<string, TypeIR>): Uint8Array {
  const g = model.graph;
  const reads = new Set(p.nodes.flatMap((n) => n.inputs));
  const graph = encodeGraphProto({
    name: `${g.name}_piece_${k}`,
    node: p.nodes.map((n) => encodeNode(n)),
    input: p.inputs.map((name) => encodeValueInfo(name, types.get(name))),
    output: p.outputs.map((name) => encodeValueInfo(name, types.get(name))),
    initializer: [...g.initializers].filter(([name]) => reads.has(name)).map(([name, t]) => encodeTensor(t, name)),
  });
  return encodeModel({ irVersion: Math.max(model.irVersion, 4), opsets: model.opsetImports, graph });
}

interface Figures {
  mode: string;
  pieces: number;
  createMs: number;
  firstRunsMs: number[];
  steadyMs: number;
  peakSteadyBytes: number;
  peakFirstBytes: number;
  maxDiff: string;
}

async function worker(mode: 'whole' | 'split'): Promise<Figures> {
  process.env.MLX_ORT_FUSION ??= '1';
  const tc = readTestCase(dir);
  const bytes = tc.modelBytes;
  const ds = tc.datasets[dataset];
  const g0 = tc.model.graph;
  const inputNames = g0.inputs.filter((i) => !g0.initializers.has(i.name)).map((i) => i.name);
  const outputNames = g0.outputs.map((o) => o.name);
  const feeds: Record<string, HostTensor> = {};
  inputNames.forEach((name, i) => (feeds[name] = ds.inputs[i] as HostTensor));
  let chain: { session: MlxSession; inputs: string[] }[];
  const t0 = performance.now();
  if (mode === 'whole') chain = [{ session: await MlxSession.create(bytes, { device: 'cpu' }), inputs: inputNames }];
  else {
    const { pieces: ps, model } = pieces(bytes);
    // The element types of the values between pieces: what the graph declares, else what a whole run
    // gives (the graph's own outputs extended by the boundary values, run eagerly once).
    const boundary = [...new Set(ps.flatMap((p) => p.outputs))];
    const types = new Map<string, TypeIR>();
    for (const v of [...model.graph.inputs, ...model.graph.outputs]) types.set(v.name, v.type);
    const probe = subModel(model, { nodes: model.graph.nodes, inputs: inputNames, outputs: boundary }, -1, types);
    const s = await MlxSession.create(probe, { device: 'cpu', compiled: false });
    const got = await s.run(feeds);
    s.release();
    for (const name of boundary) if (!types.has(name)) types.set(name, { kind: 'tensor', elemType: (got[name] as HostTensor).dtype });
    chain = [];
    for (let k = 0; k < ps.length; k++) {
      const session = await MlxSession.create(subModel(model, ps[k], k, types), { device: 'cpu' });
      chain.push({ session, inputs: ps[k].inputs });
    }
    mx.memory.clearCache();
  }
  const createMs = performance.now() - t0;
  const runChain = async (): Promise<Record<string, HostTensor>> => {
    const env: Record<string, HostTensor | Value> = { ...feeds };
    for (let k = 0; k < chain.length; k++) {
      const { session, inputs } = chain[k];
      const last = k === chain.length - 1;
      const out = await session.run(Object.fromEntries(inputs.map((i) => [i, env[i]])), undefined, { keepOnDevice: !last });
      Object.assign(env, out);
    }
    // Outputs kept on the device by earlier pieces (a graph output made mid-graph) come back here.
    const result: Record<string, HostTensor> = {};
    for (const name of outputNames) {
      const v = env[name] as HostTensor | Value;
      result[name] = 'kind' in v && v.kind === 'device' ? download(v.array, v.onnxType) : (v as HostTensor);
    }
    return result;
  };
  mx.memory.resetPeak();
  const firstRunsMs: number[] = [];
  let outs: Record<string, HostTensor> = {};
  for (let r = 0; r < 3; r++) {
    const t = performance.now();
    outs = await runChain();
    firstRunsMs.push(performance.now() - t);
  }
  const peakFirstBytes = mx.memory.peak();
  const times: number[] = [];
  let peakSteadyBytes = 0;
  for (let r = 0; r < runs; r++) {
    mx.memory.resetPeak();
    const t = performance.now();
    outs = await runChain();
    times.push(performance.now() - t);
    peakSteadyBytes = Math.max(peakSteadyBytes, mx.memory.peak());
  }
  times.sort((a, b) => a - b);
  const diffs = outputNames.map((name, i) => {
    const c = compareTensor(outs[name], ds.outputs[i] as HostTensor, { rtol: 1e-3, atol: 1e-4 });
    return c.ok ? `${name} ok` : `${name}: ${c.why}`;
  });
  for (const { session } of chain) session.release();
  return {
    mode,
    pieces: chain.length,
    createMs,
    firstRunsMs,
    steadyMs: times[times.length >> 1],
    peakSteadyBytes,
    peakFirstBytes,
    maxDiff: diffs.join('; '),
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

async function main() {
  const mode = arg('worker', '');
  if (mode === 'whole' || mode === 'split') {
    process.stdout.write(`RESULT ${JSON.stringify(await worker(mode))}\n`);
    return;
  }
  const self = fileURLToPath(import.meta.url);
  const results: Figures[] = [];
  for (let r = 0; r < rounds; r++)
    for (const m of r % 2 ? ['split', 'whole'] : ['whole', 'split']) {
      const cache = mkdtempSync(join(tmpdir(), 'mlx-ort-split-'));
      const p = spawnSync(process.execPath, [...process.execArgv, self, ...process.argv.slice(2), '--worker', m], {
        // MLX keeps CPU kernels in $TMPDIR/mlx/<version>/cpu: a fresh TMPDIR is an empty kernel cache.
        env: { ...process.env, MLX_ORT_CACHE_DIR: join(cache, 'lasting'), TMPDIR: cache },
        encoding: 'utf8',
      });
      rmSync(cache, { recursive: true, force: true });
      const line = p.stdout.split('\n').find((l) => l.startsWith('RESULT '));
      if (!line) throw new Error(`worker ${m} failed:\n${p.stderr}`);
      const f = JSON.parse(line.slice(7)) as Figures;
      results.push(f);
      console.log(
        `round ${r + 1} ${m.padEnd(5)} pieces ${f.pieces}: create ${f.createMs.toFixed(0)} ms, runs 1-3 ${f.firstRunsMs.map((x) => x.toFixed(0)).join(' / ')} ms, steady ${f.steadyMs.toFixed(2)} ms, peak ${(f.peakFirstBytes / 1024).toFixed(0)} KiB (first runs) / ${(f.peakSteadyBytes / 1024).toFixed(0)} KiB (steady); ${f.maxDiff}`,
      );
    }
  console.log(`\n${modelName}, medians over ${rounds} round(s):`);
  for (const m of ['whole', 'split']) {
    const rs = results.filter((f) => f.mode === m);
    const first = (i: number) => median(rs.map((f) => f.firstRunsMs[i])).toFixed(0);
    console.log(
      `  ${m.padEnd(5)} (${rs[0].pieces} piece(s)): create ${median(rs.map((f) => f.createMs)).toFixed(0)} ms; runs 1 / 2 / 3 ${first(0)} / ${first(1)} / ${first(2)} ms; steady ${median(rs.map((f) => f.steadyMs)).toFixed(2)} ms; MLX peak ${(median(rs.map((f) => f.peakFirstBytes)) / 1024).toFixed(0)} KiB over the first runs, ${(median(rs.map((f) => f.peakSteadyBytes)) / 1024).toFixed(0)} KiB over a steady run`,
    );
  }
}

await main();

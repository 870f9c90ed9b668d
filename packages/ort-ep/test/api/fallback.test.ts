// Partitioning with fallback: nodes MLX does not take (or that disabledOps declines) run on
// onnxruntime's CPU backend, in partitions made at create(). Every output is compared with
// onnxruntime-node's CPU provider running the whole model.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readTestCase, type HostTensor } from '../../src/onnx/index.js';
import { defaultRegistry } from '../../src/ops/index.js';
import { prepareModel } from '../../src/plan/prepare.js';
import { findPartitions, summarizePartitions } from '../../src/plan/partition.js';
import { MlxSession, type MlxSessionOptions } from '../../src/session.js';
import { UnsupportedOperatorError } from '../../src/errors.js';
import { hostToTensor, tensorToHost } from '../../src/internal.js';
import { compareTensor } from '../conformance/compare.js';
import { model, node, v, type ModelSpec } from '../helpers/build.js';
import { bool, expectSameOutputs, f32, ort, runOn, seeded, type Feeds, type OrtTensor } from '../helpers/ort.js';
import { sharedPath } from '../helpers/shared.js';

// On the CPU each fused kernel is built with g++: the shared-model tests exercise fusion.
process.env.MLX_ORT_FUSION = '0';
// The package's test config turns fallback off (MLX_ORT_FALLBACK=none): each case here asks for it.
const cpu = { fallback: 'cpu' } as const;

type Options = Omit<MlxSessionOptions, 'registry' | 'externalData'>;

async function runMlx(bytes: Uint8Array, feeds: Feeds, options: Options, runs = 1): Promise<Record<string, OrtTensor>[]> {
  const s = await ort.InferenceSession.create(bytes, { executionProviders: [{ name: 'mlx', device: 'cpu', ...cpu, ...options } as never] });
  try {
    const out: Record<string, OrtTensor>[] = [];
    for (let r = 0; r < runs; r++) out.push(await s.run(feeds));
    return out;
  } finally {
    await s.release();
  }
}

/** Runs on onnxruntime-node alone and through mlx with fallback, on the compiled path (3 runs) and the eager one. */
async function expectFallbackSame(bytes: Uint8Array, feeds: Feeds, options: Options): Promise<void> {
  const want = await runOn('cpu', bytes, feeds);
  for (const compiled of [true, false]) {
    const runs = await runMlx(bytes, feeds, { ...options, compiled }, compiled ? 3 : 1);
    for (const have of runs) expectSameOutputs(have, want);
  }
}

const x23 = () => f32(seeded(6, 3), [2, 3]);
const chain = (nodes: ModelSpec['nodes'], outputs = [v('y', 'float32')]): Uint8Array =>
  model({ opsets: { '': 17 }, inputs: [v('x', 'float32', [2, 3])], outputs, nodes });

const partitionsOf = (bytes: Uint8Array, disabledOps: string[]) =>
  findPartitions(prepareModel(bytes, { disabledOps }).plan).map((p) => `${p.kind}:${p.nodes.length}`);

describe('fallback partitions', () => {
  it('an unsupported node at the start', async () => {
    const bytes = chain([node('Softmax', ['x'], ['a']), node('Relu', ['a'], ['b']), node('Mul', ['b', 'x'], ['y'])]);
    expect(partitionsOf(bytes, ['Softmax'])).toEqual(['fallback:1', 'mlx:2']);
    await expectFallbackSame(bytes, { x: x23() }, { disabledOps: ['Softmax'] });
  });

  it('in the middle', async () => {
    const bytes = chain([node('Relu', ['x'], ['a']), node('Softmax', ['a'], ['b']), node('Add', ['b', 'x'], ['y'])]);
    expect(partitionsOf(bytes, ['Softmax'])).toEqual(['mlx:1', 'fallback:1', 'mlx:1']);
    await expectFallbackSame(bytes, { x: x23() }, { disabledOps: ['Softmax'] });
  });

  it('at the end', async () => {
    const bytes = chain([node('Relu', ['x'], ['a']), node('Mul', ['a', 'x'], ['b']), node('Softmax', ['b'], ['y'])]);
    expect(partitionsOf(bytes, ['Softmax'])).toEqual(['mlx:2', 'fallback:1']);
    await expectFallbackSame(bytes, { x: x23() }, { disabledOps: ['Softmax'] });
  });

  it('producing a graph output that MLX also reads', async () => {
    const bytes = chain(
      [node('Relu', ['x'], ['a']), node('Softmax', ['a'], ['s']), node('Add', ['s', 'a'], ['y'])],
      [v('s', 'float32'), v('y', 'float32')],
    );
    await expectFallbackSame(bytes, { x: x23() }, { disabledOps: ['Softmax'] });
  });

  it('inside an If branch: the whole If falls back, reading outer values', async () => {
    const branch = (op: string) => ({
      name: `${op}_branch`,
      inputs: [],
      outputs: [v(`${op}_out`, 'float32')],
      nodes: [node(op, ['r'], [`${op}_out`])],
    });
    const bytes = model({
      opsets: { '': 17 },
      inputs: [v('x', 'float32', [2, 3]), v('c', 'bool', [])],
      outputs: [v('y', 'float32')],
      nodes: [
        node('Relu', ['x'], ['r']),
        node('If', ['c'], ['z'], { name: 'if', attrs: { then_branch: { g: branch('Softmax') }, else_branch: { g: branch('Neg') } } }),
        node('Add', ['z', 'x'], ['y']),
      ],
    });
    const plan = prepareModel(bytes, { disabledOps: ['Softmax'] }).plan;
    const summary = summarizePartitions(plan);
    expect(summary.fallbackNodes.map((n) => n.name)).toEqual(['if']);
    expect(summary.fallbackNodes[0].reason).toMatch(/subgraph 'Softmax_branch' holds node .*Softmax.*disabledOps/);
    for (const c of [1, 0]) await expectFallbackSame(bytes, { x: x23(), c: bool([c], []) }, { disabledOps: ['Softmax'] });
  });

  it('an op the registry has no entry for (a contrib or ai.onnx.ml op), crossing into MLX', async () => {
    // The first candidate MLX does not take (others are being added over time).
    const x33 = f32(
      seeded(9, 5).map((r, i) => r * 0.3 + (i % 4 === 0 ? 3 : 0)),
      [3, 3],
    );
    const candidates = [
      { domain: 'com.microsoft', op: 'Inverse', attrs: {} },
      { domain: 'com.microsoft', op: 'CDist', extra: ['x'], attrs: { metric: 'euclidean' } },
      { domain: 'ai.onnx.ml', op: 'Scaler', attrs: { offset: { floats: [0.5, -1, 2] }, scale: { floats: [2, 3, -0.5] } } },
    ];
    const c = candidates.find((k) => !defaultRegistry.lookup(k.domain, k.op, 1));
    expect(c).toBeDefined();
    const bytes = model({
      opsets: { '': 17, 'com.microsoft': 1, 'ai.onnx.ml': 3 },
      inputs: [v('x', 'float32', [3, 3])],
      outputs: [v('y', 'float32')],
      nodes: [
        node('Relu', ['x'], ['r']),
        node(c!.op, ['r', ...(c!.extra ?? [])], ['u'], { domain: c!.domain, attrs: c!.attrs as never }),
        node('Add', ['u', 'x'], ['y']),
      ],
    });
    await expectFallbackSame(bytes, { x: x33 }, {});
  });

  it('an unsupported node whose result nothing reads makes no partition', async () => {
    const bytes = chain([node('Relu', ['x'], ['a']), node('Softmax', ['a'], ['unused']), node('Neg', ['a'], ['y'])]);
    const s = await MlxSession.create(bytes, { ...cpu, device: 'cpu', disabledOps: ['Softmax'] });
    expect(s.fallbackStats).toEqual([]);
    s.release();
    await expectFallbackSame(bytes, { x: x23() }, { disabledOps: ['Softmax'] });
  });

  it('a disabled op really runs on onnxruntime: its partition counts the runs', async () => {
    const bytes = chain([node('Relu', ['x'], ['a']), node('Softmax', ['a'], ['b']), node('Add', ['b', 'x'], ['y'])]);
    const s = await MlxSession.create(bytes, { ...cpu, device: 'cpu', disabledOps: ['Softmax'] });
    try {
      expect(s.fallbackStats).toEqual([
        { partition: 0, ops: ['Softmax'], inputs: ['a'], outputs: ['b'], runs: 0, backend: 'onnxruntime-node' },
      ]);
      const x = tensorToHost('x', x23());
      for (let r = 1; r <= 3; r++) {
        await s.run({ x });
        expect(s.fallbackStats[0].runs).toBe(r);
      }
      // The compiled program: MLX segments around the fallback step.
      expect(s.describeSignatures()[0]).toMatchObject({ segments: 2, steps: 1 });
    } finally {
      s.release();
    }
    // Without the option MLX runs Softmax itself: no partition.
    const plain = await MlxSession.create(bytes, { ...cpu, device: 'cpu' });
    expect(plain.fallbackStats).toEqual([]);
    plain.release();
  });

  it("fallback: 'none' keeps UnsupportedOperatorError; runSync refuses fallback partitions clearly", async () => {
    const bytes = chain([node('Relu', ['x'], ['a']), node('Softmax', ['a'], ['y'])]);
    await expect(MlxSession.create(bytes, { disabledOps: ['Softmax'], fallback: 'none' })).rejects.toBeInstanceOf(UnsupportedOperatorError);
    await expect(MlxSession.create(bytes, { disabledOps: ['Softmax'], fallback: 'none' })).rejects.toThrow(
      /Softmax.*disabled by the disabledOps option/,
    );
    await expect(MlxSession.create(bytes, { fallback: 'gpu' as never })).rejects.toThrow(/fallback must be 'cpu' or 'none'/);
    // The environment's default (here: the test config's MLX_ORT_FALLBACK=none) applies without the option.
    expect(process.env.MLX_ORT_FALLBACK).toBe('none');
    await expect(MlxSession.create(bytes, { disabledOps: ['Softmax'] })).rejects.toBeInstanceOf(UnsupportedOperatorError);
    await expect(MlxSession.create(bytes, { disabledOps: 'Softmax' as never })).rejects.toThrow(/disabledOps must be an array/);
    const s = await MlxSession.create(bytes, { ...cpu, device: 'cpu', disabledOps: ['Softmax'] });
    expect(() => s.runSync({ x: tensorToHost('x', x23()) })).toThrow(/runs on onnxruntime.*use run\(\), not runSync\(\)/);
    s.release();
  });

  it('an op onnxruntime cannot run either: UnsupportedOperatorError at create(), or a node error on the first run', async () => {
    // The partition reads a graph input: its types are known at create(), where onnxruntime refuses it.
    const early = model({
      opsets: { '': 17, 'com.example': 1 },
      inputs: [v('x', 'float32', [2])],
      outputs: [v('y', 'float32')],
      nodes: [node('FooBar', ['x'], ['a'], { domain: 'com.example', name: 'foo' }), node('Relu', ['a'], ['y'])],
    });
    const e = await MlxSession.create(early, cpu).catch((err: unknown) => err as Error);
    expect(e).toBeInstanceOf(UnsupportedOperatorError);
    expect(e.message).toMatch(/com\.example::FooBar[\s\S]*onnxruntime \(the fallback\) cannot run them either/);
    // It reads an MLX result of no declared type: its sub-model is made on the first run, which fails naming it.
    const late = model({
      opsets: { '': 17, 'com.example': 1 },
      inputs: [v('x', 'float32', [2])],
      outputs: [v('y', 'float32')],
      nodes: [node('Relu', ['x'], ['a']), node('FooBar', ['a'], ['y'], { domain: 'com.example', name: 'foo' })],
    });
    const s = await MlxSession.create(late, { ...cpu, device: 'cpu' });
    try {
      await expect(s.run({ x: tensorToHost('x', f32([1, 2], [2])) })).rejects.toThrow(
        /node 'onnxruntime partition 0' \(onnxruntime: FooBar\): onnxruntime-node cannot load the partition's sub-model: .*FooBar/,
      );
    } finally {
      s.release();
    }
  });

  it('many alternating pieces: several partitions, and check warns', async () => {
    const ops = ['Softmax', 'Relu', 'Softmax', 'Relu', 'Softmax', 'Relu'];
    const bytes = chain(ops.map((op, i) => node(op, [i ? `t${i - 1}` : 'x'], [i === ops.length - 1 ? 'y' : `t${i}`])));
    const summary = summarizePartitions(prepareModel(bytes, { disabledOps: ['Softmax'] }).plan);
    expect([summary.mlx, summary.fallback]).toEqual([3, 3]);
    expect(summary.warning).toMatch(/6 partitions \(3 on onnxruntime\)/);
    expect(summarizePartitions(prepareModel(bytes).plan)).toMatchObject({ mlx: 1, fallback: 0 });
    expect(summarizePartitions(prepareModel(bytes).plan).warning).toBeUndefined();
    await expectFallbackSame(bytes, { x: x23() }, { disabledOps: ['Softmax'] });
  });

  it('independent MLX branches join one partition (the fewer of as-soon- and as-late-as-possible stages)', () => {
    // x -> Relu -> a (MLX, no fallback ancestor); x -> Softmax (fallback) -> s; y = a + s.
    const bytes = chain([node('Relu', ['x'], ['a']), node('Softmax', ['x'], ['s']), node('Add', ['a', 's'], ['y'])]);
    expect(partitionsOf(bytes, ['Softmax'])).toEqual(['fallback:1', 'mlx:2']);
  });

  it('onnxruntime-web (wasm) runs fallback partitions where onnxruntime-node is not used', async () => {
    const bytes = chain([node('Relu', ['x'], ['a']), node('Softmax', ['a'], ['b']), node('Add', ['b', 'x'], ['y'])]);
    const s = await MlxSession.create(bytes, { ...cpu, device: 'cpu', disabledOps: ['Softmax'], cpuBackend: 'onnxruntime-web' });
    try {
      expect(s.fallbackStats[0].backend).toBe('onnxruntime-web');
      const x = x23();
      const have = (await s.run({ x: tensorToHost('x', x) })).y as HostTensor;
      const want = (await runOn('cpu', bytes, { x })).y;
      expect(compareTensor(have, tensorToHost('y', want), { rtol: 1e-5, atol: 1e-6 })).toMatchObject({ ok: true });
      expect(s.fallbackStats[0].runs).toBe(1);
    } finally {
      s.release();
    }
  });
});

describe('a shared model with a third of its op types disabled', () => {
  const dir = sharedPath('models/bert-tiny');
  it.skipIf(!existsSync(dir))(
    'bert-tiny matches its reference outputs, compiled and eager',
    async () => {
      const meta = JSON.parse(readFileSync(join(dir, 'meta.json'), 'utf8')) as { rtol?: number; atol?: number };
      const tol = { rtol: meta.rtol ?? 1e-3, atol: meta.atol ?? 1e-4 };
      const bytes = new Uint8Array(readFileSync(join(dir, 'model.onnx')));
      const types = [...new Set(prepareModel(bytes).plan.nodes.map((pn) => pn.node.opType))].sort();
      const disabledOps = types.filter((_, i) => i % 3 === 0);
      expect(disabledOps.length).toBeGreaterThanOrEqual(types.length / 3);
      const tc = readTestCase(dir);
      for (const compiled of [true, false]) {
        const s = await ort.InferenceSession.create(join(dir, 'model.onnx'), {
          executionProviders: [{ name: 'mlx', device: 'cpu', compiled, disabledOps, ...cpu } as never],
        });
        try {
          for (let r = 0; r < (compiled ? 3 : 1); r++) {
            for (const ds of tc.datasets) {
              const feeds: Feeds = {};
              (ds.inputs as HostTensor[]).forEach((t, i) => (feeds[s.inputNames[i]] = hostToTensor(ort as never, t) as never));
              const out = await s.run(feeds);
              (ds.outputs as HostTensor[]).forEach((want, i) => {
                const name = s.outputNames[i];
                const c = compareTensor(tensorToHost(name, out[name]), want, tol);
                expect(c.ok ? 'ok' : `${compiled ? 'compiled' : 'eager'} run ${r + 1}, ${name}: ${c.why}`).toBe('ok');
              });
            }
          }
        } finally {
          await s.release();
        }
      }
    },
    300_000,
  );
});

// The attention rewrite (src/plan/rewrite/attention.ts): decomposed attention in the spellings
// exporters use becomes one mlx.fused::Attention, which computes what the graph computes: against
// onnxruntime-node and against this provider with the rewrites off, in each of the op's forms
// (the CPU's own: the native attention kernel in float32; MLX's fused attention, forced with
// MLX_ORT_SDPA=fused, which the CPU otherwise leaves alone; and the composition, forced with
// MLX_ORT_SDPA=composite). Then the shared transformers.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { hostToTensor } from '../../src/internal.js';
import { readTestCase, type HostTensor } from '../../src/onnx/index.js';
import { prepareModel } from '../../src/plan/prepare.js';
import { model, node, v, type NodeSpec, type TensorSpec } from '../helpers/build.js';
import { bool, expectSameAsOrt, f32, ort, plain, runMlxWith, runOn, seeded, type Feeds } from '../helpers/ort.js';
import { sharedPath } from '../helpers/shared.js';

const [B, H, S, D] = [2, 3, 5, 8];
const NEG = -3.4028234663852886e38;

const scalar = (name: string, value: number): NodeSpec =>
  node('Constant', [], [name], { attrs: { value: { t: { name, type: 'float32', dims: [], values: [value] } } } });

/** Q, K, V as graph inputs [B, H, S, D] (K transposed by the graph), plus extra inputs. */
function build(nodes: NodeSpec[], outputs: string[], extra: ReturnType<typeof v>[] = [], inits: TensorSpec[] = []) {
  return model({
    inputs: [v('q', 'float32', [B, H, S, D]), v('k', 'float32', [B, H, S, D]), v('v', 'float32', [B, H, S, D]), ...extra],
    outputs: outputs.map((o) => v(o, 'float32')),
    nodes,
    initializers: inits,
    opsets: { '': 17 },
  });
}

const qkv = (): Feeds => {
  const n = B * H * S * D;
  const t = (seed: number) =>
    f32(
      seeded(n, seed).map((x) => x * 3),
      [B, H, S, D],
    );
  return { q: t(1), k: t(2), v: t(3) };
};

/** BERT's padding mask: 0 where attended, a big negative at the padded keys, [B, 1, 1, S]. */
const paddingMask = () =>
  f32(
    Array.from({ length: B * S }, (_, i) => (i % S >= S - 1 - (i >= S ? 1 : 0) ? NEG : 0)),
    [B, 1, 1, S],
  );

const causal = (): TensorSpec => ({
  name: 'causal',
  type: 'bool',
  dims: [1, 1, S, S],
  values: Array.from({ length: S * S }, (_, i) => (i % S <= Math.floor(i / S) ? 1 : 0)),
});

const kt: NodeSpec = node('Transpose', ['k'], ['kt'], { attrs: { perm: [0, 1, 3, 2] } });
const tail = (scores: string): NodeSpec[] => [node('Softmax', [scores], ['p'], { attrs: { axis: -1 } }), node('MatMul', ['p', 'v'], ['y'])];

const runMlx = (bytes: Uint8Array, f: Feeds, graphRewrites: boolean) => runMlxWith(bytes, f, { compiled: false, graphRewrites });

const saved = process.env.MLX_ORT_SDPA;
afterEach(() => {
  if (saved === undefined) delete process.env.MLX_ORT_SDPA;
  else process.env.MLX_ORT_SDPA = saved;
});

/** Rewritten as `counts` says; every form matches onnxruntime and the graph as written. */
async function expectRewrite(bytes: Uint8Array, counts: Record<string, number>, f: Feeds, tol = { rtol: 1e-5, atol: 1e-6 }) {
  expect(prepareModel(bytes).rewrites).toEqual(counts);
  const off = await runMlx(bytes, f, false);
  for (const sdpa of ['auto', 'fused', 'composite']) {
    process.env.MLX_ORT_SDPA = sdpa;
    await expectSameAsOrt(bytes, f, tol);
    const on = await runMlx(bytes, f, true);
    for (const k of Object.keys(off)) {
      const a = plain(on[k]);
      const b = plain(off[k]);
      expect(a.length).toBe(b.length);
      a.forEach((x, i) => expect(Math.abs(x - b[i]), `${sdpa} ${k}[${i}]`).toBeLessThanOrEqual(tol.atol + tol.rtol * Math.abs(b[i])));
    }
  }
}

describe('attention -> one fused op', () => {
  it('BERT: (Q Kᵀ) * scale + padding mask, Softmax, · V', () =>
    expectRewrite(
      build(
        [
          kt,
          node('MatMul', ['q', 'kt'], ['s']),
          scalar('c', 1 / Math.sqrt(D)),
          node('Mul', ['s', 'c'], ['ss']),
          node('Add', ['ss', 'mask'], ['sm']),
          ...tail('sm'),
        ],
        ['y'],
        [v('mask', 'float32', [B, 1, 1, S])],
      ),
      { attention: 1 },
      { ...qkv(), mask: paddingMask() },
    ));

  it("rows an additive −∞ mask hides entirely are NaN, as the graph's softmax makes them, in every form", async () => {
    const bytes = build(
      [kt, node('MatMul', ['q', 'kt'], ['s']), node('Add', ['s', 'mask'], ['sm']), ...tail('sm')],
      ['y'],
      [v('mask', 'float32', [B, 1, 1, S])],
    );
    expect(prepareModel(bytes).rewrites).toEqual({ attention: 1 });
    // Batch entry 1 sees no key at all; entry 0 all but the last.
    const mask = f32(
      Array.from({ length: B * S }, (_, i) => (i >= S || i === S - 1 ? Number.NEGATIVE_INFINITY : 0)),
      [B, 1, 1, S],
    );
    const f = { ...qkv(), mask };
    const want = plain((await runOn('cpu', bytes, f)).y);
    expect(want.slice(H * S * D).every(Number.isNaN)).toBe(true);
    for (const sdpa of ['auto', 'fused', 'composite']) {
      process.env.MLX_ORT_SDPA = sdpa;
      const got = plain((await runOn('mlx', bytes, f)).y);
      got.forEach((x, i) => {
        if (Number.isNaN(want[i])) expect(x, `${sdpa} y[${i}]`).toBeNaN();
        else expect(Math.abs(x - want[i]), `${sdpa} y[${i}]`).toBeLessThanOrEqual(1e-6 + 1e-5 * Math.abs(want[i]));
      });
    }
  });

  it('GPT-2: (Q Kᵀ) / sqrt(d), Where(causal, s, min), + mask first, Softmax, Cast, · V', async () => {
    const nodes = (whereFirst: boolean): NodeSpec[] => [
      kt,
      node('MatMul', ['q', 'kt'], ['s']),
      scalar('r', Math.sqrt(D)),
      node('Div', ['s', 'r'], ['ss']),
      scalar('min', NEG),
      ...(whereFirst
        ? [node('Where', ['causal', 'ss', 'min'], ['sw']), node('Add', ['mask', 'sw'], ['sm'])]
        : [node('Add', ['mask', 'ss'], ['sw']), node('Where', ['causal', 'sw', 'min'], ['sm'])]),
      node('Softmax', ['sm'], ['p0'], { attrs: { axis: -1 } }),
      node('Cast', ['p0'], ['p'], { attrs: { to: 1 } }),
      node('MatMul', ['p', 'v'], ['y']),
    ];
    for (const whereFirst of [true, false])
      await expectRewrite(
        build(nodes(whereFirst), ['y'], [v('mask', 'float32', [B, 1, 1, S])], [causal()]),
        { attention: 1 },
        {
          ...qkv(),
          mask: paddingMask(),
        },
      );
  });

  it('the scale on Q and on Kᵀ before the product, a Where whose true branch is the fill, a fed condition', () =>
    expectRewrite(
      build(
        [
          kt,
          scalar('c', 0.5),
          node('Mul', ['c', 'q'], ['qs']),
          scalar('r', 2),
          node('Div', ['kt', 'r'], ['kts']),
          node('MatMul', ['qs', 'kts'], ['s']),
          scalar('ninf', Number.NEGATIVE_INFINITY),
          node('Where', ['masked', 'ninf', 's'], ['sm']),
          ...tail('sm'),
        ],
        ['y'],
        [v('masked', 'bool', [B, 1, S, S])],
      ),
      { attention: 1 },
      {
        ...qkv(),
        masked: bool(
          Array.from({ length: B * S * S }, (_, i) => (i % S > Math.floor(i / S) % S ? 1 : 0)),
          [B, 1, S, S],
        ),
      },
    ));

  it("torch's SDPA export: sqrt(scale) on Q and on Kᵀ, + mask with -inf, Where(IsNaN(p), 0, p); a fully masked batch gives zeros", () =>
    expectRewrite(
      build(
        [
          kt,
          scalar('c', 1 / Math.sqrt(Math.sqrt(D))),
          node('Mul', ['q', 'c'], ['qs']),
          node('Mul', ['kt', 'c'], ['kts']),
          node('MatMul', ['qs', 'kts'], ['s']),
          node('Add', ['s', 'mask'], ['sm']),
          node('Softmax', ['sm'], ['p0'], { attrs: { axis: -1 } }),
          node('IsNaN', ['p0'], ['bad']),
          node('Constant', [], ['zero'], { attrs: { value: { t: { name: 'zero', type: 'float32', dims: [1], values: [0] } } } }),
          node('Where', ['bad', 'zero', 'p0'], ['p']),
          node('MatMul', ['p', 'v'], ['y']),
        ],
        ['y'],
        [v('mask', 'float32', [B, 1, 1, S])],
      ),
      { attention: 1 },
      // batch 0 sees its first three keys; batch 1 none.
      {
        ...qkv(),
        mask: f32(
          Array.from({ length: B * S }, (_, i) => (i < S && i % S < 3 ? 0 : Number.NEGATIVE_INFINITY)),
          [B, 1, 1, S],
        ),
      },
    ));

  it("torch's SDPA export with sqrt(1 / sqrt(d)) computed from Q's shape: the factors fold into the fused op", async () => {
    const i64 = (name: string, values: number[]): NodeSpec =>
      node('Constant', [], [name], { attrs: { value: { t: { name, type: 'int64', dims: [values.length], values } } } });
    const bytes = build(
      [
        kt,
        node('Shape', ['q'], ['qshape']),
        i64('from', [-1]),
        i64('to', [2 ** 31 - 1]),
        node('Slice', ['qshape', 'from', 'to'], ['dlast']),
        node('Cast', ['dlast'], ['df'], { attrs: { to: 1 } }),
        node('Sqrt', ['df'], ['sd']),
        scalar('one', 1),
        node('Div', ['one', 'sd'], ['inv']),
        node('Sqrt', ['inv'], ['c']),
        node('Mul', ['q', 'c'], ['qs']),
        node('Mul', ['kt', 'c'], ['kts']),
        node('MatMul', ['qs', 'kts'], ['s']),
        node('Add', ['s', 'mask'], ['sm']),
        ...tail('sm'),
      ],
      ['y'],
      [v('mask', 'float32', [B, 1, 1, S])],
    );
    // Both Muls go into the fused node (they were left in the graph, a pass over Q and Kᵀ each run).
    const ops = prepareModel(bytes).model.graph.nodes.map((n) => n.opType);
    expect(ops).not.toContain('Mul');
    expect(ops.filter((o) => o === 'Attention')).toHaveLength(1);
    await expectRewrite(bytes, { attention: 1 }, { ...qkv(), mask: paddingMask() });
  });

  it('computed factors that are not one host value are applied as the graph does: a fed per-head Mul on Q, a fed Div on Kᵀ', async () => {
    const bytes = build(
      [kt, node('Mul', ['hf', 'q'], ['qs']), node('Div', ['kt', 'kd'], ['kts']), node('MatMul', ['qs', 'kts'], ['s']), ...tail('s')],
      ['y'],
      [v('hf', 'float32', [1, H, 1, 1]), v('kd', 'float32', [])],
    );
    expect(prepareModel(bytes).model.graph.nodes.map((n) => n.opType)).not.toContain('Mul');
    await expectRewrite(bytes, { attention: 1 }, { ...qkv(), hf: f32([0.5, -1.25, 2], [1, H, 1, 1]), kd: f32([3], []) });
  });

  it('grouped K/V heads broadcast by the product (fewer key heads than query heads)', async () => {
    const bytes = model({
      inputs: [v('q', 'float32', [B, H, S, D]), v('kt', 'float32', [B, 1, D, S]), v('v', 'float32', [B, 1, S, D])],
      outputs: [v('y', 'float32')],
      nodes: [node('MatMul', ['q', 'kt'], ['s']), ...tail('s')],
      opsets: { '': 17 },
    });
    const f = qkv();
    const t = (seed: number, dims: number[]) =>
      f32(
        seeded(
          dims.reduce((a, b) => a * b, 1),
          seed,
        ),
        dims,
      );
    await expectRewrite(bytes, { attention: 1 }, { q: f.q, kt: t(5, [B, 1, D, S]), v: t(6, [B, 1, S, D]) });
  });

  it('not when the scores are read elsewhere, the fill does not swamp the scores, or the softmax is over another axis', async () => {
    const f = { ...qkv(), mask: paddingMask() };
    const base = [kt, node('MatMul', ['q', 'kt'], ['s']), node('Add', ['s', 'mask'], ['sm'])];
    const extra = [v('mask', 'float32', [B, 1, 1, S])];
    await expectRewrite(build([...base, ...tail('sm')], ['y', 's'], extra), {}, f);
    const small = [kt, node('MatMul', ['q', 'kt'], ['s']), scalar('f', -1e4), node('Where', ['causal', 's', 'f'], ['sm']), ...tail('sm')];
    await expectRewrite(build(small, ['y'], [], [causal()]), {}, qkv());
    const axis2 = [...base, node('Softmax', ['sm'], ['p'], { attrs: { axis: 2 } }), node('MatMul', ['p', 'v'], ['y'])];
    await expectRewrite(build(axis2, ['y'], extra), {}, f);
  });
});

describe('shared transformers', () => {
  const cases: [string, number][] = [
    ['bert-tiny', 2],
    ['gpt2-tiny', 2],
    ['llama-tiny', 2],
  ];
  for (const [name, count] of cases) {
    const dir = sharedPath(join('models', name));
    it.skipIf(!existsSync(dir))(`${name}: ${count} attention blocks, every form matches the rewrites off and the reference`, async () => {
      const bytes = readFileSync(join(dir, 'model.onnx'));
      expect(prepareModel(bytes).rewrites.attention).toBe(count);
      const meta = JSON.parse(readFileSync(join(dir, 'meta.json'), 'utf8')) as { rtol?: number; atol?: number };
      for (const ds of readTestCase(dir).datasets) {
        const probe = await ort.InferenceSession.create(bytes, { executionProviders: [{ name: 'mlx', device: 'cpu' }] } as never);
        const f: Feeds = {};
        (ds.inputs as HostTensor[]).forEach((t, i) => (f[probe.inputNames[i]] = hostToTensor(ort as never, t) as never));
        await probe.release();
        const off = await runMlx(bytes, f, false);
        for (const sdpa of ['auto', 'fused', 'composite']) {
          process.env.MLX_ORT_SDPA = sdpa;
          const on = await runMlx(bytes, f, true);
          (ds.outputs as HostTensor[]).forEach((want, i) => {
            const k = Object.keys(off)[i];
            const [a, b] = [plain(on[k]), plain(off[k])];
            const r = Array.from(want.data as ArrayLike<number>, Number);
            a.forEach((x, j) => {
              expect(Math.abs(x - b[j]), `${sdpa} ${k}[${j}] vs rewrites off`).toBeLessThanOrEqual(1e-5 + 1e-4 * Math.abs(b[j]));
              expect(Math.abs(x - r[j]), `${sdpa} ${k}[${j}] vs reference`).toBeLessThanOrEqual(
                (meta.atol ?? 1e-4) + (meta.rtol ?? 1e-3) * Math.abs(r[j]),
              );
            });
          });
        }
      }
    });
  }
});

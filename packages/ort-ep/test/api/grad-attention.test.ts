// The attention nodes' backward pass under the caller's workspace budget (valueAndGrad and
// trainStep's `attention`): the gradients of a com.microsoft MultiHeadAttention node (its
// additive attention_bias included) against float64 central differences of a JS reference, the
// same under a budget that only the tiled strategy fits, the option reaching the kernel (a wrapper of @mlx/kernels'
// scaledDotProductAttention records its `vjp`), a budget too small for any strategy, and the
// option's validation.
import * as mx from '@mlx/core';
import { AttentionVjpBudget, chooseAttentionVjpStrategy, type AttentionOptions, type AttentionVjpOptions } from '@mlx/kernels';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LoraAdapters, MlxSession, OnnxDataType, type HostTensor, type ValueAndGradOptions } from '../../src/index.js';
import { model, node, v } from '../helpers/build.js';
import { seeded } from '../helpers/ort.js';

// What each scaledDotProductAttention call was asked for its backward pass, while differentiating.
const seen = vi.hoisted(() => [] as (AttentionVjpOptions | undefined)[]);
// The dtype of q at each of those calls.
const dtypes = vi.hoisted(() => [] as string[]);
vi.mock('@mlx/kernels', async (importOriginal) => {
  const kernels = await importOriginal<typeof import('@mlx/kernels')>();
  return {
    ...kernels,
    scaledDotProductAttention: (q: mx.Array, k: mx.Array, v: mx.Array, options?: AttentionOptions) => {
      if (mx.differentiating()) {
        seen.push(options?.vjp);
        dtypes.push(q.dtype);
      }
      return kernels.scaledDotProductAttention(q, k, v, options);
    },
  };
});
afterEach(() => {
  seen.length = 0;
  dtypes.length = 0;
});

const MS = 'com.microsoft';
const [B, S, L, N, H] = [1, 12, 16, 2, 4];
const D = N * H;
const DIMS: Record<string, number[]> = { q: [B, S, D], k: [B, L, D], v: [B, L, D], ab: [1, N, S, L] };
const VALUES: Record<string, number[]> = {
  q: seeded(B * S * D, 11),
  k: seeded(B * L * D, 12),
  v: seeded(B * L * D, 13),
  ab: seeded(N * S * L, 14),
};
/** The loss's fixed weights: loss = sum(y * R). */
const R = seeded(B * S * D, 15);

const mha = model({
  opsets: { '': 17, [MS]: 1 },
  inputs: ['q', 'k', 'v', 'ab'].map((n) => v(n, 'float32', DIMS[n])),
  outputs: [v('y', 'float32', [B, S, D])],
  nodes: [node('MultiHeadAttention', ['q', 'k', 'v', '', '', 'ab'], ['y'], { domain: MS, attrs: { num_heads: N }, name: 'layers.0.mha' })],
});

const feeds = (): Record<string, HostTensor> =>
  Object.fromEntries(Object.keys(DIMS).map((n) => [n, { dtype: OnnxDataType.FLOAT, dims: DIMS[n], data: Float32Array.from(VALUES[n]) }]));
const loss = (o: Record<string, mx.Array>) => mx.sum(mx.multiply(o.y, mx.array(R, { shape: [B, S, D] })));

/** The loss of MultiHeadAttention with an additive attention_bias, in float64. */
function lossRef(x: Record<string, number[]>): number {
  const scale = 1 / Math.sqrt(H);
  let total = 0;
  for (let b = 0; b < B; b++)
    for (let h = 0; h < N; h++)
      for (let i = 0; i < S; i++) {
        const s: number[] = [];
        for (let j = 0; j < L; j++) {
          let dot = 0;
          for (let c = 0; c < H; c++) dot += x.q[(b * S + i) * D + h * H + c] * x.k[(b * L + j) * D + h * H + c];
          s.push(dot * scale + x.ab[(h * S + i) * L + j]);
        }
        const m = Math.max(...s);
        const e = s.map((t) => Math.exp(t - m));
        const z = e.reduce((a, t) => a + t, 0);
        for (let c = 0; c < H; c++) {
          let y = 0;
          for (let j = 0; j < L; j++) y += (e[j] / z) * x.v[(b * L + j) * D + h * H + c];
          total += y * R[(b * S + i) * D + h * H + c];
        }
      }
  return total;
}

/** d lossRef / d name by float64 central differences. */
function finiteDifferences(name: string): number[] {
  const eps = 1e-6;
  return VALUES[name].map((_, i) => {
    const at = (d: number) => lossRef({ ...VALUES, [name]: VALUES[name].map((t, j) => (j === i ? t + d : t)) });
    return (at(eps) - at(-eps)) / (2 * eps);
  });
}

const maxDiff = (a: ArrayLike<number>, b: ArrayLike<number>) => Math.max(...Array.from(a, (x, i) => Math.abs(x - b[i])));

async function gradsOf(wrt: string[], attention?: ValueAndGradOptions['attention']): Promise<Record<string, number[]>> {
  const s = await MlxSession.create(mha, { device: 'cpu' });
  try {
    const r = await s.valueAndGrad(feeds(), { output: loss, wrt, attention });
    return Object.fromEntries(wrt.map((n) => [n, Array.from((r.grads[n] as HostTensor).data as Float32Array)]));
  } finally {
    s.release();
  }
}

/** The kernels' budget for this node's attention (q, k, v as heads, the bias as its mask). */
function budgetOf(workspaceBytes: number): { budget: AttentionVjpBudget; strategy: string } {
  return mx.scope(() => {
    const q = mx.zeros([B, N, S, H]);
    const kv = mx.zeros([B, N, L, H]);
    const mask = mx.zeros([1, N, S, L]);
    const budget = AttentionVjpBudget.forInputs(workspaceBytes, q, kv, kv, { mask });
    const strategy = chooseAttentionVjpStrategy({ q, k: kv, v: kv, gradOut: q, mask }, {}, { workspaceBytes });
    return { budget, strategy };
  });
}

/** A budget that the dense strategy does not fit and the tiled one does, with blocks of 2 x 2. */
function tiledBudget(): number {
  const { budget } = budgetOf(1);
  return budget.tiledFixedBytes + budget.blockBytes({ queryBlock: 2, keyBlock: 2 });
}

describe('valueAndGrad: the attention nodes under the caller workspace budget', () => {
  it('a budget only the tiled strategy fits: the kernels choose it, and the gradients stay those of finite differences', async () => {
    const small = tiledBudget();
    const { budget, strategy } = budgetOf(small);
    expect(budget.fitsDense).toBe(false);
    expect(strategy).toBe('tiled');
    const blocks = budget.tiledBlocks();
    expect(blocks.queryBlock * blocks.keyBlock).toBeLessThan(S * L);
    expect(budgetOf(512 * 1024 * 1024).strategy).toBe('dense');

    const wrt = ['q', 'k', 'v'];
    const tiled = await gradsOf(wrt, { workspaceBytes: small });
    expect(seen).toEqual([{ workspaceBytes: small }]);
    seen.length = 0;
    const dflt = await gradsOf(wrt);
    expect(seen).toEqual([undefined]);
    for (const n of wrt) {
      const fd = finiteDifferences(n);
      expect(maxDiff(tiled[n], fd), n).toBeLessThan(2e-4);
      expect(maxDiff(dflt[n], fd), n).toBeLessThan(2e-4);
      expect(maxDiff(tiled[n], dflt[n]), n).toBeLessThan(1e-5);
    }
  }, 60_000);

  it('the additive attention_bias has its gradient (finite differences), under every strategy and budget', async () => {
    const fd = finiteDifferences('ab');
    expect(Math.max(...fd.map(Math.abs))).toBeGreaterThan(1e-2);
    const runs: ValueAndGradOptions['attention'][] = [
      undefined,
      { workspaceBytes: tiledBudget() },
      { strategy: 'dense' },
      { strategy: 'tiled' },
      { strategy: 'autodiff' },
    ];
    for (const attention of runs) {
      const g = await gradsOf(['ab', 'q'], attention);
      expect(maxDiff(g.ab, fd), JSON.stringify(attention)).toBeLessThan(2e-4);
      expect(maxDiff(g.q, finiteDifferences('q')), JSON.stringify(attention)).toBeLessThan(2e-4);
    }
  }, 60_000);

  it('a strategy reaches the kernel; forward-only runs ask nothing of it', async () => {
    const dense = await gradsOf(['q'], { workspaceBytes: 1, strategy: 'dense' });
    const autodiff = await gradsOf(['q'], { strategy: 'autodiff' });
    expect(seen).toEqual([{ workspaceBytes: 1, strategy: 'dense' }, { strategy: 'autodiff' }]);
    const fd = finiteDifferences('q');
    expect(maxDiff(dense.q, fd)).toBeLessThan(2e-4);
    expect(maxDiff(autodiff.q, fd)).toBeLessThan(2e-4);
    seen.length = 0;
    const s = await MlxSession.create(mha, { device: 'cpu' });
    try {
      await s.run(feeds());
      expect(seen).toEqual([]);
    } finally {
      s.release();
    }
  }, 60_000);

  it('gradient checkpointing keeps the budget for the recomputed layer', async () => {
    const small = tiledBudget();
    const s = await MlxSession.create(mha, { device: 'cpu' });
    try {
      const r = await s.valueAndGrad(feeds(), { output: loss, wrt: ['q'], checkpoint: 'layers', attention: { workspaceBytes: small } });
      expect(seen.length).toBeGreaterThan(0);
      for (const o of seen) expect(o).toEqual({ workspaceBytes: small });
      expect(maxDiff((r.grads.q as HostTensor).data as Float32Array, finiteDifferences('q'))).toBeLessThan(2e-4);
    } finally {
      s.release();
    }
  }, 60_000);

  it('gradient checkpointing recomputes the layer in the mixed-precision dtype', async () => {
    const s = await MlxSession.create(mha, { device: 'cpu' });
    try {
      await s.valueAndGrad(feeds(), { output: loss, wrt: ['q'], checkpoint: 'layers', mixedPrecision: 'bfloat16' });
      expect(dtypes.length).toBeGreaterThan(1);
      expect(new Set(dtypes)).toEqual(new Set(['bfloat16']));
    } finally {
      s.release();
    }
  }, 60_000);

  it('a budget too small for any strategy is a clear error, and the session still runs', async () => {
    const s = await MlxSession.create(mha, { device: 'cpu' });
    try {
      await expect(s.valueAndGrad(feeds(), { output: loss, wrt: ['q'], attention: { workspaceBytes: 64 } })).rejects.toThrow(
        /attention VJP workspace of 64 bytes is too small for these shapes: the tiled strategy needs at least \d+/,
      );
      const r = await s.valueAndGrad(feeds(), { output: loss, wrt: ['q'] });
      expect(maxDiff((r.grads.q as HostTensor).data as Float32Array, finiteDifferences('q'))).toBeLessThan(2e-4);
    } finally {
      s.release();
    }
  }, 60_000);

  it('rejects a malformed attention option with a specific error', async () => {
    const s = await MlxSession.create(mha, { device: 'cpu' });
    const bad = (attention: unknown) =>
      (async () => s.valueAndGrad(feeds(), { output: loss, wrt: ['q'], attention: attention as ValueAndGradOptions['attention'] }))();
    try {
      await expect(bad(5)).rejects.toThrow('valueAndGrad: attention must be an object { workspaceBytes?, strategy? }, got number');
      await expect(bad({ workspaceBytes: 0 })).rejects.toThrow(
        'valueAndGrad: attention.workspaceBytes must be a positive integer (bytes), got 0',
      );
      await expect(bad({ workspaceBytes: 1.5 })).rejects.toThrow('attention.workspaceBytes must be a positive integer (bytes), got 1.5');
      await expect(bad({ workspaceBytes: Number.NaN })).rejects.toThrow(
        'attention.workspaceBytes must be a positive integer (bytes), got NaN',
      );
      await expect(bad({ workspaceBytes: '1024' })).rejects.toThrow(
        'attention.workspaceBytes must be a positive integer (bytes), got 1024',
      );
      await expect(bad({ strategy: 'fast' })).rejects.toThrow(
        "valueAndGrad: attention.strategy must be one of 'auto', 'dense', 'tiled', 'autodiff', got 'fast'",
      );
      await expect(bad({ budget: 1 })).rejects.toThrow(
        "valueAndGrad: attention has unknown option(s) 'budget' (known: workspaceBytes, strategy)",
      );
      expect(seen).toEqual([]);
    } finally {
      s.release();
    }
  });
});

// q, k, v projected from x by trained weights, then MultiHeadAttention.
const projected = model({
  opsets: { '': 17, [MS]: 1 },
  inputs: [v('x', 'float32', [B, S, D])],
  initializers: ['Wq', 'Wk', 'Wv'].map((name, i) => ({
    name,
    type: 'float32' as const,
    dims: [D, D],
    values: seeded(D * D, 20 + i).map((t) => t * 0.5),
  })),
  outputs: [v('y', 'float32', [B, S, D])],
  nodes: [
    node('MatMul', ['x', 'Wq'], ['q']),
    node('MatMul', ['x', 'Wk'], ['k']),
    node('MatMul', ['x', 'Wv'], ['v']),
    node('MultiHeadAttention', ['q', 'k', 'v'], ['y'], { domain: MS, attrs: { num_heads: N } }),
  ],
});
const xFeeds = (): Record<string, HostTensor> => ({
  x: { dtype: OnnxDataType.FLOAT, dims: [B, S, D], data: Float32Array.from(seeded(B * S * D, 30)) },
});

describe('trainStep and LoRA trainStep: the attention option', () => {
  /** The losses of two SGD steps (the second after the first's update). */
  async function twoSteps(attention?: ValueAndGradOptions['attention']): Promise<number[]> {
    const s = await MlxSession.create(projected, { device: 'cpu', graphRewrites: false });
    try {
      const losses: number[] = [];
      for (let i = 0; i < 2; i++)
        losses.push((await s.trainStep(xFeeds(), { output: loss, optimizer: new mx.optim.SGD({ lr: 0.05 }), attention })).loss);
      return losses;
    } finally {
      s.release();
    }
  }

  it('trainStep takes the same steps under a small budget, which reaches the kernel', async () => {
    const small = mx.scope(() => {
      const q = mx.zeros([B, N, S, H]);
      const budget = AttentionVjpBudget.forInputs(1, q, q, q);
      const bytes = budget.tiledFixedBytes + budget.blockBytes({ queryBlock: 2, keyBlock: 2 });
      expect(AttentionVjpBudget.forInputs(bytes, q, q, q).strategy).toBe('tiled');
      return bytes;
    });
    const tight = await twoSteps({ workspaceBytes: small });
    expect(seen).toEqual([{ workspaceBytes: small }, { workspaceBytes: small }]);
    const dflt = await twoSteps();
    expect(tight[0]).toBe(dflt[0]);
    expect(tight[1]).not.toBe(tight[0]);
    expect(Math.abs(tight[1] - dflt[1])).toBeLessThan(1e-5);
  }, 60_000);

  it('trainStep refuses a malformed attention option before running', async () => {
    const s = await MlxSession.create(projected, { device: 'cpu', graphRewrites: false });
    try {
      expect(() =>
        s.trainStep(xFeeds(), { output: loss, optimizer: new mx.optim.SGD({ lr: 0.05 }), attention: { workspaceBytes: -1 } }),
      ).toThrow('trainStep: attention.workspaceBytes must be a positive integer (bytes), got -1');
      await expect(
        s.trainStep(xFeeds(), { output: loss, optimizer: new mx.optim.SGD({ lr: 0.05 }), attention: { workspaceBytes: 64 } }),
      ).rejects.toThrow(/attention VJP workspace of 64 bytes is too small/);
    } finally {
      s.release();
    }
  }, 60_000);

  it('LoRA trainStep hands the option to every attention node', async () => {
    const s = await MlxSession.create(projected, { device: 'cpu', graphRewrites: false });
    const lora = LoraAdapters.attach(s, { targets: ['Wq', 'Wv'], rank: 2, seed: 1 });
    try {
      await lora.trainStep(xFeeds(), { output: loss, optimizer: new mx.optim.SGD({ lr: 0.05 }), attention: { strategy: 'tiled' } });
      expect(seen).toEqual([{ strategy: 'tiled' }]);
      await expect(
        lora.trainStep(xFeeds(), { output: loss, optimizer: new mx.optim.SGD({ lr: 0.05 }), attention: { strategy: 'blocks' as 'tiled' } }),
      ).rejects.toThrow("LoRA trainStep: attention.strategy must be one of 'auto', 'dense', 'tiled', 'autodiff', got 'blocks'");
    } finally {
      lora.dispose();
      s.release();
    }
  }, 60_000);
});

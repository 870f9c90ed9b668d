import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { AttentionVjpBudget, attentionVjp, chooseAttentionVjpStrategy, type AttentionOptions } from '../index.js';
import { attentionConfig } from './config.js';
import { randn, uniform } from '../testing/numeric.js';

const MiB = 1024 * 1024;
const shapeOf = (s: number, extra: Partial<{ b: number; hq: number; hk: number; sk: number; d: number }> = {}) => {
  const { b = 1, hq = 1, hk = 1, sk = s, d = 32 } = extra;
  return {
    batch: b,
    queryHeads: hq,
    kvHeads: hk,
    groupSize: hq / hk,
    querySeq: s,
    keySeq: sk,
    headDim: d,
    valueDim: d,
    dtype: 'float32' as const,
  };
};

/**
 * Peak bytes the pullback allocates beyond its (evaluated) inputs: memory.peak() after
 * memory.resetPeak(), minus memory.active() measured once the inputs exist. This is what
 * workspaceBytes bounds: inputs are not counted, the outputs dq, dk, dv are.
 */
function measuredWorkspace(run: () => { dq: mx.Array; dk: mx.Array; dv: mx.Array; dmask?: mx.Array }): number {
  mx.memory.clearCache();
  const baseline = mx.memory.active();
  mx.memory.resetPeak();
  const g = run();
  mx.evaluate(g.dq, g.dk, g.dv, ...(g.dmask ? [g.dmask] : []));
  const peak = mx.memory.peak() - baseline;
  mx.dispose(g);
  return peak;
}

describe('AttentionVjpBudget', () => {
  it('picks dense when its score buffers fit and tiled otherwise', () => {
    const config = attentionConfig({});
    const small = new AttentionVjpBudget(64 * MiB, shapeOf(256), config);
    expect(small.fitsDense).toBe(true);
    expect(small.strategy).toBe('dense');
    const large = new AttentionVjpBudget(64 * MiB, shapeOf(4096), config);
    expect(large.denseBytes).toBeGreaterThan(64 * MiB);
    expect(large.strategy).toBe('tiled');
  });

  it('derives the largest blocks whose step fits, and names the minimum when nothing fits', () => {
    for (const [ws, s, opts] of [
      [24 * MiB, 4096, {}],
      [16 * MiB, 4096, { softcap: 5, causal: true }],
      [1 * MiB, 300, { mask: mx.ones([1, 300], 'bool') }],
    ] as const) {
      const b = new AttentionVjpBudget(ws, shapeOf(s, { hq: 4, hk: 2 }), attentionConfig(opts as AttentionOptions));
      const blocks = b.tiledBlocks();
      expect(b.tiledFixedBytes + b.blockBytes(blocks)).toBeLessThanOrEqual(ws);
      const bigger = { queryBlock: blocks.queryBlock + 1, keyBlock: blocks.keyBlock + 1 };
      if (bigger.queryBlock <= s && bigger.keyBlock <= s) expect(b.tiledFixedBytes + b.blockBytes(bigger)).toBeGreaterThan(ws);
    }
    const tiny = new AttentionVjpBudget(64 * 1024, shapeOf(4096), attentionConfig({}));
    expect(() => tiny.tiledBlocks()).toThrow(/needs at least \d+/);
  });

  it("counts an additive mask's gradient among the outputs (a boolean mask has none)", () => {
    const q = randn([2, 4, 8, 16]);
    const k = randn([2, 2, 12, 16]);
    const plain = AttentionVjpBudget.forInputs(1, q, k, k);
    const additive = AttentionVjpBudget.forInputs(1, q, k, k, { mask: randn([4, 8, 10]) });
    expect(additive.outputBytes - plain.outputBytes).toBe(4 * 8 * 10 * 4);
    expect(AttentionVjpBudget.forInputs(1, q, k, k, { mask: mx.ones([4, 8, 10], 'bool') }).outputBytes).toBe(plain.outputBytes);
    const inputs = { q, k, v: k, gradOut: q };
    // A workspace the tiled strategy fits without the mask gradient but not with it.
    const ws = plain.tiledFixedBytes + plain.blockBytes({ queryBlock: 1, keyBlock: 1 });
    const big = randn([2, 4, 8, 12]);
    expect(() => attentionVjp({ ...inputs, mask: big }, {}, { workspaceBytes: ws })).toThrow(/too small for these shapes/);
    expect(chooseAttentionVjpStrategy(inputs, {}, { workspaceBytes: ws })).toBe('tiled');
  });

  it("'auto' resolves through the budget", () => {
    const q = randn([1, 1, 512, 16]);
    const k = randn([1, 1, 512, 16]);
    const inputs = { q, k, v: k, gradOut: q };
    expect(chooseAttentionVjpStrategy(inputs, {}, { workspaceBytes: 256 * MiB })).toBe('dense');
    expect(chooseAttentionVjpStrategy(inputs, {}, { workspaceBytes: 2 * MiB })).toBe('tiled');
    expect(chooseAttentionVjpStrategy(inputs, {}, { strategy: 'autodiff' })).toBe('autodiff');
    expect(AttentionVjpBudget.forInputs(2 * MiB, q, k, k).strategy).toBe('tiled');
  });

  it('bounds the measured peak of the dense pullback', () => {
    const q = randn([1, 2, 512, 32]);
    const k = randn([1, 1, 512, 32]);
    const v = randn([1, 1, 512, 32]);
    const gradOut = randn([1, 2, 512, 32]);
    const mask = mx.greater(uniform([1, 1, 512, 500]), 0.2);
    const additive = randn([1, 2, 512, 500]);
    mx.evaluate(q, k, v, gradOut, mask, additive);
    for (const opts of [{}, { causal: true }, { softcap: 4 }, { mask }, { mask: additive }] as AttentionOptions[]) {
      const estimate = AttentionVjpBudget.forInputs(1, q, k, v, opts).denseBytes;
      const peak = measuredWorkspace(() => attentionVjp({ q, k, v, gradOut, mask: opts.mask }, opts, { strategy: 'dense' }));
      expect(peak, JSON.stringify(Object.keys(opts))).toBeLessThanOrEqual(estimate);
    }
  });
});

describe('tiled attention VJP memory', () => {
  // b = 1, h = 1, d = 32, sq = sk = 4096: dense score buffers alone are 64 MiB each (~260 MiB in all).
  const s = 4096;
  const q = randn([1, 1, s, 32]);
  const k = randn([1, 1, s, 32]);
  const v = randn([1, 1, s, 32]);
  const gradOut = randn([1, 1, s, 32]);
  mx.evaluate(q, k, v, gradOut);
  const workspaceBytes = 16 * MiB;

  it.each([
    ['no mask', {}],
    ['causal', { causal: true }],
    ['softcap', { softcap: 5 }],
    ['an additive key bias', { mask: randn([1, 1, 1, s]) }],
  ] as [string, AttentionOptions][])('stays within a 16 MiB workspace at sq = sk = 4096 (%s)', (_name, opts) => {
    const budget = AttentionVjpBudget.forInputs(workspaceBytes, q, k, v, opts);
    expect(budget.denseBytes).toBeGreaterThan(10 * workspaceBytes);
    expect(budget.strategy).toBe('tiled');
    // 'auto' must pick tiled here; the forward output is recomputed block by block (out omitted).
    const peak = measuredWorkspace(() => attentionVjp({ q, k, v, gradOut, mask: opts.mask }, opts, { workspaceBytes }));
    expect(peak).toBeLessThanOrEqual(workspaceBytes);
  });
});

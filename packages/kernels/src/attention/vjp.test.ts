import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { attentionVjp, scaledDotProductAttention, type AttentionOptions, type AttentionVjpRunOptions } from '../index.js';
import { attentionConfig } from './config.js';
import { attentionComposite } from './forward.js';
import { attentionVjpAutodiff } from './vjp.js';
import { finiteDifferenceVjp, hasNaN, maxAbs, onCpu, randn, relativeError, uniform } from '../testing/numeric.js';

type Strategy = { name: string; run: AttentionVjpRunOptions };
const strategies: Strategy[] = [
  { name: 'dense', run: { strategy: 'dense' } },
  // Blocks that divide neither sequence length, so ragged edge blocks are exercised.
  { name: 'tiled', run: { strategy: 'tiled', blocks: { queryBlock: 2, keyBlock: 3 } } },
  { name: 'autodiff', run: { strategy: 'autodiff' } },
];

/** A boolean keep-mask [1, 1, sq, width] whose first query row sees nothing. */
function maskWithEmptyRow(sq: number, width: number, dtype: 'bool' | 'float32' | 'float64' = 'bool'): mx.Array {
  const keep = mx.greater(uniform([1, 1, sq, width]), 0.35);
  const rows = mx.reshape(mx.arange(sq, undefined, 1, 'int32'), [1, 1, sq, 1]);
  const m = mx.where(mx.equal(rows, 0), mx.scalar(false, 'bool'), keep);
  if (dtype === 'bool') return m;
  return mx.where(m, mx.scalar(0, dtype), mx.scalar(-Infinity, dtype));
}

describe('attentionVjp against central finite differences (float64, CPU)', () => {
  const configs: [string, { sq: number; sk: number; hq: number; hk: number }, (sq: number, sk: number) => AttentionOptions][] = [
    ['GQA 4/2, no mask', { sq: 3, sk: 5, hq: 4, hk: 2 }, () => ({})],
    [
      'boolean mask narrower than sk, an empty row, causal offset 1',
      { sq: 4, sk: 5, hq: 2, hk: 1 },
      (sq, sk) => ({ mask: maskWithEmptyRow(sq, sk - 2), causal: true, causalOffset: 1 }),
    ],
    [
      'additive mask with −∞, softcap, scale',
      { sq: 3, sk: 4, hq: 2, hk: 2 },
      (sq, sk) => ({ mask: mx.add(maskWithEmptyRow(sq, sk, 'float64'), randn([1, 2, sq, sk], 'float64')), softcap: 1.5, scale: 0.7 }),
    ],
    ['causal with sq > sk and empty rows (offset −1)', { sq: 5, sk: 3, hq: 2, hk: 1 }, () => ({ causal: true, causalOffset: -1 })],
  ];
  it.each(configs)('%s', (_name, { sq, sk, hq, hk }, makeOptions) => {
    onCpu(() => {
      const d = 4;
      const dv = 3;
      const q = randn([1, hq, sq, d], 'float64');
      const k = randn([1, hk, sk, d], 'float64');
      const v = randn([1, hk, sk, dv], 'float64');
      const options = makeOptions(sq, sk);
      const gradOut = randn([1, hq, sq, dv], 'float64');
      const forward = (a: mx.Array, b: mx.Array, c: mx.Array) => scaledDotProductAttention(a, b, c, options);
      const fd = finiteDifferenceVjp(forward, [q, k, v], gradOut);
      const out = forward(q, k, v);
      for (const s of strategies) {
        const g = attentionVjp({ q, k, v, out, gradOut, mask: options.mask }, options, s.run);
        expect(relativeError(g.dq, fd[0]), `${s.name} dq`).toBeLessThan(1e-7);
        expect(relativeError(g.dk, fd[1]), `${s.name} dk`).toBeLessThan(1e-7);
        expect(relativeError(g.dv, fd[2]), `${s.name} dv`).toBeLessThan(1e-7);
      }
      // Through the registered custom VJP, for each strategy it can be told to use.
      for (const s of strategies) {
        const [, grads] = mx.vjp(
          (a, b, c) => scaledDotProductAttention(a, b, c, { ...options, vjp: { strategy: s.run.strategy } }),
          [q, k, v],
          [gradOut],
        );
        grads.forEach((g, i) => expect(relativeError(g, fd[i]), `registered ${s.name} #${i}`).toBeLessThan(1e-7));
      }
    });
  });
});

describe('the additive mask gradient against central finite differences (float64, CPU)', () => {
  const configs: [string, { b: number; sq: number; sk: number; hq: number; hk: number }, (sq: number, sk: number) => AttentionOptions][] = [
    [
      'per head, narrower than sk, −∞ and an empty row, softcap, causal offset 1, GQA 4/2',
      { b: 1, sq: 4, sk: 5, hq: 4, hk: 2 },
      (sq, sk) => ({
        mask: mx.add(maskWithEmptyRow(sq, sk - 1, 'float64'), randn([1, 4, sq, sk - 1], 'float64')),
        softcap: 1.5,
        causal: true,
        causalOffset: 1,
        scale: 0.7,
      }),
    ],
    [
      'rank 2 [sq, sk], broadcast over batch and heads',
      { b: 2, sq: 3, sk: 4, hq: 2, hk: 1 },
      (sq, sk) => ({ mask: randn([sq, sk], 'float64') }),
    ],
    [
      'a key bias [b, 1, 1, sk], broadcast over heads and queries',
      { b: 2, sq: 5, sk: 4, hq: 2, hk: 2 },
      (_sq, sk) => ({ mask: randn([2, 1, 1, sk], 'float64') }),
    ],
  ];
  it.each(configs)('%s', (_name, { b, sq, sk, hq, hk }, makeOptions) => {
    onCpu(() => {
      const d = 4;
      const q = randn([b, hq, sq, d], 'float64');
      const k = randn([b, hk, sk, d], 'float64');
      const v = randn([b, hk, sk, 3], 'float64');
      const options = makeOptions(sq, sk);
      const mask = options.mask as mx.Array;
      const gradOut = randn([b, hq, sq, 3], 'float64');
      const forward = (a: mx.Array, c: mx.Array, e: mx.Array, m: mx.Array) => scaledDotProductAttention(a, c, e, { ...options, mask: m });
      const [fd] = finiteDifferenceVjp(forward, [q, k, v, mask], gradOut, { wrt: [3] });
      expect(maxAbs(fd)).toBeGreaterThan(1e-3);
      const out = forward(q, k, v, mask);
      for (const s of strategies) {
        const g = attentionVjp({ q, k, v, out, gradOut, mask }, options, s.run);
        expect(g.dmask?.shape, s.name).toEqual(mask.shape);
        expect(relativeError(g.dmask as mx.Array, fd), `${s.name} dmask`).toBeLessThan(1e-7);
        // Through the registered custom VJP.
        const [, grads] = mx.vjp((a, c, e, m) => forward(a, c, e, m), [q, k, v, mask], [gradOut]);
        expect(relativeError(grads[3], fd), `registered ${s.name}`).toBeLessThan(1e-7);
        const [, viaStrategy] = mx.vjp(
          (a, c, e, m) => scaledDotProductAttention(a, c, e, { ...options, mask: m, vjp: { strategy: s.run.strategy } }),
          [q, k, v, mask],
          [gradOut],
        );
        expect(relativeError(viaStrategy[3], fd), `registered ${s.name} (told)`).toBeLessThan(1e-7);
      }
    });
  });

  it('a float32 mask of float64 attention gets a float32 gradient; a boolean mask gets none', () => {
    onCpu(() => {
      const q = randn([1, 2, 3, 4], 'float64');
      const k = randn([1, 2, 4, 4], 'float64');
      const v = randn([1, 2, 4, 4], 'float64');
      const gradOut = randn([1, 2, 3, 4], 'float64');
      const mask32 = randn([3, 4], 'float32');
      const mask64 = mx.astype(mask32, 'float64');
      for (const s of strategies) {
        const g32 = attentionVjp({ q, k, v, gradOut, mask: mask32 }, {}, s.run);
        const g64 = attentionVjp({ q, k, v, gradOut, mask: mask64 }, {}, s.run);
        expect(g32.dmask?.dtype, s.name).toBe('float32');
        expect(relativeError(g32.dmask as mx.Array, g64.dmask as mx.Array), s.name).toBeLessThan(1e-6);
        const none = attentionVjp({ q, k, v, gradOut, mask: mx.greater(mask32, 0) }, {}, s.run);
        expect(none.dmask, s.name).toBeUndefined();
      }
    });
  });
});

describe('attentionVjp strategies agree (float32, rel. error ≤ 1e-5)', () => {
  const grid: { hq: number; hk: number; mask: string; causal: string; sq: number; sk: number; softcap: number }[] = [];
  for (const [hq, hk] of [
    [2, 2],
    [4, 2],
    [4, 1],
  ]) {
    for (const mask of ['none', 'boolean', 'boolean narrow, empty row', 'additive narrow']) {
      for (const causal of ['off', 'offset 0', 'bottom-right', 'offset −2']) {
        for (const [sq, sk] of [
          [6, 9],
          [9, 6],
        ])
          grid.push({ hq, hk, mask, causal, sq, sk, softcap: grid.length % 5 === 0 ? 2 : 0 });
      }
    }
  }
  it(`over ${grid.length} combinations of GQA ratio, mask kind and width, causal offset, sq ≠ sk`, () => {
    for (const c of grid) {
      mx.scope(() => {
        const d = 8;
        const q = randn([2, c.hq, c.sq, d]);
        const k = randn([2, c.hk, c.sk, d]);
        const v = randn([2, c.hk, c.sk, d]);
        const gradOut = randn([2, c.hq, c.sq, d]);
        const mask =
          c.mask === 'none'
            ? null
            : c.mask === 'boolean'
              ? mx.greater(uniform([2, 1, c.sq, c.sk]), 0.3)
              : c.mask === 'boolean narrow, empty row'
                ? maskWithEmptyRow(c.sq, c.sk - 3)
                : mx.add(maskWithEmptyRow(c.sq, c.sk - 2, 'float32'), randn([1, c.hq, c.sq, c.sk - 2]));
        const causalOffset = c.causal === 'bottom-right' ? c.sk - c.sq : c.causal === 'offset −2' ? -2 : 0;
        const options: AttentionOptions = { mask, causal: c.causal !== 'off', causalOffset, softcap: c.softcap };
        const label = JSON.stringify(c);
        const out = attentionComposite(q, k, v, mask, attentionConfig(options));
        const reference = attentionVjpAutodiff({ q, k, v, gradOut, mask }, attentionConfig(options));
        for (const g of [reference.dq, reference.dk, reference.dv]) expect(hasNaN(g), label).toBe(false);
        const candidates = {
          dense: attentionVjp({ q, k, v, out, gradOut, mask }, options, { strategy: 'dense' }),
          tiled: attentionVjp({ q, k, v, out, gradOut, mask }, options, { strategy: 'tiled', blocks: { queryBlock: 4, keyBlock: 4 } }),
          'tiled without out': attentionVjp({ q, k, v, gradOut, mask }, options, {
            strategy: 'tiled',
            blocks: { queryBlock: 5, keyBlock: 2 },
          }),
          'dense without out': attentionVjp({ q, k, v, gradOut, mask }, options, { strategy: 'dense' }),
        };
        for (const [name, g] of Object.entries(candidates)) {
          expect(relativeError(g.dq, reference.dq), `${name} dq ${label}`).toBeLessThan(1e-5);
          expect(relativeError(g.dk, reference.dk), `${name} dk ${label}`).toBeLessThan(1e-5);
          expect(relativeError(g.dv, reference.dv), `${name} dv ${label}`).toBeLessThan(1e-5);
          if (reference.dmask) expect(relativeError(g.dmask as mx.Array, reference.dmask), `${name} dmask ${label}`).toBeLessThan(1e-5);
          else expect(g.dmask, `${name} dmask ${label}`).toBeUndefined();
        }
      });
    }
  });
});

describe('attentionVjp behaviour', () => {
  it('gives zero gradients for rows that see no key, and nothing for a fully masked call', () => {
    const q = randn([1, 2, 4, 8]);
    const k = randn([1, 2, 6, 8]);
    const v = randn([1, 2, 6, 8]);
    const gradOut = randn([1, 2, 4, 8]);
    const mask = maskWithEmptyRow(4, 6);
    for (const s of strategies) {
      const g = attentionVjp({ q, k, v, gradOut, mask }, {}, s.run);
      expect(maxAbs(mx.slice(g.dq, [0, 0, 0, 0], [1, 2, 1, 8], [1, 1, 1, 1])), s.name).toBe(0);
      const none = attentionVjp({ q, k, v, gradOut, mask: mx.zeros([1, 1, 4, 6], 'bool') }, {}, s.run);
      for (const x of [none.dq, none.dk, none.dv]) expect(maxAbs(x), s.name).toBe(0);
    }
  });

  it('is the VJP that valueAndGrad uses: autodiff of the fused op would give NaN for −∞ rows, ours gives 0', () => {
    const q = randn([1, 2, 4, 8]);
    const k = randn([1, 1, 5, 8]);
    const v = randn([1, 1, 5, 8]);
    const mask = maskWithEmptyRow(4, 5, 'float32');
    const loss = (a: mx.Array) => mx.sum(mx.square(scaledDotProductAttention(a, k, v, { mask, implementation: 'fused' })));
    const [value, dq] = mx.valueAndGrad(loss)(q) as [mx.Array, mx.Array];
    expect(Number.isFinite(value.item())).toBe(true);
    expect(hasNaN(dq)).toBe(false);
    const [, [autodiffOfFused]] = mx.vjp(
      (a) => mx.fast.scaledDotProductAttention(a, k, v, 1 / Math.sqrt(8), 'array', mask),
      [q],
      [mx.onesLike(q)],
    );
    expect(hasNaN(autodiffOfFused)).toBe(true);
  });

  it('releases every intermediate: only dq, dk, dv stay allocated', () => {
    const q = randn([1, 4, 64, 16]);
    const k = randn([1, 2, 80, 16]);
    const v = randn([1, 2, 80, 16]);
    const gradOut = randn([1, 4, 64, 16]);
    const mask = mx.greater(uniform([1, 1, 64, 70]), 0.2);
    mx.evaluate(q, k, v, gradOut, mask);
    for (const s of strategies) {
      const before = mx.memory.active();
      const g = attentionVjp({ q, k, v, gradOut, mask }, { causal: true }, s.run);
      mx.evaluate(g.dq, g.dk, g.dv);
      // A CPU task releases its intermediates' buffers as it finishes, on the stream's thread,
      // which can lag behind the outputs being ready on a loaded machine: wait for the stream.
      mx.synchronize();
      const outputs = g.dq.nbytes + g.dk.nbytes + g.dv.nbytes;
      expect(mx.memory.active() - before, s.name).toBe(outputs);
      mx.dispose(g);
      mx.synchronize();
      expect(mx.memory.active(), s.name).toBe(before);
    }
  });
});

import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { scaledDotProductAttention, type AttentionOptions } from '../index.js';
import { attentionConfig } from './config.js';
import { attentionComposite, attentionFewRows, attentionFused, fewRowsSupports } from './forward.js';
import { onnxNodeTestRoot, readNodeCase, type OnnxTensor } from '../testing/onnx-cases.js';
import { hasNaN, maxAbs, randn, relativeError, uniform } from '../testing/numeric.js';

/** Attention computed row by row in JS doubles: the plain definition, for small cases. */
function referenceAttention(
  q: mx.Array,
  k: mx.Array,
  v: mx.Array,
  opts: {
    scale: number;
    keep: (b: number, h: number, i: number, j: number) => boolean;
    bias?: (b: number, h: number, i: number, j: number) => number;
  },
): number[] {
  const [b, hq, sq, d] = q.shape;
  const [, hk, sk, dv] = v.shape;
  const Q = q.toTypedArray() as Float32Array,
    Kd = k.toTypedArray() as Float32Array,
    V = v.toTypedArray() as Float32Array;
  const out: number[] = [];
  for (let bi = 0; bi < b; bi++)
    for (let h = 0; h < hq; h++) {
      const kh = Math.floor(h / (hq / hk));
      for (let i = 0; i < sq; i++) {
        const s: number[] = [];
        for (let j = 0; j < sk; j++) {
          let dot = 0;
          for (let c = 0; c < d; c++) dot += Q[((bi * hq + h) * sq + i) * d + c] * Kd[((bi * hk + kh) * sk + j) * d + c];
          s.push(opts.keep(bi, h, i, j) ? dot * opts.scale + (opts.bias?.(bi, h, i, j) ?? 0) : -Infinity);
        }
        const m = Math.max(...s);
        const e = s.map((x) => (m === -Infinity ? 0 : Math.exp(x - m)));
        const z = e.reduce((a, x) => a + x, 0);
        for (let c = 0; c < dv; c++) {
          let acc = 0;
          for (let j = 0; j < sk; j++) acc += z === 0 ? 0 : (e[j] / z) * V[((bi * hk + kh) * sk + j) * dv + c];
          out.push(acc);
        }
      }
    }
  return out;
}

const maxDiff = (a: mx.Array, ref: number[]) => {
  const x = a.toTypedArray() as Float32Array;
  return ref.reduce((m, r, i) => Math.max(m, Math.abs(x[i] - r)), 0);
};

describe('scaledDotProductAttention forward', () => {
  const [b, hq, hk, sq, sk, d] = [2, 4, 2, 5, 7, 8];
  const q = randn([b, hq, sq, d]);
  const k = randn([b, hk, sk, d]);
  const v = randn([b, hk, sk, 6]);

  it('matches the plain definition with grouped-query heads and the default scale', () => {
    const out = scaledDotProductAttention(q, k, v);
    expect(out.shape).toEqual([b, hq, sq, 6]);
    expect(maxDiff(out, referenceAttention(q, k, v, { scale: 1 / Math.sqrt(d), keep: () => true }))).toBeLessThan(1e-5);
  });

  it('applies causal masking as j ≤ i + causalOffset (ONNX: offset = past length, 0 without)', () => {
    for (const causalOffset of [0, sk - sq, -2, 3]) {
      const out = scaledDotProductAttention(q, k, v, { causal: true, causalOffset, scale: 0.3 });
      const ref = referenceAttention(q, k, v, { scale: 0.3, keep: (_b, _h, i, j) => j <= i + causalOffset });
      expect(maxDiff(out, ref), `offset ${causalOffset}`).toBeLessThan(1e-5);
    }
  });

  it('takes boolean and additive masks of rank 2 to 4, padding short ones with −∞', () => {
    const width = sk - 2;
    const keep4 = mx.greater(uniform([b, hq, sq, width]), 0.3);
    const cases: [string, mx.Array, (bi: number, h: number, i: number, j: number) => boolean][] = [];
    const k4 = keep4.toList() as boolean[][][][];
    cases.push(['4-D bool', keep4, (bi, h, i, j) => j < width && k4[bi][h][i][j]]);
    const keep2 = mx.greater(uniform([sq, width]), 0.3);
    const k2 = keep2.toList() as boolean[][];
    cases.push(['2-D bool', keep2, (_b, _h, i, j) => j < width && k2[i][j]]);
    const keep3 = mx.greater(uniform([hq, 1, width]), 0.3);
    const k3 = keep3.toList() as boolean[][][];
    cases.push(['3-D bool over heads', keep3, (_b, h, _i, j) => j < width && k3[h][0][j]]);
    for (const [name, mask, keep] of cases) {
      for (const implementation of ['fused', 'composite'] as const) {
        const out = scaledDotProductAttention(q, k, v, { mask, implementation });
        expect(maxDiff(out, referenceAttention(q, k, v, { scale: 1 / Math.sqrt(d), keep })), `${name} ${implementation}`).toBeLessThan(
          1e-5,
        );
      }
    }
    const bias = mx.multiply(randn([b, 1, sq, width]), 2);
    const bv = bias.toList() as number[][][][];
    const out = scaledDotProductAttention(q, k, v, { mask: bias });
    const ref = referenceAttention(q, k, v, {
      scale: 1 / Math.sqrt(d),
      keep: (_b, _h, _i, j) => j < width,
      bias: (bi, _h, i, j) => bv[bi][0][i][j],
    });
    expect(maxDiff(out, ref)).toBeLessThan(1e-5);
  });

  it('gives zeros, never NaN, for rows that see no key', () => {
    const keep = mx.greater(uniform([1, 1, sq, sk]), 0.3);
    const rowMasked = mx.where(mx.less(mx.reshape(mx.arange(sq), [1, 1, sq, 1]), 2), false, keep);
    const additive = mx.where(rowMasked, mx.scalar(0, 'float32'), mx.scalar(-Infinity, 'float32'));
    const opts: AttentionOptions[] = [
      { mask: rowMasked },
      { mask: additive },
      { mask: rowMasked, softcap: 2 },
      { causal: true, causalOffset: -3 },
      { mask: mx.zeros([1, 0], 'bool') },
    ];
    for (const o of opts) {
      for (const implementation of ['auto', 'composite'] as const) {
        const out = scaledDotProductAttention(q, k, v, { ...o, implementation });
        expect(hasNaN(out)).toBe(false);
        const firstRows = mx.slice(out, [0, 0, 0, 0], [b, hq, 2, 6], [1, 1, 1, 1]);
        expect(maxAbs(firstRows)).toBe(0);
      }
    }
  });

  it('applies softcap before masking', () => {
    const softcap = 0.7;
    const keep = mx.greater(uniform([sq, sk]), 0.4);
    const kv = keep.toList() as boolean[][];
    const out = scaledDotProductAttention(q, k, v, { softcap, mask: keep, scale: 1 });
    // softcap·tanh(s/softcap) as an additive term relative to s: bias = capped − s.
    const Q = q.toTypedArray() as Float32Array,
      Kd = k.toTypedArray() as Float32Array;
    const raw = (bi: number, h: number, i: number, j: number) => {
      let dot = 0;
      const kh = Math.floor(h / 2);
      for (let c = 0; c < d; c++) dot += Q[((bi * hq + h) * sq + i) * d + c] * Kd[((bi * hk + kh) * sk + j) * d + c];
      return dot;
    };
    const ref = referenceAttention(q, k, v, {
      scale: 1,
      keep: (_b, _h, i, j) => kv[i][j],
      bias: (bi, h, i, j) => softcap * Math.tanh(raw(bi, h, i, j) / softcap) - raw(bi, h, i, j),
    });
    expect(maxDiff(out, ref)).toBeLessThan(1e-5);
  });

  it('fused and composite agree within float32 rounding over masks, causal offsets and GQA ratios', () => {
    for (const [h, kvh] of [
      [2, 2],
      [4, 2],
      [4, 1],
    ]) {
      const qq = randn([2, h, sq, d]);
      const kk = randn([2, kvh, sk, d]);
      const vv = randn([2, kvh, sk, d]);
      const masks = [null, mx.greater(uniform([2, 1, sq, sk - 3]), 0.3), mx.multiply(randn([1, h, sq, sk]), 3)];
      for (const mask of masks)
        for (const causal of [false, true])
          for (const causalOffset of [0, sk - sq, -1]) {
            const c = attentionConfig({ mask, causal, causalOffset });
            const fused = attentionFused(qq, kk, vv, mask, c);
            const composite = attentionComposite(qq, kk, vv, mask, c);
            expect(relativeError(fused, composite)).toBeLessThan(1e-6);
          }
    }
  });

  it('rejects shapes that do not fit', () => {
    expect(() => scaledDotProductAttention(randn([1, 3, 2, 4]), randn([1, 2, 2, 4]), randn([1, 2, 2, 4]))).toThrow(/multiple/);
    expect(() => scaledDotProductAttention(q, k, v, { mask: mx.ones([sq, sk + 1], 'bool') })).toThrow(/does not broadcast/);
    expect(() => scaledDotProductAttention(q, k, v, { softcap: 1, implementation: 'fused' })).toThrow(/softcap/);
  });
});

const root = onnxNodeTestRoot();
describe('scaledDotProductAttention against the ONNX Attention conformance cases (onnx 1.22)', () => {
  it('the ONNX node suite is there', () => {
    // A suite that skipped itself where the shared data is missing would pass without checking anything.
    expect(
      root,
      'the ONNX node suite (shared/onnx-node-tests/v1.22.0 beside the repository, or ONNX_NODE_TESTS) is missing',
    ).not.toBeNull();
  });
  if (!root) return;
  const toArray = (t: OnnxTensor) =>
    mx.array(t.dataType === 9 ? Uint8Array.from(t.values) : Float32Array.from(t.values), {
      shape: t.dims,
      dtype: t.dataType === 9 ? 'bool' : 'float32',
    });
  const cases = [
    'test_attention_4d',
    'test_attention_4d_causal',
    'test_attention_4d_gqa',
    'test_attention_4d_gqa_causal',
    'test_attention_4d_scaled',
    'test_attention_4d_softcap',
    'test_attention_4d_gqa_softcap',
    'test_attention_4d_diff_heads_sizes',
    'test_attention_4d_attn_mask',
    'test_attention_4d_attn_mask_bool',
    'test_attention_4d_attn_mask_bool_4d',
    'test_attention_4d_attn_mask_3d',
    'test_attention_4d_attn_mask_4d',
    'test_attention_4d_attn_mask_3d_causal',
    'test_attention_4d_attn_mask_4d_causal',
    'test_attention_4d_softcap_neginf_mask',
    'test_attention_4d_softcap_neginf_mask_poison',
    'test_attention_4d_with_past_and_present',
    'test_attention_4d_gqa_with_past_and_present',
    'test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal',
    'test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal',
    'test_attention_4d_diff_heads_mask4d_padded_kv',
  ];
  it.each(cases)('%s', (name) => {
    const c = readNodeCase(root as string, name);
    const byName = new Map(c.inputs.map((t) => [t.name, t]));
    const input = (i: number) => (c.nodeInputs[i] ? byName.get(c.nodeInputs[i]) : undefined);
    const q = toArray(input(0)!);
    let k = toArray(input(1)!);
    let v = toArray(input(2)!);
    let mask = input(3) ? toArray(input(3)!) : null;
    // The past cache precedes the new keys; ONNX's causal offset is its length.
    const past = input(4);
    if (past) {
      k = mx.concatenate([toArray(past), k], 2);
      v = mx.concatenate([toArray(input(5)!), v], 2);
    }
    // nonpad_kv_seqlen (per-batch valid key count) becomes an additive key-padding mask.
    const nonpad = input(6);
    if (nonpad) {
      const sk = k.shape[2];
      const valid = mx.less(
        mx.reshape(mx.arange(sk, undefined, 1, 'int32'), [1, 1, 1, sk]),
        mx.reshape(mx.array(Int32Array.from(nonpad.values)), [nonpad.dims[0], 1, 1, 1]),
      );
      const padding = mx.where(valid, mx.scalar(0, 'float32'), mx.scalar(-Infinity, 'float32'));
      const base = mask
        ? mask.dtype === 'bool'
          ? mx.where(mask, mx.scalar(0, 'float32'), mx.scalar(-Infinity, 'float32'))
          : mask
        : mx.zeros([1, 1, 1, 1]);
      const width = base.shape[base.ndim - 1];
      const padded =
        width < sk && width > 1 ? mx.pad(base, [base.ndim - 1], [0], [sk - width], mx.scalar(-Infinity, 'float32'), 'constant') : base;
      mask = mx.add(padded, padding);
    }
    const out = scaledDotProductAttention(q, k, v, {
      mask,
      causal: c.attributes.is_causal === 1,
      causalOffset: past ? past.dims[2] : 0,
      scale: c.attributes.scale as number | undefined,
      softcap: (c.attributes.softcap as number | undefined) ?? 0,
    });
    const expected = c.outputs[0];
    expect(out.shape).toEqual(expected.dims);
    const got = out.toTypedArray() as Float32Array;
    let err = 0;
    for (let i = 0; i < got.length; i++) err = Math.max(err, Math.abs(got[i] - expected.values[i]) - 1e-3 * Math.abs(expected.values[i]));
    expect(err).toBeLessThan(1e-5);
  });
});

describe('scaledDotProductAttention, one query position on the CPU (the few-rows path)', () => {
  const keepAll = () => true;
  // sk and d not multiples of the vector width; g = 1..4 query heads per key/value head.
  for (const [b, hq, hk, sk, d, dv] of [
    [1, 8, 2, 13, 6, 5],
    [2, 3, 1, 37, 32, 32],
    [1, 2, 2, 1, 9, 3],
    [1, 12, 4, 70, 64, 64],
  ] as const) {
    it(`matches the plain definition: b ${b}, ${hq} heads over ${hk}, ${sk} keys, d ${d}, dv ${dv}`, () => {
      const q = randn([b, hq, 1, d]);
      const k = randn([b, hk, sk, d]);
      const v = randn([b, hk, sk, dv]);
      expect(fewRowsSupports(q, k, v, attentionConfig({}))).toBe(true);
      const scale = 1 / Math.sqrt(d);
      expect(
        maxDiff(attentionFewRows(q, k, v, null, attentionConfig({})), referenceAttention(q, k, v, { scale, keep: keepAll })),
      ).toBeLessThan(1e-5);
      // Causal with the decoding offset (sk − 1: every key visible) and a smaller one.
      for (const causalOffset of [sk - 1, Math.floor(sk / 2)]) {
        const out = scaledDotProductAttention(q, k, v, { causal: true, causalOffset, scale: 0.3 });
        const ref = referenceAttention(q, k, v, { scale: 0.3, keep: (_b, _h, _i, j) => j <= causalOffset });
        expect(maxDiff(out, ref), `offset ${causalOffset}`).toBeLessThan(1e-5);
      }
      // A boolean mask narrower than sk (padded with false), per batch entry; an additive one.
      const width = Math.max(1, sk - 3);
      const keep = mx.greater(uniform([b, 1, 1, width]), 0.3);
      const kl = keep.toList() as boolean[][][][];
      const out = scaledDotProductAttention(q, k, v, { mask: keep, scale });
      const ref = referenceAttention(q, k, v, { scale, keep: (bi, _h, _i, j) => j < width && kl[bi][0][0][j] });
      expect(maxDiff(out, ref)).toBeLessThan(1e-5);
      const bias = mx.multiply(randn([b, hq, 1, sk]), 2);
      const bl = bias.toList() as number[][][][];
      const outBias = scaledDotProductAttention(q, k, v, { mask: bias, scale });
      const refBias = referenceAttention(q, k, v, { scale, keep: keepAll, bias: (bi, h, _i, j) => bl[bi][h][0][j] });
      expect(maxDiff(outBias, refBias)).toBeLessThan(1e-5);
    });
  }

  it('reads K and V as views of a larger cache (strided rows), as decoding with a preallocated cache does', () => {
    const [hq, hk, capacity, total, d] = [4, 1, 40, 23, 16];
    const cacheK = randn([1, hk, capacity, d]);
    const cacheV = randn([1, hk, capacity, d]);
    const k = mx.slice(cacheK, [0, 0, 0, 0], [1, hk, total, d], [1, 1, 1, 1]);
    const v = mx.slice(cacheV, [0, 0, 0, 0], [1, hk, total, d], [1, 1, 1, 1]);
    const q = randn([1, hq, 1, d]);
    const scale = 1 / Math.sqrt(d);
    expect(fewRowsSupports(q, k, v, attentionConfig({}))).toBe(true);
    const out = scaledDotProductAttention(q, k, v, { mask: mx.ones([1, 1, 1, total], 'bool') });
    expect(maxDiff(out, referenceAttention(q, mx.contiguous(k, false), mx.contiguous(v, false), { scale, keep: keepAll }))).toBeLessThan(
      1e-5,
    );
  });

  it('gives zeros, never NaN, for a batch entry that sees no key', () => {
    const [b, hq, hk, sk, d] = [2, 4, 2, 11, 8];
    const q = randn([b, hq, 1, d]);
    const k = randn([b, hk, sk, d]);
    const v = randn([b, hk, sk, d]);
    const keep = mx.logicalAnd(mx.greater(uniform([b, 1, 1, sk]), 0.3), mx.reshape(mx.array([false, true]), [b, 1, 1, 1]));
    const additive = mx.where(keep, mx.scalar(0, 'float32'), mx.scalar(-Infinity, 'float32'));
    for (const mask of [keep, additive]) {
      const out = scaledDotProductAttention(q, k, v, { mask });
      expect(hasNaN(out)).toBe(false);
      expect(maxAbs(mx.slice(out, [0, 0, 0, 0], [1, hq, 1, d], [1, 1, 1, 1]))).toBe(0);
      const kl = keep.toList() as boolean[][][][];
      const ref = referenceAttention(q, k, v, { scale: 1 / Math.sqrt(d), keep: (bi, _h, _i, j) => kl[bi][0][0][j] });
      expect(maxDiff(out, ref)).toBeLessThan(1e-5);
    }
  });

  it('a NaN query stays NaN where rows may be empty (as onnxruntime), an all-masked row stays zero', () => {
    const [b, hq, hk, sk, d] = [2, 2, 1, 7, 8];
    const qv = randn([b, hq, 3, d]);
    // Query row 0 of batch 0, head 0 is NaN; batch 1's row 2 sees no key.
    const nanAt = mx.reshape(mx.equal(mx.arange(0, b * hq * 3 * d, 1), 0), [b, hq, 3, d]);
    const q = mx.where(nanAt, mx.scalar(Number.NaN, 'float32'), qv);
    const k = randn([b, hk, sk, d]);
    const v = randn([b, hk, sk, d]);
    const rowSees = mx.reshape(mx.array([true, true, true, true, true, false]), [b, 1, 3, 1]);
    const keep = mx.logicalAnd(mx.greater(uniform([b, 1, 3, sk]), -1), rowSees);
    for (const implementation of ['auto', 'composite'] as const) {
      const out = scaledDotProductAttention(q, k, v, { mask: keep, implementation });
      const row = (bi: number, h: number, i: number) => mx.slice(out, [bi, h, i, 0], [bi + 1, h + 1, i + 1, d], [1, 1, 1, 1]);
      expect(hasNaN(row(0, 0, 0)), implementation).toBe(true);
      expect(hasNaN(row(0, 0, 1)), implementation).toBe(false);
      expect(maxAbs(row(1, 1, 2)), implementation).toBe(0);
      expect(hasNaN(row(1, 0, 1)), implementation).toBe(false);
    }
  });

  it('rowsNeverEmpty: the same result where every row sees a key, without the zeroing of empty rows', () => {
    const [b, hq, hk, sk, d] = [2, 4, 2, 19, 32];
    const q = randn([b, hq, 1, d]);
    const k = randn([b, hk, sk, d]);
    const v = randn([b, hk, sk, d]);
    // Key sk - 1 (the query's own, in a decode step) always visible.
    const keep = mx.logicalOr(
      mx.greater(uniform([b, 1, 1, sk]), 0.5),
      mx.reshape(mx.greaterEqual(mx.arange(0, sk, 1), sk - 1), [1, 1, 1, sk]),
    );
    const kl = keep.toList() as boolean[][][][];
    const ref = referenceAttention(q, k, v, { scale: 1 / Math.sqrt(d), keep: (bi, _h, _i, j) => kl[bi][0][0][j] });
    for (const implementation of ['auto', 'composite'] as const) {
      const out = scaledDotProductAttention(q, k, v, { mask: keep, rowsNeverEmpty: true, implementation });
      expect(maxDiff(out, ref), implementation).toBeLessThan(1e-5);
    }
    // The promise broken: the empty batch entry is NaN (the softmax of −∞ alone), not zeros.
    const none = mx.logicalAnd(keep, mx.reshape(mx.array([false, true]), [b, 1, 1, 1]));
    const out = scaledDotProductAttention(q, k, v, { mask: none, rowsNeverEmpty: true });
    expect(hasNaN(mx.slice(out, [0, 0, 0, 0], [1, hq, 1, d], [1, 1, 1, 1]))).toBe(true);
    expect(hasNaN(mx.slice(out, [1, 0, 0, 0], [2, hq, 1, d], [1, 1, 1, 1]))).toBe(false);
  });

  it("'auto' on the CPU in float32 (the native kernel) for several rows: grouped heads, causal after a past, a rank-2 additive mask narrower than the keys", () => {
    const [b, hq, hk, sq, sk, d] = [2, 4, 2, 13, 17, 16];
    const q = randn([b, hq, sq, d]);
    const k = randn([b, hk, sk, d]);
    const v = randn([b, hk, sk, d]);
    const bias = mx.multiply(uniform([sq, 15]), 2);
    const bl = bias.toList() as number[][];
    const ref = referenceAttention(q, k, v, {
      scale: 0.3,
      keep: (_b, _h, i, j) => j <= i + 4 && j < 15,
      bias: (_b, _h, i, j) => bl[i][j],
    });
    const out = scaledDotProductAttention(q, k, v, { scale: 0.3, causal: true, causalOffset: 4, mask: bias });
    expect(mx.defaultStream().device.type).toBe('cpu');
    expect(maxDiff(out, ref)).toBeLessThan(1e-5);
    const composite = scaledDotProductAttention(q, k, v, {
      scale: 0.3,
      causal: true,
      causalOffset: 4,
      mask: bias,
      implementation: 'composite',
    });
    expect(maxDiff(composite, ref)).toBeLessThan(1e-5);
  });

  it('is not taken for more than 4 query heads per key/value head, several query positions, softcap or other dtypes', () => {
    const k = randn([1, 1, 5, 8]);
    const v = randn([1, 1, 5, 8]);
    const c = attentionConfig({});
    expect(fewRowsSupports(randn([1, 4, 1, 8]), k, v, c)).toBe(true);
    expect(fewRowsSupports(randn([1, 5, 1, 8]), k, v, c)).toBe(false);
    expect(fewRowsSupports(randn([1, 2, 2, 8]), k, v, c)).toBe(false);
    expect(fewRowsSupports(randn([1, 2, 1, 8]), k, v, attentionConfig({ softcap: 2 }))).toBe(false);
    expect(fewRowsSupports(mx.astype(randn([1, 2, 1, 8]), 'float16'), mx.astype(k, 'float16'), mx.astype(v, 'float16'), c)).toBe(false);
    // The fallbacks still agree with the definition.
    const q5 = randn([1, 5, 1, 8]);
    const ref = referenceAttention(q5, k, v, { scale: 1 / Math.sqrt(8), keep: keepAll });
    expect(maxDiff(scaledDotProductAttention(q5, k, v), ref)).toBeLessThan(1e-5);
  });
});

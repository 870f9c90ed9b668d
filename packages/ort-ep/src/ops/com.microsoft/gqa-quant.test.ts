// GroupQueryAttention with a quantized KV cache (int8, and 4-bit two to a uint8; PER_TENSOR and
// PER_CHANNEL scales) against onnxruntime-node's CPU kernel: the output and the present caches'
// bytes (compared exactly: they are integers), on a first prompt, decode steps with a past of
// ragged lengths, rotary, a local window and a shared buffer.
import { describe, expect, it } from 'vitest';
import { model, node, v, type ElemName, type NodeSpec } from '../../../test/helpers/build.js';
import { expectSameAsOrt, f32, ort, seeded, type Feeds, type OrtTensor, randomF32 as rand, i32 } from '../../../test/helpers/ort.js';
import { cacheScales, clearRowsFrom } from '../../../test/helpers/kv-cache.js';
import { MlxSession } from '../../session.js';

const MS = 'com.microsoft';
const N = 4,
  Nkv = 2,
  H = 16;
const tol = { rtol: 1e-4, atol: 1e-5 };

/** Random cache bytes: int8 in [-100, 100], or any byte for the 4-bit cache. */
function cacheBytes(bits: number, dims: number[], seed: number): OrtTensor {
  const n = dims.reduce((a, b) => a * b, 1);
  const u = seeded(n, seed).map((x) => (x + 1) / 2);
  return bits === 8
    ? new ort.Tensor(
        'int8',
        Int8Array.from(u, (x) => Math.round(x * 200 - 100)),
        dims,
      )
    : new ort.Tensor(
        'uint8',
        Uint8Array.from(u, (x) => Math.min(255, Math.floor(x * 256))),
        dims,
      );
}

interface Q {
  bits: 8 | 4;
  quant: 'PER_TENSOR' | 'PER_CHANNEL';
  B: number;
  S: number;
  /** Past cache length (0: a first prompt, with an empty past that carries the cache type). */
  past: number;
  lens: number[];
  rotary?: boolean;
  attrs?: NodeSpec['attrs'];
}

const maxPos = 32;
const table = (fn: (x: number) => number) =>
  f32(
    Array.from({ length: maxPos * (H / 2) }, (_, i) => fn(Math.floor(i / (H / 2)) / 10000 ** ((2 * (i % (H / 2))) / H))),
    [maxPos, H / 2],
  );

function caseOf(c: Q): [Uint8Array, Feeds] {
  const total = Math.max(...c.lens);
  const packedH = c.bits === 4 ? H / 2 : H;
  const scales = (seed: number) => cacheScales(c.quant, Nkv, H, seed, c.bits === 8 ? 0.012 : 0.15);
  // A buffer longer than the cached rows holds zeros after them (as a generation loop's buffer
  // does): the present keeps the buffer's rows there, where onnxruntime, given two buffers, writes zeros.
  const past = (seed: number) => {
    const t = cacheBytes(c.bits, [c.B, Nkv, c.past, packedH], seed);
    clearRowsFrom(
      t.data as Int8Array | Uint8Array,
      t.dims,
      c.lens.map((l) => l - c.S),
    );
    return t;
  };
  const feeds: Record<string, OrtTensor | undefined> = {
    q: rand([c.B, c.S, N * H], 11),
    k: rand([c.B, c.S, Nkv * H], 12),
    val: rand([c.B, c.S, Nkv * H], 13),
    pk: past(14),
    pv: past(15),
    sl: i32(c.lens.map((l) => l - 1)),
    tl: i32([total], []),
    cos: c.rotary ? table(Math.cos) : undefined,
    sin: c.rotary ? table(Math.sin) : undefined,
    ks: scales(16),
    vs: scales(17),
  };
  const inputs = ['q', 'k', 'val', 'pk', 'pv', 'sl', 'tl', c.rotary ? 'cos' : '', c.rotary ? 'sin' : '', '', '', '', 'ks', 'vs'];
  const given = Object.fromEntries(Object.entries(feeds).filter(([, t]) => t)) as Feeds;
  const cacheType: ElemName = c.bits === 8 ? 'int8' : 'uint8';
  const bytes = model({
    opsets: { '': 17, [MS]: 1 },
    inputs: Object.entries(given).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    outputs: [v('y', 'float32'), v('present_k', cacheType), v('present_v', cacheType)],
    nodes: [
      node('GroupQueryAttention', inputs, ['y', 'present_k', 'present_v'], {
        domain: MS,
        attrs: {
          num_heads: N,
          kv_num_heads: Nkv,
          k_quant_type: c.quant,
          v_quant_type: c.quant,
          kv_cache_bit_width: c.bits,
          ...(c.rotary ? { do_rotary: 1 } : {}),
          ...c.attrs,
        },
      }),
    ],
  });
  return [bytes, given];
}

describe('GroupQueryAttention with a quantized KV cache, against onnxruntime-node', () => {
  for (const bits of [8, 4] as const)
    for (const quant of ['PER_TENSOR', 'PER_CHANNEL'] as const) {
      const name = `${bits}-bit ${quant}`;
      it(`${name}: decode step, one sequence`, () => expectSameAsOrt(...caseOf({ bits, quant, B: 1, S: 1, past: 5, lens: [6] }), tol));
      it(`${name}: decode step, two sequences of different lengths, rotary`, () =>
        expectSameAsOrt(...caseOf({ bits, quant, B: 2, S: 1, past: 5, lens: [6, 4], rotary: true }), tol));
      it(`${name}: first prompt, empty past`, () => expectSameAsOrt(...caseOf({ bits, quant, B: 1, S: 4, past: 0, lens: [4] }), tol));
    }
  it('8-bit: a shared buffer longer than the sequence, local window', () =>
    expectSameAsOrt(...caseOf({ bits: 8, quant: 'PER_CHANNEL', B: 1, S: 1, past: 8, lens: [6], attrs: { local_window_size: 3 } }), tol));
  it('4-bit: a chunk of three new tokens after a past', () =>
    expectSameAsOrt(...caseOf({ bits: 4, quant: 'PER_TENSOR', B: 1, S: 3, past: 4, lens: [7], rotary: true }), tol));
});

describe('GroupQueryAttention quantized cache: what is declined', () => {
  it('one side quantized, a bad bit width or no past is declined with the reason', () => {
    const [bytes] = caseOf({ bits: 8, quant: 'PER_TENSOR', B: 1, S: 1, past: 5, lens: [6], attrs: { v_quant_type: 'NONE' } });
    expect(() => MlxSession.createSync(bytes, { fallback: 'none' })).toThrow(/only one of K and V quantized/);
    const [bad] = caseOf({ bits: 8, quant: 'PER_TENSOR', B: 1, S: 1, past: 5, lens: [6], attrs: { kv_cache_bit_width: 2 } });
    expect(() => MlxSession.createSync(bad, { fallback: 'none' })).toThrow(/kv_cache_bit_width 2/);
    const noPast = model({
      opsets: { '': 17, [MS]: 1 },
      inputs: [
        v('q', 'float32', [1, 1, N * H]),
        v('k', 'float32', [1, 1, Nkv * H]),
        v('val', 'float32', [1, 1, Nkv * H]),
        v('sl', 'int32', [1]),
        v('tl', 'int32', []),
        v('ks', 'float32', [1]),
        v('vs', 'float32', [1]),
      ],
      outputs: [v('y', 'float32')],
      nodes: [
        node('GroupQueryAttention', ['q', 'k', 'val', '', '', 'sl', 'tl', '', '', '', '', '', 'ks', 'vs'], ['y'], {
          domain: MS,
          attrs: { num_heads: N, kv_num_heads: Nkv, k_quant_type: 'PER_TENSOR', v_quant_type: 'PER_TENSOR' },
        }),
      ],
    });
    expect(() => MlxSession.createSync(noPast, { fallback: 'none' })).toThrow(/needs past_key/);
  });
});

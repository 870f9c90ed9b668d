// GroupQueryAttention's first prompt with seqlens_k computed on the device from an attention mask
// (genai's and the decoder helper's derivation: ReduceSum(mask) - 1), into a shared buffer
// (kvCapacity) or an empty growing cache: right-padded batches, rotary, a local window, packed or
// separate projections, against onnxruntime-node's CPU provider; and the run traced whole (one
// native call when warm) rather than split at a read of seqlens_k on the host.
import { describe, expect, it } from 'vitest';
import { MlxSession, type HostTensor } from '../../index.js';
import { model, node, v } from '../../../test/helpers/build.js';
import { expectSameOutputs, f32, type Feeds, i64, type OrtTensor, randomF32 as rand, runOn } from '../../../test/helpers/ort.js';

const MS = 'com.microsoft';
const N = 4;
const Nkv = 2;
const H = 16; // onnxruntime's rotary needs head_size % 16 == 0
const maxPos = 32;

interface Case {
  B: number;
  S: number;
  /** Each entry's tokens (right padding past them). */
  lens: number[];
  /** Rows of the past buffers: a shared buffer (at least S), or 0 (an empty growing cache). */
  capacity: number;
  rotary?: boolean;
  packed?: boolean;
  window?: number;
}

function caseOf(c: Case): [Uint8Array, Feeds] {
  const table = (fn: (x: number) => number) =>
    Array.from({ length: maxPos * (H / 2) }, (_, i) => fn(Math.floor(i / (H / 2)) / 10000 ** ((2 * (i % (H / 2))) / H)));
  const mask = c.lens.flatMap((l) => Array.from({ length: c.S }, (_, j) => (j < l ? 1 : 0)));
  const feeds: Record<string, OrtTensor> = {
    q: rand([c.B, c.S, (c.packed ? N + 2 * Nkv : N) * H], 31),
    mask: i64(mask, [c.B, c.S]),
    // A fresh buffer holds zeros (onnxruntime's kernel, given two buffers, writes zeros past the
    // new rows; this provider keeps the buffer's rows there, as a shared buffer is).
    pk: f32(new Array(c.B * Nkv * c.capacity * H).fill(0), [c.B, Nkv, c.capacity, H]),
    pv: f32(new Array(c.B * Nkv * c.capacity * H).fill(0), [c.B, Nkv, c.capacity, H]),
  };
  if (!c.packed) {
    feeds.k = rand([c.B, c.S, Nkv * H], 32);
    feeds.val = rand([c.B, c.S, Nkv * H], 33);
  }
  const bytes = model({
    opsets: { '': 17, [MS]: 1 },
    inputs: Object.entries(feeds).map(([name, t]) => v(name, t.type as 'float32' | 'int64', [...t.dims])),
    outputs: ['y', 'present_k', 'present_v'].map((o) => v(o, 'float32')),
    initializers: [
      { name: 'axis1', type: 'int64', dims: [1], values: [1n] },
      { name: 'one', type: 'int64', dims: [], values: [1n] },
      { name: 'axis0', type: 'int64', dims: [1], values: [0n] },
      { name: 'cos', type: 'float32', dims: [maxPos, H / 2], values: table(Math.cos) },
      { name: 'sin', type: 'float32', dims: [maxPos, H / 2], values: table(Math.sin) },
    ],
    nodes: [
      node('ReduceSum', ['mask', 'axis1'], ['count'], { attrs: { keepdims: 0 } }),
      node('Sub', ['count', 'one'], ['last']),
      node('Cast', ['last'], ['seqlens'], { attrs: { to: 6 } }),
      node('Shape', ['mask'], ['mask_shape'], { attrs: { start: 1, end: 2 } }),
      node('Squeeze', ['mask_shape', 'axis0'], ['total64']),
      node('Cast', ['total64'], ['total'], { attrs: { to: 6 } }),
      node(
        'GroupQueryAttention',
        ['q', c.packed ? '' : 'k', c.packed ? '' : 'val', 'pk', 'pv', 'seqlens', 'total', ...(c.rotary ? ['cos', 'sin'] : [])],
        ['y', 'present_k', 'present_v'],
        {
          domain: MS,
          attrs: {
            num_heads: N,
            kv_num_heads: Nkv,
            ...(c.rotary ? { do_rotary: 1 } : {}),
            ...(c.window ? { local_window_size: c.window } : {}),
          },
        },
      ),
    ],
  });
  return [bytes, feeds];
}

const host = (t: OrtTensor): HostTensor =>
  ({ dtype: t.type === 'int64' ? 7 : 1, dims: [...t.dims], data: t.data }) as unknown as HostTensor;

async function check(c: Case): Promise<void> {
  const [bytes, feeds] = caseOf(c);
  const want = await runOn('cpu', bytes, feeds);
  const s = await MlxSession.create(bytes, { device: 'cpu' });
  try {
    const hostFeeds = Object.fromEntries(Object.entries(feeds).map(([n, t]) => [n, host(t)]));
    for (let r = 0; r < 3; r++) {
      const have = s.runSync(hostFeeds) as Record<string, HostTensor>;
      const asOrt = Object.fromEntries(
        Object.entries(have).map(([n, t]) => [n, { type: 'float32', dims: t.dims, data: t.data } as unknown as OrtTensor]),
      );
      expectSameOutputs(asOrt, want, { rtol: 1e-4, atol: 1e-5 });
    }
    // seqlens_k stays on the device: the prompt's graph is one traced segment, replayed in one call.
    expect(s.describeSignatures()).toEqual([expect.objectContaining({ segments: 1, steps: 0, oneCall: true })]);
  } finally {
    s.release();
  }
}

describe('GroupQueryAttention: a first prompt with seqlens_k on the device', () => {
  it('shared buffer, right-padded batch, rotary', () => check({ B: 3, S: 5, lens: [5, 3, 1], capacity: 9, rotary: true }));
  it('shared buffer, packed QKV, a local window (padding rows that see no key)', () =>
    check({ B: 2, S: 6, lens: [6, 2], capacity: 6, packed: true, window: 2 }));
  it('empty growing cache, right-padded batch, rotary, packed QKV', () =>
    check({ B: 2, S: 4, lens: [2, 4], capacity: 0, rotary: true, packed: true }));
  it('empty growing cache, one sequence, a window', () => check({ B: 1, S: 7, lens: [7], capacity: 0, window: 3 }));
});

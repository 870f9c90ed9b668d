// com.microsoft Attention and GroupQueryAttention against onnxruntime-node's CPU provider.
import { describe, expect, it } from 'vitest';
import { model, node, v, type ElemName, type NodeSpec } from '../../../test/helpers/build.js';
import {
  expectSameAsOrt,
  f32,
  plain,
  runOn,
  seeded,
  type Feeds,
  type OrtTensor,
  randomF32 as rand,
  i32,
} from '../../../test/helpers/ort.js';

const MS = 'com.microsoft';
const tol = { rtol: 1e-4, atol: 1e-5 };

function single(
  op: string,
  feeds: Record<string, OrtTensor | undefined>,
  inputs: string[],
  outputs: string[],
  attrs: NodeSpec['attrs'],
): [Uint8Array, Feeds] {
  const given = Object.fromEntries(Object.entries(feeds).filter(([, t]) => t)) as Feeds;
  const bytes = model({
    opsets: { '': 17, [MS]: 1 },
    inputs: Object.entries(given).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    outputs: outputs.filter((o) => o).map((o) => v(o, 'float32')),
    nodes: [node(op, inputs, outputs, { domain: MS, attrs })],
  });
  return [bytes, given];
}

describe('Attention', () => {
  const B = 2,
    S = 4,
    Hin = 8,
    N = 2,
    hidden = 8;
  const x = rand([B, S, Hin], 1);
  const w = rand([Hin, 3 * hidden], 2, 0.5);
  const bias = rand([3 * hidden], 3, 0.2);
  const run = (feeds: Record<string, OrtTensor | undefined>, attrs: NodeSpec['attrs'] = {}, outputs = ['y']) => {
    const inputs = ['x', 'w', 'bias', feeds.mask ? 'mask' : '', feeds.past ? 'past' : '', feeds.ab ? 'ab' : ''];
    while (inputs.at(-1) === '') inputs.pop();
    const [bytes, given] = single('Attention', { x, w, bias, ...feeds }, inputs, outputs, { num_heads: N, ...attrs });
    return expectSameAsOrt(bytes, given, tol);
  };
  it('no mask', () => run({}));
  it('raw 2-D mask', () => run({ mask: i32([1, 1, 1, 0, 1, 1, 0, 0], [B, S]) }));
  it('right-padding lengths', () => run({ mask: i32([3, 2]) }));
  it('left padding: ends then starts', () => run({ mask: i32([4, 4, 1, 2]) }));
  it('3-D mask', () =>
    run({
      mask: i32(
        seeded(B * S * S, 4)
          .map((r) => (r > -0.5 ? 1 : 0))
          .map((m, i) => (i % S === 0 ? 1 : m)),
        [B, S, S],
      ),
    }));
  it('unidirectional with past and present', () =>
    run({ past: rand([2, B, N, 3, hidden / N], 5) }, { unidirectional: 1 }, ['y', 'present']));
  it('attention_bias and a custom scale', () => run({ ab: rand([1, N, S, S], 6) }, { scale: 0.3 }));
  // (onnxruntime's CPU kernel needs the bias input: without it the process aborts.)
  it('qkv_hidden_sizes with a wider V', () => {
    const w2 = rand([Hin, 8 + 8 + 16], 7, 0.5);
    const b2 = rand([32], 8, 0.2);
    const [bytes, given] = single('Attention', { x, w2, b2 }, ['x', 'w2', 'b2'], ['y'], { num_heads: N, qkv_hidden_sizes: [8, 8, 16] });
    return expectSameAsOrt(bytes, given, tol);
  });
});

describe('GroupQueryAttention', () => {
  const N = 4,
    Nkv = 2,
    H = 16; // onnxruntime's rotary needs head_size % 16 == 0
  const maxPos = 32;
  const cache = (fn: (x: number) => number) =>
    f32(
      Array.from({ length: maxPos * (H / 2) }, (_, i) => fn(Math.floor(i / (H / 2)) / 10000 ** ((2 * (i % (H / 2))) / H))),
      [maxPos, H / 2],
    );
  const cos = cache(Math.cos);
  const sin = cache(Math.sin);
  interface G {
    B: number;
    S: number;
    past: number;
    lens: number[];
    rotary?: boolean;
    packed?: boolean;
    attrs?: NodeSpec['attrs'];
    shared?: number;
    /** Request output_qk (attribute qk_output set in attrs). */
    qk?: boolean;
    /** Further inputs by position: attention_bias 10, head_sink 11, q_norm_weight 14, k_norm_weight 15. */
    extra?: Record<number, [string, OrtTensor]>;
  }
  // A shared buffer holds zeros past each entry's cached rows (as a generation loop's buffer does):
  // the present keeps the buffer's rows there, where onnxruntime's kernel, given two buffers, writes zeros.
  const pastOf = (c: G, len: number, seed: number) => {
    const t = rand([c.B, Nkv, len, H], seed);
    if (c.shared === undefined) return t;
    const data = t.data as Float32Array;
    for (let b = 0; b < c.B; b++)
      for (let n = 0; n < Nkv; n++)
        for (let r = c.lens[b] - c.S; r < len; r++) data.fill(0, ((b * Nkv + n) * len + r) * H, ((b * Nkv + n) * len + r + 1) * H);
    return t;
  };
  const caseOf = (c: G): [Uint8Array, Feeds] => {
    const total = Math.max(...c.lens);
    const pastLen = c.shared ?? c.past;
    const feeds: Record<string, OrtTensor | undefined> = {
      q: rand([c.B, c.S, c.packed ? (N + 2 * Nkv) * H : N * H], 11),
      k: c.packed ? undefined : rand([c.B, c.S, Nkv * H], 12),
      val: c.packed ? undefined : rand([c.B, c.S, Nkv * H], 13),
      pk: pastLen ? pastOf(c, pastLen, 14) : undefined,
      pv: pastLen ? pastOf(c, pastLen, 15) : undefined,
      sl: i32(c.lens.map((l) => l - 1)),
      tl: i32([total], []),
      cos: c.rotary ? cos : undefined,
      sin: c.rotary ? sin : undefined,
    };
    const inputs = [
      'q',
      c.packed ? '' : 'k',
      c.packed ? '' : 'val',
      pastLen ? 'pk' : '',
      pastLen ? 'pv' : '',
      'sl',
      'tl',
      ...(c.rotary ? ['cos', 'sin'] : []),
    ];
    for (const [at, [name, t]] of Object.entries(c.extra ?? {})) {
      while (inputs.length < Number(at)) inputs.push('');
      inputs[Number(at)] = name;
      feeds[name] = t;
    }
    const [bytes, given] = single('GroupQueryAttention', feeds, inputs, ['y', 'present_k', 'present_v', ...(c.qk ? ['qk'] : [])], {
      num_heads: N,
      kv_num_heads: Nkv,
      ...(c.rotary ? { do_rotary: 1 } : {}),
      ...c.attrs,
    });
    return [bytes, given];
  };
  const run = (c: G) => expectSameAsOrt(...caseOf(c), tol);
  // onnxruntime's CPU kernel has no Q/K norms: it runs the same case on Q and K normalised here
  // (float64 RMSNorm of each head's H values, times the weight), which is what the norms do
  // before rotary and the cache.
  async function sameAsPreNormed(c: G, eps: number) {
    const qn = rand([H], 19);
    const kn = rand([H], 20);
    const attrs = eps === 1e-6 ? c.attrs : { ...c.attrs, qk_norm_epsilon: { f: eps } }; // 1e-6: the default
    const [bytes, feeds] = caseOf({ ...c, attrs, extra: { 14: ['qn', qn], 15: ['kn', kn] } });
    const [refBytes, refFeeds] = caseOf(c);
    const normed = (t: OrtTensor, weightOf: (head: number) => Float32Array | undefined, heads: number) => {
      const x = Float64Array.from(t.data as Float32Array);
      for (let chunk = 0; chunk < x.length / H; chunk++) {
        const w = weightOf(chunk % heads);
        if (!w) continue;
        let ss = 0;
        for (let h = 0; h < H; h++) ss += x[chunk * H + h] ** 2;
        const inv = 1 / Math.sqrt(ss / H + eps);
        for (let h = 0; h < H; h++) x[chunk * H + h] *= inv * w[h];
      }
      return f32(Array.from(x), [...t.dims]);
    };
    const [qw, kw] = [qn.data as Float32Array, kn.data as Float32Array];
    if (c.packed) refFeeds.q = normed(refFeeds.q, (n) => (n < N ? qw : n < N + Nkv ? kw : undefined), N + 2 * Nkv);
    else {
      refFeeds.q = normed(refFeeds.q, () => qw, N);
      refFeeds.k = normed(refFeeds.k, () => kw, Nkv);
    }
    const have = await runOn('mlx', bytes, feeds);
    const want = await runOn('cpu', refBytes, refFeeds);
    for (const name of Object.keys(want)) {
      const [a, b] = [plain(have[name]), plain(want[name])];
      expect(a.length).toBe(b.length);
      const bad = a.findIndex((x, i) => !(Math.abs(x - b[i]) <= tol.atol + tol.rtol * Math.abs(b[i])));
      expect(bad === -1 ? 'ok' : `${name}[${bad}]: mlx ${a[bad]} vs onnxruntime ${b[bad]}`).toBe('ok');
    }
  }
  it('prompt, no past', () => run({ B: 2, S: 5, past: 0, lens: [5, 5] }));
  it('right-padded prompt with rotary', () => run({ B: 2, S: 5, past: 0, lens: [5, 3], rotary: true }));
  it('bidirectional (causal 0) prompt', () => run({ B: 1, S: 4, past: 0, lens: [4], attrs: { causal: 0 } }));
  it('prompt with rotary, packed QKV', () => run({ B: 1, S: 6, past: 0, lens: [6], rotary: true, packed: true }));
  it('decode step with past', () => run({ B: 2, S: 1, past: 4, lens: [5, 5] }));
  it('decode step with rotary and ragged lengths in a shared buffer', () =>
    run({ B: 2, S: 1, past: 0, shared: 8, lens: [6, 4], rotary: true }));
  // One sequence in a shared buffer: the lengths stay on the device (a dynamic slice update).
  it('one sequence, decode step in a shared buffer, rotary', () => run({ B: 1, S: 1, past: 0, shared: 8, lens: [6], rotary: true }));
  it('one sequence, two new tokens in a shared buffer, local window and softcap', () =>
    run({ B: 1, S: 2, past: 0, shared: 10, lens: [7], rotary: true, attrs: { local_window_size: 3, softcap: 2.5 } }));
  it('local window and softcap', () => run({ B: 1, S: 7, past: 0, lens: [7], attrs: { local_window_size: 3, softcap: 2.5 } }));
  it('interleaved rotary, decode', () => run({ B: 1, S: 1, past: 5, lens: [6], rotary: true, attrs: { rotary_interleaved: 1 } }));
  // A growing cache fed whole (past T rows, every token visible) for one sequence runs as the
  // shared-buffer step over the past grown by S rows: the same results as the general path's.
  it('one sequence, a growing past: decode step', () => run({ B: 1, S: 1, past: 6, lens: [7] }));
  it('one sequence, a growing past: three new tokens with rotary', () => run({ B: 1, S: 3, past: 4, lens: [7], rotary: true }));
  it('one sequence, a growing past: local window and softcap', () =>
    run({ B: 1, S: 1, past: 6, lens: [7], rotary: true, attrs: { local_window_size: 3, softcap: 2.5 } }));
  it('sliding window over the past KV: decode steps with ragged lengths', () =>
    run({ B: 2, S: 1, past: 6, lens: [7, 5], attrs: { local_window_size: 3 } }));
  it('sliding window over the past KV: a prompt chunk after cached tokens, with rotary', () =>
    run({ B: 1, S: 3, past: 4, lens: [7], rotary: true, attrs: { local_window_size: 4 } }));
  it('smooth_softmax, prompt and decode with past', async () => {
    await run({ B: 2, S: 5, past: 0, lens: [5, 4], attrs: { smooth_softmax: 1 } });
    await run({ B: 2, S: 1, past: 4, lens: [5, 3], attrs: { smooth_softmax: 1 } });
  });
  it('head_sink per head, with softcap and a sliding window over the past', () =>
    run({
      B: 1,
      S: 2,
      past: 5,
      lens: [7],
      attrs: { softcap: { f: 3 }, local_window_size: 4 },
      extra: { 11: ['sink', rand([N], 16, 2)] },
    }));
  it('head_sink on a prompt with attention_bias', () =>
    run({
      B: 1,
      S: 4,
      past: 0,
      lens: [4],
      extra: { 10: ['ab', rand([1, N, 4, 4], 17)], 11: ['sink', rand([N], 18, 2)] },
    }));
  it('q_norm/k_norm (per-head RMSNorm) before rotary, decode with past', () =>
    sameAsPreNormed({ B: 2, S: 1, past: 3, lens: [4, 4], rotary: true }, 1e-5));
  it('q_norm/k_norm on a packed prompt, default epsilon', () => sameAsPreNormed({ B: 1, S: 4, past: 0, lens: [4], packed: true }, 1e-6));
  it('output_qk before softmax (qk_output 1), decode with past', () =>
    run({ B: 2, S: 1, past: 4, lens: [5, 5], qk: true, attrs: { qk_output: 1 } }));
  // (With ragged lengths onnxruntime leaves output_qk unwritten past each entry's length: no
  // reference there.)
  it('output_qk after softmax (qk_output 2), a prompt with a window', () =>
    run({ B: 1, S: 4, past: 0, lens: [4], qk: true, attrs: { qk_output: 2, local_window_size: 2 } }));
});

// GroupQueryAttention with sliding_window_cache: past and present are buffers of local_window_size
// rows that keep a sequence's last tokens, as a generation loop feeds them back. Each loop runs a
// prompt (shorter or longer than the window), then decode steps or chunks well past the window,
// on onnxruntime-node and on MLX (compiled, then eager), and compares every step's output and
// present. Then what is refused, with onnxruntime's messages where it has them.
import { describe, expect, it } from 'vitest';
import { RefusedNodeError } from '../../errors.js';
import { summarizePartitions } from '../../plan/partition.js';
import { prepareModel } from '../../plan/prepare.js';
import { model, node, v, type NodeSpec } from '../../../test/helpers/build.js';
import { f32, i32, ort, outcome, plain, randomF32 as rand, type Feeds, type OrtTensor } from '../../../test/helpers/ort.js';

const MS = 'com.microsoft';
const H = 16;
const Nkv = 2;
const maxPos = 40;
const tol = { rtol: 1e-4, atol: 1e-5 };
const table = (fn: (x: number) => number) =>
  f32(
    Array.from({ length: maxPos * (H / 2) }, (_, i) => fn(Math.floor(i / (H / 2)) / 10000 ** ((2 * (i % (H / 2))) / H))),
    [maxPos, H / 2],
  );

interface Loop {
  B: number;
  /** Query heads a KV head; 2 unless given. */
  ratio?: number;
  /** Tokens each entry has cached before the prompt (random rows in the buffers); none unless given. */
  cached?: number[];
  /** The first step's new tokens. */
  prompt: number;
  steps: number;
  /** New tokens a step after the prompt; 1 unless given. */
  stepTokens?: number;
  window: number;
  /** Rows of the buffers; the window unless given. */
  capacity?: number;
  rotary?: boolean;
  softcap?: number;
  smoothSoftmax?: boolean;
}

const headsOf = (c: Loop) => Nkv * (c.ratio ?? 2);

function gqa(c: Loop, attrs: NodeSpec['attrs'] = {}): Uint8Array {
  const N = headsOf(c);
  const inputs = ['q', 'k', 'val', 'pk', 'pv', 'sl', 'tl', ...(c.rotary ? ['cos', 'sin'] : [])];
  return model({
    opsets: { '': 17, [MS]: 1 },
    inputs: [
      v('q', 'float32', [c.B, 'S', N * H]),
      v('k', 'float32', [c.B, 'S', Nkv * H]),
      v('val', 'float32', [c.B, 'S', Nkv * H]),
      v('pk', 'float32', [c.B, Nkv, 'P', H]),
      v('pv', 'float32', [c.B, Nkv, 'P', H]),
      v('sl', 'int32', [c.B]),
      v('tl', 'int32', []),
      ...(c.rotary ? [v('cos', 'float32', [maxPos, H / 2]), v('sin', 'float32', [maxPos, H / 2])] : []),
    ],
    outputs: [v('y', 'float32'), v('present_k', 'float32'), v('present_v', 'float32')],
    nodes: [
      node('GroupQueryAttention', inputs, ['y', 'present_k', 'present_v'], {
        name: 'gqa',
        domain: MS,
        attrs: {
          num_heads: N,
          kv_num_heads: Nkv,
          local_window_size: c.window,
          sliding_window_cache: 1,
          ...(c.rotary ? { do_rotary: 1 } : {}),
          ...(c.softcap ? { softcap: { f: c.softcap } } : {}),
          ...(c.smoothSoftmax ? { smooth_softmax: 1 } : {}),
          ...attrs,
        },
      }),
    ],
  });
}

/** The first past buffer: each entry's cached rows (up to the capacity) random, the rest zeros. */
function firstPast(c: Loop, seed: number): OrtTensor {
  const rows = c.capacity ?? c.window;
  const t = rand([c.B, Nkv, rows, H], seed);
  const data = t.data as Float32Array;
  for (let b = 0; b < c.B; b++)
    for (let n = 0; n < Nkv; n++) {
      const from = ((b * Nkv + n) * rows + Math.min(c.cached?.[b] ?? 0, rows)) * H;
      data.fill(0, from, ((b * Nkv + n) * rows + rows) * H);
    }
  return t;
}
const cachedOf = (c: Loop) => c.cached ?? new Array(c.B).fill(0);

/** The feeds of step `step`, given the entries' lengths after it and the past buffers. */
function stepFeeds(c: Loop, step: number, lens: number[], pk: OrtTensor, pv: OrtTensor): Feeds {
  const N = headsOf(c);
  const S = step ? (c.stepTokens ?? 1) : c.prompt;
  const feeds: Feeds = {
    q: rand([c.B, S, N * H], 100 + step),
    k: rand([c.B, S, Nkv * H], 200 + step),
    val: rand([c.B, S, Nkv * H], 300 + step),
    pk,
    pv,
    sl: i32(lens.map((l) => l - 1)),
    tl: i32([Math.max(...lens)], []),
  };
  if (c.rotary) Object.assign(feeds, { cos: table(Math.cos), sin: table(Math.sin) });
  return feeds;
}

/** Runs the loop on one engine; returns each step's outputs. */
async function generate(c: Loop, provider: 'cpu' | 'mlx', compiled = true): Promise<Record<string, OrtTensor>[]> {
  const session = await ort.InferenceSession.create(gqa(c), {
    executionProviders: provider === 'cpu' ? ['cpu'] : [{ name: 'mlx', device: 'cpu', compiled } as never],
  });
  try {
    let [pk, pv] = [firstPast(c, 14), firstPast(c, 15)];
    let lens = cachedOf(c).map((n) => n + c.prompt);
    const out: Record<string, OrtTensor>[] = [];
    for (let step = 0; step <= c.steps; step++) {
      const r = await session.run(stepFeeds(c, step, lens, pk, pv));
      out.push(r);
      pk = r.present_k;
      pv = r.present_v;
      lens = lens.map((l) => l + (c.stepTokens ?? 1));
    }
    return out;
  } finally {
    await session.release();
  }
}

function expectClose(have: OrtTensor, want: OrtTensor, what: string, skip: (i: number) => boolean = () => false) {
  expect([...have.dims]).toEqual([...want.dims]);
  const [a, b] = [plain(have), plain(want)];
  const bad = a.findIndex((x, i) => !skip(i) && !(Math.abs(x - b[i]) <= tol.atol + tol.rtol * Math.abs(b[i])));
  expect(bad === -1 ? 'ok' : `${what}[${bad}]: mlx ${a[bad]} vs onnxruntime ${b[bad]}`).toBe('ok');
}

async function expectLoopSame(c: Loop) {
  expect(summarizePartitions(prepareModel(gqa(c)).plan).fallbackNodes).toEqual([]);
  const want = await generate(c, 'cpu');
  // The present holds min(cached + new, capacity) tokens of each entry; onnxruntime leaves the
  // rows after them unwritten (NaN or leftovers: no reference there).
  const C = c.capacity ?? c.window;
  const unwritten = (step: number) => {
    const St = c.stepTokens ?? 1;
    const held = cachedOf(c).map((n) => {
      const cached = step === 0 ? n : n + c.prompt + (step - 1) * St;
      return Math.min(Math.min(cached, C) + (step === 0 ? c.prompt : St), C);
    });
    return (i: number) => Math.floor(i / H) % C >= held[Math.floor(i / (Nkv * C * H))];
  };
  for (const compiled of [true, false]) {
    const have = await generate(c, 'mlx', compiled);
    want.forEach((w, step) => {
      const where = (name: string) => `${compiled ? 'compiled' : 'eager'} step ${step} ${name}`;
      expectClose(have[step].y, w.y, where('y'));
      for (const name of ['present_k', 'present_v']) expectClose(have[step][name], w[name], where(name), unwritten(step));
    });
  }
}

describe('GroupQueryAttention sliding_window_cache: window-sized KV buffers over a generation loop', () => {
  it('a prompt shorter than the window, then decode steps past it, rotary at the absolute positions', () =>
    expectLoopSame({ B: 1, prompt: 2, steps: 7, window: 4, rotary: true }));
  it('a prompt longer than the window (the buffer keeps its last tokens), then decode steps', () =>
    expectLoopSame({ B: 1, prompt: 6, steps: 4, window: 3, rotary: true }));
  it('a prompt as long as the window', () => expectLoopSame({ B: 1, prompt: 3, steps: 3, window: 3 }));
  it('a window of 1', () => expectLoopSame({ B: 1, prompt: 3, steps: 3, window: 1, rotary: true }));
  it('a batch of two prompts past the window, then decode steps', () => expectLoopSame({ B: 2, prompt: 5, steps: 3, window: 3 }));
  // (With a past, onnxruntime takes a batch over one a token at a time: "batch_size must be 1 when
  // sequence_length > 1 and past context is given".)
  it('a ragged batch: one entry with more cached tokens than the buffer holds, one with fewer', () =>
    expectLoopSame({ B: 2, cached: [6, 1], prompt: 1, steps: 5, window: 4, rotary: true }));
  it('ratio 1 and 4 query heads a KV head', async () => {
    await expectLoopSame({ B: 1, ratio: 1, prompt: 3, steps: 5, window: 3 });
    await expectLoopSame({ B: 2, ratio: 4, cached: [0, 3], prompt: 1, steps: 4, window: 2 });
  });
  it('chunks of 3 tokens after the prompt, more than the buffer keeps of its past', () =>
    expectLoopSame({ B: 1, prompt: 2, steps: 4, stepTokens: 3, window: 4, rotary: true }));
  it('chunks as long as the window', () => expectLoopSame({ B: 1, prompt: 5, steps: 3, stepTokens: 3, window: 3 }));
  it('softcap and smooth_softmax', () => expectLoopSame({ B: 1, prompt: 4, steps: 5, window: 3, softcap: 2, smoothSoftmax: true }));
});

describe('GroupQueryAttention sliding_window_cache: what is refused', () => {
  const base: Loop = { B: 1, prompt: 2, steps: 0, window: 3 };
  const cpu = { executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'cpu' }] } as never;
  const feeds = (c: Loop, rows = c.window, lens = cachedOf(c).map((n) => n + c.prompt)) => {
    const past = f32(new Array(c.B * Nkv * rows * H).fill(0), [c.B, Nkv, rows, H]);
    return stepFeeds(c, 0, lens, past, past);
  };

  it('local_window_size -1 or 0: refused at create(), as onnxruntime refuses the session', async () => {
    for (const window of [-1, 0]) {
      const bytes = gqa({ ...base, window });
      expect(String(await outcome(bytes, feeds(base)))).toMatch(/sliding_window_cache=1 requires local_window_size > 0/);
      const e = await outcome(bytes, feeds(base), cpu);
      expect(e).toBeInstanceOf(RefusedNodeError);
      expect((e as Error).message).toContain(`sliding_window_cache=1 requires local_window_size > 0, got ${window}`);
    }
  });

  it("no past: onnxruntime's message", async () => {
    const bytes = model({
      opsets: { '': 17, [MS]: 1 },
      inputs: [
        v('q', 'float32', [1, 2, 4 * H]),
        v('k', 'float32', [1, 2, Nkv * H]),
        v('val', 'float32', [1, 2, Nkv * H]),
        v('sl', 'int32', [1]),
        v('tl', 'int32', []),
      ],
      outputs: [v('y', 'float32')],
      nodes: [
        node('GroupQueryAttention', ['q', 'k', 'val', '', '', 'sl', 'tl'], ['y'], {
          domain: MS,
          attrs: { num_heads: 4, kv_num_heads: Nkv, local_window_size: 3, sliding_window_cache: 1 },
        }),
      ],
    });
    const { q, k, val, sl, tl } = feeds(base);
    const message = /sliding_window_cache=1 requires past_key and past_value to be present/;
    expect(String(await outcome(bytes, { q, k, val, sl, tl }))).toMatch(message);
    expect(String(await outcome(bytes, { q, k, val, sl, tl }, cpu))).toMatch(message);
  });

  it("a buffer shorter than the window: onnxruntime's message", async () => {
    const f = feeds(base, 2);
    expect(String(await outcome(gqa(base), f))).toMatch(/KV cache capacity \(2\) must be at least local_window_size \(3\)/);
    expect(String(await outcome(gqa(base), f, cpu))).toMatch(
      /node 'gqa' \(GroupQueryAttention\).*sliding_window_cache: KV cache capacity \(2\) must be at least local_window_size \(3\)/,
    );
  });

  it('a buffer longer than the window (onnxruntime keeps rows there that follow no rule) is refused', async () => {
    expect(String(await outcome(gqa(base), feeds(base, 5), cpu))).toMatch(
      /sliding_window_cache with KV buffers of 5 rows for local_window_size 3 is not supported: only buffers of the window's length/,
    );
  });

  it('seqlens_k past total_sequence_length or negative fails the run with the entry named', async () => {
    const c = { ...base, B: 2 };
    const bad = { ...feeds(c), sl: i32([1, -1]) };
    expect(String(await outcome(gqa(c), bad, cpu))).toMatch(/seqlens_k\[1\] = -1 is out of range \[0, 3\)/);
    const decode = { ...stepFeeds({ ...c, stepTokens: 2 }, 1, [5, 1], feeds(c).pk, feeds(c).pv) };
    expect(String(await outcome(gqa(c), decode, cpu))).toMatch(/seqlens_k\[1\] = 0 is too small for sequence_length 2/);
  });

  it('with a quantized cache, attention_bias or output_qk the node is left to the fallback', () => {
    const reasons = (attrs: NodeSpec['attrs']) =>
      summarizePartitions(prepareModel(gqa(base, attrs)).plan).fallbackNodes.map((n) => n.reason);
    expect(reasons({ qk_output: 1 })).toEqual([]); // no output_qk output: nothing to refuse
    expect(reasons({ k_quant_type: 'PER_TENSOR', v_quant_type: 'PER_TENSOR' })).toEqual([
      expect.stringMatching(/sliding_window_cache and a quantized KV cache is not supported/),
    ]);
  });
});

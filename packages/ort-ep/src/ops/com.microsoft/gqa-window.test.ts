// GroupQueryAttention's sliding window (local_window_size) over a KV cache, as a generation loop
// uses it: a prompt, then decode steps (or chunks of a few tokens) until the cached length is well
// past the window, each engine feeding its own present back as the next past. Grown caches (past
// and present of the cached length) and the shared buffer (past and present of a fixed capacity);
// one sequence and a ragged batch; windows shorter than, as long as and longer than the sequence;
// 1, 2 and 4 query heads a KV head. Every step is compared with onnxruntime-node, eager (seqlens_k
// read on the host) and compiled (for one sequence in a shared buffer, the decode steps keep its
// length and build the mask on the device). Then the values onnxruntime treats apart (0, negative,
// past int32, a window without causal), and layers of different windows in one step.
import { describe, expect, it } from 'vitest';
import { RefusedNodeError } from '../../errors.js';
import { summarizePartitions } from '../../plan/partition.js';
import { prepareModel } from '../../plan/prepare.js';
import { model, node, v } from '../../../test/helpers/build.js';
import { f32, i32, ort, outcome, plain, randomF32 as rand, type Feeds, type OrtTensor } from '../../../test/helpers/ort.js';

const MS = 'com.microsoft';
const H = 16;
const maxPos = 32;
const tol = { rtol: 1e-4, atol: 1e-5 };
const table = (fn: (x: number) => number) =>
  f32(
    Array.from({ length: maxPos * (H / 2) }, (_, i) => fn(Math.floor(i / (H / 2)) / 10000 ** ((2 * (i % (H / 2))) / H))),
    [maxPos, H / 2],
  );

interface Loop {
  B: number;
  /** Query heads per KV head (num_heads / kv_num_heads); 2 unless given. */
  ratio?: number;
  /** Prompt length of each entry (right-padded to the longest). */
  prompt: number[];
  steps: number;
  /** New tokens a step after the prompt (a chunked prompt, or tokens a draft proposed); 1 unless given. */
  stepTokens?: number;
  window: number;
  /** Capacity of a shared buffer; undefined: the cache grows by the new rows each step. */
  shared?: number;
  rotary?: boolean;
  softcap?: number;
  smoothSoftmax?: boolean;
  /** Further attributes (causal). */
  attrs?: Record<string, number>;
}

const Nkv = 2;
const headsOf = (c: Loop) => Nkv * (c.ratio ?? 2);

function gqa(c: Loop): Uint8Array {
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
        domain: MS,
        attrs: {
          num_heads: N,
          kv_num_heads: Nkv,
          local_window_size: c.window,
          ...(c.rotary ? { do_rotary: 1 } : {}),
          ...(c.softcap ? { softcap: { f: c.softcap } } : {}),
          ...(c.smoothSoftmax ? { smooth_softmax: 1 } : {}),
          ...c.attrs,
        },
      }),
    ],
  });
}

/** Runs the loop on one engine; returns each step's outputs. */
async function generate(c: Loop, provider: 'cpu' | 'mlx', compiled = true): Promise<Record<string, OrtTensor>[]> {
  const N = headsOf(c);
  const session = await ort.InferenceSession.create(gqa(c), {
    executionProviders: provider === 'cpu' ? ['cpu'] : [{ name: 'mlx', device: 'cpu', compiled } as never],
  });
  try {
    const S0 = Math.max(...c.prompt);
    const rows = c.shared ?? 0;
    let pk = f32(new Array(c.B * Nkv * rows * H).fill(0), [c.B, Nkv, rows, H]);
    let pv = f32(new Array(c.B * Nkv * rows * H).fill(0), [c.B, Nkv, rows, H]);
    let lens = [...c.prompt];
    const out: Record<string, OrtTensor>[] = [];
    for (let step = 0; step <= c.steps; step++) {
      const S = step ? (c.stepTokens ?? 1) : S0;
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
      const r = await session.run(feeds);
      out.push(r);
      // A grown cache holds each entry's rows up to the longest length; the shared buffer stays put.
      pk = r.present_k;
      pv = r.present_v;
      lens = lens.map((l) => l + (c.stepTokens ?? 1));
    }
    return out;
  } finally {
    await session.release();
  }
}

/**
 * Compares `have` with `want`, skipping entries `skip(index)` says have no reference: in a ragged
 * batch, the rows of a right-padded prompt past an entry's length (onnxruntime computes them from a
 * negative past length in a shared buffer; the next step overwrites them) and cache rows past it.
 */
function expectClose(have: OrtTensor, want: OrtTensor, what: string, skip: (i: number) => boolean = () => false) {
  expect([...have.dims]).toEqual([...want.dims]);
  const [a, b] = [plain(have), plain(want)];
  const bad = a.findIndex((x, i) => !skip(i) && !(Math.abs(x - b[i]) <= tol.atol + tol.rtol * Math.abs(b[i])));
  expect(bad === -1 ? 'ok' : `${what}[${bad}]: mlx ${a[bad]} vs onnxruntime ${b[bad]}`).toBe('ok');
}

async function expectLoopSame(c: Loop) {
  // The node runs on MLX (the package's tests run with the fallback off; this says so outright).
  expect(summarizePartitions(prepareModel(gqa(c)).plan).fallbackNodes).toEqual([]);
  const N = headsOf(c);
  const want = await generate(c, 'cpu');
  const S0 = Math.max(...c.prompt);
  const ragged = new Set(c.prompt).size > 1;
  // y [B, S, N·H] at step 0: position s of entry b; present [B, Nkv, rows, H]: row r of entry b.
  const padY = (i: number) => Math.floor(i / (N * H)) % S0 >= c.prompt[Math.floor(i / (S0 * N * H))];
  // Rows past an entry's length keep the buffer's contents (onnxruntime, given two buffers, writes zeros there).
  const padPresent = (rows: number, step: number) => (i: number) =>
    Math.floor(i / H) % rows >= c.prompt[Math.floor(i / (Nkv * rows * H))] + step * (c.stepTokens ?? 1);
  for (const compiled of [true, false]) {
    const have = await generate(c, 'mlx', compiled);
    want.forEach((w, step) => {
      const where = (name: string) => `${compiled ? 'compiled' : 'eager'} step ${step} ${name}`;
      const first = step === 0 && ragged;
      expectClose(have[step].y, w.y, where('y'), first ? padY : undefined);
      for (const name of ['present_k', 'present_v']) {
        // Ragged grown caches: onnxruntime leaves the rows past a shorter entry's length unwritten (no reference there).
        if (c.shared === undefined && ragged) continue;
        expectClose(have[step][name], w[name], where(name), ragged ? padPresent(w[name].dims[2], step) : undefined);
      }
    });
  }
}

describe('GroupQueryAttention: a sliding window over the KV cache, decode steps past the window', () => {
  it('one sequence in a shared buffer (its length on the device), rotary: 9 cached rows, window 3', () =>
    expectLoopSame({ B: 1, prompt: [4], steps: 6, window: 3, shared: 12, rotary: true }));
  it('a ragged batch in a shared buffer, softcap: up to 10 cached rows, window 4', () =>
    expectLoopSame({ B: 2, prompt: [5, 3], steps: 6, window: 4, shared: 12, softcap: 2 }));
  it('one sequence, a growing cache: 9 cached rows, window 2', () => expectLoopSame({ B: 1, prompt: [3], steps: 6, window: 2 }));
  it('a window of 1: each token sees only itself', () =>
    expectLoopSame({ B: 1, prompt: [2], steps: 3, window: 1, shared: 8, rotary: true }));
  it('num_heads = kv_num_heads (ratio 1), one sequence in a shared buffer, rotary: window 3', () =>
    expectLoopSame({ B: 1, ratio: 1, prompt: [5], steps: 5, window: 3, shared: 12, rotary: true }));
  it('four query heads a KV head, a ragged batch in a shared buffer: window 2', () =>
    expectLoopSame({ B: 2, ratio: 4, prompt: [4, 2], steps: 4, window: 2, shared: 10 }));
  it('ratio 1, a ragged batch, a growing cache: window 3', () => expectLoopSame({ B: 2, ratio: 1, prompt: [4, 2], steps: 4, window: 3 }));
  it('a window as long as the prompt, growing cache, rotary: hides keys only from the first step on', () =>
    expectLoopSame({ B: 1, prompt: [4], steps: 4, window: 4, rotary: true }));
  it('a window longer than the prompt, shorter than the later steps (shared buffer)', () =>
    expectLoopSame({ B: 1, prompt: [3], steps: 6, window: 5, shared: 10 }));
  it("a window as long as the last step's keys: hides nothing", () =>
    expectLoopSame({ B: 1, prompt: [4], steps: 4, window: 8, shared: 10, rotary: true }));
  it('a window longer than every sequence, ragged batch, growing cache', () =>
    expectLoopSame({ B: 2, prompt: [4, 3], steps: 3, window: 100 }));
  it('a prompt fed in chunks of 3 past the window, one sequence in a shared buffer, rotary (keys on the device)', () =>
    expectLoopSame({ B: 1, prompt: [4], steps: 3, stepTokens: 3, window: 4, shared: 14, rotary: true }));
  it('chunks of 2 into a growing cache, ratio 1: window 3', () =>
    expectLoopSame({ B: 1, ratio: 1, prompt: [2], steps: 4, stepTokens: 2, window: 3 }));
  it('smooth_softmax and softcap with a window, one sequence in a shared buffer', () =>
    expectLoopSame({ B: 1, prompt: [5], steps: 4, window: 3, shared: 10, smoothSoftmax: true, softcap: 2 }));
});

describe('GroupQueryAttention local_window_size: values onnxruntime treats apart', () => {
  const base: Loop = { B: 1, prompt: [4], steps: 3, window: -1, shared: 8 };
  const cpu = { executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'cpu' }] } as never;
  const none = { executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'none' }] } as never;
  const feeds = (): Feeds => ({
    q: rand([1, 4, 4 * H], 1),
    k: rand([1, 4, Nkv * H], 2),
    val: rand([1, 4, Nkv * H], 3),
    pk: f32(new Array(Nkv * 8 * H).fill(0), [1, Nkv, 8, H]),
    pv: f32(new Array(Nkv * 8 * H).fill(0), [1, Nkv, 8, H]),
    sl: i32([3]),
    tl: i32([4], []),
  });

  // Any negative value is no window in onnxruntime's kernel, not only -1; 2^31 - 1 hides nothing.
  for (const window of [-2, -(2 ** 31), 2 ** 31 - 1])
    it(`local_window_size ${window}: no window, on MLX`, () => expectLoopSame({ ...base, window }));

  it('local_window_size 0 hides every key (onnxruntime outputs zeros): the node is left to the fallback', async () => {
    const bytes = gqa({ ...base, window: 0 });
    const reason = /local_window_size 0 hides every key \(onnxruntime outputs zeros\); -1 means no window/;
    expect(summarizePartitions(prepareModel(bytes).plan).fallbackNodes.map((n) => n.reason)).toEqual([expect.stringMatching(reason)]);
    const e = await outcome(bytes, feeds(), none);
    expect(String(e)).toMatch(reason);
    const s = await ort.InferenceSession.create(bytes, cpu);
    try {
      const y = plain((await s.run(feeds())).y);
      expect(y.every((x) => x === 0)).toBe(true);
    } finally {
      await s.release();
    }
  });

  // onnxruntime narrows the attribute to an int (2^32 + 2 is a window of 2 there): refused, fallback or not.
  for (const window of [2 ** 31, 2 ** 32 + 2, -(2 ** 31) - 1])
    it(`local_window_size ${window} does not fit in an int32: refused at create()`, async () => {
      const e = await outcome(gqa({ ...base, window }), feeds(), cpu);
      expect(e).toBeInstanceOf(RefusedNodeError);
      expect((e as Error).message).toContain(`GroupQueryAttention local_window_size ${window} does not fit in an int32`);
    });

  it('a window with causal 0 is refused, as onnxruntime refuses it', async () => {
    for (const window of [3, -2]) {
      const bytes = gqa({ ...base, window, attrs: { causal: 0 } });
      expect(String(await outcome(bytes, feeds()))).toMatch(/local_window_size must be -1 when causal is 0/);
      const e = await outcome(bytes, feeds(), cpu);
      expect(e).toBeInstanceOf(RefusedNodeError);
      expect((e as Error).message).toContain(`GroupQueryAttention local_window_size must be -1 when causal is 0, got ${window}`);
    }
  });
});

// Gemma- and Mistral-style graphs mix layers with a window and layers without in one step: the
// decode step builds one mask a run per window (ctx.shared), which a layer of another window must
// not take.
describe('GroupQueryAttention: layers of different windows in one decode step', () => {
  const windows = [2, -1, 4, 2, 100];
  const cap = 10;
  const N = 4;
  const bytes = model({
    opsets: { '': 17, [MS]: 1 },
    inputs: [
      v('q', 'float32', [1, 1, N * H]),
      v('k', 'float32', [1, 1, Nkv * H]),
      v('val', 'float32', [1, 1, Nkv * H]),
      v('pk', 'float32', [1, Nkv, cap, H]),
      v('pv', 'float32', [1, Nkv, cap, H]),
      v('sl', 'int32', [1]),
      v('tl', 'int32', []),
    ],
    outputs: windows.map((_, i) => v(`y${i}`, 'float32')),
    nodes: windows.map((w, i) =>
      node('GroupQueryAttention', ['q', 'k', 'val', 'pk', 'pv', 'sl', 'tl'], [`y${i}`, `pk${i}`, `pv${i}`], {
        name: `layer${i}`,
        domain: MS,
        attrs: { num_heads: N, kv_num_heads: Nkv, local_window_size: w },
      }),
    ),
  });
  it('each layer attends within its own window (compiled and eager), as onnxruntime', async () => {
    expect(summarizePartitions(prepareModel(bytes).plan).fallbackNodes).toEqual([]);
    const feeds: Feeds = {
      q: rand([1, 1, N * H], 1),
      k: rand([1, 1, Nkv * H], 2),
      val: rand([1, 1, Nkv * H], 3),
      pk: rand([1, Nkv, cap, H], 4),
      pv: rand([1, Nkv, cap, H], 5),
      sl: i32([7]),
      tl: i32([8], []),
    };
    const run = async (options: object) => {
      const s = await ort.InferenceSession.create(bytes, options);
      try {
        let out = await s.run(feeds);
        for (let r = 0; r < 2; r++) out = await s.run(feeds); // a compiled session replays its trace by the third run
        return out;
      } finally {
        await s.release();
      }
    };
    const want = await run({});
    // Without the windows the layers' outputs differ, so a mask taken from the wrong layer shows.
    expect(plain(want.y0)).not.toEqual(plain(want.y1));
    for (const compiled of [true, false]) {
      const have = await run({ executionProviders: [{ name: 'mlx', device: 'cpu', compiled }] });
      windows.forEach((_, i) => expectClose(have[`y${i}`], want[`y${i}`], `${compiled ? 'compiled' : 'eager'} y${i}`));
    }
  });
});

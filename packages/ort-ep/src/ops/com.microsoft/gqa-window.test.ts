// GroupQueryAttention's sliding window (local_window_size) over a KV cache, as a generation loop
// uses it: a prompt, then decode steps until the cached length is well past the window, each
// engine feeding its own present back as the next past. Grown caches (past and present of the
// cached length) and the shared buffer (past and present of a fixed capacity); one sequence (its
// length kept on the device) and a ragged batch. Every step is compared with onnxruntime-node.
import { describe, expect, it } from 'vitest';
import { model, node, v } from '../../../test/helpers/build.js';
import { f32, i32, ort, plain, randomF32 as rand, type Feeds, type OrtTensor } from '../../../test/helpers/ort.js';

const MS = 'com.microsoft';
const N = 4;
const Nkv = 2;
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
  /** Prompt length of each entry (right-padded to the longest). */
  prompt: number[];
  steps: number;
  window: number;
  /** Capacity of a shared buffer; undefined: the cache grows by the new rows each step. */
  shared?: number;
  rotary?: boolean;
  softcap?: number;
}

function gqa(c: Loop): Uint8Array {
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
        },
      }),
    ],
  });
}

/** Runs the loop on one engine; returns each step's outputs. */
async function generate(c: Loop, provider: 'cpu' | 'mlx', compiled = true): Promise<Record<string, OrtTensor>[]> {
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
      const S = step ? 1 : S0;
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
      lens = lens.map((l) => l + 1);
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
  const want = await generate(c, 'cpu');
  const S0 = Math.max(...c.prompt);
  const ragged = new Set(c.prompt).size > 1;
  // y [B, S, N·H] at step 0: position s of entry b; present [B, Nkv, rows, H]: row r of entry b.
  const padY = (i: number) => Math.floor(i / (N * H)) % S0 >= c.prompt[Math.floor(i / (S0 * N * H))];
  // Rows past an entry's length keep the buffer's contents (onnxruntime, given two buffers, writes zeros there).
  const padPresent = (rows: number, step: number) => (i: number) =>
    Math.floor(i / H) % rows >= c.prompt[Math.floor(i / (Nkv * rows * H))] + step;
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
});

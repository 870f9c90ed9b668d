// generate() on decoders whose GroupQueryAttention has a sliding window (local_window_size W = 8):
// with sliding_window_cache the caches fed and kept are W-row buffers however long the sequence
// grows, and the tokens and logits are onnxruntime-node's on the same model fed step by step; the
// same window without sliding_window_cache keeps the whole (growing) cache, as the model's own
// present is, and chooses the same tokens. Prompts shorter and longer than the window, 3W + 6 new
// tokens.
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { InvalidFeedError, type MlxSession, OrtMlxError, generate } from '../../src/index.js';
import { buildDecoder, type DecoderConfig, tinyLlama } from '../helpers/decoder.js';
import { mlxCpu, ort } from '../helpers/ort.js';

const W = 8;
const NEW = 3 * W + 6;
const base = tinyLlama({ maxPositions: 64, seed: 11, window: W });
const sliding = buildDecoder({ ...base, slidingCache: true });
const windowed = buildDecoder(base);
const short = [3, 17, 42, 99, 7];
const long = [200, 1, 33, 64, 18, 5, 77, 9, 4, 250, 121, 60, 2];
type Session = import('onnxruntime-node').InferenceSession;
type OrtTensor = import('onnxruntime-node').Tensor;
type Opts = Partial<Parameters<typeof generate>[1]>;
const onDevice = { ...mlxCpu, preferredOutputLocation: 'gpu-buffer' };

async function withSession<T>(bytes: Uint8Array, options: object, body: (s: Session) => Promise<T>): Promise<T> {
  const s = await ort.InferenceSession.create(bytes, options as never);
  try {
    return await body(s);
  } finally {
    await s.release();
  }
}

/** Greedy: the largest logit, ties to the lower id (generate()'s choice). */
const argmax = (x: Float32Array) => x.reduce((best, v, i) => (v > x[best] ? i : best), 0);

/**
 * onnxruntime-node running the sliding model by hand: the prompt, then one token a step, each
 * layer's past the previous present (W rows from the start), the mask all ones over the sequence.
 */
async function reference(prompt: number[]): Promise<{ tokens: number[]; logits: Float32Array[] }> {
  return withSession(sliding, {}, async (s) => {
    const H = base.hidden / base.heads;
    const names = s.inputNames.filter((n) => n.startsWith('past_key_values.'));
    let past: OrtTensor[] = names.map(() => new ort.Tensor('float32', new Float32Array(2 * W * H), [1, 2, W, H]));
    const tokens: number[] = [];
    const logits: Float32Array[] = [];
    let ids = prompt;
    let total = 0;
    while (tokens.length < NEW) {
      total += ids.length;
      const feeds: Record<string, OrtTensor> = {
        input_ids: new ort.Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, ids.length]),
        attention_mask: new ort.Tensor('int64', new BigInt64Array(total).fill(1n), [1, total]),
      };
      names.forEach((n, i) => {
        feeds[n] = past[i];
      });
      const out = await s.run(feeds);
      past = names.map((n) => out[n.replace('past_key_values.', 'present.')]);
      for (const p of past) expect(p.dims).toEqual([1, 2, W, H]);
      const all = out.logits.data as Float32Array;
      const last = all.slice(all.length - base.vocab);
      logits.push(last);
      const t = argmax(last);
      tokens.push(t);
      ids = [t];
    }
    return { tokens, logits };
  });
}

/** generate()'s tokens and each step's last logits (through a logitsProcessor that leaves them). */
async function run(s: Session, prompt: number[], opts: Opts = {}): Promise<{ tokens: number[]; logits: Float32Array[] }> {
  const tokens: number[] = [];
  const logits: Float32Array[] = [];
  const options = { inputIds: prompt, maxNewTokens: NEW, Tensor: ort.Tensor as never, ...opts };
  for await (const t of generate(s, { ...options, logitsProcessor: (l) => void logits.push(Float32Array.from(l)) })) tokens.push(t);
  return { tokens, logits };
}

function expectClose(have: Float32Array[], want: Float32Array[], what: string) {
  expect(have.length).toBe(want.length);
  have.forEach((row, step) => {
    const bad = row.findIndex((x, i) => !(Math.abs(x - want[step][i]) <= 1e-3 + 1e-3 * Math.abs(want[step][i])));
    expect(bad === -1 ? 'ok' : `${what} step ${step} logit ${bad}: ${row[bad]} vs onnxruntime ${want[step][bad]}`).toBe('ok');
  });
}

describe('generate(): a sliding window cache of W rows, past 3W tokens', () => {
  for (const [name, prompt] of [
    ['a prompt shorter than the window', short],
    ['a prompt longer than the window', long],
  ] as const)
    it(`${name}: mlx (host and device caches) and onnxruntime-node through generate() equal onnxruntime-node step by step`, async () => {
      const want = await reference([...prompt]);
      // The window's semantics: the same model keeping its whole cache chooses the same tokens.
      const full = await withSession(windowed, {}, (s) => run(s, [...prompt]));
      expect(full.tokens).toEqual(want.tokens);
      const ortRun = await withSession(sliding, {}, (s) => run(s, [...prompt], { kvWindow: W }));
      expect(ortRun.tokens).toEqual(want.tokens);
      expectClose(ortRun.logits, want.logits, 'onnxruntime-node generate()');
      for (const [engine, options] of [
        ['mlx', mlxCpu],
        ['mlx gpu-buffer', onDevice],
      ] as const) {
        const have = await withSession(sliding, options, (s) => run(s, [...prompt]));
        expect(have.tokens).toEqual(want.tokens);
        expectClose(have.logits, want.logits, engine);
      }
    }, 120_000);

  it('the caches fed stay W rows at step 3W, the kept cache and live memory stay flat, the mask is bucketed (one program a bucket)', async () => {
    for (const [engine, options] of [
      ['onnxruntime-node', {}],
      ['mlx gpu-buffer', onDevice],
    ] as const)
      await withSession(sliding, options, async (s) => {
        const pastDims: number[][][] = [];
        const maskDims: number[][] = [];
        const kept: number[] = [];
        const active: number[] = [];
        // The session seen through a run() that records what generate() feeds and keeps.
        const spy = Object.create(s) as Session;
        spy.run = (async (feeds: Record<string, OrtTensor>, fetches?: object) => {
          maskDims.push([...feeds.attention_mask.dims]);
          pastDims.push(Object.keys(feeds).flatMap((n) => (n.startsWith('past_key_values.') ? [[...feeds[n].dims]] : [])));
          const out = await s.run(feeds, fetches as never);
          kept.push(Object.keys(out).reduce((n, k) => n + (k.startsWith('present.') ? out[k].dims.reduce((a, b) => a * b, 4) : 0), 0));
          if (engine !== 'onnxruntime-node') active.push(mx.memory.active());
          return out;
        }) as never;
        await run(spy, long, engine === 'onnxruntime-node' ? { kvWindow: W } : {});
        expect(pastDims.length).toBe(NEW);
        const H = base.hidden / base.heads;
        expect(pastDims[3 * W]).toEqual(new Array(2 * base.layers).fill([1, 2, W, H]));
        expect(new Set(pastDims.flat().map((d) => d.join('x')))).toEqual(new Set([`1x2x${W}x${H}`]));
        // The mask holds the whole sequence (seqlens_k is its sum), padded to a power of two: step 3W
        // has 13 + 3W = 37 tokens, in a mask of 64.
        expect(maskDims[3 * W]).toEqual([1, 64]);
        expect(maskDims[0]).toEqual([1, 16]);
        // Every present: 2 layers x key and value x [1, 2, W, H] float32.
        expect(new Set(kept)).toEqual(new Set([2 * base.layers * 2 * W * H * 4]));
        if (engine === 'onnxruntime-node') return;
        expect(active[3 * W] - active[W]).toBeLessThan(2 * base.layers * 2 * W * H * 4);
        // One compiled program per mask bucket: the prompt's, then decode steps in masks of 16, 32
        // and 64 (a mask as long as the sequence would be a new signature every step).
        const { misses, hits } = (s as unknown as { handler: { session: MlxSession } }).handler.session.compileStats;
        expect({ misses, hits }).toEqual({ misses: 4, hits: NEW - 4 });
      });
  }, 120_000);

  it('onnxruntime-node without kvWindow: the option to pass, named', async () => {
    await withSession(sliding, {}, async (s) => {
      const e = await run(s, short).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(InvalidFeedError);
      expect((e as Error).message).toMatch(/local_window_size 8 .*pass kvWindow: 8/);
    });
  });

  it('kvWindow on a model that keeps no sliding window cache, or one of another length, is an error', async () => {
    await withSession(windowed, mlxCpu, async (s) => {
      const e = await run(s, short, { kvWindow: W }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(InvalidFeedError);
      expect((e as Error).message).toMatch(/kvWindow 8 was given, but the model's attention over 'past_key_values.0.key' keeps no sliding/);
    });
    await withSession(sliding, mlxCpu, async (s) => {
      const e = await run(s, short, { kvWindow: 4 }).catch((x: unknown) => x);
      expect((e as Error).message).toMatch(
        /kvWindow 4 was given, but the model's GroupQueryAttention over 'past_key_values.0.key' has local_window_size 8/,
      );
    });
    // onnxruntime-node shows no graph: the first present that is not a window buffer names it.
    await withSession(windowed, {}, async (s) => {
      const e = await run(s, long, { kvWindow: W }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(OrtMlxError);
      expect((e as Error).message).toMatch(
        /was fed a sliding window buffer of 8 rows \(kvWindow\), but the model's present 'present.0.key' has \d+/,
      );
    });
    await withSession(sliding, mlxCpu, async (s) => {
      const e = await run(s, short, { kvCapacity: 64 }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(TypeError);
      expect((e as Error).message).toMatch(/keeps a sliding window cache of 8 rows/);
    });
  });
});

// Continuous batching (createGenerator): concurrent requests joining and leaving a shared decode
// step. The reference is each request's own generate() run on the same engine (greedy tokens
// equal), on onnxruntime-node and mlx (host and device outputs), with requests that arrive while
// others decode, more requests than slots, cancellation and bad options.
import { describe, expect, it } from 'vitest';
import { createGenerator, generate, ResourceLimitError, type TokenStream } from '../../src/index.js';
import { buildDecoder, type DecoderConfig, tinyLlama } from '../helpers/decoder.js';
import { mlxCpu, ort } from '../helpers/ort.js';

const llama = tinyLlama({ maxPositions: 256, seed: 41 });
const capacity = 96;
const prompts = [
  [3, 17, 42, 99, 7, 128, 5, 77],
  [9, 8],
  [200, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19],
  [50],
  [60, 61, 62, 63, 64],
  [7, 7, 7, 7],
];
const lengths = [12, 20, 6, 16, 9, 14];

type Session = import('onnxruntime-node').InferenceSession;

async function solo(session: Session, prompt: number[], maxNewTokens: number, extra: object = {}): Promise<number[]> {
  const out: number[] = [];
  for await (const t of generate(session, { inputIds: prompt, maxNewTokens, kvCapacity: capacity, Tensor: ort.Tensor as never, ...extra }))
    out.push(t);
  return out;
}

async function drain(s: TokenStream): Promise<number[]> {
  const out: number[] = [];
  for await (const t of s) out.push(t);
  return out;
}

const engines: [string, import('onnxruntime-node').InferenceSession.SessionOptions][] = [
  ['onnxruntime-node', {}],
  ['mlx', mlxCpu],
  ['mlx, gpu-buffer outputs', { ...mlxCpu, preferredOutputLocation: 'gpu-buffer' }],
];

describe('continuous batching', () => {
  for (const [engine, options] of engines)
    it(`${engine}: requests joining and leaving the shared step give their solo tokens`, async () => {
      const session = await ort.InferenceSession.create(buildDecoder(llama), options);
      try {
        const want = [];
        for (let i = 0; i < prompts.length; i++) want.push(await solo(session, prompts[i], lengths[i]));
        // Three slots for six requests: the later ones wait, then take the slots of those that end.
        const server = createGenerator(session, { maxBatch: 3, kvCapacity: capacity, Tensor: ort.Tensor as never });
        const first = prompts.slice(0, 4).map((p, i) => drain(server.submit(p, { maxNewTokens: lengths[i] })));
        // Two more arrive while the first ones decode.
        await new Promise((r) => setTimeout(r, 5));
        const later = prompts.slice(4).map((p, i) => drain(server.submit(p, { maxNewTokens: lengths[4 + i] })));
        const got = await Promise.all([...first, ...later]);
        expect(got).toEqual(want);
        const stats = server.stats;
        expect(stats).toMatchObject({ prefills: 6, completed: 6, cancelled: 0, active: 0, queued: 0, maxActive: 3 });
        expect(stats.tokens).toBe(lengths.reduce((a, b) => a + b, 0));
        // Fewer decode steps than tokens: the sequences shared them.
        expect(stats.steps).toBeLessThan(stats.tokens - 6);
        await server.close();
      } finally {
        await session.release();
      }
    });

  it('stop tokens, sampling and penalties apply per request, as generate() applies them', async () => {
    const session = await ort.InferenceSession.create(buildDecoder(llama), { ...mlxCpu, preferredOutputLocation: 'gpu-buffer' });
    try {
      const variants = [
        { maxNewTokens: 15, sampling: { temperature: 0.8, topK: 20, seed: 3 } },
        { maxNewTokens: 15, repetitionPenalty: 1.3, presencePenalty: 0.5 },
        { maxNewTokens: 15, minNewTokens: 4 },
      ];
      const want = [];
      for (let i = 0; i < variants.length; i++) want.push(await solo(session, prompts[i], 15, variants[i]));
      // A stop token taken from the plain run's fifth token ends that request there.
      const stop = want[2][4];
      const wantStopped = await solo(session, prompts[2], 15, { stopTokens: [stop], minNewTokens: 4 });
      const server = createGenerator(session, { maxBatch: 4, kvCapacity: capacity, Tensor: ort.Tensor as never });
      const got = await Promise.all([
        ...variants.map((v, i) => drain(server.submit(prompts[i], v))),
        drain(server.submit(prompts[2], { maxNewTokens: 15, stopTokens: [stop], minNewTokens: 4 })),
      ]);
      expect(got).toEqual([...want, wantStopped]);
      expect(wantStopped.at(-1)).toBe(stop);
      await server.close();
    } finally {
      await session.release();
    }
  });

  it('a cancelled or aborted request ends and frees its slot for a waiting one', async () => {
    const session = await ort.InferenceSession.create(buildDecoder(llama), mlxCpu);
    try {
      const wantLast = await solo(session, prompts[1], 10);
      const server = createGenerator(session, { maxBatch: 1, kvCapacity: capacity, Tensor: ort.Tensor as never });
      const ac = new AbortController();
      const a = server.submit(prompts[0], { maxNewTokens: 50, signal: ac.signal });
      const b = server.submit(prompts[2], { maxNewTokens: 50 });
      const c = server.submit(prompts[1], { maxNewTokens: 10 });
      // a: two tokens, then its signal aborts; b: left after three tokens (break).
      const gotA: number[] = [];
      for await (const t of a) {
        gotA.push(t);
        if (gotA.length === 2) ac.abort();
      }
      const gotB: number[] = [];
      for await (const t of b) {
        gotB.push(t);
        if (gotB.length === 3) break;
      }
      expect(gotA.length).toBeLessThan(50);
      expect(gotB).toHaveLength(3);
      expect(await drain(c)).toEqual(wantLast);
      expect(server.stats).toMatchObject({ cancelled: 2, completed: 1, active: 0, queued: 0 });
      // An already aborted signal: an empty stream.
      expect(await drain(server.submit(prompts[0], { maxNewTokens: 5, signal: AbortSignal.abort() }))).toEqual([]);
      await server.close();
      expect(() => server.submit(prompts[0], { maxNewTokens: 1 })).toThrow(/the generator is closed/);
    } finally {
      await session.release();
    }
  });

  it("a request's own logitsProcessor error ends that request alone", async () => {
    const session = await ort.InferenceSession.create(buildDecoder(llama), mlxCpu);
    try {
      const want = await solo(session, prompts[1], 10);
      const server = createGenerator(session, { maxBatch: 2, kvCapacity: capacity, Tensor: ort.Tensor as never });
      let calls = 0;
      const bad = drain(
        server.submit(prompts[0], {
          maxNewTokens: 10,
          logitsProcessor: () => {
            if (++calls === 3) throw new Error('processor failed');
          },
        }),
      );
      const good = drain(server.submit(prompts[1], { maxNewTokens: 10 }));
      await expect(bad).rejects.toThrow('processor failed');
      expect(await good).toEqual(want);
      await server.close();
    } finally {
      await session.release();
    }
  });

  it('the memory budget sets the slots; bad options and requests get specific errors', async () => {
    const session = await ort.InferenceSession.create(buildDecoder(llama), mlxCpu);
    try {
      // A slot: 2 layers × K and V × 2 heads × 96 positions × 16 floats.
      const slotBytes = 2 * 2 * 2 * capacity * 16 * 4;
      const server = createGenerator(session, { maxBatch: 8, kvCapacity: capacity, maxKvBytes: slotBytes * 3 });
      expect(server.slots).toBe(2);
      await server.close();
      expect(() => createGenerator(session, { maxBatch: 8, kvCapacity: capacity, maxKvBytes: slotBytes })).toThrow(ResourceLimitError);
      expect(() => createGenerator(session, { maxBatch: 0, kvCapacity: capacity })).toThrow(/maxBatch must be an integer ≥ 1, got 0/);
      expect(() => createGenerator(session, { maxBatch: 2 } as never)).toThrow(/kvCapacity must be an integer ≥ 1, got undefined/);
      expect(() => createGenerator(session, { maxBatch: 2, kvCapacity: 8, slots: 3 } as never)).toThrow(/unknown option 'slots'/);
      const s = createGenerator(session, { maxBatch: 2, kvCapacity: 16 });
      expect(() => s.submit([1, 2, 3], { maxNewTokens: 14 })).toThrow(/3 prompt tokens \+ 14 new ones do not fit kvCapacity 16/);
      expect(() => s.submit([1, 2], { maxNewTokens: 2, promptLookup: {} } as never)).toThrow(/unknown option 'promptLookup'/);
      expect(() => s.submit([1, -2], { maxNewTokens: 2 })).toThrow(/inputIds\[1\] = -2 is not a token id/);
      expect(() => s.submit([1], { maxNewTokens: 2, sampling: 'greedy ' as never })).toThrow(/sampling must be 'greedy' or an object/);
      expect(() => s.submit([1], { maxNewTokens: 2, signal: {} as never })).toThrow(/signal must be an AbortSignal/);
      await s.close();
    } finally {
      await session.release();
    }
  });
});

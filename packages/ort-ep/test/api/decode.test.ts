// Decoding with a KV cache: device-resident outputs fed back (I/O binding), GroupQueryAttention's
// shared buffer written in place, and the generation loop, against onnxruntime-node token by token.
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { MlxSession, type Value, deviceBufferOf, generate, transferStats } from '../../src/index.js';
import { cacheNames, pickToken } from '../../src/internal.js';
import { buildDecoder, type DecoderConfig } from '../helpers/decoder.js';
import { mlxCpu, ort, type OrtTensor } from '../helpers/ort.js';

const llama: DecoderConfig = { kind: 'llama', layers: 2, hidden: 64, heads: 4, kvHeads: 2, ffn: 128, vocab: 256, maxPositions: 256 };
const qwen2: DecoderConfig = { ...llama, hidden: 128, heads: 8, kvHeads: 2, qkvBias: true, seed: 11 };
const gpt2: DecoderConfig = { kind: 'gpt2', layers: 2, hidden: 64, heads: 4, ffn: 128, vocab: 256, maxPositions: 256, seed: 3 };
const llamaInt4: DecoderConfig = { ...llama, int4: true, seed: 5 };
const prompt = [3, 17, 42, 99, 7, 128, 5, 77];

const onDevice = {
  ...mlxCpu,
  preferredOutputLocation: 'gpu-buffer',
} as unknown as import('onnxruntime-node').InferenceSession.SessionOptions;

async function tokens(session: ort.InferenceSession, opts: Partial<Parameters<typeof generate>[1]> = {}): Promise<number[]> {
  const out: number[] = [];
  for await (const t of generate(session, { inputIds: prompt, maxNewTokens: 64, Tensor: ort.Tensor as never, ...opts })) out.push(t);
  return out;
}

async function withSession<T>(bytes: Uint8Array, options: object, body: (s: ort.InferenceSession) => Promise<T>): Promise<T> {
  const s = await ort.InferenceSession.create(bytes, options as never);
  try {
    return await body(s);
  } finally {
    await s.release();
  }
}

describe('greedy decoding, 64 new tokens, same as onnxruntime-node', () => {
  const cases: [string, DecoderConfig, number | undefined][] = [
    ['Llama (GQA), shared KV buffer', llama, 96],
    ['Llama (GQA), kvCapacity left out (a growing cache; on mlx the default shared buffer)', llama, undefined],
    ['Qwen2 (GQA 8/2, QKV bias), shared KV buffer', qwen2, 80],
    ['GPT-2 (MHA past, Concat)', gpt2, undefined],
    ['Llama int4 (MatMulNBits), shared KV buffer', llamaInt4, 96],
  ];
  for (const [name, config, kvCapacity] of cases)
    it(name, async () => {
      const bytes = buildDecoder(config);
      const want = await withSession(bytes, {}, (s) => tokens(s, { kvCapacity }));
      const have = await withSession(bytes, onDevice, (s) => tokens(s, { kvCapacity }));
      expect(want).toHaveLength(64);
      expect(have).toEqual(want);
    }, 120_000);
});

describe('generate() on a session made without options', () => {
  it('keeps the cache on the device in one shared buffer: one program for the decode steps, only token ids downloaded', async () => {
    const bytes = buildDecoder(llama);
    const want = await withSession(bytes, {}, (s) => tokens(s));
    await withSession(bytes, mlxCpu, async (s) => {
      const before = transferStats().downloadedBytes;
      const have = await tokens(s);
      const down = transferStats().downloadedBytes - before;
      expect(have).toEqual(want);
      // The token chosen on the device: 4 bytes a step (and what GroupQueryAttention reads of
      // its mask), never a present (2 layers x 2 x [1, 2, n, 16] floats) nor a row of logits.
      expect(down).toBeLessThan(64 * 64);
      const stats = (s as unknown as { handler: { session: { compileStats: { unanalysed: number; size: number; oneCalls: number } } } })
        .handler.session.compileStats;
      // A cache grown by concatenation is a new feed shape each step (the eager walk, unanalysed).
      expect(stats.unanalysed).toBe(0);
      // The prompt's signature and one per mask bucket (capacity 8 + 64: masks of 16, 32, 64 and 72).
      expect(stats.size).toBeLessThanOrEqual(6);
      expect(stats.oneCalls).toBeGreaterThanOrEqual(48);
    });
  }, 120_000);

  it("the backend's keep-on-device run option: the outputs it names on the device for that run; a bad value a TypeError", async () => {
    const KEEP = Symbol.for('@mlx/ort-ep.keepOnDevice');
    await withSession(buildDecoder(llama), mlxCpu, async (s) => {
      const caches = cacheNames(s);
      const feeds: Record<string, OrtTensor> = {
        input_ids: new ort.Tensor('int64', BigInt64Array.from([3n, 17n]), [1, 2]),
        attention_mask: new ort.Tensor('int64', BigInt64Array.from([1n, 1n]), [1, 2]),
      };
      for (const c of caches) feeds[c.past] = new ort.Tensor('float32', new Float32Array(0), [1, c.dims[0], 0, c.dims[1]]);
      const kept = await s.run(feeds, { [KEEP]: [caches[0].present, 'logits'] } as never);
      expect(kept[caches[0].present].location).toBe('gpu-buffer');
      expect(kept.logits.location).toBe('gpu-buffer');
      expect(kept[caches[1].present].location).toBe('cpu');
      const host = await s.run(feeds);
      expect(Object.values(host).every((t) => t.location === 'cpu')).toBe(true);
      // The same values either way.
      expect(Array.from((await kept.logits.getData(true)) as Float32Array)).toEqual(Array.from(host.logits.data as Float32Array));
      kept[caches[0].present].dispose();
      for (const bad of [5, ['logits', 7], 'logits'])
        await expect(s.run(feeds, { [KEEP]: bad } as never)).rejects.toThrow(
          'mlx execution provider: the keep-on-device run option must be an array of output names',
        );
    });
  }, 120_000);
});

describe('device outputs (I/O binding)', () => {
  it('a present kept on the device and fed back gives the host round trip, with nothing downloaded', async () => {
    const bytes = buildDecoder(gpt2);
    const feeds = (ids: number[], past: OrtTensor[], at: number): Record<string, OrtTensor> => {
      const f: Record<string, OrtTensor> = {
        input_ids: new ort.Tensor('int64', BigInt64Array.from(ids.map(BigInt)), [1, ids.length]),
        attention_mask: new ort.Tensor('int64', new BigInt64Array(at + ids.length).fill(1n), [1, at + ids.length]),
        position_ids: new ort.Tensor('int64', BigInt64Array.from(ids.map((_, i) => BigInt(at + i))), [1, ids.length]),
      };
      past.forEach((t, i) => (f[`past_key_values.${i >> 1}.${i & 1 ? 'value' : 'key'}`] = t));
      return f;
    };
    const empty = () => Array.from({ length: 4 }, () => new ort.Tensor('float32', new Float32Array(0), [1, 4, 0, 16]));
    const presents = (out: Record<string, OrtTensor>) => [0, 1, 2, 3].map((i) => out[`present.${i >> 1}.${i & 1 ? 'value' : 'key'}`]);
    const host = await withSession(bytes, mlxCpu, async (s) => {
      const first = await s.run(feeds(prompt, empty(), 0));
      const second = await s.run(feeds([9], presents(first), prompt.length));
      return Array.from(second.logits.data as Float32Array);
    });
    await withSession(bytes, onDevice, async (s) => {
      const first = await s.run(feeds(prompt, empty(), 0));
      const past = presents(first);
      expect(past.map((t) => t.location)).toEqual(['gpu-buffer', 'gpu-buffer', 'gpu-buffer', 'gpu-buffer']);
      first.logits.dispose();
      const before = transferStats();
      const second = await s.run(feeds([9], past, prompt.length));
      const moved = transferStats();
      expect(moved.downloadedBytes - before.downloadedBytes).toBe(0);
      expect(second.logits.location).toBe('gpu-buffer');
      const logits = Array.from((await second.logits.getData(true)) as Float32Array);
      expect(transferStats().downloadedBytes - moved.downloadedBytes).toBe(logits.length * 4);
      expect(logits).toEqual(host);
      for (const t of [...past, ...presents(second)]) t.dispose();
    });
  });

  it('per-output locations, disposal and release', async () => {
    const bytes = buildDecoder(llama);
    const names = (await withSession(bytes, {}, async (s) => cacheNames(s))).map((c) => c.present);
    const s = await ort.InferenceSession.create(bytes, {
      ...mlxCpu,
      preferredOutputLocation: Object.fromEntries(names.map((n) => [n, 'gpu-buffer'])),
    } as never);
    const ids = new ort.Tensor('int64', BigInt64Array.from(prompt.map(BigInt)), [1, prompt.length]);
    const mask = new ort.Tensor('int64', new BigInt64Array(prompt.length).fill(1n), [1, prompt.length]);
    const empty = new ort.Tensor('float32', new Float32Array(0), [1, 2, 0, 16]);
    const f: Record<string, OrtTensor> = { input_ids: ids, attention_mask: mask };
    for (const c of cacheNames(s)) f[c.past] = empty;
    const out = await s.run(f);
    expect(out.logits.location).toBe('cpu');
    const key = out[names[0]];
    expect(key.location).toBe('gpu-buffer');
    // Outputs outlive the session: they hold their own arrays.
    await s.release();
    const data = (await key.getData()) as Float32Array;
    expect(data.length).toBe(2 * prompt.length * 16);
    key.dispose();
    expect(key.location).toBe('none');
    // A disposed device tensor is a clear feed error.
    const again = await ort.InferenceSession.create(bytes, { ...mlxCpu, preferredOutputLocation: 'gpu-buffer' } as never);
    const out2 = await again.run(f);
    const k2 = out2[names[0]];
    k2.dispose();
    await expect(again.run({ ...f, [cacheNames(again)[0].past]: k2 })).rejects.toThrow(
      /input 'past_key_values.0.key' is a tensor that was disposed/,
    );
    for (const t of Object.values(out2)) if (t !== k2) t.dispose();
    await again.release();
    await expect(
      ort.InferenceSession.create(bytes, { ...mlxCpu, preferredOutputLocation: { nope: 'gpu-buffer' } } as never),
    ).rejects.toThrow(/'nope', which is not an output/);
  });
});

async function withEnv<T>(name: string, value: string, body: () => Promise<T>): Promise<T> {
  const prev = process.env[name];
  process.env[name] = value;
  try {
    return await body();
  } finally {
    if (prev === undefined) delete process.env[name];
    else process.env[name] = prev;
  }
}

describe('GroupQueryAttention shared buffer in place', () => {
  const capacity = 1024;
  const config: DecoderConfig = { ...llama, hidden: 128, heads: 4, kvHeads: 4, maxPositions: 2048 };
  const bufferBytes = 4 * capacity * 32 * 4;
  const cacheBytes = 2 * config.layers * bufferBytes;
  type Step = { up: number; down: number; peak: number };
  /** 20 greedy steps through MlxSession with device caches; per step: bytes moved and the peak memory over the step's start. */
  async function steps(
    donate: boolean,
    shortEvalMs?: number,
  ): Promise<{ moved: Step[]; signatures: number; hits: number; tokens: number[]; oneCall: number; inline: number }> {
    const session = await MlxSession.create(buildDecoder(config), { device: 'cpu', ...(shortEvalMs !== undefined ? { shortEvalMs } : {}) });
    const tokens: number[] = [];
    const caches = cacheNames(session as never);
    const ints = (v: number[]) => ({ dtype: 7, dims: [1, v.length], data: BigInt64Array.from(v.map(BigInt)) });
    let past: Record<string, Value> = {};
    for (const c of caches) past[c.past] = { kind: 'device', array: mx.zeros([1, 4, capacity, 32], 'float32').eval(), onnxType: 1 };
    let cached = 0;
    let ids = prompt;
    const moved: Step[] = [];
    for (let i = 0; i < 20; i++) {
      mx.memory.clearCache();
      const active = mx.memory.active();
      mx.memory.resetPeak();
      const before = transferStats();
      // The mask spans the whole buffer, zeros past the context: total_sequence_length is the capacity
      // and seqlens_k the context, so every decode step has the same feed shapes.
      const mask = Array.from({ length: capacity }, (_, k) => (k < cached + ids.length ? 1 : 0));
      const out = await session.run({ input_ids: ints(ids), attention_mask: ints(mask), ...past }, session.outputNames, {
        keepOnDevice: caches.map((c) => c.present),
        donate: donate ? caches.map((c) => c.past) : [],
      });
      const after = transferStats();
      moved.push({
        up: after.uploadedBytes - before.uploadedBytes,
        down: after.downloadedBytes - before.downloadedBytes,
        peak: mx.memory.peak() - active,
      });
      for (const c of caches) {
        const fed = past[c.past] as Extract<Value, { kind: 'device' }>;
        expect(fed.array.disposed).toBe(donate);
        fed.array.dispose();
      }
      past = Object.fromEntries(caches.map((c) => [c.past, out[c.present] as Value]));
      const logits = (out.logits as { data: Float32Array }).data;
      cached += ids.length;
      ids = [pickToken(logits.subarray(logits.length - config.vocab), 'greedy')];
      tokens.push(ids[0]);
    }
    for (const v of Object.values(past)) if (v.kind === 'device') v.array.dispose();
    const { size, hits, inlineEvals, oneCalls } = session.compileStats;
    session.release();
    return { moved, signatures: size, hits, tokens, oneCall: oneCalls, inline: inlineEvals };
  }

  it('decode steps write new rows into the donated buffer, move only the token and its logits, and share one signature', async () => {
    const { moved, signatures, hits } = await steps(true);
    for (const m of moved.slice(1)) {
      // Down: one token's logits (and the few bytes GroupQueryAttention reads for its mask); up: the token and the mask.
      expect(m.down).toBeLessThan(config.vocab * 4 + 64);
      expect(m.up).toBeLessThan(64 + 8 * capacity);
      expect(m.up).toBeLessThan(cacheBytes / 50);
      // No step copies a cache buffer: the presents are the pasts' own buffers.
      expect(m.peak).toBeLessThan(bufferBytes / 4);
    }
    expect(signatures).toBe(2); // the prompt's and the decode steps'
    expect(hits).toBe(18);
    // The control: without donation the run holds the past too, so MLX copies every buffer.
    const copied = await steps(false);
    for (const m of copied.moved.slice(1)) expect(m.peak).toBeGreaterThanOrEqual(cacheBytes);
  }, 120_000);

  it("decode steps with the cache on the device run in one native call, in place, with the general path's tokens", async () => {
    // The general path: MLXC_STATIC_EXEC=0 leaves no run to the static executor, hence none off
    // this thread (a one-call run on this thread replays the trace for MLX's evaluation).
    const general = await withEnv('MLXC_STATIC_EXEC', '0', () => steps(true, 0));
    expect(general.inline).toBe(0);
    // shortEvalMs 1000: every replay runs on this thread; 0: on the stream's evaluation thread.
    const oneCall = await steps(true, 1000);
    const offThread = await steps(true, 0);
    // The prompt's run and the first two decode steps analyse, trace and replay; the rest are one call each.
    expect(oneCall.oneCall).toBeGreaterThanOrEqual(16);
    expect(oneCall.inline).toBeGreaterThanOrEqual(16);
    expect(offThread.oneCall).toBeGreaterThanOrEqual(16);
    expect(offThread.inline).toBe(0);
    expect(oneCall.tokens).toEqual(general.tokens);
    expect(offThread.tokens).toEqual(general.tokens);
    for (const m of offThread.moved.slice(4)) expect(m.peak).toBeLessThan(bufferBytes / 4);
    for (const m of oneCall.moved.slice(4)) {
      expect(m.peak).toBeLessThan(bufferBytes / 4);
      expect(m.down).toBeLessThan(config.vocab * 4 + 64);
    }
    // Kept, not donated: the one-call run copies the caches and leaves the fed ones intact.
    const kept = await steps(false, 1000);
    expect(kept.oneCall).toBeGreaterThanOrEqual(16);
    expect(kept.tokens).toEqual(general.tokens);
    for (const m of kept.moved.slice(4)) expect(m.peak).toBeGreaterThanOrEqual(cacheBytes);
  }, 120_000);
});

describe('GroupQueryAttention shared buffer: the step check made once for every layer', () => {
  // Every layer derives its positions, mask and seqlens_k check from the same inputs; the run
  // makes them once (OpContext.shared). A seqlens_k that puts the new tokens before the buffer's
  // start fails the run, naming a GroupQueryAttention node, compiled or eager, and the session
  // runs the next good feed. (The compiled step once wrote those rows before the buffer: SIGSEGV.)
  for (const compiled of [true, false])
    it(`a bad seqlens_k fails the run (${compiled ? 'compiled' : 'eager'}), a good one runs after it`, async () => {
      const config: DecoderConfig = { ...llama, layers: 3 };
      const session = await MlxSession.create(buildDecoder(config), { device: 'cpu', compiled });
      const caches = cacheNames(session as never);
      const ints = (v: number[]) => ({ dtype: 7, dims: [1, v.length], data: BigInt64Array.from(v.map(BigInt)) });
      const past = (): Record<string, Value> =>
        Object.fromEntries(
          caches.map((c) => [c.past, { kind: 'device', array: mx.zeros([1, 2, 16, 16], 'float32'), onnxType: 1 } as Value]),
        );
      try {
        const feeds = (mask: number[]) => ({ input_ids: ints([5, 6]), attention_mask: ints(mask), ...past() });
        // Two new tokens, one position in the mask: seqlens_k + 1 = 1 < 2.
        const bad = [1, ...Array(15).fill(0)];
        const good = [1, 1, 1, ...Array(13).fill(0)];
        for (let i = 0; i < 2; i++) {
          await expect(session.run(feeds(good))).resolves.toBeDefined();
          await expect(session.run(feeds(bad))).rejects.toThrow(
            /'gqa_0' \(GroupQueryAttention\): seqlens_k\[0\] = 0 is too small for sequence_length 2/,
          );
        }
        const out = await session.run(feeds(good));
        expect((out.logits as { dims: number[] }).dims).toEqual([1, 2, config.vocab]);
      } finally {
        session.release();
      }
    });
});

describe('the compiled path on a deep decoder', () => {
  // 10 layers: 21 outputs (logits and the presents) plus guards, more than the first call of a
  // compiled segment had room for, and attention applies a closure of its own while the segment is
  // traced. The first decode signature of a session once retraced on the wrong arrays, failed, and
  // ran eagerly for the rest of the session (about 3x slower per token).
  it('traces the decode steps of the first context as well as a later one', async () => {
    const deep: DecoderConfig = {
      kind: 'llama',
      layers: 10,
      hidden: 32,
      heads: 2,
      kvHeads: 1,
      ffn: 64,
      vocab: 256,
      maxPositions: 64,
      seed: 9,
    };
    const bytes = buildDecoder(deep);
    const want = await withSession(bytes, {}, (s) => tokens(s, { maxNewTokens: 8, kvCapacity: 24 }));
    await withSession(bytes, onDevice, async (s) => {
      const have = await tokens(s, { maxNewTokens: 8, kvCapacity: 24 });
      expect(have).toEqual(want);
      const session = (s as unknown as { handler: { session: MlxSession } }).handler.session;
      const sigs = session.describeSignatures();
      // The prompt's signature ran once (analysed, not traced); the decode steps' ran 7 times.
      expect(sigs).toHaveLength(2);
      expect(sigs[1].segments).toBeGreaterThan(0);
      expect(sigs[1].traced).toBe(sigs[1].segments);
    });
  }, 120_000);
});

describe('binding outputs into tensors (onnxruntime-common)', () => {
  const capacity = 1024;
  const config: DecoderConfig = { ...llama, hidden: 128, heads: 4, kvHeads: 4, maxPositions: 2048 };
  const bufferBytes = 4 * capacity * 32 * 4;

  it('a device tensor fed as the past and pre-allocated as the present is written in place and returned', async () => {
    await withSession(buildDecoder(config), onDevice, async (s) => {
      const caches = cacheNames(s);
      const ints = (v: number[]) => new ort.Tensor('int64', BigInt64Array.from(v.map(BigInt)), [1, v.length]);
      const mask = (n: number) => ints(Array.from({ length: capacity }, (_, k) => (k < n ? 1 : 0)));
      const zeros = () => new ort.Tensor('float32', new Float32Array(4 * capacity * 32), [1, 4, capacity, 32]);
      const f: Record<string, OrtTensor> = { input_ids: ints(prompt), attention_mask: mask(prompt.length) };
      for (const c of caches) f[c.past] = zeros();
      const first = await s.run(f);
      const past = caches.map((c) => first[c.present]);
      first.logits.dispose();
      let n = prompt.length;
      for (let step = 0; step < 6; step++) {
        const feeds: Record<string, OrtTensor> = { input_ids: ints([step + 1]), attention_mask: mask(++n) };
        const fetches: Record<string, OrtTensor | null> = { logits: null };
        caches.forEach((c, i) => {
          feeds[c.past] = past[i];
          fetches[c.present] = past[i];
        });
        mx.memory.clearCache();
        const active = mx.memory.active();
        mx.memory.resetPeak();
        const out = await s.run(feeds, fetches as never);
        expect(mx.memory.peak() - active).toBeLessThan(bufferBytes / 4);
        caches.forEach((c, i) => expect(out[c.present]).toBe(past[i]));
        out.logits.dispose();
      }
      // The cache holds the rows written in place: its first rows are the prompt's, its tail still zeros.
      const key = (await past[0].getData()) as Float32Array;
      expect(key.subarray(0, 32).some((x) => x !== 0)).toBe(true);
      expect(key.subarray((n + 1) * 32, capacity * 32).every((x) => x === 0)).toBe(true);
      // A pre-allocated device tensor of another shape is a clear error.
      const feeds: Record<string, OrtTensor> = { input_ids: ints([1]), attention_mask: mask(n + 1) };
      caches.forEach((c, i) => (feeds[c.past] = past[i]));
      const other = await s.run({
        input_ids: ints(prompt),
        attention_mask: ints(new Array(prompt.length).fill(1)),
        ...Object.fromEntries(caches.map((c) => [c.past, new ort.Tensor('float32', new Float32Array(0), [1, 4, 0, 32])])),
      });
      await expect(s.run(feeds, { logits: null, [caches[0].present]: other[caches[0].present] } as never)).rejects.toThrow(
        /output 'present.0.key' is float32 \[1, 4, 1024, 32\], but its pre-allocated tensor is float32 \[1, 4, 8, 32\]/,
      );
      // A pre-allocated CPU tensor is filled.
      const logits = new ort.Tensor('float32', new Float32Array(config.vocab), [1, 1, config.vocab]);
      const filled = await s.run(feeds, { logits } as never);
      expect(filled.logits).toBe(logits);
      expect((logits.data as Float32Array).some((x) => x !== 0)).toBe(true);
      for (const t of [...past, ...Object.values(other), ...Object.values(filled)]) if (t !== logits) t.dispose();
    });
  }, 120_000);
});

describe('growing caches (Concat past/present) appended in place', () => {
  const config: DecoderConfig = { ...gpt2, hidden: 128, heads: 4, maxPositions: 1024 };
  const H = 32;
  /** Decode steps after a 300-token prompt: each step's peak memory over its start, and whether the pasts were consumed. */
  async function steps(consume: boolean): Promise<{ peaks: number[]; tokens: number[]; cacheBytes: number }> {
    return withSession(buildDecoder(config), onDevice, async (s) => {
      const caches = cacheNames(s);
      const ints = (v: number[]) => new ort.Tensor('int64', BigInt64Array.from(v.map(BigInt)), [1, v.length]);
      let past: OrtTensor[] = caches.map(() => new ort.Tensor('float32', new Float32Array(0), [1, 4, 0, H]));
      let ids = Array.from({ length: 300 }, (_, i) => (i * 31) % config.vocab);
      let cached = 0;
      const peaks: number[] = [];
      const tokens: number[] = [];
      for (let step = 0; step < 12; step++) {
        const feeds: Record<string, OrtTensor> = {
          input_ids: ints(ids),
          attention_mask: ints(new Array(cached + ids.length).fill(1)),
          position_ids: ints(ids.map((_, i) => cached + i)),
        };
        caches.forEach((c, i) => {
          feeds[c.past] = past[i];
          const own = deviceBufferOf(past[i]);
          if (own) own.consumable = consume;
        });
        mx.memory.clearCache();
        const active = mx.memory.active();
        mx.memory.resetPeak();
        const out = await s.run(feeds);
        peaks.push(mx.memory.peak() - active);
        for (const t of past) if (t.location === 'gpu-buffer') t.dispose();
        past = caches.map((c) => out[c.present]);
        const logits = (await out.logits.getData(true)) as Float32Array;
        cached += ids.length;
        ids = [pickToken(logits.subarray(logits.length - config.vocab), 'greedy')];
        tokens.push(ids[0]);
      }
      for (const t of past) t.dispose();
      return { peaks, tokens, cacheBytes: caches.length * 4 * cached * H * 4 };
    });
  }

  it('a second generation in one session (13 signatures: the second traces them, the third replays; traced Concats copy) gives the same tokens', async () => {
    const bytes = buildDecoder(gpt2);
    const want = await withSession(bytes, {}, (s) => tokens(s, { maxNewTokens: 12 }));
    const have = await withSession(bytes, onDevice, async (s) => [
      await tokens(s, { maxNewTokens: 12 }),
      await tokens(s, { maxNewTokens: 12 }),
      await tokens(s, { maxNewTokens: 12 }),
    ]);
    expect(have).toEqual([want, want, want]);
  }, 120_000);

  it('consumed pasts grow in their reserve: no decode step copies the cache', async () => {
    const kept = await steps(false);
    const consumed = await steps(true);
    expect(consumed.tokens).toEqual(kept.tokens);
    // Steps 2.. append to the reserve made at the prompt (room for 1024 rows); the first decode step
    // still reads a past the caller held through the prompt's run.
    for (const p of consumed.peaks.slice(2)) expect(p).toBeLessThan(consumed.cacheBytes / 8);
    // The control: a past the caller keeps is concatenated, a copy of the whole cache, every step.
    for (const p of kept.peaks.slice(2)) expect(p).toBeGreaterThan(consumed.cacheBytes);
  }, 120_000);
});

describe('sampling', () => {
  it('is seeded, and top-k 1 and a tiny top-p are greedy', async () => {
    const bytes = buildDecoder(llama);
    await withSession(bytes, onDevice, async (s) => {
      const greedy = await tokens(s, { maxNewTokens: 12 });
      const a = await tokens(s, { maxNewTokens: 12, sampling: { seed: 4, temperature: 1.5, topK: 50, topP: 0.95 } });
      const b = await tokens(s, { maxNewTokens: 12, sampling: { seed: 4, temperature: 1.5, topK: 50, topP: 0.95 } });
      const c = await tokens(s, { maxNewTokens: 12, sampling: { seed: 5, temperature: 1.5, topK: 50, topP: 0.95 } });
      expect(a).toEqual(b);
      expect(c).not.toEqual(a);
      expect(await tokens(s, { maxNewTokens: 12, sampling: { seed: 1, topK: 1 } })).toEqual(greedy);
      expect(await tokens(s, { maxNewTokens: 12, sampling: { seed: 1, topP: 1e-6 } })).toEqual(greedy);
      // A stop token ends the stream after yielding it.
      expect(await tokens(s, { maxNewTokens: 12, stopTokens: [greedy[3]] })).toEqual(greedy.slice(0, greedy.indexOf(greedy[3]) + 1));
    });
  }, 120_000);

  it("downloads only the last position's logits, also for a prompt", async () => {
    await withSession(buildDecoder(llama), onDevice, async (s) => {
      const long = Array.from({ length: 64 }, (_, i) => (i * 5) % llama.vocab);
      const before = transferStats().downloadedBytes;
      const got = await tokens(s, { inputIds: long, maxNewTokens: 1, kvCapacity: 80, sampler: 'host' });
      // One row of logits, and the prompt's seqlens_k and total_sequence_length (GroupQueryAttention reads them on the host).
      const down = transferStats().downloadedBytes - before;
      expect(down).toBeGreaterThanOrEqual(llama.vocab * 4);
      expect(down).toBeLessThanOrEqual(llama.vocab * 4 + 16);
      const want = await withSession(buildDecoder(llama), {}, (r) => tokens(r, { inputIds: long, maxNewTokens: 1, kvCapacity: 80 }));
      expect(got).toEqual(want);
      // The default (greedy chosen on the device): the token id instead of the row.
      const middle = transferStats().downloadedBytes;
      expect(await tokens(s, { inputIds: long, maxNewTokens: 1, kvCapacity: 80 })).toEqual(want);
      expect(transferStats().downloadedBytes - middle).toBe(down - llama.vocab * 4 + 4);
    });
  });

  it('top-k and top-p keep the right tokens (frequencies)', () => {
    const logits = [0, Math.log(2), Math.log(3), Math.log(4)]; // p = .1 .2 .3 .4
    let s = 1;
    const random = () => ((s = (s * 16807) % 2147483647) - 1) / 2147483646;
    const count = (opts: Parameters<typeof pickToken>[1]) => {
      const n = [0, 0, 0, 0];
      for (let i = 0; i < 20000; i++) n[pickToken(logits, opts, random)]++;
      return n.map((x) => x / 20000);
    };
    const k2 = count({ topK: 2 });
    expect(k2[0] + k2[1]).toBe(0);
    expect(k2[3]).toBeCloseTo(4 / 7, 1);
    const p = count({ topP: 0.65 }); // .4 + .3 reaches .65
    expect(p[0] + p[1]).toBe(0);
    expect(p[2]).toBeCloseTo(3 / 7, 1);
  });
});

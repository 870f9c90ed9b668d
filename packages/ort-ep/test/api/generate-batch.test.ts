// generateBatch(): prompts of different lengths in one batch, padded on the left (GPT-2-shaped,
// position_ids and a mask) or on the right (Llama-shaped, GroupQueryAttention's layout, growing or
// in a shared buffer): each sequence's greedy tokens are its own batch-1 run's, on mlx and on
// onnxruntime-node running the same loop.
import { describe, expect, it } from 'vitest';
import { type BatchStep, InvalidFeedError, generate, generateBatch, transferStats } from '../../src/index.js';
import { buildDecoder, type DecoderConfig } from '../helpers/decoder.js';
import { mlxCpu, ort } from '../helpers/ort.js';

const llama: DecoderConfig = { kind: 'llama', layers: 2, hidden: 64, heads: 4, kvHeads: 2, ffn: 128, vocab: 256, maxPositions: 256 };
const gpt2: DecoderConfig = { kind: 'gpt2', layers: 2, hidden: 64, heads: 4, ffn: 128, vocab: 256, maxPositions: 256, seed: 3 };
const prompts = [[3, 17, 42, 99, 7, 128, 5, 77], [9, 4], [200, 1, 33, 64, 18], [250]];
type Session = import('onnxruntime-node').InferenceSession;
type BatchOpts = Partial<Parameters<typeof generateBatch>[1]>;
type Opts = Partial<Parameters<typeof generate>[1]>;

const onDevice = { ...mlxCpu, preferredOutputLocation: 'gpu-buffer' };

async function single(s: Session, prompt: number[], opts: Opts): Promise<number[]> {
  const out: number[] = [];
  for await (const t of generate(s, { inputIds: prompt, maxNewTokens: 24, Tensor: ort.Tensor as never, ...opts })) out.push(t);
  return out;
}

async function batch(s: Session, opts: BatchOpts, steps?: BatchStep[]): Promise<number[][]> {
  const input = (opts.inputIds ?? prompts) as number[][];
  const out: number[][] = input.map(() => []);
  for await (const st of generateBatch(s, { inputIds: input, maxNewTokens: 24, Tensor: ort.Tensor as never, ...opts })) {
    steps?.push(st);
    st.tokens.forEach((t, b) => t !== undefined && out[b].push(t));
  }
  return out;
}

async function withSession<T>(bytes: Uint8Array, options: object, body: (s: Session) => Promise<T>): Promise<T> {
  const s = await ort.InferenceSession.create(bytes, options as never);
  try {
    return await body(s);
  } finally {
    await s.release();
  }
}

describe('generateBatch: batch 4 greedy equals four batch-1 runs', () => {
  const cases: [string, DecoderConfig, BatchOpts][] = [
    ['GPT-2 (Concat cache, left padding)', gpt2, {}],
    ['Llama (GQA, growing cache, right padding)', llama, {}],
    ['Llama (GQA, shared buffer kvCapacity 64, right padding)', llama, { kvCapacity: 64 }],
  ];
  for (const [name, config, opts] of cases)
    it(name, async () => {
      const bytes = buildDecoder(config);
      const one = { kvCapacity: opts.kvCapacity };
      const want = await withSession(bytes, {}, (s) => Promise.all(prompts.map((p) => single(s, p, one))));
      const ortBatch = await withSession(bytes, {}, (s) => batch(s, opts));
      const mlxBatch = await withSession(bytes, mlxCpu, (s) => batch(s, opts));
      const mlxDevice = await withSession(bytes, onDevice, (s) => batch(s, opts));
      expect(ortBatch).toEqual(want);
      expect(mlxBatch).toEqual(want);
      expect(mlxDevice).toEqual(want);
    }, 120_000);
});

describe('generateBatch on an mlx session made without options', () => {
  it('keeps the cache on the device in one shared buffer: the logits alone downloaded, no step unanalysed', async () => {
    const bytes = buildDecoder(llama);
    const want = await withSession(bytes, {}, (s) => batch(s, {}));
    await withSession(bytes, mlxCpu, async (s) => {
      const before = transferStats().downloadedBytes;
      expect(await batch(s, {})).toEqual(want);
      const down = transferStats().downloadedBytes - before;
      // The logits (the prompt's [4, 8, 256], then [4, 1, 256] a step) and what GroupQueryAttention
      // reads of its mask: never a present (2 layers x 2 x [4, 2, n, 16] floats a step).
      expect(down).toBeLessThan(prompts.length * llama.vocab * 4 * (8 + 23) + 24 * 64);
      const stats = (s as unknown as { handler: { session: { compileStats: { unanalysed: number; size: number } } } }).handler.session
        .compileStats;
      expect(stats.unanalysed).toBe(0);
      expect(stats.size).toBeLessThanOrEqual(5);
    });
  }, 120_000);
});

describe('generateBatch: every option applies per sequence', () => {
  const engines: [string, object][] = [
    ['onnxruntime-node', {}],
    ['mlx', onDevice],
  ];
  for (const [engine, options] of engines) {
    it(`${engine}: stop tokens and sequences, minNewTokens, penalties and a logits processor, each sequence as batch 1`, async () => {
      const bytes = buildDecoder(gpt2);
      await withSession(bytes, options, async (s) => {
        const greedy = await Promise.all(prompts.map((p) => single(s, p, {})));
        // Stops that end sequences 0 and 2 early, at different steps; sequence 1 by a stop sequence.
        const opts: Opts = {
          stopTokens: [greedy[0][4], greedy[2][9]],
          stopSequences: [greedy[1].slice(5, 7)],
          minNewTokens: 2,
          repetitionPenalty: 1.1,
          presencePenalty: 0.05,
        };
        const seen: number[][] = prompts.map(() => []);
        const processor = (b: number) => (l: Float32Array, seq: readonly number[]) => {
          seen[b].push(seq.length);
          l[7] += 0.5;
        };
        const want = [];
        for (let b = 0; b < prompts.length; b++) want.push(await single(s, prompts[b], { ...opts, logitsProcessor: processor(b) }));
        const wantSeen = seen.map((x) => [...x]);
        for (const x of seen) x.length = 0;
        const steps: BatchStep[] = [];
        const have = await batch(s, { ...opts, logitsProcessor: (l, seq, b) => processor(b)(l, seq) }, steps);
        expect(have).toEqual(want);
        expect(seen).toEqual(wantSeen);
        const lengths = want.map((w) => w.length);
        expect(new Set(lengths).size).toBeGreaterThan(2);
        expect(Math.min(...lengths)).toBeLessThan(24);
        // The stream runs until the longest sequence ends; an ended sequence yields undefined and stays done.
        expect(steps).toHaveLength(Math.max(...lengths));
        steps.forEach((st, i) => {
          expect(st.step).toBe(i);
          st.tokens.forEach((t, b) => {
            expect(t === undefined).toBe(i >= lengths[b]);
            expect(st.done[b]).toBe(i >= lengths[b] - 1);
          });
        });
      });
    }, 120_000);

    it(`${engine}: seeded sampling draws one stream per sequence (seed + index), as batch 1`, async () => {
      const bytes = buildDecoder(llama);
      await withSession(bytes, options, async (s) => {
        const sampling = { temperature: 1.5, topK: 40, topP: 0.95, seed: 5 };
        const want = await Promise.all(prompts.map((p, b) => single(s, p, { sampling: { ...sampling, seed: 5 + b } })));
        const first = await batch(s, { sampling });
        expect(first).toEqual(want);
        expect(await batch(s, { sampling })).toEqual(first);
        expect(await batch(s, { sampling: { ...sampling, seed: 6 } })).not.toEqual(first);
        // Greedy would repeat; sampling does not follow it.
        expect(first).not.toEqual(await batch(s, {}));
      });
    }, 120_000);
  }

  it("left pads on a GroupQueryAttention model are attended (seqlens_k counts from row 0): why 'right' is its default", async () => {
    const bytes = buildDecoder(llama);
    await withSession(bytes, {}, async (s) => {
      const want = await Promise.all(prompts.map((p) => single(s, p, {})));
      expect(await batch(s, { padding: 'left' })).not.toEqual(want);
      expect(await batch(s, { padding: 'right' })).toEqual(want);
    });
  }, 120_000);

  it("a GroupQueryAttention model with position_ids: mlx defaults to 'right' (it reads the model), onnxruntime-node is told", async () => {
    // Rotary by RotaryEmbedding at position_ids, attention by GroupQueryAttention: position_ids
    // alone would say 'left', which GroupQueryAttention misreads (its rows from row 0).
    const bytes = buildDecoder({ ...llama, positionIds: true });
    const want = await withSession(bytes, {}, (s) => Promise.all(prompts.map((p) => single(s, p, {}))));
    expect(await withSession(bytes, mlxCpu, (s) => batch(s, {}))).toEqual(want);
    expect(await withSession(bytes, onDevice, (s) => batch(s, {}))).toEqual(want);
    // onnxruntime-node shows no graph: 'left' by position_ids (wrong), 'right' when told.
    await withSession(bytes, {}, async (s) => {
      expect(await batch(s, {})).not.toEqual(want);
      expect(await batch(s, { padding: 'right' })).toEqual(want);
    });
    // Where the model is seen, 'left' is refused with the reason.
    const e = await withSession(bytes, mlxCpu, (s) => batch(s, { padding: 'left' })).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(TypeError);
    expect((e as Error).message).toMatch(
      /^generateBatch: padding 'left' on a model with GroupQueryAttention, which reads each sequence's length/,
    );
  }, 120_000);

  it('a sliding window cache (kvWindow): prompts of one length, each sequence as batch 1; prompts of several lengths refused', async () => {
    const W = 8;
    const bytes = buildDecoder({ ...llama, window: W, slidingCache: true });
    const same = [prompts[0], prompts[0].map((t) => (t + 5) % 256), prompts[0].slice().reverse()];
    const want = await withSession(bytes, {}, (s) => Promise.all(same.map((p) => single(s, p, { kvWindow: W }))));
    expect(await withSession(bytes, {}, (s) => batch(s, { inputIds: same, kvWindow: W }))).toEqual(want);
    expect(await withSession(bytes, onDevice, (s) => batch(s, { inputIds: same }))).toEqual(want);
    const e = await withSession(bytes, mlxCpu, (s) => batch(s, {})).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(InvalidFeedError);
    expect((e as Error).message).toMatch(/sliding window cache .* takes prompts of one length .* got lengths 8, 2, 5, 1/);
  }, 120_000);

  it('a batch of one and prompts of one length need no pads; maxNewTokens 0 runs nothing', async () => {
    const bytes = buildDecoder(gpt2);
    await withSession(bytes, mlxCpu, async (s) => {
      expect(await batch(s, { inputIds: [prompts[2]] })).toEqual([await single(s, prompts[2], {})]);
      const same = [prompts[0], prompts[0].map((t) => (t + 1) % 256)];
      expect(await batch(s, { inputIds: same })).toEqual(await Promise.all(same.map((p) => single(s, p, {}))));
      const steps: BatchStep[] = [];
      expect(await batch(s, { maxNewTokens: 0 }, steps)).toEqual([[], [], [], []]);
      expect(steps).toEqual([]);
    });
  }, 120_000);
});

describe('generateBatch checks the batch before its first run', () => {
  const bytes = buildDecoder({ kind: 'gpt2', layers: 1, hidden: 32, heads: 2, ffn: 64, vocab: 64, maxPositions: 64 });
  const base = { inputIds: [[3, 17, 42], [5]], maxNewTokens: 3, Tensor: ort.Tensor as never };
  const steps = async (session: object, opts: Record<string, unknown>) => {
    const out: BatchStep[] = [];
    for await (const st of generateBatch(session as never, { ...base, ...opts } as never)) out.push(st);
    return out;
  };
  const failure = (p: Promise<unknown>) =>
    p.then(
      () => undefined,
      (e: unknown) => e,
    );
  const cases: [string, Record<string, unknown>, new (...a: never[]) => Error, RegExp][] = [
    [
      'inputIds null',
      { inputIds: null },
      TypeError,
      /^generateBatch: inputIds must be an array of prompts \(arrays of token ids\), got null$/,
    ],
    ['no prompts', { inputIds: [] }, RangeError, /^generateBatch: inputIds holds no prompts$/],
    [
      'a single prompt (batch 1 form)',
      { inputIds: [3, 17] },
      TypeError,
      /^generateBatch: inputIds\[0\] must be a prompt \(an array of token ids\), got 3 \(generate\(\) takes a single prompt as one array\)$/,
    ],
    [
      'a prompt and a number mixed',
      { inputIds: [[3], 'x'] },
      TypeError,
      /inputIds\[1\] must be a prompt \(an array of token ids\), got 'x'$/,
    ],
    ['an empty prompt', { inputIds: [[3, 4], []] }, RangeError, /^generateBatch: inputIds\[1\] is an empty prompt/],
    ['a negative token id', { inputIds: [[3], [4, -1]] }, RangeError, /^generateBatch: inputIds\[1\]\[1\] = -1 is not a token id/],
    ['a fractional token id', { inputIds: [[3.5]] }, RangeError, /inputIds\[0\]\[0\] = 3.5 is not a token id/],
    ['padTokenId 1.5', { padTokenId: 1.5 }, RangeError, /^generateBatch: padTokenId must be a token id \(an integer ≥ 0\), got 1.5$/],
    ['padTokenId -1', { padTokenId: -1 }, RangeError, /padTokenId must be a token id \(an integer ≥ 0\), got -1$/],
    ["padTokenId '0'", { padTokenId: '0' }, TypeError, /^generateBatch: padTokenId must be a token id \(a number\), got '0'$/],
    ["padding 'center'", { padding: 'center' }, TypeError, /^generateBatch: padding must be 'left' or 'right', got 'center'$/],
    ['promptLookup', { promptLookup: {}, kvCapacity: 16 }, TypeError, /^generateBatch: promptLookup is batch 1 only/],
    [
      "padding 'left' with kvCapacity",
      { padding: 'left', kvCapacity: 16 },
      TypeError,
      /^generateBatch: kvCapacity \(GroupQueryAttention's shared buffer\) takes right-padded batches only/,
    ],
    ['maxNewTokens -1', { maxNewTokens: -1 }, RangeError, /^generateBatch: maxNewTokens must be an integer ≥ 0, got -1$/],
    ['topP 2', { sampling: { topP: 2 } }, RangeError, /^generateBatch: sampling.topP must be in \(0, 1\], got 2$/],
    ['logitsProcessor 5', { logitsProcessor: 5 }, TypeError, /^generateBatch: logitsProcessor must be a function, got 5$/],
    ['an unknown option', { padToken: 0 }, TypeError, /^generateBatch: unknown option 'padToken' \(known: .*padTokenId, padding\)$/],
    [
      'kvCapacity too small',
      { kvCapacity: 4, maxNewTokens: 2 },
      RangeError,
      /longest prompt's 3 tokens \+ 2 new ones do not fit kvCapacity 4$/,
    ],
  ];
  it('each bad value is a TypeError or RangeError naming it, before any token', async () => {
    const session = await ort.InferenceSession.create(bytes, mlxCpu);
    try {
      for (const [what, opts, cls, message] of cases) {
        const got = await failure(steps(session, opts));
        expect(got, what).toBeInstanceOf(cls);
        expect((got as Error).message, what).toMatch(message);
      }
      expect(await steps(session, {})).toHaveLength(3);
    } finally {
      await session.release();
    }
  }, 60_000);

  it('a logits processor returning a wrong array, a fixed batch size and a missing mask are named', async () => {
    const session = await ort.InferenceSession.create(bytes, mlxCpu);
    try {
      const got = await failure(
        steps(session, { logitsProcessor: (_l: Float32Array, _s: number[], b: number) => (b === 1 ? new Float32Array(3) : undefined) }),
      );
      expect(got).toBeInstanceOf(TypeError);
      expect((got as Error).message).toBe(
        'generateBatch: logitsProcessor returned something other than a Float32Array of 64 logits (sequence 1)',
      );
      // The same graph's names with a batch of 1 fixed in input_ids, then without attention_mask.
      const meta = session.inputMetadata.map((m) => (m.name === 'input_ids' && m.isTensor ? { ...m, shape: [1, 'sequence'] } : m));
      const fixed = {
        inputNames: session.inputNames,
        outputNames: session.outputNames,
        inputMetadata: meta,
        run: session.run.bind(session),
      };
      const batchOfOne = await failure(steps(fixed, {}));
      expect(batchOfOne).toBeInstanceOf(InvalidFeedError);
      expect(batchOfOne).toMatchObject({
        message: "generateBatch: the model's input 'input_ids' has a fixed batch size 1, and the batch holds 2 prompts",
      });
      const keep = session.inputNames.flatMap((n, i) => (n === 'attention_mask' ? [] : [i]));
      const noMask = {
        ...fixed,
        inputNames: keep.map((i) => session.inputNames[i]),
        inputMetadata: keep.map((i) => session.inputMetadata[i]),
      };
      const masked = await failure(steps(noMask, {}));
      expect(masked).toBeInstanceOf(InvalidFeedError);
      expect(masked).toMatchObject({
        message: "generateBatch: the model has no 'attention_mask' input, so the pads of prompts of different lengths cannot be masked",
      });
    } finally {
      await session.release();
    }
  }, 60_000);
});

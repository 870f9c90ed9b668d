// generate()'s prefix cache: the KV state of an earlier sequence reused for a prompt that starts
// with it, in memory and through safetensors files another process reads. The reference is the
// same generate() without the cache (a cold prefill), on onnxruntime-node and mlx alike: the
// tokens equal, the first step's logits within 1e-5.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { OrtMlxError, PrefixCache, generate } from '../../src/index.js';
import { buildDecoder, type DecoderConfig, tinyLlama } from '../helpers/decoder.js';
import { mlxCpu, ort } from '../helpers/ort.js';

const llama = tinyLlama({ maxPositions: 512, seed: 33 });
const gpt2: DecoderConfig = { ...llama, kind: 'gpt2', heads: 4, kvHeads: 4, seed: 34 };
const system = Array.from({ length: 40 }, (_, i) => (i * 37 + 11) % 256);
const dirs: string[] = [];
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'mlx-prefix-'));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

type Session = import('onnxruntime-node').InferenceSession;
type Opts = Partial<Parameters<typeof generate>[1]>;

/** The tokens, and the logits the first step chose from (copied). */
async function run(session: Session, inputIds: number[], opts: Opts = {}): Promise<{ tokens: number[]; first: Float32Array }> {
  const tokens: number[] = [];
  let first: Float32Array | undefined;
  const logitsProcessor = (l: Float32Array) => {
    first ??= Float32Array.from(l);
  };
  for await (const t of generate(session, { inputIds, maxNewTokens: 12, Tensor: ort.Tensor as never, logitsProcessor, ...opts }))
    tokens.push(t);
  return { tokens, first: first as Float32Array };
}

const maxDiff = (a: Float32Array, b: Float32Array) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);

const engines: [string, import('onnxruntime-node').InferenceSession.SessionOptions][] = [
  ['onnxruntime-node', {}],
  ['mlx', mlxCpu],
  ['mlx, gpu-buffer outputs', { ...mlxCpu, preferredOutputLocation: 'gpu-buffer' }],
];

describe('a prefix cache in memory', () => {
  for (const [engine, options] of engines)
    for (const [cfg, capacity] of [
      [llama, 128],
      [llama, undefined],
      [gpt2, undefined],
    ] as [DecoderConfig, number | undefined][]) {
      it(`${engine}, ${cfg.kind}${capacity ? ', kvCapacity' : ', growing cache'}: a second turn reuses the first's state`, async () => {
        const session = await ort.InferenceSession.create(buildDecoder(cfg), options);
        try {
          const cache = new PrefixCache({ model: `test-${cfg.kind}-${cfg.seed}` });
          const turn1 = [...system, 5, 6, 7];
          const a = await run(session, turn1, { prefixCache: cache, kvCapacity: capacity });
          expect(cache.stats).toMatchObject({ hits: 0, misses: 1, stored: 1 });
          // The next turn: the first turn's prompt and answer, then new tokens.
          const turn2 = [...turn1, ...a.tokens, 9, 10, 11];
          const warm = await run(session, turn2, { prefixCache: cache, kvCapacity: capacity });
          // The cache held prompt + the answer's first 11 tokens (the 12th was never run).
          expect(cache.stats.hits).toBe(1);
          expect(cache.stats.tokensReused).toBe(turn1.length + a.tokens.length - 1);
          const cold = await run(session, turn2, { kvCapacity: capacity });
          expect(warm.tokens).toEqual(cold.tokens);
          expect(maxDiff(warm.first, cold.first)).toBeLessThan(1e-5);
          // The longer sequence replaced the entry it extends.
          expect(cache.size).toBe(1);
          // The same prompt again: all but its last token reused, same tokens.
          const again = await run(session, turn2, { prefixCache: cache, kvCapacity: capacity });
          expect(again.tokens).toEqual(cold.tokens);
          expect(cache.stats.tokensReused).toBe(turn1.length + a.tokens.length - 1 + turn2.length - 1);
        } finally {
          await session.release();
        }
      });
    }

  it('a prompt that diverges inside an entry reuses the common part; short matches and other layouts none', async () => {
    const session = await ort.InferenceSession.create(buildDecoder(llama), mlxCpu);
    try {
      const cache = new PrefixCache({ model: 'm', minTokens: 8 });
      await run(session, [...system, 1, 2, 3], { prefixCache: cache });
      const fork = [...system.slice(0, 30), 200, 201, 202];
      const warm = await run(session, fork, { prefixCache: cache });
      expect(cache.stats.tokensReused).toBe(30);
      expect(warm.tokens).toEqual((await run(session, fork)).tokens);
      expect(maxDiff(warm.first, (await run(session, fork)).first)).toBeLessThan(1e-5);
      // Fewer common tokens than minTokens: a miss.
      await run(session, [...system.slice(0, 5), 250, 251], { prefixCache: cache });
      expect(cache.stats.misses).toBe(2);
      const other = await ort.InferenceSession.create(buildDecoder({ ...llama, layers: 1 }), mlxCpu);
      try {
        const before = cache.stats.hits;
        await run(other, [...system, 1, 2, 3, 4], { prefixCache: cache });
        expect(cache.stats.hits).toBe(before);
      } finally {
        await other.release();
      }
    } finally {
      await session.release();
    }
  });

  it('maxBytes bounds the memory the entries take', async () => {
    const session = await ort.InferenceSession.create(buildDecoder(llama), mlxCpu);
    try {
      // One layer's K or V for 60 tokens: 2 heads × 60 × 16 floats; 4 of them a sequence.
      const perToken = 2 * 2 * 2 * 16 * 4;
      const cache = new PrefixCache({ model: 'm', maxBytes: perToken * 70 });
      await run(
        session,
        Array.from({ length: 48 }, (_, i) => i),
        { prefixCache: cache },
      );
      expect(cache.bytesInMemory).toBe(perToken * (48 + 11));
      await run(
        session,
        Array.from({ length: 48 }, (_, i) => 100 + i),
        { prefixCache: cache },
      );
      expect(cache.size).toBe(1);
      expect(cache.bytesInMemory).toBe(perToken * (48 + 11));
    } finally {
      await session.release();
    }
  });

  it('a sliding window model is refused: its buffers hold the last tokens, not a prefix', async () => {
    const session = await ort.InferenceSession.create(buildDecoder({ ...llama, window: 8, slidingCache: true }), mlxCpu);
    try {
      await expect(run(session, [...system, 1], { prefixCache: new PrefixCache({ model: 'w' }) })).rejects.toThrow(
        /prefixCache does not take the model's sliding window caches/,
      );
    } finally {
      await session.release();
    }
  });

  it('a dir that is a file is a clear error, not a raw one', () => {
    const file = join(tempDir(), 'plain');
    writeFileSync(file, 'x');
    expect(() => new PrefixCache({ model: 'm', dir: file })).toThrow(/PrefixCache: dir .*plain cannot be used as the cache's folder/);
  });

  it('bad options are refused', () => {
    expect(() => new PrefixCache({} as never)).toThrow(/model must be a non-empty string/);
    expect(() => new PrefixCache({ model: 'm', maxBytes: -1 })).toThrow(/maxBytes must be an integer ≥ 0, got -1/);
    expect(() => new PrefixCache({ model: 'm', minTokens: 0 })).toThrow(/minTokens must be an integer ≥ 1, got 0/);
    const g = generate({ inputNames: [], outputNames: [], inputMetadata: [], run: async () => ({}) } as never, {
      inputIds: [1],
      maxNewTokens: 1,
      prefixCache: { match: () => undefined } as never,
    });
    return expect(g.next()).rejects.toThrow(/prefixCache must be a PrefixCache/);
  });
});

describe('a prefix cache on disk', () => {
  it('a second process reuses a folder of entries, content-addressed safetensors files', async () => {
    const dir = tempDir();
    const modelFile = join(dir, 'decoder.onnx');
    writeFileSync(modelFile, buildDecoder(llama));
    const session = await ort.InferenceSession.create(modelFile, mlxCpu);
    const prompt = [...system, 1, 2, 3];
    let cold: { tokens: number[]; first: Float32Array };
    try {
      await run(session, prompt, { prefixCache: new PrefixCache({ model: 'llama-33', dir }) });
      cold = await run(session, [...prompt, 4, 5]);
    } finally {
      await session.release();
    }
    const files = readdirSync(dir).filter((f) => f.endsWith('.safetensors'));
    expect(files).toHaveLength(1);
    expect(files[0]).toMatch(/^[0-9a-f]{64}\.safetensors$/);
    // The file is safetensors: an 8-byte header length, a JSON header, the data.
    const bytes = readFileSync(join(dir, files[0]));
    const n = Number(bytes.readBigUInt64LE(0));
    const header = JSON.parse(bytes.subarray(8, 8 + n).toString());
    expect(header['past_key_values.0.key']).toMatchObject({ dtype: 'F32', shape: [2, prompt.length + 11, 16] });
    expect(JSON.parse(header.__metadata__.tokens).slice(0, prompt.length)).toEqual(prompt);

    const child = fileURLToPath(new URL('../helpers/prefix-cache-child.ts', import.meta.url));
    const r = spawnSync(
      process.execPath,
      ['--conditions=source', '--import', 'tsx', child, modelFile, dir, JSON.stringify([...prompt, 4, 5])],
      {
        encoding: 'utf8',
        timeout: 120_000,
      },
    );
    expect(r.stderr).not.toMatch(/Error/);
    const got = JSON.parse(r.stdout.trim().split('\n').pop() as string) as {
      tokens: number[];
      first: number[];
      stats: PrefixCache['stats'];
    };
    expect(got.stats).toMatchObject({ hits: 1, filesRead: 1, tokensReused: prompt.length });
    expect(got.tokens).toEqual(cold.tokens);
    expect(maxDiff(Float32Array.from(got.first), cold.first)).toBeLessThan(1e-5);
  }, 180_000);

  it("another model's name, another layout and foreign files are not used; a damaged entry is a clear error", async () => {
    const dir = tempDir();
    const session = await ort.InferenceSession.create(buildDecoder(llama), mlxCpu);
    try {
      const prompt = [...system, 1, 2, 3];
      await run(session, prompt, { prefixCache: new PrefixCache({ model: 'a', dir }) });
      writeFileSync(join(dir, 'junk.safetensors'), 'not a safetensors file');
      writeFileSync(join(dir, 'huge.safetensors'), Buffer.from([255, 255, 255, 255, 255, 255, 255, 127]));
      // A FIFO under the name would block a reader: skipped, never opened.
      spawnSync('mkfifo', [join(dir, 'fifo.safetensors')]);
      expect(new PrefixCache({ model: 'b', dir }).size).toBe(0);
      expect(new PrefixCache({ model: 'a', dir }).size).toBe(1);
      // Damage the entry's data section: its header still indexes it, reading it fails clearly.
      const file = join(dir, readdirSync(dir).find((f) => /^[0-9a-f]{64}\.safetensors$/.test(f)) as string);
      const bytes = readFileSync(file);
      writeFileSync(file, bytes.subarray(0, bytes.length - 100));
      const damaged = new PrefixCache({ model: 'a', dir });
      const e = await run(session, [...prompt, 4], { prefixCache: damaged }).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(OrtMlxError);
      await expect(run(session, [...prompt, 4], { prefixCache: damaged })).rejects.toThrow(
        /\.safetensors holds \d+ bytes of data, not the \d+ its \d+ tokens take in this layout/,
      );
    } finally {
      await session.release();
    }
  });
});

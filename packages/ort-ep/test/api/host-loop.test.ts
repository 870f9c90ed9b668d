// transformers.js's generation loop through the 'mlx' provider: host tensors in every step, the
// past_key_values.* inputs set to the previous run's present.* Tensors (one row longer each step),
// the attention_mask one longer. Every step is a new input signature: the tokens and logits equal
// onnxruntime-node's CPU provider, and the compiled path stops analysing after a streak of misses.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
// (importing the package registers the 'mlx' backend)
import type { MlxSession } from '../../src/index.js';
import '../../src/index.js';
import { MISS_STREAK } from '../../src/execute/runner.js';
import { model, node, v } from '../helpers/build.js';
import { buildDecoder, type DecoderConfig, headSize, kvHeadsOf } from '../helpers/decoder.js';
import { type Feeds, mlxCpu, ort, type OrtTensor } from '../helpers/ort.js';

const CONFIGS: Record<string, DecoderConfig> = {
  gpt2: { kind: 'gpt2', layers: 2, hidden: 64, heads: 4, ffn: 256, vocab: 512, maxPositions: 64, seed: 11 },
  llama: { kind: 'llama', layers: 2, hidden: 64, heads: 4, kvHeads: 2, ffn: 128, vocab: 512, maxPositions: 64, seed: 5 },
};
const STEPS = 24;

/** Greedy tokens and the last row of logits of each step, fed as transformers.js feeds them. */
async function hostLoop(session: import('onnxruntime-node').InferenceSession, c: DecoderConfig, prompt: number[]) {
  const i64 = (xs: number[], dims: number[]) => new ort.Tensor('int64', BigInt64Array.from(xs, BigInt), dims);
  let feeds: Feeds = {
    input_ids: i64(prompt, [1, prompt.length]),
    attention_mask: i64(
      prompt.map(() => 1),
      [1, prompt.length],
    ),
  };
  if (session.inputNames.includes('position_ids'))
    feeds.position_ids = i64(
      prompt.map((_, i) => i),
      [1, prompt.length],
    );
  for (let l = 0; l < c.layers; l++)
    for (const kv of ['key', 'value'])
      feeds[`past_key_values.${l}.${kv}`] = new ort.Tensor('float32', new Float32Array(0), [1, kvHeadsOf(c), 0, headSize(c)]);
  const tokens: number[] = [];
  const rows: Float32Array[] = [];
  let total = prompt.length;
  for (let step = 0; step < STEPS; step++) {
    const out = (await session.run(feeds)) as Record<string, OrtTensor>;
    const logits = out.logits.data as Float32Array;
    const row = logits.slice(logits.length - c.vocab);
    rows.push(row);
    const next = row.indexOf(Math.max(...row));
    tokens.push(next);
    const nextFeeds: Feeds = { input_ids: i64([next], [1, 1]), attention_mask: i64(new Array(total + 1).fill(1), [1, total + 1]) };
    if (session.inputNames.includes('position_ids')) nextFeeds.position_ids = i64([total], [1, 1]);
    for (const name of Object.keys(out)) if (name.startsWith('present.')) nextFeeds[name.replace('present', 'past_key_values')] = out[name];
    // transformers.js's DynamicCache.update: a replaced 'gpu-buffer' past is disposed.
    for (const [name, t] of Object.entries(feeds)) if (t.location === 'gpu-buffer' && nextFeeds[name] !== t) t.dispose();
    feeds = nextFeeds;
    total++;
  }
  const locations = new Set(Object.entries(feeds).flatMap(([n, t]) => (n.startsWith('past_key_values.') ? [t.location] : [])));
  for (const t of Object.values(feeds)) if (t.location === 'gpu-buffer') t.dispose();
  return { tokens, rows, locations: [...locations] };
}

describe("transformers.js's host-fed loop through mlx", () => {
  for (const [kind, c] of Object.entries(CONFIGS))
    it(`${kind}: onnxruntime-node's tokens; the steps past the streak run unanalysed`, async () => {
      const bytes = buildDecoder(c);
      const prompt = [5, 17, 99, 3, 250];
      const want = await hostLoop(await ort.InferenceSession.create(bytes), c, prompt);
      const s = await ort.InferenceSession.create(bytes, mlxCpu);
      try {
        const got = await hostLoop(s, c, prompt);
        expect(got.tokens).toEqual(want.tokens);
        got.rows.forEach((row, k) => row.forEach((x, i) => expect(Math.abs(x - want.rows[k][i])).toBeLessThan(2e-4)));
        const stats = (s as unknown as { handler: { session: MlxSession } }).handler.session.compileStats;
        expect(stats).toMatchObject({ misses: MISS_STREAK, unanalysed: STEPS - MISS_STREAK, hits: 0 });
      } finally {
        await s.release();
      }
    });

  // The recipe of the README: preferredOutputLocation 'gpu-buffer' for the present.* outputs, which
  // transformers.js passes through session_options, so the cache fed back is the device Tensors of
  // the last run (nothing uploaded or downloaded but the new token, the mask and the logits).
  // mlx({ presentsOnDevice: true }) asks the same of every output named present*, without names.
  const presents = (c: DecoderConfig) => Array.from({ length: c.layers }, (_, l) => [`present.${l}.key`, `present.${l}.value`]).flat();
  const recipes: Record<string, (c: DecoderConfig) => import('onnxruntime-node').InferenceSession.SessionOptions> = {
    preferredOutputLocation: (c) => ({
      ...mlxCpu,
      preferredOutputLocation: Object.fromEntries(presents(c).map((n) => [n, 'gpu-buffer' as const])),
    }),
    presentsOnDevice: () => ({ executionProviders: [{ name: 'mlx', device: 'cpu', presentsOnDevice: true }] }) as never,
  };
  for (const [kind, c] of Object.entries(CONFIGS))
    for (const [recipe, options] of Object.entries(recipes))
      it(`${kind}: with the presents on the device (${recipe}), onnxruntime-node's tokens and logits`, async () => {
        const bytes = buildDecoder(c);
        const prompt = [9, 4, 300, 77];
        const want = await hostLoop(await ort.InferenceSession.create(bytes), c, prompt);
        const s = await ort.InferenceSession.create(bytes, options(c));
        try {
          const got = await hostLoop(s, c, prompt);
          expect(got.locations).toEqual(['gpu-buffer']);
          expect(want.locations).toEqual(['cpu']);
          expect(got.tokens).toEqual(want.tokens);
          got.rows.forEach((row, k) => row.forEach((x, i) => expect(Math.abs(x - want.rows[k][i])).toBeLessThan(2e-4)));
        } finally {
          await s.release();
        }
      });

  it('presentsOnDevice: preferredOutputLocation decides for what it names; a model without presents takes it', async () => {
    const c = CONFIGS.llama;
    const s = await ort.InferenceSession.create(buildDecoder(c), {
      executionProviders: [{ name: 'mlx', device: 'cpu', presentsOnDevice: true }],
      preferredOutputLocation: { 'present.1.value': 'cpu' },
    } as never);
    try {
      const handler = (s as unknown as { handler: { keepsOnDevice(n: string): boolean } }).handler;
      expect(presents(c).filter((n) => handler.keepsOnDevice(n))).toEqual(['present.0.key', 'present.0.value', 'present.1.key']);
      expect(handler.keepsOnDevice('logits')).toBe(false);
    } finally {
      await s.release();
    }
    // One session_options for every session of a model (transformers.js): an encoder has no presents.
    const encoder = await ort.InferenceSession.create(
      model({ inputs: [v('x', 'float32', [2])], outputs: [v('y', 'float32', [2])], nodes: [node('Relu', ['x'], ['y'])] }),
      { executionProviders: [{ name: 'mlx', device: 'cpu', presentsOnDevice: true }] } as never,
    );
    try {
      const y = (await encoder.run({ x: new ort.Tensor('float32', Float32Array.from([-1, 2]), [2]) })).y;
      expect([y.location, Array.from(y.data as Float32Array)]).toEqual(['cpu', [0, 2]]);
    } finally {
      await encoder.release();
    }
    await expect(
      ort.InferenceSession.create(buildDecoder(c), {
        executionProviders: [{ name: 'mlx', device: 'cpu', presentsOnDevice: 'yes' }],
      } as never),
    ).rejects.toThrow(/presentsOnDevice must be true or false, got "yes"/);
  });

  // GroupQueryAttention over a growing past of one sequence takes the native decode step (the
  // shared-buffer step over the past grown by a row) rather than some forty MLX ops a layer; the
  // calls are counted in a child process (MLX_SYS_COUNT_CALLS must be set when @mlx/sys loads).
  it('llama: each decode step of each layer is one native GroupQueryAttention step', () => {
    const c = CONFIGS.llama;
    const child = `
      await import('./src/index.ts');
      const mx = await import('@mlx/core');
      const { createRequire } = await import('node:module');
      const { join } = await import('node:path');
      const { buildDecoder, headSize, kvHeadsOf } = await import('./test/helpers/decoder.ts');
      const ort = createRequire(join(process.cwd(), 'package.json'))('onnxruntime-node');
      const c = ${JSON.stringify(c)};
      const s = await ort.InferenceSession.create(buildDecoder(c), { executionProviders: [{ name: 'mlx', device: 'cpu', compiled: false }] });
      const i64 = (xs, dims) => new ort.Tensor('int64', BigInt64Array.from(xs, BigInt), dims);
      let feeds = { input_ids: i64([5, 17, 99], [1, 3]), attention_mask: i64([1, 1, 1], [1, 3]) };
      for (let l = 0; l < c.layers; l++)
        for (const kv of ['key', 'value']) feeds['past_key_values.' + l + '.' + kv] = new ort.Tensor('float32', new Float32Array(0), [1, kvHeadsOf(c), 0, headSize(c)]);
      const steps = [];
      for (let step = 0, total = 3; step < 4; step++, total++) {
        const before = mx.nativeCallCounts().get('mlxc_gqa_step') ?? 0;
        const out = await s.run(feeds);
        steps.push((mx.nativeCallCounts().get('mlxc_gqa_step') ?? 0) - before);
        const next = { input_ids: i64([7], [1, 1]), attention_mask: i64(new Array(total + 1).fill(1), [1, total + 1]) };
        for (const name of Object.keys(out)) if (name.startsWith('present.')) next[name.replace('present', 'past_key_values')] = out[name];
        feeds = next;
      }
      await s.release();
      console.log(JSON.stringify(steps));`;
    const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', child], {
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
      env: { ...process.env, MLX_SYS_COUNT_CALLS: '1' },
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(r.status, r.stderr).toBe(0);
    // The prompt (no past) takes the general path; each later step one native step per layer.
    expect(JSON.parse(r.stdout.trim().split('\n').at(-1)!)).toEqual([0, c.layers, c.layers, c.layers]);
  }, 150_000);
});

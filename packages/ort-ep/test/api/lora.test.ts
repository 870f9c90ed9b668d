// LoRA adapters on a session's MatMul weights: the first SGD step against a float64 reference of
// the chain rule written here (dB = s * A^T @ dW with dW of a mean-square loss in closed form),
// training that lowers the loss with the base frozen, unmerge/merge, the merged model saved and
// run in onnxruntime-node, and the adapters as a safetensors file read back by hand.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as mx from '@mlx/core';
import { afterAll, describe, expect, it } from 'vitest';
import { LoraAdapters, MlxSession, OnnxDataType, UnknownParameterError, type HostTensor } from '../../src/index.js';
import { model, node, v } from '../helpers/build.js';
import { buildDecoder, type DecoderConfig } from '../helpers/decoder.js';
import { f32, plain, runOn, seeded } from '../helpers/ort.js';

const tmp = mkdtempSync(join(tmpdir(), 'mlx-ort-lora-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const N = 6;
const IN = 8;
const OUT = 5;
const W = seeded(IN * OUT, 3).map((x) => x * 0.5);
const X = seeded(N * IN, 4);
const T = seeded(N * OUT, 5);
const bytes = model({
  opsets: { '': 17 },
  inputs: [v('x', 'float32', [N, IN])],
  initializers: [
    { name: 'W', type: 'float32', dims: [IN, OUT], values: W },
    { name: 'S', type: 'float32', dims: [OUT], values: seeded(OUT, 6) },
  ],
  outputs: [v('y', 'float32', [N, OUT])],
  nodes: [node('MatMul', ['x', 'W'], ['m']), node('Mul', ['m', 'S'], ['y'])],
});
const S = Float32Array.from(seeded(OUT, 6));
const feeds = (): Record<string, HostTensor> => ({ x: { dtype: OnnxDataType.FLOAT, dims: [N, IN], data: Float32Array.from(X) } });
const mse = (o: Record<string, mx.Array>) => mx.mean(mx.square(mx.subtract(o.y, mx.array(T, { shape: [N, OUT] }))));

/** x @ M * S, row-major, in float64. */
function forward(m: ArrayLike<number>): number[] {
  const y: number[] = [];
  for (let i = 0; i < N; i++)
    for (let j = 0; j < OUT; j++) {
      let acc = 0;
      for (let k = 0; k < IN; k++) acc += X[i * IN + k] * m[k * OUT + j];
      y.push(acc * S[j]);
    }
  return y;
}
const ys = async (s: MlxSession) => Array.from((await s.run(feeds())).y.data as Float32Array);
const maxDiff = (a: ArrayLike<number>, b: ArrayLike<number>) => Math.max(...Array.from(a, (x, i) => Math.abs(x - b[i])));

describe('LoRA adapters', () => {
  it('start as the model; the first SGD step moves B by -lr * s * A^T @ dW (and A not at all)', async () => {
    const s = await MlxSession.create(bytes, { device: 'cpu', graphRewrites: false });
    const lora = LoraAdapters.attach(s, { targets: ['W'], rank: 2, alpha: 4, seed: 1 });
    try {
      expect(lora.scale).toBe(2);
      expect(maxDiff(await ys(s), forward(W))).toBeLessThan(1e-5);
      const before = lora.adapters();
      const A = Array.from(before['W.lora_A'].toTypedArray() as Float32Array);
      expect(before['W.lora_A'].shape).toEqual([IN, 2]);
      expect(before['W.lora_B'].shape).toEqual([2, OUT]);
      mx.dispose(before);
      // dW of mean((x @ W * S - T)^2): x^T @ (2 (y - T) * S / (N * OUT)).
      const y = forward(W);
      const dW: number[] = new Array(IN * OUT).fill(0);
      for (let i = 0; i < N; i++)
        for (let j = 0; j < OUT; j++) {
          const dy = (2 * (y[i * OUT + j] - T[i * OUT + j]) * S[j]) / (N * OUT);
          for (let k = 0; k < IN; k++) dW[k * OUT + j] += X[i * IN + k] * dy;
        }
      const lr = 0.3;
      await lora.trainStep(feeds(), { output: mse, optimizer: new mx.optim.SGD({ lr }) });
      const after = lora.adapters();
      const wantB: number[] = [];
      for (let r = 0; r < 2; r++)
        for (let j = 0; j < OUT; j++) {
          let acc = 0;
          for (let k = 0; k < IN; k++) acc += A[k * 2 + r] * dW[k * OUT + j];
          wantB.push(-lr * 2 * acc);
        }
      expect(maxDiff(after['W.lora_B'].toTypedArray() as Float32Array, wantB)).toBeLessThan(1e-6);
      expect(maxDiff(after['W.lora_A'].toTypedArray() as Float32Array, A)).toBe(0);
      // The session runs W + s * A @ B.
      const merged = W.map((w, idx) => {
        const k = Math.floor(idx / OUT);
        const j = idx % OUT;
        return w + 2 * (A[k * 2] * wantB[j] + A[k * 2 + 1] * wantB[OUT + j]);
      });
      expect(maxDiff(await ys(s), forward(merged))).toBeLessThan(1e-5);
      mx.dispose(after);
    } finally {
      lora.dispose();
      s.release();
    }
  });

  it('training lowers the loss with the base frozen; unmerge restores it; merge keeps the trained weights for saveModel', async () => {
    const s = await MlxSession.create(bytes, { device: 'cpu', graphRewrites: false });
    const lora = LoraAdapters.attach(s, { targets: ['W'], rank: 2 });
    const opt = new mx.optim.AdamW({ lr: 0.05, weightDecay: 0 });
    try {
      const losses: number[] = [];
      for (let i = 0; i < 30; i++) losses.push((await lora.trainStep(feeds(), { output: mse, optimizer: opt, clipGradNorm: 5 })).loss);
      expect(losses.at(-1)!).toBeLessThan(losses[0] * 0.7);
      const trained = await ys(s);
      lora.unmerge();
      expect(lora.merged).toBe(false);
      expect(maxDiff(await ys(s), forward(W))).toBeLessThan(1e-5);

      // The adapters as safetensors: header, names, shapes and data.
      const file = join(tmp, 'adapters.safetensors');
      lora.saveSafetensors(file);
      const buf = readFileSync(file);
      const n = Number(buf.readBigUInt64LE(0));
      const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
      expect(header.__metadata__).toMatchObject({ rank: '2', alpha: '2', targets: '["W"]' });
      expect(header['W.lora_B']).toMatchObject({ dtype: 'F32', shape: [2, OUT] });
      const [b0, b1] = header['W.lora_B'].data_offsets;
      const fromFile = new Float32Array(buf.buffer.slice(buf.byteOffset + 8 + n + b0, buf.byteOffset + 8 + n + b1));
      const ad = lora.adapters();
      expect(Array.from(fromFile)).toEqual(Array.from(ad['W.lora_B'].toTypedArray()));
      mx.dispose(ad);

      // Loaded onto a fresh session of the base model, the adapters give the trained outputs.
      const fresh = await MlxSession.create(bytes, { device: 'cpu', graphRewrites: false });
      try {
        const loaded = LoraAdapters.load(fresh, file);
        expect([loaded.rank, loaded.alpha, loaded.targets]).toEqual([2, 2, ['W']]);
        expect(maxDiff(await ys(fresh), trained)).toBeLessThan(1e-6);
        loaded.dispose();
      } finally {
        fresh.release();
      }

      lora.merge();
      expect(maxDiff(await ys(s), trained)).toBeLessThan(1e-6);
      expect(() => lora.adapters()).toThrow(/merged or disposed/);
      const ort = await runOn('cpu', s.saveModel(), { x: f32(X, [N, IN]) });
      expect(maxDiff(plain(ort.y), trained)).toBeLessThan(1e-5);
    } finally {
      opt.dispose();
      lora.dispose();
      s.release();
    }
  });

  it('load() refuses files that are not adapters for this model, naming what is wrong', async () => {
    const s = await MlxSession.create(bytes, { device: 'cpu', graphRewrites: false });
    const lora = LoraAdapters.attach(s, { targets: ['W'], rank: 2 });
    try {
      const file = join(tmp, 'good.safetensors');
      lora.saveSafetensors(file);
      const good = readFileSync(file);
      const n = Number(good.readBigUInt64LE(0));
      const header = JSON.parse(good.subarray(8, 8 + n).toString('utf8'));
      const write = (h: object, data = good.subarray(8 + n)) => {
        let json = JSON.stringify(h);
        json += ' '.repeat((8 - (json.length % 8)) % 8);
        const head = Buffer.alloc(8);
        head.writeBigUInt64LE(BigInt(json.length));
        const f = join(tmp, 'bad.safetensors');
        writeFileSync(f, Buffer.concat([head, Buffer.from(json), data]));
        return f;
      };
      expect(() => LoraAdapters.load(s, join(tmp, 'missing.safetensors'))).toThrow(/LoRA: '.*missing.safetensors' cannot be read/);
      expect(() => LoraAdapters.load(s, write({ ...header, __metadata__: {} }))).toThrow(/no __metadata__ with format "lora"/);
      expect(() => LoraAdapters.load(s, write({ ...header, 'W.lora_B': { ...header['W.lora_B'], shape: [3, OUT] } }))).toThrow(
        /'W.lora_B' has shape \[3,5\], the weight and rank 2 need \[2, 5\]/,
      );
      expect(() => LoraAdapters.load(s, write(header, good.subarray(8 + n, 8 + n + 16)))).toThrow(
        /data offsets .* do not hold it within the file/,
      );
      expect(() => LoraAdapters.load(s, write({ ...header, __metadata__: { ...header.__metadata__, targets: '["S"]' } }))).toThrow(
        /'S' must be a weight read only as the second input of MatMul or Gemm/,
      );
    } finally {
      lora.dispose();
      s.release();
    }
  });

  it('refuses weights that are not a MatMul or Gemm B input, and ranks out of range', async () => {
    const s = await MlxSession.create(bytes, { device: 'cpu', graphRewrites: false });
    try {
      expect(() => LoraAdapters.attach(s, { targets: ['S'], rank: 1 })).toThrow(UnknownParameterError);
      expect(() => LoraAdapters.attach(s, { targets: ['S'], rank: 1 })).toThrow(
        /'S' must be a weight read only as the second input of MatMul or Gemm nodes; it is read by .*\(Mul\)/,
      );
      expect(() => LoraAdapters.attach(s, { targets: ['W'], rank: 0 })).toThrow(/rank must be a positive integer/);
      expect(() => LoraAdapters.attach(s, { targets: ['W'], rank: 6 })).toThrow(/rank 6 is more than the smaller side of 'W' \[8, 5\]/);
      expect(maxDiff(await ys(s), forward(W))).toBeLessThan(1e-5);
    } finally {
      s.release();
    }
  });
});

describe('LoRA trainStep with checkpoint and mixedPrecision', () => {
  const cfg: DecoderConfig = { kind: 'llama', layers: 2, hidden: 64, heads: 4, kvHeads: 2, ffn: 128, vocab: 96, maxPositions: 32, seed: 5 };
  const B = 2;
  const L = 12;
  const ids = Array.from({ length: B * L }, (_, i) => (i * 11 + 3) % cfg.vocab);
  const labels = Int32Array.from(ids.map((t) => (t + 1) % cfg.vocab));
  const decoderFeeds = (s: MlxSession): Record<string, HostTensor> => {
    const f: Record<string, HostTensor> = {
      input_ids: { dtype: OnnxDataType.INT64, dims: [B, L], data: BigInt64Array.from(ids.map(BigInt)) },
      attention_mask: { dtype: OnnxDataType.INT64, dims: [B, L], data: new BigInt64Array(B * L).fill(1n) },
    };
    for (const n of s.inputNames)
      if (n.startsWith('past_key_values.'))
        f[n] = { dtype: OnnxDataType.FLOAT, dims: [B, cfg.kvHeads!, 0, cfg.hidden / cfg.heads], data: new Float32Array(0) };
    return f;
  };
  const xent = (o: Record<string, mx.Array>) => {
    const y = mx.expandDims(mx.array(labels, { shape: [B, L] }), -1);
    return mx.mean(mx.subtract(mx.logsumexp(o.logits, -1), mx.squeeze(mx.takeAlongAxis(o.logits, y, -1), -1)));
  };

  async function train(options: { checkpoint?: 'layers'; mixedPrecision?: 'bfloat16' }) {
    const s = await MlxSession.create(buildDecoder(cfg), { device: 'cpu', graphRewrites: false });
    const lora = LoraAdapters.attach(s, { targets: ['l0.q', 'l1.v', 'lm_head'], rank: 4, seed: 2 });
    const opt = new mx.optim.SGD({ lr: 0.5 });
    try {
      const losses: number[] = [];
      for (let i = 0; i < 3; i++) losses.push((await lora.trainStep(decoderFeeds(s), { output: xent, optimizer: opt, ...options })).loss);
      const a = lora.adapters();
      const out = Object.fromEntries(Object.entries(a).map(([k, v]) => [k, Array.from(v.toTypedArray() as Float32Array)]));
      mx.dispose(a);
      return { losses, adapters: out };
    } finally {
      lora.dispose();
      s.release();
    }
  }

  it('checkpointed, the same adapters; in bfloat16, the float32 losses within its rounding', async () => {
    const plain = await train({});
    const ckpt = await train({ checkpoint: 'layers' });
    for (const [k, want] of Object.entries(plain.adapters)) expect(maxDiff(ckpt.adapters[k], want), k).toBeLessThan(1e-6);
    const low = await train({ mixedPrecision: 'bfloat16' });
    low.losses.forEach((l, i) => expect(Math.abs(l - plain.losses[i]) / plain.losses[i]).toBeLessThan(8 * 2 ** -8));
    expect(low.losses).not.toEqual(plain.losses);
  });

  it('refuses float16 (no loss scaling for the adapters) with a specific error', async () => {
    const s = await MlxSession.create(buildDecoder(cfg), { device: 'cpu', graphRewrites: false });
    const lora = LoraAdapters.attach(s, { targets: ['lm_head'], rank: 2 });
    try {
      await expect(
        lora.trainStep(decoderFeeds(s), { output: xent, optimizer: new mx.optim.SGD({ lr: 0.1 }), mixedPrecision: 'float16' as never }),
      ).rejects.toThrow(/LoRA trainStep: mixedPrecision must be 'bfloat16' \(float16 needs loss scaling/);
    } finally {
      lora.dispose();
      s.release();
    }
  });
});

// A CPU session's constants (initializers and the packed weights made from them) go into MLX's arena
// of resident arrays (huge pages on Linux's CPU build, where a decode step that reads every weight
// then walks few page tables), and leave it with the session; outputs stay those of
// onnxruntime-node.
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { decodeModel } from '../../src/onnx/index.js';
import { buildDecoder, type DecoderConfig, tinyLlama } from '../helpers/decoder.js';
import { mlxCpu, ort } from '../helpers/ort.js';

const arena = process.platform === 'linux' && !mx.gpuAvailable();
const llama = tinyLlama({ vocab: 512, maxPositions: 64, seed: 21 });

/** Bytes of the model's float32 and uint8 (MatMulNBits' packed B) initializers, as written in the file. */
function weightBytes(bytes: Uint8Array): number {
  let total = 0;
  for (const t of decodeModel(bytes).graph.initializers.values()) {
    const n = t.dims.reduce((a, b) => a * b, 1);
    if (t.dtype === 1) total += n * 4;
    else if (t.dtype === 2) total += n;
  }
  return total;
}

describe('a session keeps its weights in the arena of resident arrays', () => {
  it.runIf(arena)('holds them there from create() to release(), with the same logits as onnxruntime-node', async () => {
    await check(llama, 1e-4, true);
  });

  it.runIf(arena)("and MatMulNBits' packed int4 operands, made once on the host", async () => {
    // Its packed operands are cached by the node's constant (a WeakMap), freed when that is collected.
    await check({ ...llama, int4: true, seed: 5 }, 1e-3, false);
  });
});

async function check(cfg: DecoderConfig, tolerance: number, freedWithSession: boolean): Promise<void> {
  const bytes = buildDecoder(cfg);
  const weights = weightBytes(bytes);
  expect(weights).toBeGreaterThan(200_000);
  const before = mx.memory.resident();
  const s = await ort.InferenceSession.create(bytes, mlxCpu as never);
  const ref = await ort.InferenceSession.create(bytes);
  try {
    const ids = [5, 9, 200, 41, 3, 77];
    const feeds: Record<string, ort.Tensor> = {
      input_ids: new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, ids.length]),
    };
    const extra = s.inputNames.filter((n) => n !== 'input_ids');
    // Twice: MatMulNBits keeps its packed operands from a node's second run on.
    await runWith(s, feeds, extra, ids.length, cfg);
    const got = await runWith(s, feeds, extra, ids.length, cfg);
    const want = await runWith(ref, feeds, extra, ids.length, cfg);
    const a = got.logits.data as Float32Array;
    const b = want.logits.data as Float32Array;
    expect(a.length).toBe(b.length);
    let worst = 0;
    for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
    expect(worst).toBeLessThan(tolerance);
    const held = mx.memory.resident();
    // Every float weight, in the layouts the session multiplies by (packed panels pad the columns).
    expect(held.live - before.live).toBeGreaterThanOrEqual(weights * 0.95);
    expect(held.live - before.live).toBeLessThanOrEqual(weights * 1.5);
    expect(held.huge).toBeGreaterThan(0);
  } finally {
    await s.release();
    await ref.release();
  }
  if (freedWithSession) expect(mx.memory.resident().live).toBe(before.live);
}

/** Runs a decoder's prefill: the feeds it takes beyond input_ids (positions, masks, empty pasts) made here. */
async function runWith(s: ort.InferenceSession, feeds: Record<string, ort.Tensor>, extra: string[], n: number, cfg: DecoderConfig) {
  const all = { ...feeds };
  for (const name of extra) {
    if (name === 'attention_mask') all[name] = new ort.Tensor('int64', new BigInt64Array(n).fill(1n), [1, n]);
    else if (name === 'position_ids')
      all[name] = new ort.Tensor(
        'int64',
        BigInt64Array.from({ length: n }, (_, i) => BigInt(i)),
        [1, n],
      );
    else if (name.startsWith('past'))
      all[name] = new ort.Tensor('float32', new Float32Array(0), [1, cfg.kvHeads ?? cfg.heads, 0, cfg.hidden / cfg.heads]);
    else throw new Error(`unexpected input ${name}`);
  }
  return s.run(all);
}

// Fine-tuning as a user would: the shared bert-tiny with a linear classification head added to
// its graph (new initializers on its pooled output), trained with trainStep and AdamW on a
// synthetic task (is the marker token anywhere in the sequence?), saved with saveModel, and the
// saved model's accuracy measured in onnxruntime-node on sequences it never saw.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fromBinary, toBinary } from '@bufbuild/protobuf';
import * as mx from '@mlx/core';
import { ModelProtoSchema } from 'onnx-buf';
import { afterAll, describe, expect, it } from 'vitest';
import { MlxSession, OnnxDataType, type HostTensor } from '../../src/index.js';
import { node, nodeProto, tensor, v, valueInfo } from '../helpers/build.js';
import { ort, seeded } from '../helpers/ort.js';
import { sharedPath } from '../helpers/shared.js';

const tmp = mkdtempSync(join(tmpdir(), 'mlx-ort-finetune-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const SEQ = 12;
const MARKER = 7;
const CLS = 2;

/** bert-tiny with logits = pooler_output @ head.weight + head.bias as a third output. */
function withHead(): Uint8Array {
  const proto = fromBinary(ModelProtoSchema, readFileSync(join(sharedPath('models/bert-tiny'), 'model.onnx')));
  const g = proto.graph!;
  g.initializer.push(
    tensor({ name: 'head.weight', type: 'float32', dims: [64, 2], values: seeded(128, 5).map((x) => x * 0.1) }),
    tensor({ name: 'head.bias', type: 'float32', dims: [2], values: [0, 0] }),
  );
  g.node.push(
    nodeProto(node('MatMul', ['pooler_output', 'head.weight'], ['head_mm'])),
    nodeProto(node('Add', ['head_mm', 'head.bias'], ['logits'])),
  );
  g.output.push(valueInfo(v('logits', 'float32', ['batch', 2])));
  return toBinary(ModelProtoSchema, proto);
}

/** A batch of sequences: CLS then random tokens; label 1 (half of them) when the marker is among them. */
function batch(n: number, seed: number): { ids: BigInt64Array; labels: number[] } {
  const r = seeded(n * (SEQ + 2), seed).map((x) => (x + 1) / 2);
  const ids = new BigInt64Array(n * SEQ);
  const labels: number[] = [];
  let k = 0;
  for (let b = 0; b < n; b++) {
    ids[b * SEQ] = BigInt(CLS);
    for (let t = 1; t < SEQ; t++) ids[b * SEQ + t] = BigInt(10 + Math.floor(r[k++ % r.length] * 500));
    const label = b % 2;
    if (label) ids[b * SEQ + 1 + Math.floor(r[k++ % r.length] * (SEQ - 1))] = BigInt(MARKER);
    labels.push(label);
  }
  return { ids, labels };
}

const feedsOf = (ids: BigInt64Array): Record<string, HostTensor> => {
  const n = ids.length / SEQ;
  const t = (data: BigInt64Array): HostTensor => ({ dtype: OnnxDataType.INT64, dims: [n, SEQ], data });
  return { input_ids: t(ids), attention_mask: t(new BigInt64Array(ids.length).fill(1n)), token_type_ids: t(new BigInt64Array(ids.length)) };
};

const accuracy = (logits: ArrayLike<number>, labels: readonly number[]) =>
  labels.filter((l, i) => (logits[2 * i + 1] > logits[2 * i] ? 1 : 0) === l).length / labels.length;

describe('bert-tiny fine-tuned with trainStep, saved, run in onnxruntime-node', () => {
  it('accuracy on held-out sequences rises from chance past 0.9', { timeout: 60_000 }, async () => {
    const s = await MlxSession.create(withHead(), { device: 'cpu', graphRewrites: false });
    const opt = new mx.optim.AdamW({ lr: 3e-3, weightDecay: 0.01 });
    const heldOut = batch(128, 999);
    try {
      const before = accuracy((await s.run(feedsOf(heldOut.ids), ['logits'])).logits.data as Float32Array, heldOut.labels);
      expect(before).toBeLessThan(0.75);
      const losses: number[] = [];
      for (let step = 0; step < 60; step++) {
        const { ids, labels } = batch(32, 100 + step);
        const onehot = mx
          .array(
            labels.flatMap((l) => (l ? [0, 1] : [1, 0])),
            { shape: [labels.length, 2] },
          )
          .eval(); // evaluated here: the step evaluates on the session's own thread
        // Cross-entropy of the logits, written with @mlx/core ops.
        const { loss } = await s.trainStep(feedsOf(ids), {
          optimizer: opt,
          output: (o) => mx.mean(mx.subtract(mx.logsumexp(o.logits, -1), mx.sum(mx.multiply(o.logits, onehot), -1))),
          fetches: ['logits'],
          clipGradNorm: 1,
        });
        onehot.dispose();
        losses.push(loss);
      }
      const mine = (await s.run(feedsOf(heldOut.ids), ['logits'])).logits.data as Float32Array;
      expect(accuracy(mine, heldOut.labels)).toBeGreaterThan(0.9);
      expect(losses.slice(-5).reduce((a, b) => a + b) / 5).toBeLessThan(losses.slice(0, 5).reduce((a, b) => a + b) / 5);

      const path = join(tmp, 'bert-tiny-finetuned.onnx');
      s.saveModel(path, { externalData: { threshold: 64 << 10 } });
      const o = await ort.InferenceSession.create(path);
      try {
        const f = feedsOf(heldOut.ids);
        const out = await o.run(
          Object.fromEntries(Object.entries(f).map(([k, t]) => [k, new ort.Tensor('int64', t.data as BigInt64Array, t.dims as number[])])),
        );
        const theirs = out.logits.data as Float32Array;
        expect(accuracy(theirs, heldOut.labels)).toBeGreaterThan(0.9);
        let worst = 0;
        for (let i = 0; i < theirs.length; i++) worst = Math.max(worst, Math.abs(theirs[i] - mine[i]));
        expect(worst).toBeLessThan(1e-4);
      } finally {
        await o.release();
      }
    } finally {
      opt.dispose();
      s.release();
    }
  });
});

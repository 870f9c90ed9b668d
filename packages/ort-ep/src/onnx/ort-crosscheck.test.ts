// The loader reads every TensorProto form the way onnxruntime does: each sample tensor, in each
// form, is an initializer that onnxruntime-node returns through Identity (or Cast, for element
// types its Tensor lacks); the same holds for initializers of the real models in ../shared/models.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { fromBinary } from '@bufbuild/protobuf';
import { ModelProtoSchema, type TensorProto } from 'onnx-buf';
import { describe, expect, it } from 'vitest';
import { attr, modelBytes, node, tensor, valueInfo } from '../../test/helpers/proto.js';
import { OnnxDataType as T } from './ir.js';
import { decodeModel } from './model.js';
import { decodeTensor } from './tensor.js';
import { expectShared, sharedPath } from '../../test/helpers/shared.js';
import { tensorCases } from '../../test/helpers/tensor-cases.js';

const require = createRequire(import.meta.url);
const ort = require('onnxruntime-node') as typeof import('onnxruntime-node');
const quiet = { logSeverityLevel: 3 as const };

async function runOrt(bytes: Uint8Array): Promise<Record<string, import('onnxruntime-node').Tensor>> {
  const s = await ort.InferenceSession.create(bytes, quiet);
  try {
    return (await s.run({})) as Record<string, import('onnxruntime-node').Tensor>;
  } finally {
    await s.release();
  }
}

describe('sample tensors read as onnxruntime-node reads them', () => {
  for (const [name, c] of Object.entries(tensorCases)) {
    const how = c.ort;
    if (!how) continue;
    const forms = { typed: c.typed, ...(c.raw ? { raw: { rawData: c.raw } } : {}) };
    for (const [form, fields] of Object.entries(forms)) {
      it(`${name} (${form})`, async () => {
        const proto = tensor('w', c.dtype, c.dims, fields);
        const ours = decodeTensor(proto);
        const n = how.op === 'Identity' ? node('Identity', ['w'], ['out']) : node('Cast', ['w'], ['out'], [attr.int('to', how.to)]);
        const out = (
          await runOrt(
            modelBytes(
              { nodes: [n], initializers: [proto], outputs: [valueInfo('out', how.op === 'Identity' ? c.dtype : how.to)] },
              { opsets: [['', 25]], irVersion: 11 },
            ),
          )
        ).out;
        expect([...out.dims]).toEqual(c.dims);
        if (how.op === 'Identity') expect(out.data).toEqual(ours.data);
        else {
          // Cast turns the stored bits into values: they must be the ones those bits stand for.
          expect(Array.from(out.data as ArrayLike<number>)).toEqual(Array.from(how.means));
          if (how.to !== T.FLOAT) expect(Array.from(out.data as ArrayLike<number>)).toEqual(Array.from(ours.data as ArrayLike<number>));
        }
      });
    }
  }
});

const modelsDir = sharedPath('models');
const models = existsSync(modelsDir) ? readdirSync(modelsDir).filter((m) => existsSync(join(modelsDir, m, 'model.onnx'))) : [];

describe('initializers of the shared models read as onnxruntime-node reads them', () => {
  it('the models are there', () => expectShared(modelsDir));
  for (const name of models) {
    it(name, async () => {
      const path = join(modelsDir, name, 'model.onnx');
      const bytes = new Uint8Array(readFileSync(path));
      const ours = decodeModel(bytes, { modelPath: path }).graph.initializers;
      // Up to four initializers of each element type, the largest first: they are the weights.
      const byType = new Map<number, TensorProto[]>();
      const inits = [...fromBinary(ModelProtoSchema, bytes).graph!.initializer].sort((a, b) => b.rawData.length - a.rawData.length);
      for (const t of inits) {
        const list = byType.get(t.dataType) ?? [];
        if (list.length < 4) list.push(t);
        byType.set(t.dataType, list);
      }
      const picked = [...byType.values()].flat();
      expect(picked.length).toBeGreaterThan(0);
      const out = await runOrt(
        modelBytes(
          {
            nodes: picked.map((t, i) => node('Identity', [t.name], [`out${i}`])),
            initializers: picked,
            outputs: picked.map((t, i) => valueInfo(`out${i}`, t.dataType)),
          },
          { opsets: [['', 17]] },
        ),
      );
      picked.forEach((t, i) => {
        const mine = ours.get(t.name)!;
        expect([...out[`out${i}`].dims]).toEqual(mine.dims);
        expect(out[`out${i}`].data).toEqual(mine.data);
      });
    });
  }
});

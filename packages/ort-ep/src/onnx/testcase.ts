// The ONNX backend-test layout: model.onnx and test_data_set_*/{input,output}_<i>.pb.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { decodeTensorBytes } from './tensor.js';
import { decodeModel } from './model.js';
import type { HostTensor, ValueInfoIR } from './ir.js';

export type TestValue = HostTensor | { kind: 'unsupported'; why: string };

export interface TestCase {
  modelBytes: Uint8Array;
  datasets: { inputs: TestValue[]; outputs: TestValue[] }[];
}

function readValues(dir: string, prefix: string, infos: ValueInfoIR[]): TestValue[] {
  const files = readdirSync(dir).filter((f) => f.startsWith(prefix) && f.endsWith('.pb'))
    .sort((a, b) => Number(a.slice(prefix.length, -3)) - Number(b.slice(prefix.length, -3)));
  return files.map((f, i) => {
    const kind = infos[i]?.type.kind;
    if (kind && kind !== 'tensor') return { kind: 'unsupported', why: `${kind} test data` };
    return decodeTensorBytes(new Uint8Array(readFileSync(join(dir, f))));
  });
}

export function readTestCase(dir: string): TestCase {
  const modelBytes = new Uint8Array(readFileSync(join(dir, 'model.onnx')));
  const model = decodeModel(modelBytes, { modelPath: join(dir, 'model.onnx') });
  const inputs = model.graph.inputs.filter((i) => !model.graph.initializers.has(i.name));
  const sets = readdirSync(dir).filter((d) => d.startsWith('test_data_set_') && existsSync(join(dir, d))).sort();
  return {
    modelBytes,
    datasets: sets.map((s) => ({
      inputs: readValues(join(dir, s), 'input_', inputs),
      outputs: readValues(join(dir, s), 'output_', model.graph.outputs),
    })),
  };
}

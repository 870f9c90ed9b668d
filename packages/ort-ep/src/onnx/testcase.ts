// The ONNX backend-test layout: model.onnx and test_data_set_*/{input,output}_<i>.pb.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { BinaryReader } from '@bufbuild/protobuf/wire';
import { decodeTensorBytes } from './tensor.js';
import { decodeModel } from './model.js';
import type { HostTensor, ValueInfoIR } from './ir.js';

export type TestValue =
  | HostTensor
  | { kind: 'sequence'; items: TestValue[] }
  | { kind: 'optional'; value?: TestValue }
  | { kind: 'unsupported'; why: string };

// SequenceProto and OptionalProto (onnx-data.proto) are not in onnx-buf; their wire format is small:
// field 3 holds tensor values, 5 sequence values, 7 optional values (repeated in a sequence,
// single in an optional).
function decodeContainer(bytes: Uint8Array, kind: 'sequence' | 'optional'): TestValue {
  const r = new BinaryReader(bytes);
  const items: TestValue[] = [];
  while (r.pos < r.len) {
    const [field, wt] = r.tag();
    if (field === 3) items.push(decodeTensorBytes(r.bytes()));
    else if (field === 5) items.push(decodeContainer(r.bytes(), 'sequence'));
    else if (field === 7) items.push(decodeContainer(r.bytes(), 'optional'));
    else if (field === 4 || field === 6) return { kind: 'unsupported', why: 'sparse tensor or map test data' };
    else r.skip(wt);
  }
  return kind === 'sequence' ? { kind, items } : { kind, value: items[0] };
}

export interface TestCase {
  modelBytes: Uint8Array;
  datasets: { inputs: TestValue[]; outputs: TestValue[] }[];
}

function readValues(dir: string, prefix: string, infos: ValueInfoIR[]): TestValue[] {
  const files = readdirSync(dir).filter((f) => f.startsWith(prefix) && f.endsWith('.pb'))
    .sort((a, b) => Number(a.slice(prefix.length, -3)) - Number(b.slice(prefix.length, -3)));
  return files.map((f, i) => {
    const kind = infos[i]?.type.kind;
    const bytes = new Uint8Array(readFileSync(join(dir, f)));
    if (kind === 'sequence' || kind === 'optional') return decodeContainer(bytes, kind);
    if (kind && kind !== 'tensor') return { kind: 'unsupported', why: `${kind} test data` };
    return decodeTensorBytes(bytes);
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

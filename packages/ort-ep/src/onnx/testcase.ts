// The ONNX backend-test layout, used by the node conformance suite and by ../shared/models:
//   <case>/model.onnx
//   <case>/test_data_set_<k>/input_<i>.pb, output_<i>.pb
// Inputs bind to the graph inputs that have no initializer, in order; outputs to graph outputs.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { decodeValueBytes, isHostTensor, type DataValue, type MapValue, type SparseValue } from './data.js';
import { OnnxLoadError, messageOf } from '../errors.js';
import type { HostTensor, ModelIR, OnnxDataType, ValueInfoIR } from './ir.js';
import { decodeModel } from './model.js';
import { readModelFile, readTensorFile } from './external.js';

/**
 * A test-data value as runners take it: a tensor, a sequence or an optional of such values, or a
 * value kind that has no counterpart in execution (maps, sparse tensors), decoded but tagged
 * 'unsupported' with the reason.
 */
export type TestValue =
  | HostTensor
  | { kind: 'sequence'; name?: string; elemType: OnnxDataType; items: TestValue[] }
  | { kind: 'optional'; name?: string; value: TestValue | null }
  | { kind: 'unsupported'; name?: string; why: string; value: MapValue | SparseValue };

function toTestValue(v: DataValue): TestValue {
  if (isHostTensor(v)) return v;
  switch (v.kind) {
    case 'sequence':
      return { ...v, items: v.items.map(toTestValue) };
    case 'optional':
      return { ...v, value: v.value && toTestValue(v.value) };
    case 'map':
      return { kind: 'unsupported', name: v.name, why: 'map test data (MapProto): execution has no map values', value: v };
    case 'sparse_tensor':
      return { kind: 'unsupported', name: v.name, why: 'sparse tensor test data (SparseTensorProto) is not supported', value: v };
  }
}

export interface TestDataset {
  /** The folder's name, test_data_set_<k>. */
  name: string;
  inputs: TestValue[];
  outputs: TestValue[];
}

export interface TestCase {
  name: string;
  modelPath: string;
  modelBytes: Uint8Array;
  model: ModelIR;
  datasets: TestDataset[];
}

/** `prefix<k>suffix` entries of a folder, ordered by k. */
function numbered(dir: string, prefix: string, suffix: string): { file: string; k: number }[] {
  const re = new RegExp(`^${prefix}(\\d+)${suffix.replace('.', '\\.')}$`);
  return readdirSync(dir)
    .map((file) => ({ file, m: re.exec(file) }))
    .filter((e) => e.m)
    .map((e) => ({ file: e.file, k: Number(e.m![1]) }))
    .sort((a, b) => a.k - b.k);
}

function readValues(dir: string, prefix: 'input_' | 'output_', infos: ValueInfoIR[]): TestValue[] {
  return numbered(dir, prefix, '.pb').map(({ file, k }) => {
    const info = infos[k];
    let v: TestValue;
    // A regular file of at most TENSOR_FILE_LIMIT bytes: a FIFO or a device named input_0.pb is refused, not waited on.
    const bytes = readTensorFile(join(dir, file));
    try {
      v = toTestValue(decodeValueBytes(bytes, info?.type));
    } catch (e) {
      throw new OnnxLoadError(`${basename(dir)}/${file}: ${messageOf(e)}`, { cause: e });
    }
    // The file's own name where it has one; otherwise the graph's name at that position.
    if (!v.name && info) v.name = info.name;
    return v;
  });
}

/** Reads one test_data_set_<k> folder for a decoded model: inputs bind to its non-initializer graph inputs in order. */
export function readTestDataset(dir: string, model: ModelIR): TestDataset {
  if (!existsSync(dir)) throw new OnnxLoadError(`${dir}: no such folder`);
  if (!statSync(dir).isDirectory()) throw new OnnxLoadError(`${dir}: not a folder`);
  const g = model.graph;
  const userInputs = g.inputs.filter((i) => !g.initializers.has(i.name));
  const inputs = readValues(dir, 'input_', userInputs);
  if (!inputs.length) throw new OnnxLoadError(`${dir}: no input_<i>.pb files (a test_data_set_<k> folder holds them)`);
  return { name: basename(dir), inputs, outputs: readValues(dir, 'output_', g.outputs) };
}

/** Reads a backend-test case folder: the model, its decoded IR and every data set. */
export function readTestCase(dir: string): TestCase {
  const modelPath = join(dir, 'model.onnx');
  if (!existsSync(modelPath)) throw new OnnxLoadError(`${dir}: no model.onnx in this folder`);
  const modelBytes = readModelFile(modelPath);
  const model = decodeModel(modelBytes, { modelPath });
  const g = model.graph;
  const userInputs = g.inputs.filter((i) => !g.initializers.has(i.name));
  const datasets = numbered(dir, 'test_data_set_', '')
    .filter(({ file }) => statSync(join(dir, file)).isDirectory())
    .map(({ file }) => ({
      name: file,
      inputs: readValues(join(dir, file), 'input_', userInputs),
      outputs: readValues(join(dir, file), 'output_', g.outputs),
    }));
  return { name: basename(dir), modelPath, modelBytes, model, datasets };
}

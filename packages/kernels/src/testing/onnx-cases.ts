// Reads ONNX backend node-test cases (model.onnx + test_data_set_0/*.pb) just far enough to check
// kernels against the ONNX reference outputs: a minimal protobuf reader for TensorProto and the
// attributes of a graph's single node. Test-only; @mlx/kernels itself knows nothing of ONNX.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

type Field = { no: number; wire: number; value: bigint | Uint8Array };

function* fields(buf: Uint8Array): Generator<Field> {
  let pos = 0;
  const varint = (): bigint => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[pos++];
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
    }
  };
  while (pos < buf.length) {
    const key = Number(varint());
    const no = key >>> 3;
    const wire = key & 7;
    if (wire === 0) yield { no, wire, value: varint() };
    else if (wire === 1) {
      yield { no, wire, value: buf.subarray(pos, pos + 8) };
      pos += 8;
    } else if (wire === 5) {
      yield { no, wire, value: buf.subarray(pos, pos + 4) };
      pos += 4;
    } else if (wire === 2) {
      const n = Number(varint());
      yield { no, wire, value: buf.subarray(pos, pos + n) };
      pos += n;
    } else throw new Error(`unsupported protobuf wire type ${wire}`);
  }
}

/** A packed repeated varint field's values. */
function packedVarints(b: Uint8Array): bigint[] {
  const out: bigint[] = [];
  let value = 0n;
  let shift = 0n;
  for (const byte of b) {
    value |= BigInt(byte & 0x7f) << shift;
    shift += 7n;
    if ((byte & 0x80) === 0) {
      out.push(value);
      value = 0n;
      shift = 0n;
    }
  }
  return out;
}

const text = (b: Uint8Array) => new TextDecoder().decode(b);
const signed = (v: bigint) => Number(BigInt.asIntN(64, v));

export interface OnnxTensor {
  name: string;
  dims: number[];
  /** ONNX TensorProto data type: 1 float, 7 int64, 9 bool, 10 float16, 11 double. */
  dataType: number;
  /** The values as doubles (bools as 0/1). */
  values: Float64Array;
}

function readPacked(f: Field, each: (b: Uint8Array) => number, size: number): number[] {
  const b = f.value as Uint8Array;
  const out: number[] = [];
  for (let i = 0; i < b.length; i += size) out.push(each(b.subarray(i, i + size)));
  return out;
}

export function readTensor(buf: Uint8Array): OnnxTensor {
  let name = '';
  const dims: number[] = [];
  let dataType = 0;
  let raw: Uint8Array | null = null;
  const floats: number[] = [];
  for (const f of fields(buf)) {
    if (f.no === 1) {
      if (f.wire === 0) dims.push(signed(f.value as bigint));
      else dims.push(...packedVarints(f.value as Uint8Array).map(signed));
    } else if (f.no === 2) dataType = Number(f.value);
    else if (f.no === 8) name = text(f.value as Uint8Array);
    else if (f.no === 9) raw = f.value as Uint8Array;
    else if (f.no === 4) floats.push(...readPacked(f, (b) => new DataView(b.buffer, b.byteOffset).getFloat32(0, true), 4));
  }
  const n = dims.reduce((a, b) => a * b, 1);
  const values = new Float64Array(n);
  if (raw) {
    const dv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    for (let i = 0; i < n; i++) {
      if (dataType === 1) values[i] = dv.getFloat32(4 * i, true);
      else if (dataType === 11) values[i] = dv.getFloat64(8 * i, true);
      else if (dataType === 9) values[i] = raw[i];
      else if (dataType === 7) values[i] = Number(dv.getBigInt64(8 * i, true));
      else throw new Error(`tensor ${name}: unsupported data type ${dataType}`);
    }
  } else values.set(floats);
  return { name, dims, dataType, values };
}

export interface OnnxNodeCase {
  name: string;
  opType: string;
  /** The node's input names in order ('' for an omitted optional input). */
  nodeInputs: string[];
  attributes: Record<string, number | string>;
  inputs: OnnxTensor[];
  outputs: OnnxTensor[];
}

function readNode(buf: Uint8Array): Omit<OnnxNodeCase, 'name' | 'inputs' | 'outputs'> {
  for (const f of fields(buf)) {
    if (f.no !== 7) continue; // ModelProto.graph
    for (const g of fields(f.value as Uint8Array)) {
      if (g.no !== 1) continue; // GraphProto.node (the first one)
      const nodeInputs: string[] = [];
      const attributes: Record<string, number | string> = {};
      let opType = '';
      for (const n of fields(g.value as Uint8Array)) {
        if (n.no === 1) nodeInputs.push(text(n.value as Uint8Array));
        else if (n.no === 4) opType = text(n.value as Uint8Array);
        else if (n.no === 5) {
          let key = '';
          let value: number | string = 0;
          for (const a of fields(n.value as Uint8Array)) {
            if (a.no === 1) key = text(a.value as Uint8Array);
            else if (a.no === 2)
              value = new DataView((a.value as Uint8Array).buffer, (a.value as Uint8Array).byteOffset).getFloat32(0, true);
            else if (a.no === 3) value = signed(a.value as bigint);
            else if (a.no === 4) value = text(a.value as Uint8Array);
          }
          attributes[key] = value;
        }
      }
      return { opType, nodeInputs, attributes };
    }
  }
  throw new Error('model has no node');
}

/** The shared ONNX node-test folder, or null where this checkout has none. */
export function onnxNodeTestRoot(): string | null {
  if (process.env.ONNX_NODE_TESTS && existsSync(process.env.ONNX_NODE_TESTS)) return process.env.ONNX_NODE_TESTS;
  // The checkout's own shared/ folder, or the one beside the checkout.
  for (const p of ['../../../../shared/onnx-node-tests/v1.22.0', '../../../../../shared/onnx-node-tests/v1.22.0']) {
    const full = new URL(p, import.meta.url).pathname;
    if (existsSync(full)) return full;
  }
  return null;
}

export function readNodeCase(root: string, name: string): OnnxNodeCase {
  const dir = join(root, name);
  const node = readNode(readFileSync(join(dir, 'model.onnx')));
  const data = join(dir, 'test_data_set_0');
  const files = readdirSync(data).sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
  const read = (prefix: string) => files.filter((f) => f.startsWith(prefix)).map((f) => readTensor(readFileSync(join(data, f))));
  return { name, ...node, inputs: read('input_'), outputs: read('output_') };
}

// TensorProto -> HostTensor: raw_data (little-endian, possibly unaligned), every typed field,
// 4-bit packing, strings, and external data confined to the model's folder.
import { readFileSync, existsSync } from 'node:fs';
import { isAbsolute, join, normalize, resolve, sep } from 'node:path';
import { fromBinary } from '@bufbuild/protobuf';
import { TensorProtoSchema, type TensorProto } from 'onnx-buf';
import { OnnxDataType, OnnxLoadError, type ExternalDataSpec, type HostData, type HostTensor } from './ir.js';

export interface TensorContext {
  /** Folder of the model file, for external data. */
  modelDir?: string;
  externalData?: ExternalDataSpec[];
}

/** Bytes per element in raw_data for fixed-size types (4-bit types are packed: handled apart). */
const rawSize: Record<number, number> = {
  1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 14: 8, 15: 16, 16: 2,
  17: 1, 18: 1, 19: 1, 20: 1,
};

function alloc(dtype: number, n: number): HostData {
  switch (dtype) {
    case OnnxDataType.FLOAT: return new Float32Array(n);
    case OnnxDataType.DOUBLE: return new Float64Array(n);
    case OnnxDataType.INT8: case OnnxDataType.INT4: return new Int8Array(n);
    case OnnxDataType.INT16: return new Int16Array(n);
    case OnnxDataType.INT32: return new Int32Array(n);
    case OnnxDataType.INT64: return new BigInt64Array(n);
    case OnnxDataType.UINT16: case OnnxDataType.FLOAT16: case OnnxDataType.BFLOAT16: return new Uint16Array(n);
    case OnnxDataType.UINT32: return new Uint32Array(n);
    case OnnxDataType.UINT64: return new BigUint64Array(n);
    case OnnxDataType.COMPLEX64: return new Float32Array(2 * n);
    case OnnxDataType.COMPLEX128: return new Float64Array(2 * n);
    case OnnxDataType.STRING: return new Array<string>(n).fill('');
    default: return new Uint8Array(n); // uint8, bool, uint4, float8, float4
  }
}

const is4bit = (t: number) => t === OnnxDataType.INT4 || t === OnnxDataType.UINT4 || t === OnnxDataType.FLOAT4E2M1;

function unpack4(bytes: Uint8Array, n: number, signed: boolean, out: Int8Array | Uint8Array): void {
  if (bytes.length < Math.ceil(n / 2)) throw new OnnxLoadError(`packed 4-bit data has ${bytes.length} bytes, ${Math.ceil(n / 2)} needed`);
  for (let i = 0; i < n; i++) {
    let v = i & 1 ? bytes[i >> 1] >> 4 : bytes[i >> 1] & 0x0f;
    if (signed && v >= 8) v -= 16;
    out[i] = v;
  }
}

function fromRaw(bytes: Uint8Array, dtype: number, n: number, name: string): HostData {
  const out = alloc(dtype, n);
  if (is4bit(dtype)) {
    unpack4(bytes, n, dtype === OnnxDataType.INT4, out as Int8Array);
    return out;
  }
  const size = rawSize[dtype];
  if (size === undefined) throw new OnnxLoadError(`tensor '${name}': raw_data of element type ${dtype} is not supported`);
  if (bytes.length !== size * n) throw new OnnxLoadError(`tensor '${name}': raw_data has ${bytes.length} bytes but its shape needs ${size * n}`);
  // Copy into an aligned buffer (raw_data can start at any offset of the file).
  new Uint8Array((out as Exclude<HostData, string[]>).buffer).set(bytes);
  if (dtype === OnnxDataType.BOOL) for (let i = 0; i < n; i++) (out as Uint8Array)[i] = (out as Uint8Array)[i] ? 1 : 0;
  return out;
}

function fromTyped(p: TensorProto, dtype: number, n: number, name: string): HostData {
  const out = alloc(dtype, n);
  const need = (len: number, field: string, per = 1) => {
    if (len !== n * per) throw new OnnxLoadError(`tensor '${name}': ${field} has ${len} values but its shape needs ${n * per}`);
  };
  switch (dtype) {
    case OnnxDataType.FLOAT: need(p.floatData.length, 'float_data'); (out as Float32Array).set(p.floatData); break;
    case OnnxDataType.COMPLEX64: need(p.floatData.length, 'float_data', 2); (out as Float32Array).set(p.floatData); break;
    case OnnxDataType.DOUBLE: need(p.doubleData.length, 'double_data'); (out as Float64Array).set(p.doubleData); break;
    case OnnxDataType.COMPLEX128: need(p.doubleData.length, 'double_data', 2); (out as Float64Array).set(p.doubleData); break;
    case OnnxDataType.INT64: need(p.int64Data.length, 'int64_data'); (out as BigInt64Array).set(p.int64Data); break;
    case OnnxDataType.UINT64: need(p.uint64Data.length, 'uint64_data'); (out as BigUint64Array).set(p.uint64Data); break;
    case OnnxDataType.UINT32: need(p.uint64Data.length, 'uint64_data'); p.uint64Data.forEach((v, i) => ((out as Uint32Array)[i] = Number(v))); break;
    case OnnxDataType.STRING:
      need(p.stringData.length, 'string_data');
      p.stringData.forEach((s, i) => ((out as string[])[i] = new TextDecoder().decode(s)));
      break;
    default:
      if (is4bit(dtype)) {
        // int32_data holds the packed bytes, one per value.
        unpack4(Uint8Array.from(p.int32Data), n, dtype === OnnxDataType.INT4, out as Int8Array);
        break;
      }
      // int32_data carries int8/uint8/int16/uint16/bool/float16/bfloat16/float8 values (bits for floats).
      need(p.int32Data.length, 'int32_data');
      for (let i = 0; i < n; i++) (out as Int32Array)[i] = dtype === OnnxDataType.BOOL ? (p.int32Data[i] ? 1 : 0) : p.int32Data[i];
  }
  return out;
}

function externalBytes(p: TensorProto, ctx: TensorContext, name: string): Uint8Array {
  const kv = new Map(p.externalData.map((e) => [e.key, e.value]));
  const location = kv.get('location');
  if (!location) throw new OnnxLoadError(`tensor '${name}': external data without a location`);
  if (isAbsolute(location) || /^[a-zA-Z]:[\\/]/.test(location)) throw new OnnxLoadError(`tensor '${name}': external data location '${location}' is absolute; locations must be relative to the model's folder`);
  const norm = normalize(location);
  if (norm === '..' || norm.startsWith(`..${sep}`) || norm.startsWith('../')) throw new OnnxLoadError(`tensor '${name}': external data location '${location}' escapes the model's folder`);
  const offset = Number(kv.get('offset') ?? 0);
  const length = kv.has('length') ? Number(kv.get('length')) : undefined;
  let file: Uint8Array | undefined;
  const spec = ctx.externalData?.find((e) => normalize(e.path) === norm);
  if (spec) {
    if (typeof spec.data === 'string') file = new Uint8Array(readFileSync(spec.data));
    else file = spec.data instanceof Uint8Array ? spec.data : new Uint8Array(spec.data);
  } else if (ctx.modelDir) {
    const full = resolve(ctx.modelDir, norm);
    if (!full.startsWith(resolve(ctx.modelDir) + sep)) throw new OnnxLoadError(`tensor '${name}': external data location '${location}' escapes the model's folder`);
    if (!existsSync(full)) throw new OnnxLoadError(`tensor '${name}': external data file '${location}' not found next to the model (${join(ctx.modelDir, norm)})`);
    file = new Uint8Array(readFileSync(full));
  } else {
    throw new OnnxLoadError(`tensor '${name}': external data '${location}' needs the model's path or the externalData session option`);
  }
  const end = length === undefined ? file.length : offset + length;
  if (offset < 0 || end > file.length) throw new OnnxLoadError(`tensor '${name}': external data range ${offset}..${end} is outside '${location}' (${file.length} bytes)`);
  return file.subarray(offset, end);
}

export function decodeTensor(p: TensorProto, ctx: TensorContext = {}): HostTensor {
  const name = p.name || '<unnamed>';
  const dims = p.dims.map((d) => {
    const n = Number(d);
    if (n < 0 || !Number.isSafeInteger(n)) throw new OnnxLoadError(`tensor '${name}': invalid dimension ${d}`);
    return n;
  });
  const dtype = p.dataType;
  if (dtype <= 0 || dtype > 23) throw new OnnxLoadError(`tensor '${name}': unknown element type ${dtype}`);
  const n = dims.reduce((a, b) => a * b, 1);
  let data: HostData;
  if (p.dataLocation === 1) data = fromRaw(externalBytes(p, ctx, name), dtype, n, name);
  else if (p.rawData.length > 0 || (n === 0 && dtype !== OnnxDataType.STRING)) data = fromRaw(p.rawData, dtype, n, name);
  else data = fromTyped(p, dtype, n, name);
  return { dtype, dims, data, name: p.name };
}

/** A standalone serialized TensorProto (the test-data .pb files). */
export function decodeTensorBytes(bytes: Uint8Array, ctx: TensorContext = {}): HostTensor {
  let p: TensorProto;
  try {
    p = fromBinary(TensorProtoSchema, bytes);
  } catch (e) {
    throw new OnnxLoadError(`not a serialized TensorProto: ${(e as Error).message}`, { cause: e });
  }
  return decodeTensor(p, ctx);
}

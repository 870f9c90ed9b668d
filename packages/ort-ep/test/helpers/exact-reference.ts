// The model onnxruntime-node's CPU provider runs as the reference, made exact on every x86-64 CPU.
//
// On x86-64 with AVX2 but without VNNI, onnxruntime's MLAS kernels for uint8 activations times
// int8 weights (u8s8) multiply with VPMADDUBSW, which adds each pair of products in int16 and
// saturates: MatMulInteger of a = [255, 255, 255, 255] and b = [127, 127, 127, 127]^T gives
// 2 * 32767 = 65534 there, not 129540 (onnxruntime's quantization docs warn of it). Its uint8
// times uint8 (u8u8) kernels widen to int16 first and are exact everywhere. So, for onnxruntime
// only (the provider under test always gets the bytes and feeds as written), every int8 weight
// operand of an integer product whose activations are uint8 becomes uint8 by adding 128 to it and
// to its zero point (an absent zero point is 0, so 128): (B - zb) = (B + 128) - (zb + 128), the
// same math, and onnxruntime takes its exact u8u8 path. The operand may be an initializer, a
// Constant node's tensor or a fed input (its feed is converted too); a converted copy gets a new
// name, so that other readers of the value still see the int8 original.
//
// QDQ graphs: onnxruntime's default optimizations fold DequantizeLinear(int8 weight) -> Conv or
// MatMul -> QuantizeLinear into QLinearConv / QLinearMatMul, u8s8 again. There the reference runs
// with graphOptimizationLevel 'disabled' instead: the graph as written (DequantizeLinear, the
// float product, QuantizeLinear) is what the ONNX spec defines and what the provider computes,
// while the fused integer op, even made exact by the conversion above, rounds its requantization
// its own way. The float product rounds in its own order but never saturates.
//
// This is applied to every model runOn('cpu') gets (expectSameAsOrt included) rather than behind
// an option: it changes nothing in models without these ops (the very same bytes and options come
// back), and a new test of a u8s8 product then compares with an exact reference without having to
// know about the CPU it may someday run on. Not converted (left as written): ops inside
// subgraphs or functions, activations whose type cannot be read off the graph, int8 activations
// (onnxruntime's int8 x int8 products do not saturate: 4 x (-128 x -128) gives 65536 on the AVX2
// CPU that saturates u8s8, and not every op has int8 x uint8 kernels), weights in external data.
import { createRequire } from 'node:module';
import { clone, create, fromBinary, toBinary } from '@bufbuild/protobuf';
import { ModelProtoSchema, TensorProtoSchema, ValueInfoProtoSchema, type ModelProto, type NodeProto, type TensorProto } from 'onnx-buf';
import { ELEM } from './encode.js';

const ort = createRequire(import.meta.url)('onnxruntime-node') as typeof import('onnxruntime-node');
type SessionOptions = import('onnxruntime-node').InferenceSession.SessionOptions;
type Feeds = Record<string, import('onnxruntime-node').Tensor>;

/**
 * The integer products with int8 weights: the index of the activation (null: a float input that
 * onnxruntime quantizes to uint8 itself) and the [weight, weight zero point] input index pairs,
 * from the ONNX operator spec and onnxruntime's ContribOperators.md. onnxruntime's CPU kernels
 * take uint8 in every one of these positions (T2 of MatMulInteger, ConvInteger, QLinearConv,
 * QLinearMatMul; T2 of the com.microsoft ops); exact-reference.test.ts runs each one converted.
 */
export const INTEGER_PRODUCTS: Record<string, { activation: number | null; weights: [number, number][] }> = {
  MatMulInteger: { activation: 0, weights: [[1, 3]] },
  ConvInteger: { activation: 0, weights: [[1, 3]] },
  QLinearConv: { activation: 0, weights: [[3, 5]] },
  QLinearMatMul: { activation: 0, weights: [[3, 5]] },
  'com.microsoft:MatMulIntegerToFloat': { activation: 0, weights: [[1, 5]] },
  'com.microsoft:DynamicQuantizeMatMul': { activation: null, weights: [[1, 3]] },
  'com.microsoft:DynamicQuantizeLSTM': {
    activation: null,
    weights: [
      [1, 9],
      [2, 11],
    ],
  },
};

const opKey = (n: NodeProto) => (n.domain === '' || n.domain === 'ai.onnx' ? n.opType : `${n.domain}:${n.opType}`);
const count = (dims: readonly bigint[]) => dims.reduce((a, b) => a * Number(b), 1);

/** The int8 values of a tensor proto: raw_data or int32_data; null for external data or a size that does not match. */
function int8Values(t: TensorProto): Int8Array | null {
  if (t.dataType !== ELEM.int8 || t.dataLocation === 1 || t.externalData.length > 0) return null;
  const n = count(t.dims);
  if (t.rawData.length > 0)
    return t.rawData.length === n ? new Int8Array(t.rawData.buffer, t.rawData.byteOffset, t.rawData.length).slice() : null;
  return t.int32Data.length === n ? Int8Array.from(t.int32Data) : null;
}

const shifted = (v: Int8Array) => Uint8Array.from(v, (x) => x + 128);

export interface Reference {
  bytes: Uint8Array;
  feeds: Feeds;
  options: SessionOptions;
  /** What changed: the converted operands ('node input: name') and 'disabled' when the optimizations were. */
  changes: string[];
}

/** The model, feeds and session options onnxruntime-node's CPU provider runs as the reference (see the file's comment). */
export function exactReference(bytes: Uint8Array, feeds: Feeds): Reference {
  const same: Reference = { bytes, feeds, options: {}, changes: [] };
  let model: ModelProto;
  try {
    model = fromBinary(ModelProtoSchema, bytes);
  } catch {
    // Bytes protobuf cannot read: the tests of broken files; onnxruntime reports them itself.
    return same;
  }
  const graph = model.graph;
  if (!graph) return same;

  const initializers = new Map(graph.initializer.map((t) => [t.name, t]));
  const constants = new Map<string, TensorProto>();
  for (const n of graph.node) {
    const value = n.opType === 'Constant' && n.domain === '' ? n.attribute.find((a) => a.name === 'value')?.t : undefined;
    if (value && n.output[0]) constants.set(n.output[0], value);
  }
  const inputs = new Map(graph.input.filter((i) => !initializers.has(i.name)).map((i) => [i.name, i]));
  const elemOf = (name: string): number | undefined => {
    const t = initializers.get(name) ?? constants.get(name);
    if (t) return t.dataType;
    const info = inputs.get(name) ?? graph.valueInfo.find((i) => i.name === name);
    if (info?.type?.value.case === 'tensorType') return info.type.value.value.elemType;
    const maker = graph.node.find((n) => n.output[0] === name);
    if (maker?.opType === 'DynamicQuantizeLinear') return ELEM.uint8;
    if (maker?.opType === 'QuantizeLinear' && !maker.attribute.some((a) => a.name === 'output_dtype'))
      return maker.input[2] ? elemOf(maker.input[2]) : ELEM.uint8;
    return undefined;
  };

  const taken = new Set([...graph.node.flatMap((n) => [...n.input, ...n.output]), ...initializers.keys(), ...inputs.keys()]);
  const fresh = (base: string) => {
    let name = `${base}.u8`;
    for (let i = 2; taken.has(name); i++) name = `${base}.u8.${i}`;
    taken.add(name);
    return name;
  };
  const newFeeds: Feeds = { ...feeds };
  const made = new Map<string, string>();
  const changes: string[] = [];

  /** A value's int8 data, or null where it is not a constant or fed int8 tensor. */
  const dataOf = (name: string): Int8Array | null => {
    const t = initializers.get(name) ?? constants.get(name);
    if (t) return int8Values(t);
    const f = inputs.has(name) ? feeds[name] : undefined;
    return f?.type === 'int8' ? (f.data as Int8Array) : null;
  };
  /** The uint8 copy of an int8 value (made once per value): an initializer, or a graph input fed with the converted data. */
  const convert = (name: string): string => {
    const have = made.get(name);
    if (have) return have;
    const data = shifted(dataOf(name)!);
    const to = fresh(name);
    const info = inputs.get(name);
    if (info) {
      const copy = clone(ValueInfoProtoSchema, info);
      copy.name = to;
      if (copy.type?.value.case === 'tensorType') copy.type.value.value.elemType = ELEM.uint8;
      graph.input.push(copy);
      newFeeds[to] = new ort.Tensor('uint8', data, feeds[name].dims);
    } else {
      const t = (initializers.get(name) ?? constants.get(name))!;
      graph.initializer.push(create(TensorProtoSchema, { name: to, dataType: ELEM.uint8, dims: t.dims, rawData: data }));
    }
    made.set(name, to);
    return to;
  };
  let zero128: string | undefined;

  for (const n of graph.node) {
    const spec = INTEGER_PRODUCTS[opKey(n)];
    if (!spec) continue;
    if (spec.activation !== null && elemOf(n.input[spec.activation] ?? '') !== ELEM.uint8) continue;
    // Every weight of the node int8 and readable, with a readable int8 zero point or none; else leave the node as written.
    const ok = spec.weights.every(([w, z]) => {
      const [wn, zn] = [n.input[w] ?? '', n.input[z] ?? ''];
      return wn !== '' && elemOf(wn) === ELEM.int8 && dataOf(wn) && (zn === '' || (elemOf(zn) === ELEM.int8 && dataOf(zn)));
    });
    if (!ok) continue;
    for (const [w, z] of spec.weights) {
      while (n.input.length <= z) n.input.push('');
      const zn = n.input[z];
      n.input[w] = convert(n.input[w]);
      if (zn !== '') n.input[z] = convert(zn);
      else {
        if (!zero128) {
          zero128 = fresh('zero_point_128');
          graph.initializer.push(create(TensorProtoSchema, { name: zero128, dataType: ELEM.uint8, dims: [], rawData: Uint8Array.of(128) }));
        }
        n.input[z] = zero128;
      }
      changes.push(`${n.opType} input ${w}: ${n.input[w]}`);
    }
  }

  const options: SessionOptions = {};
  const int8Weight = (name: string) => (initializers.get(name) ?? constants.get(name))?.dataType === ELEM.int8;
  if (graph.node.some((n) => n.opType === 'DequantizeLinear' && int8Weight(n.input[0] ?? ''))) {
    options.graphOptimizationLevel = 'disabled';
    changes.push('disabled');
  }
  if (changes.length === 0) return same;
  return { bytes: made.size > 0 || zero128 ? toBinary(ModelProtoSchema, model) : bytes, feeds: newFeeds, options, changes };
}

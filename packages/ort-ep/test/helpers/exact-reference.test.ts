// exact-reference.ts, the reference model onnxruntime runs: on the saturating probe it gives the
// exact product (where onnxruntime's u8s8 kernels of AVX2 CPUs without VNNI give 2 * 32767 for a
// pair), and on inputs that saturate nowhere it changes no result of any op it converts, on any CPU.
import { fromBinary } from '@bufbuild/protobuf';
import { ModelProtoSchema } from 'onnx-buf';
import { describe, expect, it } from 'vitest';
import { ELEM, model, node, v, type ElemName, type NodeSpec, type TensorSpec } from './build.js';
import { exactReference, INTEGER_PRODUCTS } from './exact-reference.js';
import { ort, plain, runOn, seeded, type Feeds, type OrtTensor } from './ort.js';

const count = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
const ints = (n: number, seed: number, lo: number, hi: number) =>
  seeded(n, seed).map((x) => Math.round(lo + ((x + 1) / 2) * (hi - lo)) + 0); // + 0: no -0
const ctor = { uint8: Uint8Array, int8: Int8Array, float32: Float32Array, int32: Int32Array } as const;
const tensor = (type: keyof typeof ctor, dims: number[], values: number[]) => new ort.Tensor(type, ctor[type].from(values), dims);

/** onnxruntime's outputs on the model exactly as written. */
async function asWritten(bytes: Uint8Array, feeds: Feeds): Promise<Record<string, OrtTensor>> {
  const s = await ort.InferenceSession.create(bytes);
  try {
    return await s.run(feeds);
  } finally {
    await s.release();
  }
}

/** The element types of the weight operands of every integer product of a model. */
function weightTypes(bytes: Uint8Array): string[] {
  const g = fromBinary(ModelProtoSchema, bytes).graph!;
  const typeOf = (name: string) => {
    const t = g.initializer.find((i) => i.name === name);
    if (t) return t.dataType;
    const i = g.input.find((x) => x.name === name);
    return i?.type?.value.case === 'tensorType' ? i.type.value.value.elemType : undefined;
  };
  const names = Object.fromEntries(Object.entries(ELEM).map(([k, c]) => [c, k]));
  return g.node.flatMap((n) =>
    (INTEGER_PRODUCTS[n.domain ? `${n.domain}:${n.opType}` : n.opType]?.weights ?? []).map(
      ([w, z]) => `${n.opType} ${names[typeOf(n.input[w]) ?? -1]}/${n.input[z] ? names[typeOf(n.input[z]) ?? -1] : '-'}`,
    ),
  );
}

interface Case {
  op: string;
  domain?: string;
  inputs: (string | '')[];
  fed: Record<string, OrtTensor>;
  consts?: TensorSpec[];
  outs?: [string, ElemName][];
  attrs?: NodeSpec['attrs'];
}

function build(c: Case): Uint8Array {
  const outs = c.outs ?? [['y', 'float32']];
  return model({
    opsets: { '': 17, 'com.microsoft': 1 },
    inputs: Object.entries(c.fed).map(([n, t]) => v(n, t.type as ElemName, [...t.dims])),
    outputs: outs.map(([n, t]) => v(n, t)),
    initializers: c.consts ?? [],
    nodes: [
      node(
        c.op,
        c.inputs,
        outs.map(([n]) => n),
        { domain: c.domain, attrs: c.attrs },
      ),
    ],
  });
}

describe('exactReference', () => {
  it('the probe: uint8 255s times int8 127s is 4 * 255 * 127 = 129540 exactly, fed, constant or Constant node', async () => {
    const want = 4 * 255 * 127;
    const a = tensor('uint8', [1, 4], [255, 255, 255, 255]);
    const b = tensor('int8', [4, 1], [127, 127, 127, 127]);
    const fed = model({
      opsets: { '': 10 },
      inputs: [v('a', 'uint8', [1, 4]), v('b', 'int8', [4, 1])],
      outputs: [v('y', 'int32')],
      nodes: [node('MatMulInteger', ['a', 'b'], ['y'])],
    });
    const constant = model({
      opsets: { '': 10 },
      inputs: [v('a', 'uint8', [1, 4])],
      initializers: [{ name: 'b', type: 'int8', dims: [4, 1], values: [127, 127, 127, 127] }],
      outputs: [v('y', 'int32')],
      nodes: [node('MatMulInteger', ['a', 'b'], ['y'])],
    });
    const constantNode = model({
      opsets: { '': 10 },
      inputs: [v('a', 'uint8', [1, 4])],
      outputs: [v('y', 'int32')],
      nodes: [
        node('Constant', [], ['b'], { attrs: { value: { t: { name: 'b', type: 'int8', dims: [4, 1], values: [127, 127, 127, 127] } } } }),
        node('MatMulInteger', ['a', 'b'], ['y']),
      ],
    });
    for (const [bytes, feeds] of [
      [fed, { a, b }],
      [constant, { a }],
      [constantNode, { a }],
    ] as const) {
      expect(weightTypes(exactReference(bytes, feeds).bytes)).toEqual(['MatMulInteger uint8/uint8']);
      expect(plain((await runOn('cpu', bytes, feeds)).y)).toEqual([want]);
    }
  });

  // Each op with int8 weights whose pairs of raw products stay within int16 (|a| <= 255, |b| <= 50),
  // so that onnxruntime's u8s8 kernels are exact too: the converted model gives the same results.
  const K = 12;
  const N = 4;
  const u8 = (dims: number[], seed: number, hi = 255) => tensor('uint8', dims, ints(count(dims), seed, 0, hi));
  const s8 = (dims: number[], seed: number) => ints(count(dims), seed, -50, 50);
  const cases: Record<string, Case> = {
    MatMulInteger: {
      op: 'MatMulInteger',
      inputs: ['a', 'b', 'az', 'bz'],
      fed: { a: u8([3, K], 1), az: tensor('uint8', [], [7]), bz: tensor('int8', [N], [3, -5, 0, 9]) },
      consts: [{ name: 'b', type: 'int8', dims: [K, N], values: s8([K, N], 2) }],
      outs: [['y', 'int32']],
    },
    ConvInteger: {
      op: 'ConvInteger',
      inputs: ['x', 'w'],
      fed: { x: u8([1, 3, 5, 5], 3), w: tensor('int8', [2, 3, 3, 3], s8([2, 3, 3, 3], 4)) },
      outs: [['y', 'int32']],
      attrs: { pads: [1, 1, 1, 1] },
    },
    QLinearConv: {
      op: 'QLinearConv',
      inputs: ['x', 'xs', 'xz', 'w', 'ws', 'wz', 'ys', 'yz'],
      fed: { x: u8([1, 3, 5, 5], 5) },
      consts: [
        { name: 'xs', type: 'float32', dims: [], values: [0.05] },
        { name: 'xz', type: 'uint8', dims: [], values: [20] },
        { name: 'w', type: 'int8', dims: [2, 3, 3, 3], values: s8([2, 3, 3, 3], 6) },
        { name: 'ws', type: 'float32', dims: [2], values: [0.01, 0.02] },
        { name: 'wz', type: 'int8', dims: [2], values: [0, 0] },
        { name: 'ys', type: 'float32', dims: [], values: [0.5] },
        { name: 'yz', type: 'uint8', dims: [], values: [128] },
      ],
      outs: [['y', 'uint8']],
    },
    QLinearMatMul: {
      op: 'QLinearMatMul',
      inputs: ['a', 'as', 'az', 'b', 'bs', 'bz', 'ys', 'yz'],
      fed: { a: u8([3, K], 7), b: tensor('int8', [K, N], s8([K, N], 8)) },
      consts: [
        { name: 'as', type: 'float32', dims: [], values: [0.03] },
        { name: 'az', type: 'uint8', dims: [], values: [100] },
        { name: 'bs', type: 'float32', dims: [], values: [0.02] },
        { name: 'bz', type: 'int8', dims: [], values: [-4] },
        { name: 'ys', type: 'float32', dims: [], values: [0.25] },
        { name: 'yz', type: 'uint8', dims: [], values: [128] },
      ],
      outs: [['y', 'uint8']],
    },
    MatMulIntegerToFloat: {
      op: 'MatMulIntegerToFloat',
      domain: 'com.microsoft',
      inputs: ['a', 'b', 'as', 'bs', 'az'],
      fed: { a: u8([2, 3, K], 9), as: tensor('float32', [], [0.05]) },
      consts: [
        { name: 'b', type: 'int8', dims: [K, N], values: s8([K, N], 10) },
        { name: 'bs', type: 'float32', dims: [N], values: [0.1, 0.2, 0.3, 0.4] },
        { name: 'az', type: 'uint8', dims: [], values: [60] },
      ],
    },
    DynamicQuantizeMatMul: {
      op: 'DynamicQuantizeMatMul',
      domain: 'com.microsoft',
      inputs: ['a', 'b', 's', 'z'],
      fed: { a: tensor('float32', [3, K], seeded(3 * K, 11)) },
      consts: [
        { name: 'b', type: 'int8', dims: [K, N], values: s8([K, N], 12) },
        { name: 's', type: 'float32', dims: [N], values: [0.01, 0.02, 0.03, 0.04] },
        { name: 'z', type: 'int8', dims: [N], values: [0, 2, -3, 5] },
      ],
    },
    DynamicQuantizeLSTM: {
      op: 'DynamicQuantizeLSTM',
      domain: 'com.microsoft',
      inputs: ['x', 'w', 'r', '', '', '', '', '', 'ws', 'wz', 'rs', 'rz'],
      fed: { x: tensor('float32', [3, 1, 5], seeded(15, 13)) },
      consts: [
        { name: 'w', type: 'int8', dims: [1, 5, 16], values: s8([1, 5, 16], 14) },
        { name: 'r', type: 'int8', dims: [1, 4, 16], values: s8([1, 4, 16], 15) },
        { name: 'ws', type: 'float32', dims: [1], values: [0.01] },
        { name: 'wz', type: 'int8', dims: [1], values: [0] },
        { name: 'rs', type: 'float32', dims: [1, 16], values: seeded(16, 16).map((x) => 0.01 + 0.005 * x) },
        { name: 'rz', type: 'int8', dims: [1, 16], values: new Array(16).fill(0) },
      ],
      outs: [
        ['y', 'float32'],
        ['yh', 'float32'],
        ['yc', 'float32'],
      ],
      attrs: { hidden_size: 4 },
    },
  };
  const converted: Record<string, string[]> = {
    MatMulInteger: ['MatMulInteger uint8/uint8'],
    ConvInteger: ['ConvInteger uint8/uint8'],
    QLinearConv: ['QLinearConv uint8/uint8'],
    QLinearMatMul: ['QLinearMatMul uint8/uint8'],
    MatMulIntegerToFloat: ['MatMulIntegerToFloat uint8/uint8'],
    DynamicQuantizeMatMul: ['DynamicQuantizeMatMul uint8/uint8'],
    DynamicQuantizeLSTM: ['DynamicQuantizeLSTM uint8/uint8', 'DynamicQuantizeLSTM uint8/uint8'],
  };

  it('every op it converts is in the cases', () =>
    expect(Object.keys(INTEGER_PRODUCTS).map((k) => k.split(':').at(-1))).toEqual(Object.keys(cases)));

  for (const [name, c] of Object.entries(cases))
    it(`${name}: uint8 weights there, results unchanged where nothing saturates`, async () => {
      const bytes = build(c);
      const ref = exactReference(bytes, c.fed);
      expect(weightTypes(ref.bytes)).toEqual(converted[name]);
      const want = await asWritten(bytes, c.fed);
      const have = await runOn('cpu', bytes, c.fed);
      expect(Object.keys(have).sort()).toEqual(Object.keys(want).sort());
      for (const k of Object.keys(want)) {
        expect([have[k].type, have[k].dims]).toEqual([want[k].type, want[k].dims]);
        expect(plain(have[k]), k).toEqual(plain(want[k]));
      }
    });

  it('a weight that another node reads too: that reader still gets the int8 values', async () => {
    const b = s8([K, N], 20);
    const bytes = model({
      opsets: { '': 17 },
      inputs: [v('a', 'uint8', [2, K])],
      initializers: [{ name: 'b', type: 'int8', dims: [K, N], values: b }],
      outputs: [v('y', 'int32'), v('bc', 'int32')],
      nodes: [node('MatMulInteger', ['a', 'b'], ['y']), node('Cast', ['b'], ['bc'], { attrs: { to: ELEM.int32 } })],
    });
    const a = u8([2, K], 21);
    const ref = exactReference(bytes, { a });
    expect(weightTypes(ref.bytes)).toEqual(['MatMulInteger uint8/uint8']);
    const out = await runOn('cpu', bytes, { a });
    expect(plain(out.bc)).toEqual(b);
    expect(plain(out.y)).toEqual(plain((await asWritten(bytes, { a })).y));
  });

  it('leaves int8 activations, uint8 weights and other models as they are (the same bytes)', () => {
    const one = (at: ElemName, bt: ElemName) =>
      model({
        opsets: { '': 10 },
        inputs: [v('a', at, [2, K]), v('b', bt, [K, N])],
        outputs: [v('y', 'int32')],
        nodes: [node('MatMulInteger', ['a', 'b'], ['y'])],
      });
    const b8 = tensor('int8', [K, N], s8([K, N], 22));
    for (const [bytes, feeds] of [
      [one('int8', 'int8'), { a: tensor('int8', [2, K], s8([2, K], 23)), b: b8 }],
      [one('uint8', 'uint8'), { a: u8([2, K], 24), b: u8([K, N], 25) }],
      [model({ inputs: [v('x', 'float32', [2])], outputs: [v('y', 'float32')], nodes: [node('Relu', ['x'], ['y'])] }), {}],
      [Uint8Array.of(0xff, 0xff, 0xff), {}],
    ] as [Uint8Array, Feeds][]) {
      const ref = exactReference(bytes, feeds);
      expect([ref.bytes, ref.feeds, ref.options, ref.changes]).toEqual([bytes, feeds, {}, []]);
      expect(ref.bytes).toBe(bytes);
    }
  });

  it('a QDQ graph with an int8 weight runs unoptimized (as written), its values untouched', () => {
    const bytes = model({
      opsets: { '': 19 },
      inputs: [v('x', 'float32', [1, 1, 4, 4])],
      outputs: [v('y', 'float32')],
      initializers: [
        { name: 'wq', type: 'int8', dims: [1, 1, 3, 3], values: s8([1, 1, 3, 3], 26) },
        { name: 's', type: 'float32', dims: [], values: [0.1] },
        { name: 'z', type: 'int8', dims: [], values: [0] },
      ],
      nodes: [node('DequantizeLinear', ['wq', 's', 'z'], ['w']), node('Conv', ['x', 'w'], ['y'])],
    });
    const ref = exactReference(bytes, {});
    expect([ref.bytes, ref.options, ref.changes]).toEqual([bytes, { graphOptimizationLevel: 'disabled' }, ['disabled']]);
  });
});

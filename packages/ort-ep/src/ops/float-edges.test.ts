// Edge values against onnxruntime-node, bit for bit where the result is a number (the sign of
// zero included) and NaN for NaN (payloads are the hardware's): Sign of NaN, Relu of -0, Clip
// without bounds (infinities clamp to the type's largest finite value), Where picking a -0 of X,
// and ArgMax/ArgMin over NaNs (onnxruntime's scan never picks a NaN unless it comes first).
import { describe, expect, it } from 'vitest';
import { model, node, v, type AttrSpec, type ElemName } from '../../test/helpers/build.js';
import { ort, runOn, type OrtTensor } from '../../test/helpers/ort.js';

const F32 = [0, -0, NaN, -NaN, Infinity, -Infinity, 1e-45, -1e-45, 3e38, -3e38, 1, -1, 0.5, -2.5, 1e-40, -1e-40];
const F16 = Uint16Array.of(
  0x0000,
  0x8000,
  0x7e00,
  0xfe00,
  0x7c00,
  0xfc00,
  0x0001,
  0x8001,
  0x03ff,
  0x7bff,
  0xfbff,
  0x3c00,
  0xbc00,
  0x3555,
  0x83ff,
  0x4000,
);

function feed(type: 'float32' | 'float16', values: number[] | Uint16Array, dims: number[]): OrtTensor {
  return type === 'float16'
    ? new ort.Tensor('float16', values as Uint16Array, dims)
    : new ort.Tensor('float32', Float32Array.from(values), dims);
}

/** Each element as bits, or 'NaN'. */
function bits(t: OrtTensor): string[] {
  const d = t.data as ArrayLike<number | bigint> & ArrayBufferView;
  if (t.type === 'float32') {
    const f = d as unknown as Float32Array;
    const u = new Uint32Array(f.buffer, f.byteOffset, f.length);
    return Array.from(f, (x, i) => (Number.isNaN(x) ? 'NaN' : u[i].toString(16)));
  }
  if (t.type === 'float16') {
    const u = new Uint16Array(d.buffer, d.byteOffset, (d as unknown as Uint16Array).length);
    return Array.from(u, (x) => ((x & 0x7c00) === 0x7c00 && x & 0x3ff ? 'NaN' : x.toString(16)));
  }
  return Array.from(d as ArrayLike<number | bigint>, String);
}

async function expectSame(
  op: string,
  type: 'float32' | 'float16',
  inputs: OrtTensor[],
  attrs: Record<string, AttrSpec> = {},
  out: ElemName = type,
) {
  const names = inputs.map((_, i) => `x${i}`);
  const bytes = model({
    opsets: { '': 21 },
    inputs: inputs.map((t, i) => v(names[i], t.type as ElemName, [...t.dims])),
    outputs: [v('y', out)],
    nodes: [node(op, names, ['y'], { attrs })],
  });
  const feeds = Object.fromEntries(inputs.map((t, i) => [names[i], t]));
  const want = await runOn('cpu', bytes, feeds);
  const have = await runOn('mlx', bytes, feeds);
  expect(have.y.dims).toEqual(want.y.dims);
  expect(bits(have.y)).toEqual(bits(want.y));
}

describe('float edge values match onnxruntime', () => {
  it('Sign of NaN is NaN (float32)', () => expectSame('Sign', 'float32', [feed('float32', F32, [16])]));
  for (const type of ['float32', 'float16'] as const) {
    const x = type === 'float32' ? feed(type, F32, [16]) : feed(type, F16, [16]);
    it(`Relu keeps -0 (${type})`, () => expectSame('Relu', type, [x]));
    it(`Clip without bounds clamps infinities (${type})`, () => expectSame('Clip', type, [x]));
  }
  it('Clip with only a lower bound clamps +inf (float32)', () =>
    expectSame('Clip', 'float32', [feed('float32', F32, [16]), feed('float32', [-1], [])]));
  it('Where picking a -0 of X gives +0; of Y, -0 (float32)', () =>
    expectSame('Where', 'float32', [
      new ort.Tensor(
        'bool',
        Uint8Array.from({ length: 16 }, (_, i) => i % 2),
        [16],
      ),
      feed('float32', F32, [16]),
      feed('float32', [...F32].reverse(), [16]),
    ]));
  it('Where on host values (folded at create) picks like the device', async () => {
    const bytes = model({
      opsets: { '': 21 },
      inputs: [v('z', 'float32', [4])],
      outputs: [v('y', 'float32')],
      initializers: [
        { name: 'c', type: 'bool', dims: [4], values: [1, 0, 1, 0] },
        { name: 'a', type: 'float32', dims: [4], values: [-0, -0, 1, 2] },
        { name: 'b', type: 'float32', dims: [4], values: [3, -0, -0, -0] },
      ],
      nodes: [node('Where', ['c', 'a', 'b'], ['w']), node('Mul', ['w', 'z'], ['y'])],
    });
    const feeds = { z: feed('float32', [1, 1, 1, 1], [4]) };
    expect(bits((await runOn('mlx', bytes, feeds)).y)).toEqual(bits((await runOn('cpu', bytes, feeds)).y));
  });
  for (const op of ['ArgMax', 'ArgMin'])
    for (const selectLast of [0, 1])
      for (const [axis, keepdims] of [
        [1, 1],
        [0, 0],
        [-1, 0],
      ])
        it(`${op} over NaNs, axis ${axis}, keepdims ${keepdims}, select_last_index ${selectLast}`, () => {
          // Rows with a NaN first, in the middle, at the end, all NaN, none, and ties.
          const rows = [
            [NaN, 1, 5, 2],
            [1, NaN, 5, 2],
            [3, 1, 2, NaN],
            [NaN, NaN, NaN, NaN],
            [2, 7, 7, -1],
            [-Infinity, NaN, -3, Infinity],
          ];
          return expectSame(
            op,
            'float32',
            [feed('float32', rows.flat(), [6, 4])],
            { axis, keepdims, select_last_index: selectLast },
            'int64',
          );
        });
});

describe('LogSoftmax next to the float32 limit', () => {
  // Two equal maxima of 3.4e38 along the axis: log(1/2), not 0.
  const x = [3.4e38, 1, -2, 3.4e38, 0.5, -3.4e38, 1, 2, 3];
  for (const axis of [0, 1])
    it(`axis ${axis}`, async () => {
      const bytes = model({
        opsets: { '': 21 },
        inputs: [v('x', 'float32', [3, 3])],
        outputs: [v('y', 'float32')],
        nodes: [node('LogSoftmax', ['x'], ['y'], { attrs: { axis } })],
      });
      const feeds = { x: feed('float32', axis === 0 ? x : [3.4e38, 3.4e38, 1, 1, -2, 0.5, -3.4e38, 2, 3], [3, 3]) };
      const want = (await runOn('cpu', bytes, feeds)).y.data as Float32Array;
      const have = (await runOn('mlx', bytes, feeds)).y.data as Float32Array;
      for (let i = 0; i < 9; i++) expect(have[i]).toBeCloseTo(want[i], 5);
    });
});

import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MlxSession, NodeExecutionError, RefusedNodeError, type HostTensor } from '../../src/index.js';
import { model, node, v, type ModelSpec } from '../helpers/build.js';
import { sharedPath } from '../helpers/shared.js';
import { readTestCase } from '../../src/onnx/index.js';

const f32 = (data: number[], dims: number[]): HostTensor => ({ dtype: 1, dims, data: Float32Array.from(data) });
const i64 = (data: (number | bigint)[], dims: number[]): HostTensor => ({ dtype: 7, dims, data: BigInt64Array.from(data.map(BigInt)) });

/** Runs each feed set three times on both paths; returns the error of each run (or 'ok'). */
async function outcomes(spec: ModelSpec, feeds: Record<string, HostTensor>, compiled: boolean): Promise<string[]> {
  const s = await MlxSession.create(model(spec), { device: 'cpu', compiled });
  const out: string[] = [];
  try {
    for (let r = 0; r < 3; r++) {
      out.push(
        await s.run(feeds).then(
          () => 'ok',
          (e: Error) => `${e.constructor.name}: ${e.message}`,
        ),
      );
    }
  } finally {
    s.release();
  }
  return out;
}

describe('out-of-range indices are errors naming the node and the index', () => {
  const gpt2 = sharedPath('models/gpt2-tiny');

  it('a token id outside the vocabulary of gpt2-tiny (512 rows), on both paths', async () => {
    const tc = readTestCase(gpt2);
    const [ids, mask] = tc.datasets[0].inputs as HostTensor[];
    for (const compiled of [true, false]) {
      const s = await MlxSession.create(join(gpt2, 'model.onnx'), { device: 'cpu', compiled });
      try {
        for (const bad of [512n, 100000n, -513n, 2n ** 40n]) {
          const data = BigInt64Array.from(ids.data as BigInt64Array);
          data[1] = bad;
          for (let r = 0; r < 3; r++) {
            const e = await s.run({ input_ids: { ...ids, data }, attention_mask: mask }).then(
              () => undefined,
              (err: Error) => err,
            );
            expect(e).toBeInstanceOf(NodeExecutionError);
            expect(e!.message).toMatch(
              new RegExp(`node '[^']+' \\(Gather\\): Gather along axis 0 of size 512: index ${bad} is out of range \\[-512, 511\\]`),
            );
          }
        }
        // Still a working session, with the reference's values.
        const good = await s.run({ input_ids: ids, attention_mask: mask });
        expect((good[s.outputNames[0]] as HostTensor).dims).toEqual((tc.datasets[0].outputs[0] as HostTensor).dims);
      } finally {
        s.release();
      }
    }
  }, 60_000);

  const data = f32([1, 2, 3, 4, 5, 6], [2, 3]);
  const cases: [string, ModelSpec, Record<string, HostTensor>, RegExp][] = [
    [
      'Gather',
      {
        inputs: [v('x', 'float32', [2, 3]), v('i', 'int64', [2])],
        outputs: [v('y', 'float32')],
        nodes: [node('Gather', ['x', 'i'], ['y'], { name: 'g', attrs: { axis: 1 } })],
      },
      { x: data, i: i64([0, 3], [2]) },
      /node 'g' \(Gather\): Gather along axis 1 of size 3: index 3 is out of range \[-3, 2\]/,
    ],
    [
      'GatherElements',
      {
        inputs: [v('x', 'float32', [2, 3]), v('i', 'int64', [2, 1])],
        outputs: [v('y', 'float32')],
        nodes: [node('GatherElements', ['x', 'i'], ['y'], { name: 'ge', attrs: { axis: 1 } })],
      },
      { x: data, i: i64([-4, 0], [2, 1]) },
      /node 'ge' \(GatherElements\): GatherElements along axis 1 of size 3: index -4 is out of range \[-3, 2\]/,
    ],
    [
      'GatherND',
      {
        inputs: [v('x', 'float32', [2, 3]), v('i', 'int64', [1, 2])],
        outputs: [v('y', 'float32')],
        nodes: [node('GatherND', ['x', 'i'], ['y'], { name: 'gnd' })],
      },
      { x: data, i: i64([2, 0], [1, 2]) },
      /node 'gnd' \(GatherND\): GatherND into data of shape \[2, 3\]: index 2 is out of range/,
    ],
    [
      'ScatterElements',
      {
        inputs: [v('x', 'float32', [2, 3]), v('i', 'int64', [1, 2]), v('u', 'float32', [1, 2])],
        outputs: [v('y', 'float32')],
        nodes: [node('ScatterElements', ['x', 'i', 'u'], ['y'], { name: 'se', attrs: { axis: 1 } })],
      },
      { x: data, i: i64([1, 1000000], [1, 2]), u: f32([9, 9], [1, 2]) },
      /node 'se' \(ScatterElements\): ScatterElements along axis 1 of size 3: index 1000000 is out of range \[-3, 2\]/,
    ],
    [
      'ScatterND',
      {
        inputs: [v('x', 'float32', [2, 3]), v('i', 'int64', [1, 2]), v('u', 'float32', [1])],
        outputs: [v('y', 'float32')],
        nodes: [node('ScatterND', ['x', 'i', 'u'], ['y'], { name: 'snd' })],
      },
      { x: data, i: i64([0, -7], [1, 2]), u: f32([9], [1]) },
      /node 'snd' \(ScatterND\): ScatterND into data of shape \[2, 3\]: index -7 is out of range/,
    ],
  ];
  for (const [op, spec, feeds, message] of cases) {
    it(`${op}: every run, both paths`, async () => {
      for (const compiled of [true, false]) {
        const got = await outcomes({ opsets: { '': 18 }, ...spec }, feeds, compiled);
        for (const g of got) expect(g).toMatch(message);
        expect(got[0]).toMatch(/^NodeExecutionError/);
      }
    });
  }
});

/** One run through MlxSession on the compiled path (three runs: analysed, traced, replayed) and eagerly. */
async function everyPath(spec: ModelSpec, feeds: Record<string, HostTensor>): Promise<string[]> {
  return [...(await outcomes(spec, feeds, true)), ...(await outcomes(spec, feeds, false))];
}
const int32 = (data: number[], dims: number[]): HostTensor => ({ dtype: 6, dims, data: Int32Array.from(data) });
const binary = (op: string, type: 'int32' | 'int64', attrs?: Record<string, number>): ModelSpec => ({
  opsets: { '': 17 },
  inputs: [v('a', type, [3]), v('b', type, [3])],
  outputs: [v('y', type, [3])],
  // A no-op Clip moves the operands to the device on the eager path too (small host feeds would take the host path).
  nodes: [node('Clip', ['a'], ['ad']), node('Clip', ['b'], ['bd']), node(op, ['ad', 'bd'], ['y'], { name: 'op', attrs })],
});

describe('integer faults', () => {
  const MIN = -(2 ** 31);
  it('integer Div and Mod by zero are errors; INT_MIN / -1 wraps and INT_MIN mod -1 is 0', async () => {
    for (const op of ['Div', 'Mod']) {
      const got = await everyPath(binary(op, 'int32'), { a: int32([7, 1, 2], [3]), b: int32([2, 0, 1], [3]) });
      for (const g of got) expect(g).toMatch(new RegExp(`node 'op' \\(${op}\\): integer ${op === 'Div' ? 'division' : 'modulo'} by zero`));
    }
    const s = await MlxSession.create(model(binary('Div', 'int32')), { device: 'cpu' });
    const s2 = await MlxSession.create(model(binary('Mod', 'int32', { fmod: 1 })), { device: 'cpu' });
    try {
      for (let r = 0; r < 3; r++) {
        expect([...((s.runSync({ a: int32([MIN, -7, 7], [3]), b: int32([-1, 2, -1], [3]) }).y as HostTensor).data as Int32Array)]).toEqual([
          MIN,
          -3,
          -7,
        ]);
        expect([...((s2.runSync({ a: int32([MIN, -7, 7], [3]), b: int32([-1, 2, -1], [3]) }).y as HostTensor).data as Int32Array)]).toEqual(
          [0, -1, 0],
        );
      }
    } finally {
      s.release();
      s2.release();
    }
  });

  it('zero strides, dilations or group and negative pads refuse the node at create()', async () => {
    for (const attrs of [{ strides: [0, 1] }, { dilations: [1, 0] }, { group: 0 }, { pads: [0, -1, 0, 0] }]) {
      const bytes = model({
        opsets: { '': 17 },
        inputs: [v('x', 'float32', [1, 1, 4, 4])],
        outputs: [v('y', 'float32')],
        initializers: [{ name: 'w', type: 'float32', dims: [1, 1, 2, 2], values: [1, 1, 1, 1] }],
        nodes: [node('Conv', ['x', 'w'], ['y'], { name: 'conv', attrs })],
      });
      const e = await MlxSession.create(bytes, { device: 'cpu' }).then(
        () => undefined,
        (err: Error) => err,
      );
      // An invalid node (it breaks the spec): a RefusedNodeError, also where a fallback is allowed.
      expect(e).toBeInstanceOf(RefusedNodeError);
      expect(e?.message).toMatch(/node 'conv' \(Conv\): ((strides|dilations|group) must be positive|pads must not be negative)/);
    }
  });
});

describe('non-finite data and impossible sizes', () => {
  it('GridSample with NaN and infinite coordinates samples as outside the input (zeros), never wild memory', async () => {
    const spec: ModelSpec = {
      opsets: { '': 20 },
      inputs: [v('x', 'float32', [1, 1, 2, 2]), v('g', 'float32', [1, 1, 3, 2])],
      outputs: [v('y', 'float32')],
      nodes: [node('GridSample', ['x', 'g'], ['y'], { name: 'gs' })],
    };
    const s = await MlxSession.create(model(spec), { device: 'cpu' });
    try {
      for (let r = 0; r < 3; r++) {
        const y = s.runSync({ x: f32([1, 2, 3, 4], [1, 1, 2, 2]), g: f32([NaN, 0, Infinity, -Infinity, 0, 0], [1, 1, 3, 2]) })
          .y as HostTensor;
        const got = [...(y.data as Float32Array)];
        expect(got.slice(0, 2)).toEqual([0, 0]);
        // The in-range sample: the centre of the 2x2 input, the mean of its values.
        expect(got[2]).toBeCloseTo(2.5, 5);
      }
    } finally {
      s.release();
    }
  });

  const roiSpec: ModelSpec = {
    opsets: { '': 16 },
    inputs: [v('x', 'float32', [1, 1, 4, 4]), v('rois', 'float32', [2, 4]), v('b', 'int64', [2])],
    outputs: [v('y', 'float32')],
    nodes: [node('RoiAlign', ['x', 'rois', 'b'], ['y'], { name: 'roi', attrs: { output_height: 2, output_width: 2 } })],
  };
  const x4 = f32(
    Array.from({ length: 16 }, (_, i) => i),
    [1, 1, 4, 4],
  );
  it('RoiAlign: a NaN roi, a huge one and a batch index out of range are errors, at once', async () => {
    const t0 = performance.now();
    const cases: [Record<string, HostTensor>, RegExp][] = [
      [{ x: x4, rois: f32([0, 0, 2, 2, NaN, 0, 1, 1], [2, 4]), b: i64([0, 0], [2]) }, /roi 1 has a non-finite coordinate \(NaN\)/],
      [
        { x: x4, rois: f32([0, 0, 1e30, 1e30, NaN, 0, 1, 1], [2, 4]), b: i64([0, 0], [2]) },
        /non-finite|over the limit of \d+ sampling taps/,
      ],
      [{ x: x4, rois: f32([0, 0, 1e30, 1e30, 0, 0, 1, 1], [2, 4]), b: i64([0, 0], [2]) }, /over the limit of \d+ sampling taps/],
      [{ x: x4, rois: f32([0, 0, 2, 2, 0, 0, 1, 1], [2, 4]), b: i64([0, 3], [2]) }, /batch index 3 of roi 1 is out of range \[0, 0\]/],
    ];
    for (const [feeds, message] of cases) for (const g of await everyPath(roiSpec, feeds)) expect(g).toMatch(message);
    expect(performance.now() - t0).toBeLessThan(30_000);
  });

  it('Resize with NaN or absurd scales is an error, not an empty or enormous tensor', async () => {
    const spec: ModelSpec = {
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [1, 1, 2, 2]), v('s', 'float32', [4])],
      outputs: [v('y', 'float32')],
      initializers: [{ name: 'roi', type: 'float32', dims: [0], values: [] }],
      nodes: [node('Resize', ['x', 'roi', 's'], ['y'], { name: 'rs', attrs: { mode: 'linear' } })],
    };
    const x = f32([1, 2, 3, 4], [1, 1, 2, 2]);
    for (const g of await everyPath(spec, { x, s: f32([1, 1, NaN, 2], [4]) }))
      expect(g).toMatch(/node 'rs' \(Resize\): scale NaN of axis 2 is not a finite positive number/);
    for (const g of await everyPath(spec, { x, s: f32([1, 1, 1e12, 1], [4]) }))
      expect(g).toMatch(/output size \d+ of axis 2 is not a dimension|over the limit/);
  });

  it('shapes that need more memory than the budget are refused before anything is allocated', async () => {
    // ConstantOfShape of a fed shape, then an Expand to terabytes.
    const spec: ModelSpec = {
      opsets: { '': 17 },
      inputs: [v('shape', 'int64', [2])],
      outputs: [v('y', 'float32')],
      nodes: [node('ConstantOfShape', ['shape'], ['y'], { name: 'cos' })],
    };
    for (const dims of [
      [2 ** 20, 2 ** 20],
      [2 ** 32 + 2, 1],
      [-3, 2],
    ]) {
      for (const g of await everyPath(spec, { shape: i64(dims, [2]) })) {
        expect(g).toMatch(/^(NodeExecutionError|ResourceLimitError).*node 'cos' \(ConstantOfShape\)/);
      }
    }
  });
});

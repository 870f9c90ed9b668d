// The compiled path through MlxSession: per-signature programs in an LRU, results equal to the
// eager path on every run (first analysed, then traced, then replayed), data-dependent nodes run
// as steps between traced segments, and random nodes keep drawing new values.
import { describe, expect, it } from 'vitest';
import { MlxSession, type HostTensor } from '../../src/index.js';
import { MISS_STREAK } from '../../src/execute/runner.js';
import { model, node, v } from '../helpers/build.js';
import { ort, seeded } from '../helpers/ort.js';

const f32 = (data: number[], dims: number[]): HostTensor => ({ dtype: 1, dims, data: Float32Array.from(data) });
const i64 = (data: number[], dims: number[]): HostTensor => ({ dtype: 7, dims, data: BigInt64Array.from(data.map(BigInt)) });
const values = (t: HostTensor | unknown) => Array.from((t as HostTensor).data as ArrayLike<number | bigint>, Number);

// y = softmax(x @ w + b) * shape-derived scale: shape math (Shape/Gather/Cast) folds per signature.
const mlp = model({
  opsets: { '': 17 },
  inputs: [v('x', 'float32', ['N', 4])],
  outputs: [v('y', 'float32', ['N', 3])],
  initializers: [
    { name: 'w', type: 'float32', dims: [4, 3], values: seeded(12, 3) },
    { name: 'b', type: 'float32', dims: [3], values: [0.1, -0.2, 0.3] },
    { name: 'zero', type: 'int64', dims: [], values: [0n] },
  ],
  nodes: [
    node('MatMul', ['x', 'w'], ['xw']),
    node('Add', ['xw', 'b'], ['z']),
    node('Softmax', ['z'], ['p'], { attrs: { axis: -1 } }),
    node('Shape', ['x'], ['shape']),
    node('Gather', ['shape', 'zero'], ['n']),
    node('Cast', ['n'], ['nf'], { attrs: { to: 1 } }),
    node('Mul', ['p', 'nf'], ['y']),
  ],
});

describe('compiled path', () => {
  it('matches the eager path on the analysed, traced and replayed runs; one program per signature', async () => {
    const eager = await MlxSession.create(mlp, { compiled: false, device: 'cpu' });
    const compiled = await MlxSession.create(mlp, { device: 'cpu' });
    try {
      for (const n of [2, 5]) {
        for (let r = 0; r < 4; r++) {
          const x = f32(seeded(4 * n, 10 + r), [n, 4]);
          const want = values((await eager.run({ x })).y);
          const got = values((await compiled.run({ x })).y);
          got.forEach((g, i) => expect(Math.abs(g - want[i])).toBeLessThan(1e-6));
        }
      }
      expect(compiled.compileStats).toMatchObject({ misses: 2, hits: 6, size: 2 });
      // Shape math (Shape -> Gather -> Cast) is static per signature; the rest is one traced
      // segment, whose warm runs are one native call each.
      expect(compiled.describeSignatures()).toEqual([
        { segments: 1, steps: 0, traced: 1, staticValues: 3, oneCall: true },
        { segments: 1, steps: 0, traced: 1, staticValues: 3, oneCall: true },
      ]);
      expect(eager.compileStats.size).toBe(0);
    } finally {
      eager.release();
      compiled.release();
    }
  });

  it('keeps at most maxSignatures programs, dropping the least recently used', async () => {
    const s = await MlxSession.create(mlp, { device: 'cpu', maxSignatures: 2 });
    try {
      const run = (n: number) => s.runSync({ x: f32(seeded(4 * n), [n, 4]) });
      run(1);
      run(2);
      run(1);
      run(3); // 3 evicts 2 (1 was used after 2)
      expect(s.compileStats).toMatchObject({ misses: 3, hits: 1, evictions: 1, size: 2 });
      run(1);
      expect(s.compileStats).toMatchObject({ misses: 3, hits: 2 });
      run(2);
      expect(s.compileStats).toMatchObject({ misses: 4, evictions: 2 });
    } finally {
      s.release();
    }
  });

  it('a streak of signatures that never repeat stops being analysed; one that comes back is compiled', async () => {
    // transformers.js's loop feeds its cache from the host one row longer every run: each run is a
    // new signature. After MISS_STREAK misses in a row, a new signature runs eagerly without an
    // analysis, and is analysed only when it comes back.
    const eager = await MlxSession.create(mlp, { compiled: false, device: 'cpu' });
    const s = await MlxSession.create(mlp, { device: 'cpu' });
    try {
      const x = (n: number) => ({ x: f32(seeded(4 * n, n), [n, 4]) });
      const same = async (n: number) => {
        const want = values((await eager.run(x(n))).y);
        const got = values((await s.run(x(n))).y);
        got.forEach((g, i) => expect(Math.abs(g - want[i])).toBeLessThan(1e-6));
      };
      for (let n = 1; n <= 20; n++) await same(n);
      expect(s.compileStats).toMatchObject({ misses: MISS_STREAK, unanalysed: 20 - MISS_STREAK, hits: 0, size: MISS_STREAK });
      // Seen once unanalysed: its second run is analysed, its third traces, later ones replay.
      for (let r = 0; r < 4; r++) await same(15);
      expect(s.compileStats).toMatchObject({ misses: MISS_STREAK + 1, unanalysed: 20 - MISS_STREAK, hits: 3 });
      expect(s.describeSignatures().at(-1)).toMatchObject({ traced: 1, oneCall: true });
      // A few replays do not end the streak: a new signature still runs unanalysed first.
      await same(30);
      expect(s.compileStats).toMatchObject({ misses: MISS_STREAK + 1, unanalysed: 21 - MISS_STREAK });
      // Replays in a row, twice as many as maxSignatures (16), do: the workload repeats now.
      for (let r = 0; r < 32; r++) await s.run(x(15));
      await same(31);
      expect(s.compileStats).toMatchObject({ misses: MISS_STREAK + 2, unanalysed: 21 - MISS_STREAK });
    } finally {
      eager.release();
      s.release();
    }
    // Passes over the same lengths (generations of the same prompt) trace, then replay, the first
    // stretch's programs: that does not end the streak, and the later lengths stay unanalysed.
    const again = await MlxSession.create(mlp, { device: 'cpu' });
    try {
      const run = (n: number) => again.runSync({ x: f32(seeded(4 * n), [n, 4]) });
      // 40 lengths: more past the streak than maxSignatures (16), as a long generation has.
      for (let pass = 0; pass < 3; pass++) for (let n = 1; n <= 40; n++) run(n);
      expect(again.compileStats).toMatchObject({ misses: MISS_STREAK, hits: 2 * MISS_STREAK, unanalysed: 3 * (40 - MISS_STREAK) });
    } finally {
      again.release();
    }
    // A signature back after more new ones than maxSignatures (a loop over more lengths than the
    // LRU holds, e.g. a second generation of the same length) would be evicted before its next
    // run: it stays unanalysed.
    const small = await MlxSession.create(mlp, { device: 'cpu', maxSignatures: 4 });
    try {
      const run = (n: number) => small.runSync({ x: f32(seeded(4 * n), [n, 4]) });
      for (let n = 1; n <= 20; n++) run(n);
      // 9 to 20 ran unanalysed; again, each comes back after 11 others.
      for (let n = 9; n <= 20; n++) run(n);
      expect(small.compileStats).toMatchObject({ misses: MISS_STREAK, unanalysed: 2 * (20 - MISS_STREAK), hits: 0 });
    } finally {
      small.release();
    }
  });

  it('a Reshape to a fed shape is a step: one signature, new target values, right results', async () => {
    // y = Reshape(Relu(x), shape) * 2, where shape is an input.
    const m = model({
      opsets: { '': 17 },
      inputs: [v('x', 'float32', [6]), v('shape', 'int64', [2])],
      outputs: [v('y', 'float32')],
      initializers: [{ name: 'two', type: 'float32', dims: [], values: [2] }],
      nodes: [node('Relu', ['x'], ['r']), node('Reshape', ['r', 'shape'], ['rs']), node('Mul', ['rs', 'two'], ['y'])],
    });
    const s = await MlxSession.create(m, { device: 'cpu' });
    try {
      const x = f32([1, -2, 3, -4, 5, -6], [6]);
      for (const [shape, dims] of [
        [
          [2, 3],
          [2, 3],
        ],
        [
          [3, 2],
          [3, 2],
        ],
        [
          [1, 6],
          [1, 6],
        ],
        [
          [6, 1],
          [6, 1],
        ],
      ] as const) {
        const y = s.runSync({ x, shape: i64([...shape], [2]) }).y as HostTensor;
        expect(y.dims).toEqual(dims);
        expect(values(y)).toEqual([2, 0, 6, 0, 10, 0]);
      }
      expect(s.compileStats).toMatchObject({ misses: 1, hits: 3 });
      const [p] = s.describeSignatures();
      expect(p.steps).toBe(1);
      expect(p.segments).toBe(2);
    } finally {
      s.release();
    }
  });

  it('NonZero makes shapes depend on data: later segments see new shapes under one signature', async () => {
    // idx = NonZero(x > 0); y = Gather(x, idx[0]) * 3
    const m = model({
      opsets: { '': 17 },
      inputs: [v('x', 'float32', [5])],
      outputs: [v('y', 'float32')],
      initializers: [
        { name: 'zero', type: 'float32', dims: [], values: [0] },
        { name: 'three', type: 'float32', dims: [], values: [3] },
        { name: 'row', type: 'int64', dims: [], values: [0n] },
      ],
      nodes: [
        node('Greater', ['x', 'zero'], ['pos']),
        node('NonZero', ['pos'], ['nz']),
        node('Gather', ['nz', 'row'], ['idx']),
        node('Gather', ['x', 'idx'], ['g']),
        node('Mul', ['g', 'three'], ['y']),
      ],
    });
    const s = await MlxSession.create(m, { device: 'cpu' });
    try {
      for (const x of [
        [1, -1, 2, -2, 3],
        [-1, -1, -1, 4, -1],
        [5, 6, 7, 8, 9],
        [1, -1, 2, -2, 3],
      ]) {
        const want = x.filter((e) => e > 0).map((e) => e * 3);
        expect(values((await s.run({ x: f32(x, [5]) })).y)).toEqual(want);
      }
      expect(s.compileStats).toMatchObject({ misses: 1, hits: 3 });
    } finally {
      s.release();
    }
  });

  // y = (rate == 16000) ? x * 2 : x - 1, the rate a fed int64 scalar (Silero VAD's `sr` picks its
  // whole model's If branch this way).
  const rateIf = model({
    opsets: { '': 17 },
    inputs: [v('x', 'float32', [4]), v('rate', 'int64', [])],
    outputs: [v('y', 'float32', [4])],
    initializers: [{ name: 'r16k', type: 'int64', dims: [], values: [16000n] }],
    nodes: [
      node('Equal', ['rate', 'r16k'], ['c']),
      node('If', ['c'], ['y'], {
        attrs: {
          then_branch: {
            g: {
              name: 'then',
              inputs: [],
              outputs: [v('t', 'float32', [4])],
              initializers: [{ name: 'two', type: 'float32', dims: [], values: [2] }],
              nodes: [node('Mul', ['x', 'two'], ['t'])],
            },
          },
          else_branch: {
            g: {
              name: 'else',
              inputs: [],
              outputs: [v('e', 'float32', [4])],
              initializers: [{ name: 'one', type: 'float32', dims: [], values: [1] }],
              nodes: [node('Sub', ['x', 'one'], ['e'])],
            },
          },
        },
      }),
    ],
  });
  const ortRate = async (s: import('onnxruntime-node').InferenceSession, x: number[], rate: number) =>
    Array.from(
      (
        await s.run({
          x: new ort.Tensor('float32', Float32Array.from(x), [4]),
          rate: new ort.Tensor('int64', BigInt64Array.of(BigInt(rate)), []),
        })
      ).y.data as Float32Array,
    );

  it('an If on a fed integer scalar: one program per value, with no step, equal to onnxruntime', async () => {
    const s = await MlxSession.create(rateIf, { device: 'cpu' });
    const ref = await ort.InferenceSession.create(rateIf);
    try {
      for (const rate of [16000, 8000]) {
        for (let r = 0; r < 4; r++) {
          const x = seeded(4, 30 + r);
          const got = values((await s.run({ x: f32(x, [4]), rate: i64([rate], []) })).y);
          expect(got).toEqual(await ortRate(ref, x, rate));
        }
      }
      // Per value: the shape signature's first run finds the host read of `rate`, the value's
      // first run analyses with it fixed, the next traces; the If is then in the traced segment.
      expect(s.describeSignatures()).toEqual([
        { segments: 1, steps: 0, traced: 1, staticValues: 2, oneCall: true },
        { segments: 1, steps: 0, traced: 1, staticValues: 2, oneCall: true },
      ]);
      expect(s.compileStats).toMatchObject({ misses: 3, hits: 5, size: 2 });
    } finally {
      s.release();
      await ref.release();
    }
  });

  it('a fed scalar read on the host with many values goes back to being a step', async () => {
    const s = await MlxSession.create(rateIf, { device: 'cpu' });
    const ref = await ort.InferenceSession.create(rateIf);
    try {
      const rates = [16000, 1, 2, 3, 4, 5, 16000, 6, 1];
      for (const [k, rate] of rates.entries()) {
        const x = seeded(4, 50 + k);
        const got = values(s.runSync({ x: f32(x, [4]), rate: i64([rate], []) }).y);
        expect(got).toEqual(await ortRate(ref, x, rate));
      }
      // Four values specialized; the fifth makes `rate` data again: one program, its If a step.
      expect(s.describeSignatures()).toEqual([{ segments: 1, steps: 1, traced: 1, staticValues: 0, oneCall: false }]);
    } finally {
      s.release();
      await ref.release();
    }
  });

  it('random nodes draw new values on every run, traced or not', async () => {
    const m = model({
      opsets: { '': 17 },
      inputs: [v('x', 'float32', [64])],
      outputs: [v('y', 'float32')],
      nodes: [node('RandomUniformLike', ['x'], ['u']), node('Add', ['u', 'x'], ['y'])],
    });
    const s = await MlxSession.create(m, { device: 'cpu' });
    try {
      const x = f32(new Array(64).fill(0), [64]);
      const draws = [0, 1, 2, 3].map(() => values(s.runSync({ x }).y).join(','));
      expect(new Set(draws).size).toBe(4);
    } finally {
      s.release();
    }
  });
});

// ZipMap, DictVectorizer and CastMap through MlxSession, the API that returns maps and takes them as
// feeds. onnxruntime-node returns no map or sequence from JavaScript ("Non tensor type is
// temporarily not supported"), so each op's expected values are its spec computed here, and a
// pipeline whose maps sit inside the graph (map -> DictVectorizer -> LinearClassifier -> ZipMap) is
// compared with onnxruntime-node running its tensor part; C's "%f" of CastMap comes from Python's
// printf-style formatting.
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import * as P from '../../../test/helpers/proto.js';
import { ort } from '../../../test/helpers/ort.js';
import { InvalidFeedError, NodeExecutionError, OnnxLoadError } from '../../errors.js';
import { OnnxDataType as T, type HostTensor } from '../../onnx/index.js';
import type { MapValue, Value } from '../../runtime/value.js';
import { MlxSession } from '../../session.js';
import { formatFixed6 } from './maps.js';

const ML = 'ai.onnx.ml';
const opsets: P.Opsets = [
  ['', 17],
  [ML, 1],
];

const mapOf = (keyType: number, keys: (bigint | string)[], valueType: number, values: unknown[]): MapValue => ({
  kind: 'map',
  keys: { dtype: keyType, dims: [keys.length], data: (keyType === T.STRING ? keys : BigInt64Array.from(keys as bigint[])) as never },
  values: {
    dtype: valueType,
    dims: [values.length],
    data: (valueType === T.STRING
      ? values
      : valueType === T.INT64
        ? BigInt64Array.from(values as bigint[])
        : valueType === T.DOUBLE
          ? Float64Array.from(values as number[])
          : Float32Array.from(values as number[])) as never,
  },
});

/** A map's entries as [key, value] pairs in its order (numbers for float values). */
const pairs = (v: Value | HostTensor): [unknown, unknown][] => {
  if (!('kind' in v) || v.kind !== 'map') throw new Error(`not a map: ${JSON.stringify(v)}`);
  return Array.from(v.keys.data as ArrayLike<unknown>, (k, i) => [k, (v.values.data as ArrayLike<unknown>)[i]]);
};

const mapType = (key: number, value: number) => P.mapType(key, P.tensorType(value));
type TypeProto = ReturnType<typeof P.tensorType>;
const oneNode = (op: string, input: TypeProto, out: TypeProto, attrs: ReturnType<typeof P.attr.int>[]) =>
  P.modelBytes(
    {
      inputs: [P.valueInfo('x', input)],
      outputs: [P.valueInfo('y', out)],
      nodes: [P.node(op, ['x'], ['y'], attrs, { domain: ML })],
    },
    { opsets },
  );

async function runBoth(bytes: Uint8Array, feeds: Record<string, HostTensor | Value>): Promise<Record<string, HostTensor | Value>> {
  // Eager once, then compiled (analysed, traced, replayed): both must give the same outputs.
  const eager = MlxSession.createSync(bytes, { compiled: false });
  const compiled = await MlxSession.create(bytes, { compiled: true });
  try {
    const want = eager.runSync(feeds);
    for (let r = 0; r < 3; r++) expect(await compiled.run(feeds)).toEqual(want);
    return want;
  } finally {
    eager.release();
    compiled.release();
  }
}

describe('ZipMap', () => {
  const x = Float32Array.from([0.25, -1.5, 3, 7, 0.125, -0.5]);

  it('string labels: one map per row, keys in ascending order (onnxruntime std::map), a repeated label keeps its last value', async () => {
    const labels = ['cat', 'ant', 'cat'];
    const bytes = oneNode('ZipMap', P.tensorType(T.FLOAT, [2, 3]), P.sequenceType(mapType(T.STRING, T.FLOAT)), [
      P.attr.strings('classlabels_strings', labels),
    ]);
    const out = (await runBoth(bytes, { x: { dtype: T.FLOAT, dims: [2, 3], data: x } })).y as Value;
    expect(out.kind).toBe('sequence');
    const items = (out as Extract<Value, { kind: 'sequence' }>).items;
    // The spec computed here: row r maps labels[j] to x[r, j], later j overwriting earlier.
    const want = [0, 1].map((r) => {
      const m = new Map<string, number>();
      labels.forEach((l, j) => m.set(l, x[r * 3 + j]));
      return [...m.entries()].sort(([a], [b]) => (a < b ? -1 : 1));
    });
    expect(items.map(pairs)).toEqual(want);
  });

  it('int64 labels on a 1-D input: one map', async () => {
    const labels = [10, -2, 7];
    const bytes = oneNode('ZipMap', P.tensorType(T.FLOAT, [3]), P.sequenceType(mapType(T.INT64, T.FLOAT)), [
      P.attr.ints('classlabels_int64s', labels),
    ]);
    const out = (await runBoth(bytes, { x: { dtype: T.FLOAT, dims: [3], data: x.slice(0, 3) } })).y as Extract<Value, { kind: 'sequence' }>;
    const want = labels.map((l, j) => [BigInt(l), x[j]] as [bigint, number]).sort(([a], [b]) => (a < b ? -1 : 1));
    expect(out.items.map(pairs)).toEqual([want]);
  });

  it('bad attributes and widths fail clearly', async () => {
    const both = oneNode('ZipMap', P.tensorType(T.FLOAT, [1, 2]), P.sequenceType(mapType(T.INT64, T.FLOAT)), [
      P.attr.ints('classlabels_int64s', [1, 2]),
      P.attr.strings('classlabels_strings', ['a', 'b']),
    ]);
    expect(() => MlxSession.createSync(both, {})).toThrow(/exactly one of classlabels_strings and classlabels_int64s/);
    const wrong = oneNode('ZipMap', P.tensorType(T.FLOAT, [1, 3]), P.sequenceType(mapType(T.INT64, T.FLOAT)), [
      P.attr.ints('classlabels_int64s', [1, 2]),
    ]);
    const s = MlxSession.createSync(wrong, {});
    try {
      expect(() => s.runSync({ x: { dtype: T.FLOAT, dims: [1, 3], data: new Float32Array(3) } })).toThrow(
        /X has 3 values per row, the class labels number 2/,
      );
    } finally {
      s.release();
    }
  });

  it('through onnxruntime-common the sequence of maps cannot be returned: a clear error', async () => {
    const bytes = oneNode('ZipMap', P.tensorType(T.FLOAT, [1, 2]), P.sequenceType(mapType(T.INT64, T.FLOAT)), [
      P.attr.ints('classlabels_int64s', [1, 2]),
    ]);
    const s = await ort.InferenceSession.create(bytes, { executionProviders: ['mlx'] });
    try {
      await expect(s.run({ x: new ort.Tensor('float32', new Float32Array(2), [1, 2]) })).rejects.toThrow(
        /onnxruntime-common cannot return/,
      );
    } finally {
      await s.release();
    }
  });
});

describe('DictVectorizer', () => {
  it('string keys: the vocabulary order, missing keys zero, [1, V] (onnxruntime)', async () => {
    const vocab = ['b', 'zz', 'a', 'q'];
    const bytes = oneNode('DictVectorizer', mapType(T.STRING, T.DOUBLE), P.tensorType(T.DOUBLE), [
      P.attr.strings('string_vocabulary', vocab),
    ]);
    const feed = mapOf(T.STRING, ['a', 'b', 'c'], T.DOUBLE, [1.5, -2, 9]);
    const y = (await runBoth(bytes, { x: feed })).y as HostTensor;
    const m = new Map(pairs(feed));
    expect(y.dims).toEqual([1, vocab.length]);
    expect(Array.from(y.data as Float64Array)).toEqual(vocab.map((w) => (m.get(w) as number | undefined) ?? 0));
  });

  it('string keys with int64 values; int64 keys with string values', async () => {
    const ints = oneNode('DictVectorizer', mapType(T.STRING, T.INT64), P.tensorType(T.INT64), [
      P.attr.strings('string_vocabulary', ['c', 'a', 'b']),
    ]);
    const y = (await runBoth(ints, { x: mapOf(T.STRING, ['b', 'c', 'd'], T.INT64, [30n, 50n, 80n]) })).y as HostTensor;
    expect(Array.from(y.data as BigInt64Array)).toEqual([50n, 0n, 30n]);
    const vocab = [5, 1, 3];
    const strs = oneNode('DictVectorizer', mapType(T.INT64, T.STRING), P.tensorType(T.STRING), [P.attr.ints('int64_vocabulary', vocab)]);
    const z = (await runBoth(strs, { x: mapOf(T.INT64, [1n], T.STRING, ['one']) })).y as HostTensor;
    expect(z).toMatchObject({ dims: [1, 3], data: ['', 'one', ''] });
  });

  it('feeds are checked: a tensor or the wrong key type for a map input is an InvalidFeedError', () => {
    const bytes = oneNode('DictVectorizer', mapType(T.STRING, T.FLOAT), P.tensorType(T.FLOAT), [
      P.attr.strings('string_vocabulary', ['a']),
    ]);
    const s = MlxSession.createSync(bytes, {});
    try {
      expect(() => s.runSync({ x: { dtype: T.FLOAT, dims: [1], data: new Float32Array(1) } })).toThrow(InvalidFeedError);
      expect(() => s.runSync({ x: mapOf(T.INT64, [1n], T.FLOAT, [1]) })).toThrow(/expects string keys, got int64/);
      const ragged = mapOf(T.STRING, ['a', 'b'], T.FLOAT, [1]);
      expect(() => s.runSync({ x: ragged })).toThrow(/1-D keys and values of one length/);
    } finally {
      s.release();
    }
  });

  it('a tensor where the node needs a map is refused at create(), by the schema check', () => {
    const bytes = oneNode('DictVectorizer', P.tensorType(T.FLOAT, [2]), P.tensorType(T.FLOAT), [
      P.attr.strings('string_vocabulary', ['a']),
    ]);
    expect(() => MlxSession.createSync(bytes, { fallback: 'none' })).toThrow(OnnxLoadError);
    expect(() => MlxSession.createSync(bytes, { fallback: 'none' })).toThrow(
      /has type tensor\(float\), which DictVectorizer-1 does not take/,
    );
  });
});

describe('CastMap', () => {
  const cast = (valueType: number, to: string, out: number, form = 'DENSE', maxMap?: number) =>
    oneNode('CastMap', mapType(T.INT64, valueType), P.tensorType(out), [
      P.attr.string('cast_to', to),
      P.attr.string('map_form', form),
      ...(maxMap !== undefined ? [P.attr.int('max_map', maxMap)] : []),
    ]);
  const floats = mapOf(T.INT64, [7n, 2n, 4n], T.FLOAT, [2.75, -1.5, 1e-7]);

  it('DENSE: values in ascending key order, to float and to int64 (truncation)', async () => {
    const f = (await runBoth(cast(T.FLOAT, 'TO_FLOAT', T.FLOAT), { x: floats })).y as HostTensor;
    expect(f.dims).toEqual([1, 3]);
    expect(Array.from(f.data as Float32Array)).toEqual([-1.5, Math.fround(1e-7), 2.75]);
    const i = (await runBoth(cast(T.FLOAT, 'TO_INT64', T.INT64), { x: floats })).y as HostTensor;
    expect(Array.from(i.data as BigInt64Array)).toEqual([-1n, 0n, 2n]);
  });

  it('SPARSE: positions 0..max_map-1, absent keys padded (0, and "0.f" for strings as onnxruntime)', async () => {
    const f = (await runBoth(cast(T.FLOAT, 'TO_FLOAT', T.FLOAT, 'SPARSE', 6), { x: floats })).y as HostTensor;
    expect(Array.from(f.data as Float32Array)).toEqual([0, 0, -1.5, 0, Math.fround(1e-7), 0]);
    const strs = mapOf(T.INT64, [1n, 3n], T.STRING, ['x', 'y']);
    const s = (await runBoth(cast(T.STRING, 'TO_STRING', T.STRING, 'SPARSE', 4), { x: strs })).y as HostTensor;
    expect(s).toMatchObject({ dims: [1, 4], data: ['0.f', 'x', '0.f', 'y'] });
  });

  it('strings to numbers read the leading number (std::stof, std::stoll); no number is an error', async () => {
    const strs = mapOf(T.INT64, [0n, 1n, 2n], T.STRING, [' 12.5abc', '-3', '1e3']);
    const f = (await runBoth(cast(T.STRING, 'TO_FLOAT', T.FLOAT), { x: strs })).y as HostTensor;
    expect(Array.from(f.data as Float32Array)).toEqual([12.5, -3, 1000]);
    const i = (await runBoth(cast(T.STRING, 'TO_INT64', T.INT64), { x: strs })).y as HostTensor;
    expect(Array.from(i.data as BigInt64Array)).toEqual([12n, -3n, 1n]);
    const s = MlxSession.createSync(cast(T.STRING, 'TO_FLOAT', T.FLOAT), {});
    try {
      expect(() => s.runSync({ x: mapOf(T.INT64, [0n], T.STRING, ['abc']) })).toThrow(NodeExecutionError);
    } finally {
      s.release();
    }
  });

  it("floats to strings are C's %f (std::to_string), checked against Python's printf formatting", async () => {
    const vals = [2.75, -1.5, 1e-7, 0.0078125, -0, 3.4e38, 123456.789, 0.1, 2.5e-6, -7.0000005];
    const f32 = vals.map(Math.fround);
    const python = execFileSync(
      'python3',
      [
        '-c',
        `import sys\nfor a in sys.argv[1:]: print('%f' % float(a))`,
        ...f32.map((x) => (Object.is(x, -0) ? '-0.0' : x.toPrecision(17))),
      ],
      {
        encoding: 'utf8',
      },
    )
      .trim()
      .split('\n');
    expect(f32.map(formatFixed6)).toEqual(python);
    const m = mapOf(
      T.INT64,
      f32.map((_, i) => BigInt(i)),
      T.FLOAT,
      f32,
    );
    const y = (await runBoth(cast(T.FLOAT, 'TO_STRING', T.STRING), { x: m })).y as HostTensor;
    expect(y.data).toEqual(python);
  });
});

describe('maps inside a graph', () => {
  // map(string, float) -> DictVectorizer -> LinearClassifier -> label, probabilities -> ZipMap.
  const vocab = ['height', 'weight', 'age'];
  const coefficients = [0.5, -1, 0.25, -0.75, 0.125, 1, 0.3, 0.2, -0.6];
  const intercepts = [0.1, -0.2, 0.05];
  const classes = [3, 1, 2];
  const classifier = () =>
    P.node(
      'LinearClassifier',
      ['features'],
      ['label', 'probabilities'],
      [
        P.attr.floats('coefficients', coefficients),
        P.attr.floats('intercepts', intercepts),
        P.attr.ints('classlabels_ints', classes),
        P.attr.string('post_transform', 'SOFTMAX'),
      ],
      { domain: ML },
    );
  const pipeline = P.modelBytes(
    {
      inputs: [P.valueInfo('x', mapType(T.STRING, T.FLOAT))],
      outputs: [
        P.valueInfo('label', P.tensorType(T.INT64)),
        P.valueInfo('probabilities', P.tensorType(T.FLOAT)),
        P.valueInfo('zipped', P.sequenceType(mapType(T.INT64, T.FLOAT))),
      ],
      nodes: [
        P.node('DictVectorizer', ['x'], ['features'], [P.attr.strings('string_vocabulary', vocab)], { domain: ML }),
        classifier(),
        P.node('ZipMap', ['probabilities'], ['zipped'], [P.attr.ints('classlabels_int64s', classes)], { domain: ML }),
      ],
    },
    { opsets },
  );
  // The tensor part alone, for onnxruntime-node.
  const tensorPart = P.modelBytes(
    {
      inputs: [P.valueInfo('features', P.tensorType(T.FLOAT, [1, 3]))],
      outputs: [P.valueInfo('label', P.tensorType(T.INT64)), P.valueInfo('probabilities', P.tensorType(T.FLOAT))],
      nodes: [classifier()],
    },
    { opsets },
  );

  it('matches onnxruntime-node on the vectorized features', async () => {
    const feed = mapOf(T.STRING, ['age', 'height', 'shoe'], T.FLOAT, [0.5, 1.75, 42]);
    const out = await runBoth(pipeline, { x: feed });
    // The features by the spec: the vocabulary's order, missing keys zero.
    const m = new Map(pairs(feed));
    const features = Float32Array.from(vocab, (w) => (m.get(w) as number | undefined) ?? 0);
    const s = await ort.InferenceSession.create(tensorPart);
    const want = await s.run({ features: new ort.Tensor('float32', features, [1, 3]) });
    await s.release();
    expect(Array.from((out.label as HostTensor).data as BigInt64Array)).toEqual(Array.from(want.label.data as BigInt64Array));
    const probs = Array.from(want.probabilities.data as Float32Array);
    const have = Array.from((out.probabilities as HostTensor).data as Float32Array);
    have.forEach((p, i) => expect(p).toBeCloseTo(probs[i], 6));
    const zipped = (out.zipped as Extract<Value, { kind: 'sequence' }>).items.map(pairs);
    const wantZipped = classes.map((c, j) => [BigInt(c), probs[j]] as [bigint, number]).sort(([a], [b]) => (a < b ? -1 : 1));
    expect(zipped.length).toBe(1);
    zipped[0].forEach(([k, p], i) => {
      expect(k).toBe(wantZipped[i][0]);
      expect(p as number).toBeCloseTo(wantZipped[i][1], 6);
    });
  });

  it('the tensor outputs can be fetched alone', async () => {
    const s = MlxSession.createSync(pipeline, {});
    try {
      const out = s.runSync({ x: mapOf(T.STRING, ['weight'], T.FLOAT, [2]) }, ['label']);
      expect(Object.keys(out)).toEqual(['label']);
    } finally {
      s.release();
    }
  });
});

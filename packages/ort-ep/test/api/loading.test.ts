// Loading: every initializer encoding decodes to the right values (and survives a run through
// MLX), graph inputs with an initializer are overridable defaults, and external data is read
// next to the model file or from the `externalData` option, confined to the model's folder.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MlxSession, OnnxLoadError, type HostTensor } from '../../src/index.js';
import { decodeModel } from '../../src/internal.js';
import { encodeRaw, model, node, v, type ElemName, type TensorSpec } from '../helpers/build.js';
import { f32, ort, plain, runOn } from '../helpers/ort.js';

const B = (x: number | bigint) => BigInt(x);

/** Element type, the values written, and what the canonical host layout holds for them. */
const cases: { type: ElemName; values: (number | bigint)[]; want: (number | bigint)[] }[] = [
  { type: 'float32', values: [1.5, -2.25, 0, 1e-3], want: [1.5, -2.25, 0, Math.fround(1e-3)] },
  // float16 and bfloat16 are held as their bit patterns.
  { type: 'float16', values: [1, -2, 0.5, 65504, 1e-7], want: [0x3c00, 0xc000, 0x3800, 0x7bff, 0x0002] },
  { type: 'bfloat16', values: [1, -2, 0.5, 256, 1.00390625], want: [0x3f80, 0xc000, 0x3f00, 0x4380, 0x3f80] },
  { type: 'float64', values: [Math.PI, -1e300, 0, 2 ** -1074], want: [Math.PI, -1e300, 0, 2 ** -1074] },
  { type: 'int8', values: [-128, 127, 0, -1], want: [-128, 127, 0, -1] },
  { type: 'int16', values: [-32768, 32767, 0, -1], want: [-32768, 32767, 0, -1] },
  { type: 'int32', values: [-(2 ** 31), 2 ** 31 - 1, 0, -1], want: [-(2 ** 31), 2 ** 31 - 1, 0, -1] },
  { type: 'int64', values: [-(2n ** 63n), 2n ** 63n - 1n, 0n, -1n], want: [-(2n ** 63n), 2n ** 63n - 1n, 0n, -1n] },
  { type: 'uint8', values: [0, 255, 1, 128], want: [0, 255, 1, 128] },
  { type: 'uint16', values: [0, 65535, 1, 32768], want: [0, 65535, 1, 32768] },
  { type: 'uint32', values: [0, 2 ** 32 - 1, 1, 2 ** 31], want: [0, 2 ** 32 - 1, 1, 2 ** 31] },
  { type: 'uint64', values: [0n, 2n ** 64n - 1n, 1n, 2n ** 63n], want: [0n, 2n ** 64n - 1n, 1n, 2n ** 63n] },
  { type: 'bool', values: [1, 0, 1, 1], want: [1, 0, 1, 1] },
  // Odd counts: the last byte is half padding.
  { type: 'int4', values: [-8, 7, 0, -1, 3], want: [-8, 7, 0, -1, 3] },
  { type: 'uint4', values: [0, 15, 1, 8, 9], want: [0, 15, 1, 8, 9] },
];

const bigTypes = new Set<ElemName>(['int64', 'uint64']);
const asList = (t: HostTensor) => Array.from(t.data as ArrayLike<number | bigint>);
// Opset 21: the first whose Identity takes int4 and uint4.
const constModel = (w: TensorSpec) =>
  model({
    opsets: { '': 21 },
    irVersion: 10,
    inputs: [],
    outputs: [v('y', w.type, w.dims)],
    initializers: [w],
    nodes: [node('Identity', ['w'], ['y'])],
  });

describe('initializers: every encoding', () => {
  for (const c of cases) {
    for (const form of ['raw', 'typed'] as const) {
      it(`${c.type} from ${form === 'raw' ? 'raw_data' : 'its typed field'}`, () => {
        const w: TensorSpec = { name: 'w', type: c.type, dims: [c.values.length], values: c.values, form };
        const bytes = constModel(w);
        const t = decodeModel(bytes).graph.initializers.get('w')!;
        expect(t.dims).toEqual([c.values.length]);
        expect(asList(t)).toEqual(bigTypes.has(c.type) ? c.want.map(B) : c.want);
        // Through MLX and back (the session API of the package, which holds every element type).
        const s = MlxSession.createSync(bytes, { device: 'cpu' });
        try {
          const y = s.runSync({}).y as HostTensor;
          expect(y.dtype).toBe(t.dtype);
          expect(asList(y)).toEqual(asList(t));
        } finally {
          s.release();
        }
      });
    }
  }

  // The element types onnxruntime-common's Tensor can hold reach the caller exactly as the
  // reference provider returns them (float16 as bits); int4/uint4, for which onnxruntime-node's
  // CPU provider has no Identity, come packed two per byte in a Uint8Array as Tensor holds them.
  it('every Tensor-holdable type comes out through onnxruntime-common as from onnxruntime-node', async () => {
    const identity = (c: (typeof cases)[number]) =>
      model({
        opsets: { '': 21 },
        inputs: [],
        outputs: [v('y', c.type, [c.values.length])],
        initializers: [{ name: 'w', type: c.type, dims: [c.values.length], values: c.values }],
        nodes: [node('Identity', ['w'], ['y'])],
      });
    const seen = (t: import('onnxruntime-node').Tensor) => ({
      type: t.type,
      dims: t.dims,
      data: Array.from(t.data as ArrayLike<number | bigint>),
    });
    for (const c of cases.filter((k) => !['bfloat16', 'int4', 'uint4'].includes(k.type))) {
      const bytes = identity(c);
      const [want, have] = [await runOn('cpu', bytes, {}), await runOn('mlx', bytes, {})];
      expect({ t: c.type, ...seen(have.y) }).toEqual({ t: c.type, ...seen(want.y) });
    }
    const int4 = await runOn('mlx', identity(cases.find((k) => k.type === 'int4')!), {});
    expect(seen(int4.y)).toEqual({ type: 'int4', dims: [5], data: [0x78, 0xf0, 0x03] }); // -8, 7 | 0, -1 | 3
    expect(int4.y.data).toBeInstanceOf(Uint8Array);
    const uint4 = await runOn('mlx', identity(cases.find((k) => k.type === 'uint4')!), {});
    expect(seen(uint4.y)).toEqual({ type: 'uint4', dims: [5], data: [0xf0, 0x81, 0x09] });
  });

  it('bool raw_data bytes other than 0/1 read as true', () => {
    const t = decodeModel(constModel({ name: 'w', type: 'bool', dims: [4], raw: Uint8Array.of(2, 0, 1, 255) })).graph.initializers.get(
      'w',
    )!;
    expect([...(t.data as Uint8Array)]).toEqual([1, 0, 1, 1]);
  });

  it('a 2-D float32 initializer keeps its dims and row-major order', () => {
    const t = decodeModel(
      constModel({ name: 'w', type: 'float32', dims: [2, 3], values: [1, 2, 3, 4, 5, 6], form: 'typed' }),
    ).graph.initializers.get('w')!;
    expect(t.dims).toEqual([2, 3]);
    expect([...(t.data as Float32Array)]).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it('data that does not match the dims is an error naming the tensor and both sizes', () => {
    const bytes = constModel({ name: 'w', type: 'float32', dims: [3], values: [1, 2] });
    expect(() => decodeModel(bytes)).toThrow(OnnxLoadError);
    expect(() => decodeModel(bytes)).toThrow(/initializer 'w'.*8 bytes.*float32 \[3\] needs 12/);
    const typed = constModel({ name: 'w', type: 'int64', dims: [3], values: [1, 2], form: 'typed' });
    expect(() => decodeModel(typed)).toThrow(/initializer 'w'.*2 entries in int64_data, 3 expected/);
  });
});

describe('graph inputs with an initializer are overridable defaults', () => {
  // y = x + bias; z = bias * 2 (z depends on the default alone, so it must not be folded away).
  const bytes = model({
    opsets: { '': 13 },
    inputs: [v('x', 'float32', [3]), v('bias', 'float32', [3])],
    outputs: [v('y', 'float32', [3]), v('z', 'float32', [3])],
    initializers: [
      { name: 'bias', type: 'float32', dims: [3], values: [1, 2, 3] },
      { name: 'two', type: 'float32', dims: [], values: [2] },
    ],
    nodes: [node('Add', ['x', 'bias'], ['y']), node('Mul', ['bias', 'two'], ['z'])],
  });

  it('are not in inputNames, and their initializer is used when not fed', async () => {
    const s = await ort.InferenceSession.create(bytes, { executionProviders: ['mlx'] });
    try {
      expect(s.inputNames).toEqual(['x']);
      const out = await s.run({ x: f32([10, 20, 30], [3]) });
      expect(plain(out.y)).toEqual([11, 22, 33]);
      expect(plain(out.z)).toEqual([2, 4, 6]);
      // Fed: the feed replaces the default, for every consumer.
      const over = await s.run({ x: f32([10, 20, 30], [3]), bias: f32([-1, -2, -3], [3]) });
      expect(plain(over.y)).toEqual([9, 18, 27]);
      expect(plain(over.z)).toEqual([-2, -4, -6]);
      // And the default is back on the next run.
      expect(plain((await s.run({ x: f32([0, 0, 0], [3]) })).z)).toEqual([2, 4, 6]);
      // A feed for a default is checked like any other.
      await expect(s.run({ x: f32([0, 0, 0], [3]), bias: f32([1, 2], [2]) })).rejects.toThrow(
        /input 'bias' expects dimension 0 to be 3, got 2/,
      );
    } finally {
      await s.release();
    }
  });
});

describe('external data', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ort-ep-ext-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  // a at [0, 16) of weights.bin, b at [16, 28); c in data/c.bin (whole file).
  const aVals = [1, 2, 3, 4];
  const bVals = [10, 20, 30];
  const weights = new Uint8Array([...encodeRaw('float32', aVals), ...encodeRaw('float32', bVals)]);
  const cBytes = encodeRaw('int64', [7n, -8n]);
  const extModel = (locA = 'weights.bin', locC = 'data/c.bin') =>
    model({
      inputs: [],
      outputs: [v('a', 'float32', [4]), v('b', 'float32', [3]), v('c', 'int64', [2])],
      initializers: [
        { name: 'wa', type: 'float32', dims: [4], external: { location: locA, offset: 0, length: 16 } },
        { name: 'wb', type: 'float32', dims: [3], external: { location: 'weights.bin', offset: 16, length: 12 } },
        { name: 'wc', type: 'int64', dims: [2], external: { location: locC } },
      ],
      nodes: [node('Identity', ['wa'], ['a']), node('Identity', ['wb'], ['b']), node('Identity', ['wc'], ['c'])],
    });
  const write = (sub: string, name: string, bytes: Uint8Array) => {
    mkdirSync(join(dir, sub), { recursive: true });
    const p = join(dir, sub, name);
    writeFileSync(p, bytes);
    return p;
  };
  const folder = (sub: string) => {
    write(sub, 'weights.bin', weights);
    write(join(sub, 'data'), 'c.bin', cBytes);
    return write(sub, 'model.onnx', extModel());
  };

  /** The session reads every external tensor right (and is released either way). */
  const expectWeights = async (s: Awaited<ReturnType<typeof ort.InferenceSession.create>>) => {
    try {
      const out = await s.run({});
      expect(plain(out.a)).toEqual(aVals);
      expect(plain(out.b)).toEqual(bVals);
      expect(plain(out.c)).toEqual([7, -8]);
    } finally {
      await s.release();
    }
  };

  it('is read next to the model file when the session is created from a path', async () => {
    const path = folder('ok');
    const s = await ort.InferenceSession.create(path, { executionProviders: ['mlx'] });
    await expectWeights(s);
  });

  it('comes from the externalData option when the model is given as bytes', async () => {
    const s = await ort.InferenceSession.create(extModel(), {
      executionProviders: ['mlx'],
      externalData: [
        { path: 'weights.bin', data: weights },
        { path: 'data/c.bin', data: cBytes },
      ],
    });
    await expectWeights(s);
  });

  it('an externalData entry may give a path to read the file from instead of its bytes', async () => {
    const wpath = write('given', 'weights.bin', weights);
    const cpath = write('given', 'c-elsewhere.bin', cBytes);
    const s = await MlxSession.create(extModel(), {
      externalData: [
        { path: 'weights.bin', data: wpath },
        { path: 'data/c.bin', data: cpath },
      ],
    });
    try {
      const out = s.runSync({});
      expect(asList(out.b as HostTensor)).toEqual(bVals);
      expect(asList(out.c as HostTensor)).toEqual([7n, -8n]);
    } finally {
      s.release();
    }
  });

  it('from bytes without externalData is an error naming the file and the option', async () => {
    await expect(MlxSession.create(extModel())).rejects.toThrow(/external data file 'weights.bin' was not given.*externalData/);
  });

  it('refuses absolute locations', async () => {
    write('abs', 'weights.bin', weights);
    const path = write('abs', 'model.onnx', extModel(join(dir, 'abs', 'weights.bin')));
    const err = await MlxSession.create(path).catch((e) => e);
    expect(err).toBeInstanceOf(OnnxLoadError);
    expect(err.message).toMatch(/(initializer|tensor) 'wa'.*location '\/.*weights.bin' is refused: it is an absolute path/);
  });

  it('refuses ../ escapes from the model folder, even when the file exists there', async () => {
    write('', 'weights.bin', weights); // dir/weights.bin: reachable as ../weights.bin from dir/esc
    const path = write('esc', 'model.onnx', extModel('../weights.bin'));
    await expect(MlxSession.create(path)).rejects.toThrow(/location '\.\.\/weights.bin' is refused: it leads out of the model's folder/);
    const path2 = write('esc2', 'model.onnx', extModel('data/../../weights.bin'));
    await expect(MlxSession.create(path2)).rejects.toThrow(/'data\/\.\.\/\.\.\/weights.bin' is refused/);
    // Through onnxruntime-common too: the same error reaches the caller.
    await expect(ort.InferenceSession.create(path, { executionProviders: ['mlx'] })).rejects.toThrow(/is refused/);
  });

  it('refuses a symbolic link that leads out of the model folder', async () => {
    write('', 'outside.bin', weights);
    write(join('link', 'data'), 'c.bin', cBytes);
    symlinkSync(join(dir, 'outside.bin'), join(dir, 'link', 'weights.bin'));
    const path = write('link', 'model.onnx', extModel());
    await expect(MlxSession.create(path)).rejects.toThrow(
      /location 'weights.bin' is refused: it resolves \(through a symbolic link\) to .*outside.bin, outside the model's folder/,
    );
  });

  it('names a missing external file', async () => {
    write('missing', 'weights.bin', weights);
    const path = write('missing', 'model.onnx', extModel('weights.bin', 'data/nope.bin'));
    const err = await MlxSession.create(path).catch((e) => e);
    expect(err).toBeInstanceOf(OnnxLoadError);
    expect(err.message).toMatch(/model.onnx: (initializer|tensor) 'wc': external data file 'data\/nope.bin' not found/);
  });

  it('a range outside the file is an error (truncated external data)', async () => {
    write('short', 'weights.bin', weights.subarray(0, 20));
    write(join('short', 'data'), 'c.bin', cBytes);
    const path = write('short', 'model.onnx', extModel());
    await expect(MlxSession.create(path)).rejects.toThrow(
      /(initializer|tensor) 'wb': external data range \[16, 28\) lies outside 'weights.bin' \(20 bytes\)/,
    );
  });
});

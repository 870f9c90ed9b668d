// Bad input gives a clear error, never a crash, and the process keeps working afterwards:
// malformed and truncated files, unknown element types, dangling edges, unsupported ops, and
// feeds that do not match the model's inputs.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  InvalidFeedError,
  MlxSession,
  NodeExecutionError,
  OnnxLoadError,
  OrtMlxError,
  UnsupportedOperatorError,
  type HostTensor,
} from '../../src/index.js';
import { defaultRegistry } from '../../src/internal.js';
import { checkModel } from '../../src/check.js';
import { model, node, v } from '../helpers/build.js';
import { f32, i64, ort, plain } from '../helpers/ort.js';

const dir = mkdtempSync(join(tmpdir(), 'ort-ep-err-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// y = x * 2 + w, x: [2, N]
const good = model({
  opsets: { '': 13 },
  inputs: [v('x', 'float32', [2, 'N'])],
  outputs: [v('y', 'float32', [2, 'N'])],
  initializers: [{ name: 'two', type: 'float32', dims: [], values: [2] }],
  nodes: [node('Mul', ['x', 'two'], ['y'], { name: 'mul' })],
});

/** A working model still loads and computes: the error left nothing behind. */
async function stillWorks(): Promise<void> {
  const s = await ort.InferenceSession.create(good, { executionProviders: ['mlx'] });
  const out = await s.run({ x: f32([1, 2, 3, 4], [2, 2]) });
  expect(plain(out.y)).toEqual([2, 4, 6, 8]);
  await s.release();
}

const createErr = (bytes: Uint8Array | string) =>
  MlxSession.create(bytes).then(
    () => undefined,
    (e: unknown) => e as Error,
  );

describe('files that are not (whole) models', () => {
  it('empty bytes', async () => {
    const e = await createErr(new Uint8Array(0));
    expect(e).toBeInstanceOf(OnnxLoadError);
    // One hierarchy: load errors share the base class of every other error of the package.
    expect(e).toBeInstanceOf(OrtMlxError);
    expect(e!.name).toBe('OnnxLoadError');
    expect(e!.message).toMatch(/not an ONNX model: the file is empty/);
    await stillWorks();
  });

  it('bytes that are not protobuf, and a text file', async () => {
    const garbage = Uint8Array.from({ length: 64 }, (_, i) => (i * 97 + 0xf7) & 0xff);
    const e = await createErr(garbage);
    expect(e).toBeInstanceOf(OnnxLoadError);
    expect(e!.message).toMatch(/not an ONNX model|malformed|truncated/);
    const text = join(dir, 'notes.onnx');
    writeFileSync(text, 'this is not a model, just some text\n');
    const t = await createErr(text);
    expect(t).toBeInstanceOf(OnnxLoadError);
    expect(t!.message).toMatch(/^notes.onnx: /);
    // Through onnxruntime-common: the same error reaches the caller.
    await expect(ort.InferenceSession.create(garbage, { executionProviders: ['mlx'] })).rejects.toThrow(OnnxLoadError);
    await stillWorks();
  });

  it('a truncated file names the file and says it was cut short', async () => {
    const big = model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [64])],
      outputs: [v('y', 'float32', [64])],
      initializers: [{ name: 'w', type: 'float32', dims: [64], values: new Float32Array(64).fill(1) }],
      nodes: [node('Add', ['x', 'w'], ['y'])],
    });
    const path = join(dir, 'cut.onnx');
    writeFileSync(path, big.subarray(0, Math.floor(big.length * 0.6)));
    const e = await createErr(path);
    expect(e).toBeInstanceOf(OnnxLoadError);
    expect(e!.message).toMatch(/^cut.onnx: truncated/);
    await stillWorks();
  });
});

describe('models with broken parts', () => {
  it('an unknown element type in an initializer', async () => {
    const bytes = model({
      inputs: [],
      outputs: [v('y', 'float32', [1])],
      initializers: [{ name: 'w', type: 'float32', dims: [1], values: [1], patch: (t) => void (t.dataType = 99) }],
      nodes: [node('Identity', ['w'], ['y'])],
    });
    const e = await createErr(bytes);
    expect(e).toBeInstanceOf(OnnxLoadError);
    expect(e!.message).toMatch(/initializer 'w'.*unknown data_type 99/);
    await stillWorks();
  });

  it('a dangling edge names the node, its op and the missing value', async () => {
    const bytes = model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [2])],
      outputs: [v('y', 'float32', [2])],
      nodes: [node('Relu', ['x'], ['r'], { name: 'relu' }), node('Add', ['r', 'ghost'], ['y'], { name: 'add_ghost' })],
    });
    const e = await createErr(bytes);
    expect(e).toBeInstanceOf(OnnxLoadError);
    expect(e!.message).toMatch(/node 'add_ghost' \(Add\) reads 'ghost'.*dangling edge/);
    // mlx-ort check takes the same way through prepareModel: it refuses the graph too.
    expect(() => checkModel(bytes)).toThrow(/node 'add_ghost' \(Add\) reads 'ghost'.*dangling edge/);
    await stillWorks();
  });

  it('unsupported ops: create() lists op type, domain, opset and node names', async () => {
    // A made-up op in a custom domain, and a real ONNX op the registry does not claim.
    const real = ['ImageDecoder', 'StringSplit', 'RegexFullMatch', 'TfIdfVectorizer', 'LabelEncoder'].find(
      (op) => !defaultRegistry.lookup('ai.onnx', op, 20),
    );
    expect(real).toBeDefined();
    const bytes = model({
      opsets: { '': 20, 'com.example': 3 },
      inputs: [v('x', 'float32', [2]), v('bytes', 'uint8', [16]), v('text', 'string', [2])],
      outputs: [v('y', 'float32', [2]), v('z', 'uint8')],
      nodes: [
        node('FooBar', ['x'], ['f1'], { domain: 'com.example', name: 'foo_a' }),
        node('FooBar', ['f1'], ['y'], { domain: 'com.example', name: 'foo_b' }),
        // With inputs of the types its schema takes: a valid node the provider does not claim.
        node(real!, real === 'ImageDecoder' ? ['bytes'] : ['text'], ['z'], { name: 'real_one' }),
      ],
    });
    const e = (await createErr(bytes)) as UnsupportedOperatorError;
    expect(e).toBeInstanceOf(UnsupportedOperatorError);
    expect(e.nodes.map((n) => [n.opType, n.domain, n.opset, n.nodeName])).toEqual([
      ['FooBar', 'com.example', 3, 'foo_a'],
      ['FooBar', 'com.example', 3, 'foo_b'],
      [real, 'ai.onnx', 20, 'real_one'],
    ]);
    expect(e.message).toMatch(/has 3 node\(s\) the MLX execution provider does not support/);
    expect(e.message).toMatch(/com\.example::FooBar \(opset 3\): .*\[nodes: foo_a, foo_b\]/);
    expect(e.message).toContain(`ai.onnx::${real} (opset 20)`);
    expect(e.message).toContain('real_one');
    // Through onnxruntime-common the error keeps its class.
    await expect(ort.InferenceSession.create(bytes, { executionProviders: ['mlx'] })).rejects.toBeInstanceOf(UnsupportedOperatorError);
    await stillWorks();
  });

  it('a node that fails while running names the node and op; the session stays usable', async () => {
    // Reshape to [7] fails for a [2, 3] feed (6 elements) and works for a [1, 7] one.
    const bytes = model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', ['A', 'B'])],
      outputs: [v('y', 'float32', [7])],
      initializers: [{ name: 'shape', type: 'int64', dims: [1], values: [7n] }],
      nodes: [node('Reshape', ['x', 'shape'], ['y'], { name: 'to_seven' })],
    });
    const s = await MlxSession.create(bytes, { device: 'cpu' });
    try {
      const bad = await s.run({ x: { dtype: 1, dims: [2, 3], data: new Float32Array(6) } }).then(
        () => undefined,
        (e: Error) => e,
      );
      expect(bad).toBeInstanceOf(NodeExecutionError);
      expect(bad!.message).toMatch(/node 'to_seven' \(Reshape\)/);
      const ok = await s.run({ x: { dtype: 1, dims: [1, 7], data: Float32Array.from([1, 2, 3, 4, 5, 6, 7]) } });
      expect([...((ok.y as HostTensor).data as Float32Array)]).toEqual([1, 2, 3, 4, 5, 6, 7]);
    } finally {
      s.release();
    }
  });
});

describe('feeds that do not match the inputs (InvalidFeedError)', () => {
  const two = model({
    opsets: { '': 13 },
    inputs: [v('x', 'float32', [2, 'N']), v('k', 'int64', [1])],
    outputs: [v('y', 'float32', [2, 'N'])],
    nodes: [node('Cast', ['k'], ['kf'], { attrs: { to: 1 } }), node('Mul', ['x', 'kf'], ['y'])],
  });
  const x = (dims = [2, 3], n = dims.reduce((a, b) => a * b, 1)) =>
    f32(
      Array.from({ length: n }, (_, i) => i),
      dims,
    );
  const k = i64([3], [1]);

  async function runErr(feeds: Record<string, import('onnxruntime-node').Tensor>): Promise<Error | undefined> {
    const s = await ort.InferenceSession.create(two, { executionProviders: ['mlx'] });
    try {
      return await s.run(feeds).then(
        () => undefined,
        (e: Error) => e,
      );
    } finally {
      await s.release();
    }
  }

  it('valid feeds run (symbolic N takes any size)', async () => {
    const s = await ort.InferenceSession.create(two, { executionProviders: ['mlx'] });
    expect(plain((await s.run({ x: x([2, 2]), k })).y)).toEqual([0, 3, 6, 9]);
    expect(plain((await s.run({ x: x([2, 1]), k })).y)).toEqual([0, 3]);
    await s.release();
  });

  it('a missing input', async () => {
    // onnxruntime-common checks this itself; MlxSession (the lower-level API) says the same.
    const e = await runErr({ x: x() });
    expect(e!.message).toMatch(/input 'k' is missing/);
    const s = await MlxSession.create(two);
    expect(() => s.runSync({ x: { dtype: 1, dims: [2, 1], data: new Float32Array(2) } })).toThrow(InvalidFeedError);
    expect(() => s.runSync({ x: { dtype: 1, dims: [2, 1], data: new Float32Array(2) } })).toThrow(/missing input 'k'/);
    s.release();
  });

  it('an unknown input names it and lists the inputs', async () => {
    const e = await runErr({ x: x(), k, extra: x() });
    expect(e).toBeInstanceOf(InvalidFeedError);
    expect(e!.message).toMatch(/unknown input 'extra' \(inputs are: x, k\)/);
  });

  it('a wrong element type', async () => {
    const e = await runErr({ x: x(), k: new ort.Tensor('int32', Int32Array.of(3), [1]) });
    expect(e).toBeInstanceOf(InvalidFeedError);
    expect(e!.message).toMatch(/input 'k' expects element type int64, got int32/);
  });

  it('a wrong rank', async () => {
    const e = await runErr({ x: x([6]), k });
    expect(e).toBeInstanceOf(InvalidFeedError);
    expect(e!.message).toMatch(/input 'x' expects rank 2 \(shape \[2, N\]\), got rank 1 \(shape \[6\]\)/);
  });

  it('a size that clashes with a static dimension', async () => {
    const e = await runErr({ x: x([3, 2]), k });
    expect(e).toBeInstanceOf(InvalidFeedError);
    expect(e!.message).toMatch(/input 'x' expects dimension 0 to be 2, got 3 \(shape \[3, 2\]\)/);
    await stillWorks();
  });

  it('after runs of one shape (whose checks a session then skips), every bad feed of that session is still refused', async () => {
    // A session remembers the names, types, dims and lengths of the feeds it checked last, and
    // skips the checks for feeds that match them: anything else must be checked again.
    const s = await MlxSession.create(two);
    const host = (dims: number[], n = dims.reduce((a, b) => a * b, 1)): HostTensor => ({
      dtype: 1,
      dims,
      data: Float32Array.from({ length: n }, (_, i) => i),
    });
    const kk: HostTensor = { dtype: 7, dims: [1], data: BigInt64Array.of(3n) };
    const valid = () => expect([...(s.runSync({ x: host([2, 2]), k: kk }).y as HostTensor).data]).toEqual([0, 3, 6, 9]);
    for (let i = 0; i < 4; i++) valid();
    const refusals: [Record<string, HostTensor>, string[] | undefined, RegExp][] = [
      [{ x: host([2, 2], 3), k: kk }, undefined, /input 'x' has 3 elements but its shape \[2, 2\] needs 4/],
      [{ x: host([2, 2], 5), k: kk }, undefined, /input 'x' has 5 elements/],
      [{ x: host([2, 2]) }, undefined, /missing input 'k'/],
      [{ x: host([2, 2]), k: kk, extra: host([2, 2]) }, undefined, /unknown input 'extra'/],
      [
        { x: host([2, 2]), k: { dtype: 6, dims: [1], data: Int32Array.of(3) } },
        undefined,
        /input 'k' expects element type int64, got int32/,
      ],
      [{ x: host([4]), k: kk }, undefined, /input 'x' expects rank 2/],
      [{ x: host([3, 2]), k: kk }, undefined, /input 'x' expects dimension 0 to be 2, got 3/],
      [{ x: host([2, 2]), k: kk }, ['nope'], /unknown output 'nope'/],
    ];
    for (const [feeds, fetches, message] of refusals) {
      expect(() => s.runSync(feeds, fetches), String(message)).toThrow(message);
      valid();
    }
    // The same feeds object, its dims then edited in place to a clashing size.
    const feeds = { x: host([2, 2]), k: kk };
    s.runSync(feeds);
    (feeds.x.dims as number[])[0] = 4;
    expect(() => s.runSync(feeds)).toThrow(/input 'x' expects dimension 0 to be 2, got 4/);
    // And the asynchronous path, through onnxruntime's API (its own checks come first for some).
    const o = await ort.InferenceSession.create(two, { executionProviders: ['mlx'] });
    for (let i = 0; i < 3; i++) expect(plain((await o.run({ x: x([2, 2]), k })).y)).toEqual([0, 3, 6, 9]);
    const bad = await o.run({ x: x([3, 2]), k }).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(bad).toBeInstanceOf(InvalidFeedError);
    expect(bad!.message).toMatch(/input 'x' expects dimension 0 to be 2, got 3/);
    expect(plain((await o.run({ x: x([2, 2]), k })).y)).toEqual([0, 3, 6, 9]);
    await o.release();
    s.release();
  });
});

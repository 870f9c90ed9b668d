// Loading is as strict as onnxruntime's: models it refuses are refused here too, with the node,
// the op and what is wrong. Each case is checked against onnxruntime-node first (the reference
// must refuse it as well), then against the mlx provider.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MlxSession, OnnxLoadError, type HostTensor } from '../../src/index.js';
import { model, node, v, type GraphSpec, type ModelSpec } from '../helpers/build.js';
import { ort } from '../helpers/ort.js';

async function ortRefuses(bytes: Uint8Array): Promise<boolean> {
  try {
    const s = await ort.InferenceSession.create(bytes);
    await s.release();
    return false;
  } catch {
    return true;
  }
}

const refused = async (spec: ModelSpec, message: RegExp) => {
  const bytes = model(spec);
  expect(await ortRefuses(bytes), 'onnxruntime-node refuses it too').toBe(true);
  const e = await MlxSession.create(bytes, { device: 'cpu' }).then(
    () => undefined,
    (err: Error) => err,
  );
  expect(e).toBeInstanceOf(OnnxLoadError);
  expect(e!.message).toMatch(message);
};

describe('models onnxruntime refuses', () => {
  it('an attribute the op does not define', async () => {
    await refused(
      {
        opsets: { '': 17 },
        inputs: [v('x', 'float32', [2])],
        outputs: [v('y', 'float32', [2])],
        nodes: [node('Relu', ['x'], ['y'], { name: 'r', attrs: { alpha: 0.5 } })],
      },
      /node 'r' \(Relu\): unknown attribute 'alpha'/,
    );
  });

  it('inputs of one type parameter with different element types (float + int64 Add)', async () => {
    await refused(
      {
        opsets: { '': 17 },
        inputs: [v('a', 'float32', [2]), v('b', 'int64', [2])],
        outputs: [v('y', 'float32', [2])],
        nodes: [node('Add', ['a', 'b'], ['y'], { name: 'add' })],
      },
      /node 'add' \(Add\): inputs bound to type parameter T disagree: tensor\(float\) and tensor\(int64\)/,
    );
  });

  it('an element type outside the constraint (Sqrt of int64), found through inferred types', async () => {
    await refused(
      {
        opsets: { '': 17 },
        inputs: [v('x', 'int64', [2])],
        outputs: [v('y', 'int64', [2])],
        nodes: [node('Neg', ['x'], ['n']), node('Sqrt', ['n'], ['y'], { name: 'sqrt' })],
      },
      /node 'sqrt' \(Sqrt\): input 0 \('X'\) has type tensor\(int64\), which Sqrt-13 does not take/,
    );
  });

  it('an opset the schemas do not know, with the supported range', async () => {
    await refused(
      {
        opsets: { '': 999 },
        inputs: [v('x', 'float32', [2])],
        outputs: [v('y', 'float32', [2])],
        nodes: [node('Relu', ['x'], ['y'])],
      },
      /opset 999 of domain ai\.onnx is not supported \(supported: 1 to \d+\)/,
    );
  });

  it('ai.onnx nodes in a model that imports only another domain run at the newest opset, as in onnxruntime', async () => {
    // ReduceSum takes its axes as an input from opset 13 on, as an attribute before.
    const withInput = model({
      opsets: { 'com.microsoft': 1 },
      inputs: [v('x', 'float32', [2, 3]), v('a', 'int64', [1])],
      outputs: [v('y', 'float32')],
      nodes: [node('ReduceSum', ['x', 'a'], ['y'], { name: 'sum' })],
    });
    const s = await MlxSession.create(withInput, { device: 'cpu' });
    const y = s.runSync({
      x: { dtype: 1, dims: [2, 3], data: Float32Array.from([1, 2, 3, 4, 5, 6]) },
      a: { dtype: 7, dims: [1], data: BigInt64Array.of(1n) },
    }).y as HostTensor;
    s.release();
    expect([...(y.data as Float32Array)]).toEqual([6, 15]);
    await refused(
      {
        opsets: { 'com.microsoft': 1 },
        inputs: [v('x', 'float32', [2, 3])],
        outputs: [v('y', 'float32')],
        nodes: [node('ReduceSum', ['x'], ['y'], { name: 'sum', attrs: { axes: [1] } })],
      },
      /node 'sum' \(ReduceSum\): unknown attribute 'axes'/,
    );
  });

  it('a missing required attribute, and too many inputs', async () => {
    await refused(
      {
        opsets: { '': 17 },
        inputs: [v('x', 'float32', [2, 2])],
        outputs: [v('y', 'float32')],
        nodes: [node('Cast', ['x'], ['y'], { name: 'cast' })],
      },
      /node 'cast' \(Cast\): missing required attribute 'to'/,
    );
    await refused(
      {
        opsets: { '': 17 },
        inputs: [v('x', 'float32', [2])],
        outputs: [v('y', 'float32', [2])],
        nodes: [node('Relu', ['x', 'x'], ['y'], { name: 'relu2' })],
      },
      /node 'relu2' \(Relu\): has 2 input\(s\); Relu-14 takes 1/,
    );
  });

  it('an IR version newer than the schemas', async () => {
    await refused(
      {
        irVersion: 99,
        opsets: { '': 17 },
        inputs: [v('x', 'float32', [2])],
        outputs: [v('y', 'float32', [2])],
        nodes: [node('Relu', ['x'], ['y'])],
      },
      /IR version 99 is not supported \(this loader reads IR versions 3 to \d+\)/,
    );
  });
});

describe('files that are not regular files', () => {
  const dir = mkdtempSync(join(tmpdir(), 'ort-ep-fifo-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const fifo = (name: string) => {
    const p = join(dir, name);
    execFileSync('mkfifo', [p]);
    return p;
  };

  it('external data in a FIFO is refused at once instead of blocking create()', async () => {
    fifo('weights.bin');
    const path = join(dir, 'model.onnx');
    writeFileSync(
      path,
      model({
        opsets: { '': 17 },
        inputs: [],
        outputs: [v('y', 'float32', [4])],
        initializers: [{ name: 'w', type: 'float32', dims: [4], external: { location: 'weights.bin', offset: 0, length: 16 } }],
        nodes: [node('Identity', ['w'], ['y'])],
      }),
    );
    const t0 = performance.now();
    const e = await MlxSession.create(path, { device: 'cpu' }).then(
      () => undefined,
      (err: Error) => err,
    );
    expect(performance.now() - t0).toBeLessThan(5000);
    expect(e).toBeInstanceOf(OnnxLoadError);
    expect(e!.message).toMatch(/external data file 'weights\.bin' cannot be read \(it is a FIFO, not a regular file\)/);
  });

  it('a model path that is a FIFO or a folder is refused at once', async () => {
    for (const [p, what] of [
      [fifo('model-fifo.onnx'), 'a FIFO'],
      [dir, 'a directory'],
    ]) {
      const e = await MlxSession.create(p, { device: 'cpu' }).then(
        () => undefined,
        (err: Error) => err,
      );
      expect(e).toBeInstanceOf(OnnxLoadError);
      expect(e!.message).toContain(`cannot read the model file: it is ${what}, not a regular file`);
    }
  });
});

describe('limits of the loader', () => {
  it('subgraphs nested past the protobuf reader limit: a clear error', async () => {
    const leaf: GraphSpec = {
      inputs: [],
      outputs: [v('o', 'float32', [1])],
      nodes: [node('Constant', [], ['o'], { attrs: { value_float: { f: 1 } } })],
    };
    let g = leaf;
    for (let d = 0; d < 40; d++)
      g = {
        inputs: [],
        outputs: [v('o', 'float32', [1])],
        nodes: [node('If', ['c'], ['o'], { attrs: { then_branch: { g }, else_branch: { g: leaf } } })],
      };
    const bytes = model({ inputs: [v('c', 'bool', [])], outputs: [v('o', 'float32', [1])], nodes: g.nodes });
    expect(await ortRefuses(bytes)).toBe(true);
    const e = await MlxSession.create(bytes).then(
      () => undefined,
      (err: Error) => err,
    );
    expect(e).toBeInstanceOf(OnnxLoadError);
    expect(e!.message).toMatch(/nests messages deeper than 100 levels/);
  });

  it('functions that call each other repeatedly: inlining stops at a node budget', async () => {
    // f0 = Relu; f(k) calls f(k-1) four times: 4^12 = 16.7 million nodes once inlined.
    const functions = Array.from({ length: 13 }, (_, k) => ({
      name: `f${k}`,
      domain: 'local',
      inputs: ['x'],
      outputs: ['y'],
      opsets: { '': 17, local: 1 },
      nodes:
        k === 0
          ? [node('Relu', ['x'], ['y'])]
          : [
              node(`f${k - 1}`, ['x'], ['a'], { domain: 'local' }),
              node(`f${k - 1}`, ['a'], ['b'], { domain: 'local' }),
              node(`f${k - 1}`, ['b'], ['c'], { domain: 'local' }),
              node(`f${k - 1}`, ['c'], ['y'], { domain: 'local' }),
            ],
    }));
    const bytes = model({
      opsets: { '': 17, local: 1 },
      functions,
      inputs: [v('x', 'float32', [2])],
      outputs: [v('y', 'float32', [2])],
      nodes: [node('f12', ['x'], ['y'], { domain: 'local', name: 'call' })],
    });
    const t0 = performance.now();
    const e = await MlxSession.create(bytes).then(
      () => undefined,
      (err: Error) => err,
    );
    expect(performance.now() - t0).toBeLessThan(20_000);
    expect(e).toBeInstanceOf(OnnxLoadError);
    expect(e!.message).toMatch(/inlining the model's functions makes more than 1,000,000 nodes/);
  });
});

// The session API through onnxruntime-common: creation from a path or bytes with either form of
// the execution provider option, from onnxruntime-common and onnxruntime-node in ESM and from
// require() in CommonJS, registerMlxBackend on a fresh module object, metadata with symbolic
// dims, and fetches that compute only what they need.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as ortCommon from 'onnxruntime-common';
import { afterAll, describe, expect, it } from 'vitest';
import { registerMlxBackend } from '../../src/index.js';
import { MLX_BACKEND_NAME, MLX_BACKEND_PRIORITY, type createMlxBackend } from '../../src/internal.js';
import { model, node, v } from '../helpers/build.js';
import { expectSameAsOrt, f32, ort, plain, runOn } from '../helpers/ort.js';

const pkgDir = fileURLToPath(new URL('../..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'ort-ep-session-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// y = x @ w + b (w: [3, 2]), x: [batch, 3]
const linear = model({
  opsets: { '': 13 },
  inputs: [v('x', 'float32', ['batch', 3])],
  outputs: [v('y', 'float32', ['batch', 2])],
  initializers: [
    { name: 'w', type: 'float32', dims: [3, 2], values: [1, 0, 0, 1, 1, 1] },
    { name: 'b', type: 'float32', dims: [2], values: [0.5, -0.5] },
  ],
  nodes: [node('MatMul', ['x', 'w'], ['xw']), node('Add', ['xw', 'b'], ['y'])],
});
const linearPath = join(dir, 'linear.onnx');
writeFileSync(linearPath, linear);
const xData = [1, 2, 3, 4, 5, 6];
const yWant = [4.5, 4.5, 10.5, 10.5];

const handlerName = (s: unknown) => (s as { handler: object }).handler.constructor.name;

describe('InferenceSession.create with the mlx provider', () => {
  const forms = [
    ['path', linearPath],
    ['bytes', linear],
  ] as const;
  const providers = [
    ['"mlx"', ['mlx']],
    ['{ name: "mlx", device: "cpu" }', [{ name: 'mlx', device: 'cpu' }]],
  ] as const;
  for (const [label, ortModule] of [
    ['onnxruntime-common', ortCommon],
    ['onnxruntime-node', ort],
  ] as const) {
    for (const [what, source] of forms) {
      for (const [pname, eps] of providers) {
        it(`${label}: from ${what}, executionProviders [${pname}]`, async () => {
          const O = ortModule as typeof ortCommon;
          const s = await O.InferenceSession.create(source as never, { executionProviders: eps as never });
          try {
            expect(handlerName(s)).toBe('MlxSessionHandler');
            const out = await s.run({ x: new O.Tensor('float32', Float32Array.from(xData), [2, 3]) });
            expect(out.y).toBeInstanceOf(O.Tensor);
            expect(out.y.dims).toEqual([2, 2]);
            expect(Array.from(out.y.data as Float32Array)).toEqual(yWant);
          } finally {
            await s.release();
          }
        });
      }
    }
  }

  it('an unknown device is refused with a clear error', async () => {
    await expect(
      ortCommon.InferenceSession.create(linear, { executionProviders: [{ name: 'mlx', device: 'tpu' } as never] }),
    ).rejects.toThrow(/device must be 'gpu' or 'cpu', got 'tpu'/);
  });

  // A user's program in each module system, in a child process, taking both onnxruntime-common
  // and onnxruntime-node (which uses onnxruntime-common's CommonJS instance even from ESM).
  const program = (esm: boolean) => `
    ${
      esm
        ? "import * as common from 'onnxruntime-common'; import * as node from 'onnxruntime-node'; import * as ep from '@mlx/ort-ep';"
        : "const common = require('onnxruntime-common'); const node = require('onnxruntime-node'); const ep = require('@mlx/ort-ep');"
    }
    const out = { exports: typeof ep.registerMlxBackend + ' ' + typeof ep.MlxSession };
    for (const [label, ort] of [['common', common], ['node', node]]) {
      for (const eps of [['mlx'], [{ name: 'mlx', device: 'cpu' }]]) {
        const s = await ort.InferenceSession.create(process.env.MODEL, { executionProviders: eps });
        const r = await s.run({ x: new ort.Tensor('float32', Float32Array.from(${JSON.stringify(xData)}), [2, 3]) });
        out[label + ' ' + JSON.stringify(eps)] = { handler: s.handler.constructor.name, dims: r.y.dims, y: Array.from(r.y.data) };
        await s.release();
      }
    }
    console.log(JSON.stringify(out));`;
  for (const esm of [false, true]) {
    it(`${esm ? 'ESM' : 'CommonJS'} program (${esm ? 'import' : 'require'} of onnxruntime-common, onnxruntime-node and @mlx/ort-ep) in a child process`, async () => {
      const code = esm ? program(true) : `(async () => { ${program(false)} })().catch((e) => { console.error(e); process.exit(1); });`;
      const { stdout } = await promisify(execFile)(
        process.execPath,
        ['--conditions=source', '--import', 'tsx', ...(esm ? ['--input-type=module'] : []), '-e', code],
        { cwd: pkgDir, env: { ...process.env, MODEL: linearPath }, timeout: 60_000 },
      );
      const out = JSON.parse(stdout.trim().split('\n').pop()!);
      expect(out.exports).toBe('function function');
      for (const m of ['common', 'node']) {
        for (const k of ['["mlx"]', '[{"name":"mlx","device":"cpu"}]'])
          expect(out[`${m} ${k}`]).toEqual({ handler: 'MlxSessionHandler', dims: [2, 2], y: yWant });
      }
    }, 60_000);
  }
});

describe('registerMlxBackend', () => {
  it('registers once into a fresh module object, at priority -10, and the backend it registers works', async () => {
    const calls: [string, unknown, number][] = [];
    const fresh = {
      Tensor: ortCommon.Tensor,
      registerBackend: (name: string, backend: unknown, priority: number) => void calls.push([name, backend, priority]),
    };
    registerMlxBackend(fresh);
    registerMlxBackend(fresh); // idempotent per module object
    const mine = calls.filter(([n]) => n === MLX_BACKEND_NAME);
    expect(mine.map(([n, , p]) => [n, p])).toEqual([[MLX_BACKEND_NAME, MLX_BACKEND_PRIORITY]]);
    expect([MLX_BACKEND_NAME, MLX_BACKEND_PRIORITY]).toEqual(['mlx', -10]);
    // Every other name registered is a misspelling whose backend refuses with a hint.
    const others = calls.filter(([n]) => n !== MLX_BACKEND_NAME);
    expect(others.map(([n]) => n)).toContain('MLX');
    for (const [n, b, p] of others) {
      expect(p).toBe(MLX_BACKEND_PRIORITY);
      await expect((b as ReturnType<typeof createMlxBackend>).init(n)).rejects.toThrow(
        `'${n}' is not an execution provider name: write 'mlx'`,
      );
    }
    const backend = mine[0][1] as ReturnType<typeof createMlxBackend>;
    await backend.init('mlx');
    const handler = await backend.createInferenceSessionHandler(linear, {});
    try {
      expect(handler.inputNames).toEqual(['x']);
      const out = await handler.run({ x: new ortCommon.Tensor('float32', Float32Array.from(xData), [2, 3]) }, { y: null }, {});
      expect(out.y).toBeInstanceOf(ortCommon.Tensor);
      expect(Array.from((out.y as ortCommon.Tensor).data as Float32Array)).toEqual(yWant);
    } finally {
      await handler.dispose();
    }
  });
});

describe('one backend object', () => {
  it('registerMlxBackend on the onnxruntime-common that the import already registered with does not throw', () => {
    // onnxruntime-common throws "cannot register backend" for a second, different object at the
    // same priority: the backend is one object, so this is a no-op.
    expect(() => registerMlxBackend(ortCommon as never)).not.toThrow();
    const real = { Tensor: ortCommon.Tensor, registerBackend: ortCommon.registerBackend };
    expect(() => registerMlxBackend(real)).not.toThrow();
  });

  it('a second copy of this package (another backend object under the name) does not make the import throw', async () => {
    const code = `
      const common = await import('onnxruntime-common');
      common.registerBackend('mlx', { init: async () => {}, createInferenceSessionHandler: async () => { throw new Error('other copy'); } }, -10);
      const ep = await import('@mlx/ort-ep');
      console.log(JSON.stringify({ mlx: typeof ep.mlx }));`;
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code],
      {
        cwd: pkgDir,
        timeout: 60_000,
      },
    );
    expect(JSON.parse(stdout.trim().split('\n').pop()!)).toEqual({ mlx: 'function' });
  }, 60_000);

  it("'MLX' and other misspellings fail with a hint", async () => {
    await expect(ortCommon.InferenceSession.create(linear, { executionProviders: ['MLX'] })).rejects.toThrow(
      "[MLX] Error: 'MLX' is not an execution provider name: write 'mlx'",
    );
    await expect(ortCommon.InferenceSession.create(linear, { executionProviders: ['mlx-gpu'] })).rejects.toThrow(
      "'mlx-gpu' is not an execution provider name",
    );
  });
});

describe('lazy loading', () => {
  it("importing loads nothing native; without MLX, ['mlx', 'cpu'] falls back with onnxruntime's warning", async () => {
    const code = `
      import * as ort from 'onnxruntime-node';
      import { readFileSync } from 'node:fs';
      const ep = await import('@mlx/ort-ep');
      const native = /libmlxc|koffi/.test(readFileSync('/proc/self/maps', 'utf8'));
      const s = await ort.InferenceSession.create(process.env.MODEL, { executionProviders: ['mlx', 'cpu'] });
      let only = '';
      try { await ort.InferenceSession.create(process.env.MODEL, { executionProviders: [ep.mlx()] }); } catch (e) { only = e.message; }
      console.log(JSON.stringify({ native, handler: s.handler.constructor.name, only }));`;
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code],
      {
        cwd: pkgDir,
        env: { ...process.env, MODEL: linearPath, MLX_C_LIBRARY: '/nonexistent/libmlxc.so' },
        timeout: 60_000,
      },
    );
    const out = JSON.parse(stdout.trim().split('\n').pop()!);
    expect(out.native).toBe(false);
    expect(out.handler).not.toBe('MlxSessionHandler');
    expect(stderr).toMatch(
      /removing requested execution provider "mlx" from session options because it is not available: MlxLibraryNotFoundError: could not load the MLX C library/,
    );
    expect(out.only).toMatch(
      /\[mlx\] MlxLibraryNotFoundError: could not load the MLX C library.*\/nonexistent\/libmlxc\.so \(MLX_C_LIBRARY\): no such file/s,
    );
  }, 60_000);
});

describe('metadata', () => {
  it('inputNames, outputNames, inputMetadata and outputMetadata (types, static and symbolic dims)', async () => {
    const bytes = model({
      opsets: { '': 13 },
      inputs: [
        v('tokens', 'int64', ['batch', 'seq']),
        v('scale', 'float32', [1]),
        v('mask', 'bool', ['batch', null]),
        v('w', 'float32', [2]),
      ],
      outputs: [v('logits', 'float32', ['batch', 'seq']), v('flag', 'bool', ['batch', null])],
      initializers: [{ name: 'w', type: 'float32', dims: [2], values: [1, 1] }],
      nodes: [
        node('Cast', ['tokens'], ['tf'], { attrs: { to: 1 } }),
        node('Mul', ['tf', 'scale'], ['logits']),
        node('Not', ['mask'], ['flag']),
      ],
    });
    const s = await ort.InferenceSession.create(bytes, { executionProviders: ['mlx'] });
    try {
      expect(s.inputNames).toEqual(['tokens', 'scale', 'mask']); // 'w' has a default: not required
      expect(s.outputNames).toEqual(['logits', 'flag']);
      expect(s.inputMetadata).toEqual([
        { name: 'tokens', isTensor: true, type: 'int64', shape: ['batch', 'seq'] },
        { name: 'scale', isTensor: true, type: 'float32', shape: [1] },
        { name: 'mask', isTensor: true, type: 'bool', shape: ['batch', -1] },
      ]);
      expect(s.outputMetadata).toEqual([
        { name: 'logits', isTensor: true, type: 'float32', shape: ['batch', 'seq'] },
        { name: 'flag', isTensor: true, type: 'bool', shape: ['batch', -1] },
      ]);
      // onnxruntime-node's CPU provider reports the same, except that it spells an unknown
      // dimension '' where MlxSession's documented metadata (and so this backend) says -1.
      const ref = await ort.InferenceSession.create(bytes);
      const unknownAsEmpty = (ms: readonly ortCommon.InferenceSession.ValueMetadata[]) =>
        ms.map((m) => (m.isTensor ? { ...m, shape: m.shape.map((d) => (d === -1 ? '' : d)) } : m));
      expect(unknownAsEmpty(s.outputMetadata)).toEqual(ref.outputMetadata);
      expect(unknownAsEmpty(s.inputMetadata)).toEqual(ref.inputMetadata.filter((m) => m.name !== 'w'));
      await ref.release();
    } finally {
      await s.release();
    }
  });
});

describe('fetches', () => {
  // a = Relu(x) and b = Reshape(x, [5]): evaluating b fails for any [2, 3] x.
  const twoBranches = model({
    opsets: { '': 13 },
    inputs: [v('x', 'float32', [2, 3])],
    outputs: [v('a', 'float32', [2, 3]), v('b', 'float32', [5]), v('c', 'float32', [2, 3])],
    initializers: [{ name: 'five', type: 'int64', dims: [1], values: [5n] }],
    nodes: [
      node('Relu', ['x'], ['a'], { name: 'relu' }),
      node('Reshape', ['x', 'five'], ['b'], { name: 'impossible_reshape' }),
      node('Neg', ['a'], ['c'], { name: 'neg' }),
    ],
  });
  const x = () => f32([1, -2, 3, -4, 5, -6], [2, 3]);

  it('run(feeds, fetches) returns only the requested outputs and never evaluates the rest', async () => {
    const s = await ort.InferenceSession.create(twoBranches, { executionProviders: ['mlx'] });
    try {
      // The unrequested branch really would fail:
      await expect(s.run({ x: x() })).rejects.toThrow(/node 'impossible_reshape' \(Reshape\)/);
      const onlyA = await s.run({ x: x() }, ['a']);
      expect(Object.keys(onlyA)).toEqual(['a']);
      expect(plain(onlyA.a)).toEqual([1, 0, 3, 0, 5, 0]);
      const ac = await s.run({ x: x() }, { a: null, c: null });
      expect(Object.keys(ac).sort()).toEqual(['a', 'c']);
      expect(plain(ac.c)).toEqual([-1, -0, -3, -0, -5, -0]);
    } finally {
      await s.release();
    }
  });
});

describe('tensor types at the onnxruntime-common boundary', () => {
  it('float16 feeds and outputs (bits in a Uint16Array) agree with onnxruntime-node', async () => {
    const bytes = model({
      opsets: { '': 13 },
      inputs: [v('h', 'float16', [4])],
      outputs: [v('y', 'float16', [4])],
      nodes: [node('Add', ['h', 'h'], ['y'])],
    });
    const h = new ort.Tensor('float16', Uint16Array.of(0x3c00, 0xc000, 0x3800, 0x0001), [4]); // 1, -2, 0.5, smallest subnormal
    const out = await expectSameAsOrt(bytes, { h });
    expect(out.y.type).toBe('float16');
    expect(Array.from(out.y.data as Uint16Array)).toEqual([0x4000, 0xc400, 0x3c00, 0x0002]);
  });

  it('int4 feeds (packed two per byte) are unpacked with their sign', async () => {
    const bytes = model({
      opsets: { '': 21 },
      inputs: [v('q', 'int4', [5])],
      outputs: [v('y', 'float32', [5])],
      nodes: [node('Cast', ['q'], ['y'], { attrs: { to: 1 } })],
    });
    const out = await runOn('mlx', bytes, { q: new ort.Tensor('int4', Uint8Array.of(0x78, 0xf0, 0x03), [5]) });
    expect(plain(out.y)).toEqual([-8, 7, 0, -1, 3]);
  });
});

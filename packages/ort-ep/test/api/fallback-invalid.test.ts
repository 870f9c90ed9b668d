// Invalid nodes (they break the ONNX or contrib spec) are refused at create(), never handed to the
// onnxruntime fallback: its CPU kernels do not all check such values, and ConvTranspose with
// `group` 0 or GatherBlockQuantized with `block_size` 0 or `bits` 0 killed the process (SIGFPE).
// Those cases run in a child process, so that a regression fails the test instead of killing
// vitest. Nodes MLX merely does not take still fall back.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { RefusedNodeError } from '../../src/index.js';
import { model, node, v, type ModelSpec } from '../helpers/build.js';
import { expectSameOutputs, f32, outcome, runOn, seeded } from '../helpers/ort.js';

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const MS = 'com.microsoft';
type SessionOptions = import('onnxruntime-node').InferenceSession.SessionOptions;
const withFallback = { executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'cpu' }] } as unknown as SessionOptions;
const noFallback = { executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'none' }] } as unknown as SessionOptions;

const convTranspose = (attrs: Record<string, number | number[]>): ModelSpec => ({
  opsets: { '': 17 },
  inputs: [v('x', 'float32', [1, 2, 3, 3]), v('w', 'float32', [2, 1, 2, 2])],
  outputs: [v('y', 'float32')],
  nodes: [node('ConvTranspose', ['x', 'w'], ['y'], { name: 'ct', attrs })],
});
const convFeeds = { x: [18, [1, 2, 3, 3]], w: [8, [2, 1, 2, 2]] } as const;

const gbq = (attrs: Record<string, number>): ModelSpec => ({
  opsets: { '': 21, [MS]: 1 },
  irVersion: 10,
  inputs: [v('d', 'uint8', [4, 16]), v('i', 'int64', [2]), v('s', 'float32', [4, 2])],
  outputs: [v('y', 'float32')],
  nodes: [node('GatherBlockQuantized', ['d', 'i', 's'], ['y'], { name: 'gbq', domain: MS, attrs })],
});

const nbits = (attrs: Record<string, number>): ModelSpec => ({
  opsets: { '': 21, [MS]: 1 },
  irVersion: 10,
  inputs: [v('a', 'float32', [2, 32]), v('b', 'uint8', [4, 1, 16]), v('s', 'float32', [4])],
  outputs: [v('y', 'float32')],
  nodes: [node('MatMulNBits', ['a', 'b', 's'], ['y'], { name: 'mm', domain: MS, attrs: { K: 32, N: 4, ...attrs } })],
});

/** Invalid nodes, each with the message create() must give (with or without the fallback). */
const invalid: { what: string; spec: ModelSpec; message: RegExp }[] = [
  {
    what: 'ConvTranspose group 0 (was SIGFPE in onnxruntime)',
    spec: convTranspose({ group: 0 }),
    message: /node 'ct' \(ConvTranspose\): group must be positive, got 0/,
  },
  {
    what: 'ConvTranspose group -1',
    spec: convTranspose({ group: -1 }),
    message: /node 'ct' \(ConvTranspose\): group must be positive, got -1/,
  },
  {
    what: 'ConvTranspose strides 0',
    spec: convTranspose({ strides: [0, 1] }),
    message: /node 'ct' \(ConvTranspose\): strides must be positive, got 0 in \[0, 1\]/,
  },
  {
    what: 'ConvTranspose dilations 0',
    spec: convTranspose({ dilations: [1, 0] }),
    message: /node 'ct' \(ConvTranspose\): dilations must be positive, got 0 in \[1, 0\]/,
  },
  {
    what: 'ConvTranspose kernel_shape -2',
    spec: convTranspose({ kernel_shape: [2, -2] }),
    message: /kernel_shape must be positive, got -2 in \[2, -2\]/,
  },
  {
    what: 'GatherBlockQuantized block_size 0 (was SIGFPE in onnxruntime)',
    spec: gbq({ block_size: 0, bits: 4 }),
    message: /node 'gbq' \(GatherBlockQuantized\): GatherBlockQuantized block_size 0 is not a power of two >= 16/,
  },
  {
    what: 'GatherBlockQuantized bits 0 (was SIGFPE in onnxruntime)',
    spec: gbq({ block_size: 16, bits: 0 }),
    message: /node 'gbq' \(GatherBlockQuantized\): GatherBlockQuantized bits 0 is not 2, 4 or 8/,
  },
  { what: 'GatherBlockQuantized block_size 24', spec: gbq({ block_size: 24 }), message: /block_size 24 is not a power of two >= 16/ },
  { what: 'GatherBlockQuantized bits -1', spec: gbq({ block_size: 16, bits: -1 }), message: /bits -1 is not 2, 4 or 8/ },
  {
    what: 'MatMulNBits block_size 0',
    spec: nbits({ block_size: 0, bits: 4 }),
    message: /node 'mm' \(MatMulNBits\): MatMulNBits block_size 0 is not a power of two >= 16/,
  },
  { what: 'MatMulNBits bits 0', spec: nbits({ block_size: 16, bits: 0 }), message: /MatMulNBits bits 0 is outside 2-8/ },
  { what: 'MatMulNBits N 0', spec: nbits({ block_size: 16, N: 0 }), message: /MatMulNBits attribute N = 0 is not a positive size/ },
];

const dir = mkdtempSync(join(tmpdir(), 'fallback-invalid-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('invalid nodes are refused at create(), never handed to onnxruntime', () => {
  it('in a child process, with the fallback allowed: a RefusedNodeError naming the node, attribute and value', async () => {
    const paths = invalid.map((c, k) => {
      const p = join(dir, `case${k}.onnx`);
      writeFileSync(p, model(c.spec));
      return p;
    });
    // create() and a run with the fallback allowed; before the fix, onnxruntime killed the child.
    const code = `
      import * as ort from 'onnxruntime-node';
      import '@mlx/ort-ep';
      const opts = { executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'cpu' }] };
      const t = (type, n, dims) => new ort.Tensor(type, type === 'int64' ? BigInt64Array.from({ length: n }, () => 1n) : type === 'uint8' ? new Uint8Array(n).fill(17) : new Float32Array(n).fill(0.5), dims);
      const feeds = {
        ct: { x: t('float32', 18, [1, 2, 3, 3]), w: t('float32', 8, [2, 1, 2, 2]) },
        gbq: { d: t('uint8', 64, [4, 16]), i: t('int64', 2, [2]), s: t('float32', 8, [4, 2]) },
        mm: { a: t('float32', 64, [2, 32]), b: t('uint8', 64, [4, 1, 16]), s: t('float32', 4, [4]) },
      };
      for (const p of JSON.parse(process.env.CASES)) {
        const bytes = (await import('node:fs')).readFileSync(p);
        let out;
        try {
          const s = await ort.InferenceSession.create(bytes, opts);
          const kind = s.inputNames.includes('x') ? 'ct' : s.inputNames.includes('d') ? 'gbq' : 'mm';
          await s.run(feeds[kind]);
          out = { ran: true };
        } catch (e) {
          out = { name: e.name, code: e.code, message: e.message };
        }
        console.log(JSON.stringify(out));
      }`;
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code],
      { cwd: pkgDir, env: { ...process.env, CASES: JSON.stringify(paths) }, timeout: 120_000 },
    );
    const results = stdout
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l));
    expect(results).toHaveLength(invalid.length);
    invalid.forEach((c, k) => {
      expect({ what: c.what, name: results[k].name, code: results[k].code }).toEqual({
        what: c.what,
        name: 'RefusedNodeError',
        code: 'ERR_MLX_ORT_REFUSED_NODE',
      });
      expect(results[k].message, c.what).toMatch(c.message);
    });
  }, 120_000);

  it('without the fallback too, and the error is a RefusedNodeError of this package', async () => {
    for (const c of invalid.slice(0, 2)) {
      const e = await outcome(model(c.spec), {}, noFallback);
      expect(e, c.what).toBeInstanceOf(RefusedNodeError);
      expect((e as Error).message).toMatch(c.message);
      expect((e as Error).message).toMatch(/^model <bytes>, node /);
    }
  });
});

describe('valid nodes MLX does not take still fall back', () => {
  it('MatMulNBits with bits 3 (valid in the contrib spec, not taken here) is handed to onnxruntime', async () => {
    const bytes = model(nbits({ bits: 3, block_size: 32 }));
    // onnxruntime-node 1.30 judges it at create() with its own message: the node reached it.
    const e = await outcome(bytes, {}, withFallback);
    expect(e).not.toBeInstanceOf(RefusedNodeError);
    expect((e as Error).message).toMatch(/MatMulNBits with bits=3 is not supported \(2, 4 and 8 are\)/);
    expect((e as Error).message).toMatch(/onnxruntime \(the fallback\) cannot run them either:.*Only 2b, 4b and 8b quantization/s);
  });

  it('a valid ConvTranspose still runs on MLX and matches onnxruntime', async () => {
    const bytes = model(convTranspose({ group: 2 }));
    const feeds = { x: f32(seeded(convFeeds.x[0], 1), [...convFeeds.x[1]]), w: f32(seeded(convFeeds.w[0], 2), [...convFeeds.w[1]]) };
    expectSameOutputs(await runOn('mlx', bytes, feeds), await runOn('cpu', bytes, feeds));
  });
});

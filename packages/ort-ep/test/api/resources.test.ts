// Sessions give back what they take: the streams a session evaluates on (each a native thread in
// MLX's scheduler and one of the library's workers) go back to a process-wide pool when it is
// released, so create/run/release cycles keep the thread count and the resident memory flat.
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type * as mx from '@mlx/core';
import { afterAll, describe, expect, it } from 'vitest';
import { MlxSession, OnnxDataType } from '../../src/index.js';
import { model, node, v } from '../helpers/build.js';
import { buildDecoder } from '../helpers/decoder.js';
import { f32, ort } from '../helpers/ort.js';

function status(field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(readFileSync('/proc/self/status', 'utf8'));
  if (!m) throw new Error(`no ${field} in /proc/self/status`);
  return Number(m[1]);
}

const bytes = model({
  inputs: [v('x', 'float32', [4])],
  outputs: [v('y', 'float32', [4])],
  nodes: [node('Relu', ['x'], ['y'])],
});
const create = () => ort.InferenceSession.create(bytes, { executionProviders: [{ name: 'mlx', device: 'cpu' }] } as never);
const feeds = () => ({ x: f32([-1, 2, -3, 4], [4]) });

describe('resources per session', () => {
  it('500 create/run/release cycles keep threads and RSS flat', async () => {
    // Warm up: the first sessions make the pool's streams and MLX's own caches.
    for (let i = 0; i < 20; i++) {
      const s = await create();
      await s.run(feeds());
      await s.release();
    }
    const threads0 = status('Threads');
    const rss0 = status('VmRSS');
    for (let i = 0; i < 500; i++) {
      const s = await create();
      const { y } = await s.run(feeds());
      if (i === 0) expect(Array.from(y.data as Float32Array)).toEqual([0, 2, 0, 4]);
      await s.release();
    }
    // Releasing ends after the session's queue drains: let it.
    await new Promise((r) => setTimeout(r, 20));
    expect(status('Threads') - threads0).toBeLessThanOrEqual(2);
    // kB; a little slack for the JS heap and allocator caches.
    expect(status('VmRSS') - rss0).toBeLessThan(64 * 1024);
  }, 120_000);

  it('two sessions alive at once run concurrently on streams of their own', async () => {
    const a = await MlxSession.create(bytes, { device: 'cpu' });
    const b = await MlxSession.create(bytes, { device: 'cpu' });
    const streamOf = (s: MlxSession) => (s as unknown as { streams: { main: mx.Stream } }).streams.main;
    expect(streamOf(a).index).not.toBe(streamOf(b).index);
    const x = { dtype: OnnxDataType.FLOAT, dims: [4], data: new Float32Array([-1, 2, -3, 4]) };
    const [ra, rb] = await Promise.all([a.run({ x }), b.run({ x })]);
    expect(Array.from(ra.y.data as Float32Array)).toEqual([0, 2, 0, 4]);
    expect(Array.from(rb.y.data as Float32Array)).toEqual([0, 2, 0, 4]);
    const ia = streamOf(a).index;
    a.release();
    await new Promise((r) => setTimeout(r, 0));
    // A released session's stream goes to the next session; the live one keeps its own.
    const c = await MlxSession.create(bytes, { device: 'cpu' });
    expect(streamOf(c).index).toBe(ia);
    const [rc, rb2] = await Promise.all([c.run({ x }), b.run({ x })]);
    expect(Array.from(rc.y.data as Float32Array)).toEqual([0, 2, 0, 4]);
    expect(Array.from(rb2.y.data as Float32Array)).toEqual([0, 2, 0, 4]);
    b.release();
    c.release();
  });
});

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const work = mkdtempSync(join(tmpdir(), 'ort-ep-resources-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/**
 * Runs `code` (an ES module with the package's sources) in a child process under an address-space
 * limit (`ulimit -v`, in kB). --jitless: without WebAssembly, tsx's module lexer does not reserve
 * gigabytes of address space for itself.
 */
function underLimit(kb: number, code: string): { status: number | null; signal: string | null; stdout: string; stderr: string } {
  const r = spawnSync(
    'bash',
    ['-c', `ulimit -v ${kb} && exec "$0" --jitless --conditions=source --import tsx --input-type=module -e "$1"`, process.execPath, code],
    { cwd: pkg, encoding: 'utf8', timeout: 120_000, env: { ...process.env, MLX_ORT_FALLBACK: 'none' } },
  );
  return { status: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

describe('allocation failures', () => {
  it('generate() under ulimit -v 4000000: kvCapacity 1e6 fits, 4e6 is a ResourceLimitError, and the process goes on', () => {
    const path = join(work, 'llama.onnx');
    writeFileSync(
      path,
      buildDecoder({ kind: 'llama', layers: 2, hidden: 64, heads: 4, kvHeads: 2, ffn: 128, vocab: 256, maxPositions: 256 }),
    );
    const r = underLimit(
      4_000_000,
      `
      import { readFileSync } from 'node:fs';
      import * as ort from 'onnxruntime-common';
      import { generate, ResourceLimitError } from './src/index.ts';
      const s = await ort.InferenceSession.create(readFileSync(${JSON.stringify(path)}), { executionProviders: [{ name: 'mlx', device: 'cpu' }] });
      const tokens = async (kvCapacity) => {
        const out = [];
        for await (const t of generate(s, { inputIds: [3, 17, 42, 99], maxNewTokens: 4, Tensor: ort.Tensor, kvCapacity })) out.push(t);
        return out;
      };
      const lines = [JSON.stringify(await tokens(1e6))];
      try {
        await tokens(4e6);
        lines.push('ran');
      } catch (e) {
        lines.push(e instanceof ResourceLimitError ? 'ResourceLimitError ' + e.code + ' ' + /out of memory|cannot be allocated/.test(e.message) : 'other: ' + e.stack);
      }
      lines.push(JSON.stringify(await tokens(64)));
      await s.release();
      console.log(lines.join('\\n'));`,
    );
    expect({ status: r.status, signal: r.signal }, r.stderr).toEqual({ status: 0, signal: null });
    const [big, bigger, small] = r.stdout.trim().split('\n');
    // Greedy decoding: the capacity of the cache does not change the tokens.
    expect(JSON.parse(big)).toHaveLength(4);
    expect(JSON.parse(big)).toEqual(JSON.parse(small));
    expect(bigger).toBe('ResourceLimitError ERR_MLX_ORT_RESOURCE_LIMIT true');
  }, 150_000);
});

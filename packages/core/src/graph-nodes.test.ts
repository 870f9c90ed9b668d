// The nodes a graph costs per evaluation, as MLXC_GRAPH_STATS counts them (in a child process: the
// setting is read once per process). On small models MLX's per-node overhead, not arithmetic, sets
// the time of a run, so these counts are what the optimizations below are for.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const index = fileURLToPath(new URL('./index.ts', import.meta.url));

/** The node counts ("Reshape 1, Transpose 1") of the last evaluation `body` makes (it gets `mx`; a read evaluates). */
function lastGraph(body: string): { nodes: number; ops: Record<string, number> } {
  const script = `import * as mx from ${JSON.stringify(index)};\n${body}`;
  const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', script], {
    env: { ...process.env, MLXC_GRAPH_STATS: '1', VITEST: undefined },
    encoding: 'utf8',
  });
  expect(r.status, r.stderr).toBe(0);
  const line = r.stderr
    .split('\n')
    .filter((l) => l.startsWith('[mlxc graph]'))
    .at(-1)!;
  const m = /\] (\d+) nodes:(.*?)(\||$)/.exec(line)!;
  const ops: Record<string, number> = {};
  for (const part of m[2].split(',')) {
    const [name, n] = part.trim().split(' ');
    if (name) ops[name] = Number(n);
  }
  return { nodes: Number(m[1]), ops };
}

describe('nodes per evaluation', () => {
  it('a captured chain of shape-only nodes replays as one Reshape', () => {
    const g = lastGraph(`
      const f = (x) => mx.reshape(mx.flatten(mx.expandDims(mx.reshape(mx.transpose(x), [4, 2, 3]), 0)), [3, 8]);
      const g = mx.captureGraph(f);
      for (let k = 0; k < 2; k++) {
        const x = mx.array(Float32Array.from({ length: 24 }, (_, i) => i + k), { shape: [4, 6] });
        const got = Array.from(g(x).toTypedArray());
        const want = Array.from(f(x).toTypedArray());
        if (got.join() !== want.join()) throw new Error('different values: ' + got + ' vs ' + want);
      }
      g(mx.zeros([4, 6]).eval()).toTypedArray();
    `);
    expect(g).toEqual({ nodes: 2, ops: { Reshape: 1, Transpose: 1 } });
  });

  it('take of boundedIndices positions adds no check of its own', () => {
    const g = lastGraph(`
      const a = mx.array(new Float32Array([10, 11, 12, 13]));
      const [pos, bad] = mx.ext.boundedIndices(mx.add(mx.array(new Int32Array([3, -1, 0])), 0), [4], true);
      mx.add(mx.take(a, pos, 0), mx.astype(bad, 'float32')).toTypedArray();
    `);
    expect(g.ops.CheckIndices).toBeUndefined();
    expect(g.ops.StopGradient).toBeUndefined();
    expect(g.ops.Contiguous).toBeUndefined();
    expect(g.ops.BoundIndices).toBe(2);
  });

  it('an elementwise op between a reshape and its inverse runs on the first shape, with neither reshape', () => {
    const g = lastGraph(`
      const f = (x) => mx.reshape(mx.tanh(mx.reshape(mx.exp(x), [2, 3, 4])), [6, 4]);
      const g = mx.captureGraph(f);
      const x = mx.array(Float32Array.from({ length: 24 }, (_, i) => i / 10), { shape: [6, 4] });
      for (let k = 0; k < 2; k++) if (Array.from(g(x).toTypedArray()).join() !== Array.from(f(x).toTypedArray()).join()) throw new Error('different values');
      g(x).toTypedArray();
    `);
    expect(g).toEqual({ nodes: 2, ops: { Exp: 1, Tanh: 1 } });
  });

  it('captured transposes of transposes compose, and cancel where they undo each other', () => {
    const g = lastGraph(`
      const f = (x) => [mx.exp(mx.transpose(mx.transpose(x, [1, 0, 2]), [1, 0, 2])), mx.transpose(mx.transpose(x, [1, 2, 0]), [1, 2, 0])];
      const g = mx.captureGraph(f);
      const x = mx.array(Float32Array.from({ length: 24 }, (_, i) => i), { shape: [2, 3, 4] });
      for (let k = 0; k < 2; k++) {
        const got = g(x).map((a) => Array.from(a.toTypedArray()).join());
        const want = f(x).map((a) => Array.from(a.toTypedArray()).join());
        if (got.join(';') !== want.join(';')) throw new Error('different values');
      }
      mx.concatenate([mx.flatten(g(x)[0]), mx.flatten(g(x)[1])], 0).toTypedArray();
    `);
    // exp(x), and one Transpose of x instead of two.
    expect(g.ops.Transpose).toBe(1);
    expect(g.ops.Exp).toBe(1);
  });

  it("a bidirectional LSTM layer's [T, B, 2H] output takes no Transpose or copy in a capture", () => {
    const g = lastGraph(`
      const T = 3, B = 2, H = 4;
      const ones = (s) => mx.multiply(mx.ones(s), 0.1).eval();
      const rt = ones([2, H, 4 * H]), z = mx.zeros([2, B, H]).eval();
      const acts = [2, 0, 0, 1, 0, 0, 1, 0, 0, 2, 0, 0, 1, 0, 0, 1, 0, 0]; // sigmoid, tanh, tanh per direction
      const f = (proj) => mx.reshape(mx.transpose(mx.ext.lstm(proj, rt, z, z, null, null, acts, Infinity, false, 2)[0], [0, 2, 1, 3]), [T, B, 2 * H]);
      const g = mx.captureGraph(f);
      const proj = mx.array(Float32Array.from({ length: T * B * 8 * H }, (_, i) => Math.sin(i)), { shape: [T, B, 8 * H] });
      for (let k = 0; k < 2; k++) if (Array.from(g(proj).toTypedArray()).join() !== Array.from(f(proj).toTypedArray()).join()) throw new Error('different values');
      g(proj).toTypedArray();
    `);
    expect(g).toEqual({ nodes: 2, ops: { Lstm: 1, Reshape: 1 } });
  });
});

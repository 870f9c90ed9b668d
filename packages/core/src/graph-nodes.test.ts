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
});

// Which forward attention takes on the CPU for float32 queries (prefill, encoders, decoding): the
// native attention primitive (ext.fusedAttention), never MLX's fused op, which on the CPU is a
// composition whose softmax evaluates exp one float at a time (a 512-token prefill of a 7M
// Llama-shaped decoder spent about half its time there), nor the composite's two batched matmuls
// (OpenBLAS once per batch entry and head) around the fused softmax kernel. The graph an
// evaluation runs is counted by MLXC_GRAPH_STATS, read once per process: a child process.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const core = fileURLToPath(new URL('../../../core/src/index.ts', import.meta.url));
const kernels = fileURLToPath(new URL('../index.ts', import.meta.url));

function lastGraphOps(body: string): Record<string, number> {
  const script = `import * as mx from ${JSON.stringify(core)};\nimport * as k from ${JSON.stringify(kernels)};\n${body}`;
  const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', script], {
    env: { ...process.env, MLXC_GRAPH_STATS: '1', VITEST: undefined },
    encoding: 'utf8',
  });
  expect(r.status, r.stderr).toBe(0);
  const line = r.stderr
    .split('\n')
    .filter((l) => l.startsWith('[mlxc graph]'))
    .at(-1) as string;
  const m = /\] (\d+) nodes:(.*?)(\||$)/.exec(line) as RegExpExecArray;
  const ops: Record<string, number> = {};
  for (const part of m[2].split(',')) {
    const [name, n] = part.trim().split(' ');
    if (name) ops[name] = Number(n);
  }
  return ops;
}

const inputs = `
const data = (n) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 0.37));
const q = mx.Array.fromTypedArray(data(1 * 4 * 16 * 8), [1, 4, 16, 8], 'float32');
const kk = mx.Array.fromTypedArray(data(1 * 2 * 16 * 8), [1, 2, 16, 8], 'float32');
const v = mx.Array.fromTypedArray(data(1 * 2 * 16 * 8), [1, 2, 16, 8], 'float32');
mx.evaluate(q, kk, v);
`;

describe('attention on the CPU, float32, several query rows', () => {
  it("'auto' runs the native attention primitive alone, not MLX's fused op, its products or a softmax", () => {
    const ops = lastGraphOps(`${inputs}\nk.scaledDotProductAttention(q, kk, v, { causal: true }).toTypedArray();`);
    expect(
      Object.keys(ops).some((name) => /ScaledDotProductAttention/.test(name)),
      JSON.stringify(ops),
    ).toBe(false);
    expect(ops.FusedAttention, JSON.stringify(ops)).toBe(1);
    expect(ops.Softmax, JSON.stringify(ops)).toBeUndefined();
    expect(ops.FusedSoftmax, JSON.stringify(ops)).toBeUndefined();
    expect(ops.Matmul, JSON.stringify(ops)).toBeUndefined();
  });

  it("'auto' reads a boolean mask narrower than the keys in place: no pad, no where", () => {
    const ops = lastGraphOps(
      `${inputs}\nconst m = mx.Array.fromTypedArray(Uint8Array.from({ length: 12 }, (_, i) => (i % 3 ? 1 : 0)), [1, 1, 1, 12], 'bool');\nk.scaledDotProductAttention(q, kk, v, { mask: m }).toTypedArray();`,
    );
    expect(ops.FusedAttention, JSON.stringify(ops)).toBe(1);
    expect(ops.Pad, JSON.stringify(ops)).toBeUndefined();
    expect(ops.Select, JSON.stringify(ops)).toBeUndefined();
  });

  it("'auto' takes the native primitive for one query row (decoding) too", () => {
    const ops = lastGraphOps(
      `${inputs}\nconst q1 = mx.Array.fromTypedArray(data(1 * 4 * 1 * 8), [1, 4, 1, 8], 'float32');\nk.scaledDotProductAttention(q1, kk, v).toTypedArray();`,
    );
    expect(ops.FusedAttention, JSON.stringify(ops)).toBe(1);
    expect(ops.SmallMatmul, JSON.stringify(ops)).toBeUndefined();
  });

  it("'composite' still runs the products and the fused softmax row kernel", () => {
    const ops = lastGraphOps(
      `${inputs}\nk.scaledDotProductAttention(q, kk, v, { causal: true, implementation: 'composite' }).toTypedArray();`,
    );
    expect(ops.FusedAttention, JSON.stringify(ops)).toBeUndefined();
    expect(ops.FusedSoftmax, JSON.stringify(ops)).toBe(1);
    expect(ops.Matmul, JSON.stringify(ops)).toBe(2);
  });

  // (On the CPU MLX's fused op is decomposed as it is built: its Softmax shows.)
  it("'fused' still asks for MLX's fused op", () => {
    const ops = lastGraphOps(`${inputs}\nk.scaledDotProductAttention(q, kk, v, { causal: true, implementation: 'fused' }).toTypedArray();`);
    expect(ops.Softmax, JSON.stringify(ops)).toBe(1);
    expect(ops.FusedSoftmax, JSON.stringify(ops)).toBeUndefined();
  });
});

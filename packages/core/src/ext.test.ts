// The project's own kernels are in the `ext` namespace, apart from MLX's ops: every kernel of
// @mlx/sys's spec/kernels is there, and none of them is a top-level export.
import { describe, expect, it } from 'vitest';
import { kernels } from '../../sys/spec/index.js';
import { parseProto } from '../../sys/spec/dsl.js';
import * as mx from './index.js';

const camel = (s: string) => s.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
const kernelOps = Object.values(kernels)
  .flat()
  .filter((s) => s.kind === 'op')
  .map((s) => camel(parseProto(s.proto).name.replace(/^mlxc_/, '')));

describe('ext', () => {
  it('holds every kernel op of the spec, and nothing else', () => {
    expect(Object.keys(mx.ext).sort()).toEqual([...kernelOps].sort());
    expect(kernelOps).toContain('smallMatmul');
  });

  it('the kernels are not top-level exports', () => {
    for (const name of kernelOps) expect(name in mx, name).toBe(false);
  });

  it('computes as before: ext.smallMatmul is a matrix product', () => {
    const a = mx.array(new Float32Array([1, 2, 3, 4]), { shape: [2, 2] });
    const y = mx.ext.smallMatmul(a, a);
    expect(Array.from(y.toTypedArray() as Float32Array)).toEqual([7, 10, 15, 22]);
  });
});

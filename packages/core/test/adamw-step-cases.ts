// ext.adamwStep (the fused AdamW kernel) against a float64 loop of torch.optim.AdamW's update,
// written here from its documented formula; shared by the builds' test files (one per instruction
// set, chosen with MLXC_CPU_KERNELS before the first call).
import { describe, expect, it } from 'vitest';
import * as mx from '../src/index.js';
import { flat, inputs } from './numeric.js';

/** |got - want| <= atol + rtol * |want| everywhere (one expect, naming the first bad element: the arrays are large). */
function expectAllClose(actual: mx.Array, want: readonly number[], rtol: number, atol: number): void {
  const got = flat(actual);
  expect(got.length).toBe(want.length);
  const bad = got.findIndex((x, i) => !(Math.abs(x - want[i]) <= atol + rtol * Math.abs(want[i])));
  expect(bad, bad < 0 ? '' : `element ${bad}: got ${got[bad]}, expected ${want[bad]}`).toBe(-1);
}

interface Hyper {
  lr: number;
  b1: number;
  b2: number;
  eps: number;
  wd: number;
}

/** One step of torch.optim.AdamW in float64 (m, v undefined: the first step, zeros). */
export function adamwRef(p: number[], g: number[], m: number[] | undefined, v: number[] | undefined, h: Hyper, t: number) {
  const c1 = 1 - h.b1 ** t;
  const c2 = 1 - h.b2 ** t;
  const m1 = g.map((gi, i) => h.b1 * (m ? m[i] : 0) + (1 - h.b1) * gi);
  const v1 = g.map((gi, i) => h.b2 * (v ? v[i] : 0) + (1 - h.b2) * gi * gi);
  const p1 = p.map((pi, i) => pi * (1 - h.lr * h.wd) - (h.lr / c1) * (m1[i] / (Math.sqrt(v1[i]) / Math.sqrt(c2) + h.eps)));
  return { p: p1, m: m1, v: v1 };
}

const step = (p: mx.Array, g: mx.Array, m: mx.Array | null, v: mx.Array | null, h: Hyper, t: number) =>
  mx.ext.adamwStep(p, g, m, v, h.lr, h.b1, h.b2, h.eps, h.wd, t);

/**
 * `steps` steps over n elements with fresh gradients each step, the kernel's outputs fed back (the
 * old ones released, so that the moments' buffers are donated), checked against the reference at
 * every step.
 */
function checkRun(n: number, h: Hyper, steps: number, dtype: mx.Dtype = 'float32', rtol = 2e-6, atol = 1e-6) {
  let pRef = inputs(n, -1, 1, 3);
  let mRef: number[] | undefined;
  let vRef: number[] | undefined;
  let p = mx.array(pRef, { dtype });
  let m: mx.Array | null = null;
  let v: mx.Array | null = null;
  if (dtype !== 'float32') pRef = flat(p.astype('float32'));
  for (let t = 1; t <= steps; t++) {
    let gRef = inputs(n, -2, 2, 100 + t);
    const g = mx.array(gRef, { dtype });
    if (dtype !== 'float32') gRef = flat(g.astype('float32'));
    const out = step(p, g, m, v, h, t);
    mx.dispose([p, g]);
    if (m) mx.dispose([m, v!]);
    mx.evaluate(out);
    [p, m, v] = out;
    expect(p.dtype).toBe(dtype);
    const want = adamwRef(pRef, gRef, mRef, vRef, h, t);
    expectAllClose(m.astype('float32'), want.m, rtol, atol);
    expectAllClose(v.astype('float32'), want.v, rtol, atol * 1e-2);
    expectAllClose(p.astype('float32'), want.p, rtol, atol);
    // The next step starts from what this one gave (the reference too, so errors do not compound).
    [pRef, mRef, vRef] = [flat(p.astype('float32')), flat(m.astype('float32')), flat(v.astype('float32'))];
  }
  mx.dispose([p, m!, v!]);
}

const torchDefaults: Hyper = { lr: 1e-3, b1: 0.9, b2: 0.999, eps: 1e-8, wd: 0.01 };

export function adamwStepSuite(build: string): void {
  describe(`ext.adamwStep (${build})`, () => {
    it('matches torch.optim.AdamW over several steps, the first without moments', () => {
      checkRun(37, { ...torchDefaults, wd: 0 }, 5);
      checkRun(37, torchDefaults, 5);
      checkRun(37, { lr: 0.05, b1: 0.8, b2: 0.95, eps: 1e-3, wd: 0.5 }, 5);
    });

    it('covers the vector bodies, their tails and several thread blocks', () => {
      // 1 and 7: a tail alone; 16 and 17: one vector and a tail; 40000: blocks of 16384 on threads.
      for (const n of [1, 7, 8, 16, 17, 40000]) checkRun(n, torchDefaults, 2);
    });

    it('takes strided, transposed and broadcast inputs', () => {
      const h = { lr: 0.01, b1: 0.9, b2: 0.99, eps: 1e-6, wd: 0.1 };
      const base = mx.array(inputs(24, -1, 1, 5), { shape: [4, 6] });
      const p = mx.transpose(base); // [6, 4], column order
      const gBase = mx.array(inputs(48, -2, 2, 6), { shape: [6, 8] });
      const g = mx.slice(gBase, [0, 0], [6, 8], [1, 2]); // every other column
      const m = mx.broadcastTo(mx.array(inputs(4, -0.5, 0.5, 7)), [6, 4]);
      const v = mx.transpose(mx.array(inputs(24, 0, 1, 8), { shape: [4, 6] }));
      const want = adamwRef(flat(mx.copy(p)), flat(mx.copy(g)), flat(mx.copy(m)), flat(mx.copy(v)), h, 3);
      const [p1, m1, v1] = step(p, g, m, v, h, 3);
      expect(p1.shape).toEqual([6, 4]);
      expectAllClose(p1, want.p, 2e-6, 1e-6);
      expectAllClose(m1, want.m, 2e-6, 1e-7);
      expectAllClose(v1, want.v, 2e-6, 1e-9);
      mx.dispose([base, p, gBase, g, m, v, p1, m1, v1]);
    });

    it('updates donated moments in place and leaves a moment still referenced as it was', () => {
      const n = 1 << 20; // 4 MiB an array
      const h = torchDefaults;
      const p = mx.array(inputs(n, -1, 1, 11));
      const g = mx.array(inputs(n, -1, 1, 12));
      let m = mx.array(inputs(n, -0.1, 0.1, 13));
      let v = mx.array(inputs(n, 0, 0.01, 14));
      mx.evaluate([p, g, m, v]);
      const mBefore = flat(m);
      const vBefore = flat(v);
      // Still referenced: the caller keeps m (and a view of v sharing its buffer).
      const vView = mx.reshape(v, [n / 4, 4]);
      mx.evaluate(vView);
      const kept = step(p, g, m, v, h, 2);
      mx.evaluate(kept);
      expect(flat(m).every((x, i) => x === mBefore[i])).toBe(true);
      expect(flat(vView).every((x, i) => x === vBefore[i])).toBe(true);
      const want = adamwRef(flat(p), flat(g), mBefore, vBefore, h, 2);
      expectAllClose(kept[0], want.p, 2e-6, 1e-6);
      expectAllClose(kept[1], want.m, 2e-6, 1e-7);
      mx.dispose([kept, vView]);
      // Donated: released before the evaluation, the moments' buffers become the new moments',
      // so the step allocates the new parameter alone (p is still the caller's).
      m = mx.array(mBefore);
      v = mx.array(vBefore);
      mx.evaluate([m, v]);
      const out = step(p, g, m, v, h, 2);
      mx.dispose([m, v]);
      mx.memory.resetPeak();
      const before = mx.memory.active();
      mx.evaluate(out);
      expect(mx.memory.peak() - before).toBeLessThan(2 * n * 4);
      expectAllClose(out[0], want.p, 2e-6, 1e-6);
      expectAllClose(out[2], want.v, 2e-6, 1e-9);
      mx.dispose([p, g, out]);
    });

    it('computes other dtypes with MLX ops (float16, bfloat16), and empty parameters', () => {
      checkRun(19, { lr: 0.05, b1: 0.9, b2: 0.99, eps: 1e-3, wd: 0.1 }, 3, 'float16', 2e-3, 2e-3);
      checkRun(19, { lr: 0.05, b1: 0.9, b2: 0.99, eps: 1e-3, wd: 0.1 }, 3, 'bfloat16', 1e-2, 1e-2);
      const [p, m, v] = step(mx.zeros([0, 3]), mx.zeros([0, 3]), null, null, torchDefaults, 1);
      expect([p.shape, m.shape, v.shape]).toEqual([
        [0, 3],
        [0, 3],
        [0, 3],
      ]);
      mx.dispose([p, m, v]);
    });

    it('refuses bad arguments with a message naming them', () => {
      const p = mx.zeros([2, 3]);
      const h = torchDefaults;
      expect(() => step(p, mx.zeros([3, 2]), null, null, h, 1)).toThrow(/adamw_step: grad has shape \[3, 2\], the parameter \[2, 3\]/);
      expect(() => step(p, p, mx.zeros([6]), mx.zeros([6]), h, 2)).toThrow(/adamw_step: m has shape \[6\], the parameter \[2, 3\]/);
      expect(() => step(p, p, p, null, h, 2)).toThrow(/give both moments m and v \(a later step\) or neither/);
      expect(() => step(p, p, null, null, h, 0)).toThrow(/step must be 1 or more/);
      expect(() => step(p, p, null, null, { ...h, lr: -1 }, 1)).toThrow(/lr must be a finite number in \[0, inf\], got -1/);
      expect(() => step(p, p, null, null, { ...h, b1: 1 }, 1)).toThrow(/beta1 must be a finite number in \[0, 1\), got 1/);
      expect(() => step(p, p, null, null, { ...h, b2: Number.NaN }, 1)).toThrow(/beta2 must be a finite number/);
      expect(() => step(p, p, null, null, { ...h, eps: Number.POSITIVE_INFINITY }, 1)).toThrow(/eps must be a finite number/);
      expect(() => step(p, p, null, null, { ...h, wd: -0.1 }, 1)).toThrow(/weight_decay must be a finite number/);
      expect(() => step(p, p, null, null, h, 1.5)).toThrow(/step/);
      mx.dispose(p);
    });
  });
}

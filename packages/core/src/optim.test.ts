// The optimizers against float64 references written here from the update rules torch.optim's
// documentation gives for SGD and AdamW (torch is not a test dependency): several steps on a loss
// whose gradient depends on the parameters, so that the state and the bias corrections matter.
// Gradient clipping against torch.nn.utils.clip_grad_norm_'s rule, accumulation against sums.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { expectAllClose, flat, inputs } from '../test/numeric.js';

const { SGD, AdamW, clipGradNorm, GradientAccumulator, accumulateGradients } = mx.optim;

// loss(p) = sum(a * p^2 + b * p) over two parameters: its gradient is 2 a p + b.
const shapes: Record<string, number[]> = { w: [2, 3], b: [4] };
const init: Record<string, number[]> = { w: inputs(6, -1, 1, 3), b: inputs(4, -1, 1, 5) };
const coefA: Record<string, number[]> = { w: inputs(6, 0.2, 2, 7), b: inputs(4, 0.2, 2, 9) };
const coefB: Record<string, number[]> = { w: inputs(6, -1, 1, 11), b: inputs(4, -1, 1, 13) };

const gradRef = (name: string, p: number[]) => p.map((x, i) => 2 * coefA[name][i] * x + coefB[name][i]);

function gradsOf(params: mx.optim.NamedArrays): mx.optim.NamedArrays {
  const names = Object.keys(params);
  const loss = (...xs: mx.Array[]) =>
    xs
      .map((x, i) => {
        const n = names[i];
        const a = mx.array(coefA[n], { shape: shapes[n] });
        const b = mx.array(coefB[n], { shape: shapes[n] });
        return mx.sum(mx.add(mx.multiply(a, mx.square(x)), mx.multiply(b, x)));
      })
      .reduce((s, v) => mx.add(s, v));
  const gs = mx.grad(
    loss,
    names.map((_, i) => i),
  )(...names.map((n) => params[n])) as unknown as mx.Array[];
  return Object.fromEntries(names.map((n, i) => [n, gs[i]]));
}

const fresh = (): mx.optim.NamedArrays => Object.fromEntries(Object.keys(shapes).map((n) => [n, mx.array(init[n], { shape: shapes[n] })]));

/** Runs `steps` steps of `opt` from the initial parameters; returns each step's parameters as numbers. */
function train(
  opt: mx.optim.Optimizer,
  steps: number,
  start = fresh(),
): { trace: Record<string, number[]>[]; params: mx.optim.NamedArrays } {
  let params = start;
  const trace: Record<string, number[]>[] = [];
  for (let t = 0; t < steps; t++) {
    const grads = gradsOf(params);
    params = opt.step(params, grads);
    mx.dispose(grads);
    trace.push(Object.fromEntries(Object.entries(params).map(([k, a]) => [k, flat(a)])));
  }
  return { trace, params };
}

interface SgdRef {
  lr: number;
  momentum: number;
  dampening: number;
  nesterov: boolean;
  weightDecay: number;
}
function sgdReference(o: SgdRef, steps: number): Record<string, number[]>[] {
  const p: Record<string, number[]> = { w: [...init.w], b: [...init.b] };
  const buf: Record<string, number[] | undefined> = {};
  const out: Record<string, number[]>[] = [];
  for (let t = 1; t <= steps; t++) {
    for (const n of Object.keys(p)) {
      let g = gradRef(n, p[n]);
      if (o.weightDecay) g = g.map((x, i) => x + o.weightDecay * p[n][i]);
      if (o.momentum) {
        const prev = buf[n];
        const b = t > 1 && prev ? prev.map((x, i) => o.momentum * x + (1 - o.dampening) * g[i]) : [...g];
        buf[n] = b;
        g = o.nesterov ? g.map((x, i) => x + o.momentum * b[i]) : b;
      }
      p[n] = p[n].map((x, i) => x - o.lr * g[i]);
    }
    out.push({ w: [...p.w], b: [...p.b] });
  }
  return out;
}

function adamwReference(lr: number, b1: number, b2: number, eps: number, wd: number, steps: number): Record<string, number[]>[] {
  const p: Record<string, number[]> = { w: [...init.w], b: [...init.b] };
  const m: Record<string, number[]> = { w: init.w.map(() => 0), b: init.b.map(() => 0) };
  const v: Record<string, number[]> = { w: init.w.map(() => 0), b: init.b.map(() => 0) };
  const out: Record<string, number[]>[] = [];
  for (let t = 1; t <= steps; t++) {
    for (const n of Object.keys(p)) {
      const g = gradRef(n, p[n]);
      const decayed = p[n].map((x) => x - lr * wd * x);
      m[n] = m[n].map((x, i) => b1 * x + (1 - b1) * g[i]);
      v[n] = v[n].map((x, i) => b2 * x + (1 - b2) * g[i] * g[i]);
      p[n] = decayed.map((x, i) => {
        const mHat = m[n][i] / (1 - b1 ** t);
        const vHat = v[n][i] / (1 - b2 ** t);
        return x - (lr * mHat) / (Math.sqrt(vHat) + eps);
      });
    }
    out.push({ w: [...p.w], b: [...p.b] });
  }
  return out;
}

function expectTrace(got: Record<string, number[]>[], want: Record<string, number[]>[]): void {
  expect(got.length).toBe(want.length);
  got.forEach((step, t) => {
    for (const n of Object.keys(want[t])) expectAllClose(step[n], want[t][n], 1e-5, 1e-6);
  });
}

describe('SGD against torch.optim.SGD', () => {
  const cases: [string, SgdRef][] = [
    ['plain', { lr: 0.1, momentum: 0, dampening: 0, nesterov: false, weightDecay: 0 }],
    ['momentum', { lr: 0.05, momentum: 0.9, dampening: 0, nesterov: false, weightDecay: 0 }],
    ['momentum with dampening and weight decay', { lr: 0.05, momentum: 0.8, dampening: 0.3, nesterov: false, weightDecay: 0.1 }],
    ['nesterov with weight decay', { lr: 0.03, momentum: 0.9, dampening: 0, nesterov: true, weightDecay: 0.05 }],
  ];
  for (const [label, o] of cases)
    it(label, () => {
      const opt = new SGD(o);
      const { trace, params } = train(opt, 6);
      expectTrace(trace, sgdReference(o, 6));
      expect(opt.state().step).toBe(6);
      mx.dispose(params);
      opt.dispose();
    });

  it('a learning-rate schedule is asked for each step (1-based)', () => {
    const seen: number[] = [];
    const opt = new SGD({
      lr: (t) => {
        seen.push(t);
        return 0.1;
      },
    });
    mx.dispose(train(opt, 3).params);
    expect(seen).toEqual([1, 2, 3]);
    expect(opt.learningRate()).toBe(0.1);
  });
});

describe('AdamW against torch.optim.AdamW', () => {
  it('default betas and eps, weight decay 0.01 (the torch default)', () => {
    const opt = new AdamW({ lr: 0.05 });
    const { trace, params } = train(opt, 8);
    expectTrace(trace, adamwReference(0.05, 0.9, 0.999, 1e-8, 0.01, 8));
    mx.dispose(params);
    opt.dispose();
  });

  it('other betas, eps and a large weight decay', () => {
    const opt = new AdamW({ lr: 0.02, betas: [0.8, 0.95], eps: 1e-3, weightDecay: 0.5 });
    const { trace, params } = train(opt, 8);
    expectTrace(trace, adamwReference(0.02, 0.8, 0.95, 1e-3, 0.5, 8));
    mx.dispose(params);
    opt.dispose();
  });

  it('the composed path (fused: false) matches torch too, and the fused kernel to float32 rounding', () => {
    for (const [wd, lr] of [
      [0, 0.05],
      [0.5, 0.02],
    ]) {
      const want = adamwReference(lr, 0.8, 0.95, 1e-3, wd, 8);
      const composed = new AdamW({ lr, betas: [0.8, 0.95], eps: 1e-3, weightDecay: wd, fused: false });
      const fusedOpt = new AdamW({ lr, betas: [0.8, 0.95], eps: 1e-3, weightDecay: wd });
      expect([composed.fused, fusedOpt.fused]).toEqual([false, true]);
      const a = train(composed, 8);
      const b = train(fusedOpt, 8);
      expectTrace(a.trace, want);
      // The kernel runs the composed path's float32 operations in its order: a few ulps at most.
      b.trace.forEach((step, t) => {
        for (const n of Object.keys(step)) expectAllClose(step[n], a.trace[t][n], 4e-7, 1e-7);
      });
      mx.dispose([a.params, b.params]);
      composed.dispose();
      fusedOpt.dispose();
    }
  });

  it('state() and loadState() carry a run on: 3 + 5 steps equal 8', () => {
    const first = new AdamW({ lr: 0.05 });
    const part = train(first, 3);
    const saved = first.state();
    expect(Object.keys(saved.slots).sort()).toEqual(['b', 'w']);
    expect(Object.keys(saved.slots.w).sort()).toEqual(['m', 'v']);
    first.dispose();
    const second = new AdamW({ lr: 0.05 });
    second.loadState(saved);
    mx.dispose(saved); // loadState copied it
    const rest = train(second, 5, part.params);
    expectTrace([...part.trace, ...rest.trace], adamwReference(0.05, 0.9, 0.999, 1e-8, 0.01, 8));
    mx.dispose(rest.params);
    second.dispose();
  });
});

describe('step() ownership and checks', () => {
  it('disposes the parameters it replaces, keeps the ones without a gradient, leaves the gradients', () => {
    const opt = new SGD({ lr: 0.1, momentum: 0.9 });
    const params = fresh();
    const extra = mx.array([1, 2]);
    const grads = gradsOf(params);
    const next = opt.step({ ...params, extra }, { w: grads.w });
    expect(params.w.disposed).toBe(true);
    expect(params.b.disposed).toBe(false);
    expect(next.b).toBe(params.b);
    expect(next.extra).toBe(extra);
    expect(grads.w.disposed).toBe(false);
    expectAllClose(
      next.w,
      init.w.map((x, i) => x - 0.1 * gradRef('w', init.w)[i]),
      1e-6,
      1e-6,
    );
    mx.dispose([next, grads]);
    opt.dispose();
  });

  it('names the gradient that has no parameter or another shape', () => {
    const opt = new AdamW();
    const params = fresh();
    expect(() => opt.step(params, { nope: mx.zeros([2]) })).toThrow(/a gradient for 'nope', which is not among the params \(w, b\)/);
    expect(() => opt.step(params, { w: mx.zeros([3, 2]) })).toThrow(/the gradient of 'w' has shape \[3, 2\], the parameter \[2, 3\]/);
    expect(() => opt.step(params, { w: 1 as unknown as mx.Array })).toThrow(TypeError);
    expect(params.w.disposed).toBe(false);
    expect(opt.state().step).toBe(0);
    mx.dispose(params);
  });

  it('refuses bad hyperparameters', () => {
    expect(() => new SGD({ lr: -1 })).toThrow(/lr must be a non-negative number/);
    expect(() => new SGD({ lr: 0.1, nesterov: true })).toThrow(/nesterov momentum needs a momentum > 0/);
    expect(() => new AdamW({ betas: [1, 0.9] })).toThrow(/betas\[0\] must be a number in \[0, 1\)/);
    expect(() => new AdamW({ fused: 'yes' as unknown as boolean })).toThrow(/AdamW: fused must be true or false, got yes/);
    expect(() => new AdamW().loadState({ step: 1, slots: { w: { m: mx.zeros([1]) } } })).toThrow(/state.slots\['w'\] lacks v/);
  });

  it('keeps memory flat over many steps (no parameter or state array left behind)', () => {
    // 256 KiB per array: one array kept per step would show as megabytes.
    const opt = new AdamW({ lr: 0.01 });
    let params: mx.optim.NamedArrays = { big: mx.ones([256, 256]) };
    const step = () => {
      const g = { big: mx.multiply(params.big, 0.1) };
      params = opt.step(params, g);
      mx.dispose(g);
    };
    step();
    const before = mx.memory.active();
    for (let i = 0; i < 20; i++) step();
    expect(mx.memory.active() - before).toBeLessThan(1 << 18);
    mx.dispose(params);
    opt.dispose();
  });
});

describe('step() memory', () => {
  it('updates a group of parameters at a time: the peak grows by a group, not by every parameter', () => {
    // 16 parameters of 1 MiB; AdamW makes three arrays per parameter (p, m, v) and a few
    // temporaries. All at once, the step's peak was 68 MiB above what it starts with; a parameter
    // at a time, 6 MiB; with the old moments' buffers reused for the new ones (in place), 4 MiB.
    const opt = new AdamW({ lr: 0.01, groupBytes: 1 << 20 });
    let params: mx.optim.NamedArrays = {};
    for (let i = 0; i < 16; i++) params[`w${i}`] = mx.multiply(mx.ones([512, 512]), i + 1);
    mx.evaluate(Object.values(params));
    const grads: mx.optim.NamedArrays = {};
    for (const [n, p] of Object.entries(params)) grads[n] = mx.multiply(p, 0.1);
    mx.evaluate(Object.values(grads));
    const peakOfStep = () => {
      mx.memory.resetPeak();
      const before = mx.memory.active();
      params = opt.step(params, grads);
      return mx.memory.peak() - before;
    };
    peakOfStep(); // the first step makes the slots (m, v): 32 MiB that stay
    const growth = peakOfStep();
    expect(growth).toBeLessThan(5 << 20);
    expect(opt.state().step).toBe(2);
    mx.dispose([params, grads]);
    opt.dispose();
  });

  it('gives the same parameters in groups as all at once', () => {
    const run = (groupBytes: number) => {
      const opt = new AdamW({ lr: 0.05, groupBytes });
      let params: mx.optim.NamedArrays = {
        a: mx.array([1, 2, 3]),
        b: mx.array([
          [4, 5],
          [6, 7],
        ]),
        c: mx.array([0.5]),
      };
      for (let s = 0; s < 3; s++) {
        const grads = { a: mx.multiply(params.a, 0.3), b: mx.multiply(params.b, -0.2), c: mx.add(params.c, 1) };
        params = opt.step(params, grads);
        mx.dispose(grads);
      }
      const out = Object.fromEntries(Object.entries(params).map(([k, v]) => [k, [...v.toTypedArray()]]));
      mx.dispose(params);
      opt.dispose();
      return out;
    };
    expect(run(4)).toEqual(run(1 << 30));
  });

  it('refuses a groupBytes that is not a positive number', () => {
    expect(() => new AdamW({ groupBytes: 0 })).toThrow(/groupBytes must be a number in \[1, /);
    expect(() => new SGD({ lr: 0.1, groupBytes: Number.NaN })).toThrow(/groupBytes/);
  });
});

describe('clipGradNorm', () => {
  it('scales by maxNorm / (norm + 1e-6) when the global norm is larger, as clip_grad_norm_', () => {
    const gw = inputs(6, -3, 3, 21);
    const gb = inputs(4, -3, 3, 23);
    const norm = Math.sqrt([...gw, ...gb].reduce((s, x) => s + x * x, 0));
    const { grads, norm: got } = clipGradNorm({ w: mx.array(gw, { shape: [2, 3] }), b: mx.array(gb) }, 1.5);
    expectAllClose(got, [norm], 1e-6, 0);
    const c = 1.5 / (norm + 1e-6);
    expectAllClose(
      grads.w,
      gw.map((x) => x * c),
      1e-6,
      1e-7,
    );
    expectAllClose(
      grads.b,
      gb.map((x) => x * c),
      1e-6,
      1e-7,
    );
  });

  it('leaves gradients under the norm as they are', () => {
    const { grads } = clipGradNorm({ a: mx.array([0.3, -0.4]) }, 1);
    expectAllClose(grads.a, [0.3, -0.4], 1e-7, 0);
  });
});

describe('gradient accumulation', () => {
  it('sums (or averages) the gradients of k micro-batches', () => {
    const parts = [0, 1, 2].map((k) => inputs(4, -1, 1, 30 + k));
    const sum = parts[0].map((_, i) => parts[0][i] + parts[1][i] + parts[2][i]);
    const total = accumulateGradients(3, (k) => ({ g: mx.array(parts[k]) }));
    expectAllClose(total.g, sum, 1e-6, 1e-7);
    const mean = accumulateGradients(3, (k) => ({ g: mx.array(parts[k]) }), { mean: true });
    expectAllClose(
      mean.g,
      sum.map((x) => x / 3),
      1e-6,
      1e-7,
    );
    mx.dispose([total, mean]);
  });

  it('one step on accumulated micro-batch gradients equals one step on the whole batch', () => {
    // The loss is a sum over micro-batches, so the sum of their gradients is the whole gradient.
    const params = fresh();
    const whole = gradsOf(params);
    const acc = new GradientAccumulator();
    for (let k = 0; k < 2; k++) {
      const half = Object.fromEntries(Object.entries(gradsOf(params)).map(([n, g]) => [n, mx.multiply(g, 0.5)]));
      acc.add(half);
      mx.dispose(half);
    }
    expect(acc.count).toBe(2);
    const summed = acc.take();
    expect(acc.count).toBe(0);
    for (const n of Object.keys(whole)) expectAllClose(summed[n], flat(whole[n]), 1e-6, 1e-7);
    expect(() => acc.take()).toThrow(/take\(\) before any add\(\)/);
    acc.add({ w: mx.zeros([2, 3]) });
    expect(() => acc.add({ b: mx.zeros([4]) })).toThrow(/micro-batch 2 has gradients for b, the earlier ones for w/);
    acc.dispose();
    mx.dispose([params, whole, summed]);
  });
});

// HostProgram's static executor: a captureGraph() function's trace run primitive by primitive in
// tape order (mlxc_capture_run_host), each intermediate freed after its last use. Every graph is
// run three ways on new data each time: the executor, the replay and MLX's evaluation it replaces
// (MLXC_STATIC_EXEC=0, read on each run), and the same function applied eagerly; all three must
// agree exactly, and only the first may count as a static run.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { dtypeCode } from './dtype.js';
import * as mx from './index.js';
import { check, fn } from './native.js';
import { closureOfCompiled } from './transforms.js';

const rand = (n: number, seed: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(seed * 97 + i * 1.3) * 2);

function withStaticExec<T>(on: boolean, body: () => T): T {
  const prev = process.env.MLXC_STATIC_EXEC;
  process.env.MLXC_STATIC_EXEC = on ? '1' : '0';
  try {
    return body();
  } finally {
    if (prev === undefined) delete process.env.MLXC_STATIC_EXEC;
    else process.env.MLXC_STATIC_EXEC = prev;
  }
}

type Fn = (...xs: mx.Array[]) => mx.Array[];

const hasCxx = spawnSync('sh', ['-c', 'command -v g++'], { encoding: 'utf8' }).status === 0;

/** The executor runs inside the inline CPU mode: with that off (MLXC_INLINE_EVAL=0) every run replays. */
const engages = process.env.MLXC_INLINE_EVAL !== '0';

/** Runs `f` through one HostProgram both ways and eagerly, `rounds` times on new inputs; returns the static runs counted. */
function agree(
  f: Fn,
  inputs: mx.HostSlot[],
  rounds = 3,
  data = (i: number, k: number, n: number) => rand(n, 7 * k + i),
  engaged = engages,
): number {
  const g = mx.captureGraph(f);
  const n = (s: mx.HostSlot) => s.shape.reduce((a, b) => a * b, 1);
  const eagerOf = (xs: Float32Array[]) => f(...xs.map((x, i) => mx.array(x, { shape: [...inputs[i].shape] })));
  const results = eagerOf(inputs.map((s, i) => data(i, 0, n(s)))).map((r) => ({ dtype: r.dtype, shape: r.shape }));
  const p = new mx.HostProgram(g, inputs, results);
  const before = mx.hostProgramStaticRuns();
  let counted = 0;
  for (let k = 1; k <= rounds; k++) {
    const xs = inputs.map((s, i) => data(i, k, n(s)));
    const expected = eagerOf(xs).map((r) => Array.from(r.toTypedArray() as ArrayLike<number>));
    // The off run first: a run of the executor that changed shared state (a constant donated,
    // say) would show in the runs after it.
    const off = withStaticExec(false, () => p.run(xs));
    expect(mx.hostProgramStaticRuns() - before).toBe(counted);
    const on = withStaticExec(true, () => p.run(xs));
    if (engaged) counted++;
    expect(mx.hostProgramStaticRuns() - before).toBe(counted);
    expect(off.map((r) => Array.from(r as ArrayLike<number>))).toEqual(expected);
    expect(on.map((r) => Array.from(r as ArrayLike<number>))).toEqual(expected);
    // The inputs are the caller's: never written.
    expect(xs).toEqual(inputs.map((s, i) => data(i, k, n(s))));
  }
  g.dispose();
  return counted;
}

const f32 = (...shape: number[]): mx.HostSlot => ({ dtype: 'float32', shape });

describe('HostProgram static executor', () => {
  it('runs multi-output primitives, using one or all of their outputs', () => {
    agree(
      (x, y) => {
        const [q, r] = mx.divmod(x, mx.add(mx.abs(y), 1));
        return [mx.add(q, 1), mx.multiply(r, 2)];
      },
      [f32(3, 4), f32(3, 4)],
    );
    // Only the second output of a Split read, by two nodes.
    agree(
      (x) => {
        const [, b] = mx.split(mx.exp(x), 2, 1);
        return [mx.tanh(b), mx.negative(b)];
      },
      [f32(2, 6)],
    );
  });

  it('reads constants the function closed over, computed or lazy, and leaves them intact', () => {
    const w = mx.array(rand(12, 1), { shape: [4, 3] });
    mx.evaluate(w);
    const lazy = mx.add(mx.multiply(w, 3), 1); // not computed until the first run needs it
    agree((x) => [mx.exp(mx.add(mx.matmul(x, w), 1)), mx.add(mx.matmul(x, lazy), mx.sum(w))], [f32(5, 4)], 4);
    expect(Array.from(w.toTypedArray() as Float32Array)).toEqual(Array.from(rand(12, 1)));
    // A constant as a result.
    agree((x) => [mx.sin(x), w], [f32(2, 2)]);
  });

  it('takes repeated inputs and inputs used by several nodes', () => {
    agree((x) => [mx.multiply(x, x), mx.add(x, x)], [f32(7)]);
    agree((x, y) => [mx.add(mx.exp(x), mx.exp(x)), mx.subtract(mx.tanh(x), y), mx.multiply(y, y)], [f32(3, 3), f32(3, 3)]);
  });

  it('returns an input as a result, alone or beside values computed from it', () => {
    agree((x, y) => [x, mx.exp(x), y], [f32(4), f32(2, 2)]);
    agree((x) => [mx.exp(mx.negative(x)), x], [f32(4)]);
  });

  it('donates only buffers nothing reads later', () => {
    // Chains of elementwise nodes (each may write into its input's buffer), with values read
    // again after a node that could have taken their buffer: a wrong use count would overwrite them.
    agree(
      (x) => {
        const a = mx.exp(x);
        const b = mx.tanh(a);
        const c = mx.add(a, b);
        const d = mx.negative(mx.abs(mx.sqrt(mx.abs(c))));
        return [d, mx.multiply(a, 2), mx.subtract(d, x)];
      },
      [f32(64)],
    );
    // A view (transpose) of an intermediate read after an elementwise node on that intermediate.
    agree(
      (x) => {
        const a = mx.add(x, 1);
        const t = mx.transpose(a);
        return [mx.exp(a), mx.multiply(t, 3)];
      },
      [f32(3, 5)],
    );
  });

  it('lets a chain of elementwise nodes write into one buffer, as mx.eval does', () => {
    const n = 1 << 20; // 4 MiB of float32
    const g = mx.captureGraph((x: mx.Array) => mx.exp(mx.tanh(mx.sin(mx.negative(x)))));
    const p = new mx.HostProgram(g, [f32(n)], [f32(n)]);
    const x = rand(n, 3);
    const peaks = [true, false, true].map((on) =>
      withStaticExec(on, () => {
        const active = mx.memory.active();
        mx.memory.resetPeak();
        p.run([x]);
        return mx.memory.peak() - active;
      }),
    );
    // The input copied in, and each node's result in that same buffer: one array's bytes at a
    // time (two, from the first node on, if a node could not take its input's buffer).
    for (const peak of peaks) expect(peak).toBeLessThan(1.5 * 4 * n);
    g.dispose();
  });

  it('drops an output nothing reads when its node has run, as mx.eval does', () => {
    const n = 1 << 20; // 4 MiB of float32
    // r, divmod's second output, is never read: kept to the end of the run it would sit beside
    // the concatenation's 8 MiB.
    const g = mx.captureGraph((x: mx.Array) => {
      const [q] = mx.divmod(x, 3);
      return [mx.concatenate([q, q])];
    });
    const p = new mx.HostProgram(g, [f32(n)], [f32(2 * n)]);
    const x = rand(n, 5);
    const [on, off] = [true, false].map((flag) =>
      withStaticExec(flag, () => {
        const active = mx.memory.active();
        mx.memory.resetPeak();
        p.run([x]);
        return mx.memory.peak() - active;
      }),
    );
    expect(on).toBeLessThanOrEqual(off + 64);
    expect(on).toBeLessThan(3.5 * 4 * n);
    g.dispose();
  });

  it('recovers from an error inside a primitive: the next run is right', () => {
    const f = (x: mx.Array) => [mx.add(mx.linalg.inv(x, { stream: 'cpu' }), 1)];
    const g = mx.captureGraph(f);
    const p = new mx.HostProgram(g, [f32(2, 2)], [f32(2, 2)]);
    for (const on of [true, false, true]) {
      withStaticExec(on, () => {
        // Singular: LAPACK's factorization fails inside the kernel MLX dispatches.
        expect(() => p.run([Float32Array.of(1, 2, 2, 4)])).toThrow(/\[Inverse::eval_cpu\] LU factorization failed/);
        const [y] = p.run([Float32Array.of(2, 0, 0, 4)]);
        expect(Array.from(y as Float32Array)).toEqual([1.5, 1, 1, 1.25]);
      });
    }
    g.dispose();
  });

  it("leaves a trace holding MLX's compiled kernels to mx.eval", () => {
    // compile() inside the captured function: with fusion (a C++ compiler here), the chain becomes
    // one primitive named "Compiled" and its tape's primitives.
    const inner = mx.compile((x: mx.Array) => mx.add(mx.multiply(mx.exp(x), 2), 1));
    const g = mx.captureGraph((x: mx.Array) => [mx.tanh(inner(x) as mx.Array)]);
    const p = new mx.HostProgram(g, [f32(4)], [f32(4)]);
    const x = Float32Array.of(0, 0.5, -1, 2);
    const before = mx.hostProgramStaticRuns();
    const [y] = p.run([x]);
    const e = mx.tanh(mx.add(mx.multiply(mx.exp(mx.array(x)), 2), 1));
    expect(Array.from(y as Float32Array)).toEqual(Array.from(e.toTypedArray() as Float32Array));
    // Without a C++ compiler MLX's CPU compile runs the function as it is: nothing to leave out.
    if (hasCxx) expect(mx.hostProgramStaticRuns()).toBe(before);
    g.dispose();
    inner.dispose();
  });

  it('is off with MLXC_STATIC_EXEC=0 and not taken by compile()', () => {
    const before = mx.hostProgramStaticRuns();
    const c = mx.compile((x: mx.Array) => mx.exp(x));
    const p = new mx.HostProgram(c, [f32(3)], [f32(3)]);
    expect(Array.from(p.run([Float32Array.of(0, 0, 0)])[0] as Float32Array)).toEqual([1, 1, 1]);
    // Without a C++ compiler compile() is a capture (see compile), which the executor runs.
    expect(mx.hostProgramStaticRuns()).toBe(mx.cpuCompileAvailable() ? before : before + 1);
    c.dispose();
  });

  it('keeps its native program per stream: a run under another stream still computes, a disposed function is refused', () => {
    const g = mx.captureGraph((x: mx.Array) => [mx.exp(x)]);
    const p = new mx.HostProgram(g, [f32(2)], [f32(2)]);
    expect(Array.from(p.run([Float32Array.of(0, 0)])[0] as Float32Array)).toEqual([1, 1]);
    const other = mx.newStream('cpu');
    const y = mx.withStream(other, () => p.run([Float32Array.of(0, 1)])[0] as Float32Array);
    expect(Array.from(y)).toEqual(Array.from(mx.exp(mx.array(Float32Array.of(0, 1))).toTypedArray() as Float32Array));
    g.dispose();
    expect(() => p.run([Float32Array.of(0, 0)])).toThrow(/closure was disposed/);
  });

  it('refuses buffers shorter than the descriptors reach (mlxc_host_program_run)', () => {
    const g = mx.captureGraph((x: mx.Array) => [mx.exp(x)]);
    const res = [null];
    const desc = BigInt64Array.of(BigInt(dtypeCode('float32')), 1n, 0n, 4n); // float32 [4] at offset 0
    check(
      fn.mlxc_host_program_new(res, closureOfCompiled(g).handle, desc, 4, 1, desc, 4, 1, mx.defaultStream().handle),
      'mlxc_host_program_new',
    );
    const out = new Float32Array(4);
    expect(() => check(fn.mlxc_host_program_run(res[0], new Float32Array(3), 12, out, 16), 'mlxc_host_program_run')).toThrow(
      /the buffers hold 12 and 16 bytes, the program's inputs and results take 16 and 16/,
    );
    check(fn.mlxc_host_program_run(res[0], new Float32Array(4), 16, out, 16), 'mlxc_host_program_run');
    expect(Array.from(out)).toEqual([1, 1, 1, 1]);
    fn.mlxc_host_program_free(res[0]);
    g.dispose();
  });
});

// On MLX's CUDA build the executor runs GPU programs too (execute_gpu): each step's kernels recorded
// in the stream's command encoder, the buffers held until the run's last commit has finished.
describe.runIf(mx.cudaAvailable() && process.env.MLXC_GPU_EXEC !== '0')('HostProgram static executor on the GPU', () => {
  const onGpu = <T>(body: () => T) => mx.withStream('gpu', body);

  it('runs elementwise chains, products, reductions and multi-output primitives as MLX evaluates them', () => {
    onGpu(() => {
      agree((x, w) => [mx.tanh(mx.add(mx.matmul(x, w), 1)), mx.sum(mx.exp(x), 1)], [f32(5, 64), f32(64, 48)], 3, undefined, true);
      agree(
        (x) => {
          const [a, b] = mx.split(mx.exp(x), 2, 1);
          return [mx.multiply(a, b), mx.negative(b)];
        },
        [f32(4, 10)],
        3,
        undefined,
        true,
      );
    });
  });

  it('drops intermediates at their last read without corrupting later steps (buffers reused within one graph)', () => {
    onGpu(() => {
      // A long chain of large temporaries: each freed value's buffer is wanted by a later step.
      agree(
        (x) => {
          let y = x;
          for (let i = 0; i < 40; i++) y = mx.add(mx.multiply(y, 0.5), mx.sin(y));
          return [y, mx.sum(y)];
        },
        [f32(256, 1024)],
        2,
        undefined,
        true,
      );
    });
  });
});

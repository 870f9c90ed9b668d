// Evaluation on a worker thread and within a memory budget.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { CORE_INDEX, runScript } from '../test/child.js';

describe('evalInBackground', () => {
  it('computes on a worker thread while the event loop keeps turning', async () => {
    using s = mx.newStream('cpu', { anyThread: true });
    const a = mx.withStream(s, () => {
      let x = mx.full([512, 512], 0.001, 'float32');
      for (let i = 0; i < 40; i++) x = mx.matmul(x, x);
      return mx.sum(x);
    });
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    const t0 = performance.now();
    await mx.evalInBackground([a], {}, s);
    const ms = performance.now() - t0;
    clearInterval(timer);
    expect(a.isAvailable()).toBe(true);
    expect(a.item()).toBe(0);
    // The timer fired while MLX computed (40 matmuls of 512² take tens of milliseconds here).
    if (ms > 20) expect(ticks).toBeGreaterThan(2);
  });

  it('what MLX makes without a stream inside withStream (custom VJP primitives) lands on that stream', async () => {
    using s = mx.newStream('cpu', { anyThread: true });
    const double = mx.customVjp(
      (x) => mx.multiply(x, 2),
      (_p, cot) => [mx.multiply(cot[0], 2)],
    );
    try {
      const y = mx.withStream(s, () => mx.add(double(mx.full([3], 1.5, 'float32')) as mx.Array, 1));
      // Built on MLX's thread-local default stream, the custom primitive could not be evaluated
      // by a worker thread ("There is no Stream(cpu, n) in current thread").
      await mx.evalInBackground([y], {}, s);
      expect(y.toList()).toEqual([4, 4, 4]);
    } finally {
      double.dispose();
    }
  });

  it('queues evaluations per stream: many in flight on two streams all complete, each with its result', async () => {
    using s1 = mx.newStream('cpu', { anyThread: true });
    using s2 = mx.newStream('cpu', { anyThread: true });
    const jobs = Array.from({ length: 24 }, (_, k) => {
      const s = k % 2 ? s1 : s2;
      const y = mx.withStream(s, () => mx.sum(mx.multiply(mx.full([1000], k, 'float32'), 2)));
      return mx.evalInBackground([y], {}, s).then(() => y.item());
    });
    expect(await Promise.all(jobs)).toEqual(Array.from({ length: 24 }, (_, k) => 2000 * k));
  });

  it('keeps the process alive until the result arrives (a native thread does not)', () => {
    const core = fileURLToPath(new URL('./index.ts', import.meta.url));
    const code = `
      const mx = await import(${JSON.stringify(core)});
      const s = mx.newStream('cpu', { anyThread: true });
      const y = mx.withStream(s, () => mx.sum(mx.full([100], 2, 'float32')));
      // Nothing else keeps the event loop alive here.
      mx.evalInBackground([y], {}, s).then(() => console.log('result', y.item()));`;
    const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code], {
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe('result 200');
  });

  it('raises what MLX raises, and the stream keeps working', async () => {
    using s = mx.newStream('cpu', { anyThread: true });
    const bad = mx.withStream(s, () => mx.full([4], 1, 'float32'));
    await expect(mx.evalInBackground([bad], { maxArrayBytes: 8 }, s)).rejects.toThrow(/memory budget/);
    const good = mx.withStream(s, () => mx.add(mx.full([4], 1, 'float32'), 1));
    await mx.evalInBackground([good], {}, s);
    expect(good.toList()).toEqual([2, 2, 2, 2]);
  });
});

describe('memory budget', () => {
  it('counts what an evaluation would allocate, each array once', () => {
    const a = mx.Array.fromTypedArray(new Float32Array(1000), [1000]);
    const b = mx.add(a, a);
    const c = mx.multiply(b, b);
    // a is data; add and multiply make two float32 arrays of 1000; b is reached twice, counted once.
    const g = mx.graphBytes([c, b]);
    expect(g).toEqual({ total: 8000, largest: 4000 });
    // A view (a broadcast) counts as the array it describes.
    expect(mx.graphBytes([mx.broadcastTo(a, [3, 1000])]).total).toBe(12000);
    c.eval();
    expect(mx.graphBytes([c])).toEqual({ total: 0, largest: 0 });
  });

  it('refuses an evaluation over a limit before computing anything, naming the array', () => {
    // 2^15 x 2^15 float32 is 4 GiB: refused, never allocated.
    const big = mx.broadcastTo(mx.scalar(1, 'float32'), [1 << 15, 1 << 15]);
    const huge = mx.add(big, 1);
    expect(() => mx.evaluateWithin([huge], { maxArrayBytes: 1 << 30 })).toThrow(
      /memory budget\] evaluating would allocate an array of shape \[32768, 32768\] float32 \(4294967296 bytes, made by Add\), over the limit of 1073741824 bytes per tensor/,
    );
    expect(huge.isAvailable()).toBe(false);
    const small = mx.add(mx.full([8], 1, 'float32'), 1);
    expect(() => mx.evaluateWithin([small], { maxTotalBytes: 16 })).toThrow(/bytes at once, over the limit of 16 bytes/);
    mx.evaluateWithin([small], { maxTotalBytes: 1 << 20 });
    expect(small.toList()).toEqual([2, 2, 2, 2, 2, 2, 2, 2]);
  });

  it('counts what an evaluation holds at once, not the sum of its arrays', () => {
    // A chain of 12 steps over 1 MiB arrays: 12 MiB or more in all, but each step's inputs are
    // freed after it, so at most three are held. A 4 MiB limit lets it through (it refused it before: "in
    // all"); a limit under two arrays does not.
    const mib = 1 << 18; // float32 elements in 1 MiB
    const chain = () => {
      let x = mx.add(mx.full([mib], 1, 'float32'), 0);
      for (let i = 0; i < 11; i++) x = mx.add(x, 1);
      return x;
    };
    const y = chain();
    // (the sum also counts each broadcast scalar as an array of the chain's shape)
    expect(mx.graphBytes([y]).total).toBeGreaterThanOrEqual(12 * 4 * mib);
    mx.evaluateWithin([y], { maxTotalBytes: 4 * 4 * mib });
    expect((y.toTypedArray() as Float32Array)[mib - 1]).toBe(12);
    const z = chain();
    expect(() => mx.evaluateWithin([z], { maxTotalBytes: Math.floor(1.5 * 4 * mib) })).toThrow(/would hold \d+ bytes at once/);
    // Results are held to the end: two outputs of the chain count both.
    const a = chain();
    const b = mx.add(a, 1);
    expect(() => mx.evaluateWithin([a, b], { maxTotalBytes: Math.floor(1.5 * 4 * mib) })).toThrow(/would hold/);
  });
});

describe('inline CPU evaluation', () => {
  // y = sum((A @ B + 1) * 2) for small integer matrices: exact in float32, checked against JS.
  const n = 6;
  const a = Array.from({ length: n * n }, (_, i) => (i % 5) - 2);
  const b = Array.from({ length: n * n }, (_, i) => (i % 3) - 1);
  let want = 0;
  for (let i = 0; i < n; i++)
    for (let j = 0; j < n; j++) {
      let dot = 0;
      for (let k = 0; k < n; k++) dot += a[i * n + k] * b[k * n + j];
      want += (dot + 1) * 2;
    }
  const build = (s: mx.Stream) =>
    mx.withStream(s, () => {
      const A = mx.Array.fromTypedArray(Float32Array.from(a), [n, n]);
      const B = mx.Array.fromTypedArray(Float32Array.from(b), [n, n]);
      return mx.sum(mx.multiply(mx.add(mx.matmul(A, B), 1), 2));
    });

  it("runs a CPU stream's work on the evaluating thread, with the stream thread's results", () => {
    using s = mx.newStream('cpu', { anyThread: true });
    const before = mx.inlineEvalTasks();
    const y = build(s);
    mx.evaluateWithin([y]);
    expect(y.item()).toBe(want);
    // matmul, add, multiply, sum: each queues at least one task, all run here.
    expect(mx.inlineEvalTasks() - before).toBeGreaterThanOrEqual(4);
  });

  it('reading an unevaluated array (toTypedArray, item, readInto) evaluates it on the reading thread', () => {
    using s = mx.newStream('cpu', { anyThread: true });
    for (const read of [
      (y: mx.Array) => y.toTypedArray()[0],
      (y: mx.Array) => y.item(),
      (y: mx.Array) => y.readInto(new Float32Array(1))[0],
    ]) {
      const before = mx.inlineEvalTasks();
      const y = build(s);
      expect(read(y)).toBe(want);
      // No hop to the stream thread per primitive (one each way per read of a decode step's logits).
      expect(mx.inlineEvalTasks() - before).toBeGreaterThanOrEqual(4);
    }
  });

  it('a small graph evaluated in the background runs inline on the worker, not task by task on the stream thread', async () => {
    using s = mx.newStream('cpu', { anyThread: true });
    const before = mx.inlineEvalTasks();
    const y = build(s);
    // inlineNodes asks for queueing from this thread; with the inline mode on, the worker's one
    // hop is cheaper than a hop to the stream thread per primitive, so the worker takes it.
    await mx.evalInBackground([y], {}, s, { inlineNodes: 48 });
    expect(y.item()).toBe(want);
    expect(mx.inlineEvalTasks() - before).toBeGreaterThanOrEqual(4);
  });

  it('MLXC_INLINE_EVAL=0 hands the work to the stream thread, with the same result', () => {
    const core = fileURLToPath(new URL('./index.ts', import.meta.url));
    const code = `
      const mx = await import(${JSON.stringify(core)});
      const s = mx.newStream('cpu', { anyThread: true });
      const y = mx.withStream(s, () => mx.sum(mx.multiply(mx.add(mx.matmul(
        mx.Array.fromTypedArray(Float32Array.from(${JSON.stringify(a)}), [${n}, ${n}]),
        mx.Array.fromTypedArray(Float32Array.from(${JSON.stringify(b)}), [${n}, ${n}])), 1), 2)));
      mx.evaluateWithin([y]);
      console.log(JSON.stringify({ y: y.item(), inline: mx.inlineEvalTasks() }));`;
    const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code], {
      encoding: 'utf8',
      timeout: 30_000,
      env: { ...process.env, MLXC_INLINE_EVAL: '0' },
    });
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout.trim())).toEqual({ y: want, inline: 0 });
  });

  it('a synchronous evaluation queues behind an asynchronous one in flight on its stream', async () => {
    using s = mx.newStream('cpu', { anyThread: true });
    // A slow asynchronous evaluation (many products), then at once a synchronous one that reads its
    // result: inline, it would read the result before the stream thread wrote it.
    let x = mx.withStream(s, () => mx.full([256, 256], 1 / 256, 'float32'));
    for (let i = 0; i < 30; i++) x = mx.withStream(s, () => mx.matmul(x, x));
    mx.asyncEval(x);
    const before = mx.inlineEvalTasks();
    const total = mx.withStream(s, () => mx.sum(x));
    mx.evaluateWithin([total]);
    // Every entry stays 1/256 (each row sums to 1), so the sum is 256.
    expect(total.item()).toBeCloseTo(256, 3);
    expect(mx.inlineEvalTasks()).toBe(before);
    // Once it is done, evaluations of the stream run inline again.
    mx.synchronize(s);
    const y = build(s);
    mx.evaluateWithin([y]);
    expect(y.item()).toBe(want);
    expect(mx.inlineEvalTasks()).toBeGreaterThan(before);
  });
});

describe('MLXC_PRIM_TIMES (a profiling aid, read once per process: a child process each)', () => {
  const script = `
    import * as mx from ${CORE_INDEX};
    const x = mx.ones([1, 8, 8, 16]);
    // Two convolutions of one output shape [1, 8, 8, 32]: a 1x1 and a 3x3 kernel.
    const w1 = mx.ext.convPackWeight(mx.ones([32, 1, 1, 16]));
    const w3 = mx.ext.convPackWeight(mx.ones([32, 3, 3, 16]));
    const a = mx.ext.convGemm(x, w1, 32, null, null, [1, 1], [0, 0], [0, 0], [1, 1], -Infinity, Infinity);
    const b = mx.ext.convGemm(x, w3, 32, null, null, [1, 1], [1, 1], [1, 1], [1, 1], -Infinity, Infinity);
    // The library's own evaluation (evaluateWithin) is the one timed.
    mx.evaluateWithin([mx.add(a, b)]);`;
  const rows = (mode: string) => {
    const r = runScript(script, { MLXC_PRIM_TIMES: mode });
    expect(r.status, r.stderr).toBe(0);
    return r.stderr.split('\n').filter((l) => l.trim().startsWith('ConvGemm'));
  };

  it("'shape' keys a row by the output shape: both convolutions in one row", () => {
    const got = rows('shape');
    expect(got).toHaveLength(1);
    expect(got[0]).toMatch(/ConvGemm \[1,8,8,32\]\s+2 /);
  });

  it("'inputs' keys it by the input shapes too: the 1x1 and the 3x3 kernel apart", () => {
    const got = rows('inputs');
    expect(got).toHaveLength(2);
    expect(got.some((l) => l.includes('<- [1,8,8,16] [1,1,1,16,32]'))).toBe(true);
    expect(got.some((l) => l.includes('<- [1,8,8,16] [1,3,3,16,32]'))).toBe(true);
  });

  it("'static' times a host program's steps in the static executor, which the other modes turn off", () => {
    const program = `
      import * as mx from ${CORE_INDEX};
      // relu(x @ w + 1) as a captured graph, run 5 times as a host program.
      const w = mx.ones([16, 8]);
      const f = mx.captureGraph((x) => mx.maximum(mx.add(mx.matmul(x, w), mx.scalar(1, 'float32')), mx.scalar(0, 'float32')));
      const p = new mx.HostProgram(f, [{ dtype: 'float32', shape: [4, 16] }], [{ dtype: 'float32', shape: [4, 8] }]);
      const before = mx.hostProgramStaticRuns();
      let y;
      for (let i = 0; i < 5; i++) y = p.run([new Float32Array(64).fill(i)])[0];
      console.log(mx.hostProgramStaticRuns() - before, y[0]);`;
    const timed = runScript(program, { MLXC_PRIM_TIMES: 'static' });
    expect(timed.status, timed.stderr).toBe(0);
    // Five static runs (4 * 16 + 1 = 65 on the last); a row per primitive and the runs' own.
    expect(timed.stdout.trim()).toBe('5 65');
    const table = timed.stderr.split('\n');
    const row = (name: string) => table.find((l) => l.trim().startsWith(name));
    expect(row('(static run)'), timed.stderr).toMatch(/\(static run\)\s+5 /);
    expect(row('Matmul'), timed.stderr).toMatch(/Matmul\s+5 /);
    // The small elementwise steps are the executor's own (static_tiny.cpp).
    expect(row('Maximum'), timed.stderr).toMatch(/Maximum( \(executor\))?\s+5 /);
    // MLXC_PRIM_TIMES=1 evaluates array by array instead: no static run.
    const plain = runScript(program, { MLXC_PRIM_TIMES: '1' });
    expect(plain.status, plain.stderr).toBe(0);
    expect(plain.stdout.trim()).toBe('0 65');
    expect(plain.stderr).not.toContain('(static run)');
  });
});

describe('MLXC_EVAL_SPLIT (a profiling aid, read once per process: a child process)', () => {
  it('evaluates as before and tables each graph size with its queue and wait times at exit', () => {
    const script = `
      import * as mx from ${CORE_INDEX};
      // One graph shape evaluated three times: one row of 3 evaluations.
      for (let i = 0; i < 3; i++) {
        const y = mx.sum(mx.multiply(mx.arange(0, 10, 1, 'float32'), mx.scalar(i + 1, 'float32')));
        mx.evaluateWithin([y]);
        console.log(y.item());
      }`;
    const r = runScript(script, { MLXC_EVAL_SPLIT: '1', MLXC_GRAPH_STATS: '1' });
    expect(r.status, r.stderr).toBe(0);
    // 0 + 1 + ... + 9 = 45, times 1, 2, 3.
    expect(r.stdout.trim().split('\n')).toEqual(['45', '90', '135']);
    expect(r.stderr).toContain('[mlxc eval split]');
    // Its size is the node count MLXC_GRAPH_STATS prints for each of the three evaluations.
    const sizes = [...r.stderr.matchAll(/\[mlxc graph\] (\d+) nodes/g)].map((m) => m[1]);
    expect(sizes).toHaveLength(3);
    expect(new Set(sizes).size).toBe(1);
    const rows = r.stderr.split('\n').filter((l) => /^\s+\d+ nodes\s/.test(l));
    expect(rows, r.stderr).toHaveLength(1);
    const row = rows[0];
    expect(row.trim().split(/\s+/)[0]).toBe(sizes[0]);
    const [evaluations, queueUs, waitUs] = row
      .trim()
      .split(/\s+/)
      .filter((t) => /^[\d.]+$/.test(t))
      .slice(1)
      .map(Number);
    expect(evaluations).toBe(3);
    expect(queueUs).toBeGreaterThan(0);
    expect(waitUs).toBeGreaterThanOrEqual(0);
  });
});

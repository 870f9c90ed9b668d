// Run-time behaviour a host application depends on: release() gives back the native memory a
// session took (initializers, results), and run() leaves the event loop free while MLX computes.
import { describe, expect, it } from 'vitest';
import { model, node, v } from '../helpers/build.js';
import { f32, mlxCpu, ort, plain, runOn, seeded } from '../helpers/ort.js';
import { MlxSession } from '../../src/index.js';
import { INLINE_PROBE_EVERY, runsInline } from '../../src/execute/signature.js';
import { TURN_EVERY_MS } from '../../src/session.js';

const mx = await import('@mlx/core');
const { memory } = mx;

describe('release()', () => {
  // y = relu(x @ w1) @ w2 with w1, w2 of 512 x 512 float32 (1 MiB each).
  const n = 512;
  const bytes = model({
    opsets: { '': 13 },
    inputs: [v('x', 'float32', [4, n])],
    outputs: [v('y', 'float32', [4, n])],
    initializers: [
      { name: 'w1', type: 'float32', dims: [n, n], values: new Float32Array(n * n).fill(1 / n) },
      { name: 'w2', type: 'float32', dims: [n, n], values: new Float32Array(n * n).fill(2 / n) },
    ],
    nodes: [node('MatMul', ['x', 'w1'], ['h']), node('Relu', ['h'], ['r']), node('MatMul', ['r', 'w2'], ['y'])],
  });
  const x = () => f32(new Array(4 * n).fill(1), [4, n]);

  async function cycle(): Promise<number> {
    const s = await ort.InferenceSession.create(bytes, mlxCpu);
    let during = 0;
    try {
      for (let r = 0; r < 2; r++) {
        const out = await s.run({ x: x() });
        expect(plain(out.y).slice(0, 3)).toEqual([2, 2, 2]); // row of ones @ (1/n) -> 1, @ (2/n) -> 2
      }
      during = memory.active();
    } finally {
      await s.release();
    }
    return during;
  }

  it('returns active native memory to its baseline', async () => {
    await cycle(); // first use: MLX's own one-time allocations
    const baseline = memory.active();
    const during = await cycle();
    // The weights alone are 2 MiB while the session lives...
    expect(during - baseline).toBeGreaterThanOrEqual(2 * n * n * 4);
    // ...and none of it is left after release().
    expect(memory.active() - baseline).toBeLessThanOrEqual(64 * 1024);
    // Repeated create/run/release does not grow it either.
    for (let i = 0; i < 3; i++) await cycle();
    expect(memory.active() - baseline).toBeLessThanOrEqual(64 * 1024);
  });

  it('nothing is left behind by a run that fails part-way, or by a create that fails', async () => {
    // h = x @ w1 is computed, then the Reshape to 7 elements fails.
    const failing = model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [4, n])],
      outputs: [v('y', 'float32', [7])],
      initializers: [
        { name: 'w1', type: 'float32', dims: [n, n], values: new Float32Array(n * n).fill(1 / n) },
        { name: 'seven', type: 'int64', dims: [1], values: [7n] },
      ],
      nodes: [
        node('MatMul', ['x', 'w1'], ['h']),
        node('Relu', ['h'], ['r']),
        node('Reshape', ['r', 'seven'], ['y'], { name: 'bad_reshape' }),
      ],
    });
    const s = await ort.InferenceSession.create(failing, mlxCpu);
    try {
      await expect(s.run({ x: x() })).rejects.toThrow(/bad_reshape/);
      const baseline = memory.active(); // the session's weights are uploaded now
      for (let i = 0; i < 3; i++) await expect(s.run({ x: x() })).rejects.toThrow(/bad_reshape/);
      expect(memory.active() - baseline).toBeLessThanOrEqual(64 * 1024);
    } finally {
      await s.release();
    }
    const before = memory.active();
    const unsupported = model({
      inputs: [v('x', 'float32', [n])],
      outputs: [v('y', 'float32', [n])],
      initializers: [{ name: 'w', type: 'float32', dims: [n, n], values: new Float32Array(n * n).fill(1) }],
      nodes: [node('MatMul', ['x', 'w'], ['h']), node('FooBar', ['h'], ['y'], { domain: 'com.example' })],
      opsets: { '': 13, 'com.example': 1 },
    });
    await expect(ort.InferenceSession.create(unsupported, { executionProviders: ['mlx'] })).rejects.toThrow(/FooBar/);
    expect(memory.active() - before).toBeLessThanOrEqual(64 * 1024);
  });

  it('a released session refuses to run, with a clear error', async () => {
    const s = await ort.InferenceSession.create(bytes, { executionProviders: ['mlx'] });
    await s.release();
    await expect(s.run({ x: x() })).rejects.toThrow(/session was released/);
  });
});

describe('run() and the event loop', () => {
  it('timers fire while a long run is in flight', async () => {
    // Six chained 768 x 768 MatMuls on [768, 768]: a few hundred milliseconds on a small CPU.
    const n = 768;
    const layers = 6;
    const bytes = model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [n, n])],
      outputs: [v('y', 'float32', [n, n])],
      initializers: Array.from({ length: layers }, (_, i) => ({
        name: `w${i}`,
        type: 'float32' as const,
        dims: [n, n],
        values: seeded(n * n, i + 1).map((t) => t / Math.sqrt(n)),
      })),
      nodes: Array.from({ length: layers }, (_, i) => node('MatMul', [i ? `h${i - 1}` : 'x', `w${i}`], [i === layers - 1 ? 'y' : `h${i}`])),
    });
    const s = await ort.InferenceSession.create(bytes, mlxCpu);
    try {
      const feed = { x: f32(seeded(n * n, 99), [n, n]) };
      await s.run(feed); // warm-up: uploads the weights
      let ticks = 0;
      let done = false;
      const timer = setInterval(() => void (done || ticks++), 1);
      const t0 = performance.now();
      const pending = s.run(feed).then((r) => {
        done = true;
        return r;
      });
      const ticksAtCall = ticks; // run() returned synchronously: nothing could have ticked yet
      const out = await pending;
      const ms = performance.now() - t0;
      clearInterval(timer);
      expect(ticksAtCall).toBe(0);
      expect(out.y.dims).toEqual([n, n]);
      expect(plain(out.y).every(Number.isFinite)).toBe(true);
      // At least one tick happened before the result came back.
      expect({ ticks: ticks > 0, ms: Math.round(ms) }).toEqual({ ticks: true, ms: Math.round(ms) });
    } finally {
      await s.release();
    }
  }, 60_000);

  // y = tanh(x @ w) + x on [4, 16]: microseconds of compute.
  const small = model({
    opsets: { '': 13 },
    inputs: [v('x', 'float32', [4, 16])],
    outputs: [v('y', 'float32', [4, 16])],
    initializers: [{ name: 'w', type: 'float32', dims: [16, 16], values: seeded(256, 3).map((t) => t / 4) }],
    nodes: [node('MatMul', ['x', 'w'], ['h']), node('Tanh', ['h'], ['t']), node('Add', ['t', 'x'], ['y'])],
  });
  const x = f32(seeded(64, 5), [4, 16]);
  const feed = { x: { dtype: 1, dims: [4, 16], data: x.data as Float32Array } };

  /** Whether the event loop turned (a setImmediate ran) while one run() was in flight, whether it evaluated inline, and its result. */
  async function turned(s: MlxSession): Promise<{ turned: boolean; inline: boolean; y: number[] }> {
    let ran = false;
    const inline0 = s.compileStats.inlineEvals;
    const imm = setImmediate(() => void (ran = true));
    const out = await s.run(feed);
    clearImmediate(imm);
    return { turned: ran, inline: s.compileStats.inlineEvals > inline0, y: Array.from((out.y as { data: Float32Array }).data) };
  }

  it('a short replay evaluates on the calling thread; shortEvalMs 0 always hands it to the worker', async () => {
    const want = plain((await runOn('cpu', small, { x })).y);
    // A generous threshold: a loaded machine may stretch even this graph's evaluation.
    const quick = await MlxSession.create(small, { device: 'cpu', shortEvalMs: 1000 });
    const off = await MlxSession.create(small, { device: 'cpu', shortEvalMs: 0 });
    try {
      // The analysis and the trace (which builds kernels) run off the thread, then the replays on it.
      const first = [await turned(quick), await turned(quick)];
      expect(first.map((r) => r.inline)).toEqual([false, false]);
      const later = await turned(quick);
      expect(later.inline).toBe(true);
      for (let i = 0; i < 3; i++) await turned(off);
      const worker = await turned(off);
      expect(worker.inline).toBe(false);
      expect(off.compileStats.inlineEvals).toBe(0);
      for (const r of [...first, later, worker]) r.y.forEach((y, i) => expect(y).toBeCloseTo(want[i], 5));
    } finally {
      quick.release();
      off.release();
    }
  });

  /**
   * A loop of `ms` milliseconds of awaited runs of `s`: how many runs, how many of them inline, and
   * how many times the event loop turned meanwhile (a setImmediate that queues itself again runs
   * once per turn).
   */
  async function loop(s: MlxSession, ms: number, input = feed): Promise<{ runs: number; inline: number; turns: number; ms: number }> {
    let turns = 0;
    let armed = true;
    const tick = () => {
      turns++;
      if (armed) setImmediate(tick);
    };
    setImmediate(tick);
    const inline0 = s.compileStats.inlineEvals;
    const t0 = performance.now();
    let runs = 0;
    while (performance.now() - t0 < ms) {
      await s.run(input);
      runs++;
    }
    const took = performance.now() - t0;
    armed = false;
    return { runs, inline: s.compileStats.inlineEvals - inline0, turns, ms: took };
  }

  it('a loop of inline runs lets the event loop turn every TURN_EVERY_MS, not after every run', async () => {
    for (const compiled of [true, false]) {
      const s = await MlxSession.create(small, { device: 'cpu', compiled, shortEvalMs: 1000 });
      try {
        for (let i = 0; i < 4; i++) await s.run(feed);
        const r = await loop(s, 30 * TURN_EVERY_MS);
        // Every run on this thread, a few hundred of them (microseconds each).
        expect(r.inline).toBe(r.runs);
        expect(r.runs).toBeGreaterThan(40);
        // Timers and I/O had their turns all along: at least one in each stretch of TURN_EVERY_MS
        // plus a run (the loop did nothing else), and not one per run, which cost a small model's
        // run a good part of its time.
        expect(r.turns).toBeGreaterThanOrEqual(5);
        expect(r.turns).toBeLessThanOrEqual(r.ms / TURN_EVERY_MS + 2);
        expect(r.turns).toBeLessThan(r.runs / 4);
      } finally {
        s.release();
      }
    }
  });

  it('one slow evaluation leaves a one-call replay on the calling thread; two in a row send it to the evaluation thread', async () => {
    // shortEvalMs 2 and slow evaluations of 6 ms: a normal one (well under 1 ms) stays short even
    // when the test process is preempted for a millisecond (a clean clone's CI once saw 1 ms passed).
    const s = await MlxSession.create(small, { device: 'cpu', shortEvalMs: 2 });
    try {
      for (let i = 0; i < 4; i++) await turned(s);
      expect((await turned(s)).inline).toBe(true);
      const programs = [
        ...(s as unknown as { runner: { programs: Map<string, { host?: { program: mx.HostProgram } }> } }).runner.programs.values(),
      ];
      const program = programs[0].host!.program;
      const run = program.run.bind(program);
      // The next `slow` evaluations take 6 ms (another process holding the core, as it were).
      let slow = 0;
      program.run = (...args: Parameters<mx.HostProgram['run']>) => {
        const out = run(...args);
        if (slow > 0) {
          slow--;
          const until = performance.now() + 6;
          while (performance.now() < until);
        }
        return out;
      };
      slow = 1;
      const afterOne = [await turned(s), await turned(s)];
      expect(afterOne.map((r) => r.inline)).toEqual([true, true]);
      slow = 2;
      const afterTwo = [await turned(s), await turned(s), await turned(s)];
      expect(afterTwo.map((r) => r.inline)).toEqual([true, true, false]);
      const want = plain((await runOn('cpu', small, { x })).y);
      for (const r of [...afterOne, ...afterTwo]) r.y.forEach((y, i) => expect(y).toBeCloseTo(want[i], 5));
    } finally {
      s.release();
    }
  });

  it('a one-call replay sent to the evaluation thread is measured on the calling thread again after INLINE_PROBE_EVERY runs there', async () => {
    expect(runsInline(0.5, 0, 1)).toBe(true);
    expect(runsInline(1.5, INLINE_PROBE_EVERY - 1, 1)).toBe(false);
    expect(runsInline(1.5, INLINE_PROBE_EVERY, 1)).toBe(true);
    expect(runsInline(2, INLINE_PROBE_EVERY, 1)).toBe(false);
    expect(runsInline(0, INLINE_PROBE_EVERY, 0)).toBe(false);
    const want = plain((await runOn('cpu', small, { x })).y);
    const s = await MlxSession.create(small, { device: 'cpu', shortEvalMs: 1000 });
    try {
      // Analysis, trace, then replays in one call on this thread.
      for (let i = 0; i < 4; i++) await turned(s);
      expect((await turned(s)).inline).toBe(true);
      const programs = [...(s as unknown as { runner: { programs: Map<string, object> } }).runner.programs.values()];
      expect(programs).toHaveLength(1);
      // The program's state as a slow step leaves it: its last evaluation (on the evaluation
      // thread) over shortEvalMs, under twice it. The evaluation thread measures the real (short)
      // run, but the state is set again before each run.
      const state = programs[0] as { evalMs: number; asyncInARow: number };
      state.evalMs = 1500;
      state.asyncInARow = INLINE_PROBE_EVERY - 2;
      const runs = [];
      for (let i = 0; i < 3; i++) {
        runs.push(await turned(s));
        state.evalMs = 1500;
      }
      // Two on the evaluation thread, then the probe on this one, which resets the count.
      expect(runs.map((r) => r.inline)).toEqual([false, false, true]);
      expect(state.asyncInARow).toBe(0);
      // Measured at twice shortEvalMs or more: never probed.
      state.asyncInARow = 10 * INLINE_PROBE_EVERY;
      state.evalMs = 2000;
      runs.push(await turned(s));
      expect(runs.at(-1)!.inline).toBe(false);
      for (const r of runs) r.y.forEach((y, i) => expect(y).toBeCloseTo(want[i], 5));
    } finally {
      s.release();
    }
  });

  it('a signature never run on the calling thread probes it after one run on the evaluation thread, not eight', async () => {
    expect(runsInline(1.5, 1, 1, 1)).toBe(true);
    expect(runsInline(1.5, 0, 1, 1)).toBe(false);
    const want = plain((await runOn('cpu', small, { x })).y);
    const s = await MlxSession.create(small, { device: 'cpu', shortEvalMs: 1000 });
    try {
      // Analysis and trace; the one-call form exists from the next run on.
      await turned(s);
      await turned(s);
      const programs = [...(s as unknown as { runner: { programs: Map<string, object> } }).runner.programs.values()];
      const state = programs[0] as { evalMs: number; asyncInARow: number; lastInlineMs: number };
      // As a trace leaves it (its evaluation, weights packed and kernels built, took long), and
      // as the evaluation thread measures a short step on 2 cores (above shortEvalMs, under twice it).
      expect(state.lastInlineMs).toBe(Number.POSITIVE_INFINITY);
      const runs = [];
      for (let i = 0; i < 3; i++) {
        // The evaluation thread's measure of the first (set again after it ran there).
        if (i < 2) state.evalMs = 1500;
        runs.push(await turned(s));
      }
      // One on the evaluation thread, then the probe here, which measures it as it is (short):
      // here from then on.
      expect(runs.map((r) => r.inline)).toEqual([false, true, true]);
      expect(state.lastInlineMs).toBeLessThan(1000);
      for (const r of runs) r.y.forEach((y, i) => expect(y).toBeCloseTo(want[i], 5));
    } finally {
      s.release();
    }
  });

  it('a short eager run evaluates on the calling thread after one that was short; shortEvalMs 0 never', async () => {
    const want = plain((await runOn('cpu', small, { x })).y);
    const quick = await MlxSession.create(small, { device: 'cpu', compiled: false, shortEvalMs: 1000 });
    const off = await MlxSession.create(small, { device: 'cpu', compiled: false, shortEvalMs: 0 });
    try {
      // The first has no measure yet: on the worker; then on this thread.
      const runs = [await turned(quick), await turned(quick), await turned(quick)];
      expect(runs.map((r) => r.inline)).toEqual([false, true, true]);
      for (let i = 0; i < 3; i++) await turned(off);
      expect(off.compileStats.inlineEvals).toBe(0);
      for (const r of runs) r.y.forEach((y, i) => expect(y).toBeCloseTo(want[i], 5));
    } finally {
      quick.release();
      off.release();
    }
  });

  it('a long eager graph build gives the event loop turns (time-sliced)', async () => {
    // 20,000 elementwise nodes on [2, 2]: tens of milliseconds of graph building, microseconds of compute.
    const count = 20_000;
    const nodes = Array.from({ length: count }, (_, i) =>
      node(i % 2 ? 'Mul' : 'Add', [i ? `h${i - 1}` : 'x', 'x'], [i === count - 1 ? 'y' : `h${i}`]),
    );
    const bytes = model({ opsets: { '': 13 }, inputs: [v('x', 'float32', [2, 2])], outputs: [v('y', 'float32', [2, 2])], nodes });
    const s = await MlxSession.create(bytes, { device: 'cpu', compiled: false });
    try {
      const input = { x: { dtype: 1, dims: [2, 2], data: new Float32Array([1, 0.5, 0.25, 0.125]) } };
      await s.run(input);
      let ticks = 0;
      const timer = setInterval(() => void ticks++, 1);
      const t0 = performance.now();
      const out = await s.run(input);
      const ms = performance.now() - t0;
      clearInterval(timer);
      // The building alone takes well over one slice (8 ms); without slicing no tick fits in.
      expect(ms).toBeGreaterThan(20);
      expect(ticks).toBeGreaterThan(0);
      // x -> (x + x) * x -> ...: the reference in float64, rounded to float32 at each node.
      const want = Array.from(input.x.data, (x) => {
        let h = x;
        for (let i = 0; i < count; i++) h = Math.fround(i % 2 ? h * x : h + x);
        return h;
      });
      expect(Array.from((out.y as { data: Float32Array }).data)).toEqual(want);
    } finally {
      s.release();
    }
  }, 60_000);

  it('a loop of awaited short runs keeps timers running (no event-loop starvation)', async () => {
    const s = await MlxSession.create(small, { device: 'cpu', shortEvalMs: 1000 });
    try {
      for (let i = 0; i < 3; i++) await s.run(feed);
      // A 0 ms timer must fire during a loop of inline replays, within a few TURN_EVERY_MS (the
      // loop lets the event loop turn that often), not when the loop ends.
      let fired = -1;
      let firedAt = 0;
      let i = 0;
      const t0 = performance.now();
      setTimeout(() => {
        fired = i;
        firedAt = performance.now() - t0;
      }, 0);
      for (; performance.now() - t0 < 1000 && fired < 0; i++) await s.run(feed);
      expect(s.compileStats.inlineEvals).toBeGreaterThan(0);
      expect(fired).toBeGreaterThanOrEqual(0);
      expect(firedAt).toBeLessThan(20 * TURN_EVERY_MS);
    } finally {
      s.release();
    }
  });

  it('refuses a shortEvalMs that is not a number of milliseconds', async () => {
    await expect(MlxSession.create(small, { device: 'cpu', shortEvalMs: -1 })).rejects.toThrow(/shortEvalMs must be a number/);
    await expect(MlxSession.create(small, { device: 'cpu', shortEvalMs: Number.NaN })).rejects.toThrow(/shortEvalMs must be a number/);
  });
});

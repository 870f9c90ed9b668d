// Loop and Scan against the session's memory budget, and long loops that stay abortable: the
// fuzz harness's seed 600 found a Scan whose mutated num_scan_inputs grew past 3 GiB and Loops fed a
// huge trip count that never returned (onnxruntime runs them for as long as asked, too). Results
// of loops long enough to pause are compared with onnxruntime-node's CPU provider.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { RefusedNodeError, ResourceLimitError, RunTerminatedError, type HostTensor } from '../../src/index.js';
import { readTestCase } from '../../src/onnx/index.js';
import { model, node, v, type GraphSpec, type ModelSpec } from '../helpers/build.js';
import { expectSameOutputs, f32, i64, ort, runOn, type Feeds } from '../helpers/ort.js';
import { sharedPath } from '../helpers/shared.js';

type SessionOptions = import('onnxruntime-node').InferenceSession.SessionOptions;
type RunOptions = import('onnxruntime-node').InferenceSession.RunOptions;

const mlxWith = (limits: { maxTensorBytes?: number; maxSessionBytes?: number } = {}) =>
  ({ executionProviders: [{ name: 'mlx', device: 'cpu', ...limits }] }) as unknown as SessionOptions;

/** The error (or 'ran') of one run through the public API. */
async function outcome(bytes: Uint8Array, feeds: Feeds, options: SessionOptions, runOptions: RunOptions = {}): Promise<unknown> {
  try {
    const s = await ort.InferenceSession.create(bytes, options);
    try {
      await s.run(feeds, runOptions);
      return 'ran';
    } finally {
      await s.release();
    }
  } catch (e) {
    return e;
  }
}

/** Loop(M, cond0, acc0): acc += x each iteration, acc also a scan output; the body's cond is `cond`. */
function loopModel(cond: 'fixed' | 'computed', extra: Partial<GraphSpec> = {}): Uint8Array {
  const body: GraphSpec = {
    name: 'body',
    inputs: [v('iter', 'int64', []), v('cond_in', 'bool', []), v('acc', 'float32', [4])],
    outputs: [v('cond_out', 'bool', []), v('acc_out', 'float32', [4]), v('scan', 'float32', [4])],
    initializers: [{ name: 'never', type: 'int64', dims: [], values: [2n ** 62n] }],
    nodes: [
      node('Add', ['acc', 'x'], ['acc_out']),
      node('Identity', ['acc_out'], ['scan']),
      cond === 'fixed' ? node('Identity', ['cond_in'], ['cond_out']) : node('Less', ['iter', 'never'], ['cond_out']),
    ],
    ...extra,
  };
  return model({
    opsets: { '': 13 },
    inputs: [v('M', 'int64', []), v('x', 'float32', [4])],
    outputs: [v('final', 'float32', [4]), v('all', 'float32', [null, 4])],
    initializers: [
      { name: 'cond0', type: 'bool', dims: [], values: [1] },
      { name: 'acc0', type: 'float32', dims: [4], values: [0, 0, 0, 0] },
    ],
    nodes: [node('Loop', ['M', 'cond0', 'acc0'], ['final', 'all'], { name: 'loop', attrs: { body: { g: body } } })],
  });
}

const x4 = f32([1, -2, 3, 0.5], [4]);
const MiB = 2 ** 20;
const n = (k: number) => k.toLocaleString('en-US');

describe('Loop against the memory budget', () => {
  it('a trip count whose scan output cannot fit is refused after one iteration (seed 600: test_loop11 fed 1e9, a hang)', async () => {
    const t0 = performance.now();
    const e = await outcome(loopModel('fixed'), { M: i64([1e9], []), x: x4 }, mlxWith({ maxTensorBytes: 256 * MiB }));
    expect(e).toBeInstanceOf(ResourceLimitError);
    // 1e9 iterations of float32[4]: 16e9 bytes.
    expect((e as Error).message).toMatch(
      new RegExp(
        `node 'loop' \\(Loop\\): scan output 0 would stack ${n(1e9)} iterations of shape \\[4\\] float32, ${n(16e9)} bytes, over the limit of ${n(256 * MiB)} bytes per tensor \\(maxTensorBytes\\)`,
      ),
    );
    expect(performance.now() - t0).toBeLessThan(20_000);
  });

  it('Range expanded to a Loop, fed a start of -2^31 (seed 600: test_range_float_type_positive_delta_expanded, a hang)', async () => {
    const dir = sharedPath('onnx-node-tests/v1.22.0/test_range_float_type_positive_delta_expanded');
    const [, limit, delta] = readTestCase(dir).datasets[0].inputs as HostTensor[];
    const feeds = {
      start: f32([-(2 ** 31)], []),
      limit: f32([Number((limit.data as Float32Array)[0])], []),
      delta: f32([Number((delta.data as Float32Array)[0])], []),
    };
    const e = await outcome(new Uint8Array(readFileSync(join(dir, 'model.onnx'))), feeds, mlxWith({ maxTensorBytes: 256 * MiB }));
    expect(e).toBeInstanceOf(ResourceLimitError);
    // ceil((limit - start) / delta) iterations of one float32 each, in float32 as the expansion computes it.
    const f = Math.fround;
    const trips = Math.ceil(f(f(Number((limit.data as Float32Array)[0]) + 2 ** 31) / Number((delta.data as Float32Array)[0])));
    expect((e as Error).message).toMatch(
      new RegExp(`\\(Loop\\): scan output 0 would stack ${n(trips)} iterations of shape \\[\\] float32`),
    );
  });

  it('a loop whose condition may stop it fails at the iteration whose scan output passes maxTensorBytes', async () => {
    const limit = 64 * 1024;
    const e = await outcome(loopModel('computed'), { M: i64([1e12], []), x: x4 }, mlxWith({ maxTensorBytes: limit }));
    expect(e).toBeInstanceOf(ResourceLimitError);
    // 16 bytes per iteration: the first iteration over 65,536 bytes is number 4,097.
    const its = Math.floor(limit / 16) + 1;
    expect((e as Error).message).toMatch(
      new RegExp(`node 'loop' \\(Loop\\): scan output 0 stacks ${n(its * 16)} bytes after ${n(its)} iterations of shape \\[4\\] float32`),
    );
  });

  it('loop-carried state that grows each iteration is held to maxSessionBytes', async () => {
    // body: acc = Concat(acc, x): 16 more bytes each iteration, every iteration's acc kept until the run ends.
    const body: GraphSpec = {
      name: 'grow',
      inputs: [v('iter', 'int64', []), v('cond_in', 'bool', []), v('acc', 'float32', [null])],
      outputs: [v('cond_out', 'bool', []), v('acc_out', 'float32', [null])],
      initializers: [{ name: 'never', type: 'int64', dims: [], values: [2n ** 62n] }],
      nodes: [node('Concat', ['acc', 'x'], ['acc_out'], { attrs: { axis: 0 } }), node('Less', ['iter', 'never'], ['cond_out'])],
    };
    const bytes = model({
      opsets: { '': 13 },
      inputs: [v('M', 'int64', []), v('x', 'float32', [4])],
      outputs: [v('final', 'float32', [null])],
      initializers: [
        { name: 'cond0', type: 'bool', dims: [], values: [1] },
        { name: 'acc0', type: 'float32', dims: [4], values: [0, 0, 0, 0] },
      ],
      nodes: [node('Loop', ['M', 'cond0', 'acc0'], ['final'], { name: 'grow', attrs: { body: { g: body } } })],
    });
    const budget = MiB;
    const e = await outcome(bytes, { M: i64([1e12], []), x: x4 }, mlxWith({ maxSessionBytes: budget }));
    expect(e).toBeInstanceOf(ResourceLimitError);
    // After k iterations the states kept are 32 + 48 + ... + 16 (k + 1) bytes: the first k over the budget.
    let k = 0;
    let kept = 0;
    while (kept <= budget) kept += 16 * (++k + 1);
    expect((e as Error).message).toMatch(
      new RegExp(`node 'grow' \\(Loop\\): its iterations keep ${n(kept)} bytes \\(state and scan outputs\\) after ${n(k)} iterations`),
    );
    // Within the budget it runs, and agrees with onnxruntime.
    expectSameOutputs(await runOn('mlx', bytes, { M: i64([50], []), x: x4 }), await runOn('cpu', bytes, { M: i64([50], []), x: x4 }));
  });

  it('a scan output whose shape changes between iterations is an error naming the node', async () => {
    // scan = x[iter : iter + 1]: shape [1] for iterations 0-3, then [0].
    const body: GraphSpec = {
      name: 'slice',
      inputs: [v('iter', 'int64', []), v('cond_in', 'bool', [])],
      outputs: [v('cond_out', 'bool', []), v('scan', 'float32', [null])],
      initializers: [
        { name: 'one', type: 'int64', dims: [], values: [1n] },
        { name: 'zero', type: 'int64', dims: [1], values: [0n] },
      ],
      nodes: [
        node('Identity', ['cond_in'], ['cond_out']),
        node('Add', ['iter', 'one'], ['end']),
        node('Unsqueeze', ['iter', 'zero'], ['s0']),
        node('Unsqueeze', ['end', 'zero'], ['s1']),
        node('Slice', ['x', 's0', 's1'], ['scan']),
      ],
    };
    const bytes = model({
      opsets: { '': 13 },
      inputs: [v('M', 'int64', []), v('x', 'float32', [4])],
      outputs: [v('all', 'float32', [null, null])],
      initializers: [{ name: 'cond0', type: 'bool', dims: [], values: [1] }],
      nodes: [node('Loop', ['M', 'cond0'], ['all'], { name: 'sl', attrs: { body: { g: body } } })],
    });
    expect(await outcome(bytes, { M: i64([6], []), x: x4 }, {})).toBeInstanceOf(Error);
    const e = await outcome(bytes, { M: i64([6], []), x: x4 }, mlxWith());
    expect((e as Error).message).toMatch(/node 'sl' \(Loop\): scan output 0 has shape \[0\] in iteration 4 and \[1\] in the first/);
    expectSameOutputs(await runOn('mlx', bytes, { M: i64([4], []), x: x4 }), await runOn('cpu', bytes, { M: i64([4], []), x: x4 }));
  });
});

describe('long loops', () => {
  // A counter carried on the host (shape math): nothing accumulates, so the budget never stops it.
  const counter = (): Uint8Array => {
    const body: GraphSpec = {
      name: 'count',
      inputs: [v('iter', 'int64', []), v('cond_in', 'bool', []), v('c', 'int64', [])],
      outputs: [v('cond_out', 'bool', []), v('c_out', 'int64', [])],
      initializers: [{ name: 'one', type: 'int64', dims: [], values: [1n] }],
      nodes: [node('Identity', ['cond_in'], ['cond_out']), node('Add', ['c', 'one'], ['c_out'])],
    };
    return model({
      opsets: { '': 13 },
      inputs: [v('M', 'int64', [])],
      outputs: [v('count', 'int64', [])],
      initializers: [
        { name: 'cond0', type: 'bool', dims: [], values: [1] },
        { name: 'c0', type: 'int64', dims: [], values: [0n] },
      ],
      nodes: [node('Loop', ['M', 'cond0', 'c0'], ['count'], { name: 'count', attrs: { body: { g: body } } })],
    });
  };

  it('run() keeps the event loop turning and stops on RunOptions.terminate (2^62 iterations)', async () => {
    const runOptions: RunOptions = { terminate: false };
    let ticks = 0;
    // The terminate flag is set by the timer's 10th tick: the run ends only if the event loop keeps
    // turning while it loops (else it would run 2^62 iterations and the test time out). Counting
    // ticks, not milliseconds, keeps a loaded machine (a slow create()) from failing it.
    const timer = setInterval(() => {
      if (++ticks === 10) runOptions.terminate = true;
    }, 5);
    try {
      const t0 = performance.now();
      const e = await outcome(counter(), { M: i64([2 ** 62], []) }, mlxWith(), runOptions);
      expect(e).toBeInstanceOf(RunTerminatedError);
      expect((e as Error).message).toMatch(/the run was terminated \(RunOptions\.terminate\)/);
      expect(performance.now() - t0).toBeLessThan(10_000);
      expect(ticks).toBeGreaterThanOrEqual(10);
    } finally {
      clearInterval(timer);
    }
  });

  it('loops long enough to pause give onnxruntime-node results (state, scan outputs, both conditions)', async () => {
    for (const cond of ['fixed', 'computed'] as const) {
      const bytes = loopModel(cond);
      const feeds = { M: i64([6000], []), x: x4 };
      const t0 = performance.now();
      const have = await runOn('mlx', bytes, feeds);
      // Long enough to pause (every 10 ms) several times.
      expect(performance.now() - t0).toBeGreaterThan(100);
      expectSameOutputs(have, await runOn('cpu', bytes, feeds));
    }
    const count = await runOn('mlx', counter(), { M: i64([20000], []) });
    expect(Number((count.count.data as BigInt64Array)[0])).toBe(20000);
  });
});

describe('Loop structure, checked at create()', () => {
  // A body whose outputs do not match the node's is invalid everywhere: refused, never handed to
  // onnxruntime (whose own handling of such bodies is not to be relied on).
  it('a body with one output fewer than the node is refused as an invalid node', async () => {
    const bytes = loopModel('fixed', { outputs: [v('cond_out', 'bool', []), v('acc_out', 'float32', [4])] });
    const e = await outcome(bytes, { M: i64([3], []), x: x4 }, mlxWith());
    expect(e).toBeInstanceOf(RefusedNodeError);
    expect((e as Error).message).toMatch(/node 'loop' \(Loop\): the node has 2 outputs and its body 1 besides the condition/);
  });
});

describe('Scan structure, checked at create()', () => {
  const body: GraphSpec = {
    name: 'sum',
    inputs: [v('s', 'float32', [2]), v('row', 'float32', [2])],
    outputs: [v('s_out', 'float32', [2]), v('y', 'float32', [2])],
    nodes: [node('Add', ['s', 'row'], ['s_out']), node('Identity', ['s_out'], ['y'])],
  };
  const scan = (opset: number, attrs: Record<string, number | number[]>): ModelSpec => ({
    opsets: { '': opset },
    inputs: [v('init', 'float32', opset === 8 ? [1, 2] : [2]), v('xs', 'float32', opset === 8 ? [1, 3, 2] : [3, 2])],
    outputs: [v('last', 'float32'), v('ys', 'float32')],
    nodes: [
      node('Scan', opset === 8 ? ['', 'init', 'xs'] : ['init', 'xs'], ['last', 'ys'], {
        name: 'scan',
        attrs: { body: { g: body }, ...attrs },
      }),
    ],
  });
  const feeds = (opset: number) =>
    opset === 8
      ? { init: f32([0, 0], [1, 2]), xs: f32([1, 2, 3, 4, 5, 6], [1, 3, 2]) }
      : { init: f32([0, 0], [2]), xs: f32([1, 2, 3, 4, 5, 6], [3, 2]) };

  it('Scan-8 with num_scan_inputs 2^31 (seed 600: test_scan_sum, past 3 GiB of memory)', async () => {
    const bytes = model(scan(8, { num_scan_inputs: 2 ** 31 }));
    expect(await outcome(bytes, feeds(8), {})).toBeInstanceOf(Error);
    const e = await outcome(bytes, feeds(8), mlxWith());
    expect(e).toBeInstanceOf(RefusedNodeError);
    expect((e as Error).message).toMatch(
      /node 'scan' \(Scan\): num_scan_inputs 2147483648 is out of range: the node has 2 state and scan input\(s\)/,
    );
  });

  // Seed 2410, case 8556 (test_scan9_scalar): onnxruntime-node itself spins for minutes loading a
  // Scan-9 whose num_scan_inputs is 2^31-1. The structure check refused the node but as merely
  // unsupported, so create() handed it to the fallback and hung there; an invalid node is never
  // handed on.
  it('Scan-9 with num_scan_inputs 2^31-1 is refused at once, never handed to onnxruntime', async () => {
    const bytes = model(scan(9, { num_scan_inputs: 2 ** 31 - 1 }));
    const t0 = performance.now();
    const e = await outcome(bytes, feeds(9), mlxWith());
    expect(e).toBeInstanceOf(RefusedNodeError);
    expect((e as Error).message).toMatch(/node 'scan' \(Scan\): num_scan_inputs 2147483647 is out of range/);
    expect(performance.now() - t0).toBeLessThan(10_000);
  });

  for (const [opset, attrs, message] of [
    [9, { num_scan_inputs: 0 }, /num_scan_inputs 0 is out of range/],
    [9, { num_scan_inputs: 3 }, /num_scan_inputs 3 is out of range: the node has 2 state and scan input\(s\)/],
    [9, { num_scan_inputs: 2 }, /node 'scan' \(Scan\): scan input 1 has 3 entries along its scan axis, scan input 0 has 2/],
    [9, { num_scan_inputs: 1, scan_input_axes: [0, 0] }, /scan_input_axes has 2 entries for 1 scan input\(s\)/],
    [9, { num_scan_inputs: 1, scan_output_directions: [0, 1, 0] }, /scan_output_directions has 3 entries for 1 scan output\(s\)/],
    [8, { num_scan_inputs: 1, directions: [0, 0] }, /directions has 2 entries for 1 scan input\(s\)/],
  ] as [number, Record<string, number | number[]>, RegExp][]) {
    it(`Scan-${opset} ${JSON.stringify(attrs)}: refused by both`, async () => {
      const bytes = model(scan(opset, attrs));
      expect(await outcome(bytes, feeds(opset), {})).toBeInstanceOf(Error);
      const e = await outcome(bytes, feeds(opset), mlxWith());
      expect(e).toBeInstanceOf(Error);
      expect((e as Error).message).toMatch(message);
    });
  }

  it('valid Scans still agree with onnxruntime', async () => {
    for (const opset of [8, 9]) {
      const bytes = model(scan(opset, { num_scan_inputs: 1 }));
      expectSameOutputs(await runOn('mlx', bytes, feeds(opset)), await runOn('cpu', bytes, feeds(opset)));
    }
  });
});

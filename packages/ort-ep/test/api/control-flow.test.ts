// If, Loop and Scan: subgraphs that read values of the enclosing graph, carried state, scan
// outputs, early exit, and nesting, each against onnxruntime-node's CPU provider.
import { describe, expect, it } from 'vitest';
import { model, node, v, type GraphSpec } from '../helpers/build.js';
import { bool, expectSameAsOrt, f32, i64, plain, runOn, seeded } from '../helpers/ort.js';

const x4 = () => f32([1, -2, 3, -4], [4]);

describe('If', () => {
  // then: x * 2, else: x - 1; both read x from the enclosing graph.
  const thenG: GraphSpec = {
    name: 'then',
    inputs: [],
    outputs: [v('t_out', 'float32', [4])],
    initializers: [{ name: 'two', type: 'float32', dims: [], values: [2] }],
    nodes: [node('Mul', ['x', 'two'], ['t_out'])],
  };
  const elseG: GraphSpec = {
    name: 'else',
    inputs: [],
    outputs: [v('e_out', 'float32', [4])],
    initializers: [{ name: 'one', type: 'float32', dims: [], values: [1] }],
    nodes: [node('Sub', ['x', 'one'], ['e_out'])],
  };
  const bytes = model({
    opsets: { '': 13 },
    inputs: [v('c', 'bool', []), v('x', 'float32', [4])],
    outputs: [v('y', 'float32', [4])],
    nodes: [node('If', ['c'], ['y'], { attrs: { then_branch: { g: thenG }, else_branch: { g: elseG } } })],
  });

  it('takes the then branch on true and the else branch on false', async () => {
    expect(plain((await expectSameAsOrt(bytes, { c: bool([1], []), x: x4() })).y)).toEqual([2, -4, 6, -8]);
    expect(plain((await expectSameAsOrt(bytes, { c: bool([0], []), x: x4() })).y)).toEqual([0, -3, 2, -5]);
  });

  it('with a condition computed in the graph, and a nested If', async () => {
    // y = sum(x) > 0 ? (max(x) > 2 ? x * 2 : x - 1) : -x
    const inner: GraphSpec = {
      name: 'inner',
      inputs: [],
      outputs: [v('in_out', 'float32', [4])],
      nodes: [
        node('ReduceMax', ['x'], ['mx'], { attrs: { keepdims: 0 } }),
        node('Greater', ['mx', 'two0'], ['c2']),
        node('If', ['c2'], ['in_out'], { attrs: { then_branch: { g: thenG }, else_branch: { g: elseG } } }),
      ],
      initializers: [{ name: 'two0', type: 'float32', dims: [], values: [2] }],
    };
    const neg: GraphSpec = { name: 'neg', inputs: [], outputs: [v('n_out', 'float32', [4])], nodes: [node('Neg', ['x'], ['n_out'])] };
    const nested = model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [4])],
      outputs: [v('y', 'float32', [4])],
      initializers: [{ name: 'zero', type: 'float32', dims: [], values: [0] }],
      nodes: [
        node('ReduceSum', ['x'], ['s'], { attrs: { keepdims: 0 } }),
        node('Greater', ['s', 'zero'], ['c']),
        node('If', ['c'], ['y'], { attrs: { then_branch: { g: inner }, else_branch: { g: neg } } }),
      ],
    });
    expect(plain((await expectSameAsOrt(nested, { x: f32([1, 2, 3, -1], [4]) })).y)).toEqual([2, 4, 6, -2]);
    expect(plain((await expectSameAsOrt(nested, { x: f32([1, 2, 1, -1], [4]) })).y)).toEqual([0, 1, 0, -2]);
    expect(plain((await expectSameAsOrt(nested, { x: x4() })).y)).toEqual([-1, 2, -3, 4]);
  });
});

describe('Loop', () => {
  // body(iter, cond, acc) -> (cond, acc + x * iter, acc + x * iter as a scan output)
  const body = (stopAfter?: number): GraphSpec => ({
    name: 'body',
    inputs: [v('iter', 'int64', []), v('cond_in', 'bool', []), v('acc', 'float32', [4])],
    outputs: [v('cond_out', 'bool', []), v('acc_out', 'float32', [4]), v('scan', 'float32', [4])],
    initializers: stopAfter === undefined ? [] : [{ name: 'limit', type: 'int64', dims: [], values: [BigInt(stopAfter)] }],
    nodes: [
      node('Cast', ['iter'], ['iter_f'], { attrs: { to: 1 } }),
      node('Mul', ['x', 'iter_f'], ['step']),
      node('Add', ['acc', 'step'], ['acc_out']),
      node('Identity', ['acc_out'], ['scan']),
      stopAfter === undefined ? node('Identity', ['cond_in'], ['cond_out']) : node('Less', ['iter', 'limit'], ['cond_out']),
    ],
  });
  const loopModel = (stopAfter?: number) =>
    model({
      opsets: { '': 13 },
      inputs: [v('M', 'int64', []), v('x', 'float32', [4])],
      outputs: [v('final', 'float32', [4]), v('all', 'float32', [null, 4])],
      initializers: [
        { name: 'cond0', type: 'bool', dims: [], values: [1] },
        { name: 'acc0', type: 'float32', dims: [4], values: [0, 0, 0, 0] },
      ],
      nodes: [node('Loop', ['M', 'cond0', 'acc0'], ['final', 'all'], { attrs: { body: { g: body(stopAfter) } } })],
    });

  it('carries state for M iterations and stacks the scan outputs', async () => {
    const out = await expectSameAsOrt(loopModel(), { M: i64([4], []), x: x4() });
    // acc after iteration k: x * (0 + 1 + ... + k)
    expect(plain(out.final)).toEqual([6, -12, 18, -24]);
    expect(out.all.dims).toEqual([4, 4]);
    expect(plain(out.all).slice(4, 8)).toEqual([1, -2, 3, -4]);
  });

  it('stops early when the body turns the condition false', async () => {
    // Iterations 0, 1, 2 run (cond_out = iter < 2 is false after iteration 2).
    const out = await expectSameAsOrt(loopModel(2), { M: i64([10], []), x: x4() });
    expect(plain(out.final)).toEqual([3, -6, 9, -12]);
    expect(out.all.dims).toEqual([3, 4]);
  });

  it('a loop nested in a loop (outer iteration count read by the inner body)', async () => {
    // inner: acc += 1, repeated (outer iter + 1) times; outer sums them: 1 + 2 + 3 = 6 for M = 3.
    const innerBody: GraphSpec = {
      name: 'inner',
      inputs: [v('j', 'int64', []), v('ci', 'bool', []), v('a', 'float32', [])],
      outputs: [v('co', 'bool', []), v('a_out', 'float32', [])],
      initializers: [{ name: 'one_f', type: 'float32', dims: [], values: [1] }],
      nodes: [node('Identity', ['ci'], ['co']), node('Add', ['a', 'one_f'], ['a_out'])],
    };
    const outerBody: GraphSpec = {
      name: 'outer',
      inputs: [v('i', 'int64', []), v('c', 'bool', []), v('tot', 'float32', [])],
      outputs: [v('c_out', 'bool', []), v('tot_out', 'float32', [])],
      initializers: [
        { name: 'one_i', type: 'int64', dims: [], values: [1n] },
        { name: 'zero_f', type: 'float32', dims: [], values: [0] },
      ],
      nodes: [
        node('Add', ['i', 'one_i'], ['n']),
        node('Loop', ['n', 'c', 'zero_f'], ['cnt'], { attrs: { body: { g: innerBody } } }),
        node('Add', ['tot', 'cnt'], ['tot_out']),
        node('Identity', ['c'], ['c_out']),
      ],
    };
    const bytes = model({
      opsets: { '': 13 },
      inputs: [v('M', 'int64', [])],
      outputs: [v('total', 'float32', [])],
      initializers: [
        { name: 'cond0', type: 'bool', dims: [], values: [1] },
        { name: 't0', type: 'float32', dims: [], values: [0] },
      ],
      nodes: [node('Loop', ['M', 'cond0', 't0'], ['total'], { attrs: { body: { g: outerBody } } })],
    });
    expect(plain((await expectSameAsOrt(bytes, { M: i64([3], []) })).total)).toEqual([6]);
  });
});

describe('Scan', () => {
  // body(s, row) -> (s + row, (s + row) * w), w read from the enclosing graph.
  const body: GraphSpec = {
    name: 'body',
    inputs: [v('s', 'float32', [2]), v('row', 'float32', [2])],
    outputs: [v('s_out', 'float32', [2]), v('y', 'float32', [2])],
    nodes: [node('Add', ['s', 'row'], ['s_out']), node('Mul', ['s_out', 'w'], ['y'])],
  };
  const scanModel = (attrs: Record<string, number[] | number>) =>
    model({
      opsets: { '': 13 },
      inputs: [v('init', 'float32', [2]), v('xs', 'float32', [3, 2])],
      outputs: [v('last', 'float32', [2]), v('ys', 'float32', [3, 2])],
      initializers: [{ name: 'w', type: 'float32', dims: [2], values: [1, -1] }],
      nodes: [node('Scan', ['init', 'xs'], ['last', 'ys'], { attrs: { num_scan_inputs: 1, body: { g: body }, ...attrs } })],
    });
  const feeds = () => ({ init: f32([0.5, 1], [2]), xs: f32([1, 2, 3, 4, 5, 6], [3, 2]) });

  it('a running sum with a per-step output', async () => {
    const out = await expectSameAsOrt(scanModel({}), feeds());
    expect(plain(out.last)).toEqual([9.5, 13]);
    expect(plain(out.ys)).toEqual([1.5, -3, 4.5, -7, 9.5, -13]);
  });

  it('reversed input direction and output direction', async () => {
    const out = await expectSameAsOrt(scanModel({ scan_input_directions: [1], scan_output_directions: [1] }), feeds());
    expect(plain(out.last)).toEqual([9.5, 13]);
    // Rows visited 5,6 then 3,4 then 1,2; outputs written last-to-first.
    expect(plain(out.ys)).toEqual([9.5, -13, 8.5, -11, 5.5, -7]);
  });

  it('scanning along axis 1 of the input', async () => {
    const bytes = model({
      opsets: { '': 13 },
      inputs: [v('init', 'float32', [2]), v('xs', 'float32', [2, 3])],
      outputs: [v('last', 'float32', [2]), v('ys', 'float32', [3, 2])],
      initializers: [{ name: 'w', type: 'float32', dims: [2], values: [1, -1] }],
      nodes: [node('Scan', ['init', 'xs'], ['last', 'ys'], { attrs: { num_scan_inputs: 1, scan_input_axes: [1], body: { g: body } } })],
    });
    const out = await expectSameAsOrt(bytes, { init: f32([0, 0], [2]), xs: f32([1, 2, 3, 4, 5, 6], [2, 3]) });
    expect(plain(out.last)).toEqual([6, 15]);
  });
});

describe('Scan-8 (batched)', () => {
  // body(s, a, b) -> (s + a - b, s * a): two scan inputs, one state, one scan output.
  const body: GraphSpec = {
    name: 'body8',
    inputs: [v('s', 'float32', [2]), v('a', 'float32', [2]), v('b', 'float32', [2])],
    outputs: [v('s_out', 'float32', [2]), v('y', 'float32', [2])],
    nodes: [node('Add', ['s', 'a'], ['t']), node('Sub', ['t', 'b'], ['s_out']), node('Mul', ['s', 'a'], ['y'])],
  };
  const scan8 = (directions?: number[], lens = false) =>
    model({
      opsets: { '': 8 },
      inputs: [
        ...(lens ? [v('lens', 'int64', [3])] : []),
        v('init', 'float32', [3, 2]),
        v('xa', 'float32', [3, 4, 2]),
        v('xb', 'float32', [3, 4, 2]),
      ],
      outputs: [v('last', 'float32', [3, 2]), v('ys', 'float32', [3, 4, 2])],
      nodes: [
        node('Scan', [lens ? 'lens' : '', 'init', 'xa', 'xb'], ['last', 'ys'], {
          attrs: { num_scan_inputs: 2, body: { g: body }, ...(directions ? { directions } : {}) },
        }),
      ],
    });
  const feeds = () => ({ init: f32(seeded(6, 1), [3, 2]), xa: f32(seeded(24, 2), [3, 4, 2]), xb: f32(seeded(24, 3), [3, 4, 2]) });
  it('each batch entry scans its own rows, forward', () => expectSameAsOrt(scan8(), feeds()));
  it('one scan input reversed', () => expectSameAsOrt(scan8([0, 1]), feeds()));
  it('full-length sequence_lens; a shorter one is refused at run time', async () => {
    await expectSameAsOrt(scan8(undefined, true), { lens: i64([4, 4, 4], [3]), ...feeds() });
    await expect(runOn('mlx', scan8(undefined, true), { lens: i64([4, 2, 4], [3]), ...feeds() })).rejects.toThrow(/sequence length of 2/);
  });
});

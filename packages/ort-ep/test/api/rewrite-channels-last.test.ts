// The layout pass (src/plan/rewrite/channels-last.ts): convolutions with weights prepacked in panels
// of 32 output channels whose data stays channels-last between them. Each graph is checked against
// onnxruntime-node and against the same rewrites without the pass, eager and compiled; the layout
// flags it sets are checked on the prepared graph (which values stay channels-last, which go back).
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import { FUSED_DOMAIN } from '../../src/ops/mlx/fused.js';
import { prepareModel } from '../../src/plan/prepare.js';
import { REWRITES } from '../../src/plan/rewrite/index.js';
import { model, node, v, type NodeSpec } from '../helpers/build.js';
import { expectSameAsOrt, expectSameWithRewrites, runMlxWith, runOn, seededFeed, seededInit, type Feeds } from '../helpers/ort.js';

const WITHOUT = (Object.keys(REWRITES) as (keyof typeof REWRITES)[]).filter((n) => n !== 'channels-last');
const init = seededInit;
const t = seededFeed;

/** The ConvChannelsLast nodes of the prepared graph, as 'x_last residual_last y_last' per node. */
function flags(bytes: Uint8Array): string[] {
  const g = prepareModel(bytes).model.graph;
  const int = (n: (typeof g.nodes)[number], k: string) => {
    const a = n.attributes.get(k);
    return a?.type === 'int' ? a.value : -1;
  };
  return g.nodes
    .filter((n) => n.opType === 'ConvChannelsLast')
    .map((n) => `${int(n, 'x_last')}${int(n, 'residual_last')}${int(n, 'y_last')}`);
}

/** The op types of the prepared graph. */
function opTypes(bytes: Uint8Array): string[] {
  return prepareModel(bytes).model.graph.nodes.map((n) => n.opType);
}

/** The MaxPoolChannelsLast nodes of the prepared graph, as their y_last flag. */
function poolFlags(bytes: Uint8Array): string[] {
  const g = prepareModel(bytes).model.graph;
  return g.nodes
    .filter((n) => n.opType === 'MaxPoolChannelsLast')
    .map((n) => {
      const a = n.attributes.get('y_last');
      return String(a?.type === 'int' ? a.value : -1);
    });
}

async function expectLayout(bytes: Uint8Array, f: Feeds, tol = { rtol: 1e-4, atol: 1e-4 }) {
  await expectSameAsOrt(bytes, f, tol);
  await expectSameWithRewrites(bytes, f, true, WITHOUT, tol);
}

const conv = (inputs: string[], out: string, k: number, attrs: Record<string, number[] | { i: number }> = {}): NodeSpec =>
  node('Conv', inputs, [out], { attrs: { kernel_shape: [k, k], pads: [k >> 1, k >> 1, k >> 1, k >> 1], ...attrs } });

describe('channels-last layout pass', () => {
  it('a ResNet stage: stem + MaxPool, bottleneck with a strided 1x1 downsample, residual + Relu, GlobalAveragePool', async () => {
    const X = [2, 3, 17, 15];
    const nodes: NodeSpec[] = [
      conv(['x', 'W0', 'B0'], 's', 3, { strides: [2, 2] }),
      node('Relu', ['s'], ['s1']),
      node('MaxPool', ['s1'], ['p'], { attrs: { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 1, 1] } }),
      conv(['p', 'W1', 'B1'], 'a', 1),
      node('Relu', ['a'], ['a1']),
      conv(['a1', 'W2', 'B2'], 'b', 3, { strides: [2, 2] }),
      node('Relu', ['b'], ['b1']),
      conv(['b1', 'W3', 'B3'], 'c', 1),
      conv(['p', 'Wd'], 'd', 1, { strides: [2, 2], pads: [0, 0, 0, 0] }),
      node('Add', ['c', 'd'], ['e']),
      node('Relu', ['e'], ['e1']),
      conv(['e1', 'W4', 'B4'], 'f', 3),
      node('Add', ['e1', 'f'], ['g']),
      node('Relu', ['g'], ['g1']),
      node('GlobalAveragePool', ['g1'], ['y']),
    ];
    const inits = [
      init('W0', [8, 3, 3, 3], 1),
      init('B0', [8], 2),
      init('W1', [4, 8, 1, 1], 3),
      init('B1', [4], 4),
      init('W2', [4, 4, 3, 3], 5),
      init('B2', [4], 6),
      init('W3', [16, 4, 1, 1], 7),
      init('B3', [16], 8),
      init('Wd', [16, 8, 1, 1], 9),
      init('W4', [16, 16, 3, 3], 10),
      init('B4', [16], 11),
    ];
    const bytes = model({ inputs: [v('x', 'float32', X)], outputs: [v('y', 'float32')], nodes, initializers: inits, opsets: { '': 17 } });
    expect(prepareModel(bytes).rewrites).toMatchObject({ 'channels-last': 8 });
    // The stem and its MaxPool stay channels-last (the pool becomes MaxPoolChannelsLast); a, b, the
    // residual d and e1 too; the last conv (with e1 as its residual) stays channels-last for the
    // global average, which averages the channels-last data and hands back ONNX's layout.
    const f = flags(bytes);
    expect(f).toHaveLength(6);
    expect(f[0]).toBe('001');
    expect(f[1]).toBe('101');
    expect(poolFlags(bytes)).toEqual(['1']);
    expect(f.filter((s) => s.endsWith('1'))).toHaveLength(6);
    expect(f.at(-1)).toBe('111');
    expect(opTypes(bytes)).toContain('GlobalAveragePoolChannelsLast');
    expect(opTypes(bytes)).not.toContain('GlobalAveragePool');
    await expectLayout(bytes, { x: t(X, 12) });
  });

  it('records the panels layout it packed, and reads a graph packed in either layout (written on another CPU)', async () => {
    const [O, C, H, W] = [40, 3, 6, 5];
    const plain = model({
      inputs: [v('x', 'float32', [1, C, H, W])],
      outputs: [v('y', 'float32')],
      nodes: [conv(['x', 'W', 'B'], 'y', 3)],
      initializers: [init('W', [O, C, 3, 3], 21), init('B', [O], 22)],
      opsets: { '': 17 },
    });
    const prepared = prepareModel(plain).model.graph.nodes.filter((n) => n.opType === 'ConvChannelsLast');
    expect(prepared.map((n) => (n.attributes.get('split_halves') as { value: number }).value)).toEqual([mx.convPanelsSplit() ? 1 : 0]);
    const f = { x: t([1, C, H, W], 23) };
    const want = Array.from((await runOn('cpu', plain, f)).y.data as Float32Array);
    // The node as a graph written elsewhere holds it: W packed by its definition (panel q, tap and
    // channel d = (ky * 3 + kx) * C + c, output channel j: [q][d][j], or [q][j / 16][d][j % 16] split).
    const w = init('W', [O, C, 3, 3], 21).values as number[];
    const depth = 9 * C;
    for (const layout of [0, 1]) {
      const panels = new Array<number>(2 * depth * 32).fill(0);
      for (let o = 0; o < O; o++)
        for (let c = 0; c < C; c++)
          for (let tap = 0; tap < 9; tap++) {
            const [q, j, d] = [Math.floor(o / 32), o % 32, tap * C + c];
            panels[layout ? q * depth * 32 + Math.floor(j / 16) * depth * 16 + d * 16 + (j % 16) : (q * depth + d) * 32 + j] =
              w[(o * C + c) * 9 + tap];
          }
      const packed = model({
        inputs: [v('x', 'float32', [1, C, H, W])],
        outputs: [v('y', 'float32')],
        nodes: [
          node('ConvChannelsLast', ['x', 'wp', 'B'], ['y'], {
            domain: FUSED_DOMAIN,
            attrs: {
              kernel_shape: [3, 3],
              pads: [1, 1, 1, 1],
              group: { i: 1 },
              out_channels: { i: O },
              x_last: { i: 0 },
              residual_last: { i: 0 },
              y_last: { i: 0 },
              split_halves: { i: layout },
            },
          }),
        ],
        initializers: [{ name: 'wp', type: 'float32', dims: [2, 3, 3, C, 32], values: panels }, init('B', [O], 22)],
        opsets: { '': 17, [FUSED_DOMAIN]: 1 },
      });
      for (const compiled of [false, true]) {
        const got = Array.from((await runMlxWith(packed, f, { compiled, graphRewrites: false })).y.data as Float32Array);
        expect(got.length).toBe(want.length);
        got.forEach((g, i) => expect(Math.abs(g - want[i]), `layout ${layout} compiled ${compiled} [${i}]`).toBeLessThanOrEqual(1e-4));
      }
    }
  });

  it('MaxPools between convs: ceil_mode, dilations, auto_pad, one that is a graph output, one with Indices left alone', async () => {
    const X = [2, 3, 13, 11];
    const pool = (x: string, y: string[], attrs: Record<string, unknown>) => node('MaxPool', [x], y, { attrs: attrs as never });
    const nodes: NodeSpec[] = [
      conv(['x', 'W0', 'B0'], 'a', 3),
      node('Relu', ['a'], ['a1']),
      pool('a1', ['p1'], { kernel_shape: [3, 2], strides: [2, 2], dilations: [1, 2], pads: [1, 0, 1, 1], ceil_mode: 1 }),
      conv(['p1', 'W1'], 'b', 3),
      pool('b', ['p2'], { kernel_shape: [3, 3], strides: [2, 1], auto_pad: 'SAME_UPPER' }),
      conv(['p2', 'W2'], 'c', 3),
      pool('c', ['p3', 'i3'], { kernel_shape: [2, 2] }),
      pool('c', ['p4'], { kernel_shape: [3, 3], strides: [1, 2] }),
    ];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('p2', 'float32'), v('p3', 'float32'), v('i3', 'int64'), v('p4', 'float32')],
      nodes,
      initializers: [init('W0', [6, 3, 3, 3], 1), init('B0', [6], 2), init('W1', [5, 6, 3, 3], 3), init('W2', [4, 5, 3, 3], 4)],
      opsets: { '': 17 },
    });
    // p1 stays channels-last; the pool of p2 reads b channels-last and hands back ONNX's layout (a
    // graph output, which the next conv reads channels-first); c is also read by the pool with
    // Indices, so it goes back to ONNX's layout and both its pools stay as written.
    expect(poolFlags(bytes)).toEqual(['1', '0']);
    expect(flags(bytes)).toEqual(['001', '101', '000']);
    await expectLayout(bytes, { x: t(X, 13) });
  });

  it('values read by other ops or given as graph outputs go back to ONNX layout', async () => {
    const X = [1, 4, 9, 11];
    const nodes: NodeSpec[] = [
      conv(['x', 'W0'], 'a', 3),
      conv(['a', 'W1', 'B1'], 'b', 3, { dilations: [2, 2], pads: [2, 1, 2, 3] }),
      node('Transpose', ['b'], ['bt'], { attrs: { perm: [0, 1, 3, 2] } }),
      conv(['b', 'Wg'], 'c', 3, { group: { i: 2 } }),
      node('Conv', ['a', 'W2'], ['y2'], { attrs: { kernel_shape: [3, 3], auto_pad: 'SAME_UPPER', strides: [2, 2] } }),
    ];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('bt', 'float32'), v('c', 'float32'), v('y2', 'float32'), v('a', 'float32')],
      nodes,
      initializers: [
        init('W0', [6, 4, 3, 3], 1),
        init('W1', [6, 6, 3, 3], 2),
        init('B1', [6], 3),
        init('Wg', [4, 3, 3, 3], 4),
        init('W2', [5, 6, 3, 3], 5),
      ],
      opsets: { '': 17 },
    });
    expect(prepareModel(bytes).rewrites).toMatchObject({ 'channels-last': 4 });
    // a is a graph output, b is read by a Transpose: nothing stays channels-last.
    expect(flags(bytes)).toEqual(['000', '000', '000', '000']);
    await expectLayout(bytes, { x: t(X, 6) });
  });

  it('AveragePools of convs run channels-last: count_include_pad, ceil_mode, pads, strides, dilations, auto_pad', async () => {
    const avg = (x: string, y: string, attrs: Record<string, unknown>) => node('AveragePool', [x], [y], { attrs: attrs as never });
    const cases: Record<string, unknown>[] = [
      { kernel_shape: [2, 2], strides: [2, 2] },
      { kernel_shape: [3, 2], strides: [2, 3], pads: [1, 0, 2, 1], count_include_pad: 1 },
      { kernel_shape: [3, 2], strides: [2, 3], pads: [1, 0, 2, 1] },
      { kernel_shape: [3, 3], strides: [2, 2], pads: [1, 1, 0, 1], ceil_mode: 1, count_include_pad: 1 },
      { kernel_shape: [2, 3], strides: [3, 2], pads: [0, 1, 1, 0], ceil_mode: 1 },
      { kernel_shape: [2, 2], strides: [1, 2], dilations: [2, 3], pads: [1, 1, 1, 1], count_include_pad: 1 },
      { kernel_shape: [3, 2], strides: [2, 2], dilations: [2, 1], ceil_mode: 1 },
      { kernel_shape: [3, 3], strides: [2, 1], auto_pad: 'SAME_UPPER', count_include_pad: 1 },
      { kernel_shape: [2, 3], strides: [2, 2], auto_pad: 'SAME_LOWER' },
      { kernel_shape: [3, 2], strides: [2, 2], auto_pad: 'VALID', ceil_mode: 1 },
      { kernel_shape: [5, 5], strides: [1, 1], pads: [2, 2, 2, 2] },
    ];
    const nodes: NodeSpec[] = [conv(['x', 'W0', 'B0'], 'a', 3), node('Relu', ['a'], ['a1'])];
    // Each pool's result is a graph output (ONNX layout); the first also feeds a conv (channels-last).
    cases.forEach((attrs, i) => nodes.push(avg('a1', `p${i}`, attrs)));
    nodes.push(avg('b', 'q', { kernel_shape: [2, 2], strides: [2, 2], ceil_mode: 1 }));
    nodes.splice(3, 0, conv(['p0', 'W1'], 'b', 3));
    // A batch of two, and a batch of one with other odd sizes.
    for (const X of [
      [2, 3, 13, 11],
      [1, 3, 7, 9],
    ]) {
      const bytes = model({
        inputs: [v('x', 'float32', X)],
        outputs: [...cases.map((_, i) => v(`p${i}`, 'float32')), v('q', 'float32')],
        nodes,
        initializers: [init('W0', [6, 3, 3, 3], 1), init('B0', [6], 2), init('W1', [5, 6, 3, 3], 3)],
        opsets: { '': 19 },
      });
      const g = prepareModel(bytes).model.graph;
      expect(g.nodes.filter((n) => n.opType === 'AveragePoolChannelsLast').length).toBe(cases.length + 1);
      expect(g.nodes.filter((n) => n.opType === 'AveragePool').length).toBe(0);
      await expectLayout(bytes, { x: t(X, X[2]) });
    }
  });

  it('an AveragePool of a value other ops read too stays as written', async () => {
    const X = [1, 2, 8, 8];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('p', 'float32'), v('a', 'float32')],
      nodes: [conv(['x', 'W0'], 'a', 3), node('AveragePool', ['a'], ['p'], { attrs: { kernel_shape: [2, 2], strides: [2, 2] } })],
      initializers: [init('W0', [4, 2, 3, 3], 1)],
      opsets: { '': 17 },
    });
    expect(opTypes(bytes)).toEqual(['ConvChannelsLast', 'AveragePool']);
    await expectLayout(bytes, { x: t(X, 3) });
  });

  it("grouped convs join the pass with their groups' own panels; 2-D depthwise ones keep the depthwise kernel", async () => {
    const X = [1, 3, 12, 10];
    const nodes: NodeSpec[] = [
      conv(['x', 'W0', 'B0'], 'a', 3, { pads: [1, 1, 1, 1] }),
      node('Relu', ['a'], ['ar']),
      node('MaxPool', ['ar'], ['p'], { attrs: { kernel_shape: [2, 2], strides: [2, 2] } }),
      conv(['p', 'Wg', 'Bg'], 'g', 3, { group: { i: 2 }, strides: [2, 2], pads: [1, 0, 1, 2] }),
      node('Relu', ['g'], ['gr']),
      conv(['gr', 'Wd'], 'y', 3, { group: { i: 6 }, pads: [1, 1, 1, 1] }),
    ];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('y', 'float32')],
      nodes,
      initializers: [
        init('W0', [8, 3, 3, 3], 1),
        init('B0', [8], 2),
        init('Wg', [6, 4, 3, 3], 3),
        init('Bg', [6], 4),
        init('Wd', [6, 1, 3, 3], 5),
      ],
      opsets: { '': 17 },
    });
    // The stem and the grouped conv, the pool between them channels-last; the depthwise conv reads ONNX layout.
    expect(flags(bytes)).toEqual(['001', '100']);
    expect(poolFlags(bytes)).toEqual(['1']);
    expect(opTypes(bytes)).toEqual(['ConvChannelsLast', 'MaxPoolChannelsLast', 'ConvChannelsLast', 'Conv']);
    const g = prepareModel(bytes).model.graph;
    expect(g.initializers.get('Wg/panels')?.dims).toEqual([2, 3, 3, 4, 32]);
    await expectLayout(bytes, { x: t(X, 6) });
  });

  it('a global average read by a conv (a squeeze-excite gate) hands that conv ONNX layout', async () => {
    const X = [2, 4, 9, 7];
    const nodes: NodeSpec[] = [
      conv(['x', 'W0', 'B0'], 'a', 3),
      node('GlobalAveragePool', ['a'], ['g']),
      conv(['g', 'W1', 'B1'], 'h', 1),
      node('Sigmoid', ['h'], ['h1']),
      node('Mul', ['a', 'h1'], ['y']),
    ];
    const inits = [init('W0', [6, 4, 3, 3], 1), init('B0', [6], 2), init('W1', [6, 6, 1, 1], 3), init('B1', [6], 4)];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('y', 'float32'), v('g', 'float32')],
      nodes,
      initializers: inits,
      opsets: { '': 17 },
    });
    // a is read by Mul too, so it goes back to ONNX's layout and the average stays as written.
    expect(opTypes(bytes)).toContain('GlobalAveragePool');
    await expectLayout(bytes, { x: t(X, 5) });
    const only = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('h', 'float32')],
      nodes: nodes.slice(0, 3),
      initializers: inits,
      opsets: { '': 17 },
    });
    // Here only the average reads a: it averages channels-last data; its result, read by the 1x1
    // conv, is in ONNX's layout (that conv, alone in its group of 1x1s, is left as written).
    expect(opTypes(only)).toContain('GlobalAveragePoolChannelsLast');
    expect(flags(only)).toEqual(['001']);
    await expectLayout(only, { x: t(X, 6) });
  });

  it('a 1x1 conv whose data is in ONNX layout stays as written, and so does the stem it reads as residual (MobileNetV3)', async () => {
    // stem (3x3, + HardSwish) -> a; a -> 1x1 expand -> e -> HardSwish -> depthwise -> d; d * gate -> m;
    // m -> 1x1 project with a as residual -> y. The projection reads m in ONNX's layout: moving it
    // channels-last only to multiply is a copy the 1x1 matmul form does not need, so neither it nor
    // the expansion (whose input a then goes back) joins the stem's group.
    const X = [1, 3, 12, 10];
    const nodes: NodeSpec[] = [
      conv(['x', 'W0', 'B0'], 's', 3, { strides: [2, 2] }),
      node('HardSwish', ['s'], ['a']),
      conv(['a', 'W1', 'B1'], 'e', 1),
      node('HardSwish', ['e'], ['e1']),
      conv(['e1', 'Wd', 'Bd'], 'd', 3, { group: { i: 12 } }),
      node('ReduceMean', ['d'], ['g'], { attrs: { axes: [2, 3], keepdims: 1 } }),
      node('HardSigmoid', ['g'], ['g1']),
      node('Mul', ['d', 'g1'], ['m']),
      conv(['m', 'W2', 'B2'], 'p', 1),
      node('Add', ['a', 'p'], ['y']),
    ];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('y', 'float32')],
      nodes,
      initializers: [
        init('W0', [6, 3, 3, 3], 1),
        init('B0', [6], 2),
        init('W1', [12, 6, 1, 1], 3),
        init('B1', [12], 4),
        init('Wd', [12, 1, 3, 3], 5),
        init('Bd', [12], 6),
        init('W2', [6, 12, 1, 1], 7),
        init('B2', [6], 8),
      ],
      opsets: { '': 17 },
    });
    // Only the stem goes channels-last (its result back to ONNX's layout with its HardSwish).
    expect(flags(bytes)).toEqual(['000']);
    expect(opTypes(bytes).filter((o) => o === 'Conv')).toHaveLength(3);
    await expectLayout(bytes, { x: t(X, 9) });
  });

  it('a chain of 1x1 convolutions only is left as written (channels-first products, no layout moves)', async () => {
    const X = [1, 6, 5, 4];
    const bytes = model({
      inputs: [v('x', 'float32', X)],
      outputs: [v('y', 'float32')],
      nodes: [conv(['x', 'W0', 'B0'], 'a', 1), node('Relu', ['a'], ['a1']), conv(['a1', 'W1'], 'y', 1)],
      initializers: [init('W0', [8, 6, 1, 1], 1), init('B0', [8], 2), init('W1', [3, 8, 1, 1], 3)],
      opsets: { '': 17 },
    });
    expect(prepareModel(bytes).rewrites).toEqual({ 'conv-epilogue': 1 });
    await expectLayout(bytes, { x: t(X, 4) });
  });

  it('a residual that broadcasts the conv result to a larger shape of the same size as the result', async () => {
    // y [1, 2, 1, 3] + r [1, 1, 6, 1] -> [1, 2, 6, 3], kept channels-last for the next conv.
    const X = [1, 3, 1, 3];
    const bytes = model({
      inputs: [v('x', 'float32', X), v('r', 'float32', [1, 1, 6, 1])],
      outputs: [v('y', 'float32')],
      nodes: [conv(['x', 'W0', 'B0'], 'a', 3), node('Add', ['a', 'r'], ['e']), node('Relu', ['e'], ['e1']), conv(['e1', 'W1'], 'y', 3)],
      initializers: [init('W0', [2, 3, 3, 3], 1), init('B0', [2], 2), init('W1', [4, 2, 3, 3], 3)],
      opsets: { '': 17 },
    });
    expect(flags(bytes)).toEqual(['001', '100']);
    await expectLayout(bytes, { x: t(X, 4), r: t([1, 1, 6, 1], 5) });
  });

  it('1-D convolutions, a batch of 3, a residual that broadcasts, Clip bounds, and the pass off by name', async () => {
    const X = [3, 5, 13];
    const nodes: NodeSpec[] = [
      node('Conv', ['x', 'W0', 'B0'], ['a'], { attrs: { kernel_shape: [3], pads: [1, 1] } }),
      node('Conv', ['a', 'W1', 'B1'], ['b'], { attrs: { kernel_shape: [1] } }),
      node('Add', ['b', 'r'], ['e']),
      node('Clip', ['e', 'lo', 'hi'], ['y']),
    ];
    const bytes = model({
      inputs: [v('x', 'float32', X), v('r', 'float32', [1, 7, 1])],
      outputs: [v('y', 'float32')],
      nodes,
      initializers: [
        init('W0', [6, 5, 3], 1),
        init('B0', [6], 2),
        init('W1', [7, 6, 1], 3),
        init('B1', [7], 4),
        { name: 'lo', type: 'float32', dims: [], values: [-0.2] },
        { name: 'hi', type: 'float32', dims: [], values: [0.4] },
      ],
      opsets: { '': 17 },
    });
    expect(prepareModel(bytes).rewrites).toMatchObject({ 'conv-epilogue': 1, 'channels-last': 2 });
    expect(flags(bytes)).toEqual(['001', '100']);
    expect(prepareModel(bytes, { rewrites: WITHOUT }).rewrites['channels-last']).toBeUndefined();
    await expectLayout(bytes, { x: t(X, 5), r: t([1, 7, 1], 6) });
  });
});

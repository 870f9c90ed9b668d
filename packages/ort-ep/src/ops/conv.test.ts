// Convolutions beyond the node suite: groups, dilations, 1-D/3-D, asymmetric and auto pads,
// ConvTranspose with pads larger than the kernel reach, output_shape with strides and groups,
// per-channel integer convolutions, against onnxruntime-node.
import { describe, expect, it } from 'vitest';
import { model, node, v, type AttrSpec, type ElemName } from '../../test/helpers/build.js';
import { isSmallConv, SMALL_CONV_MAX_IM2COL, SMALL_CONV_MAX_POSITIONS } from './conv.js';
import { expectSameAsOrt, expectSameOutputs, ort, runMlxWith, runOn, seeded, type Feeds } from '../../test/helpers/ort.js';

const make: Record<string, (d: number[]) => ArrayLike<number | bigint>> = {
  float32: (d) => Float32Array.from(d),
  int32: (d) => Int32Array.from(d),
  uint8: (d) => Uint8Array.from(d),
  int8: (d) => Int8Array.from(d),
};
const size = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
const ints = (n: number, seed: number, lo: number, hi: number) => seeded(n, seed).map((x) => Math.round(lo + ((x + 1) / 2) * (hi - lo)));

interface Input {
  name: string;
  type: ElemName;
  dims: number[];
  data?: number[];
}

async function same(
  op: string,
  ins: Input[],
  attrs: Record<string, AttrSpec>,
  outType: ElemName = 'float32',
  opset = 22,
  tol = { rtol: 1e-4, atol: 1e-5 },
) {
  const bytes = model({
    opsets: { '': opset },
    inputs: ins.map((i) => v(i.name, i.type, i.dims)),
    outputs: [v('y', outType)],
    nodes: [
      node(
        op,
        ins.map((i) => i.name),
        ['y'],
        { attrs },
      ),
    ],
  });
  const feeds: Feeds = {};
  ins.forEach(
    (i, k) => (feeds[i.name] = new ort.Tensor(i.type as never, make[i.type](i.data ?? seeded(size(i.dims), k + 1)) as never, i.dims)),
  );
  return expectSameAsOrt(bytes, feeds, tol);
}
const f = (name: string, dims: number[]): Input => ({ name, type: 'float32', dims });

describe('Conv', () => {
  it('depthwise (group = channels), dilation 2, stride 2, bias', async () => {
    await same('Conv', [f('x', [2, 4, 9, 9]), f('w', [4, 1, 3, 3]), f('b', [4])], {
      group: 4,
      dilations: [2, 2],
      strides: [2, 2],
      pads: [1, 2, 2, 1],
    });
  });
  // The native depthwise kernel: stride 1 (the vectorized span), stride 2 with odd sizes,
  // SAME_UPPER, a channel multiplier of 3, a 5x5 kernel larger than the image's width plus pads.
  it('depthwise 3x3, stride 1, pads 1, no bias', async () => {
    await same('Conv', [f('x', [1, 5, 7, 6]), f('w', [5, 1, 3, 3])], { group: 5, pads: [1, 1, 1, 1] });
  });
  it('depthwise stride 2 on odd sizes, SAME_UPPER, bias', async () => {
    await same('Conv', [f('x', [2, 3, 11, 9]), f('w', [3, 1, 3, 3]), f('b', [3])], { group: 3, strides: [2, 2], auto_pad: 'SAME_UPPER' });
  });
  it('depthwise with a channel multiplier (w [C*3, 1, kh, kw]) and a rectangular kernel', async () => {
    await same('Conv', [f('x', [1, 2, 6, 8]), f('w', [6, 1, 2, 3]), f('b', [6])], { group: 2, pads: [0, 1, 1, 0], strides: [1, 2] });
  });
  it('depthwise 5x5 wider than the input (taps fully in the padding)', async () => {
    await same('Conv', [f('x', [1, 4, 3, 2]), f('w', [4, 1, 5, 5])], { group: 4, pads: [2, 2, 2, 2] });
  });
  // 1x1 convolutions run as a matmul over the flattened spatial axes.
  it('1x1, batch 1, bias', async () => {
    await same('Conv', [f('x', [1, 6, 5, 7]), f('w', [4, 6, 1, 1]), f('b', [4])], {});
  });
  it('1x1, batch 3, bias, 1-D', async () => {
    await same('Conv', [f('x', [3, 5, 9]), f('w', [7, 5, 1]), f('b', [7])], {});
  });
  it('1x1, batch 2, no bias, 3-D', async () => {
    await same('Conv', [f('x', [2, 3, 2, 3, 4]), f('w', [5, 3, 1, 1, 1])], {});
  });
  it('1x1 with a stride or pads is still a convolution', async () => {
    await same('Conv', [f('x', [1, 3, 5, 5]), f('w', [2, 3, 1, 1]), f('b', [2])], { strides: [2, 2], pads: [1, 0, 0, 1] });
  });
  // Constant weights and biases: reshaped once per session (OpContext.inputReshaped), eager, traced
  // and replayed runs; one of them also read as it is, by a second Conv of another form.
  it('1x1 with initializer weights and bias, eager and compiled, batch 1 and 2', async () => {
    for (const n of [1, 2]) {
      const bytes = model({
        opsets: { '': 17 },
        inputs: [v('x', 'float32', [n, 6, 5, 7])],
        outputs: [v('y', 'float32'), v('z', 'float32')],
        initializers: [
          { name: 'w', type: 'float32', dims: [4, 6, 1, 1], values: seeded(24, 7) },
          { name: 'b', type: 'float32', dims: [4], values: seeded(4, 8) },
        ],
        nodes: [node('Conv', ['x', 'w', 'b'], ['y']), node('Conv', ['x', 'w', 'b'], ['z'], { attrs: { pads: [1, 0, 0, 1] } })],
      });
      const feeds: Feeds = { x: new ort.Tensor('float32', Float32Array.from(seeded(n * 210, 9)), [n, 6, 5, 7]) };
      const want = await runOn('cpu', bytes, feeds);
      for (const compiled of [false, true])
        expectSameOutputs(await runMlxWith(bytes, feeds, { compiled }), want, { rtol: 1e-4, atol: 1e-5 });
    }
  });
  it('grouped 1-D with SAME_LOWER', async () => {
    await same('Conv', [f('x', [1, 6, 10]), f('w', [4, 3, 4])], { group: 2, auto_pad: 'SAME_LOWER', strides: [3] });
  });
  it('3-D with VALID and mixed strides', async () => {
    await same('Conv', [f('x', [1, 2, 5, 6, 7]), f('w', [3, 2, 2, 3, 2])], { auto_pad: 'VALID', strides: [1, 2, 3] });
  });
  it('opset 1 (the oldest form) with explicit kernel_shape', async () => {
    await same('Conv', [f('x', [1, 1, 5, 5]), f('w', [2, 1, 3, 3])], { kernel_shape: [3, 3], pads: [1, 1, 1, 1] }, 'float32', 1);
  });
});

describe('ConvTranspose', () => {
  it('pads larger than the kernel reach (crops the full output)', async () => {
    await same('ConvTranspose', [f('x', [1, 2, 4, 4]), f('w', [2, 3, 2, 2])], { strides: [2, 2], pads: [2, 1, 3, 2] });
  });
  it('a 1x1 input under a 3x3 kernel with pads', async () => {
    await same('ConvTranspose', [f('x', [1, 1, 1, 1]), f('w', [1, 1, 3, 3])], { pads: [1, 1, 1, 0] });
  });
  it('groups, dilations, output_padding and bias', async () => {
    await same('ConvTranspose', [f('x', [2, 4, 3, 3]), f('w', [4, 2, 3, 3]), f('b', [4])], {
      group: 2,
      dilations: [2, 1],
      strides: [2, 3],
      output_padding: [1, 2],
    });
  });
  it('output_shape with SAME_UPPER and stride 2, 1-D', async () => {
    await same('ConvTranspose', [f('x', [1, 1, 5]), f('w', [1, 2, 4])], { strides: [2], output_shape: [11], auto_pad: 'SAME_UPPER' });
  });
  it('3-D with strides', async () => {
    await same('ConvTranspose', [f('x', [1, 2, 2, 3, 2]), f('w', [2, 1, 2, 2, 3])], { strides: [2, 1, 2] });
  });
});

describe('ConvInteger and QLinearConv', () => {
  it('ConvInteger uint8 with a large window sum, per-tensor zero points', async () => {
    // 8 channels x 7x7 window x 255 x 127: a float32 sum would round; the product must be exact.
    await same(
      'ConvInteger',
      [
        { name: 'x', type: 'uint8', dims: [1, 8, 9, 9], data: ints(648, 1, 200, 255) },
        { name: 'w', type: 'int8', dims: [2, 8, 7, 7], data: ints(784, 2, 100, 127) },
        { name: 'xz', type: 'uint8', dims: [], data: [3] },
      ],
      { pads: [1, 1, 1, 1] },
      'int32',
      10,
      { rtol: 0, atol: 0 },
    );
  });
  it('QLinearConv int8 with per-channel weight scales, zero points and bias', async () => {
    await same(
      'QLinearConv',
      [
        { name: 'x', type: 'int8', dims: [1, 3, 6, 6], data: ints(108, 3, -128, 127) },
        { name: 'xs', type: 'float32', dims: [], data: [0.05] },
        { name: 'xz', type: 'int8', dims: [], data: [-3] },
        { name: 'w', type: 'int8', dims: [4, 3, 3, 3], data: ints(108, 4, -128, 127) },
        { name: 'ws', type: 'float32', dims: [4], data: [0.01, 0.02, 0.004, 0.03] },
        { name: 'wz', type: 'int8', dims: [4], data: [0, 0, 0, 0] },
        { name: 'ys', type: 'float32', dims: [], data: [0.2] },
        { name: 'yz', type: 'int8', dims: [], data: [5] },
        { name: 'b', type: 'int32', dims: [4], data: [100, -200, 3000, 0] },
      ],
      { strides: [2, 1], pads: [1, 0, 1, 1] },
      'int8',
      10,
      { rtol: 0, atol: 1 },
    );
  });
});

// Grouped convolutions on the native channels-last product (conv_gemm with each group's own weight
// panels): constant weights through the layout pass (ConvChannelsLast, fused bias, residual and
// clamp), compiled and eager, and weights fed at run time (the op's own path), all against
// onnxruntime-node.
describe('grouped Conv, native channels-last; Conv of few positions (small_conv)', () => {
  interface Case {
    name: string;
    x: number[];
    w: number[];
    attrs: Record<string, AttrSpec>;
    bias?: boolean;
    relu?: boolean;
    residual?: boolean;
    /** A dense 3x3 conv first, so that the grouped one reads channels-last data. */
    chain?: boolean;
  }
  const cases: Case[] = [
    {
      name: 'g2 3x3 stride 2 pads 1, bias, Relu (small-cnn)',
      x: [1, 8, 14, 14],
      w: [16, 4, 3, 3],
      attrs: { group: 2, strides: [2, 2], pads: [1, 1, 1, 1] },
      bias: true,
      relu: true,
    },
    {
      name: 'g4, asymmetric pads, dilation 2',
      x: [1, 8, 9, 10],
      w: [8, 2, 3, 3],
      attrs: { group: 4, pads: [0, 1, 2, 1], dilations: [2, 2] },
    },
    {
      name: 'g3 with two panels per group (40 channels each), stride [2, 1]',
      x: [1, 6, 9, 9],
      w: [120, 2, 3, 3],
      attrs: { group: 3, strides: [2, 1], pads: [1, 1, 1, 1] },
      bias: true,
      relu: true,
    },
    {
      name: 'g2 of 20 channels each, dilation [1, 2]',
      x: [1, 40, 6, 7],
      w: [8, 20, 3, 3],
      attrs: { group: 2, pads: [1, 2, 1, 2], dilations: [1, 2] },
      bias: true,
    },
    { name: 'g2 with K past one depth block (32 x 3 x 3)', x: [1, 64, 6, 6], w: [16, 32, 3, 3], attrs: { group: 2, pads: [1, 1, 1, 1] } },
    {
      name: 'g2, batch 3, more rows than one block',
      x: [3, 4, 12, 12],
      w: [6, 2, 3, 3],
      attrs: { group: 2, pads: [1, 1, 1, 1] },
      bias: true,
      relu: true,
    },
    { name: 'grouped 1x1 (g4)', x: [2, 8, 5, 5], w: [12, 2, 1, 1], attrs: { group: 4 }, bias: true },
    {
      name: 'g = channels, 1-D, stride 2, asymmetric pads',
      x: [2, 6, 11],
      w: [6, 1, 3],
      attrs: { group: 6, strides: [2], pads: [2, 0] },
      bias: true,
    },
    {
      name: 'g2, 1-D, dilation 3, stride 2',
      x: [1, 4, 17],
      w: [6, 2, 3],
      attrs: { group: 2, strides: [2], dilations: [3], pads: [1, 2] },
      relu: true,
    },
    {
      name: '2-D depthwise (the native depthwise kernel), Relu',
      x: [1, 6, 8, 8],
      w: [6, 1, 3, 3],
      attrs: { group: 6, pads: [1, 1, 1, 1] },
      bias: true,
      relu: true,
    },
    {
      name: 'g2 with a residual and Relu',
      x: [1, 4, 6, 6],
      w: [4, 2, 3, 3],
      attrs: { group: 2, pads: [1, 1, 1, 1] },
      bias: true,
      residual: true,
      relu: true,
    },
    // One group, few output positions (isSmallConv; a weight fed as an input takes it, a constant
    // one the channels-last rewrite): Silero VAD's STFT and encoder convolutions and their kin.
    { name: 'small: 1-D k256 stride 128, 1 -> 258 (the STFT)', x: [1, 1, 640], w: [258, 1, 256], attrs: { strides: [128] } },
    {
      name: 'small: 1-D k3 pads 1, 129 -> 128 over 4 positions, bias, Relu',
      x: [1, 129, 4],
      w: [128, 129, 3],
      attrs: { pads: [1, 1] },
      bias: true,
      relu: true,
    },
    {
      name: 'small: 1-D k3 stride 2, batch 3, 128 -> 64, Relu',
      x: [3, 128, 4],
      w: [64, 128, 3],
      attrs: { strides: [2], pads: [1, 1] },
      relu: true,
    },
    {
      name: 'small: 1-D dilation 2, asymmetric pads, 7 -> 5, a residual and Relu',
      x: [2, 7, 13],
      w: [5, 7, 4],
      attrs: { dilations: [2], pads: [3, 0] },
      bias: true,
      residual: true,
      relu: true,
    },
    {
      name: 'small: 2-D 3x3 stride 2 dilation [2, 1], batch 2, 9 -> 33 over 2x3, bias',
      x: [2, 9, 5, 6],
      w: [33, 9, 3, 3],
      attrs: { strides: [2, 2], dilations: [2, 1], pads: [1, 1, 1, 0] },
      bias: true,
    },
    {
      name: 'small: 2-D 2x3 stride [1, 2] SAME_LOWER, 6 -> 19, Relu',
      x: [1, 6, 4, 3],
      w: [19, 6, 2, 3],
      attrs: { strides: [1, 2], auto_pad: 'SAME_LOWER' },
      relu: true,
    },
    {
      name: 'g2 after a dense conv (channels-last input), SAME_UPPER stride 2',
      x: [1, 3, 10, 9],
      w: [8, 2, 3, 3],
      attrs: { group: 2, strides: [2, 2], auto_pad: 'SAME_UPPER' },
      bias: true,
      relu: true,
      chain: true,
    },
  ];
  const build = (t: Case, constant: boolean) => {
    const c = t.chain ? 4 : t.x[1];
    const wv = seeded(size(t.w), 3).map((x) => x * 0.5);
    const inits = [
      ...(constant ? [{ name: 'w', type: 'float32' as const, dims: t.w, values: wv }] : []),
      ...(t.bias ? [{ name: 'b', type: 'float32' as const, dims: [t.w[0]], values: seeded(t.w[0], 4) }] : []),
      ...(t.chain ? [{ name: 'w0', type: 'float32' as const, dims: [c, t.x[1], 3, 3], values: seeded(c * t.x[1] * 9, 5) }] : []),
    ];
    const nodes = [];
    if (t.chain) nodes.push(node('Conv', ['x', 'w0'], ['x1'], { attrs: { pads: [1, 1, 1, 1] } }));
    nodes.push(node('Conv', [t.chain ? 'x1' : 'x', 'w', ...(t.bias ? ['b'] : [])], ['c'], { attrs: t.attrs }));
    let out = 'c';
    if (t.residual) {
      nodes.push(node('Add', [out, 'r'], ['a']));
      out = 'a';
    }
    if (t.relu) {
      nodes.push(node('Relu', [out], ['y']));
      out = 'y';
    } else nodes.push(node('Identity', [out], ['y']));
    const bytes = model({
      opsets: { '': 17 },
      inputs: [v('x', 'float32', t.x), ...(constant ? [] : [v('w', 'float32', t.w)]), ...(t.residual ? [v('r', 'float32')] : [])],
      outputs: [v('y', 'float32')],
      initializers: inits,
      nodes,
    });
    const feeds: Feeds = { x: new ort.Tensor('float32', Float32Array.from(seeded(size(t.x), 1)), t.x) };
    if (!constant) feeds.w = new ort.Tensor('float32', Float32Array.from(wv), t.w);
    return { bytes, feeds };
  };
  const tol = { rtol: 1e-4, atol: 1e-5 };
  for (const t of cases) {
    it(t.name, async () => {
      for (const constant of [true, false]) {
        const { bytes, feeds } = build(t, constant);
        if (t.residual) {
          // The residual has the conv's output shape: ask onnxruntime for it first.
          const { bytes: b0, feeds: f0 } = build({ ...t, residual: false, relu: false }, constant);
          const shape = [...(await runOn('cpu', b0, f0)).y.dims];
          feeds.r = new ort.Tensor('float32', Float32Array.from(seeded(size(shape), 6)), shape);
        }
        const want = await runOn('cpu', bytes, feeds);
        for (const compiled of [true, false]) expectSameOutputs(await runMlxWith(bytes, feeds, { compiled }), want, tol);
        expectSameOutputs(await runMlxWith(bytes, feeds, { compiled: false, graphRewrites: false }), want, tol);
      }
    });
  }
});

describe('isSmallConv (the convolutions mx.ext.smallConv takes)', () => {
  const win = (kernel: number[], out: number[]) => ({
    kernel,
    out,
    strides: kernel.map(() => 1),
    padsBegin: kernel.map(() => 0),
    padsEnd: kernel.map(() => 0),
    dilations: kernel.map(() => 1),
  });
  it("takes Silero VAD's convolutions", () => {
    expect(isSmallConv([1, 1, 640], [258, 1, 256], win([256], [4]), 1)).toBe(true);
    expect(isSmallConv([1, 129, 4], [128, 129, 3], win([3], [4]), 1)).toBe(true);
    expect(isSmallConv([1, 128, 2], [64, 128, 3], win([3], [1]), 1)).toBe(true);
  });
  it('leaves groups, 3-D, more positions and larger im2col rows to the other paths', () => {
    expect(isSmallConv([1, 8, 4], [8, 4, 3], win([3], [4]), 2)).toBe(false);
    expect(isSmallConv([1, 2, 3, 3, 3], [4, 2, 1, 1, 1], win([1, 1, 1], [3, 3, 3]), 1)).toBe(false);
    expect(isSmallConv([1, 4, 40], [4, 4, 3], win([3], [SMALL_CONV_MAX_POSITIONS + 1]), 1)).toBe(false);
    const c = Math.floor(SMALL_CONV_MAX_IM2COL / 3 / 4) + 1;
    expect(isSmallConv([1, c, 4], [8, c, 3], win([3], [4]), 1)).toBe(false);
    expect(isSmallConv([1, 4, 9], [8, 4, 3], win([5], [5]), 1)).toBe(false);
  });
});

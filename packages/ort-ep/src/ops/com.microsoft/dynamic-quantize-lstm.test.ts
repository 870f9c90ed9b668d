// DynamicQuantizeLSTM against onnxruntime-node's CPU kernel: uint8 and int8 weights, per-tensor and
// per-gate-column scales, bias, peepholes, initial state, both directions.
import { describe, expect, it } from 'vitest';
import { model, node, v, type ElemName, type NodeSpec } from '../../../test/helpers/build.js';
import {
  expectSameAsOrt,
  expectSameOutputs,
  f32,
  ort,
  runOn,
  seeded,
  type Feeds,
  type OrtTensor,
  randomF32 as rand,
} from '../../../test/helpers/ort.js';
import { prepareModel } from '../../plan/prepare.js';
import { summarizePartitions } from '../../plan/partition.js';

const count = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
const q8 = (type: 'int8' | 'uint8', dims: number[], seed: number, zero = false) => {
  const vals = seeded(count(dims), seed).map((x) => (zero ? 0 : Math.floor(((x + 1) / 2) * 256) % 256));
  return type === 'uint8'
    ? new ort.Tensor('uint8', Uint8Array.from(zero ? vals : vals), dims)
    : new ort.Tensor('int8', Int8Array.from(vals.map((x) => (zero ? 0 : x - 128))), dims);
};

const ORDER = ['x', 'w', 'r', 'b', 'lens', 'h0', 'c0', 'p', 'ws', 'wz', 'rs', 'rz'];

function run(feeds: Record<string, OrtTensor | undefined>, attrs: NodeSpec['attrs'], tol = { rtol: 1e-4, atol: 1e-5 }) {
  const given = Object.fromEntries(Object.entries(feeds).filter(([, t]) => t)) as Feeds;
  const inputs = ORDER.map((n) => (given[n] ? n : ''));
  const bytes = model({
    opsets: { '': 17, 'com.microsoft': 1 },
    inputs: Object.entries(given).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
    outputs: [v('y', 'float32'), v('yh', 'float32'), v('yc', 'float32')],
    nodes: [node('DynamicQuantizeLSTM', inputs, ['y', 'yh', 'yc'], { domain: 'com.microsoft', attrs })],
  });
  return expectSameAsOrt(bytes, given, tol);
}

describe('DynamicQuantizeLSTM', () => {
  const S = 4;
  const B = 1;
  const I = 6;
  const H = 5;
  const x = rand([S, B, I], 1, 2);
  it('uint8 weights, per-tensor scales and zero points, bias', () =>
    run(
      {
        x,
        w: q8('uint8', [1, I, 4 * H], 2),
        r: q8('uint8', [1, H, 4 * H], 3),
        b: rand([1, 8 * H], 4, 0.2),
        ws: f32([0.01], [1]),
        wz: new ort.Tensor('uint8', Uint8Array.from([128]), [1]),
        rs: f32([0.02], [1]),
        rz: new ort.Tensor('uint8', Uint8Array.from([120]), [1]),
      },
      { hidden_size: H },
    ));
  it('int8 weights with per-gate-column scales (zero points 0), peepholes, initial state', () =>
    run(
      {
        x,
        w: q8('int8', [1, I, 4 * H], 5),
        r: q8('int8', [1, H, 4 * H], 6),
        h0: rand([1, B, H], 7, 0.5),
        c0: rand([1, B, H], 8, 0.5),
        p: rand([1, 3 * H], 9, 0.3),
        ws: rand([1, 4 * H], 10, 0.02),
        wz: q8('int8', [1, 4 * H], 0, true),
        rs: rand([1, 4 * H], 11, 0.02),
        rz: q8('int8', [1, 4 * H], 0, true),
      },
      { hidden_size: H },
    ));
  it('batch of two, forward', () =>
    run(
      {
        x: rand([S, 2, I], 12, 2),
        w: q8('uint8', [1, I, 4 * H], 13),
        r: q8('uint8', [1, H, 4 * H], 14),
        ws: f32([0.01], [1]),
        wz: new ort.Tensor('uint8', Uint8Array.from([128]), [1]),
        rs: f32([0.02], [1]),
        rz: new ort.Tensor('uint8', Uint8Array.from([128]), [1]),
      },
      { hidden_size: H },
    ));
  it('bidirectional, batch of one', () =>
    run(
      {
        x,
        w: q8('uint8', [2, I, 4 * H], 13),
        r: q8('uint8', [2, H, 4 * H], 14),
        ws: f32([0.01, 0.015], [2]),
        wz: new ort.Tensor('uint8', Uint8Array.from([128, 127]), [2]),
        rs: f32([0.02, 0.01], [2]),
        rz: new ort.Tensor('uint8', Uint8Array.from([128, 130]), [2]),
      },
      { hidden_size: H, direction: 'bidirectional' },
    ));
  it('bidirectional, batch of two', () => {
    const x2 = rand([S, 2, I], 12, 2);
    return run(
      {
        x: x2,
        w: q8('uint8', [2, I, 4 * H], 13),
        r: q8('uint8', [2, H, 4 * H], 14),
        b: rand([2, 8 * H], 15, 0.2),
        ws: f32([0.01, 0.015], [2]),
        wz: new ort.Tensor('uint8', Uint8Array.from([128, 127]), [2]),
        rs: f32([0.02, 0.01], [2]),
        rz: new ort.Tensor('uint8', Uint8Array.from([128, 130]), [2]),
      },
      { hidden_size: H, direction: 'bidirectional' },
    );
  });
  // onnxruntime quantizes the hidden state per group of batch rows that its thread pool hands out:
  // one row each for batches of one or two, larger groups (machine-dependent) beyond, so the
  // wider case runs one row.
  it('a wider layer: 32 hidden units over 8 inputs', () =>
    run(
      {
        x: rand([3, 1, 8], 16, 2),
        w: q8('uint8', [1, 8, 128], 17),
        r: q8('uint8', [1, 32, 128], 18),
        ws: f32([0.01], [1]),
        wz: new ort.Tensor('uint8', Uint8Array.from([128]), [1]),
        rs: f32([0.005], [1]),
        rz: new ort.Tensor('uint8', Uint8Array.from([128]), [1]),
      },
      { hidden_size: 32 },
    ));
  it('sequence_lens: a constant full-length row runs on MLX; a fed or ragged one falls back and matches onnxruntime', async () => {
    const weights = {
      w: q8('uint8', [1, I, 4 * H], 22),
      r: q8('uint8', [1, H, 4 * H], 23),
      ws: f32([0.01], [1]),
      wz: new ort.Tensor('uint8', Uint8Array.from([128]), [1]),
      rs: f32([0.02], [1]),
      rz: new ort.Tensor('uint8', Uint8Array.from([128]), [1]),
    };
    const modelOf = (feeds: Feeds, lens?: number[]) =>
      model({
        opsets: { '': 17, 'com.microsoft': 1 },
        inputs: Object.entries(feeds).map(([name, t]) => v(name, t.type as ElemName, [...t.dims])),
        outputs: [v('y', 'float32'), v('yh', 'float32'), v('yc', 'float32')],
        initializers: lens ? [{ name: 'lens', type: 'int32', dims: [lens.length], values: lens }] : [],
        nodes: [
          node(
            'DynamicQuantizeLSTM',
            ORDER.map((n) => (n in feeds || (n === 'lens' && lens) ? n : '')),
            ['y', 'yh', 'yc'],
            { domain: 'com.microsoft', attrs: { hidden_size: H } },
          ),
        ],
      });
    // A constant single full-length row: MLX runs it.
    const one = modelOf({ x, ...weights }, [S]);
    expect(summarizePartitions(prepareModel(one).plan).fallback).toBe(0);
    await expectSameAsOrt(one, { x, ...weights });
    // Fed lengths, ragged ones over two rows, and constant ragged ones: onnxruntime runs the node.
    const x2 = rand([3, 2, I], 19);
    const fed = { x: x2, lens: new ort.Tensor('int32', Int32Array.from([3, 1]), [2]), ...weights };
    const constant = modelOf({ x: x2, ...weights }, [3, 1]);
    for (const [bytes, feeds] of [
      [modelOf(fed), fed],
      [constant, { x: x2, ...weights }],
    ] as const) {
      const summary = summarizePartitions(prepareModel(bytes).plan);
      expect(summary.fallbackNodes.map((n) => [n.op, n.reason])).toEqual([
        ['com.microsoft::DynamicQuantizeLSTM', expect.stringMatching(/sequence_lens .*row by row|each row on its own/)],
      ]);
      const want = await runOn('cpu', bytes, feeds);
      const s = await ort.InferenceSession.create(bytes, {
        executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'cpu' } as never],
      });
      try {
        expectSameOutputs(await s.run(feeds), want);
      } finally {
        await s.release();
      }
      // Without fallback the model is refused at create(), with the reason.
      await expect(runOn('mlx', bytes, feeds)).rejects.toThrow(/sequence_lens/);
    }
  });
});

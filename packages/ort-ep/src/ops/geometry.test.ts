// Geometry ops beyond the node suite, against onnxruntime-node: GridSample at opset 16 (the
// bilinear/bicubic names), cubic with border and reflection padding, reflection with
// align_corners, grids reaching far outside the image, several channels and batches; AffineGrid
// batches; Col2Im with batches, channels, pads, strides and dilations at once; NonMaxSuppression
// without a score threshold, with centre-point boxes and a zero box limit.
import { describe, it } from 'vitest';
import type { AttrSpec, ElemName } from '../../test/helpers/build.js';
import { expectNodeSameAsOrt, type NodeInput } from '../../test/helpers/single-node.js';
import { f32, i64, seeded } from '../../test/helpers/ort.js';

type In = NodeInput;
const size = (dims: number[]) => dims.reduce((a, b) => a * b, 1);
const x = (name: string, dims: number[], seed = 3, scale = 1): In => ({
  name,
  type: 'float32',
  dims,
  tensor: f32(
    seeded(size(dims), seed).map((t) => t * scale),
    dims,
  ),
});
const int = (name: string, values: number[], dims: number[] = [values.length]): In => ({
  name,
  type: 'int64',
  dims,
  tensor: i64(values, dims),
});

const same = (
  op: string,
  opset: number,
  ins: (In | '')[],
  attrs: Record<string, AttrSpec>,
  outType: ElemName = 'float32',
  tol = { rtol: 1e-4, atol: 1e-5 },
) => expectNodeSameAsOrt(op, opset, ins, attrs, outType, tol);

describe('GridSample', () => {
  const img = x('X', [2, 3, 5, 4], 5);
  const far = x('G', [2, 3, 6, 2], 9, 1.8); // coordinates up to 1.8: outside the image
  for (const padding_mode of ['zeros', 'border', 'reflection']) {
    for (const align_corners of [0, 1]) {
      it(`opset 16 bicubic, ${padding_mode}, align_corners ${align_corners}`, async () => {
        await same('GridSample', 16, [img, far], { mode: 'bicubic', padding_mode, align_corners });
      });
      it(`opset 16 bilinear, ${padding_mode}, align_corners ${align_corners}`, async () => {
        await same('GridSample', 16, [img, far], { mode: 'bilinear', padding_mode, align_corners });
      });
    }
  }
  it('opset 20 nearest with reflection far outside the image', async () => {
    await same('GridSample', 20, [img, x('G', [2, 4, 4, 2], 11, 3.5)], { mode: 'nearest', padding_mode: 'reflection' });
  });
  it('opset 20 linear on a 5-D input with border padding', async () => {
    await same('GridSample', 20, [x('X', [1, 2, 3, 4, 5]), x('G', [1, 2, 3, 4, 3], 4, 1.3)], {
      mode: 'linear',
      padding_mode: 'border',
      align_corners: 1,
    });
  });
});

describe('AffineGrid', () => {
  it('2-D with a single-pixel axis', async () => {
    await same('AffineGrid', 20, [x('theta', [3, 2, 3]), int('size', [3, 1, 1, 7])], { align_corners: 0 });
  });
  it('3-D with align_corners', async () => {
    await same('AffineGrid', 20, [x('theta', [2, 3, 4]), int('size', [2, 1, 3, 2, 4])], { align_corners: 1 });
  });
});

describe('Col2Im', () => {
  it('batches and channels with pads, strides and dilations', async () => {
    // image 7x8, block 2x3, dilations 2x1, pads (1, 0, 2, 1), strides 2x3: 4 x 3 blocks
    await same('Col2Im', 18, [x('x', [2, 3 * 6, 12]), int('image', [7, 8]), int('block', [2, 3])], {
      dilations: [2, 1],
      pads: [1, 0, 2, 1],
      strides: [2, 3],
    });
  });
});

describe('NonMaxSuppression', () => {
  const boxes = (name: string, n: number, seed: number): In => {
    const r = seeded(n * 4, seed);
    return {
      name,
      type: 'float32',
      dims: [2, n, 4],
      tensor: f32(
        Array.from({ length: 2 * n * 4 }, (_, i) => r[i % (n * 4)] * 2 + (i % 4 >= 2 ? 1.5 : 0)),
        [2, n, 4],
      ),
    };
  };
  it('two batches, three classes, no score threshold', async () => {
    await same(
      'NonMaxSuppression',
      11,
      [boxes('b', 12, 3), x('s', [2, 3, 12], 8), int('m', [4]), { ...x('iou', [1]), tensor: f32([0.3], [1]) }],
      {},
      'int64',
    );
  });
  it('centre-point boxes with a score threshold', async () => {
    await same(
      'NonMaxSuppression',
      10,
      [
        boxes('b', 10, 5),
        x('s', [2, 1, 10], 2),
        int('m', [10]),
        { ...x('iou', [1]), tensor: f32([0.2], [1]) },
        { ...x('st', [1]), tensor: f32([0.1], [1]) },
      ],
      { center_point_box: 1 },
      'int64',
    );
  });
  it('a zero box limit selects nothing', async () => {
    await same('NonMaxSuppression', 11, [boxes('b', 4, 5), x('s', [2, 1, 4], 2), int('m', [0])], {}, 'int64');
  });
});

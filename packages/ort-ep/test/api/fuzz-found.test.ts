// Inputs the fuzz harness (scripts/fuzz.ts) found to crash, hang or fail with a JavaScript fault,
// one regression test each: onnxruntime-node's CPU provider refuses them too (or computes what
// mlx computes), and mlx gives a NodeExecutionError naming the node and what is wrong.
import { describe, expect, it } from 'vitest';
import { NodeExecutionError, OrtMlxError, RefusedNodeError } from '../../src/index.js';
import { int64 } from '../../src/onnx/encode.js';
import { model, modelProto, node, serialize, v, type ModelSpec } from '../helpers/build.js';
import { expectSameAsOrt, f32, i64, ort, plain, runOn, seeded, type Feeds, mlxCpu as mlx, outcome } from '../helpers/ort.js';

/**
 * onnxruntime refuses the case; mlx refuses it with a NodeExecutionError whose message matches (a
 * RefusedNodeError from create() with `invalid`: the node breaks the spec).
 */
async function bothRefuse(
  spec: ModelSpec,
  feeds: Feeds,
  message: RegExp,
  opts: { ortToo?: boolean; invalid?: boolean } = {},
): Promise<void> {
  const bytes = model(spec);
  if (opts.ortToo ?? true) expect(await outcome(bytes, feeds)).toBeInstanceOf(Error);
  const e = await outcome(bytes, feeds, mlx);
  expect(e).toBeInstanceOf(opts.invalid ? RefusedNodeError : NodeExecutionError);
  expect((e as Error).message).toMatch(message);
}

const single = (
  op: string,
  opset: number,
  inputs: ModelSpec['inputs'],
  attrs: Record<string, number | number[]> = {},
  outputs = 1,
): ModelSpec => ({
  opsets: { '': opset },
  irVersion: opset > 21 ? 11 : 10,
  inputs,
  outputs: Array.from({ length: outputs }, (_, i) => v(`y${i}`, 'float32')),
  nodes: [
    node(
      op,
      inputs.map((i) => i.name),
      Array.from({ length: outputs }, (_, i) => `y${i}`),
      { name: 'n', attrs },
    ),
  ],
});

describe('crashes the fuzz harness found', () => {
  it('Det of a non-square [0, 1] input (was SIGFPE)', async () => {
    await bothRefuse(
      single('Det', 11, [v('x', 'float32', [0, 1])]),
      { x: f32([], [0, 1]) },
      /node 'n' \(Det\): Det takes square matrices \[\.\.\., M, M\], got shape \[0, 1\]/,
    );
    await bothRefuse(single('Det', 11, [v('x', 'float32', [2, 3])]), { x: f32([1, 2, 3, 4, 5, 6], [2, 3]) }, /got shape \[2, 3\]/);
  });

  it('ScatterND with index tuples of length 0 and mismatched updates (was SIGFPE)', async () => {
    const spec = (reduction?: string): ModelSpec => ({
      opsets: { '': reduction === 'max' || reduction === 'min' ? 18 : 16 },
      inputs: [v('x', 'float32'), v('i', 'int64'), v('u', 'float32')],
      outputs: [v('y', 'float32')],
      nodes: [node('ScatterND', ['x', 'i', 'u'], ['y'], { name: 'sc', attrs: reduction ? { reduction } : {} })],
    });
    await bothRefuse(
      spec(),
      { x: f32([], [0, 3]), i: i64([], [0]), u: f32([], [0, 0]) },
      /node 'sc' \(ScatterND\): ScatterND into data of shape \[0, 3\]: updates must have shape \[0, 3\] \(indices \[0\]\), got \[0, 0\]/,
    );
    const x = f32([1, 2, 3, 4, 5, 6], [2, 3]);
    await bothRefuse(
      spec(),
      { x, i: i64([0, 1], [1, 2]), u: f32([7, 8], [2]) },
      /updates must have shape \[1\] \(indices \[1, 2\]\), got \[2\]/,
    );
    await bothRefuse(spec(), { x, i: i64([0, 1, 0], [1, 3]), u: f32([7], [1]) }, /index tuples of length 3 exceed the data's rank 2/);
    // Valid edge cases agree with onnxruntime: tuples of length 0 (each update is the whole data), no tuples at all.
    for (const r of [undefined, 'add', 'mul', 'max', 'min'])
      await expectSameAsOrt(model(spec(r)), { x, i: i64([], [0]), u: f32([9, -1, 3, 0, 8, 2], [2, 3]) });
    await expectSameAsOrt(model(spec('add')), { x, i: i64([], [2, 0]), u: f32([9, -1, 3, 0, 8, 2, 1, 1, 1, 1, 1, 1], [2, 2, 3]) });
    await expectSameAsOrt(model(spec()), { x, i: i64([], [0, 2]), u: f32([], [0]) });
    await expectSameAsOrt(model(spec()), { x: f32([], [0, 3]), i: i64([], [0]), u: f32([], [0, 3]) });
  });

  it('Attention with qk_matmul_output_mode outside 0-3 (onnxruntime, the fallback, crashed with SIGSEGV)', async () => {
    const spec = (mode: number): ModelSpec => ({
      opsets: { '': 23 },
      irVersion: 11,
      inputs: [v('Q', 'float32', [1, 2, 3, 4]), v('K', 'float32', [1, 2, 5, 4]), v('V', 'float32', [1, 2, 5, 4])],
      outputs: [v('Y', 'float32'), v('qk', 'float32')],
      nodes: [node('Attention', ['Q', 'K', 'V'], ['Y', '', '', 'qk'], { name: 'att', attrs: { qk_matmul_output_mode: mode } })],
    });
    const t = (n: number, dims: number[], s: number) => f32(seeded(n, s), dims);
    const feeds = { Q: t(24, [1, 2, 3, 4], 1), K: t(40, [1, 2, 5, 4], 2), V: t(40, [1, 2, 5, 4], 3) };
    // onnxruntime is no reference for the bad values (it crashes the process); the fallback must not be asked.
    for (const mode of [-1, 4, 2 ** 31])
      await bothRefuse(spec(mode), feeds, new RegExp(`node 'att' \\(Attention\\): qk_matmul_output_mode ${mode} is not one of 0-3`), {
        ortToo: false,
        invalid: true,
      });
    const fallback = { executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'cpu' }] } as unknown as typeof mlx;
    expect(await outcome(model(spec(-1)), feeds, fallback)).toBeInstanceOf(RefusedNodeError);
    for (const mode of [0, 1, 2, 3]) await expectSameAsOrt(model(spec(mode)), feeds);
  });

  describe('RotaryEmbedding (opset 23) position_ids outside the cache (was SIGSEGV)', () => {
    const spec: ModelSpec = {
      opsets: { '': 23 },
      irVersion: 11,
      inputs: [v('x', 'float32', [1, 2, 3, 4]), v('cos', 'float32', [5, 2]), v('sin', 'float32', [5, 2]), v('p', 'int64', [1, 3])],
      outputs: [v('y', 'float32')],
      nodes: [node('RotaryEmbedding', ['x', 'cos', 'sin', 'p'], ['y'], { name: 'rope' })],
    };
    const x = f32(
      Array.from({ length: 24 }, (_, i) => Math.sin(i)),
      [1, 2, 3, 4],
    );
    const cos = f32(
      Array.from({ length: 10 }, (_, i) => Math.cos(i / 3)),
      [5, 2],
    );
    const sin = f32(
      Array.from({ length: 10 }, (_, i) => Math.sin(i / 3)),
      [5, 2],
    );
    for (const bad of [5, 1_000_000_000, -1, -(2 ** 62)])
      it(`position ${bad}`, () =>
        bothRefuse(
          spec,
          { x, cos, sin, p: i64([0, bad, 1], [1, 3]) },
          new RegExp(
            `node 'rope' \\(RotaryEmbedding\\): position_ids \\(a cos/sin cache of 5 rows\\): index ${bad} is out of range \\[0, 4\\]`,
          ),
        ));
    it('positions in range agree with onnxruntime', () => expectSameAsOrt(model(spec), { x, cos, sin, p: i64([4, 0, 2], [1, 3]) }));
  });
});

describe('hangs the fuzz harness found', () => {
  it('SplitToSequence with a split of 0 or a negative one (looped forever)', async () => {
    const spec = (split: number[], dims: number[]): ModelSpec => ({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', [4, 2]), v('s', 'int64', dims)],
      outputs: [v('n', 'int64')],
      nodes: [node('SplitToSequence', ['x', 's'], ['q'], { name: 'sts' }), node('SequenceLength', ['q'], ['n'])],
    });
    const x = f32([1, 2, 3, 4, 5, 6, 7, 8], [4, 2]);
    for (const s of [0, -1, -(2 ** 40)])
      await bothRefuse(
        spec([s], []),
        { x, s: i64([s], []) },
        new RegExp(`node 'sts' \\(SplitToSequence\\): split ${s} must be a positive chunk size`),
      );
    await bothRefuse(spec([5, -1], [2]), { x, s: i64([5, -1], [2]) }, /split sizes must not be negative, got -1/);
    await bothRefuse(spec([1, 1], [2]), { x, s: i64([1, 1], [2]) }, /split sizes \[1,1\] sum to 2, not to the size 4 of axis 0/);
    // Valid chunk sizes still agree with onnxruntime (4 rows in chunks of 3: 2 pieces).
    await expectSameAsOrt(model(spec([3], [])), { x, s: i64([3], []) });
  });

  it('HannWindow with a non-scalar size whose first value is 2^31 (looped for minutes)', async () => {
    const spec: ModelSpec = {
      opsets: { '': 17 },
      inputs: [v('n', 'int64', [2])],
      outputs: [v('y', 'float32')],
      nodes: [node('HannWindow', ['n'], ['y'], { name: 'w' })],
    };
    await bothRefuse(spec, { n: i64([2 ** 31, 1], [2]) }, /node 'w' \(HannWindow\): size must be a scalar, got 2 values/);
    const scalar: ModelSpec = { ...spec, inputs: [v('n', 'int64', [])] };
    // 2^40 points is refused before the loop (onnxruntime would try to allocate 4 TiB).
    await bothRefuse(
      scalar,
      { n: i64([2 ** 40], []) },
      /a window of size 1099511627776 has 1099511627776 elements, over the 134217728 computed on the host/,
      {
        ortToo: false,
      },
    );
    await expectSameAsOrt(model(scalar), { n: i64([9], []) });
  });

  it('MelWeightMatrix with an upper edge of 3e38 Hz (looped over 1e38 bins)', async () => {
    const spec: ModelSpec = {
      opsets: { '': 17 },
      inputs: ['bins', 'len', 'rate'].map((n) => v(n, 'int64', [])).concat([v('lo', 'float32', []), v('hi', 'float32', [])]),
      outputs: [v('y', 'float32')],
      nodes: [node('MelWeightMatrix', ['bins', 'len', 'rate', 'lo', 'hi'], ['y'], { name: 'mel' })],
    };
    const feeds = (hi: number) => ({ bins: i64([4], []), len: i64([16], []), rate: i64([8000], []), lo: f32([0], []), hi: f32([hi], []) });
    const started = Date.now();
    const e = await outcome(model(spec), feeds(3e38), mlx);
    expect(Date.now() - started).toBeLessThan(20_000);
    const ref = await outcome(model(spec), feeds(3e38));
    // Whatever each does with such an edge, mlx answers (a result or a clear error) instead of looping.
    if (e !== 'ran') expect(e).toBeInstanceOf(NodeExecutionError);
    expect(['ran', 'error']).toContain(ref === 'ran' ? 'ran' : 'error');
    await expectSameAsOrt(model(spec), feeds(4000));
  });

  it('Split with num_outputs 10^9 (exhausted the heap)', async () => {
    const spec = (k: number) => single('Split', 18, [v('x', 'float32', [4, 2])], { num_outputs: k }, 2);
    const x = f32([1, 2, 3, 4, 5, 6, 7, 8], [4, 2]);
    // The spec has the node list num_outputs outputs. onnxruntime is no reference here: it ignores a
    // num_outputs below the dim (3 for 2 outputs gives [2, 2] twice), fails above it, and runs out of
    // memory at 10^9. mlx refuses every mismatch.
    await bothRefuse(spec(3), { x }, /node 'n' \(Split\): Split: num_outputs 3 does not match the node's 2 outputs/, { ortToo: false });
    await bothRefuse(spec(5), { x }, /num_outputs 5 does not match the node's 2 outputs/);
    await bothRefuse(spec(1e9), { x }, /num_outputs 1000000000 does not match the node's 2 outputs/, { ortToo: false });
    await expectSameAsOrt(model(spec(2)), { x });
  });

  it('MaxRoiPool with a huge pooled_shape over an empty input, or a 1-D X (looped over 2^53 bins)', async () => {
    const spec = (pooled_shape: number[]) => single('MaxRoiPool', 7, [v('x', 'float32'), v('rois', 'float32')], { pooled_shape });
    const x = f32(
      Array.from({ length: 32 }, (_, i) => Math.sin(i)),
      [1, 2, 4, 4],
    );
    const rois = f32([0, 0, 0, 3, 3, 0, 1, 0, 2, 3], [2, 5]);
    // onnxruntime is no reference for the huge shapes (it tries to allocate them).
    for (const ps of [
      [2 ** 53, 3, 3, 2 ** 31],
      [1, 2 ** 53, -2],
      [0, 2],
    ])
      await bothRefuse(
        spec(ps),
        { x: f32([], [2, 1, 4, 0]), rois },
        new RegExp(`node 'n' \\(MaxRoiPool\\): pooled_shape must be two positive integers \\(height, width\\), got \\[${ps.join(', ')}\\]`),
        { ortToo: false },
      );
    await bothRefuse(
      spec([2 ** 32 + 2, 1]),
      { x: f32([], [2, 1, 4, 0]), rois },
      /2 rois of 4294967298x1 bins exceed the limit of 67108864 bins/,
      {
        ortToo: false,
      },
    );
    // Nor for the wrong ranks: its CPU kernel does not check them.
    await bothRefuse(spec([2, 2]), { x, rois: f32([0, 1, 2, 3], [4]) }, /rois must have shape \[R, 5\], got \[4\]/, { ortToo: false });
    await bothRefuse(spec([2, 2]), { x: f32([1, 2, 3, 4], [4]), rois }, /X must be 4-D \[N, C, H, W\], got shape \[4\]/, { ortToo: false });
    await expectSameAsOrt(model(spec([2, 3])), { x, rois });
  });

  it('Col2Im with a block of 2^32 + 2 and 3 pads for a 3-D image (looped over 10^10 block positions)', async () => {
    const spec = (pads?: number[]): ModelSpec => ({
      opsets: { '': 18 },
      inputs: [v('x', 'float32'), v('img', 'int64', [-1]), v('blk', 'int64', [-1])],
      outputs: [v('y', 'float32')],
      nodes: [node('Col2Im', ['x', 'img', 'blk'], ['y'], { name: 'c', attrs: pads ? { pads } : {} })],
    });
    const empty = { x: f32([], [4, 0, 2]), img: i64([0, 2, 2], [3]) };
    await bothRefuse(
      spec([2, 0, 2 ** 31]),
      { ...empty, blk: i64([4, 1, 2 ** 32 + 2], [3]) },
      /node 'c' \(Col2Im\): Col2Im: pads has 3 values, the 3-D image needs 6/,
    );
    // onnxruntime is no reference for a block of 2^34 positions over an empty input.
    await bothRefuse(
      spec(),
      { ...empty, blk: i64([4, 1, 2 ** 32 + 2], [3]) },
      /a block of \[4, 1, 4294967298\] has 17179869192 positions, over the 134217728/,
      {
        ortToo: false,
      },
    );
    await bothRefuse(spec(), { ...empty, blk: i64([4, 1], [2]) }, /block_shape has 2 values, the 3-D image needs 3/);
    await bothRefuse(spec(), { ...empty, blk: i64([4, 0, 1], [3]) }, /block_shape must be integers >= 1, got \[4, 0, 1\]/, {
      ortToo: false,
    });
    const x = f32(
      Array.from({ length: 2 * 4 * 15 }, (_, i) => Math.cos(i)),
      [1, 8, 15],
    );
    await expectSameAsOrt(model(spec([0, 0, 1, 1])), { x, img: i64([3, 5], [2]), blk: i64([2, 2], [2]) });
  });

  it('TfIdfVectorizer with an ngram_index of 10^9 (an 8 GB output: memory above 3 GiB)', async () => {
    const spec = (ngram_indexes: number[]): ModelSpec => ({
      opsets: { '': 9 },
      inputs: [v('X', 'int32', [2, 6])],
      outputs: [v('Y', 'float32')],
      nodes: [
        node('TfIdfVectorizer', ['X'], ['Y'], {
          name: 'tf',
          attrs: {
            max_gram_length: 2,
            max_skip_count: 5,
            min_gram_length: 2,
            mode: 'TF',
            ngram_counts: [0, 4],
            ngram_indexes,
            pool_int64s: [2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
          },
        }),
      ],
    });
    const X = new ort.Tensor('int32', Int32Array.from([1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8]), [2, 6]);
    // onnxruntime is no reference: it allocates the [2, 10^9 + 1] output.
    await bothRefuse(
      spec([0, 1, 2, 3, 4, 1e9, 6]),
      { X },
      /node 'tf' \(TfIdfVectorizer\): an output of 2 row\(s\) of 1000000001 columns \(ngram_indexes up to 1000000000\) has 2000000002 elements, over the 134217728/,
      { ortToo: false },
    );
    await expectSameAsOrt(model(spec([0, 1, 2, 3, 4, 9, 6])), { X });
  });

  it('a fused CPU kernel right after the thread pool is resized (test_sce_*_expanded: deadlocked)', async () => {
    // A pool worker read its starting job generation on its own thread; started late, it took the
    // first job's generation for one it had done and never checked in. intraOpNumThreads resizes the pool.
    const spec = single('LogSoftmax', 13, [v('x', 'float32', [90, 240])], { axis: 1 });
    const x = f32(seeded(90 * 240, 5), [90, 240]);
    const want = (await runOn('cpu', model(spec), { x })).y0;
    for (let i = 0; i < 12; i++) {
      const opts = { executionProviders: [{ name: 'mlx', device: 'cpu' }], intraOpNumThreads: 2 + (i % 3) };
      const s = await ort.InferenceSession.create(model(spec), opts as unknown as typeof mlx);
      const got = (await s.run({ x })).y0;
      await s.release();
      const g = got.data as Float32Array;
      const w = want.data as Float32Array;
      expect(Math.max(...Array.from(g, (a, j) => Math.abs(a - w[j])))).toBeLessThan(1e-4);
    }
  }, 60_000);

  it('LRN with a size of 2^31 (one slice per window position: looped for minutes)', async () => {
    const x = f32(
      Array.from({ length: 12 }, (_, i) => i / 4),
      [1, 3, 2, 2],
    );
    const spec = (size: number) => single('LRN', 13, [v('x', 'float32', [1, 3, 2, 2])], { size });
    await bothRefuse(
      spec(2 ** 31 - 1),
      { x },
      /node 'n' \(LRN\): LRN size 2147483647 is over the 4096 window positions this implementation folds/,
      { ortToo: false },
    );
    await bothRefuse(spec(0), { x }, /LRN size 0 must be a positive integer/);
    await expectSameAsOrt(model(spec(3)), { x });
  });
});

describe('JavaScript faults the fuzz harness found, now specific errors', () => {
  it('AffineGrid with a negative or fractional size ("Invalid typed array length")', async () => {
    const spec: ModelSpec = {
      opsets: { '': 20 },
      inputs: [v('theta', 'float32', [1, 2, 3]), v('size', 'int64', [4])],
      outputs: [v('y', 'float32')],
      nodes: [node('AffineGrid', ['theta', 'size'], ['y'], { name: 'ag' })],
    };
    const theta = f32([1, 0, 0, 0, 1, 0], [1, 2, 3]);
    await bothRefuse(
      spec,
      { theta, size: i64([1, 1, -3, 2], [4]) },
      /node 'ag' \(AffineGrid\): size \[1, 1, -3, 2\] has a dim -3 that is not a non-negative integer/,
    );
    await expectSameAsOrt(model(spec), { theta, size: i64([1, 1, 3, 2], [4]) });
  });

  it('ConcatFromSequence of an empty sequence', () =>
    bothRefuse(
      {
        opsets: { '': 13 },
        inputs: [v('x', 'float32', [2])],
        outputs: [v('y', 'float32')],
        nodes: [
          node('SequenceEmpty', [], ['q'], { attrs: { dtype: 1 } }),
          node('ConcatFromSequence', ['q'], ['y'], { name: 'cat', attrs: { axis: 0 } }),
        ],
      },
      { x: f32([1, 2], [2]) },
      /node 'cat' \(ConcatFromSequence\): the sequence is empty; there is nothing to concatenate/,
    ));

  it('ConstantOfShape with a negative dim ("Invalid typed array length: -1")', () =>
    bothRefuse(
      {
        opsets: { '': 13 },
        inputs: [v('s', 'int64', [2])],
        outputs: [v('y', 'float32')],
        nodes: [node('ConstantOfShape', ['s'], ['y'], { name: 'c' })],
      },
      { s: i64([2, -1], [2]) },
      /node 'c' \(ConstantOfShape\): ConstantOfShape: the shape \[2, -1\] has a dim -1 that is not a non-negative integer/,
    ));

  it('LpPool of a rank-2 input ("Invalid array length")', () =>
    bothRefuse(
      single('LpPool', 11, [v('x', 'float32', [2, 3])], { kernel_shape: [2] }),
      { x: f32([1, 2, 3, 4, 5, 6], [2, 3]) },
      /node 'n' \(LpPool\): pooling needs an input of rank 3 or more/,
    ));

  it('a pool kernel of 2^40 positions', () =>
    bothRefuse(
      single('MaxPool', 12, [v('x', 'float32', [1, 1, 2, 2])], { kernel_shape: [2 ** 20, 2 ** 20] }),
      { x: f32([1, 2, 3, 4], [1, 1, 2, 2]) },
      /kernel_shape \[1048576,1048576\] has 1099511627776 positions, over the 65536 this implementation folds/,
      { ortToo: false },
    ));
});

describe('JavaScript faults of seed 600, now specific errors', () => {
  it('an INT64_MAX attribute of a node handed to onnxruntime ("cannot encode field onnx.AttributeProto.ints: invalid int64")', async () => {
    // Decoded as a JS number, INT64_MAX rounds to 2^63; the fallback's sub-model wrote it back as is.
    // (disabledOps hands the node to onnxruntime, which takes the stride: one window of [2, 2].)
    const spec: ModelSpec = {
      ...single('MaxPool', 12, [v('x', 'float32', [1, 1, 2, 2])], { kernel_shape: [2, 2], strides: [1, 1] }),
    };
    const proto = modelProto(spec);
    proto.graph!.node[0].attribute.find((a) => a.name === 'strides')!.ints = [1n, 2n ** 63n - 1n];
    const bytes = serialize(proto);
    const feeds = { x: f32([1, 2, 3, 4], [1, 1, 2, 2]) };
    const fallback = {
      executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'cpu', disabledOps: ['MaxPool'] }],
    } as unknown as typeof mlx;
    const s = await ort.InferenceSession.create(bytes, fallback);
    try {
      expect(plain((await s.run(feeds)).y0)).toEqual(plain((await runOn('cpu', bytes, feeds)).y0));
    } finally {
      await s.release();
    }
    expect(int64(Number(2n ** 63n - 1n))).toBe(2n ** 63n - 1n);
    expect(int64(-(2 ** 63))).toBe(-(2n ** 63n));
  });

  it('Range with an empty or a non-finite input ("shape[0] must be an integer ..., got NaN")', async () => {
    const spec = (dims: number[]): ModelSpec => ({
      opsets: { '': 11 },
      inputs: [v('a', 'float32', dims), v('b', 'float32', []), v('c', 'float32', [])],
      outputs: [v('y', 'float32')],
      nodes: [node('Range', ['a', 'b', 'c'], ['y'], { name: 'r' })],
    });
    await bothRefuse(
      spec([0]),
      { a: f32([], [0]), b: f32([5], []), c: f32([1], []) },
      /node 'r' \(Range\): Range: start must be a scalar, got shape \[0\]/,
    );
    // onnxruntime casts the NaN count to an integer (undefined in C++); mlx refuses it.
    for (const [b, c] of [
      [Number.NaN, 1],
      [Number.POSITIVE_INFINITY, 1],
      [5, Number.NaN],
    ])
      await bothRefuse(
        spec([]),
        { a: f32([0], []), b: f32([b], []), c: f32([c], []) },
        new RegExp(`node 'r' \\(Range\\): Range: start 0, limit ${b} and delta ${c} give no finite element count`),
        { ortToo: false },
      );
    await expectSameAsOrt(model(spec([])), { a: f32([1], []), b: f32([5], []), c: f32([1.5], []) });
  });

  it('GridSample of a rank-2 input ("Cannot read properties of undefined")', async () => {
    const spec: ModelSpec = {
      opsets: { '': 16 },
      inputs: [v('x', 'float32', [1, 3]), v('g', 'float32', [1, 2])],
      outputs: [v('y', 'float32')],
      nodes: [node('GridSample', ['x', 'g'], ['y'], { name: 'gs' })],
    };
    await bothRefuse(
      spec,
      { x: f32([1, 2, 3], [1, 3]), g: f32([0, 0], [1, 2]) },
      /node 'gs' \(GridSample\): the input must be \[N, C, spatial\.\.\.\] of rank 3 or more, got \[1, 3\]/,
    );
  });

  it('STFT with a frame_length of -1 ("Invalid typed array length: -1")', async () => {
    const spec: ModelSpec = {
      opsets: { '': 17 },
      inputs: [v('x', 'float32', [1, 8, 1]), v('step', 'int64', []), v('len', 'int64', [])],
      outputs: [v('y', 'float32')],
      nodes: [node('STFT', ['x', 'step', '', 'len'], ['y'], { name: 'st' })],
    };
    const x = f32(seeded(8), [1, 8, 1]);
    await bothRefuse(spec, { x, step: i64([2], []), len: i64([-1], []) }, /node 'st' \(STFT\): frame_length -1 must be a positive integer/);
    await expectSameAsOrt(model(spec), { x, step: i64([2], []), len: i64([4], []) }, { rtol: 1e-4, atol: 1e-5 });
  });

  it('FeatureVectorizer with a negative inputdimensions ("Invalid typed array length: -381")', async () => {
    const spec = (dims: number[]): ModelSpec => ({
      opsets: { '': 13, 'ai.onnx.ml': 1 },
      inputs: [v('a', 'float32', [2, 2]), v('b', 'float32', [2, 3])],
      outputs: [v('y', 'float32')],
      nodes: [node('FeatureVectorizer', ['a', 'b'], ['y'], { name: 'fv', domain: 'ai.onnx.ml', attrs: { inputdimensions: dims } })],
    });
    const feeds = { a: f32([1, 2, 3, 4], [2, 2]), b: f32([5, 6, 7, 8, 9, 10], [2, 3]) };
    await bothRefuse(
      spec([-381, 2]),
      feeds,
      /node 'fv' \(FeatureVectorizer\): inputdimensions \[-381, 2\] has -381, not a non-negative integer/,
    );
    await expectSameAsOrt(model(spec([3, 2])), feeds);
  });

  it('RoiAlign with a negative output_height ("Invalid typed array length: -240")', async () => {
    const spec = (oh: number): ModelSpec => ({
      opsets: { '': 16 },
      inputs: [v('x', 'float32', [1, 1, 4, 4]), v('rois', 'float32', [1, 4]), v('bi', 'int64', [1])],
      outputs: [v('y', 'float32')],
      nodes: [node('RoiAlign', ['x', 'rois', 'bi'], ['y'], { name: 'ra', attrs: { output_height: oh, output_width: 2 } })],
    });
    const feeds = { x: f32(seeded(16), [1, 1, 4, 4]), rois: f32([0, 0, 3, 3], [1, 4]), bi: i64([0], [1]) };
    // onnxruntime's CPU kernel sizes its output from the attribute unchecked: not asked.
    await bothRefuse(spec(-240), feeds, /node 'ra' \(RoiAlign\): RoiAlign output_height -240 and output_width 2 must be positive/, {
      ortToo: false,
      invalid: true,
    });
    await expectSameAsOrt(model(spec(2)), feeds, { rtol: 1e-4, atol: 1e-5 });
  });
});

describe('wrong results the fuzz harness found', () => {
  // onnxruntime reads these flags as `== 1`; mlx read them as `!= 0`, so keepdims 2 kept the axis.
  const x = f32(
    Array.from({ length: 24 }, (_, i) => ((i * 7) % 11) - 5),
    [2, 3, 4],
  );
  for (const flag of [2, -1, 0, 1])
    it(`ReduceSum, ReduceMax and ArgMin with keepdims ${flag}`, async () => {
      // ReduceMax at opset 13 takes its axes as an attribute; ArgMin one axis.
      for (const [op, attrs, out] of [
        ['ReduceMax', { axes: [1], keepdims: flag }, 'float32'],
        ['ArgMin', { axis: 1, keepdims: flag }, 'int64'],
      ] as const)
        await expectSameAsOrt(
          model({
            opsets: { '': 13 },
            inputs: [v('x', 'float32', [2, 3, 4])],
            outputs: [v('y', out)],
            nodes: [node(op, ['x'], ['y'], { attrs: { ...attrs } })],
          }),
          { x },
        );
      await expectSameAsOrt(
        model({
          opsets: { '': 18 },
          inputs: [v('x', 'float32', [2, 3, 4]), v('a', 'int64', [0])],
          outputs: [v('y', 'float32')],
          nodes: [node('ReduceSum', ['x', 'a'], ['y'], { attrs: { keepdims: flag, noop_with_empty_axes: flag } })],
        }),
        { x, a: i64([], [0]) },
      );
    });

  // RMSNormalization's Y has the scale's type (V), not X's (T): mlx returned float16 here.
  it('RMSNormalization of a float16 X with a float32 scale returns float32', () =>
    expectSameAsOrt(
      model({
        opsets: { '': 23 },
        inputs: [v('s', 'float32', [1, 1])],
        outputs: [v('y')],
        initializers: [{ name: 'x', type: 'float16', dims: [1, 1], values: new Uint16Array([0xc1d4]) }],
        nodes: [node('RMSNormalization', ['x', 's'], ['y'], { attrs: { stash_type: 2 } })],
      }),
      { s: f32([-2.914], [1, 1]) },
    ));
});

describe('sizes from data the fuzz harness found (seed 1803)', () => {
  const pad = (mode: string): ModelSpec => single('Pad', 19, [v('x', 'int32', [1, 3, 4, 5]), v('pads', 'int64', [8])], { mode });
  const x = new ort.Tensor(
    'int32',
    Int32Array.from({ length: 60 }, (_, i) => (i % 7) - 3),
    [1, 3, 4, 5],
  );
  const pads = (p: number[]) => new ort.Tensor('int64', BigInt64Array.from(p.map(BigInt)), [8]);
  const modeSpec = (mode: string): ModelSpec => ({ ...pad(mode), outputs: [v('y0', 'int32')] });

  // 1803:6225 built a host index table of 2^31 entries (4 minutes) before MLX refused the shape.
  it('wrap Pad of 2^31 on an axis is refused before any work (was a hang)', () =>
    bothRefuse(
      modeSpec('wrap'),
      { x, pads: pads([0, 2 ** 31, 1, 1, 0, 0, 1, 1]) },
      /node 'n' \(Pad\): Pad: axis 1 of the result \[1, 2147483651, 6, 7\] has size 2147483651, past the largest dimension 2147483647/,
    ));

  // 1803:12481: "Invalid typed array length: 4294967299".
  it('reflect Pad with pads near 2^32 and a crop past the axis', async () => {
    await bothRefuse(
      modeSpec('reflect'),
      { x, pads: pads([0, 1, 2 ** 53, 0, 2 ** 32 + 2, -(2 ** 31), 1, -2]) },
      /node 'n' \(Pad\): Pad: pads 1 and -2147483648 would give axis 1 of size 3 the negative size -2147483644/,
    );
    await bothRefuse(
      modeSpec('reflect'),
      { x, pads: pads([2 ** 32 + 2, 0, 0, 0, 0, 0, 0, 0]) },
      /node 'n' \(Pad\): Pad: axis 0 of the result \[4294967299, 3, 4, 5\] has size 4294967299, past the largest dimension/,
      { ortToo: false },
    );
    // A crop that would leave a negative size, in every mode (onnxruntime: "shape.Size() must be >= 0").
    for (const mode of ['constant', 'edge', 'wrap'])
      await bothRefuse(modeSpec(mode), { x, pads: pads([0, 0, 0, 1, 0, 0, 0, -7]) }, /would give axis 3 of size 5 the negative size -1/);
  });

  it('a Pad within MLX dimensions but over maxTensorBytes is a ResourceLimitError naming the node', async () => {
    const limited = { executionProviders: [{ name: 'mlx', device: 'cpu', maxTensorBytes: 2 ** 20 }] } as unknown as typeof mlx;
    for (const mode of ['constant', 'edge', 'wrap', 'reflect']) {
      const e = await outcome(model(modeSpec(mode)), { x, pads: pads([0, 0, 0, 2 ** 20, 0, 0, 0, 0]) }, limited);
      expect(e).toBeInstanceOf(OrtMlxError);
      expect((e as Error).message).toMatch(
        /node 'n' \(Pad\): its result of shape \[1, 3, 4, 1048581\] needs 50331888 bytes, over the limit of 1048576 bytes per tensor/,
      );
    }
  });

  it('wrap and reflect pads agree with onnxruntime where it pads within the axis', async () => {
    for (const mode of ['wrap', 'reflect'])
      for (const p of [
        [0, 1, 1, 2, 0, 1, 2, 1],
        [0, 0, -1, 1, 0, 2, 1, -3],
      ])
        await expectSameAsOrt(model(modeSpec(mode)), { x, pads: pads(p) });
  });

  // 1803:8757: "Invalid typed array length: -18" from the host twin; onnxruntime: "Tile repeat value must be non-negative".
  it('Tile with a negative repeat, from initializers (host) and from a feed (device)', async () => {
    const t = (dims: number[]) => f32(seeded(dims.reduce((a, b) => a * b, 1)), dims);
    await bothRefuse(
      {
        ...single('Tile', 13, []),
        initializers: [
          { name: 'x', type: 'float32', dims: [2, 3], values: Float32Array.from(seeded(6)) },
          { name: 'r', type: 'int64', dims: [2], values: BigInt64Array.from([3n, -2n]) },
        ],
        nodes: [node('Tile', ['x', 'r'], ['y0'], { name: 'n' })],
      },
      {},
      /node 'n' \(Tile\): Tile: repeat -2 in \[3, -2\] is not a non-negative integer/,
    );
    const spec = single('Tile', 13, [v('x', 'float32', [2, 3]), v('r', 'int64', [2])]);
    await bothRefuse(spec, { x: t([2, 3]), r: i64([1, -2], [2]) }, /node 'n' \(Tile\): Tile: repeat -2 in \[1, -2\]/);
    await bothRefuse(spec, { x: t([2, 3]), r: i64([2 ** 31, 1], [2]) }, /node 'n' \(Tile\): Tile: axis 0 of the result \[4294967296, 3\]/, {
      ortToo: false,
    });
    await expectSameAsOrt(model(spec), { x: t([2, 3]), r: i64([2, 0], [2]) });
    await expectSameAsOrt(model(spec), { x: t([2, 3]), r: i64([3, 2], [2]) });
  });

  it('Expand to a negative dim, OneHot with a depth below 1 (onnxruntime refuses both)', async () => {
    const expand = single('Expand', 13, [v('x', 'float32', [1, 3]), v('s', 'int64', [2])]);
    await bothRefuse(
      expand,
      { x: f32([1, 2, 3], [1, 3]), s: i64([-2, 3], [2]) },
      /node 'n' \(Expand\): Expand: the shape \[-2, 3\] has a dim -2/,
    );
    await expectSameAsOrt(model(expand), { x: f32([1, 2, 3], [1, 3]), s: i64([4, 1], [2]) });
    const onehot = single('OneHot', 11, [v('i', 'int64', [3]), v('d', 'float32', []), v('val', 'float32', [2])]);
    for (const d of [0, -3])
      await bothRefuse(
        onehot,
        { i: i64([0, 1, 2], [3]), d: f32([d], []), val: f32([0, 1], [2]) },
        new RegExp(`node 'n' \\(OneHot\\): OneHot: depth ${d} is not a positive integer`),
      );
    await expectSameAsOrt(model(onehot), { i: i64([0, 1, 2], [3]), d: f32([2.5], []), val: f32([0, 1], [2]) });
  });

  // Fuzz 1903:2573: mode 'border' made the node invalid, so it went to the fallback, where
  // onnxruntime's kernel divides by blocksize² (2^32 squared wraps to 0): SIGFPE in this process
  // (onnxruntime alone dies the same way). blocksize is now refused before anything else.
  // Fuzz 2012:14292: ngram_indexes shorter than the pool's n-grams made the node invalid, so it went
  // to the fallback, where onnxruntime's kernel reads past ngram_indexes and aborts the process
  // (SIGABRT, "terminate called without an active exception"). Such pools are refused now.
  it('TfIdfVectorizer with ngram_indexes shorter than the pool, negative, or bad ngram_counts is refused', async () => {
    const attrs = (over: Record<string, unknown>) => ({
      mode: 'TF',
      min_gram_length: { i: 1 },
      max_gram_length: { i: 2 },
      max_skip_count: { i: 5 },
      ngram_counts: [0, 4],
      ngram_indexes: [0, 1, 2, 3, 4, 5, 6],
      pool_int64s: [2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
      ...over,
    });
    const x = { X: new ort.Tensor('int32', Int32Array.of(1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8), [2, 6]) } as Feeds;
    const build = (over: Record<string, unknown>) =>
      model({
        inputs: [v('X', 'int32', [2, 6])],
        outputs: [v('Y', 'float32')],
        nodes: [node('TfIdfVectorizer', ['X'], ['Y'], { attrs: attrs(over) as never })],
        opsets: { '': 9 },
      });
    for (const [over, message] of [
      [{ ngram_indexes: [3, 2] }, /ngram_indexes has 2 entries, the pool more n-grams/],
      [{ ngram_indexes: [0, 1, 2, -3, 4, 5, 6] }, /ngram_indexes holds -3, a negative column/],
      [{ ngram_counts: [0, 11] }, /ngram_counts \[0, 11\] are not ascending offsets into a pool of 10/],
    ] as const) {
      const e = await outcome(build(over), x, mlx);
      expect(e).toBeInstanceOf(RefusedNodeError);
      expect((e as Error).message).toMatch(message);
    }
    // The well-formed node still runs, as onnxruntime runs it.
    await expectSameAsOrt(build({}), x);
  });
  it('DepthToSpace and SpaceToDepth with a blocksize of 0 or 2^32 are refused, never handed to the fallback', async () => {
    for (const [op, blocksize, mode] of [
      ['DepthToSpace', 2 ** 32, 'border'],
      ['DepthToSpace', 0, 'DCR'],
      ['SpaceToDepth', 0, undefined],
      ['SpaceToDepth', -4, undefined],
    ] as const) {
      const bytes = model({
        inputs: [v('x', 'float32', [2, 5, 1, 5])],
        outputs: [v('y', 'float32')],
        nodes: [node(op, ['x'], ['y'], { attrs: { blocksize: { i: blocksize }, ...(mode && { mode }) } })],
        opsets: { '': 13 },
      });
      const e = await outcome(bytes, { x: f32(seeded(50, 3), [2, 5, 1, 5]) }, mlx);
      expect(e).toBeInstanceOf(RefusedNodeError);
      expect((e as Error).message).toMatch(new RegExp(`${op} blocksize ${blocksize} must be a positive int32`));
    }
  });
});

describe('Resize nearest_mode outside mode nearest (fuzz seed 2301)', () => {
  // onnxruntime ignores nearest_mode unless mode is nearest; mlx refused the node, so it went to
  // the onnxruntime fallback, whose Resize-11 with 48 scales for a rank-1 input smashed its stack
  // (SIGABRT). mlx now takes the node and refuses the scales itself.
  const resize = (): ModelSpec => ({
    opsets: { '': 11 },
    inputs: [v('x', 'float32'), v('roi', 'float32'), v('s', 'float32')],
    outputs: [v('y', 'float32')],
    nodes: [node('Resize', ['x', 'roi', 's'], ['y'], { name: 'n', attrs: { mode: 'linear', nearest_mode: 'x' } })],
  });
  const mlxOnly = { executionProviders: [{ name: 'mlx', device: 'cpu', fallback: 'none' }] } as unknown as typeof mlx;

  it('runs on mlx alone and matches onnxruntime', async () => {
    const bytes = model(resize());
    const feeds = { x: f32([1, 2, 3, 4], [1, 1, 2, 2]), roi: f32([], [0]), s: f32([1, 1, 2, 1.5], [4]) };
    const want = (await (await ort.InferenceSession.create(bytes)).run(feeds)).y;
    const have = (await (await ort.InferenceSession.create(bytes, mlxOnly)).run(feeds)).y;
    expect([...have.dims]).toEqual([...want.dims]);
    Array.from(have.data as Float32Array).forEach((y, i) => expect(y).toBeCloseTo((want.data as Float32Array)[i], 5));
  });

  it('too many scales for the input: a NodeExecutionError, not onnxruntime aborting the process', async () => {
    const scales = Array.from({ length: 48 }, (_, i) => 1 + (i % 3));
    const e = await outcome(model(resize()), { x: f32([0.3, -3, 2.9], [3]), roi: f32(seeded(48, 1), [48]), s: f32(scales, [48]) }, mlx);
    expect(e).toBeInstanceOf(NodeExecutionError);
    expect((e as Error).message).toMatch(/Resize: 48 scales\/sizes for 1 axes/);
  });
});

describe('Conv over zero input channels (fuzz seed 2301)', () => {
  // MLX's CPU conv divides by the channel count: a float16 Conv of [1, 0, 1, 2] by [1, 0, 1, 2]
  // killed the process with SIGFPE. A sum over no channels is 0: the output is the bias.
  for (const type of ['float32', 'float16'] as const) {
    for (const op of ['Conv', 'ConvTranspose'] as const) {
      it(`${op} ${type}: the bias over the output's shape, as onnxruntime gives where it runs`, async () => {
        const bytes = model({
          opsets: { '': 22 },
          irVersion: 11,
          inputs: [v('x', type), v('w', type), v('b', type)],
          outputs: [v('y', type)],
          nodes: [node(op, ['x', 'w', 'b'], ['y'], { name: 'n' })],
        });
        const t = (data: number[], dims: number[]) =>
          type === 'float32'
            ? f32(data, dims)
            : new ort.Tensor(
                'float16',
                Uint16Array.from(data, (d) => (d === 0 ? 0 : d === 1.5 ? 0x3e00 : 0xc000)),
                dims,
              );
        // Conv weight [M, C, k...]; ConvTranspose weight [C, M, k...]: zero C both ways.
        const w = op === 'Conv' ? t([], [2, 0, 2, 2]) : t([], [0, 2, 2, 2]);
        const feeds = { x: t([], [1, 0, 3, 3]), w, b: t([1.5, -2], [2]) };
        const have = (await (await ort.InferenceSession.create(bytes, mlx)).run(feeds)).y;
        const dims = op === 'Conv' ? [1, 2, 2, 2] : [1, 2, 4, 4];
        expect([...have.dims]).toEqual(dims);
        const per = dims[2] * dims[3];
        const want = Array.from({ length: 2 * per }, (_, i) => (i < per ? 1.5 : -2));
        const got =
          type === 'float32'
            ? Array.from(have.data as Float32Array)
            : Array.from(have.data as Uint16Array, (h) => (h === 0x3e00 ? 1.5 : h === 0xc000 ? -2 : h));
        expect(got).toEqual(want);
        // onnxruntime, where it runs the case, agrees. Not its ConvTranspose: over zero channels
        // it adds the bias to a buffer of its arena that its empty product never wrote (0 + bias
        // on fresh pages, NaN in one run of the whole suite, where the arena's buffer was reused).
        if (op === 'Conv' && (await outcome(bytes, feeds)) === 'ran') {
          const ref = (await (await ort.InferenceSession.create(bytes)).run(feeds)).y;
          expect(Array.from(ref.data as ArrayLike<number>)).toEqual(Array.from(have.data as ArrayLike<number>));
        }
      });
    }
  }
});

describe('indexing a scalar (fuzz seed 7, case 91)', () => {
  // Gather, GatherElements and the Scatters index an axis of their data; a scalar has none. The
  // Scatter case failed inside the index check with a JavaScript fault ("reading 'length'").
  const scalar = (op: string, opset: number) =>
    model({
      opsets: { '': opset },
      inputs: [v('x', 'int64', [])],
      outputs: [v('y', 'int64')],
      initializers: [
        { name: 'i', type: 'int64', dims: [1], values: [0n] },
        { name: 'u', type: 'int64', dims: [1], values: [3n] },
      ],
      nodes: [node(op, op === 'Gather' || op === 'GatherElements' ? ['x', 'i'] : ['x', 'i', 'u'], ['y'], { name: 'n' })],
    });
  for (const [op, opset] of [
    ['Scatter', 9],
    ['ScatterElements', 16],
    ['Gather', 13],
    ['GatherElements', 13],
  ] as const) {
    it(`${op} of a scalar is a specific error on both engines`, async () => {
      const bytes = scalar(op, opset);
      const feeds = { x: i64([1], []) };
      expect(await outcome(bytes, feeds)).toBeInstanceOf(Error);
      const e = await outcome(bytes, feeds, mlx);
      expect(e).toBeInstanceOf(NodeExecutionError);
      expect((e as Error).message).toMatch(new RegExp(`node 'n' \\(${op}\\): ${op}: data must have rank 1 or more`));
    });
  }
});

describe('embedding tables and ids of the wrong rank (fuzz seed 2407)', () => {
  // The index check was handed `table.shape[0]` of a scalar table (undefined): a message naming
  // "a table of undefined rows". Both shapes are now checked first, with onnxruntime's words.
  const embed = (idsDims: number[], wordDims: number[]) =>
    model({
      opsets: { '': 17, 'com.microsoft': 1 },
      inputs: [v('ids', 'int32', idsDims)],
      outputs: [v('y', 'float32'), v('mask', 'int32')],
      initializers: [
        {
          name: 'word',
          type: 'float32',
          dims: wordDims,
          values: Array.from({ length: wordDims.reduce((a, b) => a * b, 1) }, (_, i) => i / 10),
        },
        { name: 'pos', type: 'float32', dims: [8, 4], values: Array.from({ length: 32 }, (_, i) => i / 20) },
        { name: 'gamma', type: 'float32', dims: [4], values: [1, 1, 1, 1] },
        { name: 'beta', type: 'float32', dims: [4], values: [0, 0, 0, 0] },
      ],
      nodes: [
        node('EmbedLayerNormalization', ['ids', '', 'word', 'pos', '', 'gamma', 'beta'], ['y', 'mask'], {
          domain: 'com.microsoft',
          name: 'n',
        }),
      ],
    });
  const ids = (dims: number[]) => new ort.Tensor('int32', new Int32Array(dims.reduce((a, b) => a * b, 1)), dims);
  it('1-D input_ids', async () => {
    const bytes = embed([3], [10, 4]);
    expect(await outcome(bytes, { ids: ids([3]) })).toBeInstanceOf(Error);
    const e = await outcome(bytes, { ids: ids([3]) }, mlx);
    expect(e).toBeInstanceOf(NodeExecutionError);
    expect((e as Error).message).toMatch(/EmbedLayerNormalization: input_ids shall be 2 dimensions, got shape \[3\]/);
  });
  it('a scalar word_embedding', async () => {
    const bytes = embed([1, 3], []);
    const e = await outcome(bytes, { ids: ids([1, 3]) }, mlx);
    expect(e).toBeInstanceOf(NodeExecutionError);
    expect((e as Error).message).toMatch(/EmbedLayerNormalization: word_embedding shall be 2 dimensions \[rows, hidden\].*got shape \[\]/);
    expect((e as Error).message).not.toMatch(/undefined/);
  });
  it('a well-formed one still matches onnxruntime', async () => {
    await expectSameAsOrt(embed([1, 3], [10, 4]), { ids: new ort.Tensor('int32', Int32Array.of(1, 5, 9), [1, 3]) });
  });
  it('RotaryEmbedding with position_ids and a 1-D cos_cache', async () => {
    const bytes = model({
      opsets: { '': 23 },
      irVersion: 11,
      inputs: [v('x', 'float32', [1, 2, 3, 4]), v('p', 'int64', [1, 3])],
      outputs: [v('y', 'float32')],
      initializers: [
        { name: 'cos', type: 'float32', dims: [8], values: Array.from({ length: 8 }, () => 1) },
        { name: 'sin', type: 'float32', dims: [8], values: Array.from({ length: 8 }, () => 0) },
      ],
      nodes: [node('RotaryEmbedding', ['x', 'cos', 'sin', 'p'], ['y'], { name: 'n' })],
    });
    const feeds = { x: f32(seeded(24, 3), [1, 2, 3, 4]), p: i64([0, 1, 2], [1, 3]) };
    expect(await outcome(bytes, feeds)).toBeInstanceOf(Error);
    const e = await outcome(bytes, feeds, mlx);
    expect(e).toBeInstanceOf(NodeExecutionError);
    expect((e as Error).message).toMatch(/RotaryEmbedding: with position_ids, cos_cache must be 2-D/);
  });
});

describe('Clip-6 bounds the wrong way round (fuzz seeds 2410, 2411: a mismatch)', () => {
  // onnxruntime refuses the node at load (min_ <= max_ was false); mlx ran it, clipping to max.
  for (const [min, max] of [
    [2, 1],
    [Number.NaN, 1],
  ])
    it(`min ${min}, max ${max}: refused at create() by both`, async () => {
      await bothRefuse(
        {
          ...single('Clip', 6, [v('x', 'float32', [3])], {}),
          irVersion: 3,
          nodes: [node('Clip', ['x'], ['y0'], { name: 'n', attrs: { min: { f: min }, max: { f: max } } })],
        },
        { x: f32([0, 1.5, 3], [3]) },
        new RegExp(`node 'n' \\(Clip\\): attribute min \\(${min}\\) is not at most attribute max \\(1\\)`),
        { invalid: true },
      );
    });

  it('min equal to max still runs, as onnxruntime runs it', async () => {
    const spec = {
      ...single('Clip', 6, [v('x', 'float32', [3])]),
      irVersion: 3,
      nodes: [node('Clip', ['x'], ['y0'], { name: 'n', attrs: { min: { f: 1 }, max: { f: 1 } } })],
    };
    await expectSameAsOrt(model(spec), { x: f32([0, 1.5, 3], [3]) });
  });
});

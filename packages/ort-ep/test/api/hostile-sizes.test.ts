// Hostile sizes: host-side tables whose size comes from an attribute or a feed are sized before
// they are allocated. Each case would otherwise end in "Invalid typed array length", a multi-GB
// allocation or heap exhaustion; here it is an error naming the node and the size.
import { describe, expect, it } from 'vitest';
import { MlxSession, NodeExecutionError, ResourceLimitError, UnsupportedOperatorError, type HostTensor } from '../../src/index.js';
import { model, node, v, type ModelSpec } from '../helpers/build.js';
import { expectSameOutputs, ort, runOn, type Feeds } from '../helpers/ort.js';

const ml = { '': 17, 'ai.onnx.ml': 3 };
const ms = { '': 17, 'com.microsoft': 1 };
const f32 = (data: ArrayLike<number>, dims: number[]): HostTensor => ({ dtype: 1, dims, data: Float32Array.from(data) });
const i32 = (data: number[], dims = [data.length]): HostTensor => ({ dtype: 6, dims, data: Int32Array.from(data) });
const wave = (n: number, phase = 0) => Array.from({ length: n }, (_, i) => Math.sin(i * 0.7 + phase));

/** What running `spec` on MLX alone does: its outputs, or the error create() or run() threw. */
async function mlxRun(spec: ModelSpec, feeds: Record<string, HostTensor>, options: { maxTensorBytes?: number } = {}): Promise<unknown> {
  try {
    const s = await MlxSession.create(model(spec), { device: 'cpu', compiled: false, fallback: 'none', ...options });
    try {
      return await s.run(feeds);
    } finally {
      s.release();
    }
  } catch (e) {
    return e;
  }
}

function expectError(got: unknown, cls: new (...a: never[]) => Error, message: RegExp): void {
  expect(got, String(got)).toBeInstanceOf(cls);
  expect((got as Error).message).toMatch(message);
}

describe('ai.onnx.ml ops size their host results before allocating them', () => {
  it('OneHotEncoder: 2^17 values x 2^16 categories', async () => {
    const cats = Array.from({ length: 2 ** 16 }, (_, i) => i);
    const spec: ModelSpec = {
      opsets: ml,
      inputs: [v('x', 'int64', [2 ** 17])],
      outputs: [v('y', 'float32')],
      nodes: [node('OneHotEncoder', ['x'], ['y'], { name: 'ohe', domain: 'ai.onnx.ml', attrs: { cats_int64s: cats } })],
    };
    const x: HostTensor = { dtype: 7, dims: [2 ** 17], data: new BigInt64Array(2 ** 17) };
    expectError(
      await mlxRun(spec, { x }),
      NodeExecutionError,
      /node 'ohe' \(OneHotEncoder\): .*the output of 131072 value\(s\) x 65536 categories has 8589934592 elements, over the 134217728 computed on the host/,
    );
  });

  it('LinearRegressor: targets 2^40 over zero features', async () => {
    const spec: ModelSpec = {
      opsets: ml,
      inputs: [v('x', 'float32', [1, 0])],
      outputs: [v('y', 'float32')],
      nodes: [
        node('LinearRegressor', ['x'], ['y'], {
          name: 'lin',
          domain: 'ai.onnx.ml',
          attrs: { targets: 2 ** 40, coefficients: { floats: [] } },
        }),
      ],
    };
    expectError(
      await mlxRun(spec, { x: f32([], [1, 0]) }),
      NodeExecutionError,
      /node 'lin' \(LinearRegressor\): .*the scores of 1 row\(s\) and 1099511627776 targets has 1099511627776 elements, over the 134217728/,
    );
  });

  const svc = (vectorsPerClass: number[], rows: number): ModelSpec => ({
    opsets: ml,
    inputs: [v('x', 'float32', [rows, 0])],
    outputs: [v('label', 'int64'), v('scores', 'float32')],
    nodes: [
      node('SVMClassifier', ['x'], ['label', 'scores'], {
        name: 'svm',
        domain: 'ai.onnx.ml',
        attrs: {
          classlabels_ints: [7],
          vectors_per_class: vectorsPerClass,
          coefficients: { floats: [] },
          rho: { floats: [0] },
        },
      }),
    ],
  });

  it('SVMClassifier: vectors_per_class adding up to 2^40 is an invalid node', async () => {
    expectError(
      await mlxRun(svc([2 ** 40], 1), { x: f32([], [1, 0]) }),
      UnsupportedOperatorError,
      /SVMClassifier vectors_per_class adds up to 1099511627776 vectors, over the 134217728 computed on the host/,
    );
  });

  it('SVMClassifier: 2^20 rows of no features against 2^13 support vectors', async () => {
    expectError(
      await mlxRun(svc([2 ** 13], 2 ** 20), { x: f32([], [2 ** 20, 0]) }),
      NodeExecutionError,
      /node 'svm' \(SVMClassifier\): .*the kernel values of 1048576 row\(s\) and 8192 vectors has 8589934592 elements, over the 134217728/,
    );
  });
});

describe('com.microsoft attention and rotary ops size their host tables first', () => {
  it('MRotaryEmbedding: rotary_embedding_dim 2^28 over a head of 4 (an empty cos cache of 2^27 columns)', async () => {
    const half = 2 ** 27;
    const spec: ModelSpec = {
      opsets: ms,
      inputs: [
        v('x', 'float32', [1, 1, 1, 4]),
        v('pos', 'int64', [3, 1, 1]),
        v('cos', 'float32', [0, half]),
        v('sin', 'float32', [0, half]),
      ],
      outputs: [v('y', 'float32')],
      nodes: [
        node('MRotaryEmbedding', ['x', 'pos', 'cos', 'sin'], ['y'], {
          name: 'mrope',
          domain: 'com.microsoft',
          attrs: { num_heads: 1, rotary_embedding_dim: 2 * half, mrope_section: [half, 0, 0] },
        }),
      ],
    };
    const got = await mlxRun(spec, {
      x: f32([1, 2, 3, 4], [1, 1, 1, 4]),
      pos: { dtype: 7, dims: [3, 1, 1], data: new BigInt64Array(3) },
      cos: f32([], [0, half]),
      sin: f32([], [0, half]),
    });
    expectError(
      got,
      NodeExecutionError,
      /node 'mrope' \(MRotaryEmbedding\): .*rotary_embedding_dim 268435456 is not a positive even size within the head size 4/,
    );
  });

  it('PagedAttention: past_seqlens 2^31 - 2 past the block table, with slot_mapping (no write through the table)', async () => {
    const H = 8;
    const spec: ModelSpec = {
      opsets: ms,
      inputs: [
        v('q', 'float32', [1, H]),
        v('k', 'float32', [1, H]),
        v('v', 'float32', [1, H]),
        v('kc', 'float32', [2, 4, 1, H]),
        v('vc', 'float32', [2, 4, 1, H]),
        v('cu', 'int32', [2]),
        v('past', 'int32', [1]),
        v('table', 'int32', [1, 2]),
        v('slots', 'int32', [1]),
      ],
      outputs: [v('y', 'float32'), v('kc_out', 'float32'), v('vc_out', 'float32')],
      nodes: [
        node('PagedAttention', ['q', 'k', 'v', 'kc', 'vc', 'cu', 'past', 'table', '', '', 'slots'], ['y', 'kc_out', 'vc_out'], {
          name: 'paged',
          domain: 'com.microsoft',
          attrs: { num_heads: 1, kv_num_heads: 1 },
        }),
      ],
    };
    const feeds = {
      q: f32(wave(H), [1, H]),
      k: f32(wave(H, 1), [1, H]),
      v: f32(wave(H, 2), [1, H]),
      kc: f32(wave(8 * H, 3), [2, 4, 1, H]),
      vc: f32(wave(8 * H, 4), [2, 4, 1, H]),
      cu: i32([0, 1]),
      past: i32([2 ** 31 - 2]),
      table: i32([0, 1], [1, 2]),
      slots: i32([3]),
    };
    expectError(
      await mlxRun(spec, feeds),
      NodeExecutionError,
      /node 'paged' \(PagedAttention\): past_seqlens\[0\] = 2147483646 with 1 new token\(s\) reaches position 2147483646, past its 2 blocks of 4/,
    );
  });

  describe('GroupQueryAttention builds its key mask on the device', () => {
    const N = 2;
    const H = 8;
    const gqa = (S: number, P: number, attrs: Record<string, number> = {}): ModelSpec => ({
      opsets: ms,
      inputs: [
        v('q', 'float32', [1, S, N * H]),
        v('k', 'float32', [1, S, H]),
        v('v', 'float32', [1, S, H]),
        v('pk', 'float32', [1, 1, P, H]),
        v('pv', 'float32', [1, 1, P, H]),
        v('sl', 'int32', [1]),
        v('tot', 'int32', []),
      ],
      outputs: [v('y', 'float32'), v('present_k', 'float32'), v('present_v', 'float32')],
      nodes: [
        node('GroupQueryAttention', ['q', 'k', 'v', 'pk', 'pv', 'sl', 'tot'], ['y', 'present_k', 'present_v'], {
          name: 'gqa',
          domain: 'com.microsoft',
          attrs: { num_heads: N, kv_num_heads: 1, ...attrs },
        }),
      ],
    });
    const feeds = (S: number, P: number, seqlen: number, total: number): Record<string, HostTensor> => ({
      q: f32(wave(S * N * H), [1, S, N * H]),
      k: f32(wave(S * H, 1), [1, S, H]),
      v: f32(wave(S * H, 2), [1, S, H]),
      pk: f32(wave(P * H, 3), [1, 1, P, H]),
      pv: f32(wave(P * H, 4), [1, 1, P, H]),
      sl: i32([seqlen]),
      tot: { dtype: 6, dims: [], data: Int32Array.of(total) },
    });

    it('total_sequence_length 2^31 - 1 with a per-tensor limit that lets the scores through: the memory budget refuses it', async () => {
      // Before, a host table of 3 x (2^31 - 1) flags: "Invalid typed array length".
      const got = await mlxRun(gqa(3, 2), feeds(3, 2, 3, 2 ** 31 - 1), { maxTensorBytes: 2 ** 50 });
      expect(got, String(got)).toBeInstanceOf(ResourceLimitError);
      expect((got as Error).message).toMatch(
        /evaluating would hold \d+ bytes at once, over the limit of \d+ bytes .*\(maxTensorBytes, maxSessionBytes\)/,
      );
    });

    const ortTensor = (t: HostTensor) => new ort.Tensor(t.dtype === 1 ? 'float32' : 'int32', t.data as never, t.dims);
    for (const [what, S, P, seqlen, total, attrs] of [
      ['a decode step', 1, 4, 4, 5, {}],
      ['a prompt of 3 after 2', 3, 2, 4, 5, {}],
      ['local_window_size 2', 3, 2, 4, 5, { local_window_size: 2 }],
      ['a first prompt, right-padded', 4, 0, 2, 4, {}],
    ] as const)
      it(`${what}: onnxruntime's values`, async () => {
        const bytes = model(gqa(S, P, attrs));
        const f: Feeds = Object.fromEntries(Object.entries(feeds(S, P, seqlen, total)).map(([k, t]) => [k, ortTensor(t)]));
        expectSameOutputs(await runOn('mlx', bytes, f), await runOn('cpu', bytes, f), { rtol: 1e-4, atol: 1e-5 });
      });
  });
});

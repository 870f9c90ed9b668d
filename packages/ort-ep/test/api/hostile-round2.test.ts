// Hostile input, round two: lengths, offsets and indices read from feeds, and attribute and
// option values, in the contrib attention ops, the quantized ops, the ML ops, control flow and
// generate(). Each case asserts a specific error (class and message) or onnxruntime-node's result.
import { describe, expect, it } from 'vitest';
import {
  MlxSession,
  NodeExecutionError,
  RefusedNodeError,
  ResourceLimitError,
  UnsupportedOperatorError,
  generate,
  type HostTensor,
} from '../../src/index.js';
import { pickToken } from '../../src/internal.js';
import { buildDecoder } from '../helpers/decoder.js';
import { model, node, v, type ModelSpec, type TensorSpec } from '../helpers/build.js';
import { expectSameOutputs, mlxCpu, ort, runOn, type Feeds } from '../helpers/ort.js';

const ms = { '': 17, 'com.microsoft': 1 };
const f32 = (data: ArrayLike<number>, dims: number[]): HostTensor => ({ dtype: 1, dims, data: Float32Array.from(data) });
const i32 = (data: number[], dims = [data.length]): HostTensor => ({ dtype: 6, dims, data: Int32Array.from(data) });
const wave = (n: number, phase = 0) => Array.from({ length: n }, (_, i) => Math.sin(i * 0.7 + phase));
const ortTensor = (t: HostTensor) =>
  new ort.Tensor(({ 1: 'float32', 6: 'int32', 7: 'int64', 9: 'bool' } as const)[t.dtype as 1 | 6 | 7 | 9], t.data as never, t.dims);
const ortFeeds = (feeds: Record<string, HostTensor>): Feeds => Object.fromEntries(Object.entries(feeds).map(([k, t]) => [k, ortTensor(t)]));

/** What running `spec` on MLX alone (no fallback) does: its outputs, or the error create() or run() threw. */
async function mlxRun(
  spec: ModelSpec | Uint8Array,
  feeds: Record<string, HostTensor>,
  compiled = false,
): Promise<Record<string, HostTensor> | Error> {
  try {
    const s = await MlxSession.create(spec instanceof Uint8Array ? spec : model(spec), { device: 'cpu', compiled, fallback: 'none' });
    try {
      return (await s.run(feeds)) as Record<string, HostTensor>;
    } finally {
      s.release();
    }
  } catch (e) {
    return e as Error;
  }
}

/** onnxruntime-node's CPU provider on the same model: its outputs, or its error. */
async function ortRun(spec: ModelSpec, feeds: Record<string, HostTensor>): Promise<Awaited<ReturnType<typeof runOn>> | Error> {
  try {
    return await runOn('cpu', model(spec), ortFeeds(feeds));
  } catch (e) {
    return e as Error;
  }
}

function expectError(got: unknown, cls: new (...a: never[]) => Error, message: RegExp): void {
  expect(got, String(got)).toBeInstanceOf(cls);
  expect((got as Error).message).toMatch(message);
}

// ---------------------------------------------------------------------------------------------

describe('PackedMultiHeadAttention checks token_offset and cumulative_sequence_length on the device', () => {
  // Two sequences of 2 tokens in a padded [2, 3]: tokens at 0, 1 and 3, 4; padding at 2 and 5.
  const B = 2;
  const S = 3;
  const D = 4;
  const T = 4;
  const spec: ModelSpec = {
    opsets: ms,
    inputs: [
      v('q', 'float32', [T, D]),
      v('k', 'float32', [T, D]),
      v('v', 'float32', [T, D]),
      v('to', 'int32', [B, S]),
      v('cu', 'int32', [B + 1]),
    ],
    outputs: [v('y', 'float32')],
    nodes: [
      node('PackedMultiHeadAttention', ['q', 'k', 'v', '', 'to', 'cu'], ['y'], {
        name: 'pmha',
        domain: 'com.microsoft',
        attrs: { num_heads: 2 },
      }),
    ],
  };
  const feeds = (to: number[], cu = [0, 2, 4]) => ({
    q: f32(wave(T * D), [T, D]),
    k: f32(wave(T * D, 1), [T, D]),
    v: f32(wave(T * D, 2), [T, D]),
    to: i32(to, [B, S]),
    cu: i32(cu),
  });

  it('a consistent layout runs', async () => {
    for (const compiled of [false, true]) {
      const out = await mlxRun(spec, feeds([0, 1, 3, 4, 2, 5]), compiled);
      expect(out).not.toBeInstanceOf(Error);
      expect((out as Record<string, HostTensor>).y.dims).toEqual([T, D]);
    }
  });

  const cases: [string, number[], number[], RegExp][] = [
    [
      'past the padded positions (65536)',
      [0, 65536, 3, 4, 2, 5],
      [0, 2, 4],
      /token_offset holds 65536, outside the 6 padded positions \[0, 5\]/,
    ],
    ['-2^31', [0, -(2 ** 31), 3, 4, 2, 5], [0, 2, 4], /token_offset holds -2147483648, outside/],
    ['-1', [0, -1, 3, 4, 2, 5], [0, 2, 4], /token_offset holds -1, outside/],
    ['7', [0, 7, 3, 4, 2, 5], [0, 2, 4], /token_offset holds 7, outside/],
    ['255', [0, 255, 3, 4, 2, 5], [0, 2, 4], /token_offset holds 255, outside/],
    ['a position twice', [0, 0, 3, 4, 2, 5], [0, 2, 4], /must list each of the 6 padded positions of \[2, 3\] once; position 1 is missing/],
    ['a token at a padding position', [0, 1, 2, 4, 3, 5], [0, 2, 4], /token_offset\[2\] = 2, but packed token 2 is position 3/],
    [
      'lengths not ending at the token count',
      [0, 1, 3, 4, 2, 5],
      [0, 2, 5],
      /cumulative_sequence_length \[0, 2, 5\] must rise from 0 to the 4 packed tokens/,
    ],
    ['a negative length', [0, 1, 3, 4, 2, 5], [0, -1, 4], /cumulative_sequence_length \[0, -1, 4\]/],
    ['a sequence longer than S', [0, 1, 3, 4, 2, 5], [0, 4, 4], /by at most the sequence length 3/],
  ];
  for (const [what, to, cu, message] of cases)
    it(`token_offset or lengths ${what}: a NodeExecutionError, on both paths`, async () => {
      for (const compiled of [false, true]) expectError(await mlxRun(spec, feeds(to, cu), compiled), NodeExecutionError, message);
    });
});

describe('MatMulNBits checks its shapes and sizes as onnxruntime does', () => {
  const K = 32;
  const N = 2;
  const spec = (opts: { M?: number; scales?: number; zp?: number; n?: number; bias?: number }): ModelSpec => {
    const M = opts.M ?? 1;
    const inits: TensorSpec[] = [
      { name: 'b', type: 'uint8', dims: [N, 1, 16], values: Array.from({ length: N * 16 }, (_, i) => (i * 37) & 255) },
      { name: 's', type: 'float32', dims: [opts.scales ?? N], values: Array.from({ length: opts.scales ?? N }, (_, i) => 0.1 * (i + 1)) },
    ];
    if (opts.zp) inits.push({ name: 'zp', type: 'uint8', dims: [opts.zp], values: new Array(opts.zp).fill(3) });
    if (opts.bias) inits.push({ name: 'bias', type: 'float32', dims: [opts.bias], values: new Array(opts.bias).fill(0.5) });
    return {
      opsets: ms,
      inputs: [v('a', 'float32', [M, K])],
      outputs: [v('y', 'float32')],
      initializers: inits,
      nodes: [
        node('MatMulNBits', ['a', 'b', 's', opts.zp ? 'zp' : '', '', opts.bias ? 'bias' : ''], ['y'], {
          name: 'mm',
          domain: 'com.microsoft',
          attrs: { K, N: opts.n ?? N, bits: 4, block_size: 32 },
        }),
      ],
    };
  };
  const a = (M: number) => ({ a: f32(wave(M * K), [M, K]) });

  it('an input of shape [0, K] gives [0, N], as onnxruntime returns (the quantized kernel divided by zero)', async () => {
    for (const opts of [{ M: 0 }, { M: 0, zp: N, bias: N }]) {
      const want = await ortRun(spec(opts), a(0));
      expect(want).not.toBeInstanceOf(Error);
      for (const compiled of [false, true]) {
        const got = await mlxRun(spec(opts), a(0), compiled);
        expect((got as Record<string, HostTensor>).y.dims).toEqual([0, N]);
      }
    }
  });

  it('valid constant weights still agree with onnxruntime', async () => {
    const bytes = model(spec({ M: 3, zp: N, bias: N }));
    expectSameOutputs(await runOn('mlx', bytes, ortFeeds(a(3))), await runOn('cpu', bytes, ortFeeds(a(3))), { rtol: 1e-4, atol: 1e-5 });
  });

  const wrong: [string, Parameters<typeof spec>[0], RegExp][] = [
    ['one scale for two rows', { scales: 1 }, /scales shape \{1\} does not match attribute-derived shape \[2\] or \[2,1\]/],
    ['three scales for two rows', { scales: 3 }, /scales shape \{3\} does not match attribute-derived shape \[2\] or \[2,1\]/],
    ['one zero point byte for two rows', { zp: 1 }, /zero_points shape \{1\} does not match attribute-derived shape \[2\] or \[2,1\]/],
    ['a bias of 3 for N = 2', { bias: 3 }, /bias shape \{3\} does not match attribute-derived shape \[2\]/],
  ];
  for (const [what, opts, message] of wrong)
    it(`${what}: refused as onnxruntime refuses it`, async () => {
      expect(await ortRun(spec(opts), a(1))).toBeInstanceOf(Error);
      for (const compiled of [false, true]) expectError(await mlxRun(spec(opts), a(1), compiled), NodeExecutionError, message);
    });

  it('N = -1 is an invalid node, not "Invalid typed array length"', async () => {
    expect(await ortRun(spec({ n: -1 }), a(1))).toBeInstanceOf(Error);
    expectError(await mlxRun(spec({ n: -1 }), a(1)), RefusedNodeError, /MatMulNBits attribute N = -1 is not a positive size/);
  });
});

describe('GroupQueryAttention: seqlens_k, total_sequence_length and attributes as onnxruntime reads them', () => {
  const N = 2;
  const Nkv = 1;
  const H = 16;
  const gqa = (o: { S: number; P: number; attrs?: Record<string, number | { f: number }>; rotary?: boolean }): ModelSpec => {
    const inputs = ['q', 'k', 'v', 'pk', 'pv', 'sl', 'tot'];
    const initializers: TensorSpec[] = [];
    if (o.rotary) {
      inputs.push('cos', 'sin');
      for (const [name, fn] of [
        ['cos', Math.cos],
        ['sin', Math.sin],
      ] as const)
        initializers.push({ name, type: 'float32', dims: [16, H / 2], values: Array.from({ length: 8 * H }, (_, i) => fn(i * 0.1)) });
    }
    return {
      opsets: ms,
      inputs: [
        v('q', 'float32', [1, o.S, N * H]),
        v('k', 'float32', [1, o.S, Nkv * H]),
        v('v', 'float32', [1, o.S, Nkv * H]),
        v('pk', 'float32', [1, Nkv, o.P, H]),
        v('pv', 'float32', [1, Nkv, o.P, H]),
        v('sl', 'int32', [1]),
        v('tot', 'int32', []),
      ],
      outputs: [v('y', 'float32'), v('present_k', 'float32'), v('present_v', 'float32')],
      initializers,
      nodes: [
        node('GroupQueryAttention', inputs, ['y', 'present_k', 'present_v'], {
          name: 'gqa',
          domain: 'com.microsoft',
          attrs: { num_heads: N, kv_num_heads: Nkv, ...o.attrs },
        }),
      ],
    };
  };
  const feeds = (S: number, P: number, seqlen: number, total: number) => ({
    q: f32(wave(S * N * H), [1, S, N * H]),
    k: f32(wave(S * Nkv * H, 1), [1, S, Nkv * H]),
    v: f32(wave(S * Nkv * H, 2), [1, S, Nkv * H]),
    pk: f32(wave(P * Nkv * H, 3), [1, Nkv, P, H]),
    pv: f32(wave(P * Nkv * H, 4), [1, Nkv, P, H]),
    sl: i32([seqlen]),
    tot: { dtype: 6, dims: [], data: Int32Array.of(total) } as HostTensor,
  });

  // [S, P, seqlens_k, total, onnxruntime's message]
  const bad: [number, number, number, number, string][] = [
    [2, 2, 255, 4, 'seqlens_k[0] = 255 is out of range [0, 4)'],
    [2, 2, -5, 4, 'seqlens_k[0] = -5 is out of range [0, 4)'],
    [2, 2, 2 ** 31 - 1, 4, 'seqlens_k[0] = 2147483647 is out of range [0, 4)'],
    [2, 2, 0, 4, 'seqlens_k[0] = 0 is too small for sequence_length 2'],
    [2, 2, 3, 3, 'seqlens_k[0] = 3 is out of range [0, 3)'],
    [2, 0, 2, 2, 'seqlens_k[0] = 2 is out of range [0, 2)'],
    [2, 2, 3, 0, 'total_sequence_length must be positive, got 0.'],
    // A decode step into a shared buffer of 8 (seqlens_k stays on the device).
    [1, 8, 255, 4, 'seqlens_k[0] = 255 is out of range [0, 8)'],
    [1, 8, 2 ** 31 - 1, 4, 'seqlens_k[0] = 2147483647 is out of range [0, 8)'],
    [1, 8, -(2 ** 31), 4, 'seqlens_k[0] = -2147483648 is out of range [0, 8)'],
  ];
  for (const [S, P, seqlen, total, message] of bad)
    it(`S ${S}, past ${P}, seqlens_k ${seqlen}, total ${total}: "${message}" as onnxruntime says`, async () => {
      const spec = gqa({ S, P });
      const want = await ortRun(spec, feeds(S, P, seqlen, total));
      expect(want).toBeInstanceOf(Error);
      expect((want as Error).message).toContain(message);
      for (const compiled of [false, true])
        expectError(
          await mlxRun(spec, feeds(S, P, seqlen, total), compiled),
          NodeExecutionError,
          new RegExp(message.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')),
        );
    });

  it('seqlens_k past total_sequence_length within a larger shared buffer is an error, not a wrong result', async () => {
    expectError(
      await mlxRun(gqa({ S: 1, P: 8 }), feeds(1, 8, 5, 4)),
      NodeExecutionError,
      /seqlens_k\[0\] \+ 1 = 6 is past total_sequence_length 4/,
    );
  });

  it('total_sequence_length 2^31 - 1 is sized before anything is built (not "Invalid typed array length")', async () => {
    const got = await mlxRun(gqa({ S: 2, P: 2 }), feeds(2, 2, 3, 2 ** 31 - 1));
    expect(got, String(got)).toBeInstanceOf(ResourceLimitError);
    expect((got as Error).message).toMatch(/node 'gqa' \(GroupQueryAttention\): its result of shape \[1, 1, 2147483647, 16\] needs/);
  });

  const same: [string, Parameters<typeof gqa>[0], [number, number, number, number]][] = [
    ['a valid step', { S: 2, P: 2 }, [2, 2, 3, 4]],
    ['scale 0 (the default 1/sqrt(head size))', { S: 2, P: 2, attrs: { scale: { f: 0 } } }, [2, 2, 3, 4]],
    ['smooth_softmax 2 (off)', { S: 2, P: 2, attrs: { smooth_softmax: 2 } }, [2, 2, 3, 4]],
    ['smooth_softmax -1 (off)', { S: 2, P: 2, attrs: { smooth_softmax: -1 } }, [2, 2, 3, 4]],
    ['do_rotary 2 (off)', { S: 2, P: 2, attrs: { do_rotary: 2 }, rotary: true }, [2, 2, 3, 4]],
    ['do_rotary -1 (off)', { S: 2, P: 2, attrs: { do_rotary: -1 }, rotary: true }, [2, 2, 3, 4]],
    ['do_rotary 1, rotary_interleaved 2 (off)', { S: 2, P: 2, attrs: { do_rotary: 1, rotary_interleaved: 2 }, rotary: true }, [2, 2, 3, 4]],
  ];
  for (const [what, o, [S, P, seqlen, total]] of same)
    it(`${what}: onnxruntime's values`, async () => {
      const bytes = model(gqa(o));
      const f = ortFeeds(feeds(S, P, seqlen, total));
      expectSameOutputs(await runOn('mlx', bytes, f), await runOn('cpu', bytes, f), { rtol: 1e-4, atol: 1e-5 });
    });

  it("scale 0 on a shared-buffer step (seqlens_k on the device): onnxruntime's attention output", async () => {
    // Only y: rows of the present buffer past the sequence keep the past's contents here (the shared buffer's).
    const bytes = model(gqa({ S: 1, P: 8, attrs: { scale: { f: 0 } } }));
    const f = ortFeeds(feeds(1, 8, 3, 4));
    const [have, want] = [await runOn('mlx', bytes, f), await runOn('cpu', bytes, f)];
    expectSameOutputs({ y: have.y }, { y: want.y }, { rtol: 1e-4, atol: 1e-5 });
  });

  // A batch decoding into a shared buffer, each entry at its own length (continuous batching):
  // seqlens_k stays on the device and each entry's rows are scattered at its length.
  const gqaBatch = (B: number, S: number, P: number, rotary = true): ModelSpec => {
    const one = rotary ? gqa({ S, P, rotary: true, attrs: { do_rotary: 1 } }) : gqa({ S, P });
    return {
      ...one,
      inputs: [
        v('q', 'float32', [B, S, N * H]),
        v('k', 'float32', [B, S, Nkv * H]),
        v('v', 'float32', [B, S, Nkv * H]),
        v('pk', 'float32', [B, Nkv, P, H]),
        v('pv', 'float32', [B, Nkv, P, H]),
        v('sl', 'int32', [B]),
        v('tot', 'int32', []),
      ],
    };
  };
  const batchFeeds = (B: number, S: number, P: number, seqlens: number[], total: number) => ({
    q: f32(wave(B * S * N * H), [B, S, N * H]),
    k: f32(wave(B * S * Nkv * H, 1), [B, S, Nkv * H]),
    v: f32(wave(B * S * Nkv * H, 2), [B, S, Nkv * H]),
    pk: f32(wave(B * P * Nkv * H, 3), [B, Nkv, P, H]),
    pv: f32(wave(B * P * Nkv * H, 4), [B, Nkv, P, H]),
    sl: i32(seqlens),
    tot: { dtype: 6, dims: [], data: Int32Array.of(total) } as HostTensor,
  });
  // (onnxruntime takes one new token a step for a batch over a past: "batch_size must be 1 when
  // sequence_length > 1 and past context is given".)
  for (const [S, seqlens, total] of [
    [1, [2, 6, 4], 8],
    [1, [9, 0, 5], 10],
  ] as [number, number[], number][])
    it(`a batch of 3 in a shared buffer of 10, seqlens_k [${seqlens}]: onnxruntime's outputs and presents, eager and compiled`, async () => {
      const spec = gqaBatch(3, S, 10);
      const f = batchFeeds(3, S, 10, seqlens, total);
      const want = await runOn('cpu', model(spec), ortFeeds(f));
      for (const compiled of [false, true]) {
        const bytes = model(spec);
        const s = await MlxSession.create(bytes, { device: 'cpu', compiled, fallback: 'none' });
        try {
          // Twice: a compiled session traces the signature on its second run.
          for (let r = 0; r < 2; r++) {
            const have = (await s.run(f)) as Record<string, HostTensor>;
            // The presents' rows past each entry's length are not compared: onnxruntime's fresh
            // present leaves them unwritten, the shared buffer here keeps the past's.
            for (const k of ['y', 'present_k', 'present_v']) {
              const a = have[k].data as Float32Array;
              const b = want[k].data as Float32Array;
              expect(have[k].dims, k).toEqual(want[k].dims);
              const rowOf = (i: number) => Math.floor(i / H) % 10;
              const entryOf = (i: number) => Math.floor(i / (Nkv * 10 * H));
              const compared = k === 'y' ? (_: number) => true : (i: number) => rowOf(i) <= seqlens[entryOf(i)];
              const worst = a.reduce((m, x, i) => (compared(i) ? Math.max(m, Math.abs(x - b[i])) : m), 0);
              expect(worst, `${k}, compiled ${compiled}, run ${r}`).toBeLessThan(1e-5);
            }
          }
        } finally {
          s.release();
        }
      }
    });

  it('a batch step with one entry out of range names that entry, as onnxruntime does', async () => {
    const spec = gqaBatch(3, 1, 10, false);
    const f = batchFeeds(3, 1, 10, [2, 200, 4], 8);
    const want = await ortRun(spec, f);
    expect(want).toBeInstanceOf(Error);
    expect((want as Error).message).toContain('seqlens_k[1] = 200 is out of range [0, 10)');
    for (const compiled of [false, true])
      expectError(await mlxRun(spec, f, compiled), NodeExecutionError, /seqlens_k\[1\] = 200 is out of range \[0, 10\)/);
    expectError(
      await mlxRun(spec, batchFeeds(3, 1, 10, [2, 5, 9], 8), true),
      NodeExecutionError,
      /seqlens_k\[2\] \+ 1 = 10 is past total_sequence_length 8/,
    );
  });

  it('causal 2 is refused, as onnxruntime refuses it', async () => {
    const attrs = { causal: 2 };
    expect(await ortRun(gqa({ S: 2, P: 2, attrs }), feeds(2, 2, 3, 4))).toBeInstanceOf(Error);
    expectError(
      await mlxRun(gqa({ S: 2, P: 2, attrs }), feeds(2, 2, 3, 4)),
      UnsupportedOperatorError,
      /GroupQueryAttention causal must be 0 or 1, got 2/,
    );
  });

  // Invalid head counts are refused at create() and never handed to onnxruntime, whose kernel
  // crashed the fallback's process on num_heads -2 (fuzz case 2405:9931).
  it('num_heads -2 and kv_num_heads 0 are invalid nodes, refused without onnxruntime', async () => {
    for (const [attrs, message] of [
      [{ num_heads: -2 }, /GroupQueryAttention num_heads -2 must be positive/],
      [{ kv_num_heads: 0 }, /GroupQueryAttention kv_num_heads 0 must be positive and divide num_heads 2/],
    ] as const) {
      const err = await mlxRun(gqa({ S: 2, P: 2, attrs }), feeds(2, 2, 3, 4));
      expectError(err, RefusedNodeError, message);
      expect(String((err as Error).message)).not.toMatch(/onnxruntime/);
    }
  });

  it("qk_output without the output_qk output: onnxruntime's error", async () => {
    const spec = gqa({ S: 2, P: 2, attrs: { qk_output: 1 } });
    expect(String(await ortRun(spec, feeds(2, 2, 3, 4)))).toContain(
      'qk_output attribute was configured but output buffer was not provided',
    );
    expectError(
      await mlxRun(spec, feeds(2, 2, 3, 4)),
      NodeExecutionError,
      /qk_output attribute was configured but output buffer was not provided/,
    );
  });

  it('MultiHeadAttention scale 0 is the default 1/sqrt(head size), as in onnxruntime', async () => {
    const spec: ModelSpec = {
      opsets: ms,
      inputs: [v('q', 'float32', [1, 3, 8]), v('k', 'float32', [1, 4, 8]), v('v', 'float32', [1, 4, 8])],
      outputs: [v('y', 'float32')],
      nodes: [node('MultiHeadAttention', ['q', 'k', 'v'], ['y'], { domain: 'com.microsoft', attrs: { num_heads: 2, scale: { f: 0 } } })],
    };
    const f = ortFeeds({ q: f32(wave(24), [1, 3, 8]), k: f32(wave(32, 1), [1, 4, 8]), v: f32(wave(32, 2), [1, 4, 8]) });
    const bytes = model(spec);
    expectSameOutputs(await runOn('mlx', bytes, f), await runOn('cpu', bytes, f), { rtol: 1e-4, atol: 1e-5 });
  });
});

describe('TreeEnsembleRegressor: base values and n_targets as onnxruntime reads them', () => {
  // One tree: x <= 0.5 goes to a leaf scoring target 0 (1.5), else to one scoring target 1 (-2).
  const spec = (o: { nTargets?: number; aggregate?: string; post?: string; base?: number[] }): ModelSpec => ({
    opsets: { '': 17, 'ai.onnx.ml': 3 },
    inputs: [v('x', 'float32', [2, 1])],
    outputs: [v('y', 'float32')],
    nodes: [
      node('TreeEnsembleRegressor', ['x'], ['y'], {
        name: 'tree',
        domain: 'ai.onnx.ml',
        attrs: {
          n_targets: o.nTargets ?? 2,
          aggregate_function: o.aggregate ?? 'SUM',
          post_transform: o.post ?? 'NONE',
          nodes_treeids: [0, 0, 0],
          nodes_nodeids: [0, 1, 2],
          nodes_featureids: [0, 0, 0],
          nodes_modes: ['BRANCH_LEQ', 'LEAF', 'LEAF'],
          nodes_values: { floats: [0.5, 0, 0] },
          nodes_truenodeids: [1, 0, 0],
          nodes_falsenodeids: [2, 0, 0],
          target_treeids: [0, 0],
          target_nodeids: [1, 2],
          target_ids: [0, 1],
          target_weights: { floats: [1.5, -2] },
          ...(o.base && { base_values: { floats: o.base } }),
        },
      }),
    ],
  });
  const x = { x: f32([0, 1], [2, 1]) };

  for (const aggregate of ['SUM', 'AVERAGE', 'MIN', 'MAX'])
    for (const post of ['NONE', 'SOFTMAX', 'LOGISTIC'])
      it(`a target no tree scored writes 0, not its base value (${aggregate}, ${post})`, async () => {
        const bytes = model(spec({ aggregate, post, base: [0.5, -0.5] }));
        const have = await runOn('mlx', bytes, ortFeeds(x));
        expectSameOutputs(have, await runOn('cpu', bytes, ortFeeds(x)), { rtol: 1e-6, atol: 1e-7 });
        if (post === 'NONE') expect(Array.from(have.y.data as Float32Array)).toEqual([2, 0, 0, -2.5]);
      });

  it('base_values of another length than n_targets and n_targets 0 are invalid nodes, as onnxruntime refuses them', async () => {
    for (const [o, message] of [
      [{ nTargets: 2 ** 31 - 1, base: [0.5, -0.5] }, /TreeEnsembleRegressor base_values has 2 values for n_targets 2147483647/],
      [{ nTargets: 1, base: [0.5, -0.5] }, /TreeEnsembleRegressor base_values has 2 values for n_targets 1/],
      [{ nTargets: 0 }, /TreeEnsembleRegressor n_targets 0 is not a positive count/],
    ] as const) {
      expect(await ortRun(spec(o), x)).toBeInstanceOf(Error);
      expectError(await mlxRun(spec(o), x), UnsupportedOperatorError, message);
    }
  });

  it('n_targets 2^31 - 1 without base values: the result is sized first (not "Invalid typed array length")', async () => {
    expectError(
      await mlxRun(spec({ nTargets: 2 ** 31 - 1 }), x),
      NodeExecutionError,
      /the scores of 2 rows and n_targets 2147483647 has 4294967294 elements, over the/,
    );
  });
});

describe('If and Loop: conditions of one element, empty scan outputs shaped as onnxruntime shapes them', () => {
  const branch = (value: number) => ({
    g: {
      inputs: [],
      outputs: [v('o', 'float32', [1])],
      nodes: [node('Constant', [], ['o'], { attrs: { value: { t: { name: 'c', type: 'float32', dims: [1], values: [value] } } } })],
    },
  });
  const ifSpec = (n: number): ModelSpec => ({
    inputs: [v('c', 'bool', [n])],
    outputs: [v('y', 'float32')],
    nodes: [node('If', ['c'], ['y'], { name: 'if', attrs: { then_branch: branch(1), else_branch: branch(2) } })],
  });
  const cond = (n: number): HostTensor => ({ dtype: 9, dims: [n], data: new Uint8Array(n).fill(1) });

  for (const n of [0, 2])
    it(`an If condition of shape [${n}] is onnxruntime's error, not a branch`, async () => {
      expect(String(await ortRun(ifSpec(n), { c: cond(n) }))).toContain('condition input must have exactly one element');
      for (const compiled of [false, true])
        expectError(
          await mlxRun(ifSpec(n), { c: cond(n) }, compiled),
          NodeExecutionError,
          /node 'if' \(If\): If nodes condition input must have exactly one element, got shape \[\d\]/,
        );
    });

  it('an If condition of one element still picks its branch', async () => {
    expect(((await mlxRun(ifSpec(1), { c: cond(1) })) as Record<string, HostTensor>).y.data).toEqual(Float32Array.of(1));
  });

  /** Loop(M, '', x0) whose body carries x [1] and scans x + x (or x gathered at 5, out of range), its shape undeclared. */
  const loopSpec = (scan: 'add' | 'gather'): ModelSpec => ({
    inputs: [v('m', 'int64', []), v('x0', 'float32', [1])],
    outputs: [v('xf', 'float32'), v('ss', 'float32')],
    nodes: [
      // On the device, so that the body's Gather checks its index through a guard.
      node('Relu', ['x0'], ['xr']),
      node('Loop', ['m', '', 'xr'], ['xf', 'ss'], {
        name: 'loop',
        attrs: {
          body: {
            g: {
              inputs: [v('i', 'int64', []), v('ci', 'bool', []), v('x', 'float32', [1])],
              outputs: [v('co', 'bool', []), v('xo', 'float32', [1]), v('s', 'float32')],
              initializers: [{ name: 'five', type: 'int64', dims: [1], values: [5] }],
              nodes: [
                node('Identity', ['ci'], ['co']),
                node('Identity', ['x'], ['xo']),
                scan === 'add' ? node('Add', ['x', 'x'], ['s']) : node('Gather', ['x', 'five'], ['s']),
              ],
            },
          },
        },
      }),
    ],
  });
  const loopFeeds = (m: number) => ({ m: { dtype: 7, dims: [], data: BigInt64Array.of(BigInt(m)) } as HostTensor, x0: f32([3], [1]) });

  for (const scan of ['add', 'gather'] as const)
    it(`a Loop of 0 iterations gives a scan output of shape [0, 1] from a trace of its body (${scan})`, async () => {
      const want = await ortRun(loopSpec(scan), loopFeeds(0));
      expect(want).not.toBeInstanceOf(Error);
      for (const compiled of [false, true]) {
        const got = (await mlxRun(loopSpec(scan), loopFeeds(0), compiled)) as Record<string, HostTensor>;
        expect(got.ss?.dims, String(got)).toEqual([0, 1]);
        expect((want as Awaited<ReturnType<typeof runOn>>).ss.dims).toEqual([0, 1]);
      }
    });

  it('the trace of a body checks nothing: an iteration that runs still fails on its index', async () => {
    expectError(await mlxRun(loopSpec('gather'), loopFeeds(1)), NodeExecutionError, /index 5 is out of range/);
  });
});

describe('generate() checks every option before its first run', () => {
  const bytes = buildDecoder({ kind: 'llama', layers: 1, hidden: 32, heads: 2, kvHeads: 1, ffn: 64, vocab: 64, maxPositions: 64 });
  const base = { inputIds: [3, 17, 42], maxNewTokens: 3, Tensor: ort.Tensor as never };
  const tokens = async (session: Awaited<ReturnType<typeof ort.InferenceSession.create>>, opts: Record<string, unknown>) => {
    const out: number[] = [];
    for await (const t of generate(session as never, { ...base, ...opts } as never)) out.push(t);
    return out;
  };
  const cases: [string, Record<string, unknown>, new (...a: never[]) => Error, RegExp][] = [
    [
      "sampling 'greedy ' (a typo)",
      { sampling: 'greedy ' },
      TypeError,
      /sampling must be 'greedy' or an object \{ temperature, topK, topP, seed \}, got 'greedy '/,
    ],
    ['sampling 42', { sampling: 42 }, TypeError, /sampling must be 'greedy' or an object .*, got 42/],
    ['sampling null', { sampling: null }, TypeError, /sampling must be 'greedy' or an object .*, got null/],
    ['an unknown sampling key', { sampling: { temp: 0.5 } }, TypeError, /sampling has an unknown option 'temp'/],
    ['temperature 0', { sampling: { temperature: 0 } }, RangeError, /sampling.temperature must be a finite number > 0, got 0/],
    ['temperature NaN', { sampling: { temperature: Number.NaN } }, RangeError, /sampling.temperature must be a finite number > 0, got NaN/],
    ["temperature '1'", { sampling: { temperature: '1' } }, TypeError, /sampling.temperature must be a number, got '1'/],
    ['topK -1', { sampling: { topK: -1 } }, RangeError, /sampling.topK must be an integer ≥ 0/],
    ['topK 2.5', { sampling: { topK: 2.5 } }, RangeError, /sampling.topK must be an integer ≥ 0 \(0: all tokens\), got 2.5/],
    ['topP 0', { sampling: { topP: 0 } }, RangeError, /sampling.topP must be in \(0, 1\], got 0/],
    ['topP 1.5', { sampling: { topP: 1.5 } }, RangeError, /sampling.topP must be in \(0, 1\], got 1.5/],
    ['seed 0.5', { sampling: { seed: 0.5 } }, RangeError, /sampling.seed must be an integer, got 0.5/],
    ['seed null', { sampling: { seed: null } }, TypeError, /sampling.seed must be a number, got null/],
    ['maxNewTokens -1', { maxNewTokens: -1 }, RangeError, /maxNewTokens must be an integer ≥ 0, got -1/],
    ['maxNewTokens NaN', { maxNewTokens: Number.NaN }, RangeError, /maxNewTokens must be an integer ≥ 0, got NaN/],
    ["maxNewTokens '3'", { maxNewTokens: '3' }, RangeError, /maxNewTokens must be an integer ≥ 0, got '3'/],
    ['kvCapacity 0', { kvCapacity: 0 }, RangeError, /kvCapacity must be a positive integer, got 0/],
    ['kvCapacity null', { kvCapacity: null }, RangeError, /kvCapacity must be a positive integer, got null/],
    ['kvWindow 0', { kvWindow: 0 }, RangeError, /kvWindow must be a positive integer \(the model's local_window_size\), got 0/],
    ["kvWindow '8'", { kvWindow: '8' }, RangeError, /kvWindow must be a positive integer .*, got '8'/],
    [
      'kvWindow with kvCapacity',
      { kvWindow: 8, kvCapacity: 16 },
      TypeError,
      /kvWindow \(a sliding window cache of that many rows\) and kvCapacity \(one shared buffer of prompt and new tokens\) are two cache layouts; give one/,
    ],
    ['inputIds null', { inputIds: null }, TypeError, /inputIds must be an array of token ids, got null/],
    ['a negative token id', { inputIds: [3, -1] }, RangeError, /inputIds\[1\] = -1 is not a token id/],
    ['a fractional stop token', { stopTokens: [1.5] }, RangeError, /stopTokens\[0\] = 1.5 is not a token id/],
    ['onStep 5', { onStep: 5 }, TypeError, /onStep must be a function, got 5/],
    ['an unknown option', { maxTokens: 5 }, TypeError, /unknown option 'maxTokens'/],
  ];
  it('each bad value is a TypeError or RangeError naming the option, before any token', async () => {
    const session = await ort.InferenceSession.create(bytes, mlxCpu);
    try {
      for (const [what, opts, cls, message] of cases) {
        const got = await tokens(session, opts).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(got, what).toBeInstanceOf(cls);
        expect((got as Error).message, what).toMatch(message);
      }
      // Valid sampling still generates, the same tokens for the same seed.
      const s = { sampling: { temperature: 0.8, topK: 5, topP: 0.9, seed: 7 } };
      expect(await tokens(session, s)).toEqual(await tokens(session, s));
      expect(await tokens(session, { sampling: 'greedy' })).toHaveLength(3);
    } finally {
      await session.release();
    }
  }, 60_000);

  it('pickToken refuses what generate() refuses', () => {
    expect(() => pickToken([0, 1], 'greedy ' as never)).toThrow(TypeError);
    expect(() => pickToken([0, 1], { topP: 2 })).toThrow(/sampling.topP must be in \(0, 1\], got 2/);
    expect(pickToken([0, 3, 1], 'greedy')).toBe(1);
  });
});

describe('session options of the wrong type are TypeErrors naming the option', () => {
  const spec: ModelSpec = { inputs: [v('x', 'float32', [2])], outputs: [v('y', 'float32')], nodes: [node('Relu', ['x'], ['y'])] };
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ graphRewrites: 5 }, /graphRewrites must be true, false or a list of rewrite names, got 5/],
    [{ graphRewrites: 'fuse-gelu' }, /graphRewrites must be true, false or a list of rewrite names, got 'fuse-gelu'/],
    [{ graphRewrites: [1] }, /graphRewrites must be true, false or a list of rewrite names, got \[1\]/],
    [{ disabledOps: 'Relu' }, /disabledOps must be an array of op types .*, got 'Relu'/],
    [{ device: 'metal' }, /device must be 'gpu' or 'cpu', got 'metal'/],
    [{ compiled: 'yes' }, /compiled must be true or false, got 'yes'/],
    [{ maxSignatures: 0 }, /maxSignatures must be a positive integer, got 0/],
  ];
  for (const [opts, message] of cases)
    it(`${JSON.stringify(opts)}, through MlxSession and the 'mlx' provider`, async () => {
      const direct = await MlxSession.create(model(spec), { device: 'cpu', ...opts } as never).then(
        (s) => s.release(),
        (e: unknown) => e,
      );
      expectError(direct, TypeError, message);
      const viaOrt = await ort.InferenceSession.create(model(spec), {
        executionProviders: [{ name: 'mlx', device: 'cpu', ...opts }],
      } as never).then(
        (s) => s.release(),
        (e: unknown) => e,
      );
      expect(String(viaOrt)).toMatch(message);
    });
});

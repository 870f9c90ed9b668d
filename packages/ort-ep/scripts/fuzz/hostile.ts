// The structured families of issue 29's findings ("hostile input, round two"):
//  - lengths: large and negative lengths, offsets and indices (65536, 2^31-1, -2^31, -1, 2^32)
//    in the inputs and attributes of the attention and quantized ops that hold one
//    (PackedMultiHeadAttention token_offset and cumulative_sequence_length, GroupQueryAttention
//    seqlens_k and total_sequence_length, MatMulNBits K and N, GatherBlockQuantized indices);
//  - zerosize: a zero-size input (one axis 0) to a common op;
//  - invalid: invalid nodes that would reach the onnxruntime fallback (group, block_size, bits of
//    0 or -1): the provider must refuse them at create(), onnxruntime died on some (SIGFPE);
//  - sessions, memlimit, cli: procedures rather than models (FuzzCase.special, run by child.ts):
//    sessions created and released in a loop (the thread count must stay flat), a run in a
//    process under `ulimit -v`, and the CLI on special files (/dev/zero, a FIFO, a directory).
import type { NodeProto, TensorProto } from 'onnx-buf';
import type { HostTensor } from '../../src/onnx/index.js';
import { OnnxDataType as T } from '../../src/onnx/index.js';
import * as P from '../../test/helpers/proto.js';
import type { Rng } from './rng.js';
import { tensorOf } from './values.js';

/** A procedure the child runs instead of a model (child.ts runSpecial). */
export type Special =
  | { kind: 'sessions'; count: number; fallback: boolean }
  | { kind: 'memlimit'; limitMiB: number; elements: number }
  | { kind: 'cli'; command: 'check' | 'run'; target: 'dev-zero' | 'fifo' | 'directory' };

export interface HostileBuilder {
  rng: Rng;
  nodes: NodeProto[];
  inits: TensorProto[];
  inputs: ReturnType<typeof P.valueInfo>[];
  feeds: Record<string, HostTensor>;
  notes: string[];
  opset?: number;
  domains?: [string, number][];
  special?: Special;
}

/** The lengths, offsets and indices of issue 29: past any tensor, negative, past int32. */
export const HOSTILE_LENGTHS: readonly number[] = [65536, 2 ** 31 - 1, -(2 ** 31), -1, 2 ** 32];

const MS = 'com.microsoft';
const i32 = (data: number[], dims = [data.length]): HostTensor => ({ dtype: T.INT32, dims, data: Int32Array.from(data) });
const i64 = (data: number[], dims = [data.length]): HostTensor => ({
  dtype: T.INT64,
  dims,
  data: BigInt64Array.from(data.map((x) => BigInt(x))),
});

function feed(b: HostileBuilder, name: string, t: HostTensor): void {
  b.feeds[name] = t;
  b.inputs.push(P.valueInfo(name, t.dtype, t.dims));
}
const floats = (b: HostileBuilder, name: string, dims: number[]) => feed(b, name, tensorOf(b.rng, T.FLOAT, dims, 'normal'));

/** One hostile value, as int32 where the input is (2^32 wraps to 0 there: it is noted as such). */
function hostile(b: HostileBuilder, what: string): number {
  const x = b.rng.pick(HOSTILE_LENGTHS);
  b.notes.push(`${what} = ${x}`);
  return x;
}
const asInt32 = (x: number) => x | 0;

export function lengths(b: HostileBuilder): string {
  const { rng } = b;
  b.domains = [[MS, 1]];
  b.opset = 21;
  const op = rng.pick(['PackedMultiHeadAttention', 'GroupQueryAttention', 'MatMulNBits', 'GatherBlockQuantized'] as const);
  const heads = 2;
  // onnxruntime's GroupQueryAttention takes head sizes that are multiples of 8.
  const d = 8;
  const hidden = heads * d;
  switch (op) {
    case 'PackedMultiHeadAttention': {
      // Two sequences of 3 and 2 tokens, packed: token_offset [2, 3], cumulative [3].
      const offsets = [0, 1, 2, 3, 4, 5];
      const cumulative = [0, 3, 5];
      if (rng.chance(0.5)) offsets[rng.int(0, 5)] = asInt32(hostile(b, 'token_offset'));
      else cumulative[rng.int(0, 2)] = asInt32(hostile(b, 'cumulative_sequence_length'));
      floats(b, 'q', [5, hidden]);
      floats(b, 'k', [5, hidden]);
      floats(b, 'v', [5, hidden]);
      feed(b, 'off', i32(offsets, [2, 3]));
      feed(b, 'cum', i32(cumulative));
      b.nodes.push(P.node(op, ['q', 'k', 'v', '', 'off', 'cum'], ['y'], [P.attr.int('num_heads', heads)], { name: 'n', domain: MS }));
      break;
    }
    case 'GroupQueryAttention': {
      const batch = 2;
      const past = 3;
      const seqlens = [past, past];
      let total = past + 1;
      if (rng.chance(0.5)) seqlens[rng.int(0, 1)] = asInt32(hostile(b, 'seqlens_k'));
      else total = asInt32(hostile(b, 'total_sequence_length'));
      floats(b, 'q', [batch, 1, hidden]);
      floats(b, 'k', [batch, 1, d]);
      floats(b, 'v', [batch, 1, d]);
      floats(b, 'pk', [batch, 1, past, d]);
      floats(b, 'pv', [batch, 1, past, d]);
      feed(b, 'sl', i32(seqlens));
      feed(b, 'tl', i32([total], []));
      b.nodes.push(
        P.node(
          op,
          ['q', 'k', 'v', 'pk', 'pv', 'sl', 'tl'],
          ['y', 'pko', 'pvo'],
          [P.attr.int('num_heads', heads), P.attr.int('kv_num_heads', 1)],
          { name: 'n', domain: MS },
        ),
      );
      break;
    }
    case 'MatMulNBits': {
      // B holds N = 4 rows of K = 32 at 4 bits in one block of 32; K or N is hostile.
      let [K, N] = [32, 4];
      if (rng.chance(0.5)) K = hostile(b, 'K');
      else N = hostile(b, 'N');
      floats(b, 'a', [2, 32]);
      b.inits.push(P.tensor('w', T.UINT8, [4, 1, 16], { rawData: Uint8Array.from({ length: 64 }, (_, i) => (i * 29) & 255) }));
      b.inits.push(P.tensor('s', T.FLOAT, [4], { floatData: [0.1, 0.2, 0.3, 0.4] }));
      b.nodes.push(
        P.node(op, ['a', 'w', 's'], ['y'], [P.attr.int('K', K), P.attr.int('N', N), P.attr.int('bits', 4), P.attr.int('block_size', 32)], {
          name: 'n',
          domain: MS,
        }),
      );
      break;
    }
    case 'GatherBlockQuantized': {
      const idx = [0, 1, 2];
      idx[rng.int(0, 2)] = hostile(b, 'indices');
      b.inits.push(P.tensor('d', T.UINT8, [4, 16], { rawData: Uint8Array.from({ length: 64 }, (_, i) => (i * 37) & 255) }));
      b.inits.push(P.tensor('s', T.FLOAT, [4, 2], { floatData: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8] }));
      feed(b, 'i', i64(idx));
      b.nodes.push(
        P.node(op, ['d', 'i', 's'], ['y'], [P.attr.int('block_size', 16), P.attr.int('bits', 4), P.attr.int('quantize_axis', 1)], {
          name: 'n',
          domain: MS,
        }),
      );
      break;
    }
  }
  return op;
}

/** Common ops of one input (the second, where there is one, broadcasts). */
const ZERO_SIZE_OPS: readonly [string, number][] = [
  ['Relu', 1],
  ['Softmax', 1],
  ['ReduceSum', 1],
  ['ReduceMax', 1],
  ['ArgMax', 1],
  ['Add', 2],
  ['MatMul', 2],
  ['Transpose', 1],
  ['CumSum', 2],
  ['TopK', 2],
  ['LayerNormalization', 2],
  ['Flatten', 1],
  ['Concat', 2],
  ['Gather', 2],
  ['Einsum', 2],
];

export function zerosize(b: HostileBuilder): string {
  const { rng } = b;
  const [op, arity] = rng.pick(ZERO_SIZE_OPS);
  b.opset = 18;
  const dims = [rng.int(1, 3), rng.int(1, 4), rng.int(1, 4)];
  dims[rng.int(0, 2)] = 0;
  b.notes.push(`x [${dims.join(', ')}]`);
  floats(b, 'x', dims);
  const inputs = ['x'];
  const attrs = [];
  if (arity === 2) {
    if (op === 'Add') floats(b, 'x2', [dims[2]]);
    else if (op === 'MatMul') floats(b, 'x2', [dims[2], 2]);
    else if (op === 'CumSum') feed(b, 'x2', i64([rng.int(0, 2)], []));
    else if (op === 'TopK') feed(b, 'x2', i64([rng.pick([0, 1])], [1]));
    else if (op === 'LayerNormalization') floats(b, 'x2', [dims[2]]);
    else if (op === 'Concat') floats(b, 'x2', dims);
    else if (op === 'Gather') feed(b, 'x2', i64(dims[0] ? [0] : [], [dims[0] ? 1 : 0]));
    else if (op === 'Einsum') floats(b, 'x2', [dims[2], 3]);
    inputs.push('x2');
  }
  if (op === 'Concat') attrs.push(P.attr.int('axis', rng.int(0, 2)));
  if (op === 'Einsum') attrs.push(P.attr.string('equation', 'abc,cd->abd'));
  const outs = op === 'TopK' ? ['y', 'yi'] : ['y'];
  b.nodes.push(P.node(op, inputs, outs, attrs, { name: 'n' }));
  return op;
}

export function invalid(b: HostileBuilder): string {
  const { rng } = b;
  const bad = rng.pick([0, -1]);
  const op = rng.pick(['ConvTranspose', 'Conv', 'GatherBlockQuantized', 'MatMulNBits'] as const);
  b.notes.push(`${op} with an attribute of ${bad}`);
  if (op === 'ConvTranspose' || op === 'Conv') {
    b.opset = 17;
    floats(b, 'x', [1, 2, 3, 3]);
    floats(b, 'w', [2, op === 'Conv' ? 2 : 1, 2, 2]);
    const name = rng.pick(['group', 'strides', 'dilations'] as const);
    const attr = name === 'group' ? P.attr.int('group', bad) : P.attr.ints(name, [bad, 1]);
    b.notes.push(name);
    b.nodes.push(P.node(op, ['x', 'w'], ['y'], [attr], { name: 'n' }));
    return `${op}(${name})`;
  }
  b.domains = [[MS, 1]];
  b.opset = 21;
  const name = rng.pick(['block_size', 'bits'] as const);
  b.notes.push(name);
  if (op === 'GatherBlockQuantized') {
    feed(b, 'd', tensorOf(rng, T.UINT8, [4, 16], 'normal'));
    feed(b, 'i', i64([0, 1]));
    floats(b, 's', [4, 2]);
    const attrs = [P.attr.int('block_size', name === 'block_size' ? bad : 16), P.attr.int('bits', name === 'bits' ? bad : 4)];
    b.nodes.push(P.node(op, ['d', 'i', 's'], ['y'], attrs, { name: 'n', domain: MS }));
  } else {
    floats(b, 'a', [2, 32]);
    feed(b, 'w', tensorOf(rng, T.UINT8, [4, 1, 16], 'normal'));
    floats(b, 's', [4]);
    const attrs = [
      P.attr.int('K', 32),
      P.attr.int('N', 4),
      P.attr.int('block_size', name === 'block_size' ? bad : 32),
      P.attr.int('bits', name === 'bits' ? bad : 4),
    ];
    b.nodes.push(P.node(op, ['a', 'w', 's'], ['y'], attrs, { name: 'n', domain: MS }));
  }
  return `${op}(${name})`;
}

/** A one-node model, for the procedures: Relu, or with `fallback` a Relu the provider declines. */
export function procedureModel(b: HostileBuilder): void {
  b.opset = 17;
  floats(b, 'x', [2, 3]);
  b.nodes.push(P.node('Relu', ['x'], ['r'], [], { name: 'relu' }), P.node('Neg', ['r'], ['y'], [], { name: 'neg' }));
}

export function sessions(b: HostileBuilder): string {
  const fallback = b.rng.chance(0.5);
  const count = b.rng.pick([20, 40]);
  b.special = { kind: 'sessions', count, fallback };
  b.notes.push(`${count} sessions${fallback ? ' with a fallback partition' : ''}`);
  procedureModel(b);
  return fallback ? 'fallback' : 'mlx';
}

export function memlimit(b: HostileBuilder): string {
  const limitMiB = b.rng.pick([2048, 4096, 8192, 16384]);
  const elements = b.rng.pick([2 ** 20, 2 ** 26, 2 ** 28, 2 ** 30]);
  b.special = { kind: 'memlimit', limitMiB, elements };
  b.notes.push(`ulimit -v ${limitMiB} MiB, Expand to ${elements} float32`);
  // Expand a scalar to `elements`, then sum: the intermediate is what the limit must stop.
  b.opset = 18;
  feed(b, 'x', { dtype: T.FLOAT, dims: [1], data: Float32Array.of(0.5) });
  b.inits.push(P.tensor('shape', T.INT64, [1], { int64Data: [BigInt(elements)] }));
  b.nodes.push(
    P.node('Expand', ['x', 'shape'], ['big'], [], { name: 'expand' }),
    P.node('ReduceSum', ['big'], ['y'], [P.attr.int('keepdims', 0)], { name: 'sum' }),
  );
  return `${limitMiB}MiB`;
}

export function cli(b: HostileBuilder): string {
  const command = b.rng.pick(['check', 'run'] as const);
  const target = b.rng.pick(['dev-zero', 'fifo', 'directory'] as const);
  b.special = { kind: 'cli', command, target };
  b.notes.push(`mlx-ort ${command} on ${target}`);
  procedureModel(b);
  return `${command}(${target})`;
}

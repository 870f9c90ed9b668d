// Structured fuzz cases: small graphs whose shapes mostly agree, so that they reach the kernels
// (the op source's random shapes are refused by shape checks most of the time), with a share of
// deliberate disagreements (a wrong channel count, a group that does not divide, a hidden size
// that does not fit the weights) and edge values. Families:
//  - conv: Conv with group >= 1, 1-D and 2-D, weights fed or as initializers, a strided
//    (transposed) input now and then;
//  - rnn: LSTM, GRU and RNN with their optional inputs, directions, layouts and sequence lengths;
//  - topk: TopK with sorted 0 and 1, largest 0 and 1, k from 0 past the axis;
//  - edge: Where, Clip, ArgMax/ArgMin, Relu, LogSoftmax with NaN, infinities and -0;
//  - strings: string values (Cast to string, untyped intermediates) into ops that take them or
//    must refuse them;
//  - lengths, zerosize, invalid, sessions, memlimit, cli: issue 29's findings (hostile.ts).
import type { NodeProto, TensorProto } from 'onnx-buf';
import type { HostTensor } from '../../src/onnx/index.js';
import { OnnxDataType as T } from '../../src/onnx/index.js';
import * as P from '../../test/helpers/proto.js';
import type { Rng } from './rng.js';
import { EDGE_FLOATS, put, tensorOf } from './values.js';
import { cli, invalid, lengths, memlimit, sessions, zerosize, type HostileBuilder, type Special } from './hostile.js';

export interface StructuredCase {
  label: string;
  mutation: string;
  model: Uint8Array;
  feeds: Record<string, HostTensor>;
  /** A procedure the child runs instead of the model (hostile.ts). */
  special?: Special;
}

export const FAMILIES = [
  'conv',
  'rnn',
  'topk',
  'edge',
  'strings',
  'lengths',
  'zerosize',
  'invalid',
  'sessions',
  'memlimit',
  'cli',
] as const;

interface Builder {
  rng: Rng;
  nodes: NodeProto[];
  inits: TensorProto[];
  inputs: ReturnType<typeof P.valueInfo>[];
  feeds: Record<string, HostTensor>;
  notes: string[];
}

function floats(rng: Rng, dims: number[], edgeShare: number): HostTensor {
  const t = tensorOf(rng, T.FLOAT, dims, 'normal');
  if (edgeShare > 0) for (let i = 0; i < t.data.length; i++) if (rng.chance(edgeShare)) put(t, i, rng.pick(EDGE_FLOATS));
  return t;
}

/** A tensor as a feed or (share `init`) an initializer. */
function add(b: Builder, name: string, t: HostTensor, init: number): void {
  if (b.rng.chance(init)) {
    const enc = new TextEncoder();
    b.inits.push(
      t.dtype === T.STRING
        ? P.tensor(name, T.STRING, t.dims, { stringData: (t.data as unknown as string[]).map((s) => enc.encode(s)) })
        : P.tensor(name, t.dtype, t.dims, { rawData: rawOf(t) }),
    );
  } else {
    b.feeds[name] = t;
    b.inputs.push(P.valueInfo(name, t.dtype, b.rng.chance(0.2) ? t.dims.map(() => '?') : t.dims));
  }
}

function rawOf(t: HostTensor): Uint8Array<ArrayBuffer> {
  const d = t.data as unknown as ArrayBufferView;
  return new Uint8Array(d.buffer.slice(d.byteOffset, d.byteOffset + d.byteLength)) as Uint8Array<ArrayBuffer>;
}

const perturb = (rng: Rng, n: number) => (rng.chance(0.5) ? Math.max(0, n + rng.pick([-1, 1, 2])) : rng.pick([0, 1, n * 2 + 1]));

function conv(b: Builder): string {
  const { rng } = b;
  const spatial = rng.pick([1, 2, 2]);
  const group = rng.weighted<number>([
    [1, 1],
    [2, 3],
    [3, 2],
    [4, 2],
    [6, 1],
  ]);
  const cinG = rng.int(1, 3);
  const coutG = rng.int(1, 3);
  const n = rng.pick([1, 1, 2, 0]);
  const k = Array.from({ length: spatial }, () => rng.int(1, 3));
  const size = Array.from({ length: spatial }, (_, i) => k[i] + rng.int(0, 4));
  let cin = group * cinG;
  let wIn = cinG;
  let cout = group * coutG;
  let g = group;
  const bad = rng.chance(0.15) ? rng.int(0, 3) : -1;
  if (bad === 0) cin = perturb(rng, cin);
  if (bad === 1) wIn = perturb(rng, wIn);
  if (bad === 2) g = rng.pick([0, -1, group + 1, cout + 1]);
  if (bad === 3) cout = perturb(rng, cout);
  if (bad >= 0) b.notes.push(`bad ${['input channels', 'weight channels', 'group', 'output channels'][bad]}`);
  const edge = rng.chance(0.2) ? 0.1 : 0;
  const strided = rng.chance(0.3);
  const x = floats(rng, strided ? [n, ...size, cin] : [n, cin, ...size], edge);
  add(b, 'x', x, 0);
  let xin = 'x';
  if (strided) {
    b.nodes.push(P.node('Transpose', ['x'], ['xt'], [P.attr.ints('perm', [0, spatial + 1, ...k.map((_, i) => i + 1)])]));
    xin = 'xt';
    b.notes.push('transposed input');
  }
  const fedW = rng.chance(0.6);
  add(b, 'w', floats(rng, [cout, wIn, ...k], edge), fedW ? 0 : 1);
  const inputs = [xin, 'w'];
  if (rng.chance(0.5)) {
    add(b, 'bias', floats(rng, [bad === 3 && rng.chance(0.5) ? group * coutG : cout], edge), 0.5);
    inputs.push('bias');
  }
  const attrs = [P.attr.int('group', BigInt(g))];
  if (rng.chance(0.5))
    attrs.push(
      P.attr.ints(
        'strides',
        k.map(() => rng.int(1, 3)),
      ),
    );
  if (rng.chance(0.4))
    attrs.push(
      P.attr.ints(
        'dilations',
        k.map(() => rng.int(1, 2)),
      ),
    );
  if (rng.chance(0.4))
    attrs.push(
      P.attr.ints(
        'pads',
        [...k, ...k].map(() => rng.int(0, 2)),
      ),
    );
  else if (rng.chance(0.3)) attrs.push(P.attr.string('auto_pad', rng.pick(['SAME_UPPER', 'SAME_LOWER', 'VALID'])));
  if (rng.chance(0.3)) attrs.push(P.attr.ints('kernel_shape', rng.chance(0.8) ? k : k.map((v) => v + 1)));
  b.nodes.push(P.node('Conv', inputs, ['y'], attrs, { name: 'n' }));
  b.notes.push(`group ${g}, ${spatial}-D, ${fedW ? 'fed' : 'constant'} weights`);
  return 'Conv';
}

function rnn(b: Builder): string {
  const { rng } = b;
  const op = rng.pick(['LSTM', 'LSTM', 'GRU', 'RNN']);
  const gates = op === 'LSTM' ? 4 : op === 'GRU' ? 3 : 1;
  const direction = rng.pick(['forward', 'reverse', 'bidirectional']);
  const dirs = direction === 'bidirectional' ? 2 : 1;
  const seq = rng.pick([1, 2, 3, 5, 0]);
  const batch = rng.pick([1, 2, 3, 0]);
  const input = rng.int(1, 4);
  const hidden = rng.int(1, 4);
  const layout = rng.chance(0.25) ? 1 : 0;
  const bad = rng.chance(0.15) ? rng.int(0, 4) : -1;
  const edge = rng.chance(0.15) ? 0.1 : 0;
  const opset = rng.pick([14, 14, 22, 7]);
  const lay = (s: number, bt: number, r: number) => (layout && opset >= 14 ? [bt, s, r] : [s, bt, r]);
  const x = floats(rng, lay(seq, batch, bad === 0 ? input + 1 : input), edge);
  add(b, 'x', x, 0);
  const init = rng.chance(0.5) ? 0 : 1;
  add(b, 'w', floats(rng, [bad === 1 ? dirs + 1 : dirs, gates * hidden, input], edge), init);
  add(b, 'r', floats(rng, [dirs, gates * hidden, bad === 2 ? hidden + 1 : hidden], edge), init);
  const inputs = ['x', 'w', 'r'];
  const opt = (name: string, make: () => HostTensor | undefined) => {
    if (!rng.chance(0.5)) {
      inputs.push('');
      return;
    }
    const t = make();
    if (!t) return inputs.push('');
    add(b, name, t, 0.5);
    inputs.push(name);
  };
  opt('bias', () => floats(rng, [dirs, 2 * gates * hidden], edge));
  opt('seqlens', () => {
    const t = tensorOf(rng, T.INT32, [bad === 3 ? batch + 1 : batch], 'normal');
    for (let i = 0; i < t.data.length; i++) put(t, i, rng.chance(0.1) ? rng.pick([-1, seq + 1, 0]) : rng.int(Math.min(1, seq), seq));
    return t;
  });
  opt('h0', () => floats(rng, lay(dirs, batch, bad === 4 ? hidden + 1 : hidden), edge));
  if (op === 'LSTM') {
    opt('c0', () => floats(rng, lay(dirs, batch, hidden), edge));
    opt('p', () => floats(rng, [dirs, 3 * hidden], edge));
  }
  while (inputs[inputs.length - 1] === '') inputs.pop();
  const attrs = [P.attr.int('hidden_size', BigInt(hidden)), P.attr.string('direction', direction)];
  if (layout && opset >= 14) attrs.push(P.attr.int('layout', 1n));
  if (rng.chance(0.2)) attrs.push(P.attr.float('clip', rng.pick([0.5, 1, 3, 0, -1])));
  if (op === 'GRU' && rng.chance(0.5)) attrs.push(P.attr.int('linear_before_reset', 1n));
  if (op === 'LSTM' && rng.chance(0.2)) attrs.push(P.attr.int('input_forget', 1n));
  if (rng.chance(0.15)) {
    const acts = ['Relu', 'Tanh', 'Sigmoid', 'HardSigmoid', 'Softsign', 'Softplus', 'Elu', 'LeakyRelu'];
    const per = op === 'LSTM' ? 3 : op === 'GRU' ? 2 : 1;
    attrs.push(
      P.attr.strings(
        'activations',
        Array.from({ length: per * dirs }, () => rng.pick(acts)),
      ),
    );
  }
  const outs = rng.pick([['y', 'yh', 'yc'], ['y'], ['', 'yh'], ['y', 'yh']]).slice(0, op === 'LSTM' ? 3 : 2);
  while (outs[outs.length - 1] === '') outs.pop();
  b.nodes.push(P.node(op, inputs, outs, attrs, { name: 'n' }));
  b.notes.push(`${direction}, seq ${seq}, batch ${batch}, input ${input}, hidden ${hidden}, layout ${layout}, opset ${opset}`);
  if (bad >= 0) b.notes.push(`bad ${['input size', 'weight directions', 'recurrence size', 'sequence_lens', 'initial_h'][bad]}`);
  (b as Builder & { opset?: number }).opset = opset;
  return op;
}

function topk(b: Builder): string {
  const { rng } = b;
  const rank = rng.int(1, 3);
  const dims = Array.from({ length: rank }, () => rng.pick([1, 2, 3, 5, 8, 0]));
  const axis = rng.int(-rank, rank - 1);
  const len = dims[(axis + rank) % rank];
  const x = rng.chance(0.3) ? tensorOf(rng, T.INT64, dims, 'normal') : floats(rng, dims, rng.chance(0.3) ? 0.2 : 0);
  // Ties now and then (their order is part of the contract).
  if (rng.chance(0.3)) for (let i = 0; i < x.data.length; i++) put(x, i, rng.int(0, 2));
  add(b, 'x', x, 0);
  const kv = rng.chance(0.85) ? rng.int(0, len) : rng.pick([len + 1, -1]);
  add(b, 'k', { dtype: T.INT64, dims: [1], data: BigInt64Array.of(BigInt(kv)) }, 0.5);
  const sorted = rng.chance(0.5) ? 0 : 1;
  const largest = rng.chance(0.7) ? 1 : 0;
  b.nodes.push(
    P.node(
      'TopK',
      ['x', 'k'],
      ['values', 'indices'],
      [P.attr.int('axis', BigInt(axis)), P.attr.int('sorted', BigInt(sorted)), P.attr.int('largest', BigInt(largest))],
      { name: 'n' },
    ),
  );
  b.notes.push(`axis ${axis}, k ${kv}, sorted ${sorted}, largest ${largest}`);
  return 'TopK';
}

const SPECIALS = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, -0, 0, 1, -1, 3.4e38, -3.4e38, 1e-45];

function edgeOps(b: Builder): string {
  const { rng } = b;
  const op = rng.pick(['Where', 'Clip', 'ArgMax', 'ArgMin', 'Relu', 'LogSoftmax', 'Softmax', 'Max', 'Min']);
  const dims = Array.from({ length: rng.int(0, 3) }, () => rng.pick([1, 2, 3, 4]));
  const x = floats(rng, dims, 0);
  for (let i = 0; i < x.data.length; i++) if (rng.chance(0.4)) put(x, i, rng.pick(SPECIALS));
  add(b, 'x', x, 0.1);
  const attrs = [];
  const inputs = ['x'];
  if (op === 'Where') {
    const c = tensorOf(rng, T.BOOL, rng.chance(0.7) ? dims : dims.slice(1), 'normal');
    add(b, 'c', c, 0.3);
    const y = floats(rng, rng.chance(0.7) ? dims : [1], 0);
    for (let i = 0; i < y.data.length; i++) if (rng.chance(0.4)) put(y, i, rng.pick(SPECIALS));
    add(b, 'y', y, 0.3);
    inputs.splice(0, 1, 'c', 'x', 'y');
  } else if (op === 'Clip') {
    for (const name of ['lo', 'hi']) {
      if (rng.chance(0.3)) {
        inputs.push('');
        continue;
      }
      add(b, name, { dtype: T.FLOAT, dims: [], data: Float32Array.of(rng.pick([...SPECIALS, 0.5, -0.5, 2])) }, 0.5);
      inputs.push(name);
    }
    while (inputs[inputs.length - 1] === '') inputs.pop();
  } else if (op === 'ArgMax' || op === 'ArgMin') {
    if (dims.length) attrs.push(P.attr.int('axis', BigInt(rng.int(-dims.length, dims.length - 1))));
    if (rng.chance(0.5)) attrs.push(P.attr.int('keepdims', BigInt(rng.int(0, 1))));
    if (rng.chance(0.5)) attrs.push(P.attr.int('select_last_index', BigInt(rng.int(0, 1))));
  } else if (op === 'LogSoftmax' || op === 'Softmax') {
    if (dims.length) attrs.push(P.attr.int('axis', BigInt(rng.int(-dims.length, dims.length - 1))));
  } else if (op === 'Max' || op === 'Min') {
    const y = floats(rng, dims, 0);
    for (let i = 0; i < y.data.length; i++) if (rng.chance(0.4)) put(y, i, rng.pick(SPECIALS));
    add(b, 'y', y, 0.3);
    inputs.push('y');
  }
  b.nodes.push(P.node(op, inputs, ['out'], attrs, { name: 'n' }));
  b.notes.push(`dims ${JSON.stringify(dims)}`);
  return op;
}

function strings(b: Builder): string {
  const { rng } = b;
  const dims = Array.from({ length: rng.int(1, 3) }, () => rng.pick([1, 2, 3]));
  let src: string;
  if (rng.chance(0.5)) {
    add(b, 'x', floats(rng, dims, 0.1), 0);
    b.nodes.push(P.node('Cast', ['x'], ['s'], [P.attr.int('to', BigInt(T.STRING))]));
    src = 's';
    b.notes.push('Cast to string');
  } else {
    const t = tensorOf(rng, T.STRING, dims, 'normal');
    add(b, 's0', t, 0.3);
    b.nodes.push(P.node('Identity', ['s0'], ['s']));
    src = 's';
  }
  const op = rng.pick([
    'Add',
    'Relu',
    'ArgMax',
    'Reshape',
    'Transpose',
    'Concat',
    'Gather',
    'Where',
    'Slice',
    'Unsqueeze',
    'Expand',
    'Tile',
    'ReduceSum',
    'Equal',
    'MatMul',
    'TopK',
    'Cast',
    'Sigmoid',
    'Conv',
    'LSTM',
  ]);
  const inputs = [src];
  const attrs = [];
  const outs = ['out'];
  const i64 = (name: string, v: number[]) =>
    add(b, name, { dtype: T.INT64, dims: [v.length], data: BigInt64Array.from(v.map(BigInt)) }, 0.6);
  switch (op) {
    case 'Add':
    case 'Equal':
    case 'MatMul':
      inputs.push(src);
      break;
    case 'ArgMax':
    case 'Concat':
      attrs.push(P.attr.int('axis', 0n));
      if (op === 'Concat') inputs.push(src);
      break;
    case 'Reshape':
      i64('shape', [-1]);
      inputs.push('shape');
      break;
    case 'Gather':
      i64('idx', [0, -1]);
      inputs.push('idx');
      break;
    case 'Where':
      add(b, 'c', tensorOf(rng, T.BOOL, dims, 'normal'), 0.5);
      inputs.unshift('c');
      inputs.push(src);
      break;
    case 'Slice':
      i64('st', [0]);
      i64('en', [1]);
      inputs.push('st', 'en');
      break;
    case 'Unsqueeze':
      i64('ax', [0]);
      inputs.push('ax');
      break;
    case 'Expand':
      i64('shape', [2, ...dims]);
      inputs.push('shape');
      break;
    case 'Tile':
      i64(
        'rep',
        dims.map(() => 2),
      );
      inputs.push('rep');
      break;
    case 'ReduceSum':
      break;
    case 'TopK':
      i64('k', [1]);
      inputs.push('k');
      outs.push('idx_out');
      break;
    case 'Cast':
      attrs.push(P.attr.int('to', BigInt(rng.pick([T.FLOAT, T.INT64, T.BOOL, T.DOUBLE]))));
      break;
    case 'Conv':
      inputs.push(src);
      break;
    case 'LSTM':
      inputs.push(src, src);
      attrs.push(P.attr.int('hidden_size', 1n));
      break;
  }
  b.nodes.push(P.node(op, inputs, outs, attrs, { name: 'n' }));
  // The intermediate is never typed in the graph: the planner learns its type from the producer.
  return `${op}(string)`;
}

export function structuredCase(rng: Rng, focus?: RegExp): StructuredCase | undefined {
  const families = FAMILIES.filter((f) => !focus || focus.test(f));
  const family = rng.pick(families.length ? families : FAMILIES);
  const b: Builder & HostileBuilder = { rng, nodes: [], inits: [], inputs: [], feeds: {}, notes: [] };
  const what = { conv, rnn, topk, edge: edgeOps, strings, lengths, zerosize, invalid, sessions, memlimit, cli }[family](b);
  const outputs = [...new Set(b.nodes.flatMap((n) => n.output).filter((o) => o && !b.nodes.some((m) => m.input.includes(o))))].map(
    (name) => {
      const vi = P.valueInfo(name);
      vi.type = undefined;
      return vi;
    },
  );
  const opset = b.opset ?? rng.pick([13, 17, 21]);
  const m = P.modelProto(P.graph({ name: 'fuzz', inputs: b.inputs, outputs, nodes: b.nodes, initializers: b.inits, valueInfo: [] }), {
    opsets: [['', opset], ...(b.domains ?? [])],
    irVersion: 10,
  });
  return {
    label: `structured::${family}::${what}`,
    mutation: b.notes.join(', '),
    model: P.serialize(m),
    feeds: b.feeds,
    ...(b.special && { special: b.special }),
  };
}

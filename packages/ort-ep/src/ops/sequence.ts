// Sequences and optionals. A sequence is a list of Values; an empty optional is the 'none' Value.
import * as mx from '@mlx/core';
import { OnnxDataType } from '../onnx/index.js';
import type { OpContext, OpEntry } from '../registry/types.js';
import { onnxOp } from '../registry/op.js';
import type { Value } from '../runtime/value.js';
import { onnxTypeOf } from '../runtime/convert.js';
import { hostNumbers, normAxis } from './helpers/util.js';

function seq(ctx: OpContext, i: number): Extract<Value, { kind: 'sequence' }> {
  const v = ctx.value(i);
  if (v.kind !== 'sequence') throw new TypeError(`${ctx.where}: input ${i} must be a sequence, got ${v.kind}`);
  return v;
}

function position(ctx: OpContext, i: number, len: number, insert = false): number {
  const p = Number(hostNumbers(ctx.host(i))[0]);
  const n = p < 0 ? p + len : p;
  if (n < 0 || n > len || (!insert && n === len))
    throw new RangeError(`${ctx.where}: position ${p} is out of range for a sequence of length ${len}`);
  return n;
}

const dev = (a: mx.Array): Value => ({ kind: 'device', array: a, onnxType: onnxTypeOf(a.dtype) });
const int64 = (v: number): Value => ({ kind: 'host', tensor: { dtype: OnnxDataType.INT64, dims: [], data: BigInt64Array.of(BigInt(v)) } });

/** SequenceMap: the body runs once per position; sequence inputs give their item, tensors themselves. */
const sequenceMap = onnxOp('SequenceMap', 17, {
  parse: (attrs) => attrs.graph('body'),
  run: (ctx) => {
    const body = ctx.params;
    const ins: Value[] = [];
    for (let i = 0; i < ctx.inputCount; i++) ins.push(ctx.value(i));
    const len = seq(ctx, 0).items.length;
    const outs: Value[][] = body.outputs.map(() => []);
    for (let k = 0; k < len; k++) {
      const args = ins.map((v) => (v.kind === 'sequence' ? v.items[k] : v));
      ctx.runSubgraph(body, args).forEach((v, j) => outs[j].push(v));
    }
    return outs.map((items, j) => {
      const decl = body.outputs[j].type;
      const elemType =
        decl.kind === 'tensor' ? decl.elemType : items[0] && items[0].kind === 'host' ? items[0].tensor.dtype : OnnxDataType.FLOAT;
      return { kind: 'sequence', items, elemType } as Value;
    });
  },
});

export const sequenceOps: OpEntry[] = [
  sequenceMap,
  onnxOp('SequenceEmpty', 11, {
    parse: (attrs) => attrs.int('dtype', OnnxDataType.FLOAT),
    run: (ctx) => [{ kind: 'sequence', items: [], elemType: ctx.params }],
  }),
  onnxOp('SequenceConstruct', 11, {
    run: (ctx) => {
      const items: Value[] = [];
      for (let i = 0; i < ctx.inputCount; i++) items.push(ctx.value(i));
      return [{ kind: 'sequence', items, elemType: ctx.elemType(0) }];
    },
  }),
  onnxOp('SequenceAt', 11, {
    run: (ctx) => {
      const s = seq(ctx, 0);
      return [s.items[position(ctx, 1, s.items.length)]];
    },
  }),
  onnxOp('SequenceLength', 11, {
    run: (ctx) => [int64(seq(ctx, 0).items.length)],
  }),
  onnxOp('SequenceInsert', 11, {
    run: (ctx) => {
      const s = seq(ctx, 0);
      const items = [...s.items];
      const at = ctx.has(2) ? position(ctx, 2, items.length, true) : items.length;
      items.splice(at, 0, ctx.value(1));
      return [{ kind: 'sequence', items, elemType: s.elemType }];
    },
  }),
  onnxOp('SequenceErase', 11, {
    run: (ctx) => {
      const s = seq(ctx, 0);
      const items = [...s.items];
      const at = ctx.has(1) ? position(ctx, 1, items.length) : items.length - 1;
      items.splice(at, 1);
      return [{ kind: 'sequence', items, elemType: s.elemType }];
    },
  }),
  onnxOp('ConcatFromSequence', 11, {
    parse: (attrs) => ({ axis: attrs.int('axis'), newAxis: attrs.int('new_axis', 0) !== 0 }),
    run: (ctx) => {
      const s = seq(ctx, 0);
      if (s.items.length === 0) throw new RangeError(`the sequence is empty; there is nothing to concatenate`);
      const arrays = s.items.map((v) => ctx.toArray(v));
      const { newAxis } = ctx.params;
      const rank = arrays[0].ndim + (newAxis ? 1 : 0);
      const axis = normAxis(ctx.params.axis, rank);
      return [newAxis ? mx.stack(arrays, axis) : mx.concatenate(arrays, axis)];
    },
  }),
  onnxOp('SplitToSequence', 11, {
    parse: (attrs) => ({ axis: attrs.int('axis', 0), keepdims: attrs.int('keepdims', 1) !== 0 }),
    run: (ctx) => {
      const x = ctx.input(0);
      const axis = normAxis(ctx.params.axis, x.ndim);
      const { keepdims } = ctx.params;
      const dim = x.shape[axis];
      let sizes: number[];
      if (!ctx.has(1)) sizes = new Array(dim).fill(1);
      else {
        const sp = ctx.host(1);
        const v = hostNumbers(sp);
        if (sp.dims.length > 1) throw new RangeError(`split must be a scalar or 1-D, got dims [${sp.dims}]`);
        if (sp.dims.length === 0) {
          // A chunk size: dim / size pieces of that size, the last one shorter.
          if (!(v[0] > 0)) throw new RangeError(`split ${v[0]} must be a positive chunk size`);
          sizes = [];
          for (let left = dim; left > 0; left -= v[0]) sizes.push(Math.min(v[0], left));
        } else {
          const bad = v.find((n) => !(n >= 0));
          if (bad !== undefined) throw new RangeError(`split sizes must not be negative, got ${bad}`);
          const sum = v.reduce((a, b) => a + b, 0);
          if (sum !== dim) throw new RangeError(`split sizes [${v}] sum to ${sum}, not to the size ${dim} of axis ${axis}`);
          sizes = v;
        }
      }
      const items: Value[] = [];
      let off = 0;
      for (const n of sizes) {
        const start = new Array(x.ndim).fill(0);
        const stop = [...x.shape];
        start[axis] = off;
        stop[axis] = off + n;
        let part = mx.slice(x, start, stop, new Array(x.ndim).fill(1));
        if (!ctx.has(1) && !keepdims) part = mx.squeeze(part, axis);
        items.push(dev(part));
        off += n;
      }
      return [{ kind: 'sequence', items, elemType: ctx.elemType(0) }];
    },
  }),
  onnxOp('Optional', 15, {
    run: (ctx) => [ctx.has(0) ? ctx.value(0) : { kind: 'none' }],
  }),
  onnxOp('OptionalHasElement', 15, {
    run: (ctx) => [{ kind: 'host', tensor: { dtype: OnnxDataType.BOOL, dims: [], data: Uint8Array.of(ctx.has(0) ? 1 : 0) } }],
  }),
  onnxOp('OptionalGetElement', 15, {
    run: (ctx) => {
      if (!ctx.has(0)) throw new Error(`${ctx.where}: the optional input is empty`);
      return [ctx.value(0)];
    },
  }),
];

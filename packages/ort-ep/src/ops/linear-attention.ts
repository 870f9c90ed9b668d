// LinearAttention (ai.onnx 27, and onnxruntime's com.microsoft op of the same contract): the recurrent linear attention of Gated DeltaNet / Qwen3.5 linear
// layers, one step per token on a state S [B, Hkv, dk, dv] carried in float32, as the ONNX
// reference computes it:
//   gated rules:  S ← S · exp(decay_t)                    (decay per head or per key channel)
//   delta rules:  v_t ← beta_t · (v_t − Sᵀ (erase_t ⊙ k_t))
//   write:        S ← S + k_t ⊗ v_t
//   read:         o_t = scale · q_tᵀ S  (query heads share their group's KV head)
// update_rule: linear, gated, delta or gated_delta (the default). The recurrence runs token by token.
import * as mx from '@mlx/core';
import { toHeads } from '@mlx/kernels';
import type { Attrs } from '../registry/attrs.js';
import type { CheckContext, OpContext, OpEntry, OpResult } from '../registry/types.js';
import { msOp, onnxOp } from '../registry/op.js';

interface LinearAttentionParams {
  qHeads: number;
  kvHeads: number;
  scale: number;
  gating: boolean;
  delta: boolean;
}

function parse(attrs: Attrs): LinearAttentionParams {
  const rule = attrs.string('update_rule', 'gated_delta');
  if (!['linear', 'gated', 'delta', 'gated_delta'].includes(rule))
    throw new RangeError(`LinearAttention update_rule '${rule}' is not linear, gated, delta or gated_delta`);
  const qHeads = attrs.int('q_num_heads');
  const kvHeads = attrs.int('kv_num_heads');
  if (qHeads <= 0 || kvHeads <= 0 || qHeads % kvHeads !== 0)
    throw new RangeError(`LinearAttention q_num_heads ${qHeads} must be a positive multiple of kv_num_heads ${kvHeads}`);
  return { qHeads, kvHeads, scale: attrs.float('scale', 0), gating: rule.startsWith('gated'), delta: rule.endsWith('delta') };
}

function check(ctx: CheckContext<LinearAttentionParams>): string | undefined {
  const { gating, delta } = ctx.params;
  const has = (i: number) => Boolean(ctx.node.inputs[i]);
  if (gating !== has(4)) return `LinearAttention: this update_rule ${gating ? 'needs' : 'forbids'} the decay input`;
  if (delta !== has(5)) return `LinearAttention: this update_rule ${delta ? 'needs' : 'forbids'} the beta input`;
  if (has(6) && !delta) return 'LinearAttention: erase_gate needs a delta update_rule';
  return undefined;
}

/** [B, T, H·D] -> [B, H, T, D] in float32. */
const heads = (x: mx.Array, h: number) => toHeads(mx.astype(x, 'float32'), h);

function linearAttention(ctx: OpContext<LinearAttentionParams>): OpResult[] {
  const p = ctx.params;
  const query = ctx.input(0);
  const [B, T] = query.shape;
  for (const i of [0, 1, 2]) if (ctx.shape(i).length !== 3) throw new RangeError(`${ctx.where}: query, key and value must be [B, T, H·D]`);
  const q = heads(query, p.qHeads);
  const k = heads(ctx.input(1), p.kvHeads);
  const v = heads(ctx.input(2), p.kvHeads);
  const dk = q.shape[3];
  const dv = v.shape[3];
  const G = p.qHeads / p.kvHeads;
  if (k.shape[3] !== dk) throw new RangeError(`${ctx.where}: key heads have ${k.shape[3]} channels, query heads ${dk}`);
  const past = ctx.optional(3);
  if (past && (past.ndim !== 4 || past.shape.some((d, i) => d !== [B, p.kvHeads, dk, dv][i])))
    throw new RangeError(`${ctx.where}: past_state of shape [${past.shape.join(', ')}] is not [${B}, ${p.kvHeads}, ${dk}, ${dv}]`);
  let decay: mx.Array | undefined;
  const d = ctx.optional(4);
  if (d) {
    const last = d.shape[2];
    // Per head ([B, T, Hkv] -> [B, Hkv, T, 1]) or per key channel ([B, T, Hkv·dk] -> [B, Hkv, T, dk]).
    if (last === p.kvHeads || last === p.kvHeads * dk) decay = heads(d, p.kvHeads);
    else throw new RangeError(`${ctx.where}: decay's last axis ${last} is neither kv_num_heads nor kv_num_heads·dk`);
    decay = mx.exp(decay); // [B, Hkv, T, 1 or dk]
  }
  let beta: mx.Array | undefined;
  const bt = ctx.optional(5);
  if (bt) {
    const last = bt.shape[2];
    if (last !== p.kvHeads && last !== 1) throw new RangeError(`${ctx.where}: beta's last axis ${last} is neither kv_num_heads nor 1`);
    beta = heads(bt, last); // [B, Hkv|1, T, 1]
  }
  const erase = ctx.optional(6) ? heads(ctx.input(6), p.kvHeads) : undefined;
  const scale = p.scale === 0 ? 1 / Math.sqrt(dk) : p.scale;
  const step = (a: mx.Array, t: number) =>
    mx.squeeze(mx.slice(a, [0, 0, t, 0], [a.shape[0], a.shape[1], t + 1, a.shape[3]], [1, 1, 1, 1]), 2);
  let state = past ? mx.astype(past, 'float32') : mx.zeros([B, p.kvHeads, dk, dv], 'float32');
  const outs: mx.Array[] = [];
  for (let t = 0; t < T; t++) {
    const kt = step(k, t); // [B, Hkv, dk]
    let vt = step(v, t); // [B, Hkv, dv]
    if (decay) state = mx.multiply(state, mx.expandDims(step(decay, t), -1));
    if (beta) {
      const ke = erase ? mx.multiply(step(erase, t), kt) : kt;
      const retrieved = mx.squeeze(mx.matmul(mx.expandDims(ke, 2), state), 2); // [B, Hkv, dv]
      vt = mx.multiply(step(beta, t), mx.subtract(vt, retrieved));
    }
    state = mx.add(state, mx.multiply(mx.expandDims(kt, -1), mx.expandDims(vt, 2)));
    const qt = mx.reshape(step(q, t), [B, p.kvHeads, G, 1, dk]);
    const o = mx.matmul(qt, mx.expandDims(state, 2)); // [B, Hkv, G, 1, dv]
    outs.push(mx.multiply(mx.reshape(o, [B, p.qHeads, dv]), scale));
  }
  const y = T ? mx.stack(outs, 1) : mx.zeros([B, 0, p.qHeads, dv], 'float32'); // [B, T, Hq, dv]
  const output = mx.astype(mx.reshape(y, [B, T, p.qHeads * dv]), query.dtype);
  return [output, ctx.wants(1) ? mx.astype(state, past ? past.dtype : query.dtype) : undefined];
}

// LinearAttentionGate (com.microsoft): the gate projections of gated DeltaNet in float32:
// decay = decay_scale · Softplus(a + dt_bias), beta = Sigmoid(b) (b optional).

function linearAttentionGate(ctx: OpContext): OpResult[] {
  const a = ctx.input(0);
  const H = a.shape[a.ndim - 1];
  const perHead = (i: number, name: string) => {
    const t = ctx.input(i);
    if (t.size !== H) throw new RangeError(`${ctx.where}: ${name} has ${t.size} values for ${H} heads`);
    return mx.reshape(mx.astype(t, 'float32'), [H]);
  };
  const z = mx.add(mx.astype(a, 'float32'), perHead(1, 'dt_bias'));
  // Softplus without overflow: max(z, 0) + log1p(exp(-|z|)).
  const softplus = mx.add(mx.maximum(z, 0), mx.log1p(mx.exp(mx.negative(mx.abs(z)))));
  const decay = mx.astype(mx.multiply(softplus, perHead(2, 'decay_scale')), a.dtype);
  const b = ctx.optional(3);
  if (ctx.wants(1) && !b) throw new RangeError(`${ctx.where}: the beta output needs input b`);
  return [decay, ctx.wants(1) && b ? mx.astype(mx.sigmoid(mx.astype(b, 'float32')), b.dtype) : undefined];
}

export const linearAttentionOps: OpEntry[] = [
  onnxOp('LinearAttention', 27, { parse, check, run: linearAttention, note: 'token-by-token recurrence (no chunked prefill)' }),
  msOp('LinearAttention', 1, {
    parse,
    check: (ctx) =>
      ctx.attrs.int('state_window', 0) > 0 ? 'LinearAttention with state_window (a window of states) is not supported' : check(ctx),
    run: linearAttention,
    note: 'token-by-token recurrence (no chunked prefill); no state_window or inverse GQA',
  }),
  msOp('LinearAttentionGate', 1, { run: linearAttentionGate }),
];

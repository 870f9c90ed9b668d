// GroupQueryAttention's sliding_window_cache: past_key and past_value are window-sized buffers
// (local_window_size rows) holding a sequence's last tokens, left-aligned, however long the
// sequence (seqlens_k, total_sequence_length) has grown; memory stays flat past the window.
//
// The semantics are onnxruntime's CPU kernel's (measured against onnxruntime-node 1.30) for a
// buffer of exactly the window: with p = seqlens_k + 1 - S cached tokens, the buffer's first
// v = min(p, capacity) rows are the tokens at positions p - v .. p - 1; the S new tokens follow
// at p .. p + S - 1; each query sees the keys of the window before it (positions q - W < j <= q);
// the present is the last min(v + S, capacity) of those keys, left-aligned (onnxruntime leaves
// the rows after them unwritten; zeros here). Every entry has all S new tokens: onnxruntime takes
// no right-padded first prompt here (seqlens_k + 1 >= S for each entry). A longer buffer is
// refused: onnxruntime keeps rows there that follow no rule (the count kept depends on the parity
// of the cached length).
//
// Everything is derived from seqlens_k on the device (no host read): a compiled decode loop keeps
// one program for every step. The layout is made once a run (ctx.shared) for all layers alike.
import * as mx from '@mlx/core';
import type { OpContext } from '../../registry/types.js';

export interface SlidingLayout {
  /** Absolute position of each new token [B, S] (int32): rotary and the mask. */
  positions: mx.Array;
  /** Key visibility [B, 1, S, capacity + S] over the past buffer followed by the new rows. */
  visible: mx.Array;
  /** For each present row, the row of [past; new] it takes [B, 1, capacity, 1] (int32). */
  rows: mx.Array;
  /** Whether the present row holds a token (else zeros) [B, 1, capacity, 1]. */
  kept: mx.Array;
}

const pastTotal = (b: number, len: number, total: number) =>
  `seqlens_k[${b}] + 1 = ${len} is past total_sequence_length ${total}: the keys attended are sized by total_sequence_length`;

/** The layout of a sliding-window step of S new tokens into buffers of `capacity` rows. */
export function slidingLayout(ctx: OpContext<unknown>, S: number, total: number, capacity: number, window: number): SlidingLayout {
  const seqlens = ctx.input(5);
  return ctx.shared(['gqa-sliding', seqlens, S, total, capacity, window], () => {
    const B = seqlens.shape[0];
    const C = capacity;
    const room = Math.max(total, C);
    const i32 = (x: number) => mx.scalar(x, 'int32');
    // Checked in the feed's own width before adding 1 (2^31 - 1 must not wrap into range); each
    // message names the first entry at fault.
    const check = (bad: mx.Array, values: mx.Array, describe: (b: number, value: number) => string) =>
      ctx.guard(mx.any(bad), (d) => describe(d[0], d[1]), firstBad(bad, values));
    const raw = seqlens.dtype === 'int64' ? seqlens : mx.astype(seqlens, 'int32');
    check(mx.logicalOr(mx.less(raw, 0), mx.greaterEqual(raw, room)), raw, (b, n) => `seqlens_k[${b}] = ${n} is out of range [0, ${room})`);
    const len = mx.add(mx.astype(mx.clip(raw, 0, room - 1), 'int32'), i32(1)); // [B]
    check(mx.greater(len, i32(total)), len, (b, l) => pastTotal(b, l, total));
    check(mx.less(len, i32(S)), len, (b, l) => `seqlens_k[${b}] = ${l - 1} is too small for sequence_length ${S}`);
    const col = (a: mx.Array) => mx.reshape(a, [B, 1]);
    const p = mx.maximum(mx.subtract(len, i32(S)), i32(0)); // cached tokens
    const v = mx.minimum(p, i32(C)); // of them in the buffer
    const r = mx.reshape(mx.arange(0, C + S, 1, 'int32'), [1, C + S]);
    const inPast = mx.less(r, i32(C));
    const keyPos = mx.where(inPast, mx.add(mx.subtract(col(p), col(v)), r), mx.add(col(p), mx.subtract(r, i32(C))));
    const keyOk = mx.logicalOr(mx.less(r, col(v)), mx.logicalNot(inPast));
    const positions = mx.add(col(p), mx.reshape(mx.arange(0, S, 1, 'int32'), [1, S])); // [B, S]
    const q = mx.reshape(positions, [B, 1, S, 1]);
    const j = mx.reshape(keyPos, [B, 1, 1, C + S]);
    let visible = mx.logicalAnd(mx.reshape(keyOk, [B, 1, 1, C + S]), mx.lessEqual(j, q));
    visible = mx.logicalAnd(visible, mx.greater(j, mx.subtract(q, i32(window))));
    // The present: the last n = min(v + S, C) tokens of [buffer rows; new rows].
    const count = mx.add(v, i32(S));
    const n = mx.minimum(count, i32(C));
    const t = mx.reshape(mx.arange(0, C, 1, 'int32'), [1, C]);
    const u = mx.add(col(mx.subtract(count, n)), t); // index among the tokens
    const rows = mx.clip(mx.where(mx.less(u, col(v)), u, mx.add(mx.subtract(u, col(v)), i32(C))), 0, C + S - 1);
    return {
      positions,
      visible,
      rows: mx.reshape(rows, [B, 1, C, 1]),
      kept: mx.reshape(mx.less(t, col(n)), [B, 1, C, 1]),
    };
  });
}

/** [index of the first true of `bad`, value there] for a guard's message (0s when none). */
function firstBad(bad: mx.Array, values: mx.Array): mx.Array {
  const at = mx.argmax(mx.astype(bad, 'int32'), 0);
  return mx.stack([mx.astype(at, values.dtype), mx.take(values, at, 0)], 0);
}

/** [past; new] along the sequence axis, and the present taken from it by the layout. */
export function slidingCache(layout: SlidingLayout, past: mx.Array, fresh: mx.Array): { all: mx.Array; present: mx.Array } {
  const all = mx.concatenate([past, fresh.dtype === past.dtype ? fresh : mx.astype(fresh, past.dtype)], 2);
  const [B, Nkv, C, H] = past.shape;
  const taken = mx.takeAlongAxis(all, mx.broadcastTo(layout.rows, [B, Nkv, C, H]), 2);
  return { all, present: mx.where(layout.kept, taken, mx.zeros([], past.dtype)) };
}

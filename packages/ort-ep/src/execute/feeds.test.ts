// FeedMemo: the last checked feeds, so that a loop of runs of one form skips validateFeeds and the
// signature key. A decode loop feeds its KV caches as device arrays: those are remembered by type
// and shape, and a disposed, lazy, reshaped or retyped one never matches (the full checks then run).
import * as mx from '@mlx/core';
import { describe, expect, it } from 'vitest';
import type { Value } from '../runtime/value.js';
import { FeedMemo } from './feeds.js';

describe('FeedMemo', () => {
  const ids = () => ({ dtype: 7, dims: [1, 1], data: new BigInt64Array([3n]) });
  const cache = (shape = [1, 2, 8, 4]): Value => ({ kind: 'device', array: mx.zeros(shape, 'float32').eval(), onnxType: 1 });
  const fetches = ['logits'];

  it('matches host tensors and live device arrays of the remembered types and shapes', () => {
    const memo = new FeedMemo();
    const past = cache();
    memo.remember({ input_ids: ids(), past }, fetches);
    // Another step: new objects of the same form.
    const next = { input_ids: ids(), past: cache() };
    expect(memo.matches(next, fetches)).toBe(true);
    expect(memo.matched).toBe(next);
    expect(memo.matches({ input_ids: ids(), past: cache([1, 2, 9, 4]) }, fetches)).toBe(false);
    expect(memo.matches({ input_ids: ids(), past: { ...(cache() as Extract<Value, { kind: 'device' }>), onnxType: 10 } }, fetches)).toBe(
      false,
    );
    expect(memo.matches({ input_ids: ids(), past: { kind: 'host', tensor: ids() } }, fetches)).toBe(false);
    expect(memo.matches({ past: cache(), input_ids: ids() }, fetches)).toBe(false);
    expect(memo.matches({ input_ids: ids(), past: cache() }, ['present'])).toBe(false);
    expect(memo.matched).toBeUndefined();
  });

  it('a disposed or lazy device array does not match (validateFeeds reports the one, evaluates the other)', () => {
    const memo = new FeedMemo();
    memo.remember({ input_ids: ids(), past: cache() }, fetches);
    const gone = cache();
    (gone as Extract<Value, { kind: 'device' }>).array.dispose();
    expect(memo.matches({ input_ids: ids(), past: gone }, fetches)).toBe(false);
    const lazy: Value = { kind: 'device', array: mx.add(mx.zeros([1, 2, 8, 4], 'float32'), mx.ones([1], 'float32')), onnxType: 1 };
    expect(memo.matches({ input_ids: ids(), past: lazy }, fetches)).toBe(false);
  });
});

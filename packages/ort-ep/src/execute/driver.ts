// Drives a run, written as a generator of EvalRequests, to completion: synchronously (runSync,
// constant folding) or without blocking the event loop (run), evaluating off the JS thread.
import * as mx from '@mlx/core';
import type { RunState } from './env.js';
import type { EvalRequest } from './run.js';

/** One synchronous step of `gen`, on the run's stream, collecting what it creates into the run. */
function step<T>(stream: mx.StreamLike, run: RunState, gen: Generator<EvalRequest, T, void>): IteratorResult<EvalRequest, T> {
  return mx.withStream(stream, () => mx.collect(run.arrays, () => gen.next()));
}

/** Runs `gen` to its result, evaluating each request on this thread. */
export function driveSync<T>(stream: mx.StreamLike, run: RunState, gen: Generator<EvalRequest, T, void>): T {
  for (;;) {
    const r = step(stream, run, gen);
    if (r.done) return r.value;
    mx.withStream(stream, () => mx.evaluate(r.value.arrays));
  }
}

/** Runs `gen` to its result; each request is evaluated while the event loop keeps turning. */
export async function driveAsync<T>(stream: mx.StreamLike, run: RunState, gen: Generator<EvalRequest, T, void>): Promise<T> {
  for (;;) {
    const r = step(stream, run, gen);
    if (r.done) return r.value;
    await evalAsync(stream, r.value.arrays);
  }
}

/** Evaluates arrays without blocking the event loop. */
export async function evalAsync(stream: mx.StreamLike, arrays: readonly mx.Array[]): Promise<void> {
  if (!arrays.length) return;
  mx.withStream(stream, () => mx.asyncEval(arrays));
  const start = performance.now();
  for (const a of arrays) {
    while (!a.isAvailable()) {
      await new Promise((r) => (performance.now() - start < 5 ? setImmediate(r) : setTimeout(r, 1)));
    }
  }
}

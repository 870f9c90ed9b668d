// Drives a run, written as a generator of EvalRequests, to completion: synchronously (runSync,
// constant folding) or without blocking the event loop (run), evaluating off the JS thread.
import * as mx from '@mlx/core';
import {
  NodeExecutionError,
  OrtMlxError,
  ResourceLimitError,
  RunTerminatedError,
  allocationError,
  isAllocationFailure,
} from '../errors.js';
import type { GuardInfo, RunState } from './env.js';
import type { EvalRequest } from './run.js';

/**
 * The streams a session's runs build on: its own (any thread may evaluate it), and on a GPU a CPU
 * companion of the same kind for what MLX computes only on the CPU (linalg, float64), which ops ask
 * for with `{ stream: 'cpu' }`.
 */
export interface RunStreams {
  main: mx.Stream;
  cpu?: mx.Stream;
}

/** Runs `body` with the run's streams as the defaults. */
export function within<T>(streams: RunStreams, body: () => T): T {
  return streams.cpu ? mx.withStream(streams.cpu, () => mx.withStream(streams.main, body)) : mx.withStream(streams.main, body);
}

/** One synchronous step of `gen`, on the run's streams, collecting what it creates into the run. */
function step<T>(streams: RunStreams, run: RunState, gen: Generator<EvalRequest, T, void>): IteratorResult<EvalRequest, T> {
  return within(streams, () => mx.collect(run.arrays, () => gen.next()));
}

/** Runs `gen` to its result, evaluating each request on this thread. */
export function driveSync<T>(streams: RunStreams, run: RunState, gen: Generator<EvalRequest, T, void>): T {
  for (;;) {
    const r = step(streams, run, gen);
    if (r.done) return r.value;
    if (r.value.wait) {
      void r.value.wait.promise;
      throw new OrtMlxError(
        `model ${run.modelName}: ${r.value.wait.what} runs on onnxruntime (a fallback partition), whose runs are asynchronous: use run(), not runSync()`,
      );
    }
    evalSync(streams, run, r.value.arrays);
  }
}

/** Runs `gen` to its result; each request is evaluated while the event loop keeps turning. */
export async function driveAsync<T>(streams: RunStreams, run: RunState, gen: Generator<EvalRequest, T, void>): Promise<T> {
  for (;;) {
    if (run.terminated()) throw new RunTerminatedError(`model ${run.modelName}: the run was terminated (RunOptions.terminate)`);
    const r = step(streams, run, gen);
    if (r.done) return r.value;
    if (r.value.wait) await waitFor(run, r.value.wait);
    // Nothing to evaluate (a long Loop pausing over host values): a turn of the event loop.
    else if (!r.value.arrays.length) await new Promise<void>((resolve) => setImmediate(resolve));
    else await evalAsync(streams, run, r.value.arrays);
  }
}

/** How often a wait for onnxruntime looks at RunOptions.terminate (ms). */
const TERMINATE_POLL_MS = 5;

/** Waits for a fallback partition; a terminate while it runs ends the wait (and cancels the partition). */
async function waitFor(run: RunState, wait: NonNullable<EvalRequest['wait']>): Promise<void> {
  let timer: ReturnType<typeof setInterval> | undefined;
  const stopped = new Promise<true>((resolve) => {
    timer = setInterval(() => {
      if (run.terminated()) resolve(true);
    }, TERMINATE_POLL_MS);
  });
  try {
    const terminated = await Promise.race([wait.promise.then(() => false), stopped]);
    if (terminated) {
      wait.cancel?.();
      throw new RunTerminatedError(`model ${run.modelName}: the run was terminated (RunOptions.terminate) while ${wait.what} ran`);
    }
  } finally {
    clearInterval(timer);
  }
}

const NO_EVAL_LIMITS: mx.EvalLimits = Object.freeze({ maxArrayBytes: 0, maxTotalBytes: 0 });
const limitsOf = (run: RunState): mx.EvalLimits =>
  run.budgetKnown
    ? NO_EVAL_LIMITS
    : {
        maxArrayBytes: run.limits.maxTensorBytes,
        maxTotalBytes: run.limits.maxSessionBytes,
      };

/**
 * MLX's refusal of an evaluation over the budget, or an allocation that failed while evaluating,
 * as the provider's error naming the model.
 */
function budgetError(e: unknown, run: RunState): unknown {
  if (e instanceof mx.MlxError && /\[memory budget\]/.test(e.message)) {
    return new ResourceLimitError(
      `model ${run.modelName}: ${e.mlxMessage.replace('[memory budget] ', '')} (maxTensorBytes, maxSessionBytes)`,
      { cause: e },
    );
  }
  if (isAllocationFailure(e)) return allocationError(e, run.modelName);
  return e;
}

/**
 * The run's pending guards as one boolean vector to evaluate with `arrays` (undefined when there
 * are none); the guards move to the returned check. A compiled segment's guards come stacked
 * already: a run of one segment adds no op here.
 */
function takeGuards(streams: RunStreams, run: RunState): { flags: mx.Array; guards: GuardInfo[] } | undefined {
  const loose = run.guards;
  const sets = run.guardSets;
  if (!loose.length && !sets.length) return undefined;
  run.guards = [];
  run.guardSets = [];
  if (!loose.length && sets.length === 1) return sets[0];
  const flags = within(streams, () =>
    mx.collect(run.arrays, () => {
      const parts = sets.map((s) => s.flags);
      if (loose.length) parts.unshift(mx.stack(loose.map((g) => mx.reshape(mx.astype(g.bad, 'bool'), []))));
      return parts.length === 1 ? parts[0] : mx.concatenate(parts, 0);
    }),
  );
  return { flags, guards: [...loose, ...sets.flatMap((s) => s.guards)] };
}

/** Fails the run at the first guard that turned out true (after evaluation). */
function checkGuards(streams: RunStreams, run: RunState, pending: { flags: mx.Array; guards: GuardInfo[] } | undefined): void {
  if (!pending) return;
  const bad = pending.flags.toTypedArray() as Uint8Array;
  const i = bad.findIndex((b) => b !== 0);
  if (i < 0) return;
  const g = pending.guards[i];
  const detail = g.detail ? within(streams, () => Array.from(g.detail!.toTypedArray() as ArrayLike<number | bigint>, Number)) : [];
  throw new NodeExecutionError(run.modelName, g.node, g.opType, new Error(g.describe(detail)));
}

/** Evaluates arrays on this thread, within the run's memory limits, and checks the run's guards. */
export function evalSync(streams: RunStreams, run: RunState, arrays: readonly mx.Array[]): void {
  const pending = takeGuards(streams, run);
  const t0 = run.profiler ? performance.now() : 0;
  try {
    within(streams, () => mx.evaluateWithin(pending ? [...arrays, pending.flags] : arrays, limitsOf(run)));
  } catch (e) {
    throw budgetError(e, run);
  } finally {
    run.profiler?.add('Session', 'mlx_eval', t0, performance.now(), { arrays: arrays.length, thread: 'calling' });
  }
  checkGuards(streams, run, pending);
}

/**
 * The most arrays an asynchronous evaluation queues from the JS thread (evalInBackground's
 * inlineNodes): few enough that MLX's scheduler never makes the queueing thread wait for tasks
 * (it does past 10 batches of 10 in flight).
 */
const INLINE_NODES = 48;

/** Evaluates arrays on a worker thread (the stream must be one any thread may evaluate), within the run's limits. */
export async function evalAsync(streams: RunStreams, run: RunState, arrays: readonly mx.Array[]): Promise<void> {
  const pending = takeGuards(streams, run);
  const t0 = run.profiler ? performance.now() : 0;
  try {
    // A small graph is queued from this thread (one thread hop less), unless a segment traced
    // in this run: its first evaluation builds fused kernels while queueing. (Where MLX's CPU work
    // runs inline on the evaluating thread, the native side sends it to the worker instead.)
    const inlineNodes = run.freshTrace ? 0 : INLINE_NODES;
    await mx.evalInBackground(pending ? [...arrays, pending.flags] : arrays, limitsOf(run), streams.main, { inlineNodes });
    // Kernel errors recorded on the CPU companion surface here too.
    if (streams.cpu) streams.cpu.synchronize();
  } catch (e) {
    throw budgetError(e, run);
  } finally {
    run.profiler?.add('Session', 'mlx_eval', t0, performance.now(), { arrays: arrays.length, thread: 'worker' });
  }
  checkGuards(streams, run, pending);
}

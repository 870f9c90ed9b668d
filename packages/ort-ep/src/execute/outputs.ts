// A run's results as the caller asked for them: host tensors (fresh, pooled or pinned memory, or
// read into pre-allocated buffers), or device Values the caller then owns.
import * as mx from '@mlx/core';
import type { HostTensor } from '../onnx/index.js';
import { InvalidFeedError } from '../errors.js';
import { checkDestination, downloadInto, downloadPinned } from '../runtime/convert.js';
import { asHost, shapeOf, type Value } from '../runtime/value.js';
import type { RunState } from './env.js';
import type { MlxRunOptions } from './options.js';

/** outputMemory 'pooled' and 'auto' read results of this size and more into host blocks. */
export const POOLED_RESULT_BYTES = 1 << 20;

/**
 * Outputs on the host: tensors as HostTensors, sequences as sequences of host values; those in
 * `keep` as device Values whose arrays the caller now owns (taken out of the run's arrays, or a
 * new handle where the run does not own the array: a feed, a constant, an output named twice).
 */
export function collectOutputs(
  fetches: readonly string[],
  values: Value[],
  run: RunState,
  options: MlxRunOptions,
  /** Results of POOLED_RESULT_BYTES and more go to pooled host blocks (MlxSessionOptions.outputMemory). */
  pooledResults: boolean,
): Record<string, HostTensor | Value> {
  const out: Record<string, HostTensor | Value> = {};
  const kept = new Set<mx.Array>();
  const { keepOnDevice: keep, pinnedOutputs: pin, outputBuffers: into } = options;
  const keepIt = (name: string) => keep === true || (Array.isArray(keep) && keep.includes(name));
  const pinIt = (name: string) => pin === true || (Array.isArray(pin) && pin.includes(name));
  const pooled = (a: mx.Array) => pooledResults && a.nbytes >= POOLED_RESULT_BYTES;
  if (into)
    for (const name of Object.keys(into))
      if (!fetches.includes(name)) throw new InvalidFeedError(`outputBuffers names '${name}', which this run does not fetch`);
  // Every pre-allocated output is checked before any is written.
  fetches.forEach((name, i) => {
    const dst = into?.[name];
    const v = values[i];
    if (!dst || keepIt(name)) return;
    if (v.kind !== 'device' && v.kind !== 'host')
      throw new InvalidFeedError(`output '${name}' is a ${v.kind}; a pre-allocated buffer holds only a tensor`);
    checkDestination(dst, v.kind === 'device' ? v.onnxType : v.tensor.dtype, shapeOf(v, `output '${name}'`), `output '${name}'`);
  });
  const toHost = (v: Value, where: string): Value =>
    v.kind === 'device'
      ? { kind: 'host', tensor: asHost(v, where) }
      : v.kind === 'sequence'
        ? { ...v, items: v.items.map((x) => toHost(x, where)) }
        : v;
  fetches.forEach((name, i) => {
    const v = values[i];
    if (keepIt(name) && v.kind === 'device') {
      const own = (a: mx.Array) => {
        if (!kept.has(a) && run.arrays.delete(a)) {
          kept.add(a);
          return a;
        }
        return mx.copy(a).eval();
      };
      const array = own(v.array);
      // A growing cache's reserve goes with its view (execute/kv-append.ts).
      const reserve = v.reserve && !v.reserve.buffer.disposed ? { axis: v.reserve.axis, buffer: own(v.reserve.buffer) } : undefined;
      out[name] = reserve ? { kind: 'device', array, onnxType: v.onnxType, reserve } : { kind: 'device', array, onnxType: v.onnxType };
      return;
    }
    const dst = into?.[name];
    if (dst && v.kind === 'device') out[name] = downloadInto(v.array, v.onnxType, dst, `output '${name}'`);
    else if (dst && v.kind === 'host') {
      (dst.data as unknown as { set(a: ArrayLike<unknown>): void }).set(v.tensor.data as ArrayLike<unknown>);
      out[name] = dst;
    } else if (v.kind === 'device' && pinIt(name)) out[name] = downloadPinned(v.array, v.onnxType);
    else if (v.kind === 'device' && pooled(v.array)) {
      // In a pooled block, but an ordinary host tensor to the caller.
      const host = downloadPinned(v.array, v.onnxType);
      delete host.pinned;
      out[name] = host;
    } else out[name] = v.kind === 'host' || v.kind === 'device' ? asHost(v, `output '${name}'`) : toHost(v, `output '${name}'`);
  });
  return out;
}

// The streams sessions evaluate on, pooled for the process. MLX never frees a stream: each CPU
// stream owns a thread in MLX's scheduler for the life of the process, and the native library's
// background evaluation keeps one worker thread per stream as well. A session therefore takes its
// streams from this pool and gives them back when it is released, and a new session reuses a free
// one: the pool never holds more streams than the most sessions alive at once.
import * as mx from '@mlx/core';
import type { RunStreams } from './driver.js';

const free = new Map<mx.DeviceType, mx.Stream[]>();
let made = 0;

function take(device: mx.DeviceType): mx.Stream {
  const s = free.get(device)?.pop();
  if (s) return s;
  const fresh = mx.newStream(device, { anyThread: true });
  made++;
  return fresh;
}

function give(s: mx.Stream): void {
  try {
    // Nothing of the last session may still be queued on it (its runs are over; this is cheap).
    s.synchronize();
  } catch {
    // A stream that reports an error is not handed to the next session; MLX keeps its thread.
    s.dispose();
    return;
  }
  let list = free.get(s.device.type);
  if (!list) free.set(s.device.type, (list = []));
  if (!list.includes(s)) list.push(s);
}

/** A session's streams: its main stream on `device`, and on a GPU a CPU companion. */
export function takeStreams(device: mx.DeviceType): RunStreams {
  const main = take(device);
  if (device !== 'gpu') return { main };
  try {
    return { main, cpu: take('cpu') };
  } catch (e) {
    give(main);
    throw e;
  }
}

/** Gives a released session's streams back to the pool (once nothing runs on them). */
export function giveStreams(streams: RunStreams): void {
  give(streams.main);
  if (streams.cpu) give(streams.cpu);
}

/** @internal How many streams the pool has made so far, and how many are free now (tests). */
export function streamPoolStats(): { made: number; free: number } {
  let n = 0;
  for (const l of free.values()) n += l.length;
  return { made, free: n };
}

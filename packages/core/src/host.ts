// Host memory that transfers reach at the bus's rate: blocks of mlxc_host_alloc (page-locked on
// MLX's CUDA build, page-aligned ordinary memory elsewhere), handed out as ArrayBuffers and pooled.
//
// A fresh ArrayBuffer has no pages: a download into it faults them in one by one (on a virtual
// machine each fault is costly), which bounds a large result far below the bus. A block here has
// its pages from the start and, on CUDA, the copy engine writes it directly. Blocks are reused:
// when the ArrayBuffer given out is garbage collected (nothing in JS can reach the memory any more),
// its block goes back to the pool. There is no explicit free: the ArrayBuffer is a view of native
// memory that V8 cannot detach, so freeing it while a view exists would let JS read freed memory.
import { isMainThread } from 'node:worker_threads';
import { check, fn, koffi } from './native.js';

interface Block {
  ptr: unknown;
  bytes: number;
  pinned: boolean;
}

/** Blocks below this size are not worth the pool (and page-locked memory is a scarce resource). */
export const HOST_BLOCK_MIN_BYTES = 64 << 10;

const free = new Map<number, Block[]>();
let liveBytes = 0;
let cachedBytes = 0;
let liveBlocks = 0;
let allocations = 0;
let reuses = 0;
let pinnedKind: boolean | undefined;
// Live and cached blocks together; over it hostBuffer() returns undefined (the caller uses
// ordinary memory). Page-locked memory cannot be swapped: keep it bounded.
let limitBytes = 2 ** 31;
// Live blocks alone: V8 does not count them as its memory, so nothing makes it collect their
// ArrayBuffers, and a loop that never lets the event loop turn runs no finalizer. A synchronous
// loop of runs with a 3 MiB result held 375 MB of blocks after 110 runs (2 GiB was the only
// bound). Over this, results go to ordinary memory, which V8 counts and collects.
let liveLimitBytes = 256 * 2 ** 20;

// A worker thread's blocks go with it: the cached ones are freed as it ends (its ArrayBuffers are
// never collected then, so blocks still live at that point stay allocated).
if (!isMainThread) process.once('exit', () => evict(Number.POSITIVE_INFINITY));

const finalizer = new FinalizationRegistry<Block>((b) => {
  liveBytes -= b.bytes;
  liveBlocks--;
  if (liveBytes + cachedBytes + b.bytes <= limitBytes) {
    let list = free.get(b.bytes);
    if (!list) free.set(b.bytes, (list = []));
    list.push(b);
    cachedBytes += b.bytes;
  } else {
    fn.mlxc_host_free(b.ptr);
  }
});

/** Rounds to a size class: pages below 1 MiB, eighths of the power of two above (≤ 12.5% waste). */
export function hostSizeClass(nbytes: number): number {
  const page = 4096;
  if (nbytes <= 1 << 20) return Math.ceil(nbytes / page) * page;
  const step = 2 ** Math.floor(Math.log2(nbytes)) / 8;
  return Math.ceil(nbytes / step) * step;
}

/** Frees cached blocks until live, cached and `extra` bytes fit the limit (all of them for Infinity). */
function evict(extra: number): void {
  for (const [size, l] of free) {
    while (l.length && liveBytes + cachedBytes + extra > limitBytes) {
      fn.mlxc_host_free(l.pop()!.ptr);
      cachedBytes -= size;
    }
    if (!l.length) free.delete(size);
  }
}

function take(bytes: number): Block | undefined {
  const list = free.get(bytes);
  const b = list?.pop();
  if (b) {
    cachedBytes -= bytes;
    reuses++;
    return b;
  }
  // Make room from the cache for a new block before giving up.
  evict(bytes);
  if (liveBytes + cachedBytes + bytes > limitBytes) return undefined;
  const res = [null];
  const pinned = [false];
  check(fn.mlxc_host_alloc(res, pinned, bytes), 'mlxc_host_alloc');
  allocations++;
  pinnedKind = pinned[0] as boolean;
  return { ptr: res[0], bytes, pinned: pinnedKind };
}

/**
 * An ArrayBuffer of at least `nbytes` in a pooled host block (its byteLength is the block's size
 * class), or undefined when the pool's limit or its live limit (setLiveLimit) would be passed, or
 * nbytes is below HOST_BLOCK_MIN_BYTES. Reads (Array.readInto) into it and uploads from it go through the copy
 * engine directly on MLX's CUDA build.
 */
export function hostBuffer(nbytes: number): ArrayBuffer | undefined {
  if (!Number.isSafeInteger(nbytes) || nbytes < 0)
    throw new TypeError(`hostBuffer: nbytes must be a non-negative integer, got ${String(nbytes)}`);
  if (nbytes < HOST_BLOCK_MIN_BYTES) return undefined;
  const size = hostSizeClass(nbytes);
  if (liveBytes + size > liveLimitBytes) return undefined;
  const b = take(size);
  if (!b) return undefined;
  const ab = koffi.view(b.ptr, b.bytes) as ArrayBuffer;
  liveBytes += b.bytes;
  liveBlocks++;
  finalizer.register(ab, b);
  return ab;
}

/**
 * A new zero-filled Uint8Array of `nbytes` whose pages exist already: ordinary memory of the
 * JavaScript heap (collected as any other), populated by one call (mlxc_host_populate) rather
 * than faulted in page by page by the first write, which on a virtual machine costs several
 * microseconds a page. For large buffers about to be filled at once: a model file read into it.
 */
export function populatedBytes(nbytes: number): Uint8Array {
  if (!Number.isSafeInteger(nbytes) || nbytes < 0)
    throw new TypeError(`populatedBytes: nbytes must be a non-negative integer, got ${String(nbytes)}`);
  const out = new Uint8Array(nbytes);
  // The library decides what is worth populating (nothing under 1 MiB).
  if (nbytes > 0) check(fn.mlxc_host_populate(out, nbytes), 'mlxc_host_populate');
  return out;
}

export interface HostMemoryStats {
  /** Bytes in blocks given out whose ArrayBuffer is still reachable (or not yet collected). */
  liveBytes: number;
  liveBlocks: number;
  /** Bytes in blocks waiting in the pool for reuse. */
  cachedBytes: number;
  /** Blocks allocated from the system, and blocks handed out again from the pool. */
  allocations: number;
  reuses: number;
  limitBytes: number;
  /** The most bytes of blocks given out and not yet collected (setLiveLimit; default 256 MiB). */
  liveLimitBytes: number;
  /** Whether blocks are page-locked (MLX's CUDA build); undefined before the first. */
  pinned: boolean | undefined;
}

export const hostMemory = {
  stats: (): HostMemoryStats => ({
    liveBytes,
    liveBlocks,
    cachedBytes,
    allocations,
    reuses,
    limitBytes,
    liveLimitBytes,
    pinned: pinnedKind,
  }),
  /** Sets the pool's limit (live plus cached bytes); returns the previous one. Cached blocks over it are freed. */
  setLimit(bytes: number): number {
    if (!Number.isSafeInteger(bytes) || bytes < 0)
      throw new TypeError(`hostMemory.setLimit: bytes must be a non-negative integer, got ${String(bytes)}`);
    const prev = limitBytes;
    limitBytes = bytes;
    hostMemory.trim();
    return prev;
  },
  /**
   * Sets the most bytes of blocks given out and not yet collected (default 256 MiB); returns the
   * previous one. Past it hostBuffer() returns undefined, and callers use ordinary memory.
   */
  setLiveLimit(bytes: number): number {
    if (!Number.isSafeInteger(bytes) || bytes < 0)
      throw new TypeError(`hostMemory.setLiveLimit: bytes must be a non-negative integer, got ${String(bytes)}`);
    const prev = liveLimitBytes;
    liveLimitBytes = bytes;
    return prev;
  },
  /** Frees cached blocks until live plus cached bytes fit the limit (all of them with `all`). */
  trim(all = false): void {
    evict(all ? Number.POSITIVE_INFINITY : 0);
  },
};

// Devices and streams. The default is the GPU where MLX has one (Metal or CUDA), else the CPU; every
// op takes `{ stream }` (a Stream or 'cpu' | 'gpu') to override it for one call, and `withStream`
// overrides it for a synchronous block.
import { MlxDeviceType, type MlxHandle } from '@mlx/sys';
import { check, checkHandle, fn } from './native.js';

export type DeviceType = 'cpu' | 'gpu';

export class Device {
  constructor(
    readonly type: DeviceType,
    readonly index = 0,
  ) {}
  /** Whether MLX can run on this device in this build (mlx_device_is_available). */
  get available(): boolean {
    const h = fn.mlx_device_new_type(this.type === 'gpu' ? MlxDeviceType.GPU : MlxDeviceType.CPU, this.index);
    try {
      const out = [false];
      check(fn.mlx_device_is_available(out as never, h), 'mlx_device_is_available');
      return out[0];
    } finally {
      fn.mlx_device_free(h);
    }
  }
  toString(): string {
    return `Device(${this.type}, ${this.index})`;
  }
}

export class Stream {
  #handle: MlxHandle;
  private constructor(
    handle: MlxHandle,
    readonly device: Device,
    readonly owned: boolean,
  ) {
    this.#handle = handle;
  }
  /** @internal */
  static fromHandle(h: MlxHandle, owned: boolean): Stream {
    const dev = { ctx: null };
    check(fn.mlx_stream_get_device(dev, h), 'mlx_stream_get_device');
    const t = [0];
    const idx = [0];
    check(fn.mlx_device_get_type(t as never, dev), 'mlx_device_get_type');
    check(fn.mlx_device_get_index(idx as never, dev), 'mlx_device_get_index');
    fn.mlx_device_free(dev);
    return new Stream(h, new Device(t[0] === MlxDeviceType.GPU ? 'gpu' : 'cpu', idx[0]), owned);
  }
  get handle(): MlxHandle {
    if (!this.#handle.ctx) throw new Error('stream was disposed');
    return this.#handle;
  }
  get index(): number {
    const i = [0];
    check(fn.mlx_stream_get_index(i as never, this.handle), 'mlx_stream_get_index');
    return i[0];
  }
  /** Waits for everything queued on this stream. */
  synchronize(): void {
    check(fn.mlx_synchronize(this.handle), 'mlx_synchronize');
  }
  toString(): string {
    const s = { ctx: null };
    check(fn.mlx_stream_tostring(s, this.handle), 'mlx_stream_tostring');
    const text = fn.mlx_string_data(s);
    fn.mlx_string_free(s);
    return text;
  }
  dispose(): void {
    if (this.owned && this.#handle.ctx) fn.mlx_stream_free(this.#handle);
    this.#handle = { ctx: null };
  }
  [Symbol.dispose](): void {
    this.dispose();
  }
}

const defaults = new Map<DeviceType, Stream>();

/** The default stream of a device (created once, never freed). */
export function defaultStreamOf(type: DeviceType): Stream {
  let s = defaults.get(type);
  if (!s) {
    const h = type === 'gpu' ? fn.mlx_default_gpu_stream_new() : fn.mlx_default_cpu_stream_new();
    s = Stream.fromHandle(checkHandle(h, type === 'gpu' ? 'mlx_default_gpu_stream_new' : 'mlx_default_cpu_stream_new'), false);
    defaults.set(type, s);
  }
  return s;
}

let gpuAvailableCache: boolean | undefined;
export function gpuAvailable(): boolean {
  return (gpuAvailableCache ??= new Device('gpu').available);
}
export function metalAvailable(): boolean {
  const out = [false];
  check(fn.mlx_metal_is_available(out as never), 'mlx_metal_is_available');
  return out[0];
}
export function cudaAvailable(): boolean {
  const out = [false];
  check(fn.mlx_cuda_is_available(out as never), 'mlx_cuda_is_available');
  return out[0];
}

function initialDevice(): DeviceType {
  const env = process.env.MLX_DEVICE;
  if (env === 'gpu' && !gpuAvailable())
    throw new Error('MLX_DEVICE=gpu, but this MLX build has no GPU (neither Metal nor CUDA); unset it or use MLX_DEVICE=cpu');
  if (env === 'cpu' || env === 'gpu') return env;
  if (env) throw new Error(`MLX_DEVICE must be 'cpu' or 'gpu', got '${env}'`);
  return gpuAvailable() ? 'gpu' : 'cpu';
}

let current: DeviceType | undefined;
const overrides: Stream[] = [];

/** The device ops run on unless told otherwise: MLX_DEVICE if set, else the GPU where available, else the CPU. */
export function defaultDevice(): Device {
  return new Device((current ??= initialDevice()));
}

export function setDefaultDevice(d: DeviceType | Device): void {
  const type = typeof d === 'string' ? d : d.type;
  if (type === 'gpu' && !gpuAvailable()) throw new Error('no GPU is available to MLX in this build (it has neither Metal nor CUDA)');
  current = type;
}

export function defaultStream(): Stream {
  return overrides.at(-1) ?? defaultStreamOf(defaultDevice().type);
}

/**
 * A new stream on a device (yours to dispose). MLX evaluates a stream's work on the thread that made
 * it; `anyThread: true` makes one any thread may evaluate (one at a time), as evalInBackground needs.
 * MLX never frees a stream: a CPU stream keeps a thread of MLX's scheduler (and, once evaluated in
 * the background, a worker of the native library) for the life of the process, even after
 * dispose(). Make a bounded number and reuse them, as @mlx/ort-ep's sessions do through a pool.
 */
export function newStream(device: DeviceType | Device = defaultDevice(), options: { anyThread?: boolean } = {}): Stream {
  const type = typeof device === 'string' ? device : device.type;
  const d = fn.mlx_device_new_type(type === 'gpu' ? MlxDeviceType.GPU : MlxDeviceType.CPU, 0);
  try {
    const h = options.anyThread ? fn.mlxc_stream_new_any_thread(d) : fn.mlx_stream_new_device(d);
    return Stream.fromHandle(checkHandle(h, options.anyThread ? 'mlxc_stream_new_any_thread' : 'mlx_stream_new_device'), true);
  } finally {
    fn.mlx_device_free(d);
  }
}

export type StreamLike = Stream | DeviceType;
export interface OpOptions {
  stream?: StreamLike;
}

/**
 * A stream from what ops take: a Stream as given; a device type as the innermost withStream stream
 * of that device, else the device's default stream (so `{ stream: 'cpu' }` inside
 * `withStream(myCpuStream, ...)` stays on myCpuStream).
 */
export function resolveStream(s?: StreamLike): Stream {
  if (s === undefined) return defaultStream();
  if (typeof s === 'string') {
    for (let i = overrides.length - 1; i >= 0; i--) if (overrides[i].device.type === s) return overrides[i];
    return defaultStreamOf(s);
  }
  return s;
}

/** @internal */
export function streamHandle(opts?: OpOptions): MlxHandle {
  return resolveStream(opts?.stream).handle;
}

/** MLX's own default stream per device, as this module last set it (undefined: MLX's initial one). */
const nativeDefaults = new Map<DeviceType, Stream>();

function setNativeDefault(s: Stream): void {
  check(fn.mlx_set_default_stream(s.handle), 'mlx_set_default_stream');
  nativeDefaults.set(s.device.type, s);
}

/**
 * Runs `fn` with `s` as the default stream (synchronous code only). MLX's own default stream of the
 * device follows for the duration, so that what MLX makes internally without a stream (custom VJP
 * primitives, for one) lands on `s` too: a stream that another thread evaluates must hold the whole
 * graph.
 */
export function withStream<T>(s: StreamLike, body: () => T): T {
  const stream = resolveStream(s);
  const type = stream.device.type;
  const prev = nativeDefaults.get(type) ?? defaultStreamOf(type);
  overrides.push(stream);
  const switched = prev !== stream;
  try {
    if (switched) setNativeDefault(stream);
    return body();
  } finally {
    overrides.pop();
    if (switched) setNativeDefault(prev);
  }
}

export function synchronize(s?: StreamLike): void {
  resolveStream(s).synchronize();
}

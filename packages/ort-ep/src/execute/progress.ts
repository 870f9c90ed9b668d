// Progress of what can take seconds the first time (MlxSessionOptions.onProgress), and the check
// of the options create() acts on itself (warmup, onProgress).
import { messageOf } from '../errors.js';
import type { MlxProgressEvent, MlxSessionOptions } from './options.js';

/** Reports a progress event; a throw from the callback becomes a process warning, never the caller's error. */
export function notify(options: MlxSessionOptions, event: MlxProgressEvent): void {
  if (!options.onProgress) return;
  try {
    options.onProgress(event);
  } catch (e) {
    process.emitWarning(`onProgress threw: ${messageOf(e)}`, { code: 'MLX_ORT_PROGRESS_CALLBACK' });
  }
}

/** Runs `body` between a phase's start and end events. */
export async function progress<T>(
  options: MlxSessionOptions,
  model: string,
  phase: MlxProgressEvent['phase'],
  body: () => Promise<T>,
  detail?: string,
): Promise<T> {
  const t0 = performance.now();
  notify(options, { phase, state: 'start', model, detail });
  const out = await body();
  notify(options, { phase, state: 'end', model, detail, ms: performance.now() - t0 });
  return out;
}

/** The options create() acts on itself, checked before any work. */
export function checkStartOptions(options: MlxSessionOptions): void {
  const w = options.warmup as unknown;
  if (w !== undefined && typeof w !== 'boolean' && (typeof w !== 'object' || w === null || Array.isArray(w)))
    throw new TypeError(`warmup must be true, false or { dims: { name: size } }, got ${JSON.stringify(w)}`);
  const dims = typeof w === 'object' && w !== null ? (w as { dims?: unknown }).dims : undefined;
  if (dims !== undefined && (typeof dims !== 'object' || dims === null || Array.isArray(dims)))
    throw new TypeError(`warmup.dims must be an object of dimension sizes, got ${JSON.stringify(dims)}`);
  if (options.onProgress !== undefined && typeof options.onProgress !== 'function')
    throw new TypeError(`onProgress must be a function, got ${typeof options.onProgress}`);
}

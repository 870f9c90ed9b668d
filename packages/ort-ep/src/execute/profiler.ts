// A session's profile, written as onnxruntime writes its own (`enableProfiling`): a JSON array of
// Chrome trace events ("ph": "X", times in microseconds from the session's start), which
// Perfetto, chrome://tracing and the tools that read onnxruntime's profiles open.
//
// Events, with onnxruntime's names where it has the same thing:
// - cat "Session": `model_loading_uri` / `model_loading_array` (reading, decoding, checking and
//   planning the model), `session_initialization` (constants to the device, fallback sessions,
//   warm-up), `model_run` (one run; args: which path ran it), `mlx_eval` (an MLX evaluation; args:
//   arrays, thread), `program_replay` (a compiled program replayed in one native call), `download`
//   (results to the host; args: bytes).
// - cat "Node": `<node>_kernel_time` for each node of an eagerly walked run (a run with
//   `compiled: false`, and the first run of each input signature on the compiled path), with the
//   node evaluated on its own so that its time is its compute (args: op_name, provider
//   "MLXExecutionProvider", node_index, input_type_shape, output_type_shape, output_size); a
//   fallback partition is one such event with provider "CPUExecutionProvider" and its nodes.
// Evaluating each node on its own is what profiling costs on the eager path: the numbers are
// per-node times, not those of the fused program a compiled run replays.
import { writeFileSync } from 'node:fs';
import { threadId } from 'node:worker_threads';

export interface TraceEvent {
  cat: 'Session' | 'Node';
  pid: number;
  tid: number;
  dur: number;
  ts: number;
  ph: 'X';
  name: string;
  args: Record<string, unknown>;
}

/** The provider names events carry, as onnxruntime's own. */
export const MLX_PROVIDER = 'MLXExecutionProvider';
export const CPU_PROVIDER = 'CPUExecutionProvider';

const pad = (n: number, w = 2) => String(n).padStart(w, '0');

/** onnxruntime's file name: `<prefix>_<YYYY-MM-DD_HH-MM-SS_mmm>.json`, local time. */
function fileName(prefix: string, at: Date): string {
  const d = `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}`;
  const t = `${pad(at.getHours())}-${pad(at.getMinutes())}-${pad(at.getSeconds())}_${pad(at.getMilliseconds(), 3)}`;
  return `${prefix}_${d}_${t}.json`;
}

/** Most events one profile holds (a long profiled loop of runs keeps its first ones). */
export const MAX_EVENTS = 1_000_000;

export class Profiler {
  readonly events: TraceEvent[] = [];
  /** Events not kept (past MAX_EVENTS). */
  dropped = 0;
  private readonly origin: number;
  private readonly startedAt: Date;

  constructor(
    readonly prefix: string,
    origin = performance.now(),
  ) {
    this.origin = origin;
    this.startedAt = new Date(Date.now() - (performance.now() - origin));
  }

  /** An event from `startMs` to `endMs` (performance.now() times). */
  add(cat: TraceEvent['cat'], name: string, startMs: number, endMs: number, args: Record<string, unknown> = {}): void {
    if (this.events.length >= MAX_EVENTS) {
      this.dropped++;
      return;
    }
    this.events.push({
      cat,
      pid: process.pid,
      tid: threadId === 0 ? process.pid : threadId,
      dur: Math.max(0, Math.round((endMs - startMs) * 1000)),
      ts: Math.max(0, Math.round((startMs - this.origin) * 1000)),
      ph: 'X',
      name,
      args,
    });
  }

  /** Writes the events to `<prefix>_<date>.json` and returns the file's path. */
  write(): string {
    const file = fileName(this.prefix, this.startedAt);
    if (this.dropped) {
      const last = this.events.at(-1);
      this.events.push({
        cat: 'Session',
        pid: process.pid,
        tid: threadId === 0 ? process.pid : threadId,
        dur: 0,
        ts: last ? last.ts + last.dur : 0,
        ph: 'X',
        name: 'profile_truncated',
        args: { dropped_events: this.dropped },
      });
    }
    // One event a line, as onnxruntime's files are laid out.
    writeFileSync(file, `[\n${this.events.map((e) => JSON.stringify(e)).join(',\n')}\n]\n`);
    return file;
  }
}

/** onnxruntime's type-and-shape entries: [{ "float": [1, 8] }, ...]. */
export function typeShapes(values: readonly { type: string; dims: readonly number[] }[]): Record<string, number[]>[] {
  return values.map((v) => ({ [v.type]: [...v.dims] }));
}

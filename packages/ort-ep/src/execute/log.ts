// A session's log, at onnxruntime's severities (logSeverityLevel: 0 verbose, 1 info, 2 warning,
// 3 error, 4 fatal). Silent unless the session (or a run) sets a level: entries at or above it go
// to MlxSessionOptions.onLog, else to stderr in onnxruntime's layout
// (`<time> [V:onnxruntime:<logId>, mlx:<category>] <message>`).
//
// What it says: at VERBOSE each node's placement (MLX, or onnxruntime and why), the partitions,
// the rewrites applied, each run's path (eager, analyse, trace, replay, one-call); at INFO the
// session's summary and each new input signature analysed or traced; at WARNING that nodes fall
// back to onnxruntime (onnxruntime warns about nodes its preferred provider did not take alike).

export type LogSeverity = 0 | 1 | 2 | 3 | 4;

export interface MlxLogEntry {
  severity: LogSeverity;
  /** What the entry is about: 'placement', 'partition', 'rewrite', 'session', 'signature', 'run'. */
  category: string;
  message: string;
  /** The session's logId (onnxruntime's option), '' when none. */
  logId: string;
}

const letters = ['V', 'I', 'W', 'E', 'F'];
const pad = (n: number, w = 2) => String(n).padStart(w, '0');

function stamp(d: Date): string {
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** Checks a logSeverityLevel option: undefined, or an integer 0-4. */
export function checkSeverity(v: unknown, what: string): void {
  if (v !== undefined && !(typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 4))
    throw new TypeError(`${what} must be 0 (verbose), 1 (info), 2 (warning), 3 (error) or 4 (fatal), got ${String(v)}`);
}

export class SessionLog {
  constructor(
    /** Entries below this severity are dropped; undefined: the log is off. */
    readonly level: LogSeverity | undefined,
    readonly logId = '',
    private readonly hook?: (entry: MlxLogEntry) => void,
  ) {}

  /** Whether an entry of `severity` would be kept (at `level`, a run's own, when given). */
  on(severity: LogSeverity, level: LogSeverity | undefined = this.level): boolean {
    return level !== undefined && severity >= level;
  }

  /** Logs `message` (made only when the entry is kept) at `severity`. */
  log(severity: LogSeverity, category: string, message: string | (() => string), level: LogSeverity | undefined = this.level): void {
    if (!this.on(severity, level)) return;
    const entry: MlxLogEntry = { severity, category, message: typeof message === 'string' ? message : message(), logId: this.logId };
    if (this.hook) {
      try {
        this.hook(entry);
      } catch (e) {
        process.emitWarning(`onLog threw: ${e instanceof Error ? e.message : String(e)}`);
      }
      return;
    }
    process.stderr.write(`${stamp(new Date())} [${letters[severity]}:onnxruntime:${this.logId}, mlx:${category}] ${entry.message}\n`);
  }
}

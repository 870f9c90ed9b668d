// The fuzz parent: hands batches of cases to child processes (child.ts), watches each child's
// phase, memory and time, and turns a child that dies or stops answering into a 'crashed' or
// 'hung' result for the case in flight. A case that failed after others in the same child is run
// again alone, to attribute it. Crashing and hanging inputs are written to the corpus folder as
// case files, which `scripts/fuzz.ts --replay` runs again.
import { fork, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CaseFile, CaseResult, Item, Outcome, ToChild, ToParent } from './child.js';
import { generateCase, type FuzzCase, type Roots } from './generate.js';
import { tensorToJson } from './values.js';

export const OUTCOMES: Outcome[] = ['matched', 'error', 'mismatched', 'crashed', 'hung', 'unclear-error', 'unverified', 'skipped'];

export interface FuzzOptions {
  seed: number;
  /** Cases seed:start .. seed:start+count-1. */
  count: number;
  start?: number;
  /** Case files to run instead of generated cases. */
  files?: string[];
  roots: Roots;
  /** Child processes at once. Default 2. */
  jobs?: number;
  /** Cases per child process. Default 40. */
  batch?: number;
  /** Per phase (mlx session, reference session) of one case. Default 30 s. */
  timeoutMs?: number;
  /** A child whose resident memory passes this is stopped (its case crashed). Default 3 GiB. */
  rssLimit?: number;
  /** The mlx provider's maxTensorBytes. Default 256 MiB. */
  maxTensorBytes?: number;
  /** Where crashing and hanging cases are written. */
  corpus?: string;
  onResult?: (r: CaseResult) => void;
  /** No new batch starts after this time (ms since the epoch); the summary covers the cases run. */
  deadline?: number;
}

export interface Summary {
  seed: number;
  cases: number;
  counts: Record<Outcome, number>;
  results: CaseResult[];
  ms: number;
}

const childPath = fileURLToPath(new URL('./child.ts', import.meta.url));

interface Slot {
  item: Item;
  /** Run alone, after failing in a batch. */
  alone: boolean;
}

export async function runFuzz(o: FuzzOptions): Promise<Summary> {
  const t0 = performance.now();
  const jobs = o.jobs ?? 2;
  const batch = o.batch ?? 40;
  const timeoutMs = o.timeoutMs ?? 30_000;
  const rssLimit = o.rssLimit ?? 3 * 2 ** 30;
  const maxTensorBytes = o.maxTensorBytes ?? 256 * 2 ** 20;
  const queue: Slot[] = o.files
    ? o.files.map((file) => ({ item: { key: file, file }, alone: true }))
    : Array.from({ length: o.count }, (_, k) => {
        const index = (o.start ?? 0) + k;
        return { item: { key: `${o.seed}:${index}`, seed: o.seed, index }, alone: false };
      });
  const results: CaseResult[] = [];
  let deadStarts = 0;
  const record = (r: CaseResult) => {
    results.push(r);
    o.onResult?.(r);
  };

  const caseOf = (item: Item): FuzzCase | undefined => {
    if ('file' in item) return undefined;
    return generateCase(item.seed, item.index, o.roots);
  };
  const keep = (item: Item, r: CaseResult) => {
    if (!o.corpus || 'file' in item) return;
    const c = caseOf(item);
    if (!c) return;
    mkdirSync(o.corpus, { recursive: true });
    const file: CaseFile = {
      id: c.id,
      source: c.source,
      label: c.label,
      mutation: c.mutation,
      outcome: r.outcome,
      detail: r.detail,
      runs: c.runs,
      model: Buffer.from(c.model).toString('base64'),
      feeds: Object.fromEntries(Object.entries(c.feeds).map(([k, t]) => [k, tensorToJson(t)])),
      ...(c.special && { special: c.special }),
    };
    writeFileSync(join(o.corpus, `${r.outcome}-${c.id.replace(/:/g, '_')}.json`), `${JSON.stringify(file)}\n`);
  };

  /** One child over `slots`; resolves when it is done or has died (the rest is queued again). */
  const runChild = (slots: Slot[]) =>
    new Promise<void>((resolve) => {
      const child: ChildProcess = fork(childPath, [], {
        execArgv: ['--conditions=source', '--import', 'tsx'],
        serialization: 'advanced',
        stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
        env: { ...process.env, OMP_NUM_THREADS: '1', FUZZ_CHILD: '1' },
      });
      const stop = () => child.kill('SIGKILL');
      process.once('exit', stop);
      let stderr = '';
      child.stderr!.on('data', (d: Buffer) => {
        stderr = (stderr + d.toString()).slice(-2000);
      });
      const pending = new Map(slots.map((s) => [s.item.key, s]));
      let started = 0;
      let current: { slot: Slot; phase: string; partial?: ToParent & { type: 'phase' } } | undefined;
      let finished = false;
      let timer: NodeJS.Timeout | undefined;
      let why: string | undefined;
      const arm = () => {
        clearTimeout(timer);
        timer = setTimeout(() => {
          why = `no answer within ${timeoutMs} ms`;
          child.kill('SIGKILL');
        }, timeoutMs);
      };
      const rss = setInterval(() => {
        try {
          const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
          if (m && Number(m[1]) * 1024 > rssLimit) {
            why = `resident memory above ${(rssLimit / 2 ** 30).toFixed(1)} GiB`;
            child.kill('SIGKILL');
          }
        } catch {
          // the child has gone
        }
      }, 200);
      arm();
      child.on('message', (m: ToParent) => {
        if (m.type === 'ready') {
          child.send({ type: 'run', items: slots.map((s) => s.item), roots: o.roots, maxTensorBytes, timeoutMs } satisfies ToChild);
        } else if (m.type === 'phase') {
          const slot = pending.get(m.key)!;
          if (m.phase === 'generate') started++;
          current = { slot, phase: m.phase, partial: m };
          arm();
        } else if (m.type === 'result') {
          const slot = pending.get(m.result.key);
          pending.delete(m.result.key);
          current = undefined;
          record(m.result);
          // A procedure's own hang or crash (hostile.ts: the CLI on a FIFO), or onnxruntime's in the fallback process.
          if (slot && (m.result.outcome === 'hung' || m.result.outcome === 'crashed')) keep(slot.item, m.result);
          arm();
        } else if (m.type === 'done') {
          finished = true;
          child.kill();
        }
      });
      child.on('exit', (code, signal) => {
        process.off('exit', stop);
        clearTimeout(timer);
        clearInterval(rss);
        if (!finished && current) {
          const { slot, phase, partial } = current;
          pending.delete(slot.item.key);
          const hung = why?.startsWith('no answer');
          const how = why ?? (signal ? `signal ${signal}` : `exit code ${code}`);
          const tail = stderr
            .trim()
            .split('\n')
            .filter((l) => l.trim())
            .slice(-2)
            .join(' | ')
            .slice(0, 300);
          if (phase === 'ort' && partial?.partial) {
            // The reference failed; mlx's own outcome stands.
            record({
              ...partial.partial,
              detail: `${partial.partial.detail} (onnxruntime ${hung ? 'hung' : 'crashed'}: ${how})`,
              reference: 'failed',
            });
          } else if (!slot.alone && started > 1) {
            queue.unshift({ item: slot.item, alone: true });
          } else {
            const c = 'file' in slot.item ? undefined : caseOf(slot.item);
            const r: CaseResult = {
              key: slot.item.key,
              id: c?.id ?? slot.item.key,
              source: c?.source ?? 'file',
              label: c?.label ?? slot.item.key,
              mutation: c?.mutation ?? '',
              outcome: hung ? 'hung' : 'crashed',
              detail: `${phase}: ${how}${tail ? `; ${tail}` : ''}`,
              reference: 'skipped',
            };
            record(r);
            keep(slot.item, r);
          }
        }
        if (!finished && started === 0 && ++deadStarts > 3)
          throw new Error(`fuzz: the child process does not start: ${stderr.slice(-500)}`);
        // Whatever the child did not reach goes back to the queue.
        const rest = slots.filter((s) => pending.has(s.item.key) && s.item.key !== current?.slot.item.key);
        queue.unshift(...rest);
        resolve();
      });
    });

  const worker = async () => {
    while (queue.length && !(o.deadline && Date.now() > o.deadline)) {
      const first = queue.shift()!;
      const slots = [first];
      if (!first.alone) while (slots.length < batch && queue.length && !queue[0].alone) slots.push(queue.shift()!);
      await runChild(slots);
    }
  };
  await Promise.all(Array.from({ length: jobs }, worker));
  const counts = Object.fromEntries(OUTCOMES.map((k) => [k, 0])) as Record<Outcome, number>;
  for (const r of results) counts[r.outcome]++;
  return { seed: o.seed, cases: results.length, counts, results, ms: performance.now() - t0 };
}

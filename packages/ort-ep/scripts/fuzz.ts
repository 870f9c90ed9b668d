// The fuzz run: seeded cases (single nodes of every registered op, mutated ONNX tests, mutated
// shared models), each through the 'mlx' provider and onnxruntime-node in child processes.
// Prints the count per class and every finding; keeps crashing and hanging cases as files.
//
//   node --conditions=source --import tsx scripts/fuzz.ts [--seed N] [--cases N] [--start N]
//        [--jobs N] [--batch N] [--timeout MS] [--minutes M] [--corpus DIR] [--report FILE] [--quiet]
//        [--focus REGEX] [--structured WEIGHT]
//   (--focus: only ops, ONNX tests and structured families matching REGEX, case-insensitive;
//    --structured: the weight of structured cases, scripts/fuzz/structured.ts, against op 0.6)
//   (--minutes: start no new batch after M minutes; the summary covers the cases run)
//   node --conditions=source --import tsx scripts/fuzz.ts --replay FILE_OR_DIR...
import { existsSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { OUTCOMES, runFuzz } from './fuzz/harness.js';

const args = process.argv.slice(2);
const opt = (name: string, dflt?: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? args[i + 1] : dflt;
};
const pkg = fileURLToPath(new URL('..', import.meta.url));
const shared = resolve(pkg, '../../../shared');
const roots = {
  models: existsSync(join(shared, 'models')) ? join(shared, 'models') : undefined,
  onnxTests: existsSync(join(shared, 'onnx-node-tests/v1.22.0')) ? join(shared, 'onnx-node-tests/v1.22.0') : undefined,
  focus: opt('focus'),
  structured: opt('structured') ? Number(opt('structured')) : undefined,
};
// --show SEED:INDEX: one case in this process, with the whole error.
const show = opt('show');
if (show) {
  process.env.FUZZ_FULL = '1';
  const { generateCase } = await import('./fuzz/generate.js');
  const { runCase } = await import('./fuzz/child.js');
  const [s, i] = show.split(':').map(Number);
  const c = generateCase(s, i, roots);
  console.log(
    c.label,
    c.mutation,
    Object.fromEntries(
      Object.entries(c.feeds).map(([k, t]) => [
        k,
        { dtype: t.dtype, dims: t.dims, data: Array.from(t.data as ArrayLike<unknown>).slice(0, 16) },
      ]),
    ),
  );
  console.log(await runCase(c, show, 256 * 2 ** 20, () => {}));
  process.exit(0);
}
const replay = args.includes('--replay') ? args.slice(args.indexOf('--replay') + 1).filter((a) => !a.startsWith('--')) : undefined;
const files = replay?.flatMap((p) =>
  statSync(p).isDirectory()
    ? readdirSync(p)
        .filter((f) => f.endsWith('.json'))
        .sort()
        .map((f) => join(p, f))
    : [p],
);
const seed = Number(opt('seed', String(Date.now() % 100000)));
const count = Number(opt('cases', '1000'));
const quiet = args.includes('--quiet');
let done = 0;
const summary = await runFuzz({
  seed,
  count,
  start: Number(opt('start', '0')),
  files,
  roots,
  jobs: Number(opt('jobs', '2')),
  batch: Number(opt('batch', '40')),
  timeoutMs: Number(opt('timeout', '30000')),
  corpus: opt('corpus', join(pkg, 'reports/fuzz-corpus')),
  deadline: opt('minutes') ? Date.now() + Number(opt('minutes')) * 60_000 : undefined,
  onResult: (r) => {
    done++;
    const finding = r.outcome === 'crashed' || r.outcome === 'hung' || r.outcome === 'mismatched' || r.outcome === 'unclear-error';
    if (files || (finding && !quiet)) console.log(`${r.outcome.padEnd(13)} ${r.id} ${r.label} [${r.mutation}] ${r.detail}`);
    if (!files && done % 500 === 0) console.error(`[fuzz] ${done}/${count}`);
  },
});
console.log(
  `\nfuzz ${files ? `replay of ${files.length} file(s)` : `seed ${seed}, cases ${summary.cases}`} in ${(summary.ms / 1000).toFixed(0)} s`,
);
for (const k of OUTCOMES) console.log(`  ${k.padEnd(14)} ${summary.counts[k]}`);
const report = opt('report');
if (report) writeFileSync(report, `${JSON.stringify(summary, null, 1)}\n`);
process.exit(summary.counts.crashed + summary.counts.hung > 0 ? 1 : 0);

// The ONNX node-suite conformance runner: every case through the 'mlx' backend and through
// onnxruntime-node's CPU provider, in worker processes (a native crash costs one case, not the run).
//
//   node --conditions=source --import tsx packages/ort-ep/scripts/conformance.ts [options]
//     --filter <regex>     only cases whose name matches
//     --engine mlx|ort|both   (default both)
//     --workers <n>        worker processes per engine (default 2)
//     --report <file.md>   write the per-case report (pass / fail with the worst error / unsupported with the reason)
//     --json <file>        write the results as JSON
//     --write-passing <file>  write the names of the cases passing through mlx (the checked-in list)
//     --suite <dir>        the suite (default ../shared/onnx-node-tests/v1.22.0 beside the repository)
//     --fallback cpu|none  for mlx: run the nodes MLX does not take on onnxruntime (default none:
//                          the suite measures MLX alone)
//     --verbose            print every case
import { spawn } from 'node:child_process';
import { readdirSync, writeFileSync, existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createInterface } from 'node:readline';
import type { CaseResult, Engine } from '../test/conformance/runner.js';

const here = dirname(fileURLToPath(import.meta.url));
export const defaultSuite = join(here, '..', '..', '..', '..', 'shared', 'onnx-node-tests', 'v1.22.0');

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}
const flag = (name: string) => process.argv.includes(`--${name}`);

async function worker(): Promise<void> {
  const { runCase } = await import('../test/conformance/runner.js');
  const engine = arg('engine') as Engine;
  const suite = arg('suite')!;
  const rl = createInterface({ input: process.stdin });
  for await (const line of rl) {
    const name = line.trim();
    if (!name) continue;
    const r = await runCase(join(suite, name), engine, { fallback: arg('fallback') === 'cpu' ? 'cpu' : 'none' });
    process.stdout.write(`RESULT ${JSON.stringify(r)}\n`);
  }
}

/** Runs `cases` through `engine` with `n` workers; a worker that dies marks its case 'error' and is replaced. */
async function runPool(engine: Engine, suite: string, cases: string[], n: number, onResult: (r: CaseResult) => void): Promise<void> {
  const queue = [...cases];
  const self = fileURLToPath(import.meta.url);
  const one = () =>
    new Promise<void>((resolve) => {
      const next = () => {
        if (!queue.length) return resolve();
        const child = spawn(
          process.execPath,
          [
            '--conditions=source',
            '--import',
            'tsx',
            self,
            '--worker',
            '--engine',
            engine,
            '--suite',
            suite,
            '--fallback',
            arg('fallback') ?? 'none',
          ],
          {
            stdio: ['pipe', 'pipe', 'pipe'],
            env: { ...process.env, ORT_LOG_LEVEL: 'error' },
          },
        );
        let current: string | undefined;
        let stderr = '';
        child.stderr.on('data', (d) => (stderr = (stderr + d).slice(-2000)));
        const feed = () => {
          current = queue.shift();
          if (current) child.stdin.write(`${current}\n`);
          else child.stdin.end();
        };
        createInterface({ input: child.stdout }).on('line', (line) => {
          if (!line.startsWith('RESULT ')) return;
          onResult(JSON.parse(line.slice(7)) as CaseResult);
          feed();
        });
        child.on('exit', (code, signal) => {
          if (current) {
            onResult({
              name: current,
              status: 'error',
              detail: `worker died (${signal ?? `exit ${code}`}): ${stderr.trim().split('\n').slice(-3).join(' | ')}`,
              ms: 0,
            });
            current = undefined;
            next();
          } else resolve();
        });
        feed();
      };
      next();
    });
  await Promise.all(Array.from({ length: Math.max(1, Math.min(n, cases.length)) }, one));
}

async function main(): Promise<void> {
  const suite = arg('suite') ?? defaultSuite;
  if (!existsSync(suite)) throw new Error(`suite not found at ${suite} (pass --suite)`);
  const re = new RegExp(arg('filter') ?? '.');
  const cases = readdirSync(suite)
    .filter((c) => c.startsWith('test_') && re.test(c))
    .sort();
  const engines: Engine[] = (arg('engine') ?? 'both') === 'both' ? ['mlx', 'ort'] : [arg('engine') as Engine];
  const workers = Number(arg('workers') ?? 2);
  const results: Record<string, Record<string, CaseResult>> = {};
  for (const engine of engines) {
    results[engine] = {};
    const t0 = Date.now();
    await runPool(engine, suite, cases, workers, (r) => {
      results[engine][r.name] = r;
      if (flag('verbose')) console.log(`${engine} ${r.status.padEnd(11)} ${r.name}${r.detail ? `  ${r.detail}` : ''}`);
    });
    const rs = Object.values(results[engine]);
    const count = (s: string) => rs.filter((r) => r.status === s).length;
    const low = rs.filter((r) => r.lowLevel);
    console.log(
      `${engine === 'mlx' ? 'mlx (onnxruntime-common backend)' : 'onnxruntime-node CPU'}: ${count('pass')} passed, ${count('fail')} failed, ${count('unsupported')} unsupported, ${count('error')} errors of ${cases.length} cases` +
        (engine === 'mlx'
          ? ` (${low.filter((r) => r.status === 'pass').length} of the passes fed through MlxSession for bfloat16/float8/complex types)`
          : '') +
        ` in ${((Date.now() - t0) / 1000).toFixed(0)} s`,
    );
  }
  const report = arg('report');
  if (report) {
    mkdirSync(dirname(report), { recursive: true });
    const lines = ['# ONNX node-suite conformance', '', `| case | ${engines.join(' | ')} |`, `|---|${engines.map(() => '---').join('|')}|`];
    for (const c of cases)
      lines.push(
        `| ${c} | ${engines
          .map((e) => {
            const r = results[e][c];
            return `${r.status}${r.lowLevel ? ' (low-level)' : ''}${r.detail ? `: ${r.detail.replace(/\|/g, '\\|').slice(0, 200)}` : ''}`;
          })
          .join(' | ')} |`,
      );
    writeFileSync(report, lines.join('\n') + '\n');
  }
  const json = arg('json');
  if (json) writeFileSync(json, JSON.stringify(results, null, 1));
  const passing = arg('write-passing');
  if (passing && results.mlx) {
    const names = cases.filter((c) => results.mlx[c]?.status === 'pass');
    writeFileSync(
      passing,
      `# Node-suite cases that pass through the mlx backend. The tests fail if a listed case stops passing.\n${names.join('\n')}\n`,
    );
  }
}

if (flag('worker')) void worker();
else
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });

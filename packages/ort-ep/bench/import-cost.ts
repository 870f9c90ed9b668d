// What `import '@mlx/ort-ep'` costs a fresh process, beside `import 'onnxruntime-node'`: each in a
// process of its own, alternated over rounds; the CPU time (user + system, all threads) and the
// wall time of the import alone (the process's start excluded), medians and the ratio, with the
// load average. The package is imported as an application would: its built dist (exports'
// `import` condition), so build first (tools/dev builds it; `turbo run build` otherwise).
//   tools/dev bench import-cost [--rounds 15]
import { spawnSync } from 'node:child_process';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = dirname(fileURLToPath(import.meta.url));
const { values } = parseArgs({ options: { rounds: { type: 'string', default: '15' } } });
const rounds = Number(values.rounds);
if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`--rounds must be a positive integer, got ${values.rounds}`);

const probe = (spec: string) =>
  `const c0 = process.cpuUsage(); const t0 = performance.now();
   await import(${JSON.stringify(spec)});
   const c = process.cpuUsage(c0);
   console.log(JSON.stringify({ cpu: (c.user + c.system) / 1000, wall: performance.now() - t0 }));`;

const engines = [
  { name: 'onnxruntime-node', spec: 'onnxruntime-node' },
  { name: '@mlx/ort-ep', spec: '@mlx/ort-ep' },
];
const samples = new Map<string, { cpu: number[]; wall: number[] }>(engines.map((e) => [e.name, { cpu: [], wall: [] }]));
const load0 = loadavg();
for (let r = 0; r < rounds; r++) {
  for (const e of r % 2 ? [...engines].reverse() : engines) {
    // From the package folder: '@mlx/ort-ep' resolves to itself (its dist), onnxruntime-node to its dev dependency.
    const p = spawnSync(process.execPath, ['--input-type=module', '-e', probe(e.spec)], { cwd: join(here, '..'), encoding: 'utf8' });
    if (p.status !== 0) throw new Error(`${e.name}: ${p.stderr}`);
    const m = JSON.parse(p.stdout.trim().split('\n').at(-1)!);
    samples.get(e.name)!.cpu.push(m.cpu);
    samples.get(e.name)!.wall.push(m.wall);
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const ref = samples.get('onnxruntime-node')!;
console.log(
  `import cost, fresh process each, ${rounds} rounds alternated; load average ${load0.map((x) => x.toFixed(2)).join(' / ')} at the start, ${loadavg()
    .map((x) => x.toFixed(2))
    .join(' / ')} at the end\n`,
);
console.log('| import | CPU ms (median) | wall ms (median) | CPU ÷ onnxruntime-node |');
console.log('|---|---|---|---|');
for (const e of engines) {
  const s = samples.get(e.name)!;
  console.log(
    `| ${e.name} | ${median(s.cpu).toFixed(1)} | ${median(s.wall).toFixed(1)} | ${(median(s.cpu) / median(ref.cpu)).toFixed(2)} |`,
  );
}

// Generates OPERATORS.md from the registry (never written by hand). `--check` exits 1 when stale.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultRegistry } from '../src/ops/index.js';

const out = join(dirname(fileURLToPath(import.meta.url)), '..', 'OPERATORS.md');

export function operatorsMarkdown(): string {
  const byDomain = new Map<string, Map<string, { ranges: string[]; notes: string[]; files: Set<string> }>>();
  for (const e of defaultRegistry.entries()) {
    const d = byDomain.get(e.domain) ?? byDomain.set(e.domain, new Map()).get(e.domain)!;
    const op = d.get(e.opType) ?? d.set(e.opType, { ranges: [], notes: [], files: new Set() }).get(e.opType)!;
    op.ranges.push(e.until ? `${e.since}-${e.until}` : `${e.since}+`);
    op.files.add(`src/ops/${defaultRegistry.familyOf(e)}.ts`);
    if (e.note) op.notes.push(e.note);
  }
  let md =
    '# Operators of the MLX execution provider\n\nGenerated from the op registry by `scripts/operators.ts`; do not edit.\n' +
    'Each row is an op the registry claims, with the opset versions it implements. A node can still be\n' +
    "refused by its entry's check (an attribute value or element type it does not support); `mlx-ort check\nmodel.onnx` says which and why.\n";
  for (const [domain, ops] of [...byDomain].sort()) {
    md += `\n## ${domain} (${ops.size} ops)\n\n| op | opsets | file | notes |\n|---|---|---|---|\n`;
    for (const [op, info] of [...ops].sort()) {
      const files = [...info.files].map((f) => `[${f.slice('src/ops/'.length)}](${f})`).join(', ');
      md += `| ${op} | ${info.ranges.sort((a, b) => parseInt(a, 10) - parseInt(b, 10)).join(', ')} | ${files} | ${info.notes.join('; ')} |\n`;
    }
  }
  return md;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const text = operatorsMarkdown();
  if (process.argv.includes('--check')) {
    if (!existsSync(out) || readFileSync(out, 'utf8') !== text) {
      console.error('packages/ort-ep/OPERATORS.md is stale: run `pnpm --filter @mlx/ort-ep operators`');
      process.exit(1);
    }
  } else {
    writeFileSync(out, text);
    console.log(`wrote ${out}`);
  }
}

// Generates src/generated/ops.ts and src/generated/ext.ts: one safe TypeScript function per
// mechanical op of the ABI spec (packages/sys/spec, kind 'op'), converting each parameter as the
// type table (spec/types.ts) says. MLX's ops go to ops.ts; the project's own kernels
// (spec/kernels/) to ext.ts, @mlx/core's `ext` namespace, so that they are never mistaken for
// MLX's. `--check` exits 1 when a file is stale.
import { readFileSync, writeFileSync, existsSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isKernelGroup, spec } from '../../sys/spec/index.js';
import { isListAt, isOutParam as isOut, parseProto } from '../../sys/spec/dsl.js';
import { resolveCType, type IntListRule } from '../../sys/spec/types.js';

// `--root DIR` writes (or checks) DIR/src/generated/*.ts instead of this package's (for tests).
const rootArg = process.argv.indexOf('--root');
const root = rootArg > 0 ? process.argv[rootArg + 1] : join(dirname(fileURLToPath(import.meta.url)), '..');

const camel = (s: string) => s.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
const reserved = new Set(['function', 'default', 'var', 'new', 'delete', 'in', 'class', 'const', 'let', 'import', 'export']);
const jsName = (n: string) => (reserved.has(n) ? `${n}_` : camel(n));

const namespaces = ['fast', 'linalg', 'random', 'fft'];

/**
 * What MLX makes of an int list, so that core can refuse values it would misread: shapes, sizes and
 * repeat counts are dimensions (0 to 2^31-1; reshape and unflatten also take -1 for "inferred"),
 * slice strides must not be 0 (MLX divides by them), everything else (axes, starts, stops,
 * shifts, paddings, split indices) only has to fit in int32; MLX checks the rest.
 */
function listRule(fnName: string, param: string): IntListRule {
  if (param === 'shape') return fnName === 'mlx_reshape' || fnName === 'mlx_unflatten' ? 'dimOrInfer' : 'dim';
  if (['slice_sizes', 'slice_size', 'reps', 'n'].includes(param)) return 'dim';
  if (param === 'strides' && /^mlx_slice/.test(fnName)) return 'nonzero';
  return 'any';
}

const isOperand = (type: string): boolean => {
  const r = resolveCType(type);
  return !r.pointer && r.row.core === 'operand';
};

let body = '';
let extBody = '';
const extNames: string[] = [];
const nsMembers: Record<string, [string, string][]> = { fast: [], linalg: [], random: [], fft: [] };
let count = 0;

for (const [group, list] of Object.entries(spec)) {
  for (const s of list) {
    if (s.kind !== 'op') continue;
    const fn = parseProto(s.proto);
    const outs = fn.params.filter(isOut);
    const ins = fn.params.filter((p) => !isOut(p));
    const name = jsName(fn.name.replace(/^mlxc?_/, ''));
    const sig: string[] = [];
    const pre: string[] = [];
    const args: string[] = [];
    // A random key (uint32) is not a value operand: it must not decide the dtype of JS scalars
    // beside it (randint(-3, 4, key) would wrap -3 to a uint32).
    const arrayParams = ins.filter((p) => isOperand(p.type) && p.name !== 'key').map((p) => jsName(p.name));
    const refArray = arrayParams.length > 1 ? '_ref' : '';
    if (refArray) pre.push(`const _ref = firstArray(${arrayParams.join(', ')});`);
    let hasStream = false;
    for (let i = 0; i < ins.length; i++) {
      const p = ins[i];
      const v = jsName(p.name);
      const label = `${name}: ${v}`;
      const { name: ctype, row, pointer } = resolveCType(p.type);
      if (isListAt(ins, i)) {
        if (!row.coreList) throw new Error(`${fn.name}: no core conversion for a list of '${ctype}' (${p.name}) in sys/spec/types.ts`);
        const conv = row.coreList.arg(v, label, listRule(fn.name, p.name));
        if (p.nullable) {
          sig.push(`${v}?: ${row.coreList.type} | null`);
          args.push(`${v} == null ? null : ${conv}`, `${v} == null ? 0 : ${v}.length`);
        } else {
          sig.push(`${v}: ${row.coreList.type}`);
          args.push(conv, `${v}.length`);
        }
        i++;
        continue;
      }
      const core = pointer ? undefined : p.nullable ? (row.coreNullable ?? row.core) : row.core;
      if (!core) throw new Error(`${fn.name}: no core conversion for parameter type '${p.type}' (${p.name}) in sys/spec/types.ts`);
      if (core === 'operand') {
        const take = `t.arg(${v}${refArray ? `, ${refArray}` : ''})`;
        if (p.nullable) {
          sig.push(`${v}?: ArrayLike | null`);
          pre.push(`const _${v} = ${v} == null ? null : ${take};`);
          args.push(`_${v} ? _${v}.handle : NULL_HANDLE`);
        } else {
          sig.push(`${v}: ArrayLike`);
          pre.push(`const _${v} = ${take};`);
          args.push(`_${v}.handle`);
        }
      } else if (core === 'stream') {
        hasStream = true;
        args.push('streamHandle(opts)');
      } else {
        sig.push(core.optional ? `${v}?: ${core.type}` : core.default ? `${v}: ${core.type} = ${core.default}` : `${v}: ${core.type}`);
        args.push(core.arg(v, label));
      }
    }
    // An optional parameter followed by a required one takes null/undefined explicitly.
    let requiredAfter = false;
    for (let k = sig.length - 1; k >= 0; k--) {
      const m = /^(\w+)\?: (.*)$/.exec(sig[k]);
      if (m && requiredAfter) sig[k] = `${m[1]}: ${m[2]} | undefined`;
      else if (!m && !sig[k].includes(' = ')) requiredAfter = true;
    }
    if (hasStream) sig.push('opts?: OpOptions');
    const cname = fn.name;
    const results = outs.map((o) => {
      const { row, pointer } = resolveCType(o.type);
      if (pointer !== 'out' || !row.coreResult)
        throw new Error(`${cname}: no core result for out-parameter '${o.type}' in sys/spec/types.ts`);
      return row.coreResult;
    });
    const rs = outs.length === 1 ? ['res'] : outs.map((_, i) => `r${i}`);
    const passed = [...results.map((r, i) => (r.pass ? r.pass(rs[i]) : rs[i])), ...args].join(', ');
    const checked = `t.check(fn.${cname}(${passed}), '${cname}');`;
    let ret: string;
    let call: string;
    if (outs.length === 0) {
      ret = 'void';
      call = checked;
    } else if (outs.length === 1) {
      ret = results[0].type;
      call = `const res = ${results[0].init};\n    ${checked}\n    return ${results[0].take('res')};`;
    } else {
      ret = `[${results.map((r) => r.type).join(', ')}]`;
      call = `${rs.map((r, i) => `const ${r} = ${results[i].init};`).join(' ')}\n    ${checked}\n    return [${results.map((r, i) => r.take(rs[i])).join(', ')}];`;
    }
    const cProto = `\`${s.proto.replace(/\/\*.*?\*\//g, '').replace(/\s+/g, ' ')}\``;
    const kernel = isKernelGroup(group);
    // A kernel's doc comment says what it computes (the spec's note): no MLX documentation covers it.
    const doc = kernel && s.note ? `/**\n * ${s.note.replace(/\*\//g, '* /')}.\n *\n * ${cProto}\n */` : `/** ${cProto} */`;
    const text = `\n${doc}\nexport function ${name}(${sig.join(', ')}): ${ret} {\n  const t = new CallTemps();\n  try {\n    ${pre.join('\n    ')}${pre.length ? '\n    ' : ''}${call}\n  } finally {\n    t.release();\n  }\n}\n`;
    if (kernel) {
      extBody += text;
      extNames.push(name);
      continue;
    }
    body += text;
    count++;
    for (const ns of namespaces) {
      if (fn.name.startsWith(`mlx_${ns}_`)) nsMembers[ns].push([camel(fn.name.slice(`mlx_${ns}_`.length)), name]);
    }
  }
}

let nsText = '';
for (const ns of namespaces) {
  nsText += `\n/** MLX's \`${ns}\` functions under their own names. */\nexport const ${ns}Ops = {\n${nsMembers[ns].map(([k, v]) => `  ${k}: ${v},`).join('\n')}\n} as const;\n`;
}

const imports = `import { Array, type ArrayLike } from '../array.js';
import { CallTemps, NULL_HANDLE, firstArray, takeVector } from '../call.js';
import { dtypeCode, type Dtype } from '../dtype.js';
import { fn } from '../native.js';
import { streamHandle, type OpOptions } from '../stream.js';
import { fftNormCode, type FftNorm } from '../enums.js';
import { toCString, toInt32, toInt32Array, toInt64Array } from '../ints.js';
`;

/** The import lines, each keeping only the names that `code` uses (none: the line goes). */
function importsFor(code: string): string {
  return imports
    .split('\n')
    .filter((l) => l)
    .map((l) => {
      const m = /^import \{ (.*) \} from (.*);$/.exec(l)!;
      const used = m[1].split(', ').filter((n) => new RegExp(`\\b${n.replace(/^type /, '')}\\b`).test(code));
      return used.length ? `import { ${used.join(', ')} } from ${m[2]};\n` : '';
    })
    .join('');
}

const files = new Map<string, string>();
files.set(
  'ops.ts',
  `// Generated by packages/core/scripts/generate-ops.ts from packages/sys/spec. Do not edit.
// One function per op of the ABI; scalars are accepted wherever an array is and take the dtype
// of the first array operand (MLX's weak scalar rule); the stream comes from opts or the default.
${imports}${body}${nsText}
export const generatedOpCount = ${count};
`,
);
files.set(
  'ext.ts',
  `// Generated by packages/core/scripts/generate-ops.ts from packages/sys/spec/kernels. Do not edit.
// The project's own CPU kernels (@mlx/sys's native/src/kernels/), not MLX's ops: each takes any
// array on any stream; float32 on a CPU stream runs the library's kernel, anything else the same
// computation from MLX's ops. Scalars and streams as in ops.ts.
${importsFor(extBody)}${extBody}
/** The project's own kernels under their names: @mlx/core's \`ext\` namespace. */
export const extOps = {
${extNames.map((n) => `  ${n},`).join('\n')}
} as const;
`,
);

const stale: string[] = [];
for (const [name, text] of files) {
  const out = join(root, 'src/generated', name);
  if (process.argv.includes('--check')) {
    const cur = existsSync(out) ? readFileSync(out, 'utf8') : '';
    if (cur !== text) stale.push(name);
  } else {
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, text);
  }
}
if (stale.length) {
  for (const name of stale)
    console.error(
      `packages/core/src/generated/${name} is stale: run \`corepack pnpm --filter @mlx/core exec tsx scripts/generate-ops.ts\``,
    );
  process.exit(1);
}
if (!process.argv.includes('--check')) console.log(`wrote ${count} ops and ${extNames.length} kernels`);

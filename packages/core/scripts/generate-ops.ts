// Generates src/generated/ops.ts: one safe TypeScript function per mechanical op of the ABI spec
// (packages/sys/spec, kind 'op'). `--check` exits 1 when the file is stale.
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spec } from '../../sys/spec/index.js';
import { parseProto, type Param } from '../../sys/spec/dsl.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'src/generated/ops.ts');

const camel = (s: string) => s.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
const isOut = (p: Param) => /^res(_\d+)?$/.test(p.name) && p.type.endsWith('*') && !p.type.startsWith('const');
const bare = (t: string) => t.replace(/^const /, '').trim();
const reserved = new Set(['function', 'default', 'var', 'new', 'delete', 'in', 'class', 'const', 'let', 'import', 'export']);
const jsName = (n: string) => (reserved.has(n) ? `${n}_` : camel(n));

const namespaces = ['fast', 'linalg', 'random', 'fft'];

let body = '';
const nsMembers: Record<string, [string, string][]> = { fast: [], linalg: [], random: [], fft: [] };
let count = 0;

for (const [group, list] of Object.entries(spec)) {
  for (const s of list) {
    if (s.kind !== 'op') continue;
    const fn = parseProto(s.proto);
    const outs = fn.params.filter(isOut);
    const ins = fn.params.filter((p) => !isOut(p));
    const name = jsName(fn.name.replace(/^mlx_/, ''));
    const sig: string[] = [];
    const pre: string[] = [];
    const args: string[] = [];
    // A random key (uint32) is not a value operand: it must not decide the dtype of JS scalars
    // beside it (randint(-3, 4, key) would wrap -3 to a uint32).
    const arrayParams = ins.filter((p) => bare(p.type) === 'mlx_array' && p.name !== 'key').map((p) => jsName(p.name));
    const refArray = arrayParams.length > 1 ? '_ref' : '';
    if (refArray) pre.push(`const _ref = firstArray(${arrayParams.join(', ')});`);
    let hasStream = false;
    for (let i = 0; i < ins.length; i++) {
      const p = ins[i];
      const t = bare(p.type);
      const v = jsName(p.name);
      const next = ins[i + 1];
      if (t.endsWith('*') && next && next.name === `${p.name}_num`) {
        const elem = t.slice(0, -1).trim();
        const ctor = elem === 'int64_t' ? 'BigInt64Array' : elem === 'uint64_t' ? 'BigUint64Array' : 'Int32Array';
        const conv = elem.includes('64') ? `${ctor}.from(${v}, (x) => BigInt(x))` : `${ctor}.from(${v})`;
        if (p.nullable) {
          sig.push(`${v}?: readonly number[] | null`);
          args.push(`${v} == null ? null : ${conv}`, `${v} == null ? 0 : ${v}.length`);
        } else {
          sig.push(`${v}: readonly number[]`);
          args.push(conv, `${v}.length`);
        }
        i++;
        continue;
      }
      if (t === 'mlx_array') {
        if (p.nullable) {
          sig.push(`${v}?: ArrayLike | null`);
          pre.push(`const _${v} = ${v} == null ? null : t.arg(${v}${refArray ? `, ${refArray}` : ''});`);
          args.push(`_${v} ? _${v}.handle : NULL_HANDLE`);
        } else {
          sig.push(`${v}: ArrayLike`);
          pre.push(`const _${v} = t.arg(${v}${refArray ? `, ${refArray}` : ''});`);
          args.push(`_${v}.handle`);
        }
      } else if (t === 'mlx_stream') {
        hasStream = true;
        args.push('streamHandle(opts)');
      } else if (t === 'mlx_vector_array') {
        sig.push(`${v}: readonly ArrayLike[]`);
        args.push(`t.vector(${v})`);
      } else if (t === 'mlx_dtype') {
        sig.push(`${v}: Dtype`);
        args.push(`dtypeCode(${v})`);
      } else if (t === 'mlx_optional_dtype') {
        sig.push(`${v}?: Dtype | null`);
        args.push(`${v} == null ? { value: 0, has_value: false } : { value: dtypeCode(${v}), has_value: true }`);
      } else if (t === 'mlx_optional_int' || t === 'mlx_optional_float') {
        sig.push(`${v}?: number | null`);
        args.push(`${v} == null ? { value: 0, has_value: false } : { value: ${v}, has_value: true }`);
      } else if (t === 'mlx_fft_norm') {
        sig.push(`${v}: FftNorm = 'backward'`);
        args.push(`fftNormCode(${v})`);
      } else if (t === 'char*') {
        sig.push(p.nullable ? `${v}?: string | null` : `${v}: string`);
        args.push(p.nullable ? `${v} ?? null` : v);
      } else if (t === 'bool') {
        sig.push(`${v}: boolean`);
        args.push(v);
      } else if (/^(size_t|u?int64_t)$/.test(t)) {
        sig.push(`${v}: number | bigint`);
        args.push(v);
      } else {
        sig.push(`${v}: number`);
        args.push(v);
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
    let ret: string;
    let call: string;
    const cname = fn.name;
    if (outs.length === 1 && bare(outs[0].type) === 'mlx_array*') {
      ret = 'Array';
      call = `const res = { ctx: null };\n    t.check(fn.${cname}(res, ${args.join(', ')}), '${cname}');\n    return Array.fromHandle(res);`;
    } else if (outs.length === 1 && bare(outs[0].type) === 'mlx_vector_array*') {
      ret = 'Array[]';
      call = `const res = { ctx: null };\n    t.check(fn.${cname}(res, ${args.join(', ')}), '${cname}');\n    return takeVector(res);`;
    } else if (outs.length > 1 && outs.every((o) => bare(o.type) === 'mlx_array*')) {
      ret = `[${outs.map(() => 'Array').join(', ')}]`;
      const rs = outs.map((_, i) => `r${i}`);
      call = `${rs.map((r) => `const ${r} = { ctx: null };`).join(' ')}\n    t.check(fn.${cname}(${rs.join(', ')}, ${args.join(', ')}), '${cname}');\n    return [${rs.map((r) => `Array.fromHandle(${r})`).join(', ')}];`;
    } else if (outs.length === 1 && bare(outs[0].type) === 'bool*') {
      ret = 'boolean';
      call = `const res = [false];\n    t.check(fn.${cname}(res as never, ${args.join(', ')}), '${cname}');\n    return res[0];`;
    } else if (outs.length === 0) {
      ret = 'void';
      call = `t.check(fn.${cname}(${args.join(', ')}), '${cname}');`;
    } else throw new Error(`${cname}: unsupported outputs`);
    body += `\n/** \`${s.proto.replace(/\/\*.*?\*\//g, '').replace(/\s+/g, ' ')}\` */\nexport function ${name}(${sig.join(', ')}): ${ret} {\n  const t = new CallTemps();\n  try {\n    ${pre.join('\n    ')}${pre.length ? '\n    ' : ''}${call}\n  } finally {\n    t.release();\n  }\n}\n`;
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

const text = `// Generated by packages/core/scripts/generate-ops.ts from packages/sys/spec. Do not edit.
// One function per op of the ABI; scalars are accepted wherever an array is and take the dtype
// of the first array operand (MLX's weak scalar rule); the stream comes from opts or the default.
import { Array, type ArrayLike } from '../array.js';
import { CallTemps, NULL_HANDLE, firstArray, takeVector } from '../call.js';
import { dtypeCode, type Dtype } from '../dtype.js';
import { fn } from '../native.js';
import { streamHandle, type OpOptions } from '../stream.js';
import { fftNormCode, type FftNorm } from '../enums.js';
${body}${nsText}
export const generatedOpCount = ${count};
`;

if (process.argv.includes('--check')) {
  const cur = existsSync(out) ? readFileSync(out, 'utf8') : '';
  if (cur !== text) {
    console.error('packages/core/src/generated/ops.ts is stale: run `pnpm --filter @mlx/core generate`');
    process.exit(1);
  }
} else {
  writeFileSync(out, text);
  console.log(`wrote ${count} ops`);
}

// The public API of each package, as the TypeScript compiler sees its entry points (the exports map's
// `source` entries, the same declarations tsc emits into dist/*.d.ts): every exported name, whether
// it exists at run time, and its declared shape. Written to packages/<p>/api-report.md and compared
// by each package's public-api test, so that a change to a package's surface shows in review.
//
//   node tools/api-report.mjs            rewrite every report (and the generated README indexes)
//   node tools/api-report.mjs --check    exit 1 when a report or README index is stale
//
// A README may hold a generated index of names between `<!-- api-index:<entry> -->` and
// `<!-- /api-index -->` (the many generated ops of @mlx/core); everything else a README says about
// its API is written by hand. Each package's test also checks that every runtime export is named in
// its README.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const PACKAGES = ['sys', 'core', 'kernels', 'ort-ep'];

/** The entry points of a package: subpath -> source file (the exports map's `source` condition). */
function entries(dir) {
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  const out = [];
  for (const [sub, target] of Object.entries(manifest.exports ?? {})) {
    if (typeof target === 'object' && target?.source)
      out.push({ subpath: join(manifest.name, sub).replace(/\/\.$/, ''), file: join(dir, target.source) });
  }
  return { name: manifest.name, entries: out };
}

const flags = ts.TypeFormatFlags.NoTruncation | ts.TypeFormatFlags.WriteArrayAsGenericType;

/** One line of text for a type, with import("...") paths made relative to the repository. */
function clean(text) {
  return text
    .replace(/import\("([^"]+)"(, \{ with: \{ "resolution-mode": "(import|require)" \} \})?\)/g, (_, p) =>
      p.startsWith('/') ? `import("${relative(ROOT, p).replace(/^node_modules\/\.pnpm\/[^/]+\/node_modules\//, '')}")` : `import("${p}")`,
    )
    .replace(/\s+/g, ' ')
    .trim();
}

function declarationKind(sym) {
  const f = sym.flags;
  const S = ts.SymbolFlags;
  if (f & S.Class) return 'class';
  if (f & S.Enum) return 'enum';
  if (f & S.Function) return 'function';
  if (f & S.ValueModule || f & S.NamespaceModule) return 'namespace';
  if (f & S.Variable) return 'const';
  if (f & S.Interface) return 'interface';
  if (f & S.TypeAlias) return 'type';
  return 'other';
}

/** The report's lines for one exported symbol. */
function describe(checker, name, exported) {
  const sym = exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported;
  const kind = declarationKind(sym);
  const runtime = !!(sym.flags & ts.SymbolFlags.Value);
  const decl = sym.valueDeclaration ?? sym.declarations?.[0];
  const lines = [];
  const head = `### ${name} (${kind}${runtime ? '' : ', type only'})`;
  lines.push(head);
  if (kind === 'function') {
    const type = checker.getTypeOfSymbolAtLocation(sym, decl);
    for (const sig of type.getCallSignatures()) lines.push(`- \`${clean(checker.signatureToString(sig, decl, flags))}\``);
  } else if (kind === 'class') {
    const ctorType = checker.getTypeOfSymbolAtLocation(sym, decl);
    for (const sig of ctorType.getConstructSignatures()) lines.push(`- \`new ${clean(checker.signatureToString(sig, decl, flags))}\``);
    const statics = checker.getPropertiesOfType(ctorType).filter((p) => p.name !== 'prototype' && !isPrivate(p));
    for (const p of statics.sort(byName))
      lines.push(`- \`static ${p.name}: ${clean(checker.typeToString(checker.getTypeOfSymbolAtLocation(p, decl), decl, flags))}\``);
    const inst = checker.getDeclaredTypeOfSymbol(sym);
    for (const p of checker
      .getPropertiesOfType(inst)
      .filter((p) => !isPrivate(p))
      .sort(byName))
      lines.push(`- \`${p.name}: ${clean(checker.typeToString(checker.getTypeOfSymbolAtLocation(p, decl), decl, flags))}\``);
  } else if (kind === 'namespace') {
    const type = checker.getTypeOfSymbolAtLocation(sym, decl);
    for (const p of checker.getPropertiesOfType(type).sort(byName)) lines.push(`- \`${p.name}\``);
  } else if (kind === 'const' || kind === 'enum') {
    const type = checker.getTypeOfSymbolAtLocation(sym, decl);
    lines.push(`- \`${clean(checker.typeToString(type, decl, flags))}\``);
  } else if (kind === 'interface') {
    const type = checker.getDeclaredTypeOfSymbol(sym);
    for (const p of checker.getPropertiesOfType(type).sort(byName)) {
      const opt = p.flags & ts.SymbolFlags.Optional ? '?' : '';
      lines.push(`- \`${memberName(p)}${opt}: ${clean(checker.typeToString(checker.getTypeOfSymbolAtLocation(p, decl), decl, flags))}\``);
    }
  } else if (kind === 'type') {
    const d = sym.declarations?.find(ts.isTypeAliasDeclaration);
    lines.push(`- \`${clean(d ? d.type.getText() : checker.typeToString(checker.getDeclaredTypeOfSymbol(sym), decl, flags))}\``);
  }
  return { name, kind, runtime, text: lines.join('\n') };
}

const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
/** A member's name as source spells it: a well-known symbol's (`__@asyncIterator@123`, numbered per program) as [Symbol.asyncIterator]. */
const memberName = (p) => p.name.replace(/^__@(\w+)@\d+$/, '[Symbol.$1]');
function isPrivate(p) {
  const d = p.valueDeclaration ?? p.declarations?.[0];
  if (!d) return false;
  // Members a class inherits from the platform (Error's captureStackTrace, stack, ...) are not its API.
  const file = d.getSourceFile().fileName;
  if (file.includes('/node_modules/') || /\/lib\.[^/]*\.d\.ts$/.test(file)) return true;
  const mods = ts.getCombinedModifierFlags(d);
  if (mods & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)) return true;
  if (p.name.startsWith('#') || p.name.startsWith('__')) return true;
  return /@internal/.test(
    ts
      .getJSDocTags(d)
      .map((t) => `@${t.tagName.text}`)
      .join(' '),
  );
}

/** Every entry point's exports of the package in `dir`. */
export function apiOf(dir) {
  const { name, entries: list } = entries(dir);
  const config = ts.getParsedCommandLineOfConfigFile(
    join(dir, 'tsconfig.json'),
    {},
    { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} },
  );
  const program = ts.createProgram(
    list.map((e) => e.file),
    { ...config.options, noEmit: true },
  );
  const checker = program.getTypeChecker();
  return {
    name,
    entries: list.map((e) => {
      const sf = program.getSourceFile(e.file);
      const mod = checker.getSymbolAtLocation(sf);
      const exports = mod ? checker.getExportsOfModule(mod) : [];
      return { subpath: e.subpath, exports: exports.map((s) => describe(checker, s.name, s)).sort(byName) };
    }),
  };
}

export function reportText(api) {
  const out = [
    `# Public API of ${api.name}`,
    '',
    'Generated by `node tools/api-report.mjs` from the entry points; do not edit. A change here is a',
    'change to what users of the package can import: it needs a changeset, and every runtime name',
    'must be named in the README.',
  ];
  for (const e of api.entries) {
    const runtime = e.exports.filter((x) => x.runtime).length;
    out.push('', `## ${e.subpath}`, '', `${e.exports.length} exports, ${runtime} of them at run time.`);
    for (const x of e.exports) out.push('', x.text);
  }
  return `${out.join('\n')}\n`;
}

const INDEX = /<!-- api-index:([^ ]+) -->\n[\s\S]*?<!-- \/api-index -->/g;

/** The README with each generated index block rewritten: the runtime names that the prose does not already name. */
export function readmeWithIndex(readme, api) {
  const prose = readme.replace(INDEX, '');
  return readme.replace(INDEX, (_, subpath) => {
    const e = api.entries.find((x) => x.subpath === subpath);
    if (!e) throw new Error(`README index names entry '${subpath}', which ${api.name} does not have`);
    const names = e.exports.filter((x) => x.runtime && !namedIn(prose, x.name)).map((x) => `\`${x.name}\``);
    return `<!-- api-index:${subpath} -->\n${names.join(', ')}\n<!-- /api-index -->`;
  });
}

export function namedIn(text, name) {
  const esc = name.replace(/[$]/g, '\\$');
  return new RegExp(`(^|[^A-Za-z0-9_$])${esc}([^A-Za-z0-9_$]|$)`).test(text);
}

/** For a package's test: the committed report, the report of the code, and runtime names its README lacks. */
export function checkPackage(dir) {
  const api = apiOf(dir);
  const readme = readFileSync(join(dir, 'README.md'), 'utf8');
  let committed = '';
  try {
    committed = readFileSync(join(dir, 'api-report.md'), 'utf8');
  } catch {
    // none yet
  }
  const missing = [];
  for (const e of api.entries)
    for (const x of e.exports) if (x.runtime && !namedIn(readme, x.name)) missing.push(`${e.subpath}: ${x.name}`);
  return { api, report: reportText(api), committed, readme, readmeExpected: readmeWithIndex(readme, api), missing };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const check = process.argv.includes('--check');
  let stale = 0;
  for (const p of PACKAGES) {
    const dir = join(ROOT, 'packages', p);
    const r = checkPackage(dir);
    if (check) {
      if (r.report !== r.committed) {
        console.error(`${relative(ROOT, dir)}/api-report.md is stale: run node tools/api-report.mjs`);
        stale++;
      }
      if (r.readme !== r.readmeExpected) {
        console.error(`${relative(ROOT, dir)}/README.md's api-index is stale: run node tools/api-report.mjs`);
        stale++;
      }
    } else {
      writeFileSync(join(dir, 'api-report.md'), r.report);
      if (r.readme !== r.readmeExpected) writeFileSync(join(dir, 'README.md'), r.readmeExpected);
      const again = checkPackage(dir);
      console.log(`${r.api.name}: ${r.api.entries.map((e) => `${e.subpath} ${e.exports.length} exports`).join(', ')}`);
      if (again.missing.length) console.log(`  not named in the README: ${again.missing.join(', ')}`);
    }
  }
  process.exit(stale ? 1 : 0);
}

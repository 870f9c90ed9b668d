// CONTRIBUTING.md names files to touch and commands to run: every repository path it names in
// code (`packages/...`, `tools/...`, `docs/...`, `.changeset/...`, root files) must exist, a
// placeholder path (`<family>`, `<concept>`, `*`, `YYYY`) up to its last fixed folder. Paths of
// the native regroup that has not landed yet are listed in a `<!-- confirm after ... -->` comment:
// they may be missing until they exist, and then the comment must go (the guide is confirmed).
// Every benchmark script is named too, since the guide lists what `tools/dev bench NAME` runs.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const guide = readFileSync(join(repo, 'CONTRIBUTING.md'), 'utf8');

const ROOTS = /^(packages|tools|docs|\.changeset|\.ci)\/|^(README|RELEASING|CONTRIBUTING)\.md$/;
/** The part of a path that must exist: all of it, or the folders before its first placeholder. */
const fixedPart = (path: string) => {
  const i = path.search(/[<*{]|YYYY|NAME/);
  return i < 0 ? path : path.slice(0, path.lastIndexOf('/', i) + 1);
};

/** Repository paths in code spans and code blocks, trailing punctuation dropped. */
function namedPaths(text: string): string[] {
  const code = [...text.matchAll(/```[\s\S]*?```|`[^`\n]+`/g)].map((m) => m[0].replace(/`/g, ' '));
  const words = code.flatMap((c) => c.split(/\s+/)).map((w) => w.replace(/[),.:;]+$/, '').replace(/^\(/, ''));
  return [...new Set(words.filter((w) => ROOTS.test(w)))];
}

/** Paths the guide marks as not there yet: `<!-- confirm after <what>: path, path -->`. */
function pending(text: string): { what: string; paths: string[] }[] {
  return [...text.matchAll(/<!-- confirm after ([^:]+): ([^>]*?) -->/g)].map((m) => ({
    what: m[1],
    paths: m[2].split(',').map((p) => p.trim()),
  }));
}

describe('CONTRIBUTING.md', () => {
  const paths = namedPaths(guide);
  // Marks written as examples in code spans are not marks.
  const marks = pending(guide.replace(/`[^`\n]*`/g, ''));
  const waiting = marks.flatMap((m) => m.paths);

  it('names repository paths (the extraction works)', () => {
    expect(paths).toEqual(
      expect.arrayContaining(['packages/ort-ep/OPERATORS.md', 'tools/check-commits.mjs', 'packages/ort-ep/src/ops/<family>.ts']),
    );
    expect(fixedPart('packages/ort-ep/src/ops/<family>.ts')).toBe('packages/ort-ep/src/ops/');
    expect(fixedPart('docs/benchmarks/YYYY-MM-DD-<machine>.md')).toBe('docs/benchmarks/');
  });

  it('every path it names exists (marked native paths: once they exist)', () => {
    const missing = paths
      .map(fixedPart)
      .filter((p) => !existsSync(join(repo, p)))
      .filter((p) => !waiting.some((w) => p.startsWith(w)));
    expect(missing).toEqual([]);
  });

  it('paths marked "confirm after" are confirmed once they exist', () => {
    const landed = marks.flatMap((m) => m.paths.filter((p) => existsSync(join(repo, p))).map((p) => `${p} (${m.what})`));
    expect(
      landed,
      'these exist now: check the steps of CONTRIBUTING.md that name them against the code, then delete the confirm comment',
    ).toEqual([]);
  });

  it('names every benchmark that tools/dev bench runs', () => {
    // Scripts that other benchmarks import or spawn, not run on their own.
    const helpers = new Set(['chart', 'model-worker', 'decode-worker', 'decoder-sizes']);
    const benches = readdirSync(join(repo, 'packages')).flatMap((pkg) => {
      const dir = join(repo, 'packages', pkg, 'bench');
      return existsSync(dir)
        ? readdirSync(dir)
            .filter((f) => f.endsWith('.ts'))
            .map((f) => f.slice(0, -3))
        : [];
    });
    expect(benches.filter((b) => !helpers.has(b) && !guide.includes(`\`${b}\``))).toEqual([]);
  });
});

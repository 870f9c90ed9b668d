// Relative links of the repository's Markdown (the READMEs, CONTRIBUTING.md, RELEASING.md,
// docs/): every target exists, and every #anchor names a heading of its target, as GitHub makes
// anchors from headings. Moving text between files (docs/benchmarks/ holds what the READMEs
// used to) breaks links silently otherwise.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repo = fileURLToPath(new URL('../../../', import.meta.url));

function markdownFiles(): string[] {
  const out = readdirSync(repo)
    .filter((f) => f.endsWith('.md'))
    .map((f) => join(repo, f));
  const walk = (dir: string) => {
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name.endsWith('.md')) out.push(p);
    }
  };
  walk(join(repo, 'docs'));
  for (const pkg of readdirSync(join(repo, 'packages'))) {
    for (const f of ['README.md', 'OPERATORS.md']) if (existsSync(join(repo, 'packages', pkg, f))) out.push(join(repo, 'packages', pkg, f));
  }
  const npm = join(repo, 'packages/sys/npm');
  for (const target of readdirSync(npm)) if (existsSync(join(npm, target, 'README.md'))) out.push(join(npm, target, 'README.md'));
  return out;
}

/** Markdown without fenced code blocks and inline code, where link syntax is literal. */
const prose = (text: string) => text.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
const slug = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');

function anchorsOf(file: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of readFileSync(file, 'utf8')
    .replace(/^```[\s\S]*?^```/gm, '')
    .matchAll(/^#{1,6} (.+)$/gm)) {
    const s = slug(m[1]);
    const n = seen.get(s) ?? 0;
    seen.set(s, n + 1);
    out.add(n ? `${s}-${n}` : s);
  }
  return out;
}

describe('relative links in Markdown', () => {
  const files = markdownFiles();

  it('finds the documents', () => {
    expect(files.map((f) => relative(repo, f))).toEqual(expect.arrayContaining(['README.md', 'packages/ort-ep/README.md']));
  });

  it('the slug rule gives GitHub anchors', () => {
    expect(slug("On an NVIDIA H200 (MLX's CUDA build)")).toBe('on-an-nvidia-h200-mlxs-cuda-build');
    expect(slug('Decoding: outputs on the device, the KV cache in place, `generate`')).toBe(
      'decoding-outputs-on-the-device-the-kv-cache-in-place-generate',
    );
  });

  it('every target exists and every anchor is a heading there', () => {
    const broken: string[] = [];
    for (const file of files) {
      for (const m of prose(readFileSync(file, 'utf8')).matchAll(/!?\[[^\]]*\]\(([^)\s]+)\)/g)) {
        const link = m[1];
        if (/^[a-z][a-z+.-]*:/i.test(link)) continue; // https:, mailto:, ...
        const [path, anchor] = link.split('#');
        let target = path ? join(dirname(file), decodeURIComponent(path)) : file;
        if (!existsSync(target)) {
          broken.push(`${relative(repo, file)}: ${link} (no such file)`);
          continue;
        }
        if (!anchor) continue;
        if (statSync(target).isDirectory()) target = join(target, 'README.md');
        if (!target.endsWith('.md') || !existsSync(target) || !anchorsOf(target).has(anchor))
          broken.push(`${relative(repo, file)}: ${link} (no heading #${anchor} in ${relative(repo, target)})`);
      }
    }
    expect(broken).toEqual([]);
  });
});

// Figures that the root README and this package's README quote and that the repository can answer:
// each is read out of the README text and compared with what the code, the checked-in lists and
// the shared data hold, so a README that falls behind fails here instead of misleading a reader.
// Exact per-domain op counts live only in OPERATORS.md (generated, test/operators.test.ts): the
// root README states floors, so that adding an op does not touch it (CONTRIBUTING.md).
// Not checked, because only a run can answer them: onnxruntime-node's own conformance count, the
// GPU sample counts and every timing (docs/benchmarks/).
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { defaultRegistry } from '../src/ops/index.js';
import { prepareModel } from '../src/plan/prepare.js';
import { REWRITES } from '../src/plan/rewrite/index.js';
import { expectShared, sharedPath } from './helpers/shared.js';

const repo = fileURLToPath(new URL('../../../', import.meta.url));
const pkg = fileURLToPath(new URL('../', import.meta.url));
/** A file's text with every run of white space (line breaks included) as one space. */
const flat = (path: string) => readFileSync(path, 'utf8').replace(/\s+/g, ' ');
const rootReadme = flat(join(repo, 'README.md'));
const readme = flat(join(pkg, 'README.md'));

const WORDS: Record<string, number> = { one: 1, two: 2, three: 3, four: 4, five: 5, six: 6, seven: 7, eight: 8, nine: 9, ten: 10 };
const num = (s: string) => WORDS[s.toLowerCase()] ?? Number(s.replace(/,/g, ''));

/** The numbers captured by `pattern` in `text`; fails naming the pattern when the sentence is gone. */
function quoted(text: string, pattern: RegExp, where: string): number[] {
  const m = pattern.exec(text);
  if (!m) throw new Error(`${where} no longer says ${pattern}: update the README or this test`);
  return m.slice(1).map(num);
}

const lines = (path: string) =>
  readFileSync(path, 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));

describe('conformance counts', () => {
  const suite = sharedPath('onnx-node-tests/v1.22.0');
  const passing = lines(join(pkg, 'test/conformance/passing.txt'));
  const gpuPassing = lines(join(pkg, 'test/conformance/gpu-passing.txt'));

  it('the node suite: cases, passing, the rest and why', () => {
    expectShared(suite);
    const cases = readdirSync(suite).filter((d) => d.startsWith('test_'));
    const failing = cases.filter((c) => !passing.includes(c));
    const random = failing.filter((c) => /bernoulli|dropout/.test(c));
    const bernoulli = random.filter((c) => c.includes('bernoulli'));
    const imageDecoder = cases.filter((c) => c.startsWith('test_image_decoder'));
    expect(passing.every((c) => cases.includes(c))).toBe(true);
    expect(imageDecoder.every((c) => passing.includes(c))).toBe(true);

    const [rootCases] = quoted(rootReadme, /ONNX node suite \((\d+) cases/, 'README.md');
    const [rootPass, rootOther, rootRandom, rootOrdinal] = quoted(
      rootReadme,
      /\*\*(\d+) pass through `mlx`\*\* \(of the other (\d+), (\d+) are RNG-bound: .*?in the (\d+)th,/,
      'README.md',
    );
    expect({ rootCases, rootPass, rootOther, rootRandom, rootOrdinal }).toEqual({
      rootCases: cases.length,
      rootPass: passing.length,
      rootOther: failing.length,
      rootRandom: random.length,
      rootOrdinal: failing.length,
    });

    const [cases2] = quoted(readme, /`\.\.\/shared\/onnx-node-tests\/v1\.22\.0`, (\d+) cases\)/, 'packages/ort-ep/README.md');
    const [pass2] = quoted(readme, /The (\d+) cases of `test\/conformance\/passing\.txt`/, 'packages/ort-ep/README.md');
    const [other2, random2, bern2, drop2, ordinal2] = quoted(
      readme,
      /Of the (\d+) cases that do not pass, (\d+) are random \(Bernoulli (\d+), training-mode Dropout with a nonzero ratio (\d+)\)[^.]*\. The (\d+)th,/,
      'packages/ort-ep/README.md',
    );
    const [image2] = quoted(readme, /the (\w+) ImageDecoder cases pass/, 'packages/ort-ep/README.md');
    expect({ cases2, pass2, other2, random2, bern2, drop2, ordinal2, image2 }).toEqual({
      cases2: cases.length,
      pass2: passing.length,
      other2: failing.length,
      random2: random.length,
      bern2: bernoulli.length,
      drop2: random.length - bernoulli.length,
      ordinal2: failing.length,
      image2: imageDecoder.length,
    });
  });

  it('the GPU list', () => {
    const [n] = quoted(readme, /`test\/conformance\/gpu-passing\.txt` \((\d+) cases/, 'packages/ort-ep/README.md');
    const header = readFileSync(join(pkg, 'test/conformance/gpu-passing.txt'), 'utf8').replace(/\s+/g, ' ');
    const [m] = quoted(header, /(\d+) cases\./, 'test/conformance/gpu-passing.txt (its header comment)');
    expect([n, m]).toEqual([gpuPassing.length, gpuPassing.length]);
    expect(new Set(gpuPassing).size).toBe(gpuPassing.length);
  });
});

describe('model counts', () => {
  it('the shared models', () => {
    const dir = sharedPath('models');
    expectShared(dir);
    const models = readdirSync(dir).filter((m) => existsSync(join(dir, m, 'model.onnx')));
    expect(quoted(rootReadme, /All (\w+) models of `\.\.\/shared\/models`/, 'README.md')).toEqual([models.length]);
    expect(quoted(readme, /All (\w+) shared models pass on the GPU/, 'packages/ort-ep/README.md')).toEqual([models.length]);
  });

  it('the published models and the onnx release cases', () => {
    const manifest = JSON.parse(readFileSync(join(pkg, 'test/published/models.json'), 'utf8')) as {
      packages: { models: unknown[] }[];
    };
    const published = manifest.packages.reduce((n, p) => n + p.models.length, 0);
    expect(quoted(rootReadme, /(\d+) models that ship inside published PyPI packages/, 'README.md')).toEqual([published]);
    expect(quoted(readme, /runs (\d+) ONNX models that ship inside published PyPI packages/, 'packages/ort-ep/README.md')).toEqual([
      published,
    ]);

    // The cases onnxruntime cannot run either: the `neither` list of the test that runs them.
    const extra = readFileSync(join(pkg, 'test/conformance/onnx-extra.test.ts'), 'utf8');
    const list = /const neither = new Set\(\[([^\]]*)\]\)/.exec(extra);
    expect(list, 'onnx-extra.test.ts no longer has its `neither` list').toBeTruthy();
    const neither = [...list![1].matchAll(/'(test_\w+)'/g)].length;
    // The release's case folders, as onnx-extra.test.ts fetches them.
    const paths = JSON.parse(execFileSync('node', [join(repo, 'tools/fetch-published.mjs'), '--quiet'], { encoding: 'utf8' })) as Record<
      string,
      string
    >;
    const data = paths['onnx-backend-data'];
    const cases = ['simple', 'pytorch-converted', 'pytorch-operator'].reduce((n, s) => n + readdirSync(join(data, s)).length, 0);
    expect(quoted(rootReadme, /other (\d+) cases \(simple, PyTorch-converted, PyTorch-operator\) pass but for (\d+)/, 'README.md')).toEqual(
      [cases, neither],
    );
    expect(quoted(readme, /PyTorch operators: (\d+) cases\)/, 'packages/ort-ep/README.md')).toEqual([cases]);
    expect(quoted(readme, /on both paths except (\d+) that onnxruntime-node cannot run either/, 'packages/ort-ep/README.md')).toEqual([
      neither,
    ]);
  });
});

describe('the registry and the rewrites', () => {
  it("the root README's op floors hold (exact counts: OPERATORS.md)", () => {
    const byDomain = new Map<string, number>();
    for (const e of new Set(defaultRegistry.entries().map((e) => `${e.domain}::${e.opType}`))) {
      const d = e.split('::')[0];
      byDomain.set(d, (byDomain.get(d) ?? 0) + 1);
    }
    const [onnx, ms, ml] = quoted(
      rootReadme,
      /Over (\d+) ai\.onnx ops, over (\d+) com\.microsoft ops and over (\d+) ai\.onnx\.ml ops in the registry/,
      'README.md',
    );
    expect(byDomain.get('ai.onnx')!).toBeGreaterThan(onnx);
    expect(byDomain.get('com.microsoft')!).toBeGreaterThan(ms);
    expect(byDomain.get('ai.onnx.ml')!).toBeGreaterThan(ml);
    // No exact count of the registry creeps back into the root README.
    expect(rootReadme).not.toMatch(/(?<!over )\b\d+ (ai\.onnx|com\.microsoft|ai\.onnx\.ml) ops\b/i);
  });

  it('every graph rewrite is described in the README', () => {
    const missing = Object.keys(REWRITES).filter((name) => !readme.includes(`\`${name}\``));
    expect(missing).toEqual([]);
  });

  it('the rewrites counted on the shared models', () => {
    const names: Record<string, string> = {
      GELU: 'gelu',
      'MatMul+bias': 'matmul-add',
      attention: 'attention',
      RMSNorm: 'rms-norm',
      'sibling-matmul': 'sibling-matmul',
      'gated-activation': 'gated-activation',
    };
    const m = /On the shared models: (.*?) \(`test\/api\/rewrites\.test\.ts`/.exec(readme);
    expect(m, 'the README no longer lists the rewrites that fire on the shared models').toBeTruthy();
    for (const part of m![1].split(/, (?=[a-z0-9-]+ \d)/)) {
      const [model, ...rest] = part.split(' ');
      const said: Record<string, number> = {};
      for (const t of rest.join(' ').split(' + ')) {
        const [n, ...label] = t.split(' ');
        said[names[label.join(' ')] ?? label.join(' ')] = Number(n);
      }
      const dir = sharedPath(join('models', model));
      expectShared(dir);
      expect([model, said]).toEqual([model, prepareModel(readFileSync(join(dir, 'model.onnx'))).rewrites]);
    }
  });
});

describe('other figures', () => {
  it("the fuzz harness's short run", () => {
    const test = readFileSync(join(pkg, 'test/fuzz/fuzz.test.ts'), 'utf8');
    const seed = Number(/seed: (\d+),/.exec(test)?.[1]);
    const cases = Number(/expect\(s\.cases\)\.toBe\((\d+)\)/.exec(test)?.[1]);
    expect(
      quoted(readme, /`test\/fuzz\/fuzz\.test\.ts` is the short run \(seed (\d+), (\d+) cases\)/, 'packages/ort-ep/README.md'),
    ).toEqual([seed, cases]);
  });

  it("the root README's tool versions", () => {
    const root = JSON.parse(readFileSync(join(repo, 'package.json'), 'utf8'));
    const sys = JSON.parse(readFileSync(join(repo, 'packages/sys/package.json'), 'utf8'));
    const wheel = JSON.parse(readFileSync(join(repo, 'packages/sys/mlx-wheel.json'), 'utf8'));
    const m =
      /Tool versions: pnpm (\S+) \(through corepack\), TypeScript (\S+) .*?, vitest (\S+), turbo (\S+), koffi (\S+), MLX (\S+) /.exec(
        rootReadme,
      );
    expect(m, 'README.md no longer lists the tool versions').toBeTruthy();
    expect(m!.slice(1).map((v) => v.replace(/,$/, ''))).toEqual([
      root.packageManager.replace(/^pnpm@/, ''),
      root.devDependencies.typescript,
      root.devDependencies.vitest,
      root.devDependencies.turbo,
      sys.dependencies.koffi,
      wheel.version,
    ]);
  });
});

// The mlx-ort command line, called in-process through main() (the bin runs the built dist/cli.js;
// there is no source entry for it) with console.log captured.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli.js';
import { model, node, v } from '../helpers/build.js';

const dir = mkdtempSync(join(tmpdir(), 'ort-ep-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => {
  vi.restoreAllMocks();
  process.exitCode = undefined;
});

async function capture(argv: string[]): Promise<string[]> {
  return (await captureBoth(argv)).out;
}

/** stdout and stderr lines of one main() call. */
async function captureBoth(argv: string[]): Promise<{ out: string[]; err: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void out.push(a.map(String).join(' ')));
  vi.spyOn(console, 'error').mockImplementation((...a: unknown[]) => void err.push(a.map(String).join(' ')));
  await main(argv);
  return { out, err };
}

describe('mlx-ort check', () => {
  it('lists claimed nodes by op and each unclaimed node with its reason', async () => {
    // A real op at an opset below its first version (ImageDecoder came in opset 20).
    const real = 'ImageDecoder';
    const path = join(dir, 'mixed.onnx');
    writeFileSync(
      path,
      model({
        opsets: { '': 18, 'com.example': 2 },
        inputs: [v('x', 'float32', [4])],
        outputs: [v('y', 'float32', [4]), v('z', 'float32')],
        nodes: [
          node('Relu', ['x'], ['r1'], { name: 'relu_1' }),
          node('Relu', ['r1'], ['r2'], { name: 'relu_2' }),
          node('FooBar', ['r2'], ['y'], { domain: 'com.example', name: 'the_foo' }),
          node(real, ['x'], ['z'], { name: 'the_real' }),
        ],
      }),
    );
    const out = await capture(['check', path]);
    expect(out[0]).toBe(`${path}: 4 nodes, 2 claimed by the MLX provider, 2 not (opsets: ai.onnx 18, com.example 2)`);
    expect(out[1]).toMatch(/^MLX devices: cpu(, gpu \((cuda|metal)\))?$/);
    expect(out).toContain('claimed:');
    expect(out).toContain('  ai.onnx::Relu x2');
    const notClaimed = out.slice(out.indexOf('not claimed:') + 1);
    expect(notClaimed).toEqual([
      "  com.example::FooBar (opset 2) node 'the_foo': no implementation of FooBar in domain com.example",
      `  ai.onnx::${real} (opset 18) node 'the_real': ${real} is implemented for opsets 20+, not 18`,
    ]);
  });

  it('prints the partitions: how many, which nodes fall back and why', async () => {
    const path = join(dir, 'partitions.onnx');
    writeFileSync(
      path,
      model({
        opsets: { '': 18, 'com.example': 2 },
        inputs: [v('x', 'float32', [4])],
        outputs: [v('y', 'float32', [4])],
        nodes: [
          node('Relu', ['x'], ['r1'], { name: 'relu_1' }),
          node('FooBar', ['r1'], ['f'], { domain: 'com.example', name: 'the_foo' }),
          node('Neg', ['f'], ['y'], { name: 'neg' }),
        ],
      }),
    );
    const out = await capture(['check', path]);
    const at = out.findIndex((l) => l.startsWith('partitions:'));
    expect(out.slice(at, at + 5)).toEqual([
      'partitions: 3 (2 on MLX, 1 on onnxruntime through onnxruntime-node)',
      '  1. MLX: 1 node(s) (Relu)',
      '  2. onnxruntime: 1 node(s) (com.example::FooBar)',
      "       com.example::FooBar 'the_foo': no implementation of FooBar in domain com.example",
      '  3. MLX: 1 node(s) (Neg)',
    ]);
  });

  it('a model whose nodes are all claimed has no "not claimed" section', async () => {
    const path = join(dir, 'ok.onnx');
    writeFileSync(
      path,
      model({
        opsets: { '': 13 },
        inputs: [v('x', 'float32', [2])],
        outputs: [v('y', 'float32', [2])],
        nodes: [node('Neg', ['x'], ['y'])],
      }),
    );
    const out = await capture(['check', path]);
    expect(out[0]).toMatch(/1 nodes, 1 claimed by the MLX provider, 0 not/);
    expect(out).not.toContain('not claimed:');
    expect(out).toContain('partitions: 1 (MLX takes every node)');
  });
});

describe('mlx-ort run', () => {
  // y = tanh(x @ w) with a symbolic batch; k: int64 [B] counts added as float.
  const path = join(dir, 'run.onnx');
  writeFileSync(
    path,
    model({
      opsets: { '': 13 },
      inputs: [v('x', 'float32', ['B', 3]), v('k', 'int64', ['B'])],
      outputs: [v('y', 'float32', ['B', 2]), v('kf', 'float32', ['B'])],
      initializers: [{ name: 'w', type: 'float32', dims: [3, 2], values: [0.5, -1, 2, 0.25, -0.75, 1] }],
      nodes: [node('MatMul', ['x', 'w'], ['xw']), node('Tanh', ['xw'], ['y']), node('Cast', ['k'], ['kf'], { attrs: { to: 1 } })],
    }),
  );

  it('--compare prints each output and its largest difference from onnxruntime-node', async () => {
    const out = await capture(['run', path, '--device', 'cpu', '--runs', '2', '--compare', '--dim', 'B=5']);
    expect(out[0]).toMatch(
      new RegExp(
        `^model ${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} on cpu: median \\d+\\.\\d\\d ms over 2 runs \\(after a first run of \\d+\\.\\d\\d ms and a second of \\d+\\.\\d\\d ms\\)$`,
      ),
    );
    expect(out[1]).toBe('device: cpu (MLX backend cpu)');
    const y = out.find((l) => l.startsWith('  y: ['));
    expect(y).toMatch(/^ {2}y: \[5, 2\] mean -?\d\.\d+(e[-+]\d+)? first( -?\d\.\d+(e[-+]\d+)?,?){4}$/);
    expect(out.find((l) => l.startsWith('  kf: ['))).toMatch(/^ {2}kf: \[5\] mean /);
    const diffs = out.filter((l) => l.includes('largest |mlx - onnxruntime-node|'));
    expect(diffs.map((l) => l.split(':')[0].trim())).toEqual(['y', 'kf']);
    for (const l of diffs) expect(Number(l.split('= ')[1])).toBeLessThan(1e-5);
  });

  it('--runs N times N runs after the first two; --dim must name a symbolic dimension', async () => {
    const out = await capture(['run', path, '--runs', '1']);
    // One timed run (the median is that run), the analysing and tracing runs reported apart.
    expect(out[0]).toMatch(/median (\d+\.\d\d) ms over 1 runs \(after a first run of \d+\.\d\d ms and a second of \d+\.\d\d ms\)$/);
    const { err } = await captureBoth(['run', path, '--runs', '1', '--dim', 'nosuch=3']);
    expect(err[0]).toBe("mlx-ort run: --dim nosuch: the model's inputs have no dimension named 'nosuch' (they have 'B')");
    expect(process.exitCode).toBe(2);
    process.exitCode = undefined;
  });

  it('--compare counts NaN beside NaN as equal, NaN beside a number as an infinite difference', async () => {
    // y = sqrt(x): NaN for the negative inputs on both engines.
    const nanPath = join(dir, 'nan.onnx');
    writeFileSync(
      nanPath,
      model({
        opsets: { '': 13 },
        inputs: [v('x', 'float32', [4])],
        outputs: [v('y', 'float32', [4])],
        nodes: [node('Sqrt', ['x'], ['y'])],
      }),
    );
    const out = await capture(['run', nanPath, '--runs', '1', '--compare']);
    expect(out.find((l) => l.startsWith('  y: ['))).toMatch(/mean NaN/);
    const diff = out.find((l) => l.startsWith('  y: largest |mlx - onnxruntime-node| = '));
    expect(diff).toBe('  y: largest |mlx - onnxruntime-node| = 0.000e+0');
  });

  it('random integer inputs index a two-row table (token types) without going out of range', async () => {
    const tablePath = join(dir, 'table.onnx');
    writeFileSync(
      tablePath,
      model({
        opsets: { '': 13 },
        inputs: [v('ids', 'int64', [64])],
        outputs: [v('y', 'float32', [64, 3])],
        initializers: [{ name: 't', type: 'float32', dims: [2, 3], values: [1, 2, 3, 4, 5, 6] }],
        nodes: [node('Gather', ['t', 'ids'], ['y'])],
      }),
    );
    const out = await capture(['run', tablePath, '--runs', '1']);
    expect(out.find((l) => l.startsWith('  y: ['))).toMatch(/^ {2}y: \[64, 3\] mean /);
  });

  it('symbolic dimensions default to 1', async () => {
    const out = await capture(['run', path, '--runs', '1']);
    expect(out.find((l) => l.startsWith('  y: '))).toMatch(/^ {2}y: \[1, 2\]/);
    expect(out.some((l) => l.includes('largest'))).toBe(false);
  });

  it('an unknown command prints the usage and sets exit code 2', async () => {
    const { out, err } = await captureBoth(['frobnicate']);
    expect(out.join('\n')).toMatch(/^usage:\n {2}mlx-ort run <model.onnx>/);
    expect(err).toEqual(["mlx-ort: unknown command 'frobnicate'"]);
    expect(process.exitCode).toBe(2);
  });

  it('--inputs DIR runs a test_data_set folder and compares with its outputs', async () => {
    // gpt2-tiny's reference outputs are onnxruntime CPU's (../shared/models/README.md).
    const m = join(sharedModels, 'gpt2-tiny');
    const out = await capture(['run', join(m, 'model.onnx'), '--runs', '1', '--inputs', join(m, 'test_data_set_1')]);
    expect(out[1]).toMatch(/^device: cpu \(MLX backend cpu\)$/);
    expect(out[2]).toMatch(/^ {2}logits: \[\d+, \d+, 512\] mean /);
    const diff = out.find((l) => l.startsWith('  logits: largest |mlx - expected| = '));
    expect(Number(diff!.split('= ')[1])).toBeLessThan(1e-3);
    expect(process.exitCode).toBeUndefined();
  });
});

describe('mlx-ort bench', () => {
  it('times mlx beside onnxruntime-node, each in processes of its own, and prints the table', async () => {
    const path = join(dir, 'bench.onnx');
    writeFileSync(
      path,
      model({
        opsets: { '': 13 },
        inputs: [v('x', 'float32', ['B', 8])],
        outputs: [v('y', 'float32', ['B', 8])],
        nodes: [node('Tanh', ['x'], ['t']), node('Sigmoid', ['t'], ['y'])],
      }),
    );
    const out = await capture(['bench', path, '--runs', '3', '--rounds', '2', '--dim', 'B=4']);
    expect(out[0]).toBe(
      `model ${path}: 3 runs after the first two, 2 rounds, each engine alone in its own process, alternated; 2 threads; random inputs (B=4)`,
    );
    expect(out[1]).toMatch(/^load average \d+\.\d\d at the start, \d+\.\d\d at the end; medians over rounds \(ms\)$/);
    const num = '\\d+\\.\\d+';
    expect(out[4]).toMatch(new RegExp(`^\\| mlx \\(cpu\\) \\| ${num} \\| ${num} \\| ${num} \\| ${num} \\| ${num} \\|$`));
    expect(out[5]).toMatch(new RegExp(`^\\| onnxruntime-node \\(cpu\\) \\| ${num} \\| ${num} \\| ${num} \\| ${num} \\| 1\\.00 \\|$`));
    const { err } = await captureBoth(['bench', path, '--dim', 'N=2']);
    expect(err[0]).toBe("mlx-ort bench: --dim N: the model's inputs have no dimension named 'N' (they have 'B')");
    process.exitCode = undefined;
  }, 120_000);
});

const sharedModels = fileURLToPath(new URL('../../../../../shared/models', import.meta.url));

describe('mlx-ort options', () => {
  it('--version prints the package version', async () => {
    const pkg = JSON.parse(readFileSync(fileURLToPath(new URL('../../package.json', import.meta.url)), 'utf8'));
    expect(await capture(['--version'])).toEqual([pkg.version]);
  });

  it("<command> --help prints that command's usage and reads no file", async () => {
    for (const cmd of ['run', 'check', 'bench', 'demo']) {
      const out = await capture([cmd, '--help']);
      expect(out.join('\n')).toMatch(new RegExp(`^ {2}mlx-ort ${cmd}`));
      expect(process.exitCode).toBeUndefined();
    }
  });

  const bad: [string[], string][] = [
    [['run', 'm.onnx', '--device', 'gpuu'], "mlx-ort run: --device must be cpu or gpu, got 'gpuu'"],
    [['run', 'm.onnx', '--runs', 'abc'], "mlx-ort run: --runs must be a positive integer, got 'abc'"],
    [['run', 'm.onnx', '--runs', '0'], "mlx-ort run: --runs must be a positive integer, got '0'"],
    [['run', 'm.onnx', '--dim', 'B'], "mlx-ort run: --dim takes name=value, got 'B'"],
    [['run', 'm.onnx', '--dim', 'B=-1'], "mlx-ort run: --dim B must be a positive integer, got '-1'"],
    [['run', 'm.onnx', '--runs'], "mlx-ort run: Option '--runs <value>' argument missing"],
    [['run', 'm.onnx', '--frob'], "mlx-ort run: Unknown option '--frob'"],
    [['run'], 'mlx-ort run: no model path given'],
    [['check', 'a.onnx', 'b.onnx'], 'mlx-ort check: one model path expected, got 2: a.onnx b.onnx'],
    [['demo', '--device', 'tpu'], "mlx-ort demo: --device must be cpu or gpu, got 'tpu'"],
  ];
  for (const [argv, message] of bad) {
    it(`${argv.join(' ')}: exit code 2 and a specific message`, async () => {
      const { out, err } = await captureBoth(argv);
      expect(process.exitCode).toBe(2);
      expect(err[0].startsWith(message), err[0]).toBe(true);
      expect(err[1]).toMatch(new RegExp(`^usage: mlx-ort ${argv[0]}`));
      expect(out).toEqual([]);
    });
  }
});

describe('mlx-ort profile', () => {
  it('prints time per op type and the slowest nodes, as the profile it writes says', async () => {
    const path = join(dir, 'prof.onnx');
    writeFileSync(
      path,
      model({
        inputs: [v('x', 'float32', ['n', 64])],
        outputs: [v('y', 'float32', ['n', 64])],
        nodes: [
          node('Relu', ['x'], ['a'], { name: 'relu_1' }),
          node('Sigmoid', ['a'], ['b'], { name: 'sigmoid_1' }),
          node('Relu', ['b'], ['c'], { name: 'relu_2' }),
          node('Add', ['c', 'x'], ['y'], { name: 'add_1' }),
        ],
      }),
    );
    const prefix = join(dir, 'clip');
    const out = (await capture(['profile', path, '--runs', '3', '--top', '2', '--dim', 'n=16', '--prefix', prefix])).flatMap((l) =>
      l.split('\n'),
    );
    const file = out.at(-1)!.match(/^profile: (\S+) /)![1];
    expect(file.startsWith(`${prefix}_`)).toBe(true);
    // The summary's figures, computed again from the file.
    const events = JSON.parse(readFileSync(file, 'utf8')) as { cat: string; name: string; dur: number; args: Record<string, string> }[];
    const kernels = events.filter((e) => e.cat === 'Node');
    expect(kernels).toHaveLength(12);
    const perOp = new Map<string, number>();
    for (const e of kernels) perOp.set(e.args.op_name, (perOp.get(e.args.op_name) ?? 0) + e.dur);
    const total = [...perOp.values()].reduce((a, b) => a + b, 0);
    const opLines = out.slice(out.indexOf('per op type:') + 2, out.indexOf('per op type:') + 5);
    expect(opLines.map((l) => l.split(/\s+/)[0]).sort()).toEqual(['Add', 'Relu', 'Sigmoid']);
    for (const l of opLines) {
      const [op, provider, calls, totalMs, , share] = l.split(/\s+/);
      expect(provider).toBe('MLXExecutionProvider');
      expect(Number(calls)).toBe(op === 'Relu' ? 6 : 3);
      expect(Number(totalMs)).toBeCloseTo(perOp.get(op)! / 1000, 3);
      expect(Number(share.replace('%', ''))).toBeCloseTo((100 * perOp.get(op)!) / total, 1);
    }
    expect(out).toContain('slowest nodes (2 of 4):');
    expect(out[0]).toBe(`model ${path} on cpu, node by node (compiled: false), 3 run(s) after one unprofiled`);
  });

  it('refuses bad options', async () => {
    const path = join(dir, 'prof.onnx');
    const { err } = await captureBoth(['profile', path, '--runs', '0']);
    expect(err[0]).toBe("mlx-ort profile: --runs must be a positive integer, got '0'");
    expect(process.exitCode).toBe(2);
  });
});

describe('mlx-ort generate', () => {
  const llama = { kind: 'llama', layers: 2, hidden: 64, heads: 4, kvHeads: 2, ffn: 128, vocab: 256, maxPositions: 256, seed: 9 } as const;
  const vocab = Object.fromEntries(Array.from({ length: 256 }, (_, i) => [i === 0 ? '[UNK]' : `w${i}`, i]));
  const tokenizer = {
    version: '1.0',
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: { type: 'Whitespace' },
    post_processor: null,
    decoder: null,
    model: { type: 'WordLevel', vocab, unk_token: '[UNK]' },
  };
  const modelDir = join(dir, 'decoder');

  /** What onnxruntime-node's CPU provider generates greedily from the prompt's ids. */
  async function reference(ids: number[], n: number): Promise<number[]> {
    const { ort } = await import('../helpers/ort.js');
    const { generate } = await import('../../src/index.js');
    const s = await ort.InferenceSession.create(join(modelDir, 'model.onnx'));
    const out: number[] = [];
    for await (const t of generate(s, { inputIds: ids, maxNewTokens: n, Tensor: ort.Tensor as never })) out.push(t);
    await s.release();
    return out;
  }

  async function generateOut(argv: string[]): Promise<{ text: string; err: string[] }> {
    let text = '';
    vi.spyOn(process.stdout, 'write').mockImplementation((c: string | Uint8Array) => {
      text += String(c);
      return true;
    });
    const { err } = await captureBoth(['generate', ...argv]);
    return { text, err };
  }

  it('streams the text onnxruntime-node generates greedily, and stops at the eos token', async () => {
    const { buildDecoder } = await import('../helpers/decoder.js');
    const { mkdirSync } = await import('node:fs');
    mkdirSync(modelDir, { recursive: true });
    writeFileSync(join(modelDir, 'model.onnx'), buildDecoder(llama));
    writeFileSync(join(modelDir, 'tokenizer.json'), JSON.stringify(tokenizer));
    const want = await reference([3, 17, 42, 99], 12);
    const { text, err } = await generateOut([modelDir, '--prompt', 'w3 w17 w42 w99', '--max-new-tokens', '12']);
    expect(text).toBe(`${want.map((i) => `w${i}`).join(' ')}\n`);
    expect(err.at(-1)).toMatch(/^12 tokens; first after [\d.]+ ms, then [\d.]+ tokens\/s$/);
    // generation_config.json's eos_token_id ends it (the eos token is generated, not shown twice).
    const stop = want[4];
    const first = want.indexOf(stop);
    writeFileSync(join(modelDir, 'generation_config.json'), JSON.stringify({ eos_token_id: stop }));
    const stopped = await generateOut([modelDir, '--prompt', 'w3 w17 w42 w99', '--max-new-tokens', '12']);
    expect(stopped.err.at(-1)).toMatch(new RegExp(`^${first + 1} tokens;`));
    rmSync(join(modelDir, 'generation_config.json'));
    // Sampling options are taken (seeded: the same text twice).
    const a = await generateOut([
      modelDir,
      '--prompt',
      'w3 w17',
      '--max-new-tokens',
      '6',
      '--temperature',
      '0.8',
      '--top-k',
      '20',
      '--seed',
      '4',
    ]);
    const b = await generateOut([
      modelDir,
      '--prompt',
      'w3 w17',
      '--max-new-tokens',
      '6',
      '--temperature',
      '0.8',
      '--top-k',
      '20',
      '--seed',
      '4',
    ]);
    expect(a.text).toBe(b.text);
  });

  it('says what is missing or wrong', async () => {
    const bad: [string[], RegExp][] = [
      [[modelDir], /--prompt TEXT is required/],
      [[modelDir, '--prompt', 'w3', '--top-p', '1.5'], /--top-p must be in \(0, 1\], got '1\.5'/],
      [[modelDir, '--prompt', 'w3', '--temperature', '0'], /--temperature must be a number > 0, got '0'/],
      [[modelDir, '--prompt', 'w3', '--max-new-tokens', 'x'], /--max-new-tokens must be a positive integer, got 'x'/],
    ];
    for (const [argv, re] of bad) {
      const { err } = await captureBoth(['generate', ...argv]);
      expect(err[0]).toMatch(re);
      expect(process.exitCode).toBe(2);
      process.exitCode = undefined;
    }
    await expect(main(['generate', dir, '--prompt', 'w3'])).rejects.toThrow(
      /no model\.onnx, decoder_model_merged\.onnx or onnx\/model\.onnx there/,
    );
    await expect(main(['generate', modelDir, '--prompt', 'nosuchword'])).rejects.toThrow(/the tokenizer gives no ids for the prompt/);
  });
});

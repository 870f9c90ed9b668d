// The mlx-ort command line, called in-process through main() (the bin runs the built dist/cli.js;
// there is no source entry for it) with console.log captured.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli.js';
import { defaultRegistry } from '../../src/index.js';
import { model, node, v } from '../helpers/build.js';

const dir = mkdtempSync(join(tmpdir(), 'ort-ep-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => {
  vi.restoreAllMocks();
  process.exitCode = undefined;
});

async function capture(argv: string[]): Promise<string[]> {
  const lines: string[] = [];
  vi.spyOn(console, 'log').mockImplementation((...a: unknown[]) => void lines.push(a.map(String).join(' ')));
  await main(argv);
  return lines;
}

describe('mlx-ort check', () => {
  it('lists claimed nodes by op and each unclaimed node with its reason', async () => {
    const real = ['ImageDecoder', 'StringSplit', 'RegexFullMatch', 'TfIdfVectorizer'].find(
      (op) => !defaultRegistry.lookup('ai.onnx', op, 18),
    )!;
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
      `  ai.onnx::${real} (opset 18) node 'the_real': no implementation of ${real} in domain ai.onnx`,
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
      new RegExp(`^model ${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} on cpu: median \\d+\\.\\d\\d ms over 2 runs$`),
    );
    expect(out[1]).toBe('device: cpu (MLX backend cpu)');
    const y = out.find((l) => l.startsWith('  y: ['));
    expect(y).toMatch(/^ {2}y: \[5, 2\] mean -?\d\.\d+(e[-+]\d+)? first( -?\d\.\d+(e[-+]\d+)?,?){4}$/);
    expect(out.find((l) => l.startsWith('  kf: ['))).toMatch(/^ {2}kf: \[5\] mean /);
    const diffs = out.filter((l) => l.includes('largest |mlx - onnxruntime-node|'));
    expect(diffs.map((l) => l.split(':')[0].trim())).toEqual(['y', 'kf']);
    for (const l of diffs) expect(Number(l.split('= ')[1])).toBeLessThan(1e-5);
  });

  it('symbolic dimensions default to 1', async () => {
    const out = await capture(['run', path, '--runs', '1']);
    expect(out.find((l) => l.startsWith('  y: '))).toMatch(/^ {2}y: \[1, 2\]/);
    expect(out.some((l) => l.includes('largest'))).toBe(false);
  });

  it('an unknown command prints the usage and sets exit code 2', async () => {
    const out = await capture(['frobnicate']);
    expect(out.join('\n')).toMatch(/^usage:\n {2}mlx-ort run <model.onnx>/);
    expect(process.exitCode).toBe(2);
  });
});

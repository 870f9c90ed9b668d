// RNN/GRU/LSTM beyond the node suite (which has forward-only cases): reverse and bidirectional
// directions, sequence_lens, initial states, peepholes, clip, input_forget, layout 1, activation
// lists with alpha/beta, every output, each against onnxruntime-node's CPU provider.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { model, node, v, type NodeSpec } from '../../test/helpers/build.js';
import { expectSameAsOrt, expectSameOutputs, f32, ort, plain, runOn, seeded, type Feeds, type OrtTensor } from '../../test/helpers/ort.js';

const tol = { rtol: 1e-4, atol: 1e-5 };
const i32 = (data: number[]) => new ort.Tensor('int32', Int32Array.from(data), [data.length]);
const rand = (dims: number[], seed: number, scale = 0.5) =>
  f32(
    seeded(
      dims.reduce((a, b) => a * b, 1),
      seed,
    ).map((x) => x * scale),
    dims,
  );

interface RnnCase {
  op: 'RNN' | 'GRU' | 'LSTM';
  seq: number;
  batch: number;
  input: number;
  hidden: number;
  dirs: 1 | 2;
  layout?: 0 | 1;
  bias?: boolean;
  lens?: number[];
  initial?: boolean;
  peepholes?: boolean;
  attrs?: NodeSpec['attrs'];
  opset?: number;
}

const gatesOf = { RNN: 1, GRU: 3, LSTM: 4 };

/** Swaps axes 0 and 1 of a float tensor (3-D or 4-D): layout 1 <-> layout 0. */
function swap01(t: OrtTensor): OrtTensor {
  const [a, b, ...rest] = t.dims as number[];
  const inner = rest.reduce((x, y) => x * y, 1);
  const src = plain(t);
  const out = new Float32Array(src.length);
  for (let i = 0; i < a; i++)
    for (let j = 0; j < b; j++) out.set(src.slice((i * b + j) * inner, (i * b + j + 1) * inner), (j * a + i) * inner);
  return f32([...out], [b, a, ...rest]);
}

/** Y of layout 0 [seq, dirs, batch, H] -> layout 1 [batch, seq, dirs, H]. */
function yToBatchwise(t: OrtTensor): number[] {
  const [S, D, B, H] = t.dims as number[];
  const src = plain(t);
  const out: number[] = [];
  for (let b = 0; b < B; b++)
    for (let s = 0; s < S; s++)
      for (let d = 0; d < D; d++) out.push(...src.slice(((s * D + d) * B + b) * H, ((s * D + d) * B + b + 1) * H));
  return out;
}

/** onnxruntime's CPU provider refuses layout 1: hold the batchwise result to its layout-0 run on swapped feeds. */
async function checkBatchwise(bytes1: Uint8Array, bytes0: Uint8Array, feeds: Feeds): Promise<void> {
  const feeds0: Feeds = { ...feeds, X: swap01(feeds.X) };
  for (const k of ['H0', 'C0']) if (feeds[k]) feeds0[k] = swap01(feeds[k]);
  const [want, have] = [await runOn('cpu', bytes0, feeds0), await runOn('mlx', bytes1, feeds)];
  const close = (a: number[], b: number[]) =>
    a.length === b.length && a.every((x, i) => Math.abs(x - b[i]) <= tol.atol + tol.rtol * Math.abs(b[i]));
  expect(close(plain(have.Y), yToBatchwise(want.Y))).toBe(true);
  for (const k of ['Y_h', 'Y_c']) if (want[k]) expect(close(plain(have[k]), plain(swap01(want[k])))).toBe(true);
}

async function check(c: RnnCase): Promise<void> {
  const G = gatesOf[c.op];
  const layout = c.layout ?? 0;
  const feeds: Feeds = {
    X: rand(layout ? [c.batch, c.seq, c.input] : [c.seq, c.batch, c.input], 1, 1),
    W: rand([c.dirs, G * c.hidden, c.input], 2),
    R: rand([c.dirs, G * c.hidden, c.hidden], 3),
  };
  const inputs = ['X', 'W', 'R', '', '', '', '', ''];
  const state = layout ? [c.batch, c.dirs, c.hidden] : [c.dirs, c.batch, c.hidden];
  if (c.bias) {
    feeds.B = rand([c.dirs, 2 * G * c.hidden], 4);
    inputs[3] = 'B';
  }
  if (c.lens) {
    feeds.L = i32(c.lens);
    inputs[4] = 'L';
  }
  if (c.initial) {
    feeds.H0 = rand(state, 5);
    inputs[5] = 'H0';
    if (c.op === 'LSTM') {
      feeds.C0 = rand(state, 6);
      inputs[6] = 'C0';
    }
  }
  if (c.peepholes) {
    feeds.P = rand([c.dirs, 3 * c.hidden], 7);
    inputs[7] = 'P';
  }
  while (inputs.at(-1) === '') inputs.pop();
  const outputs = c.op === 'LSTM' ? ['Y', 'Y_h', 'Y_c'] : ['Y', 'Y_h'];
  const direction = c.dirs === 2 ? 'bidirectional' : ((c.attrs?.direction as string | undefined) ?? 'forward');
  const build = (lay: number) =>
    model({
      opsets: { '': c.opset ?? 14 },
      inputs: Object.entries(feeds).map(([name, t]) => v(name, t.type as 'float32')),
      outputs: outputs.map((o) => v(o, 'float32')),
      nodes: [node(c.op, inputs, outputs, { attrs: { hidden_size: c.hidden, ...(lay ? { layout: lay } : {}), ...c.attrs, direction } })],
    });
  if (layout === 1) await checkBatchwise(build(1), build(0), feeds);
  else await expectSameAsOrt(build(0), feeds, tol);
}

const base = { seq: 5, batch: 3, input: 4, hidden: 6 } as const;

describe('LSTM', () => {
  it('bidirectional with bias, initial states and peepholes', () =>
    check({ op: 'LSTM', ...base, dirs: 2, bias: true, initial: true, peepholes: true }));
  it('bidirectional with sequence_lens (reverse starts at each sequence end)', () =>
    check({ op: 'LSTM', ...base, dirs: 2, bias: true, lens: [5, 2, 3], initial: true }));
  it('reverse with sequence_lens', () => check({ op: 'LSTM', ...base, dirs: 1, lens: [1, 5, 4], attrs: { direction: 'reverse' } }));
  // The standard cell runs the native recurrence kernel: a longer sequence, a wider state, mixed
  // lengths in both directions.
  it('standard cell: 17 steps, hidden 40, sequence_lens, initial states', () =>
    check({ op: 'LSTM', seq: 17, batch: 4, input: 9, hidden: 40, dirs: 2, bias: true, initial: true, lens: [17, 2, 9, 1] }));
  it('layout 1, bidirectional, every output', () => check({ op: 'LSTM', ...base, dirs: 2, layout: 1, bias: true, initial: true }));
  it('clip and input_forget', () => check({ op: 'LSTM', ...base, dirs: 1, bias: true, attrs: { clip: 0.3, input_forget: 1 } }));
  it('activations with alpha/beta (HardSigmoid, ScaledTanh, Elu)', () =>
    check({
      op: 'LSTM',
      ...base,
      dirs: 1,
      bias: true,
      attrs: { activations: ['HardSigmoid', 'ScaledTanh', 'Elu'], activation_alpha: [0.3, 0.9, 1.2], activation_beta: [0.4, 1.1] },
    }));
  it('opset 7 (no layout attribute)', () => check({ op: 'LSTM', ...base, dirs: 2, bias: true, opset: 7 }));
  // One step of one or a few sequences (a streaming model's frame): the input projection runs on
  // the packed product's few-row path (more rows: its register tiles).
  it('one step, one sequence and three (the few-row projection), with bias and without', async () => {
    for (const batch of [1, 3]) {
      await check({ op: 'LSTM', seq: 1, batch, input: 128, hidden: 32, dirs: 1, bias: true, initial: true });
      await check({ op: 'LSTM', seq: 1, batch, input: 8, hidden: 6, dirs: 2 });
    }
  });
  it("one step's projection is the packed native product, not OpenBLAS's addmm (~47 us a call)", () => {
    // MLXC_PRIM_TIMES (read once per process) lists every primitive a run evaluates: a child process.
    const script = `
      import { createRequire } from 'node:module';
      import ${JSON.stringify(fileURLToPath(new URL('../index.ts', import.meta.url)))};
      import { model, node, v } from ${JSON.stringify(fileURLToPath(new URL('../../test/helpers/build.js', import.meta.url)))};
      const ort = createRequire(import.meta.url)('onnxruntime-node');
      const init = (name, dims) => ({ name, type: 'float32', dims, values: Array.from({ length: dims.reduce((a, b) => a * b, 1) }, (_, i) => Math.sin(i) * 0.1) });
      const bytes = model({
        opsets: { '': 14 },
        inputs: [v('X', 'float32', [1, 1, 64])],
        outputs: [v('Y', 'float32')],
        initializers: [init('W', [1, 128, 64]), init('R', [1, 128, 32]), init('B', [1, 256])],
        nodes: [node('LSTM', ['X', 'W', 'R', 'B'], ['Y'], { attrs: { hidden_size: 32 } })],
      });
      const s = await ort.InferenceSession.create(bytes, { executionProviders: [{ name: 'mlx', device: 'cpu' }] });
      for (let i = 0; i < 4; i++) await s.run({ X: new ort.Tensor('float32', new Float32Array(64).fill(0.5), [1, 1, 64]) });
      await s.release();`;
    const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: fileURLToPath(new URL('../..', import.meta.url)),
      env: { ...process.env, MLXC_PRIM_TIMES: '1', VITEST: undefined },
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(r.status, r.stderr).toBe(0);
    const rows = r.stderr.split('\n').map((l) => l.trim().split(/\s+/)[0]);
    expect(rows, r.stderr).toContain('Lstm');
    expect(rows, r.stderr).toContain('DenseGemm');
    expect(rows, r.stderr).not.toContain('AddMM');
    expect(rows, r.stderr).not.toContain('Matmul');
  });
});

describe('GRU', () => {
  for (const lbr of [0, 1]) {
    it(`bidirectional, linear_before_reset=${lbr}, with bias and initial state`, () =>
      check({ op: 'GRU', ...base, dirs: 2, bias: true, initial: true, attrs: { linear_before_reset: lbr } }));
    it(`sequence_lens, linear_before_reset=${lbr}`, () =>
      check({ op: 'GRU', ...base, dirs: 2, bias: true, lens: [3, 5, 1], attrs: { linear_before_reset: lbr } }));
  }
  it('layout 1, reverse, clip', () =>
    check({ op: 'GRU', ...base, dirs: 1, layout: 1, bias: true, initial: true, attrs: { direction: 'reverse', clip: 0.5 } }));
  it('activations LeakyRelu and Softsign', () =>
    check({ op: 'GRU', ...base, dirs: 1, bias: true, attrs: { activations: ['LeakyRelu', 'Softsign'], activation_alpha: [0.2] } }));
});

describe('RNN', () => {
  it('bidirectional with sequence_lens and initial state', () =>
    check({ op: 'RNN', ...base, dirs: 2, bias: true, initial: true, lens: [2, 5, 4] }));
  it('Relu activation, layout 1', () => check({ op: 'RNN', ...base, dirs: 1, layout: 1, bias: true, attrs: { activations: ['Relu'] } }));
  it('Sigmoid and Softplus per direction', () =>
    check({ op: 'RNN', ...base, dirs: 2, bias: true, attrs: { activations: ['Sigmoid', 'Softplus'] } }));
});

// Weights as initializers: the layer's constant-derived arrays (per-direction transposed weights,
// summed biases) are made once per session (OpContext.prepared) and reused by every later run,
// eager and compiled (a compiled session replays the trace on its third run), and by a second
// signature (another sequence length) of the same session.
describe('constant weights (prepared once per session)', () => {
  const cases: { op: 'RNN' | 'GRU' | 'LSTM'; attrs: NodeSpec['attrs']; dirs: 1 | 2; peepholes?: boolean }[] = [
    { op: 'LSTM', attrs: { direction: 'bidirectional' }, dirs: 2, peepholes: true },
    { op: 'LSTM', attrs: { direction: 'reverse', clip: 0.8, input_forget: 1 }, dirs: 1 },
    {
      op: 'LSTM',
      attrs: { direction: 'forward', activations: ['HardSigmoid', 'Softsign', 'Relu'], activation_alpha: [0.25], activation_beta: [0.45] },
      dirs: 1,
    },
    { op: 'GRU', attrs: { direction: 'bidirectional', linear_before_reset: 1 }, dirs: 2 },
    { op: 'RNN', attrs: { direction: 'reverse' }, dirs: 1 },
  ];
  const [batch, input, hidden] = [2, 5, 7];
  for (const c of cases) {
    it(`${c.op} ${JSON.stringify(c.attrs)}${c.peepholes ? ' with peepholes' : ''}`, async () => {
      const G = gatesOf[c.op];
      const init = (name: string, dims: number[], seed: number) => ({
        name,
        type: 'float32' as const,
        dims,
        values: plain(rand(dims, seed)),
      });
      const initializers = [
        init('W', [c.dirs, G * hidden, input], 2),
        init('R', [c.dirs, G * hidden, hidden], 3),
        init('B', [c.dirs, 2 * G * hidden], 4),
      ];
      const inputs = ['X', 'W', 'R', 'B', 'L'];
      if (c.peepholes) {
        initializers.push(init('P', [c.dirs, 3 * hidden], 7));
        inputs.push('', '', 'P');
      }
      const outputs = c.op === 'LSTM' ? ['Y', 'Y_h', 'Y_c'] : ['Y', 'Y_h'];
      const bytes = model({
        opsets: { '': 14 },
        inputs: [v('X', 'float32', ['seq', batch, input]), v('L', 'int32', [batch])],
        outputs: outputs.map((o) => v(o, 'float32')),
        initializers,
        nodes: [node(c.op, inputs, outputs, { attrs: { hidden_size: hidden, ...c.attrs } })],
      });
      for (const compiled of [false, true]) {
        const s = await ort.InferenceSession.create(bytes, { executionProviders: [{ name: 'mlx', device: 'cpu', compiled }] } as never);
        try {
          for (const [seq, lens] of [
            [6, [6, 3]],
            [4, [2, 4]],
            [6, [1, 6]],
          ] as const) {
            const feeds: Feeds = { X: rand([seq, batch, input], seq), L: i32([...lens]) };
            const want = await runOn('cpu', bytes, feeds);
            for (let k = 0; k < 3; k++) expectSameOutputs(await s.run(feeds), want, tol);
          }
        } finally {
          await s.release();
        }
      }
    });
  }
});

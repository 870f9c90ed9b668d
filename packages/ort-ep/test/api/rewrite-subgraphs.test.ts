// The rewrites inside subgraphs (src/plan/rewrite/index.ts): exporters put whole models in If
// branches (Silero VAD's on the sample rate, merged decoders' on the cache), and the passes take
// the patterns there as in the main graph. Each model is checked against onnxruntime-node and
// against itself without rewrites, eager and compiled; what a subgraph reads from an enclosing
// scope stays opaque, and a value a nested subgraph reads is left alone.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MlxSession } from '../../src/index.js';
import type { GraphIR } from '../../src/onnx/index.js';
import { decodeModel, subgraphsOf } from '../../src/onnx/index.js';
import { prepareModel } from '../../src/plan/prepare.js';
import { type GraphSpec, model, node, v } from '../helpers/build.js';
import {
  bool,
  expectSameAsOrt,
  expectSameOutputs,
  expectSameWithRewrites,
  runOn,
  seededFeed,
  seededInit,
  type Feeds,
} from '../helpers/ort.js';

const init = seededInit;
const input = seededFeed;

/** Op types of a prepared graph and of every subgraph under it, one list per graph by its name. */
function opTypes(g: GraphIR, into: Record<string, string[]> = {}): Record<string, string[]> {
  into[g.name] = g.nodes.map((n) => (n.domain && n.domain !== 'ai.onnx' ? `${n.domain}::${n.opType}` : n.opType));
  for (const n of g.nodes) for (const s of subgraphsOf(n)) opTypes(s.graph, into);
  return into;
}

async function expectSame(bytes: Uint8Array, feeds: Feeds) {
  await expectSameAsOrt(bytes, feeds, { rtol: 1e-4, atol: 1e-5 });
  await expectSameWithRewrites(bytes, feeds, true, false, { rtol: 1e-4, atol: 1e-5 });
}

describe('rewrites in subgraphs', () => {
  const X = [1, 3, 8];
  // then: Conv -> Relu with its own weight (a Constant, as exporters inline them), the square of
  // the result by Pow(., 2), and a nested If whose branch holds one more Conv -> Relu; else: a
  // Conv -> Relu on the main graph's weight.
  const nestedThen: GraphSpec = {
    name: 'nested_then',
    inputs: [],
    outputs: [v('n_out', 'float32')],
    nodes: [node('Conv', ['sq', 'w_inner'], ['n_conv'], { attrs: { kernel_shape: [1] } }), node('Relu', ['n_conv'], ['n_out'])],
    initializers: [init('w_inner', [4, 4, 1], 5)],
  };
  const nestedElse: GraphSpec = {
    name: 'nested_else',
    inputs: [],
    outputs: [v('e_out', 'float32')],
    nodes: [node('Neg', ['sq'], ['e_out'])],
  };
  const thenG: GraphSpec = {
    name: 'then',
    inputs: [],
    outputs: [v('t_out', 'float32')],
    nodes: [
      node('Constant', [], ['w_then'], { attrs: { value: { t: init('w_then', [4, 3, 3], 1) } } }),
      node('Conv', ['x', 'w_then', 'b'], ['t_conv'], { attrs: { kernel_shape: [3], pads: [1, 1] } }),
      node('Relu', ['t_conv'], ['t_relu']),
      node('Pow', ['t_relu', 'two'], ['sq']),
      node('If', ['c2'], ['t_out'], { attrs: { then_branch: { g: nestedThen }, else_branch: { g: nestedElse } } }),
    ],
    initializers: [{ name: 'two', type: 'float32', dims: [], values: [2] }],
  };
  const elseG: GraphSpec = {
    name: 'else',
    inputs: [],
    outputs: [v('e_out2', 'float32')],
    nodes: [node('Conv', ['x', 'w_main'], ['e_conv'], { attrs: { kernel_shape: [3] } }), node('Relu', ['e_conv'], ['e_out2'])],
  };
  const bytes = model({
    opsets: { '': 17 },
    inputs: [v('c', 'bool', []), v('c2', 'bool', []), v('x', 'float32', X)],
    outputs: [v('y', 'float32')],
    nodes: [node('If', ['c'], ['y'], { attrs: { then_branch: { g: thenG }, else_branch: { g: elseG } } })],
    initializers: [init('w_main', [4, 3, 3], 2), init('b', [4], 3)],
  });

  it('takes the patterns of If branches, nested ones included', async () => {
    const prepared = prepareModel(bytes);
    // conv-epilogue: then, nested then and else; pow: then; channels-last: then's Conv, whose
    // weight is the branch's own (else's is the main graph's: opaque there; the nested 1x1 stays
    // with the channels-first pointwise kernel).
    expect(prepared.rewrites).toMatchObject({ 'conv-epilogue': 3, pow: 1, 'channels-last': 1 });
    const ops = opTypes(prepared.model.graph);
    expect(ops.then).toEqual(['mlx.fused::ConvChannelsLast', 'Mul', 'If']);
    expect(ops.nested_then).toEqual(['mlx.fused::Conv']);
    expect(ops.else).toEqual(['mlx.fused::Conv']);
    for (const [c, c2] of [
      [1, 1],
      [1, 0],
      [0, 1],
    ])
      await expectSame(bytes, { c: bool([c], []), c2: bool([c2], []), x: input(X, 7) });
  });

  it('writes optimizedModelFilePath with the fused domain when only subgraphs hold fused nodes', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'rewrite-subgraphs-'));
    try {
      const path = join(dir, 'planned.onnx');
      (await MlxSession.create(bytes, { device: 'cpu', optimizedModelFilePath: path })).release();
      const written = readFileSync(path);
      expect(decodeModel(written).opsetImports.get('mlx.fused')).toBe(1);
      // The written model loads and computes what the original does on onnxruntime-node.
      const feeds = { c: bool([1], []), c2: bool([1], []), x: input(X, 9) };
      expectSameOutputs(await runOn('mlx', new Uint8Array(written), feeds), await runOn('cpu', bytes, feeds), { rtol: 1e-4, atol: 1e-5 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('gives a packed weight a name that no enclosing scope uses', async () => {
    // The main graph has an initializer named as the then branch's packed weight would be, and the
    // branch reads it: a packed weight of that name would hide it there.
    const g: GraphSpec = {
      name: 'then',
      inputs: [],
      outputs: [v('t_out', 'float32')],
      nodes: [
        node('Conv', ['x', 'w'], ['t_conv'], { attrs: { kernel_shape: [3], pads: [1, 1] } }),
        node('Add', ['t_conv', 'w/panels'], ['t_out']),
      ],
      initializers: [init('w', [4, 3, 3], 1)],
    };
    const shadowing = model({
      opsets: { '': 17 },
      inputs: [v('c', 'bool', []), v('x', 'float32', X)],
      outputs: [v('y', 'float32')],
      nodes: [node('If', ['c'], ['y'], { attrs: { then_branch: { g }, else_branch: { g: elseG } } })],
      initializers: [init('w_main', [4, 3, 3], 2), init('w/panels', [4, 1], 4, 10)],
    });
    const prepared = prepareModel(shadowing);
    expect(prepared.rewrites).toMatchObject({ 'channels-last': 1 });
    const then = prepared.model.graph.nodes[0].attributes.get('then_branch');
    expect(then?.type === 'graph' && [...then.value.initializers.keys()]).toEqual(['w/panels_']);
    await expectSame(shadowing, { c: bool([1], []), x: input(X, 8) });
  });

  it('leaves a value that a nested subgraph reads', () => {
    // t_conv is read by the nested branch as well as by the Relu: no Conv -> Relu fusion.
    const reads: GraphSpec = { name: 'reads', inputs: [], outputs: [v('r_out', 'float32')], nodes: [node('Neg', ['t_conv'], ['r_out'])] };
    const g: GraphSpec = {
      name: 'then',
      inputs: [],
      outputs: [v('t_out', 'float32'), v('t_relu', 'float32')],
      nodes: [
        node('Conv', ['x', 'w_main'], ['t_conv'], { attrs: { kernel_shape: [3] } }),
        node('Relu', ['t_conv'], ['t_relu']),
        node('If', ['c'], ['t_out'], { attrs: { then_branch: { g: reads }, else_branch: { g: reads } } }),
      ],
    };
    const other: GraphSpec = {
      name: 'other',
      inputs: [],
      outputs: [v('o1', 'float32'), v('o2', 'float32')],
      nodes: [node('Neg', ['x'], ['o1']), node('Abs', ['x'], ['o2'])],
    };
    const bytes2 = model({
      opsets: { '': 17 },
      inputs: [v('c', 'bool', []), v('x', 'float32', X)],
      outputs: [v('y', 'float32'), v('z', 'float32')],
      nodes: [node('If', ['c'], ['y', 'z'], { attrs: { then_branch: { g }, else_branch: { g: other } } })],
      initializers: [init('w_main', [4, 3, 3], 2)],
    });
    const prepared = prepareModel(bytes2);
    expect(prepared.rewrites['conv-epilogue']).toBeUndefined();
    expect(opTypes(prepared.model.graph).then).toEqual(['Conv', 'Relu', 'If']);
  });
});

// validateGraph: dangling edges named by node, op and value; lenient sorting of out-of-order
// files (stable, and safe for long chains); cycles; scopes of subgraphs.
import { describe, expect, it } from 'vitest';
import { attr, graph, modelBytes, node, valueInfo, type GraphInit } from '../../test/helpers/proto.js';
import { OnnxDataType as T, type GraphIR, type NodeIR } from './ir.js';
import { decodeModel } from './model.js';
import { outerReferences, validateGraph } from './validate.js';

const decode = (g: GraphInit): GraphIR => decodeModel(modelBytes(g)).graph;
const io = { inputs: [valueInfo('x', T.FLOAT, [2])], outputs: [valueInfo('y', T.FLOAT, [2])] };
const order = (g: GraphIR) => g.nodes.map((n) => n.name);

function irNode(name: string, inputs: string[], outputs: string[]): NodeIR {
  return { name, opType: 'Relu', domain: 'ai.onnx', inputs, outputs, attributes: new Map() };
}

describe('validateGraph', () => {
  it('reports a dangling edge with the node, its op and the missing value', () => {
    const g = decode({
      ...io,
      name: 'main',
      nodes: [node('Relu', ['x'], ['a'], [], { name: 'r' }), node('Add', ['a', 'bias'], ['y'], [], { name: 'add' })],
    });
    expect(() => validateGraph(g)).toThrow(
      "graph 'main': node 'add' (Add) reads 'bias', which is not a graph input, an initializer, or an output of any node (dangling edge)",
    );
  });

  it('accepts omitted optional inputs, initializers and sorted graphs without changing them', () => {
    const g = decode({
      ...io,
      initializers: [],
      nodes: [node('Clip', ['x', '', ''], ['a'], [], { name: 'clip' }), node('Relu', ['a'], ['y'], [], { name: 'relu' })],
    });
    const nodes = g.nodes;
    expect(validateGraph(g).nodes).toBe(nodes);
  });

  it('sorts nodes that are out of order, keeping file order where dependencies allow', () => {
    const g = decode({
      ...io,
      nodes: [
        node('Add', ['b', 'c'], ['y'], [], { name: 'last' }),
        node('Relu', ['x'], ['a'], [], { name: 'first' }),
        node('Neg', ['a'], ['c'], [], { name: 'third' }),
        node('Abs', ['a'], ['b'], [], { name: 'second' }),
        node('Exp', ['x'], ['unused'], [], { name: 'free' }),
      ],
    });
    expect(order(validateGraph(g))).toEqual(['first', 'second', 'third', 'last', 'free']);
  });

  it('sorts a long reversed chain without exhausting the stack', () => {
    const n = 50_000;
    const nodes = Array.from({ length: n }, (_, i) =>
      irNode(`n${i}`, [i === 0 ? 'x' : `v${i - 1}`], [i === n - 1 ? 'y' : `v${i}`]),
    ).reverse();
    const g: GraphIR = {
      name: 'chain',
      nodes,
      inputs: [{ name: 'x', type: { kind: 'unknown' } }],
      outputs: [{ name: 'y', type: { kind: 'unknown' } }],
      initializers: new Map(),
      inputsWithDefaults: new Set(),
      valueInfo: new Map(),
      sparseInitializers: new Map(),
    };
    validateGraph(g);
    expect(g.nodes[0].name).toBe('n0');
    expect(g.nodes[n - 1].name).toBe(`n${n - 1}`);
  });

  it('detects cycles and says which nodes form them', () => {
    const g = decode({
      ...io,
      name: 'loop',
      nodes: [
        node('Relu', ['x'], ['a'], [], { name: 'r' }),
        node('Add', ['a', 'c'], ['b'], [], { name: 'add' }),
        node('Neg', ['b'], ['c'], [], { name: 'neg' }),
        node('Identity', ['b'], ['y'], [], { name: 'out' }),
      ],
    });
    expect(() => validateGraph(g)).toThrow(
      "graph 'loop' has a cycle: node 'add' (Add) -> node 'neg' (Neg) -> node 'add' (Add) (each feeds the next)",
    );
    const self = decode({ ...io, name: 'self', nodes: [node('Add', ['x', 'y'], ['y'], [], { name: 'me' })] });
    expect(() => validateGraph(self)).toThrow("graph 'self' has a cycle: node 'me' (Add) -> node 'me' (Add)");
  });

  it('refuses values defined twice and outputs nothing produces', () => {
    const twice = decode({ ...io, nodes: [node('Relu', ['x'], ['y'], [], { name: 'a' }), node('Neg', ['x'], ['y'], [], { name: 'b' })] });
    expect(() => validateGraph(twice)).toThrow("value 'y' is produced by both node 'a' (Relu) and node 'b' (Neg)");
    const shadow = decode({ ...io, nodes: [node('Relu', ['x'], ['x'], [], { name: 'a' })] });
    expect(() => validateGraph(shadow)).toThrow("node 'a' (Relu) produces 'x', which is already a graph input or initializer");
    const noOut = decode({ ...io, name: 'g', nodes: [node('Relu', ['x'], ['z'])] });
    expect(() => validateGraph(noOut)).toThrow("graph 'g': output 'y' is not produced by any node, nor a graph input or initializer");
    const dupIn = decode({ inputs: [valueInfo('x'), valueInfo('x')], outputs: [valueInfo('x')] });
    expect(() => validateGraph(dupIn)).toThrow("input 'x' is declared twice");
  });

  it('lets subgraphs read outer values, and orders their producers first', () => {
    const body = graph({ name: 'then', nodes: [node('Add', ['x', 'late'], ['t'], [], { name: 'inner' })], outputs: [valueInfo('t')] });
    const other = graph({ name: 'else', nodes: [], outputs: [valueInfo('x')] });
    const g = decode({
      inputs: [valueInfo('x', T.FLOAT, [2]), valueInfo('c', T.BOOL, [])],
      outputs: [valueInfo('y')],
      nodes: [
        node('If', ['c'], ['y'], [attr.graph('then_branch', body), attr.graph('else_branch', other)], { name: 'if' }),
        node('Relu', ['x'], ['late'], [], { name: 'producer' }),
      ],
    });
    expect(outerReferences(g.nodes[0].attributes.get('then_branch')!.value as GraphIR)).toEqual(new Set(['x', 'late']));
    expect(order(validateGraph(g))).toEqual(['producer', 'if']);
  });

  it('names the inner node of a dangling edge in a subgraph, and finds a subgraph reading its own node', () => {
    const bad = graph({ name: 'body', nodes: [node('Add', ['x', 'nowhere'], ['t'], [], { name: 'inner' })], outputs: [valueInfo('t')] });
    const g = decode({
      inputs: [valueInfo('x'), valueInfo('c', T.BOOL)],
      outputs: [valueInfo('y')],
      nodes: [node('If', ['c'], ['y'], [attr.graph('then_branch', bad)], { name: 'if' })],
    });
    expect(() => validateGraph(g)).toThrow(
      "graph 'body': node 'inner' (Add) reads 'nowhere', which is not a graph input, an initializer, a value of an enclosing graph, or an output of any node (dangling edge)",
    );
    const own = graph({ name: 'body', nodes: [node('Neg', ['y'], ['t'])], outputs: [valueInfo('t')] });
    const g2 = decode({
      inputs: [valueInfo('c', T.BOOL)],
      outputs: [valueInfo('y')],
      nodes: [node('If', ['c'], ['y'], [attr.graph('then_branch', own)], { name: 'if' })],
    });
    expect(() => validateGraph(g2)).toThrow("has a cycle: node 'if' (If) -> node 'if' (If)");
  });

  it('checks a subgraph on its own given the outer names', () => {
    const sub = decode({
      name: 'body',
      inputs: [valueInfo('i')],
      outputs: [valueInfo('o')],
      nodes: [node('Add', ['i', 'outer'], ['o'], [], { name: 'add' })],
    });
    expect(() => validateGraph(sub)).toThrow("node 'add' (Add) reads 'outer'");
    expect(validateGraph(sub, ['outer']).nodes).toHaveLength(1);
  });

  it('refuses attribute references outside function bodies', () => {
    const g = decode({
      ...io,
      nodes: [node('LeakyRelu', ['x'], ['y'], [attr.raw({ name: 'alpha', refAttrName: 'a', type: 1 })], { name: 'l' })],
    });
    expect(() => validateGraph(g)).toThrow(
      "node 'l' (LeakyRelu) has attribute 'alpha' referring to 'a' of a calling function, but it is not in a function body",
    );
  });
});

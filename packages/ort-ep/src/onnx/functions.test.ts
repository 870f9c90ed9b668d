// expandFunctions: bodies inlined with unique names, attributes bound from the caller or the
// function's defaults, opset versions of the function kept, nesting, subgraphs and recursion.
import { AttributeProto_AttributeType as A } from 'onnx-buf';
import { describe, expect, it } from 'vitest';
import { attr, fn, graph, modelBytes, node, valueInfo, type GraphInit } from '../../test/helpers/proto.js';
import { expandFunctions } from './functions.js';
import { OnnxDataType as T, type GraphIR, type ModelIR, type NodeIR } from './ir.js';
import { decodeModel } from './model.js';
import { validateGraph } from './validate.js';

// Scale(x) = x * alpha, with alpha a float attribute defaulting to 3.
const scale = fn({
  name: 'Scale',
  domain: 'com.ex',
  inputs: ['x'],
  outputs: ['y'],
  attributes: [],
  defaults: [attr.float('alpha', 3)],
  nodes: [node('Constant', [], ['c'], [attr.ref('value_float', 'alpha', A.FLOAT)]), node('Mul', ['x', 'c'], ['y'])],
});
// Leaky(x) = LeakyRelu(x) with the caller's alpha when it gives one, the op's default otherwise.
const leaky = fn({
  name: 'Leaky',
  domain: 'com.ex',
  inputs: ['x'],
  outputs: ['y'],
  attributes: ['alpha'],
  nodes: [node('LeakyRelu', ['x'], ['y'], [attr.ref('alpha', 'alpha', A.FLOAT)])],
});

function expanded(
  g: GraphInit,
  functions = [scale, leaky],
  opsets: [string, number][] = [
    ['', 17],
    ['com.ex', 1],
  ],
): ModelIR {
  return expandFunctions(decodeModel(modelBytes(g, { functions, opsets })));
}
const summary = (nodes: NodeIR[]) => nodes.map((n) => `${n.name}: ${n.opType}(${n.inputs.join(', ')}) -> ${n.outputs.join(', ')}`);
const io = { inputs: [valueInfo('in', T.FLOAT, [2])], outputs: [valueInfo('out', T.FLOAT, [2])] };

describe('expandFunctions', () => {
  it('inlines a body with names prefixed by the caller and attributes bound', () => {
    const m = expanded({ ...io, nodes: [node('Scale', ['in'], ['out'], [attr.float('alpha', 2)], { name: 'scale1', domain: 'com.ex' })] });
    expect(summary(m.graph.nodes)).toEqual(['scale1/Constant#0: Constant() -> scale1/c', 'scale1/Mul#1: Mul(in, scale1/c) -> out']);
    expect(m.graph.nodes[0].attributes.get('value_float')).toEqual({ type: 'float', value: 2 });
    expect(m.graph.nodes.every((n) => n.domain === 'ai.onnx' && !n.refAttrs && n.opsetOverride === undefined)).toBe(true);
    expect(validateGraph(m.graph).nodes).toHaveLength(2);
  });

  it('takes the function default when the caller does not set the attribute, and drops it when neither does', () => {
    const m = expanded({
      ...io,
      nodes: [node('Scale', ['in'], ['mid'], [], { domain: 'com.ex' }), node('Leaky', ['mid'], ['out'], [], { domain: 'com.ex' })],
    });
    expect(m.graph.nodes[0].attributes.get('value_float')).toEqual({ type: 'float', value: 3 });
    const lrelu = m.graph.nodes.find((n) => n.opType === 'LeakyRelu')!;
    expect(lrelu.attributes.size).toBe(0);
    const m2 = expanded({ ...io, nodes: [node('Leaky', ['in'], ['out'], [attr.float('alpha', 0.25)], { domain: 'com.ex' })] });
    expect(m2.graph.nodes[0].attributes.get('alpha')).toEqual({ type: 'float', value: 0.25 });
  });

  it('gives each call site its own names, also for callers of the same name', () => {
    const m = expanded({
      ...io,
      nodes: [
        node('Scale', ['in'], ['a'], [], { name: 's', domain: 'com.ex' }),
        node('Scale', ['a'], ['out'], [], { name: 's', domain: 'com.ex' }),
      ],
    });
    expect(summary(m.graph.nodes)).toEqual([
      's/Constant#0: Constant() -> s/c',
      's/Mul#1: Mul(in, s/c) -> a',
      's#2/Constant#0: Constant() -> s#2/c',
      's#2/Mul#1: Mul(a, s#2/c) -> out',
    ]);
    validateGraph(m.graph);
  });

  it('keeps omitted optional inputs omitted and names outputs the caller does not take', () => {
    const f = fn({
      name: 'Two',
      domain: 'com.ex',
      inputs: ['x', 'bias'],
      outputs: ['y', 'aux'],
      nodes: [node('Clip', ['x', 'bias', ''], ['aux']), node('Relu', ['aux'], ['y'])],
    });
    const m = expanded({ ...io, nodes: [node('Two', ['in'], ['out'], [], { name: 't', domain: 'com.ex' })] }, [f]);
    expect(summary(m.graph.nodes)).toEqual(['t/Clip#0: Clip(in, , ) -> t/aux', 't/Relu#1: Relu(t/aux) -> out']);
  });

  it("records the function's own opset version where it differs from the model's", () => {
    const old = fn({
      name: 'Old',
      domain: 'com.ex',
      inputs: ['x'],
      outputs: ['y'],
      opsets: [['', 11]],
      nodes: [node('Relu', ['x'], ['y'])],
    });
    const same = fn({
      name: 'Same',
      domain: 'com.ex',
      inputs: ['x'],
      outputs: ['y'],
      opsets: [['', 17]],
      nodes: [node('Relu', ['x'], ['y'])],
    });
    const m = expanded(
      { ...io, nodes: [node('Old', ['in'], ['a'], [], { domain: 'com.ex' }), node('Same', ['a'], ['out'], [], { domain: 'com.ex' })] },
      [old, same],
    );
    expect(m.graph.nodes.map((n) => n.opsetOverride)).toEqual([11, undefined]);
  });

  it('expands nested functions, binding attributes through both levels', () => {
    // Outer(x; beta) = Leaky(Scale(x; alpha = beta); alpha = beta), opset 13 inside.
    const outer = fn({
      name: 'Outer',
      domain: 'com.ex',
      inputs: ['x'],
      outputs: ['y'],
      attributes: ['beta'],
      opsets: [
        ['', 13],
        ['com.ex', 1],
      ],
      nodes: [
        node('Scale', ['x'], ['s'], [attr.ref('alpha', 'beta', A.FLOAT)], { name: 'inner', domain: 'com.ex' }),
        node('Leaky', ['s'], ['y'], [attr.ref('alpha', 'beta', A.FLOAT)], { domain: 'com.ex' }),
      ],
    });
    const m = expanded({ ...io, nodes: [node('Outer', ['in'], ['out'], [attr.float('beta', 0.5)], { name: 'o', domain: 'com.ex' })] }, [
      outer,
      scale,
      leaky,
    ]);
    expect(summary(m.graph.nodes)).toEqual([
      'o/inner/Constant#0: Constant() -> o/inner/c',
      'o/inner/Mul#1: Mul(in, o/inner/c) -> o/s',
      'o/Leaky#1/LeakyRelu#0: LeakyRelu(o/s) -> out',
    ]);
    expect(m.graph.nodes[0].attributes.get('value_float')).toEqual({ type: 'float', value: 0.5 });
    expect(m.graph.nodes[2].attributes.get('alpha')).toEqual({ type: 'float', value: 0.5 });
    // Scale and Leaky import ai.onnx 17 like the model: their nodes need no override.
    expect(m.graph.nodes.map((n) => n.opsetOverride)).toEqual([undefined, undefined, undefined]);
    validateGraph(m.graph);
  });

  it("expands calls inside subgraphs and renames function-local names inside the body's subgraphs", () => {
    // Body: If(cond) then { t = Neg(x) } else { e = Scale(x) }: the branches read the function's x.
    const branchy = fn({
      name: 'Branchy',
      domain: 'com.ex',
      inputs: ['cond', 'x'],
      outputs: ['y'],
      nodes: [
        node(
          'If',
          ['cond'],
          ['y'],
          [
            attr.graph('then_branch', graph({ name: 'then', nodes: [node('Neg', ['x'], ['t'])], outputs: [valueInfo('t')] })),
            attr.graph(
              'else_branch',
              graph({ name: 'else', nodes: [node('Scale', ['x'], ['e'], [], { domain: 'com.ex' })], outputs: [valueInfo('e')] }),
            ),
          ],
          { name: 'if' },
        ),
      ],
    });
    const m = expanded(
      {
        inputs: [valueInfo('c', T.BOOL, []), valueInfo('in', T.FLOAT, [2])],
        outputs: [valueInfo('out')],
        nodes: [node('Branchy', ['c', 'in'], ['out'], [], { name: 'b', domain: 'com.ex' })],
      },
      [branchy, scale],
    );
    const [ifNode] = m.graph.nodes;
    expect(summary([ifNode])).toEqual(['b/if: If(c) -> out']);
    const then = ifNode.attributes.get('then_branch')!.value as GraphIR;
    const otherwise = ifNode.attributes.get('else_branch')!.value as GraphIR;
    expect(summary(then.nodes)).toEqual(['b/if/then_branch/Neg#0: Neg(in) -> b/t']);
    expect(then.outputs.map((o) => o.name)).toEqual(['b/t']);
    expect(summary(otherwise.nodes)).toEqual([
      'b/if/else_branch/Scale#0/Constant#0: Constant() -> b/if/else_branch/Scale#0/c',
      'b/if/else_branch/Scale#0/Mul#1: Mul(in, b/if/else_branch/Scale#0/c) -> b/e',
    ]);
    validateGraph(m.graph);
  });

  it('expands a call in a subgraph of the main graph', () => {
    const m = expanded({
      inputs: [valueInfo('c', T.BOOL, []), valueInfo('in', T.FLOAT, [2])],
      outputs: [valueInfo('out')],
      nodes: [
        node(
          'If',
          ['c'],
          ['out'],
          [
            attr.graph(
              'then_branch',
              graph({ nodes: [node('Scale', ['in'], ['t'], [], { name: 's', domain: 'com.ex' })], outputs: [valueInfo('t')] }),
            ),
            attr.graph('else_branch', graph({ nodes: [node('Identity', ['in'], ['e'])], outputs: [valueInfo('e')] })),
          ],
        ),
      ],
    });
    const then = m.graph.nodes[0].attributes.get('then_branch')!.value as GraphIR;
    expect(then.nodes.map((n) => n.opType)).toEqual(['Constant', 'Mul']);
    validateGraph(m.graph);
  });

  it('picks the overload the node names', () => {
    const v1 = fn({ name: 'Act', domain: 'com.ex', overload: 'relu', inputs: ['x'], outputs: ['y'], nodes: [node('Relu', ['x'], ['y'])] });
    const v2 = fn({ name: 'Act', domain: 'com.ex', overload: 'tanh', inputs: ['x'], outputs: ['y'], nodes: [node('Tanh', ['x'], ['y'])] });
    const m = expanded({ ...io, nodes: [node('Act', ['in'], ['out'], [], { domain: 'com.ex', overload: 'tanh' })] }, [v1, v2]);
    expect(m.graph.nodes.map((n) => n.opType)).toEqual(['Tanh']);
  });

  it('refuses recursion and calls with more inputs than the function declares', () => {
    const selfCall = fn({
      name: 'Loop',
      domain: 'com.ex',
      inputs: ['x'],
      outputs: ['y'],
      nodes: [node('Loop', ['x'], ['y'], [], { domain: 'com.ex' })],
    });
    expect(() => expanded({ ...io, nodes: [node('Loop', ['in'], ['out'], [], { name: 'l', domain: 'com.ex' })] }, [selfCall])).toThrow(
      "node 'l/Loop#0' (com.ex:Loop): function 'com.ex:Loop' calls itself (com.ex:Loop -> com.ex:Loop)",
    );
    const ping = fn({
      name: 'Ping',
      domain: 'com.ex',
      inputs: ['x'],
      outputs: ['y'],
      nodes: [node('Pong', ['x'], ['y'], [], { domain: 'com.ex' })],
    });
    const pong = fn({
      name: 'Pong',
      domain: 'com.ex',
      inputs: ['x'],
      outputs: ['y'],
      nodes: [node('Ping', ['x'], ['y'], [], { domain: 'com.ex' })],
    });
    expect(() => expanded({ ...io, nodes: [node('Ping', ['in'], ['out'], [], { domain: 'com.ex' })] }, [ping, pong])).toThrow(
      'com.ex:Ping -> com.ex:Pong -> com.ex:Ping',
    );
    expect(() => expanded({ ...io, nodes: [node('Scale', ['in', 'in'], ['out'], [], { name: 'x2', domain: 'com.ex' })] })).toThrow(
      "node 'x2' (com.ex:Scale): it has 2 inputs and 1 outputs, but function 'com.ex:Scale' declares 1 and 1",
    );
  });

  it('leaves models without functions, and nodes that call none, as they are', () => {
    const m = decodeModel(modelBytes({ ...io, nodes: [node('Relu', ['in'], ['out'])] }));
    const before = m.graph.nodes;
    expect(expandFunctions(m).graph.nodes).toBe(before);
  });
});

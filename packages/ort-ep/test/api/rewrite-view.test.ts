// The rewrites share one GraphView across the passes in a row that replace nothing
// (plan/rewrite/index.ts): the result must be exactly what a view made afresh for every pass gives,
// node names included.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { decodeModel, type GraphIR } from '../../src/onnx/index.js';
import { defaultRegistry } from '../../src/ops/index.js';
import { REWRITES, rewriteGraph, type RewriteName } from '../../src/plan/rewrite/index.js';
import { GraphView } from '../../src/plan/rewrite/view.js';
import { expectShared, sharedPath } from '../helpers/shared.js';

const decode = (m: string) => {
  const path = join(sharedPath('models'), m, 'model.onnx');
  expectShared(path);
  return decodeModel(readFileSync(path), { modelPath: path }).graph;
};

/** The reference: a new view for every pass, as before views were shared. */
function rewriteFresh(graph: GraphIR): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const name of Object.keys(REWRITES) as RewriteName[]) {
    const view = new GraphView(graph, { packDense: true });
    REWRITES[name](view);
    const n = view.commit();
    if (n) counts[name] = n;
  }
  return counts;
}

const shape = (g: GraphIR) => ({
  nodes: g.nodes.map((n) => [n.name, n.domain, n.opType, n.inputs.join(','), n.outputs.join(','), [...n.attributes.keys()].join(',')]),
  initializers: [...g.initializers.keys()].sort(),
});

describe('rewrites over one shared view', () => {
  for (const m of ['llama-tiny', 'gpt2-tiny-int4', 'bert-tiny', 'mobilenet-v3-ish', 'small-cnn-qdq']) {
    it(`give ${m} the graph that fresh views give`, () => {
      const shared = decode(m);
      const fresh = decode(m);
      const counts = rewriteGraph(shared, true, defaultRegistry, { packDense: true });
      expect(counts).toEqual(rewriteFresh(fresh));
      expect(Object.keys(counts).length).toBeGreaterThan(0);
      expect(shape(shared)).toEqual(shape(fresh));
    });
  }

  it('a view is reusable after a pass that replaced nothing, with its names numbered afresh, and not after one that did', () => {
    const g = decode('llama-tiny');
    const view = new GraphView(g);
    const first = g.nodes[0];
    expect(view.name('Probe', first)).toBe(`${first.name}/Probe#0`);
    expect(view.commit()).toBe(0);
    expect(view.reusable()).toBe(true);
    expect(view.name('Probe', first)).toBe(`${first.name}/Probe#0`);
    view.replace([first], { ...first, name: 'replacement' });
    expect(view.reusable()).toBe(false);
  });
});

// Model-local functions (FunctionProto) are expanded into their bodies before planning.
import { OnnxLoadError, type AttrValue, type FunctionIR, type GraphIR, type ModelIR, type NodeIR } from './ir.js';
import { DEFAULT_DOMAIN } from './model.js';

function bindAttributes(body: NodeIR, caller: NodeIR, fn: FunctionIR): Map<string, AttrValue> {
  const out = new Map(body.attributes);
  for (const [name, ref] of body.refAttrs ?? []) {
    const v = caller.attributes.get(ref) ?? fn.attributeDefaults.get(ref);
    if (v) out.set(name, v);
  }
  return out;
}

function expandNode(node: NodeIR, fn: FunctionIR, model: ModelIR, serial: number): NodeIR[] {
  const prefix = `${node.name || node.opType}__${fn.name}${serial}`;
  const rename = new Map<string, string>();
  fn.inputs.forEach((f, i) => rename.set(f, node.inputs[i] ?? ''));
  fn.outputs.forEach((f, i) => rename.set(f, node.outputs[i] ?? ''));
  const name = (n: string) => (n === '' ? '' : rename.get(n) ?? `${prefix}/${n}`);
  const fnOpset = fn.opsetImports.get(DEFAULT_DOMAIN);
  const modelOpset = model.opsetImports.get(DEFAULT_DOMAIN);
  return fn.nodes.map((b, k) => ({
    name: `${prefix}/${b.name || `${b.opType}_${k}`}`,
    opType: b.opType,
    domain: b.domain,
    inputs: b.inputs.map(name),
    outputs: b.outputs.map(name),
    attributes: bindAttributes(b, node, fn),
    ...(b.domain === DEFAULT_DOMAIN && fnOpset !== undefined && fnOpset !== modelOpset ? { opsetOverride: fnOpset } : {}),
  }));
}

function expandGraph(g: GraphIR, model: ModelIR, counter: { n: number }, depth: number): void {
  if (depth > 32) throw new OnnxLoadError('model-local functions nest more than 32 levels deep (recursive function?)');
  let changed = true;
  let rounds = 0;
  while (changed) {
    changed = false;
    if (++rounds > 32) throw new OnnxLoadError('model-local functions call each other recursively');
    const next: NodeIR[] = [];
    for (const node of g.nodes) {
      const fn = model.functions.get(`${node.domain}:${node.opType}`);
      if (fn) {
        next.push(...expandNode(node, fn, model, counter.n++));
        changed = true;
      } else next.push(node);
    }
    g.nodes = next;
  }
  for (const node of g.nodes) {
    for (const a of node.attributes.values()) {
      if (a.type === 'graph') expandGraph(a.value, model, counter, depth + 1);
      else if (a.type === 'graphs') for (const sg of a.value) expandGraph(sg, model, counter, depth + 1);
    }
  }
}

/** Replaces calls of model-local functions by their bodies, everywhere in the model (in place). */
export function expandFunctions(model: ModelIR): ModelIR {
  if (model.functions.size) expandGraph(model.graph, model, { n: 0 }, 0);
  return model;
}

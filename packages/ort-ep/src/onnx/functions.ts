// Model-local functions (FunctionProto) are inlined before planning, so that the registry only
// ever sees primitive ops. Each call site gets its own copy of the body: names are prefixed with
// the calling node's name (subgraph scopes keep their shadowing), attributes that refer to the
// caller's (ref_attr_name) are bound, and nodes of a function that imports another opset than the
// model carry that version in opsetOverride.
import { OnnxLoadError } from '../errors.js';
import type { AttrValue, FunctionIR, GraphIR, ModelIR, NodeIR, ValueInfoIR } from './ir.js';
import { functionKey } from './model.js';

const MAX_DEPTH = 64;
/** Nodes a model may have once its functions are inlined: a few levels of functions that call
 *  others several times grow exponentially, and would otherwise exhaust memory. */
export const MAX_EXPANDED_NODES = 1_000_000;

type Rename = (name: string) => string;

interface Call {
  model: ModelIR;
  fn: FunctionIR;
  caller: NodeIR;
  prefix: string;
}

/** The attribute values a body node gets: its own, plus those it takes from the caller or the function's defaults. */
function bindAttributes(node: NodeIR, call: Call, cloneValue: (v: AttrValue) => AttrValue): Map<string, AttrValue> {
  const out = new Map<string, AttrValue>();
  for (const [k, v] of node.attributes) out.set(k, cloneValue(v));
  for (const [name, ref] of node.refAttrs ?? []) {
    // The caller's value is used as given; an attribute neither the caller nor the function sets is left out (its op default applies).
    const v = call.caller.attributes.get(ref) ?? call.fn.attributeDefaults.get(ref);
    if (v) out.set(name, v);
  }
  return out;
}

function opsetOverrideFor(domain: string, call: Call): number | undefined {
  const fv = call.fn.opsetImports.get(domain);
  return fv !== undefined && fv !== call.model.opsetImports.get(domain) ? fv : undefined;
}

function cloneNode(node: NodeIR, rename: Rename, call: Call): NodeIR {
  const cloneValue = (v: AttrValue): AttrValue => {
    if (v.type === 'graph') return { type: 'graph', value: cloneGraph(v.value, rename, call) };
    if (v.type === 'graphs') return { type: 'graphs', value: v.value.map((g) => cloneGraph(g, rename, call)) };
    return v;
  };
  const out: NodeIR = {
    name: `${call.prefix}/${node.name}`,
    opType: node.opType,
    domain: node.domain,
    inputs: node.inputs.map(rename),
    outputs: node.outputs.map(rename),
    attributes: bindAttributes(node, call, cloneValue),
  };
  if (node.overload) out.overload = node.overload;
  const override = opsetOverrideFor(node.domain, call);
  if (override !== undefined) out.opsetOverride = override;
  return out;
}

/** A copy of a subgraph of a function body: names it defines get the call's prefix, others resolve in the enclosing scope. */
function cloneGraph(g: GraphIR, outer: Rename, call: Call): GraphIR {
  const local = new Set<string>([...g.inputs.map((i) => i.name), ...g.initializers.keys()]);
  for (const n of g.nodes) for (const o of n.outputs) if (o) local.add(o);
  const rename: Rename = (n) => (n === '' ? '' : local.has(n) ? `${call.prefix}/${n}` : outer(n));
  const info = (v: ValueInfoIR): ValueInfoIR => ({ name: rename(v.name), type: v.type });
  return {
    name: g.name,
    nodes: g.nodes.map((n) => cloneNode(n, rename, call)),
    inputs: g.inputs.map(info),
    outputs: g.outputs.map(info),
    initializers: new Map([...g.initializers].map(([k, t]) => [rename(k), t])),
    inputsWithDefaults: new Set([...g.inputsWithDefaults].map(rename)),
    valueInfo: new Map([...g.valueInfo.values()].map((v) => [rename(v.name), info(v)])),
    sparseInitializers: new Map([...g.sparseInitializers].map(([k, s]) => [rename(k), s])),
  };
}

class Expander {
  private readonly prefixes = new Set<string>();
  /** Nodes inlined so far. */
  private expanded = 0;

  constructor(private readonly model: ModelIR) {}

  private uniquePrefix(name: string): string {
    let p = name;
    for (let k = 2; this.prefixes.has(p); k++) p = `${name}#${k}`;
    this.prefixes.add(p);
    return p;
  }

  /** Expands every call in `nodes` (and in their subgraphs); `stack` holds the functions being expanded. */
  expandNodes(nodes: NodeIR[], stack: string[], valueInfo: Map<string, ValueInfoIR>): NodeIR[] {
    const out: NodeIR[] = [];
    for (const node of nodes) {
      for (const a of node.attributes.values()) {
        if (a.type === 'graph') this.expandGraph(a.value, stack);
        else if (a.type === 'graphs') for (const g of a.value) this.expandGraph(g, stack);
      }
      const key = functionKey(node.domain, node.opType, node.overload);
      const fn = this.model.functions.get(key);
      if (!fn) out.push(node);
      else for (const n of this.inline(node, fn, key, stack, valueInfo)) out.push(n);
    }
    return out;
  }

  expandGraph(g: GraphIR, stack: string[]): void {
    g.nodes = this.expandNodes(g.nodes, stack, g.valueInfo);
  }

  private inline(caller: NodeIR, fn: FunctionIR, key: string, stack: string[], valueInfo: Map<string, ValueInfoIR>): NodeIR[] {
    const where = `node '${caller.name}' (${caller.domain}:${caller.opType})`;
    if (stack.includes(key)) throw new OnnxLoadError(`${where}: function '${key}' calls itself (${[...stack, key].join(' -> ')})`);
    if (stack.length >= MAX_DEPTH) throw new OnnxLoadError(`${where}: functions nest more than ${MAX_DEPTH} levels deep`);
    if (caller.inputs.length > fn.inputs.length || caller.outputs.length > fn.outputs.length) {
      throw new OnnxLoadError(
        `${where}: it has ${caller.inputs.length} inputs and ${caller.outputs.length} outputs, but function '${key}' declares ${fn.inputs.length} and ${fn.outputs.length}`,
      );
    }
    const call: Call = { model: this.model, fn, caller, prefix: this.uniquePrefix(caller.name) };
    const formal = new Map<string, string>();
    fn.inputs.forEach((f, i) => formal.set(f, caller.inputs[i] ?? ''));
    // An output the caller does not take still needs a name inside the body, where other nodes may use it.
    fn.outputs.forEach((f, i) => formal.set(f, caller.outputs[i] || `${call.prefix}/${f}`));
    const rename: Rename = (n) => (n === '' ? '' : (formal.get(n) ?? `${call.prefix}/${n}`));
    this.expanded += fn.nodes.length;
    if (this.expanded > MAX_EXPANDED_NODES) {
      throw new OnnxLoadError(
        `${where}: inlining the model's functions makes more than ${MAX_EXPANDED_NODES.toLocaleString('en')} nodes (calls of function '${key}' nest and repeat)`,
      );
    }
    const body = fn.nodes.map((n) => cloneNode(n, rename, call));
    for (const v of fn.valueInfo.values()) {
      const name = rename(v.name);
      if (name && !valueInfo.has(name)) valueInfo.set(name, { name, type: v.type });
    }
    return this.expandNodes(body, [...stack, key], valueInfo);
  }
}

/**
 * Replaces, in place and everywhere in the model (subgraphs included), each node that calls a
 * model-local function by the function's body. Returns the model.
 */
export function expandFunctions(model: ModelIR): ModelIR {
  if (model.functions.size) new Expander(model).expandGraph(model.graph, []);
  return model;
}

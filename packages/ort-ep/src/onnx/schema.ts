// Checks a model against ONNX's operator schemas (schema-data.ts, generated from the onnx
// package), as onnxruntime does when it loads one: the IR version and opset imports must be ones
// the schemas know, every node must name only attributes its op defines and give the required
// ones, its input and output counts must fit, and element types must satisfy the op's type
// constraints (inputs bound to one type parameter agree; `Add(float, int64)` is refused).
// Element types are inferred through the graph from graph inputs, initializers, value infos and
// each op's schema; where a type cannot be known, its checks are skipped. Ops without a schema
// (onnxruntime's contrib domain, custom domains) are left to the registry.
import { OnnxLoadError } from '../errors.js';
import type { GraphIR, ModelIR, NodeIR, TypeIR } from './ir.js';
import { OnnxDataType } from './ir.js';
import { DEFAULT_DOMAIN } from './model.js';
import { schemaData } from './schema-data.js';
import type { Formal, OpSchema } from './schema-types.js';

export type { OpSchema, SchemaData } from './schema-types.js';
import { subgraphsOf } from './validate.js';

/** Domains whose opset range the schemas define (others, like com.microsoft, are left alone). */
export function knownOpsetRange(domain: string): [number, number] | undefined {
  const ops = schemaData.ops[domain];
  if (!ops) return undefined;
  if (domain === DEFAULT_DOMAIN) return [1, schemaData.maxOpset];
  let max = 1;
  for (const versions of Object.values(ops)) for (const s of versions) max = Math.max(max, s.since);
  return [1, max];
}

/** The schema of `op` in `domain` at `opset` (the newest version not after it), if any. */
export function schemaOf(domain: string, op: string, opset: number): OpSchema | undefined {
  const versions = schemaData.ops[domain]?.[op];
  if (!versions) return undefined;
  let found: OpSchema | undefined;
  for (const s of versions) if (s.since <= opset) found = s;
  return found;
}

// ONNX's names of the element types, for type strings like 'tensor(float)'.
const onnxNames: Record<number, string> = {
  [OnnxDataType.FLOAT]: 'float',
  [OnnxDataType.UINT8]: 'uint8',
  [OnnxDataType.INT8]: 'int8',
  [OnnxDataType.UINT16]: 'uint16',
  [OnnxDataType.INT16]: 'int16',
  [OnnxDataType.INT32]: 'int32',
  [OnnxDataType.INT64]: 'int64',
  [OnnxDataType.STRING]: 'string',
  [OnnxDataType.BOOL]: 'bool',
  [OnnxDataType.FLOAT16]: 'float16',
  [OnnxDataType.DOUBLE]: 'double',
  [OnnxDataType.UINT32]: 'uint32',
  [OnnxDataType.UINT64]: 'uint64',
  [OnnxDataType.COMPLEX64]: 'complex64',
  [OnnxDataType.COMPLEX128]: 'complex128',
  [OnnxDataType.BFLOAT16]: 'bfloat16',
  [OnnxDataType.FLOAT8E4M3FN]: 'float8e4m3fn',
  [OnnxDataType.FLOAT8E4M3FNUZ]: 'float8e4m3fnuz',
  [OnnxDataType.FLOAT8E5M2]: 'float8e5m2',
  [OnnxDataType.FLOAT8E5M2FNUZ]: 'float8e5m2fnuz',
  [OnnxDataType.UINT4]: 'uint4',
  [OnnxDataType.INT4]: 'int4',
  [OnnxDataType.FLOAT4E2M1]: 'float4e2m1',
  [OnnxDataType.FLOAT8E8M0]: 'float8e8m0',
  [OnnxDataType.UINT2]: 'uint2',
  [OnnxDataType.INT2]: 'int2',
};

/** A TypeIR as ONNX writes it in schemas ('tensor(float)', 'seq(tensor(int64))'), or undefined where unknown. */
export function typeString(t: TypeIR | undefined): string | undefined {
  if (!t) return undefined;
  switch (t.kind) {
    case 'tensor':
      return onnxNames[t.elemType] ? `tensor(${onnxNames[t.elemType]})` : undefined;
    case 'sparse_tensor':
      return onnxNames[t.elemType] ? `sparse_tensor(${onnxNames[t.elemType]})` : undefined;
    case 'sequence': {
      const e = typeString(t.elem);
      return e && `seq(${e})`;
    }
    case 'optional': {
      const e = typeString(t.elem);
      return e && `optional(${e})`;
    }
    case 'map': {
      // Schemas name a map's scalar values by element type alone: map(int64, string).
      const v = t.value?.kind === 'tensor' ? onnxNames[t.value.elemType] : typeString(t.value);
      return onnxNames[t.keyType] && v ? `map(${onnxNames[t.keyType]}, ${v})` : undefined;
    }
    default:
      return undefined;
  }
}

const tensorOf = (elemType: number): string | undefined => (onnxNames[elemType] ? `tensor(${onnxNames[elemType]})` : undefined);

/** Output types some ops take from attributes rather than from inputs. */
function attributeOutputType(node: NodeIR, index: number): string | undefined {
  const a = (name: string) => node.attributes.get(name);
  const int = (name: string) => {
    const v = a(name);
    return v?.type === 'int' ? v.value : undefined;
  };
  switch (node.opType) {
    case 'Cast':
      return index === 0 && int('to') !== undefined ? tensorOf(int('to')!) : undefined;
    case 'Constant': {
      for (const [name, v] of node.attributes) {
        if (v.type === 'tensor') return tensorOf(v.value.dtype);
        if (name === 'value_float') return 'tensor(float)';
        if (name === 'value_floats') return 'tensor(float)';
        if (name === 'value_int' || name === 'value_ints') return 'tensor(int64)';
        if (name === 'value_string' || name === 'value_strings') return 'tensor(string)';
      }
      return undefined;
    }
    case 'ConstantOfShape': {
      const v = a('value');
      return v?.type === 'tensor' ? tensorOf(v.value.dtype) : 'tensor(float)';
    }
    case 'RandomUniform':
    case 'RandomNormal':
      return tensorOf(int('dtype') ?? OnnxDataType.FLOAT);
    default:
      return undefined;
  }
}

interface Problem {
  node: NodeIR;
  what: string;
}

const label = (n: NodeIR) => `node '${n.name}' (${n.domain === DEFAULT_DOMAIN ? '' : `${n.domain}::`}${n.opType})`;

/** The formal parameter that actual position `i` binds to (the last one, when it is variadic). */
function formalAt(formals: Formal[], i: number): Formal | undefined {
  if (i < formals.length) return formals[i];
  const last = formals.at(-1);
  return last?.[2] === 'v' ? last : undefined;
}

/**
 * Checks one node; returns the inferred type strings of its outputs (undefined where unknown).
 * `typeOf` gives the known type of a value name.
 */
function checkNode(node: NodeIR, opset: number, typeOf: (name: string) => string | undefined, problems: Problem[]): (string | undefined)[] {
  const schema = schemaOf(node.domain || DEFAULT_DOMAIN, node.opType, opset);
  const unknownOuts = node.outputs.map((): string | undefined => undefined);
  if (!schema) return unknownOuts;
  const fail = (what: string) => problems.push({ node, what });
  // Attributes: only the ones the op defines; required ones present.
  for (const name of node.attributes.keys()) {
    if (!(name in schema.attributes))
      fail(
        `unknown attribute '${name}' (${node.opType}-${schema.since} defines ${Object.keys(schema.attributes).sort().join(', ') || 'none'})`,
      );
  }
  for (const [name, [, required]] of Object.entries(schema.attributes)) {
    if (required && !node.attributes.has(name)) fail(`missing required attribute '${name}'`);
  }
  // Input and output counts (trailing omitted optionals do not count).
  let nIn = node.inputs.length;
  while (nIn > 0 && !node.inputs[nIn - 1]) nIn--;
  if (nIn < schema.minInputs || nIn > schema.maxInputs) {
    fail(
      `has ${nIn} input(s); ${node.opType}-${schema.since} takes ${schema.minInputs === schema.maxInputs ? schema.minInputs : `${schema.minInputs} to ${schema.maxInputs >= 2 ** 31 - 1 ? 'any number' : schema.maxInputs}`}`,
    );
  }
  if (node.outputs.length > schema.maxOutputs)
    fail(`has ${node.outputs.length} outputs; ${node.opType}-${schema.since} makes at most ${schema.maxOutputs}`);
  node.inputs.forEach((name, i) => {
    if (name) return;
    const f = formalAt(schema.inputs, i);
    if (f && f[2] === 's') fail(`input ${i} ('${f[0]}') is required but omitted`);
  });
  // Type constraints.
  const bound = new Map<string, string>();
  node.inputs.forEach((name, i) => {
    if (!name) return;
    const f = formalAt(schema.inputs, i);
    const t = typeOf(name);
    if (!f || !t) return;
    const param = f[1];
    const allowed = param in schema.constraints ? schemaData.types[schema.constraints[param]] : [param];
    if (!allowed.includes(t)) {
      const takes = param in schema.constraints ? `${param}: ${allowed.join(', ')}` : `it takes ${param}`;
      fail(`input ${i} ('${f[0]}') has type ${t}, which ${node.opType}-${schema.since} does not take (${takes})`);
      return;
    }
    if (!(param in schema.constraints)) return;
    const prev = bound.get(param);
    // A heterogeneous variadic (Concat's inputs are homogeneous; SequenceConstruct's too) may mix.
    if (prev && prev !== t && f[4]) fail(`inputs bound to type parameter ${param} disagree: ${prev} and ${t}`);
    if (!prev) bound.set(param, t);
  });
  return node.outputs.map((_, i) => {
    const f = formalAt(schema.outputs, i);
    if (!f) return undefined;
    const param = f[1];
    if (!(param in schema.constraints)) return param;
    return bound.get(param) ?? attributeOutputType(node, i);
  });
}

function checkGraph(g: GraphIR, opsetOf: (n: NodeIR) => number, outer: Map<string, string | undefined>, problems: Problem[]): void {
  const types = new Map(outer);
  for (const i of g.inputs) types.set(i.name, typeString(i.type));
  for (const [name, t] of g.initializers) if (!types.get(name)) types.set(name, tensorOf(t.dtype));
  for (const vi of g.valueInfo.values()) {
    const t = typeString(vi.type);
    if (t) types.set(vi.name, t);
  }
  for (const node of g.nodes) {
    const outs = checkNode(node, opsetOf(node), (n) => types.get(n), problems);
    node.outputs.forEach((o, i) => {
      if (o && !types.get(o)) types.set(o, outs[i]);
    });
    for (const { graph } of subgraphsOf(node)) checkGraph(graph, opsetOf, types, problems);
  }
}

/**
 * Checks the model's IR version, opset imports and every node (subgraphs included) against the
 * schemas; throws an OnnxLoadError listing the problems (the first ten) where there are any.
 */
export function checkSchemas(model: ModelIR, modelName?: string): void {
  if (model.irVersion > schemaData.irVersion) {
    throw new OnnxLoadError(`IR version ${model.irVersion} is not supported (this loader reads IR versions 3 to ${schemaData.irVersion})`, {
      model: modelName,
    });
  }
  for (const [domain, version] of model.opsetImports) {
    const range = knownOpsetRange(domain);
    if (range && (version < range[0] || version > range[1])) {
      throw new OnnxLoadError(`opset ${version} of domain ${domain} is not supported (supported: ${range[0]} to ${range[1]})`, {
        model: modelName,
      });
    }
  }
  const opsetOf = (n: NodeIR): number => {
    if (n.opsetOverride !== undefined) return n.opsetOverride;
    const v = model.opsetImports.get(n.domain || DEFAULT_DOMAIN);
    if (v === undefined)
      throw new OnnxLoadError(
        `${label(n)} uses domain ${n.domain || DEFAULT_DOMAIN}, which the model does not import (opset_import has ${[...model.opsetImports.keys()].join(', ') || 'nothing'})`,
        { model: modelName },
      );
    return v;
  };
  const problems: Problem[] = [];
  checkGraph(model.graph, opsetOf, new Map(), problems);
  if (!problems.length) return;
  const lines = problems.slice(0, 10).map((p) => `  - ${label(p.node)}: ${p.what}`);
  if (problems.length > 10) lines.push(`  - … ${problems.length - 10} more`);
  throw new OnnxLoadError(`the model does not satisfy ONNX's operator schemas (as onnxruntime checks them):\n${lines.join('\n')}`, {
    model: modelName,
  });
}

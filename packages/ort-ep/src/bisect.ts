// mlx-ort bisect: finds the first node whose result on MLX leaves onnxruntime's. The model runs
// once on MLX node by node (compiled: false, no graph rewrites, so every node of the file exists)
// with every node output fetched, and once on onnxruntime-node's CPU provider (optimizations off,
// so every node keeps its outputs' names) with every node output made a graph output. The first
// node in topological order with an output out of tolerance is reported, with an error histogram
// in ulps and the worst element, and written out as a one-node model with its inputs (taken from
// onnxruntime's run) and onnxruntime's outputs: a test_data_set_0 that `mlx-ort run --inputs`
// compares with.
import { mkdirSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { bfloat16BitsToNumber, float16BitsToNumber } from '@mlx/core';
import { MlxSession } from './session.js';
import { OrtMlxError, messageOf } from './errors.js';
import { randomInput } from './cli-inputs.js';
import { encodeGraph, encodeGraphProto, encodeModel, encodeNode, encodeTensor, encodeTensorBytes, encodeValueInfo } from './onnx/encode.js';
import {
  DEFAULT_DOMAIN,
  OnnxDataType,
  dataTypeName,
  decodeModel,
  expandFunctions,
  isHostTensor,
  knownOpsetRange,
  outerReferences,
  readModelFile,
  subgraphsOf,
  validateGraph,
  type GraphIR,
  type HostTensor,
  type ModelIR,
  type NodeIR,
  type TypeIR,
} from './onnx/index.js';
import { fromOrtTensor, resolveCpuBackend, toOrtTensor, type OrtTensor } from './runtime/onnxruntime.js';
import type { OpRegistry } from './registry/registry.js';

/** The model tests' tolerances (test/models): |mlx - onnxruntime| <= atol + rtol * |onnxruntime|. */
export const BISECT_TOLERANCE = { rtol: 1e-3, atol: 1e-4 } as const;

export interface BisectOptions {
  device?: 'cpu' | 'gpu';
  /** The feeds (by input name), or a function of the MLX session that makes them. Default: random inputs (symbolic dims from `dims`, else 1). */
  feeds?: Record<string, HostTensor> | ((session: MlxSession) => Record<string, HostTensor>);
  /** Values of symbolic dimensions for random inputs. */
  dims?: Record<string, number>;
  rtol?: number;
  atol?: number;
  /** Where the one-node model goes (model.onnx and test_data_set_0); nothing is written without it. */
  outDir?: string;
  /** An alternative op registry for the MLX side (tests seed defects with one). */
  registry?: OpRegistry;
  /** Op types MLX declines (MlxSessionOptions.disabledOps): they run on onnxruntime's fallback. */
  disabledOps?: string[];
  /** MlxSessionOptions.fallback (default: the session's default). */
  fallback?: 'cpu' | 'none';
}

/** How far MLX's value of one output is from onnxruntime's. */
export interface OutputDiff {
  output: string;
  elemType: number;
  dims: number[];
  /** Elements out of tolerance (integers, bools and strings: elements that differ). */
  bad: number;
  total: number;
  /** Why the whole value differs (shape, element type), where it does. */
  mismatch?: string;
  /** Float outputs: [label, count] per ulp bucket, over every element. */
  histogram?: [string, number][];
  /** Floats: the element with the largest |mlx - onnxruntime|, with the error in ulps; others: the first that differs. */
  worst?: { index: number[]; mlx: number | bigint | string; ort: number | bigint | string; ulps?: number };
}

export interface BisectReport {
  /** The model's path as given, or '<bytes>'. */
  model: string;
  /** Nodes of the (function-expanded) graph, in topological order. */
  nodes: number;
  /** Node outputs compared. */
  compared: number;
  /** Nodes with an output out of tolerance (the first, and those after it, many through it). */
  differing: number;
  /** Node outputs not compared, and why (folded away by the plan, not a tensor, ...). */
  skipped: { value: string; why: string }[];
  tolerance: { rtol: number; atol: number };
  /** The first node with an output out of tolerance, if any. */
  first?: {
    node: string;
    opType: string;
    domain: string;
    /** Its position in topological order. */
    position: number;
    /** Its outputs that leave the tolerance. */
    outputs: OutputDiff[];
  };
  /** The one-node model's folder (outDir), when one was written. */
  repro?: string;
}

/**
 * Runs `model` on MLX and on onnxruntime-node with every intermediate value exposed and reports
 * the first node in topological order whose output leaves the tolerance.
 */
export async function bisect(model: string | Uint8Array, options: BisectOptions = {}): Promise<BisectReport> {
  const path = typeof model === 'string' ? model : undefined;
  const name = path ? basename(path) : '<bytes>';
  const tolerance = { rtol: options.rtol ?? BISECT_TOLERANCE.rtol, atol: options.atol ?? BISECT_TOLERANCE.atol };
  for (const [k, v] of Object.entries(tolerance))
    if (typeof v !== 'number' || !(v >= 0) || !Number.isFinite(v))
      throw new TypeError(`${k} must be a finite number >= 0, got ${String(v)}`);
  const backend = resolveCpuBackend('onnxruntime-node');
  if (!backend) throw new OrtMlxError('bisect compares with onnxruntime-node, which is not installed: `npm install onnxruntime-node`');
  const bytes = typeof model === 'string' ? readModelFile(model) : model;

  // The graph both engines run: model-local functions expanded, nodes in topological order.
  const ir = decodeModel(bytes, { modelPath: path });
  if (!ir.opsetImports.has(DEFAULT_DOMAIN)) ir.opsetImports.set(DEFAULT_DOMAIN, knownOpsetRange(DEFAULT_DOMAIN)![1]);
  expandFunctions(ir);
  validateGraph(ir.graph);
  const g = ir.graph;

  const session = await MlxSession.create(path ?? bytes, {
    device: options.device,
    compiled: false,
    graphRewrites: false,
    registry: options.registry,
    disabledOps: options.disabledOps,
    fallback: options.fallback,
  });
  let feeds: Record<string, HostTensor>;
  const mlxValues = new Map<string, HostTensor>();
  const skipped: BisectReport['skipped'] = [];
  const produced = g.nodes.flatMap((n) => n.outputs.filter((o) => o));
  try {
    feeds = typeof options.feeds === 'function' ? options.feeds(session) : (options.feeds ?? randomFeeds(session, options.dims ?? {}));
    const fetches = produced.filter((o) => {
      if (session.canFetch(o)) return true;
      skipped.push({ value: o, why: 'the MLX plan does not keep it (folded, aliased, or inside a fallback partition)' });
      return false;
    });
    const out = await session.run(feeds, fetches);
    for (const [k, v] of Object.entries(out)) {
      if (isHostTensor(v as never)) mlxValues.set(k, v as HostTensor);
      else skipped.push({ value: k, why: 'not a tensor' });
    }
  } finally {
    session.release();
  }

  const ortValues = await runOnnxruntime(backend, ir, name, feeds, produced, mlxValues);
  const report: BisectReport = { model: path ?? name, nodes: g.nodes.length, compared: 0, differing: 0, skipped, tolerance };
  for (let i = 0; i < g.nodes.length; i++) {
    const n = g.nodes[i];
    const outputs: OutputDiff[] = [];
    for (const o of n.outputs) {
      const have = o ? mlxValues.get(o) : undefined;
      if (!have) continue;
      const want = ortValues.get(o);
      if (!want) {
        skipped.push({ value: o, why: 'onnxruntime did not return it' });
        continue;
      }
      report.compared++;
      const d = diff(o, have, want, tolerance);
      if (d.bad || d.mismatch) outputs.push(d);
    }
    if (!outputs.length) continue;
    report.differing++;
    report.first ??= { node: n.name, opType: n.opType, domain: n.domain, position: i, outputs };
  }
  if (report.first && options.outDir) {
    writeRepro(options.outDir, ir, g.nodes[report.first.position], feeds, ortValues, name);
    report.repro = options.outDir;
  }
  return report;
}

function randomFeeds(session: MlxSession, dims: Record<string, number>): Record<string, HostTensor> {
  const feeds: Record<string, HostTensor> = {};
  session.inputMetadata.forEach((m, i) => {
    const shape = m.shape.map((d) => (typeof d === 'string' ? (dims[d] ?? 1) : d < 0 ? 1 : d));
    feeds[m.name] = randomInput(m.elemType, shape, 1234 + i);
  });
  return feeds;
}

/** A value's declared type, where it is a tensor's with a known element type. */
function declaredType(g: GraphIR, name: string): TypeIR | undefined {
  return g.valueInfo.get(name)?.type ?? g.outputs.find((o) => o.name === name)?.type;
}

/**
 * Runs the model on onnxruntime-node's CPU provider with every node output a graph output. Those
 * without a declared type go untyped (onnxruntime infers them); where onnxruntime refuses that,
 * with MLX's element types.
 */
async function runOnnxruntime(
  backend: NonNullable<ReturnType<typeof resolveCpuBackend>>,
  ir: ModelIR,
  name: string,
  feeds: Record<string, HostTensor>,
  produced: string[],
  mlxValues: ReadonlyMap<string, HostTensor>,
): Promise<Map<string, HostTensor>> {
  const g = ir.graph;
  const declared = new Set(g.outputs.map((o) => o.name));
  const exposedModel = (typed: boolean) => {
    const extra = produced
      .filter((o) => !declared.has(o))
      .flatMap((o) => {
        const t = declaredType(g, o);
        if (t && t.kind !== 'tensor' && t.kind !== 'unknown') return [];
        const m = typed ? mlxValues.get(o) : undefined;
        const type: TypeIR = t?.kind === 'tensor' ? t : m ? { kind: 'tensor', elemType: m.dtype } : { kind: 'unknown' };
        return [{ name: o, type }];
      });
    const exposed: GraphIR = { ...g, outputs: [...g.outputs, ...extra] };
    return encodeModel({ irVersion: Math.max(ir.irVersion, 4), opsets: ir.opsetImports, graph: encodeGraph(exposed) });
  };
  const where = `bisect: onnxruntime-node (CPU provider)`;
  const options = { graphOptimizationLevel: 'disabled', executionProviders: ['cpu'] };
  let session: Awaited<ReturnType<typeof backend.ort.InferenceSession.create>>;
  try {
    session = await backend.ort.InferenceSession.create(exposedModel(false), options);
  } catch (e) {
    try {
      session = await backend.ort.InferenceSession.create(exposedModel(true), options);
    } catch {
      throw new OrtMlxError(`${where} cannot load model ${name} with its node outputs exposed: ${messageOf(e)}`, { cause: e });
    }
  }
  try {
    let out: Record<string, OrtTensor>;
    try {
      const f: Record<string, OrtTensor> = {};
      for (const [k, t] of Object.entries(feeds)) f[k] = toOrtTensor(backend.ort, t, `input '${k}'`);
      out = await session.run(f);
    } catch (e) {
      throw new OrtMlxError(`${where} cannot run model ${name}: ${messageOf(e)}`, { cause: e });
    }
    const values = new Map<string, HostTensor>();
    for (const [k, t] of Object.entries(out)) {
      try {
        values.set(k, fromOrtTensor(t, `${where}: '${k}'`));
      } catch {
        // a type host tensors cannot hold: not compared
      }
    }
    return values;
  } finally {
    await session.release();
  }
}

const FLOATS = new Set<number>([OnnxDataType.FLOAT, OnnxDataType.DOUBLE, OnnxDataType.FLOAT16, OnnxDataType.BFLOAT16]);

function numberAt(t: HostTensor, i: number): number | bigint | string {
  const v = (t.data as ArrayLike<number | bigint | string>)[i];
  if (t.dtype === OnnxDataType.FLOAT16) return float16BitsToNumber(v as number);
  if (t.dtype === OnnxDataType.BFLOAT16) return bfloat16BitsToNumber(v as number);
  return v;
}

/** An integer that orders floats of `dtype` as their values do, one apart per ulp (-0 and +0 alike). */
function ordered(t: HostTensor, i: number): bigint {
  switch (t.dtype) {
    case OnnxDataType.FLOAT: {
      const d = t.data as Float32Array;
      const bits = new Int32Array(d.buffer, d.byteOffset + 4 * i, 1)[0];
      return BigInt(bits < 0 ? -(bits & 0x7fffffff) : bits);
    }
    case OnnxDataType.DOUBLE: {
      const d = t.data as Float64Array;
      const bits = new BigInt64Array(d.buffer, d.byteOffset + 8 * i, 1)[0];
      return bits < 0n ? -(bits & 0x7fffffffffffffffn) : bits;
    }
    default: {
      const bits = (t.data as Uint16Array)[i];
      return BigInt(bits & 0x8000 ? -(bits & 0x7fff) : bits);
    }
  }
}

/** How many ulps of the element type apart element i of `a` and of `b` are. */
function ulpsApart(a: HostTensor, b: HostTensor, i: number): number {
  const d = ordered(a, i) - ordered(b, i);
  return Number(d < 0n ? -d : d);
}

const BUCKETS: [string, number][] = [
  ['0', 1],
  ['1', 2],
  ['2-3', 4],
  ['4-15', 16],
  ['16-255', 256],
  ['256-65535', 65536],
  ['>=65536', Number.POSITIVE_INFINITY],
];

function multiIndex(flat: number, dims: readonly number[]): number[] {
  const idx = new Array<number>(dims.length).fill(0);
  for (let k = dims.length - 1; k >= 0; k--) {
    idx[k] = flat % dims[k];
    flat = Math.floor(flat / dims[k]);
  }
  return idx;
}

/** MLX's value `have` against onnxruntime's `want`. */
export function diff(output: string, have: HostTensor, want: HostTensor, tol: { rtol: number; atol: number }): OutputDiff {
  const total = want.data.length;
  const base = { output, elemType: want.dtype, dims: [...want.dims], total };
  if (have.dims.join(',') !== want.dims.join(','))
    return { ...base, bad: total, mismatch: `shape [${have.dims.join(', ')}] on MLX, [${want.dims.join(', ')}] on onnxruntime` };
  if (have.dtype !== want.dtype)
    return { ...base, bad: total, mismatch: `element type ${dataTypeName(have.dtype)} on MLX, ${dataTypeName(want.dtype)} on onnxruntime` };
  let bad = 0;
  let worstAt = -1;
  if (!FLOATS.has(want.dtype)) {
    const a = have.data as ArrayLike<unknown>;
    const b = want.data as ArrayLike<unknown>;
    for (let i = 0; i < total; i++) {
      if (a[i] === b[i]) continue;
      bad++;
      if (worstAt < 0) worstAt = i;
    }
    return {
      ...base,
      bad,
      ...(worstAt >= 0 && { worst: { index: multiIndex(worstAt, want.dims), mlx: numberAt(have, worstAt), ort: numberAt(want, worstAt) } }),
    };
  }
  const counts = BUCKETS.map(([label]) => [label, 0] as [string, number]);
  let worstErr = -1;
  let worstUlps = 0;
  for (let i = 0; i < total; i++) {
    const x = numberAt(have, i) as number;
    const y = numberAt(want, i) as number;
    const same = x === y || (Number.isNaN(x) && Number.isNaN(y));
    const ulps = same ? 0 : Number.isNaN(x) || Number.isNaN(y) ? Number.POSITIVE_INFINITY : ulpsApart(have, want, i);
    // NaN beside a number: the last bucket
    const b = BUCKETS.findIndex(([, below]) => ulps < below);
    counts[b < 0 ? counts.length - 1 : b][1]++;
    if (same) continue;
    const err = Math.abs(x - y);
    if (err <= tol.atol + tol.rtol * Math.abs(y)) continue;
    bad++;
    const e = Number.isNaN(err) ? Number.POSITIVE_INFINITY : err;
    if (e > worstErr) [worstErr, worstAt, worstUlps] = [e, i, ulps];
  }
  return {
    ...base,
    bad,
    histogram: counts,
    ...(worstAt >= 0 && {
      worst: { index: multiIndex(worstAt, want.dims), mlx: numberAt(have, worstAt), ort: numberAt(want, worstAt), ulps: worstUlps },
    }),
  };
}

/** Values computed from initializers and Constant nodes alone: the one-node model keeps them as initializers. */
function constantValues(g: GraphIR): Set<string> {
  const constants = new Set([...g.initializers.keys()].filter((k) => !g.inputsWithDefaults.has(k)));
  for (const n of g.nodes) {
    const ins = n.inputs.filter((i) => i);
    const folds =
      (n.opType === 'Constant' && n.domain === DEFAULT_DOMAIN) ||
      (ins.length > 0 && ins.every((i) => constants.has(i)) && !/^Random|^Multinomial$/.test(n.opType) && !subgraphsOf(n).length);
    if (folds) for (const o of n.outputs) if (o) constants.add(o);
  }
  return constants;
}

/**
 * Writes `node` as a model of its own: its inputs (and the outer values its subgraphs read) are
 * the model's inputs, with onnxruntime's values in test_data_set_0/input_<i>.pb, except
 * constants, which stay initializers; its outputs are onnxruntime's, in output_<i>.pb.
 */
function writeRepro(
  dir: string,
  ir: ModelIR,
  node: NodeIR,
  feeds: Record<string, HostTensor>,
  ortValues: ReadonlyMap<string, HostTensor>,
  model: string,
): void {
  const g = ir.graph;
  const constants = constantValues(g);
  const reads = [...new Set([...node.inputs.filter((i) => i), ...subgraphsOf(node).flatMap(({ graph }) => [...outerReferences(graph)])])];
  const valueOf = (v: string): HostTensor => {
    const t = feeds[v] ?? ortValues.get(v) ?? g.initializers.get(v);
    if (!t)
      throw new OrtMlxError(
        `bisect: cannot write node '${node.name}' of model ${model} alone: onnxruntime gave no value for its input '${v}'`,
      );
    return t;
  };
  const inputs: string[] = [];
  const initializers: HostTensor[] = [];
  for (const v of reads) {
    if (constants.has(v)) initializers.push({ ...valueOf(v), name: v });
    else inputs.push(v);
  }
  const typeOf = (t: HostTensor): TypeIR => ({ kind: 'tensor', elemType: t.dtype, shape: [...t.dims] });
  const outputs = node.outputs.filter((o) => o);
  const graph = encodeGraphProto({
    name: `${node.name || node.opType}_alone`,
    node: [encodeNode(node)],
    input: inputs.map((v) => encodeValueInfo(v, typeOf(valueOf(v)))),
    output: outputs.map((o) => {
      const t = ortValues.get(o);
      return encodeValueInfo(o, t ? typeOf(t) : undefined);
    }),
    initializer: initializers.map((t) => encodeTensor(t, t.name)),
  });
  mkdirSync(join(dir, 'test_data_set_0'), { recursive: true });
  writeFileSync(join(dir, 'model.onnx'), encodeModel({ irVersion: Math.max(ir.irVersion, 4), opsets: ir.opsetImports, graph }));
  inputs.forEach((v, i) => writeFileSync(join(dir, 'test_data_set_0', `input_${i}.pb`), encodeTensorBytes(valueOf(v), v)));
  outputs.forEach((o, i) => {
    const t = ortValues.get(o);
    if (t) writeFileSync(join(dir, 'test_data_set_0', `output_${i}.pb`), encodeTensorBytes(t, o));
  });
}

const show = (v: number | bigint | string) => (typeof v === 'number' ? v.toPrecision(8) : String(v));

/** The report as lines of text (mlx-ort bisect prints them). */
export function formatBisect(r: BisectReport): string[] {
  const lines = [`${r.model}: ${r.nodes} nodes, ${r.compared} node outputs compared (rtol ${r.tolerance.rtol}, atol ${r.tolerance.atol})`];
  if (r.skipped.length)
    lines.push(
      `not compared: ${r.skipped.length} (${r.skipped
        .slice(0, 8)
        .map((s) => `'${s.value}': ${s.why}`)
        .join('; ')}${r.skipped.length > 8 ? '; ...' : ''})`,
    );
  const f = r.first;
  if (!f) {
    lines.push('no node differs from onnxruntime beyond the tolerance');
    return lines;
  }
  lines.push(
    `first differing node: #${f.position} '${f.node}' (${f.domain === DEFAULT_DOMAIN ? '' : `${f.domain}::`}${f.opType}), of ${r.differing} differing`,
  );
  for (const o of f.outputs) {
    lines.push(
      `  output '${o.output}' ${dataTypeName(o.elemType)} [${o.dims.join(', ')}]: ${o.mismatch ?? `${o.bad} of ${o.total} elements ${FLOATS.has(o.elemType) ? 'out of tolerance' : 'differ'}`}`,
    );
    if (o.histogram) lines.push(`    ulps: ${o.histogram.map(([label, n]) => `${label}: ${n}`).join(', ')}`);
    if (o.worst)
      lines.push(
        `    ${o.histogram ? 'largest |mlx - onnxruntime|' : 'first difference'}: element [${o.worst.index.join(', ')}] mlx ${show(o.worst.mlx)}, onnxruntime ${show(o.worst.ort)}${o.worst.ulps !== undefined ? ` (${o.worst.ulps === Number.POSITIVE_INFINITY ? 'NaN' : o.worst.ulps} ulps)` : ''}`,
      );
  }
  if (r.repro)
    lines.push(
      `one-node model: ${join(r.repro, 'model.onnx')} (MLX_ORT_REWRITES=0 mlx-ort run ${join(r.repro, 'model.onnx')} --inputs ${join(r.repro, 'test_data_set_0')})`,
    );
  return lines;
}

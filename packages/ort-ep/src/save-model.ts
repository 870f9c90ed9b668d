// A session's model written back as ONNX with the initializers it holds now (trained ones
// included): the graph as the session planned it, each initializer from the plan's constants
// (read back from MLX where MLX holds it), large ones in a data file beside the model (ONNX's
// external data: location, offset, length), so that onnxruntime loads the result.
import { closeSync, openSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type { GraphIR, ModelIR } from './onnx/index.js';
import { encodeGraph, encodeModel } from './onnx/encode.js';
import type { GraphProto, TensorProto } from './onnx/proto.js';
import { asHost } from './runtime/value.js';
import { FUSED_DOMAIN } from './ops/mlx/fused.js';
import type { GraphProgram } from './execute/run.js';
import { OrtMlxError, messageOf } from './errors.js';

export interface SaveModelOptions {
  /**
   * Where initializers of `threshold` bytes and more go (default: with a path, those of 1 MiB and
   * more go to `<model file name>.data` beside it; `false` keeps everything in the model, which
   * protobuf limits to 2 GiB). Only with a path.
   */
  externalData?: false | { threshold?: number; location?: string };
}

/** ONNX's TensorProto.DataLocation.EXTERNAL. */
const EXTERNAL = 1;
/** Offsets in the data file are multiples of this (as onnx's writer aligns them for memory mapping). */
const ALIGN = 64;

/** What saveModel needs of a session. */
export interface SaveTarget {
  modelName: string;
  model: ModelIR;
  program: GraphProgram;
}

/**
 * Puts back into each graph of the program the initializers MLX holds (a host copy of its current
 * value), runs `body`, and takes them out again.
 */
function withInitializers<T>(program: GraphProgram, body: () => T): T {
  const restored: [GraphIR, string][] = [];
  const visit = (p: GraphProgram) => {
    const plan = p.plan;
    for (const name of plan.residentInitializers ?? []) {
      const v = plan.constants.get(name);
      if (v && !plan.graph.initializers.has(name)) {
        plan.graph.initializers.set(name, asHost(v, `initializer '${name}'`));
        restored.push([plan.graph, name]);
      }
    }
    for (const sub of p.subprograms.values()) visit(sub);
  };
  try {
    visit(program);
    return body();
  } finally {
    for (const [g, name] of restored) g.initializers.delete(name);
  }
}

/** Every initializer of a graph and of its subgraphs (node attributes). */
function* initializersOf(g: GraphProto): Generator<TensorProto> {
  yield* g.initializer;
  for (const n of g.node)
    for (const a of n.attribute) {
      if (a.g) yield* initializersOf(a.g);
      for (const sub of a.graphs) yield* initializersOf(sub);
    }
}

/** The ONNX bytes of the session's model with its current initializers; with `path`, also written there. */
export function saveModel(target: SaveTarget, path?: string, options: SaveModelOptions = {}): Uint8Array {
  const { model, modelName: name } = target;
  const fused = model.graph.nodes.filter((n) => n.domain === FUSED_DOMAIN);
  if (fused.length)
    throw new OrtMlxError(
      `model ${name}: saveModel: the session's graph rewrites fused ${fused.length} node(s) into ops only this provider runs (${fused
        .slice(0, 3)
        .map((n) => `'${n.name}' (${n.opType})`)
        .join(', ')}): create the session with graphRewrites: false to save a model other runtimes load`,
    );
  if (path !== undefined && typeof path !== 'string') throw new TypeError(`saveModel: path must be a file path, got ${typeof path}`);
  const ext = options.externalData;
  if (ext && path === undefined) throw new TypeError('saveModel: externalData needs a path to write the model and its data file to');
  const threshold = ext === false || path === undefined ? Number.POSITIVE_INFINITY : (ext?.threshold ?? 1 << 20);
  if (!(threshold >= 0)) throw new RangeError(`saveModel: externalData.threshold must be a number of bytes >= 0, got ${String(threshold)}`);
  const location = (ext === false ? undefined : ext?.location) || (path ? `${basename(path)}.data` : '');
  if (location && (location.includes('/') || location.includes('\\') || location === '.' || location === '..'))
    throw new RangeError(`saveModel: externalData.location must be a file name beside the model, got '${location}'`);

  const graph = withInitializers(target.program, () => {
    // Free dimensions fixed by freeDimensionOverrides go back as the file declared them.
    const inputs = model.graph.inputs.map((i) =>
      i.type.kind === 'tensor' && i.type.declared ? { ...i, type: { ...i.type, shape: i.type.declared, declared: undefined } } : i,
    );
    return encodeGraph({ ...model.graph, inputs });
  });

  const external: { tensor: TensorProto; bytes: Uint8Array }[] = [];
  for (const t of initializersOf(graph))
    if (t.rawData.length && t.rawData.length >= threshold) external.push({ tensor: t, bytes: t.rawData });
  let offset = 0;
  for (const { tensor, bytes } of external) {
    tensor.rawData = new Uint8Array(0);
    tensor.dataLocation = EXTERNAL;
    tensor.externalData = [
      { key: 'location', value: location },
      { key: 'offset', value: String(offset) },
      { key: 'length', value: String(bytes.length) },
    ];
    offset += Math.ceil(bytes.length / ALIGN) * ALIGN;
  }
  const bytes = encodeModel({ irVersion: model.irVersion, opsets: model.opsetImports, graph });
  if (path === undefined) return bytes;
  try {
    if (external.length) {
      const fd = openSync(join(dirname(path), location), 'w');
      try {
        const pad = new Uint8Array(ALIGN);
        for (const { bytes: b } of external) {
          writeSync(fd, b);
          const rest = (ALIGN - (b.length % ALIGN)) % ALIGN;
          if (rest) writeSync(fd, pad, 0, rest);
        }
      } finally {
        closeSync(fd);
      }
    }
    const fd = openSync(path, 'w');
    try {
      writeSync(fd, bytes);
    } finally {
      closeSync(fd);
    }
  } catch (e) {
    throw new OrtMlxError(`model ${name}: saveModel: '${path}' could not be written: ${messageOf(e)}`, { cause: e });
  }
  return bytes;
}

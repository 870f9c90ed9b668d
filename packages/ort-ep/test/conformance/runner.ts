// One conformance case through one engine: 'mlx' (this package, through onnxruntime-common's
// InferenceSession, or through MlxSession for element types Tensor cannot hold) or 'ort'
// (onnxruntime-node's CPU provider, the side-by-side reference).
import { createRequire } from 'node:module';
import { basename } from 'node:path';
import { readTestCase, decodeModel, OnnxDataType, type HostTensor, type TestValue } from '../../src/onnx/index.js';
import type { Value } from '../../src/runtime/value.js';
import { download } from '../../src/runtime/convert.js';
import { MlxSession } from '../../src/session.js';
import { UnsupportedOperatorError } from '../../src/errors.js';
import { hostToTensor, tensorToHost } from '../../src/internal.js';
import '../../src/index.js';
import { compareTensor, type Tolerance } from './compare.js';

const require = createRequire(import.meta.url);
type Ort = typeof import('onnxruntime-node');
let ortNode: Ort | undefined;
const ort = (): Ort => (ortNode ??= require('onnxruntime-node') as Ort);

export type Engine = 'mlx' | 'ort';
export type Status = 'pass' | 'fail' | 'unsupported' | 'error';

export interface CaseResult {
  name: string;
  status: Status;
  detail?: string;
  /** Fed through MlxSession because onnxruntime-common's Tensor cannot hold an element type. */
  lowLevel?: boolean;
  ms: number;
}

/** Element types onnxruntime-common's Tensor has no type for. */
const tensorless = new Set<number>([
  OnnxDataType.BFLOAT16,
  OnnxDataType.FLOAT8E4M3FN,
  OnnxDataType.FLOAT8E4M3FNUZ,
  OnnxDataType.FLOAT8E5M2,
  OnnxDataType.FLOAT8E5M2FNUZ,
  OnnxDataType.FLOAT4E2M1,
  OnnxDataType.COMPLEX64,
  OnnxDataType.COMPLEX128,
  OnnxDataType.FLOAT8E8M0,
  OnnxDataType.UINT2,
  OnnxDataType.INT2,
]);

export function toleranceFor(name: string): Tolerance {
  if (/_(dft|stft)/.test(name)) return { rtol: 1e-3, atol: 1e-4 };
  return { rtol: 1e-3, atol: 1e-5 };
}

const isTensor = (v: unknown): v is HostTensor => !!v && typeof v === 'object' && 'dims' in v && 'dtype' in v;

function toValue(v: TestValue): Value {
  if (isTensor(v)) return { kind: 'host', tensor: v };
  if (v.kind === 'sequence') {
    const items = v.items.map(toValue);
    const first = v.items.find(isTensor);
    return { kind: 'sequence', items, elemType: first ? first.dtype : OnnxDataType.FLOAT };
  }
  if (v.kind === 'optional') return v.value ? toValue(v.value) : { kind: 'none' };
  throw new Error(v.why);
}

function flatten(v: TestValue): TestValue[] {
  if (isTensor(v)) return [v];
  if (v.kind === 'sequence') return v.items.flatMap(flatten);
  if (v.kind === 'optional') return v.value ? flatten(v.value) : [];
  return [v];
}

/** Compares a produced value with the expected one, tensors and containers alike. */
function compareValue(have: HostTensor | Value | undefined, want: TestValue, tol: Tolerance): string | undefined {
  if (isTensor(want)) {
    const t = have && (isTensor(have) ? have : have.kind === 'host' ? have.tensor : undefined);
    if (!t) return `expected a tensor, got ${have ? (have as Value).kind : 'nothing'}`;
    const c = compareTensor(t, want, tol);
    return c.ok ? undefined : c.why;
  }
  if (want.kind === 'optional') {
    if (!want.value) return have && !isTensor(have) && have.kind === 'none' ? undefined : 'expected an empty optional';
    return compareValue(have, want.value, tol);
  }
  if (want.kind === 'sequence') {
    if (!have || isTensor(have) || have.kind !== 'sequence') return 'expected a sequence';
    if (have.items.length !== want.items.length) return `sequence of ${have.items.length} items, expected ${want.items.length}`;
    for (let i = 0; i < want.items.length; i++) {
      const it = have.items[i];
      const host = it.kind === 'device' ? download(it.array, it.onnxType) : it;
      const why = compareValue(host as Value, want.items[i], tol);
      if (why) return `item ${i}: ${why}`;
    }
    return undefined;
  }
  return want.why;
}

export interface CaseOptions {
  /** For 'mlx': the compiled path (default) or the eager one. */
  compiled?: boolean;
  /** For 'mlx': the device (default: MLX's default device). */
  device?: 'cpu' | 'gpu';
  /** For 'mlx': always through MlxSession (where onnxruntime-node is not installed). */
  viaSession?: boolean;
  /**
   * Runs per data set (default 1). The compiled path's first run of a signature is eager; the
   * second traces; the third replays the trace: 3 checks all three.
   */
  runs?: number;
  /**
   * For 'mlx': what nodes MLX does not take do. Default 'none' (the case counts as unsupported), so
   * that the suite measures MLX itself; 'cpu' runs them on onnxruntime (fallback partitions).
   */
  fallback?: 'cpu' | 'none';
}

export async function runCase(dir: string, engine: Engine, opts: CaseOptions = {}): Promise<CaseResult> {
  const compiled = opts.compiled ?? true;
  const runs = opts.runs ?? 1;
  const name = basename(dir);
  const t0 = performance.now();
  const done = (status: Status, detail?: string, lowLevel?: boolean): CaseResult => ({
    name,
    status,
    detail,
    lowLevel,
    ms: Math.round(performance.now() - t0),
  });
  let tc: ReturnType<typeof readTestCase>;
  try {
    tc = readTestCase(dir);
  } catch (e) {
    const msg = (e as Error).message;
    return done(/unknown element type/.test(msg) ? 'unsupported' : 'error', `cannot read case: ${msg}`);
  }
  const model = decodeModel(tc.modelBytes, {});
  const inputs = model.graph.inputs.filter((i) => !model.graph.initializers.has(i.name)).map((i) => i.name);
  const outputs = model.graph.outputs.map((o) => o.name);
  const values = tc.datasets.flatMap((d) => [...d.inputs, ...d.outputs]).flatMap(flatten);
  const odd = values.find((v) => !isTensor(v)) as { why: string } | undefined;
  if (odd) return done('unsupported', odd.why);
  const containers = tc.datasets.some((d) => [...d.inputs, ...d.outputs].some((v) => !isTensor(v)));
  const lowLevel = containers || (values as HostTensor[]).some((v) => tensorless.has(v.dtype));
  const tol = toleranceFor(name);
  try {
    for (const ds of tc.datasets) {
      const feeds: Record<string, HostTensor> = {};
      (ds.inputs as HostTensor[]).forEach((t, i) => (feeds[inputs[i]] = t));
      let got: Record<string, HostTensor | Value>;
      const check = (have: Record<string, HostTensor | Value>): string | undefined => {
        for (let i = 0; i < ds.outputs.length; i++) {
          const why = compareValue(have[outputs[i]], ds.outputs[i], tol);
          if (why) return `output '${outputs[i]}': ${why}`;
        }
        return undefined;
      };
      if (engine === 'ort') {
        if (lowLevel)
          return done(
            'unsupported',
            containers
              ? 'onnxruntime-node cannot take sequence or optional inputs from JavaScript'
              : 'onnxruntime-common Tensor cannot hold this element type',
            true,
          );
        const o = ort();
        const s = await o.InferenceSession.create(tc.modelBytes);
        const f: Record<string, import('onnxruntime-node').Tensor> = {};
        for (const [k, v] of Object.entries(feeds)) f[k] = hostToTensor(o as never, v) as never;
        const r = await s.run(f);
        got = {};
        for (const [k, v] of Object.entries(r)) got[k] = tensorToHost(k, v as never);
        await s.release();
        const why = check(got);
        if (why) return done('fail', why, lowLevel);
      } else if (lowLevel || opts.viaSession) {
        const fallback = opts.fallback ?? 'none';
        const s = MlxSession.createSync(tc.modelBytes, { compiled, device: opts.device, fallback });
        try {
          for (let r = 0; r < runs; r++) {
            const vfeeds: Record<string, Value> = {};
            ds.inputs.forEach((t, i) => (vfeeds[inputs[i]] = toValue(t)));
            // Fallback partitions run on onnxruntime, asynchronously: only run() takes them.
            const why = check(fallback === 'cpu' ? await s.run(vfeeds) : s.runSync(vfeeds));
            if (why) return done('fail', `${runs > 1 ? `run ${r + 1}: ` : ''}${why}`, lowLevel);
          }
        } finally {
          s.release();
        }
      } else {
        const o = ort();
        const s = await o.InferenceSession.create(tc.modelBytes, {
          executionProviders: [{ name: 'mlx', compiled, device: opts.device, fallback: opts.fallback ?? 'none' } as never],
        });
        try {
          for (let r = 0; r < runs; r++) {
            const f: Record<string, import('onnxruntime-node').Tensor> = {};
            for (const [k, v] of Object.entries(feeds)) f[k] = hostToTensor(o as never, v) as never;
            const out = await s.run(f);
            got = {};
            for (const [k, v] of Object.entries(out)) got[k] = tensorToHost(k, v as never);
            const why = check(got);
            if (why) return done('fail', `${runs > 1 ? `run ${r + 1}: ` : ''}${why}`, lowLevel);
          }
        } finally {
          await s.release();
        }
      }
    }
  } catch (e) {
    if (e instanceof UnsupportedOperatorError || /UnsupportedOperator|does not support/.test((e as Error).message)) {
      return done('unsupported', (e as Error).message.split('\n').slice(1).join(' ').trim() || (e as Error).message, lowLevel);
    }
    return done(engine === 'ort' ? 'fail' : 'error', (e as Error).message.split('\n')[0].slice(0, 400), lowLevel);
  }
  return done('pass', undefined, lowLevel);
}

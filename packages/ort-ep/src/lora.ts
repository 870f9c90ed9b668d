// LoRA adapters on a session's MatMul/Gemm weights: each chosen weight W (2-D) gets A [rows, r]
// and B [r, cols], and the session runs W0 + (alpha / r) * A @ B, the base W0 frozen. The session
// differentiates with respect to the merged weight (valueAndGrad); the adapters' gradients follow
// by the chain rule (dA = s * dW @ B^T, dB = s * A^T @ dW), so no graph changes: the model keeps
// its nodes, and saveModel writes the merged weights. The adapters can be kept apart (unmerge,
// the base back in the session) and written as safetensors.
import { writeFileSync } from 'node:fs';
import * as mx from '@mlx/core';
import type { HostTensor } from './onnx/index.js';
import type { Value } from './runtime/value.js';
import type { MlxSession } from './session.js';
import { checkAttentionOptions, type ValueAndGradOptions } from './grad.js';
import { fileErrorText, readRegularFile, TENSOR_FILE_LIMIT } from './onnx/external.js';
import { OrtMlxError, UnknownParameterError, messageOf } from './errors.js';

export interface LoraOptions {
  /** The weights to adapt: initializers of the model read by MatMul (input B) or Gemm (input B), 2-D and floating-point. */
  targets: readonly string[];
  /** The adapters' rank r (at least 1, at most the smaller side of each weight). */
  rank: number;
  /** The scale's numerator: the update is (alpha / rank) * A @ B (default: rank, a scale of 1). */
  alpha?: number;
  /** Seed of A's initial values (uniform in ±1/sqrt(rows)); B starts at zero, so the model starts unchanged. */
  seed?: number;
}

export interface LoraStepOptions {
  output: ValueAndGradOptions['output'];
  optimizer: mx.optim.Optimizer;
  /** Clip the adapters' gradients to this global L2 norm (optim.clipGradNorm). */
  clipGradNorm?: number;
  fetches?: readonly string[];
  /**
   * Mixed precision of the forward and backward walk (ValueAndGradOptions.mixedPrecision):
   * 'bfloat16' only, since the adapters' step does no loss scaling, which float16 needs.
   */
  mixedPrecision?: 'bfloat16';
  /** Gradient checkpointing by layer (ValueAndGradOptions.checkpoint). */
  checkpoint?: ValueAndGradOptions['checkpoint'];
  /** The attention nodes' backward pass: workspace budget and strategy (ValueAndGradOptions.attention). */
  attention?: ValueAndGradOptions['attention'];
}

/** The ops whose second input is a weight LoRA adapts. */
const ADAPTABLE = new Set(['MatMul', 'Gemm']);

const aName = (t: string) => `${t}.lora_A`;
const bName = (t: string) => `${t}.lora_B`;

export class LoraAdapters {
  readonly targets: readonly string[];
  readonly rank: number;
  readonly alpha: number;
  /** alpha / rank. */
  readonly scale: number;
  #session: MlxSession;
  /** The frozen base weights (the session's values when attached). */
  #base: Record<string, mx.Array> = {};
  /** The adapters, by aName/bName. */
  #params: Record<string, mx.Array> = {};
  #merged = true;
  #disposed = false;

  private constructor(session: MlxSession, options: LoraOptions) {
    this.#session = session;
    const { targets, rank } = options;
    if (!Array.isArray(targets) || !targets.length || targets.some((t) => typeof t !== 'string'))
      throw new TypeError('LoRA: targets must be a non-empty list of weight (initializer) names');
    if (!Number.isInteger(rank) || rank < 1) throw new RangeError(`LoRA: rank must be a positive integer, got ${String(rank)}`);
    const alpha = options.alpha ?? rank;
    if (typeof alpha !== 'number' || !Number.isFinite(alpha) || alpha <= 0)
      throw new RangeError(`LoRA: alpha must be a positive number, got ${String(alpha)}`);
    this.targets = [...targets];
    this.rank = rank;
    this.alpha = alpha;
    this.scale = alpha / rank;
  }

  /** Adapters on `options.targets` of `session` (whose values stay the frozen base). */
  static attach(session: MlxSession, options: LoraOptions): LoraAdapters {
    const lora = new LoraAdapters(session, options);
    lora.#init(options.seed ?? 0);
    return lora;
  }

  /** Each target must be a weight read only as the second input of MatMul or Gemm nodes. */
  #checkTargets(): void {
    const graph = this.#session.model.graph;
    const name = this.#session.name;
    for (const t of this.targets) {
      const readers = graph.nodes.filter((n) => n.inputs.includes(t));
      const bad = readers.filter((n) => !ADAPTABLE.has(n.opType) || n.inputs[1] !== t);
      if (!readers.length || bad.length)
        throw new UnknownParameterError(
          `model ${name}: LoRA: '${t}' must be a weight read only as the second input of MatMul or Gemm nodes${bad.length ? `; it is read by ${bad.map((n) => `'${n.name}' (${n.opType})`).join(', ')}` : ''}`,
        );
    }
  }

  /** The session's current values of the targets (the base), checked: 2-D, with room for the rank. */
  #readBase(): Record<string, mx.Array> {
    this.#checkTargets();
    const base = this.#session.parameters(this.targets);
    try {
      for (const t of this.targets) {
        const w = base[t];
        if (w.ndim !== 2)
          throw new UnknownParameterError(
            `model ${this.#session.name}: LoRA: '${t}' has shape [${w.shape.join(', ')}]: adapters need a 2-D weight`,
          );
        const [rows, cols] = w.shape;
        if (this.rank > Math.min(rows, cols))
          throw new RangeError(`LoRA: rank ${this.rank} is more than the smaller side of '${t}' [${rows}, ${cols}]`);
      }
      return base;
    } catch (e) {
      mx.dispose(base);
      throw e;
    }
  }

  /**
   * Adapters that saveSafetensors wrote, attached to `session` (its current weights the base) and
   * applied: the session runs W0 + (alpha / rank) A @ B from here on, and training may go on.
   */
  static load(session: MlxSession, path: string): LoraAdapters {
    let bytes: Uint8Array;
    try {
      bytes = readRegularFile(path, TENSOR_FILE_LIMIT);
    } catch (e) {
      throw new OrtMlxError(`LoRA: '${path}' cannot be read: ${fileErrorText(e)}`, { cause: e });
    }
    const bad = (why: string) => new OrtMlxError(`LoRA: '${path}' is not an adapters file saveSafetensors wrote: ${why}`);
    if (bytes.length < 8) throw bad('too short for a safetensors header');
    const n = Number(new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true));
    if (n > bytes.length - 8) throw bad(`its header of ${n} bytes runs past the file`);
    let header: Record<string, unknown>;
    try {
      header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + n)));
    } catch {
      throw bad('the header is not JSON');
    }
    const meta = header?.__metadata__ as Record<string, string> | undefined;
    if (meta?.format !== 'lora') throw bad('no __metadata__ with format "lora"');
    let targets: unknown;
    try {
      targets = JSON.parse(meta.targets);
    } catch {
      throw bad('__metadata__.targets is not a JSON list');
    }
    const lora = new LoraAdapters(session, { targets: targets as string[], rank: Number(meta.rank), alpha: Number(meta.alpha) });
    const base = lora.#readBase();
    const data = bytes.subarray(8 + n);
    try {
      for (const t of lora.targets) {
        const [rows, cols] = base[t].shape;
        for (const [k, shape] of [
          [aName(t), [rows, lora.rank]],
          [bName(t), [lora.rank, cols]],
        ] as const) {
          const e = header[k] as { dtype?: string; shape?: number[]; data_offsets?: number[] } | undefined;
          const dtype = Object.entries(SAFETENSORS_DTYPES).find(([, code]) => code === e?.dtype)?.[0] as mx.Dtype | undefined;
          if (!e || !dtype) throw bad(`'${k}' is missing or not a floating-point tensor`);
          if (!Array.isArray(e.shape) || e.shape.length !== 2 || e.shape[0] !== shape[0] || e.shape[1] !== shape[1])
            throw bad(`'${k}' has shape [${String(e.shape)}], the weight and rank ${lora.rank} need [${shape.join(', ')}]`);
          const [from, to] = e.data_offsets ?? [];
          if (
            !Number.isInteger(from) ||
            !Number.isInteger(to) ||
            from < 0 ||
            to > data.length ||
            to - from !== shape[0] * shape[1] * mx.itemsize(dtype)
          )
            throw bad(`'${k}' has data offsets [${String(e.data_offsets)}] that do not hold it within the file`);
          lora.#params[k] = mx.persist(
            mx.scope(() => mx.astype(mx.Array.fromBytes(data.subarray(from, to), [...shape], dtype), base[t].dtype)),
          );
        }
      }
      mx.evaluate(Object.values(lora.#params));
      for (const a of Object.values(base)) mx.persist(a);
      lora.#base = base;
      lora.#write();
      return lora;
    } catch (e) {
      mx.dispose([base, lora.#params]);
      throw e;
    }
  }

  #init(seed: number): void {
    const base = this.#readBase();
    try {
      for (const [i, t] of this.targets.entries()) {
        const w = base[t];
        const [rows, cols] = w.shape;
        const bound = 1 / Math.sqrt(rows);
        const a = mx.scope(() =>
          mx.astype(mx.random.uniform(-bound, bound, [rows, this.rank], 'float32', mx.random.key(seed * 65536 + i)), w.dtype),
        );
        this.#params[aName(t)] = mx.persist(a);
        this.#params[bName(t)] = mx.persist(mx.zeros([this.rank, cols], w.dtype));
      }
      mx.evaluate([...Object.values(base), ...Object.values(this.#params)]);
      for (const a of Object.values(base)) mx.persist(a);
      this.#base = base;
    } catch (e) {
      mx.dispose([base, this.#params]);
      this.#params = {};
      throw e;
    }
  }

  #live(): void {
    if (this.#disposed) throw new OrtMlxError('LoRA: the adapters were merged or disposed');
  }

  /** Whether the session runs the adapted weights (true after attach and trainStep; false after unmerge). */
  get merged(): boolean {
    return this.#merged;
  }

  /** Copies of the adapters, by `<weight>.lora_A` ([rows, r]) and `<weight>.lora_B` ([r, cols]). */
  adapters(): Record<string, mx.Array> {
    this.#live();
    return Object.fromEntries(Object.entries(this.#params).map(([k, a]) => [k, mx.copy(a)]));
  }

  /**
   * One step: the gradients with respect to the adapted weights (valueAndGrad), those of the
   * adapters by the chain rule, the optimizer's step on the adapters, and W0 + s * A @ B written
   * into the session. Resolves to the loss before the step.
   */
  async trainStep(feeds: Record<string, HostTensor | Value>, options: LoraStepOptions): Promise<{ loss: number; gradNorm?: number }> {
    this.#live();
    if (!options?.optimizer || typeof options.optimizer.step !== 'function')
      throw new TypeError('LoRA trainStep: optimizer must be an optimizer (e.g. new mx.optim.AdamW({ lr }))');
    if (options.mixedPrecision !== undefined && options.mixedPrecision !== 'bfloat16')
      throw new TypeError(
        `LoRA trainStep: mixedPrecision must be 'bfloat16' (float16 needs loss scaling, which the adapters' step does not do), got ${String(options.mixedPrecision)}`,
      );
    checkAttentionOptions(options.attention, 'LoRA trainStep');
    if (!this.#merged) this.#write();
    const r = await this.#session.valueAndGrad(feeds, {
      output: options.output,
      wrt: this.targets,
      fetches: options.fetches,
      keepOnDevice: true,
      mixedPrecision: options.mixedPrecision,
      checkpoint: options.checkpoint,
      attention: options.attention,
    });
    const dW = this.targets.map((t) => (r.grads[t] as Value & { kind: 'device' }).array);
    let gradNorm: number | undefined;
    try {
      const grads = mx.scope(() => {
        const g: Record<string, mx.Array> = {};
        this.targets.forEach((t, i) => {
          const a = this.#params[aName(t)];
          const b = this.#params[bName(t)];
          g[aName(t)] = mx.multiply(mx.matmul(dW[i], mx.transpose(b)), this.scale);
          g[bName(t)] = mx.multiply(mx.matmul(mx.transpose(a), dW[i]), this.scale);
        });
        if (options.clipGradNorm === undefined) return g;
        const c = mx.optim.clipGradNorm(g, options.clipGradNorm);
        gradNorm = Number(c.norm.item());
        return c.grads;
      });
      const params = Object.fromEntries(Object.entries(this.#params).map(([k, a]) => [k, mx.copy(a)]));
      const next = options.optimizer.step(params, grads);
      mx.dispose(grads);
      for (const k of Object.keys(this.#params)) {
        this.#params[k].dispose();
        this.#params[k] = mx.persist(next[k]);
      }
      this.#write();
    } finally {
      mx.dispose(dW);
      mx.dispose(Object.values(r.outputs).map((v) => ('kind' in v && v.kind === 'device' ? v.array : undefined)));
    }
    return { loss: r.value, ...(gradNorm === undefined ? {} : { gradNorm }) };
  }

  /** W0 + s * A @ B into the session. */
  #write(): void {
    const merged = mx.scope(() =>
      Object.fromEntries(
        this.targets.map((t) => {
          const w = this.#base[t];
          const delta = mx.multiply(mx.matmul(this.#params[aName(t)], this.#params[bName(t)]), this.scale);
          return [t, mx.add(w, mx.astype(delta, w.dtype))];
        }),
      ),
    );
    try {
      this.#session.setParameters(merged);
    } finally {
      mx.dispose(merged);
    }
    this.#merged = true;
  }

  /** Puts the frozen base weights back into the session (the adapters kept apart); trainStep or merge() applies them again. */
  unmerge(): void {
    this.#live();
    this.#session.setParameters(this.#base);
    this.#merged = false;
  }

  /**
   * Merges the adapters into the weights for good: the session keeps W0 + s * A @ B (saveModel
   * writes it), and these adapters are done (disposed).
   */
  merge(): void {
    this.#live();
    if (!this.#merged) this.#write();
    this.dispose();
  }

  /**
   * The adapters as a safetensors file: `<weight>.lora_A` [rows, r] and `<weight>.lora_B` [r, cols]
   * in the weights' type, with rank, alpha and the formula in `__metadata__`.
   */
  saveSafetensors(path: string): void {
    this.#live();
    const header: Record<string, unknown> = {
      __metadata__: {
        format: 'lora',
        rank: String(this.rank),
        alpha: String(this.alpha),
        update: 'W + alpha / rank * (A @ B)',
        targets: JSON.stringify(this.targets),
      },
    };
    const parts: Uint8Array[] = [];
    let offset = 0;
    for (const [k, a] of Object.entries(this.#params)) {
      const code = SAFETENSORS_DTYPES[a.dtype];
      if (!code) throw new OrtMlxError(`LoRA: safetensors cannot hold the ${a.dtype} adapter '${k}'`);
      const data = a.toTypedArray();
      const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
      header[k] = { dtype: code, shape: a.shape, data_offsets: [offset, offset + bytes.length] };
      parts.push(bytes);
      offset += bytes.length;
    }
    let json = JSON.stringify(header);
    json += ' '.repeat((8 - ((8 + Buffer.byteLength(json)) % 8)) % 8);
    const head = Buffer.alloc(8);
    head.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
    try {
      writeFileSync(path, Buffer.concat([head, Buffer.from(json), ...parts]));
    } catch (e) {
      throw new OrtMlxError(`LoRA: '${path}' could not be written: ${messageOf(e)}`, { cause: e });
    }
  }

  /** Frees the adapters and the base copies (the session keeps whatever weights it runs now). */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    mx.dispose([this.#base, this.#params]);
    this.#base = {};
    this.#params = {};
  }
}

const SAFETENSORS_DTYPES: Partial<Record<mx.Dtype, string>> = { float32: 'F32', float16: 'F16', bfloat16: 'BF16', float64: 'F64' };

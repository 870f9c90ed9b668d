// Small decoder-only language models with KV-cache inputs, built with the ONNX builder (random
// weights, fixed seeds), named as onnxruntime-genai and transformers.js exports name them:
// inputs input_ids, attention_mask (past + new), position_ids (GPT-2), past_key_values.{i}.key/value;
// outputs logits, present.{i}.key/value.
//  - 'llama': Llama/Qwen2-shaped, RMSNorm, SiLU-gated MLP, com.microsoft GroupQueryAttention with
//    rotary (do_rotary, cos/sin caches), grouped KV heads; seqlens_k and total_sequence_length come
//    from attention_mask as the genai builder derives them. int4: every projection is MatMulNBits.
//  - 'gpt2': plain ops, multi-head attention whose present is Concat(past, new) on the sequence axis,
//    a causal and padding mask from the shapes and attention_mask, learned positions.
import { model, node, type NodeSpec, type TensorSpec, type ValueSpec, v } from './build.js';

export interface DecoderConfig {
  kind: 'llama' | 'gpt2';
  layers: number;
  hidden: number;
  heads: number;
  /** GQA KV heads (llama); gpt2 uses heads. */
  kvHeads?: number;
  ffn: number;
  vocab: number;
  /** Rotary table rows (llama) or learned positions (gpt2): the longest context. */
  maxPositions: number;
  /** Q/K/V projection biases (Qwen2; llama only). */
  qkvBias?: boolean;
  /** MatMulNBits (4 bits, block 32) projections (llama only). */
  int4?: boolean;
  /**
   * The lm_head as MatMulNBits (this many bits, 4 or 8, block 32, symmetric) quantized from the
   * same float32 weights the model has without it (the seeded draw is unchanged): a speculative
   * draft that reads an eighth or a quarter of the head's bytes a token (and agrees less often
   * with the full model's choices at 4 bits than at 8).
   */
  headBits?: 4 | 8;
  seed?: number;
  /**
   * Layers from this index on (llama only) have their attention output and MLP down projections
   * scaled by `quietScale`: they add little to the residual stream, so the model truncated to its
   * first `quietFrom` layers (`keepLayers`) predicts almost what it does (a speculative draft).
   */
  quietFrom?: number;
  quietScale?: number;
  /**
   * Keep only the first this many layers in the graph (llama only). The weights of every layer of
   * `layers` are still drawn from the seeded generator, so the kept layers, embeddings, norms and
   * lm_head are exactly the full model's: the model truncated to its first layers.
   */
  keepLayers?: number;
  /** GroupQueryAttention's local_window_size (llama only): each query sees its last this many keys. */
  window?: number;
  /**
   * GroupQueryAttention's sliding_window_cache (llama, with `window`): past and present are buffers
   * of `window` rows holding each sequence's last tokens.
   */
  slidingCache?: boolean;
  /**
   * A position_ids input (llama): Q and K are rotated by com.microsoft RotaryEmbedding at those
   * positions, and GroupQueryAttention does no rotary of its own (as genai exports with a separate
   * rotary node are).
   */
  positionIds?: boolean;
}

/**
 * The tests' small Llama-shaped decoder: 2 layers, 64 wide, 4 query heads over 2 KV heads, a
 * 128-wide MLP and a 256-token vocabulary, with `over` (positions, seed, ...) on top.
 */
export const tinyLlama = (over: Partial<DecoderConfig> & { maxPositions: number }): DecoderConfig => ({
  kind: 'llama',
  layers: 2,
  hidden: 64,
  heads: 4,
  kvHeads: 2,
  ffn: 128,
  vocab: 256,
  ...over,
});

export const headSize = (c: DecoderConfig) => c.hidden / c.heads;
export const kvHeadsOf = (c: DecoderConfig) => (c.kind === 'llama' ? (c.kvHeads ?? c.heads) : c.heads);

/** Parameters in the model (for reporting). */
export function parameterCount(c: DecoderConfig): number {
  const H = headSize(c);
  const kv = kvHeadsOf(c) * H;
  const attn = c.hidden * (c.hidden + 2 * kv) + c.hidden * c.hidden;
  const mlp = c.kind === 'llama' ? 3 * c.hidden * c.ffn : 2 * c.hidden * c.ffn;
  const layers = c.kind === 'llama' ? Math.min(c.keepLayers ?? c.layers, c.layers) : c.layers;
  return layers * (attn + mlp) + 2 * c.vocab * c.hidden;
}

/** A seeded generator of values in [-1, 1). */
function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2 ** 31 - 1;
  };
}

/**
 * w [K, N] (row-major) as MatMulNBits' blocks of 32 along K, symmetric (MatMulNBits' default zero
 * point, 2^(bits - 1)): q [N, K / 32, 4 * bits] (4 bits: two values a byte, the first in the low
 * nibble; 8 bits: one a byte), scales [N * K / 32].
 */
export function quantizeColumns(w: Float32Array, K: number, N: number, bits: 4 | 8 = 4): { q: Uint8Array; scales: Float32Array } {
  if (K % 32 !== 0) throw new RangeError(`quantizeColumns: K (${K}) must be a multiple of 32`);
  const blocks = K / 32;
  const blob = 4 * bits;
  const zero = 2 ** (bits - 1);
  const top = 2 ** bits - 1;
  const q = new Uint8Array(N * blocks * blob);
  const scales = new Float32Array(N * blocks);
  for (let n = 0; n < N; n++)
    for (let b = 0; b < blocks; b++) {
      let amax = 0;
      for (let k = b * 32; k < b * 32 + 32; k++) amax = Math.max(amax, Math.abs(w[k * N + n]));
      const scale = amax / (zero - 1) || 1;
      scales[n * blocks + b] = scale;
      for (let i = 0; i < 32; i++) {
        const v = Math.min(top, Math.max(0, Math.round(w[(b * 32 + i) * N + n] / scale) + zero));
        const at = (n * blocks + b) * blob;
        if (bits === 8) q[at + i] = v;
        else q[at + (i >> 1)] |= i & 1 ? v << 4 : v;
      }
    }
  return { q, scales };
}

export function buildDecoder(c: DecoderConfig): Uint8Array {
  const next = rng(c.seed ?? 7);
  const inits: TensorSpec[] = [];
  const nodes: NodeSpec[] = [];
  const f32 = (name: string, dims: number[], scale: number, offset = 0) => {
    const n = dims.reduce((a, b) => a * b, 1);
    const values = new Float32Array(n);
    for (let i = 0; i < n; i++) values[i] = offset + scale * next();
    inits.push({ name, type: 'float32', dims, values });
    return name;
  };
  const i64 = (name: string, values: number[], dims = [values.length]) => {
    inits.push({ name, type: 'int64', dims, values: values.map(BigInt) });
    return name;
  };
  let id = 0;
  const op = (type: string, inputs: string[], attrs?: NodeSpec['attrs'], domain?: string, outs = 1): string[] => {
    const outputs = Array.from({ length: outs }, (_, k) => `${type.toLowerCase()}_${id}_${k}`);
    nodes.push(node(type, inputs, outputs, { name: `${type}_${id++}`, attrs, domain }));
    return outputs;
  };
  const one = (type: string, inputs: string[], attrs?: NodeSpec['attrs'], domain?: string) => op(type, inputs, attrs, domain)[0];
  const D = c.hidden;
  const H = headSize(c);
  const Nkv = kvHeadsOf(c);
  const linear = (x: string, name: string, inF: number, outF: number, gain = 1): string => {
    if (!c.int4) return one('MatMul', [x, f32(name, [inF, outF], gain / Math.sqrt(inF))]);
    const blocks = inF / 32;
    const packed = new Uint8Array(outF * blocks * 16);
    for (let i = 0; i < packed.length; i++) packed[i] = Math.floor((next() + 1) * 128) & 0xff;
    inits.push({ name: `${name}.q`, type: 'uint8', dims: [outF, blocks, 16], values: packed });
    f32(`${name}.scales`, [outF * blocks], 0.05 / Math.sqrt(inF), 0.1 / Math.sqrt(inF));
    return one('MatMulNBits', [x, `${name}.q`, `${name}.scales`], { K: inF, N: outF, bits: 4, block_size: 32 }, 'com.microsoft');
  };
  const inputs: ValueSpec[] = [v('input_ids', 'int64', ['batch', 'sequence']), v('attention_mask', 'int64', ['batch', 'total'])];
  if (c.kind === 'gpt2' || c.positionIds) inputs.push(v('position_ids', 'int64', ['batch', 'sequence']));
  const outputs: ValueSpec[] = [v('logits', 'float32', ['batch', 'sequence', c.vocab])];
  const kept = c.kind === 'llama' ? Math.min(c.keepLayers ?? c.layers, c.layers) : c.layers;
  for (let l = 0; l < kept; l++)
    for (const kv of ['key', 'value']) {
      inputs.push(v(`past_key_values.${l}.${kv}`, 'float32', ['batch', Nkv, 'past', H]));
      outputs.push(v(`present.${l}.${kv}`, 'float32', ['batch', Nkv, 'present', H]));
    }
  const embed = f32('embed', [c.vocab, D], 1);
  let x = one('Gather', [embed, 'input_ids']);

  if (c.kind === 'llama') {
    // genai's derivation: seqlens_k = sum(mask) - 1, total_sequence_length = mask.shape[1].
    const seqlens = one(
      'Cast',
      [one('Sub', [one('ReduceSum', ['attention_mask', i64('axis1', [1])], { keepdims: 0 }), i64('one', [1], [])])],
      {
        to: 6,
      },
    );
    const total = one('Cast', [one('Squeeze', [one('Shape', ['attention_mask'], { start: 1, end: 2 }), i64('axis0', [0])])], { to: 6 });
    const half = H / 2;
    const cosv = new Float32Array(c.maxPositions * half);
    const sinv = new Float32Array(c.maxPositions * half);
    for (let p = 0; p < c.maxPositions; p++)
      for (let i = 0; i < half; i++) {
        const a = p / 10000 ** ((2 * i) / H);
        cosv[p * half + i] = Math.cos(a);
        sinv[p * half + i] = Math.sin(a);
      }
    inits.push({ name: 'cos_cache', type: 'float32', dims: [c.maxPositions, half], values: cosv });
    inits.push({ name: 'sin_cache', type: 'float32', dims: [c.maxPositions, half], values: sinv });
    const norm = (t: string, name: string) => one('SimplifiedLayerNormalization', [t, f32(name, [D], 0.1, 1)], { axis: -1, epsilon: 1e-6 });
    for (let l = 0; l < c.layers; l++) {
      // A dropped layer's weights are drawn (the generator's sequence stays the full model's), then removed.
      const mark = { nodes: nodes.length, inits: inits.length, x };
      const gain = c.quietFrom !== undefined && l >= c.quietFrom ? (c.quietScale ?? 0.05) : 1;
      const h = norm(x, `l${l}.ln1`);
      const biased = (t: string, name: string, n: number) => (c.qkvBias ? one('Add', [t, f32(name, [n], 0.1)]) : t);
      let q = biased(linear(h, `l${l}.q`, D, D), `l${l}.bq`, D);
      let k = biased(linear(h, `l${l}.k`, D, Nkv * H), `l${l}.bk`, Nkv * H);
      if (c.positionIds) {
        const rotate = (t: string) => one('RotaryEmbedding', [t, 'position_ids', 'cos_cache', 'sin_cache'], {}, 'com.microsoft');
        q = rotate(q);
        k = rotate(k);
      }
      const val = biased(linear(h, `l${l}.v`, D, Nkv * H), `l${l}.bv`, Nkv * H);
      nodes.push(
        node(
          'GroupQueryAttention',
          [
            q,
            k,
            val,
            `past_key_values.${l}.key`,
            `past_key_values.${l}.value`,
            seqlens,
            total,
            ...(c.positionIds ? [] : ['cos_cache', 'sin_cache']),
          ],
          [`attn_${l}`, `present.${l}.key`, `present.${l}.value`],
          {
            name: `gqa_${l}`,
            domain: 'com.microsoft',
            attrs: {
              num_heads: c.heads,
              kv_num_heads: Nkv,
              do_rotary: c.positionIds ? 0 : 1,
              ...(c.window !== undefined ? { local_window_size: c.window } : {}),
              ...(c.slidingCache ? { sliding_window_cache: 1 } : {}),
            },
          },
        ),
      );
      x = one('Add', [x, linear(`attn_${l}`, `l${l}.o`, D, D, gain)]);
      const h2 = norm(x, `l${l}.ln2`);
      const gate = linear(h2, `l${l}.gate`, D, c.ffn);
      const up = linear(h2, `l${l}.up`, D, c.ffn);
      const act = one('Mul', [one('Mul', [gate, one('Sigmoid', [gate])]), up]);
      x = one('Add', [x, linear(act, `l${l}.down`, c.ffn, D, gain)]);
      if (l >= kept) {
        nodes.length = mark.nodes;
        inits.length = mark.inits;
        x = mark.x;
      }
    }
    x = norm(x, 'ln_f');
  } else {
    x = one('Add', [x, one('Gather', [f32('wpe', [c.maxPositions, D], 0.5), 'position_ids'])]);
    // Causal and padding mask [B, 1, S, T]: key j is visible to query i when j <= past + i and mask[j] = 1.
    const dim = (t: string, k: number) => one('Squeeze', [one('Shape', [t], { start: k, end: k + 1 }), 'axis0']);
    i64('axis0', [0]);
    const past = dim('past_key_values.0.key', 2);
    const S = dim('input_ids', 1);
    const T = dim('attention_mask', 1);
    i64('zero', [0], []);
    i64('one', [1], []);
    const rows = one('Unsqueeze', [one('Add', [one('Range', ['zero', S, 'one']), past]), i64('axis1', [1])]);
    const cols = one('Range', ['zero', T, 'one']);
    const causal = one('LessOrEqual', [cols, rows]);
    const pad = one('Unsqueeze', [one('Cast', ['attention_mask'], { to: 9 }), i64('axes12', [1, 2])]);
    inits.push({ name: 'fzero', type: 'float32', dims: [], values: [0] }, { name: 'fneg', type: 'float32', dims: [], values: [-1e9] });
    const bias = one('Where', [one('And', [causal, pad]), 'fzero', 'fneg']);
    const ln = (t: string, name: string) =>
      one('LayerNormalization', [t, f32(`${name}.g`, [D], 0.1, 1), f32(`${name}.b`, [D], 0.1)], { axis: -1, epsilon: 1e-5 });
    i64('heads_shape', [0, 0, c.heads, H]);
    i64('merge_shape', [0, 0, D]);
    inits.push({ name: 'scale', type: 'float32', dims: [], values: [1 / Math.sqrt(H)] });
    const heads = (t: string) => one('Transpose', [one('Reshape', [t, 'heads_shape'])], { perm: [0, 2, 1, 3] });
    for (let l = 0; l < c.layers; l++) {
      const h = ln(x, `l${l}.ln1`);
      const bias3 = (t: string, name: string) => one('Add', [t, f32(name, [D], 0.02)]);
      const q = heads(bias3(linear(h, `l${l}.q`, D, D), `l${l}.bq`));
      const k = heads(bias3(linear(h, `l${l}.k`, D, D), `l${l}.bk`));
      const val = heads(bias3(linear(h, `l${l}.v`, D, D), `l${l}.bv`));
      nodes.push(node('Concat', [`past_key_values.${l}.key`, k], [`present.${l}.key`], { name: `cat_k_${l}`, attrs: { axis: 2 } }));
      nodes.push(node('Concat', [`past_key_values.${l}.value`, val], [`present.${l}.value`], { name: `cat_v_${l}`, attrs: { axis: 2 } }));
      const scores = one('Add', [
        one('Mul', [one('MatMul', [q, one('Transpose', [`present.${l}.key`], { perm: [0, 1, 3, 2] })]), 'scale']),
        bias,
      ]);
      const probs = one('Softmax', [scores], { axis: -1 });
      const ctx = one('Reshape', [one('Transpose', [one('MatMul', [probs, `present.${l}.value`])], { perm: [0, 2, 1, 3] }), 'merge_shape']);
      x = one('Add', [x, linear(ctx, `l${l}.o`, D, D)]);
      const h2 = ln(x, `l${l}.ln2`);
      const up = one('Add', [linear(h2, `l${l}.fc`, D, c.ffn), f32(`l${l}.bfc`, [c.ffn], 0.02)]);
      inits.push({ name: `gelu_k_${l}`, type: 'float32', dims: [], values: [1.702] });
      const act = one('Mul', [up, one('Sigmoid', [one('Mul', [up, `gelu_k_${l}`])])]);
      x = one('Add', [x, linear(act, `l${l}.proj`, c.ffn, D)]);
    }
    x = ln(x, 'ln_f');
  }
  // A wide logit spread keeps greedy choices away from near-ties.
  f32('lm_head', [D, c.vocab], 4 / Math.sqrt(D));
  if (c.headBits) {
    const head = inits.pop()!;
    const bits = c.headBits;
    const { q, scales } = quantizeColumns(head.values as Float32Array, D, c.vocab, bits);
    inits.push({ name: 'lm_head.q', type: 'uint8', dims: [c.vocab, D / 32, 4 * bits], values: q });
    inits.push({ name: 'lm_head.scales', type: 'float32', dims: [c.vocab * (D / 32)], values: scales });
    nodes.push(
      node('MatMulNBits', [x, 'lm_head.q', 'lm_head.scales'], ['logits'], {
        name: 'lm_head',
        attrs: { K: D, N: c.vocab, bits, block_size: 32 },
        domain: 'com.microsoft',
      }),
    );
  } else {
    nodes.push(node('MatMul', [x, 'lm_head'], ['logits'], { name: 'lm_head' }));
  }
  return model({
    opsets: { '': 17, 'com.microsoft': 1 },
    inputs,
    outputs,
    nodes,
    initializers: inits,
  });
}

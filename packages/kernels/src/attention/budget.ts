// AttentionVjpBudget: how much memory each backward strategy needs, and the block sizes that keep
// the tiled one within a workspace. "Workspace" means bytes allocated beyond the inputs (q, k, v,
// out, gradOut, mask): the outputs dq, dk, dv count toward it. The per-element factors are upper
// bounds of what was measured with memory.peak() on MLX's CPU backend (see budget.test.ts); they
// count every score-sized buffer that can be alive at once when MLX frees intermediates as soon
// as their last consumer has run.
import { itemsize } from '@mlx/core';
import type { Array } from '@mlx/core';
import { attentionConfig, attentionShape, type AttentionConfig, type AttentionOptions, type AttentionShape } from './config.js';

export interface AttentionBlockSizes {
  queryBlock: number;
  keyBlock: number;
}

/** Score-sized buffers alive at once in the dense pullback (S, P, dP, dS and their temporaries). */
const DENSE_SCORE_BUFFERS = 4;
/** Score-sized buffers alive at once in one block step of the tiled pullback. */
const TILED_SCORE_BUFFERS = 3;
/** Extra buffers when softcap keeps tanh(scores) for its derivative. */
const SOFTCAP_SCORE_BUFFERS = 2;

const bytesOf = (elements: number, dtypeBytes: number) => elements * dtypeBytes;

/** The elements of a mask that has a gradient (an additive one), else 0. */
export function maskGradientElements(mask: Array | null | undefined): number {
  return mask && mask.dtype !== 'bool' ? mask.size : 0;
}

export class AttentionVjpBudget {
  readonly itemBytes: number;

  /** The budget for attention over these q, k, v (and options.mask) within `workspaceBytes`. */
  static forInputs(workspaceBytes: number, q: Array, k: Array, v: Array, options: AttentionOptions = {}): AttentionVjpBudget {
    return new AttentionVjpBudget(workspaceBytes, attentionShape(q, k, v), attentionConfig(options), maskGradientElements(options.mask));
  }

  /** `maskElements`: the elements of an additive mask, whose gradient is one more output. */
  constructor(
    readonly workspaceBytes: number,
    readonly shape: AttentionShape,
    readonly config: AttentionConfig,
    readonly maskElements = 0,
  ) {
    if (!(workspaceBytes > 0)) throw new RangeError(`workspaceBytes must be positive, got ${workspaceBytes}`);
    this.itemBytes = itemsize(shape.dtype);
  }

  /** Bytes per score (one query row × one key) over all batches and query heads, for one buffer. */
  private get scoreColumnBytes(): number {
    return this.shape.batch * this.shape.queryHeads * this.itemBytes;
  }

  private get softcapBuffers(): number {
    return this.config.softcap > 0 ? SOFTCAP_SCORE_BUFFERS : 0;
  }

  /** Mask bytes per score element of a block (a padded or causal mask block is materialised). */
  private get maskBytesPerScore(): number {
    const { maskKind, causal } = this.config;
    const user = maskKind === 'none' ? 0 : maskKind === 'boolean' ? 1 : this.itemBytes;
    return 2 * (user + (causal ? 1 : 0));
  }

  /** The gradients themselves: dq, dk, dv, and an additive mask's. */
  get outputBytes(): number {
    const { batch: b, queryHeads: hq, kvHeads: hk, querySeq: sq, keySeq: sk, headDim: d, valueDim: dv } = this.shape;
    return bytesOf(b * hq * sq * d + b * hk * sk * (d + dv) + this.maskElements, this.itemBytes);
  }

  /** Per-row vectors: logsumexp, its safe copy, rowsum(O∘dO). */
  private get rowBytes(): number {
    const { batch: b, queryHeads: hq, querySeq: sq } = this.shape;
    return bytesOf(3 * b * hq * sq, Math.max(4, this.itemBytes));
  }

  /** Peak bytes of the dense pullback. */
  get denseBytes(): number {
    const { querySeq: sq, keySeq: sk } = this.shape;
    const { batch: b, queryHeads: hq, valueDim: dv } = this.shape;
    const scores = sq * sk * (this.scoreColumnBytes * (DENSE_SCORE_BUFFERS + this.softcapBuffers) + this.maskBytesPerScore);
    // O∘dO (or P∘dP's row sums) and the group-summed products behind dK and dV.
    return scores + 2 * this.outputBytes + this.rowBytes + bytesOf(b * hq * sq * dv, this.itemBytes);
  }

  /** Bytes of the tiled pullback that do not depend on the block sizes. */
  get tiledFixedBytes(): number {
    // Outputs twice: the per-block pieces and their concatenation are alive together at the end.
    // The scaled copy of q is one more q-sized buffer.
    const { batch: b, queryHeads: hq, querySeq: sq, headDim: d } = this.shape;
    return 2 * this.outputBytes + this.rowBytes + bytesOf(b * hq * sq * d, this.itemBytes);
  }

  /** Bytes of one block step of the tiled pullback. */
  blockBytes({ queryBlock: bq, keyBlock: bk }: AttentionBlockSizes): number {
    const { batch: b, queryHeads: hq, kvHeads: hk, headDim: d, valueDim: dv } = this.shape;
    const scores = bq * bk * (this.scoreColumnBytes * (TILED_SCORE_BUFFERS + this.softcapBuffers) + this.maskBytesPerScore);
    // Accumulators are replaced each step (old and new alive together); the group sums of dK and
    // dV start from [b, hk, g, bk, d] products; a query block's O∘dO (and, when out is not given,
    // its recomputed output accumulated over key blocks) is [b, hq, bq, dv].
    const accumulators = bytesOf(2 * (b * hq * bq * d) + 2 * (b * hk * bk * (d + dv)) + b * hq * bk * (d + dv), this.itemBytes);
    const outputRows = bytesOf(3 * b * hq * bq * dv, this.itemBytes);
    return scores + accumulators + outputRows;
  }

  /** Whether the dense pullback fits in the workspace. */
  get fitsDense(): boolean {
    return this.denseBytes <= this.workspaceBytes;
  }

  /** The strategy 'auto' picks: dense when its score buffers fit, tiled otherwise. */
  get strategy(): 'dense' | 'tiled' {
    return this.fitsDense ? 'dense' : 'tiled';
  }

  /**
   * The largest roughly square blocks whose step fits beside the fixed bytes. Throws a RangeError
   * naming the smallest workspace that would do when even 1×1 blocks do not fit.
   */
  tiledBlocks(): AttentionBlockSizes {
    const { querySeq: sq, keySeq: sk } = this.shape;
    const room = this.workspaceBytes - this.tiledFixedBytes;
    const fits = (s: AttentionBlockSizes) => this.blockBytes(s) <= room;
    const minimal = { queryBlock: 1, keyBlock: 1 };
    if (!fits(minimal)) {
      const needed = this.tiledFixedBytes + this.blockBytes(minimal);
      throw new RangeError(
        `attention VJP workspace of ${this.workspaceBytes} bytes is too small for these shapes: the tiled strategy needs at least ${needed}`,
      );
    }
    // Grow a square block by bisection, then let the other side take what is left.
    const largestWith = (make: (n: number) => AttentionBlockSizes, limit: number) => {
      let lo = 1;
      let hi = Math.max(1, limit);
      while (lo < hi) {
        const mid = Math.ceil((lo + hi) / 2);
        if (fits(make(mid))) lo = mid;
        else hi = mid - 1;
      }
      return lo;
    };
    const side = largestWith((n) => ({ queryBlock: Math.min(n, sq), keyBlock: Math.min(n, sk) }), Math.max(sq, sk));
    let queryBlock = Math.min(side, sq);
    let keyBlock = Math.min(side, sk);
    if (queryBlock === sq) keyBlock = largestWith((n) => ({ queryBlock, keyBlock: n }), sk);
    else if (keyBlock === sk) queryBlock = largestWith((n) => ({ queryBlock: n, keyBlock }), sq);
    return { queryBlock: Math.max(1, queryBlock), keyBlock: Math.max(1, keyBlock) };
  }
}

// The sampler of generate() and its siblings: one position's logits in, one token out, in O(V)
// without sorting the vocabulary and without a V-sized allocation per call.
//
// The distribution is the usual one: softmax(logits / temperature) restricted to the k most likely
// tokens (top-k), then to the smallest prefix of those, most likely first (ties to the lower id),
// whose probability reaches p (top-p, normalized over the top-k set), renormalized. Both cuts keep a
// prefix of that order, so the kept set is always "every token above a threshold logit, and the
// tokens at the threshold up to a threshold id", and it is found as that threshold:
//
// - top-k: a histogram of counts by the top 12 bits of each logit's float32 bit pattern (an
//   order-preserving key, so no pass for the maximum first), then cut() inside the one bucket
//   where the count reaches k, recursively on the values (its members are few, unless the logits
//   tie, which the recursion resolves in id order). Only a final list of at most 48 is sorted
//   (or, for plain-number logits, one whose values no bucketing can separate).
// - top-p alone: the maximum, then every token's weight, summed by block of 256 tokens and by
//   bucket of (max - logit) / temperature (1/64 wide); the nucleus ends in the bucket where the
//   mass reaches p. A draw is made from the whole softmax (a block by its sum, a token in it) and
//   kept if it falls in the nucleus, which holds at least p of the mass; the cut inside the
//   boundary bucket is made only when a draw lands there. Below p = 1/2 the draw is made over the
//   nucleus directly.
// - temperature alone: no weight is computed up front: the pass for the maximum keeps each
//   block's, and a draw picks a block by its bound (its best token's weight times its size) and a
//   token in it uniformly, and keeps it with probability weight / bound (rejection sampling,
//   exact; at least 1 draw in 256 kept, a few dozen exponentials a token on flat logits).
//
// The exponentials come from expNeg below, a table-driven exp accurate to a few units in the last
// place of a float64 and several times faster than Math.exp. Draws call `random` a varying but
// deterministic number of times: one seed, one sequence of tokens.
import { OrtMlxError } from './errors.js';

/** The settings the sampler reads (generate()'s SamplingOptions less the seed). */
export interface SamplerSettings {
  temperature?: number;
  topK?: number;
  topP?: number;
}

/** Buckets of the first level over the whole vocabulary. */
const NB = 4096;
/** A list this short is sorted rather than bucketed. */
const SMALL = 48;

// exp(-x) for x ≥ 0: exp(-j) · exp(-i/1024) from two tables, times a degree-4 polynomial of the
// remainder d in (-1/1024, 0] (truncation error below 1e-17); 0 from x = 745 on, where Math.exp
// underflows to subnormals.
const E_HI = Float64Array.from({ length: 1024 }, (_, j) => (j < 745 ? Math.exp(-j) : 0));
const E_LO = Float64Array.from({ length: 1024 }, (_, j) => Math.exp(-j / 1024));
const C6 = 1 / 6;
const C24 = 1 / 24;

/** exp(-x) for x ≥ 0 (+Infinity: 0), within a few ulps of Math.exp. */
export function expNeg(x: number): number {
  if (!(x < 745)) return 0;
  const y = x * 1024;
  const k = y | 0;
  const d = (k - y) * 0.0009765625;
  return E_HI[(k >> 10) & 1023] * E_LO[k & 1023] * (1 + d * (1 + d * (0.5 + d * (C6 + d * C24))));
}

// Scratch reused across calls (the sampler is synchronous): the candidate lists, their weights,
// per block of BLOCK tokens its weight (top-p) or the running sum of its bounds (temperature alone)
// and its maximum, a float32 copy of logits that come in another type, and the per-bucket counts
// and masses (two of each, for even and odd tokens, so that consecutive tokens of one bucket do not
// wait on each other's update).
const BLOCK = 256;
let listA = new Int32Array(0);
let listB = new Int32Array(0);
let weightsA = new Float64Array(0);
let blocks = new Float64Array(0);
let blockMax = new Float64Array(0);
let copy = new Float32Array(0);
const counts0 = new Int32Array(NB);
const counts1 = new Int32Array(NB);
const mass0 = new Float64Array(NB);
const mass1 = new Float64Array(NB);

function scratch(V: number): void {
  if (listA.length >= V) return;
  listA = new Int32Array(V);
  listB = new Int32Array(V);
  weightsA = new Float64Array(V);
  blocks = new Float64Array(Math.ceil(V / BLOCK));
  blockMax = new Float64Array(Math.ceil(V / BLOCK));
}

/**
 * The logits' float32 bit patterns (a view of a Float32Array; other arrays are rounded to float32
 * first, which keeps their order, ties aside, which cut() resolves on the values themselves).
 */
function bitsOf(logits: ArrayLike<number>): Int32Array {
  if (logits instanceof Float32Array) return new Int32Array(logits.buffer, logits.byteOffset, logits.length);
  if (copy.length < logits.length) copy = new Float32Array(logits.length);
  copy.set(logits);
  return new Int32Array(copy.buffer, 0, logits.length);
}

/**
 * The bucket of a float32 by its bits: the top 12 bits of the order-preserving key (sign flipped
 * for a positive, every bit for a negative; -0 as +0), so a larger logit is never in a lower
 * bucket. Buckets 0-7 hold only -Infinity and negative NaNs, 4088-4095 only +Infinity and NaNs.
 */
const bucketOf = (u: number) => (u === -2147483648 ? 0x800 : ((u ^ ((u >> 31) | -2147483648)) >>> 20) & (NB - 1));

/** A cut of the order (logit descending, id ascending): tokens with logit > value, or = value and id ≤ id. */
interface Cut {
  value: number;
  id: number;
  /** The weight of the kept tokens of the list that was cut. */
  mass: number;
}

/**
 * The kept set of one call: every token of `logits` with logit > `value`, or = `value` and id ≤
 * `id` (`value` -Infinity: every token), each weighing exp((logit - max) * invT) (-Infinity: 0),
 * `total` in all. `how` says how the draw goes: 'list' (top-k: the kept ids in listA[0, count),
 * weights alongside in weightsA); 'blocks' (top-p alone: `z` is the weight of every token, `blocks`
 * holds it by block, `bucket` is the xBucket where the nucleus ends (-1: rounding never reached p,
 * every token), the buckets before it (higher logits) weigh `above`, and the cut inside it is made
 * when first needed: `cut` false until then); 'bounds' (temperature alone: `blocks` holds the
 * running sum of the blocks' bounds, `blockMax` their maxima, and `z` is not computed).
 */
interface Plan {
  /** The logits planned (another array when one was +Infinity). */
  logits: ArrayLike<number>;
  max: number;
  invT: number;
  value: number;
  id: number;
  total: number;
  how: 'list' | 'blocks' | 'bounds';
  count: number;
  z: number;
  bucket: number;
  above: number;
  target: number;
  cut: boolean;
  /** The boundary bucket's members, in listB once cut. */
  members: number;
}

const isKept = (v: number, i: number, value: number, id: number) => v > value || (v === value && i <= id);

/**
 * The cut of `ids[0, n)` (finite logits; ids of equal logits in increasing order) that keeps the
 * shortest prefix, best first, whose weight reaches `target`: weight 1 a token (top-k) or, when
 * `weighted`, exp((logit - max) * invT). Never reached (rounding): the whole list.
 */
function cut(ids: Int32Array, n: number, logits: ArrayLike<number>, weighted: boolean, max: number, invT: number, target: number): Cut {
  const weight = (v: number) => (weighted ? expNeg((max - v) * invT) : 1);
  let base = 0;
  for (;;) {
    let hi = logits[ids[0]];
    let lo = hi;
    for (let j = 1; j < n; j++) {
      const v = logits[ids[j]];
      if (v > hi) hi = v;
      else if (v < lo) lo = v;
    }
    if (hi === lo) {
      // A tie: the prefix in id order.
      const w = weight(hi);
      let acc = 0;
      for (let j = 0; j < n; j++) {
        acc += w;
        if (acc >= target) return { value: hi, id: ids[j], mass: base + acc };
      }
      return { value: hi, id: ids[n - 1], mass: base + acc };
    }
    const nb = Math.min(1024, n);
    const scale = (nb - 1) / (hi - lo);
    if (n <= SMALL || !(scale > 0 && scale < Number.POSITIVE_INFINITY)) {
      const order = Array.from(ids.subarray(0, n)).sort((a, b) => logits[b] - logits[a] || a - b);
      let acc = 0;
      for (const i of order) {
        acc += weight(logits[i]);
        if (acc >= target) return { value: logits[i], id: i, mass: base + acc };
      }
      const last = order[n - 1];
      return { value: logits[last], id: last, mass: base + acc };
    }
    const m = new Float64Array(nb);
    const c = new Int32Array(nb);
    const sub = (v: number) => {
      const y = (hi - v) * scale;
      return y < nb - 1 ? y | 0 : nb - 1;
    };
    for (let j = 0; j < n; j++) {
      const v = logits[ids[j]];
      const b = sub(v);
      m[b] += weight(v);
      c[b]++;
    }
    let acc = 0;
    let at = -1;
    for (let b = 0; b < nb; b++) {
      if (acc + m[b] >= target) {
        at = b;
        break;
      }
      acc += m[b];
    }
    if (at < 0) {
      // Never reached: the whole list (the last of its lowest logit).
      let id = -1;
      for (let j = 0; j < n; j++) if (logits[ids[j]] === lo) id = ids[j];
      return { value: lo, id, mass: base + acc };
    }
    const next = new Int32Array(c[at]);
    let k = 0;
    for (let j = 0; j < n; j++) if (sub(logits[ids[j]]) === at) next[k++] = ids[j];
    base += acc;
    target -= acc;
    ids = next;
    n = k;
  }
}

/**
 * The kept set and its weights for `logits` under `s`. NaN, and +/-Infinity as the maximum, go to
 * extremes() (an error, or the infinite tokens alone); -Infinity tokens weigh 0.
 */
function plan(logits: ArrayLike<number>, s: SamplerSettings): Plan {
  const V = logits.length;
  const invT = 1 / (s.temperature ?? 1);
  const k = s.topK && s.topK > 0 && s.topK < V ? s.topK : 0;
  const p = s.topP ?? 1;
  scratch(V);
  const out: Plan = {
    logits,
    max: 0,
    invT,
    value: Number.NEGATIVE_INFINITY,
    id: V,
    total: 0,
    how: 'blocks',
    count: 0,
    z: 0,
    bucket: -1,
    above: 0,
    target: 0,
    cut: true,
    members: 0,
  };
  if (k) {
    // Top-k: the count of each bucket; the k-th best is in the bucket where the count reaches k.
    // No pass for the maximum: it is the best of the k.
    const bits = bitsOf(logits);
    counts0.fill(0);
    counts1.fill(0);
    let i = 0;
    for (; i + 1 < V; i += 2) {
      counts0[bucketOf(bits[i])]++;
      counts1[bucketOf(bits[i + 1])]++;
    }
    if (i < V) counts0[bucketOf(bits[i])]++;
    for (let b = 0; b < 8; b++)
      if (counts0[b] + counts1[b] + counts0[NB - 1 - b] + counts1[NB - 1 - b] && extremes(logits) === Number.POSITIVE_INFINITY)
        return plan(infinite(logits), { ...s, temperature: 1 });
    let acc = 0;
    let at = 0;
    for (let b = NB - 1; b >= 0; b--) {
      const c = counts0[b] + counts1[b];
      if (acc + c >= k) {
        at = b;
        break;
      }
      acc += c;
    }
    let n = 0;
    let m = 0;
    for (let j = 0; j < V; j++) {
      const b = bucketOf(bits[j]);
      if (b > at) listA[n++] = j;
      else if (b === at) listB[m++] = j;
    }
    const c = cut(listB, m, logits, false, 0, invT, k - acc);
    out.value = c.value;
    out.id = c.id;
    for (let j = 0; j < m; j++) if (isKept(logits[listB[j]], listB[j], c.value, c.id)) listA[n++] = listB[j];
    let max = logits[listA[0]];
    for (let j = 1; j < n; j++) if (logits[listA[j]] > max) max = logits[listA[j]];
    const w = weightsA;
    let z = 0;
    for (let j = 0; j < n; j++) z += w[j] = expNeg((max - logits[listA[j]]) * invT);
    Object.assign(out, { max, how: 'list', count: n, total: z });
    if (p < 1) {
      // Top-p over the top-k set. Ids of equal logits are in increasing order in listA: a tie is
      // never split between the buckets above and the boundary's.
      const c = cut(listA, n, logits, true, max, invT, p * z);
      let kept = 0;
      let total = 0;
      for (let j = 0; j < n; j++)
        if (isKept(logits[listA[j]], listA[j], c.value, c.id)) {
          listA[kept] = listA[j];
          total += w[kept] = w[j];
          kept++;
        }
      Object.assign(out, { value: c.value, id: c.id, count: kept, total });
    }
    return out;
  }
  // The maximum (every weight is relative to it), with temperature alone also each block's;
  // Math.max makes it NaN if any logit is. (Four running maxima: the comparisons do not wait on
  // each other.)
  const nblk = Math.ceil(V / BLOCK);
  let max: number;
  if (p < 1) {
    let m0 = logits[0];
    let m1 = m0;
    let m2 = m0;
    let m3 = m0;
    let i = 0;
    for (; i + 3 < V; i += 4) {
      m0 = Math.max(m0, logits[i]);
      m1 = Math.max(m1, logits[i + 1]);
      m2 = Math.max(m2, logits[i + 2]);
      m3 = Math.max(m3, logits[i + 3]);
    }
    for (; i < V; i++) m0 = Math.max(m0, logits[i]);
    max = Math.max(m0, m1, m2, m3);
  } else {
    for (let b = 0; b < nblk; b++) {
      let m0 = Number.NEGATIVE_INFINITY;
      let m1 = m0;
      let m2 = m0;
      let m3 = m0;
      const end = Math.min(V, b * BLOCK + BLOCK);
      let i = b * BLOCK;
      for (; i + 3 < end; i += 4) {
        m0 = Math.max(m0, logits[i]);
        m1 = Math.max(m1, logits[i + 1]);
        m2 = Math.max(m2, logits[i + 2]);
        m3 = Math.max(m3, logits[i + 3]);
      }
      for (; i < end; i++) m0 = Math.max(m0, logits[i]);
      blockMax[b] = Math.max(m0, m1, m2, m3);
    }
    max = blockMax[0];
    for (let b = 1; b < nblk; b++) max = Math.max(max, blockMax[b]);
  }
  if (!(Math.abs(max) < Number.POSITIVE_INFINITY)) {
    extremes(logits); // throws unless the maximum is +Infinity
    return plan(infinite(logits), { ...s, temperature: 1 });
  }
  out.max = max;
  if (p >= 1) {
    // Temperature alone: no weight is computed here. The draw is by rejection from each block's
    // bound (its best token's weight, for each of its tokens): blocks[b] sums the bounds up to b.
    let u = 0;
    for (let b = 0; b < nblk; b++) blocks[b] = u += expNeg((max - blockMax[b]) * invT) * (Math.min(V, (b + 1) * BLOCK) - b * BLOCK);
    out.how = 'bounds';
    out.z = Number.NaN;
    out.total = Number.NaN;
    return out;
  }
  // Top-p alone: every token's weight, summed by block (two sums each: the additions do not wait
  // on each other) and by bucket of (max - logit) / temperature, 1/64 wide (xBucket).
  mass0.fill(0);
  mass1.fill(0);
  let z = 0;
  for (let start = 0, blk = 0; start < V; start += BLOCK, blk++) {
    const end = Math.min(V, start + BLOCK);
    let s0 = 0;
    let s1 = 0;
    let j = start;
    for (; j + 1 < end; j += 2) {
      // expNeg inlined, its table index k = floor(x * 1024) also giving the bucket floor(x * 64).
      const x = Math.min((max - logits[j]) * invT, 745) * 1024;
      const y = Math.min((max - logits[j + 1]) * invT, 745) * 1024;
      const kx = x | 0;
      const ky = y | 0;
      const dx = (kx - x) * 0.0009765625;
      const dy = (ky - y) * 0.0009765625;
      const a = E_HI[(kx >> 10) & 1023] * E_LO[kx & 1023] * (1 + dx * (1 + dx * (0.5 + dx * (C6 + dx * C24))));
      const b = E_HI[(ky >> 10) & 1023] * E_LO[ky & 1023] * (1 + dy * (1 + dy * (0.5 + dy * (C6 + dy * C24))));
      mass0[kx < 65536 ? kx >> 4 : NB - 1] += a;
      mass1[ky < 65536 ? ky >> 4 : NB - 1] += b;
      s0 += a;
      s1 += b;
    }
    if (j < end) {
      const x = (max - logits[j]) * invT;
      const a = expNeg(x);
      mass0[x < 64 ? (x * 64) & (NB - 1) : NB - 1] += a;
      s0 += a;
    }
    blocks[blk] = s0 + s1;
    z += s0 + s1;
  }
  out.z = z;
  out.total = z;
  // The nucleus ends in the bucket where the mass, from the top, reaches p.
  const target = p * z;
  let acc = 0;
  for (let b = 0; b < NB; b++) {
    const m = mass0[b] + mass1[b];
    if (acc + m >= target) {
      Object.assign(out, { bucket: b, above: acc, target, cut: false });
      return out;
    }
    acc += m;
  }
  // p so close to 1 that rounding never reaches it: every token, as the spec's walk would.
  return out;
}

/**
 * The bucket of top-p alone: (max - logit) / temperature in steps of 1/64 (0: the top), the rest
 * from 64 on (weights below e^-64) in the last; monotone in the logit, equal logits together.
 */
function xBucket(q: Plan, v: number): number {
  const x = (q.max - v) * q.invT;
  return x < 64 ? (x * 64) & (NB - 1) : NB - 1;
}

/** The cut inside the boundary bucket of a top-p plan, made once. */
function finish(q: Plan): void {
  if (q.cut) return;
  const l = q.logits;
  let n = 0;
  for (let j = 0; j < l.length; j++) if (xBucket(q, l[j]) === q.bucket) listB[n++] = j;
  const c = cut(listB, n, l, true, q.max, q.invT, q.target - q.above);
  Object.assign(q, { value: c.value, id: c.id, total: q.above + c.mass, members: n, cut: true });
}

/**
 * A token drawn from every token's weight by rejection (a 'bounds' plan: temperature alone): a
 * block by its bound, a token of it uniformly, kept with probability weight / the block's best
 * weight. A block's best token is always kept, so a draw is kept with probability ≥ 1/BLOCK; after
 * 10,000 refusals (a broken `random`), every weight is computed and walked.
 */
function drawBounded(q: Plan, random: () => number): number {
  const l = q.logits;
  const V = l.length;
  const nblk = Math.ceil(V / BLOCK);
  const total = blocks[nblk - 1];
  for (let attempt = 0; attempt < 10000; attempt++) {
    const u = random() * total;
    let lo = 0;
    let hi = nblk - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (blocks[mid] > u) hi = mid;
      else lo = mid + 1;
    }
    const start = lo * BLOCK;
    const len = Math.min(V, start + BLOCK) - start;
    const bound = expNeg((q.max - blockMax[lo]) * q.invT);
    const i = start + Math.min(len - 1, Math.floor((u - (lo ? blocks[lo - 1] : 0)) / bound));
    if (random() * bound < expNeg((q.max - l[i]) * q.invT)) return i;
  }
  let z = 0;
  for (let i = 0; i < V; i++) z += expNeg((q.max - l[i]) * q.invT);
  let r = random() * z;
  let last = -1;
  for (let i = 0; i < V; i++) {
    const w = expNeg((q.max - l[i]) * q.invT);
    if (w <= 0) continue;
    last = i;
    r -= w;
    if (r < 0) return i;
  }
  return last;
}

/** A token drawn from every token's weight (a 'blocks' plan): the block by its sum, then the token. */
function drawAll(q: Plan, random: () => number): number {
  const l = q.logits;
  let r = random() * q.z;
  let blk = -1;
  const nblk = Math.ceil(l.length / BLOCK);
  for (let b = 0; b < nblk; b++) {
    if (blocks[b] <= 0) continue;
    blk = b;
    if (r < blocks[b]) break;
    r -= blocks[b];
  }
  let last = -1;
  for (let i = blk * BLOCK, end = Math.min(l.length, i + BLOCK); i < end; i++) {
    const w = expNeg((q.max - l[i]) * q.invT);
    if (w <= 0) continue;
    last = i;
    r -= w;
    if (r < 0) return i;
  }
  return last;
}

/**
 * The checks of unusual logits: an OrtMlxError for empty logits, a NaN, or every logit -Infinity;
 * otherwise the maximum.
 */
function extremes(logits: ArrayLike<number>): number {
  const V = logits.length;
  let max = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < V; i++) {
    const v = logits[i];
    if (Number.isNaN(v)) throw new OrtMlxError(`generate: logits[${i}] is NaN (of ${V}): sampling needs a probability for every token`);
    if (v > max) max = v;
  }
  if (max === Number.NEGATIVE_INFINITY)
    throw new OrtMlxError(`generate: every one of the ${V} logits is -Infinity: no token can be sampled`);
  return max;
}

/** The logits when one is +Infinity: the infinite tokens, equally likely (the limit of the softmax). */
const infinite = (logits: ArrayLike<number>) =>
  Float32Array.from(logits, (v) => (v === Number.POSITIVE_INFINITY ? 0 : Number.NEGATIVE_INFINITY));

/**
 * A token drawn from the distribution of `s` over `logits` with one call of `random`. Errors
 * (OrtMlxError): empty logits, a NaN logit, every logit -Infinity. -Infinity tokens are never drawn;
 * +Infinity ones share all the mass.
 */
export function sample(logits: ArrayLike<number>, s: SamplerSettings, random: () => number): number {
  if (!logits.length) throw new OrtMlxError('generate: the logits are empty: no token to sample');
  const q = plan(logits, s);
  const l = q.logits;
  if (q.how === 'list') {
    let r = random() * q.total;
    let last = -1;
    for (let j = 0; j < q.count; j++) {
      if (weightsA[j] <= 0) continue;
      last = listA[j];
      r -= weightsA[j];
      if (r < 0) return last;
    }
    return last;
  }
  if (q.how === 'bounds') return drawBounded(q, random);
  if (q.bucket < 0) return drawAll(q, random);
  // Top-p alone: a draw from every token, kept if it is in the nucleus (drawn again if not: the
  // draws kept follow the nucleus's distribution exactly). The nucleus holds at least p of the
  // mass, so when p ≥ 1/2 a draw is kept with probability ≥ 1/2; the cut inside the boundary
  // bucket is made only when a draw lands there.
  for (let attempt = 0; attempt < 64 && q.above >= 0.5 * q.z; attempt++) {
    const i = drawAll(q, random);
    const b = xBucket(q, l[i]);
    if (b < q.bucket) return i;
    if (b > q.bucket) continue;
    finish(q);
    if (isKept(l[i], i, q.value, q.id)) return i;
  }
  // A small nucleus by mass: a bucket above by its mass and a token in it by weight, or a kept
  // member of the boundary bucket.
  finish(q);
  let r = random() * q.total;
  let last = -1;
  if (r < q.above) {
    let at = -1;
    for (let b = 0; b < q.bucket; b++) {
      const m = mass0[b] + mass1[b];
      if (m <= 0) continue;
      at = b;
      if (r < m) break;
      r -= m;
    }
    for (let i = 0; i < l.length; i++) {
      if (xBucket(q, l[i]) !== at) continue;
      const w = expNeg((q.max - l[i]) * q.invT);
      if (w <= 0) continue;
      last = i;
      r -= w;
      if (r < 0) return i;
    }
    return last;
  }
  r -= q.above;
  for (let j = 0; j < q.members; j++) {
    const i = listB[j];
    const v = l[i];
    if (!isKept(v, i, q.value, q.id)) continue;
    const w = expNeg((q.max - v) * q.invT);
    if (w <= 0) continue;
    last = i;
    r -= w;
    if (r < 0) return i;
  }
  return last;
}

/**
 * The probability of each token under `s`, the distribution sample() draws from (zero outside the
 * kept set): the target and draft distributions of speculative sampling.
 */
export function distribution(logits: ArrayLike<number>, s: SamplerSettings): Float64Array {
  if (!logits.length) throw new OrtMlxError('generate: the logits are empty: no token to sample');
  const q = plan(logits, s);
  finish(q);
  const l = q.logits;
  const p = new Float64Array(l.length);
  if (q.how === 'bounds') {
    q.total = 0;
    for (let i = 0; i < l.length; i++) q.total += expNeg((q.max - l[i]) * q.invT);
  }
  if (q.how === 'list') {
    for (let j = 0; j < q.count; j++) p[listA[j]] = weightsA[j] / q.total;
    return p;
  }
  for (let i = 0; i < l.length; i++) {
    const v = l[i];
    if (isKept(v, i, q.value, q.id)) p[i] = expNeg((q.max - v) * q.invT) / q.total;
  }
  return p;
}

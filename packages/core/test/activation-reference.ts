// float64 references of the fused activations, shared by their tests and the product's epilogue's: erf from its series (|x| < 2.5: all terms positive, no cancellation)
// and erfc's continued fraction beyond; ±Inf give the limits the kernels give (0 at -inf for the
// GELU and SiLU forms, where the textbook formula is -inf * 0).
function erf64(x: number): number {
  if (Number.isNaN(x)) return x;
  const a = Math.abs(x);
  if (a >= 6) return Math.sign(x);
  if (a < 2.5) {
    let term = a;
    let sum = a;
    for (let n = 1; n < 400 && term > sum * 1e-18; n++) {
      term *= (2 * a * a) / (2 * n + 1);
      sum += term;
    }
    return Math.sign(x) * ((2 / Math.sqrt(Math.PI)) * Math.exp(-a * a) * sum);
  }
  let f = a;
  for (let k = 300; k >= 1; k--) f = a + k / 2 / f;
  return Math.sign(x) * (1 - Math.exp(-a * a) / Math.sqrt(Math.PI) / f);
}
/** 1 + erf(x) without cancellation for negative x (erfc(|x|) by the continued fraction). */
export function onePlusErf64(x: number): number {
  if (x > -2.5) return 1 + erf64(x);
  const a = -x;
  let f = a;
  for (let k = 300; k >= 1; k--) f = a + k / 2 / f;
  return Math.exp(-a * a) / Math.sqrt(Math.PI) / f;
}
const sigmoid64 = (x: number) => 1 / (1 + Math.exp(-x));
/** Each kind of the fused activation, in float64. */
export const activationReference: Record<string, (x: number) => number> = {
  exp: Math.exp,
  erf: erf64,
  tanh: Math.tanh,
  sigmoid: sigmoid64,
  relu: (x) => (Number.isNaN(x) ? x : Math.max(x, 0)),
  silu: (x) => (x === Number.NEGATIVE_INFINITY ? 0 : x * sigmoid64(x)),
  gelu: (x) => (x === Number.NEGATIVE_INFINITY ? 0 : x === Number.POSITIVE_INFINITY ? x : 0.5 * x * onePlusErf64(x * Math.SQRT1_2)),
  gelu_tanh: (x) => {
    if (x === Number.NEGATIVE_INFINITY) return 0;
    if (x === Number.POSITIVE_INFINITY) return x;
    const u = Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3);
    return x / (1 + Math.exp(-2 * u));
  },
};

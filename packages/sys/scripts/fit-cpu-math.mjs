// How the polynomial coefficients of native/src/kernels/activation/math_impl.h were derived: weighted least squares
// (reweighted towards minimax) against float64 references, coefficients rounded to float32, and the
// resulting error printed. `node scripts/fit-cpu-math.mjs`. A: erf(x)/x on |x| < 1; B: log(erfc(t))
// on 1 <= t < 4; C: tanh(x)/x on |x| < 0.625.
// Least-squares fits (weighted for relative error) for the float32 erf kernel.
const SQRTPI = Math.sqrt(Math.PI);
function erfSeries(x) {
  // 2/sqrt(pi) e^{-x^2} sum 2^n x^{2n+1}/(1*3*...*(2n+1)); all terms positive
  let term = x,
    sum = x;
  for (let n = 1; n < 500; n++) {
    term *= (2 * x * x) / (2 * n + 1);
    sum += term;
    if (term < sum * 1e-18) break;
  }
  return (2 / SQRTPI) * Math.exp(-x * x) * sum;
}
function erfcCF(x) {
  // continued fraction, backward, x >= 2
  let f = x;
  for (let k = 300; k >= 1; k--) f = x + k / 2 / f;
  return Math.exp(-x * x) / SQRTPI / f;
}
const erfc = (x) => (x < 2 ? 1 - erfSeries(x) : erfcCF(x));
function solve(A, b) {
  // Gaussian elimination with partial pivoting
  const n = b.length;
  for (let i = 0; i < n; i++) {
    let p = i;
    for (let r = i + 1; r < n; r++) if (Math.abs(A[r][i]) > Math.abs(A[p][i])) p = r;
    [A[i], A[p]] = [A[p], A[i]];
    [b[i], b[p]] = [b[p], b[i]];
    for (let r = i + 1; r < n; r++) {
      const f = A[r][i] / A[i][i];
      for (let c = i; c < n; c++) A[r][c] -= f * A[i][c];
      b[r] -= f * b[i];
    }
  }
  const x = new Array(n).fill(0);
  for (let i = n - 1; i >= 0; i--) {
    let s = b[i];
    for (let c = i + 1; c < n; c++) s -= A[i][c] * x[c];
    x[i] = s / A[i][i];
  }
  return x;
}
// Fit y ~ sum c_k u^k on points (u, y) with weights w (iteratively reweighted towards minimax).
function fit(us, ys, ws, deg) {
  let w = ws.slice();
  let c;
  for (let it = 0; it < 30; it++) {
    const A = Array.from({ length: deg + 1 }, () => new Array(deg + 1).fill(0));
    const b = new Array(deg + 1).fill(0);
    for (let i = 0; i < us.length; i++) {
      const p = [];
      let v = 1;
      for (let k = 0; k <= deg; k++) {
        p.push(v);
        v *= us[i];
      }
      for (let r = 0; r <= deg; r++) {
        b[r] += w[i] * p[r] * ys[i];
        for (let q = 0; q <= deg; q++) A[r][q] += w[i] * p[r] * p[q];
      }
    }
    c = solve(A, b);
    const err = us.map((u, i) => Math.abs(horner(c, u) - ys[i]) * Math.sqrt(ws[i]));
    const m = Math.max(...err);
    w = w.map((wi, i) => wi * (1 + err[i] / m));
  }
  return c;
}
const horner = (c, u) => {
  let r = 0;
  for (let k = c.length - 1; k >= 0; k--) r = r * u + c[k];
  return r;
};
const f32 = (v) => Math.fround(v);
const N = 2000;
// A: erf(x)/x = P(z), z = x^2 in [0, 1]; relative weights.
{
  const us = [],
    ys = [],
    ws = [];
  for (let i = 0; i <= N; i++) {
    const x = Math.cos((Math.PI * i) / N) * 0.5 + 0.5;
    const z = x * x;
    const y = x === 0 ? 2 / SQRTPI : erfSeries(x) / x;
    us.push(z);
    ys.push(y);
    ws.push(1 / (y * y));
  }
  for (const deg of [5, 6]) {
    const c = fit(us, ys, ws, deg).map(f32);
    let m = 0;
    for (let x = 1e-4; x <= 1; x += 1e-4) {
      const y = x * horner(c, x * x);
      m = Math.max(m, Math.abs(y - erfSeries(x)) / erfSeries(x));
    }
    console.log('A deg', deg, 'max rel', m.toExponential(3), JSON.stringify(c));
  }
}
// B: log(erfc(t)) = Q(u), u = (t - 2.5) / 1.5, t in [1, 4]; absolute weights on erfc's relative error.
{
  const us = [],
    ys = [],
    ws = [];
  for (let i = 0; i <= N; i++) {
    const u = Math.cos((Math.PI * i) / N);
    const t = 2.5 + 1.5 * u;
    us.push(u);
    ys.push(Math.log(erfc(t)));
    ws.push(1);
  }
  for (const deg of [8, 9, 10, 11]) {
    const c = fit(us, ys, ws, deg).map(f32);
    let m = 0;
    for (let t = 1; t <= 4; t += 1e-4) {
      const y = 1 - Math.exp(horner(c, (t - 2.5) / 1.5));
      const r = 1 - erfc(t);
      m = Math.max(m, Math.abs(y - r));
    }
    console.log('B deg', deg, 'max abs', m.toExponential(3), JSON.stringify(c));
  }
}
// C: tanh(x)/x = P(z), z = x^2 in [0, 0.625^2]
{
  const us = [],
    ys = [],
    ws = [];
  for (let i = 0; i <= N; i++) {
    const x = (Math.cos((Math.PI * i) / N) * 0.5 + 0.5) * 0.625;
    const z = x * x;
    const y = x === 0 ? 1 : Math.tanh(x) / x;
    us.push(z);
    ys.push(y);
    ws.push(1 / (y * y));
  }
  for (const deg of [4, 5, 6]) {
    const c = fit(us, ys, ws, deg).map(f32);
    let m = 0;
    for (let x = 1e-4; x <= 0.625; x += 1e-5) {
      const y = x * horner(c, x * x);
      m = Math.max(m, Math.abs(y - Math.tanh(x)) / Math.tanh(x));
    }
    console.log('C deg', deg, 'max rel', m.toExponential(3), JSON.stringify(c));
  }
}
// D: erfc(t) * t * exp(t^2) = S(w), w = 1/t^2, t in [4, 10.5] (the GELU's far negative tail).
{
  const us = [],
    ys = [],
    ws = [];
  for (let i = 0; i <= N; i++) {
    const t = 4 + 6.5 * (Math.cos((Math.PI * i) / N) * 0.5 + 0.5);
    const w = 1 / (t * t);
    const y = erfcCF(t) * t * Math.exp(t * t);
    us.push(w);
    ys.push(y);
    ws.push(1 / (y * y));
  }
  for (const deg of [3, 4, 5]) {
    const c = fit(us, ys, ws, deg).map(f32);
    let m = 0;
    for (let t = 4; t <= 10.5; t += 1e-4) {
      const y = (horner(c, 1 / (t * t)) / t) * Math.exp(-t * t);
      m = Math.max(m, Math.abs(y - erfcCF(t)) / erfcCF(t));
    }
    console.log('D deg', deg, 'max rel', m.toExponential(3), JSON.stringify(c));
  }
}

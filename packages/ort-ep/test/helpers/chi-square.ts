// Goodness-of-fit for the samplers' tests (sampler.test.ts, sampler-device.test.ts): draws'
// counts against exact probabilities.

/** Pearson's chi-square of counts against probabilities, bins of expected count < 5 pooled. */
export function chiSquare(counts: ArrayLike<number>, p: ArrayLike<number>, n: number): { stat: number; df: number } {
  let stat = 0;
  let df = -1;
  let poolO = 0;
  let poolE = 0;
  for (let i = 0; i < p.length; i++) {
    const e = p[i] * n;
    if (e < 5) {
      poolO += counts[i];
      poolE += e;
      continue;
    }
    stat += (counts[i] - e) ** 2 / e;
    df++;
  }
  if (poolE > 0 || poolO > 0) {
    // A count where the reference expects (almost) nothing makes the statistic large.
    stat += (poolO - poolE) ** 2 / Math.max(poolE, 1e-9);
    df++;
  }
  return { stat, df };
}

/** Chi-square's 0.999 quantile (Wilson-Hilferty). */
export const chi999 = (df: number) => df * (1 - 2 / (9 * df) + 3.09 * Math.sqrt(2 / (9 * df))) ** 3;

import { MlxFftNorm } from '@mlx/sys';

export type FftNorm = 'backward' | 'ortho' | 'forward';
export function fftNormCode(n: FftNorm): number {
  switch (n) {
    case 'backward':
      return MlxFftNorm.BACKWARD;
    case 'ortho':
      return MlxFftNorm.ORTHO;
    case 'forward':
      return MlxFftNorm.FORWARD;
  }
  throw new TypeError(`unknown FFT norm '${String(n)}' (expected backward, ortho or forward)`);
}

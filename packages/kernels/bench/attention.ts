// Benchmark (not a test): time and peak memory of the attention VJP strategies (dense, tiled,
// autodiff) and of the forward (fused vs composite), for b = 1, hq/hk = 8/2.
//
//   node --conditions=source --import tsx bench/attention.ts [--max-seq 1024] [--seqs 256,1024,4096,8192]
//        [--dims 64,128] [--runs 3] [--block-mib 32] [--passes vjp-dense,vjp-tiled,...]
//
// Time is the median of --runs runs after one warm-up run; peak is memory.peak() − memory.active()
// once the inputs exist (inputs not counted, outputs counted), the largest over the runs. Combos
// whose estimated buffers exceed the free memory are skipped, and say why. The tiled strategy's
// workspace is its fixed part (dq, dk, dv and per-row vectors, which grow with sq·d) plus
// --block-mib for its score blocks; each tiled row prints the workspace it ran with.
import { freemem } from 'node:os';
import * as mx from '@mlx/core';
import { AttentionVjpBudget, attentionVjp, scaledDotProductAttention, type AttentionGradients } from '../src/index.js';

function flag(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1] : fallback;
}
const maxSeq = Number(flag('max-seq', '1024'));
const seqs = flag('seqs', '256,1024,4096,8192').split(',').map(Number);
const dims = flag('dims', '64,128').split(',').map(Number);
const runs = Number(flag('runs', '3'));
const blockBytes = Number(flag('block-mib', '32')) * 2 ** 20;
const selected = flag('passes', '').split(',').filter(Boolean);
const [hq, hk] = [8, 2];

const MiB = (bytes: number) => (bytes / 2 ** 20).toFixed(1);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Median milliseconds and the largest peak bytes above the baseline over `runs` runs. */
function measure(run: () => mx.Array | AttentionGradients): { ms: number; peak: number } {
  const once = () => {
    mx.memory.clearCache();
    const baseline = mx.memory.active();
    mx.memory.resetPeak();
    const t0 = performance.now();
    const result = run();
    const arrays = result instanceof mx.Array ? [result] : [result.dq, result.dk, result.dv];
    mx.evaluate(...arrays);
    const ms = performance.now() - t0;
    const peak = mx.memory.peak() - baseline;
    mx.dispose(arrays);
    return { ms, peak };
  };
  once(); // warm-up
  const samples = Array.from({ length: runs }, once);
  return { ms: median(samples.map((s) => s.ms)), peak: Math.max(...samples.map((s) => s.peak)) };
}

console.log(
  `attention benchmark: b=1, hq/hk=${hq}/${hk}, causal, float32, device ${mx.defaultDevice()}, median of ${runs} runs, tiled block room ${MiB(blockBytes)} MiB`,
);
console.log(['seq', 'd', 'pass', 'median ms', 'peak MiB'].map((h, i) => h.padEnd([6, 5, 22, 12, 10][i])).join(''));
for (const s of seqs) {
  for (const d of dims) {
    const row = (pass: string, result: string) => console.log(`${String(s).padEnd(6)}${String(d).padEnd(5)}${pass.padEnd(22)}${result}`);
    if (s > maxSeq) {
      row('(all)', `skipped (sequence length above --max-seq ${maxSeq})`);
      continue;
    }
    mx.scope(() => {
      const q = mx.random.normal([1, hq, s, d], 'float32', 0, 1);
      const k = mx.random.normal([1, hk, s, d], 'float32', 0, 1);
      const v = mx.random.normal([1, hk, s, d], 'float32', 0, 1);
      const gradOut = mx.random.normal([1, hq, s, d], 'float32', 0, 1);
      const out = scaledDotProductAttention(q, k, v, { causal: true, implementation: 'fused' });
      mx.evaluate(q, k, v, gradOut, out);
      const fixed = AttentionVjpBudget.forInputs(1, q, k, v, { causal: true }).tiledFixedBytes;
      const workspaceBytes = fixed + blockBytes;
      const budget = AttentionVjpBudget.forInputs(workspaceBytes, q, k, v, { causal: true });
      const scoreBuffer = 1 * hq * s * s * 4;
      // Estimated peaks: the dense pullback from the budget; autodiff keeps the forward's scores and
      // probabilities besides the backward's; the forward holds about three score buffers.
      const estimates: Record<string, number> = {
        'vjp dense': budget.denseBytes,
        'vjp tiled': workspaceBytes,
        'vjp autodiff': budget.denseBytes + 3 * scoreBuffer,
        'forward fused': 3 * scoreBuffer,
        'forward composite': 3 * scoreBuffer,
      };
      const passes: Record<string, () => mx.Array | AttentionGradients> = {
        'vjp dense': () => attentionVjp({ q, k, v, out, gradOut }, { causal: true }, { strategy: 'dense' }),
        'vjp tiled': () => attentionVjp({ q, k, v, out, gradOut }, { causal: true }, { strategy: 'tiled', workspaceBytes }),
        'vjp autodiff': () => attentionVjp({ q, k, v, out, gradOut }, { causal: true }, { strategy: 'autodiff' }),
        'forward fused': () => scaledDotProductAttention(q, k, v, { causal: true, implementation: 'fused' }),
        'forward composite': () => scaledDotProductAttention(q, k, v, { causal: true, implementation: 'composite' }),
      };
      for (const [pass, run] of Object.entries(passes)) {
        if (selected.length && !selected.includes(pass.replace(' ', '-'))) continue;
        const free = freemem();
        if (estimates[pass] > 0.8 * free) {
          row(pass, `skipped (needs ~${MiB(estimates[pass])} MiB, ${MiB(free)} MiB free)`);
          continue;
        }
        try {
          const { ms, peak } = measure(run);
          const note =
            pass === 'vjp tiled'
              ? `(workspace ${MiB(workspaceBytes)} MiB, blocks ${budget.tiledBlocks().queryBlock}×${budget.tiledBlocks().keyBlock})`
              : '';
          row(pass, `${ms.toFixed(1).padEnd(12)}${MiB(peak).padEnd(10)}${note}`);
        } catch (e) {
          row(pass, `failed (${(e as Error).message})`);
        }
      }
    });
  }
}

// The heap that serves MLX's buffers on Linux's CPU build (native heap.cpp): the values of arrays
// made and freed in any order (a block handed out twice, or a merge of free blocks gone wrong,
// would show as a corrupted array), the huge-page advice seen in /proc/self/smaps, what it reports
// (memory.heap) and what memory.active/peak/cache count, the cache limit and clearCache giving
// its chunks back, and its settings (MLXC_CPU_HEAP, MLXC_HEAP_HUGEPAGES), in child processes where
// exact figures are needed.
import { describe, expect, it } from 'vitest';
import { CORE_INDEX, runScript } from '../test/child.js';
import { SMAPS_HELPER } from '../test/smaps.js';
import * as mx from './index.js';

const MB = 1 << 20;
const serves = process.platform === 'linux' && !mx.gpuAvailable();

/** A deterministic value in [0, 1) for integer `i`: an integer hash's bits (two multiply-xorshift rounds). */
function hash01(i: number): number {
  let h = Math.imul((i >>> 16) ^ i, 0x45d9f3b);
  h = Math.imul((h >>> 16) ^ h, 0x45d9f3b);
  return (((h >>> 16) ^ h) >>> 0) / 4294967296;
}

/** Runs `body` (module code with `mx`, `MB` and `advised()` in scope) in a fresh process; its last line of output, parsed. */
function child(body: string, env: Record<string, string> = {}): Record<string, unknown> {
  const r = runScript(
    `
    import * as mx from ${CORE_INDEX};
    import { advisedBytes as advised } from ${SMAPS_HELPER};
    import { readFileSync } from 'node:fs';
    const MB = 1 << 20;
    const out = {};
    try {
      ${body}
    } catch (e) {
      out.error = e.message;
    }
    console.log(JSON.stringify(out));`,
    env,
  );
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!);
}

describe('the heap of MLX buffers', () => {
  it('keeps every array intact while arrays of any size are made and freed in any order', () => {
    let draw = 0;
    const r = () => hash01(draw++);
    const live = new Map<number, { a: mx.Array; v: number; n: number }>();
    let next = 0;
    const make = () => {
      // Mostly small and middling, now and then past a chunk's quarter (a chunk of its own).
      const u = r();
      const n = u < 0.05 ? 2_300_000 + Math.floor(r() * 500_000) : u < 0.3 ? 1 + Math.floor(r() * 16) : 1 + Math.floor(r() * 200_000);
      const v = (next % 1000) + 0.5;
      live.set(next++, { a: mx.full([n], v).eval(), v, n });
    };
    const check = () => {
      for (const { a, v, n } of live.values()) {
        const [lo, hi] = mx.scope(() => [mx.min(a).item(), mx.max(a).item()]);
        expect([lo, hi, a.size]).toEqual([v, v, n]);
      }
    };
    for (let round = 0; round < 6; round++) {
      for (let i = 0; i < 60; i++) make();
      // Free about half, chosen at random: free blocks between live ones, merged when neighbours.
      for (const [k, e] of [...live]) {
        if (r() < 0.5) {
          e.a.dispose();
          live.delete(k);
        }
      }
      check();
      if (round === 3) mx.memory.clearCache();
    }
    for (const e of live.values()) e.a.dispose();
  });

  it.runIf(serves)('holds MLX’s buffers, counted as active, with the huge-page advice given before they are written', () => {
    const out = child(`
      const before = mx.memory.heap();
      const activeBefore = mx.memory.active();
      const advisedBefore = advised();
      const a = mx.full([(3 * MB) / 4], 1.5).eval();
      out.held = mx.memory.heap();
      out.live = out.held.live - before.live;
      out.active = mx.memory.active() - activeBefore;
      out.advised = advised() - advisedBefore;
      out.cache = mx.memory.cache();
      out.peakOk = mx.memory.peak() >= mx.memory.active();
      a.dispose();
      out.after = mx.memory.heap();
      mx.memory.clearCache();
      out.cleared = mx.memory.heap();
      out.cacheCleared = mx.memory.cache();
    `);
    const held = out.held as { live: number; mapped: number; free: number; huge: number };
    // The array's bytes (its fill value, a scalar, is freed by then).
    expect(out.live).toBe(3 * MB);
    expect(out.active).toBe(3 * MB);
    expect(out.peakOk).toBe(true);
    // One chunk of 32 MiB, advised (the default budget: 32 MiB), its free part in the cache.
    expect(held.mapped).toBe(32 * MB);
    expect(held.huge).toBe(32 * MB);
    expect(out.advised).toBe(32 * MB);
    // Free: what is mapped less the live buffers and their blocks' rounding (64 bytes each).
    expect(held.free).toBeLessThanOrEqual(held.mapped - held.live);
    expect(held.free).toBeGreaterThan(held.mapped - held.live - 64 * 1024);
    // (MLX's own cache holds a buffer or two made before the heap served.)
    const cache = out.cache as number;
    expect(cache - held.free).toBeGreaterThanOrEqual(0);
    expect(cache - held.free).toBeLessThan(1024);
    expect((out.after as { live: number }).live).toBe((out.held as { live: number }).live - 3 * MB);
    // Cleared: every chunk with nothing live is unmapped, and the cache holds none of the heap.
    const cleared = out.cleared as { live: number; mapped: number; free: number };
    expect(cleared.mapped).toBe(cleared.live === 0 ? 0 : 32 * MB);
    expect(out.cacheCleared).toBe(cleared.free);
  });

  it.runIf(serves)('gives idle chunks back beyond the cache limit, keeping one of 32 MiB; a large buffer gets a chunk of its own', () => {
    const out = child(`
      mx.memory.setCacheLimit(0);
      // 48 arrays of 1 MiB: two chunks of 32 MiB.
      const many = Array.from({ length: 48 }, (_, i) => mx.full([MB / 4 - 16], i).eval());
      out.two = mx.memory.heap().mapped;
      for (const a of many) a.dispose();
      out.one = mx.memory.heap().mapped;
      // 40 MiB: more than the idle chunk has, a chunk of its own (2 MiB pages: 40 MiB and one for its header).
      const big = mx.full([(40 * MB) / 4], 2).eval();
      out.big = mx.memory.heap().mapped - out.one;
      out.bigSum = mx.scope(() => mx.sum(big).item());
      big.dispose();
      out.afterBig = mx.memory.heap().mapped;
      mx.memory.clearCache();
      out.cleared = mx.memory.heap().mapped;
    `);
    expect(out.two).toBe(64 * MB);
    expect(out.one).toBe(32 * MB);
    expect(out.big).toBe(42 * MB);
    expect(out.bigSum).toBe(2 * ((40 * MB) / 4));
    expect(out.afterBig).toBe(32 * MB);
    expect(out.cleared).toBe(0);
  });

  it.runIf(serves)('clearCache gives back the free pages of a chunk that still holds a live buffer', () => {
    const out = child(`
      const rss = () => Number(/VmRSS:\\s+(\\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))[1]) * 1024;
      // Two 6 MiB buffers and a small one in the same chunk; the large ones freed, the small one kept.
      const small = mx.full([16], 3).eval();
      const a = mx.full([(6 * MB) / 4], 1).eval();
      const b = mx.full([(6 * MB) / 4], 2).eval();
      out.sum = mx.scope(() => mx.sum(a).item() + mx.sum(b).item());
      a.dispose();
      b.dispose();
      out.before = rss();
      out.heap = mx.memory.heap();
      mx.memory.clearCache();
      out.after = rss();
      out.cleared = mx.memory.heap();
      out.small = mx.scope(() => mx.sum(small).item());
      // The pages come back as zeros for the next buffer, which holds its own values.
      const c = mx.full([(6 * MB) / 4], 5).eval();
      out.c = mx.scope(() => mx.sum(c).item());
    `);
    expect(out.sum).toBe(3 * ((6 * MB) / 4));
    // The chunk stays (a live buffer is in it), its free pages do not.
    expect((out.cleared as { mapped: number }).mapped).toBe((out.heap as { mapped: number }).mapped);
    expect((out.before as number) - (out.after as number)).toBeGreaterThanOrEqual(10 * MB);
    expect(out.small).toBe(48);
    expect(out.c).toBe(5 * ((6 * MB) / 4));
  });

  it.runIf(serves)(
    'MLXC_HEAP_HUGEPAGES sets the advised budget in MiB, 0 none, a bad value a clear error; MLXC_CPU_HEAP=0 turns it off',
    () => {
      const body = `
      const a = mx.full([MB], 1).eval();
      const b = mx.full([(40 * MB) / 4], 1).eval();
      out.heap = mx.memory.heap();
      out.sum = mx.sum(a).item() + mx.sum(b).item();
    `;
      const want = MB + 10 * MB;
      const budget = child(body, { MLXC_HEAP_HUGEPAGES: '40' });
      // The first chunk (32 MiB) within 40 MiB, the 40 MiB array's own chunk past it.
      expect(budget.sum).toBe(want);
      expect(budget.heap).toMatchObject({ mapped: 32 * MB + 42 * MB, huge: 32 * MB });
      expect(child(body, { MLXC_HEAP_HUGEPAGES: '0' }).heap).toMatchObject({ huge: 0 });
      expect(child(body, { MLXC_HEAP_HUGEPAGES: 'lots' }).error).toMatch(
        /MLXC_HEAP_HUGEPAGES=lots: expected a budget in MiB \(0: no huge pages\)/,
      );
      const off = child(body, { MLXC_CPU_HEAP: '0' });
      expect(off.sum).toBe(want);
      expect(off.heap).toEqual({ live: 0, mapped: 0, free: 0, huge: 0 });
    },
  );
});

// The packed-weight product on the widest build this CPU has; the cases are in test/dense-gemm-cases.ts.
import { describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { denseGemmSuite } from '../test/dense-gemm-cases.js';

denseGemmSuite('widest');

describe('transposeHost (host memory)', () => {
  it('transposes 4- and 2-byte elements, from a view at an offset, over tile edges', () => {
    for (const [k, n] of [
      [1, 1],
      [1, 70],
      [33, 1],
      [65, 97],
      [300, 40],
    ]) {
      const backing = Float32Array.from({ length: k * n + 5 }, (_, i) => Math.sin(i * 0.37) * 10);
      const w = backing.subarray(3, 3 + k * n);
      const got = mx.transposeHost(w, k, n);
      expect(got).toBeInstanceOf(Float32Array);
      expect(got.length).toBe(k * n);
      for (let r = 0; r < k; r++) for (let c = 0; c < n; c++) expect(got[c * k + r], `${k}x${n} [${r}, ${c}]`).toBe(w[r * n + c]);
      const h = Uint16Array.from({ length: k * n }, (_, i) => (i * 7919) & 0xffff);
      const ht = mx.transposeHost(h, k, n);
      expect(ht).toBeInstanceOf(Uint16Array);
      for (let r = 0; r < k; r++) for (let c = 0; c < n; c++) expect(ht[c * k + r]).toBe(h[r * n + c]);
    }
  });

  it('refuses sizes the data does not hold and other element types', () => {
    expect(() => mx.transposeHost(new Float32Array(5), 2, 3)).toThrow(/holds 5 elements, fewer than k \* n = 6/);
    expect(() => mx.transposeHost(new Uint16Array(5), 0, 3)).toThrow(/integers of at least 1/);
    expect(() => mx.transposeHost(new Int32Array(6) as never, 2, 3)).toThrow(/Float32Array or a Uint16Array/);
  });
});

describe('packDensePanels (host memory)', () => {
  it('packs as densePackWeight does, from a view at an offset, with zeros past n', () => {
    for (const [k, n] of [
      [1, 1],
      [3, 40],
      [70, 64],
      [257, 97],
    ]) {
      const backing = Float32Array.from({ length: k * n + 5 }, (_, i) => Math.sin(i * 0.37) * 10);
      const w = backing.subarray(3, 3 + k * n);
      const got = mx.packDensePanels(w, k, n);
      const panels = Math.ceil(n / 32);
      expect(got.length).toBe(panels * k * 32);
      // The layout written out independently: panel q, row i, lane j holds w[i, q * 32 + j], at
      // [q][i][j], or [q][j / 16][i][j % 16] where the AVX2 build splits the panels' halves.
      const split = mx.cpuKernelsUseAvx2() && !mx.cpuKernelsUseAvx512();
      for (let q = 0; q < panels; q++)
        for (let i = 0; i < k; i++)
          for (let j = 0; j < 32; j++) {
            const col = q * 32 + j;
            const at = split ? q * k * 32 + Math.floor(j / 16) * k * 16 + i * 16 + (j % 16) : (q * k + i) * 32 + j;
            expect(got[at], `${k}x${n} panel ${q} row ${i} lane ${j}`).toBe(col < n ? w[i * n + col] : 0);
          }
      const viaMlx = mx.ext.densePackWeight(mx.array(w, { shape: [k, n] }), { stream: 'cpu' });
      expect(Array.from(viaMlx.toTypedArray() as Float32Array)).toEqual(Array.from(got));
      viaMlx.dispose();
    }
  });

  it('packs little-endian bytes at any offset as it packs the floats they hold', () => {
    // 300 x 1000: the panels pass 1 MiB, so the library populates their pages first.
    for (const [k, n] of [
      [3, 40],
      [300, 1000],
    ]) {
      const w = Float32Array.from({ length: k * n }, (_, i) => Math.cos(i * 0.11) * 5);
      const want = mx.packDensePanels(w, k, n);
      for (const offset of [1, 2, 3]) {
        const file = new Uint8Array(offset + w.byteLength + 7);
        file.set(new Uint8Array(w.buffer), offset);
        const got = mx.packDensePanels(file.subarray(offset, offset + w.byteLength), k, n);
        expect(got.length, `${k}x${n} at byte ${offset}`).toBe(want.length);
        expect(Buffer.from(got.buffer).equals(Buffer.from(want.buffer)), `${k}x${n} at byte ${offset}`).toBe(true);
      }
    }
    expect(() => mx.packDensePanels(new Uint8Array(23), 2, 3)).toThrow(/holds 5 floats, fewer than k \* n = 6/);
  });

  it('refuses sizes the data does not hold', () => {
    expect(() => mx.packDensePanels(new Float32Array(5), 2, 3)).toThrow(/holds 5 floats, fewer than k \* n = 6/);
    expect(() => mx.packDensePanels(new Float32Array(5), 0, 3)).toThrow(/integers of at least 1/);
    expect(() => mx.packDensePanels([1, 2] as never, 1, 2)).toThrow(/Float32Array/);
  });
});

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

describe('convPackHost (host memory)', () => {
  it('packs [o, c, ...kernel] into panels of 32 channels per group, from floats or bytes at any offset', () => {
    const split = mx.cpuKernelsUseAvx2() && !mx.cpuKernelsUseAvx512();
    for (const [o, c, s, group] of [
      [3, 2, 1, 1],
      [70, 5, 9, 1],
      [140, 3, 4, 2],
      [64, 1, 9, 4],
    ]) {
      const w = Float32Array.from({ length: o * c * s }, (_, i) => Math.sin(i * 0.71) * 3);
      const got = mx.convPackHost(w, o, c, s, group);
      const og = o / group;
      const per = Math.ceil(og / 32);
      const depth = s * c;
      expect(got.length, `${o}x${c}x${s}/${group}`).toBe(group * per * depth * 32);
      // The layout written out from its definition: group g's panel q, tap t, channel ci, lane j holds
      // w[g * og + q * 32 + j, ci, t] at [(g * per + q)][t][ci][j], or with halves apart
      // [(g * per + q)][j / 16][t][ci][j % 16]; zeros past the group's channels.
      const want = new Float32Array(got.length);
      for (let g = 0; g < group; g++)
        for (let q = 0; q < per; q++)
          for (let t = 0; t < s; t++)
            for (let ci = 0; ci < c; ci++)
              for (let j = 0; j < 32; j++) {
                const oj = q * 32 + j;
                const panel = (g * per + q) * depth * 32;
                const at = split ? panel + Math.floor(j / 16) * depth * 16 + (t * c + ci) * 16 + (j % 16) : panel + (t * c + ci) * 32 + j;
                want[at] = oj < og ? w[((g * og + oj) * c + ci) * s + t] : 0;
              }
      expect(Buffer.from(got.buffer).equals(Buffer.from(want.buffer)), `${o}x${c}x${s}/${group}`).toBe(true);
      for (const offset of [1, 3]) {
        const file = new Uint8Array(offset + w.byteLength);
        file.set(new Uint8Array(w.buffer), offset);
        const fromBytes = mx.convPackHost(file.subarray(offset), o, c, s, group);
        expect(Buffer.from(fromBytes.buffer).equals(Buffer.from(want.buffer)), `bytes at ${offset}`).toBe(true);
      }
    }
  });

  it('refuses sizes the data does not hold and groups that do not divide the channels', () => {
    expect(() => mx.convPackHost(new Float32Array(5), 2, 3, 1, 1)).toThrow(/holds 5 floats, fewer than o \* c \* s = 6/);
    expect(() => mx.convPackHost(new Float32Array(9), 3, 3, 1, 2)).toThrow(/3 output channels do not split into 2 groups/);
    expect(() => mx.convPackHost(new Float32Array(9), 3, 3, 0, 1)).toThrow(/s must be an integer of at least 1/);
    expect(() => mx.convPackHost([1] as never, 1, 1, 1, 1)).toThrow(/Float32Array/);
  });
});

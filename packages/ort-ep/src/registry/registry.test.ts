// The registry itself: opset ranges (lookup, overlaps, the sentence for a miss), families, and
// the entries it refuses to hold.
import { describe, expect, it } from 'vitest';
import { OpRegistry } from './registry.js';
import { msOp, onnxOp } from './op.js';
import { defaultRegistry, opFamilies } from '../ops/index.js';

const run = () => [];

describe('OpRegistry', () => {
  it('finds the entry whose opset range holds the opset, the newest first', () => {
    const old = { ...onnxOp('Foo', 1, { run }), until: 6 };
    const mid = { ...onnxOp('Foo', 7, { run }), until: 12 };
    const now = onnxOp('Foo', 13, { run });
    const r = new OpRegistry().add(now, old, mid);
    expect(r.lookup('ai.onnx', 'Foo', 1)?.since).toBe(1);
    expect(r.lookup('ai.onnx', 'Foo', 6)?.since).toBe(1);
    expect(r.lookup('ai.onnx', 'Foo', 7)).toBe(mid);
    expect(r.lookup('ai.onnx', 'Foo', 12)).toBe(mid);
    expect(r.lookup('ai.onnx', 'Foo', 21)).toBe(now);
    expect(r.lookup('com.microsoft', 'Foo', 21)).toBeUndefined();
  });

  it('refuses overlapping ranges of one op, and allows the same op in another domain', () => {
    const r = new OpRegistry().add({ ...onnxOp('Foo', 1, { run }), until: 10 });
    expect(() => r.add(onnxOp('Foo', 10, { run }))).toThrow('registry: ai.onnx::Foo opset ranges overlap (10.. and 1..10)');
    expect(() => r.add(onnxOp('Foo', 11, { run }), msOp('Foo', 1, { run }))).not.toThrow();
  });

  it('explains a miss: an unknown op, or a known op at an opset it does not cover', () => {
    const r = new OpRegistry().add({ ...onnxOp('Foo', 7, { run }), until: 12 }, onnxOp('Foo', 18, { run }));
    expect(r.explainMissing('ai.onnx', 'Bar', 13)).toBe('no implementation of Bar in domain ai.onnx');
    expect(r.explainMissing('ai.onnx', 'Foo', 13)).toBe('Foo is implemented for opsets 7-12, 18+, not 13');
    expect(r.lookup('ai.onnx', 'Foo', 6)).toBeUndefined();
  });

  it('refuses entries that could never run', () => {
    expect(() => new OpRegistry().add({ domain: 'ai.onnx', opType: 'Nothing', since: 1 })).toThrow('has neither run() nor host()');
    expect(() => new OpRegistry().add(onnxOp('HostLess', 1, { placement: 'host', run }))).toThrow('placed on the host but has no host()');
  });

  it('records the family of every entry of the default table', () => {
    const entries = defaultRegistry.entries();
    expect(entries.length).toBe(Object.values(opFamilies).flat().length);
    for (const e of entries) expect([e.opType, defaultRegistry.familyOf(e)]).toEqual([e.opType, expect.any(String)]);
    expect(defaultRegistry.familyOf(defaultRegistry.lookup('ai.onnx', 'Resize', 19)!)).toBe('resize');
    expect(defaultRegistry.familyOf(defaultRegistry.lookup('com.microsoft', 'MatMulNBits', 1)!)).toBe('com.microsoft/nbits');
    expect(defaultRegistry.familyOf(defaultRegistry.lookup('ai.onnx.ml', 'TreeEnsemble', 5)!)).toBe('ai.onnx.ml/tree-ensemble');
  });
});

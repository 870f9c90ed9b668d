// ConstantStore.reshaped: a constant's upload in another shape, made once per session and freed
// with the store; the constant's own upload is made only when something reads it as it is.
import { describe, expect, it } from 'vitest';
import { OnnxDataType, type HostTensor } from '../onnx/index.js';
import { ConstantStore, RunUploads } from './uploads.js';
import { transferStats } from './convert.js';

describe('ConstantStore.reshaped', () => {
  it('one upload per constant and shape, the values in row order, freed on release', () => {
    const store = new ConstantStore();
    const t: HostTensor = { dtype: OnnxDataType.FLOAT, dims: [3, 2, 1, 1], data: Float32Array.from([1, 2, 3, 4, 5, 6]) };
    store.add(t);
    const runs = [new RunUploads(store), new RunUploads(store)];
    const before = transferStats().uploads;
    const a = runs[0].reshapedConstant(t, [3, 2])!;
    expect(runs[1].reshapedConstant(t, [3, 2])).toBe(a);
    expect(transferStats().uploads - before).toBe(1);
    expect(a.shape).toEqual([3, 2]);
    expect(Array.from(a.toTypedArray() as Float32Array)).toEqual([1, 2, 3, 4, 5, 6]);
    const col = runs[0].reshapedConstant(t, [6, 1])!;
    expect(col).not.toBe(a);
    expect(col.shape).toEqual([6, 1]);
    // A tensor the store was not told is constant gets no session-long upload.
    expect(runs[0].reshapedConstant({ ...t }, [3, 2])).toBeUndefined();
    store.release();
    expect(a.disposed && col.disposed).toBe(true);
  });
});

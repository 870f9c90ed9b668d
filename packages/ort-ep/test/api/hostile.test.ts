// Hostile feeds and models: every case gives a clear error (or the spec's result) and leaves the
// session and the process working. Index checks run on the device (OpContext.guard), so these
// also hold for traced runs (the third run of each signature replays a trace).
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MlxSession, NodeExecutionError, type HostTensor } from '../../src/index.js';
import { model, node, v, type ModelSpec } from '../helpers/build.js';
import { sharedPath } from '../helpers/shared.js';
import { readTestCase } from '../../src/onnx/index.js';

const f32 = (data: number[], dims: number[]): HostTensor => ({ dtype: 1, dims, data: Float32Array.from(data) });
const i64 = (data: (number | bigint)[], dims: number[]): HostTensor => ({ dtype: 7, dims, data: BigInt64Array.from(data.map(BigInt)) });

/** Runs each feed set three times on both paths; returns the error of each run (or 'ok'). */
async function outcomes(spec: ModelSpec, feeds: Record<string, HostTensor>, compiled: boolean): Promise<string[]> {
  const s = await MlxSession.create(model(spec), { device: 'cpu', compiled });
  const out: string[] = [];
  try {
    for (let r = 0; r < 3; r++) {
      out.push(await s.run(feeds).then(() => 'ok', (e: Error) => `${e.constructor.name}: ${e.message}`));
    }
  } finally {
    s.release();
  }
  return out;
}

describe('out-of-range indices are errors naming the node and the index', () => {
  const gpt2 = sharedPath('models/gpt2-tiny');

  it('a token id outside the vocabulary of gpt2-tiny (512 rows), on both paths', async () => {
    const tc = readTestCase(gpt2);
    const [ids, mask] = tc.datasets[0].inputs as HostTensor[];
    for (const compiled of [true, false]) {
      const s = await MlxSession.create(join(gpt2, 'model.onnx'), { device: 'cpu', compiled });
      try {
        for (const bad of [512n, 100000n, -513n, 2n ** 40n]) {
          const data = BigInt64Array.from(ids.data as BigInt64Array);
          data[1] = bad;
          for (let r = 0; r < 3; r++) {
            const e = await s.run({ input_ids: { ...ids, data }, attention_mask: mask }).then(() => undefined, (err: Error) => err);
            expect(e).toBeInstanceOf(NodeExecutionError);
            expect(e!.message).toMatch(new RegExp(`node '[^']+' \\(Gather\\): Gather along axis 0 of size 512: index ${bad} is out of range \\[-512, 511\\]`));
          }
        }
        // Still a working session, with the reference's values.
        const good = await s.run({ input_ids: ids, attention_mask: mask });
        expect((good[s.outputNames[0]] as HostTensor).dims).toEqual((tc.datasets[0].outputs[0] as HostTensor).dims);
      } finally {
        s.release();
      }
    }
  }, 60_000);

  const data = f32([1, 2, 3, 4, 5, 6], [2, 3]);
  const cases: [string, ModelSpec, Record<string, HostTensor>, RegExp][] = [
    ['Gather', {
      inputs: [v('x', 'float32', [2, 3]), v('i', 'int64', [2])], outputs: [v('y', 'float32')],
      nodes: [node('Gather', ['x', 'i'], ['y'], { name: 'g', attrs: { axis: 1 } })],
    }, { x: data, i: i64([0, 3], [2]) }, /node 'g' \(Gather\): Gather along axis 1 of size 3: index 3 is out of range \[-3, 2\]/],
    ['GatherElements', {
      inputs: [v('x', 'float32', [2, 3]), v('i', 'int64', [2, 1])], outputs: [v('y', 'float32')],
      nodes: [node('GatherElements', ['x', 'i'], ['y'], { name: 'ge', attrs: { axis: 1 } })],
    }, { x: data, i: i64([-4, 0], [2, 1]) }, /node 'ge' \(GatherElements\): GatherElements along axis 1 of size 3: index -4 is out of range \[-3, 2\]/],
    ['GatherND', {
      inputs: [v('x', 'float32', [2, 3]), v('i', 'int64', [1, 2])], outputs: [v('y', 'float32')],
      nodes: [node('GatherND', ['x', 'i'], ['y'], { name: 'gnd' })],
    }, { x: data, i: i64([2, 0], [1, 2]) }, /node 'gnd' \(GatherND\): GatherND into data of shape \[2, 3\]: index 2 is out of range/],
    ['ScatterElements', {
      inputs: [v('x', 'float32', [2, 3]), v('i', 'int64', [1, 2]), v('u', 'float32', [1, 2])], outputs: [v('y', 'float32')],
      nodes: [node('ScatterElements', ['x', 'i', 'u'], ['y'], { name: 'se', attrs: { axis: 1 } })],
    }, { x: data, i: i64([1, 1000000], [1, 2]), u: f32([9, 9], [1, 2]) }, /node 'se' \(ScatterElements\): ScatterElements along axis 1 of size 3: index 1000000 is out of range \[-3, 2\]/],
    ['ScatterND', {
      inputs: [v('x', 'float32', [2, 3]), v('i', 'int64', [1, 2]), v('u', 'float32', [1])], outputs: [v('y', 'float32')],
      nodes: [node('ScatterND', ['x', 'i', 'u'], ['y'], { name: 'snd' })],
    }, { x: data, i: i64([0, -7], [1, 2]), u: f32([9], [1]) }, /node 'snd' \(ScatterND\): ScatterND into data of shape \[2, 3\]: index -7 is out of range/],
  ];
  for (const [op, spec, feeds, message] of cases) {
    it(`${op}: every run, both paths`, async () => {
      for (const compiled of [true, false]) {
        const got = await outcomes({ opsets: { '': 18 }, ...spec }, feeds, compiled);
        for (const g of got) expect(g).toMatch(message);
        expect(got[0]).toMatch(/^NodeExecutionError/);
      }
    });
  }
});

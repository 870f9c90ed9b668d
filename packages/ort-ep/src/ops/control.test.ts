// Loop against onnxruntime-node when the condition stops it before the first iteration: its scan
// outputs are empty, of the body's declared per-iteration shape after the 0 (where it is static)
// and of the declared element type.
import { describe, expect, it } from 'vitest';
import { model, node, v, type DimSpec } from '../../test/helpers/build.js';
import { bool, f32, i64, runOn } from '../../test/helpers/ort.js';

function loop(scanShape: DimSpec[] | undefined) {
  return model({
    opsets: { '': 21 },
    inputs: [v('n', 'int64', []), v('c', 'bool', []), v('y', 'float32', [1])],
    outputs: [v('res_y', 'float32'), v('res_f', 'float32'), v('res_i', 'int64')],
    nodes: [
      node('Loop', ['n', 'c', 'y'], ['res_y', 'res_f', 'res_i'], {
        attrs: {
          body: {
            g: {
              name: 'body',
              inputs: [v('i', 'int64', []), v('cin', 'bool', []), v('yin', 'float32', [1])],
              outputs: [v('cout', 'bool', []), v('yout', 'float32', [1]), v('sf', 'float32', scanShape), v('si', 'int64', [2, 3])],
              nodes: [
                node('Identity', ['cin'], ['cout']),
                node('Neg', ['yin'], ['yout']),
                node('Identity', ['yin'], ['sf']),
                node('Constant', [], ['shape'], { attrs: { value_ints: [2, 3] } }),
                node('Expand', ['i', 'shape'], ['si']),
              ],
            },
          },
        },
      }),
    ],
  });
}

describe('Loop stopped before its first iteration', () => {
  // (onnxruntime also infers a shape the body does not declare; mlx knows declared shapes only.)
  for (const shape of [[1]] as DimSpec[][])
    it(`scan outputs declared ${JSON.stringify(shape)}`, async () => {
      const bytes = loop(shape);
      for (const c of [0, 1]) {
        const feeds = { n: i64([3], []), c: bool([c], []), y: f32([-2], [1]) };
        const want = await runOn('cpu', bytes, feeds);
        const have = await runOn('mlx', bytes, feeds);
        for (const name of ['res_y', 'res_f', 'res_i']) {
          expect(have[name].type).toBe(want[name].type);
          expect(have[name].dims).toEqual(want[name].dims);
          expect(Array.from(have[name].data as ArrayLike<number>, Number)).toEqual(
            Array.from(want[name].data as ArrayLike<number>, Number),
          );
        }
      }
    });
});

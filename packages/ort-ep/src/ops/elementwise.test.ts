// Integer Div and Mod with negative operands on MLX, against values computed here from the
// spec's rules rather than from another runtime: Div truncates toward zero (C division, where
// MLX's floor_divide floors), Mod with fmod=0 takes the divisor's sign and with fmod=1 the
// dividend's (C fmod). A no-op Clip in front of each operand makes it a device value, so the
// nodes run their MLX translation, not the host twin that folds small shape math.
import { describe, expect, it } from 'vitest';
import { model, node, v, type ElemName } from '../../test/helpers/build.js';
import { ort, plain, runOn, type Feeds } from '../../test/helpers/ort.js';

// Every sign combination, exact multiples and |a| < |b| included.
const as: number[] = [];
const bs: number[] = [];
for (const a of [-9, -7, -6, -5, -1, 0, 1, 5, 6, 7, 9]) {
  for (const b of [-4, -3, -1, 1, 3, 4]) {
    as.push(a);
    bs.push(b);
  }
}

const cDivide = (a: number, b: number) => Math.trunc(a / b);
/** fmod=0: the remainder has the divisor's sign (Python's %). */
const divisorSignMod = (a: number, b: number) => a - b * Math.floor(a / b);
/** fmod=1: the remainder has the dividend's sign (C's fmod, which JavaScript's % is). */
const dividendSignMod = (a: number, b: number) => a % b;

const typed = (type: ElemName, xs: number[]) =>
  type === 'int64'
    ? new ort.Tensor('int64', BigInt64Array.from(xs, BigInt), [xs.length])
    : type === 'int32'
      ? new ort.Tensor('int32', Int32Array.from(xs), [xs.length])
      : new ort.Tensor('float32', Float32Array.from(xs), [xs.length]);

/** Runs `op` on a and b moved to the device, on the mlx provider. */
async function onDevice(op: string, type: ElemName, attrs: Record<string, number> = {}): Promise<number[]> {
  const bytes = model({
    opsets: { '': 18 },
    inputs: [v('a', type, [as.length]), v('b', type, [bs.length])],
    outputs: [v('y', type, [as.length])],
    nodes: [node('Clip', ['a'], ['a_dev']), node('Clip', ['b'], ['b_dev']), node(op, ['a_dev', 'b_dev'], ['y'], { attrs })],
  });
  const feeds: Feeds = { a: typed(type, as), b: typed(type, bs) };
  return plain((await runOn('mlx', bytes, feeds)).y);
}

const expected = (f: (a: number, b: number) => number) => as.map((a, i) => f(a, bs[i]) + 0); // + 0: -0 as 0

describe('integer Div and Mod with negative operands on MLX', () => {
  for (const type of ['int32', 'int64'] as const) {
    it(`Div of ${type} truncates toward zero`, async () => {
      expect(await onDevice('Div', type)).toEqual(expected(cDivide));
    });
    it(`Mod of ${type}, fmod=0, takes the divisor's sign`, async () => {
      expect(await onDevice('Mod', type)).toEqual(expected(divisorSignMod));
    });
    it(`Mod of ${type}, fmod=1, takes the dividend's sign`, async () => {
      expect(await onDevice('Mod', type, { fmod: 1 })).toEqual(expected(dividendSignMod));
    });
  }
  it("Mod of float32, fmod=1, takes the dividend's sign", async () => {
    expect((await onDevice('Mod', 'float32', { fmod: 1 })).map((x) => x + 0)).toEqual(expected(dividendSignMod));
  });
});

describe('integer Pow as onnxruntime computes it (double, converted back)', () => {
  // Results out of range (and 0 to a negative power) are the lowest value; in range they are exact.
  // (int64 results past 2^53 round in onnxruntime's double: not compared.)
  const cases: [ElemName, ElemName, (number | bigint)[], (number | bigint)[]][] = [
    ['int32', 'int32', [2 ** 31 - 1, 2, 3, 3, -3, 2, -2, 7, 0, 46341, -1, -1, 1], [2, 5, 6, 20, 21, 31, 31, -1, -1, 2, -3, -2, -5]],
    [
      'int64',
      'int64',
      [2n ** 63n - 1n, 2n, 3n, -3n, 2n, -2n, 7n, 0n, -1n, 1n, 46341n],
      [4n, 5n, 33n, 33n, 63n, 63n, -1n, -1n, -3n, -5n, 2n],
    ],
    ['int64', 'int32', [2n, 3n, 7n, 0n], [63, 33, 2, -2]],
  ];
  for (const [ta, tb, a, b] of cases) {
    it(`${ta} to ${tb} powers`, async () => {
      const t = (type: ElemName, xs: (number | bigint)[]) =>
        type === 'int64'
          ? new ort.Tensor(
              'int64',
              BigInt64Array.from(xs, (x) => BigInt(x)),
              [xs.length],
            )
          : new ort.Tensor('int32', Int32Array.from(xs, Number), [xs.length]);
      const bytes = model({
        opsets: { '': 15 },
        inputs: [v('a', ta, [a.length]), v('b', tb, [b.length])],
        outputs: [v('y', ta, [a.length])],
        nodes: [node('Pow', ['a', 'b'], ['y'])],
      });
      const feeds: Feeds = { a: t(ta, a), b: t(tb, b) };
      const want = Array.from((await runOn('cpu', bytes, feeds)).y.data as ArrayLike<number | bigint>, String);
      const have = Array.from((await runOn('mlx', bytes, feeds)).y.data as ArrayLike<number | bigint>, String);
      expect(have).toEqual(want);
    });
  }
});

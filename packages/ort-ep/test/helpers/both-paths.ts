// Runs one op both ways (host() paths on small host tensors, run() paths after a no-op Clip moves
// the data to MLX) and compares each with onnxruntime-node's CPU provider: shared by the op tests.
import { model, node, v, type AttrSpec, type ElemName } from './build.js';
import { expectSameAsOrt, ort, seeded, type Feeds } from './ort.js';

export interface In {
  name: string;
  type: ElemName;
  dims: number[];
  data: (number | bigint)[];
  /** A shape-like argument: stays a host tensor in the device variant. */
  arg?: boolean;
}

export const typed = (type: ElemName, data: (number | bigint)[]) => {
  const n = data.map(Number);
  switch (type) {
    case 'int64':
      return BigInt64Array.from(data.map((x) => (typeof x === 'bigint' ? x : BigInt(x))));
    case 'uint64':
      return BigUint64Array.from(data.map((x) => (typeof x === 'bigint' ? x : BigInt(x))));
    case 'int32':
      return Int32Array.from(n);
    case 'uint8':
    case 'bool':
      return Uint8Array.from(n);
    case 'int8':
      return Int8Array.from(n);
    case 'float64':
      return Float64Array.from(n);
    default:
      return Float32Array.from(n);
  }
};

export const f = (name: string, dims: number[], seed = 1): In => ({
  name,
  type: 'float32',
  dims,
  data: seeded(
    dims.reduce((a, b) => a * b, 1),
    seed,
  ),
});
export const ints = (name: string, data: (number | bigint)[], dims = [data.length]): In => ({ name, type: 'int64', dims, data, arg: true });

export interface Case {
  opset?: number;
  attrs?: Record<string, AttrSpec>;
  /** Output element types (default: the first input's), one per output. */
  out?: ElemName[];
  tol?: { rtol: number; atol: number };
}

/** Runs `op` on `ins` ('' entries are omitted optional inputs) both ways and compares with onnxruntime. */
export async function same(op: string, ins: (In | '')[], c: Case = {}): Promise<void> {
  const present = ins.filter((i): i is In => i !== '');
  const outTypes = c.out ?? [present[0].type];
  // Clip before opset 6 has no onnxruntime kernel: old-opset cases run the host variant only.
  for (const device of (c.opset ?? 18) >= 6 ? [false, true] : [false]) {
    // Clip takes integers from opset 12 on; before, only floats are moved.
    const moved = (i: In) => device && !i.arg && i.type !== 'bool' && ((c.opset ?? 18) >= 12 || i.type.startsWith('float'));
    const nodes = present.filter(moved).map((i) => node('Clip', [i.name], [`${i.name}_dev`]));
    const outs = outTypes.map((_, k) => `y${k}`);
    nodes.push(
      node(
        op,
        ins.map((i) => (i === '' ? '' : moved(i) ? `${i.name}_dev` : i.name)),
        outs,
        { attrs: c.attrs },
      ),
    );
    const bytes = model({
      opsets: { '': c.opset ?? 18 },
      inputs: present.map((i) => v(i.name, i.type, i.dims)),
      outputs: outs.map((o, k) => v(o, outTypes[k])),
      nodes,
    });
    const feeds: Feeds = {};
    for (const i of present) feeds[i.name] = new ort.Tensor(i.type as 'float32', typed(i.type, i.data) as Float32Array, i.dims);
    await expectSameAsOrt(bytes, feeds, c.tol);
  }
}

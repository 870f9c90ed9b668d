// One node with named tensor inputs ('' for an omitted optional input), run on the 'mlx' provider
// and on onnxruntime-node's CPU provider, outputs compared: shared by the op tests.
import { model, node, v, type AttrSpec, type ElemName } from './build.js';
import { expectSameAsOrt, type Feeds, type OrtTensor } from './ort.js';

export interface NodeInput {
  name: string;
  type: ElemName;
  dims: number[];
  tensor: OrtTensor;
}

export async function expectNodeSameAsOrt(
  op: string,
  opset: number,
  ins: (NodeInput | '')[],
  attrs: Record<string, AttrSpec>,
  outType: ElemName,
  tol: { rtol: number; atol: number },
): Promise<void> {
  const real = ins.filter((i): i is NodeInput => i !== '');
  const bytes = model({
    opsets: { '': opset },
    inputs: real.map((i) => v(i.name, i.type, i.dims)),
    outputs: [v('y', outType)],
    nodes: [
      node(
        op,
        ins.map((i) => (i === '' ? '' : i.name)),
        ['y'],
        { attrs },
      ),
    ],
  });
  const feeds: Feeds = {};
  for (const i of real) feeds[i.name] = i.tensor;
  await expectSameAsOrt(bytes, feeds, tol);
}

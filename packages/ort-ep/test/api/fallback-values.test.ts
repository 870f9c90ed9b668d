// Sequence and optional values at a fallback boundary, and omitted optional inputs and outputs of
// fallback nodes. onnxruntime's JavaScript API carries tensors only: inside the graph such values
// stay in one partition (the MLX node at the other end joins the fallback); a graph input or
// output of such a type crosses in tensor form. Every result is compared with onnxruntime-node.
import { describe, expect, it } from 'vitest';
import type { HostTensor } from '../../src/onnx/index.js';
import { prepareModel } from '../../src/plan/prepare.js';
import { findPartitions, summarizePartitions } from '../../src/plan/partition.js';
import { MlxSession } from '../../src/session.js';
import { tensorToHost } from '../../src/internal.js';
import type { Value } from '../../src/runtime/value.js';
import { compareTensor } from '../conformance/compare.js';
import { create } from '@bufbuild/protobuf';
import { AttributeProto_AttributeType, AttributeProtoSchema } from 'onnx-buf';
import { ELEM, model as modelBytes, modelProto, node, proto, serialize, v, type ModelSpec } from '../helpers/build.js';
import { expectSameOutputs, f32, i64, ort, runOn, seeded, type Feeds, type OrtTensor } from '../helpers/ort.js';

process.env.MLX_ORT_FUSION = '0';
const cpu = { fallback: 'cpu', device: 'cpu' } as const;

/** A model whose declared types may be sequences or optionals: `types` replaces value infos by name. */
function build(spec: ModelSpec, types: Record<string, ReturnType<typeof proto.tensorType>> = {}): Uint8Array {
  const m = modelProto(spec);
  const g = m.graph!;
  for (const list of [g.input, g.output])
    list.forEach((vi, k) => {
      if (types[vi.name]) list[k] = proto.valueInfo(vi.name, types[vi.name]);
    });
  return serialize(m);
}
const seqOf = (elem: number) => proto.sequenceType(proto.tensorType(elem));
const optOf = (elem: number) => proto.optionalType(proto.tensorType(elem));

async function viaOrtApi(bytes: Uint8Array, feeds: Feeds, disabledOps: string[], compiled: boolean): Promise<Record<string, OrtTensor>[]> {
  const s = await ort.InferenceSession.create(bytes, {
    executionProviders: [{ name: 'mlx', ...cpu, compiled, disabledOps } as never],
  });
  try {
    const out: Record<string, OrtTensor>[] = [];
    for (let r = 0; r < (compiled ? 3 : 1); r++) out.push(await s.run(feeds));
    return out;
  } finally {
    await s.release();
  }
}

/** Through the public API, compiled (3 runs) and eager, against onnxruntime-node running the whole model. */
async function expectSame(bytes: Uint8Array, feeds: Feeds, disabledOps: string[]): Promise<void> {
  const want = await runOn('cpu', bytes, feeds);
  for (const compiled of [true, false])
    for (const have of await viaOrtApi(bytes, feeds, disabledOps, compiled)) expectSameOutputs(have, want);
}

const partitions = (bytes: Uint8Array, disabledOps: string[]) =>
  findPartitions(prepareModel(bytes, { disabledOps }).plan).map((p) => `${p.kind}:${p.nodes.length}`);

const x23 = () => f32(seeded(6, 3), [2, 3]);
const host = (t: OrtTensor) => tensorToHost('t', t);
const expectClose = (have: HostTensor, want: OrtTensor) =>
  expect(compareTensor(have, host(want), { rtol: 1e-6, atol: 1e-7 })).toMatchObject({ ok: true });

describe('a sequence or optional between an MLX and a fallback node stays in one partition', () => {
  const split = build({
    opsets: { '': 17 },
    inputs: [v('x', 'float32', [2, 3])],
    outputs: [v('y', 'float32')],
    nodes: [
      node('Relu', ['x'], ['r']),
      node('SplitToSequence', ['r'], ['s'], { attrs: { axis: 1 } }),
      node('ConcatFromSequence', ['s'], ['c'], { attrs: { axis: 0 } }),
      node('Neg', ['c'], ['y']),
    ],
  });

  it('a sequence MLX makes and a fallback node reads: its maker falls back too', async () => {
    expect(partitions(split, ['ConcatFromSequence'])).toEqual(['mlx:1', 'fallback:2', 'mlx:1']);
    const summary = summarizePartitions(prepareModel(split, { disabledOps: ['ConcatFromSequence'] }).plan);
    expect(summary.fallbackNodes.map((n) => [n.op, n.reason])).toEqual([
      ['SplitToSequence', expect.stringMatching(/makes sequence 's', which a node on onnxruntime reads \(only tensors cross/)],
      ['ConcatFromSequence', expect.stringMatching(/disabledOps/)],
    ]);
    await expectSame(split, { x: x23() }, ['ConcatFromSequence']);
  });

  it('a sequence a fallback node makes and MLX reads: its reader falls back too', async () => {
    expect(partitions(split, ['SplitToSequence'])).toEqual(['mlx:1', 'fallback:2', 'mlx:1']);
    await expectSame(split, { x: x23() }, ['SplitToSequence']);
  });

  it('a chain of sequence ops, one of them disabled, and a sequence read by two nodes', async () => {
    const bytes = build({
      opsets: { '': 17 },
      inputs: [v('x', 'float32', [2, 3])],
      outputs: [v('y', 'float32'), v('n', 'int64')],
      nodes: [
        node('SplitToSequence', ['x'], ['s'], { attrs: { axis: 1 } }),
        node('SequenceErase', ['s'], ['e']),
        node('SequenceInsert', ['e', 'x'], ['i']),
        node('SequenceLength', ['i'], ['n']),
        node('ConcatFromSequence', ['i'], ['c'], { attrs: { axis: 1 } }),
        node('Relu', ['c'], ['y']),
      ],
    });
    expect(partitions(bytes, ['SequenceInsert'])).toEqual(['fallback:5', 'mlx:1']);
    await expectSame(bytes, { x: x23() }, ['SequenceInsert']);
  });

  it('an optional MLX makes, read by fallback nodes', async () => {
    const bytes = build({
      opsets: { '': 18 },
      inputs: [v('x', 'float32', [2, 3])],
      outputs: [v('y', 'float32'), v('h', 'bool')],
      nodes: [
        node('Relu', ['x'], ['r']),
        node('Optional', ['r'], ['o']),
        node('OptionalHasElement', ['o'], ['h']),
        node('OptionalGetElement', ['o'], ['g']),
        node('Neg', ['g'], ['y']),
      ],
    });
    expect(partitions(bytes, ['OptionalHasElement'])).toEqual(['mlx:1', 'fallback:3', 'mlx:1']);
    await expectSame(bytes, { x: x23() }, ['OptionalHasElement']);
    await expectSame(bytes, { x: x23() }, ['Optional']);
  });
});

describe('sequence and optional graph inputs and outputs cross in tensor form', () => {
  it('a sequence input read by a fallback node, at several lengths (one sub-model per length)', async () => {
    const bytes = build(
      {
        opsets: { '': 17 },
        inputs: [v('s', 'float32')],
        outputs: [v('y', 'float32'), v('n', 'int64')],
        nodes: [
          node('SequenceLength', ['s'], ['n']),
          node('ConcatFromSequence', ['s'], ['c'], { attrs: { axis: 0, new_axis: 1 } }),
          node('Relu', ['c'], ['y']),
        ],
      },
      { s: seqOf(ELEM.float32) },
    );
    // The reference: onnxruntime-node with the elements as tensors, made a sequence inside.
    const reference = (k: number) =>
      build({
        opsets: { '': 17 },
        inputs: Array.from({ length: k }, (_, j) => v(`e${j}`, 'float32')),
        outputs: [v('y', 'float32'), v('n', 'int64')],
        nodes: [
          node(
            'SequenceConstruct',
            Array.from({ length: k }, (_, j) => `e${j}`),
            ['s'],
          ),
          node('SequenceLength', ['s'], ['n']),
          node('ConcatFromSequence', ['s'], ['c'], { attrs: { axis: 0, new_axis: 1 } }),
          node('Relu', ['c'], ['y']),
        ],
      });
    for (const disabled of [['ConcatFromSequence', 'SequenceLength'], ['SequenceLength']]) {
      const s = await MlxSession.create(bytes, { ...cpu, disabledOps: disabled });
      try {
        for (const k of [3, 1, 3, 2]) {
          const items = Array.from({ length: k }, (_, j) => f32(seeded(4, 10 + j), [2, 2]));
          const feeds: Feeds = Object.fromEntries(items.map((t, j) => [`e${j}`, t]));
          const want = await runOn('cpu', reference(k), feeds);
          const seq: Value = { kind: 'sequence', elemType: ELEM.float32, items: items.map((t) => ({ kind: 'host', tensor: host(t) })) };
          const out = await s.run({ s: seq });
          expectClose(out.y as HostTensor, want.y);
          expectClose(out.n as HostTensor, want.n);
        }
        expect(s.fallbackStats[0].runs).toBe(4);
      } finally {
        s.release();
      }
    }
  });

  it('an empty sequence input crosses as SequenceEmpty', async () => {
    const bytes = build(
      { opsets: { '': 17 }, inputs: [v('s', 'int64')], outputs: [v('n', 'int64')], nodes: [node('SequenceLength', ['s'], ['n'])] },
      { s: seqOf(ELEM.int64) },
    );
    const want = await runOn(
      'cpu',
      build({
        opsets: { '': 17 },
        inputs: [],
        outputs: [v('n', 'int64')],
        nodes: [node('SequenceEmpty', [], ['s'], { attrs: { dtype: { i: ELEM.int64 } } }), node('SequenceLength', ['s'], ['n'])],
      }),
      {},
    );
    const s = await MlxSession.create(bytes, { ...cpu, disabledOps: ['SequenceLength'] });
    try {
      const out = await s.run({ s: { kind: 'sequence', elemType: ELEM.int64, items: [] } });
      expectClose(out.n as HostTensor, want.n);
    } finally {
      s.release();
    }
  });

  it('a sequence output onnxruntime makes comes back element by element (shapes and ranks differ, zero-size elements, int64)', async () => {
    const spec = (outputs: ModelSpec['outputs'], extra: ModelSpec['nodes'] = []): ModelSpec => ({
      opsets: { '': 17 },
      inputs: [v('x', 'float32', [2, 5]), v('k', 'int64', ['K'])],
      outputs,
      nodes: [
        node('Relu', ['x'], ['r']),
        node('SplitToSequence', ['r', 'k'], ['s'], { attrs: { axis: 1 } }),
        node('Cast', ['x'], ['xi'], { attrs: { to: ELEM.int64 } }),
        node('SplitToSequence', ['xi'], ['t'], { attrs: { axis: 0, keepdims: 0 } }),
        ...extra,
      ],
    });
    const bytes = build(spec([v('s', 'float32'), v('t', 'int64')]), { s: seqOf(ELEM.float32), t: seqOf(ELEM.int64) });
    const x = f32(
      seeded(10, 4).map((a) => a * 4 - 2),
      [2, 5],
    );
    for (const split of [[2, 0, 3], [5], [1, 1, 1, 1, 1]]) {
      const k = i64(split, [split.length]);
      // The reference: onnxruntime-node, each element fetched as SequenceAt.
      const at = (seq: string, n: number) =>
        Array.from({ length: n }, (_, j) => [
          node('Constant', [], [`${seq}i${j}`], { attrs: { value: { t: { name: 'c', type: 'int64', dims: [], values: [j] } } } }),
          node('SequenceAt', [seq, `${seq}i${j}`], [`${seq}${j}`]),
        ]).flat();
      const ref = build(
        spec(
          [...split.map((_, j) => v(`s${j}`, 'float32')), v('t0', 'int64'), v('t1', 'int64')],
          [...at('s', split.length), ...at('t', 2)],
        ),
      );
      const want = await runOn('cpu', ref, { x, k });
      for (const compiled of [true, false]) {
        const s = await MlxSession.create(bytes, { ...cpu, compiled, disabledOps: ['SplitToSequence'] });
        try {
          for (let r = 0; r < (compiled ? 3 : 1); r++) {
            const out = await s.run({ x: host(x), k: host(k) });
            const seq = out.s as unknown as Value & { kind: 'sequence' };
            expect(seq.kind).toBe('sequence');
            expect(seq.items.length).toBe(split.length);
            seq.items.forEach((item, j) => expectClose((item as { tensor: HostTensor }).tensor, want[`s${j}`]));
            const t = out.t as unknown as Value & { kind: 'sequence' };
            expect(t.elemType).toBe(ELEM.int64);
            t.items.forEach((item, j) => expectClose((item as { tensor: HostTensor }).tensor, want[`t${j}`]));
          }
        } finally {
          s.release();
        }
      }
    }
  });

  it('an optional input, present and absent, read by fallback nodes', async () => {
    const bytes = build(
      {
        opsets: { '': 18 },
        inputs: [v('o', 'float32'), v('x', 'float32', [2, 3])],
        outputs: [v('h', 'bool'), v('y', 'float32')],
        nodes: [node('OptionalHasElement', ['o'], ['h']), node('Relu', ['x'], ['y'])],
      },
      { o: optOf(ELEM.float32) },
    );
    // The reference for a present optional: onnxruntime-node making it from a tensor input.
    const ref = build({
      opsets: { '': 18 },
      inputs: [v('e', 'float32'), v('x', 'float32', [2, 3])],
      outputs: [v('h', 'bool'), v('y', 'float32')],
      nodes: [node('Optional', ['e'], ['o']), node('OptionalHasElement', ['o'], ['h']), node('Relu', ['x'], ['y'])],
    });
    const s = await MlxSession.create(bytes, { ...cpu, disabledOps: ['OptionalHasElement'] });
    try {
      for (const present of [true, false, true]) {
        const x = x23();
        const e = f32([1, 2], [2]);
        const out = await s.run({ o: present ? { kind: 'host', tensor: host(e) } : { kind: 'none' }, x: host(x) });
        if (present) {
          const want = await runOn('cpu', ref, { e, x });
          expectClose(out.h as HostTensor, want.h);
          expectClose(out.y as HostTensor, want.y);
        } else {
          // onnxruntime-node cannot be fed an empty optional; the spec: OptionalHasElement of one is false.
          expect(Array.from((out.h as HostTensor).data as Uint8Array)).toEqual([0]);
        }
      }
    } finally {
      s.release();
    }
  });

  it('an optional output onnxruntime makes, present and empty', async () => {
    // o: Optional(r), present; z: Optional() of type tensor(float), empty.
    const m = modelProto({
      opsets: { '': 18 },
      inputs: [v('x', 'float32', [2, 3])],
      outputs: [v('o', 'float32'), v('z', 'float32'), v('y', 'float32')],
      nodes: [
        node('Relu', ['x'], ['r']),
        node('Optional', ['r'], ['o']),
        node('Optional', [], ['z'], { name: 'empty' }),
        node('Neg', ['x'], ['y']),
      ],
    });
    const g = m.graph!;
    g.node
      .find((n) => n.name === 'empty')!
      .attribute.push(
        create(AttributeProtoSchema, { name: 'type', type: AttributeProto_AttributeType.TYPE_PROTO, tp: proto.tensorType(ELEM.float32) }),
      );
    g.output[0] = proto.valueInfo('o', optOf(ELEM.float32));
    g.output[1] = proto.valueInfo('z', optOf(ELEM.float32));
    const bytes = serialize(m);
    const x = x23();
    // The reference is onnxruntime-node on the same graph without the Optional nodes: returning an
    // empty optional output kills onnxruntime-node 1.30's process (which is also why the sub-model
    // never returns one: it returns a presence flag and a tensor).
    const plainRef = await runOn(
      'cpu',
      modelBytes({
        opsets: { '': 18 },
        inputs: [v('x', 'float32', [2, 3])],
        outputs: [v('r', 'float32'), v('y', 'float32')],
        nodes: [node('Relu', ['x'], ['r']), node('Neg', ['x'], ['y'])],
      }),
      { x },
    );
    const s = await MlxSession.create(bytes, { ...cpu, disabledOps: ['Optional'] });
    try {
      expect(s.fallbackStats[0].ops).toEqual(['Optional']);
      for (let r = 0; r < 2; r++) {
        const out = await s.run({ x: host(x) });
        expectClose(out.o as HostTensor, plainRef.r);
        expect((out.z as unknown as Value).kind).toBe('none');
        expectClose(out.y as HostTensor, plainRef.y);
      }
    } finally {
      s.release();
    }
  });
});

describe('omitted optional inputs and outputs of fallback nodes', () => {
  it('LayerNormalization without a bias, its Mean omitted and InvStdDev kept; Clip without a min', async () => {
    const bytes = build({
      opsets: { '': 17 },
      inputs: [v('x', 'float32', [2, 3]), v('w', 'float32', [3]), v('hi', 'float32', [])],
      outputs: [v('y', 'float32'), v('inv', 'float32'), v('c', 'float32')],
      nodes: [
        node('Relu', ['x'], ['r']),
        node('LayerNormalization', ['r', 'w'], ['n', '', 'inv'], { attrs: { epsilon: { f: 1e-3 } } }),
        node('Neg', ['n'], ['y']),
        node('Clip', ['n', '', 'hi'], ['c']),
      ],
    });
    const feeds = { x: x23(), w: f32([1, -2, 0.5], [3]), hi: f32([0.3], []) };
    expect(partitions(bytes, ['LayerNormalization', 'Clip'])).toEqual(['mlx:1', 'fallback:2', 'mlx:1']);
    await expectSame(bytes, feeds, ['LayerNormalization', 'Clip']);
    await expectSame(bytes, feeds, ['Clip']);
  });
});

describe('optional sequences at a fallback boundary', () => {
  const optSeqOf = (elem: number) => proto.optionalType(seqOf(elem));

  it('an optional sequence input, present (several lengths, one empty) and absent, read by fallback nodes', async () => {
    // h: whether o is present; n: its length where present (If on h).
    const lengthOr = (seq: string) => ({
      then_branch: {
        g: {
          name: 'len',
          inputs: [],
          outputs: [v('n1', 'int64')],
          nodes: [node('OptionalGetElement', [seq], ['got']), node('SequenceLength', ['got'], ['n1'])],
        },
      },
      else_branch: {
        g: {
          name: 'none',
          inputs: [],
          outputs: [v('n0', 'int64')],
          nodes: [node('Constant', [], ['n0'], { attrs: { value: { t: { name: 'c', type: 'int64', dims: [], values: [-1] } } } })],
        },
      },
    });
    const bytes = build(
      {
        opsets: { '': 18 },
        inputs: [v('o', 'float32'), v('x', 'float32', [2, 3])],
        outputs: [v('h', 'bool'), v('n', 'int64'), v('y', 'float32')],
        nodes: [node('OptionalHasElement', ['o'], ['h']), node('If', ['h'], ['n'], { attrs: lengthOr('o') }), node('Relu', ['x'], ['y'])],
      },
      { o: optSeqOf(ELEM.float32) },
    );
    // The reference for a present optional sequence: onnxruntime-node making it from tensor inputs.
    const reference = (k: number) =>
      build({
        opsets: { '': 18 },
        inputs: [...Array.from({ length: k }, (_, j) => v(`e${j}`, 'float32')), v('x', 'float32', [2, 3])],
        outputs: [v('h', 'bool'), v('n', 'int64'), v('y', 'float32')],
        nodes: [
          k
            ? node(
                'SequenceConstruct',
                Array.from({ length: k }, (_, j) => `e${j}`),
                ['s'],
              )
            : node('SequenceEmpty', [], ['s'], { attrs: { dtype: { i: ELEM.float32 } } }),
          node('Optional', ['s'], ['o']),
          node('OptionalHasElement', ['o'], ['h']),
          node('If', ['h'], ['n'], { attrs: lengthOr('o') }),
          node('Relu', ['x'], ['y']),
        ],
      });
    const s = await MlxSession.create(bytes, { ...cpu, disabledOps: ['OptionalHasElement'] });
    try {
      expect(s.fallbackStats[0].ops).toEqual(['OptionalHasElement', 'If']);
      for (const k of [2, undefined, 0, 3]) {
        const x = x23();
        if (k === undefined) {
          // onnxruntime-node cannot be fed an empty optional; the spec: OptionalHasElement of one is false.
          const out = await s.run({ o: { kind: 'none' }, x: host(x) });
          expect(Array.from((out.h as HostTensor).data as Uint8Array)).toEqual([0]);
          expect(Array.from((out.n as HostTensor).data as BigInt64Array)).toEqual([-1n]);
          continue;
        }
        const items = Array.from({ length: k }, (_, j) => f32(seeded(4, 20 + j), [2, 2]));
        const want = await runOn('cpu', reference(k), { ...Object.fromEntries(items.map((t, j) => [`e${j}`, t])), x });
        const seq: Value = { kind: 'sequence', elemType: ELEM.float32, items: items.map((t) => ({ kind: 'host', tensor: host(t) })) };
        const out = await s.run({ o: seq, x: host(x) });
        expectClose(out.h as HostTensor, want.h);
        expectClose(out.n as HostTensor, want.n);
        expectClose(out.y as HostTensor, want.y);
      }
    } finally {
      s.release();
    }
  });

  it('an optional sequence output onnxruntime makes, present and empty', async () => {
    const m = modelProto({
      opsets: { '': 18 },
      inputs: [v('x', 'float32', [2, 5]), v('k', 'int64', ['K'])],
      outputs: [v('o', 'float32'), v('z', 'float32'), v('y', 'float32')],
      nodes: [
        node('Relu', ['x'], ['r']),
        node('SplitToSequence', ['r', 'k'], ['s'], { attrs: { axis: 1 } }),
        node('Optional', ['s'], ['o']),
        node('Optional', [], ['z'], { name: 'empty' }),
        node('Neg', ['x'], ['y']),
      ],
    });
    const g = m.graph!;
    g.node
      .find((n) => n.name === 'empty')!
      .attribute.push(
        create(AttributeProtoSchema, { name: 'type', type: AttributeProto_AttributeType.TYPE_PROTO, tp: seqOf(ELEM.float32) }),
      );
    g.output[0] = proto.valueInfo('o', optSeqOf(ELEM.float32));
    g.output[1] = proto.valueInfo('z', optSeqOf(ELEM.float32));
    const bytes = serialize(m);
    const x = f32(
      seeded(10, 7).map((a) => a * 4 - 2),
      [2, 5],
    );
    for (const split of [[2, 0, 3], [5]]) {
      const k = i64(split, [split.length]);
      // The reference: onnxruntime-node's Split of the same tensor (it cannot return sequences or optionals).
      const ref = modelBytes({
        opsets: { '': 18 },
        inputs: [v('x', 'float32', [2, 5]), v('k', 'int64', ['K'])],
        outputs: [...split.map((_, j) => v(`p${j}`, 'float32')), v('y', 'float32')],
        nodes: [
          node('Relu', ['x'], ['r']),
          node(
            'Split',
            ['r', 'k'],
            split.map((_, j) => `p${j}`),
            { attrs: { axis: 1 } },
          ),
          node('Neg', ['x'], ['y']),
        ],
      });
      const want = await runOn('cpu', ref, { x, k });
      for (const compiled of [true, false]) {
        const s = await MlxSession.create(bytes, { ...cpu, compiled, disabledOps: ['Optional'] });
        try {
          for (let r = 0; r < (compiled ? 3 : 1); r++) {
            const out = await s.run({ x: host(x), k: host(k) });
            const o = out.o as unknown as Value & { kind: 'sequence' };
            expect(o.kind).toBe('sequence');
            expect(o.items.length).toBe(split.length);
            o.items.forEach((item, j) => expectClose((item as { tensor: HostTensor }).tensor, want[`p${j}`]));
            expect((out.z as unknown as Value).kind).toBe('none');
            expectClose(out.y as HostTensor, want.y);
          }
        } finally {
          s.release();
        }
      }
    }
  });
});

describe('a node only MLX runs exchanging a sequence with a fallback node', () => {
  // SequenceMap whose body holds com.microsoft::Sigmoid, which onnxruntime's CPU provider lacks:
  // it stays on MLX, and the sequence a fallback SplitToSequence makes crosses in tensor form.
  const spec = (sigmoid: { domain?: string }): ModelSpec => ({
    opsets: { '': 17, 'com.microsoft': 1 },
    inputs: [v('x', 'float32', [2, 5]), v('k', 'int64', ['K'])],
    outputs: [v('y', 'float32')],
    nodes: [
      node('Relu', ['x'], ['r']),
      node('SplitToSequence', ['r', 'k'], ['s'], { attrs: { axis: 1 } }),
      node('SequenceMap', ['s'], ['m'], {
        attrs: {
          body: {
            g: { name: 'b', inputs: [v('e', 'float32')], outputs: [v('eo', 'float32')], nodes: [node('Sigmoid', ['e'], ['eo'], sigmoid)] },
          },
        },
      }),
      node('ConcatFromSequence', ['m'], ['y'], { attrs: { axis: 1 } }),
    ],
  });
  const withSeqInfo = (spec: ModelSpec, declared: boolean) => {
    const m = modelProto(spec);
    if (declared) m.graph!.valueInfo.push(proto.valueInfo('s', seqOf(ELEM.float32)));
    return serialize(m);
  };

  for (const declared of [true, false])
    it(`the sequence crosses (its type ${declared ? 'declared in a value info' : 'that of the tensor SplitToSequence splits'}); the outputs match onnxruntime with ai.onnx Sigmoid`, async () => {
      const bytes = withSeqInfo(spec({ domain: 'com.microsoft' }), declared);
      const summary = summarizePartitions(prepareModel(bytes, { disabledOps: ['SplitToSequence'] }).plan);
      expect(summary.fallbackNodes.map((n) => n.op)).toEqual(['SplitToSequence']);
      // The reference: the same graph with ai.onnx's Sigmoid, which onnxruntime-node runs.
      const ref = withSeqInfo(spec({}), true);
      const x = f32(
        seeded(10, 9).map((a) => a * 4),
        [2, 5],
      );
      for (const split of [
        [2, 3],
        [1, 0, 4],
      ]) {
        const k = i64(split, [split.length]);
        const want = await runOn('cpu', ref, { x, k });
        for (const compiled of [true, false]) {
          const s = await MlxSession.create(bytes, { ...cpu, compiled, disabledOps: ['SplitToSequence'] });
          try {
            for (let r = 0; r < (compiled ? 3 : 1); r++) expectClose((await s.run({ x: host(x), k: host(k) })).y as HostTensor, want.y);
          } finally {
            s.release();
          }
        }
      }
    });
});

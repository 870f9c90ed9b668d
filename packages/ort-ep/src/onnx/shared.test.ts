// Real files: the exported models in ../shared/models (checked against their meta.json) and the
// ONNX node conformance cases, whose expected outputs must have the element types and shapes the
// models' graphs declare (symbolic dims bound consistently from the inputs).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { expandFunctions } from './functions.js';
import { OnnxDataType as T, dataTypeFromName, dataTypeName, elementCount, type ModelIR, type TypeIR } from './ir.js';
import { decodeModel } from './model.js';
import { readTestCase, type TestCase, type TestValue } from './testcase.js';
import { expectShared, sharedPath } from '../../test/helpers/shared.js';
import { validateGraph } from './validate.js';

/** Why a value does not fit its declared type, or undefined; symbolic dims are bound in `bind`. */
function misfit(v: TestValue, t: TypeIR, bind: Map<string, number>, where: string): string | undefined {
  switch (t.kind) {
    case 'tensor': {
      if ('kind' in v) return `${where}: a ${v.kind} where a tensor is declared`;
      if (t.elemType && v.dtype !== t.elemType) return `${where}: ${dataTypeName(v.dtype)} where ${dataTypeName(t.elemType)} is declared`;
      const per = v.dtype === T.COMPLEX64 || v.dtype === T.COMPLEX128 ? 2 : 1;
      if (v.data.length !== elementCount(v.dims) * per) return `${where}: ${v.data.length} values for dims [${v.dims.join(', ')}]`;
      if (!t.shape) return undefined;
      if (t.shape.length !== v.dims.length) return `${where}: rank ${v.dims.length} where [${t.shape.join(', ')}] is declared`;
      for (let i = 0; i < t.shape.length; i++) {
        const d = t.shape[i];
        if (typeof d === 'number' && d !== v.dims[i])
          return `${where}: dims [${v.dims.join(', ')}] where [${t.shape.join(', ')}] is declared`;
        if (typeof d === 'string') {
          if (!bind.has(d)) bind.set(d, v.dims[i]);
          else if (bind.get(d) !== v.dims[i]) return `${where}: dim '${d}' is ${v.dims[i]} here but ${bind.get(d)} elsewhere`;
        }
      }
      return undefined;
    }
    case 'sequence':
      if (!('kind' in v) || v.kind !== 'sequence') return `${where}: not a sequence`;
      // Items of one sequence may differ in size: each binds its own symbolic dims.
      for (const [i, item] of v.items.entries()) {
        const why = t.elem && misfit(item, t.elem, new Map(bind), `${where}[${i}]`);
        if (why) return why;
      }
      return undefined;
    case 'optional':
      if (!('kind' in v) || v.kind !== 'optional') return `${where}: not an optional`;
      return v.value && t.elem ? misfit(v.value, t.elem, bind, `${where}.value`) : undefined;
    default:
      return undefined;
  }
}

/** Every data set of a case fits the graph's declared inputs and outputs. */
function checkCase(tc: TestCase): string[] {
  const g = tc.model.graph;
  const inputs = g.inputs.filter((i) => !g.inputsWithDefaults.has(i.name));
  const problems: string[] = [];
  for (const ds of tc.datasets) {
    const bind = new Map<string, number>();
    if (ds.inputs.length > inputs.length) problems.push(`${ds.name}: ${ds.inputs.length} inputs for ${inputs.length} graph inputs`);
    if (ds.outputs.length !== g.outputs.length)
      problems.push(`${ds.name}: ${ds.outputs.length} outputs for ${g.outputs.length} graph outputs`);
    ds.inputs.forEach((v, i) => {
      if (inputs[i] && v.name !== inputs[i].name)
        problems.push(`${ds.name}: input ${i} is named '${v.name}', the graph's is '${inputs[i].name}'`);
      const why = inputs[i] && misfit(v, inputs[i].type, bind, `${ds.name} input '${inputs[i].name}'`);
      if (why) problems.push(why);
    });
    ds.outputs.forEach((v, i) => {
      const why = g.outputs[i] && misfit(v, g.outputs[i].type, bind, `${ds.name} output '${g.outputs[i].name}'`);
      if (why) problems.push(why);
    });
  }
  return problems;
}

function prepared(tc: TestCase): ModelIR {
  return validateGraph(expandFunctions(tc.model).graph) && tc.model;
}

const modelsDir = sharedPath('models');
const models = existsSync(modelsDir) ? readdirSync(modelsDir).filter((m) => existsSync(join(modelsDir, m, 'meta.json'))) : [];

interface Meta {
  ir_version: number;
  opset: { domain: string; version: number }[];
  ops: Record<string, number>;
  inputs: { name: string; type: string; shape: (number | string)[] }[];
  outputs: Meta['inputs'];
}
// meta.json spells types as ONNX does: tensor(float), tensor(int64), ...
const typeOf = (s: string) =>
  dataTypeFromName(({ float: 'float32', double: 'float64' } as Record<string, string>)[s.slice(7, -1)] ?? s.slice(7, -1));

describe('the shared models', () => {
  it('are there', () => {
    expectShared(modelsDir);
    expect(models.length).toBeGreaterThanOrEqual(9);
  });
  for (const name of models) {
    it(name, () => {
      const dir = join(modelsDir, name);
      const meta = JSON.parse(readFileSync(join(dir, 'meta.json'), 'utf8')) as Meta;
      const tc = readTestCase(dir);
      const m = prepared(tc);
      expect(m.irVersion).toBe(meta.ir_version);
      for (const o of meta.opset) expect(m.opsetImports.get(o.domain || 'ai.onnx')).toBe(o.version);
      const ops: Record<string, number> = {};
      for (const n of m.graph.nodes) {
        const k = n.domain === 'ai.onnx' ? n.opType : `${n.domain}::${n.opType}`;
        ops[k] = (ops[k] ?? 0) + 1;
      }
      expect(ops).toEqual(meta.ops);
      const io = (vs: typeof m.graph.inputs) =>
        vs.map((v) => ({
          name: v.name,
          type: v.type.kind === 'tensor' ? v.type.elemType : -1,
          shape: v.type.kind === 'tensor' ? v.type.shape : [],
        }));
      const declared = (vs: Meta['inputs']) => vs.map((v) => ({ name: v.name, type: typeOf(v.type), shape: v.shape }));
      expect(io(m.graph.inputs.filter((i) => !m.graph.inputsWithDefaults.has(i.name)))).toEqual(declared(meta.inputs));
      expect(io(m.graph.outputs)).toEqual(declared(meta.outputs));
      expect(m.graph.initializers.size).toBeGreaterThan(0);
      expect(tc.datasets.length).toBeGreaterThanOrEqual(2);
      expect(checkCase(tc)).toEqual([]);
      // The data sets differ in batch and/or sequence length: the symbolic dims really vary.
      const dims = tc.datasets.map((d) => JSON.stringify(d.inputs.map((v) => ('dims' in v ? v.dims : []))));
      expect(new Set(dims).size).toBe(tc.datasets.length);
    });
  }

  it('gpt2-tiny-int4: MatMulNBits weights are packed uint8 blocks', () => {
    const g = decodeModel(readFileSync(join(modelsDir, 'gpt2-tiny-int4', 'model.onnx'))).graph;
    const mm = g.nodes.find((n) => n.opType === 'MatMulNBits')!;
    expect(mm.domain).toBe('com.microsoft');
    expect(mm.attributes.get('bits')).toEqual({ type: 'int', value: 4 });
    expect(mm.attributes.get('block_size')).toEqual({ type: 'int', value: 32 });
    const w = g.initializers.get(mm.inputs[1])!;
    const [k, n] = [mm.attributes.get('K')!.value as number, mm.attributes.get('N')!.value as number];
    expect(w.dtype).toBe(T.UINT8);
    expect(w.dims).toEqual([n, k / 32, 16]);
  });
});

const nodeDir = sharedPath('onnx-node-tests/v1.22.0');
const allCases = existsSync(nodeDir) ? readdirSync(nodeDir).sort() : [];
// Every 36th case, plus ones that exercise containers, subgraphs, strings and the narrow types.
const sample = [
  ...new Set([
    ...allCases.filter((_, i) => i % 36 === 0),
    'test_identity_sequence',
    'test_optional_get_element_optional_sequence',
    'test_optional_has_element_empty_optional_input',
    'test_if_seq',
    'test_loop16_seq_none',
    'test_scan9_sum',
    'test_sequence_map_add_2_sequences',
    'test_split_to_sequence_1',
    'test_string_split_basic',
    'test_cast_FLOAT_to_INT4',
    'test_cast_BFLOAT16_to_FLOAT',
    'test_cast_FLOAT_to_FLOAT8E4M3FN',
    'test_cast_FLOAT_to_FLOAT4E2M1',
    'test_dequantizelinear_uint2',
    'test_layer_normalization_2d_axis0_expanded',
  ]),
].filter((c) => allCases.includes(c));

describe('ONNX node test cases', () => {
  it('are there', () => expectShared(nodeDir));
  for (const name of sample) {
    it(name, () => {
      const tc = readTestCase(join(nodeDir, name));
      prepared(tc);
      expect(tc.datasets.length).toBeGreaterThanOrEqual(1);
      expect(tc.datasets[0].outputs.length).toBe(tc.model.graph.outputs.length);
      expect(checkCase(tc)).toEqual([]);
    });
  }

  it('the shape check catches outputs that do not fit', () => {
    const tc = readTestCase(join(nodeDir!, 'test_abs'));
    const out = tc.datasets[0].outputs[0] as Extract<TestValue, { dtype: unknown }>;
    out.dims = [...out.dims].reverse().concat([1]);
    expect(checkCase(tc)).toEqual([expect.stringMatching(/^test_data_set_0 output 'y': rank 4 where \[3, 4, 5\] is declared/)]);
    out.dims = [5, 4, 3];
    expect(checkCase(tc)).toEqual([expect.stringMatching(/dims \[5, 4, 3\] where \[3, 4, 5\] is declared/)]);
  });

  it('sequence and optional data come out as tagged values', () => {
    const seq = readTestCase(join(nodeDir!, 'test_identity_sequence')).datasets[0].inputs[0];
    expect(seq).toMatchObject({ kind: 'sequence', name: 'x', elemType: T.FLOAT });
    expect((seq as Extract<TestValue, { kind: 'sequence' }>).items.map((t) => 'dims' in t && t.dims)).toEqual([
      [1, 1, 2, 2],
      [1, 1, 2, 2],
    ]);
    const empty = readTestCase(join(nodeDir!, 'test_optional_has_element_empty_optional_input')).datasets[0];
    expect(empty.inputs[0]).toEqual({ kind: 'optional', name: 'optional_input', value: null });
    expect(empty.outputs[0]).toMatchObject({ dtype: T.BOOL, dims: [], data: Uint8Array.of(0) });
  });

  it('every case decodes, expands, validates and fits its declared types', () => {
    const problems: string[] = [];
    for (const name of allCases) {
      try {
        const tc = readTestCase(join(nodeDir, name));
        prepared(tc);
        problems.push(...checkCase(tc).map((p) => `${name}: ${p}`));
      } catch (e) {
        problems.push(`${name}: ${(e as Error).message}`);
      }
    }
    expect(problems).toEqual([]);
  }, 120_000);
});

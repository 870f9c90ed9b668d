// Profiles (enableProfiling, startProfiling/endProfiling) against the ones onnxruntime-node writes
// for the same model: the same event fields and types, the same node names, op types and output
// shapes on the eager path; replays and evaluations on the compiled path; a fallback partition as
// an onnxruntime event.
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MlxSession } from '../../src/index.js';
import { readTestCase } from '../../src/internal.js';
import { ort } from '../helpers/ort.js';

const dir = mkdtempSync(join(tmpdir(), 'mlx-profile-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const modelDir = join(__dirname, '..', '..', '..', '..', '..', 'shared', 'models', 'gpt2-tiny');
const model = join(modelDir, 'model.onnx');

interface Event {
  cat: string;
  pid: number;
  tid: number;
  dur: number;
  ts: number;
  ph: string;
  name: string;
  args: Record<string, unknown>;
}

function feedsOf(): Record<string, import('onnxruntime-node').Tensor> {
  const ds = readTestCase(modelDir).datasets[0];
  const names = ['input_ids', 'attention_mask'];
  return Object.fromEntries(ds.inputs.map((t, i) => [names[i], new ort.Tensor('int64', t.data as BigInt64Array, t.dims)]));
}

/** The one profile file with `prefix` in `dir`, parsed. */
function readProfile(prefix: string): Event[] {
  const files = readdirSync(dir).filter((f) => f.startsWith(`${prefix}_`) && f.endsWith('.json'));
  expect(files, prefix).toHaveLength(1);
  expect(files[0]).toMatch(/_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_\d{3}\.json$/);
  return JSON.parse(readFileSync(join(dir, files[0]), 'utf8')) as Event[];
}

async function profile(prefix: string, eps: unknown[], runs = 1): Promise<Event[]> {
  const s = await ort.InferenceSession.create(model, {
    executionProviders: eps as never,
    graphOptimizationLevel: 'disabled',
    enableProfiling: true,
    profileFilePrefix: join(dir, prefix),
  });
  const feeds = feedsOf();
  for (let i = 0; i < runs; i++) await s.run(feeds);
  s.endProfiling();
  await s.release();
  return readProfile(prefix);
}

const kernel = (events: Event[]) => new Map(events.filter((e) => e.cat === 'Node').map((e) => [e.name, e]));

describe('profiling through onnxruntime-common', () => {
  it('writes what onnxruntime-node writes on the eager path: fields, node names, op types, shapes', async () => {
    const theirs = await profile('ort', ['cpu']);
    const ours = await profile('mlx-eager', [{ name: 'mlx', device: 'cpu', compiled: false }]);
    // Every event has onnxruntime's fields, of the same JSON types.
    const shape = (e: Event) => Object.fromEntries(Object.entries(e).map(([k, v]) => [k, typeof v]));
    const want = shape(theirs[0]);
    for (const e of ours) {
      expect(shape(e)).toEqual(want);
      expect(e.ph).toBe('X');
      expect(e.pid).toBe(process.pid);
    }
    for (const name of ['model_loading_uri', 'session_initialization', 'model_run'])
      expect(
        ours.some((e) => e.cat === 'Session' && e.name === name),
        name,
      ).toBe(true);
    // The same nodes ran, as the same ops, with the same results' types and shapes; but for those
    // the plan leaves out: outputs' Identity nodes (aliases) and nodes of constants (folded when
    // the session was made).
    const a = kernel(theirs);
    const b = kernel(ours);
    expect(b.size).toBeGreaterThan(250);
    for (const name of b.keys()) expect(a.has(name), name).toBe(true);
    const left = [...a.values()].filter((e) => !b.has(e.name)).map((e) => e.args.op_name);
    expect(left.length).toBeLessThan(a.size / 10);
    for (const op of left) expect(['Identity', 'ConstantOfShape']).toContain(op);
    for (const [name, o] of b) {
      const e = a.get(name)!;
      expect(o.args.op_name, name).toBe(e.args.op_name);
      expect(o.args.provider).toBe('MLXExecutionProvider');
      expect(o.args.output_type_shape, name).toEqual(e.args.output_type_shape);
      // onnxruntime leaves out of its inputs the weights its kernels took at creation (prepacked),
      // and lists others; the inputs listed here (no initializers) are among its.
      const theirsIn = (e.args.input_type_shape as unknown[]).map((x) => JSON.stringify(x));
      for (const x of o.args.input_type_shape as unknown[]) expect(theirsIn, name).toContain(JSON.stringify(x));
    }
    // Node events lie inside their run.
    const run = ours.find((e) => e.name === 'model_run')!;
    for (const e of b.values()) {
      expect(e.ts).toBeGreaterThanOrEqual(run.ts);
      expect(e.ts + e.dur).toBeLessThanOrEqual(run.ts + run.dur + 1);
    }
  });

  it('shows the compiled path: the analysing run by node, then replays and evaluations', async () => {
    const ours = await profile('mlx-compiled', [{ name: 'mlx', device: 'cpu' }], 4);
    const runs = ours.filter((e) => e.name === 'model_run');
    expect(runs.map((e) => e.args.path)).toEqual(['analyse', 'trace', expect.stringMatching(/^(replay|one-call)$/), 'one-call']);
    expect(kernel(ours).size).toBeGreaterThan(50); // the analysing run
    expect(ours.filter((e) => e.name === 'program_replay').length).toBeGreaterThanOrEqual(1);
    expect(ours.filter((e) => e.name === 'mlx_eval').length).toBeGreaterThanOrEqual(2);
    expect(ours.some((e) => e.name === 'download' && (e.args.bytes as number) > 0)).toBe(true);
  });

  it('names a fallback partition as onnxruntime work, with its nodes', async () => {
    const ours = await profile('mlx-fallback', [
      { name: 'mlx', device: 'cpu', compiled: false, disabledOps: ['Softmax'], fallback: 'cpu' },
    ]);
    const fb = [...kernel(ours).values()].filter((e) => e.args.provider === 'CPUExecutionProvider');
    expect(fb.length).toBeGreaterThan(0);
    for (const e of fb) {
      expect(e.args.op_name).toMatch(/Softmax/);
      expect((e.args.nodes as string[]).length).toBeGreaterThan(0);
    }
  });
});

describe('MlxSession profiling', () => {
  it('startProfiling records from then on; endProfiling returns the file; a run tag is kept', async () => {
    const s = await MlxSession.create(model, { device: 'cpu', compiled: false, profileFilePrefix: join(dir, 'later') });
    const feeds = Object.fromEntries(
      Object.entries(feedsOf()).map(([k, t]) => [k, { dtype: 7, dims: [...t.dims], data: t.data as BigInt64Array }]),
    );
    s.runSync(feeds);
    expect(s.endProfiling()).toBeUndefined();
    s.startProfiling();
    s.runSync(feeds, undefined, { tag: 'second' });
    const file = s.endProfiling()!;
    expect(file.startsWith(join(dir, 'later_'))).toBe(true);
    const events = JSON.parse(readFileSync(file, 'utf8')) as Event[];
    expect(events.filter((e) => e.name === 'model_run').map((e) => e.args.tag)).toEqual(['second']);
    expect(events.some((e) => e.name === 'model_loading_uri')).toBe(false);
    s.release();
  });

  it('writes a profile never ended when the session is released', async () => {
    const s = await MlxSession.create(model, { device: 'cpu', enableProfiling: true, profileFilePrefix: join(dir, 'released') });
    s.release();
    expect(readProfile('released').some((e) => e.name === 'model_loading_uri')).toBe(true);
  });

  it('refuses profiling options of the wrong type', async () => {
    await expect(MlxSession.create(model, { enableProfiling: 'yes' as unknown as boolean })).rejects.toThrow(
      /enableProfiling must be true or false, got 'yes'/,
    );
    await expect(MlxSession.create(model, { profileFilePrefix: '' })).rejects.toThrow(/profileFilePrefix must be a non-empty string/);
  });
});

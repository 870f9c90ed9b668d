// The session log (logSeverityLevel, logId, onLog, RunOptions.logSeverityLevel): silent by default;
// at VERBOSE every node's placement, with the reason for those onnxruntime runs.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { MlxSession, type HostTensor } from '../../src/index.js';
import type { MlxLogEntry } from '../../src/execute/log.js';
import { decodeModel } from '../../src/onnx/index.js';
import { readTestCase } from '../../src/internal.js';
import { ort } from '../helpers/ort.js';

const modelDir = join(__dirname, '..', '..', '..', '..', '..', 'shared', 'models', 'gpt2-tiny');
const model = join(modelDir, 'model.onnx');
const fileNodes = decodeModel(readFileSync(model)).graph.nodes;
const hostFeeds = (): Record<string, HostTensor> => {
  const ds = readTestCase(modelDir).datasets[0];
  return { input_ids: ds.inputs[0] as HostTensor, attention_mask: ds.inputs[1] as HostTensor };
};

afterEach(() => vi.restoreAllMocks());

describe('session log', () => {
  it('names every node placement at VERBOSE, with the fallback reasons and a warning', async () => {
    const entries: MlxLogEntry[] = [];
    const s = await MlxSession.create(model, {
      device: 'cpu',
      graphRewrites: false,
      disabledOps: ['Softmax'],
      fallback: 'cpu',
      logSeverityLevel: 0,
      logId: 'gpt2',
      onLog: (e) => entries.push(e),
    });
    const placed = new Map(
      entries.filter((e) => e.category === 'placement' && e.severity === 0).map((e) => [/^node '([^']*)'/.exec(e.message)![1], e.message]),
    );
    // Every node of the file: Constant nodes included (folded, but placed on MLX).
    for (const n of fileNodes) expect(placed.has(n.name), n.name).toBe(true);
    const softmax = fileNodes.filter((n) => n.opType === 'Softmax');
    expect(softmax.length).toBeGreaterThan(0);
    for (const n of softmax) expect(placed.get(n.name)).toMatch(/: onnxruntime, partition \d+ \(.*disabledOps/);
    for (const n of fileNodes.filter((n) => n.opType === 'MatMul')) expect(placed.get(n.name)).toMatch(/: MLX$/);
    expect(entries.every((e) => e.logId === 'gpt2')).toBe(true);
    expect(entries.some((e) => e.category === 'partition')).toBe(true);
    expect(entries.some((e) => e.category === 'rewrite' && e.message === 'rewrites: none applied')).toBe(true);
    expect(entries.find((e) => e.severity === 2)?.message).toMatch(/node\(s\) run on onnxruntime \(the fallback\), not on MLX: Softmax/);
    // Runs: the path of each, and the new signature at INFO.
    await s.run(hostFeeds());
    await s.run(hostFeeds());
    const runs = entries.filter((e) => e.category === 'run').map((e) => e.message);
    expect(runs[0]).toMatch(/run by the analyse path, [\d.]+ ms$/);
    expect(runs[1]).toMatch(/run by the trace path/);
    expect(entries.filter((e) => e.category === 'signature').map((e) => e.severity)).toEqual([1, 1]);
    s.release();
  });

  it('logs rewrites applied, and only entries at or above the level', async () => {
    const entries: MlxLogEntry[] = [];
    const s = await MlxSession.create(model, { device: 'cpu', logSeverityLevel: 1, onLog: (e) => entries.push(e) });
    expect(entries.every((e) => e.severity >= 1)).toBe(true);
    expect(entries.map((e) => e.message)).toContainEqual(expect.stringMatching(/^model model\.onnx: \d+ node\(s\) on MLX$/));
    s.release();
    const verbose: MlxLogEntry[] = [];
    const t = await MlxSession.create(model, { device: 'cpu', logSeverityLevel: 0, onLog: (e) => verbose.push(e) });
    expect(verbose.find((e) => e.category === 'rewrite')?.message).toMatch(/^rewrites: .*x\d+/);
    t.release();
  });

  it('is silent by default; a run may ask for its own entries; stderr in onnxruntime layout', async () => {
    const writes: string[] = [];
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      writes.push(String(chunk));
      return true;
    });
    const s = await MlxSession.create(model, { device: 'cpu' });
    s.runSync(hostFeeds());
    expect(writes).toEqual([]);
    s.runSync(hostFeeds(), undefined, { logSeverityLevel: 0, tag: 'r2' });
    expect(writes).toHaveLength(1);
    expect(writes[0]).toMatch(
      /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \[V:onnxruntime:, mlx:run\] model model\.onnx: run 'r2' by the \w+ path/,
    );
    s.release();
  });

  it('takes onnxruntime-common options: logSeverityLevel, logId, RunOptions.logSeverityLevel', async () => {
    const writes: string[] = [];
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
      writes.push(String(chunk));
      return true;
    });
    const s = await ort.InferenceSession.create(model, {
      executionProviders: [{ name: 'mlx', device: 'cpu' }] as never,
      logSeverityLevel: 0,
      logId: 'via-ort',
    });
    vi.restoreAllMocks();
    expect(writes.some((w) => w.includes('[V:onnxruntime:via-ort, mlx:placement] node '))).toBe(true);
    await s.release();
  });

  it('refuses bad levels', async () => {
    await expect(MlxSession.create(model, { logSeverityLevel: 7 as never })).rejects.toThrow(
      /logSeverityLevel must be 0 \(verbose\), 1 \(info\), 2 \(warning\), 3 \(error\) or 4 \(fatal\), got 7/,
    );
    await expect(MlxSession.create(model, { onLog: 'x' as never })).rejects.toThrow(/onLog must be a function/);
  });
});

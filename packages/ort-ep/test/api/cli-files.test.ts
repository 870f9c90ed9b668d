// The mlx-ort command line opens only regular files of a bounded size: /dev/zero used to be read
// until the process died, and a FIFO given as the model or as a test data file (input_0.pb) hung
// it. A missing file or a folder gets a sentence, not node's raw ENOENT/EISDIR. Each case runs the
// CLI in a child process (with a timeout), since before the fix each could hang or kill the runner.
import { spawnSync } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, writeFileSync, ftruncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { model, node, v } from '../helpers/build.js';

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const dir = mkdtempSync(join(tmpdir(), 'ort-ep-cli-files-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const good = join(dir, 'relu.onnx');
writeFileSync(good, model({ inputs: [v('x', 'float32', [4])], outputs: [v('y', 'float32', [4])], nodes: [node('Relu', ['x'], ['y'])] }));

/** A FIFO at `path` (mkfifo); nothing ever writes to it. */
function fifo(path: string): string {
  const r = spawnSync('mkfifo', [path]);
  if (r.status !== 0) throw new Error(`mkfifo ${path} failed: ${r.stderr}`);
  return path;
}

/** A sparse file of `size` bytes (takes no disk space). */
function sparse(path: string, size: number): string {
  const fd = openSync(path, 'w');
  ftruncateSync(fd, size);
  closeSync(fd);
  return path;
}

const child = `
  const { main } = await import('./src/cli.ts');
  console.log = () => {};
  try {
    await main(JSON.parse(process.env.CLI_ARGV));
    process.stdout.write(JSON.stringify({ ok: true, exitCode: process.exitCode ?? 0 }));
  } catch (e) {
    process.stdout.write(JSON.stringify({ name: e.constructor.name, message: e.message }));
  }
  process.exit(0);`;

/** What `mlx-ort ...argv` ends with, run in a child process that must finish within 60 s. */
function cli(argv: string[]): { ok?: boolean; name?: string; message?: string } {
  const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', child], {
    cwd: pkg,
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, CLI_ARGV: JSON.stringify(argv) },
  });
  expect({ status: r.status, signal: r.signal }).toEqual({ status: 0, signal: null });
  return JSON.parse(r.stdout);
}

describe('mlx-ort opens only regular, size-checked files', () => {
  it('runs a regular model file', () => {
    expect(cli(['check', good])).toEqual({ ok: true, exitCode: 0 });
  });

  it('check refuses a device (/dev/zero) without reading it', () => {
    expect(cli(['check', '/dev/zero'])).toEqual({
      name: 'OnnxLoadError',
      message: '/dev/zero: cannot read the model file: it is a device, not a regular file',
    });
  });

  it('check and run refuse a FIFO as the model instead of waiting on it', () => {
    const f = fifo(join(dir, 'model-fifo.onnx'));
    const want = { name: 'OnnxLoadError', message: `${f}: cannot read the model file: it is a FIFO, not a regular file` };
    expect(cli(['check', f])).toEqual(want);
    expect(cli(['run', f, '--runs', '1'])).toEqual(want);
  });

  it('run --inputs refuses a FIFO input_0.pb instead of waiting on it', () => {
    const ds = join(dir, 'test_data_set_0');
    mkdirSync(ds);
    const f = fifo(join(ds, 'input_0.pb'));
    expect(cli(['run', good, '--runs', '1', '--inputs', ds])).toEqual({
      name: 'OnnxLoadError',
      message: `${f}: cannot read the tensor file: it is a FIFO, not a regular file`,
    });
  });

  it('a missing file, a folder and a missing --inputs folder get sentences', () => {
    const missing = join(dir, 'nope.onnx');
    expect(cli(['check', missing])).toEqual({ name: 'OnnxLoadError', message: `${missing}: cannot read the model file: no such file` });
    expect(cli(['check', dir])).toEqual({
      name: 'OnnxLoadError',
      message: `${dir}: cannot read the model file: it is a directory, not a regular file`,
    });
    const noDs = join(dir, 'no_data_set');
    expect(cli(['run', good, '--runs', '1', '--inputs', noDs])).toEqual({ name: 'OnnxLoadError', message: `${noDs}: no such folder` });
  });

  it("refuses a model over protobuf's 2 GiB and an input file over 1 GiB before reading them", () => {
    const big = sparse(join(dir, 'big.onnx'), 2 ** 31 + 1);
    expect(cli(['check', big])).toEqual({
      name: 'OnnxLoadError',
      message: `${big}: cannot read the model file: it holds ${2 ** 31 + 1} bytes, over the limit of ${2 ** 31} bytes (2 GiB); larger weights go in external data files`,
    });
    const ds = join(dir, 'test_data_set_1');
    mkdirSync(ds);
    const input = sparse(join(ds, 'input_0.pb'), 2 ** 30 + 1);
    expect(cli(['run', good, '--runs', '1', '--inputs', ds])).toEqual({
      name: 'OnnxLoadError',
      message: `${input}: cannot read the tensor file: it holds ${2 ** 30 + 1} bytes, over the limit of ${2 ** 30} bytes (1 GiB)`,
    });
  });
});

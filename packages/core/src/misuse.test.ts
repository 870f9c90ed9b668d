// Misuse of @mlx/core that used to kill the process: arrays larger than memory (zeros of 16 TiB,
// ones of 32 GiB: MLX wrote into the null buffer of a failed allocation, SIGSEGV), convolutions
// with groups 0 (SIGFPE), take with an index far past the array (an out-of-bounds read, SIGSEGV),
// asStrided past the end of its buffer (reads what lies beyond), and int32 floorDivide of INT_MIN
// by -1 (SIGFPE on x86). Each case runs in a child process, since before the fix each killed the
// process that ran it.
import { spawnSync } from 'node:child_process';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * What `expr` (an expression over `mx`) gives in a child process: its evaluated value as a list,
 * (int64 values as '<digits>n'), or the class, code and message of what it threw. `kb` sets an address-space limit (`ulimit -v`)
 * so that an allocation larger than memory fails the same on every machine; --jitless keeps tsx's
 * WebAssembly lexer from reserving gigabytes of it.
 */
function outcome(expr: string, kb = 8_000_000): { value?: unknown; name?: string; code?: string; message?: string } {
  const code = `
    import * as mx from './src/index.ts';
    let out;
    try {
      const r = ${expr};
      mx.evaluate(r);
      out = { value: r.toList() };
    } catch (e) {
      out = { name: e.constructor.name, code: e.code, message: e.message };
    }
    process.stdout.write(JSON.stringify(out, (_k, v) => (typeof v === 'bigint' ? String(v) + 'n' : v)));`;
  const r = spawnSync(
    'bash',
    ['-c', `ulimit -v ${kb} && exec "$0" --jitless --conditions=source --import tsx --input-type=module -e "$1"`, process.execPath, code],
    { cwd: pkg, encoding: 'utf8', timeout: 60_000 },
  );
  expect({ status: r.status, signal: r.signal }, r.stderr).toEqual({ status: 0, signal: null });
  return JSON.parse(r.stdout);
}

describe('allocations larger than memory are MlxErrors with code ERR_MLX_ALLOCATION', () => {
  it('zeros of 16 TiB', () => {
    expect(outcome("mx.zeros([2 ** 21, 2 ** 21], 'float32')")).toEqual({
      name: 'MlxError',
      code: 'ERR_MLX_ALLOCATION',
      message: 'mlx_eval: [malloc] Unable to allocate 17592186044416 bytes.',
    });
  });
  it('ones of 32 GiB', () => {
    expect(outcome("mx.ones([8, 2 ** 30], 'float32')")).toMatchObject({ name: 'MlxError', code: 'ERR_MLX_ALLOCATION' });
  });
  it('the process goes on: a small array after a failed large one', () => {
    expect(
      outcome('(() => { try { mx.evaluate(mx.ones([8, 2 ** 30])); } catch { /* expected */ } return mx.add(mx.ones([2]), 1); })()'),
    ).toEqual({ value: [2, 2] });
  });
});

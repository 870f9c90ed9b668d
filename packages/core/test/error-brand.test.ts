// MlxError and MlxLibraryNotFoundError are recognised across copies of @mlx/core and @mlx/sys (a
// second instance of the module, loaded again through a query string, stands for the other copy).
import { MlxLibraryNotFoundError } from '@mlx/sys';
import { describe, expect, it } from 'vitest';
import { MlxError } from '../src/native.js';

const otherCore = (await import(/* @vite-ignore */ `../src/native.ts?copy=${Date.now()}`)) as typeof import('../src/native.js');
const sysEntry = new URL('../../sys/src/index.ts', import.meta.url).href;
const otherSys = (await import(/* @vite-ignore */ `${sysEntry}?copy=${Date.now()}`)) as typeof import('@mlx/sys');

describe('error brands', () => {
  it('the second instances are separate copies', () => {
    expect(otherCore.MlxError).not.toBe(MlxError);
    expect(otherSys.MlxLibraryNotFoundError).not.toBe(MlxLibraryNotFoundError);
  });

  it('MlxError.is and instanceof recognise another copy’s MlxError', () => {
    const e = new otherCore.MlxError('shapes do not match', 'mlx_matmul');
    expect(MlxError.is(e)).toBe(true);
    expect(e instanceof MlxError).toBe(true);
    expect(e.code).toBe('ERR_MLX');
    expect(MlxError.is(new Error('mlx_matmul: shapes do not match'))).toBe(false);
    expect(MlxError.is({ name: 'MlxError', code: 'ERR_MLX' })).toBe(false);
  });

  it('MlxLibraryNotFoundError.is and instanceof recognise another copy’s', () => {
    const e = new otherSys.MlxLibraryNotFoundError([{ path: '/x/libmlxc.so', why: 'MLX_C_LIBRARY', error: 'no such file' }]);
    expect(MlxLibraryNotFoundError.is(e)).toBe(true);
    expect(e instanceof MlxLibraryNotFoundError).toBe(true);
    expect(e.code).toBe('ERR_MLX_LIBRARY_NOT_FOUND');
    expect(e instanceof MlxError).toBe(false);
    expect(MlxLibraryNotFoundError.is(new Error('could not load'))).toBe(false);
  });
});

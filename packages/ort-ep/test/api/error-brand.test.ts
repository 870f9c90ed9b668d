// Errors are recognised across copies of the package: an ES module and a CommonJS instance, or two
// installed versions, each have their own classes, so a plain prototype check fails across them.
// A second instance of errors.ts (a query string makes Vite load the module again) stands for the
// other copy.
import { describe, expect, it } from 'vitest';
import * as errors from '../../src/errors.js';
import {
  InvalidFeedError,
  NodeExecutionError,
  OnnxLoadError,
  OrtMlxError,
  RefusedNodeError,
  RuntimeTypeRefusal,
} from '../../src/errors.js';

const other = (await import(/* @vite-ignore */ `../../src/errors.ts?copy=${Date.now()}`)) as typeof errors;

describe('error brand', () => {
  it('the second instance is a separate copy (its classes are not ours)', () => {
    expect(other.InvalidFeedError).not.toBe(InvalidFeedError);
    expect(Object.getPrototypeOf(new other.InvalidFeedError('x'))).not.toBe(InvalidFeedError.prototype);
  });

  it('is() and instanceof recognise another copy’s errors, by class and by base class', () => {
    const e = new other.InvalidFeedError('bad feed');
    expect(InvalidFeedError.is(e)).toBe(true);
    expect(OrtMlxError.is(e)).toBe(true);
    expect(e instanceof InvalidFeedError).toBe(true);
    expect(e instanceof OrtMlxError).toBe(true);
    expect(e instanceof Error).toBe(true);
    expect(NodeExecutionError.is(e)).toBe(false);
    expect(e instanceof OnnxLoadError).toBe(false);
  });

  it('a subclass two levels down carries every code above it', () => {
    const e = new other.RuntimeTypeRefusal('m', 'n', 'Cast', {}, 'string input', new Error('x'));
    expect(e.code).toBe('ERR_MLX_ORT_RUNTIME_TYPE_REFUSAL');
    expect(RuntimeTypeRefusal.is(e)).toBe(true);
    expect(NodeExecutionError.is(e)).toBe(true);
    expect(OrtMlxError.is(e)).toBe(true);
    expect(InvalidFeedError.is(e)).toBe(false);
  });

  it('RefusedNodeError is in the hierarchy', () => {
    const e = new RefusedNodeError('blocksize 0 must be a positive int32');
    expect(e).toBeInstanceOf(OrtMlxError);
    expect(e.code).toBe('ERR_MLX_ORT_REFUSED_NODE');
    expect(e.name).toBe('RefusedNodeError');
  });

  it('every class has its own code, and codes are unique', () => {
    const classes = Object.values(errors).filter(
      (v): v is typeof OrtMlxError => typeof v === 'function' && (v === OrtMlxError || v.prototype instanceof OrtMlxError),
    );
    expect(classes.length).toBeGreaterThanOrEqual(10);
    const codes = classes.map((c) => (Object.hasOwn(c, 'code') ? c.code : `${c.name} has none`));
    expect(new Set(codes).size).toBe(classes.length);
    for (const c of codes) expect(c).toMatch(/^ERR_MLX_ORT(_[A-Z_]+)?$/);
  });

  it('plain errors, look-alikes and non-objects are not recognised', () => {
    expect(OrtMlxError.is(new Error('x'))).toBe(false);
    expect(OrtMlxError.is({ name: 'InvalidFeedError', code: 'ERR_MLX_ORT_INVALID_FEED' })).toBe(false);
    expect(OrtMlxError.is(null)).toBe(false);
    expect(OrtMlxError.is('InvalidFeedError')).toBe(false);
    expect((undefined as unknown) instanceof OrtMlxError).toBe(false);
  });

  it('a user subclass without a code of its own is still its parent’s kind', () => {
    class MyFeedError extends InvalidFeedError {}
    const e = new MyFeedError('x');
    expect(e.code).toBe('ERR_MLX_ORT_INVALID_FEED');
    expect(other.InvalidFeedError.is(e)).toBe(true);
  });
});

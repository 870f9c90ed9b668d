// Lifetimes: dispose(), `using`, scope()/keep()/persist(), dispose(value), no growth over many
// arrays, and the FinalizationRegistry as a safety net (in a child process with --expose-gc).
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import * as mx from './index.js';
import { fn } from './native.js';

const MB = 1 << 20;
/** An evaluated float32 array of `bytes` bytes, so it holds memory that memory.active() sees. */
const block = (bytes: number, v = 1) => mx.full([bytes / 4], v).eval();

/** Counts handles made and freed while `body` runs (Array.fromHandle vs mlx_array_free). */
function countHandles(body: () => void): { made: number; freed: number } {
  const counts = { made: 0, freed: 0 };
  const fromHandle = mx.Array.fromHandle;
  const free = fn.mlx_array_free;
  // Plain wrappers rather than vi.spyOn: a spy would record (and keep) the arguments of every call.
  mx.Array.fromHandle = (h) => {
    counts.made++;
    return fromHandle.call(mx.Array, h);
  };
  fn.mlx_array_free = (h) => {
    counts.freed++;
    return free(h);
  };
  // dispose() batches its frees (mlxc_array_free_many): count each batched handle.
  const freeMany = fn.mlxc_array_free_many;
  fn.mlxc_array_free_many = (ctxs, n) => {
    counts.freed += Number(n);
    return freeMany(ctxs, n);
  };
  try {
    mx.flushDisposed();
    body();
    mx.flushDisposed();
    return counts;
  } finally {
    mx.Array.fromHandle = fromHandle;
    fn.mlx_array_free = free;
    fn.mlxc_array_free_many = freeMany;
  }
}

afterEach(() => {
  mx.memory.clearCache();
});

describe('dispose and using', () => {
  it('dispose() frees the memory at once and is idempotent', () => {
    const base = mx.memory.active();
    const a = block(MB);
    expect(mx.memory.active() - base).toBe(MB);
    expect(a.disposed).toBe(false);
    a.dispose();
    expect(a.disposed).toBe(true);
    expect(mx.memory.active()).toBe(base);
    a.dispose();
    expect(mx.memory.active()).toBe(base);
  });

  it('`using` frees at the end of the block', () => {
    const base = mx.memory.active();
    {
      using a = block(MB);
      using b = mx.add(a, 1).eval();
      expect(b.toTypedArray()[0]).toBe(2);
      expect(mx.memory.active() - base).toBe(2 * MB);
    }
    expect(mx.memory.active()).toBe(base);
  });

  it('a lazy result keeps its inputs alive after they are disposed', () => {
    const a = mx.array([1, 2, 3]);
    const b = mx.multiply(a, 10);
    a.dispose();
    expect(b.toList()).toEqual([10, 20, 30]);
    b.dispose();
  });

  it('dispose(value) frees arrays found in nested lists, objects and maps', () => {
    const base = mx.memory.active();
    const tree = { w: block(MB), list: [block(MB), [block(MB)]], m: new Map([['k', block(MB)]]), n: 3 };
    expect(mx.memory.active() - base).toBe(4 * MB);
    mx.dispose(tree);
    expect(mx.memory.active()).toBe(base);
    expect(tree.w.disposed && (tree.list[0] as mx.Array).disposed).toBe(true);
  });
});

describe('batched frees', () => {
  it('dispose() frees in batches, in far fewer native calls than arrays, and none is lost', () => {
    mx.flushDisposed();
    const freeMany = fn.mlxc_array_free_many;
    let calls = 0;
    let entries = 0;
    fn.mlxc_array_free_many = (ctxs, n) => {
      calls++;
      entries += Number(n);
      return freeMany(ctxs, n);
    };
    try {
      const base = mx.memory.active();
      for (let i = 0; i < 1000; i++) block(4096).dispose();
      // memory.active() frees the pending batch before it reads the figure.
      expect(mx.memory.active()).toBe(base);
      // block() frees one scalar temporary of its own per array.
      expect(entries).toBe(2000);
      expect(calls).toBeLessThanOrEqual(Math.ceil(2000 / 256) + 1);
      // A disposed array is unusable at once, before its batch is freed.
      const a = block(4096);
      a.dispose();
      expect(a.disposed).toBe(true);
      expect(() => a.shape).toThrow(/disposed/);
    } finally {
      fn.mlxc_array_free_many = freeMany;
    }
  });
});

describe('scope', () => {
  it('frees everything created inside except what it returns', () => {
    const base = mx.memory.active();
    const out = mx.scope(() => {
      const a = block(MB, 2);
      const b = block(MB, 3);
      const c = mx.multiply(a, b).eval();
      expect(mx.memory.active() - base).toBe(3 * MB);
      return c;
    });
    expect(mx.memory.active() - base).toBe(MB);
    expect(out.disposed).toBe(false);
    expect(mx.scope(() => mx.max(out).item())).toBe(6);
    out.dispose();
    expect(mx.memory.active()).toBe(base);
  });

  it('keeps arrays returned inside lists and plain objects', () => {
    const base = mx.memory.active();
    const r = mx.scope(() => {
      block(MB);
      return { x: block(MB), ys: [block(MB), 5] };
    });
    expect(mx.memory.active() - base).toBe(2 * MB);
    mx.dispose(r);
    expect(mx.memory.active()).toBe(base);
  });

  it('frees temporaries of ops (scalar arguments) and intermediates', () => {
    const { made, freed } = countHandles(() => {
      const r = mx.scope(() => mx.sum(mx.add(mx.multiply(mx.arange(10), 2), 1)));
      expect(r.item()).toBe(100);
      r.dispose();
    });
    expect(made).toBeGreaterThan(4);
    expect(freed).toBe(made);
  });

  it('nested scopes: returned arrays move to the enclosing scope and die with it', () => {
    const base = mx.memory.active();
    let inner!: mx.Array;
    const outer = mx.scope(() => {
      inner = mx.scope(() => {
        block(MB);
        return block(MB);
      });
      expect(mx.memory.active() - base).toBe(MB);
      expect(inner.disposed).toBe(false);
      return block(MB);
    });
    // `inner` was not returned by the outer scope.
    expect(inner.disposed).toBe(true);
    expect(outer.disposed).toBe(false);
    expect(mx.memory.active() - base).toBe(MB);
    outer.dispose();
  });

  it('keep() lifts an array one scope up; persist() out of every scope', () => {
    const base = mx.memory.active();
    let kept!: mx.Array;
    let persisted!: mx.Array;
    mx.scope(() => {
      mx.scope(() => {
        kept = mx.keep(block(MB));
        persisted = mx.persist(block(MB));
      });
      expect(kept.disposed).toBe(false);
      expect(persisted.disposed).toBe(false);
    });
    expect(kept.disposed).toBe(true);
    expect(persisted.disposed).toBe(false);
    expect(mx.memory.active() - base).toBe(MB);
    persisted.dispose();
    expect(mx.memory.active()).toBe(base);
  });

  it('frees everything when the body throws, and rethrows', () => {
    const base = mx.memory.active();
    const boom = new Error('boom');
    expect(() =>
      mx.scope(() => {
        block(MB);
        block(MB);
        throw boom;
      }),
    ).toThrow(boom);
    expect(mx.memory.active()).toBe(base);
    // An MlxError inside a scope behaves the same.
    expect(() => mx.scope(() => mx.matmul(block(MB), mx.zeros([3, 3])))).toThrow(mx.MlxError);
    expect(mx.memory.active()).toBe(base);
  });

  it('rejects an async body (and frees what it made)', () => {
    const base = mx.memory.active();
    expect(() => mx.scope((async () => block(MB)) as never)).toThrow(/synchronous/);
    expect(mx.memory.active()).toBe(base);
  });

  it('disposing inside a scope is fine', () => {
    const base = mx.memory.active();
    const r = mx.scope(() => {
      const a = block(MB);
      a.dispose();
      return block(MB, 4);
    });
    expect(mx.memory.active() - base).toBe(MB);
    r.dispose();
  });
});

describe('no growth', () => {
  it('100k arrays created and freed: memory and live handles return to the baseline', () => {
    mx.evaluate(mx.zeros([1])); // warm up the allocator and the default stream
    const base = mx.memory.active();
    const data = new Float32Array(16).fill(0.5);
    const counts = countHandles(() => {
      for (let i = 0; i < 50_000; i++) {
        using a = mx.array(data);
        a.eval();
      }
      for (let i = 0; i < 25_000; i++) {
        mx.scope(() => {
          mx.add(mx.array(data), 1).eval();
        });
      }
      for (let i = 0; i < 25_000; i++) {
        const a = mx.array(data);
        const b = mx.sqrt(a);
        b.eval();
        mx.dispose([a, b]);
      }
      expect(mx.memory.active()).toBe(base);
    });
    expect(counts.made).toBeGreaterThanOrEqual(100_000);
    expect(counts.freed).toBe(counts.made);
    expect(mx.memory.active()).toBe(base);
  });
});

describe('collect', () => {
  it('gathers the arrays of several synchronous steps into one set, outside every scope', () => {
    const run = new Set<mx.Disposable>();
    const outer = mx.scope(() => {
      const a = mx.collect(run, () => mx.add(mx.full([4], 1), 2));
      // A scope inside a collecting step returns its result into the set.
      const b = mx.collect(run, () => mx.scope(() => mx.multiply(a, mx.full([4], 3))));
      // The enclosing scope ends here; what the steps made survives it.
      return [a, b];
    });
    const [a, b] = outer as mx.Array[];
    expect(a.disposed || b.disposed).toBe(false);
    // a, b, the two fulls and the scalar 2 made for add: each made once, each in the set.
    expect(run.has(a) && run.has(b)).toBe(true);
    expect(b.toList()).toEqual([9, 9, 9, 9]);
    const persisted = mx.collect(run, () => mx.persist(mx.full([1], 5)));
    expect(run.has(persisted)).toBe(false);
    mx.dispose([...run]);
    expect(a.disposed && b.disposed).toBe(true);
    expect(persisted.disposed).toBe(false);
    persisted.dispose();
  });
});

describe('FinalizationRegistry', () => {
  it('frees arrays the program forgot, once they are collected', () => {
    const core = fileURLToPath(new URL('./index.ts', import.meta.url));
    const repo = fileURLToPath(new URL('../../..', import.meta.url));
    const code = `
      const mx = await import(${JSON.stringify(core)});
      const MB = 1 << 20;
      const base = mx.memory.active();
      (() => { for (let i = 0; i < 64; i++) mx.full([MB / 4], i).eval(); })();
      const held = mx.memory.active() - base;
      const kept = mx.full([MB / 4], 1).eval();
      for (let i = 0; i < 20 && mx.memory.active() - base > MB; i++) {
        globalThis.gc();
        await new Promise((r) => setTimeout(r, 20));
      }
      console.log(JSON.stringify({ held, after: mx.memory.active() - base, keptAlive: !kept.disposed && mx.sum(kept).item() }));`;
    const r = spawnSync(process.execPath, ['--expose-gc', '--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code], {
      cwd: repo,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(out.held).toBe(64 * MB);
    // Only the array still referenced remains.
    expect(out.after).toBe(MB);
    expect(out.keptAlive).toBe(MB / 4);
  });
});

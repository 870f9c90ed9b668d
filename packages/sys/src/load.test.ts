// Finding and loading the native library.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  cudaHeadersHome,
  fallbackWarning,
  functionCount,
  isMlxCLoaded,
  libraryCandidates,
  loadMlxC,
  mappedLibrary,
  platformPackagesForHost,
  prototypes,
  repoLibraryPath,
} from './index.js';

const repo = fileURLToPath(new URL('../../..', import.meta.url));
const indexTs = fileURLToPath(new URL('./index.ts', import.meta.url));

/** Loads the library in a fresh process (loading is cached per process) and reports what happened. */
function loadInChild(env: Record<string, string | undefined>) {
  const code = `
    const m = await import(${JSON.stringify(indexTs)});
    try { const c = m.loadMlxC(); console.log(JSON.stringify({ ok: true, path: c.path })); }
    catch (e) { console.log(JSON.stringify({ ok: false, name: e.name, message: e.message, attempts: e.attempts })); }`;
  const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    cwd: repo,
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, ...env },
  });
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout.trim().split('\n').at(-1)!);
}

describe('loadMlxC', () => {
  it('declares each function on its first use, not at load', () => {
    const code = `
      const { loadMlxC } = await import(${JSON.stringify(indexTs)});
      const c = loadMlxC();
      const stub = c.fn.mlx_array_free;
      const declared = c.resolve('mlx_array_free');
      const t = performance.now();
      void c.missing;
      console.log(JSON.stringify({ replaced: stub !== declared && c.fn.mlx_array_free === declared, again: c.resolve('mlx_array_free') === declared, allMs: performance.now() - t }));`;
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      cwd: repo,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.status, r.stderr).toBe(0);
    const got = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(got).toMatchObject({ replaced: true, again: true });
    // Declaring the other 521 one by one stays cheap (an accessor per function cost ~0.5 s).
    expect(got.allMs).toBeLessThan(250);
  });

  it('resolves every function of the spec in the built library', () => {
    const c = loadMlxC();
    expect(c.missing).toEqual([]);
    expect(functionCount).toBe(prototypes.length);
    expect(functionCount).toBeGreaterThanOrEqual(300);
    for (const p of prototypes) {
      const name = /(\w+)\(/.exec(p)![1];
      expect(typeof (c.fn as unknown as Record<string, unknown>)[name], name).toBe('function');
    }
  });

  it('loads once and returns the same object', () => {
    expect(loadMlxC()).toBe(loadMlxC());
  });

  it("prefers this repository's build when MLX_C_LIBRARY is unset", () => {
    if (process.env.MLX_C_LIBRARY) return; // a deliberate override in the environment
    expect(existsSync(repoLibraryPath)).toBe(true);
    expect(loadMlxC().path).toBe(repoLibraryPath);
    expect(libraryCandidates()[0].path).toBe(repoLibraryPath);
  });

  it('lists MLX_C_LIBRARY first when set', () => {
    const saved = process.env.MLX_C_LIBRARY;
    process.env.MLX_C_LIBRARY = '/somewhere/libmlxc.so';
    try {
      expect(libraryCandidates()[0]).toEqual({ path: '/somewhere/libmlxc.so', why: 'MLX_C_LIBRARY' });
      expect(libraryCandidates()[1].path).toBe(repoLibraryPath);
    } finally {
      if (saved === undefined) delete process.env.MLX_C_LIBRARY;
      else process.env.MLX_C_LIBRARY = saved;
    }
  });

  it('fails with the list of what was tried when MLX_C_LIBRARY names a missing file', () => {
    const r = loadInChild({ MLX_C_LIBRARY: '/nonexistent/dir/libmlxc.so' });
    expect(r.ok).toBe(false);
    expect(r.name).toBe('MlxLibraryNotFoundError');
    expect(r.message).toContain('Tried:');
    expect(r.message).toContain('/nonexistent/dir/libmlxc.so (MLX_C_LIBRARY): no such file');
    expect(r.message).toContain('MLX_C_LIBRARY');
    expect(r.attempts).toEqual([{ path: '/nonexistent/dir/libmlxc.so', why: 'MLX_C_LIBRARY', error: 'no such file' }]);
  });

  it('fails with the loader message when MLX_C_LIBRARY names a file that is not a library', () => {
    const notALibrary = fileURLToPath(new URL('./index.ts', import.meta.url));
    const r = loadInChild({ MLX_C_LIBRARY: notALibrary });
    expect(r.ok).toBe(false);
    expect(r.name).toBe('MlxLibraryNotFoundError');
    expect(r.attempts).toHaveLength(1);
    expect(r.attempts[0].path).toBe(notALibrary);
    expect(r.attempts[0].error.length).toBeGreaterThan(0);
    expect(r.message).toContain(`${notALibrary} (MLX_C_LIBRARY)`);
  });

  it('loads from MLX_C_LIBRARY when it names a real library', () => {
    const r = loadInChild({ MLX_C_LIBRARY: repoLibraryPath });
    expect(r).toEqual({ ok: true, path: repoLibraryPath });
  });
});

describe('MLX_SYS_COUNT_CALLS', () => {
  it('counts native calls per function, sync and async, only when set', () => {
    const code = `
      const sys = await import(${JSON.stringify(indexTs)});
      const c = sys.loadMlxC();
      const before = sys.nativeCallCounts();
      const s = c.fn.mlx_string_new();
      c.fn.mlx_string_free(s);
      c.fn.mlx_string_free.async(c.fn.mlx_string_new(), () => {
        const n = sys.nativeCallCounts();
        console.log(JSON.stringify({ on: !!before, news: n?.get('mlx_string_new') ?? 0, frees: n?.get('mlx_string_free') ?? 0 }));
      });`;
    const run = (env: Record<string, string>) => {
      const r = spawnSync(process.execPath, ['--conditions=source', '--import', 'tsx', '--input-type=module', '-e', code], {
        env: { ...process.env, ...env },
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout.trim().split('\\n').at(-1)!);
    };
    expect(run({ MLX_SYS_COUNT_CALLS: '1' })).toEqual({ on: true, news: 2, frees: 2 });
    expect(run({ MLX_SYS_COUNT_CALLS: '0' })).toEqual({ on: false, news: 0, frees: 0 });
  });
});

describe('lazy loading', () => {
  it('importing @mlx/sys loads neither koffi nor the library', () => {
    const code = `
      const m = await import(${JSON.stringify(indexTs)});
      const maps = (await import('node:fs')).readFileSync('/proc/self/maps', 'utf8');
      console.log(JSON.stringify({ loaded: m.isMlxCLoaded(), koffi: /koffi/.test(maps), mlxc: /libmlxc/.test(maps) }));`;
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      cwd: repo,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout.trim().split('\n').at(-1)!)).toEqual({ loaded: false, koffi: false, mlxc: false });
    expect(isMlxCLoaded()).toBe(loadMlxC() !== undefined);
  });
});

describe('koffi', () => {
  it("loads koffi's native module without its entry's install-time tools (https, zlib, crypto)", () => {
    // koffi's entry script bundles the tools that download prebuilt binaries at install time, and
    // loading them costs a fresh process ~10 ms: the library load takes the native module itself.
    const code = `
      const m = await import(${JSON.stringify(indexTs)});
      const before = new Set(process.moduleLoadList);
      const c = m.loadMlxC();
      const added = process.moduleLoadList.filter((x) => !before.has(x) && /^NativeModule (https|zlib|crypto|tls|http)$/.test(x));
      const s = c.fn.mlx_string_new_data('koffi');
      const text = c.fn.mlx_string_data(s);
      c.fn.mlx_string_free(s);
      const { createRequire } = await import('node:module');
      const own = createRequire(${JSON.stringify(indexTs)})('koffi/package.json').version;
      console.log(JSON.stringify({ added, text, version: c.koffi.version === own, struct: typeof c.koffi.struct, decode: typeof c.koffi.decode }));`;
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      cwd: repo,
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout.trim().split('\n').at(-1)!)).toEqual({
      added: [],
      text: 'koffi',
      version: true,
      struct: 'function',
      decode: 'function',
    });
  });
});

describe('platform packages', () => {
  // In the workspace every platform package resolves (pnpm links them); their version check runs
  // on an installed tree in tools/consumer-test.mjs.
  function candidates(env: Record<string, string>) {
    const code = `
      const m = await import(${JSON.stringify(indexTs)});
      try { console.log(JSON.stringify({ ok: true, c: m.libraryCandidates() })); }
      catch (e) { console.log(JSON.stringify({ ok: false, message: e.message })); }`;
    const clean = { ...process.env };
    delete clean.MLX_C_LIBRARY;
    delete clean.MLX_LIBMLX;
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      cwd: repo,
      encoding: 'utf8',
      timeout: 60_000,
      env: { ...clean, ...env },
    });
    expect(r.status, r.stderr).toBe(0);
    return JSON.parse(r.stdout.trim().split('\n').at(-1)!);
  }
  const platformWhys = (c: { why: string }[]) => c.map((x) => x.why).filter((w) => w.startsWith('platform package'));

  it('come after the repository build (in a checkout its own build wins), then the system', () => {
    const host = platformPackagesForHost();
    expect(host.length).toBeGreaterThan(0); // this machine has a prebuilt package
    const { c } = candidates({});
    expect(c[0]).toEqual({ path: repoLibraryPath, why: 'built by this repository (tools/dev setup)' });
    expect(platformWhys(c)).toEqual(host.map((p) => `platform package ${p.name}`));
    expect(c.at(-1).why).toBe('the system loader path');
    for (const x of c.filter((x: { why: string }) => x.why.startsWith('platform package')))
      expect(x.path).toMatch(/\/lib\/libmlxc\.(so|dylib)$/);
  });

  it('MLX_BACKEND narrows them; cuda and metal are authoritative; a wrong value is refused', () => {
    const host = platformPackagesForHost();
    for (const backend of new Set(host.map((p) => p.backend))) {
      const { c } = candidates({ MLX_BACKEND: backend });
      expect(platformWhys(c)).toEqual(host.filter((p) => p.backend === backend).map((p) => `platform package ${p.name}`));
      if (backend === 'cpu') expect(c.at(-1).why).toBe('the system loader path');
      else expect(c.at(-1).why).toMatch(/^platform package /);
    }
    // MLX_LIBMLX (the GPU set-up of tools/dev) does not narrow the list.
    expect(platformWhys(candidates({ MLX_BACKEND: 'cuda', MLX_LIBMLX: '/x/libmlx.so' }).c)).toEqual(
      host.map((p) => `platform package ${p.name}`),
    );
    expect(candidates({ MLX_BACKEND: 'tpu' })).toEqual({
      ok: false,
      message: expect.stringContaining("MLX_BACKEND must be auto, cpu, cuda or metal, got 'tpu'"),
    });
  });

  it('the error names the platform package to install and MLX_C_LIBRARY', () => {
    const r = loadInChild({ MLX_C_LIBRARY: '/nonexistent/dir/libmlxc.so' });
    const host = platformPackagesForHost().filter((p) => !p.optIn);
    expect(host.length).toBeGreaterThan(0);
    for (const p of host) expect(r.message).toContain(`npm install ${p.name}`);
    expect(r.message).toMatch(/or set MLX_C_LIBRARY to the path of a libmlxc/);
  });
});

describe("CUDA headers for MLX's run-time compiler", () => {
  // A pip NVIDIA folder: nvidia/cu13/{lib,include}; the loader searches nvidia and nvidia/*/lib.
  const files = new Set(['/site/nvidia/cu13/include/cuda_runtime.h', '/site/nvidia/cu13/lib/libnvrtc.so.13']);
  const has = (p: string) => files.has(p);
  const dirs = ['/site/nvidia', '/site/nvidia/cu13/lib', '/site/nvidia/cudnn/lib'];

  it('points CUDA_HOME at the pip folder whose include/ has the runtime headers', () => {
    expect(cudaHeadersHome(dirs, {}, has)).toBe('/site/nvidia/cu13');
  });

  it('leaves CUDA_HOME, CUDA_PATH and a toolkit in /usr/local/cuda alone', () => {
    expect(cudaHeadersHome(dirs, { CUDA_HOME: '/opt/cuda' }, has)).toBeUndefined();
    expect(cudaHeadersHome(dirs, { CUDA_PATH: '/opt/cuda' }, has)).toBeUndefined();
    expect(cudaHeadersHome(dirs, {}, (p) => has(p) || p === '/usr/local/cuda/include/cuda_runtime.h')).toBeUndefined();
  });

  it('sets nothing where no searched folder has the headers', () => {
    expect(cudaHeadersHome(['/site/nvidia/cudnn/lib'], {}, has)).toBeUndefined();
  });
});

describe('one libmlxc per process', () => {
  it('reads the library a process has mapped from its memory map', () => {
    const maps = [
      '7f00-7f10 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6',
      '7f20-7f30 r-xp 00001000 08:01 456 /opt/my libs/node_modules/@mlx/sys-linux-x64-gnu/lib/libmlxc.so',
      '7f40-7f50 r--p 00000000 08:01 789 /tmp/libmlxc.so.bak',
      '7f60-7f70 rw-p 00000000 00:00 0 ',
    ].join('\n');
    expect(mappedLibrary(maps)).toBe('/opt/my libs/node_modules/@mlx/sys-linux-x64-gnu/lib/libmlxc.so');
    expect(mappedLibrary(maps.split('\n')[0])).toBeUndefined();
  });

  it.skipIf(process.platform !== 'linux')('a worker thread takes the library the main thread loaded, whatever its own search finds', () => {
    // The worker's own search is told to use a library that does not exist (MLX_C_LIBRARY is
    // authoritative): it must load the one already in the process instead of failing or loading
    // a second MLX (the CUDA package's beside the CPU one's gave wrong results in workers).
    const dir = mkdtempSync(join(tmpdir(), 'mlx-sys-worker-'));
    const worker = join(dir, 'worker.mjs');
    // A worker runs the TypeScript sources through tsx's loader, registered in the worker itself.
    writeFileSync(
      worker,
      `import { parentPort } from 'node:worker_threads';
       const { register } = await import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))});
       register();
       const m = await import(${JSON.stringify(indexTs)});
       try { parentPort.postMessage({ path: m.loadMlxC().path }); } catch (e) { parentPort.postMessage({ error: e.message.split('\\n')[0] }); }`,
    );
    const main = join(dir, 'main.mts');
    writeFileSync(
      main,
      `import { Worker } from 'node:worker_threads';
       const m = await import(${JSON.stringify(indexTs)});
       const path = m.loadMlxC().path;
       const w = new Worker(${JSON.stringify(worker)}, { env: { ...process.env, MLX_C_LIBRARY: '/nonexistent/libmlxc.so' } });
       w.once('message', (r) => { console.log(JSON.stringify({ main: path, worker: r })); void w.terminate(); });`,
    );
    const r = spawnSync(process.execPath, ['--import', 'tsx', main], { cwd: repo, encoding: 'utf8', timeout: 60_000 });
    rmSync(dir, { recursive: true, force: true });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    expect(out.worker).toEqual({ path: out.main });
  });
});

describe('a repository build that does not load', () => {
  const platform = { path: '/x/node_modules/@mlx/sys-linux-x64-gnu/lib/libmlxc.so', why: 'platform package @mlx/sys-linux-x64-gnu' };
  it('is named in a warning when another library is loaded in its place', () => {
    const attempts = [
      { path: repoLibraryPath, why: 'built by this repository (tools/dev setup)', error: 'undefined symbol: _ZTIN3mlx4core10ExpandDimsE' },
    ];
    const w = fallbackWarning(attempts, platform);
    expect(w).toContain(repoLibraryPath);
    expect(w).toContain('undefined symbol: _ZTIN3mlx4core10ExpandDimsE');
    expect(w).toContain(platform.path);
  });
  it('is no warning when it is absent, loaded, or never tried', () => {
    expect(
      fallbackWarning([{ path: repoLibraryPath, why: 'built by this repository (tools/dev setup)', error: 'no such file' }], platform),
    ).toBeUndefined();
    expect(fallbackWarning([], { path: repoLibraryPath, why: 'built by this repository (tools/dev setup)' })).toBeUndefined();
    expect(fallbackWarning([{ path: '/other/libmlxc.so', why: 'MLX_C_LIBRARY', error: 'bad ELF' }], platform)).toBeUndefined();
  });
});

// Registration of the 'mlx' backend, the one module of this package with an effect at import
// (package.json's sideEffects names it). An install can hold several copies of
// onnxruntime-common (this package's peer, the exact version onnxruntime-node and onnxruntime-web
// each pin), and each copy ships a CommonJS and an ESM module instance with its own backend
// registry. One backend object is registered into every instance that can be found (see
// registerEverywhere); registerMlxBackend(ort) covers bundled copies.
//
// Importing this module loads nothing native: the backend's init() loads MLX, the way
// onnxruntime-web starts its wasm, so `executionProviders: ['mlx', 'cpu']` falls back to the next
// provider, with onnxruntime's own warning, when the native library is missing.
//
// Priority: -10. onnxruntime-common picks a backend by priority only when a session names no
// execution providers; a low priority means importing this package never changes which backend
// existing code gets. `executionProviders: ['mlx']` selects it explicitly.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Backend } from 'onnxruntime-common';
import * as ortEsm from 'onnxruntime-common';
import { packageRequirers, requireAt, selfUrl, type Requirer } from '../runtime/packages.js';
import { createMlxBackend, type OrtModule } from './handler.js';
import { MLX_BACKEND_NAME, MLX_BACKEND_PRIORITY } from './options.js';

// One backend object per onnxruntime-common instance, made with that instance's Tensor class:
// onnxruntime-common rebuilds a result that is not `instanceof` its own Tensor from its `data`,
// which a 'gpu-buffer' tensor does not have on the host.

/** Names users write for 'mlx' by mistake: registered with a backend whose init() says what to write. */
const misspellings = ['MLX', 'Mlx', 'mlx-gpu', 'mlx-cpu', 'mlx_gpu', 'mlx_cpu', 'mlxep', 'mlx-ep'];
const hintBackend: Backend = {
  async init(name?: string) {
    throw new Error(
      `'${name}' is not an execution provider name: write 'mlx', with options as mlx({ device: 'gpu' }) or { name: 'mlx', device: 'gpu' }`,
    );
  },
  async createInferenceSessionHandler() {
    throw new Error("the MLX backend is named 'mlx'");
  },
};

const registered = new WeakMap<object, Backend>();

/** Where the backend went: one entry per onnxruntime-common module instance. */
export interface MlxRegistration {
  /** The folder of that onnxruntime-common copy ('' for a module object passed to registerMlxBackend). */
  path: string;
  version: string;
  format: 'esm' | 'cjs' | 'module';
}
const registrations: MlxRegistration[] = [];

/**
 * Registers the 'mlx' backend with an onnxruntime-common module object (a bundled copy, say).
 * Idempotent: an instance keeps the backend object it got first (two module objects of one
 * instance share it).
 */
export function registerMlxBackend(ort: OrtModule, where: MlxRegistration = { path: '', version: '', format: 'module' }): void {
  // Keyed by registerBackend itself: two module objects of one instance share it.
  const key = ort.registerBackend;
  if (registered.has(key)) return;
  const backend = createMlxBackend(ort);
  ort.registerBackend(MLX_BACKEND_NAME, backend, MLX_BACKEND_PRIORITY);
  for (const n of misspellings) {
    try {
      ort.registerBackend(n, hintBackend, MLX_BACKEND_PRIORITY);
    } catch {
      // the name is taken (another package's backend, or another copy of this one's hint)
    }
  }
  registered.set(key, backend);
  registrations.push(where);
}

/** The onnxruntime-common instances the backend is registered with. */
export function mlxRegistrations(): readonly MlxRegistration[] {
  return registrations;
}

/** The folder of the package that holds `file` and is named `name`. */
function packageRoot(file: string, name: string): string | undefined {
  for (let d = dirname(file); d !== dirname(d); d = dirname(d)) {
    try {
      const p = JSON.parse(readFileSync(join(d, 'package.json'), 'utf8')) as { name?: string };
      if (p.name === name) return d;
    } catch {
      // no package.json here
    }
  }
  return undefined;
}

/** The file an `exports` entry gives for `import` under Node (conditions node, import, default). */
function importTarget(exp: unknown): string | undefined {
  if (typeof exp === 'string') return exp;
  if (Array.isArray(exp)) return importTarget(exp[0]);
  if (!exp || typeof exp !== 'object') return undefined;
  const o = exp as Record<string, unknown>;
  if ('.' in o) return importTarget(o['.']);
  for (const c of ['node', 'import', 'default']) if (c in o) return importTarget(o[c]);
  return undefined;
}

/**
 * Registers the backend into every onnxruntime-common copy reachable from this package and from the
 * working directory, directly or through onnxruntime-node and onnxruntime-web: each copy's CommonJS
 * instance (require) and ESM instance (require of the ES module, Node 20.19+, so that this stays
 * synchronous and importing this package registers everything before the next line runs).
 */
function registerEverywhere(): void {
  let own = '';
  try {
    own = packageRoot(requireAt(selfUrl).resolve('onnxruntime-common'), 'onnxruntime-common') ?? '';
  } catch {
    // only the ES module is reachable
  }
  // Another copy of this package (another version, installed beside this one) may hold 'mlx' in a
  // registry already: onnxruntime-common refuses a second backend object at the same priority,
  // and the first one stays. Importing never throws for that.
  try {
    registerMlxBackend(ortEsm as unknown as OrtModule, { path: own, version: ortEsm.env.versions.common ?? '', format: 'esm' });
  } catch {
    // kept the other copy's backend
  }
  const roots = new Set<string>();
  // The places optional packages are looked for (runtime/packages.ts), and onnxruntime-node's and
  // onnxruntime-web's own copies as seen from each.
  for (const req of packageRequirers()) {
    const froms: Requirer[] = [req];
    for (const host of ['onnxruntime-node', 'onnxruntime-web']) {
      try {
        froms.push(requireAt(req.resolve(host)));
      } catch {
        // not installed there
      }
    }
    for (const r of froms) {
      try {
        const root = packageRoot(r.resolve('onnxruntime-common'), 'onnxruntime-common');
        if (root) roots.add(root);
      } catch {
        // no onnxruntime-common reachable from there
      }
    }
  }
  for (const root of roots) {
    let manifest: { version?: string; main?: string; exports?: unknown };
    try {
      manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
    } catch {
      continue;
    }
    const version = manifest.version ?? '';
    const req = requireAt(join(root, 'package.json'));
    const files: [string, 'cjs' | 'esm'][] = [];
    try {
      files.push([req.resolve(root), 'cjs']);
    } catch {
      // no CommonJS entry
    }
    const esm = importTarget(manifest.exports);
    if (esm) files.push([join(root, esm), 'esm']);
    for (const [file, format] of files) {
      try {
        const m = req(file) as OrtModule;
        if (typeof m?.registerBackend === 'function') registerMlxBackend(m, { path: root, version, format });
      } catch {
        // an instance that does not load (require of ESM before Node 20.19), or one where another
        // copy of this package holds the name: skipped
      }
    }
  }
}

registerEverywhere();

// @mlx/sys: finds and loads the native library and declares its functions with koffi.
// Raw declarations only: no ownership, no defaults, no caching of MLX state.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { prototypes, type MlxCFunctions } from './generated/bindings.js';

export type { MlxCFunctions } from './generated/bindings.js';
export { prototypes, functionCount } from './generated/bindings.js';
export type { MlxHandle } from './types.js';

const require = createRequire(import.meta.url);
type Koffi = typeof import('koffi');
const koffi: Koffi = require('koffi');

/** mlx_dtype values, as in mlx-c. */
export const MlxDtype = {
  BOOL: 0, UINT8: 1, UINT16: 2, UINT32: 3, UINT64: 4, INT8: 5, INT16: 6, INT32: 7, INT64: 8,
  FLOAT16: 9, FLOAT32: 10, FLOAT64: 11, BFLOAT16: 12, COMPLEX64: 13,
} as const;
export const MlxDeviceType = { CPU: 0, GPU: 1 } as const;
export const MlxCompileMode = { DISABLED: 0, NO_SIMPLIFY: 1, NO_FUSE: 2, ENABLED: 3 } as const;
export const MlxFftNorm = { BACKWARD: 0, ORTHO: 1, FORWARD: 2 } as const;

const handleNames = [
  'mlx_array', 'mlx_string', 'mlx_device', 'mlx_stream', 'mlx_vector_array', 'mlx_vector_vector_array',
  'mlx_vector_int', 'mlx_vector_string', 'mlx_closure', 'mlx_closure_value_and_grad', 'mlx_closure_custom',
  'mlx_closure_custom_jvp', 'mlx_closure_custom_vmap',
];

/** The koffi types the declarations use, for callers that register callbacks or decode memory. */
export interface MlxCTypes {
  handles: Record<string, unknown>;
  callbacks: Record<string, unknown>;
}

export interface MlxC {
  /** The path (or name) the library was loaded from. */
  path: string;
  /** Functions of the spec that this library does not export (an older system libmlxc). */
  missing: string[];
  fn: MlxCFunctions;
  types: MlxCTypes;
  koffi: Koffi;
}

let types: MlxCTypes | undefined;
function declareTypes(): MlxCTypes {
  if (types) return types;
  const handles: Record<string, unknown> = {};
  for (const n of handleNames) handles[n] = koffi.struct(n, { ctx: 'void*' });
  for (const n of ['mlx_dtype', 'mlx_device_type', 'mlx_compile_mode', 'mlx_fft_norm']) koffi.alias(n, 'int');
  koffi.struct('mlx_optional_int', { value: 'int', has_value: 'bool' });
  koffi.struct('mlx_optional_float', { value: 'float', has_value: 'bool' });
  koffi.struct('mlx_optional_dtype', { value: 'int', has_value: 'bool' });
  koffi.struct('mlx_complex64_t', { re: 'float', im: 'float' });
  const callbacks: Record<string, unknown> = {
    mlx_error_handler_func: koffi.proto('void mlx_error_handler_func(const char* msg, void* data)'),
    mlx_payload_dtor: koffi.proto('void mlx_payload_dtor(void* payload)'),
    mlx_data_dtor: koffi.proto('void mlx_data_dtor(void* data)'),
    mlx_closure_fun: koffi.proto('int mlx_closure_fun(mlx_vector_array* res, mlx_vector_array input)'),
    mlx_closure_fun_payload: koffi.proto('int mlx_closure_fun_payload(mlx_vector_array* res, mlx_vector_array input, void* payload)'),
    mlx_closure_unary_fun: koffi.proto('int mlx_closure_unary_fun(mlx_array* res, mlx_array input)'),
    mlx_closure_value_and_grad_fun: koffi.proto('int mlx_closure_value_and_grad_fun(mlx_vector_array* res_0, mlx_vector_array* res_1, mlx_vector_array input)'),
    mlx_closure_value_and_grad_fun_payload: koffi.proto('int mlx_closure_value_and_grad_fun_payload(mlx_vector_array* res_0, mlx_vector_array* res_1, mlx_vector_array input, void* payload)'),
    mlx_closure_custom_fun: koffi.proto('int mlx_closure_custom_fun(mlx_vector_array* res, mlx_vector_array primals, mlx_vector_array cotangents, mlx_vector_array outputs)'),
    mlx_closure_custom_fun_payload: koffi.proto('int mlx_closure_custom_fun_payload(mlx_vector_array* res, mlx_vector_array primals, mlx_vector_array cotangents, mlx_vector_array outputs, void* payload)'),
    mlx_closure_custom_jvp_fun: koffi.proto('int mlx_closure_custom_jvp_fun(mlx_vector_array* res, mlx_vector_array primals, mlx_vector_array tangents, const int* argnums, size_t argnums_num)'),
    mlx_closure_custom_jvp_fun_payload: koffi.proto('int mlx_closure_custom_jvp_fun_payload(mlx_vector_array* res, mlx_vector_array primals, mlx_vector_array tangents, const int* argnums, size_t argnums_num, void* payload)'),
  };
  types = { handles, callbacks };
  return types;
}

const here = dirname(fileURLToPath(import.meta.url));
/** Where this repository's build puts the library (from src/ or dist/). */
export const repoLibraryPath = join(here, '..', 'native', 'build', process.platform === 'darwin' ? 'libmlxc.dylib' : 'libmlxc.so');

/** The candidates, in the order they are tried. */
export function libraryCandidates(): { path: string; why: string }[] {
  const c: { path: string; why: string }[] = [];
  if (process.env.MLX_C_LIBRARY) c.push({ path: process.env.MLX_C_LIBRARY, why: 'MLX_C_LIBRARY' });
  c.push({ path: repoLibraryPath, why: 'built by this repository (tools/dev setup)' });
  if (process.platform === 'darwin') {
    c.push({ path: '/opt/homebrew/lib/libmlxc.dylib', why: 'Homebrew (Apple Silicon)' });
    c.push({ path: '/usr/local/lib/libmlxc.dylib', why: 'Homebrew (Intel) or /usr/local' });
    c.push({ path: 'libmlxc.dylib', why: 'the system loader path' });
  } else {
    c.push({ path: '/usr/local/lib/libmlxc.so', why: '/usr/local' });
    c.push({ path: 'libmlxc.so', why: 'the system loader path' });
  }
  return c;
}

export class MlxLibraryNotFoundError extends Error {
  constructor(readonly attempts: { path: string; why: string; error: string }[]) {
    super(
      `could not load the MLX C library. Tried:\n${attempts.map((a) => `  - ${a.path} (${a.why}): ${a.error}`).join('\n')}\n` +
        `Fix: run \`tools/dev setup\` in the repository (builds packages/sys/native), or point MLX_C_LIBRARY at a libmlxc built from ml-explore/mlx-c.`,
    );
    this.name = 'MlxLibraryNotFoundError';
  }
}

let loaded: MlxC | undefined;

/**
 * Loads the library once and declares every function: MLX_C_LIBRARY when set (and then nothing else),
 * else this repository's build, else a system libmlxc.
 */
export function loadMlxC(): MlxC {
  if (loaded) return loaded;
  declareTypes();
  const attempts: { path: string; why: string; error: string }[] = [];
  for (const cand of libraryCandidates()) {
    // An explicit MLX_C_LIBRARY is authoritative: falling back to another library would run code
    // the user did not ask for, so a bad path stops the search.
    const explicit = cand.why === 'MLX_C_LIBRARY';
    if (cand.path.includes('/') && !existsSync(cand.path)) {
      attempts.push({ ...cand, error: 'no such file' });
      if (explicit) break;
      continue;
    }
    let lib: ReturnType<Koffi['load']>;
    try {
      lib = koffi.load(cand.path);
    } catch (e) {
      attempts.push({ ...cand, error: (e as Error).message });
      if (explicit) break;
      continue;
    }
    const fn: Record<string, unknown> = {};
    const missing: string[] = [];
    for (const proto of prototypes) {
      const name = /(\w+)\(/.exec(proto)![1];
      try {
        fn[name] = lib.func(proto);
      } catch {
        missing.push(name);
        fn[name] = () => {
          throw new Error(`${name} is not exported by ${cand.path}`);
        };
      }
    }
    loaded = { path: cand.path, missing, fn: fn as unknown as MlxCFunctions, types: declareTypes(), koffi };
    return loaded;
  }
  throw new MlxLibraryNotFoundError(attempts);
}

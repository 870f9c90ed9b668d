// The one source of truth for the native ABI. Every exported function is listed once, as its C
// prototype in mlx-c's conventions; scripts/generate.ts turns the list into
//   native/generated/*.cpp   C++ glue for the mechanical entries (kind 'op'),
//   native/include/mlxc/functions.h  the C declarations of every entry,
//   src/generated/*.ts       koffi declarations with TypeScript types.
// The C types they use are in types.ts, one row per type.
// Entries of kind 'manual' are implemented by hand in native/src/*.cpp because their mapping to
// MLX's C++ API is not mechanical (constructors, data access, closures, error handling).

export type FnKind = 'op' | 'manual';

export interface FnSpec {
  /** C prototype, e.g. `int mlx_add(mlx_array* res, const mlx_array a, const mlx_array b, const mlx_stream s)`.
   * `/* may be null *\/` after a parameter marks it optional (a null handle or pointer means "none"). */
  proto: string;
  kind: FnKind;
  /** C++ expression that computes the result; `$name` is replaced by the converted parameter. */
  cpp?: string;
  /** Why the entry exists or how it differs from mlx-c, for the coverage table. */
  note?: string;
}

/** A function whose C++ glue is generated: by default `mlx::core[::ns]::<base>(params...)`, where
 * ns comes from the prefix (fast, linalg, random, fft) and base is the name without `_axis`/`_axes`. */
export const op = (proto: string, cpp?: string, note?: string): FnSpec => ({ proto, kind: 'op', cpp, note });

/** A function implemented by hand in native/src. */
export const manual = (proto: string, note?: string): FnSpec => ({ proto, kind: 'manual', note });

export interface Param {
  type: string; // C type without the name, e.g. `const mlx_array`, `const int*`
  name: string;
  nullable: boolean;
}

export interface ParsedFn {
  ret: string;
  name: string;
  params: Param[];
}

export function parseProto(proto: string): ParsedFn {
  const m = /^\s*(.+?)\s*\b(\w+)\s*\((.*)\)\s*$/.exec(proto);
  if (!m) throw new Error(`cannot parse prototype: ${proto}`);
  const [, ret, name, rest] = m;
  const params: Param[] = [];
  const body = rest.trim();
  if (body !== '' && body !== 'void') {
    for (const raw of body.split(',')) {
      const nullable = /\/\*\s*may be null\s*\*\//.test(raw);
      const p = raw.replace(/\/\*.*?\*\//g, '').trim();
      const pm = /^(.*?)(\w+)$/.exec(p);
      if (!pm) throw new Error(`cannot parse parameter '${raw}' of ${name}`);
      params.push({
        type: pm[1]
          .replace(/\s+/g, ' ')
          .replace(/\s*\*\s*/g, '* ')
          .trim(),
        name: pm[2],
        nullable,
      });
    }
  }
  return { ret: ret.replace(/\s*\*\s*/g, '* ').trim(), name, params };
}

/** mlx-c names its out-parameters `res`, `res_0`, `res_1`, ...: writable pointers the call fills. */
export const isOutParam = (p: Param): boolean => /^res(_\d+)?$/.test(p.name) && p.type.endsWith('*') && !p.type.startsWith('const');

/** A pointer parameter `x` followed by `x_num` is a list (pointer and count). */
export const isListAt = (params: readonly Param[], i: number): boolean =>
  params[i].type.endsWith('*') && params[i + 1]?.name === `${params[i].name}_num`;

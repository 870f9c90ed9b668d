// The one table of the C types that the spec's prototypes use. Each row says how a value of the
// type crosses every boundary the generators write:
//   c         its definition in native/include/mlxc/types.h (handles, enums, structs, callbacks),
//   cpp       how the generated C++ glue converts a parameter into what MLX's C++ API takes,
//   koffi     how src/index.ts declares it to koffi before it declares the functions
//             (through src/generated/ctypes.ts, which is generated from this table),
//   ts        its TypeScript type in the raw bindings (MlxCFunctions),
//   core      how @mlx/core's generated ops take it from JS (packages/core/scripts/generate-ops.ts).
// Pointer forms follow from the row of the pointee (resolveCType): `T*` is an out-parameter (in/out
// for koffi), `const T*` an input, and `const T* x, size_t x_num` a list. A type missing from the
// table stops the generators, so a new type is added here once and reaches every output.

export type CTypeKind = 'handle' | 'enum' | 'optional' | 'struct' | 'callback' | 'scalar' | 'string' | 'void';

/** How a core op takes a parameter: `v` is the JS parameter, `label` names it in errors (`zeros: shape`). */
export interface CoreParam {
  type: string;
  arg: (v: string, label: string) => string;
  /** The parameter may be left out (null or undefined means "none"). */
  optional?: boolean;
  /** Its default, as TypeScript text. */
  default?: string;
}

/** What an int list means to MLX; core checks each element against it (core's src/ints.ts has
 * the same union, and the generated ops do not type-check if the two differ). */
export type IntListRule = 'any' | 'dim' | 'dimOrInfer' | 'nonzero';

/** How a core op returns an out-parameter: `r` is the local that the C function writes. */
export interface CoreResult {
  type: string;
  init: string;
  /** The out-parameter as passed to the raw function (default: `r`). */
  pass?: (r: string) => string;
  take: (r: string) => string;
}

export interface CType {
  kind: CTypeKind;
  /** Enums: member names without cPrefix, in value order (0, 1, ...). */
  members?: readonly string[];
  cPrefix?: string;
  /** Structs and optionals: field name -> C type (also the koffi type), in layout order. */
  fields?: Readonly<Record<string, string>>;
  /** Callbacks: the C prototype, as koffi.proto parses it. */
  proto?: string;
  /** The C definition where it cannot be derived from the above. */
  c?: string;
  /** C++ conversion of a by-value parameter named `$`; absent: no generated glue takes it. */
  cpp?: string;
  /** The same for a parameter marked `may be null`. */
  cppNullable?: string;
  /** TypeScript type of a by-value parameter in the raw bindings. */
  ts: string;
  /** TypeScript type of a by-value return value (default: ts). */
  tsReturn?: string;
  /** TypeScript types of `T*` (out) and `const T*` (input) parameters. */
  tsPointer?: { out: string; in: string };
  /** core ops: an array operand (scalars allowed), the stream (from opts), or a plain parameter. */
  core?: CoreParam | 'operand' | 'stream';
  coreNullable?: CoreParam;
  /** core ops: a `const T* x, size_t x_num` list, given as a JS array. */
  coreList?: { type: string; arg: (v: string, label: string, rule: IntListRule) => string };
  /** core ops: a `T*` out-parameter that becomes the return value. */
  coreResult?: CoreResult;
}

const handle = (row: Partial<CType> = {}): CType => ({
  kind: 'handle',
  ts: 'MlxHandle',
  tsPointer: { out: 'MlxHandle', in: 'MlxHandle[]' },
  ...row,
});
const enumOf = (cPrefix: string, members: readonly string[], row: Partial<CType> = {}): CType => ({
  kind: 'enum',
  cPrefix,
  members,
  ts: 'number',
  ...row,
});
const optionalOf = (value: string, row: Partial<CType>): CType => ({
  kind: 'optional',
  fields: { value, has_value: 'bool' },
  ts: '{ value: number; has_value: boolean }',
  ...row,
});
const callback = (proto: string): CType => ({ kind: 'callback', proto, ts: 'unknown /* registered koffi callback */' });
const plain = (type: string): CoreParam => ({ type, arg: (v) => v });
/** A C number passed through unchanged (koffi converts it). */
const number = (ts: string, row: Partial<CType> = {}): CType => ({
  kind: 'scalar',
  cpp: '$',
  ts,
  tsReturn: 'number',
  core: plain(ts),
  ...row,
});
const wide = (row: Partial<CType> = {}) => number('number | bigint', row);
const none = '{ value: 0, has_value: false }';

export const cTypes: Readonly<Record<string, CType>> = {
  // Handles: mlx-c's `{ void* ctx }` structs, passed by value.
  mlx_array: handle({
    cpp: 'mlxc::arr($)',
    cppNullable: 'mlxc::opt_array($)',
    core: 'operand',
    coreResult: { type: 'Array', init: '{ ctx: null }', take: (r) => `Array.fromHandle(${r})` },
  }),
  mlx_string: handle(),
  mlx_device: handle(),
  mlx_stream: handle({ cpp: 'mlxc::stream($)', core: 'stream' }),
  mlx_vector_array: handle({
    cpp: 'mlxc::vec($)',
    core: { type: 'readonly ArrayLike[]', arg: (v) => `t.vector(${v})` },
    coreResult: { type: 'Array[]', init: '{ ctx: null }', take: (r) => `takeVector(${r})` },
  }),
  mlx_vector_vector_array: handle(),
  mlx_vector_int: handle(),
  mlx_vector_string: handle(),
  mlx_closure: handle({ cpp: 'mlxc::closure($)' }),
  mlx_closure_value_and_grad: handle(),
  mlx_closure_custom: handle(),
  mlx_closure_custom_jvp: handle(),
  mlx_closure_custom_vmap: handle(),

  // Enums, passed as int.
  mlx_dtype: enumOf(
    'MLX_',
    [
      'BOOL',
      'UINT8',
      'UINT16',
      'UINT32',
      'UINT64',
      'INT8',
      'INT16',
      'INT32',
      'INT64',
      'FLOAT16',
      'FLOAT32',
      'FLOAT64',
      'BFLOAT16',
      'COMPLEX64',
    ],
    { cpp: 'mlxc::dtype($)', core: { type: 'Dtype', arg: (v) => `dtypeCode(${v})` } },
  ),
  mlx_device_type: enumOf('MLX_', ['CPU', 'GPU']),
  mlx_compile_mode: enumOf('MLX_COMPILE_MODE_', ['DISABLED', 'NO_SIMPLIFY', 'NO_FUSE', 'ENABLED']),
  mlx_fft_norm: enumOf('MLX_FFT_NORM_', ['BACKWARD', 'ORTHO', 'FORWARD'], {
    cpp: 'static_cast<mlx::core::fft::FFTNorm>($)',
    core: { type: 'FftNorm', default: "'backward'", arg: (v) => `fftNormCode(${v})` },
  }),

  // Optionals: a value and whether it is set, by value.
  mlx_optional_int: optionalOf('int', {
    cpp: 'mlxc::opt($)',
    core: {
      type: 'number | null',
      optional: true,
      arg: (v, l) => `${v} == null ? ${none} : { value: toInt32(${v}, '${l}'), has_value: true }`,
    },
  }),
  mlx_optional_float: optionalOf('float', {
    cpp: 'mlxc::opt($)',
    core: { type: 'number | null', optional: true, arg: (v) => `${v} == null ? ${none} : { value: ${v}, has_value: true }` },
  }),
  mlx_optional_dtype: optionalOf('mlx_dtype', {
    cpp: 'mlxc::opt_dtype($)',
    core: { type: 'Dtype | null', optional: true, arg: (v) => `${v} == null ? ${none} : { value: dtypeCode(${v}), has_value: true }` },
  }),

  mlx_complex64_t: {
    kind: 'struct',
    fields: { re: 'float', im: 'float' },
    ts: 'unknown',
    // C++ and C spell the same layout (two floats) differently.
    c: '#ifdef __cplusplus\ntypedef std::complex<float> mlx_complex64_t;\n#else\ntypedef float _Complex mlx_complex64_t;\n#endif',
  },

  // Callbacks. mlx-c spells these inline in each prototype; the typedefs are ABI-identical.
  mlx_error_handler_func: callback('void mlx_error_handler_func(const char* msg, void* data)'),
  // This library's own (spec/extensions/eval.ts): an evaluation on a worker thread has ended; error is
  // null on success, else MLX's message.
  mlxc_eval_done: callback('void mlxc_eval_done(const char* error, void* payload)'),
  mlx_payload_dtor: callback('void mlx_payload_dtor(void* payload)'),
  mlx_data_dtor: callback('void mlx_data_dtor(void* data)'),
  mlx_closure_fun: callback('int mlx_closure_fun(mlx_vector_array* res, const mlx_vector_array input)'),
  mlx_closure_fun_payload: callback('int mlx_closure_fun_payload(mlx_vector_array* res, const mlx_vector_array input, void* payload)'),
  mlx_closure_unary_fun: callback('int mlx_closure_unary_fun(mlx_array* res, const mlx_array input)'),
  mlx_closure_value_and_grad_fun: callback(
    'int mlx_closure_value_and_grad_fun(mlx_vector_array* res_0, mlx_vector_array* res_1, const mlx_vector_array input)',
  ),
  mlx_closure_value_and_grad_fun_payload: callback(
    'int mlx_closure_value_and_grad_fun_payload(mlx_vector_array* res_0, mlx_vector_array* res_1, const mlx_vector_array input, void* payload)',
  ),
  mlx_closure_custom_fun: callback(
    'int mlx_closure_custom_fun(mlx_vector_array* res, const mlx_vector_array primals, const mlx_vector_array cotangents, const mlx_vector_array outputs)',
  ),
  mlx_closure_custom_fun_payload: callback(
    'int mlx_closure_custom_fun_payload(mlx_vector_array* res, const mlx_vector_array primals, const mlx_vector_array cotangents, const mlx_vector_array outputs, void* payload)',
  ),
  mlx_closure_custom_jvp_fun: callback(
    'int mlx_closure_custom_jvp_fun(mlx_vector_array* res, const mlx_vector_array primals, const mlx_vector_array tangents, const int* argnums, size_t argnums_num)',
  ),
  mlx_closure_custom_jvp_fun_payload: callback(
    'int mlx_closure_custom_jvp_fun_payload(mlx_vector_array* res, const mlx_vector_array primals, const mlx_vector_array tangents, const int* argnums, size_t argnums_num, void* payload)',
  ),

  // Numbers. koffi converts a JS number to an `int` by truncating and saturating, and an Int32Array
  // wraps, so core checks ints itself (core's src/ints.ts) and names the argument instead.
  bool: number('boolean', {
    tsReturn: 'boolean',
    core: plain('boolean'),
    coreResult: { type: 'boolean', init: '[false]', pass: (r) => `${r} as never`, take: (r) => `${r}[0]` },
  }),
  int: number('number', {
    core: { type: 'number', arg: (v, l) => `toInt32(${v}, '${l}')` },
    coreList: { type: 'readonly number[]', arg: (v, l, rule) => `toInt32Array(${v}, '${l}', '${rule}')` },
  }),
  float: number('number'),
  double: number('number'),
  int8_t: number('number'),
  int16_t: number('number'),
  int32_t: number('number'),
  uint8_t: number('number'),
  uint16_t: number('number'),
  uint32_t: number('number'),
  size_t: wide(),
  int64_t: wide({ coreList: { type: 'readonly number[]', arg: (v, l) => `toInt64Array(${v}, '${l}')` } }),
  uint64_t: wide(),
  uintptr_t: wide(),

  // `const char*` and `char*`: a NUL-terminated string (koffi converts JS strings).
  'char*': {
    kind: 'string',
    cpp: 'std::string($)',
    cppNullable: 'mlxc::opt_str($)',
    ts: 'string | null',
    tsReturn: 'string',
    core: { type: 'string', arg: (v, l) => `toCString(${v}, '${l}')` },
    coreNullable: { type: 'string | null', optional: true, arg: (v, l) => `${v} == null ? null : toCString(${v}, '${l}')` },
  },
  // An address a call hands back (`void** res`): an opaque native pointer (a koffi External).
  'void*': { kind: 'scalar', ts: 'unknown', tsPointer: { out: 'unknown[]', in: 'unknown' } },
  // Only behind a pointer (an opaque payload or data pointer) or as a return type.
  void: { kind: 'void', ts: 'unknown', tsReturn: 'void', tsPointer: { out: 'unknown', in: 'unknown' } },
};

export const bareType = (t: string): string => t.replace(/^const /, '').trim();

export interface ResolvedCType {
  /** The table key: the type itself, or what the pointer points to. */
  name: string;
  row: CType;
  /** false: by value; 'out': `T*`; 'in': `const T*`. */
  pointer: false | 'out' | 'in';
}

/** The row of a parameter or return type as the prototype parser spells it (`const int*`, `mlx_array* `). */
export function resolveCType(type: string): ResolvedCType {
  const b = bareType(type);
  const row = cTypes[b];
  if (row) return { name: b, row, pointer: false };
  if (b.endsWith('*')) {
    const inner = b.slice(0, -1).trim();
    const pointee = cTypes[inner];
    if (pointee) return { name: inner, row: pointee, pointer: type.startsWith('const') ? 'in' : 'out' };
  }
  throw new Error(`C type '${type}' is not in packages/sys/spec/types.ts`);
}

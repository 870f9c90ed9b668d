// ABI spec: the hand-written part of the library (native/src/*.cpp). These mappings are not
// mechanical: constructors and data access, handle vectors and strings, devices and streams,
// closures built from C callbacks, transforms, compile, memory and error handling.
import { manual, type FnSpec } from './dsl.js';

const scalarTypes = ['bool', 'uint8', 'uint16', 'uint32', 'uint64', 'int8', 'int16', 'int32', 'int64', 'float32', 'float64', 'complex64'];
const cType: Record<string, string> = {
  bool: 'bool',
  uint8: 'uint8_t',
  uint16: 'uint16_t',
  uint32: 'uint32_t',
  uint64: 'uint64_t',
  int8: 'int8_t',
  int16: 'int16_t',
  int32: 'int32_t',
  int64: 'int64_t',
  float32: 'float',
  float64: 'double',
  complex64: 'mlx_complex64_t',
};

export const array: FnSpec[] = [
  manual('size_t mlx_dtype_size(mlx_dtype dtype)'),
  manual('int mlx_array_tostring(mlx_string* str, const mlx_array arr)'),
  manual('mlx_array mlx_array_new(void)'),
  manual('int mlx_array_free(mlx_array arr)'),
  manual('mlx_array mlx_array_new_bool(bool val)'),
  manual('mlx_array mlx_array_new_int(int val)'),
  manual('mlx_array mlx_array_new_float32(float val)'),
  manual('mlx_array mlx_array_new_float(float val)'),
  manual('mlx_array mlx_array_new_float64(double val)'),
  manual('mlx_array mlx_array_new_double(double val)'),
  manual('mlx_array mlx_array_new_complex(float real_val, float imag_val)'),
  manual('mlx_array mlx_array_new_data(const void* data, const int* shape, int dim, mlx_dtype dtype)'),
  manual('mlx_array mlx_array_new_data_managed(void* data, const int* shape, int dim, mlx_dtype dtype, mlx_data_dtor dtor)'),
  manual(
    'mlx_array mlx_array_new_data_managed_payload(void* data, const int* shape, int dim, mlx_dtype dtype, void* payload, mlx_data_dtor dtor)',
  ),
  manual('int mlx_array_set(mlx_array* arr, const mlx_array src)'),
  manual('int mlx_array_set_bool(mlx_array* arr, bool val)'),
  manual('int mlx_array_set_int(mlx_array* arr, int val)'),
  manual('int mlx_array_set_float32(mlx_array* arr, float val)'),
  manual('int mlx_array_set_float(mlx_array* arr, float val)'),
  manual('int mlx_array_set_float64(mlx_array* arr, double val)'),
  manual('int mlx_array_set_double(mlx_array* arr, double val)'),
  manual('int mlx_array_set_complex(mlx_array* arr, float real_val, float imag_val)'),
  manual('int mlx_array_set_data(mlx_array* arr, const void* data, const int* shape, int dim, mlx_dtype dtype)'),
  manual('size_t mlx_array_itemsize(const mlx_array arr)'),
  manual('size_t mlx_array_size(const mlx_array arr)'),
  manual('size_t mlx_array_nbytes(const mlx_array arr)'),
  manual('size_t mlx_array_ndim(const mlx_array arr)'),
  manual('const int* mlx_array_shape(const mlx_array arr)'),
  manual('const size_t* mlx_array_strides(const mlx_array arr)'),
  manual('int mlx_array_dim(const mlx_array arr, int dim)'),
  manual('mlx_dtype mlx_array_dtype(const mlx_array arr)'),
  manual('int mlx_array_eval(mlx_array arr)'),
  ...scalarTypes.map((t) => manual(`int mlx_array_item_${t}(${cType[t]}* res, const mlx_array arr)`)),
  ...scalarTypes.map((t) =>
    manual(
      `const ${cType[t]}* mlx_array_data_${t}(const mlx_array arr)`,
      t === 'uint16' ? 'also the view through which float16 and bfloat16 data is read on x86-64' : undefined,
    ),
  ),
  manual('int _mlx_array_is_available(bool* res, const mlx_array arr)'),
  manual('int _mlx_array_wait(const mlx_array arr)'),
  manual('int _mlx_array_is_contiguous(bool* res, const mlx_array arr)'),
  manual('int _mlx_array_is_row_contiguous(bool* res, const mlx_array arr)'),
  manual('int _mlx_array_is_col_contiguous(bool* res, const mlx_array arr)'),
];

export const string: FnSpec[] = [
  manual('mlx_string mlx_string_new(void)'),
  manual('mlx_string mlx_string_new_data(const char* str)'),
  manual('int mlx_string_set(mlx_string* str, const mlx_string src)'),
  manual('const char* mlx_string_data(mlx_string str)'),
  manual('int mlx_string_free(mlx_string str)'),
  manual('int mlx_version(mlx_string* str_)'),
];

function vectorOf(v: string, elem: string, constData = true): FnSpec[] {
  const data = elem.startsWith('const ') ? `${elem}*` : `${constData ? 'const ' : ''}${elem}*`;
  const getRes = elem === 'const char*' ? 'char**' : `${elem.replace(/^const /, '')}*`;
  return [
    manual(`${v} ${v}_new(void)`),
    manual(`int ${v}_set(${v}* vec, const ${v} src)`),
    manual(`int ${v}_free(${v} vec)`),
    manual(`${v} ${v}_new_data(${data} data, size_t size)`),
    manual(`${v} ${v}_new_value(${elem === 'int' ? 'int' : `const ${elem.replace(/^const /, '')}`} val)`),
    manual(`int ${v}_set_data(${v}* vec, ${data} data, size_t size)`),
    manual(`int ${v}_set_value(${v}* vec, ${elem === 'int' ? 'int' : `const ${elem.replace(/^const /, '')}`} val)`),
    manual(`int ${v}_append_data(${v} vec, ${data} data, size_t size)`),
    manual(`int ${v}_append_value(${v} vec, ${elem === 'int' ? 'int' : `const ${elem.replace(/^const /, '')}`} val)`),
    manual(`size_t ${v}_size(${v} vec)`),
    manual(`int ${v}_get(${getRes} res, const ${v} vec, size_t idx)`),
  ];
}

export const vector: FnSpec[] = [
  ...vectorOf('mlx_vector_array', 'mlx_array'),
  ...vectorOf('mlx_vector_vector_array', 'mlx_vector_array'),
  ...vectorOf('mlx_vector_int', 'int', false),
  ...vectorOf('mlx_vector_string', 'const char*'),
];

export const device: FnSpec[] = [
  manual('mlx_device mlx_device_new(void)'),
  manual('mlx_device mlx_device_new_type(mlx_device_type type, int index)'),
  manual('int mlx_device_free(mlx_device dev)'),
  manual('int mlx_device_set(mlx_device* dev, const mlx_device src)'),
  manual('int mlx_device_tostring(mlx_string* str, mlx_device dev)'),
  manual('bool mlx_device_equal(mlx_device lhs, mlx_device rhs)'),
  manual('int mlx_device_get_index(int* index, mlx_device dev)'),
  manual('int mlx_device_get_type(mlx_device_type* type, mlx_device dev)'),
  manual('int mlx_get_default_device(mlx_device* dev)'),
  manual('int mlx_set_default_device(mlx_device dev)'),
  manual('int mlx_device_is_available(bool* avail, mlx_device dev)'),
  manual('int mlx_device_count(int* count, mlx_device_type type)'),
  manual('int mlx_metal_is_available(bool* res)'),
  manual('int mlx_cuda_is_available(bool* res)'),
];

export const stream: FnSpec[] = [
  manual('mlx_stream mlx_stream_new(void)'),
  manual('mlx_stream mlx_stream_new_device(mlx_device dev)'),
  manual('int mlx_stream_set(mlx_stream* stream, const mlx_stream src)'),
  manual('int mlx_stream_free(mlx_stream stream)'),
  manual('int mlx_stream_tostring(mlx_string* str, mlx_stream stream)'),
  manual('bool mlx_stream_equal(mlx_stream lhs, mlx_stream rhs)'),
  manual('int mlx_stream_get_device(mlx_device* dev, mlx_stream stream)'),
  manual('int mlx_stream_get_index(int* index, mlx_stream stream)'),
  manual('int mlx_synchronize(mlx_stream stream)'),
  manual('int mlx_get_default_stream(mlx_stream* stream, mlx_device dev)'),
  manual('int mlx_set_default_stream(mlx_stream stream)'),
  manual('mlx_stream mlx_default_cpu_stream_new(void)'),
  manual('mlx_stream mlx_default_gpu_stream_new(void)'),
];

function closureOf(c: string, fun: string, funPayload: string, apply: string): FnSpec[] {
  return [
    manual(`${c} ${c}_new(void)`),
    manual(`int ${c}_free(${c} cls)`),
    manual(`${c} ${c}_new_func(${fun} fun)`),
    manual(`${c} ${c}_new_func_payload(${funPayload} fun, void* payload, mlx_payload_dtor dtor)`),
    manual(`int ${c}_set(${c}* cls, const ${c} src)`),
    manual(apply),
  ];
}

export const closure: FnSpec[] = [
  ...closureOf(
    'mlx_closure',
    'mlx_closure_fun',
    'mlx_closure_fun_payload',
    'int mlx_closure_apply(mlx_vector_array* res, mlx_closure cls, const mlx_vector_array input)',
  ),
  manual('mlx_closure mlx_closure_new_unary(mlx_closure_unary_fun fun)'),
  ...closureOf(
    'mlx_closure_value_and_grad',
    'mlx_closure_value_and_grad_fun',
    'mlx_closure_value_and_grad_fun_payload',
    'int mlx_closure_value_and_grad_apply(mlx_vector_array* res_0, mlx_vector_array* res_1, mlx_closure_value_and_grad cls, const mlx_vector_array input)',
  ),
  ...closureOf(
    'mlx_closure_custom',
    'mlx_closure_custom_fun',
    'mlx_closure_custom_fun_payload',
    'int mlx_closure_custom_apply(mlx_vector_array* res, mlx_closure_custom cls, const mlx_vector_array input_0, const mlx_vector_array input_1, const mlx_vector_array input_2)',
  ),
  ...closureOf(
    'mlx_closure_custom_jvp',
    'mlx_closure_custom_jvp_fun',
    'mlx_closure_custom_jvp_fun_payload',
    'int mlx_closure_custom_jvp_apply(mlx_vector_array* res, mlx_closure_custom_jvp cls, const mlx_vector_array input_0, const mlx_vector_array input_1, const int* input_2, size_t input_2_num)',
  ),
];

export const transforms: FnSpec[] = [
  manual('int mlx_checkpoint(mlx_closure* res, const mlx_closure fun)'),
  manual(
    'int mlx_custom_function(mlx_closure* res, const mlx_closure fun, const mlx_closure_custom fun_vjp /* may be null */, const mlx_closure_custom_jvp fun_jvp /* may be null */, const mlx_closure_custom_vmap fun_vmap /* may be null */)',
    'custom vmap closures are not exported; fun_vmap must be null',
  ),
  manual('int mlx_custom_vjp(mlx_closure* res, const mlx_closure fun, const mlx_closure_custom fun_vjp)'),
  manual('int mlx_eval(const mlx_vector_array outputs)'),
  manual('int mlx_async_eval(const mlx_vector_array outputs)'),
  manual(
    'int mlx_jvp(mlx_vector_array* res_0, mlx_vector_array* res_1, const mlx_closure fun, const mlx_vector_array primals, const mlx_vector_array tangents)',
  ),
  manual('int mlx_value_and_grad(mlx_closure_value_and_grad* res, const mlx_closure fun, const int* argnums, size_t argnums_num)'),
  manual(
    'int mlx_vjp(mlx_vector_array* res_0, mlx_vector_array* res_1, const mlx_closure fun, const mlx_vector_array primals, const mlx_vector_array cotangents)',
  ),
  manual('int mlx_compile(mlx_closure* res, const mlx_closure fun, bool shapeless)'),
  manual('int mlx_detail_compile_clear_cache(void)'),
  manual('int mlx_disable_compile(void)'),
  manual('int mlx_enable_compile(void)'),
  manual('int mlx_set_compile_mode(mlx_compile_mode mode)'),
];

export const memory: FnSpec[] = [
  manual(
    'int mlx_get_active_memory(size_t* res)',
    "MLX's active memory plus the bytes of the live arrays of mlxc_array_new_resident's arena (which MLX's allocator does not see)",
  ),
  manual('int mlx_get_cache_memory(size_t* res)'),
  manual('int mlx_get_memory_limit(size_t* res)'),
  manual(
    'int mlx_get_peak_memory(size_t* res)',
    "the most memory held at once since the start or mlx_reset_peak_memory, as mlx_get_active_memory counts it (MLX's arrays and mlxc_array_new_resident's arena together)",
  ),
  manual('int mlx_reset_peak_memory(void)'),
  manual('int mlx_set_cache_limit(size_t* res, size_t limit)'),
  manual('int mlx_set_memory_limit(size_t* res, size_t limit)'),
  manual('int mlx_set_wired_limit(size_t* res, size_t limit)'),
  manual('int mlx_clear_cache(void)'),
];

export const error: FnSpec[] = [
  manual('void mlx_set_error_handler(mlx_error_handler_func handler, void* data, mlx_payload_dtor dtor)'),
  manual(
    'int mlxc_use_thread_errors(void)',
    "installs this library's own error handler, which keeps each message with the thread that failed, for that thread to read with mlxc_take_error: bindings with several JS threads (worker threads) need no JS callback as handler",
  ),
  manual(
    'int mlxc_take_error(void* buf, size_t cap, size_t* len)',
    "copies (truncated to cap - 1 bytes, NUL-terminated) and forgets this thread's last error message (mlxc_use_thread_errors); len gets its whole length, and a message that did not fit is kept for a larger buffer; empty when there is none",
  ),
];

/* The types of the C ABI. Handles, enums and optionals are laid out exactly as in mlx-c
 * (ml-explore/mlx-c, mlx/c/*.h), so a program written against mlx-c's headers links against this
 * library and vice versa. Function declarations are generated into functions.h. */
#ifndef MLXC_TYPES_H
#define MLXC_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#include <complex>
typedef std::complex<float> mlx_complex64_t;
extern "C" {
#else
#include <complex.h>
typedef float _Complex mlx_complex64_t;
#endif

#define MLXC_HANDLE(name) typedef struct name##_ { void* ctx; } name
MLXC_HANDLE(mlx_array);
MLXC_HANDLE(mlx_string);
MLXC_HANDLE(mlx_device);
MLXC_HANDLE(mlx_stream);
MLXC_HANDLE(mlx_vector_array);
MLXC_HANDLE(mlx_vector_vector_array);
MLXC_HANDLE(mlx_vector_int);
MLXC_HANDLE(mlx_vector_string);
MLXC_HANDLE(mlx_closure);
MLXC_HANDLE(mlx_closure_value_and_grad);
MLXC_HANDLE(mlx_closure_custom);
MLXC_HANDLE(mlx_closure_custom_jvp);
MLXC_HANDLE(mlx_closure_custom_vmap);
#undef MLXC_HANDLE

typedef enum mlx_dtype_ {
  MLX_BOOL, MLX_UINT8, MLX_UINT16, MLX_UINT32, MLX_UINT64, MLX_INT8, MLX_INT16, MLX_INT32,
  MLX_INT64, MLX_FLOAT16, MLX_FLOAT32, MLX_FLOAT64, MLX_BFLOAT16, MLX_COMPLEX64,
} mlx_dtype;

typedef enum mlx_device_type_ { MLX_CPU, MLX_GPU } mlx_device_type;

typedef enum mlx_compile_mode_ {
  MLX_COMPILE_MODE_DISABLED, MLX_COMPILE_MODE_NO_SIMPLIFY, MLX_COMPILE_MODE_NO_FUSE, MLX_COMPILE_MODE_ENABLED
} mlx_compile_mode;

typedef enum mlx_fft_norm_ { MLX_FFT_NORM_BACKWARD, MLX_FFT_NORM_ORTHO, MLX_FFT_NORM_FORWARD } mlx_fft_norm;

typedef struct mlx_optional_int_ { int value; bool has_value; } mlx_optional_int;
typedef struct mlx_optional_float_ { float value; bool has_value; } mlx_optional_float;
typedef struct mlx_optional_dtype_ { mlx_dtype value; bool has_value; } mlx_optional_dtype;

/* Callback types. mlx-c spells these inline in each prototype; the typedefs are ABI-identical. */
typedef void (*mlx_error_handler_func)(const char* msg, void* data);
typedef void (*mlx_payload_dtor)(void* payload);
typedef void (*mlx_data_dtor)(void* data);
typedef int (*mlx_closure_fun)(mlx_vector_array* res, const mlx_vector_array input);
typedef int (*mlx_closure_fun_payload)(mlx_vector_array* res, const mlx_vector_array input, void* payload);
typedef int (*mlx_closure_unary_fun)(mlx_array* res, const mlx_array input);
typedef int (*mlx_closure_value_and_grad_fun)(mlx_vector_array* res_0, mlx_vector_array* res_1, const mlx_vector_array input);
typedef int (*mlx_closure_value_and_grad_fun_payload)(mlx_vector_array* res_0, mlx_vector_array* res_1, const mlx_vector_array input, void* payload);
typedef int (*mlx_closure_custom_fun)(mlx_vector_array* res, const mlx_vector_array primals, const mlx_vector_array cotangents, const mlx_vector_array outputs);
typedef int (*mlx_closure_custom_fun_payload)(mlx_vector_array* res, const mlx_vector_array primals, const mlx_vector_array cotangents, const mlx_vector_array outputs, void* payload);
typedef int (*mlx_closure_custom_jvp_fun)(mlx_vector_array* res, const mlx_vector_array primals, const mlx_vector_array tangents, const int* argnums, size_t argnums_num);
typedef int (*mlx_closure_custom_jvp_fun_payload)(mlx_vector_array* res, const mlx_vector_array primals, const mlx_vector_array tangents, const int* argnums, size_t argnums_num, void* payload);

#ifdef __cplusplus
}
#endif
#endif

// Transforms (eval, vjp, jvp, value_and_grad, custom functions), compile and memory figures.
#include "inline_eval.h"
#include "mlxc_private.h"
#include "mlx/scheduler.h"
#include "mlx/compile_impl.h"

namespace mx = mlx::core;
using mlxc::array;

extern "C" {

int mlx_checkpoint(mlx_closure* res, const mlx_closure fun) {
  MLXC_TRY
  mlxc::set(*res, mx::checkpoint(mlxc::closure(fun)));
  MLXC_CATCH(1)
  return 0;
}
int mlx_custom_function(mlx_closure* res, const mlx_closure fun, const mlx_closure_custom fun_vjp, const mlx_closure_custom_jvp fun_jvp,
                        const mlx_closure_custom_vmap fun_vmap) {
  MLXC_TRY
  if (fun_vmap.ctx) throw std::invalid_argument("mlx_custom_function: custom vmap closures are not supported by this library");
  std::optional<mlxc::CustomFn> vjp;
  std::optional<mlxc::CustomJvpFn> jvp;
  if (fun_vjp.ctx) vjp = mlxc::get<mlxc::CustomFn>(fun_vjp, "mlx_closure_custom");
  if (fun_jvp.ctx) jvp = mlxc::get<mlxc::CustomJvpFn>(fun_jvp, "mlx_closure_custom_jvp");
  mlxc::set(*res, mx::custom_function(mlxc::closure(fun), vjp, jvp));
  MLXC_CATCH(1)
  return 0;
}
int mlx_custom_vjp(mlx_closure* res, const mlx_closure fun, const mlx_closure_custom fun_vjp) {
  MLXC_TRY
  mlxc::set(*res, mx::custom_vjp(mlxc::closure(fun), mlxc::get<mlxc::CustomFn>(fun_vjp, "mlx_closure_custom")));
  MLXC_CATCH(1)
  return 0;
}
int mlx_eval(const mlx_vector_array outputs) {
  MLXC_TRY
  mx::eval(mlxc::vec(outputs));
  MLXC_CATCH(1)
  return 0;
}
int mlx_async_eval(const mlx_vector_array outputs) {
  MLXC_TRY
  const auto& outs = mlxc::vec(outputs);
  // Marked in flight until a last task on its CPU stream: a synchronous evaluation of that stream
  // meanwhile queues behind it instead of running inline (inline_eval.h).
  auto s = mlxc::cpu_stream_of(outs);
  if (s) mlxc::async_begin(*s);
  try {
    mx::async_eval(outs);
  } catch (...) {
    if (s) mlxc::async_end(*s);
    throw;
  }
  if (s) mx::scheduler::enqueue(*s, [st = *s] { mlxc::async_end(st); });
  MLXC_CATCH(1)
  return 0;
}
int mlx_jvp(mlx_vector_array* res_0, mlx_vector_array* res_1, const mlx_closure fun, const mlx_vector_array primals,
            const mlx_vector_array tangents) {
  MLXC_TRY
  auto r = mx::jvp(mlxc::closure(fun), mlxc::vec(primals), mlxc::vec(tangents));
  mlxc::set(*res_0, r.first);
  mlxc::set(*res_1, r.second);
  MLXC_CATCH(1)
  return 0;
}
int mlx_vjp(mlx_vector_array* res_0, mlx_vector_array* res_1, const mlx_closure fun, const mlx_vector_array primals,
            const mlx_vector_array cotangents) {
  MLXC_TRY
  auto r = mx::vjp(mlxc::closure(fun), mlxc::vec(primals), mlxc::vec(cotangents));
  mlxc::set(*res_0, r.first);
  mlxc::set(*res_1, r.second);
  MLXC_CATCH(1)
  return 0;
}
int mlx_value_and_grad(mlx_closure_value_and_grad* res, const mlx_closure fun, const int* argnums, size_t argnums_num) {
  MLXC_TRY
  auto f = mx::value_and_grad(mlxc::closure(fun), std::vector<int>(argnums, argnums + argnums_num));
  mlxc::assign<mlxc::ValueAndGradFn>(*res, mlxc::ValueAndGradFn(f));
  MLXC_CATCH(1)
  return 0;
}
int mlx_compile(mlx_closure* res, const mlx_closure fun, bool shapeless) {
  MLXC_TRY
  if (!shapeless) {
    mlxc::set(*res, mx::compile(mlxc::closure(fun), false));
  } else {
    // Its trace is marked (mlxc::in_shapeless_trace): ops that trust bounds made for the traced
    // shapes check again there, as the replays may run on other shapes.
    mlxc::set(*res, mx::compile(
                        [f = mlxc::closure(fun)](const std::vector<mx::array>& in) {
                          mlxc::ShapelessTrace mark;
                          return f(in);
                        },
                        true));
  }
  MLXC_CATCH(1)
  return 0;
}
int mlx_detail_compile_clear_cache(void) {
  MLXC_TRY
  mx::detail::compile_clear_cache(mx::detail::compile_cache());
  MLXC_CATCH(1)
  return 0;
}
int mlx_disable_compile(void) {
  MLXC_TRY
  mx::disable_compile();
  MLXC_CATCH(1)
  return 0;
}
int mlx_enable_compile(void) {
  MLXC_TRY
  mx::enable_compile();
  MLXC_CATCH(1)
  return 0;
}
int mlx_set_compile_mode(mlx_compile_mode mode) {
  MLXC_TRY
  mx::set_compile_mode(static_cast<mx::CompileMode>(mode));
  MLXC_CATCH(1)
  return 0;
}

int mlx_get_active_memory(size_t* res) {
  MLXC_TRY
  *res = mlxc::active_memory();
  MLXC_CATCH(1)
  return 0;
}
int mlx_get_cache_memory(size_t* res) {
  MLXC_TRY
  *res = mlxc::cache_memory();
  MLXC_CATCH(1)
  return 0;
}
int mlx_get_memory_limit(size_t* res) {
  MLXC_TRY
  *res = mx::get_memory_limit();
  MLXC_CATCH(1)
  return 0;
}
int mlx_get_peak_memory(size_t* res) {
  MLXC_TRY
  *res = mlxc::peak_memory();
  MLXC_CATCH(1)
  return 0;
}
int mlx_reset_peak_memory(void) {
  MLXC_TRY
  mlxc::reset_peak_memory();
  MLXC_CATCH(1)
  return 0;
}
int mlx_set_cache_limit(size_t* res, size_t limit) {
  MLXC_TRY
  *res = mlxc::set_cache_limit(limit);
  MLXC_CATCH(1)
  return 0;
}
int mlx_set_memory_limit(size_t* res, size_t limit) {
  MLXC_TRY
  *res = mx::set_memory_limit(limit);
  MLXC_CATCH(1)
  return 0;
}
int mlx_set_wired_limit(size_t* res, size_t limit) {
  MLXC_TRY
  *res = mx::set_wired_limit(limit);
  MLXC_CATCH(1)
  return 0;
}
int mlx_clear_cache(void) {
  MLXC_TRY
  mlxc::clear_cache();
  MLXC_CATCH(1)
  return 0;
}

}  // extern "C"

// Closures built from C callbacks. A closure handle owns a std::function; the C callback gets
// fresh input handles, fills the result handles, and returns non-zero on failure (after reporting
// through the error handler, which becomes a C++ exception here so MLX unwinds its transform).
#include <memory>

#include "mlxc_private.h"

using mlxc::array;

namespace {

using Payload = std::shared_ptr<void>;
Payload payload_of(void* p, mlx_payload_dtor dtor) {
  return Payload(p, [dtor](void* q) {
    if (dtor) dtor(q);
  });
}

/** Frees the temporary handles given to a callback, whatever happens. */
struct Handles {
  std::vector<mlx_vector_array> vs;
  mlx_vector_array add(std::vector<array> v) { return vs.emplace_back(mlxc::new_vector(std::move(v))); }
  ~Handles() {
    for (auto& v : vs) mlx_vector_array_free(v);
  }
};

std::vector<array> take(mlx_vector_array v) { return v.ctx ? *static_cast<std::vector<array>*>(v.ctx) : std::vector<array>{}; }

[[noreturn]] void callback_failed(const char* what) { throw std::runtime_error(std::string(what) + " callback returned an error"); }

template <typename Fn, typename H>
H make_handle(Fn fn) {
  // An entry point of its own (the closure constructors return it): nothing may cross the C ABI.
  MLXC_TRY
  return H{new Fn(std::move(fn))};
  MLXC_CATCH(H{nullptr})
}

mlxc::ClosureFn wrap(mlx_closure_fun_payload fun, Payload payload) {
  return [fun, payload](const std::vector<array>& in) {
    Handles h;
    mlx_vector_array input = h.add(in);
    mlx_vector_array res = h.add({});
    if (fun(&res, input, payload.get())) callback_failed("closure");
    return take(res);
  };
}

mlxc::CustomFn wrap_custom(mlx_closure_custom_fun_payload fun, Payload payload) {
  return [fun, payload](const std::vector<array>& primals, const std::vector<array>& cotangents, const std::vector<array>& outputs) {
    Handles h;
    mlx_vector_array a = h.add(primals), b = h.add(cotangents), c = h.add(outputs), res = h.add({});
    if (fun(&res, a, b, c, payload.get())) callback_failed("custom vjp");
    return take(res);
  };
}

mlxc::CustomJvpFn wrap_custom_jvp(mlx_closure_custom_jvp_fun_payload fun, Payload payload) {
  return [fun, payload](const std::vector<array>& primals, const std::vector<array>& tangents, const std::vector<int>& argnums) {
    Handles h;
    mlx_vector_array a = h.add(primals), b = h.add(tangents), res = h.add({});
    if (fun(&res, a, b, argnums.data(), argnums.size(), payload.get())) callback_failed("custom jvp");
    return take(res);
  };
}

mlxc::ValueAndGradFn wrap_vag(mlx_closure_value_and_grad_fun_payload fun, Payload payload) {
  return [fun, payload](const std::vector<array>& in) {
    Handles h;
    mlx_vector_array input = h.add(in), r0 = h.add({}), r1 = h.add({});
    if (fun(&r0, &r1, input, payload.get())) callback_failed("value_and_grad");
    return std::make_pair(take(r0), take(r1));
  };
}

// Adapters from the payload-less callback forms.
struct Plain {
  void* f;
};
}  // namespace

#define MLXC_CLOSURE_COMMON(C, Fn)                  \
  extern "C" C C##_new(void) { return C{nullptr}; } \
  extern "C" int C##_free(C cls) {                  \
    delete static_cast<Fn*>(cls.ctx);               \
    return 0;                                       \
  }                                                 \
  extern "C" int C##_set(C* cls, const C src) {     \
    MLXC_TRY                                        \
    mlxc::assign<Fn>(*cls, mlxc::get<Fn>(src, #C)); \
    MLXC_CATCH(1)                                   \
    return 0;                                       \
  }

MLXC_CLOSURE_COMMON(mlx_closure, mlxc::ClosureFn)
MLXC_CLOSURE_COMMON(mlx_closure_value_and_grad, mlxc::ValueAndGradFn)
MLXC_CLOSURE_COMMON(mlx_closure_custom, mlxc::CustomFn)
MLXC_CLOSURE_COMMON(mlx_closure_custom_jvp, mlxc::CustomJvpFn)

extern "C" {

mlx_closure mlx_closure_new_func_payload(mlx_closure_fun_payload fun, void* payload, mlx_payload_dtor dtor) {
  return make_handle<mlxc::ClosureFn, mlx_closure>(wrap(fun, payload_of(payload, dtor)));
}
mlx_closure mlx_closure_new_func(mlx_closure_fun fun) {
  return make_handle<mlxc::ClosureFn, mlx_closure>([fun](const std::vector<array>& in) {
    Handles h;
    mlx_vector_array input = h.add(in), res = h.add({});
    if (fun(&res, input)) callback_failed("closure");
    return take(res);
  });
}
mlx_closure mlx_closure_new_unary(mlx_closure_unary_fun fun) {
  return make_handle<mlxc::ClosureFn, mlx_closure>([fun](const std::vector<array>& in) {
    if (in.size() != 1) throw std::invalid_argument("unary closure expects exactly one input");
    mlx_array input{new array(in[0])}, res{nullptr};
    int rc = fun(&res, input);
    mlx_array_free(input);
    if (rc) {
      mlx_array_free(res);
      callback_failed("unary closure");
    }
    std::vector<array> out{mlxc::arr(res)};
    mlx_array_free(res);
    return out;
  });
}
int mlx_closure_apply(mlx_vector_array* res, mlx_closure cls, const mlx_vector_array input) {
  MLXC_TRY
  mlxc::set(*res, mlxc::closure(cls)(mlxc::vec(input)));
  MLXC_CATCH(1)
  return 0;
}

mlx_closure_value_and_grad mlx_closure_value_and_grad_new_func_payload(mlx_closure_value_and_grad_fun_payload fun, void* payload,
                                                                       mlx_payload_dtor dtor) {
  return make_handle<mlxc::ValueAndGradFn, mlx_closure_value_and_grad>(wrap_vag(fun, payload_of(payload, dtor)));
}
mlx_closure_value_and_grad mlx_closure_value_and_grad_new_func(mlx_closure_value_and_grad_fun fun) {
  return make_handle<mlxc::ValueAndGradFn, mlx_closure_value_and_grad>([fun](const std::vector<array>& in) {
    Handles h;
    mlx_vector_array input = h.add(in), r0 = h.add({}), r1 = h.add({});
    if (fun(&r0, &r1, input)) callback_failed("value_and_grad");
    return std::make_pair(take(r0), take(r1));
  });
}
int mlx_closure_value_and_grad_apply(mlx_vector_array* res_0, mlx_vector_array* res_1, mlx_closure_value_and_grad cls,
                                     const mlx_vector_array input) {
  MLXC_TRY
  auto r = mlxc::get<mlxc::ValueAndGradFn>(cls, "mlx_closure_value_and_grad")(mlxc::vec(input));
  mlxc::set(*res_0, r.first);
  mlxc::set(*res_1, r.second);
  MLXC_CATCH(1)
  return 0;
}

mlx_closure_custom mlx_closure_custom_new_func_payload(mlx_closure_custom_fun_payload fun, void* payload, mlx_payload_dtor dtor) {
  return make_handle<mlxc::CustomFn, mlx_closure_custom>(wrap_custom(fun, payload_of(payload, dtor)));
}
mlx_closure_custom mlx_closure_custom_new_func(mlx_closure_custom_fun fun) {
  return make_handle<mlxc::CustomFn, mlx_closure_custom>(
      [fun](const std::vector<array>& a, const std::vector<array>& b, const std::vector<array>& c) {
        Handles h;
        mlx_vector_array x = h.add(a), y = h.add(b), z = h.add(c), res = h.add({});
        if (fun(&res, x, y, z)) callback_failed("custom vjp");
        return take(res);
      });
}
int mlx_closure_custom_apply(mlx_vector_array* res, mlx_closure_custom cls, const mlx_vector_array input_0, const mlx_vector_array input_1,
                             const mlx_vector_array input_2) {
  MLXC_TRY
  mlxc::set(*res, mlxc::get<mlxc::CustomFn>(cls, "mlx_closure_custom")(mlxc::vec(input_0), mlxc::vec(input_1), mlxc::vec(input_2)));
  MLXC_CATCH(1)
  return 0;
}

mlx_closure_custom_jvp mlx_closure_custom_jvp_new_func_payload(mlx_closure_custom_jvp_fun_payload fun, void* payload,
                                                               mlx_payload_dtor dtor) {
  return make_handle<mlxc::CustomJvpFn, mlx_closure_custom_jvp>(wrap_custom_jvp(fun, payload_of(payload, dtor)));
}
mlx_closure_custom_jvp mlx_closure_custom_jvp_new_func(mlx_closure_custom_jvp_fun fun) {
  return make_handle<mlxc::CustomJvpFn, mlx_closure_custom_jvp>(
      [fun](const std::vector<array>& a, const std::vector<array>& b, const std::vector<int>& argnums) {
        Handles h;
        mlx_vector_array x = h.add(a), y = h.add(b), res = h.add({});
        if (fun(&res, x, y, argnums.data(), argnums.size())) callback_failed("custom jvp");
        return take(res);
      });
}
int mlx_closure_custom_jvp_apply(mlx_vector_array* res, mlx_closure_custom_jvp cls, const mlx_vector_array input_0,
                                 const mlx_vector_array input_1, const int* input_2, size_t input_2_num) {
  MLXC_TRY
  mlxc::set(*res, mlxc::get<mlxc::CustomJvpFn>(cls, "mlx_closure_custom_jvp")(mlxc::vec(input_0), mlxc::vec(input_1),
                                                                              std::vector<int>(input_2, input_2 + input_2_num)));
  MLXC_CATCH(1)
  return 0;
}

}  // extern "C"

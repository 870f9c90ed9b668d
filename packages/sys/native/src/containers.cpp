// Strings and vectors of handles. A vector owns copies of the C++ objects; get() hands out a new
// reference (assigned into res, as every out-parameter).
#include "mlxc_private.h"

using mlxc::array;

extern "C" {

mlx_string mlx_string_new(void) { return mlx_string{nullptr}; }
mlx_string mlx_string_new_data(const char* s) {
  MLXC_TRY
  return mlx_string{new std::string(s ? s : "")};
  MLXC_CATCH(mlx_string{nullptr})
}
int mlx_string_set(mlx_string* str, const mlx_string src) {
  MLXC_TRY
  mlxc::assign<std::string>(*str, mlxc::get<std::string>(src, "mlx_string"));
  MLXC_CATCH(1)
  return 0;
}
const char* mlx_string_data(mlx_string s) { return s.ctx ? static_cast<std::string*>(s.ctx)->c_str() : nullptr; }
int mlx_string_free(mlx_string s) {
  delete static_cast<std::string*>(s.ctx);
  return 0;
}
int mlx_version(mlx_string* str) {
  MLXC_TRY
  mlxc::assign<std::string>(*str, std::string(mlx::core::version()));
  MLXC_CATCH(1)
  return 0;
}

}  // extern "C"

namespace {
// Element adapters: how a C element becomes the stored C++ value and back.
template <typename C>
struct Elem;
template <>
struct Elem<mlx_array> {
  using T = array;
  static T in(const mlx_array& a) { return mlxc::arr(a); }
  static void out(mlx_array* r, const T& v) { mlxc::set(*r, v); }
};
template <>
struct Elem<mlx_vector_array> {
  using T = std::vector<array>;
  static T in(const mlx_vector_array& a) { return mlxc::vec(a); }
  static void out(mlx_vector_array* r, const T& v) { mlxc::set(*r, v); }
};
template <>
struct Elem<int> {
  using T = int;
  static T in(int v) { return v; }
  static void out(int* r, int v) { *r = v; }
};
template <>
struct Elem<const char*> {
  using T = std::string;
  static T in(const char* v) { return std::string(v ? v : ""); }
  // The pointer stays valid while the vector is alive and unchanged.
  static void out(char** r, const T& v) { *r = const_cast<char*>(v.c_str()); }
};
}  // namespace

#define MLXC_VECTOR(V, C, DATA, OUT)                                                                                 \
  extern "C" V V##_new(void) { return V{nullptr}; }                                                                  \
  extern "C" int V##_set(V* vec, const V src) {                                                                      \
    MLXC_TRY                                                                                                         \
    mlxc::assign<std::vector<Elem<C>::T>>(*vec, mlxc::get<std::vector<Elem<C>::T>>(src, #V));                        \
    MLXC_CATCH(1)                                                                                                    \
    return 0;                                                                                                        \
  }                                                                                                                  \
  extern "C" int V##_free(V vec) {                                                                                   \
    delete static_cast<std::vector<Elem<C>::T>*>(vec.ctx);                                                           \
    return 0;                                                                                                        \
  }                                                                                                                  \
  static std::vector<Elem<C>::T> V##_from(DATA data, size_t size) {                                                  \
    std::vector<Elem<C>::T> v;                                                                                       \
    v.reserve(size);                                                                                                 \
    for (size_t i = 0; i < size; i++) v.push_back(Elem<C>::in(data[i]));                                             \
    return v;                                                                                                        \
  }                                                                                                                  \
  extern "C" V V##_new_data(DATA data, size_t size) {                                                                \
    try {                                                                                                            \
      return V{new std::vector<Elem<C>::T>(V##_from(data, size))};                                                   \
    } catch (const std::exception& e) {                                                                              \
      mlxc::raise(e.what());                                                                                         \
      return V{nullptr};                                                                                             \
    }                                                                                                                \
  }                                                                                                                  \
  extern "C" V V##_new_value(C val) { return V##_new_data(&val, 1); }                                                \
  extern "C" int V##_set_data(V* vec, DATA data, size_t size) {                                                      \
    MLXC_TRY                                                                                                         \
    mlxc::assign<std::vector<Elem<C>::T>>(*vec, V##_from(data, size));                                               \
    MLXC_CATCH(1)                                                                                                    \
    return 0;                                                                                                        \
  }                                                                                                                  \
  extern "C" int V##_set_value(V* vec, C val) { return V##_set_data(vec, &val, 1); }                                 \
  extern "C" int V##_append_data(V vec, DATA data, size_t size) {                                                    \
    MLXC_TRY                                                                                                         \
    auto& v = mlxc::get<std::vector<Elem<C>::T>>(vec, #V);                                                           \
    auto add = V##_from(data, size);                                                                                 \
    v.insert(v.end(), add.begin(), add.end());                                                                       \
    MLXC_CATCH(1)                                                                                                    \
    return 0;                                                                                                        \
  }                                                                                                                  \
  extern "C" int V##_append_value(V vec, C val) { return V##_append_data(vec, &val, 1); }                            \
  extern "C" size_t V##_size(V vec) { return vec.ctx ? static_cast<std::vector<Elem<C>::T>*>(vec.ctx)->size() : 0; } \
  extern "C" int V##_get(OUT res, const V vec, size_t idx) {                                                         \
    MLXC_TRY                                                                                                         \
    auto& v = mlxc::get<std::vector<Elem<C>::T>>(vec, #V);                                                           \
    if (idx >= v.size())                                                                                             \
      throw std::out_of_range(std::string(#V "_get: index ") + std::to_string(idx) + " out of range for size " +     \
                              std::to_string(v.size()));                                                             \
    Elem<C>::out(res, v[idx]);                                                                                       \
    MLXC_CATCH(1)                                                                                                    \
    return 0;                                                                                                        \
  }

MLXC_VECTOR(mlx_vector_array, mlx_array, const mlx_array*, mlx_array*)
MLXC_VECTOR(mlx_vector_vector_array, mlx_vector_array, const mlx_vector_array*, mlx_vector_array*)
MLXC_VECTOR(mlx_vector_int, int, int*, int*)
MLXC_VECTOR(mlx_vector_string, const char*, const char**, char**)

// Error handling with mlx-c's semantics: every entry point catches C++ exceptions and reports them
// through one process-wide handler; the default handler prints the message and exits, as mlx-c's
// does. Bindings (like @mlx/sys) install their own handler at load.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "mlxc_private.h"

namespace {
void default_handler(const char* msg, void*) {
  std::fprintf(stderr, "MLX error: %s\n", msg);
  std::exit(-1);
}
std::mutex mu;
mlx_error_handler_func handler = default_handler;
void* handler_data = nullptr;
mlx_payload_dtor handler_dtor = nullptr;

// The thread-error handler (mlxc_use_thread_errors): the message stays with the thread that
// failed, for that thread to take (mlxc_take_error). Each JS thread of a process (the main thread,
// every worker) calls in on its own OS thread, so none reads another's message, and no handler is
// a JS callback that belongs to one of them.
thread_local std::string last_error;
thread_local bool has_error = false;
void record_handler(const char* msg, void*) {
  last_error = msg ? msg : "";
  has_error = true;
}
}  // namespace

extern "C" int mlxc_use_thread_errors(void) {
  std::lock_guard<std::mutex> lock(mu);
  if (handler_dtor) handler_dtor(handler_data);
  handler = record_handler;
  handler_data = nullptr;
  handler_dtor = nullptr;
  return 0;
}

extern "C" int mlxc_take_error(void* buf_, size_t cap, size_t* len) {
  auto* buf = static_cast<char*>(buf_);
  const std::string& msg = has_error ? last_error : std::string();
  if (len) *len = has_error ? msg.size() : 0;
  if (cap) {
    size_t k = std::min(cap - 1, msg.size());
    std::memcpy(buf, msg.data(), k);
    buf[k] = 0;
  }
  // A message longer than the buffer stays (when len is asked for), for a larger buffer to read.
  if (!len || msg.size() < cap) {
    last_error.clear();
    has_error = false;
  }
  return 0;
}

extern "C" void mlx_set_error_handler(mlx_error_handler_func h, void* data, mlx_payload_dtor dtor) {
  std::lock_guard<std::mutex> lock(mu);
  if (handler_dtor) handler_dtor(handler_data);
  handler = h ? h : default_handler;
  handler_data = data;
  handler_dtor = dtor;
}

void mlxc::raise(const char* msg) {
  mlx_error_handler_func h;
  void* data;
  {
    std::lock_guard<std::mutex> lock(mu);
    h = handler;
    data = handler_data;
  }
  h(msg, data);
}

std::string mlxc::alloc_message(const std::bad_alloc& e) {
  std::string what = e.what();
  if (what.rfind("[malloc]", 0) == 0) return what;
  return "[malloc] Unable to allocate memory (" + what + ")";
}

void mlxc::check_result_size(const array& v) {
  double bytes = static_cast<double>(v.itemsize());
  for (auto d : v.shape()) bytes *= static_cast<double>(d);
  if (bytes < 4.6e18) return;  // 2^62
  std::string shape;
  for (size_t i = 0; i < v.ndim(); i++) shape += (i ? ", " : "") + std::to_string(v.shape(i));
  char n[32];
  std::snprintf(n, sizeof n, "%.3g", bytes);
  throw std::invalid_argument("[shape] an array of shape [" + shape + "] would hold " + n +
                              " bytes, more than any memory (its element count overflows MLX's size arithmetic)");
}

// Synchronous CPU evaluation on the calling thread.
//
// MLX's CPU backend queues every primitive's work (and a second task that keeps its inputs alive)
// on its stream's own thread: the thread that calls eval() walks the graph and allocates, the
// stream thread computes, and the caller then waits on an event. On a small graph each task is a
// few microseconds of work behind a condition-variable wake-up of the stream thread, so a model
// of a few hundred nodes spends most of its evaluation handing tasks across threads.
//
// This library defines MLX's Scheduler::enqueue, signal_event and wait_event itself. libmlx calls
// them through its PLT, and the dynamic linker binds those calls to the first definition in
// load order, which is this library's (libmlx is its dependency); each one forwards to libmlx's
// own definition, except on a thread inside an InlineEval scope, where work for that scope's CPU
// stream runs at once, in order, on the calling thread. That is the order the stream thread would
// run it in, so the results are the same. The scope requires that nothing else is queued on the
// stream at the time (no asynchronous evaluation of the stream in flight), which holds for the
// synchronous evaluations that open it (eval_within): the one thread that evaluates a session's
// stream at a time waits for every evaluation it starts.
//
// Where the binding does not happen (a libmlx linked with -Bsymbolic, or loaded before this
// library with its symbols already bound), MLX's own functions run and evaluation works as
// before; inline_tasks() then stays at 0. MLXC_INLINE_EVAL=0 turns the inline mode off.
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <string>

#include "env.h"
#include "inline_eval.h"
#include "mlxc/functions.h"
#include "mlxc_private.h"
#include "mlx/event.h"
#include "mlx/scheduler.h"
#include "mlx/primitives.h"
#include "mlx/transforms.h"

namespace mx = mlx::core;
namespace sched = mlx::core::scheduler;

namespace {

/** The inline scope of this thread, if any. */
thread_local mlxc::InlineEval* current = nullptr;

std::atomic<uint64_t> inline_count{0};

/** Asynchronous evaluations in flight, by CPU stream index. */
std::mutex flight_mutex;
std::map<int, int>& in_flight() {
  static auto* m = new std::map<int, int>();  // never freed: stream threads may outlive statics
  return *m;
}

using EnqueueFn = void (*)(sched::Scheduler*, mx::Stream, std::function<void()>*);
using EventFn = void (*)(sched::Scheduler*, mx::Stream, mx::Event*, std::function<void(mx::Event&)>*);

struct Originals {
  EnqueueFn enqueue = nullptr;
  EventFn signal_event = nullptr;
  EventFn wait_event = nullptr;
};

const Originals& originals() {
  static Originals o = [] {
    Originals r;
    r.enqueue = reinterpret_cast<EnqueueFn>(mlxc::libmlx_symbol("_ZN3mlx4core9scheduler9Scheduler7enqueueENS0_6StreamESt8functionIFvvEE"));
    r.signal_event = reinterpret_cast<EventFn>(
        mlxc::libmlx_symbol("_ZN3mlx4core9scheduler9Scheduler12signal_eventENS0_6StreamENS0_5EventESt8functionIFvRS4_EE"));
    r.wait_event = reinterpret_cast<EventFn>(
        mlxc::libmlx_symbol("_ZN3mlx4core9scheduler9Scheduler10wait_eventENS0_6StreamENS0_5EventESt8functionIFvRS4_EE"));
    return r;
  }();
  return o;
}

bool inline_enabled() {
  static bool on = [] {
    if (mlxc::env_off("MLXC_INLINE_EVAL")) return false;
    const auto& o = originals();
    // Without MLX's own functions to forward to, the interposers cannot work: stay off (and the
    // interposers are then never reached with a scope open, see below).
    return o.enqueue && o.signal_event && o.wait_event;
  }();
  return on;
}

/** The scope that takes work for `s` on this thread, if any. */
mlxc::InlineEval* scope_for(const mx::Stream& s) {
  auto* c = current;
  return c && c->stream() == s ? c : nullptr;
}

[[noreturn]] void missing(const char* what) {
  // Only reachable if libmlx's definition cannot be found while its callers bind to this one.
  std::fprintf(stderr, "mlxc: MLX's %s was not found; cannot continue\n", what);
  std::abort();
}

}  // namespace

namespace mlxc {

void* libmlx_symbol(const char* mangled) {
  Dl_info info{};
  // The address of a function only libmlx defines.
  auto probe = reinterpret_cast<void*>(static_cast<void (*)(std::vector<mx::array>)>(&mx::eval));
  if (!dladdr(probe, &info) || !info.dli_fname) return nullptr;
  void* lib = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  return lib ? dlsym(lib, mangled) : nullptr;
}

InlineEval::InlineEval(const mx::Stream& s) : stream_(s) {
  if (s.device != mx::Device::cpu || !inline_enabled() || current) return;
  {
    std::lock_guard<std::mutex> lk(flight_mutex);
    auto it = in_flight().find(s.index);
    if (it != in_flight().end() && it->second > 0) return;
  }
  active_ = true;
  current = this;
}

InlineEval::~InlineEval() {
  if (active_) current = nullptr;
}

void InlineEval::run(const std::function<void()>& task) {
  inline_count.fetch_add(1, std::memory_order_relaxed);
  try {
    task();
  } catch (...) {
    // The stream thread keeps the first error and runs the rest of the queue; so does this.
    if (!error_) error_ = std::current_exception();
  }
}

void InlineEval::rethrow() {
  if (!error_) return;
  auto e = error_;
  error_ = nullptr;
  std::rethrow_exception(e);
}

bool inline_available() { return inline_enabled(); }

uint64_t inline_tasks() { return inline_count.load(std::memory_order_relaxed); }

void async_begin(const mx::Stream& s) {
  std::lock_guard<std::mutex> lk(flight_mutex);
  in_flight()[s.index]++;
}

void async_end(const mx::Stream& s) {
  std::lock_guard<std::mutex> lk(flight_mutex);
  auto it = in_flight().find(s.index);
  if (it != in_flight().end() && --it->second <= 0) in_flight().erase(it);
}

std::optional<mx::Stream> cpu_stream_of(const std::vector<mx::array>& outs) {
  for (const auto& o : outs) {
    if (o.status() == mx::array::Status::unscheduled && o.has_primitive()) {
      auto s = o.primitive().stream();
      return s.device == mx::Device::cpu ? std::optional<mx::Stream>(s) : std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace mlxc

// The interposers. Their signatures are MLX's (scheduler.h); they must stay in step with the
// pinned MLX version (packages/sys/mlx-wheel.json).
namespace mlx::core::scheduler {

void Scheduler::enqueue(Stream s, std::function<void()> task) {
  if (auto* scope = scope_for(s)) return scope->run(task);
  auto f = originals().enqueue;
  if (!f) missing("Scheduler::enqueue");
  f(this, s, &task);
}

void Scheduler::signal_event(Stream s, Event event, std::function<void(Event&)> task) {
  if (auto* scope = scope_for(s)) return scope->run([&] { task(event); });
  auto f = originals().signal_event;
  if (!f) missing("Scheduler::signal_event");
  f(this, s, &event, &task);
}

void Scheduler::wait_event(Stream s, Event event, std::function<void(Event&)> task) {
  // Waits for another stream's event (an input computed elsewhere): at once, on this thread. (An
  // error that event carries stays with its own stream, reported by that stream's evaluations:
  // libmlx does not export the accessor that copying it here would need.)
  if (auto* scope = scope_for(s)) return scope->run([&] { task(event); });
  auto f = originals().wait_event;
  if (!f) missing("Scheduler::wait_event");
  f(this, s, &event, &task);
}

}  // namespace mlx::core::scheduler

extern "C" int mlxc_inline_eval_tasks(uint64_t* res) {
  *res = mlxc::inline_tasks();
  return 0;
}

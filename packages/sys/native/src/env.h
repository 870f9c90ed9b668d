// The library's MLXC_* switches, read from the environment in one way. A default-on feature is
// turned off by "0" (env_off); a default-off aid is turned on by any value but "" and "0"
// (env_on). Callers that read a switch once keep the answer in a static themselves.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mlxc {

/** Whether environment variable `name` is "0": the switch that turns a default-on feature off. */
inline bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v && std::string_view(v) == "0";
}

/** Whether environment variable `name` is set to anything but "" and "0": the switch that turns a default-off aid on. */
inline bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string_view(v) != "0";
}

/**
 * A huge-page budget in MiB from environment variable `name`, as bytes: `default_mib` where it is
 * unset or empty; an error naming it where it is not a whole number of MiB (at most 2^24).
 */
inline size_t env_budget_mib(const char* name, size_t default_mib) {
  const char* v = std::getenv(name);
  if (!v || !*v) return default_mib << 20;
  char* end = nullptr;
  unsigned long long mib = std::strtoull(v, &end, 10);
  if (*end || mib > (size_t{1} << 24))
    throw std::invalid_argument(std::string(name) + "=" + v + ": expected a budget in MiB (0: no huge pages)");
  return static_cast<size_t>(mib) << 20;
}

}  // namespace mlxc

// The library's MLXC_* switches, read from the environment in one way. A default-on feature is
// turned off by "0" (env_off); a default-off aid is turned on by any value but "" and "0"
// (env_on). Callers that read a switch once keep the answer in a static themselves.
#pragma once

#include <cstdlib>
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

}  // namespace mlxc

// Error type used across tessera. Every message names what is at fault: the file, tensor, field or
// request parameter, so that a user can act on it without reading the code.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace tessera::core {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tessera::core

// Throws tessera::core::Error with a formatted message when `cond` is false.
#define TESSERA_CHECK(cond, ...)                     \
  do {                                               \
    if (!(cond)) ::tessera::core::fail(__VA_ARGS__); \
  } while (0)

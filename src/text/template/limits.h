// Bounds on one template render. A template that exceeds one fails with a TemplateError; the
// defaults are far above what a real chat template needs and far below what hurts the server.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::text::tpl {

struct Limits {
  uint64_t max_steps = 50'000'000;      // evaluation work units
  size_t max_output_bytes = 64u << 20;  // rendered text
  size_t max_string_bytes = 64u << 20;  // any single string built while rendering
  size_t max_objects = 4'000'000;       // lists, dicts, scopes, macros created
  // Bytes of strings, list items and dict entries built while rendering, counted when built and
  // never uncounted (lists live until the render ends): what bounds the memory one render can take,
  // whatever the template does with range(), split() or doubling lists.
  size_t max_memory_bytes = 256u << 20;
  int max_depth = 200;  // nesting: template syntax, macro calls, data
};

}  // namespace tessera::text::tpl

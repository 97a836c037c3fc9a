// Parses and renders arbitrary template source against a fixed small conversation. Any input
// must end in output or a TemplateError: no crash, hang, sanitizer report or unbounded memory.
// The limits are small (a 32 MiB memory budget, nesting 100 deep) so that an input that grows
// memory (range, split, doubling lists) or nests deeply reaches them within the per-input timeout,
// and libFuzzer's -rss_limit_mb (scripts/fuzz.sh: 2048) catches any allocation they do not count.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "text/template/chat_template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const auto ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "image_url", "image_url": {"url": "x"}}]},
      {"role": "assistant", "content": null, "reasoning_content": "think",
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, "é"]}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "{\"ok\": true}"},
      {"role": "user", "content": "Bye 你好"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}],
    "documents": null,
    "add_generation_prompt": true,
    "bos_token": "<s>",
    "eos_token": "</s>",
    "thinking": false,
    "n": 3,
    "x": 1.5
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  tessera::text::TemplateLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1 << 20;
  limits.max_string_bytes = 1 << 20;
  limits.max_objects = 100'000;
  limits.max_depth = 100;
  limits.max_memory_bytes = 32u << 20;
  try {
    auto tpl = tessera::text::Template::parse(std::string_view(reinterpret_cast<const char*>(data), size), limits);
    (void)tpl.render(context());
  } catch (const tessera::text::TemplateError&) {
  }
  return 0;
}

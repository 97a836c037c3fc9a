// Chat templates: find a model's template, and render an OpenAI-style conversation with it the way
// HF transformers' apply_chat_template does (the variables it passes, Kimi's tool-key sorting).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>

#include "text/template/template.h"

namespace tessera::text {

struct ChatRenderInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null (the template sees None) or an array of tool schemas
  bool add_generation_prompt = true;
  // Unset (the tokenizer has none, e.g. Qwen's "bos_token": null): the variable is not passed, so
  // the template sees it undefined -- `{{ bos_token }}` prints nothing, `{% if bos_token %}` is
  // false. transformers does the same: special_tokens_map leaves out a token that is None.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // chat_template_kwargs (e.g. {"thinking": false}); each becomes a template variable.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
};

struct ChatTemplateOptions {
  // Sort the keys of `tools` recursively before rendering, as Kimi's tokenizer (deep_sort_dict)
  // does: the JSON a Kimi model sees in its tool declaration is key-sorted.
  bool sort_tool_keys = false;
  TemplateLimits limits;
};

class ChatTemplate {
 public:
  // Parses the template; throws TemplateError.
  ChatTemplate(std::string_view source, ChatTemplateOptions options = {});

  // Throws TemplateError when the template fails for this conversation (the server answers 400).
  std::string render(const ChatRenderInput& input) const;

  const ChatTemplateOptions& options() const { return options_; }

 private:
  Template template_;
  ChatTemplateOptions options_;
};

// Where a template came from and how to render it.
struct ChatTemplateSource {
  std::string source;
  std::string origin;           // file (and entry) it was read from, for messages
  bool sort_tool_keys = false;  // Kimi-style tokenizer detected
};

// The template of a Hugging Face model directory: chat_template.jinja, else
// tokenizer_config.json's chat_template (a string, or a list of {name, template} where "tool_use"
// is chosen when `has_tools` and it exists, else "default"). Throws core::Error when none exists.
ChatTemplateSource find_chat_template(const std::filesystem::path& model_dir, bool has_tools);

// True for Kimi-style (tiktoken) tokenizers, which sort tool keys before rendering:
// tiktoken.model present, or tokenizer_config.json naming TikTokenTokenizer / tokenization_kimi.
bool model_sorts_tool_keys(const std::filesystem::path& model_dir);

// Heuristic for a template file given without its model: Kimi's role markers.
bool template_looks_like_kimi(std::string_view source);

// Recursively sorts object keys (Python's sorted() order on str keys).
nlohmann::ordered_json deep_sort_keys(const nlohmann::ordered_json& j, int depth = 0);

}  // namespace tessera::text

// What the server knows about the model it serves, resolved once at start-up: its public name,
// tokenizer, chat templates, stop ids, context limit and the reasoning / tool-call markers of its
// vocabulary.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/reasoning/reasoning_parser.h"
#include "text/reasoning/tool_call_parser.h"
#include "text/template/chat_template.h"
#include "text/tokenizer/tokenizer.h"
#include "server/output_constraint.h"
#include "server/tool_rendering.h"

namespace tessera::server {

struct ServedModel {
  std::string id;  // --served-model-name (or the directory name)
  std::string owned_by = "tessera";
  bool random_weights = false;  // the built-in demo model
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::unique_ptr<text::ChatTemplate> chat_template;        // conversations without tools
  std::unique_ptr<text::ChatTemplate> chat_template_tools;  // with tools (tokenizer_config "tool_use")
  std::optional<std::string> bos_token, eos_token;          // tokenizer_config.json; unset when null or absent
  std::vector<int32_t> eos_ids;
  int64_t vocab_size = 0;  // rows of the model's logits (>= the tokenizer's vocabulary)
  int64_t max_model_len = 0;
  bool kimi = false;  // Kimi-style tokenizer: sort tool keys, thinking on by default
  bool default_thinking = false;
  text::ReasoningMarkers reasoning;
  text::ToolCallMarkers tools;
  ToolRendering tool_rendering;  // what the tools template does with tools, and tessera's repair
  // response_format / tool_choice grammars (shared by the request threads; internally locked).
  std::shared_ptr<OutputConstraints> constraints;
};

struct ServedModelOptions {
  std::filesystem::path model_dir;
  std::string served_name;
  std::string chat_template_file;  // overrides the model's template
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  std::vector<int32_t> config_eos_ids;  // config.json / generation_config.json eos_token_id
  bool random_weights = false;
};

// Loads the tokenizer and chat template of `model_dir`; throws core::Error naming what is missing.
ServedModel load_served_model(const ServedModelOptions& o);

}  // namespace tessera::server

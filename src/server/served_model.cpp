#include "core/file.h"
#include "server/served_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.h"
#include "text/tokenizer/load_util.h"

namespace tessera::server {

namespace fs = std::filesystem;

ServedModel load_served_model(const ServedModelOptions& o) {
  ServedModel m;
  m.id = !o.served_name.empty() ? o.served_name : fs::absolute(o.model_dir).filename().string();
  m.random_weights = o.random_weights;
  m.tokenizer = text::load_tokenizer(o.model_dir);
  m.vocab_size = std::max<int64_t>(o.vocab_size, m.tokenizer->vocab_size());
  m.max_model_len = o.max_model_len;
  m.kimi = text::model_sorts_tool_keys(o.model_dir);
  m.default_thinking = m.kimi;  // K2-Thinking / K2.5 think by default; DeepSeek V3.x does not

  const text::TokenizerConfig tc = text::read_tokenizer_config(o.model_dir / "tokenizer_config.json", false);
  m.bos_token = tc.bos_token;
  m.eos_token = tc.eos_token;
  text::ChatTemplateOptions topts;
  topts.sort_tool_keys = m.kimi;
  if (!o.chat_template_file.empty()) {
    const std::string src = core::read_file(o.chat_template_file);
    m.chat_template = std::make_unique<text::ChatTemplate>(src, topts);
    m.chat_template_tools = std::make_unique<text::ChatTemplate>(src, topts);
  } else {
    m.chat_template = std::make_unique<text::ChatTemplate>(text::find_chat_template(o.model_dir, false).source, topts);
    m.chat_template_tools =
        std::make_unique<text::ChatTemplate>(text::find_chat_template(o.model_dir, true).source, topts);
  }
  m.eos_ids = o.config_eos_ids;
  if (auto e = m.tokenizer->eos_id()) m.eos_ids.push_back(*e);
  if (m.eos_token)
    if (auto e = m.tokenizer->token_to_id(*m.eos_token)) m.eos_ids.push_back(*e);
  // Kimi ends a turn with <|im_end|> (its eos) and may emit [EOS].
  for (const char* s : {"<|im_end|>", "[EOS]"})
    if (m.kimi)
      if (auto e = m.tokenizer->token_to_id(s)) m.eos_ids.push_back(*e);
  std::sort(m.eos_ids.begin(), m.eos_ids.end());
  m.eos_ids.erase(std::unique(m.eos_ids.begin(), m.eos_ids.end()), m.eos_ids.end());
  m.reasoning = text::find_reasoning_markers(*m.tokenizer);
  m.tools = text::find_tool_call_markers(*m.tokenizer);
  text::ChatRenderInput specials;
  specials.bos_token = m.bos_token;
  specials.eos_token = m.eos_token;
  m.tool_rendering = probe_tool_rendering(*m.chat_template_tools, specials, m.tools.format);
  m.constraints = std::make_shared<OutputConstraints>(*m.tokenizer, m.tools, m.reasoning);
  const ToolRendering& tr = m.tool_rendering;
  if (!tr.declares_tools || !tr.keeps_calls_with_text) {
    if (tr.rewrite)
      spdlog::info("{}", tr.describe());
    else
      spdlog::warn("{}", tr.describe());
  }
  return m;
}

}  // namespace tessera::server

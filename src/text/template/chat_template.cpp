#include "core/file.h"
#include "text/template/chat_template.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tessera::text {
namespace {

std::string read_text(const std::filesystem::path& p) { return core::read_file(p); }

nlohmann::ordered_json read_json(const std::filesystem::path& p) {
  try {
    return nlohmann::ordered_json::parse(read_text(p));
  } catch (const nlohmann::json::exception& e) {
    core::fail("{}: invalid JSON: {}", p.string(), e.what());
  }
}

}  // namespace

nlohmann::ordered_json deep_sort_keys(const nlohmann::ordered_json& j, int depth) {
  if (depth > 512) throw TemplateError("tools JSON is nested too deeply");
  if (j.is_object()) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : j.items()) keys.push_back(k);
    std::sort(keys.begin(), keys.end());  // byte order of UTF-8 = Python's code point order
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& k : keys) out[k] = deep_sort_keys(j.at(k), depth + 1);
    return out;
  }
  if (j.is_array()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& v : j) out.push_back(deep_sort_keys(v, depth + 1));
    return out;
  }
  return j;
}

ChatTemplate::ChatTemplate(std::string_view source, ChatTemplateOptions options)
    : template_(Template::parse(source, options.limits)), options_(std::move(options)) {}

std::string ChatTemplate::render(const ChatRenderInput& in) const {
  // The variables transformers passes: messages, tools, documents, add_generation_prompt, the
  // special tokens, then every chat_template_kwargs entry. Request JSON is passed by reference.
  const nlohmann::ordered_json sorted_tools =
      options_.sort_tool_keys && !in.tools.is_null() ? deep_sort_keys(in.tools) : nlohmann::ordered_json();
  const nlohmann::ordered_json none;
  const nlohmann::ordered_json agp = in.add_generation_prompt;
  const nlohmann::ordered_json bos = in.bos_token.value_or(""), eos = in.eos_token.value_or("");
  Template::VarRefs vars = {{"messages", &in.messages},
                            {"tools", options_.sort_tool_keys && !in.tools.is_null() ? &sorted_tools : &in.tools},
                            {"documents", &none},
                            {"add_generation_prompt", &agp}};
  // A missing special token stays undefined rather than None: jinja2 prints None as "None".
  if (in.bos_token) vars.emplace_back("bos_token", &bos);
  if (in.eos_token) vars.emplace_back("eos_token", &eos);
  if (!in.kwargs.is_null()) {
    if (!in.kwargs.is_object()) throw TemplateError("chat_template_kwargs must be a JSON object");
    for (const auto& [k, v] : in.kwargs.items()) {
      if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt")
        throw TemplateError("chat_template_kwargs may not set '" + k + "'");
      bool replaced = false;
      for (auto& [name, ref] : vars) {
        if (name == k) {
          ref = &v;  // a kwarg overrides a special token of the same name, as in HF
          replaced = true;
        }
      }
      if (!replaced) vars.emplace_back(k, &v);
    }
  }
  return template_.render(vars);
}

bool model_sorts_tool_keys(const std::filesystem::path& model_dir) {
  if (std::filesystem::exists(model_dir / "tiktoken.model")) return true;
  const auto cfg_path = model_dir / "tokenizer_config.json";
  if (!std::filesystem::exists(cfg_path)) return false;
  try {
    const std::string text = read_text(cfg_path);
    return text.find("TikTokenTokenizer") != std::string::npos || text.find("tokenization_kimi") != std::string::npos;
  } catch (const core::Error&) {
    return false;
  }
}

bool template_looks_like_kimi(std::string_view source) {
  return source.find("<|im_middle|>") != std::string_view::npos &&
         source.find("<|im_system|>") != std::string_view::npos;
}

ChatTemplateSource find_chat_template(const std::filesystem::path& model_dir, bool has_tools) {
  ChatTemplateSource out;
  out.sort_tool_keys = model_sorts_tool_keys(model_dir);
  const auto jinja = model_dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja)) {
    out.source = read_text(jinja);
    out.origin = jinja.string();
    return out;
  }
  const auto cfg_path = model_dir / "tokenizer_config.json";
  if (!std::filesystem::exists(cfg_path))
    core::fail("{}: no chat template (neither chat_template.jinja nor tokenizer_config.json exists)",
               model_dir.string());
  const auto cfg = read_json(cfg_path);
  if (!cfg.is_object() || !cfg.contains("chat_template") || cfg["chat_template"].is_null())
    core::fail("{}: no chat_template field; pass a template file", cfg_path.string());
  const auto& ct = cfg["chat_template"];
  if (ct.is_string()) {
    out.source = ct.get<std::string>();
    out.origin = cfg_path.string() + ":chat_template";
    return out;
  }
  if (ct.is_array()) {
    const nlohmann::ordered_json* chosen = nullptr;
    const nlohmann::ordered_json* fallback = nullptr;
    for (const auto& entry : ct) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
          !entry["template"].is_string())
        core::fail("{}: chat_template list entries need string 'name' and 'template'", cfg_path.string());
      if (entry["name"] == "tool_use" && has_tools) chosen = &entry;
      if (entry["name"] == "default") fallback = &entry;
    }
    if (!chosen) chosen = fallback;
    if (!chosen)
      core::fail("{}: chat_template list has no 'default' entry{}", cfg_path.string(),
                 has_tools ? " and no 'tool_use' entry" : "");
    out.source = (*chosen)["template"].get<std::string>();
    out.origin = cfg_path.string() + ":chat_template[" + (*chosen)["name"].get<std::string>() + "]";
    return out;
  }
  core::fail("{}: chat_template must be a string or a list of named templates", cfg_path.string());
}

}  // namespace tessera::text

// `tessera render-chat`: renders an OpenAI chat request with a model's chat template and prints
// the prompt (and its token count when the model's tokenizer loads). `--jsonl` renders every
// record of the chat-template goldens format, one {"output"} or {"error"} per line.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "core/file.h"
#include "cli/command.h"
#include "core/error.h"
#include "text/template/chat_template.h"
#include "text/tokenizer/load_util.h"
#include "text/tokenizer/tokenizer.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

struct RenderChatOptions {
  std::string model, request, template_file, jsonl, template_dir, sort_tool_keys = "auto";
  std::string bos_token, eos_token;  // empty: not given
  bool json = false;
};

std::string read_all(const std::string& path) { return core::read_file(path); }

OJson parse_json(const std::string& text, const std::string& where) {
  try {
    return OJson::parse(text);
  } catch (const nlohmann::json::exception& e) {
    core::fail("{}: invalid JSON: {}", where, e.what());
  }
}

bool resolve_sort(const std::string& mode, bool detected) {
  if (mode == "on") return true;
  if (mode == "off") return false;
  if (mode != "auto") core::fail("render-chat: --sort-tool-keys must be auto, on or off, got '{}'", mode);
  return detected;
}

std::optional<std::string> option_token(const std::string& given) {
  return given.empty() ? std::nullopt : std::optional<std::string>(given);
}

// A record's bos_token / eos_token: absent -> the --bos-token / --eos-token default; null -> no
// such token (the template sees it undefined, as with a tokenizer_config.json that has null).
std::optional<std::string> record_token(const OJson& rec, const char* key, const std::string& fallback,
                                        const std::string& where) {
  auto it = rec.find(key);
  if (it == rec.end()) return option_token(fallback);
  if (it->is_null()) return std::nullopt;
  if (!it->is_string()) core::fail("{}: field '{}' must be a string or null, got {}", where, key, it->dump());
  return it->get<std::string>();
}

int run_jsonl(const RenderChatOptions& o) {
  std::ifstream in(o.jsonl);
  if (!in) core::fail("{}: cannot open file", o.jsonl);
  std::map<std::string, std::unique_ptr<text::ChatTemplate>> cache;
  std::map<std::string, std::string> load_errors;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const std::string where = fmt::format("{}: line {}", o.jsonl, line_no);
    const OJson rec = parse_json(line, where);
    if (!rec.is_object() || !rec.contains("messages"))
      core::fail("{}: line {}: expected an object with 'messages'", o.jsonl, line_no);
    std::string path = o.template_file;
    if (path.empty()) {
      if (!rec.contains("template") || !rec["template"].is_string())
        core::fail("{}: line {}: no 'template' field and no --template given", o.jsonl, line_no);
      path = o.template_dir.empty() ? rec["template"].get<std::string>()
                                    : (fs::path(o.template_dir) / rec["template"].get<std::string>()).string();
    }
    // A malformed record stops the command, like one without 'messages': an {"error"} line is for
    // a template that raised, which the goldens compare against.
    const std::optional<std::string> bos = record_token(rec, "bos_token", o.bos_token, where);
    const std::optional<std::string> eos = record_token(rec, "eos_token", o.eos_token, where);
    OJson out;
    try {
      auto& tpl = cache[path];
      if (!tpl) {
        const std::string source = read_all(path);
        text::ChatTemplateOptions opts;
        opts.sort_tool_keys = resolve_sort(o.sort_tool_keys, text::template_looks_like_kimi(source));
        tpl = std::make_unique<text::ChatTemplate>(source, opts);
      }
      text::ChatRenderInput ri;
      ri.messages = rec["messages"];
      ri.tools = rec.value("tools", OJson());
      ri.add_generation_prompt = rec.value("add_generation_prompt", true);
      ri.bos_token = bos;
      ri.eos_token = eos;
      ri.kwargs = rec.value("kwargs", OJson::object());
      out["output"] = tpl->render(ri);
    } catch (const core::Error& e) {
      cache.erase(path);
      out["error"] = e.what();
    }
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

int run(const RenderChatOptions& o) {
  if (!o.jsonl.empty()) return run_jsonl(o);
  if (o.request.empty()) core::fail("render-chat: give --request FILE.json (or --jsonl FILE)");
  if (o.model.empty() && o.template_file.empty()) core::fail("render-chat: give --model DIR or --template FILE");
  const OJson req = parse_json(read_all(o.request), o.request);
  if (!req.is_object() || !req.contains("messages") || !req["messages"].is_array())
    core::fail("{}: the request needs a 'messages' array", o.request);
  text::ChatRenderInput ri;
  ri.messages = req["messages"];
  ri.tools = req.value("tools", OJson());
  ri.add_generation_prompt = req.value("add_generation_prompt", true);
  if (req.contains("chat_template_kwargs")) ri.kwargs = req["chat_template_kwargs"];
  const bool has_tools = ri.tools.is_array() && !ri.tools.empty();

  std::string source;
  bool detected_kimi = false;
  if (!o.model.empty()) {
    // bos_token / eos_token: a string, an AddedToken object {"content": ...}, or null / absent
    // (no such token: the template sees it undefined).
    const text::TokenizerConfig tc = text::read_tokenizer_config(fs::path(o.model) / "tokenizer_config.json", false);
    ri.bos_token = tc.bos_token;
    ri.eos_token = tc.eos_token;
    detected_kimi = text::model_sorts_tool_keys(o.model);
  }
  if (!o.template_file.empty()) {
    source = read_all(o.template_file);
    if (o.model.empty()) detected_kimi = text::template_looks_like_kimi(source);
  } else {
    source = text::find_chat_template(o.model, has_tools).source;
  }
  if (auto t = option_token(o.bos_token)) ri.bos_token = t;
  if (auto t = option_token(o.eos_token)) ri.eos_token = t;

  text::ChatTemplateOptions opts;
  opts.sort_tool_keys = resolve_sort(o.sort_tool_keys, detected_kimi);
  const std::string prompt = text::ChatTemplate(source, opts).render(ri);

  std::optional<size_t> tokens;
  std::string tokenizer_note;
  if (!o.model.empty()) {
    try {
      const auto tok = text::load_tokenizer(o.model);
      tokens = tok->encode(prompt).size();  // special-token strings in the prompt are special tokens
    } catch (const std::exception& e) {
      tokenizer_note = e.what();
    }
  }
  if (o.json) {
    OJson out = {{"prompt", prompt}};
    out["tokens"] = tokens ? OJson(*tokens) : OJson();
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::printf("\n");
  if (tokens) {
    std::fprintf(stderr, "tokens: %zu\n", *tokens);
  } else if (!tokenizer_note.empty()) {
    std::fprintf(stderr, "tokens: unavailable (%s)\n", tokenizer_note.c_str());
  }
  return 0;
}

CommandRegistration reg{
    {"render-chat", "render an OpenAI chat request with a model's chat template",
     [](CLI::App& sub) -> std::function<int()> {
       auto o = std::make_shared<RenderChatOptions>();
       sub.add_option("--model", o->model, "model directory (chat_template.jinja or tokenizer_config.json)");
       sub.add_option("--request", o->request,
                      "OpenAI chat request JSON (messages, tools, chat_template_kwargs, "
                      "add_generation_prompt)");
       sub.add_option("--template", o->template_file, "chat template file (overrides the model's)");
       sub.add_option("--jsonl", o->jsonl,
                      "render every record of a goldens.jsonl-style file; prints one "
                      "{\"output\": ...} or {\"error\": ...} per line");
       sub.add_option("--template-dir", o->template_dir, "directory that --jsonl records' 'template' names are in");
       sub.add_option("--sort-tool-keys", o->sort_tool_keys,
                      "sort tool schema keys recursively as Kimi's tokenizer does: auto (Kimi tokenizer or "
                      "template detected), on, off")
           ->capture_default_str();
       sub.add_option("--bos-token", o->bos_token, "bos_token for the template (default: tokenizer_config.json)");
       sub.add_option("--eos-token", o->eos_token, "eos_token for the template (default: tokenizer_config.json)");
       sub.add_flag("--json", o->json, "print {\"prompt\": ..., \"tokens\": N|null}");
       return [o] { return run(*o); };
     }}};

}  // namespace
}  // namespace tessera::cli

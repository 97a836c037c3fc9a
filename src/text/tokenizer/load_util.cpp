#include "core/file.h"
#include "text/tokenizer/load_util.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tessera::text {

std::string read_file_or_fail(const std::filesystem::path& path) { return core::read_file(path); }

nlohmann::json parse_json_file(const std::filesystem::path& path) {
  const std::string text = read_file_or_fail(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    core::fail("{}: invalid JSON: {}", path.string(), e.what());
  }
}

namespace {

std::optional<std::string> token_string(const nlohmann::json& cfg, const char* key, const std::filesystem::path& path) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  core::fail("{}: field '{}' must be a string or an object with a string 'content'", path.string(), key);
}

bool bool_field(const nlohmann::json& cfg, const char* key, bool def, const std::filesystem::path& path) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return def;
  if (!it->is_boolean()) core::fail("{}: field '{}' must be a boolean", path.string(), key);
  return it->get<bool>();
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::filesystem::path& path, bool required) {
  TokenizerConfig c;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (required) core::fail("{}: file not found", path.string());
    return c;
  }
  const nlohmann::json cfg = parse_json_file(path);
  if (!cfg.is_object()) core::fail("{}: expected a JSON object at the top level", path.string());
  c.bos_token = token_string(cfg, "bos_token", path);
  c.eos_token = token_string(cfg, "eos_token", path);
  c.add_bos_token = bool_field(cfg, "add_bos_token", false, path);
  c.add_eos_token = bool_field(cfg, "add_eos_token", false, path);
  if (auto it = cfg.find("tokenizer_class"); it != cfg.end() && it->is_string()) c.tokenizer_class = *it;
  if (auto it = cfg.find("added_tokens_decoder"); it != cfg.end() && !it->is_null()) {
    if (!it->is_object()) core::fail("{}: field 'added_tokens_decoder' must be an object", path.string());
    c.added_tokens_decoder = *it;
  }
  return c;
}

}  // namespace tessera::text

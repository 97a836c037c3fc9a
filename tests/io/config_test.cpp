// Configuration resolution: model config values derived per the spec, quantization config
// precedence and exclusion patterns, and the KV-cache dtype resolution order.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/model_config.h"
#include "io/quant_config.h"
#include "model/model.h"
#include "support/test_support.h"

namespace tessera {
namespace {

TEST(ModelConfig, DerivedValuesMatchTheReference) {
  // Softmax scale and YaRN cos/sin factor as transformers computed them (golden.json of each fixture).
  for (const auto& [name, scale, factor] : std::vector<std::tuple<std::string, double, double>>{
           {"dsv3-tiny", 0.21060714172072303, 1.0},
           {"kimi-k2-tiny", 0.22918691831189503, 0.964326914892074},
           {"kimi-k25-tiny-nvfp4", 0.22918691831189503, 0.964326914892074}}) {
    auto c = io::load_model_config(test::fixtures_dir() / "models" / name);
    EXPECT_NEAR(c.softmax_scale(), scale, 1e-12) << name;
    EXPECT_NEAR(c.rope_attention_factor(), factor, 1e-12) << name;
    EXPECT_EQ(c.latent_norm_eps, 1e-6);
  }
}

TEST(ModelConfig, RealModelSoftmaxScales) {
  // Values from shared/reference/deepseek_v3_spec.md §2.6.
  auto make = [](double factor) {
    nlohmann::json j = {{"architectures", {"DeepseekV3ForCausalLM"}},
                        {"vocab_size", 10},
                        {"hidden_size", 8},
                        {"intermediate_size", 8},
                        {"moe_intermediate_size", 8},
                        {"num_hidden_layers", 1},
                        {"num_attention_heads", 1},
                        {"kv_lora_rank", 4},
                        {"qk_nope_head_dim", 128},
                        {"qk_rope_head_dim", 64},
                        {"v_head_dim", 128},
                        {"n_routed_experts", 8},
                        {"num_experts_per_tok", 2},
                        {"max_position_embeddings", 100},
                        {"rope_scaling",
                         {{"type", "yarn"},
                          {"factor", factor},
                          {"original_max_position_embeddings", 4096},
                          {"mscale", 1.0},
                          {"mscale_all_dim", 1.0}}}};
    return io::parse_model_config(j, "test");
  };
  EXPECT_NEAR(make(40).softmax_scale(), 0.1352337788608801, 1e-15);
  EXPECT_NEAR(make(32).softmax_scale(), 0.13086079996295005, 1e-15);
  EXPECT_NEAR(make(64).softmax_scale(), 0.14467962580268923, 1e-15);
  EXPECT_EQ(make(64).rope_attention_factor(), 1.0);
}

TEST(ModelConfig, KimiK25ReadsTextConfigAndPrefix) {
  auto c = io::load_model_config(test::fixtures_dir() / "models" / "kimi-k25-tiny-nvfp4");
  EXPECT_EQ(c.weight_prefix, "language_model.");
  EXPECT_EQ(c.model_type, "kimi_k2");
  EXPECT_EQ(c.n_routed_experts, 12);
  EXPECT_EQ(c.n_group, 1);
}

TEST(QuantConfig, Nvfp4FromConfigJsonWithWildcardExcludes) {
  const auto dir = test::fixtures_dir() / "models" / "kimi-k25-tiny-nvfp4";
  auto q = io::load_quant_config(dir, nlohmann::json::parse(test::read_file(dir / "config.json")));
  EXPECT_EQ(q.method, io::QuantConfig::Method::kNvfp4);
  EXPECT_EQ(q.group_size, 16);
  EXPECT_NE(q.source.find("config.json"), std::string::npos);
  EXPECT_TRUE(q.is_excluded("language_model.model.layers.1.self_attn.q_a_proj"));
  EXPECT_TRUE(q.is_excluded("language_model.model.layers.2.mlp.shared_experts.up_proj"));
  EXPECT_TRUE(q.is_excluded("language_model.model.layers.0.mlp.down_proj"));
  EXPECT_TRUE(q.is_excluded("language_model.model.layers.1.mlp.gate"));
  EXPECT_TRUE(q.is_excluded("language_model.lm_head"));
  EXPECT_FALSE(q.is_excluded("language_model.model.layers.1.mlp.experts.0.gate_proj"));
  EXPECT_FALSE(q.is_excluded("language_model.model.layers.10.mlp.experts.7.down_proj"));
  // Exporters disagree on the VLM prefix: a prefix-less name matches the prefixed pattern.
  EXPECT_TRUE(q.is_excluded("model.layers.1.self_attn.o_proj"));
  ASSERT_TRUE(q.kv_cache_hint.has_value());
  EXPECT_EQ(*q.kv_cache_hint, "fp8");
}

TEST(QuantConfig, HfQuantConfigAloneIsRead) {
  const auto dir = test::make_temp_dir("tessera-q");
  test::write_file(dir / "hf_quant_config.json",
                   R"({"producer":{"name":"modelopt"},"quantization":{"quant_algo":"NVFP4","kv_cache_quant_algo":null,)"
                   R"("group_size":16,"exclude_modules":["lm_head","model.layers.0.self_attn*"]}})");
  auto q = io::load_quant_config(dir, nlohmann::json::object());
  EXPECT_EQ(q.method, io::QuantConfig::Method::kNvfp4);
  EXPECT_FALSE(q.kv_cache_hint.has_value());
  EXPECT_TRUE(q.is_excluded("model.layers.0.self_attn.kv_b_proj"));
  EXPECT_FALSE(q.is_excluded("model.layers.1.self_attn.kv_b_proj"));
  std::filesystem::remove_all(dir);
}

TEST(QuantConfig, UnsupportedMethodIsRefusedByName) {
  const auto dir = test::make_temp_dir("tessera-q");
  try {
    (void)io::load_quant_config(dir, nlohmann::json{{"quantization_config", {{"quant_method", "awq"}}}});
    FAIL();
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("awq"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("quantization_config"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(KvCacheDtype, ExplicitChoiceWinsOverCheckpointHint) {
  io::QuantConfig q;
  q.kv_cache_hint = "fp8";
  q.kv_cache_hint_source = "hf_quant_config.json";
  const std::vector<core::KvCacheDtype> gpu = {core::KvCacheDtype::kBF16, core::KvCacheDtype::kFp8E4M3};
  auto r = io::resolve_kv_cache_dtype("bf16", q, gpu, core::KvCacheDtype::kBF16, "cuda");
  EXPECT_EQ(r.dtype, core::KvCacheDtype::kBF16);
  EXPECT_NE(r.reason.find("explicit"), std::string::npos);
  EXPECT_NE(r.reason.find("overrides"), std::string::npos);
}

TEST(KvCacheDtype, CheckpointHintWinsOverDefaultWhereSupported) {
  io::QuantConfig q;
  q.kv_cache_hint = "fp8";
  q.kv_cache_hint_source = "config.json:quantization_config.kv_cache_scheme";
  auto r = io::resolve_kv_cache_dtype("auto", q, {core::KvCacheDtype::kBF16, core::KvCacheDtype::kFp8E4M3},
                                      core::KvCacheDtype::kBF16, "cuda");
  EXPECT_EQ(r.dtype, core::KvCacheDtype::kFp8E4M3);
  EXPECT_NE(r.reason.find("kv_cache_scheme"), std::string::npos);
}

TEST(KvCacheDtype, UnsupportedHintFallsBackAndSaysSo) {
  io::QuantConfig q;
  q.kv_cache_hint = "fp8";
  q.kv_cache_hint_source = "hf_quant_config.json";
  auto r = io::resolve_kv_cache_dtype("auto", q, {core::KvCacheDtype::kF32}, core::KvCacheDtype::kF32, "cpu");
  EXPECT_EQ(r.dtype, core::KvCacheDtype::kF32);
  EXPECT_NE(r.reason.find("falling back"), std::string::npos);
}

TEST(KvCacheDtype, DefaultWithoutHint) {
  auto r = io::resolve_kv_cache_dtype("auto", {}, {core::KvCacheDtype::kF32}, core::KvCacheDtype::kF32, "cpu");
  EXPECT_EQ(r.dtype, core::KvCacheDtype::kF32);
  EXPECT_NE(r.reason.find("default"), std::string::npos);
}

TEST(KvCacheDtype, UnsupportedExplicitChoiceIsAnErrorNamingTheFlag) {
  try {
    (void)io::resolve_kv_cache_dtype("fp8", {}, {core::KvCacheDtype::kF32}, core::KvCacheDtype::kF32, "cpu");
    FAIL();
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--kv-cache-dtype"), std::string::npos);
  }
  EXPECT_THROW(
      (void)io::resolve_kv_cache_dtype("int4", {}, {core::KvCacheDtype::kF32}, core::KvCacheDtype::kF32, "cpu"),
      core::Error);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {
TEST(ModelConfig, ParameterCountFromTheConfigMatchesTheCheckpoint) {
  // Counted from the config alone (what `tessera plan` uses) against the weights actually loaded.
  for (const char* name : {"dsv3-tiny", "dsv3-tiny-fp8", "kimi-k2-tiny", "kimi-k25-tiny-nvfp4"}) {
    auto m = model::load_model(test::fixtures_dir() / "models" / name);
    EXPECT_EQ(m.config.parameter_count(), m.model->parameter_count()) << name;
  }
}
}  // namespace
}  // namespace tessera

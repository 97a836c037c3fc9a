// `tessera make-checkpoint`'s model half (model/checkpoint_presets.h, model/random_checkpoint.h):
// the tiny checkpoints it writes load with the project's own loader and run a forward pass, have
// the tensor names, dtypes and config keys of the real-format fixtures, are deterministic in the
// seed, and their quantized weights dequantize to the intended magnitudes.
#include "model/random_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/checkpoint_presets.h"
#include "model/sequence_runner.h"
#include "ops/linear_weight.h"
#include "support/test_support.h"
#include "support/tiny_checkpoint.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using model::CheckpointKind;

const std::string kKinds[] = {"kimi-k2.5-nvfp4", "deepseek-v3-fp8", "deepseek-v3-bf16"};

// The tiny size the tests and CI use: 2 layers (1 dense + 1 MoE), 8 experts.
model::CheckpointLayout tiny_layout(const std::string& kind_name) {
  return test::tiny_checkpoint_layout(kind_name, {.heads = 4, .intermediate = 512});
}

fs::path write_tiny(const std::string& kind_name, uint64_t seed) {
  const fs::path dir = test::make_temp_dir("tessera-mkckpt-" + kind_name);
  model::RandomCheckpointOptions o;
  o.seed = seed;
  model::write_random_checkpoint(dir, tiny_layout(kind_name), o);
  return dir;
}

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(test::read_file(p)); }

// Tensor name with every layer / expert / block index replaced by N, and its dtype.
std::set<std::string> name_patterns(const io::Checkpoint& ckpt) {
  static const std::regex index(R"(\.[0-9]+(?=\.|$))");
  std::set<std::string> out;
  for (const auto& name : ckpt.names())
    out.insert(std::regex_replace(name, index, ".N") + " " + std::string(core::dtype_name(ckpt.info(name).dtype)));
  return out;
}

// Every key path of a JSON object ("text_config.rope_scaling.factor"); array elements are values.
void key_paths(const nlohmann::json& j, const std::string& prefix, std::set<std::string>& out) {
  for (const auto& [k, v] : j.items()) {
    out.insert(prefix + k);
    if (v.is_object()) key_paths(v, prefix + k + ".", out);
  }
}
std::set<std::string> key_paths(const nlohmann::json& j) {
  std::set<std::string> out;
  key_paths(j, "", out);
  return out;
}

std::vector<float> tensor_f32(const io::Checkpoint& ckpt, const std::string& name) {
  const core::Tensor t = ckpt.get(name);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  core::convert_to_f32(t.dtype(), t.raw(), v.data(), v.size());
  return v;
}

struct Moments {
  double mean = 0, std = 0, max_abs = 0;
  bool finite = true;
};
Moments moments(const std::vector<float>& v) {
  Moments m;
  double s = 0, s2 = 0;
  for (float x : v) {
    m.finite &= std::isfinite(x);
    s += x;
    s2 += static_cast<double>(x) * x;
    m.max_abs = std::max(m.max_abs, static_cast<double>(std::fabs(x)));
  }
  m.mean = s / v.size();
  m.std = std::sqrt(std::max(0.0, s2 / v.size() - m.mean * m.mean));
  return m;
}

// All rows of a linear, dequantized by the loader's own code.
std::vector<float> dequant_all(const ops::LinearWeight& w) {
  std::vector<float> out(static_cast<size_t>(w.out * w.in));
  for (int64_t r = 0; r < w.out; ++r) w.dequant_row(r, out.data() + r * w.in);
  return out;
}

float scalar_f32(const io::Checkpoint& ckpt, const std::string& name) { return tensor_f32(ckpt, name).at(0); }

class RandomCheckpointTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RandomCheckpointTest, LoadsAndGivesFiniteDistinctLogits) {
  const fs::path dir = write_tiny(GetParam(), 0);
  model::LoadedModel m = model::load_model(dir);
  EXPECT_EQ(m.config.num_hidden_layers, 2);
  EXPECT_EQ(m.config.n_routed_experts, 8);
  EXPECT_EQ(m.config.hidden_size, 256);
  EXPECT_EQ(m.config.first_k_dense_replace, 1);
  if (GetParam() == "kimi-k2.5-nvfp4") {
    EXPECT_EQ(m.config.weight_prefix, "language_model.");
    EXPECT_EQ(m.quant.method, io::QuantConfig::Method::kNvfp4);
    EXPECT_EQ(m.kv_cache.dtype, core::KvCacheDtype::kFp8E4M3);  // the FP8 KV hint was honoured
  }
  if (GetParam() == "deepseek-v3-fp8") {
    EXPECT_EQ(m.quant.method, io::QuantConfig::Method::kFp8Block);
  }

  const std::vector<int32_t> prompt = {0, 17, 400, 923, 5, 1000, 64};
  const std::vector<float> logits = model::prompt_logits(m, prompt);
  const int64_t V = m.config.vocab_size;
  ASSERT_EQ(logits.size(), prompt.size() * static_cast<size_t>(V));
  std::set<int64_t> argmaxes;
  for (size_t t = 0; t < prompt.size(); ++t) {
    const float* row = logits.data() + t * V;
    const Moments mo = moments(std::vector<float>(row, row + V));
    EXPECT_TRUE(mo.finite) << "position " << t;
    EXPECT_GT(mo.std, 1e-3) << "position " << t << ": logits (nearly) all equal";
    EXPECT_LT(mo.max_abs, 1e3) << "position " << t;
    argmaxes.insert(std::max_element(row, row + V) - row);
  }
  EXPECT_GT(argmaxes.size(), 1u) << "every position predicts the same token";
  fs::remove_all(dir);
}

// The fixture written in the same real format.
fs::path fixture_for(const std::string& kind) {
  const std::map<std::string, std::string> f = {{"kimi-k2.5-nvfp4", "kimi-k25-tiny-nvfp4"},
                                                {"deepseek-v3-fp8", "dsv3-tiny-fp8"},
                                                {"deepseek-v3-bf16", "dsv3-tiny"}};
  return test::fixtures_dir() / "models" / f.at(kind);
}

TEST_P(RandomCheckpointTest, StructureMatchesTheRealFormatFixture) {
  const fs::path dir = write_tiny(GetParam(), 0), fixture = fixture_for(GetParam());
  const auto ours = io::Checkpoint::open(dir);
  const auto theirs = io::Checkpoint::open(fixture);
  EXPECT_EQ(name_patterns(*ours), name_patterns(*theirs));

  EXPECT_EQ(key_paths(read_json(dir / "config.json")), key_paths(read_json(fixture / "config.json")));
  ASSERT_EQ(fs::exists(dir / "hf_quant_config.json"), fs::exists(fixture / "hf_quant_config.json"));
  if (fs::exists(fixture / "hf_quant_config.json")) {
    EXPECT_EQ(key_paths(read_json(dir / "hf_quant_config.json")),
              key_paths(read_json(fixture / "hf_quant_config.json")));
    // The exclude lists are the same patterns (the fixture has one dense layer too).
    EXPECT_EQ(read_json(dir / "hf_quant_config.json")["quantization"]["exclude_modules"],
              read_json(fixture / "hf_quant_config.json")["quantization"]["exclude_modules"]);
  }

  // The index: several shards, every tensor mapped to a shard that holds it and every shard tensor
  // mapped, total_size the sum of the tensor sizes; headers 8-byte aligned.
  const nlohmann::json index = read_json(dir / "model.safetensors.index.json");
  const auto& weight_map = index.at("weight_map");
  std::set<std::string> shard_files;
  for (const auto& [name, file] : weight_map.items()) shard_files.insert(file.get<std::string>());
  EXPECT_GE(shard_files.size(), 2u);
  uint64_t total = 0;
  size_t tensors_in_shards = 0;
  for (const auto& file : shard_files) {
    SCOPED_TRACE(file);
    const auto st = io::SafetensorsFile::open(dir / file);
    EXPECT_EQ(st->metadata().at("format"), "pt");
    for (const auto& [name, info] : st->tensors()) {
      ++tensors_in_shards;
      total += info.end - info.begin;
      ASSERT_TRUE(weight_map.contains(name)) << name << " is in a shard but not in the index";
      EXPECT_EQ(weight_map[name].get<std::string>(), file) << name;
    }
    const std::string head = test::read_file(dir / file).substr(0, 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(head[static_cast<size_t>(i)]);
    EXPECT_EQ(n % 8, 0u) << "header length";
  }
  EXPECT_EQ(tensors_in_shards, weight_map.size());
  EXPECT_EQ(index.at("metadata").at("total_size").get<uint64_t>(), total);
  fs::remove_all(dir);
}

TEST_P(RandomCheckpointTest, SameSeedSameBytesOtherSeedOtherBytes) {
  const fs::path a = write_tiny(GetParam(), 7), b = write_tiny(GetParam(), 7), c = write_tiny(GetParam(), 8);
  size_t files = 0;
  bool any_differs = false;
  for (const auto& e : fs::directory_iterator(a)) {
    const std::string name = e.path().filename().string();
    ++files;
    const std::string bytes = test::read_file(e.path());
    EXPECT_EQ(bytes, test::read_file(b / name)) << name << " differs between two runs with seed 7";
    if (e.path().extension() == ".safetensors") {
      const std::string other = test::read_file(c / name);
      EXPECT_EQ(bytes.size(), other.size()) << name;
      any_differs |= bytes != other;
    }
  }
  EXPECT_GE(files, 4u);
  EXPECT_TRUE(any_differs) << "seed 8 gave the bytes of seed 7";
  for (const auto& d : {a, b, c}) fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(Kinds, RandomCheckpointTest, ::testing::ValuesIn(kKinds), [](const auto& info) {
  std::string name = info.param;
  for (auto& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
});

// Any split of a tensor into pieces gives the bytes of one piece: the values cannot depend on how
// the writer chunks the data or how many threads fill it.
TEST(RandomCheckpoint, BytesDoNotDependOnTheSplit) {
  const auto layout = tiny_layout("kimi-k2.5-nvfp4");
  size_t checked = 0;
  for (const auto& t : layout.tensors) {
    const uint64_t n = t.spec.nbytes();
    if (n < 100) continue;
    std::vector<uint8_t> whole(n), pieces(n);
    model::fill_tensor_bytes(t, 3, 0, n, whole.data());
    for (uint64_t a = 0; a < n;) {
      const uint64_t b = std::min(n, a + 1 + (a * 7919 + 13) % 997);  // odd, unaligned piece sizes
      model::fill_tensor_bytes(t, 3, a, b, pieces.data() + a);
      a = b;
    }
    ASSERT_EQ(whole, pieces) << t.spec.name;
    if (++checked == 40) break;
  }
  EXPECT_EQ(checked, 40u);
}

// The quantized weights, dequantized by ops::LinearWeight (the loader's own code), are finite and
// have about the intended spread: std ~ min(0.02, 1/sqrt(in)) (here in = 256 or 128: 0.02).
TEST(RandomCheckpoint, QuantizedWeightsDequantizeToSaneValues) {
  constexpr double kWantStd = 0.02;
  {
    const fs::path dir = write_tiny("kimi-k2.5-nvfp4", 0);
    const auto ckpt = io::Checkpoint::open(dir);
    for (const std::string proj : {"gate_proj", "up_proj", "down_proj"}) {
      SCOPED_TRACE(proj);
      const std::string m = "language_model.model.layers.1.mlp.experts.5." + proj;
      ops::LinearWeight w;
      w.format = ops::LinearWeight::Format::kNvfp4;
      w.name = m;
      w.weight = ckpt->get(m + ".weight");
      w.scale = ckpt->get(m + ".weight_scale");
      w.out = w.weight.dim(0);
      w.in = w.weight.dim(1) * 2;
      w.global_scale = scalar_f32(*ckpt, m + ".weight_scale_2");
      EXPECT_EQ(w.scale.dim(1), w.in / 16);
      // ModelOpt-style scales: a positive power-of-two global scale, finite positive e4m3 block scales.
      EXPECT_GT(w.global_scale, 0.0f);
      EXPECT_EQ(std::exp2(std::round(std::log2(w.global_scale))), w.global_scale);
      const Moments bs = moments(tensor_f32(*ckpt, m + ".weight_scale"));
      EXPECT_TRUE(bs.finite);
      EXPECT_LE(bs.max_abs, 448.0);
      EXPECT_GT(bs.mean - 2 * bs.std, 0.0);
      const float input_scale = scalar_f32(*ckpt, m + ".input_scale");
      EXPECT_TRUE(std::isfinite(input_scale) && input_scale > 0.0f);
      const Moments mo = moments(dequant_all(w));
      EXPECT_TRUE(mo.finite);
      EXPECT_NEAR(mo.mean, 0.0, 0.1 * kWantStd);
      EXPECT_GT(mo.std, 0.7 * kWantStd);
      EXPECT_LT(mo.std, 1.3 * kWantStd);
    }
    // gate and up of one expert share weight_scale_2 and input_scale, as ModelOpt's fused export does.
    const std::string e = "language_model.model.layers.1.mlp.experts.2.";
    EXPECT_EQ(scalar_f32(*ckpt, e + "gate_proj.weight_scale_2"), scalar_f32(*ckpt, e + "up_proj.weight_scale_2"));
    EXPECT_EQ(scalar_f32(*ckpt, e + "gate_proj.input_scale"), scalar_f32(*ckpt, e + "up_proj.input_scale"));
    // BF16 parts: embeddings ~0.02, norms near 1, router bias small, KV scales positive.
    const Moments emb = moments(tensor_f32(*ckpt, "language_model.model.embed_tokens.weight"));
    EXPECT_NEAR(emb.std, 0.02, 0.004);
    const Moments norm = moments(tensor_f32(*ckpt, "language_model.model.layers.0.input_layernorm.weight"));
    EXPECT_NEAR(norm.mean, 1.0, 0.05);
    EXPECT_LT(norm.max_abs, 1.5);
    EXPECT_LT(moments(tensor_f32(*ckpt, "language_model.model.layers.1.mlp.gate.e_score_correction_bias")).max_abs,
              0.1);
    EXPECT_GT(scalar_f32(*ckpt, "language_model.model.layers.1.self_attn.k_proj.k_scale"), 0.0f);
    fs::remove_all(dir);
  }
  {
    const fs::path dir = write_tiny("deepseek-v3-fp8", 0);
    const auto ckpt = io::Checkpoint::open(dir);
    size_t fp8_tensors = 0;
    for (const auto& name : ckpt->names()) {
      if (ckpt->info(name).dtype != core::DType::kF8E4M3) continue;
      ++fp8_tensors;
      const core::Tensor t = ckpt->get(name);
      const uint8_t* p = t.data<uint8_t>();
      EXPECT_EQ(std::count_if(p, p + t.numel(), [](uint8_t b) { return (b & 0x7f) == 0x7f; }), 0)
          << name << " holds e4m3 NaN codes";
      const std::string module = name.substr(0, name.size() - std::string(".weight").size());
      const Moments s = moments(tensor_f32(*ckpt, module + ".weight_scale_inv"));
      EXPECT_TRUE(s.finite);
      EXPECT_GT(s.mean - 2 * s.std, 0.0) << module << ": scale_inv must be positive";
    }
    EXPECT_GT(fp8_tensors, 20u);
    for (const std::string m : {"model.layers.0.self_attn.q_a_proj", "model.layers.0.mlp.down_proj",
                                "model.layers.1.mlp.experts.3.up_proj", "model.layers.1.self_attn.kv_b_proj"}) {
      SCOPED_TRACE(m);
      ops::LinearWeight w;
      w.format = ops::LinearWeight::Format::kFp8Block;
      w.name = m;
      w.weight = ckpt->get(m + ".weight");
      w.scale = ckpt->get(m + ".weight_scale_inv");
      w.out = w.weight.dim(0);
      w.in = w.weight.dim(1);
      EXPECT_EQ(w.scale.dim(0), (w.out + 127) / 128);
      EXPECT_EQ(w.scale.dim(1), (w.in + 127) / 128);
      const double want = std::min(0.02, 1.0 / std::sqrt(static_cast<double>(w.in)));
      const Moments mo = moments(dequant_all(w));
      EXPECT_TRUE(mo.finite);
      EXPECT_NEAR(mo.mean, 0.0, 0.1 * want);
      EXPECT_GT(mo.std, 0.7 * want);
      EXPECT_LT(mo.std, 1.3 * want);
    }
    // The router stays BF16 (never FP8) as in DeepSeek's own checkpoints.
    EXPECT_EQ(ckpt->info("model.layers.1.mlp.gate.weight").dtype, core::DType::kBF16);
    fs::remove_all(dir);
  }
}

// Routing values follow the real model where the expert count allows, and are made valid where not.
TEST(RandomCheckpoint, RoutingIsClampedToTheExperts) {
  auto dims = [](CheckpointKind k, int64_t layers, int64_t experts) {
    model::CheckpointDims d = model::real_dims(k);
    d.layers = layers;
    d.experts = experts;
    model::finalize_dims(k, d);
    return d;
  };
  const auto ds = dims(CheckpointKind::kDeepseekV3Fp8, 61, 256);
  EXPECT_EQ(ds.top_k, 8);
  EXPECT_EQ(ds.n_group, 8);
  EXPECT_EQ(ds.topk_group, 4);
  EXPECT_EQ(ds.first_k_dense, 3);
  EXPECT_EQ(ds.heads, 128);
  EXPECT_EQ(ds.vocab, 129280);
  const auto ds8 = dims(CheckpointKind::kDeepseekV3Bf16, 2, 8);  // 8 groups of 1 cannot take a top-2
  EXPECT_EQ(ds8.n_group, 4);
  EXPECT_EQ(ds8.topk_group, 4);
  EXPECT_EQ(ds8.first_k_dense, 1);
  const auto ds4 = dims(CheckpointKind::kDeepseekV3Bf16, 4, 4);
  EXPECT_EQ(ds4.top_k, 4);
  EXPECT_EQ(ds4.n_group, 2);
  EXPECT_EQ(ds4.topk_group, 2);
  EXPECT_EQ(ds4.first_k_dense, 3);
  const auto k = dims(CheckpointKind::kKimiK25Nvfp4, 4, 384);
  EXPECT_EQ(k.top_k, 8);
  EXPECT_EQ(k.n_group, 1);
  EXPECT_EQ(k.topk_group, 1);
  EXPECT_EQ(k.first_k_dense, 1);
  EXPECT_EQ(k.heads, 64);
  EXPECT_EQ(k.vocab, 163840);
  EXPECT_EQ(k.hidden, 7168);
  EXPECT_THROW(dims(CheckpointKind::kKimiK25Nvfp4, 2, 0), core::Error);
  EXPECT_THROW(dims(CheckpointKind::kKimiK25Nvfp4, 0, 8), core::Error);
}

// The real Kimi-K2.5 shapes of formats.md §2b for the routed experts, and the size of a 4-layer,
// 384-expert checkpoint (computed, not written).
TEST(RandomCheckpoint, KimiRealShapes) {
  model::CheckpointDims d = model::real_dims(CheckpointKind::kKimiK25Nvfp4);
  d.layers = 4;
  d.experts = 384;
  model::finalize_dims(CheckpointKind::kKimiK25Nvfp4, d);
  const auto layout = model::checkpoint_layout(CheckpointKind::kKimiK25Nvfp4, d);
  std::map<std::string, const model::TensorPlan*> by_name;
  for (const auto& t : layout.tensors) by_name[t.spec.name] = &t;
  const std::string e = "language_model.model.layers.3.mlp.experts.383.";
  ASSERT_TRUE(by_name.count(e + "gate_proj.weight"));
  EXPECT_EQ(by_name[e + "gate_proj.weight"]->spec.shape, (core::Shape{2048, 3584}));
  EXPECT_EQ(by_name[e + "gate_proj.weight_scale"]->spec.shape, (core::Shape{2048, 448}));
  EXPECT_EQ(by_name[e + "down_proj.weight"]->spec.shape, (core::Shape{7168, 1024}));
  EXPECT_EQ(by_name[e + "down_proj.weight_scale"]->spec.shape, (core::Shape{7168, 128}));
  EXPECT_EQ(by_name["language_model.model.layers.0.self_attn.q_b_proj.weight"]->spec.shape, (core::Shape{12288, 1536}));
  EXPECT_EQ(by_name["language_model.model.layers.0.self_attn.kv_b_proj.weight"]->spec.shape, (core::Shape{16384, 512}));
  EXPECT_EQ(by_name["language_model.model.layers.0.self_attn.kv_a_proj_with_mqa.weight"]->spec.shape,
            (core::Shape{576, 7168}));
  EXPECT_EQ(by_name["language_model.model.layers.0.self_attn.o_proj.weight"]->spec.shape, (core::Shape{7168, 8192}));
  EXPECT_EQ(by_name["language_model.lm_head.weight"]->spec.shape, (core::Shape{163840, 7168}));
  const double gb = layout.total_bytes() / 1e9;
  EXPECT_GT(gb, 25.0);
  EXPECT_LT(gb, 40.0);
  const auto shards = model::plan_shards(layout.tensors, model::kDefaultMaxShardBytes);
  EXPECT_GE(shards.size(), 6u);
  for (const auto& s : shards) EXPECT_LE(s.bytes, 5'000'000'000ull + 2'400'000'000ull) << s.file;
}

}  // namespace
}  // namespace tessera

// Whole checkpoints broken the ways real downloads and exports break: every error names the file
// and the tensor, and the CLI reports it and exits non-zero instead of crashing.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using Tensors = std::vector<io::TensorToWrite>;

class BrokenCheckpointTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // A private copy of a fixture model (the fixtures themselves are read-only).
  fs::path copy_model(const std::string& name) {
    dir_ = test::make_temp_dir("tessera-ckpt");
    for (const auto& e : fs::directory_iterator(test::fixtures_dir() / "models" / name))
      if (e.path().filename() != "golden.safetensors") fs::copy_file(e.path(), dir_ / e.path().filename());
    for (const auto& e : fs::directory_iterator(dir_))
      fs::permissions(e.path(), fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add);
    return dir_;
  }
  // The shard that holds `tensor`, per the index.
  std::string shard_of(const std::string& tensor) {
    auto idx = io::read_json_file(dir_ / "model.safetensors.index.json");
    return idx["weight_map"][tensor].get<std::string>();
  }
  // Rewrites the shard holding `tensor` after `edit` changes its tensor list.
  void rewrite_shard_of(const std::string& tensor, const std::function<void(Tensors&)>& edit) {
    const fs::path p = dir_ / shard_of(tensor);
    Tensors ts;
    {
      auto f = io::SafetensorsFile::open(p);
      for (const auto& [name, info] : f->tensors()) ts.push_back(io::tensor_to_write(name, f->tensor(name)));
    }
    edit(ts);
    io::write_safetensors(p, ts);
  }
  void drop_from_index(const std::string& tensor) {
    auto idx = io::read_json_file(dir_ / "model.safetensors.index.json");
    idx["weight_map"].erase(tensor);
    test::write_file(dir_ / "model.safetensors.index.json", idx.dump());
  }
  void edit_config(const std::function<void(nlohmann::json&)>& edit) {
    auto c = io::read_json_file(dir_ / "config.json");
    edit(c);
    test::write_file(dir_ / "config.json", c.dump());
  }
  // Loading must fail with a message containing every needle.
  void expect_load_error(std::initializer_list<std::string> needles) {
    try {
      (void)model::load_model(dir_);
      FAIL() << "the broken checkpoint loaded";
    } catch (const core::Error& e) {
      const std::string msg = e.what();
      for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing '" << n << "' in: " << msg;
    }
  }
  fs::path dir_;
};

constexpr const char* kNorm = "model.layers.1.self_attn.kv_a_layernorm.weight";

TEST_F(BrokenCheckpointTest, IntactCopyLoads) {
  copy_model("dsv3-tiny");
  EXPECT_NO_THROW((void)model::load_model(dir_));
}

TEST_F(BrokenCheckpointTest, IndexNamesAMissingShard) {
  copy_model("dsv3-tiny");
  fs::remove(dir_ / "model-00002-of-00002.safetensors");
  expect_load_error({"model.safetensors.index.json", "model-00002-of-00002.safetensors", "does not exist"});
}

TEST_F(BrokenCheckpointTest, IndexPointsAtAShardWithoutTheTensor) {
  copy_model("dsv3-tiny");
  rewrite_shard_of(kNorm, [](Tensors& ts) { std::erase_if(ts, [](const auto& t) { return t.name == kNorm; }); });
  expect_load_error({"model.safetensors.index.json", kNorm, shard_of(kNorm)});
}

TEST_F(BrokenCheckpointTest, TensorTheModelNeedsIsInNoShard) {
  copy_model("dsv3-tiny");
  rewrite_shard_of(kNorm, [](Tensors& ts) { std::erase_if(ts, [](const auto& t) { return t.name == kNorm; }); });
  drop_from_index(kNorm);
  expect_load_error({kNorm, "no shard"});
}

TEST_F(BrokenCheckpointTest, TensorWithTheWrongShape) {
  copy_model("dsv3-tiny");
  const std::string shard = shard_of(kNorm);
  rewrite_shard_of(kNorm, [](Tensors& ts) {
    for (auto& t : ts)
      if (t.name == kNorm) {
        t.shape = {32};
        t.bytes.resize(64);
      }
  });
  expect_load_error({kNorm, shard, "[32]", "[64]"});
}

TEST_F(BrokenCheckpointTest, TensorWithTheWrongDtype) {
  copy_model("dsv3-tiny");
  rewrite_shard_of(kNorm, [](Tensors& ts) {
    for (auto& t : ts)
      if (t.name == kNorm) {
        t.dtype = core::DType::kI16;
      }
  });
  expect_load_error({kNorm, "I16", "BF16"});
}

TEST_F(BrokenCheckpointTest, TruncatedShard) {
  copy_model("dsv3-tiny");
  const fs::path shard = dir_ / "model-00001-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 1000);
  expect_load_error({shard.string(), "1000 bytes shorter", "truncated"});
}

TEST_F(BrokenCheckpointTest, GitLfsPointerInPlaceOfAShard) {
  copy_model("dsv3-tiny");
  const fs::path shard = dir_ / "model-00002-of-00002.safetensors";
  test::write_file(shard, "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 5593000\n");
  expect_load_error({shard.string(), "Git LFS pointer"});
}

TEST_F(BrokenCheckpointTest, Fp8WeightWithoutItsScale) {
  copy_model("dsv3-tiny-fp8");
  const std::string scale = "model.layers.1.self_attn.o_proj.weight_scale_inv";
  rewrite_shard_of(scale, [&](Tensors& ts) { std::erase_if(ts, [&](const auto& t) { return t.name == scale; }); });
  drop_from_index(scale);
  expect_load_error({"model.layers.1.self_attn.o_proj", scale, "missing"});
}

TEST_F(BrokenCheckpointTest, Nvfp4ModuleWithoutItsBlockScales) {
  copy_model("kimi-k25-tiny-nvfp4");
  const std::string scale = "language_model.model.layers.2.mlp.experts.3.down_proj.weight_scale";
  rewrite_shard_of(scale, [&](Tensors& ts) { std::erase_if(ts, [&](const auto& t) { return t.name == scale; }); });
  drop_from_index(scale);
  expect_load_error({"experts.3.down_proj", scale, "NVFP4"});
}

TEST_F(BrokenCheckpointTest, ModuleListedAsNvfp4StoredAsBf16) {
  copy_model("kimi-k25-tiny-nvfp4");
  // Remove the attention layers from the exclude list: they are BF16, so the config now lies.
  edit_config([](nlohmann::json& c) {
    nlohmann::json kept = nlohmann::json::array();
    for (const auto& p : c["quantization_config"]["ignore"])
      if (p.get<std::string>().find("self_attn") == std::string::npos) kept.push_back(p);
    c["quantization_config"]["ignore"] = kept;
  });
  expect_load_error({"self_attn", "NVFP4", "BF16", "config.json"});
}

TEST_F(BrokenCheckpointTest, UnsupportedConfigValuesAreRefusedByName) {
  copy_model("dsv3-tiny");
  edit_config([](nlohmann::json& c) { c["moe_layer_freq"] = 2; });
  expect_load_error({"config.json", "moe_layer_freq"});
  edit_config([](nlohmann::json& c) {
    c["moe_layer_freq"] = 1;
    c["rope_scaling"]["type"] = "longrope";
  });
  expect_load_error({"config.json", "longrope"});
  edit_config([](nlohmann::json& c) {
    c["rope_scaling"]["type"] = "yarn";
    c["hidden_act"] = "gelu";
  });
  expect_load_error({"config.json", "hidden_act", "gelu"});
  edit_config([](nlohmann::json& c) {
    c["hidden_act"] = "silu";
    c["architectures"] = {"LlamaForCausalLM"};
  });
  expect_load_error({"config.json", "LlamaForCausalLM"});
  edit_config([](nlohmann::json& c) {
    c["architectures"] = {"DeepseekV3ForCausalLM"};
    c.erase("kv_lora_rank");
  });
  expect_load_error({"config.json", "kv_lora_rank"});
  edit_config([](nlohmann::json& c) { c["kv_lora_rank"] = "64"; });
  expect_load_error({"config.json", "kv_lora_rank", "integer"});
}

TEST_F(BrokenCheckpointTest, KimiK25WithoutTextConfig) {
  copy_model("kimi-k25-tiny-nvfp4");
  edit_config([](nlohmann::json& c) { c.erase("text_config"); });
  expect_load_error({"config.json", "text_config"});
}

TEST_F(BrokenCheckpointTest, ConfigThatIsNotJson) {
  copy_model("dsv3-tiny");
  test::write_file(dir_ / "config.json", "{\"architectures\": [");
  expect_load_error({"config.json", "not valid JSON"});
}

TEST_F(BrokenCheckpointTest, KvScalesAreFoundUnderEitherNaming) {
  copy_model("kimi-k25-tiny-nvfp4");
  // Rename layer 1's ModelOpt-style k_proj.k_scale / v_proj.v_scale to the vLLM-style attn.k_scale.
  const std::string attn = "language_model.model.layers.1.self_attn";
  for (const std::string which : {"k", "v"}) {
    const std::string from = attn + "." + which + "_proj." + which + "_scale", to = attn + ".attn." + which + "_scale";
    const std::string shard = shard_of(from);
    rewrite_shard_of(from, [&](Tensors& ts) {
      for (auto& t : ts)
        if (t.name == from) t.name = to;
    });
    auto idx = io::read_json_file(dir_ / "model.safetensors.index.json");
    idx["weight_map"].erase(from);
    idx["weight_map"][to] = shard;
    test::write_file(dir_ / "model.safetensors.index.json", idx.dump());
  }
  std::string out;
  const int rc = test::run_command(test::tessera_binary().string() + " inspect --json --model " + dir_.string(), &out);
  ASSERT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j["kv_cache"]["layers_with_k_scale"], 3);
  EXPECT_EQ(j["kv_cache"]["layers_with_v_scale"], 3);
}

TEST_F(BrokenCheckpointTest, CliReportsTheErrorAndExitsNonZero) {
  copy_model("dsv3-tiny");
  const fs::path shard = dir_ / "model-00001-of-00002.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 10);
  std::string out;
  const int rc = test::run_command(test::tessera_binary().string() + " inspect --model " + dir_.string(), &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("error:"), std::string::npos) << out;
  EXPECT_NE(out.find("10 bytes shorter"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera

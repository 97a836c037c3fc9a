// The same weights in the other layouts a checkpoint may use must give the same logits: a single
// model.safetensors without an index, and transformers-5's fused expert tensors
// (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <regex>

#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/golden_util.h"
#include "model/sequence_runner.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointLayouts, SingleFileWithFusedExpertsGivesTheSameLogits) {
  const fs::path src = test::fixtures_dir() / "models" / "dsv3-tiny";
  const fs::path dst = test::make_temp_dir("tessera-layout");
  fs::copy_file(src / "config.json", dst / "config.json");
  auto ckpt = io::Checkpoint::open(src);
  // layer -> expert -> {gate, up, down}
  std::map<std::string, std::map<int, std::map<std::string, core::Tensor>>> experts;
  std::vector<io::TensorToWrite> out;
  const std::regex expert_re(R"((model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight)");
  for (const auto& name : ckpt->names()) {
    std::smatch m;
    if (std::regex_match(name, m, expert_re)) {
      experts[m[1]][std::stoi(m[2])][m[3]] = ckpt->get(name);
    } else {
      out.push_back(io::tensor_to_write(name, ckpt->get(name)));
    }
  }
  for (const auto& [prefix, by_expert] : experts) {
    const int64_t E = static_cast<int64_t>(by_expert.size());
    const auto& first = by_expert.begin()->second;
    const int64_t I = first.at("gate").dim(0), H = first.at("gate").dim(1);
    std::string gate_up, down;
    for (const auto& [e, w] : by_expert) {
      gate_up += std::string(static_cast<const char*>(w.at("gate").raw()), w.at("gate").nbytes());
      gate_up += std::string(static_cast<const char*>(w.at("up").raw()), w.at("up").nbytes());
      down += std::string(static_cast<const char*>(w.at("down").raw()), w.at("down").nbytes());
    }
    out.push_back({prefix + ".gate_up_proj", core::DType::kBF16, {E, 2 * I, H}, gate_up});
    out.push_back({prefix + ".down_proj", core::DType::kBF16, {E, H, I}, down});
  }
  io::write_safetensors(dst / "model.safetensors", out);

  model::LoadedModel original = model::load_model(src), repacked = model::load_model(dst);
  const std::vector<int32_t> prompt = {5, 17, 900, 3, 44, 1000, 2, 8, 8, 8, 511};
  const auto a = model::prompt_logits(original, prompt), b = model::prompt_logits(repacked, prompt);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_LE(test::rel_rms(b, a), 1e-6);
  EXPECT_EQ(repacked.checkpoint->num_files(), 1u);
  fs::remove_all(dst);
}

}  // namespace
}  // namespace tessera

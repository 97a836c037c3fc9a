// Hostile and corrupt checkpoints (issue #21): each is refused with the file and the tensor or field
// at fault, never loaded silently, never a crash or a hang. The checkpoints are tiny ones written by
// the make-checkpoint generator in the real formats, then corrupted byte by byte here; the byte
// positions come from parsing the safetensors headers in this file, not from the loader.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/finite_check.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/checkpoint_presets.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "ops/cpu/cpu_ops.h"
#include "support/copying_cpu_ops.h"
#include "support/test_support.h"
#include "support/tiny_checkpoint.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- tiny checkpoints ------------------------------------------------------------------------------

// Writes a tiny checkpoint of `like` (a make-checkpoint --like name) into a new directory.
fs::path write_tiny(const std::string& like, const std::string& tag) {
  const fs::path dir = test::make_temp_dir("tessera-hostile-" + tag);
  model::RandomCheckpointOptions o;
  o.seed = 7;
  model::write_random_checkpoint(dir, test::tiny_checkpoint_layout(like), o);
  return dir;
}

struct Located {
  fs::path file;
  uint64_t data_offset = 0;  // file offset of the tensor's first byte
  std::string dtype;
  uint64_t bytes = 0;
};

// Where `tensor` is, read from the index and the shard's header by this test.
Located locate(const fs::path& dir, const std::string& tensor) {
  const json index = json::parse(test::read_file(dir / "model.safetensors.index.json"));
  Located l;
  l.file = dir / index.at("weight_map").at(tensor).get<std::string>();
  std::ifstream in(l.file, std::ios::binary);
  uint8_t len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | len_bytes[i];
  std::string header(len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(len));
  const json h = json::parse(header);
  const json& t = h.at(tensor);
  l.data_offset = 8 + len + t.at("data_offsets")[0].get<uint64_t>();
  l.bytes = t.at("data_offsets")[1].get<uint64_t>() - t.at("data_offsets")[0].get<uint64_t>();
  l.dtype = t.at("dtype").get<std::string>();
  return l;
}

void overwrite(const fs::path& file, uint64_t offset, const std::string& bytes) {
  std::fstream f(file, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << file;
}

// Sets element `index` of `tensor` to the raw little-endian `bytes`.
void corrupt(const fs::path& dir, const std::string& tensor, uint64_t index, const std::string& bytes) {
  const Located l = locate(dir, tensor);
  ASSERT_LE((index + 1) * bytes.size(), l.bytes) << tensor;
  overwrite(l.file, l.data_offset + index * bytes.size(), bytes);
}

std::string le16(uint16_t v) { return std::string{static_cast<char>(v & 0xff), static_cast<char>(v >> 8)}; }
std::string le32(uint32_t v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}
std::string byte(uint8_t v) { return std::string(1, static_cast<char>(v)); }

// ---- the two loaders ---------------------------------------------------------------------------------

using test::CopyingCpuOps;

// The error of loading `dir` on the CPU backend (mapped weights), or "" when it loads.
std::string cpu_load_error(const fs::path& dir) {
  try {
    (void)model::load_model(dir);
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

// The same through the staged loader.
std::string staged_load_error(const fs::path& dir) {
  try {
    auto backend = std::make_unique<CopyingCpuOps>();
    const model::ModelPlan plan = model::resolve_model(dir, {}, *backend);
    (void)model::load_model(plan, std::move(backend));
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

void expect_names(const std::string& error, const std::vector<std::string>& parts) {
  EXPECT_FALSE(error.empty()) << "the corrupt checkpoint was accepted";
  for (const auto& p : parts) EXPECT_NE(error.find(p), std::string::npos) << "'" << p << "' not in: " << error;
}

// Both loaders refuse `dir`, naming the file, the tensor and the element.
void expect_refused_by_both(const fs::path& dir, const std::string& tensor, uint64_t element) {
  const std::string file = locate(dir, tensor).file.filename().string();
  const std::vector<std::string> parts = {file, "'" + tensor + "'", "element " + std::to_string(element) + " "};
  {
    SCOPED_TRACE("CPU backend (mapped weights)");
    expect_names(cpu_load_error(dir), parts);
  }
  {
    SCOPED_TRACE("staged loader (device backends)");
    expect_names(staged_load_error(dir), parts);
  }
}

// ---- non-finite values -------------------------------------------------------------------------------

TEST(HostileCheckpoint, FirstNonFiniteFindsEachEncodingAtItsIndex) {
  using core::DType;
  // Hand-written bit patterns: a finite run, then one bad value at index 5000 (past the first block
  // of the branch-free pass), then finite values again.
  auto probe = [](DType t, uint64_t finite_bits, uint64_t bad_bits) {
    const size_t size = core::dtype_size(t);
    std::string bytes(9000 * size, '\0');
    for (size_t i = 0; i < 9000; ++i) std::memcpy(&bytes[i * size], &finite_bits, size);
    const int64_t clean = core::first_non_finite(t, bytes.data(), 9000);
    std::memcpy(&bytes[5000 * size], &bad_bits, size);
    return std::make_pair(clean, core::first_non_finite(t, bytes.data(), 9000));
  };
  struct Case {
    DType dtype;
    uint64_t finite, bad;
  };
  const Case cases[] = {
      {DType::kBF16, 0x7f7f, 0x7fc0},        {DType::kBF16, 0xff7f, 0xff80},
      {DType::kBF16, 0x0001, 0x7f81},        {DType::kF16, 0x7bff, 0x7c00},
      {DType::kF16, 0xfbff, 0xfe00},         {DType::kF32, 0x7f7fffff, 0x7f800000},
      {DType::kF32, 0x80000000, 0xffc00000}, {DType::kF64, 0x7fefffffffffffff, 0x7ff8000000000000},
      {DType::kF8E4M3, 0x7e, 0x7f},          {DType::kF8E4M3, 0xfe, 0xff},
      {DType::kF8E4M3, 0x78, 0x7f},          {DType::kF8E5M2, 0x7b, 0x7c},
      {DType::kF8E5M2, 0xfb, 0xfe},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(core::dtype_name(c.dtype)) + " bad bits " + std::to_string(c.bad));
    const auto [clean, found] = probe(c.dtype, c.finite, c.bad);
    EXPECT_EQ(clean, -1);
    EXPECT_EQ(found, 5000);
  }
  // Integer and packed e2m1 bytes have no such values: every pattern is fine.
  const std::string ones(64, '\xff');
  EXPECT_EQ(core::first_non_finite(DType::kU8, ones.data(), 64), -1);
  EXPECT_EQ(core::first_non_finite(DType::kI32, ones.data(), 16), -1);
  const uint16_t nan = 0x7fc0, inf = 0xff80;
  EXPECT_NE(core::describe_non_finite(DType::kBF16, &nan).find("NaN"), std::string::npos);
  EXPECT_NE(core::describe_non_finite(DType::kBF16, &inf).find("-inf"), std::string::npos);
}

TEST(HostileCheckpoint, CleanTinyCheckpointsLoadThroughBothLoaders) {
  // Without this, the refusals below could be a loader that refuses everything.
  for (const std::string like : {"deepseek-v3-bf16", "deepseek-v3-fp8", "kimi-k2.5-nvfp4"}) {
    SCOPED_TRACE(like);
    const fs::path dir = write_tiny(like, "clean");
    EXPECT_EQ(cpu_load_error(dir), "");
    EXPECT_EQ(staged_load_error(dir), "");
    fs::remove_all(dir);
  }
}

TEST(HostileCheckpoint, Bf16NanAndInfinityInWeightsAreRefused) {
  const fs::path dir = write_tiny("deepseek-v3-bf16", "bf16");
  struct Case {
    std::string tensor;
    uint64_t element;
    uint16_t bits;
  };
  const Case cases[] = {
      {"model.embed_tokens.weight", 0, 0x7fc0},                          // quiet NaN, first element
      {"model.layers.1.mlp.experts.5.down_proj.weight", 12345, 0xff81},  // negative signalling NaN
      {"model.layers.0.self_attn.kv_b_proj.weight", 777, 0x7f80},        // +inf
      {"lm_head.weight", 1024 * 256 - 1, 0xff80},                        // -inf, last element
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tensor);
    const std::string saved = [&] {
      const Located l = locate(dir, c.tensor);
      std::ifstream in(l.file, std::ios::binary);
      in.seekg(static_cast<std::streamoff>(l.data_offset + 2 * c.element));
      std::string b(2, '\0');
      in.read(b.data(), 2);
      return b;
    }();
    corrupt(dir, c.tensor, c.element, le16(c.bits));
    expect_refused_by_both(dir, c.tensor, c.element);
    corrupt(dir, c.tensor, c.element, saved);  // restore: each case alone is bad
  }
  EXPECT_EQ(cpu_load_error(dir), "") << "restoring the bytes should make it load again";
  fs::remove_all(dir);
}

TEST(HostileCheckpoint, NormsAndRouterBiasesAreCheckedToo) {
  const fs::path dir = write_tiny("deepseek-v3-bf16", "norms");
  const Located bias = locate(dir, "model.layers.1.mlp.gate.e_score_correction_bias");
  // The bias is F32 in DeepSeek checkpoints (either width is accepted).
  if (bias.dtype == "F32") {
    corrupt(dir, "model.layers.1.mlp.gate.e_score_correction_bias", 3, le32(0x7f800000u));
  } else {
    corrupt(dir, "model.layers.1.mlp.gate.e_score_correction_bias", 3, le16(0x7f80));
  }
  expect_refused_by_both(dir, "model.layers.1.mlp.gate.e_score_correction_bias", 3);
  fs::remove_all(dir);

  const fs::path dir2 = write_tiny("deepseek-v3-bf16", "norms2");
  corrupt(dir2, "model.norm.weight", 255, le16(0x7fc1));
  expect_refused_by_both(dir2, "model.norm.weight", 255);
  fs::remove_all(dir2);
}

TEST(HostileCheckpoint, Fp8E4m3NanWeightsAndNanBlockScalesAreRefused) {
  const std::string weight = "model.layers.1.mlp.experts.2.up_proj.weight";
  for (const uint8_t nan : {uint8_t{0x7f}, uint8_t{0xff}}) {
    SCOPED_TRACE(nan);
    const fs::path dir = write_tiny("deepseek-v3-fp8", "fp8");
    ASSERT_EQ(locate(dir, weight).dtype, "F8_E4M3");
    corrupt(dir, weight, 4000, byte(nan));
    expect_refused_by_both(dir, weight, 4000);
    fs::remove_all(dir);
  }
  // The largest finite e4m3 values (0x7e = 448, 0xfe = -448) are numbers, not NaN.
  {
    const fs::path dir = write_tiny("deepseek-v3-fp8", "fp8max");
    corrupt(dir, weight, 10, byte(0x7e));
    corrupt(dir, weight, 11, byte(0xfe));
    EXPECT_EQ(cpu_load_error(dir), "");
    EXPECT_EQ(staged_load_error(dir), "");
    fs::remove_all(dir);
  }
  const std::string scale = "model.layers.0.self_attn.o_proj.weight_scale_inv";
  const fs::path dir = write_tiny("deepseek-v3-fp8", "fp8scale");
  ASSERT_EQ(locate(dir, scale).dtype, "F32");
  corrupt(dir, scale, 1, le32(0x7fc00000u));
  expect_refused_by_both(dir, scale, 1);
  fs::remove_all(dir);
}

TEST(HostileCheckpoint, Nvfp4BlockScalesAndGlobalScalesAreChecked) {
  const std::string p = "language_model.model.layers.1.mlp.experts.3.down_proj";
  {
    const fs::path dir = write_tiny("kimi-k2.5-nvfp4", "nvfp4");
    ASSERT_EQ(locate(dir, p + ".weight_scale").dtype, "F8_E4M3");
    corrupt(dir, p + ".weight_scale", 17, byte(0xff));
    expect_refused_by_both(dir, p + ".weight_scale", 17);
    fs::remove_all(dir);
  }
  // The global scales are scalars read while the plan is made: refused there, naming the tensor.
  for (const std::string& name : {p + ".weight_scale_2", p + ".input_scale"}) {
    for (const uint32_t bits : {0x7f800000u, 0x7fc00000u}) {
      SCOPED_TRACE(name);
      const fs::path dir = write_tiny("kimi-k2.5-nvfp4", "nvfp4g");
      ASSERT_EQ(locate(dir, name).dtype, "F32");
      corrupt(dir, name, 0, le32(bits));
      const std::string file = locate(dir, name).file.filename().string();
      expect_names(cpu_load_error(dir), {file, "'" + name + "'"});
      expect_names(staged_load_error(dir), {file, "'" + name + "'"});
      fs::remove_all(dir);
    }
  }
}

// ---- header arithmetic --------------------------------------------------------------------------------

fs::path write_raw_safetensors(const fs::path& dir, const std::string& header_json, size_t data_bytes) {
  const fs::path p = dir / "model.safetensors";
  std::ofstream out(p, std::ios::binary);
  uint64_t n = header_json.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header_json << std::string(data_bytes, '\0');
  return p;
}

std::string open_error(const fs::path& p) {
  try {
    (void)io::SafetensorsFile::open(p);
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(HostileCheckpoint, HeaderSizesThatWouldWrapAreRefusedNamingTheTensor) {
  const fs::path dir = test::make_temp_dir("tessera-hostile-header");
  struct Case {
    std::string what, header;
  };
  const Case cases[] = {
      // 2^61 x 4 F64 elements: 2^66 bytes, which wraps to 0 == end - begin in 64 bits.
      {"bytes wrap to zero", R"({"t":{"dtype":"F64","shape":[2305843009213693952,4],"data_offsets":[0,0]}})"},
      {"bytes wrap to 16", R"({"t":{"dtype":"F64","shape":[2305843009213693954,4],"data_offsets":[0,16]}})"},
      {"elements wrap", R"({"t":{"dtype":"U8","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})"},
      {"a zero dimension beside a huge one",
       R"({"t":{"dtype":"F32","shape":[0,18446744073709551615],"data_offsets":[0,0]}})"},
      {"one dimension past int64", R"({"t":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,0]}})"},
      {"offsets past the file",
       R"({"t":{"dtype":"U8","shape":[16],"data_offsets":[18446744073709551600,18446744073709551615]}})"},
      {"end beyond the data", R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[12,16]}})"},
      {"negative dimension", R"({"t":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})"},
      {"fractional dimension", R"({"t":{"dtype":"U8","shape":[2.5],"data_offsets":[0,2]}})"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const fs::path p = write_raw_safetensors(dir, c.header, 8);
    const std::string err = open_error(p);
    expect_names(err, {p.string(), "'t'"});
  }
  // A number beyond double in the header (found by fuzz_safetensors_header: the JSON library threw
  // an exception other than its parse error, which escaped without the file's name).
  {
    const fs::path p =
        write_raw_safetensors(dir, R"({"x":{"dtype":"F64","shape":[4E611686018427739840,2],"data_offsets":[0,0]}})", 8);
    expect_names(open_error(p), {p.string(), "not valid JSON"});
  }
  // And the one that is fine, so the cases above fail for their own reason.
  EXPECT_EQ(open_error(write_raw_safetensors(dir, R"({"t":{"dtype":"F32","shape":[0,7],"data_offsets":[0,0]}})", 0)),
            "");
  fs::remove_all(dir);
}

// ---- special files --------------------------------------------------------------------------------------

// Runs `f` on another thread and fails (rather than hangs) when it is still blocked after a while: a
// reader blocked on a FIFO is then released by opening the FIFO's write end, which it would need.
std::string within_seconds(const std::function<std::string()>& f, const fs::path& fifo_to_release) {
  std::atomic<bool> done{false};
  std::string result;
  std::thread t([&] {
    result = f();
    done = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  bool released = false;
  while (!done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!released && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
      ADD_FAILURE() << "still blocked after 10 s: it opened the FIFO " << fifo_to_release;
      const int fd = ::open(fifo_to_release.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
      released = true;
    }
  }
  t.join();
  return result;
}

TEST(HostileCheckpoint, AFifoInPlaceOfAShardIsRefusedWithoutBlocking) {
  const fs::path dir = write_tiny("deepseek-v3-bf16", "fifo");
  const fs::path shard = locate(dir, "model.embed_tokens.weight").file;
  fs::remove(shard);
  ASSERT_EQ(::mkfifo(shard.c_str(), 0600), 0);
  const std::string err = within_seconds([&] { return cpu_load_error(dir); }, shard);
  expect_names(err, {shard.string(), "FIFO"});
  fs::remove_all(dir);
}

TEST(HostileCheckpoint, AFifoInPlaceOfConfigJsonOrTheIndexIsRefused) {
  for (const std::string name : {"config.json", "model.safetensors.index.json"}) {
    SCOPED_TRACE(name);
    const fs::path dir = write_tiny("deepseek-v3-bf16", "fifocfg");
    fs::remove(dir / name);
    ASSERT_EQ(::mkfifo((dir / name).c_str(), 0600), 0);
    const std::string err = within_seconds([&] { return cpu_load_error(dir); }, dir / name);
    expect_names(err, {(dir / name).string(), "FIFO"});
    fs::remove_all(dir);
  }
}

TEST(HostileCheckpoint, ADirectoryOrADeviceInPlaceOfAShardIsRefused) {
  {
    const fs::path dir = write_tiny("deepseek-v3-bf16", "dirshard");
    const fs::path shard = locate(dir, "model.embed_tokens.weight").file;
    fs::remove(shard);
    fs::create_directory(shard);
    expect_names(cpu_load_error(dir), {shard.string(), "directory"});
    fs::remove_all(dir);
  }
  {
    const fs::path dir = write_tiny("deepseek-v3-bf16", "devshard");
    const fs::path shard = locate(dir, "model.embed_tokens.weight").file;
    fs::remove(shard);
    fs::create_symlink("/dev/zero", shard);  // an endless read if it were opened as a file
    expect_names(cpu_load_error(dir), {shard.string(), "character device"});
    fs::remove_all(dir);
  }
  {
    // A single-file checkpoint whose model.safetensors is a directory.
    const fs::path dir = test::make_temp_dir("tessera-hostile-dironly");
    fs::create_directory(dir / "model.safetensors");
    std::string err;
    try {
      (void)io::Checkpoint::open(dir);
    } catch (const core::Error& e) {
      err = e.what();
    }
    expect_names(err, {(dir / "model.safetensors").string(), "directory"});
    fs::remove_all(dir);
  }
}

// ---- config.json ranges ------------------------------------------------------------------------------------

json tiny_config() { return json::parse(test::tiny_checkpoint_layout("deepseek-v3-bf16").config.dump()); }

std::string config_error(const json& config) {
  try {
    (void)io::parse_model_config(config, "/m/config.json");
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(HostileCheckpoint, ConfigValuesOutOfRangeAreRefusedNamingTheField) {
  ASSERT_EQ(config_error(tiny_config()), "") << "the unmodified config must parse";
  struct Case {
    std::string field;
    json value;
  };
  const Case cases[] = {
      {"eos_token_id", 1024},  // == vocab_size
      {"eos_token_id", -1},
      {"eos_token_id", json::array({1, 5000})},
      {"bos_token_id", 99999},
      {"bos_token_id", -3},
      {"rms_norm_eps", 0},
      {"rms_norm_eps", -1e-6},
      {"rms_norm_eps", 5},
      {"num_hidden_layers", -2},
      {"num_hidden_layers", 0},
      {"num_hidden_layers", 1e300},  // a float far beyond int64: refused, never cast
      {"num_hidden_layers", 2.5},
      {"num_hidden_layers", 1000000},
      {"num_attention_heads", -1},
      {"n_routed_experts", 0},
      {"n_routed_experts", 18446744073709551615ull},
      {"n_shared_experts", -1},
      {"num_experts_per_tok", 9},
      {"first_k_dense_replace", -1},
      {"first_k_dense_replace", 3},
      {"hidden_size", 1 << 30},
      {"vocab_size", -5},
      {"max_position_embeddings", 0},
      {"routed_scaling_factor", 0},
      {"routed_scaling_factor", -2.5},
      {"rope_theta", 0},
      {"qk_rope_head_dim", 7},
      {"num_nextn_predict_layers", -1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field + " = " + c.value.dump());
    json config = tiny_config();
    config[c.field] = c.value;
    expect_names(config_error(config), {"/m/config.json", c.field});
  }
  // The rope scaling object's fields too.
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, json>>{{"factor", 0},
                                                 {"factor", -1.5},
                                                 {"beta_fast", -1},
                                                 {"attention_factor", 0},
                                                 {"original_max_position_embeddings", -1}}) {
    SCOPED_TRACE(field);
    json config = tiny_config();
    json& rope = config.contains("rope_scaling") ? config["rope_scaling"] : config["rope_parameters"];
    ASSERT_TRUE(rope.is_object());
    rope["type"] = "yarn";
    if (!rope.contains("factor")) rope["factor"] = 40;
    if (!rope.contains("original_max_position_embeddings")) rope["original_max_position_embeddings"] = 4096;
    rope[field] = value;
    expect_names(config_error(config), {"/m/config.json", field});
  }
}

TEST(HostileCheckpoint, NumbersBeyondDoubleInConfigJsonAreRefusedNamingTheFile) {
  // JSON has no infinity: 1e999 overflows when parsed, which must be an error naming the file (the
  // JSON library throws its own exception type for it, not its parse error).
  const fs::path dir = write_tiny("deepseek-v3-bf16", "cfginf");
  std::string text = test::read_file(dir / "config.json");
  const std::string key = "\"rms_norm_eps\": ";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos) << text;
  const size_t end = text.find_first_of(",}", at);
  text = text.substr(0, at + key.size()) + "1e999" + text.substr(end);
  std::ofstream(dir / "config.json") << text;
  expect_names(cpu_load_error(dir), {(dir / "config.json").string(), "1e999"});
  fs::remove_all(dir);
}

TEST(HostileCheckpoint, AnOutOfRangeConfigIsRefusedBeforeAnyWeightIsRead) {
  const fs::path dir = write_tiny("deepseek-v3-bf16", "cfgload");
  json config = json::parse(test::read_file(dir / "config.json"));
  config["eos_token_id"] = 5000;
  std::ofstream(dir / "config.json") << config.dump();
  expect_names(cpu_load_error(dir), {(dir / "config.json").string(), "eos_token_id", "5000"});
  fs::remove_all(dir);
}

TEST(HostileCheckpoint, QuantizationBlockSizesThatWouldDivideByZeroAreRefused) {
  {
    const fs::path dir = write_tiny("kimi-k2.5-nvfp4", "group0");
    json config = json::parse(test::read_file(dir / "config.json"));
    json& qc = config["quantization_config"];
    ASSERT_TRUE(qc.is_object());
    for (auto& [name, g] : qc["config_groups"].items()) g["weights"]["group_size"] = 0;
    std::ofstream(dir / "config.json") << config.dump();
    expect_names(cpu_load_error(dir), {(dir / "config.json").string(), "group_size"});
    fs::remove_all(dir);
  }
  {
    const fs::path dir = write_tiny("deepseek-v3-fp8", "block0");
    json config = json::parse(test::read_file(dir / "config.json"));
    config["quantization_config"]["weight_block_size"] = json::array({0, 128});
    std::ofstream(dir / "config.json") << config.dump();
    expect_names(cpu_load_error(dir), {(dir / "config.json").string(), "weight_block_size"});
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace tessera

#include "model/random_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <map>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/safetensors_writer.h"

namespace tessera::model {
namespace {

namespace fs = std::filesystem;
using core::DType;
using core::fail;

// Pieces written with one write() call: large enough for sequential disk speed, small enough that
// two of them (one being generated, one being written) cost little memory.
constexpr uint64_t kChunkBytes = 64ull << 20;
// Pieces of a chunk handed to one pool thread.
constexpr uint64_t kSubBlockBytes = 1ull << 20;

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The bytes of one tensor, 8 at a time: word k is a function of (seed, tensor name, k) only.
class WordSource {
 public:
  WordSource(const TensorPlan& t, uint64_t seed)
      : key_(splitmix64(splitmix64(seed) ^ fnv1a(t.spec.name))), fill_(t.fill), dtype_(t.spec.dtype) {
    const size_t es = core::dtype_size(dtype_);
    switch (fill_.kind) {
      case Fill::Kind::kRandomBytes:
        if (dtype_ != DType::kU8) fail("{}: random bytes need U8", t.spec.name);
        break;
      case Fill::Kind::kConstant:
        for (size_t i = 0; i < 8; i += es) encode(static_cast<float>(fill_.mean), pattern_.data() + i);
        break;
      case Fill::Kind::kUniform:
        if (dtype_ == DType::kF8E4M3) {
          // One byte of randomness per element through a table: e4m3 of the uniform's 256 quantiles
          // (saturating, so never the NaN codes 0x7f / 0xff).
          for (int b = 0; b < 256; ++b)
            lut_[static_cast<size_t>(b)] = core::f32_to_fp8_e4m3(uniform((b + 0.5f) / 256.0f));
        } else if (dtype_ != DType::kBF16 && dtype_ != DType::kF32) {
          fail("{}: no uniform generator for dtype {}", t.spec.name, core::dtype_name(dtype_));
        }
        // Integer r of n bits -> uniform((r + 0.5) / 2^n) as one multiply-add in float (the hot loop).
        step16_ = static_cast<float>(2.0 * fill_.half_width / 65536.0);
        base16_ = uniform(0.5f / 65536.0f);
        step24_ = static_cast<float>(2.0 * fill_.half_width / 16777216.0);
        base24_ = uniform(0.5f / 16777216.0f);
        break;
    }
  }

  void word(uint64_t k, uint8_t* out) const {
    if (fill_.kind == Fill::Kind::kConstant) {
      std::memcpy(out, pattern_.data(), 8);
      return;
    }
    const uint64_t r = splitmix64(key_ + k);
    if (fill_.kind == Fill::Kind::kRandomBytes) {
      std::memcpy(out, &r, 8);
      return;
    }
    switch (dtype_) {
      case DType::kBF16:
        for (int i = 0; i < 4; ++i) {
          const uint16_t v = core::f32_to_bf16(static_cast<float>((r >> (16 * i)) & 0xffff) * step16_ + base16_);
          std::memcpy(out + 2 * i, &v, 2);
        }
        return;
      case DType::kF32:
        for (int i = 0; i < 2; ++i) {
          const float v = static_cast<float>((r >> (32 * i + 8)) & 0xffffff) * step24_ + base24_;
          std::memcpy(out + 4 * i, &v, 4);
        }
        return;
      default:  // kF8E4M3
        for (int i = 0; i < 8; ++i) out[i] = lut_[(r >> (8 * i)) & 0xff];
        return;
    }
  }

  // Words k0 .. k0 + n - 1, as word() writes them, with the format chosen once outside the loop.
  void whole_words(uint64_t k0, uint64_t n, uint8_t* dst) const {
    if (fill_.kind == Fill::Kind::kRandomBytes) {
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t r = splitmix64(key_ + k0 + i);
        std::memcpy(dst + 8 * i, &r, 8);
      }
    } else if (fill_.kind == Fill::Kind::kUniform && dtype_ == DType::kBF16) {
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t r = splitmix64(key_ + k0 + i);
        uint16_t v[4];
        for (int j = 0; j < 4; ++j)
          v[j] = core::f32_to_bf16(static_cast<float>((r >> (16 * j)) & 0xffff) * step16_ + base16_);
        std::memcpy(dst + 8 * i, v, 8);
      }
    } else {
      for (uint64_t i = 0; i < n; ++i) word(k0 + i, dst + 8 * i);
    }
  }

  // Bytes [begin, end) of the tensor to dst.
  void fill(uint64_t begin, uint64_t end, uint8_t* dst) const {
    uint64_t k = begin / 8;
    // Whole words go straight to dst; a partial word at either end goes through a scratch word.
    while (begin < end) {
      const uint64_t wb = k * 8;
      if (begin == wb && end - begin >= 8) {
        const uint64_t words = (end - begin) / 8;
        whole_words(k, words, dst);
        dst += 8 * words;
        begin += 8 * words;
        k += words;
        continue;
      } else {
        uint8_t w[8];
        word(k, w);
        const uint64_t hi = std::min(end, wb + 8);
        std::memcpy(dst, w + (begin - wb), hi - begin);
        dst += hi - begin;
        begin = hi;
      }
      ++k;
    }
  }

 private:
  // u in (0, 1) -> mean + (2u - 1) * half_width
  float uniform(float u) const {
    return static_cast<float>(fill_.mean + (2.0 * static_cast<double>(u) - 1.0) * fill_.half_width);
  }
  void encode(float v, uint8_t* out) const {
    switch (dtype_) {
      case DType::kF32:
        std::memcpy(out, &v, 4);
        return;
      case DType::kBF16: {
        const uint16_t b = core::f32_to_bf16(v);
        std::memcpy(out, &b, 2);
        return;
      }
      case DType::kF8E4M3:
        *out = core::f32_to_fp8_e4m3(v);
        return;
      default:
        fail("no constant encoder for dtype {}", core::dtype_name(dtype_));
    }
  }

  uint64_t key_;
  Fill fill_;
  DType dtype_;
  std::array<uint8_t, 8> pattern_{};
  std::array<uint8_t, 256> lut_{};
  float step16_ = 0, base16_ = 0, step24_ = 0, base24_ = 0;
};

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary);
  out << s;
  out.close();
  if (!out) fail("{}: cannot write file", p.string());
}

// Generates and writes the data of one shard, overlapping generation with the previous write.
void write_shard(const fs::path& path, const CheckpointLayout& layout, const ShardPlan& shard,
                 const RandomCheckpointOptions& options, uint64_t& done, uint64_t total) {
  std::vector<io::TensorSpec> specs;
  std::vector<WordSource> sources;
  std::vector<uint64_t> starts;  // data offset of each tensor, plus the end
  uint64_t offset = 0;
  for (size_t i : shard.tensors) {
    specs.push_back(layout.tensors[i].spec);
    sources.emplace_back(layout.tensors[i], options.seed);
    starts.push_back(offset);
    offset += specs.back().nbytes();
  }
  starts.push_back(offset);

  // Fills shard bytes [a, b) into dst, tensor by tensor.
  auto fill_range = [&](uint64_t a, uint64_t b, uint8_t* dst) {
    size_t t = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), a) - starts.begin()) - 1;
    for (; t < sources.size() && starts[t] < b; ++t) {
      const uint64_t lo = std::max(a, starts[t]), hi = std::min(b, starts[t + 1]);
      if (lo < hi) sources[t].fill(lo - starts[t], hi - starts[t], dst + (lo - a));
    }
  };

  io::SafetensorsStreamWriter out(path, specs, {{"format", "pt"}});
  std::vector<uint8_t> buffers[2];
  std::future<void> pending;
  int cur = 0;
  for (uint64_t a = 0; a < offset; a += kChunkBytes, cur ^= 1) {
    const uint64_t b = std::min(offset, a + kChunkBytes);
    auto& buf = buffers[cur];
    buf.resize(b - a);
    const int64_t blocks = static_cast<int64_t>((b - a + kSubBlockBytes - 1) / kSubBlockBytes);
    core::parallel_for(blocks, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        const uint64_t s = a + static_cast<uint64_t>(k) * kSubBlockBytes, e = std::min(b, s + kSubBlockBytes);
        fill_range(s, e, buf.data() + (s - a));
      }
    });
    if (pending.valid()) {
      pending.get();
      if (options.progress) options.progress(done, total);
    }
    pending = std::async(std::launch::async, [&out, &buf, &done] {
      out.write(buf.data(), buf.size());
      done += buf.size();
    });
  }
  if (pending.valid()) pending.get();
  out.close();
  if (options.progress) options.progress(done, total);
}

}  // namespace

void fill_tensor_bytes(const TensorPlan& tensor, uint64_t seed, uint64_t begin, uint64_t end, uint8_t* dst) {
  TESSERA_CHECK(begin <= end && end <= tensor.spec.nbytes(), "{}: byte range [{}, {}) outside the tensor",
                tensor.spec.name, begin, end);
  WordSource(tensor, seed).fill(begin, end, dst);
}

std::vector<ShardPlan> plan_shards(const std::vector<TensorPlan>& tensors, uint64_t max_shard_bytes) {
  TESSERA_CHECK(max_shard_bytes > 0, "plan_shards: the shard size must be positive");
  uint64_t total = 0;
  for (const auto& t : tensors) total += t.spec.nbytes();
  const uint64_t want = std::max<uint64_t>(2, (total + max_shard_bytes - 1) / max_shard_bytes);
  const uint64_t target = std::max<uint64_t>(1, (total + want - 1) / want);
  std::vector<ShardPlan> shards(1);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t n = tensors[i].spec.nbytes();
    if (!shards.back().tensors.empty() && shards.back().bytes + n > target) shards.emplace_back();
    shards.back().tensors.push_back(i);
    shards.back().bytes += n;
  }
  for (size_t s = 0; s < shards.size(); ++s)
    shards[s].file = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
  return shards;
}

RandomCheckpointStats write_random_checkpoint(const fs::path& dir, const CheckpointLayout& layout,
                                              const RandomCheckpointOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto shards = plan_shards(layout.tensors, options.max_shard_bytes);
  const uint64_t total = layout.total_bytes();
  std::error_code ec;
  const auto space = fs::space(dir, ec);
  if (!ec && space.available < total)
    fail("{}: {:.2f} GB free, the checkpoint needs {:.2f} GB", dir.string(), space.available / 1e9, total / 1e9);

  write_text(dir / "config.json", layout.config.dump(2) + "\n");
  if (layout.hf_quant_config) write_text(dir / "hf_quant_config.json", layout.hf_quant_config->dump(2) + "\n");
  uint64_t done = 0;
  std::map<std::string, std::string> weight_map;
  for (const auto& shard : shards) {
    write_shard(dir / shard.file, layout, shard, options, done, total);
    for (size_t i : shard.tensors) weight_map[layout.tensors[i].spec.name] = shard.file;
  }
  // The index last: a checkpoint interrupted before this point has none and does not load.
  const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_text(dir / "model.safetensors.index.json", index.dump(2) + "\n");

  RandomCheckpointStats stats;
  stats.data_bytes = total;
  stats.shards = shards.size();
  stats.tensors = layout.tensors.size();
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

}  // namespace tessera::model

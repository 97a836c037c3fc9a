#include "core/file.h"
#include "io/checkpoint.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"

namespace tessera::io {

using core::fail;
namespace fs = std::filesystem;

std::unique_ptr<Checkpoint> Checkpoint::open(const fs::path& dir) {
  if (!fs::is_directory(dir)) fail("{}: not a directory (expected a model checkpoint folder)", dir.string());
  auto ckpt = std::unique_ptr<Checkpoint>(new Checkpoint());
  ckpt->dir_ = dir;
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    auto j = nlohmann::json::parse(core::read_file(index_path), nullptr, false);
    if (j.is_discarded()) fail("{}: not valid JSON", index_path.string());
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: missing the 'weight_map' object", index_path.string());
    std::map<std::string, std::vector<std::string>> by_shard;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail("{}: weight_map entry '{}' must be a file name", index_path.string(), it.key());
      std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard == ".." || shard.empty())
        fail("{}: weight_map entry '{}' names '{}', which is not a file in this folder", index_path.string(), it.key(),
             shard);
      by_shard[shard].push_back(it.key());
    }
    if (by_shard.empty()) fail("{}: weight_map is empty", index_path.string());
    for (const auto& [shard, names] : by_shard) {
      fs::path p = dir / shard;
      if (!fs::exists(p))
        fail("{}: names shard '{}' (holding {} tensors, e.g. '{}'), which does not exist in {}", index_path.string(),
             shard, names.size(), names.front(), dir.string());
      auto file = SafetensorsFile::open(p);
      for (const auto& n : names) {
        if (!file->has(n))
          fail("{}: says tensor '{}' is in '{}', but that shard has no such tensor", index_path.string(), n, shard);
        ckpt->where_[n] = file.get();
      }
      // Tensors present in a shard but absent from the index are still usable.
      for (const auto& [n, _] : file->tensors()) ckpt->where_.emplace(n, file.get());
      ckpt->files_.push_back(std::move(file));
    }
  } else {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors" && e.path().filename() != "golden.safetensors")
        files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty())
      fail("{}: no model.safetensors.index.json and no *.safetensors files: not a safetensors checkpoint",
           dir.string());
    if (files.size() > 1 && !fs::exists(dir / "model.safetensors"))
      fail("{}: {} safetensors files but no model.safetensors.index.json to say which tensors are where", dir.string(),
           files.size());
    fs::path p = fs::exists(dir / "model.safetensors") ? dir / "model.safetensors" : files.front();
    auto file = SafetensorsFile::open(p);
    for (const auto& [n, _] : file->tensors()) ckpt->where_[n] = file.get();
    ckpt->files_.push_back(std::move(file));
  }
  return ckpt;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [n, _] : where_) out.push_back(n);
  return out;
}

const TensorInfo& Checkpoint::info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end())
    fail("{}: tensor '{}' is required but no shard of the checkpoint has it", dir_.string(), name);
  return it->second->info(name);
}

const fs::path& Checkpoint::file_of(const std::string& name) const {
  (void)info(name);
  return where_.at(name)->path();
}

core::Tensor Checkpoint::get(const std::string& name) const {
  (void)info(name);
  return where_.at(name)->tensor(name);
}

core::Tensor Checkpoint::get(const std::string& name, core::DType dtype, const core::Shape& shape) const {
  return get_any(name, {dtype}, shape);
}

core::Tensor Checkpoint::get_any(const std::string& name, const std::vector<core::DType>& dtypes,
                                 const core::Shape& shape) const {
  const TensorInfo& t = info(name);
  bool dtype_ok = false;
  std::string allowed;
  for (auto d : dtypes) {
    dtype_ok |= d == t.dtype;
    allowed += (allowed.empty() ? "" : " or ") + std::string(core::dtype_name(d));
  }
  if (!dtype_ok)
    fail("{}: tensor '{}' has dtype {}, expected {}", file_of(name).string(), name, core::dtype_name(t.dtype), allowed);
  // A scalar may be stored as [] or [1].
  bool scalar_ok = shape.empty() && t.shape == core::Shape{1};
  if (t.shape != shape && !scalar_ok)
    fail("{}: tensor '{}' has shape {}, the config implies {}", file_of(name).string(), name, core::shape_str(t.shape),
         core::shape_str(shape));
  return get(name);
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, f] : where_) {
    const auto& t = f->info(name);
    n += t.end - t.begin;
  }
  return n;
}

std::vector<fs::path> Checkpoint::files() const {
  std::vector<fs::path> out;
  for (const auto& f : files_) out.push_back(f->path());
  return out;
}

std::optional<FileRange> Checkpoint::locate(const void* data, uint64_t bytes) const {
  for (const auto& f : files_) {
    const int64_t off = f->file_offset_of(data);
    if (off < 0) continue;
    if (static_cast<uint64_t>(off) + bytes > f->file_size()) return std::nullopt;
    FileRange r(f->path(), static_cast<uint64_t>(off), bytes);
    if (const TensorInfo* t = f->tensor_at(r.offset)) {
      r.tensor = t->name;
      r.tensor_offset = r.offset - (f->file_offset_of(f->tensor(t->name).raw()));
      r.dtype = t->dtype;
    }
    return r;
  }
  return std::nullopt;
}

}  // namespace tessera::io

// A checkpoint directory: a single model.safetensors, or shards listed by
// model.safetensors.index.json. Every shard is opened and validated up front, so a broken download
// is reported before any weight is used.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"

namespace tessera::io {

// Where a tensor view's bytes are in the checkpoint's files.
struct FileRange {
  FileRange() = default;
  FileRange(std::filesystem::path f, uint64_t off, uint64_t n) : file(std::move(f)), offset(off), bytes(n) {}
  std::filesystem::path file;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  // The tensor the bytes belong to (Checkpoint::locate fills these in): for messages, and for the
  // check that its values are finite as they are read (StagedReader).
  std::string tensor;
  uint64_t tensor_offset = 0;  // where the range begins in the tensor's bytes
  core::DType dtype = core::DType::kU8;
  bool check_finite = false;  // refuse NaN / inf in these bytes (dtype_can_be_non_finite(dtype))
};

class Checkpoint {
 public:
  // Throws core::Error naming the file on: no safetensors in the directory, a bad index (invalid
  // JSON, no weight_map), an index naming a missing shard, a tensor the index puts in a shard that
  // does not hold it, and every per-file error of SafetensorsFile::open.
  static std::unique_ptr<Checkpoint> open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  std::vector<std::string> names() const;
  const TensorInfo& info(const std::string& name) const;
  // The shard holding `name` (for messages).
  const std::filesystem::path& file_of(const std::string& name) const;
  // A view of the tensor's bytes; throws naming the tensor when no shard has it.
  core::Tensor get(const std::string& name) const;
  // As get(), and checks dtype and shape, naming the tensor and its file when they differ.
  core::Tensor get(const std::string& name, core::DType dtype, const core::Shape& shape) const;
  // Like get(name, dtype, shape) but accepts any of `dtypes`.
  core::Tensor get_any(const std::string& name, const std::vector<core::DType>& dtypes, const core::Shape& shape) const;
  uint64_t total_bytes() const;
  // The file and offset of a view returned by get() (its `bytes` from there), and the tensor it lies
  // in, or nullopt for memory that is not this checkpoint's mapping.
  std::optional<FileRange> locate(const void* data, uint64_t bytes) const;
  size_t num_files() const { return files_.size(); }
  // The safetensors files, in the order they were opened.
  std::vector<std::filesystem::path> files() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*> where_;
};

}  // namespace tessera::io

// Reader for one safetensors file: validates the header completely before any tensor is used and
// maps the file read-only. Every error names the file, and the tensor where one is at fault.
//
// Format (huggingface/safetensors): u64 little-endian header length N, N bytes of JSON
// {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
// then the data buffer; offsets are relative to the start of the buffer (byte 8 + N).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace tessera::io {

// The reader refuses headers larger than this, as the reference implementation does.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct TensorInfo {
  std::string name;
  core::DType dtype;
  core::Shape shape;
  uint64_t begin = 0;  // byte offsets into the data buffer, [begin, end)
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Opens, validates and maps `path`. Throws core::Error naming the file (and tensor) on:
  // a FIFO, device or directory in place of the file (refused before it is opened for reading),
  // a Git LFS pointer in place of the data, a header length past the file or over the limit,
  // invalid JSON, unknown dtype, bad shape, a byte range that does not match shape x dtype,
  // overlapping ranges, or data past the end of the file (a truncated download).
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  // A read-only view of the tensor's bytes in the mapping (valid while this object lives).
  core::Tensor tensor(const std::string& name) const;
  uint64_t file_size() const { return file_size_; }
  // The file offset of `p` when it points into this file's mapping (a tensor() view), else -1:
  // how a loader that reads the file itself finds a view's bytes.
  int64_t file_offset_of(const void* p) const;
  // The tensor whose bytes hold file offset `offset`, or nullptr.
  const TensorInfo* tensor_at(uint64_t offset) const;

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  std::vector<const TensorInfo*> by_offset_;  // non-empty tensors by data offset
  uint64_t file_size_ = 0;
  uint64_t data_start_ = 0;
  void* map_ = nullptr;
  size_t map_size_ = 0;
};

// A safetensors header, validated: what SafetensorsFile::open checks before it maps the file.
struct SafetensorsHeader {
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + the header's length: where the data buffer begins
};

// The header length held in a file's first 8 bytes (`first8`, fewer when the file is shorter),
// checked against the limit and the file's size. Throws core::Error naming `file`.
uint64_t safetensors_header_length(std::string_view first8, uint64_t file_size, const std::string& file);

// Parses and validates the JSON header `json_text` of a file of `file_size` bytes: every check of
// SafetensorsFile::open except those on the file itself. Size arithmetic cannot overflow: a shape
// whose byte size passes 2^62 is refused. Throws core::Error naming `file` and the tensor.
SafetensorsHeader parse_safetensors_header(std::string_view json_text, uint64_t file_size, const std::string& file);

// Writes a safetensors file (used by tests, the demo-model generator and `tessera logits`).
struct TensorToWrite {
  std::string name;
  core::DType dtype;
  core::Shape shape;
  std::string bytes;  // exactly numel * dtype_size bytes
};
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Helpers to build TensorToWrite from typed data.
TensorToWrite tensor_to_write(std::string name, const core::Tensor& t);
TensorToWrite f32_tensor(std::string name, core::Shape shape, const std::vector<float>& values);
TensorToWrite i32_tensor(std::string name, core::Shape shape, const std::vector<int32_t>& values);

}  // namespace tessera::io

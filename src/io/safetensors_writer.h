// Streaming writer for one safetensors file: the header is built from the tensor list up front,
// then the data buffer is appended in pieces of any size, so a multi-GB shard is never held in
// memory. `tessera make-checkpoint` writes its shards with it; write_safetensors (safetensors.h)
// shares its header code.
//
// Format (huggingface/safetensors README §Format): u64 little-endian header length N, N bytes of
// JSON padded with spaces to a multiple of 8 (the reference writer's alignment, so the data buffer
// starts 8-byte aligned), then the tensors back to back in the order given, data_offsets relative
// to the start of the buffer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tessera::io {

struct TensorSpec {
  std::string name;
  core::DType dtype;
  core::Shape shape;
  uint64_t nbytes() const;
};

// The complete file prefix: 8-byte length + padded JSON header with "__metadata__" (when given)
// and the tensors at consecutive offsets in `tensors` order. Throws on a duplicate name.
std::string safetensors_header(const std::vector<TensorSpec>& tensors,
                               const std::map<std::string, std::string>& metadata);

class SafetensorsStreamWriter {
 public:
  // Creates (truncates) `path` and writes the header. Throws core::Error naming the file.
  SafetensorsStreamWriter(std::filesystem::path path, const std::vector<TensorSpec>& tensors,
                          const std::map<std::string, std::string>& metadata);
  ~SafetensorsStreamWriter();  // closes without checks when close() was not called
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;

  // Appends bytes of the data buffer; throws when they would run past the last tensor.
  void write(const void* data, size_t n);
  // Checks that the whole buffer was written and closes the file; throws naming the file.
  void close();

  uint64_t data_bytes() const { return data_bytes_; }
  uint64_t written() const { return written_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_all(const void* data, size_t n);
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t data_bytes_ = 0;
  uint64_t written_ = 0;
};

}  // namespace tessera::io

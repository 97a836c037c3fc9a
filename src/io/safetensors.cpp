#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "io/safetensors_writer.h"

namespace tessera::io {

using core::fail;
using nlohmann::json;

namespace {

constexpr std::string_view kLfsPointerPrefix = "version https://git-lfs.github.com/spec/";

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool read_exact(int fd, void* buf, size_t n, uint64_t offset) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return true;
}

// Dimensions and byte sizes stay below 2^62: an int64 shape, and products that cannot wrap.
constexpr uint64_t kMaxSize = uint64_t{1} << 62;

uint64_t checked_dim(const json& d, const std::string& file, const std::string& name) {
  if (!d.is_number_integer() && !d.is_number_unsigned())
    fail("{}: tensor '{}': shape entries must be non-negative integers, got {}", file, name, d.dump());
  if (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0)
    fail("{}: tensor '{}': negative dimension {} in shape", file, name, d.get<int64_t>());
  const uint64_t dim = d.get<uint64_t>();
  if (dim > kMaxSize) fail("{}: tensor '{}': dimension {} is too large (over 2^62)", file, name, dim);
  return dim;
}

}  // namespace

uint64_t safetensors_header_length(std::string_view first8, uint64_t file_size, const std::string& file) {
  if (file_size < 8 || first8.size() < 8)
    fail("{}: file is {} bytes, too short for a safetensors header (8-byte length)", file, file_size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(first8[static_cast<size_t>(i)]);
  if (header_len > kMaxSafetensorsHeaderBytes)
    fail("{}: header length {} exceeds the {} byte limit (corrupt file, or not safetensors)", file, header_len,
         kMaxSafetensorsHeaderBytes);
  if (header_len > file_size - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes): truncated or not safetensors", file,
         header_len, file_size);
  return header_len;
}

SafetensorsHeader parse_safetensors_header(std::string_view json_text, uint64_t file_size, const std::string& file) {
  if (json_text.size() > kMaxSafetensorsHeaderBytes || 8 + json_text.size() > file_size)
    fail("{}: header length {} does not fit the file ({} bytes)", file, json_text.size(), file_size);
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 4E6116...
    fail("{}: header is not valid JSON: {}", file, e.what());
  }
  if (!j.is_object()) fail("{}: header must be a JSON object, got {}", file, j.type_name());

  SafetensorsHeader out;
  out.data_start = 8 + json_text.size();
  const uint64_t data_size = file_size - out.data_start;

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("{}: __metadata__ must be an object of strings", file);
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail("{}: __metadata__ entry '{}' must be a string, got {}", file, m.key(), m.value().type_name());
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) fail("{}: tensor '{}': entry must be an object", file, name);
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!v.contains(key)) fail("{}: tensor '{}': missing field '{}'", file, name, key);
    if (!v["dtype"].is_string()) fail("{}: tensor '{}': dtype must be a string", file, name);
    std::string dtype_str = v["dtype"].get<std::string>();
    auto dtype = core::parse_safetensors_dtype(dtype_str);
    if (!dtype) fail("{}: tensor '{}': unknown or unsupported dtype '{}'", file, name, dtype_str);
    if (!v["shape"].is_array()) fail("{}: tensor '{}': shape must be an array", file, name);
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail("{}: tensor '{}': data_offsets must be two non-negative integers, got {}", file, name, off.dump());

    TensorInfo info;
    info.name = name;
    info.dtype = *dtype;
    // Every dimension and every partial product stays at most 2^62, and so does the byte size: no
    // product can wrap, whatever the header says (a zero dimension does not excuse the others).
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      const uint64_t dim = checked_dim(d, file, name);
      if (dim != 0 && numel > kMaxSize / dim)
        fail("{}: tensor '{}': shape {} has more than 2^62 elements", file, name, v["shape"].dump());
      numel *= dim;
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t elem = core::dtype_size(info.dtype);
    if (numel > kMaxSize / elem)
      fail("{}: tensor '{}': shape {} x {} is more than 2^62 bytes", file, name, v["shape"].dump(), dtype_str);
    info.begin = off[0].get<uint64_t>();
    info.end = off[1].get<uint64_t>();
    if (info.end < info.begin)
      fail("{}: tensor '{}': data_offsets [{}, {}] end before they begin", file, name, info.begin, info.end);
    const uint64_t expect = numel * elem;
    if (info.end - info.begin != expect)
      fail("{}: tensor '{}': byte range [{}, {}) holds {} bytes but shape {} x {} needs {}", file, name, info.begin,
           info.end, info.end - info.begin, core::shape_str(info.shape), dtype_str, expect);
    if (info.end > data_size)
      fail(
          "{}: tensor '{}' ends at data byte {} but the file holds only {} data bytes: the file is {} bytes "
          "shorter than its header says (truncated download?)",
          file, name, info.end, data_size, info.end - data_size);
    out.tensors.emplace(name, std::move(info));
  }

  // Ranges must not overlap.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [_, t] : out.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  uint64_t max_end = 0;
  const TensorInfo* last_tensor = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (t->end == t->begin) continue;  // empty tensors occupy no bytes
    if (last_tensor && t->begin < max_end)
      fail("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", file, last_tensor->name, last_tensor->begin,
           last_tensor->end, t->name, t->begin, t->end);
    max_end = t->end;
    last_tensor = t;
  }
  return out;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string file = path.string();
  Fd f;
  f.fd = core::open_regular_file(path);  // a FIFO, device or directory is refused here, unopened
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail("{}: cannot stat: {}", file, std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);

  // A Git LFS pointer (a small text file) in place of the real shard is a common failed download.
  char head[64] = {};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(size, sizeof(head)));
  if (n > 0 && !read_exact(f.fd, head, n, 0)) fail("{}: cannot read the header: {}", file, std::strerror(errno));
  if (std::string_view(head, n).substr(0, kLfsPointerPrefix.size()) == kLfsPointerPrefix)
    fail(
        "{}: this is a Git LFS pointer file ({} bytes), not the tensor data: fetch the real file "
        "(e.g. `git lfs pull` or download it with huggingface-cli)",
        file, size);
  const uint64_t header_len = safetensors_header_length(std::string_view(head, n), size, file);

  std::string header(header_len, '\0');
  if (!read_exact(f.fd, header.data(), header_len, 8)) fail("{}: cannot read the header", file);
  SafetensorsHeader h = parse_safetensors_header(header, size, file);

  auto out = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  out->path_ = path;
  out->file_size_ = size;
  out->data_start_ = h.data_start;
  out->tensors_ = std::move(h.tensors);
  out->metadata_ = std::move(h.metadata);
  for (const auto& [_, t] : out->tensors_)
    if (t.end > t.begin) out->by_offset_.push_back(&t);
  std::sort(out->by_offset_.begin(), out->by_offset_.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  if (size > 0) {
    void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, f.fd, 0);
    if (m == MAP_FAILED) fail("{}: mmap failed: {}", file, std::strerror(errno));
    out->map_ = m;
    out->map_size_ = size;
  }
  return out;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("{}: no tensor named '{}'", path_.string(), name);
  return it->second;
}

int64_t SafetensorsFile::file_offset_of(const void* p) const {
  const auto* base = static_cast<const uint8_t*>(map_);
  const auto* q = static_cast<const uint8_t*>(p);
  if (!base || q < base || q >= base + map_size_) return -1;
  return q - base;
}

const TensorInfo* SafetensorsFile::tensor_at(uint64_t offset) const {
  if (offset < data_start_) return nullptr;
  const uint64_t at = offset - data_start_;
  auto it = std::upper_bound(by_offset_.begin(), by_offset_.end(), at,
                             [](uint64_t x, const TensorInfo* t) { return x < t->begin; });
  if (it == by_offset_.begin()) return nullptr;
  const TensorInfo* t = *(it - 1);
  return at < t->end ? t : nullptr;
}

core::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& t = info(name);
  auto* base = static_cast<uint8_t*>(map_) + data_start_ + t.begin;
  return core::Tensor::view(t.dtype, t.shape, base);
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& t : tensors) {
    specs.push_back({t.name, t.dtype, t.shape});
    TESSERA_CHECK(specs.back().nbytes() == t.bytes.size(),
                  "write_safetensors {}: tensor '{}' has {} bytes, shape needs {}", path.string(), t.name,
                  t.bytes.size(), specs.back().nbytes());
  }
  SafetensorsStreamWriter out(path, specs, metadata);
  for (const auto& t : tensors) out.write(t.bytes.data(), t.bytes.size());
  out.close();
}

TensorToWrite tensor_to_write(std::string name, const core::Tensor& t) {
  return {std::move(name), t.dtype(), t.shape(), std::string(static_cast<const char*>(t.raw()), t.nbytes())};
}

TensorToWrite f32_tensor(std::string name, core::Shape shape, const std::vector<float>& values) {
  return {std::move(name), core::DType::kF32, std::move(shape),
          std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4)};
}

TensorToWrite i32_tensor(std::string name, core::Shape shape, const std::vector<int32_t>& values) {
  return {std::move(name), core::DType::kI32, std::move(shape),
          std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4)};
}

}  // namespace tessera::io

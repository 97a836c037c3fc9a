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

uint64_t checked_dim(const json& d, const std::string& file, const std::string& name) {
  if (!d.is_number_integer() && !d.is_number_unsigned())
    fail("{}: tensor '{}': shape entries must be non-negative integers, got {}", file, name, d.dump());
  if (d.is_number_integer() && d.get<int64_t>() < 0)
    fail("{}: tensor '{}': negative dimension {} in shape", file, name, d.get<int64_t>());
  return d.get<uint64_t>();
}

}  // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string file = path.string();
  Fd f;
  f.fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) fail("{}: cannot open: {}", file, std::strerror(errno));
  struct stat st{};
  if (::fstat(f.fd, &st) != 0) fail("{}: cannot stat: {}", file, std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);

  // A Git LFS pointer (a small text file) in place of the real shard is a common failed download.
  {
    char head[64] = {};
    size_t n = static_cast<size_t>(std::min<uint64_t>(size, sizeof(head)));
    if (n > 0 && read_exact(f.fd, head, n, 0) &&
        std::string_view(head, n).substr(0, kLfsPointerPrefix.size()) == kLfsPointerPrefix)
      fail("{}: this is a Git LFS pointer file ({} bytes), not the tensor data: fetch the real file "
           "(e.g. `git lfs pull` or download it with huggingface-cli)", file, size);
  }
  if (size < 8) fail("{}: file is {} bytes, too short for a safetensors header (8-byte length)", file, size);
  uint64_t header_len = 0;
  uint8_t lenbuf[8];
  if (!read_exact(f.fd, lenbuf, 8, 0)) fail("{}: cannot read the header length", file);
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | lenbuf[i];
  if (header_len > kMaxSafetensorsHeaderBytes)
    fail("{}: header length {} exceeds the {} byte limit (corrupt file, or not safetensors)", file,
         header_len, kMaxSafetensorsHeaderBytes);
  if (header_len > size - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes): truncated or not safetensors",
         file, header_len, size);

  std::string header(header_len, '\0');
  if (!read_exact(f.fd, header.data(), header_len, 8)) fail("{}: cannot read the header", file);
  json j;
  try {
    j = json::parse(header);
  } catch (const json::parse_error& e) {
    fail("{}: header is not valid JSON: {}", file, e.what());
  }
  if (!j.is_object()) fail("{}: header must be a JSON object, got {}", file, j.type_name());

  auto out = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  out->path_ = path;
  out->file_size_ = size;
  out->data_start_ = 8 + header_len;
  const uint64_t data_size = size - out->data_start_;

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail("{}: __metadata__ must be an object of strings", file);
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail("{}: __metadata__ entry '{}' must be a string, got {}", file, m.key(), m.value().type_name());
        out->metadata_[m.key()] = m.value().get<std::string>();
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
    // numel * size must not overflow: keep the product below 2^62.
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      uint64_t dim = checked_dim(d, file, name);
      if (dim != 0 && numel > (uint64_t{1} << 62) / dim)
        fail("{}: tensor '{}': shape {} is too large", file, name, v["shape"].dump());
      numel *= dim;
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    info.begin = off[0].get<uint64_t>();
    info.end = off[1].get<uint64_t>();
    if (info.end < info.begin)
      fail("{}: tensor '{}': data_offsets [{}, {}] end before they begin", file, name, info.begin, info.end);
    uint64_t expect = numel * core::dtype_size(info.dtype);
    if (info.end - info.begin != expect)
      fail("{}: tensor '{}': byte range [{}, {}) holds {} bytes but shape {} x {} needs {}", file, name,
           info.begin, info.end, info.end - info.begin, core::shape_str(info.shape), dtype_str, expect);
    out->tensors_.emplace(name, std::move(info));
  }

  // Ranges must lie inside the data buffer and must not overlap.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& [_, t] : out->tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  uint64_t max_end = 0;
  const TensorInfo* last_tensor = nullptr;
  for (const TensorInfo* t : by_offset) {
    if (t->end == t->begin) continue;  // empty tensors occupy no bytes
    if (last_tensor && t->begin < max_end)
      fail("{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", file, last_tensor->name,
           last_tensor->begin, last_tensor->end, t->name, t->begin, t->end);
    max_end = t->end;
    last_tensor = t;
  }
  if (max_end > data_size) {
    fail("{}: tensor '{}' ends at data byte {} but the file holds only {} data bytes: the file is {} "
         "bytes shorter than its header says (truncated download?)",
         file, last_tensor->name, max_end, data_size, max_end - data_size);
  }

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
  return {std::move(name), t.dtype(), t.shape(),
          std::string(static_cast<const char*>(t.raw()), t.nbytes())};
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

#include "io/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/dtype.h"
#include "core/error.h"

namespace tessera::io {

using core::fail;

uint64_t TensorSpec::nbytes() const {
  return static_cast<uint64_t>(core::shape_numel(shape)) * core::dtype_size(dtype);
}

std::string safetensors_header(const std::vector<TensorSpec>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the data order in the header, which makes the files easy to read by eye.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (!seen.insert(t.name).second) fail("safetensors header: duplicate tensor name '{}'", t.name);
    const uint64_t n = t.nbytes();
    header[t.name] = {
        {"dtype", std::string(core::dtype_name(t.dtype))}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string json = header.dump();
  while (json.size() % 8 != 0) json.push_back(' ');
  std::string out(8, '\0');
  const uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + json;
}

SafetensorsStreamWriter::SafetensorsStreamWriter(std::filesystem::path path, const std::vector<TensorSpec>& tensors,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)) {
  for (const auto& t : tensors) data_bytes_ += t.nbytes();
  const std::string header = safetensors_header(tensors, metadata);
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("{}: cannot create: {}", path_.string(), std::strerror(errno));
  write_all(header.data(), header.size());
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsStreamWriter::write_all(const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("{}: write failed: {}", path_.string(), w < 0 ? std::strerror(errno) : "no progress");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void SafetensorsStreamWriter::write(const void* data, size_t n) {
  TESSERA_CHECK(fd_ >= 0, "{}: write after close", path_.string());
  if (written_ + n > data_bytes_)
    fail("{}: {} more bytes would run past the data buffer ({} of {} written)", path_.string(), n, written_,
         data_bytes_);
  write_all(data, n);
  written_ += n;
}

void SafetensorsStreamWriter::close() {
  TESSERA_CHECK(fd_ >= 0, "{}: closed twice", path_.string());
  if (written_ != data_bytes_) fail("{}: closed after {} of {} data bytes", path_.string(), written_, data_bytes_);
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) fail("{}: close failed: {}", path_.string(), std::strerror(errno));
}

}  // namespace tessera::io

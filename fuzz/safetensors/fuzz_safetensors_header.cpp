// Feeds arbitrary bytes to the safetensors header checks as the first bytes of a file: the header
// length, then the JSON header (shapes, dtypes, offsets). Any input must end in a SafetensorsHeader
// or a core::Error: no crash, overflow (UBSan), hang or unbounded memory. An accepted header must
// describe tensors whose byte ranges lie in the file and do not overlap, which is checked here.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const uint64_t file_size = size;  // the input is the whole file
  try {
    const uint64_t len = tessera::io::safetensors_header_length(bytes.substr(0, 8), file_size, "fuzz.safetensors");
    const auto header = tessera::io::parse_safetensors_header(bytes.substr(8, len), file_size, "fuzz.safetensors");
    const uint64_t data_size = file_size - header.data_start;
    for (const auto& [name, t] : header.tensors) {
      uint64_t numel = 1;
      for (int64_t d : t.shape) {
        if (d < 0) std::abort();  // a negative dimension was accepted
        numel *= static_cast<uint64_t>(d);
      }
      if (t.end < t.begin || t.end > data_size) std::abort();  // a range outside the file was accepted
      if (t.end - t.begin != numel * tessera::core::dtype_size(t.dtype)) std::abort();
    }
  } catch (const tessera::core::Error&) {
  }
  return 0;
}

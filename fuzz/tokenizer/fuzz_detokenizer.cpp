// Fuzzes the incremental detokenizer with arbitrary id sequences (including out-of-range ids) and
// stop strings: unknown ids must throw core::Error, everything else must stream exactly what the
// one-shot decode produces (up to the stop string).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_common.h"
#include "text/tokenizer/detokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  if (size < 2) return 0;
  static const char* kNames[3] = {"deepseek-v3", "o200k", "kimi-style-tiktoken"};
  const auto& tok = fuzz::fixture_tokenizer(kNames[data[0] % 3]);
  text::DetokenizerOptions opt;
  opt.skip_special_tokens = data[1] & 1;
  // Input: header (2 bytes), stop-string length byte + bytes, then 4-byte ids.
  size_t pos = 2;
  if (pos < size) {
    const size_t wanted = data[pos++] % 8;  // (read before `size - pos`: argument order is unspecified)
    const size_t n = std::min<size_t>(wanted, size - pos);
    if (n > 0) opt.stop_strings.emplace_back(reinterpret_cast<const char*>(data + pos), n);
    pos += n;
  }
  std::vector<int32_t> ids;
  for (; pos + 4 <= size; pos += 4) {
    int32_t id;
    std::memcpy(&id, data + pos, 4);
    // Mostly in-range ids, some arbitrary ones.
    if (id >= 0 || (id & 0xF) != 0) id = static_cast<int32_t>(static_cast<uint32_t>(id) % (tok.vocab_size() + 8));
    ids.push_back(id);
  }
  text::IncrementalDetokenizer d(tok, opt);
  std::string streamed;
  std::vector<int32_t> accepted;
  for (int32_t id : ids) {
    try {
      streamed += d.add(id);
      accepted.push_back(id);
    } catch (const core::Error&) {
      if (tok.has_id(id)) std::abort();
    }
  }
  streamed += d.finish();
  if (streamed != d.output()) std::abort();
  const std::string full = tok.decode(accepted, opt.skip_special_tokens);
  if (!d.stopped()) {
    if (streamed != full) std::abort();
  } else if (full.compare(0, streamed.size(), streamed) != 0) {
    std::abort();  // output before a stop is a prefix of the full text
  }
  return 0;
}

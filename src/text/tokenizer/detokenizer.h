// Incremental detokenizer: one per request, fed the generated token ids one at a time. It emits
// only complete UTF-8 (a code point split across tokens is held until its last byte arrives),
// never U+FFFD mid-stream for bytes that may still become valid, and finds stop strings across
// token boundaries: text that could be the start of a stop string is held back until it is known
// not to be one. On a stop, the output ends right before the stop string (or right after it with
// `include_stop_string`) and later tokens are ignored.
//
// The concatenation of everything add() and finish() return equals
// Tokenizer::decode(ids, skip_special) (truncated at the stop string when one matched).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace tessera::text {

struct DetokenizerOptions {
  bool skip_special_tokens = true;
  std::vector<std::string> stop_strings;  // empty strings are ignored
  bool include_stop_string = false;
};

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive the detokenizer.
  IncrementalDetokenizer(const Tokenizer& tokenizer, DetokenizerOptions options);

  // Feeds one id and returns the text that became final (possibly empty). Throws core::Error for an
  // id not in the vocabulary (the detokenizer state is unchanged). After a stop, returns "".
  std::string add(int32_t id);
  // End of stream: returns the remaining text (a truncated final code point becomes U+FFFD).
  std::string finish();

  bool stopped() const { return stop_index_.has_value(); }
  // Index into options.stop_strings of the stop string that matched.
  std::optional<size_t> stop_index() const { return stop_index_; }
  // The stop string that matched ("" before a stop).
  std::string stop_string() const { return stop_index_ ? opt_.stop_strings[*stop_index_] : std::string(); }
  // All text returned so far.
  const std::string& output() const { return output_; }
  size_t num_tokens() const { return num_tokens_; }

 private:
  // Appends newly decoded text to held_, checks stops, and returns what can be released.
  std::string release(std::string decoded, bool final);

  const Tokenizer& tok_;
  DetokenizerOptions opt_;
  size_t max_stop_len_ = 0;
  std::string pending_;  // bytes of an incomplete trailing UTF-8 sequence
  std::string held_;     // decoded text not yet returned (may begin a stop string)
  std::string output_;
  std::optional<size_t> stop_index_;
  bool finished_ = false;
  size_t num_tokens_ = 0;
};

}  // namespace tessera::text

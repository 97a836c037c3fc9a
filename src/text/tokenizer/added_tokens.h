// Finds added/special token strings inside text (HF AddedVocabulary and tiktoken's special-token
// split): leftmost match, longest on ties, with HF's lstrip / rstrip / single_word options.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;       // also swallow whitespace before the match
  bool rstrip = false;       // also swallow whitespace after the match
  bool single_word = false;  // only match when not inside a word
  bool normalized = false;   // HF: matched after normalization instead of on the raw text
};

struct Segment {
  std::string_view text;  // the text covered (for a token: the matched text incl. stripped space)
  int32_t id;             // token id, or -1 for ordinary text
};

class AddedTokenMatcher {
 public:
  void add(const AddedToken& token);
  bool empty() const { return tokens_.empty(); }
  // Splits `text` into ordinary-text and token segments (no empty text segments). Tokens with
  // `special` set are ignored when `skip_special` is true.
  void split(std::string_view text, bool skip_special, std::vector<Segment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int>> children;
    int token = -1;  // index into tokens_
  };
  int child(int node, unsigned char c) const;
  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_{Node{}};
  bool first_byte_[256] = {};
};

}  // namespace tessera::text

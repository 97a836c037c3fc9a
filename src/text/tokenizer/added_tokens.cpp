#include "text/tokenizer/added_tokens.h"

#include "text/tokenizer/utf8.h"

namespace tessera::text {
namespace {

// Unicode White_Space, as Rust's char::is_whitespace (used by HF for lstrip/rstrip).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_word_byte(unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// Start of the code point that ends at `end` (exclusive).
size_t prev_char_start(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace

int AddedTokenMatcher::child(int node, unsigned char c) const {
  for (const auto& [k, v] : nodes_[node].children)
    if (k == c) return v;
  return -1;
}

void AddedTokenMatcher::add(const AddedToken& token) {
  if (token.content.empty()) return;
  int node = 0;
  for (unsigned char c : token.content) {
    int next = child(node, c);
    if (next < 0) {
      next = static_cast<int>(nodes_.size());
      nodes_[node].children.emplace_back(c, next);
      nodes_.emplace_back();
    }
    node = next;
  }
  if (nodes_[node].token >= 0) {
    tokens_[nodes_[node].token] = token;  // the later definition of the same string wins
  } else {
    nodes_[node].token = static_cast<int>(tokens_.size());
    tokens_.push_back(token);
  }
  first_byte_[static_cast<unsigned char>(token.content[0])] = true;
}

void AddedTokenMatcher::split(std::string_view text, bool skip_special, std::vector<Segment>& out) const {
  size_t emitted = 0;  // text before this offset has been emitted
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    // Longest token starting at pos.
    int best = -1;
    size_t best_len = 0;
    int node = 0;
    for (size_t k = pos; k < text.size(); ++k) {
      node = child(node, static_cast<unsigned char>(text[k]));
      if (node < 0) break;
      const int t = nodes_[node].token;
      if (t >= 0 && !(skip_special && tokens_[t].special)) {
        best = t;
        best_len = k + 1 - pos;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[best];
    size_t start = pos, stop = pos + best_len;
    if (tok.single_word) {
      const bool left_ok = start == 0 || !is_word_byte(static_cast<unsigned char>(text[start - 1]));
      const bool right_ok = stop == text.size() || !is_word_byte(static_cast<unsigned char>(text[stop]));
      if (!left_ok || !right_ok) {
        ++pos;
        continue;
      }
    }
    if (tok.lstrip) {
      size_t s = start;
      while (s > emitted) {
        const size_t p = prev_char_start(text, s);
        size_t q = p;
        if (!is_white_space(next_code_point(text, q))) break;
        s = p;
      }
      start = s;
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        size_t q = stop;
        if (!is_white_space(next_code_point(text, q))) break;
        stop = q;
      }
    }
    if (start > emitted) out.push_back({text.substr(emitted, start - emitted), -1});
    out.push_back({text.substr(start, stop - start), tok.id});
    emitted = pos = stop;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
}

}  // namespace tessera::text

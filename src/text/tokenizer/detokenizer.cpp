#include "text/tokenizer/detokenizer.h"

#include <algorithm>

#include "text/tokenizer/utf8.h"

namespace tessera::text {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, DetokenizerOptions options)
    : tok_(tokenizer), opt_(std::move(options)) {
  std::erase_if(opt_.stop_strings, [](const std::string& s) { return s.empty(); });
  for (const auto& s : opt_.stop_strings) max_stop_len_ = std::max(max_stop_len_, s.size());
}

std::string IncrementalDetokenizer::add(int32_t id) {
  const std::string_view bytes = tok_.token_bytes(id);  // throws for unknown ids
  if (stopped() || finished_) return {};
  ++num_tokens_;
  if (opt_.skip_special_tokens && tok_.is_special(id)) return {};
  pending_.append(bytes);
  // Decode every sequence that is complete or definitely invalid; keep a valid-so-far tail.
  std::string decoded;
  size_t i = 0;
  while (i < pending_.size()) {
    const Utf8Step st = utf8_step(std::string_view(pending_).substr(i));
    if (st.status == Utf8Status::kIncomplete) break;
    if (st.status == Utf8Status::kValid) {
      decoded.append(pending_, i, st.length);
    } else {
      decoded.append("\xEF\xBF\xBD");
    }
    i += st.length;
  }
  pending_.erase(0, i);
  return release(std::move(decoded), /*final=*/false);
}

std::string IncrementalDetokenizer::finish() {
  if (stopped() || finished_) return {};
  finished_ = true;
  std::string decoded = utf8_lossy(pending_);
  pending_.clear();
  return release(std::move(decoded), /*final=*/true);
}

std::string IncrementalDetokenizer::release(std::string decoded, bool final) {
  const size_t old_held = held_.size();
  held_ += decoded;
  std::string out;
  if (!opt_.stop_strings.empty()) {
    // A stop string wholly inside the old held text would have been found earlier, so only
    // occurrences ending in the new text matter; search from where such an occurrence can start.
    const size_t from = old_held >= max_stop_len_ ? old_held - max_stop_len_ + 1 : 0;
    size_t best_pos = std::string::npos, best_len = 0;
    std::optional<size_t> best_index;
    for (size_t k = 0; k < opt_.stop_strings.size(); ++k) {
      const std::string& s = opt_.stop_strings[k];
      const size_t p = held_.find(s, from);
      // Earliest start wins; on a tie, the longer stop string.
      if (p != std::string::npos && (p < best_pos || (p == best_pos && s.size() > best_len))) {
        best_pos = p;
        best_len = s.size();
        best_index = k;
      }
    }
    if (best_index) {
      stop_index_ = best_index;
      out = held_.substr(0, best_pos + (opt_.include_stop_string ? best_len : 0));
      held_.clear();
      pending_.clear();
      output_ += out;
      return out;
    }
    if (!final) {
      // Hold back the longest suffix that is a proper prefix of some stop string. Stop strings
      // are valid UTF-8, so such a suffix starts on a code point boundary.
      size_t keep = 0;
      const size_t max_k = std::min(held_.size(), max_stop_len_ - 1);
      for (size_t k = max_k; k > 0 && keep == 0; --k) {
        const std::string_view suffix = std::string_view(held_).substr(held_.size() - k);
        for (const auto& s : opt_.stop_strings) {
          if (s.size() > k && std::string_view(s).substr(0, k) == suffix) {
            keep = k;
            break;
          }
        }
      }
      out = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      output_ += out;
      return out;
    }
  }
  out = std::move(held_);
  held_.clear();
  output_ += out;
  return out;
}

}  // namespace tessera::text

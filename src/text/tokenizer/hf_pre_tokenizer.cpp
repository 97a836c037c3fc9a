#include "text/tokenizer/hf_pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace tessera::text {
namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// (begin, end, is_match) ranges covering a piece, as HF's Pattern::find_matches returns them.
struct Range {
  size_t begin, end;
  bool match;
};

// Applies HF's NormalizedString::split behaviour logic to the ranges and appends the pieces.
void apply_behavior(std::string_view piece, std::vector<Range>& ranges, Behavior behavior,
                    std::vector<std::string_view>& out) {
  std::vector<std::pair<Range, bool>> kept;  // (range, remove)
  switch (behavior) {
    case Behavior::kIsolated:
      for (auto& r : ranges) kept.push_back({r, false});
      break;
    case Behavior::kRemoved:
      for (auto& r : ranges) kept.push_back({r, r.match});
      break;
    case Behavior::kContiguous: {
      bool prev = false;
      for (auto& r : ranges) {
        if (r.match == prev && !kept.empty()) {
          kept.back().first.end = r.end;
        } else {
          kept.push_back({r, false});
        }
        prev = r.match;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool prev = false;
      for (auto& r : ranges) {
        if (r.match && !prev && !kept.empty()) {
          kept.back().first.end = r.end;
        } else {
          kept.push_back({r, false});
        }
        prev = r.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev = false;
      for (size_t k = ranges.size(); k-- > 0;) {
        const Range& r = ranges[k];
        if (r.match && !prev && !kept.empty()) {
          kept.back().first.begin = r.begin;
        } else {
          kept.push_back({r, false});
        }
        prev = r.match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (auto& [r, remove] : kept) {
    if (!remove && r.end > r.begin) out.push_back(piece.substr(r.begin, r.end - r.begin));
  }
}

class SplitPre : public PreTokenizer {
 public:
  SplitPre(std::unique_ptr<Regex> re, std::string literal, Behavior b, bool invert)
      : re_(std::move(re)), literal_(std::move(literal)), behavior_(b), invert_(invert) {}

  void split(std::string_view piece, Arena&, std::vector<std::string_view>& out) const override {
    thread_local std::vector<Range> ranges;
    ranges.clear();
    size_t prev = 0;
    auto on_match = [&](size_t b, size_t e) {
      if (b > prev) ranges.push_back({prev, b, false});
      ranges.push_back({b, e, true});
      prev = e;
    };
    if (re_) {
      re_->for_each_match(piece, on_match);
    } else if (!literal_.empty()) {
      for (size_t p = piece.find(literal_); p != std::string_view::npos; p = piece.find(literal_, p)) {
        on_match(p, p + literal_.size());
        p += literal_.size();
      }
    }
    if (prev < piece.size()) ranges.push_back({prev, piece.size(), false});
    if (invert_)
      for (auto& r : ranges) r.match = !r.match;
    apply_behavior(piece, ranges, behavior_, out);
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's pattern, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex, const std::string& where) : add_prefix_space_(add_prefix_space) {
    if (use_regex) re_ = std::make_unique<Regex>(kGpt2Pattern, where);
  }
  void split(std::string_view piece, Arena& arena, std::vector<std::string_view>& out) const override {
    if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) {
      std::string& prefixed = arena.emplace_back();
      prefixed.reserve(piece.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(piece);
      piece = prefixed;
    }
    if (!re_) {
      if (!piece.empty()) out.push_back(piece);
      return;
    }
    size_t prev = 0;
    re_->for_each_match(piece, [&](size_t b, size_t e) {
      if (b > prev) out.push_back(piece.substr(prev, b - prev));
      out.push_back(piece.substr(b, e - b));
      prev = e;
    });
    if (prev < piece.size()) out.push_back(piece.substr(prev));
  }
  bool has_byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void split(std::string_view piece, Arena& arena, std::vector<std::string_view>& out) const override {
    std::vector<std::string_view> cur{piece}, next;
    for (const auto& step : steps_) {
      next.clear();
      for (auto p : cur) step->split(p, arena, next);
      cur.swap(next);
    }
    out.insert(out.end(), cur.begin(), cur.end());
  }
  bool has_byte_level() const override {
    for (const auto& s : steps_)
      if (s->has_byte_level()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

bool get_bool(const nlohmann::json& spec, const char* key, bool def, const std::string& where) {
  auto it = spec.find(key);
  if (it == spec.end() || it->is_null()) return def;
  if (!it->is_boolean()) core::fail("{}.{}: expected a boolean", where, key);
  return it->get<bool>();
}

Behavior parse_behavior(const nlohmann::json& spec, const std::string& where) {
  auto it = spec.find("behavior");
  if (it == spec.end() || !it->is_string()) core::fail("{}.behavior: missing or not a string", where);
  const std::string b = *it;
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  core::fail("{}.behavior: unknown split behaviour '{}'", where, b);
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    core::fail("{}: expected an object with a string 'type'", where);
  const std::string type = spec["type"];
  if (type == "Sequence") {
    auto it = spec.find("pretokenizers");
    if (it == spec.end() || !it->is_array()) core::fail("{}.pretokenizers: missing or not an array", where);
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < it->size(); ++i) {
      auto step = make_pre_tokenizer((*it)[i], where + ".pretokenizers[" + std::to_string(i) + "]");
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequencePre>(std::move(steps));
  }
  if (type == "Split") {
    auto pat = spec.find("pattern");
    if (pat == spec.end() || !pat->is_object()) core::fail("{}.pattern: missing or not an object", where);
    std::unique_ptr<Regex> re;
    std::string literal;
    if (pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      re = std::make_unique<Regex>((*pat)["Regex"].get<std::string>(), where + ".pattern.Regex");
    } else if (pat->contains("String") && (*pat)["String"].is_string()) {
      literal = (*pat)["String"].get<std::string>();
    } else {
      core::fail("{}.pattern: expected {{\"Regex\": ...}} or {{\"String\": ...}}", where);
    }
    return std::make_unique<SplitPre>(std::move(re), std::move(literal), parse_behavior(spec, where),
                                      get_bool(spec, "invert", false, where));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPre>(get_bool(spec, "add_prefix_space", true, where),
                                          get_bool(spec, "use_regex", true, where), where);
  }
  core::fail("{}: unsupported pre-tokenizer type '{}' (supported: Sequence, Split, ByteLevel)", where, type);
}

void pre_tokenize(const PreTokenizer* pre, std::string_view text, Arena& arena, std::vector<std::string_view>& out) {
  if (!pre) {
    if (!text.empty()) out.push_back(text);
    return;
  }
  pre->split(text, arena, out);
}

}  // namespace tessera::text

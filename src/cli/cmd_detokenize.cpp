// `tessera detokenize`: decodes token ids with a model's tokenizer and prints the text.
#include <climits>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "text/tokenizer/tokenizer.h"

namespace tessera::cli {
namespace {

struct DetokenizeOptions {
  std::string model, ids;
  bool skip_special = false;
};

// "1,2, 3" or "1 2 3" -> ids.
std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ',' || s[i] == ' ' || s[i] == '[' || s[i] == ']' || s[i] == '\n' || s[i] == '\t') {
      ++i;
      continue;
    }
    size_t end = i;
    if (s[end] == '-') ++end;
    while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
    if (end == i || (s[i] == '-' && end == i + 1) || end - i > 11)
      core::fail("--ids: '{}' is not a token id (expected comma-separated integers)", s.substr(i, end + 1 - i));
    const long long v = std::stoll(s.substr(i, end - i));
    if (v < INT32_MIN || v > INT32_MAX) core::fail("--ids: {} is out of range", v);
    ids.push_back(static_cast<int32_t>(v));
    i = end;
  }
  return ids;
}

CommandRegistration reg{{"detokenize", "decode token ids with a model's tokenizer and print the text",
                         [](CLI::App& sub) -> std::function<int()> {
                           auto o = std::make_shared<DetokenizeOptions>();
                           sub.add_option("--model", o->model, "directory with tokenizer.json or tiktoken.model")
                               ->required();
                           sub.add_option("--ids", o->ids, "token ids, comma-separated (e.g. 1,2,3)")->required();
                           sub.add_flag("--skip-special", o->skip_special, "leave out special tokens");
                           return [o] {
                             const auto tok = text::load_tokenizer(o->model);
                             const std::string text = tok->decode(parse_ids(o->ids), o->skip_special);
                             std::fwrite(text.data(), 1, text.size(), stdout);
                             std::fputc('\n', stdout);
                             return 0;
                           };
                         }}};

}  // namespace
}  // namespace tessera::cli

// `tessera detokenize`: decodes token ids with a model's tokenizer and prints the text.
#include <climits>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/model_options.h"
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
  for (const std::string& item : split_list_items(s, "--ids")) {
    size_t end = 0;
    if (item[0] == '-') ++end;
    while (end < item.size() && item[end] >= '0' && item[end] <= '9') ++end;
    if (end != item.size() || (item[0] == '-' && end == 1) || end > 11)
      core::fail("--ids: '{}' is not a token id (expected comma-separated integers)", item);
    const long long v = std::stoll(item);
    if (v < INT32_MIN || v > INT32_MAX) core::fail("--ids: {} is out of range", v);
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

CommandRegistration reg{
    {"detokenize", "decode token ids with a model's tokenizer and print the text",
     [](CLI::App& sub) -> std::function<int()> {
       auto o = std::make_shared<DetokenizeOptions>();
       sub.add_option("--model", o->model, "directory with tokenizer.json or tiktoken.model")->required();
       sub.add_option("--ids", o->ids, "token ids, comma-separated (e.g. 1,2,3)")->required();
       sub.add_flag("--skip-special", o->skip_special, "leave out special tokens");
       return [o] {
         const std::vector<int32_t> ids = parse_ids(o->ids);  // before the slow part
         const auto tok = text::load_tokenizer(o->model);
         const std::string text = tok->decode(ids, o->skip_special);
         std::fwrite(text.data(), 1, text.size(), stdout);
         std::fputc('\n', stdout);
         return 0;
       };
     }}};

}  // namespace
}  // namespace tessera::cli

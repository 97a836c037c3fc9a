// `tessera tokenize`: encodes text with a model's tokenizer and prints the ids.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "core/file.h"
#include "cli/command.h"
#include "core/error.h"
#include "text/tokenizer/tokenizer.h"

namespace tessera::cli {
namespace {

struct TokenizeOptions {
  std::string model, text, file, jsonl;
  bool json = false, no_special = false, add_special = false;
};

std::string read_all(const std::string& path) { return core::read_file(path); }

void print_ids(const std::vector<int32_t>& ids, bool json) {
  std::string out = json ? "[" : "";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += json ? ", " : " ";
    out += std::to_string(ids[i]);
  }
  if (json) out += "]";
  std::printf("%s\n", out.c_str());
}

int run(const TokenizeOptions& o) {
  const auto tok = text::load_tokenizer(o.model);
  text::EncodeOptions eo;
  eo.parse_special = !o.no_special;
  eo.add_special_tokens = o.add_special;
  if (!o.jsonl.empty()) {
    std::ifstream in(o.jsonl);
    if (!in) core::fail("{}: cannot open file", o.jsonl);
    std::string line;
    size_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.empty()) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        core::fail("{}: line {}: invalid JSON: {}", o.jsonl, line_no, e.what());
      }
      if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
        core::fail("{}: line {}: expected an object with a string 'text'", o.jsonl, line_no);
      const nlohmann::json out = {{"ids", tok->encode(j["text"].get<std::string>(), eo)}};
      std::printf("%s\n", out.dump().c_str());
    }
    return 0;
  }
  const std::string input = !o.file.empty() ? read_all(o.file) : o.text;
  print_ids(tok->encode(input, eo), o.json);
  return 0;
}

CommandRegistration reg{
    {"tokenize", "encode text with a model's tokenizer and print the token ids",
     [](CLI::App& sub) -> std::function<int()> {
       auto o = std::make_shared<TokenizeOptions>();
       sub.add_option("--model", o->model, "directory with tokenizer.json or tiktoken.model")->required();
       auto* text = sub.add_option("--text", o->text, "text to encode");
       auto* file = sub.add_option("--file", o->file, "file whose content to encode");
       auto* jsonl = sub.add_option("--jsonl", o->jsonl,
                                    "file of JSON lines with a 'text' field; prints one "
                                    "{\"ids\": [...]} per line");
       text->excludes(file)->excludes(jsonl);
       file->excludes(jsonl);
       sub.add_flag("--json", o->json, "print the ids as a JSON array");
       sub.add_flag("--no-special", o->no_special, "encode special-token strings in the text as plain text");
       sub.add_flag("--add-special", o->add_special, "add BOS/EOS as tokenizer_config.json asks (add_bos_token, ...)");
       return [o, text, file, jsonl] {
         // --text "" is a valid (empty) input, so check presence, not content.
         if (text->count() + file->count() + jsonl->count() == 0)
           core::fail("tokenize: give one of --text, --file or --jsonl");
         return run(*o);
       };
     }}};

}  // namespace
}  // namespace tessera::cli

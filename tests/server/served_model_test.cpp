// load_served_model + parse_chat_request on a Qwen-style model directory, whose
// tokenizer_config.json has "bos_token": null: the server starts, the template sees bos_token
// undefined (as transformers' special_tokens_map leaves a None token out), and EOS still stops.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "server/request_parse.h"
#include "server/served_model.h"
#include "support/test_support.h"

namespace tessera::server {
namespace {

using OJson = nlohmann::ordered_json;

TEST(ServedModel, NullBosTokenInTokenizerConfig) {
  const auto dir = test::make_temp_dir("served-null-bos");
  // The DeepSeek-V3 vocabulary for its known ids: "Hello world" = 19923 2058, <｜end▁of▁sentence｜> = 1.
  std::filesystem::copy_file(test::fixtures_dir() / "tokenizers" / "deepseek-v3" / "tokenizer.json",
                             dir / "tokenizer.json");
  // `is defined` tells an undefined bos_token from an empty string: "[bos]" must not appear.
  const OJson cfg = {{"bos_token", nullptr},
                     {"eos_token", "<｜end▁of▁sentence｜>"},
                     {"chat_template",
                      "{% if bos_token %}{{ bos_token }}{% endif %}{% if bos_token is defined %}[bos]{% endif %}"
                      "{% for m in messages %}{{ m['content'] }}{% endfor %}{{ eos_token }}"}};
  test::write_file(dir / "tokenizer_config.json", cfg.dump());
  ServedModelOptions o;
  o.model_dir = dir;
  o.vocab_size = 129280;
  o.max_model_len = 512;
  const ServedModel m = load_served_model(o);
  EXPECT_FALSE(m.bos_token.has_value());
  ASSERT_TRUE(m.eos_token.has_value());
  EXPECT_EQ(*m.eos_token, "<｜end▁of▁sentence｜>");
  EXPECT_EQ(m.eos_ids, (std::vector<int32_t>{1}));

  const OJson body = {{"messages", {{{"role", "user"}, {"content", "Hello world"}}}}};
  const GenerationJob job = parse_chat_request(body, m, ParseLimits{});
  ASSERT_EQ(job.prompts.size(), 1u);
  EXPECT_EQ(job.prompts[0], (std::vector<int32_t>{19923, 2058, 1}));
  EXPECT_EQ(job.params.eos_token_ids, (std::vector<int32_t>{1}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::server

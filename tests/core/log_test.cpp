// --log-format json: every record is one line that a JSON parser accepts, whatever the message
// holds (quotes, newlines, control bytes, broken UTF-8), with the fields log collectors key on.
#include "core/log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log_json.h"

namespace tessera {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(LogJson, EveryRecordIsOneParsableLine) {
  std::ostringstream sink_text;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(sink_text);
  spdlog::logger logger("json-test", sink);
  logger.set_formatter(core::make_json_log_formatter());
  logger.set_level(spdlog::level::trace);

  const std::vector<std::string> messages = {
      "plain",
      "quotes \" and \\ backslash",
      "two\nlines\r\tand a tab",
      std::string("control \x01\x1f\x7f bytes"),
      "UTF-8 é — 😀 kept",
      std::string("broken UTF-8 \xff\xc3( \xed\xa0\x80 \xf0\x9f\x98 end"),
      "{} braces {}",
  };
  for (const auto& m : messages) logger.info("{}", m);
  logger.warn("request '{}' took {:.1f} s", "id-1", 2.5);
  logger.error("x");

  const auto lines = lines_of(sink_text.str());
  ASSERT_EQ(lines.size(), messages.size() + 2) << sink_text.str();
  const std::regex time_re(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
  std::vector<nlohmann::json> parsed;
  for (const auto& line : lines) {
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    ASSERT_TRUE(j.is_object()) << line;
    EXPECT_TRUE(std::regex_match(j["time"].get<std::string>(), time_re)) << line;
    EXPECT_EQ(j["logger"], "json-test");
    EXPECT_TRUE(j["thread"].is_number_unsigned()) << line;
    parsed.push_back(j);
  }
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(parsed[i]["message"], messages[i]);
    EXPECT_EQ(parsed[i]["level"], "info");
  }
  EXPECT_EQ(parsed[5]["message"],
            "broken UTF-8 \xEF\xBF\xBD\xEF\xBF\xBD( \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD "
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD end");
  EXPECT_EQ(parsed[6]["message"], "{} braces {}");
  EXPECT_EQ(parsed[7]["message"], "request 'id-1' took 2.5 s");
  EXPECT_EQ(parsed[7]["level"], "warning");
  EXPECT_EQ(parsed[8]["level"], "error");
}

TEST(LogJson, EscapesControlCharactersAsJsonDoes) {
  std::string out;
  core::append_json_string(out, std::string("a\"b\\c\n\x01\x7f"));
  EXPECT_EQ(out, R"("a\"b\\c\n\u0001\u007f")");
  EXPECT_EQ(nlohmann::json::parse(out), std::string("a\"b\\c\n\x01\x7f"));
}

TEST(LogJson, FormatNamesAreCheckedWithTheChoices) {
  EXPECT_EQ(core::parse_log_format("text"), core::LogFormat::kText);
  EXPECT_EQ(core::parse_log_format("json"), core::LogFormat::kJson);
  try {
    (void)core::parse_log_format("yaml");
    ADD_FAILURE() << "yaml accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("text or json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera

#include <gtest/gtest.h>

#include "core/error.h"
#include "server/serve_config.h"

namespace tessera::server {
namespace {

TEST(ServeConfig, ParsesFlatKeys) {
  const auto m = parse_serve_config(
      "# tessera serve\n[serve]\nport = 8_080\nhost = \"0.0.0.0\"  # all\napi_key = 'k#1'\nno-prefix-caching = true\n"
      "max-model-len = 2048\n",
      "t.toml");
  EXPECT_EQ(m.at("port"), "8080");
  EXPECT_EQ(m.at("host"), "0.0.0.0");
  EXPECT_EQ(m.at("api-key"), "k#1");
  EXPECT_EQ(m.at("no-prefix-caching"), "true");
  EXPECT_EQ(m.at("max-model-len"), "2048");
}

TEST(ServeConfig, RejectsBadLines) {
  EXPECT_THROW(parse_serve_config("port\n", "t"), core::Error);
  EXPECT_THROW(parse_serve_config("host = 0.0.0.0\n", "t"), core::Error);  // unquoted string
  EXPECT_THROW(parse_serve_config("a = \"x\n", "t"), core::Error);
  EXPECT_THROW(parse_serve_config("[other]\n", "t"), core::Error);
  EXPECT_THROW(parse_serve_config("a = 1\na = 2\n", "t"), core::Error);
}

}  // namespace
}  // namespace tessera::server

#include "server/serve_config.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace tessera::server {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// Cuts a trailing # comment outside quotes.
std::string strip_comment(const std::string& s) {
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote) {
      if (c == '\\' && quote == '"')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#') {
      return s.substr(0, i);
    }
  }
  return s;
}

std::string parse_value(const std::string& v, const std::string& where, size_t line) {
  if (v.empty()) core::fail("{}:{}: missing value", where, line);
  if (v.front() == '"' || v.front() == '\'') {
    const char q = v.front();
    if (v.size() < 2 || v.back() != q) core::fail("{}:{}: unterminated string", where, line);
    std::string out;
    for (size_t i = 1; i + 1 < v.size(); ++i) {
      if (q == '"' && v[i] == '\\' && i + 2 < v.size()) {
        const char e = v[++i];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
      } else {
        out += v[i];
      }
    }
    return out;
  }
  if (v == "true" || v == "false") return v;
  std::string out;
  for (char c : v)
    if (c != '_') out += c;
  char* end = nullptr;
  (void)std::strtod(out.c_str(), &end);
  if (out.empty() || end != out.c_str() + out.size())
    core::fail("{}:{}: value '{}' is not a string, number or boolean (quote strings)", where, line, v);
  return out;
}

}  // namespace

std::map<std::string, std::string> parse_serve_config(const std::string& text, const std::string& where) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string raw;
  size_t line = 0;
  while (std::getline(in, raw)) {
    ++line;
    const std::string s = trim(strip_comment(raw));
    if (s.empty()) continue;
    if (s.front() == '[') {
      if (s != "[serve]") core::fail("{}:{}: only a [serve] table is supported, got {}", where, line, s);
      continue;
    }
    const size_t eq = s.find('=');
    if (eq == std::string::npos) core::fail("{}:{}: expected key = value", where, line);
    std::string key = trim(s.substr(0, eq));
    if (key.empty() || key.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos)
      core::fail("{}:{}: invalid key '{}'", where, line, key);
    std::replace(key.begin(), key.end(), '_', '-');
    if (out.count(key)) core::fail("{}:{}: duplicate key '{}'", where, line, key);
    out[key] = parse_value(trim(s.substr(eq + 1)), where, line);
  }
  return out;
}

}  // namespace tessera::server

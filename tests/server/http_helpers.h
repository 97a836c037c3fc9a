// Small HTTP helpers for the server tests (loopback only).
#pragma once

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <string>

namespace tessera::test {

using Json = nlohmann::json;

inline httplib::Result post_json(httplib::Client& c, const std::string& path, const std::string& body,
                                 const std::string& key = "") {
  httplib::Headers h;
  if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
  return c.Post(path.c_str(), h, body, "application/json");
}

// Parses the SSE body: the JSON of every `data:` event before [DONE]; `done` tells whether
// [DONE] came last.
inline std::vector<Json> sse_events(const std::string& body, bool* done) {
  std::vector<Json> out;
  *done = false;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind("data: ", 0) != 0) continue;
    const std::string data = ev.substr(6);
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    out.push_back(Json::parse(data));
  }
  return out;
}

// Reads one numeric sample of /metrics (first line starting with `name ` or `name{`).
inline double metric(httplib::Client& c, const std::string& name) {
  auto r = c.Get("/metrics");
  if (!r) return -1;
  size_t pos = 0;
  const std::string& b = r->body;
  while ((pos = b.find(name, pos)) != std::string::npos) {
    if ((pos == 0 || b[pos - 1] == '\n') && (b[pos + name.size()] == ' ')) {
      return std::stod(b.substr(pos + name.size() + 1));
    }
    pos += name.size();
  }
  return -1;
}

}  // namespace tessera::test

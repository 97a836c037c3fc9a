// A Jinja template with the semantics of Hugging Face transformers' chat-template environment:
// jinja2's ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
// extensions=[loopcontrols]) with HF's tojson, raise_exception and strftime_now.
//
// Parsing and rendering throw TemplateError (never crash, never hang): syntax errors, runtime
// errors such as TypeError or use of an undefined value, raise_exception(), and exceeded limits.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/template/error.h"
#include "text/template/limits.h"

namespace tessera::text {

using TemplateLimits = tpl::Limits;

namespace tpl {
struct TemplateAst;
}

class Template {
 public:
  // Parses `source`; throws TemplateError with the line of a syntax error.
  static Template parse(std::string_view source, const TemplateLimits& limits = {});

  // Renders with `vars` (a JSON object) as the template's variables. Thread-safe: a parsed
  // template can be rendered concurrently.
  std::string render(const nlohmann::ordered_json& vars) const;

  // The same with variables given by reference: request JSON is never copied, because copying
  // nlohmann::json recurses and hostile nesting depth would overflow the stack before the
  // engine's own depth limit could reject it.
  using VarRefs = std::vector<std::pair<std::string, const nlohmann::ordered_json*>>;
  std::string render(const VarRefs& vars) const;

  const TemplateLimits& limits() const { return limits_; }

 private:
  Template(std::shared_ptr<const tpl::TemplateAst> ast, const TemplateLimits& limits)
      : ast_(std::move(ast)), limits_(limits) {}
  std::shared_ptr<const tpl::TemplateAst> ast_;
  TemplateLimits limits_;
};

}  // namespace tessera::text

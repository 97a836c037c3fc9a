#include "text/template/template.h"

#include <new>

#include "text/template/interpreter.h"
#include "text/template/json_value.h"
#include "text/template/parser.h"

namespace tessera::text {

Template Template::parse(std::string_view source, const TemplateLimits& limits) {
  if (source.size() > limits.max_string_bytes) throw TemplateError("template source is too large");
  try {
    // The parser's recursion is shallower per level than the evaluator's, so it gets more room.
    auto ast = std::make_shared<tpl::TemplateAst>(tpl::parse_template(source, tpl::LexOptions{}, limits.max_depth * 3));
    return Template(std::move(ast), limits);
  } catch (const TemplateError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw TemplateError("out of memory while parsing the template");
  }
}

std::string Template::render(const nlohmann::ordered_json& vars) const {
  if (!vars.is_object()) throw TemplateError("template variables must be a JSON object");
  VarRefs refs;
  for (const auto& [k, v] : vars.items()) refs.emplace_back(k, &v);
  return render(refs);
}

std::string Template::render(const VarRefs& vars) const {
  using namespace tpl;
  Heap heap(limits_);
  try {
    Scope* globals = heap.make<Scope>();
    for (const char* fn : {"range", "namespace", "dict", "raise_exception", "strftime_now"}) {
      auto* c = heap.make<CallableObj>();
      c->type = CallableObj::Type::Builtin;
      c->name = fn;
      globals->set(fn, Value::object(Kind::Callable, c));
    }
    Scope* scope = heap.make<Scope>();
    scope->parent = globals;
    for (const auto& [k, v] : vars) scope->set(k, from_json(*v, heap));
    Interpreter in(heap, limits_);
    return in.render(ast_->body, scope);
  } catch (const TemplateError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw TemplateError("out of memory while rendering the template");
  } catch (const std::exception& e) {
    // Any other library exception is still the template's fault as far as the caller is concerned.
    throw TemplateError(std::string("template render failed: ") + e.what());
  }
}

}  // namespace tessera::text

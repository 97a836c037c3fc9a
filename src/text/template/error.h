// The one error type of the template engine: syntax errors, runtime errors (TypeError, undefined
// access), raise_exception() from the template, and exceeded limits. The server answers 400.
#pragma once

#include <string>

#include "core/error.h"

namespace tessera::text {

class TemplateError : public core::Error {
 public:
  using core::Error::Error;
};

}  // namespace tessera::text

// The loading progress line on stderr that every command loading a model shows: GB done / total,
// GB/s and time left, rewritten in place on a terminal, a line every few seconds otherwise (logs),
// and a summary line when done. With --log-format json the same as log records (every 5 s).
#pragma once

#include "model/model.h"

namespace tessera::cli {

model::LoadProgressFn stderr_load_progress();

}  // namespace tessera::cli

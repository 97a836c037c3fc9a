// Human-readable formatting shared by the commands that report sizes.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::core {

// 1536 -> "1.50 KiB"; binary units up to TiB.
std::string human_bytes(uint64_t bytes);
// A size as a table row names it: "4 KiB", "1 MiB" when whole, else human_bytes.
std::string size_name(uint64_t bytes);

}  // namespace tessera::core

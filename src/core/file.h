// Reading a whole file, with an error that names it: used by every loader and command.
#pragma once

#include <filesystem>
#include <string>

namespace tessera::core {

// The file's bytes; throws core::Error "<path>: file not found / cannot open file / read error".
std::string read_file(const std::filesystem::path& path);

}  // namespace tessera::core

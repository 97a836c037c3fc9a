// Reading a whole file, with an error that names it: used by every loader and command.
#pragma once

#include <filesystem>
#include <string>

namespace tessera::core {

// The file's bytes; throws core::Error "<path>: file not found / not a regular file / cannot open
// file / read error". A FIFO, device or directory is refused before it is opened: reading one could
// block forever or never end.
std::string read_file(const std::filesystem::path& path);

// Opens `path` for reading (O_RDONLY | O_CLOEXEC) and returns the descriptor, only when it is a
// regular file (symbolic links followed): a FIFO, socket, device or directory in place of a
// checkpoint file is refused naming it and what it is, without blocking on it. Throws core::Error.
int open_regular_file(const std::filesystem::path& path);

// "a FIFO", "a directory", "a character device", ... for the st_mode of a file that is not regular.
std::string file_kind(unsigned mode);

}  // namespace tessera::core

#include "core/file.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tessera::core {

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) fail("{}: file not found", path.string());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open file", path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("{}: read error", path.string());
  return ss.str();
}

}  // namespace tessera::core

#include "core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tessera::core {

std::string file_kind(unsigned mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISREG(mode)) return "a regular file";
  return "not a regular file";
}

int open_regular_file(const std::filesystem::path& path) {
  const std::string file = path.string();
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) fail("{}: cannot open: {}", file, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{}: is {}, not a regular file: refusing to read it", file, file_kind(st.st_mode));
  // O_NONBLOCK: should the path be swapped for a FIFO after the check, opening it cannot block.
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("{}: cannot open: {}", file, std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = file_kind(st.st_mode);
    ::close(fd);
    fail("{}: is {}, not a regular file: refusing to read it", file, kind);
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) fail("{}: file not found", path.string());
  const int fd = open_regular_file(path);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      fail("{}: read error: {}", path.string(), std::strerror(err));
    }
    if (r == 0) break;
    out.append(buf, static_cast<size_t>(r));
  }
  ::close(fd);
  return out;
}

}  // namespace tessera::core

#include "io/staged_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/file.h"
#include "core/finite_check.h"

namespace tessera::io {

using core::fail;

namespace {

// An empty string, or why the read failed.
std::string read_all(int fd, uint8_t* dst, uint64_t n, uint64_t offset) {
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t r = ::pread(fd, dst, want, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::strerror(errno);
    if (r == 0) return "unexpected end of file (was it truncated after it was opened?)";
    dst += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return {};
}

int open_or_fail(const std::filesystem::path& file) {
  const int fd = core::open_regular_file(file);      // never blocks on a FIFO put in a shard's place
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);  // a hint for readahead; failure is harmless
  return fd;
}

// Checks `n` bytes just read for range `r` at `offset` in it: the element index in the message
// counts from the tensor's first element. Empty when all are finite.
std::string check_chunk(const FileRange& r, const uint8_t* data, uint64_t offset, uint64_t n) {
  const uint64_t elem = core::dtype_size(r.dtype);
  const int64_t k = core::first_non_finite(r.dtype, data, n / elem);
  if (k < 0) return {};
  const uint64_t index = (r.tensor_offset + offset) / elem + static_cast<uint64_t>(k);
  return fmt::format(
      "{}: tensor '{}': element {} is {}: a {} weight or scale must be a finite number (the file is "
      "corrupt, or was converted wrongly)",
      r.file.string(), r.tensor, index, core::describe_non_finite(r.dtype, data + static_cast<uint64_t>(k) * elem),
      core::dtype_name(r.dtype));
}

}  // namespace

StagedReader::StagedReader(std::vector<FileRange> ranges, const Alloc& alloc, size_t arena_bytes, int threads,
                           size_t chunk_bytes)
    : ranges_(std::move(ranges)),
      slots_(ranges_.size()),
      // A multiple of 8, so that no element of a checked range straddles two chunks.
      chunk_(std::max<size_t>(chunk_bytes, 4096) & ~size_t{7}) {
  uint64_t largest = 0;
  for (const auto& r : ranges_) {
    largest = std::max(largest, r.bytes);
    if (!fds_.count(r.file)) fds_[r.file] = open_or_fail(r.file);
  }
  if (ranges_.empty()) return;
  capacity_ = static_cast<size_t>(std::max<uint64_t>(arena_bytes, largest));
  arena_ = alloc(capacity_);
  TESSERA_CHECK(arena_ != nullptr, "loader: could not allocate a {} byte staging buffer", capacity_);
  for (int t = 0; t < std::max(threads, 1); ++t) threads_.emplace_back([this] { read_loop(); });
}

StagedReader::~StagedReader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  room_.notify_all();
  for (auto& t : threads_) t.join();
  for (const auto& [_, fd] : fds_) ::close(fd);
}

bool StagedReader::place(size_t i) {
  const size_t bytes = static_cast<size_t>(ranges_[i].bytes);
  size_t start = 0;
  if (!held_.empty()) {
    const size_t front = held_.front().first;
    // The held ranges occupy [front, cursor_) unless the newest one wrapped round to the start.
    const bool wrapped = held_.back().first < front;
    if (!wrapped && cursor_ + bytes <= capacity_)
      start = cursor_;
    else if (!wrapped && bytes <= front)
      start = 0;
    else if (wrapped && cursor_ + bytes <= front)
      start = cursor_;
    else
      return false;
  }
  slots_[i].start = start;
  slots_[i].placed = true;
  if (bytes > 0) {
    held_.emplace_back(start, start + bytes);
    cursor_ = start + bytes;
  }
  return true;
}

void StagedReader::read_loop() {
  for (;;) {
    size_t i = 0;
    uint64_t offset = 0, n = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        if (stop_ || !error_.empty() || next_ >= ranges_.size()) return;
        Slot& s = slots_[next_];
        if (!s.placed && !place(next_)) {
          room_.wait(lock);
          continue;
        }
        if (ranges_[next_].bytes == 0) {  // nothing to read: ready as soon as it has a place
          ++next_;
          ready_.notify_all();
          continue;
        }
        break;
      }
      i = next_;
      Slot& s = slots_[i];
      offset = s.queued;
      n = std::min<uint64_t>(chunk_, ranges_[i].bytes - offset);
      s.queued += n;
      if (s.queued == ranges_[i].bytes) ++next_;
    }
    const FileRange& r = ranges_[i];
    uint8_t* dst = static_cast<uint8_t*>(arena_.get()) + slots_[i].start + offset;
    std::string why = read_all(fds_.at(r.file), dst, n, r.offset + offset);
    std::string bad;
    if (why.empty() && r.check_finite) bad = check_chunk(r, dst, offset, n);
    std::lock_guard<std::mutex> lock(mu_);
    if (!why.empty() && error_.empty())
      error_ = fmt::format("{}: reading {} bytes at offset {}: {}", r.file.string(), n, r.offset + offset, why);
    if (!bad.empty()) {
      if (error_.empty()) error_ = std::move(bad);
      why = "bad value";  // wakes the consumer and the other readers, as a read error does
    }
    slots_[i].done += n;
    if (slots_[i].done == r.bytes || !why.empty()) ready_.notify_all();
    if (!why.empty()) room_.notify_all();
  }
}

const void* StagedReader::take(size_t i) {
  std::unique_lock<std::mutex> lock(mu_);
  TESSERA_CHECK(i < ranges_.size() && i == taken_, "StagedReader: range {} taken out of order (next is {})", i, taken_);
  ++taken_;
  ready_.wait(lock, [&] { return !error_.empty() || (slots_[i].placed && slots_[i].done == ranges_[i].bytes); });
  if (!error_.empty()) fail("{}", error_);
  return static_cast<uint8_t*>(arena_.get()) + slots_[i].start;
}

void StagedReader::release(size_t i) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    TESSERA_CHECK(i < taken_ && !slots_[i].released, "StagedReader: range {} released but not held", i);
    slots_[i].released = true;
    // The ring frees from its oldest range: space opens once every range before it is released too.
    for (; released_ < taken_ && slots_[released_].released; ++released_)
      if (ranges_[released_].bytes > 0) held_.pop_front();
  }
  room_.notify_all();
}

uint64_t read_files_in_parallel(const std::vector<std::filesystem::path>& files, int threads, size_t chunk_bytes) {
  struct Piece {
    int fd;
    uint64_t offset, bytes;
  };
  std::vector<int> fds;
  std::vector<Piece> pieces;
  for (const auto& f : files) {
    const int fd = open_or_fail(f);
    fds.push_back(fd);
    const off_t size = ::lseek(fd, 0, SEEK_END);
    for (uint64_t at = 0; at < static_cast<uint64_t>(size); at += chunk_bytes)
      pieces.push_back({fd, at, std::min<uint64_t>(chunk_bytes, static_cast<uint64_t>(size) - at)});
  }
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> total{0};
  std::mutex mu;
  std::string error;
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(threads, 1); ++t)
    pool.emplace_back([&] {
      std::vector<uint8_t> buf(chunk_bytes);
      for (size_t k; (k = next++) < pieces.size();) {
        const std::string why = read_all(pieces[k].fd, buf.data(), pieces[k].bytes, pieces[k].offset);
        if (!why.empty()) {
          std::lock_guard<std::mutex> lock(mu);
          error = why;
          return;
        }
        total += pieces[k].bytes;
      }
    });
  for (auto& t : pool) t.join();
  for (int fd : fds) ::close(fd);
  if (!error.empty()) fail("parallel read: {}", error);
  return total;
}

bool drop_from_page_cache(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // DONTNEED leaves dirty pages where they are (here 6144 of a fresh 64 MB file's 16384 pages
  // stayed): a checkpoint written moments before `bench load --cold` was timed partly from memory,
  // the likely reason a cold load of 35 GB ran at 347% of the plain read on an H100 machine
  // (docs/PERFORMANCE.md). Written back first, every page can go.
  const bool ok = ::fdatasync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok;
}

bool drop_whole_page_cache() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "1", 1) == 1;
  ::close(fd);
  return ok;
}

}  // namespace tessera::io

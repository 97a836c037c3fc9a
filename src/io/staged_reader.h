// Reads a list of byte ranges of files, in order and ahead of the one consumer, with a pool of
// threads issuing large pread()s into one host arena: how weights reach the GPU at storage speed
// (one thread faulting in mapped pages reaches ~1 GB/s; NVMe and the page cache need many reads in
// flight). The arena is used as a ring: range i gets a contiguous slot when the ranges before it
// that the consumer still holds leave room, so reading runs ahead of uploading by up to the arena's
// size, and the memory used is bounded whatever the checkpoint's size.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/checkpoint.h"

namespace tessera::io {

class StagedReader {
 public:
  // Host memory of at least `bytes` (pinned memory for a GPU's DMA copies; any memory works).
  using Alloc = std::function<std::shared_ptr<void>(size_t bytes)>;

  // Starts `threads` readers over `ranges`. The arena holds max(arena_bytes, the largest range).
  // Files are opened here; a missing file throws naming it.
  StagedReader(std::vector<FileRange> ranges, const Alloc& alloc, size_t arena_bytes, int threads,
               size_t chunk_bytes = size_t{16} << 20);
  ~StagedReader();
  StagedReader(const StagedReader&) = delete;
  StagedReader& operator=(const StagedReader&) = delete;

  size_t size() const { return ranges_.size(); }
  const FileRange& range(size_t i) const { return ranges_[i]; }
  // Waits until range `i` is read and returns its bytes; valid until release(i). Ranges are taken
  // in order (i = 0, 1, ...) and released in any order once taken. Throws core::Error naming the
  // file on a read error, and the file, tensor and element index when a range marked check_finite
  // holds a NaN or an infinity (each reader checks the chunk it has just read, so the check runs on
  // all the reader threads, on bytes still in cache, and costs no pass of its own).
  const void* take(size_t i);
  void release(size_t i);

 private:
  struct Slot {
    size_t start = 0;     // offset in the arena
    uint64_t queued = 0;  // bytes handed to readers
    uint64_t done = 0;    // bytes read
    bool placed = false;
    bool released = false;
  };
  void read_loop();
  bool place(size_t i);  // under mu_: finds room for range i in the ring

  std::vector<FileRange> ranges_;
  std::vector<Slot> slots_;
  std::map<std::filesystem::path, int> fds_;
  std::shared_ptr<void> arena_;
  size_t capacity_ = 0;
  size_t chunk_ = 0;

  std::mutex mu_;
  std::condition_variable room_;                // readers wait for arena space
  std::condition_variable ready_;               // the consumer waits for a range
  size_t next_ = 0;                             // first range not fully handed to readers
  size_t taken_ = 0;                            // ranges before this one are taken
  size_t released_ = 0;                         // ranges before this one are released
  std::deque<std::pair<size_t, size_t>> held_;  // [start, end) of placed, unreleased ranges, in order
  size_t cursor_ = 0;                           // end of the last placed range
  bool stop_ = false;
  std::string error_;
  std::vector<std::thread> threads_;
};

// Reads every byte of `files` with `threads` threads in `chunk_bytes` pieces and discards it: the
// plain parallel read `tessera bench load` compares the loader with. Returns the bytes read.
uint64_t read_files_in_parallel(const std::vector<std::filesystem::path>& files, int threads,
                                size_t chunk_bytes = size_t{16} << 20);

// Writes `file`'s dirty pages back (fdatasync), then asks the kernel to drop its pages from the page
// cache (posix_fadvise DONTNEED), so the next read comes from storage; returns false where it cannot.
bool drop_from_page_cache(const std::filesystem::path& file);
// Drops every clean page of the page cache (/proc/sys/vm/drop_caches, root only); false where it
// cannot. More certain than drop_from_page_cache on virtual disks and overlay filesystems.
bool drop_whole_page_cache();

}  // namespace tessera::io
